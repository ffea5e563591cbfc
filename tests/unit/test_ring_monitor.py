"""fipstop._fips.Monitor and fipstop.ring: read-only attach, snapshots, derived
values, attach errors."""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fipstop
from fipstop import _fips, ring
from fipstop._fips import Consumer, Domain, FipsError, Monitor, Producer
from fipstop.ring import ConsumerState, RingState, take_snapshot

# where this fipstop was imported from (children import the same one; -P keeps
# the current directory out of their sys.path)
PKG_PARENT = str(Path(fipstop.__file__).parent.parent)


@pytest.fixture
def domain_dir(shm_dir: Path) -> Path:
    return shm_dir


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def make_domain_file(d: Path, name: str = "v", **opts: int) -> Path:
    """A valid, closed domain file; returns its path."""
    o = dict(max_rings=4, max_consumers=2, ring_capacity=4096, max_record=256)
    o.update(opts)
    with Domain(name, d, **o) as dom:
        Producer(dom).log(b"hello")
    return d / f"fips.{name}"


# -- dtypes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields,size,dtype",
    [
        ("RING_STAT_FIELDS", "RING_STAT_SIZE", ring.ring_stat_dtype),
        ("CONSUMER_STAT_FIELDS", "CONSUMER_STAT_SIZE", ring.consumer_stat_dtype),
        ("POS_STAT_FIELDS", "POS_STAT_SIZE", ring.pos_stat_dtype),
    ],
)
def test_dtypes_cover_the_c_structs(fields: str, size: str, dtype) -> None:
    spec = getattr(_fips, fields)
    itemsize = getattr(_fips, size)
    dt = dtype()
    assert dt.itemsize == itemsize
    end = 0
    for name, off, fmt in spec:
        f = np.dtype(fmt)
        assert dt.fields[name][1] == off
        align = f.itemsize if f.kind == "u" else 1
        assert off >= end and off - end < align, name  # gaps only for alignment
        end = off + f.itemsize
    assert itemsize - end < 8
    # ring stat spot checks against fips.h's declaration order
    if fields == "RING_STAT_FIELDS":
        names = [f[0] for f in spec]
        assert names[:6] == ["index", "state", "generation", "pid", "tid", "thread_name"]
        assert dt["thread_name"] == np.dtype("S32")


# -- snapshot contents ----------------------------------------------------------------


def test_snapshot_matches_what_was_done(domain_dir: Path) -> None:
    with Domain("snap", domain_dir, max_rings=8, max_consumers=4, ring_capacity=8192, max_record=256) as d:
        p = Producer(d)
        p.set_name("main-writer")
        c1 = Consumer(d, "ips")
        c2 = Consumer(d, "archiver")
        for i in range(40):
            p.log(b"r%02d" % i + b"." * 60)  # 24 + 64 = 88 bytes each
        b = c1.read(10)
        assert b is not None
        c1.release(b)
        with Monitor("snap", domain_dir) as m:
            assert m.name == "snap" and m.max_rings == 8 and m.max_consumers == 4
            assert m.ring_capacity == 8192 and m.max_record == 256
            assert m.path == str(domain_dir / "fips.snap")
            s = take_snapshot(m)
        assert s.name == "snap" and s.path == str(domain_dir / "fips.snap")
        assert (s.max_rings, s.max_consumers, s.ring_capacity_bytes, s.max_record_bytes) == (8, 4, 8192, 256)
        assert s.rings.shape == (8,) and s.consumers.shape == (4,) and s.pos.shape == (4, 8)
        assert not s.rings.flags.writeable
        assert list(s.active_ring_indices()) == [p.ring]
        r = s.ring_stat(p.ring)
        assert r.state == RingState.ACTIVE and r.state_label == "active"
        assert (r.pid, r.tid) == (os.getpid(), __import__("threading").get_native_id())
        assert r.thread_name == "main-writer"
        assert r.records_committed == 40 and r.bytes_committed == 40 * 63
        assert r.records_dropped == 0 and r.bytes_dropped == 0
        assert r.head == 40 * 88 and r.reserved == r.head
        assert r.created_ns > 0 and r.last_commit_ns >= r.created_ns and r.closed_ns == 0
        # fill: the slowest active consumer (archiver) has read nothing
        assert r.used_bytes == 40 * 88
        assert r.fill_fraction == pytest.approx(40 * 88 / 8192)
        assert s.fill_fraction()[p.ring] == pytest.approx(r.fill_fraction)
        cons = {c.name: c for c in s.consumer_stats()}
        assert set(cons) == {"ips", "archiver"}
        assert cons["ips"].state == ConsumerState.ACTIVE and cons["ips"].pid == os.getpid()
        assert cons["ips"].records_released == 10 and cons["ips"].batches_released == 1
        assert cons["ips"].lag_records == 30 and cons["archiver"].lag_records == 40
        lag = s.lag_records()
        assert lag[c1.index, p.ring] == 30 and lag[c2.index, p.ring] == 40
        assert (lag[:, [i for i in range(8) if i != p.ring]] == -1).all()  # FREE rings
        free_c = [i for i in range(4) if i not in (c1.index, c2.index)]
        assert (lag[free_c] == -1).all()
        assert s.lag_bytes()[c1.index, p.ring] == 30 * 88
        pos = s.pos_stat(c1.index, p.ring)
        assert (pos.released, pos.released_seq, pos.records_released, pos.lost_seen) == (10 * 88, 10, 10, 0)
        age = s.heartbeat_age_ns()
        assert 0 <= age[c1.index] < 30 * 10**9 and age[free_c[0]] == -1
        assert s.taken_mono_ns > 0 and abs(s.taken_realtime_ns - _fips.now_ns()) < 60 * 10**9
        # the archiver catches up: fill drops to what ips still holds
        while (b := c2.read()) is not None:
            c2.release(b)
        with Monitor("snap", domain_dir) as m:
            s2 = take_snapshot(m)
        assert s2.ring_stat(p.ring).used_bytes == 30 * 88
        assert s2.consumer_stat(c2.index).lag_records == 0
        # closing a consumer: it no longer counts for fill or lag
        i1 = c1.index
        c1.close()
        with Monitor("snap", domain_dir) as m:
            s3 = take_snapshot(m)
        assert s3.consumer_stat(i1).state == ConsumerState.CLOSED
        assert s3.lag_records()[i1, p.ring] == -1
        assert s3.ring_stat(p.ring).used_bytes == 0


def test_fill_without_consumers_and_high_water(domain_dir: Path) -> None:
    with Domain("fill", domain_dir, max_rings=2, ring_capacity=4096, max_record=256) as d:
        p = Producer(d)
        n = 0
        while p.log(b"z" * 40):  # 64 bytes a record: no consumer, so it fills
            n += 1
        assert n == 4096 // 64
        with Monitor("fill", domain_dir) as m:
            s = take_snapshot(m)
        r = s.ring_stat(p.ring)
        assert r.fill_fraction == 1.0 and r.records_dropped == 1 and r.full_events == 1
        assert r.high_water_fraction == 1.0
        assert s.high_water_bytes()[p.ring] == 4096


def test_tap(domain_dir: Path) -> None:
    with Domain("tap", domain_dir, max_rings=2, ring_capacity=4096, max_record=256) as d:
        p = Producer(d)
        for i in range(10):
            p.log(b"t%d" % i)
        with Monitor("tap", domain_dir) as m:
            recs, lapped = m.tap(p.ring, 4)
            assert lapped == 0
            assert [(r[0], r[4]) for r in recs] == [(i, b"t%d" % i) for i in range(6, 10)]
            assert all(r[2] == 0 and r[3] == 0 and r[1] > 0 for r in recs)
            recs, _ = m.tap(p.ring, 100)
            assert len(recs) == 10
            assert m.tap(1, 5) == ([], 0)  # a FREE ring
            with pytest.raises(IndexError):
                m.tap(2)
            with pytest.raises(ValueError):
                m.tap(0, 0)


def test_monitor_closed_and_header(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir)
    m = Monitor(path=str(path))
    h = m.header
    assert h.name == "v" and h.max_rings == 4 and h.file_size == path.stat().st_size
    assert h.ring_table_off == _fips.HDR_SIZE
    m.close()
    assert m.closed
    with pytest.raises(FipsError, match="Monitor is closed") as ei:
        m.snapshot()
    assert ei.value.code == _fips.ECLOSED
    m.close()
    with pytest.raises(TypeError):
        Monitor()
    with pytest.raises(TypeError):
        Monitor("v", path=str(path))


def test_list_domains(domain_dir: Path) -> None:
    make_domain_file(domain_dir, "b")
    make_domain_file(domain_dir, "a")
    (domain_dir / "fips.").write_bytes(b"")  # empty name
    (domain_dir / ".fips.a.1.2.tmp").write_bytes(b"")
    (domain_dir / "other").write_bytes(b"")
    (domain_dir / "fips.dir").mkdir()
    (domain_dir / "fips.bad name").write_bytes(b"")
    os.symlink("/nonexistent", domain_dir / "fips.link")
    assert ring.list_domains(domain_dir) == ["a", "b", "link"]
    assert ring.list_domains(str(domain_dir)) == ["a", "b", "link"]
    with pytest.raises(FileNotFoundError):
        ring.list_domains(domain_dir / "missing")
    snaps = dict(ring.iter_snapshots(domain_dir))
    assert isinstance(snaps["a"], ring.DomainSnapshot)
    assert isinstance(snaps["link"], FipsError) and "symlink" in str(snaps["link"])


def test_snapshot_domain_helper(domain_dir: Path) -> None:
    make_domain_file(domain_dir, "h")
    s = ring.snapshot_domain("h", domain_dir)
    assert s.name == "h" and len(s.ring_stats()) == 1
    assert s.ring_stats()[0].state == RingState.CLOSED
    assert s.consumer_stats() == [] and s.pos_stats() == []


# -- read-only mapping -----------------------------------------------------------------


def test_monitor_mapping_is_read_only(domain_dir: Path) -> None:
    """Writing through the monitor's mapping kills the writer with SIGSEGV."""
    path = make_domain_file(domain_dir, "ro")
    code = textwrap.dedent(
        f"""
        import ctypes
        from fipstop import _fips
        m = _fips.Monitor(path={str(path)!r})
        addr = m._mapping_address()
        assert ctypes.string_at(addr, 8) == b"FIPSDOM1"  # readable
        ctypes.memset(addr, 0, 1)
        print("wrote")
        """
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], env=child_env(), capture_output=True, timeout=60)
    asan_caught = proc.returncode != 0 and b"AddressSanitizer" in proc.stderr and b"SEGV" in proc.stderr
    assert proc.returncode == -signal.SIGSEGV or asan_caught, (proc.returncode, proc.stdout, proc.stderr)
    assert b"wrote" not in proc.stdout
    assert path.read_bytes()[:8] == b"FIPSDOM1"


# -- attach errors ------------------------------------------------------------------------

HDR = struct.Struct("<QIIQIIQII")  # magic .. ready (48 bytes)


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def attach_error(path: Path) -> FipsError:
    with pytest.raises(FipsError) as ei:
        Monitor(path=str(path))
    e = ei.value
    msg = str(e)
    assert str(path) in msg and "\n" not in msg
    # the read-write open refuses it the same way
    name = path.name[len("fips.") :]
    with pytest.raises(FipsError) as ei2:
        Domain(name, path.parent, create=False)
    assert ei2.value.code == e.code and str(path) in str(ei2.value)
    return e


def test_attach_truncated(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "tr")
    size = path.stat().st_size
    os.truncate(path, size - 1)
    e = attach_error(path)
    assert e.code == _fips.ETRUNC and "truncated" in str(e)
    os.truncate(path, 100)
    e = attach_error(path)
    assert e.code == _fips.ETRUNC
    os.truncate(path, 0)
    assert attach_error(path).code == _fips.ETRUNC


def test_attach_longer_than_header_says(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "lg")
    os.truncate(path, path.stat().st_size + 4096)
    assert attach_error(path).code == _fips.ELAYOUT


def test_attach_wrong_magic(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "mg")
    patch(path, 0, b"NOTFIPS!")
    e = attach_error(path)
    assert e.code == _fips.EMAGIC and "magic" in str(e)


def test_attach_wrong_version(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "vs")
    other = _fips.LAYOUT_VERSION + 1
    patch(path, 8, struct.pack("<I", other))
    e = attach_error(path)
    assert e.code == _fips.EVERSION and f"version {other}" in str(e)


@pytest.mark.parametrize(
    "offset,value,fmt",
    [
        (12, 100, "<I"),  # hdr_size
        (24, 0, "<I"),  # max_rings
        (24, 1 << 20, "<I"),  # max_rings beyond the limit
        (28, 65, "<I"),  # max_consumers beyond the limit
        (32, 5000, "<Q"),  # ring_capacity not a power of two
        (32, 1 << 40, "<Q"),  # ring_capacity huge
        (40, 1 << 23, "<I"),  # max_record > capacity / 4
        (48, 8192, "<Q"),  # ring_table_off
        (72, 0, "<Q"),  # data_off
        (16, 1 << 62, "<Q"),  # file_size
    ],
)
def test_attach_impossible_sizes_and_offsets(domain_dir: Path, offset: int, value: int, fmt: str) -> None:
    path = make_domain_file(domain_dir, "lay")
    patch(path, offset, struct.pack(fmt, value))
    assert attach_error(path).code == _fips.ELAYOUT


def test_attach_unterminated_name_and_not_ready(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "nm")
    patch(path, 112, b"A" * 64)
    assert attach_error(path).code == _fips.ELAYOUT
    path = make_domain_file(domain_dir, "rd")
    patch(path, 44, struct.pack("<I", 0))
    e = attach_error(path)
    assert e.code == _fips.ENOTREADY


def test_attach_missing_and_not_regular(domain_dir: Path) -> None:
    with pytest.raises(FipsError) as ei:
        Monitor("missing", domain_dir)
    assert str(domain_dir / "fips.missing") in str(ei.value)
    (domain_dir / "fips.dir").mkdir()
    with pytest.raises(FipsError):
        Monitor("dir", domain_dir)
    with pytest.raises(FipsError) as ei:
        Monitor("bad/name", domain_dir)
    assert "invalid domain name" in str(ei.value)


@pytest.mark.root
def test_attach_file_of_another_owner(domain_dir: Path) -> None:
    path = make_domain_file(domain_dir, "own")
    os.chown(path, 65534, 65534)  # nobody
    e = attach_error(path)
    assert e.code == _fips.EOWNER and "uid 65534" in str(e)
    with Monitor(path=str(path), any_owner=True) as m:  # explicitly allowed
        assert m.name == "own"


def test_symlink_refused(domain_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    os.symlink(target, domain_dir / "fips.sl")
    with pytest.raises(FipsError) as ei:
        Domain("sl", domain_dir)  # create through a dangling symlink: refused
    assert "symlink" in str(ei.value) and str(domain_dir / "fips.sl") in str(ei.value)
    assert not target.exists()
    real = make_domain_file(domain_dir, "real")
    os.unlink(domain_dir / "fips.sl")
    os.symlink(real, domain_dir / "fips.sl")
    with pytest.raises(FipsError) as ei:
        Domain("sl", domain_dir)
    assert "symlink" in str(ei.value)
    with pytest.raises(FipsError) as ei:
        Monitor("sl", domain_dir)
    assert "symlink" in str(ei.value) and str(domain_dir / "fips.sl") in str(ei.value)


def test_file_mode(domain_dir: Path) -> None:
    old = os.umask(0o077)  # the mode is set despite the umask
    try:
        with Domain("mode", domain_dir, max_rings=1, ring_capacity=4096, max_record=64):
            pass
        with Domain("mode2", domain_dir, max_rings=1, ring_capacity=4096, max_record=64, mode=0o600):
            pass
        with Domain("mode3", domain_dir, max_rings=1, ring_capacity=4096, max_record=64, mode=0o644, gid=0):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((domain_dir / "fips.mode").stat().st_mode) == 0o640
    assert stat.S_IMODE((domain_dir / "fips.mode2").stat().st_mode) == 0o600
    st = (domain_dir / "fips.mode3").stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 and (st.st_gid == 0 or os.geteuid() != 0)


# -- C flags ---------------------------------------------------------------------------


def test_cflags_and_libs() -> None:
    env = child_env()
    out = subprocess.run(
        [sys.executable, "-P", "-m", "fipstop.ring", "--cflags"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    inc = out.stdout.strip()
    assert inc.startswith("-I") and (Path(inc[2:]) / "fips.h").is_file()
    out = subprocess.run(
        [sys.executable, "-P", "-m", "fipstop.ring", "--libs"], env=env, capture_output=True, text=True, timeout=60
    )
    lib = Path(fipstop.__file__).resolve().parent / "lib" / "libfips.so"
    if lib.exists():
        assert out.returncode == 0
        assert f"-L{lib.parent}" in out.stdout and "-lfips" in out.stdout and "-Wl,-rpath," in out.stdout
    else:
        assert out.returncode == 1
        assert out.stdout == ""
        assert "make lib" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, "-P", "-m", "fipstop.ring"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2


def test_thread_name_carries_no_stack_bytes(shm_dir) -> None:
    """The name slot is 32 bytes: what follows the NUL must be zeros, not
    whatever was on the producer's stack (it is shared memory)."""
    from fipstop._fips import Domain, Monitor, Producer
    from fipstop.ring import DomainSnapshot

    with Domain("names", shm_dir) as dom:
        Producer(dom).log(b"x")
        mon = Monitor("names", shm_dir)
        snap = DomainSnapshot.from_raw(mon.snapshot(), mon.header, mon.path)
        raw = snap.rings["thread_name"][0]
        assert raw and b"\x00" not in raw  # numpy strips trailing NULs only
        mon.close()
