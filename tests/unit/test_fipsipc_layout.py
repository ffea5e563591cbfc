"""The FIPS-IPC parser against built segments: valid ones, lying ones, foreign ones.

Every hostile segment is refused with one line naming what is wrong, and the
parser never reads outside the size the kernel gave (the builder's read
raises if it tries).  The model's fill, lag and lap estimates are checked
against positions whose truth the test knows.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from fipsipc_build import Seg

from fipstop.model.fipsipc import derive_fipsipc
from fipstop.probes.fipsipc import FipsIpcSample, FipsIpcSegment, SysvShm, read_sysvipc
from fipstop.probes.fipsipc_layout import Layout, LayoutError, Positions, parse_header, read_positions


def parse(seg: Seg, size: int | None = None) -> tuple[Layout, Positions]:
    lay = parse_header(seg.read, seg.size if size is None else size)
    return lay, read_positions(seg.read, lay)


def test_valid_segment_parses() -> None:
    s = Seg(exp=4, segments=3, readers=2, threads=2, name=b"fipsipc_small")
    s.counts(1, 1)
    s.writer(0, 9, 7)
    s.writer(1, 0, 0, state=2)
    s.reader(0, 0, 5, 3)
    s.reader_thread(0, 0)
    s.reader_thread(0, 1)
    lay, pos = parse(s)
    assert (lay.slots, lay.segment_count, lay.reader_count, lay.writer_count) == (16, 3, 1, 1)
    assert lay.name_prefix == b"fipsipc_"
    assert list(pos.writer_state) == [1, 2, 0]
    assert (int(pos.writer_head[0]), int(pos.writer_commit[0])) == (9, 7)
    assert (int(pos.reader_head[0, 0]), int(pos.reader_commit[0, 0])) == (5, 3)
    assert list(pos.reader_threads) == [2, 0]


def test_short_name_has_no_prefix() -> None:
    lay, _ = parse(Seg(name=b"/t"))
    assert lay.name_prefix == b""


def _refused(seg: Seg, match: str, size: int | None = None) -> str:
    with pytest.raises(LayoutError, match=match) as ei:
        parse(seg, size)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 200
    return msg


def test_lying_size_refused() -> None:
    s = Seg()
    _refused(s, "but its header describes", size=s.size - 8)
    _refused(s, "smaller than a FIPS-IPC header", size=64)


def test_size_lie_in_header_refused() -> None:
    s = Seg(exp=4)
    s.buf[69] = 20  # line_count_exp says 2^20 slots: the segment would be far larger
    struct.pack_into("<Q", s.buf, 80, (1 << 20) - 1)
    _refused(s, "but its header describes")


def test_offsets_past_the_end_refused() -> None:
    s = Seg()
    struct.pack_into("<Q", s.buf, 88, s.size + 4096)  # first_segment_offset past the end
    _refused(s, "first segment at offset")
    s = Seg(segments=2)
    off = s.first + s.stride
    struct.pack_into("<Q", s.buf, off + 40, s.size * 4)  # segment 1's data offset past the end
    _refused(s, "segment 1: data at offset")
    s = Seg(segments=2)
    struct.pack_into("<Q", s.buf, s.first, s.size + 1)  # next pointer past the end
    _refused(s, "segment 0: next segment at offset")


def test_positions_past_the_ring_refused() -> None:
    s = Seg(exp=4)
    s.writer(0, 16, 3)
    _refused(s, "writer position 16 past its 16 slots")
    s = Seg(exp=4)
    s.reader(1, 0, 2, 99)
    _refused(s, "reader 1 position 99 past its 16 slots")


def test_foreign_segment_refused() -> None:
    """Another program's segment with project id 1: whatever it holds, one line."""
    for junk in (b"\0" * 4096, b"\x01" * 4096, bytes(range(256)) * 16):
        s = Seg()
        s.buf[:] = junk
        s.size = len(junk)
        with pytest.raises(LayoutError) as ei:
            parse(s)
        assert "\n" not in str(ei.value)


def test_checksum_mismatch_refused() -> None:
    s = Seg(name=b"fipsipc_small")
    s.buf[56] ^= 0x80  # a non-printable byte in the folded name
    _refused(s, "checksum does not match")


def test_bad_counts_refused() -> None:
    s = Seg(readers=2)
    s.counts(1, 3)
    _refused(s, "3 readers registered, more than its maximum 2")
    s = Seg()
    s.buf[0] = 7
    _refused(s, "initialized byte 7")
    s = Seg()
    s.buf[0] = 0
    _refused(s, "not initialized")
    s = Seg(segments=2)
    s.buf[s.w_off + 1] = 9
    _refused(s, "writer segment 1: state byte 9")


def _sample(seg: Seg, t_ns: int, nattch: int = 2, shmid: int = 7) -> FipsIpcSample:
    lay, pos = parse(seg)
    shm = SysvShm(0x0102_0304, shmid, 0o644, seg.size, 100, 101, nattch, 0, 0, 0, 0)
    return FipsIpcSample(t_ns, t_ns, (FipsIpcSegment(shm, lay, pos),))


def test_model_fill_lag_exact() -> None:
    s = Seg(exp=4, segments=1, readers=1)
    s.counts(1, 1)
    s.writer(0, 12, 10)
    s.reader(0, 0, 4, 2)
    v = derive_fipsipc(None, _sample(s, 0))
    seg = v.segments[0]
    ring, p = seg.rings[0], seg.positions[0]
    assert ring.fill_pct == pytest.approx(100 * 10 / 16)  # head 12 - released 2
    assert ring.lag_slots == p.lag_slots == 8  # committed 10 - released 2
    assert ring.claimed_slots == 2 and p.taken_slots == 2
    assert ring.commit_per_s_est is None and p.lapped_slots_est is None  # no baseline: unknown
    assert seg.gone == 0 and seg.writer_moved is None


def test_model_wraps_and_rates() -> None:
    s = Seg(exp=4, segments=1, readers=1)
    s.counts(1, 1)
    s.writer(0, 14, 14)
    s.reader(0, 0, 12, 12)
    a = _sample(s, 0)
    s.writer(0, 3, 3)  # wrapped: wrote 5
    s.reader(0, 0, 1, 1)  # read 5
    b = _sample(s, 1_000_000_000)
    seg = derive_fipsipc(a, b).segments[0]
    assert seg.rings[0].commit_per_s_est == pytest.approx(5.0)
    assert seg.positions[0].release_per_s_est == pytest.approx(5.0)
    assert seg.rings[0].lag_slots == 2 and seg.rings[0].lapped_slots_est == 0
    assert seg.writer_moved is True and seg.readers[0].moved is True


def test_model_lap_estimate() -> None:
    """OVERWRITE: lag 12, the writer writes 10 more, the reader reads 2: it was
    lapped once and will skip 16 records."""
    s = Seg(exp=4, segments=1, readers=1, flags=1)
    s.counts(1, 1)
    s.writer(0, 12, 12)
    s.reader(0, 0, 0, 0)
    a = _sample(s, 0)
    s.writer(0, 6, 6)
    s.reader(0, 0, 2, 2)
    seg = derive_fipsipc(a, _sample(s, 10**9)).segments[0]
    assert seg.positions[0].lapped_slots_est == 16
    assert seg.rings[0].lapped_slots_est == 16
    assert seg.positions[0].lag_slots == 4


def test_model_no_lap_without_overwrite_and_gone() -> None:
    s = Seg(exp=4, segments=1, readers=1, flags=0)
    s.counts(1, 1)
    a = _sample(s, 0, nattch=1)
    seg = derive_fipsipc(a, _sample(s, 10**9, nattch=1)).segments[0]
    assert seg.gone == 1 and seg.rings[0].lapped_slots_est == 0
    assert seg.writer_moved is False and seg.readers[0].moved is False


def test_model_other_segment_is_no_baseline() -> None:
    s = Seg(exp=4, segments=1, readers=1)
    s.counts(1, 1)
    a = _sample(s, 0, shmid=7)
    seg = derive_fipsipc(a, _sample(s, 10**9, shmid=8)).segments[0]
    assert seg.rings[0].commit_per_s_est is None and seg.dt_s == 0.0


def test_no_reader_fill_unknown() -> None:
    s = Seg(exp=4, segments=1, readers=1)
    s.counts(1, 0)
    seg = derive_fipsipc(None, _sample(s, 0)).segments[0]
    assert seg.rings[0].fill_pct is None and seg.rings[0].lag_slots is None


def test_read_sysvipc(tmp_path: Path) -> None:
    p = tmp_path / "shm"
    p.write_text(
        "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime"
        "      dtime      ctime                   rss                  swap\n"
        "  16908289         12   644              17000000   100   101      2  1000  1000  1000  1000 1700000000"
        "          0 1700000000                     0                     0\n"
        "        -1         13   600                  4096   100   101      0     0     0     0     0          0"
        "          0          0                     0                     0\n"
        "garbage line\n")
    rows = read_sysvipc(str(p))
    assert [(r.key, r.shmid, r.perms, r.size, r.nattch) for r in rows] == [
        (16908289, 12, 0o644, 17000000, 2), (0xFFFFFFFF, 13, 0o600, 4096, 0)]
