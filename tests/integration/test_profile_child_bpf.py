"""One bcc compile in the profiler process serves two pids (issue 18).

Two busy processes, A then B, profiled through :class:`ChildProfiling` (the
dashboard's way): the second start retargets the parked program (the
target tgid is a map entry), so it costs no compile, and B's on-CPU samples
are B's threads only (the oracle: /proc/B/task), none of A's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fipstop.profile.child import ChildProfiling
from fipstop.profile.session import ProfileOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.bpf, pytest.mark.root]


def _ready() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (eBPF)"
    from fipstop.probes.bpf import BpfProfiler

    return BpfProfiler(os.getpid()).available()


def _bpf_sample(cp: ChildProfiling, pid: int, limit_s: float = 20.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        time.sleep(1.0)
        report = cp.profile_poll(pid)
        bpf = report.profile("bpf") if report is not None else None
        assert bpf is not None and bpf.available, bpf
        if sum(s.value for s in bpf.oncpu) >= 10:
            return bpf
    raise AssertionError(f"no on-CPU samples of {pid} in {limit_s} s")


def test_one_compile_profiles_two_pids() -> None:
    ok, why = _ready()
    if not ok:
        pytest.skip(why)
    spin = [sys.executable, "-c", "while True: pass"]
    a, b = subprocess.Popen(spin), subprocess.Popen(spin)
    cp = ChildProfiling(linger_s=60)
    opts = ProfileOptions(pyspy=False)
    try:
        t0 = time.monotonic()
        cp.profile_start(a.pid, opts)
        first_s = time.monotonic() - t0
        sa = _bpf_sample(cp, a.pid)
        assert {s.tid for s in sa.oncpu} == {a.pid}
        cp.profile_stop(a.pid)
        t0 = time.monotonic()
        cp.profile_start(b.pid, opts)
        second_s = time.monotonic() - t0
        sb = _bpf_sample(cp, b.pid)
        print(f"\nfirst start {first_s:.2f} s (compile {sa.extra['compile_s']:.2f} s), second {second_s:.3f} s")
        assert cp.spawned == 1
        assert sb.extra["compile_s"] == sa.extra["compile_s"]  # the same compiled program
        assert {s.tid for s in sb.oncpu} == {b.pid}  # B's only thread; A (still spinning) is not counted
        assert sb.pid == b.pid
        cp.profile_stop(b.pid)
    finally:
        cp.close()
        for p in (a, b):
            p.kill()
            p.wait()
