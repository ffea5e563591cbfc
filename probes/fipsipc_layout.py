"""The FIPS-IPC prototype's shared-memory layout, parsed and validated.

The FIPS paper's prototype (schrc3b6/FIPS-IPC, ``src/lib/fips_buf.c``) keeps
its rings in one System V segment: a header, one byte per writer segment
(free / in use / trailing), 8 bytes per (reader process, reader thread)
assignment, then per writer segment a segment header, per reader process a
(head, commit) pointer pair, an out-of-order list and its entries, and the
data: ``2^line_count_exp`` slots of ``2 + line_size`` bytes.  Positions are
slot indexes modulo the slot count (the prototype keeps no sequence
numbers, no counters, no pids).

Everything here works on a ``read(offset, length) -> bytes`` callable over a
segment whose size the kernel reported, so the same code parses a live
``shmat`` mapping and a test's bytes.  A segment is hostile until proven
otherwise: the size must equal what the header's parameters give
(``calculate_shared_memory_size``), the checksum must be the prototype's,
every offset the one ``setup_shm`` writes, every position inside the ring;
the first thing that is not so is a :class:`LayoutError` with one line
naming it.  Offsets of the prototype's structs (x86-64, gcc) are checked
against its own header by ``tests/integration/test_fipsipc.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["HEADER_SIZE", "Layout", "LayoutError", "Positions", "parse_header", "read_positions", "segment_size"]

#: sizeof(fips_buf_header_t), fips_buf_segment_header_t, fips_buf_pointer_t, fips_buf_list_t, fips_buf_sqe_t
HEADER_SIZE = 120
SEGMENT_HEADER_SIZE = 48
POINTER_SIZE = 8
LIST_SIZE = 88
SQE_SIZE = 16
ASSIGNMENT_SIZE = 8
LINE_WIDTH_SIZE = 2

#: the header after the 40-byte mutex: checksum, seven u8 counts/flags, line_size, max_sqe_count, line_MASK,
#: first/last segment offsets, writer/reader assignment offsets
_HDR = struct.Struct("<Q7BxIIQQQQQ")
_SEG = struct.Struct("<QQB3xII4xQQ")  # next, prev, index, writer head, writer commit, readers_offset, data_offset
_PTR = struct.Struct("<II")  # fips_buf_pointer_t: head, commit

FLAG_OVERWRITE = 1
#: writer assignment byte values (FIPS_BUF_FLAG_FREE / IN_USE / TRAILING)
WRITER_FREE, WRITER_IN_USE, WRITER_TRAILING = 0, 1, 2
#: reader assignment flags: bit 0 in use, bit 1 trailing
READER_IN_USE = 1

MAX_LINE_COUNT_EXP = 30  # 2^30 slots: positions are u32 and the mask an int shift in the prototype

Read = Callable[[int, int], bytes]


class LayoutError(ValueError):
    """A segment that is not (or no longer) a FIPS-IPC ring: one line saying why."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The header of one segment, validated; offsets derived from it."""

    initialized: int  # 1 set up, 2 destroyed by fips_buf_destroy (0 is refused: not set up yet)
    assignment_generation: int
    checksum: int
    segment_count: int
    max_reader_count: int
    max_reader_thread_count: int
    reader_count: int  # reader processes registered (fips_buf_init), never lowered by a crash
    writer_count: int  # writer processes registered (at most 1 by design)
    line_count_exp: int
    flags: int
    line_size: int
    max_sqe_count: int
    first_segment_offset: int
    writer_assignments_offset: int
    reader_assignments_offset: int
    name_prefix: bytes  # the first 8 bytes of shm_name folded into the checksum (b"" for names of <= 7 bytes)

    @property
    def slots(self) -> int:
        return 1 << self.line_count_exp

    @property
    def overwrite(self) -> bool:
        return bool(self.flags & FLAG_OVERWRITE)

    @property
    def reader_stride(self) -> int:
        return POINTER_SIZE + LIST_SIZE + SQE_SIZE * self.max_sqe_count

    @property
    def segment_stride(self) -> int:
        return (SEGMENT_HEADER_SIZE + self.max_reader_count * self.reader_stride
                + (self.line_size + LINE_WIDTH_SIZE) * self.slots)

    def segment_offset(self, i: int) -> int:
        return self.first_segment_offset + i * self.segment_stride


def segment_size(line_count_exp: int, line_size: int, segment_count: int, max_reader_count: int,
                 max_reader_thread_count: int, max_sqe_count: int) -> int:
    """``calculate_shared_memory_size`` of fips_buf.c: the exact size of a segment."""
    return (HEADER_SIZE + ((segment_count + 7) & ~7)
            + max_reader_count * max_reader_thread_count * ASSIGNMENT_SIZE
            + segment_count * (SEGMENT_HEADER_SIZE
                               + max_reader_count * (POINTER_SIZE + LIST_SIZE + SQE_SIZE * max_sqe_count)
                               + (1 << line_count_exp) * (line_size + LINE_WIDTH_SIZE)))


def checksum_word(line_count_exp: int, line_size: int, segment_count: int, max_reader_count: int,
                  max_reader_thread_count: int, max_sqe_count: int) -> int:
    """``calc_checksum`` without the name: the parameters folded into 64 bits."""
    return ((line_count_exp | (max_reader_count << 8) | (max_reader_thread_count << 16) | (segment_count << 24)
             | (line_size << 32)) ^ max_sqe_count) & 0xFFFF_FFFF_FFFF_FFFF


def _name_ok(prefix: bytes) -> bool:
    """8 bytes of a path name (what ftok's shm_name is): printable, no NUL."""
    return all(0x21 <= b < 0x7F for b in prefix)


def parse_header(read: Read, size: int) -> Layout:
    """The validated header of a segment of ``size`` bytes (as the kernel says)."""
    if size < HEADER_SIZE:
        raise LayoutError(f"{size} bytes: smaller than a FIPS-IPC header ({HEADER_SIZE} bytes)")
    raw = read(0, HEADER_SIZE)
    if len(raw) != HEADER_SIZE:
        raise LayoutError("header could not be read")
    initialized = raw[0]
    (generation,) = struct.unpack_from("<Q", raw, 8)
    (checksum, seg_count, max_readers, max_threads, reader_count, writer_count, exp, flags, line_size, max_sqe,
     mask, first_off, _last_off, w_off, r_off) = _HDR.unpack_from(raw, 56)
    if initialized == 0:
        raise LayoutError("not initialized (a FIPS-IPC segment being set up, or not FIPS-IPC at all)")
    if initialized not in (1, 2):
        raise LayoutError(f"initialized byte {initialized}: neither 1 (set up) nor 2 (destroyed)")
    if not 1 <= exp <= MAX_LINE_COUNT_EXP:
        raise LayoutError(f"line_count_exp {exp}: outside 1..{MAX_LINE_COUNT_EXP}")
    if mask != (1 << exp) - 1:
        raise LayoutError(f"line mask {mask:#x} does not match line_count_exp {exp}")
    if not 1 <= line_size <= 0xFFFF:
        raise LayoutError(f"line_size {line_size}: outside 1..65535 (lengths are 16-bit)")
    for what, v in (("segment_count", seg_count), ("max_reader_count", max_readers),
                    ("max_reader_thread_count", max_threads), ("max_sqe_count", max_sqe)):
        if v < 1:
            raise LayoutError(f"{what} {v}: must be at least 1")
    want = segment_size(exp, line_size, seg_count, max_readers, max_threads, max_sqe)
    if want != size:
        raise LayoutError(f"size {size} bytes, but its header describes {want} bytes")
    folded = checksum ^ checksum_word(exp, line_size, seg_count, max_readers, max_threads, max_sqe)
    prefix = folded.to_bytes(8, "little") if folded else b""
    if prefix and not _name_ok(prefix):
        raise LayoutError("checksum does not match its parameters")
    if w_off != HEADER_SIZE:
        raise LayoutError(f"writer assignments at offset {w_off}, expected {HEADER_SIZE}")
    if r_off != w_off + ((seg_count + 7) & ~7):
        raise LayoutError(f"reader assignments at offset {r_off}, expected {w_off + ((seg_count + 7) & ~7)}")
    if first_off != r_off + max_readers * max_threads * ASSIGNMENT_SIZE:
        raise LayoutError(f"first segment at offset {first_off}, "
                          f"expected {r_off + max_readers * max_threads * ASSIGNMENT_SIZE}")
    if reader_count > max_readers:
        raise LayoutError(f"{reader_count} readers registered, more than its maximum {max_readers}")
    return Layout(initialized, generation, checksum, seg_count, max_readers, max_threads, reader_count, writer_count,
                  exp, flags, line_size, max_sqe, first_off, w_off, r_off, prefix)


@dataclass(frozen=True, eq=False)
class Positions:
    """The moving parts of one segment at one moment (slot indexes, mod ``slots``)."""

    writer_state: np.ndarray  # (segment_count,) u1: WRITER_FREE / IN_USE / TRAILING
    writer_head: np.ndarray  # (segment_count,) u4: slots claimed up to
    writer_commit: np.ndarray  # (segment_count,) u4: slots committed up to
    reader_head: np.ndarray  # (max_reader_count, segment_count) u4: slots reader threads took
    reader_commit: np.ndarray  # (max_reader_count, segment_count) u4: slots released (the writer waits on these)
    reader_threads: np.ndarray  # (max_reader_count,) u2: reader threads attached per reader process
    #: the thread holding the header's assignment_lock, 0 when it is free (glibc keeps the holder's tid in
    #: every mutex, __owner, 8 bytes into pthread_mutex_t; the prototype's is not robust: a holder that dies
    #: leaves it locked for ever)
    lock_owner: int = 0


#: where fips_buf_header_t's assignment_lock is (after initialized and assignment_generation), and in it
#: glibc's __lock (0 free) and __owner (the holder's tid) words (x86-64 and aarch64 __pthread_mutex_s)
LOCK_OFFSET = 16
_LOCK = struct.Struct("<iIi")  # __lock, __count, __owner


def lock_owner(read: Read) -> int:
    """The tid holding the header's assignment_lock, 0 when it is free (or the words cannot be read)."""
    raw = read(LOCK_OFFSET, _LOCK.size)
    if len(raw) != _LOCK.size:
        return 0
    word, _count, owner = _LOCK.unpack(raw)
    return owner if word != 0 and owner > 0 else 0


def read_positions(read: Read, lay: Layout) -> Positions:
    """Writer and reader positions of every segment, each segment header
    checked against the offsets ``setup_shm`` writes (a corrupted or foreign
    segment fails here, in one line)."""
    n = lay.segment_count
    wstate = np.frombuffer(read(lay.writer_assignments_offset, n), dtype=np.uint8).copy()
    if wstate.size != n:
        raise LayoutError("writer assignments could not be read")
    bad = np.flatnonzero(wstate > WRITER_TRAILING)
    if bad.size:
        raise LayoutError(f"writer segment {int(bad[0])}: state byte {int(wstate[bad[0]])} is none of free, "
                          "in use, trailing")
    assign = np.frombuffer(read(lay.reader_assignments_offset,
                                lay.max_reader_count * lay.max_reader_thread_count * ASSIGNMENT_SIZE),
                           dtype=np.dtype([("start", "<u4"), ("count", "<u2"), ("flags", "<u2")]))
    threads = (assign["flags"] & READER_IN_USE).reshape(lay.max_reader_count, lay.max_reader_thread_count)
    slots = lay.slots
    readers, stride, seg_stride = lay.max_reader_count, lay.reader_stride, lay.segment_stride
    heads: list[int] = []
    commits: list[int] = []
    rpos: list[tuple[int, ...]] = []  # per segment: (head, commit) of every reader, flattened
    off = lay.first_segment_offset
    for i in range(n):
        raw = read(off, SEGMENT_HEADER_SIZE)
        if len(raw) != SEGMENT_HEADER_SIZE:
            raise LayoutError(f"segment {i}: header could not be read")
        nxt, _prev, index, head, commit, readers_off, data_off = _SEG.unpack(raw)
        if index != i:
            raise LayoutError(f"segment {i}: its header says index {index}")
        if readers_off != off + SEGMENT_HEADER_SIZE:
            raise LayoutError(f"segment {i}: readers at offset {readers_off}, expected {off + SEGMENT_HEADER_SIZE}")
        want_data = readers_off + readers * stride
        if data_off != want_data:
            raise LayoutError(f"segment {i}: data at offset {data_off}, expected {want_data}")
        want_next = off + seg_stride if i + 1 < n else 0
        if nxt != want_next:
            raise LayoutError(f"segment {i}: next segment at offset {nxt}, expected {want_next}")
        if head >= slots or commit >= slots:
            raise LayoutError(f"segment {i}: writer position {max(head, commit)} past its {slots} slots")
        heads.append(head)
        commits.append(commit)
        pairs: list[int] = []
        for r in range(readers):
            pr = read(readers_off + r * stride, POINTER_SIZE)
            if len(pr) != POINTER_SIZE:
                raise LayoutError(f"segment {i}: reader positions could not be read")
            rh, rc = _PTR.unpack(pr)
            if rh >= slots or rc >= slots:
                raise LayoutError(f"segment {i}: reader {r} position {max(rh, rc)} past its {slots} slots")
            pairs += (rh, rc)
        rpos.append(tuple(pairs))
        off += seg_stride
    rp = np.array(rpos, dtype=np.uint32).reshape(n, readers, 2)
    whead = np.array(heads, dtype=np.uint32)
    wcommit = np.array(commits, dtype=np.uint32)
    rhead = np.ascontiguousarray(rp[:, :, 0].T)
    rcommit = np.ascontiguousarray(rp[:, :, 1].T)
    return Positions(wstate, whead, wcommit, rhead, rcommit, threads.sum(axis=1).astype(np.uint16), lock_owner(read))
