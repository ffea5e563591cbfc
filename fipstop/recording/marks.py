"""The marks of a recording's timeline: where drops, bans and findings happened.

Each recorded frame carries a bit set (the ``marks`` column of the file), so
the replay can draw them on its timeline and jump between them without
decoding a frame.  A frame is marked when records were dropped, when a ban
source reported new events, and when the diagnosis of the last few frames
has a warning or worse.
"""

from __future__ import annotations

from collections import deque

from fipstop.analysis.diagnose import diagnose
from fipstop.analysis.findings import WARNING
from fipstop.model.snapshot import Frame, Snapshot

__all__ = ["MARK_BANS", "MARK_DROPS", "MARK_FINDINGS", "Marker"]

MARK_DROPS, MARK_BANS, MARK_FINDINGS = 1, 2, 4


class Marker:
    """The marks of each frame in turn; findings need a window of frames,
    so the marker keeps the last ``window`` snapshots."""

    def __init__(self, window: int = 10) -> None:
        self.window: deque[Snapshot] = deque(maxlen=window)

    def __call__(self, frame: Frame) -> int:
        snap = frame.snapshot
        m = 0
        if snap.totals.drops_per_s > 0:
            m |= MARK_DROPS
        if snap.bans is not None and snap.bans.new_events:
            m |= MARK_BANS
        self.window.append(snap)
        try:
            if any(f.severity >= WARNING for f in diagnose(list(self.window))):
                m |= MARK_FINDINGS
        except Exception:  # a mark is decoration: never lose a recorded frame for it
            pass
        return m
