"""fipstop.recording: recording raw frames to a file, replaying and exporting them.

A recording stores raw samples, never derived numbers; replay and export
re-derive them with the live code.
"""
