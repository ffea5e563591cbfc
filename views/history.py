"""History: the last snapshots the dashboard received, for charts,
sparklines and stepping while paused (pure; no textual).

Frames are numbered from 1 as they arrive; the oldest are dropped when the
count passes ``max_frames`` or their memory passes ``max_bytes`` (with 1024
rings a snapshot is a few hundred KiB).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from fipstop.model.rings import Totals
from fipstop.model.snapshot import Snapshot


def _nbytes(s: Snapshot) -> int:
    return int(s.rings.nbytes + s.consumers.nbytes + s.positions.nbytes) + 2048


class History:
    def __init__(self, max_frames: int = 600, max_bytes: int = 64 << 20) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._frames: deque[Snapshot] = deque()
        self._bytes = 0
        self._first = 1  # number of self._frames[0]

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def oldest(self) -> int:
        return self._first

    @property
    def newest(self) -> int:
        """Number of the newest frame (0 when empty)."""
        return self._first + len(self._frames) - 1

    def append(self, snap: Snapshot) -> int:
        self._frames.append(snap)
        self._bytes += _nbytes(snap)
        while len(self._frames) > 1 and (len(self._frames) > self.max_frames or self._bytes > self.max_bytes):
            self._bytes -= _nbytes(self._frames.popleft())
            self._first += 1
        return self.newest

    def clear(self) -> None:
        """Forget every frame (a replay's seek); numbering goes on."""
        self._first = self.newest + 1
        self._frames.clear()
        self._bytes = 0

    def clamp(self, no: int) -> int:
        return min(max(no, self.oldest), self.newest)

    def get(self, no: int) -> Snapshot | None:
        if not self._frames or not (self.oldest <= no <= self.newest):
            return None
        return self._frames[no - self._first]

    def window(self, upto: int, n: int) -> list[Snapshot]:
        """Up to ``n`` snapshots ending with frame ``upto`` (oldest first)."""
        if not self._frames:
            return []
        upto = self.clamp(upto)
        lo = max(upto - n + 1, self.oldest)
        return [self._frames[i - self._first] for i in range(lo, upto + 1)]

    # -- series (NaN where the row did not exist) -----------------------------------

    @staticmethod
    def seconds_ago(frames: list[Snapshot]) -> list[float]:
        if not frames:
            return []
        t_end = frames[-1].taken_mono_ns
        return [(f.taken_mono_ns - t_end) / 1e9 for f in frames]

    @staticmethod
    def ring_series(frames: list[Snapshot], domain: str, ring: int, field: str) -> np.ndarray:
        out = np.full(len(frames), np.nan)
        for i, f in enumerate(frames):
            row = f.ring_row(domain, ring)
            if row is not None and (f.rings["rates_valid"][row] or not field.endswith("_per_s")):
                out[i] = float(f.rings[field][row])
        return out

    @staticmethod
    def consumer_series(frames: list[Snapshot], domain: str, consumer: int, field: str) -> np.ndarray:
        out = np.full(len(frames), np.nan)
        for i, f in enumerate(frames):
            row = f.consumer_row(domain, consumer)
            if row is not None and (f.consumers["rates_valid"][row] or not field.endswith("_per_s")):
                out[i] = float(f.consumers[field][row])
        return out

    @staticmethod
    def position_series(frames: list[Snapshot], domain: str, consumer: int, ring: int, field: str) -> np.ndarray:
        out = np.full(len(frames), np.nan)
        for i, f in enumerate(frames):
            p = f.positions_of_consumer(domain, consumer)
            hit = p[p["ring"] == ring]
            if hit.size:
                out[i] = float(hit[field][0])
        return out

    @staticmethod
    def totals_series(frames: list[Snapshot], value: Callable[[Totals], float], *, rate: bool = True) -> np.ndarray:
        """``value`` of each frame's totals; a ``rate`` is NaN in a frame without a baseline."""
        return np.array([float(value(f.totals)) if (f.dt_s > 0 or not rate) else np.nan for f in frames])
