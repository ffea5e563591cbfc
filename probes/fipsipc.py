"""The FIPS-IPC probe: the FIPS paper's own prototype rings, read-only.

The prototype (:mod:`fipstop.probes.fipsipc_layout`) keeps its rings in a
System V segment whose key is ``ftok(shm_name, 1)``.  Every sample
re-resolves the segments - the kernel's list (``/proc/sysvipc/shm``), or
``ftok`` of the names given - because a segment removed with ``IPC_RMID``
lives on, under key 0, while a process still has it attached, and a new one
may take its key.  Candidates are the segments whose key has project id 1
(what ``ftok(name, 1)`` gives), the ones with key 0 (removed but attached)
and the ones whose names were given; each is attached with ``SHM_RDONLY``
just long enough to copy its header and positions, and detached again, so
fipstop never keeps a removed segment alive nor writes a byte.

A candidate that is not a FIPS-IPC ring is refused in one line: a keyed one
(another program's segment with project id 1, a corrupted or lying header)
is listed under ``rejected``, a removed one (key 0: any program's private
segment) is skipped silently.

What the prototype does not keep is not made up: there are no counters, no
pids, no sequence numbers in its memory.  What the kernel knows is added:
how many processes have the segment attached (``nattch``), who created it
and who attached or detached last, so a registered writer or reader whose
process is gone shows as gone.

Never imports textual.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fipstop.probes import names
from fipstop.probes.fipsipc_layout import Layout, LayoutError, Positions, parse_header, read_positions

__all__ = ["FipsIpcProbe", "FipsIpcSample", "FipsIpcSegment", "IpcTap", "IpcTapRecord", "Rejected", "SysvShm", "ftok",
           "read_sysvipc", "tap_segment"]

SYSVIPC_SHM = "/proc/sysvipc/shm"
SHM_RDONLY = 0o10000
PROJ_ID = 1


@dataclass(frozen=True, slots=True)
class SysvShm:
    """One line of /proc/sysvipc/shm (what the kernel says about a segment)."""

    key: int
    shmid: int
    perms: int
    size: int
    cpid: int  # creator
    lpid: int  # last to attach or detach (a process that died detached at its exit)
    nattch: int
    uid: int
    atime: int  # realtime seconds of the last attach, 0 never
    dtime: int  # of the last detach
    ctime: int


def read_sysvipc(path: str = SYSVIPC_SHM) -> list[SysvShm]:
    """Every segment the kernel lists (lines that do not parse are skipped)."""
    out: list[SysvShm] = []
    with open(path, encoding="ascii", errors="replace") as f:
        head = f.readline().split()
        col = {name: i for i, name in enumerate(head)}
        need = ("key", "shmid", "perms", "size", "cpid", "lpid", "nattch", "uid", "atime", "dtime", "ctime")
        if any(n not in col for n in need):
            raise ValueError(f"{path}: unexpected header")
        for line in f:
            parts = line.split()
            try:
                v = [int(parts[col[n]], 8 if n == "perms" else 10) for n in need]
            except (ValueError, IndexError):
                continue
            v[0] &= 0xFFFF_FFFF  # keys print as signed ints
            out.append(SysvShm(*v))
    return out


def ftok(path: str, proj_id: int = PROJ_ID) -> int:
    """glibc's ftok(3): the key a prototype process derives from ``shm_name``."""
    st = os.stat(path)
    return ((proj_id & 0xFF) << 24) | ((st.st_dev & 0xFF) << 16) | (st.st_ino & 0xFFFF)


@dataclass(frozen=True, slots=True)
class Rejected:
    """A candidate segment that is not a readable FIPS-IPC ring, and why (one line)."""

    shmid: int  # -1: no segment at all
    key: int
    reason: str
    name: str = ""  # the given shm_name it was looked up by ("": found by the scan)


@dataclass(frozen=True, eq=False)
class FipsIpcSegment:
    """One prototype ring set at one moment: the kernel's view, the header, the positions."""

    shm: SysvShm
    layout: Layout
    positions: Positions
    names: tuple[str, ...] = ()  # given names whose ftok key is this segment's
    #: whether the thread holding the assignment lock (positions.lock_owner) still exists; None when the lock
    #: is free.  A tid of this pid namespace: a holder in another namespace cannot be told from a dead one
    lock_owner_alive: bool | None = None


@dataclass(frozen=True, eq=False)
class FipsIpcSample:
    taken_mono_ns: int
    taken_realtime_ns: int
    segments: tuple[FipsIpcSegment, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    unavailable: str = ""  # nothing could be read at all, and why


class _Libc:
    def __init__(self) -> None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.shmat = lib.shmat
        self.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        self.shmat.restype = ctypes.c_void_p
        self.shmdt = lib.shmdt
        self.shmdt.argtypes = [ctypes.c_void_p]
        self.shmdt.restype = ctypes.c_int


_libc: _Libc | None = None


def _lib() -> _Libc:
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


def read_segment(shm: SysvShm) -> tuple[Layout, Positions]:
    """Attach ``shm`` read-only, copy its header and positions, detach.

    Every read is bounded by the size the kernel reports (a SysV segment
    cannot shrink under a mapping), so a lying header cannot make us read
    past the end."""
    lib = _lib()
    addr = lib.shmat(shm.shmid, None, SHM_RDONLY)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    size = shm.size

    def read(off: int, n: int) -> bytes:
        if off < 0 or n < 0 or off + n > size:
            raise LayoutError(f"offset {off}+{n} past the end of its {size} bytes")
        return ctypes.string_at(addr + off, n)

    try:
        lay = parse_header(read, size)
        return lay, read_positions(read, lay)
    finally:
        lib.shmdt(addr)


@dataclass(frozen=True, slots=True)
class IpcTapRecord:
    slot: int
    payload: bytes  # raw, from another process: escape before showing
    length_bad: bool = False  # its length prefix exceeded the slot: cut to the slot


@dataclass(frozen=True, slots=True)
class IpcTap:
    """The newest committed records of one ring, oldest first.  The prototype
    has no sequence numbers: a slot the writer reaches again while it is copied
    is rewritten under the copy; ``maybe_rewritten`` says the writer moved far
    enough during the copy to have reached the oldest copied slot (a whole lap
    within the copy cannot be seen)."""

    shmid: int
    ring: int
    records: tuple[IpcTapRecord, ...] = ()
    maybe_rewritten: bool = False
    error: str = ""


def tap_segment(shm: SysvShm, ring: int, max_records: int = 32) -> IpcTap:
    """Copy the newest ``max_records`` committed records of ``ring`` (read-only, bounded, validated)."""
    from fipstop.probes.fipsipc_layout import LINE_WIDTH_SIZE, SEGMENT_HEADER_SIZE

    lib = _lib()
    addr = lib.shmat(shm.shmid, None, SHM_RDONLY)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        return IpcTap(shm.shmid, ring, error=os.strerror(err))
    size = shm.size

    def read(off: int, n: int) -> bytes:
        if off < 0 or n < 0 or off + n > size:
            raise LayoutError(f"offset {off}+{n} past the end of its {size} bytes")
        return ctypes.string_at(addr + off, n)

    try:
        lay = parse_header(read, size)
        pos = read_positions(read, lay)
        if not 0 <= ring < lay.segment_count:
            return IpcTap(shm.shmid, ring, error=f"no ring {ring} (it has {lay.segment_count})")
        n = lay.slots
        head0, commit = int(pos.writer_head[ring]), int(pos.writer_commit[ring])
        want = max(0, min(int(max_records), n - 1 - (head0 - commit) % n))
        seg_off = lay.segment_offset(ring)
        data = seg_off + SEGMENT_HEADER_SIZE + lay.max_reader_count * lay.reader_stride
        width = lay.line_size + LINE_WIDTH_SIZE
        recs = []
        for k in range(want, 0, -1):
            slot = (commit - k) % n
            raw = read(data + width * slot, width)
            length = int.from_bytes(raw[:2], "little")
            if length == 0:  # never written (the prototype cannot tell an empty record from a fresh slot)
                continue
            bad = length > lay.line_size
            recs.append(IpcTapRecord(slot, raw[2:2 + min(length, lay.line_size)], bad))
        head1 = int.from_bytes(read(seg_off + 20, 4), "little") % n
        moved = (head1 - head0) % n
        oldest = (head0 - (commit - want)) % n if want else n
        return IpcTap(shm.shmid, ring, tuple(recs), maybe_rewritten=bool(want) and moved >= n - oldest)
    except LayoutError as e:
        return IpcTap(shm.shmid, ring, error=_one_line(e))
    finally:
        lib.shmdt(addr)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


class FipsIpcProbe:
    """Samples every FIPS-IPC segment on the host (and the ones ``shm_names`` name)."""

    name = names.FIPSIPC

    def __init__(self, shm_names: Sequence[str] = (), *, sysvipc: str = SYSVIPC_SHM, discover: bool = True) -> None:
        self.shm_names = tuple(shm_names)
        self.sysvipc = sysvipc
        self.discover = discover

    def available(self) -> tuple[bool, str]:
        if not os.path.exists(self.sysvipc):
            return False, f"{self.sysvipc}: no such file (no System V IPC in this kernel or namespace)"
        return True, ""

    def sample(self) -> FipsIpcSample:
        mono, real = time.monotonic_ns(), time.time_ns()
        try:
            table = read_sysvipc(self.sysvipc)
        except OSError as e:
            return FipsIpcSample(mono, real, unavailable=f"{self.sysvipc}: {_one_line(e)}")
        except ValueError as e:
            return FipsIpcSample(mono, real, unavailable=_one_line(e))
        rejected: list[Rejected] = []
        wanted: dict[int, list[str]] = {}
        for n in self.shm_names:
            try:
                wanted.setdefault(ftok(n), []).append(n)
            except OSError as e:
                rejected.append(Rejected(-1, 0, f"{n}: {_one_line(e)} (ftok needs the shm_name file)", n))
        by_key = {s.key: s for s in table if s.key}
        for key, given in wanted.items():
            if key not in by_key:
                rejected.append(Rejected(-1, key, f"{given[0]}: no segment with key {key:#010x}", given[0]))
        segments: list[FipsIpcSegment] = []
        for shm in table:
            keyed = shm.key != 0
            if shm.key not in wanted:
                if not self.discover:
                    continue
                if keyed and shm.key >> 24 != PROJ_ID:
                    continue
            try:
                lay, pos = read_segment(shm)
            except (LayoutError, OSError) as e:
                if keyed:
                    named = wanted.get(shm.key, [""])[0]
                    rejected.append(Rejected(shm.shmid, shm.key, _one_line(e), named))
                continue
            alive = os.path.exists(f"/proc/{pos.lock_owner}") if pos.lock_owner else None
            segments.append(FipsIpcSegment(shm, lay, pos, tuple(wanted.get(shm.key, ())), alive))
        segments.sort(key=lambda s: s.shm.shmid)
        return FipsIpcSample(mono, real, tuple(segments), tuple(rejected))

    def tap(self, shmid: int, ring: int, max_records: int = 32) -> IpcTap:
        """The newest records of one ring of segment ``shmid`` (payloads raw: escape them)."""
        try:
            shm = next((s for s in read_sysvipc(self.sysvipc) if s.shmid == shmid), None)
        except (OSError, ValueError) as e:
            return IpcTap(shmid, ring, error=_one_line(e))
        if shm is None:
            return IpcTap(shmid, ring, error=f"no segment with shmid {shmid}")
        return tap_segment(shm, ring, max_records)

    def close(self) -> None:
        pass
