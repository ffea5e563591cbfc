"""ProfileSession / ProfileReport / render / CLI checks, py-spy output parsing,
and the profile access of the sources: no live profiler needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fipstop.cli import main
from fipstop.probes import pyspy as pyspy_mod
from fipstop.probes.pyspy import PySpyProfiler, parse_raw
from fipstop.probes.stacks import ProfileSample, StackCount
from fipstop.profile.demo import LOCK_ADDR, demo_report
from fipstop.profile.render import render_text
from fipstop.profile.session import ProfileOptions, ProfileSession
from fipstop.sources.samples import SampleListSource

RAW = """\
thread (0x1F4): MainThread;<module> (app.py:1);main (app.py:20);crunch (app.py:5) 90
thread (501): worker;Thread._bootstrap (threading.py:988);run (app.py:30);wait (threading.py:320) 100
thread (500): MainThread;<module> (app.py:1);main (app.py:20) 10
garbage line
"""


def test_parse_raw_threads_frames_counts():
    stacks = parse_raw(RAW)
    assert len(stacks) == 3
    assert stacks[0] == StackCount(("<module> (app.py:1)", "main (app.py:20)", "crunch (app.py:5)"), 90, 500,
                                   "MainThread")
    assert stacks[1].tid == 501 and stacks[1].thread == "worker" and stacks[1].value == 100


def test_pyspy_idle_is_all_minus_gil_holder():
    p = PySpyProfiler(os.getpid(), rate_hz=100, pyspy="/bin/true")
    gil = parse_raw(RAW.splitlines()[0] + "\n")
    allst = parse_raw(RAW)
    s = p._build({"gil": gil, "all": allst}, 0, 1_000_000_000, [])
    assert s.available and s.oncpu == tuple(gil)
    assert s.extra["gil_pct"] == pytest.approx(90.0)
    # idle: what the GIL holder's stacks do not explain, in ns at 100 Hz
    off = {st.frames[-1]: st.value for st in s.offcpu}
    assert off == {"wait (threading.py:320)": 1_000_000_000, "main (app.py:20)": 100_000_000}
    assert s.extra["idle_pct"] == pytest.approx(100 * 110 / 200)


def test_pyspy_availability_reasons(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pyspy_mod, "find_pyspy", lambda: None)
    ok, why = PySpyProfiler(os.getpid()).available()
    assert not ok and "py-spy is not installed" in why
    ok, why = PySpyProfiler(2**22 + 12345, pyspy="/bin/true").available()
    assert not ok and "no process" in why
    # a process that is no Python interpreter
    import subprocess
    import time

    child = subprocess.Popen(["sleep", "5"])
    try:
        for _ in range(200):  # until the fork has exec'd
            if os.path.basename(os.readlink(f"/proc/{child.pid}/exe")) == "sleep":
                break
            time.sleep(0.01)
        ok, why = PySpyProfiler(child.pid, pyspy="/bin/true").available()
        assert not ok and why.startswith("not a Python process")
    finally:
        child.kill()
        child.wait()
    ok, why = PySpyProfiler(os.getpid(), pyspy="/bin/true").available()
    assert ok, why


def test_session_reports_every_probe_and_why(monkeypatch: pytest.MonkeyPatch):
    # bpf absent (ImportError) and py-spy off: the thread split still comes
    monkeypatch.setitem(sys.modules, "fipstop.probes.bpf", None)
    s = ProfileSession(os.getpid(), ProfileOptions(threads_hz=0, pyspy=False))
    s.start()
    r = s.poll()
    s.close()
    status = {p.name: p for p in r.probes}
    assert status["threads"].available
    assert not status["bpf"].available and "not installed" in status["bpf"].reason
    assert status["py-spy"].reason == "off (--no-pyspy)"
    assert {p.source for p in r.profiles} == {"bpf", "py-spy"}
    assert all(not p.available and p.reason for p in r.profiles)
    assert r.threads.available and r.threads.threads
    json.dumps(r.to_json())
    text = render_text(r)
    assert "bpf: not available" in text and "py-spy: not available" in text


def test_session_wraps_a_failing_profiler(monkeypatch: pytest.MonkeyPatch):
    class Broken:
        name = "bpf"

        def __init__(self, pid, **kw):
            pass

        def available(self):
            return True, ""

        def start(self):
            pass

        def sample(self):
            raise RuntimeError("map read failed")

        def close(self):
            pass

    mod = type(sys)("fipstop.probes.bpf")
    mod.BpfProfiler = Broken
    monkeypatch.setitem(sys.modules, "fipstop.probes.bpf", mod)
    with ProfileSession(os.getpid(), ProfileOptions(threads_hz=0, pyspy=False)) as s:
        r = s.poll()
    bpf = r.profile("bpf")
    assert bpf is not None and not bpf.available and "map read failed" in bpf.reason


def test_session_passes_the_off_cpu_sampling_to_bpf(monkeypatch: pytest.MonkeyPatch):
    made = []

    class Recording:
        name = "bpf"

        def __init__(self, pid, **kw):
            made.append(kw)

        def available(self):
            return False, "recorded only"

        def close(self):
            pass

    mod = type(sys)("fipstop.probes.bpf")
    mod.BpfProfiler = Recording
    monkeypatch.setitem(sys.modules, "fipstop.probes.bpf", mod)
    with ProfileSession(os.getpid(), ProfileOptions(threads_hz=0, pyspy=False, off_sample=1)) as s:
        s.poll()
    assert made and made[0].get("off_sample") == 1


def test_report_top_locks_prefers_bpf_and_folds():
    r = demo_report()
    src, locks = r.top_locks()
    assert src == "bpf" and locks[0].address == LOCK_ADDR
    # without bpf the thread sampler's estimate stands in
    no_bpf = type(r)(r.pid, r.comm, r.taken_mono_ns, r.duration_ns, r.threads,
                     (ProfileSample.unavailable("bpf", r.pid, "no root"),), r.probes)
    assert no_bpf.top_locks() == ("procfs", r.threads.locks)
    lines = r.folded("offcpu")
    assert lines and all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines)
    assert any("__lll_lock_wait;futex_wait" in ln for ln in lines)
    hot = r.hot_functions("oncpu")
    assert hot[0][1] == "__vfprintf_internal"
    j = r.to_json()
    assert j["top_locks"]["addresses"][0] == hex(LOCK_ADDR)


def test_render_escapes_hostile_names():
    text = render_text(demo_report(hostile=True))
    assert "\x1b" not in text and "\\x1b[31m" in text
    assert hex(LOCK_ADDR)[2:] in text


def test_sample_list_source_plays_fixture_reports():
    a, b = demo_report(taken_mono_ns=1), demo_report(taken_mono_ns=2)
    prof = SampleListSource([], profiles={4242: [a, b]}).profiling
    assert prof.profile_poll(4242) is None  # not started
    prof.profile_start(4242)
    assert [prof.profile_poll(4242).taken_mono_ns for _ in range(3)] == [1, 2, 2]
    prof.profile_stop(4242)
    assert prof.profile_poll(4242) is None


def test_cli_bad_input_is_one_line(capsys: pytest.CaptureFixture):
    assert main(["profile", "--pid", "0"]) == 2
    assert main(["profile", "--pid", str(2**22 + 777)]) == 2
    assert main(["profile", "--pid", str(os.getpid()), "--duration", "-1"]) == 2
    assert main(["profile", "--pid", str(os.getpid()), "--off-sample", "3"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 4 and all(ln.startswith("fipstop: ") for ln in err.splitlines())
    assert "--off-sample 3: give a power of two" in err


def test_cli_profiles_this_process_without_bpf_and_pyspy(capsys: pytest.CaptureFixture, tmp_path: Path):
    folded = tmp_path / "out.folded"
    rc = main(["profile", "--pid", str(os.getpid()), "--duration", "0.2", "--no-bpf", "--no-pyspy", "--json",
               "--folded", str(folded)])
    out, err = capsys.readouterr()
    assert rc == 0
    j = json.loads(out)
    assert j["pid"] == os.getpid() and j["threads"]["available"]
    assert sum(j["process_split_pct"].values()) == pytest.approx(100.0)
    assert folded.exists() and "no oncpu stacks" in err
    rc = main(["profile", "--pid", str(os.getpid()), "--duration", "0.2", "--no-bpf", "--no-pyspy"])
    out = capsys.readouterr().out
    assert rc == 0 and "TOP LOCKS" in out and "bpf: off (--no-bpf)" in out
