"""The live source: samples a probe set every time it is polled.

The ring probe's sample and the other probes' (CPU, backends, bans) make one
raw frame, derived by the source's own :class:`fipstop.model.snapshot.
ModelStep`.  A probe that raises degrades to a
:class:`fipstop.model.raw.ProbeFailure` in the frame; the frame still comes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fipstop.errors import exc_line
from fipstop.model.raw import ProbeFailure, RawFrame
from fipstop.model.rings import STALE_AFTER_NS
from fipstop.model.snapshot import Frame, ModelStep
from fipstop.probes import names
from fipstop.probes.fipsipc import FipsIpcProbe, IpcTap
from fipstop.probes.ring import TapResult
from fipstop.profile.child import ChildProfiling
from fipstop.sources.probeset import ProbeSet

__all__ = ["LiveSource", "poll_window"]


class LiveSource:
    """Implements :class:`fipstop.sources.protocol.Source` on this host's probes."""

    def __init__(self, probes: ProbeSet, interval_s: float = 1.0, *,
                 stale_after_ns: int = STALE_AFTER_NS) -> None:
        self.probes = probes
        self.interval_s = float(interval_s)
        self._step = ModelStep(self.interval_s, stale_after_ns=stale_after_ns)
        self._lock = threading.Lock()
        self.profiling = ChildProfiling()  # bcc and LLVM live (and die) in a child process

    def sample(self) -> RawFrame:
        """One raw frame: the ring probe, then every other probe."""
        ring = self.probes.ring.sample()
        aux: dict[str, Any] = {}
        for p in self.probes.others:
            try:
                aux[p.name] = p.sample()
            except Exception as e:  # a probe degrades; the frame still comes
                aux[p.name] = ProbeFailure(p.name, exc_line(e, 300), time.monotonic_ns())
        return RawFrame(ring, aux)

    def poll(self) -> Frame:
        with self._lock:
            return self._step(self.sample())

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        return self.probes.ring.tap(domain, ring, max_records)

    def fipsipc_tap(self, shmid: int, ring: int, max_records: int = 32) -> IpcTap:
        """The newest records of a prototype ring, through this source's FIPS-IPC probe (``--fipsipc``)."""
        probe = next((p for p in self.probes.others if p.name == names.FIPSIPC), None)
        if not isinstance(probe, FipsIpcProbe):
            return IpcTap(shmid, ring, error="FIPS-IPC is not watched (start with --fipsipc)")
        return probe.tap(shmid, ring, max_records)

    def close(self) -> None:
        self.profiling.close()
        self.probes.close()


def poll_window(source: LiveSource, window_s: float) -> tuple[Frame | None, Frame]:
    """Two frames ``window_s`` apart (the second derived against the first,
    so it has rates), or one frame and None when ``window_s`` is 0: what the
    one-shot commands (check, snapshot --backends) report on."""
    first = source.poll()
    if window_s <= 0:
        return None, first
    time.sleep(window_s)
    return first, source.poll()
