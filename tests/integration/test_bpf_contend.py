"""The bpf profiler on a C program whose threads contend on one mutex
(bench/profile/contend.c, real bcc and tracepoints): most of the time the
kernel says the threads were blocked (schedstat) is lock wait, the top lock is that mutex (its address is the
``mu`` symbol of the binary, relocated), on-CPU samples name the program's
own function, and nothing was lost silently."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fipstop.probes.bpf_decode import PREEMPTED_FRAME, WOKEN_FRAME

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.bpf]

REPO = Path(__file__).resolve().parents[2]
THREADS = 8


def _contend() -> Path:
    from fipstop.bench.cbuild import build_c

    binary, why, _ = build_c("profile-contend", (REPO / "bench" / "profile" / "contend.c", REPO / "fipstop" / "csrc" / "fips.c"))
    if binary is None:
        pytest.skip(f"cannot build contend: {why}")
    return binary


def _symbol_addr(binary: Path, pid: int, name: str) -> int:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to locate the mutex")
    out = subprocess.run([nm, str(binary)], capture_output=True, text=True, check=True).stdout
    off = next(int(ln.split()[0], 16) for ln in out.splitlines() if ln.split()[-1:] == [name])
    real = os.path.realpath(binary)
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and os.path.realpath(parts[5]) == real and int(parts[2], 16) == 0:
            return int(parts[0].split("-")[0], 16) + off
    raise AssertionError("binary not mapped")


def _schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread: (ns on a CPU, ns runnable waiting for one), from /proc/PID/task/TID/schedstat."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            run, rq, _ = (int(x) for x in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out[int(task.name)] = (run, rq)
    return out


def test_contended_mutex_is_the_top_lock(tmp_path: Path) -> None:
    from fipstop.probes.bpf import BpfProfiler

    ok, why = BpfProfiler(os.getpid()).available()
    if not ok:
        pytest.skip(f"bpf profiler unavailable: {why}")
    binary = _contend()
    shm = tmp_path / "shm"
    shm.mkdir()
    proc = subprocess.Popen([str(binary), "--threads", str(THREADS), "--seconds", "3", "--hold", "2000",
                             "--shm-dir", str(shm), "--wait"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    # every off-CPU period followed (off_sample=1): per thread, 1 in 8 of ~150 waits of ~14 ms would be noise
    prof = BpfProfiler(proc.pid, oncpu_hz=99, off_sample=1)
    try:
        assert proc.stdout.readline().startswith("ready")
        mu = _symbol_addr(binary, proc.pid, "mu")
        prof.start()
        assert prof.state == "running", prof.reason
        # the kernel's account (schedstat) spans the profile's interval: from before its first sample to after
        # its second, so the interval lies inside it
        t0 = time.monotonic()
        sched0 = _schedstat(proc.pid)
        prof.sample()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(2.0)
        s = prof.sample()
        sched1 = _schedstat(proc.pid)
        window_ns = (time.monotonic() - t0) * 1e9
    finally:
        prof.close()
        if proc.poll() is None and not proc.stdin.closed:
            try:
                proc.stdin.write("go\n")  # start it if we failed before, so it ends
                proc.stdin.close()
            except OSError:
                pass
        out = proc.stdout.read()
        proc.wait(timeout=30)
    assert proc.returncode == 0, out
    assert s.available and s.source == "bpf", s.reason
    assert s.locks, "no lock waits seen"
    top = s.locks[0]
    assert top.address == mu, f"top lock {top.address:#x} is not the mutex {mu:#x} ({top.region})"
    assert top.region.endswith("data"), top.region
    assert len(top.waiter_tids) == THREADS
    assert top.holder_stacks, "no waker stacks for the mutex"
    # each thread waits on the lock for at least half the window (8 threads on few CPUs, one holder at a time)
    per_tid: dict[int, int] = {}
    for st in top.stacks:
        per_tid[st.tid] = per_tid.get(st.tid, 0) + st.value
        assert st.thread.startswith("contend-"), st.thread
    # (a stack lost to a hash collision is counted and shown as such: allow a few)
    in_lock_wait = sum(st.value for st in top.stacks if "lll_lock_wait" in st.frames[-1])
    assert in_lock_wait >= 0.9 * top.wait_ns, [st.frames for st in top.stacks]
    # callers past the leaf (stack scanning: glibc has no frame pointers)
    assert any(st.frames[:1] == ("work",) for st in top.stacks), [st.frames for st in top.stacks]
    assert any("work" in st.frames for st in top.holder_stacks), [st.frames for st in top.holder_stacks]
    # against the kernel's own account of a window that holds the profile's interval (schedstat: time on a CPU,
    # time waiting for one; the rest is time blocked, and a worker blocks only on the mutex, or on stdin before
    # "go"): per thread, the lock wait is never more than the time it was blocked - a wait is split at the
    # interval's edges, so one that began before the first sample or is still in progress at the second counts
    # only its part inside - and all together it is most of the blocked time.  Not a fixed share of the window:
    # on a busy host the threads wait for a CPU more and for the lock less (a 0.5 share failed at load 9).
    # Slack per thread: 5 ms plus 2 % of the window: the profiler's interval edges are set when its samples are
    # taken, the schedstat window when the test reads /proc, and on a loaded host the two moments differ by tens
    # of ms (CI: a wait 19 ms over the blocked time with 5 ms of slack, in a 2.07 s window).
    blocked: dict[int, float] = {}
    for tid in per_tid:
        (run0, rq0), (run1, rq1) = sched0[tid], sched1[tid]
        blocked[tid] = window_ns - (run1 - run0) - (rq1 - rq0)
    slack = 5e6 + 0.02 * window_ns
    for tid, wait in per_tid.items():
        assert wait <= blocked[tid] + slack, (tid, wait, blocked[tid], window_ns)
    total_wait, blocked_ns = sum(per_tid.values()), sum(blocked.values())
    assert 0.5 * blocked_ns <= total_wait <= 1.1 * blocked_ns + 5e6, (per_tid, blocked, window_ns)
    # off-CPU: the futex wait dominates, and is visible with its kernel stack
    # (of the time blocked: waiting for a CPU, preempted or just woken, is off-CPU too and grows with the load)
    blocked = [st for st in s.offcpu if st.frames[-1:] not in ((PREEMPTED_FRAME,), (WOKEN_FRAME,))]
    futex_ns = sum(st.value for st in blocked if "futex_wait_[k]" in st.frames)
    assert futex_ns >= 0.5 * sum(st.value for st in blocked), blocked[:3]
    # on-CPU samples name the worker function (the spin under the lock)
    assert s.oncpu and s.oncpu_unit == "samples" and s.oncpu_hz == 99
    assert any("work" in st.frames for st in s.oncpu), [st.frames for st in s.oncpu[:5]]
    for k in ("offcpu_map_full", "oncpu_map_full", "futex_map_full", "wake_map_full", "start_map_full",
              "ustack_enomem", "kstack_enomem"):
        assert s.extra[k] == 0, (k, s.extra)
    assert s.duration_ns > 0


def test_failure_is_a_reason_not_an_exception() -> None:
    from fipstop.probes.bpf import BpfProfiler

    p = BpfProfiler(2**22 + 12345)  # no such process
    ok, why = p.available()
    assert not ok and "no process" in why
    p.start()
    s = p.sample()
    assert not s.available and "no process" in s.reason
    p.close()


def test_a_wait_longer_than_an_interval_is_split_at_its_edges() -> None:
    """One thread blocked on a mutex across profile intervals: the wait begins in the first, lasts through the
    second and ends in the third. Each interval shows its own part of the wait only - the part in progress at
    its end included, never more than the interval lasted - and the parts add up to the whole wait (the
    program's own clock around pthread_mutex_lock is the oracle): none counted twice, none lost. (Counting a wait when it
    ends put all of it in the third interval, longer than that interval, and none in the second.)"""
    from fipstop.bench.cbuild import build_c
    from fipstop.probes.bpf import BpfProfiler

    ok, why = BpfProfiler(os.getpid()).available()
    if not ok:
        pytest.skip(f"bpf profiler unavailable: {why}")
    binary, why, _ = build_c("long-wait", (REPO / "tests" / "progs" / "long_wait.c",), extra=("-pthread",))
    if binary is None:
        pytest.skip(f"cannot build long_wait: {why}")
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    prof = BpfProfiler(proc.pid, oncpu_hz=0, off_sample=1)
    try:
        assert proc.stdout.readline().startswith("ready")
        prof.start()
        assert prof.state == "running", prof.reason
        prof.sample()
        proc.stdin.write("lock\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line.startswith("locking"), line
        tid = int(line.split()[1])
        time.sleep(0.2)
        s1 = prof.sample()  # the wait began in this interval, and is in progress at its end
        time.sleep(0.6)
        s2 = prof.sample()  # blocked all through
        time.sleep(0.2)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        got = proc.stdout.readline()
        assert got.startswith("got"), got
        wait_ns = int(got.split()[1])
        time.sleep(0.3)
        s3 = prof.sample()  # it ended in this one
    finally:
        prof.close()
        if proc.poll() is None:
            try:
                proc.stdin.write("lock\ngo\n")
                proc.stdin.close()
            except OSError:
                pass
        proc.wait(timeout=30)

    def waited(s) -> int:
        assert s.available, s.reason
        return sum(st.value for lw in s.locks for st in lw.stacks if st.tid == tid)

    w1, w2, w3 = waited(s1), waited(s2), waited(s3)
    d1, d2, d3 = s1.duration_ns, s2.duration_ns, s3.duration_ns
    assert 0.15e9 <= w1 <= d1, (w1, d1)  # from the lock call (>= 0.2 s before the sample) to the interval's end
    assert 0.95 * d2 <= w2 <= d2, (w2, d2)  # the whole interval
    assert 0.15e9 <= w3 <= d3 - 0.25e9, (w3, d3)  # from the interval's start to the unlock (0.3 s before its end)
    # the parts add up to the wait (the lock call and the return to user space: tens of us; 2 ms of slack)
    assert abs(w1 + w2 + w3 - wait_ns) <= 2e6, (w1, w2, w3, wait_ns)
