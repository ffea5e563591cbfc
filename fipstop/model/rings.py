"""The ring part of the model: rings, consumers and positions of every domain.

:func:`derive_rings` is pure: no clock, no I/O.  Every rate comes from the difference of
two raw cumulative counters divided by the time between the two samples, so a
live session and the replay of its recording give the same numbers, and tests
need no clock.

Rates
    per ring: records/s, bytes/s, drops/s (records dropped because the ring
    was full) and dropped bytes/s; per consumer: records released/s; per
    (consumer, ring): released/s.  The time base is the difference of the two
    samples' ``taken_mono_ns`` for that domain (``dt`` when it is unusable).
    A rate needs a baseline: the same domain (same name and creation time), a
    slot that was in use with the same ``generation``, and counters that did
    not go backwards.  Otherwise the baseline is reset: the rate is 0 and
    ``rates_valid`` is False for that row (never a negative rate).

Lag
    per (consumer, ring): records ``records_committed - released_seq``, bytes
    ``head - released``, seconds = the age of the oldest record the consumer
    has not released (the snapshot's realtime - the timestamp of the record
    at ``released``, which the ring probe reads; 0 when there is no lag, NaN
    - unknown - when that record's time is not known), as Kafka's time lag
    and Burrow report it.  ``drain_s`` is a separate estimate: records lag /
    the consumer's release rate on that ring (NaN when it released nothing).
    Per ring: the slowest ACTIVE consumer.  Per consumer: max and mean over
    the rings in use.

Consumer health
    ``alive`` (ACTIVE with a heartbeat younger than ``stale_after_ns``),
    ``stale`` (ACTIVE, older heartbeat, not evicted yet), ``evicted``,
    ``closed``, ``joining``.

:func:`fipstop.model.snapshot.derive` calls it for the ring sample of a frame
and adds the other probes' parts (backends, CPU, bans).  Everything is held
in frozen dataclasses and numpy structured arrays whose field names carry
units (``_per_s``, ``_bytes``, ``_ns``, ``_s``, ``_pct``).
Names (thread, consumer) stay raw bytes here: views escape them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fipstop.probes.ring import RawSample
from fipstop.ring import OLDEST_TS_FIELD, ConsumerState, DomainSnapshot, RingState

__all__ = [
    "CONSUMER_DTYPE",
    "POSITION_DTYPE",
    "RING_DTYPE",
    "STALE_AFTER_NS",
    "DomainInfo",
    "Health",
    "RingsPart",
    "Totals",
    "derive_rings",
]

#: A consumer whose heartbeat is older than this is shown as stale.
STALE_AFTER_NS = 2_000_000_000



class Health(enum.IntEnum):
    """What the consumers table shows as a consumer's state."""

    ALIVE = 0
    STALE = 1
    EVICTED = 2
    CLOSED = 3
    JOINING = 4

    @property
    def label(self) -> str:
        return self.name.lower()


RING_DTYPE = np.dtype(
    [
        ("domain", "<u2"),  # index into Snapshot.domains
        ("ring", "<u4"),  # slot index in the domain
        ("state", "u1"),  # fipstop.ring.RingState
        ("generation", "<u4"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("thread_name", "S32"),  # raw, attacker-controlled: escape before showing
        ("capacity_bytes", "<u8"),
        ("head_bytes", "<u8"),  # committed end position
        ("floor_bytes", "<u8"),  # effective floor (oldest position still needed)
        ("used_bytes", "<u8"),
        ("fill_pct", "<f8"),
        ("high_water_pct", "<f8"),  # max(high_water, current fill)
        ("claimed_bytes", "<u8"),  # reserved - head: claimed, not committed yet
        ("records_committed", "<u8"),
        ("bytes_committed", "<u8"),
        ("records_dropped", "<u8"),
        ("bytes_dropped", "<u8"),
        ("full_events", "<u8"),
        ("records_per_s", "<f8"),
        ("bytes_per_s", "<f8"),
        ("drops_per_s", "<f8"),
        ("drop_bytes_per_s", "<f8"),
        ("rates_valid", "?"),
        ("slowest_consumer", "<i4"),  # consumer slot, -1 if no active consumer
        ("slowest_lag_records", "<i8"),  # -1 if no active consumer
        ("slowest_lag_s", "<f8"),  # NaN if unknown
        ("last_commit_age_ns", "<i8"),  # -1 if never committed
        ("created_realtime_ns", "<u8"),
        ("closed_realtime_ns", "<u8"),
    ]
)

CONSUMER_DTYPE = np.dtype(
    [
        ("domain", "<u2"),
        ("consumer", "<u4"),  # slot index
        ("health", "u1"),  # Health
        ("generation", "<u4"),
        ("pid", "<u4"),
        ("readers", "<u4"),
        ("resumes", "<u4"),
        ("name", "S64"),  # raw, attacker-controlled
        ("heartbeat_age_ns", "<i8"),
        ("records_released", "<u8"),
        ("batches_released", "<u8"),
        ("release_per_s", "<f8"),
        ("rates_valid", "?"),
        ("lag_rings", "<u4"),  # rings the lag is taken over (0 unless ACTIVE)
        ("lag_max_records", "<i8"),  # -1 if undefined
        ("lag_mean_records", "<f8"),  # NaN if undefined
        ("lag_max_s", "<f8"),  # age of its oldest unreleased record, NaN if unknown
        ("lag_mean_s", "<f8"),
        ("drain_max_s", "<f8"),  # estimate: the largest ring's lag / its release rate there
        ("lost_seen", "<u8"),  # drops it can prove, all rings
        ("registered_realtime_ns", "<u8"),
        ("evicted_realtime_ns", "<u8"),
        ("evicted_by_ring", "<u4"),
    ]
)

POSITION_DTYPE = np.dtype(
    [
        ("domain", "<u2"),
        ("consumer", "<u4"),
        ("ring", "<u4"),
        ("released_bytes", "<u8"),  # position released up to
        ("released_seq", "<u8"),
        ("records_released", "<u8"),
        ("lost_seen", "<u8"),
        ("lag_records", "<i8"),
        ("lag_bytes", "<i8"),
        ("lag_s", "<f8"),  # age of the oldest unreleased record, NaN if unknown
        ("release_per_s", "<f8"),
        ("drain_s", "<f8"),  # estimate: lag_records / release_per_s, NaN when nothing was released
    ]
)


@dataclass(frozen=True, slots=True)
class DomainInfo:
    name: str
    path: str
    version: int
    max_rings: int
    max_consumers: int
    ring_capacity_bytes: int
    max_record_bytes: int
    creator_pid: int
    grace_ns: int
    created_realtime_ns: int
    uptime_ns: int  # taken_realtime_ns - created_realtime_ns, >= 0
    rings_in_use: int
    consumers_registered: int
    dt_s: float  # time base of this domain's rates, 0 without a baseline
    #: records dropped with no ring to take them (the ring table full), from the header; None: unknown
    #: (a recording made before it was recorded)
    records_no_ring: int | None = None
    #: their rate; None without a baseline that knows the count (or if it went down: a hostile writer)
    no_ring_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class Totals:
    domains: int
    rings: int  # in use (active or closed)
    rings_active: int
    consumers: int  # registered (not FREE)
    consumers_alive: int
    consumers_stale: int
    consumers_evicted: int
    records_per_s: float
    bytes_per_s: float
    drops_per_s: float
    drop_bytes_per_s: float
    records_committed: int
    records_dropped: int  # ring full, summed over the rings
    #: no ring to take them, summed over the domains; None if a domain's count is unknown
    records_no_ring: int | None = None
    no_ring_per_s: float | None = None  # None if a domain's rate is unknown

    @property
    def drops_total(self) -> int | None:
        """Every record dropped: ring full + no ring; None when the no-ring part is unknown."""
        return None if self.records_no_ring is None else self.records_dropped + self.records_no_ring


@dataclass(frozen=True, slots=True)
class RingsPart:
    """The ring sample of one frame, derived: what :class:`fipstop.model.snapshot.Snapshot` carries."""

    dt_s: float  # 0 for the first sample (no rates yet)
    domains: tuple[DomainInfo, ...]
    rings: np.ndarray  # RING_DTYPE, sorted by (domain, ring)
    consumers: np.ndarray  # CONSUMER_DTYPE, sorted by (domain, consumer)
    positions: np.ndarray  # POSITION_DTYPE, (domain, consumer, ring) for ACTIVE consumers x rings in use
    totals: Totals


# ---------------------------------------------------------------------------
# derive
# ---------------------------------------------------------------------------


def _rate(cur: np.ndarray, prev: np.ndarray, valid: np.ndarray, dt_s: float) -> np.ndarray:
    """(cur - prev) / dt where valid (cur >= prev there), else 0."""
    if dt_s <= 0:
        return np.zeros(cur.shape, dtype=np.float64)
    delta = np.where(valid, cur - np.where(valid, prev, cur), 0)  # uint64, never wraps where valid
    return delta.astype(np.float64) / dt_s


def _domain_dt(p: DomainSnapshot | None, d: DomainSnapshot, dt: float) -> float:
    if p is None:
        return 0.0
    dt_s = (int(d.taken_mono_ns) - int(p.taken_mono_ns)) / 1e9
    if not (dt_s > 0 and math.isfinite(dt_s)):
        dt_s = float(dt) if dt and math.isfinite(dt) and dt > 0 else 0.0
    return dt_s


def _same_domain(p: DomainSnapshot, d: DomainSnapshot) -> bool:
    return (
        p.created_realtime_ns == d.created_realtime_ns
        and p.max_rings == d.max_rings
        and p.max_consumers == d.max_consumers
        and p.ring_capacity_bytes == d.ring_capacity_bytes
    )


def _lag_seconds(d: DomainSnapshot, idx: np.ndarray, lag: np.ndarray) -> np.ndarray:
    """Seconds ``[consumer, ring in use]``: the age of the oldest record the
    consumer has not released (the snapshot's time - that record's
    timestamp), 0 with nothing unreleased, NaN (unknown) where the record's
    time is not known (an older recording, a record that could not be read).
    Never a rate estimate: a consumer stopped for 20 s on a ring that writes
    one record a minute is 20 s behind, not 60."""
    names = d.pos.dtype.names or ()
    if OLDEST_TS_FIELD in names:
        ts = d.pos[OLDEST_TS_FIELD][:, idx].astype(np.int64)
        age = np.maximum(np.int64(d.taken_realtime_ns) - ts, 0) / 1e9
        known = ts > 0
    else:
        age = np.zeros(lag.shape)
        known = np.zeros(lag.shape, dtype=bool)
    out = np.where(lag == 0, 0.0, np.where(known, age, np.nan))
    return np.where(lag >= 0, out, np.nan)


def _drain_seconds(lag: np.ndarray, release_per_s: np.ndarray) -> np.ndarray:
    """A drain-time estimate, never called lag: records behind / records
    released per second over the last interval (0 without lag; NaN when the
    consumer released nothing, or there is no rate yet)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(release_per_s > 0, lag / np.where(release_per_s > 0, release_per_s, 1.0), np.nan)
    return np.where(lag == 0, 0.0, np.where(lag > 0, est, np.nan))


def _derive_domain(
    di: int, d: DomainSnapshot, p: DomainSnapshot | None, dt: float, stale_after_ns: int, taken_realtime_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, DomainInfo]:
    if p is not None and not _same_domain(p, d):
        p = None
    # Ages and uptime at the moment this domain's counters were read (libfips stamps its snapshot right before
    # reading), not at the end of the sample: reading many domains (and the records at consumer positions) takes
    # milliseconds under load, and a count paired with a later time reads as too few records by then.
    if int(d.taken_realtime_ns) > 0:
        taken_realtime_ns = int(d.taken_realtime_ns)
    dt_s = _domain_dt(p, d, dt)
    if dt_s <= 0:
        p = None

    R = d.rings
    idx = d.active_ring_indices()
    nr = idx.size
    rings = np.zeros(nr, dtype=RING_DTYPE)
    rings["domain"] = di
    rings["ring"] = idx
    for f in ("state", "generation", "pid", "tid", "thread_name", "records_committed", "bytes_committed",
              "records_dropped", "bytes_dropped", "full_events"):
        rings[f] = R[f][idx]
    cap = int(d.ring_capacity_bytes)
    head = R["head"][idx]
    reserved = R["reserved"][idx]
    rings["capacity_bytes"] = cap
    rings["head_bytes"] = head
    rings["floor_bytes"] = d.effective_floor()[idx]
    rings["used_bytes"] = d.used_bytes()[idx]
    rings["fill_pct"] = d.fill_fraction()[idx] * 100.0
    rings["high_water_pct"] = d.high_water_fraction()[idx] * 100.0
    rings["claimed_bytes"] = np.where(reserved > head, reserved - np.minimum(head, reserved), 0)
    last = R["last_commit_ns"][idx].astype(np.int64)
    rings["last_commit_age_ns"] = np.where(last > 0, np.maximum(np.int64(taken_realtime_ns) - last, 0), -1)
    rings["created_realtime_ns"] = R["created_ns"][idx]
    rings["closed_realtime_ns"] = R["closed_ns"][idx]

    counters = ("records_committed", "bytes_committed", "records_dropped", "bytes_dropped")
    if p is not None:
        PR = p.rings
        valid = (PR["state"][idx] != RingState.FREE) & (PR["generation"][idx] == R["generation"][idx])
        for f in counters:
            valid &= R[f][idx] >= PR[f][idx]
        rings["rates_valid"] = valid
        rings["records_per_s"] = _rate(R["records_committed"][idx], PR["records_committed"][idx], valid, dt_s)
        rings["bytes_per_s"] = _rate(R["bytes_committed"][idx], PR["bytes_committed"][idx], valid, dt_s)
        rings["drops_per_s"] = _rate(R["records_dropped"][idx], PR["records_dropped"][idx], valid, dt_s)
        rings["drop_bytes_per_s"] = _rate(R["bytes_dropped"][idx], PR["bytes_dropped"][idx], valid, dt_s)

    # lag, per (consumer slot, ring in use)
    C = d.consumers
    cstate = C["state"]
    act = np.flatnonzero(cstate == ConsumerState.ACTIVE)
    lag_all = d.lag_records()  # (max_consumers, max_rings), -1 undefined
    lagb_all = d.lag_bytes()
    lag = lag_all[:, idx]  # (max_consumers, nr)
    lag_s = _lag_seconds(d, idx, lag)

    rings["slowest_consumer"] = -1
    rings["slowest_lag_records"] = -1
    rings["slowest_lag_s"] = np.nan
    if act.size and nr:
        la = lag[act]  # (na, nr), all >= 0 (rings in use, active consumers)
        arg = la.argmax(axis=0)
        cols = np.arange(nr)
        rings["slowest_consumer"] = act[arg]
        rings["slowest_lag_records"] = la[arg, cols]
        rings["slowest_lag_s"] = lag_s[act][arg, cols]

    # consumers
    cidx = d.active_consumer_indices()
    nc = cidx.size
    cons = np.zeros(nc, dtype=CONSUMER_DTYPE)
    cons["domain"] = di
    cons["consumer"] = cidx
    for f in ("generation", "pid", "readers", "resumes", "name", "records_released", "batches_released",
              "evicted_by_ring"):
        cons[f] = C[f][cidx]
    cons["registered_realtime_ns"] = C["registered_ns"][cidx]
    cons["evicted_realtime_ns"] = C["evicted_ns"][cidx]
    hb_age = d.heartbeat_age_ns()[cidx]
    cons["heartbeat_age_ns"] = hb_age
    st = cstate[cidx]
    health = np.full(nc, Health.CLOSED, dtype=np.uint8)
    health[st == ConsumerState.JOINING] = Health.JOINING
    health[st == ConsumerState.EVICTED] = Health.EVICTED
    health[(st == ConsumerState.ACTIVE) & (hb_age <= stale_after_ns)] = Health.ALIVE
    health[(st == ConsumerState.ACTIVE) & (hb_age > stale_after_ns)] = Health.STALE
    cons["health"] = health
    if nr:
        pos_lost = d.pos["lost_seen"][cidx][:, idx]
        cons["lost_seen"] = pos_lost.sum(axis=1)
    if p is not None:
        PC = p.consumers
        cvalid = (
            (PC["state"][cidx] != ConsumerState.FREE)
            & (PC["generation"][cidx] == C["generation"][cidx])
            & (C["records_released"][cidx] >= PC["records_released"][cidx])
        )
        cons["rates_valid"] = cvalid
        cons["release_per_s"] = _rate(C["records_released"][cidx], PC["records_released"][cidx], cvalid, dt_s)
    lc = lag[cidx] if nr else np.zeros((nc, 0), dtype=np.int64)
    lcs = lag_s[cidx] if nr else np.zeros((nc, 0))
    defined = lc >= 0
    n_def = defined.sum(axis=1)
    cons["lag_rings"] = n_def
    cons["lag_max_records"] = np.where(n_def > 0, np.where(defined, lc, -1).max(axis=1, initial=-1), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cons["lag_mean_records"] = np.where(n_def > 0, np.where(defined, lc, 0).sum(axis=1) / n_def, np.nan)
        fin = np.isfinite(lcs)
        n_fin = fin.sum(axis=1)
        cons["lag_max_s"] = np.where(n_fin > 0, np.where(fin, lcs, -np.inf).max(axis=1, initial=-np.inf), np.nan)
        cons["lag_mean_s"] = np.where(n_fin > 0, np.where(fin, lcs, 0.0).sum(axis=1) / n_fin, np.nan)

    # positions: ACTIVE consumers x rings in use
    na = act.size
    pos = np.zeros(na * nr, dtype=POSITION_DTYPE)
    if na and nr:
        P = d.pos[np.ix_(act, idx)]  # (na, nr)
        pos["domain"] = di
        pos["consumer"] = np.repeat(act, nr)
        pos["ring"] = np.tile(idx, na)
        pos["released_bytes"] = P["released"].ravel()
        pos["released_seq"] = P["released_seq"].ravel()
        pos["records_released"] = P["records_released"].ravel()
        pos["lost_seen"] = P["lost_seen"].ravel()
        pos["lag_records"] = lag[act].ravel()
        pos["lag_bytes"] = lagb_all[np.ix_(act, idx)].ravel()
        pos["lag_s"] = lag_s[act].ravel()
        if p is not None:
            PP = p.pos[np.ix_(act, idx)]
            pvalid = (
                (p.consumers["state"][act] != ConsumerState.FREE)
                & (p.consumers["generation"][act] == C["generation"][act])
            )[:, np.newaxis] & (P["records_released"] >= PP["records_released"])
            pos["release_per_s"] = _rate(
                P["records_released"], PP["records_released"], pvalid, dt_s
            ).ravel()
            pos["drain_s"] = _drain_seconds(lag[act].ravel(), pos["release_per_s"])
        else:
            pos["drain_s"] = _drain_seconds(lag[act].ravel(), np.zeros(na * nr))

    cons["drain_max_s"] = np.nan
    if na:
        dr = pos["drain_s"].reshape(na, nr) if nr else np.zeros((na, 0))
        worst = np.where(np.isnan(dr).any(axis=1), np.nan, dr.max(axis=1, initial=0.0))
        where = np.searchsorted(cidx, act)
        ok = (where < nc) & (cidx[np.minimum(where, max(nc - 1, 0))] == act) if nc else np.zeros(na, dtype=bool)
        cons["drain_max_s"][where[ok]] = worst[ok]
    info = DomainInfo(
        name=d.name,
        path=d.path,
        version=int(d.version),
        max_rings=int(d.max_rings),
        max_consumers=int(d.max_consumers),
        ring_capacity_bytes=cap,
        max_record_bytes=int(d.max_record_bytes),
        creator_pid=int(d.creator_pid),
        grace_ns=int(d.grace_ns),
        created_realtime_ns=int(d.created_realtime_ns),
        uptime_ns=max(int(taken_realtime_ns) - int(d.created_realtime_ns), 0),
        rings_in_use=int(nr),
        consumers_registered=int(nc),
        dt_s=dt_s,
        records_no_ring=d.records_no_ring,
        no_ring_per_s=_no_ring_rate(p, d, dt_s),
    )
    return rings, cons, pos, info


def _no_ring_rate(p: DomainSnapshot | None, d: DomainSnapshot, dt_s: float) -> float | None:
    """records_no_ring per second since ``p`` (the same domain), None when either count is unknown."""
    if p is None or dt_s <= 0 or d.records_no_ring is None or p.records_no_ring is None:
        return None
    if d.records_no_ring < p.records_no_ring:
        return None
    return (d.records_no_ring - p.records_no_ring) / dt_s


def _sum_known(values: list[int | None] | list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _totals(n_domains: int, rings: np.ndarray, cons: np.ndarray, infos: Sequence[DomainInfo] = ()) -> Totals:
    h = cons["health"]
    no_ring = _sum_known([i.records_no_ring for i in infos])
    return Totals(
        domains=n_domains,
        rings=int(rings.size),
        rings_active=int((rings["state"] == RingState.ACTIVE).sum()),
        consumers=int(cons.size),
        consumers_alive=int((h == Health.ALIVE).sum()),
        consumers_stale=int((h == Health.STALE).sum()),
        consumers_evicted=int((h == Health.EVICTED).sum()),
        records_per_s=float(rings["records_per_s"].sum()),
        bytes_per_s=float(rings["bytes_per_s"].sum()),
        drops_per_s=float(rings["drops_per_s"].sum()),
        drop_bytes_per_s=float(rings["drop_bytes_per_s"].sum()),
        records_committed=int(rings["records_committed"].sum(dtype=np.uint64)),
        records_dropped=int(rings["records_dropped"].sum(dtype=np.uint64)),
        records_no_ring=None if no_ring is None else int(no_ring),
        no_ring_per_s=_sum_known([i.no_ring_per_s for i in infos]),
    )


def derive_rings(
    prev: RawSample | None, cur: RawSample, interval_s: float, *, stale_after_ns: int = STALE_AFTER_NS
) -> RingsPart:
    """Rings, consumers and positions of ``cur``; rates need ``prev`` (the
    sample before, about ``interval_s`` earlier).  Pure: the same inputs give
    the same output."""
    dt = interval_s
    prev_by_name = {d.name: d for d in prev.domains} if prev is not None else {}
    ring_parts: list[np.ndarray] = []
    cons_parts: list[np.ndarray] = []
    pos_parts: list[np.ndarray] = []
    infos: list[DomainInfo] = []
    domains: Sequence[DomainSnapshot] = sorted(cur.domains, key=lambda s: s.name)
    for di, d in enumerate(domains):
        r, c, p, info = _derive_domain(
            di, d, prev_by_name.get(d.name), dt, stale_after_ns, int(cur.taken_realtime_ns)
        )
        ring_parts.append(r)
        cons_parts.append(c)
        pos_parts.append(p)
        infos.append(info)
    rings = np.concatenate(ring_parts) if ring_parts else np.zeros(0, dtype=RING_DTYPE)
    cons = np.concatenate(cons_parts) if cons_parts else np.zeros(0, dtype=CONSUMER_DTYPE)
    pos = np.concatenate(pos_parts) if pos_parts else np.zeros(0, dtype=POSITION_DTYPE)
    for a in (rings, cons, pos):
        a.flags.writeable = False
    dt_s = 0.0
    if prev is not None:
        dt_s = (int(cur.taken_mono_ns) - int(prev.taken_mono_ns)) / 1e9
        if not dt_s > 0:
            dt_s = float(dt) if dt and dt > 0 else 0.0
    return RingsPart(dt_s, tuple(infos), rings, cons, pos, _totals(len(infos), rings, cons, infos))
