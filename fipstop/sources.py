"""Sources: where the views get their frames from.

A :class:`Source` yields :class:`Frame` objects (a raw sample and the
:class:`fipstop.model.Snapshot` derived from it and the one before) and can
tap the newest records of a ring.  The views cannot tell a live host from a
recording: :class:`LiveSource` samples probes now, a ``ReplaySource`` (later)
reads a recording and re-derives; :class:`SampleListSource` plays a fixed
list of raw samples (tests, screenshots, benchmarks).

``poll()`` blocks (it reads shared memory): the dashboard calls it from a
worker thread, never from the UI thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fipstop.errors import exc_line
from fipstop.model import STALE_AFTER_NS, Snapshot, derive
from fipstop.probes.ring import RawSample, TapResult

__all__ = ["Frame", "LiveSource", "Probe", "ProbeFailure", "SampleListSource", "Source"]


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    """Stands in ``Frame.aux`` for a probe whose sample raised (one line)."""

    probe: str
    reason: str
    taken_mono_ns: int = 0


@dataclass(frozen=True, eq=False)
class Frame:
    """One poll: the ring sample, its derived snapshot, and the raw samples of
    the other probes (backends, bans, ...) keyed by probe name in ``aux``
    (a :class:`ProbeFailure` where a probe failed).  Raw, so that a recording
    of frames replays through the same code."""

    raw: RawSample
    snapshot: Snapshot
    aux: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Probe(Protocol):
    name: str

    def available(self) -> tuple[bool, str]: ...

    def sample(self) -> RawSample: ...


@runtime_checkable
class Source(Protocol):
    """What the dashboard reads from.

    Sources that can profile a process also have ``profile_start(pid,
    options)``, ``profile_poll(pid) -> ProfileReport | None`` and
    ``profile_stop(pid)`` (blocking: the app calls them from workers)."""

    #: seconds between polls the dashboard should aim for
    interval_s: float

    def poll(self) -> Frame | None:
        """The next frame (blocking), or None when the source has no more."""

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        """The newest records of one ring (payloads raw: escape them)."""

    def close(self) -> None: ...


class LiveSource:
    """Samples the given probes every time it is polled.

    The ring probe's sample feeds ``derive``; other probes (later issues) are
    sampled alongside.  ``available()`` of each probe is kept in
    ``self.unavailable`` (name -> reason) for the views to mention.
    """

    def __init__(self, probes: Sequence[Probe], interval_s: float = 1.0, *,
                 stale_after_ns: int = STALE_AFTER_NS) -> None:
        if not probes:
            raise ValueError("LiveSource needs at least one probe")
        ring = [p for p in probes if getattr(p, "name", "") == "ring"]
        if not ring:
            raise ValueError("LiveSource needs the ring probe")
        self.probes = tuple(probes)
        self._ring = ring[0]
        self.interval_s = float(interval_s)
        self.stale_after_ns = stale_after_ns
        self._prev: RawSample | None = None
        self._lock = threading.Lock()
        #: profile sessions by pid (``profile_start``); a lock of their own so a
        #: profile poll never waits for a ring poll
        self._profiles: dict[int, Any] = {}
        self._profile_lock = threading.Lock()

    def poll(self) -> Frame:
        with self._lock:
            cur = self._ring.sample()
            prev = self._prev
            snap = derive(prev, cur, self.interval_s, stale_after_ns=self.stale_after_ns)
            self._prev = cur
            aux: dict[str, Any] = {}
            for p in self.probes:
                if p is self._ring:
                    continue
                try:
                    aux[p.name] = p.sample()
                except Exception as e:  # a probe degrades; the frame still comes
                    aux[p.name] = ProbeFailure(p.name, exc_line(e, 300),
                                               time.monotonic_ns())
            return Frame(cur, snap, aux)

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        tap = getattr(self._ring, "tap", None)
        if tap is None:
            return TapResult(domain, ring, error="this source cannot tap records")
        return tap(domain, ring, max_records)

    # -- profiles of one process (the Profile screen); blocking: call from a worker --

    def profile_start(self, pid: int, options: Any = None) -> None:
        """Start profiling ``pid`` (a ``fipstop.profile.session.ProfileOptions``
        or None for the defaults); may take seconds (bcc compiles)."""
        from fipstop.profile.session import ProfileSession

        self.profile_stop(pid)
        session = ProfileSession(int(pid), options)
        session.start()
        with self._profile_lock:
            self._profiles[int(pid)] = session

    def profile_poll(self, pid: int) -> Any:
        """The ``ProfileReport`` of ``pid`` since its previous poll, or None
        when it is not being profiled."""
        with self._profile_lock:
            session = self._profiles.get(int(pid))
        return session.poll() if session is not None else None

    def profile_stop(self, pid: int) -> None:
        with self._profile_lock:
            session = self._profiles.pop(int(pid), None)
        if session is not None:
            session.close()

    def close(self) -> None:
        for pid in list(self._profiles):
            self.profile_stop(pid)
        for p in self.probes:
            close = getattr(p, "close", None)
            if close is not None:
                close()


class SampleListSource:
    """Plays a fixed list of raw samples, deriving each from the one before.

    ``poll()`` returns None after the last one (``loop=True`` starts over,
    with a fresh baseline).  ``taps`` maps (domain, ring) to the TapResult
    that ``tap`` returns.
    """

    def __init__(self, samples: Sequence[RawSample], interval_s: float = 1.0, *,
                 taps: dict[tuple[str, int], TapResult] | None = None, loop: bool = False,
                 stale_after_ns: int = STALE_AFTER_NS,
                 aux: Sequence[Mapping[str, Any]] | None = None,
                 profiles: Mapping[int, Sequence[Any]] | None = None) -> None:
        self.samples = list(samples)
        #: per pid, the ProfileReports ``profile_poll`` returns in turn (the last one repeats)
        self.profiles = {int(k): list(v) for k, v in (profiles or {}).items()}
        self._profiling: dict[int, int] = {}
        #: per sample, the other probes' raw samples (``Frame.aux``)
        self.aux = list(aux) if aux is not None else [{} for _ in self.samples]
        if len(self.aux) != len(self.samples):
            raise ValueError("SampleListSource: aux must have one mapping per sample")
        self.interval_s = float(interval_s)
        self.taps = dict(taps or {})
        self.loop = loop
        self.stale_after_ns = stale_after_ns
        self._i = 0
        self._prev: RawSample | None = None
        self.polls = 0

    def poll(self) -> Frame | None:
        if self._i >= len(self.samples):
            if not self.loop or not self.samples:
                return None
            self._i = 0
            self._prev = None
        cur, aux = self.samples[self._i], self.aux[self._i]
        self._i += 1
        self.polls += 1
        snap = derive(self._prev, cur, self.interval_s, stale_after_ns=self.stale_after_ns)
        self._prev = cur
        return Frame(cur, snap, dict(aux))

    def frames(self) -> list[Frame]:
        """All frames at once (does not move the poll position)."""
        out, prev = [], None
        for cur, aux in zip(self.samples, self.aux):
            out.append(Frame(cur, derive(prev, cur, self.interval_s, stale_after_ns=self.stale_after_ns), dict(aux)))
            prev = cur
        return out

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        res = self.taps.get((domain, int(ring)))
        if res is None:
            return TapResult(domain, ring)
        return TapResult(res.domain, res.ring, res.records[-max_records:], res.lapped, res.error)

    def profile_start(self, pid: int, options: Any = None) -> None:
        self._profiling[int(pid)] = 0

    def profile_poll(self, pid: int) -> Any:
        pid = int(pid)
        reports = self.profiles.get(pid)
        if pid not in self._profiling or not reports:
            return None
        i = self._profiling[pid]
        self._profiling[pid] = i + 1
        return reports[min(i, len(reports) - 1)]

    def profile_stop(self, pid: int) -> None:
        self._profiling.pop(int(pid), None)

    def close(self) -> None:
        pass
