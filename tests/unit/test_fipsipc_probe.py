"""The FIPS-IPC probe on real System V segments this test makes.

A segment of another program under a project-id-1 key is refused in one
line; a valid one (laid out as fips_buf.c does) is read, and still read after
IPC_RMID while attached (key 0); a lying size is refused; the probe never
keeps a segment attached between samples.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from fipsipc_build import Seg

from fipstop.probes.fipsipc import FipsIpcProbe, ftok, read_sysvipc

libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
libc.ftok.argtypes = [ctypes.c_char_p, ctypes.c_int]
IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0


class Shm:
    def __init__(self, key: int, data: bytes, size: int | None = None) -> None:
        self.shmid = libc.shmget(key, size or len(data), IPC_CREAT | IPC_EXCL | 0o644)
        assert self.shmid >= 0, ctypes.get_errno()
        self.addr = libc.shmat(self.shmid, None, 0)
        ctypes.memmove(self.addr, data, len(data))

    def detach(self) -> None:
        if self.addr:
            libc.shmdt(self.addr)
            self.addr = None

    def remove(self) -> None:
        libc.shmctl(self.shmid, IPC_RMID, None)


@pytest.fixture
def segs() -> Iterator[list[Shm]]:
    made: list[Shm] = []
    yield made
    for s in made:
        s.remove()
        s.detach()


def keyfile(tmp_path: Path, name: str) -> tuple[str, int]:
    p = tmp_path / name
    p.touch()
    return str(p), ftok(str(p))


def nattch(shmid: int) -> int:
    return next(s.nattch for s in read_sysvipc() if s.shmid == shmid)


def test_ftok_matches_glibc(tmp_path: Path) -> None:
    path, key = keyfile(tmp_path, "k")
    assert key == libc.ftok(path.encode(), 1) & 0xFFFFFFFF


def test_foreign_segment_with_project_id_1_refused_in_one_line(tmp_path: Path, segs: list[Shm]) -> None:
    _, key = keyfile(tmp_path, "other")
    segs.append(Shm(key, b"\xff" * 4096))
    s = FipsIpcProbe().sample()
    mine = [r for r in s.rejected if r.shmid == segs[0].shmid]
    assert len(mine) == 1 and "\n" not in mine[0].reason
    assert "initialized byte 255" in mine[0].reason
    assert not [g for g in s.segments if g.shm.shmid == segs[0].shmid]


def test_valid_segment_read_and_detached(tmp_path: Path, segs: list[Shm]) -> None:
    path, key = keyfile(tmp_path, "fipsipc_valid")
    b = Seg(exp=6, segments=2, readers=2)
    b.counts(1, 1)
    b.writer(0, 40, 39)
    b.reader(0, 0, 30, 29)
    segs.append(Shm(key, bytes(b.buf)))
    before = nattch(segs[0].shmid)
    s = FipsIpcProbe([path], discover=False).sample()
    assert not s.rejected
    (g,) = s.segments
    assert g.names == (path,) and g.shm.key == key and g.layout.slots == 64
    assert int(g.positions.writer_commit[0]) == 39 and int(g.positions.reader_commit[0, 0]) == 29
    assert nattch(segs[0].shmid) == before  # detached again: a removed segment is never kept alive by us


def test_removed_segment_still_read_while_attached(tmp_path: Path, segs: list[Shm]) -> None:
    _, key = keyfile(tmp_path, "fipsipc_rmid")
    segs.append(Shm(key, bytes(Seg(exp=5).buf)))
    segs[0].remove()  # IPC_RMID: the key becomes 0, the segment lives while attached
    s = FipsIpcProbe().sample()
    assert [g.shm.key for g in s.segments if g.shm.shmid == segs[0].shmid] == [0]
    segs[0].detach()
    s = FipsIpcProbe().sample()
    assert not [g for g in s.segments if g.shm.shmid == segs[0].shmid]


def test_lying_size_refused(tmp_path: Path, segs: list[Shm]) -> None:
    path, key = keyfile(tmp_path, "fipsipc_lies")
    b = Seg(exp=4)
    segs.append(Shm(key, bytes(b.buf), size=b.size + 4096))
    s = FipsIpcProbe([path], discover=False).sample()
    (r,) = s.rejected
    assert r.shmid == segs[0].shmid and f"size {b.size + 4096} bytes, but its header describes {b.size}" in r.reason


def test_missing_name_is_one_line(tmp_path: Path) -> None:
    s = FipsIpcProbe([str(tmp_path / "nope")], discover=False).sample()
    (r,) = s.rejected
    assert "nope" in r.reason and "ftok needs the shm_name file" in r.reason


def test_unavailable_without_sysvipc(tmp_path: Path) -> None:
    p = FipsIpcProbe(sysvipc=str(tmp_path / "none"))
    assert p.available()[0] is False
    assert str(tmp_path / "none") in p.sample().unavailable


def test_tap_bounds_a_lying_length(tmp_path: Path, segs: list[Shm]) -> None:
    import struct

    _, key = keyfile(tmp_path, "fipsipc_tap")
    b = Seg(exp=4, line_size=14, segments=1, readers=1)
    b.counts(1, 0)
    b.writer(0, 3, 3)
    data = b.first + 48 + b.reader_stride
    for slot, (length, text) in enumerate([(5, b"hello"), (60000, b"\x1b[31mlong!!!!!!!"), (3, b"end")]):
        off = data + slot * (b.line_size + 2)
        struct.pack_into("<H", b.buf, off, length)
        b.buf[off + 2:off + 2 + min(len(text), b.line_size)] = text[:b.line_size]
    segs.append(Shm(key, bytes(b.buf)))
    t = FipsIpcProbe().tap(segs[0].shmid, 0, 8)
    assert not t.error and not t.maybe_rewritten
    assert [(r.slot, r.payload, r.length_bad) for r in t.records] == [
        (0, b"hello", False), (1, b"\x1b[31mlong!!!!!", True), (2, b"end", False)]
    assert FipsIpcProbe().tap(segs[0].shmid, 5, 8).error == "no ring 5 (it has 1)"
    assert FipsIpcProbe().tap(-7, 0).error == "no segment with shmid -7"
