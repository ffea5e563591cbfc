"""Build FIPS-IPC prototype segments as bytes, the way fips_buf.c's setup_shm lays them out.

For the unit tests of the parser; the integration tests check the parser
against segments the prototype itself made.
"""

from __future__ import annotations

import struct

from fipstop.probes.fipsipc_layout import (
    ASSIGNMENT_SIZE,
    HEADER_SIZE,
    POINTER_SIZE,
    SEGMENT_HEADER_SIZE,
    checksum_word,
    segment_size,
)


class Seg:
    """A segment in a bytearray, with setters for what processes change."""

    def __init__(self, exp: int = 4, line_size: int = 14, segments: int = 2, readers: int = 2, threads: int = 2,
                 sqe: int = 4, name: bytes = b"fipsipc_test", flags: int = 0) -> None:
        self.exp, self.line_size, self.segments, self.readers, self.threads, self.sqe = (
            exp, line_size, segments, readers, threads, sqe)
        self.size = segment_size(exp, line_size, segments, readers, threads, sqe)
        b = self.buf = bytearray(self.size)
        b[0] = 1
        ck = checksum_word(exp, line_size, segments, readers, threads, sqe)
        if len(name) > 7:
            ck ^= int.from_bytes(name[:8], "little")
        self.w_off = HEADER_SIZE
        self.r_off = self.w_off + ((segments + 7) & ~7)
        self.first = self.r_off + readers * threads * ASSIGNMENT_SIZE
        self.reader_stride = 8 + 88 + 16 * sqe
        self.stride = SEGMENT_HEADER_SIZE + readers * self.reader_stride + (line_size + 2) * (1 << exp)
        struct.pack_into("<Q7BxIIQQQQQ", b, 56, ck, segments, readers, threads, 0, 0, exp, flags, line_size, sqe,
                         (1 << exp) - 1, self.first, 0, self.w_off, self.r_off)
        for i in range(segments):
            off = self.first + i * self.stride
            nxt = off + self.stride if i + 1 < segments else 0
            prev = off - self.stride if i else 0
            readers_off = off + SEGMENT_HEADER_SIZE
            struct.pack_into("<QQB3xII4xQQ", b, off, nxt, prev, i, 0, 0, readers_off,
                             readers_off + readers * self.reader_stride)

    def counts(self, writers: int, readers: int) -> None:
        self.buf[68] = writers
        self.buf[67] = readers

    def writer(self, seg: int, head: int, commit: int, state: int = 1) -> None:
        self.buf[self.w_off + seg] = state
        struct.pack_into("<II", self.buf, self.first + seg * self.stride + 20, head, commit)

    def reader(self, r: int, seg: int, head: int, commit: int) -> None:
        off = self.first + seg * self.stride + SEGMENT_HEADER_SIZE + r * self.reader_stride
        struct.pack_into("<II", self.buf, off, head, commit)

    def reader_thread(self, r: int, t: int, start: int = 0, count: int = 1, flags: int = 1) -> None:
        struct.pack_into("<IHH", self.buf, self.r_off + (r * self.threads + t) * ASSIGNMENT_SIZE, start, count,
                         flags)

    def read(self, off: int, n: int) -> bytes:
        if off < 0 or off + n > len(self.buf):
            raise AssertionError(f"the parser read past the end: {off}+{n} of {len(self.buf)}")
        return bytes(self.buf[off:off + n])


assert POINTER_SIZE == 8
