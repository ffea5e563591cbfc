"""fipstop.model: from raw samples to what every output shows, pure.

No clock and no I/O: a live session and the replay of its recording derive
the same numbers, and tests need no machine.
"""
