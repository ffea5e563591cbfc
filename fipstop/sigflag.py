"""A stop flag that a signal handler may set.

Why not ``threading.Event``: ``Event.set()`` takes the event's lock, and a
Python signal handler runs in the main thread between two bytecodes - also
between the bytecodes of an ``Event.wait()`` that holds that very lock.  The
handler then waits for a lock its own thread holds: the process ignores
SIGTERM for ever.  `fipstop ips` did exactly that once under load in CI.
Setting an attribute takes no lock; the loops poll it.
"""

from __future__ import annotations

import time


class SignalFlag:
    """``set`` is safe in a signal handler (``signal.signal(SIGTERM, flag.set)``)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self, *_: object) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float, step: float = 0.02) -> bool:
        """Sleep up to ``timeout`` s in steps of ``step``; True once set."""
        end = time.monotonic() + timeout
        while not self._set:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, step))
        return True
