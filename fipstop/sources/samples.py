"""A source that plays a fixed list of raw samples: tests, screenshots, benchmarks.

Each sample is derived from the one before by the source's own
:class:`fipstop.model.snapshot.ModelStep`, exactly as a live or replayed
frame is.  ``poll()`` returns None after the last one (``loop=True`` starts
over, with a fresh baseline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fipstop.model.raw import RawFrame
from fipstop.model.rings import STALE_AFTER_NS
from fipstop.model.snapshot import Frame, ModelStep
from fipstop.probes.ring import RawSample, TapResult
from fipstop.profile.session import ProfileOptions, ProfileReport

__all__ = ["FixtureProfiling", "SampleListSource"]


class FixtureProfiling:
    """Profiling that hands out fixed reports: per pid, one report per poll
    in turn (the last one repeats)."""

    def __init__(self, reports: Mapping[int, Sequence[ProfileReport]]) -> None:
        self.reports = {int(k): list(v) for k, v in reports.items()}
        #: per pid being profiled, the index of the report its next poll hands out
        self.next_report: dict[int, int] = {}

    def profile_start(self, pid: int, options: ProfileOptions | None = None) -> None:
        self.next_report[int(pid)] = 0

    def profile_poll(self, pid: int) -> ProfileReport | None:
        pid = int(pid)
        reports = self.reports.get(pid)
        if pid not in self.next_report or not reports:
            return None
        i = self.next_report[pid]
        self.next_report[pid] = i + 1
        return reports[min(i, len(reports) - 1)]

    def profile_stop(self, pid: int) -> None:
        self.next_report.pop(int(pid), None)

    def profile_phase(self, pid: int) -> str:
        return ""  # starts at once


class SampleListSource:
    """Implements :class:`fipstop.sources.protocol.Source` on fixed samples.

    ``aux`` holds, per sample, the other probes' raw samples (the frame's
    ``aux``); ``taps`` maps (domain, ring) to what ``tap`` returns;
    ``profiles`` gives the reports its profiling hands out."""

    def __init__(self, samples: Sequence[RawSample], interval_s: float = 1.0, *,
                 taps: dict[tuple[str, int], TapResult] | None = None, loop: bool = False,
                 stale_after_ns: int = STALE_AFTER_NS,
                 aux: Sequence[Mapping[str, Any]] | None = None,
                 profiles: Mapping[int, Sequence[ProfileReport]] | None = None) -> None:
        auxes = list(aux) if aux is not None else [{} for _ in samples]
        if len(auxes) != len(samples):
            raise ValueError("SampleListSource: aux must have one mapping per sample")
        self.raw = [RawFrame(s, dict(a)) for s, a in zip(samples, auxes)]
        self.interval_s = float(interval_s)
        self.taps = dict(taps or {})
        self.loop = loop
        self.stale_after_ns = stale_after_ns
        self.profiling = FixtureProfiling(profiles or {})
        self._step = ModelStep(self.interval_s, stale_after_ns=stale_after_ns)
        self._i = 0
        self.polls = 0

    def poll(self) -> Frame | None:
        if self._i >= len(self.raw):
            if not self.loop or not self.raw:
                return None
            self._i = 0
            self._step.reset()
        raw = self.raw[self._i]
        self._i += 1
        self.polls += 1
        return self._step(raw)

    def frames(self) -> list[Frame]:
        """All frames at once (does not move the poll position)."""
        step = ModelStep(self.interval_s, stale_after_ns=self.stale_after_ns)
        return [step(raw) for raw in self.raw]

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        res = self.taps.get((domain, int(ring)))
        if res is None:
            return TapResult(domain, ring)
        return TapResult(res.domain, res.ring, res.records[-max_records:], res.lapped, res.error)

    def close(self) -> None:
        pass
