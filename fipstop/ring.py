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
flags a C program needs to use the libfips that ships with this package.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    "pos_stat_dtype",
    "ring_stat_dtype",
    "snapshot_domain",
    "take_snapshot",
    "valid_domain_name",
]

PACKAGE_DIR = Path(__file__).resolve().parent
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

    @classmethod
    def from_raw(cls, raw: tuple[int, int, bytes, bytes, bytes], header: Any, path: str = "") -> DomainSnapshot:
        """Wrap ``Monitor.snapshot()``'s tuple (zero-copy) with ``Monitor.header``."""
        import numpy as np

        taken_rt, taken_mono, rings_b, cons_b, pos_b = raw
        rings = np.frombuffer(rings_b, dtype=ring_stat_dtype())
        consumers = np.frombuffer(cons_b, dtype=consumer_stat_dtype())
        pos = np.frombuffer(pos_b, dtype=pos_stat_dtype())
        nr, nc = len(rings), len(consumers)
        if pos.size != nr * nc:
            raise ValueError(f"snapshot: pos has {pos.size} entries, expected {nc} x {nr}")
        pos = pos.reshape(nc, nr)
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
        """uint64 per ring: max(high_water_bytes, used now).  libfips updates
        the counter only on its slow (ring looks full) path, so the current
        fill can be above it."""
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


def open_monitor(
    name: str, shm_dir: str | os.PathLike[str] | None = None, *, any_owner: bool = False
) -> Monitor:
    """Attach read-only to domain ``name``; raises ``_fips.FipsError`` (one-line
    reason naming the file) if it is missing or invalid."""
    from fipstop import _fips

    return _fips.Monitor(name, resolve_shm_dir(shm_dir), any_owner=any_owner)


def take_snapshot(monitor: Monitor) -> DomainSnapshot:
    """One snapshot through an open monitor."""
    return DomainSnapshot.from_raw(monitor.snapshot(), monitor.header, str(monitor.path))


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


# ---------------------------------------------------------------------------
# python -m fipstop.ring --cflags / --libs
# ---------------------------------------------------------------------------


def cflags() -> str:
    # An installed package has include/ (the build copies fips.h there); a
    # source tree also has csrc/, which is the same header.
    inc = PACKAGE_DIR / "include"
    if not (inc / "fips.h").exists():
        inc = PACKAGE_DIR / "csrc"
    return f"-I{inc}"


def libs() -> str:
    lib = PACKAGE_DIR / "lib"
    if not (lib / "libfips.so").exists():
        raise FileNotFoundError(f"{lib / 'libfips.so'} is missing: run `make lib` first")
    return f"-L{lib} -Wl,-rpath,{lib} -lfips -lpthread"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m fipstop.ring",
        description="Print the flags a C program needs to build against this package's libfips.",
    )
    parser.add_argument("--cflags", action="store_true", help="compiler flags (-I...)")
    parser.add_argument("--libs", action="store_true", help="linker flags (-L... -lfips)")
    args = parser.parse_args(argv)
    if not (args.cflags or args.libs):
        parser.print_usage(sys.stderr)
        return 2
    out = []
    if args.cflags:
        out.append(cflags())
    if args.libs:
        try:
            out.append(libs())
        except FileNotFoundError as exc:
            print(f"fipstop: {exc}", file=sys.stderr)
            return 1
    print(" ".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
