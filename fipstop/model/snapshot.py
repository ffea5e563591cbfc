"""The one model step: ``derive(prev, cur) -> Snapshot`` for a whole frame.

A frame's raw samples (:class:`fipstop.model.raw.RawFrame`: the ring sample
and the other probes') become one :class:`Snapshot`: rings, consumers and
positions (:mod:`fipstop.model.rings`), the other backends
(:mod:`fipstop.model.backends`), the CPU of the processes on both ends
(:mod:`fipstop.model.cpu`), the bans (:mod:`fipstop.model.bans`) and the
FIPS paper's prototype rings (:mod:`fipstop.model.fipsipc`).
Views, check, diagnose, snapshot, export and serve read it and derive
nothing themselves, so every screen shows the same numbers live and
replayed.

Everything but the bans needs only the frame before; the bans are a fold
over every frame since the stream started (ban samples carry new events
only).  :func:`derive` is pure and takes the fold so far; a
:class:`ModelStep` - one per source - keeps the frame before and the fold,
and a replay's seek resets it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from fipstop.model.backends import BackendsView, derive_backends
from fipstop.model.bans import BanStats, derive_bans
from fipstop.model.cpu import CpuView, derive_cpu
from fipstop.model.fipsipc import FipsIpcView, derive_fipsipc
from fipstop.model.raw import ProbeFailure, RawFrame
from fipstop.model.rings import STALE_AFTER_NS, DomainInfo, Totals, derive_rings
from fipstop.probes import names
from fipstop.probes.backends import BackendsSample
from fipstop.probes.bans import BansSample
from fipstop.probes.fipsipc import FipsIpcSample
from fipstop.probes.proccpu import ProcCpuSample
from fipstop.probes.ring import DomainError

__all__ = ["Frame", "ModelStep", "Snapshot", "derive"]


@dataclass(frozen=True, eq=False)
class Snapshot:
    """What every view and output reads: one derived moment of the host.

    Rings, consumers and positions (numpy structured arrays, see
    :mod:`fipstop.model.rings`), the other backends, the CPU of the processes
    on both ends and the ban activity: nothing above the model derives."""

    host: str
    shm_dir: str
    taken_mono_ns: int
    taken_realtime_ns: int
    dt_s: float  # 0 for the first snapshot (no rates yet)
    domains: tuple[DomainInfo, ...]
    errors: tuple[DomainError, ...]
    unavailable: str
    rings: np.ndarray  # RING_DTYPE, sorted by (domain, ring)
    consumers: np.ndarray  # CONSUMER_DTYPE, sorted by (domain, consumer)
    positions: np.ndarray  # POSITION_DTYPE, (domain, consumer, ring) for ACTIVE consumers x rings in use
    totals: Totals
    stale_after_ns: int = STALE_AFTER_NS
    #: the other logging backends (None: not sampled in this frame; a
    #: ProbeFailure: the probe failed, with the reason)
    backends: BackendsView | ProbeFailure | None = None
    #: CPU of the processes on both ends of the rings (None: not sampled)
    cpu: CpuView | None = None
    #: ban activity folded up to this frame (None: no ban source at all)
    bans: BanStats | None = None
    #: the FIPS paper's prototype rings (System V segments; None: not sampled,
    #: a ProbeFailure: the probe failed)
    fipsipc: FipsIpcView | ProbeFailure | None = None
    #: domains read with a warning (a world-writable file: another user can inject records)
    warnings: tuple[DomainError, ...] = ()

    # -- lookups (views use these; keys survive sorting and history) ----------

    def domain_name(self, index: int) -> str:
        return self.domains[int(index)].name

    @cached_property
    def _ring_rows(self) -> dict[tuple[str, int], int]:
        names = [d.name for d in self.domains]
        return {(names[int(d)], int(r)): i for i, (d, r) in enumerate(zip(self.rings["domain"], self.rings["ring"]))}

    @cached_property
    def _consumer_rows(self) -> dict[tuple[str, int], int]:
        names = [d.name for d in self.domains]
        return {
            (names[int(d)], int(c)): i
            for i, (d, c) in enumerate(zip(self.consumers["domain"], self.consumers["consumer"]))
        }

    def ring_row(self, domain: str, ring: int) -> int | None:
        """Row of ``self.rings`` for (domain name, ring slot), or None."""
        return self._ring_rows.get((domain, int(ring)))

    def consumer_row(self, domain: str, consumer: int) -> int | None:
        return self._consumer_rows.get((domain, int(consumer)))

    def ring_key(self, row: int) -> tuple[str, int]:
        r = self.rings[row]
        return self.domain_name(r["domain"]), int(r["ring"])

    def consumer_key(self, row: int) -> tuple[str, int]:
        c = self.consumers[row]
        return self.domain_name(c["domain"]), int(c["consumer"])

    def positions_of_ring(self, domain: str, ring: int) -> np.ndarray:
        di = self._domain_index(domain)
        if di is None:
            return self.positions[:0]
        p = self.positions
        return p[(p["domain"] == di) & (p["ring"] == ring)]

    def positions_of_consumer(self, domain: str, consumer: int) -> np.ndarray:
        di = self._domain_index(domain)
        if di is None:
            return self.positions[:0]
        p = self.positions
        return p[(p["domain"] == di) & (p["consumer"] == consumer)]

    def _domain_index(self, name: str) -> int | None:
        for i, d in enumerate(self.domains):
            if d.name == name:
                return i
        return None


@dataclass(frozen=True, eq=False)
class Frame:
    """One poll as a source delivers it: the raw samples (what a recording
    stores) and the snapshot derived from them."""

    raw: RawFrame
    snapshot: Snapshot


def _backends(prev: RawFrame | None, cur: RawFrame) -> BackendsView | ProbeFailure | None:
    failed = cur.failure(names.BACKENDS)
    if failed is not None:
        return failed
    sample = cur.sample(names.BACKENDS, BackendsSample)
    if sample is None:
        return None
    return derive_backends(prev.sample(names.BACKENDS, BackendsSample) if prev is not None else None, sample)


def _cpu(prev: RawFrame | None, cur: RawFrame) -> CpuView | None:
    sample = cur.sample(names.CPU, ProcCpuSample)
    if sample is None:
        return None
    return derive_cpu(prev.sample(names.CPU, ProcCpuSample) if prev is not None else None, sample)


def _fipsipc(prev: RawFrame | None, cur: RawFrame) -> FipsIpcView | ProbeFailure | None:
    failed = cur.failure(names.FIPSIPC)
    if failed is not None:
        return failed
    sample = cur.sample(names.FIPSIPC, FipsIpcSample)
    if sample is None:
        return None
    return derive_fipsipc(prev.sample(names.FIPSIPC, FipsIpcSample) if prev is not None else None, sample)


def _bans(before: BanStats | None, cur: RawFrame) -> BanStats | None:
    samples: list[BansSample | ProbeFailure] = []
    for probe in names.BAN_SOURCES:
        s = cur.sample(probe, BansSample) or cur.failure(probe)
        if s is not None:
            samples.append(s)
    if not samples and before is None:
        return None  # no ban source on this host (yet)
    return derive_bans(before, samples)


def derive(prev: RawFrame | None, cur: RawFrame, *, bans_before: BanStats | None = None, interval_s: float = 1.0,
           stale_after_ns: int = STALE_AFTER_NS) -> Snapshot:
    """The snapshot of ``cur``.  Rates need ``prev``, the frame before (about
    ``interval_s`` earlier: the time base when the clocks cannot give one);
    the bans fold ``cur``'s ban events into ``bans_before``, the fold up to
    ``prev``.  Pure: the same inputs give the same output.  The snapshot's
    ``bans`` keep the fold's carried state: :class:`ModelStep` strips it from
    what it hands on."""
    ring = cur.ring
    part = derive_rings(prev.ring if prev is not None else None, ring, interval_s, stale_after_ns=stale_after_ns)
    return Snapshot(
        host=ring.host,
        shm_dir=ring.shm_dir,
        taken_mono_ns=int(ring.taken_mono_ns),
        taken_realtime_ns=int(ring.taken_realtime_ns),
        dt_s=part.dt_s,
        domains=part.domains,
        errors=tuple(ring.errors),
        unavailable=ring.unavailable,
        warnings=tuple(ring.warnings),
        rings=part.rings,
        consumers=part.consumers,
        positions=part.positions,
        totals=part.totals,
        stale_after_ns=stale_after_ns,
        backends=_backends(prev, cur),
        cpu=_cpu(prev, cur),
        bans=_bans(bans_before, cur),
        fipsipc=_fipsipc(prev, cur),
    )


class ModelStep:
    """Derives a stream of frames: keeps the frame before and the ban fold.

    Every source owns one, so live, replayed and fixture frames go through
    the very same step; :meth:`reset` starts anew (a replay's seek: bans
    before the new position are then not counted)."""

    def __init__(self, interval_s: float = 1.0, *, stale_after_ns: int = STALE_AFTER_NS) -> None:
        self.interval_s = float(interval_s)
        self.stale_after_ns = stale_after_ns
        self._prev: RawFrame | None = None
        self._bans: BanStats | None = None

    def __call__(self, raw: RawFrame) -> Frame:
        snap = derive(self._prev, raw, bans_before=self._bans, interval_s=self.interval_s,
                      stale_after_ns=self.stale_after_ns)
        self._prev = raw
        self._bans = snap.bans
        if snap.bans is not None and snap.bans.active_keys:
            snap = replace(snap, bans=snap.bans.shown())
        return Frame(raw, snap)

    def reset(self) -> None:
        self._prev = None
        self._bans = None
