"""ThreadSampler against fixture /proc trees: classification, shares, locks."""

from __future__ import annotations

from pathlib import Path

import pytest

from fipstop.probes.threads import CATEGORIES, ThreadSampler, classify, syscall_table

PID = 500
X86 = syscall_table("x86_64")


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns


def write_thread(root: Path, tid: int, *, name: str = "worker", run: int = 0, wait: int = 0,
                 syscall: str | None = "running", wchan: str = "0", state: str = "S") -> None:
    d = root / str(PID) / "task" / str(tid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "comm").write_text(name + "\n")
    (d / "schedstat").write_text(f"{run} {wait} 1\n")
    (d / "wchan").write_text(wchan)
    (d / "stat").write_text(f"{tid} ({name}) {state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0\n")
    if syscall is not None:
        (d / "syscall").write_text(syscall + "\n")
    elif (d / "syscall").exists():
        (d / "syscall").unlink()


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    (root / str(PID) / "task").mkdir(parents=True)
    (root / str(PID) / "comm").write_text("contend\n")
    return root


def futex(addr: int, op: int) -> str:
    return f"202 {addr:#x} {op:#x} 0x2 0x0 0x0 0x0 0x7ffd0 0x7f00"


def sampler(proc: Path, clock: Clock, **kw) -> ThreadSampler:
    kw.setdefault("hz", 0)  # no background thread: the test ticks
    return ThreadSampler(PID, procfs_root=str(proc), clock=clock, machine="x86_64", **kw)


def test_classify_futex_ops_and_syscalls():
    assert classify("S", 202, (0x1000, 0x80), "", X86) == ("lock", "futex FUTEX_WAIT", 0x1000)
    assert classify("S", 202, (0x1000, 0x0), "", X86)[0] == "lock"
    assert classify("S", 202, (0x1000, 6 | 128), "", X86)[0] == "lock"  # FUTEX_LOCK_PI_PRIVATE
    # condition variables, semaphores, join: waiting for work, not a contended lock
    cat, _, addr = classify("S", 202, (0x1000, 9 | 128 | 256), "", X86)
    assert (cat, addr) == ("sleep", 0)
    assert classify("S", 230, (), "hrtimer_nanosleep", X86)[0] == "sleep"
    assert classify("S", 232, (), "ep_poll", X86)[0] == "sleep"
    assert classify("S", 44, (), "unix_wait_for_peer", X86) == ("io", "sendto unix_wait_for_peer", 0)
    assert classify("S", 7, (), "do_sys_poll", X86)[0] == "io"
    assert classify("D", -1, (), "folio_wait_bit_common", X86)[0] == "io"  # a page fault
    assert classify("S", -1, (), "", X86)[0] == "other"
    assert classify("S", 9999, (), "", X86)[0] == "other"
    assert classify("S", 72, (), "posix_lock_inode_wait", X86)[0] == "lock"  # fcntl F_SETLKW
    assert classify("S", 72, (), "pipe_read", X86)[0] == "io"


def test_classify_without_syscall_uses_state_and_wchan():
    assert classify("S", None, (), "futex_do_wait", X86)[0] == "lock"
    assert classify("S", None, (), "do_nanosleep", X86)[0] == "sleep"
    assert classify("D", None, (), "some_driver_fn", X86)[0] == "io"
    assert classify("S", None, (), "mystery", X86)[0] == "other"


def test_aarch64_numbers():
    arm = syscall_table("aarch64")
    assert classify("S", 98, (0x10, 0x80), "", arm)[0] == "lock"
    assert classify("S", 206, (), "", arm)[0] == "io"
    assert classify("S", 115, (), "", arm)[0] == "sleep"


def test_split_from_schedstat_and_ticks_adds_up(proc: Path):
    clock = Clock()
    write_thread(proc, PID, name="main", syscall="230 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f00",
                 wchan="hrtimer_nanosleep")
    write_thread(proc, PID + 1, name="w1")
    s = sampler(proc, clock)
    assert s.available() == (True, "")
    s.start()
    # w1: blocked on a mutex for 60 ticks, in sendto for 20, runnable for 20
    for i in range(100):
        if i < 60:
            write_thread(proc, PID + 1, name="w1", syscall=futex(0xABC0, 0x80), wchan="futex_do_wait")
        elif i < 80:
            write_thread(proc, PID + 1, name="w1", syscall="44 0x3 0x0 0x0 0x0 0x0 0x0 0x1 0x2",
                         wchan="unix_wait_for_peer")
        else:
            write_thread(proc, PID + 1, name="w1", syscall="running")
        clock.ns += 10_000_000
        s.tick()
    # over the second: w1 ran 100 ms and waited runnable 100 ms
    write_thread(proc, PID + 1, name="w1", run=100_000_000, wait=100_000_000, syscall="running")
    r = s.sample()
    s.close()
    assert r.available and r.duration_ns == 1_000_000_000
    assert r.method == "syscall+wchan"
    by = {t.tid: t for t in r.threads}
    w1 = by[PID + 1]
    assert sum(w1.shares()) == pytest.approx(100.0)
    assert w1.oncpu_pct == pytest.approx(10.0)
    assert w1.runqueue_pct == pytest.approx(10.0)
    # the 80 % blocked splits 60:20 between the lock and the socket send
    assert w1.lock_pct == pytest.approx(60.0)
    assert w1.io_pct == pytest.approx(20.0)
    assert w1.top_waits[0] == ("futex FUTEX_WAIT", 60)
    main = by[PID]
    assert main.sleep_pct == pytest.approx(100.0)
    assert [lw.address for lw in r.locks] == [0xABC0]
    lw = r.locks[0]
    assert lw.waiter_tids == (PID + 1,)
    assert lw.waits == 1  # one uninterrupted wait episode
    assert lw.wait_ns == pytest.approx(600_000_000, rel=0.01)
    split = r.process_split()
    assert sum(split.values()) == pytest.approx(100.0)
    assert set(split) == set(CATEGORIES)


def test_second_interval_starts_fresh(proc: Path):
    clock = Clock()
    write_thread(proc, PID, syscall=futex(0x10, 0x80), wchan="futex_do_wait")
    s = sampler(proc, clock)
    s.start()
    s.tick()
    clock.ns += 500_000_000
    assert s.sample().threads[0].lock_pct == pytest.approx(100.0)
    write_thread(proc, PID, run=250_000_000, syscall="running")
    s.tick()
    clock.ns += 500_000_000
    r = s.sample()
    assert r.locks == ()
    t = r.threads[0]
    assert t.oncpu_pct == pytest.approx(50.0)
    assert t.lock_pct == 0.0 and t.other_pct == pytest.approx(50.0)  # blocked but never seen: other
    s.close()


def test_without_syscall_access_falls_back_to_state_and_wchan(proc: Path):
    clock = Clock()
    write_thread(proc, PID, syscall=None, wchan="futex_do_wait", state="S")
    s = sampler(proc, clock)
    s.start()
    s.tick()
    clock.ns += 100_000_000
    r = s.sample()
    s.close()
    assert r.method == "state+wchan"
    assert r.threads[0].lock_pct == pytest.approx(100.0)
    assert any("syscall not readable" in n for n in r.notes)


def test_threads_come_and_go(proc: Path):
    clock = Clock()
    write_thread(proc, PID)
    s = sampler(proc, clock, rescan_s=0)
    s.start()
    write_thread(proc, PID + 7, name="late", syscall=futex(0x20, 0x80))
    clock.ns += 10_000_000
    s.tick()
    clock.ns += 10_000_000
    r = s.sample()
    assert {t.tid for t in r.threads} == {PID, PID + 7}
    late = next(t for t in r.threads if t.tid == PID + 7)
    assert late.wall_ns == 10_000_000  # from when it was first seen
    import shutil
    shutil.rmtree(proc / str(PID) / "task" / str(PID + 7))
    clock.ns += 10_000_000
    s.tick()
    r = s.sample()
    assert {t.tid for t in r.threads} == {PID}
    s.close()


def test_max_threads_is_reported(proc: Path):
    clock = Clock()
    for i in range(5):
        write_thread(proc, PID + i)
    s = sampler(proc, clock, max_threads=3)
    s.start()
    clock.ns += 10_000_000
    r = s.sample()
    s.close()
    assert len(r.threads) == 3 and r.untracked_threads == 2


def test_missing_process_degrades_with_reason(proc: Path):
    s = ThreadSampler(PID + 1000, procfs_root=str(proc), hz=0)
    ok, why = s.available()
    assert not ok and "no process" in why
    r = s.sample()
    assert not r.available and "no process" in r.reason
    s.close()


def test_no_schedstat_says_so(proc: Path):
    write_thread(proc, PID)
    (proc / str(PID) / "task" / str(PID) / "schedstat").unlink()
    ok, why = ThreadSampler(PID, procfs_root=str(proc), hz=0).available()
    assert not ok and "schedstat" in why


def test_background_sampler_on_a_real_process_measures_itself():
    import os
    import threading
    import time

    ev = threading.Event()
    workers = [threading.Thread(target=ev.wait, daemon=True) for _ in range(3)]
    for w in workers:
        w.start()
    s = ThreadSampler(os.getpid(), hz=200)
    s.start()
    time.sleep(1.0)  # one stall of the sampler thread must not leave too few looks
    r = s.sample()
    s.close()
    ev.set()
    assert r.available and r.hz_achieved > 20
    assert r.sampler_cpu_pct > 0
    assert all(abs(sum(t.shares()) - 100.0) < 1e-6 for t in r.threads)
    # the sampler does not sample itself
    assert not any(t.name.startswith("fipstop-threads") for t in r.threads)
    waiting = [t for t in r.threads if t.tid in {w.native_id for w in workers}]
    assert len(waiting) == 3 and all(t.sleep_pct > 50 for t in waiting)
