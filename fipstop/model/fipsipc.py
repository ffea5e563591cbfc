"""The FIPS-IPC part of the model: the prototype's rings in fipstop's words.

:func:`derive_fipsipc` is pure.  A prototype segment (one System V segment)
holds ``segment_count`` writer segments - fipstop's rings: one writer thread
each - and up to ``max_reader_count`` reader processes - fipstop's consumers -
each with its own released position in every ring.

What is exact and what is an estimate:

- exact: positions, fill (slots between the writer's head and the slowest
  registered reader's released position, over the slot count: where the
  writer stops when it may not overwrite), lag in slots (committed minus
  released), slots claimed and not committed yet, threads attached, and how
  many registered processes the kernel no longer sees attached (``gone``:
  ``fips_buf_init`` registers, only ``fips_buf_destroy`` unregisters, so a
  killed process stays registered);
- estimates (``*_est``, shown with a ``~``): rates and laps.  Positions are
  slot indexes modulo the slot count and nothing counts records, so a rate is
  the distance moved over the interval *assuming less than one lap per
  interval* (a lower bound otherwise), and a lap is inferred when a reader's
  lag plus what the writer wrote minus what the reader released reaches the
  slot count: the reader then skips ``slots`` records (it cannot tell);
- unknown (None): anything without a baseline (the first frame, another
  segment under the same id), fill without a registered reader, records
  dropped (the prototype's writers wait or overwrite; they count nothing).

One record takes one slot (``fips_get_write_buffer`` hands out one slot per
iovec), so slots are records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fipstop.probes.fipsipc import FipsIpcSample, FipsIpcSegment, Rejected
from fipstop.probes.fipsipc_layout import WRITER_FREE, WRITER_IN_USE, WRITER_TRAILING

__all__ = ["FipsIpcView", "IpcPosition", "IpcReader", "IpcRing", "IpcSegmentView", "derive_fipsipc"]

WRITER_STATES = {WRITER_FREE: "free", WRITER_IN_USE: "in use", WRITER_TRAILING: "trailing"}


@dataclass(frozen=True, slots=True)
class IpcPosition:
    """One registered reader in one ring."""

    reader: int
    ring: int
    released_pos: int  # slot index released up to
    taken_slots: int  # taken by reader threads, not released yet
    lag_slots: int  # committed, not released
    release_per_s_est: float | None
    lapped_slots_est: int | None  # unread records overwritten in the interval (at least); 0 when it may not


@dataclass(frozen=True, slots=True)
class IpcRing:
    """One writer segment: one producer thread's ring."""

    ring: int
    writer: str  # free, in use, trailing (its writer detached, readers still draining)
    committed_pos: int
    claimed_slots: int  # claimed by the writer, not committed yet
    fill_pct: float | None  # None: no reader registered
    slowest_reader: int | None
    lag_slots: int | None  # of the slowest registered reader
    commit_per_s_est: float | None
    lapped_slots_est: int | None  # summed over its readers


@dataclass(frozen=True, slots=True)
class IpcReader:
    """One registered reader process."""

    reader: int
    threads: int  # reader threads attached now
    lag_max_slots: int | None
    release_per_s_est: float | None
    moved: bool | None  # released anything in the interval (None: no baseline)


@dataclass(frozen=True, slots=True)
class IpcSegmentView:
    shmid: int
    key: int
    names: tuple[str, ...]
    name_prefix: str  # the first 8 bytes of its shm_name, from the checksum ("" for short names)
    size_bytes: int
    slots: int  # per ring
    line_size: int
    overwrite: bool
    destroyed: bool
    writers_registered: int
    readers_registered: int
    attached: int  # processes the kernel sees attached
    gone: int  # registered but not attached (killed without fips_buf_destroy), at least
    creator_pid: int
    last_pid: int  # last to attach or detach
    rings: tuple[IpcRing, ...]
    readers: tuple[IpcReader, ...]
    positions: tuple[IpcPosition, ...]
    writer_moved: bool | None  # any ring committed in the interval (None: no baseline)
    dt_s: float  # 0 without a baseline
    #: the thread holding the header's assignment lock (None: free), and whether it still exists
    lock_owner: int | None = None
    lock_owner_alive: bool | None = None

    @property
    def label(self) -> str:
        """How outputs name it: the given shm_name, else the key, else the id."""
        if self.names:
            return self.names[0]
        return f"{self.key:#010x}" if self.key else f"shmid {self.shmid} (removed)"


@dataclass(frozen=True, slots=True)
class FipsIpcView:
    segments: tuple[IpcSegmentView, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    unavailable: str = ""


def _same(p: FipsIpcSegment, c: FipsIpcSegment) -> bool:
    return (p.shm.shmid == c.shm.shmid and p.shm.size == c.shm.size and p.shm.cpid == c.shm.cpid
            and p.layout.checksum == c.layout.checksum)


def _segment(c: FipsIpcSegment, p: FipsIpcSegment | None, dt_s: float) -> IpcSegmentView:
    lay, pos = c.layout, c.positions
    n = lay.slots
    base = p.positions if p is not None and dt_s > 0 else None
    readers = range(lay.reader_count)
    positions: list[IpcPosition] = []
    per_ring_lapped: dict[int, int] = {}
    for r in readers:
        for i in range(lay.segment_count):
            w1, r1 = int(pos.writer_commit[i]), int(pos.reader_commit[r, i])
            lag = (w1 - r1) % n
            rate = lapped = None
            if base is not None:
                w0, r0 = int(base.writer_commit[i]), int(base.reader_commit[r, i])
                dr = (r1 - r0) % n
                rate = dr / dt_s
                behind = (w0 - r0) % n + (w1 - w0) % n - dr
                lapped = n * (behind // n) if lay.overwrite and behind >= n else 0
                per_ring_lapped[i] = per_ring_lapped.get(i, 0) + lapped
            positions.append(IpcPosition(r, i, r1, (int(pos.reader_head[r, i]) - r1) % n, lag, rate, lapped))
    rings: list[IpcRing] = []
    for i in range(lay.segment_count):
        head, commit = int(pos.writer_head[i]), int(pos.writer_commit[i])
        mine = [q for q in positions if q.ring == i]
        slowest = max(mine, key=lambda q: q.lag_slots, default=None)
        fill = max(((head - q.released_pos) % n for q in mine), default=None)
        rate = (commit - int(base.writer_commit[i])) % n / dt_s if base is not None else None
        rings.append(IpcRing(i, WRITER_STATES.get(int(pos.writer_state[i]), "?"), commit, (head - commit) % n,
                             100.0 * fill / n if fill is not None else None,
                             slowest.reader if slowest is not None else None,
                             slowest.lag_slots if slowest is not None else None,
                             rate, per_ring_lapped.get(i) if base is not None else None))
    rdrs: list[IpcReader] = []
    for r in readers:
        mine = [q for q in positions if q.reader == r]
        rates = [q.release_per_s_est for q in mine if q.release_per_s_est is not None]
        moved = None
        if base is not None:
            moved = bool((pos.reader_commit[r] != base.reader_commit[r]).any())
        rdrs.append(IpcReader(r, int(pos.reader_threads[r]), max((q.lag_slots for q in mine), default=None),
                              sum(rates) if base is not None else None, moved))
    registered = lay.writer_count + lay.reader_count if lay.initialized == 1 else 0
    writer_moved = bool((pos.writer_commit != base.writer_commit).any()) if base is not None else None
    return IpcSegmentView(
        c.shm.shmid, c.shm.key, c.names, lay.name_prefix.decode("ascii", "replace"), c.shm.size, n, lay.line_size,
        lay.overwrite, lay.initialized == 2, lay.writer_count, lay.reader_count, c.shm.nattch,
        max(registered - c.shm.nattch, 0), c.shm.cpid, c.shm.lpid, tuple(rings), tuple(rdrs), tuple(positions),
        writer_moved, dt_s if base is not None else 0.0, pos.lock_owner or None, c.lock_owner_alive)


def derive_fipsipc(prev: FipsIpcSample | None, cur: FipsIpcSample) -> FipsIpcView:
    """The view of ``cur``; rates and laps need ``prev``, the sample before."""
    dt_s = (cur.taken_mono_ns - prev.taken_mono_ns) / 1e9 if prev is not None else 0.0
    before: dict[int, FipsIpcSegment] = {s.shm.shmid: s for s in prev.segments} if prev is not None else {}
    segs: Sequence[IpcSegmentView] = []
    segs = [_segment(s, p if p is not None and _same(p, s) else None, dt_s)
            for s in cur.segments for p in [before.get(s.shm.shmid)]]
    return FipsIpcView(tuple(segs), cur.rejected, cur.unavailable)
