"""The profilers run in a child process (issue 18: memory after leaving the profile).

The real child (``python -m fipstop.profile.child``) profiles this test
process with the /proc thread sampler (bpf and py-spy off: no root needed);
the oracle is /proc/self/task.  After the last profile stops the child is
kept ``linger_s`` and then ends; a dead child fails the next call with its
exit status, never a hang.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from fipstop.profile.child import ChildProfiling, ProfilerProcessError
from fipstop.profile.session import ProfileOptions, ProfileReport

OPTS = ProfileOptions(bpf=False, pyspy=False)


def gone(pid: int, limit_s: float = 10.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def test_a_report_of_this_process_comes_from_the_child() -> None:
    cp = ChildProfiling(linger_s=60)
    me = os.getpid()
    try:
        cp.profile_start(me, OPTS)
        child = cp.child_pid
        assert child is not None and child != me
        assert cp.profile_phase(me) == ""
        time.sleep(0.3)
        report = cp.profile_poll(me)
        assert isinstance(report, ProfileReport) and report.pid == me
        tids = {int(t) for t in os.listdir("/proc/self/task")}
        assert report.threads.available
        assert {t.tid for t in report.threads.threads} <= tids | {child}
        assert me in {t.tid for t in report.threads.threads}
        assert {p.source: p.reason for p in report.profiles} == {"bpf": "off (--no-bpf)",
                                                                  "py-spy": "off (--no-pyspy)"}
        assert cp.profile_poll(me + 10**6) is None  # not being profiled
    finally:
        cp.close()
    assert gone(child)


def test_the_child_lingers_then_ends_and_a_later_start_spawns_anew() -> None:
    cp = ChildProfiling(linger_s=0.3)
    me = os.getpid()
    try:
        cp.profile_start(me, OPTS)
        first = cp.child_pid
        cp.profile_stop(me)
        cp.profile_start(me, OPTS)  # within the linger: the same process
        assert cp.child_pid == first and cp.spawned == 1
        cp.profile_stop(me)
        assert first is not None and gone(first)
        assert cp.child_pid is None
        cp.profile_start(me, OPTS)
        assert cp.spawned == 2 and cp.child_pid not in (None, first)
        assert cp.profile_poll(me) is not None
    finally:
        cp.close()


def test_a_killed_child_fails_the_next_call_with_its_exit_status() -> None:
    cp = ChildProfiling(linger_s=60)
    me = os.getpid()
    try:
        cp.profile_start(me, OPTS)
        child = cp.child_pid
        assert child is not None
        os.kill(child, signal.SIGKILL)
        assert gone(child)
        time.sleep(0.1)
        with pytest.raises(ProfilerProcessError, match=r"exit status -9"):
            cp.profile_poll(me)
        cp.profile_start(me, OPTS)  # a new start spawns a new child
        assert cp.spawned == 2 and cp.profile_poll(me) is not None
    finally:
        cp.close()
