"""The ring policy layer: typed, read-only views of libfips domains.

``fipstop._fips`` (the C binding) returns raw material: ``Monitor.snapshot()``
gives bytes holding the C arrays ``fips_ring_stat[max_rings]``,
``fips_consumer_stat[max_consumers]`` and ``fips_pos_stat[max_consumers][max_rings]``.
This module wraps them zero-copy as numpy structured arrays whose dtypes are
built from the field tables the binding exports (``RING_STAT_FIELDS`` ...,
generated with ``offsetof`` in C), so they cannot drift from ``fips.h``.

On top of the arrays, :class:`DomainSnapshot` derives what a monitor shows:
ring fill, per (consumer, ring) lag in records, heartbeat age.  Per-slot
frozen dataclasses (:class:`RingStat`, :class:`ConsumerStat`,
:class:`PosStat`) are there for code that prefers objects to arrays.

Raw counters keep their C names (``head``, ``records_committed`` ...; byte
positions and ``_ns`` times as in docs/ring-format.md); derived values carry
their unit (``used_bytes``, ``fill_fraction``, ``heartbeat_age_ns``,
``lag_records``).

``python -m fipstop.ring --cflags`` / ``--libs`` print the compiler and linker
flags a C program needs to use the libfips that ships with this package
(:mod:`fipstop.buildflags`).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from fipstop.errors import FipsError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from fipstop._fips import Monitor

__all__ = [
    "ConsumerState",
    "ConsumerStat",
    "DomainSnapshot",
    "PosStat",
    "RingState",
    "RingStat",
    "consumer_stat_dtype",
    "domain_path",
    "list_domains",
    "open_monitor",
    "pick_domain",
    "OLDEST_TS_FIELD",
    "oldest_unreleased_ts",
    "pos_dtype",
    "pos_stat_dtype",
    "ring_stat_dtype",
    "snapshot_domain",
    "take_snapshot",
    "truncated_line",
    "is_truncated",
    "others_may_write",
    "valid_domain_name",
]

DEFAULT_SHM_DIR = "/dev/shm"
FILE_PREFIX = "fips."
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,63}")


class RingState(enum.IntEnum):
    """``fips_layout_ring.state``."""

    FREE = 0
    ACTIVE = 1
    CLOSED = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class ConsumerState(enum.IntEnum):
    """``fips_layout_consumer.state``."""

    FREE = 0
    JOINING = 1
    ACTIVE = 2
    EVICTED = 3
    CLOSED = 4

    @property
    def label(self) -> str:
        return self.name.lower()


def _state_label(enum_type: type[enum.IntEnum], value: int) -> str:
    try:
        return enum_type(value).name.lower()
    except ValueError:
        return f"unknown({value})"


# ---------------------------------------------------------------------------
# dtypes, built from the binding's field tables
# ---------------------------------------------------------------------------


def _dtype(fields: Sequence[tuple[str, int, str]], itemsize: int) -> np.dtype:
    import numpy as np

    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[2] for f in fields],
            "offsets": [f[1] for f in fields],
            "itemsize": itemsize,
        }
    )


@cache
def ring_stat_dtype() -> np.dtype:
    """numpy dtype of ``fips_ring_stat`` (from ``_fips.RING_STAT_FIELDS``)."""
    from fipstop import _fips

    return _dtype(_fips.RING_STAT_FIELDS, _fips.RING_STAT_SIZE)


@cache
def consumer_stat_dtype() -> np.dtype:
    """numpy dtype of ``fips_consumer_stat``."""
    from fipstop import _fips

    return _dtype(_fips.CONSUMER_STAT_FIELDS, _fips.CONSUMER_STAT_SIZE)


@cache
def pos_stat_dtype() -> np.dtype:
    """numpy dtype of ``fips_pos_stat``."""
    from fipstop import _fips

    return _dtype(_fips.POS_STAT_FIELDS, _fips.POS_STAT_SIZE)


#: Field a monitor adds to each position: CLOCK_REALTIME ns of the oldest
#: record the consumer has not released (the record at ``released``), 0 when
#: it has released everything or the record could not be read.
OLDEST_TS_FIELD = "oldest_ts_ns"


@cache
def pos_dtype() -> np.dtype:
    """``fips_pos_stat`` plus :data:`OLDEST_TS_FIELD`: what :class:`DomainSnapshot`
    ``.pos`` holds and a recording stores.  Lag in seconds is the age of that
    record (Kafka's time lag), which only the record's own timestamp gives."""
    import numpy as np

    base = pos_stat_dtype()
    fields = base.fields
    assert base.names is not None and fields is not None
    names = [*base.names, OLDEST_TS_FIELD]
    return np.dtype({"names": names,
                     "formats": [fields[n][0] for n in base.names] + [np.dtype("<u8")],
                     "offsets": [fields[n][1] for n in base.names] + [base.itemsize],
                     "itemsize": base.itemsize + 8})


def _cstr(raw: bytes) -> str:
    """A fixed-size C char field from shared memory -> str (no escaping here:
    views escape before printing)."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")


# ---------------------------------------------------------------------------
# per-slot dataclasses
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RingStat:
    """One ring slot at snapshot time (raw counters + derived values)."""

    index: int
    state: int
    generation: int
    pid: int
    tid: int
    thread_name: str
    head: int  # committed end position, bytes
    reserved: int  # claimed end position, bytes
    floor: int  # oldest position still kept, bytes
    floor_seq: int
    records_committed: int
    bytes_committed: int
    records_dropped: int
    bytes_dropped: int
    full_events: int
    high_water_bytes: int
    records_truncated: int
    evictions: int
    blocked_ns: int
    last_commit_ns: int
    created_ns: int
    closed_ns: int
    capacity_bytes: int
    used_bytes: int  # head - effective floor (see DomainSnapshot.effective_floor)
    fill_fraction: float  # used_bytes / capacity_bytes

    @property
    def state_label(self) -> str:
        return _state_label(RingState, self.state)

    @property
    def high_water_fraction(self) -> float:
        """max(high_water_bytes, used_bytes) / capacity_bytes, at most 1."""
        if not self.capacity_bytes:
            return 0.0
        return min(max(self.high_water_bytes, self.used_bytes) / self.capacity_bytes, 1.0)


@dataclass(frozen=True, slots=True)
class ConsumerStat:
    """One consumer slot at snapshot time."""

    index: int
    state: int
    generation: int
    pid: int
    readers: int
    evicted_by_ring: int
    resumes: int
    name: str
    heartbeat_mono_ns: int
    registered_ns: int
    evicted_ns: int
    records_released: int
    batches_released: int
    heartbeat_age_ns: int  # snapshot mono time - heartbeat, >= 0
    lag_records: int  # sum over rings; 0 unless ACTIVE

    @property
    def state_label(self) -> str:
        return _state_label(ConsumerState, self.state)


@dataclass(frozen=True, slots=True)
class PosStat:
    """Position of one consumer in one ring."""

    consumer: int
    ring: int
    released: int  # position released up to, bytes
    released_seq: int  # seq of the next record to release
    records_released: int
    lost_seen: int
    lag_records: int  # records_committed - released_seq (ACTIVE consumer, used ring)
    lag_bytes: int  # head - released


# ---------------------------------------------------------------------------
# the snapshot
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DomainSnapshot:
    """Everything a monitor reads of one domain, at one moment.

    ``rings``, ``consumers`` and ``pos`` are read-only numpy structured arrays
    over the bytes the binding returned (every slot, FREE ones included);
    ``pos`` has shape ``(max_consumers, max_rings)``.

    ``records_no_ring`` is the header's count of records dropped with no ring
    to take them (the ring table full: more producer threads than rings), read
    live next to the arrays (``Monitor.no_ring()``); ``None`` when unknown (a
    recording made before it was recorded), never a made-up 0.
    """

    name: str
    path: str
    version: int
    max_rings: int
    max_consumers: int
    ring_capacity_bytes: int
    max_record_bytes: int
    file_size_bytes: int
    grace_ns: int
    creator_pid: int
    created_realtime_ns: int
    created_mono_ns: int
    taken_realtime_ns: int
    taken_mono_ns: int
    rings: np.ndarray
    consumers: np.ndarray
    pos: np.ndarray
    records_no_ring: int | None = None

    @classmethod
    def from_raw(cls, raw: tuple[int, int, bytes, bytes, bytes], header: Any, path: str = "",
                 oldest_ts_ns: np.ndarray | None = None, *,
                 records_no_ring: int | None = None) -> DomainSnapshot:
        """Wrap ``Monitor.snapshot()``'s tuple with ``Monitor.header``; ``oldest_ts_ns``
        (``[consumer, ring]``, from :func:`oldest_unreleased_ts`) fills :data:`OLDEST_TS_FIELD`;
        ``records_no_ring`` is ``Monitor.no_ring()`` read with it (``header``'s is from attach)."""
        import numpy as np

        taken_rt, taken_mono, rings_b, cons_b, pos_b = raw
        rings = np.frombuffer(rings_b, dtype=ring_stat_dtype())
        consumers = np.frombuffer(cons_b, dtype=consumer_stat_dtype())
        cpos = np.frombuffer(pos_b, dtype=pos_stat_dtype())
        nr, nc = len(rings), len(consumers)
        if cpos.size != nr * nc:
            raise ValueError(f"snapshot: pos has {cpos.size} entries, expected {nc} x {nr}")
        pos = np.zeros(nc * nr, dtype=pos_dtype())
        names = cpos.dtype.names
        assert names is not None
        for f in names:
            pos[f] = cpos[f]
        pos = pos.reshape(nc, nr)
        if oldest_ts_ns is not None:
            pos[OLDEST_TS_FIELD] = oldest_ts_ns
        pos.flags.writeable = False
        return cls(
            name=header.name,
            path=path,
            version=header.version,
            max_rings=nr,
            max_consumers=nc,
            ring_capacity_bytes=header.ring_capacity,
            max_record_bytes=header.max_record,
            file_size_bytes=header.file_size,
            grace_ns=header.grace_ns,
            creator_pid=header.creator_pid,
            created_realtime_ns=header.created_realtime_ns,
            created_mono_ns=header.created_mono_ns,
            taken_realtime_ns=taken_rt,
            taken_mono_ns=taken_mono,
            rings=rings,
            consumers=consumers,
            pos=pos,
            records_no_ring=records_no_ring,
        )

    # -- masks ---------------------------------------------------------------

    def ring_in_use(self) -> np.ndarray:
        """bool per ring slot: not FREE."""
        return self.rings["state"] != RingState.FREE

    def consumer_in_use(self) -> np.ndarray:
        """bool per consumer slot: not FREE."""
        return self.consumers["state"] != ConsumerState.FREE

    def consumer_active(self) -> np.ndarray:
        return self.consumers["state"] == ConsumerState.ACTIVE

    def active_ring_indices(self) -> np.ndarray:
        import numpy as np

        return np.flatnonzero(self.ring_in_use())

    def active_consumer_indices(self) -> np.ndarray:
        import numpy as np

        return np.flatnonzero(self.consumer_in_use())

    # -- derived arrays ------------------------------------------------------

    def effective_floor(self) -> np.ndarray:
        """uint64 per ring: the oldest position still needed.

        ``rings["floor"]`` is the producer's cached lower bound: libfips
        refreshes it only when the ring looks full, so after consumers catch
        up it lags behind them.  The position that really bounds the ring is
        the smallest ``released`` of the ACTIVE consumers (never below
        ``floor``, never above ``head``); with no active consumer the records
        are kept for the first one to come, so it is ``floor``.
        """
        import numpy as np

        floor = self.rings["floor"]
        head = self.rings["head"]
        active = self.consumer_active()
        if not active.any():
            return np.minimum(floor, head)
        released = self.pos["released"][active]  # (n_active, max_rings)
        low = released.min(axis=0)
        return np.minimum(np.maximum(low, floor), head)

    def used_bytes(self) -> np.ndarray:
        """uint64 per ring: head - effective_floor(), in [0, capacity]."""
        import numpy as np

        head = self.rings["head"]
        used = head - self.effective_floor()
        return np.minimum(used, np.uint64(self.ring_capacity_bytes))

    def fill_fraction(self) -> np.ndarray:
        """float64 per ring: (head - floor) / capacity in [0, 1], where floor is
        :meth:`effective_floor` (see there why not ``rings["floor"]``)."""
        if not self.ring_capacity_bytes:
            return self.used_bytes().astype("f8") * 0.0
        return self.used_bytes().astype("f8") / float(self.ring_capacity_bytes)

    def high_water_bytes(self) -> np.ndarray:
        """uint64 per ring: max(high_water_bytes, used now).  libfips samples
        the counter every 64th commit against the slowest ACTIVE consumer (and
        at every floor refresh), so the current fill can be above it; both are
        measured against positions consumers hold now, never against the
        ring's ``floor`` field, which moves only when the ring looks full (a
        stale floor made HIGH read 89-100 % on rings that were never near full)."""
        import numpy as np

        return np.maximum(self.rings["high_water_bytes"], self.used_bytes())

    def high_water_fraction(self) -> np.ndarray:
        import numpy as np

        if not self.ring_capacity_bytes:
            return np.zeros(self.max_rings)
        return np.minimum(self.high_water_bytes().astype("f8") / self.ring_capacity_bytes, 1.0)

    def lag_records(self) -> np.ndarray:
        """int64 ``[consumer, ring]``: records_committed - released_seq.

        Defined for ACTIVE consumers on rings in use; -1 elsewhere.  Clamped
        at 0 (the counters are read one after the other, not atomically).
        """
        return self._lag("records_committed", "released_seq")

    def lag_bytes(self) -> np.ndarray:
        """int64 ``[consumer, ring]``: head - released; -1 where undefined."""
        return self._lag("head", "released")

    def _lag(self, ring_field: str, pos_field: str) -> np.ndarray:
        import numpy as np

        out = np.full((self.max_consumers, self.max_rings), -1, dtype=np.int64)
        act = np.flatnonzero(self.consumer_active())
        if act.size:
            end = self.rings[ring_field].astype(np.int64)
            rel = np.ascontiguousarray(self.pos[pos_field][act]).view(np.int64)
            lag = np.maximum(end[np.newaxis, :] - rel, 0)
            lag[:, ~self.ring_in_use()] = -1
            out[act] = lag
        return out

    def consumer_lag_records(self) -> np.ndarray:
        """int64 per consumer: total lag over all rings (0 if not ACTIVE)."""
        import numpy as np

        lag = self.lag_records()
        return np.where(lag >= 0, lag, 0).sum(axis=1)

    def heartbeat_age_ns(self) -> np.ndarray:
        """int64 per consumer: taken_mono_ns - heartbeat_mono_ns, >= 0; -1 for FREE slots."""
        import numpy as np

        hb = self.consumers["heartbeat_mono_ns"].astype("i8")
        age = np.maximum(np.int64(self.taken_mono_ns) - hb, 0)
        return np.where(self.consumer_in_use(), age, -1)

    # -- objects ---------------------------------------------------------------

    def ring_stat(self, index: int) -> RingStat:
        row = self.rings[index]
        used = int(self.used_bytes()[index])
        cap = self.ring_capacity_bytes
        return RingStat(
            index=int(row["index"]),
            state=int(row["state"]),
            generation=int(row["generation"]),
            pid=int(row["pid"]),
            tid=int(row["tid"]),
            thread_name=_cstr(bytes(row["thread_name"])),
            head=int(row["head"]),
            reserved=int(row["reserved"]),
            floor=int(row["floor"]),
            floor_seq=int(row["floor_seq"]),
            records_committed=int(row["records_committed"]),
            bytes_committed=int(row["bytes_committed"]),
            records_dropped=int(row["records_dropped"]),
            bytes_dropped=int(row["bytes_dropped"]),
            full_events=int(row["full_events"]),
            high_water_bytes=int(row["high_water_bytes"]),
            records_truncated=int(row["records_truncated"]),
            evictions=int(row["evictions"]),
            blocked_ns=int(row["blocked_ns"]),
            last_commit_ns=int(row["last_commit_ns"]),
            created_ns=int(row["created_ns"]),
            closed_ns=int(row["closed_ns"]),
            capacity_bytes=cap,
            used_bytes=used,
            fill_fraction=used / cap if cap else 0.0,
        )

    def consumer_stat(self, index: int) -> ConsumerStat:
        row = self.consumers[index]
        return ConsumerStat(
            index=int(row["index"]),
            state=int(row["state"]),
            generation=int(row["generation"]),
            pid=int(row["pid"]),
            readers=int(row["readers"]),
            evicted_by_ring=int(row["evicted_by_ring"]),
            resumes=int(row["resumes"]),
            name=_cstr(bytes(row["name"])),
            heartbeat_mono_ns=int(row["heartbeat_mono_ns"]),
            registered_ns=int(row["registered_ns"]),
            evicted_ns=int(row["evicted_ns"]),
            records_released=int(row["records_released"]),
            batches_released=int(row["batches_released"]),
            heartbeat_age_ns=max(int(self.taken_mono_ns) - int(row["heartbeat_mono_ns"]), 0),
            lag_records=int(self.consumer_lag_records()[index]),
        )

    def pos_stat(self, consumer: int, ring: int) -> PosStat:
        p = self.pos[consumer, ring]
        return PosStat(
            consumer=consumer,
            ring=ring,
            released=int(p["released"]),
            released_seq=int(p["released_seq"]),
            records_released=int(p["records_released"]),
            lost_seen=int(p["lost_seen"]),
            lag_records=int(self.lag_records()[consumer, ring]),
            lag_bytes=int(self.lag_bytes()[consumer, ring]),
        )

    def ring_stats(self) -> list[RingStat]:
        """RingStat of every slot that is not FREE."""
        return [self.ring_stat(int(i)) for i in self.active_ring_indices()]

    def consumer_stats(self) -> list[ConsumerStat]:
        """ConsumerStat of every slot that is not FREE."""
        return [self.consumer_stat(int(i)) for i in self.active_consumer_indices()]

    def pos_stats(self) -> list[PosStat]:
        """PosStat of every (consumer in use, ring in use) pair."""
        lag_r = self.lag_records()
        lag_b = self.lag_bytes()
        out = []
        for c in self.active_consumer_indices():
            for r in self.active_ring_indices():
                p = self.pos[c, r]
                out.append(
                    PosStat(
                        consumer=int(c),
                        ring=int(r),
                        released=int(p["released"]),
                        released_seq=int(p["released_seq"]),
                        records_released=int(p["records_released"]),
                        lost_seen=int(p["lost_seen"]),
                        lag_records=int(lag_r[c, r]),
                        lag_bytes=int(lag_b[c, r]),
                    )
                )
        return out


# ---------------------------------------------------------------------------
# finding and opening domains
# ---------------------------------------------------------------------------


def resolve_shm_dir(shm_dir: str | os.PathLike[str] | None = None) -> str:
    """shm_dir, else $FIPS_SHM_DIR, else /dev/shm (libfips's rule)."""
    if shm_dir:
        return os.fspath(shm_dir)
    return os.environ.get("FIPS_SHM_DIR") or DEFAULT_SHM_DIR


def valid_domain_name(name: str) -> bool:
    """libfips's rule: 1-63 of ``A-Za-z0-9._-``, not starting with '.'."""
    return bool(_NAME_RE.fullmatch(name)) and not name.startswith(".")


def domain_path(name: str, shm_dir: str | os.PathLike[str] | None = None) -> str:
    return os.path.join(resolve_shm_dir(shm_dir), FILE_PREFIX + name)


def list_domains(shm_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of the domains in shm_dir: entries ``fips.<name>`` with a valid
    name that are not directories, sorted.  Symlinks and other bad files are
    listed (opening them reports why they are refused); a missing directory
    raises FileNotFoundError."""
    names = []
    with os.scandir(resolve_shm_dir(shm_dir)) as it:
        for entry in it:
            if not entry.name.startswith(FILE_PREFIX):
                continue
            name = entry.name[len(FILE_PREFIX) :]
            if not valid_domain_name(name):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            names.append(name)
    return sorted(names)


def pick_domain(name: str | None, shm_dir: str | None) -> str:
    """``name``, or the only domain in the shm dir (FipsError when there are none or several)."""
    if name:
        return name
    names = list_domains(shm_dir)
    where = resolve_shm_dir(shm_dir)
    if not names:
        raise FipsError(f"no fips domain in {where}: start one with `fipstop wrap -- CMD` "
                        "(or `make demo` in the source tree)")
    if len(names) > 1:
        raise FipsError(f"several domains in {where} ({', '.join(names)}): choose one with --domain")
    return names[0]


#: How every reader starts its one line about a domain that shrank under its
#: mapping (libfips' FIPS_ETRUNC after attaching): the ring probe's
#: DomainError reason, ``fipstop check``'s UNKNOWN, tail's and the IPS's line.
TRUNCATED = "domain truncated"


def others_may_write(path: str) -> str | None:
    """The WARNING a reader says about a world-writable domain file (None when it is not): any
    local user can then write records into it - log lines the IPS bans on - or shrink it.  libfips
    refuses to create one; a chmod afterwards is what this catches (as sshd's StrictModes)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & 0o002:
        return None
    return (f"WARNING: {path} is world-writable (mode {mode & 0o7777:04o}): any local user can write records "
            "into it (and make an IPS ban on them) or truncate it; chmod o-w it")


def is_truncated(exc: BaseException) -> bool:
    """True for the binding's FipsError with code ETRUNC: the file is shorter
    than the domain's header says (truncated under a mapping, or found short)."""
    from fipstop import _fips

    return isinstance(exc, _fips.FipsError) and getattr(exc, "code", None) == _fips.ETRUNC


def truncated_line(name: str, path: str, mapped_bytes: int | None = None) -> str:
    """The one line a reader says when domain ``name`` shrank under its live
    mapping.  libfips turned the fault into zero pages and ETRUNC (no SIGBUS);
    the file's size now is read here (or "removed" / "unreadable") so the line
    says what happened without trusting the mapping.  Not escaped: escape it
    where it is shown."""
    try:
        now = f"{os.stat(path).st_size} bytes"
    except FileNotFoundError:
        now = "removed"
    except OSError as exc:
        now = f"unreadable ({exc.strerror})"
    was = f" of {mapped_bytes} mapped" if mapped_bytes else ""
    return (f"{TRUNCATED}: {name} ({path}) shrank under a live mapping, now {now}{was} "
            "(a process that can write the file truncated it): reads of it stopped")


def open_monitor(
    name: str, shm_dir: str | os.PathLike[str] | None = None, *, any_owner: bool = False
) -> Monitor:
    """Attach read-only to domain ``name``; raises ``_fips.FipsError`` (one-line
    reason naming the file) if it is missing or invalid."""
    from fipstop import _fips

    return _fips.Monitor(name, resolve_shm_dir(shm_dir), any_owner=any_owner)


_REC_HDR_BYTES = 24  # fips_layout_record: len_flags u32, lost u32, seq u64, ts_ns u64
_REC_PAD = 0x01


def _rec_hdr_dtype() -> np.dtype:
    import numpy as np

    return np.dtype([("len_flags", "<u4"), ("lost", "<u4"), ("seq", "<u8"), ("ts_ns", "<u8")])


def oldest_unreleased_ts(monitor: Monitor, raw: tuple[int, int, bytes, bytes, bytes]) -> np.ndarray:
    """uint64 ``[consumer, ring]``: the timestamp of the record at each ACTIVE
    consumer's ``released`` position, where it has not released everything;
    0 elsewhere and wherever that record cannot be read intact.

    A consumer's lag in seconds is the age of this record (now - its
    ``ts_ns``), as Kafka's time lag and Burrow report it: a drain-time
    estimate from rates is no lag.  The producer never rewrites a byte an
    ACTIVE consumer has not released, so the record is there unless the
    consumer was evicted meanwhile; the header read is checked against the
    position's ``released_seq`` (a record that is not the one expected gives
    0: unknown, never a wrong age).  Reads go through the monitor's read-only
    mapping, at most two 24-byte headers per position, each bounded inside
    the ring's buffer (the domain is hostile input: offsets come from the
    validated header copy, positions are masked to the ring's capacity).
    Vectorised: 256 rings x 2 lagging consumers cost 0.23 ms a sample once
    the pages are mapped (a loop of ctypes reads took 14 ms).
    """
    import ctypes

    import numpy as np

    _t, _m, rings_b, cons_b, pos_b = raw
    rings = np.frombuffer(rings_b, dtype=ring_stat_dtype())
    cons = np.frombuffer(cons_b, dtype=consumer_stat_dtype())
    nr, nc = len(rings), len(cons)
    out = np.zeros((nc, nr), dtype=np.uint64)
    pos = np.frombuffer(pos_b, dtype=pos_stat_dtype())
    if pos.size != nr * nc or not nr or not nc:
        return out
    pos = pos.reshape(nc, nr)
    h = monitor.header
    cap = int(h.ring_capacity)
    if cap < 4096 or cap & (cap - 1) or int(h.data_off) + nr * cap > int(h.file_size):
        return out
    c_idx, r_idx = np.nonzero((cons["state"] == ConsumerState.ACTIVE)[:, np.newaxis]
                              & (rings["state"] != RingState.FREE)[np.newaxis, :]
                              & (pos["released"] < rings["head"][np.newaxis, :]))
    if not c_idx.size:
        return out
    # the ring buffers, read-only, as bytes: every offset below is masked to a ring's capacity
    data = np.ctypeslib.as_array((ctypes.c_uint8 * (nr * cap)).from_address(
        int(monitor._mapping_address()) + int(h.data_off)))
    data.flags.writeable = False
    want = pos["released_seq"][c_idx, r_idx]
    off = pos["released"][c_idx, r_idx] & np.uint64(cap - 1)
    off = np.where(np.uint64(cap) - off < _REC_HDR_BYTES, 0, off).astype(np.int64)  # no room for a header: wrapped
    base = r_idx.astype(np.int64) * cap
    span = np.arange(_REC_HDR_BYTES)
    rec = _rec_hdr_dtype()
    hdr = np.ascontiguousarray(data[(base + off)[:, np.newaxis] + span]).view(rec)[:, 0]
    pad = (hdr["len_flags"] >> 24) & _REC_PAD != 0  # filler to the buffer's end: the record is at its start
    if pad.any():
        hdr2 = np.ascontiguousarray(data[base[pad][:, np.newaxis] + span]).view(rec)[:, 0]
        hdr = hdr.copy()
        hdr[pad] = hdr2
    ok = hdr["seq"] == want
    out[c_idx[ok], r_idx[ok]] = hdr["ts_ns"][ok]
    return out


def take_snapshot(monitor: Monitor) -> DomainSnapshot:
    """One snapshot through an open monitor, with each consumer's oldest unreleased record's time."""
    raw = monitor.snapshot()
    return DomainSnapshot.from_raw(raw, monitor.header, str(monitor.path), oldest_unreleased_ts(monitor, raw),
                                   records_no_ring=monitor.no_ring())


def snapshot_domain(
    name: str, shm_dir: str | os.PathLike[str] | None = None, *, any_owner: bool = False
) -> DomainSnapshot:
    """Attach, snapshot and detach."""
    mon = open_monitor(name, shm_dir, any_owner=any_owner)
    try:
        return take_snapshot(mon)
    finally:
        mon.close()


def iter_snapshots(
    shm_dir: str | os.PathLike[str] | None = None, *, any_owner: bool = False
) -> Iterator[tuple[str, DomainSnapshot | Exception]]:
    """(name, snapshot or the FipsError it raised) for every domain in shm_dir."""
    from fipstop import _fips

    for name in list_domains(shm_dir):
        try:
            yield name, snapshot_domain(name, shm_dir, any_owner=any_owner)
        except _fips.FipsError as exc:
            yield name, exc


if __name__ == "__main__":  # `python -m fipstop.ring --cflags --libs`, documented in the README
    from fipstop.commands.cflags import main

    raise SystemExit(main())
