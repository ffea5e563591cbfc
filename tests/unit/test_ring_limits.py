"""fipstop._fips: what a domain refuses (bad options, full tables, closed
objects), the module-level functions, and that nothing leaks."""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop._fips import Consumer, Domain, FipsError, Producer

# -- options, limits, errors ----------------------------------------------------


def test_domain_options_and_errors(shm_dir: Path) -> None:
    with Domain("opt", shm_dir, max_rings=8, max_consumers=2, ring_capacity=8192, max_record=100, grace_s=1.5) as d:
        h = d.header
        assert (h.name, h.max_rings, h.max_consumers, h.ring_capacity, h.max_record) == ("opt", 8, 2, 8192, 100)
        assert h.grace_ns == 1_500_000_000 and h.version == _fips.LAYOUT_VERSION and h.ready == 1
        assert h.creator_pid == os.getpid()
        assert (d.name, d.max_rings, d.max_consumers, d.ring_capacity, d.max_record) == ("opt", 8, 2, 8192, 100)
        ca, cb = Consumer(d, "a"), Consumer(d, "b")
        with pytest.raises(FipsError) as ei:
            Consumer(d, "c")
        assert ei.value.code == _fips.ENOCONSUMER
        b_index = cb.index
        cb.close()  # a closed slot is reused
        with pytest.raises(FipsError, match="Consumer is closed"):
            _ = cb.index
        cc = Consumer(d, "c")
        assert cc.index == b_index != ca.index
    with Domain("opt2", shm_dir, max_consumers=2, ring_capacity=8192, max_record=100) as d:
        a1 = Consumer(d, "a")
        # A name held by a live handle, even in this process, is busy; once
        # that handle detached (as a crash would), the entry is resumed.
        with pytest.raises(FipsError) as ei:
            Consumer(d, "a")
        assert ei.value.code == _fips.EBUSY
        a1_index = a1.index
        a1.detach()
        a2 = Consumer(d, "a")
        assert a2.index == a1_index
    with pytest.raises(FipsError) as ei:
        Domain("opt", shm_dir, create=2)
    assert ei.value.code == __import__("errno").EEXIST and "fips.opt" in str(ei.value)
    with pytest.raises(FipsError) as ei:
        Domain("absent", shm_dir, create=False)
    assert "fips.absent" in str(ei.value)
    with pytest.raises(FipsError) as ei:
        Domain("bad/name", shm_dir)
    assert "invalid domain name" in str(ei.value)
    with pytest.raises(FipsError) as ei:
        Domain("caps", shm_dir, ring_capacity=5000)
    assert ei.value.code == _fips.ELAYOUT and "ring_capacity" in str(ei.value)
    with pytest.raises(ValueError):
        Domain("neg", shm_dir, max_rings=-1)
    with pytest.raises(ValueError):
        Domain("neg", shm_dir, grace_s=float("nan"))
    Domain.unlink("opt", shm_dir)
    assert not (shm_dir / "fips.opt").exists()
    with pytest.raises(FipsError):
        Domain.unlink("opt", shm_dir)


def test_ring_table_full(shm_dir: Path) -> None:
    with Domain("full", shm_dir, max_rings=1, ring_capacity=4096, max_record=64) as d:
        p = Producer(d)
        assert p.ring == 0
        err: list[BaseException] = []

        def other() -> None:
            try:
                p.log(b"x")
            except FipsError as e:
                err.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(err) == 1 and err[0].code == _fips.ENORING
        assert "ring table full" in str(err[0])


def test_thread_ring_slots_per_domain_limit(shm_dir: Path) -> None:
    """libfips keeps at most 4 rings per thread (one per domain)."""
    import errno

    ds = [Domain(f"s{i}", shm_dir, max_rings=2, ring_capacity=4096, max_record=64) for i in range(5)]
    try:
        for d in ds[:4]:
            assert Producer(d).log(b"x")
        with pytest.raises(FipsError) as ei:
            Producer(ds[4]).log(b"x")
        assert ei.value.code == errno.EMFILE and "4" in str(ei.value)
        ds[0].close()  # closing from this thread frees this thread's slot
        assert Producer(ds[4]).log(b"x")
    finally:
        for d in ds:
            d.close()


def test_producer_close_and_new_ring(shm_dir: Path) -> None:
    with Domain("pc", shm_dir, max_rings=4, ring_capacity=4096, max_record=64) as d:
        p = Producer(d)
        p.log(b"x")
        r = p.ring
        p.close()
        assert p.closed
        with pytest.raises(FipsError):
            p.log(b"y")
        with _fips.Monitor("pc", shm_dir) as m:
            from fipstop.ring import RingState, take_snapshot

            assert take_snapshot(m).ring_stat(r).state == RingState.CLOSED
        p2 = Producer(d)
        assert p2.log(b"z")


def test_module_functions(shm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _fips.shm_dir("/x/y") == "/x/y"
    monkeypatch.setenv("FIPS_SHM_DIR", "/some/where")
    assert _fips.shm_dir() == "/some/where"
    monkeypatch.delenv("FIPS_SHM_DIR")
    assert _fips.shm_dir(None) == "/dev/shm"
    assert "ring full" in _fips.strerror(_fips.EFULL)
    assert _fips.strerror(-_fips.EFULL) == _fips.strerror(_fips.EFULL)
    assert _fips.strerror(2) == os.strerror(2)
    a, b = _fips.mono_ns(), _fips.mono_ns()
    assert 0 < a <= b

    assert abs(_fips.now_ns() - time.time_ns()) < 10**9
    assert issubclass(FipsError, Exception) and not issubclass(FipsError, OSError)
    assert FipsError("x").code == 0


def test_no_leaks(shm_dir: Path) -> None:
    """Loops over every object type; traced Python memory must not grow."""
    d = Domain("leak", shm_dir, ring_capacity=1 << 16, max_record=256)
    p = Producer(d)
    c = Consumer(d, "c")
    m = _fips.Monitor("leak", shm_dir)

    def cycle() -> None:
        p.log(b"a" * 100)
        p.log("ü" * 10)
        p.log_batch([b"b" * 50, "c", bytearray(b"d")] * 10)
        b = c.read(64)
        assert b is not None
        for r in b:
            v = r.data
            _ = (r.seq, r.ts_ns, r.flags, r.lost, bytes(r), v.tobytes(), repr(r))
            v.release()
        b.payloads()
        c.release(b)
        m.snapshot()
        m.tap(p.ring, 8)
        _ = m.header, d.header, p.ring
        try:
            p.log(b"x" * 1000)
        except FipsError:
            pass
        try:
            _fips.Monitor("nope", shm_dir)
        except FipsError:
            pass
        try:
            _fips.validate_header(b"\0" * 100, 100)
        except FipsError:
            pass
        with Consumer(d, "tmp") as t:
            t.heartbeat()
        with _fips.Monitor("leak", shm_dir) as m2:
            m2.snapshot()

    for _ in range(200):
        cycle()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(2000):
            cycle()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert growth < 64 * 1024, growth
    m.close()
    d.close()


def test_no_native_leaks_rss(shm_dir: Path) -> None:
    """Native allocations (libfips handles, mappings) do not grow either."""

    def rss_kib() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cycle(i: int) -> None:
        with Domain("rss", shm_dir, max_rings=4, max_consumers=2, ring_capacity=4096, max_record=64) as d:
            p = Producer(d)
            c = Consumer(d, "c")
            # a new consumer starts at the floor: it first sees the records
            # the previous cycles' (closed) rings still hold; a closed ring is
            # reused only once drained.
            while (b := c.read()) is not None:
                c.release(b)
            assert p.log(b"x")
            b = c.read()
            assert b is not None
            assert [bytes(r) for r in b] == [b"x"]
            c.release(b)
            with _fips.Monitor("rss", shm_dir) as m:
                m.snapshot()

    for i in range(300):
        cycle(i)
    gc.collect()
    base = rss_kib()
    for i in range(3000):
        cycle(i)
    gc.collect()
    assert rss_kib() - base < 4096
