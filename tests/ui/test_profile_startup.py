"""Opening the profile never freezes the dashboard (issue 18).

A fake bpf profiler whose "compile" blocks until the test lets it go stands
in for bcc (the only fake here: threads are sampled for real, on this test
process, through the real ProfileSessions).  While it compiles, the
progress line counts seconds, keys answer, Esc goes back one level; the
compiled program is parked and reused by the next visit (one compile).
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
from textual.css.query import NoMatches
from uihelpers import SIZES, make_app, wait_frames

from fipstop.probes import bpf as bpf_module
from fipstop.probes.stacks import ProfileSample
from fipstop.profile.session import ProfileOptions
from fipstop.sources.profiling import ProfileSessions
from fipstop.views.help import HelpScreen
from fipstop.views.profile import ProfileScreen
from fipstop.views.ring_detail import RingDetailScreen


class SlowBpf:
    """BpfProfiler's interface; ``start()`` blocks on ``gate`` as bcc's compile would (GIL released)."""

    name = "bpf"
    compiles = 0
    gate = threading.Event()

    def __init__(self, pid: int, **_kw) -> None:
        self.pid = pid
        self.state = "idle"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def start(self) -> None:
        if self.state == "parked":
            self.state = "running"
            return
        self.state = "compiling"
        type(self).compiles += 1
        assert type(self).gate.wait(30), "the test never let the compile finish"
        self.state = "running"

    def retarget(self, pid: int) -> bool:
        if self.state != "parked":
            return False
        self.pid = pid
        return True

    def park(self) -> bool:
        if self.state != "running":
            return False
        self.state = "parked"
        return True

    def sample(self) -> ProfileSample:
        return ProfileSample(source="bpf", pid=self.pid, taken_mono_ns=time.monotonic_ns(), duration_ns=1)

    def close(self) -> None:
        self.state = "closed"


@pytest.fixture
def slow_bpf(monkeypatch):
    monkeypatch.setattr(bpf_module, "BpfProfiler", SlowBpf)
    SlowBpf.compiles = 0
    SlowBpf.gate = threading.Event()
    yield SlowBpf
    SlowBpf.gate.set()


async def until(pilot, cond, limit_s: float = 10.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not met in time")


def seconds(text: str) -> int:
    m = re.search(r"compiling the eBPF program, (\d+) s…", text)
    assert m, text
    return int(m.group(1))


def title(app) -> str:
    try:
        return str(app.screen.query_one("#profile-title").content)
    except NoMatches:  # not composed yet
        return ""


@pytest.mark.parametrize("size", SIZES)
async def test_slow_compile_keeps_the_dashboard_answering(size, slow_bpf) -> None:
    app = make_app(12)
    sessions = ProfileSessions()
    app.profiling = sessions  # the real host profiling, with the fake compiler
    app.profile_options = ProfileOptions(pyspy=False)
    me = os.getpid()
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        app.open_ring(("named", 0))
        await pilot.pause()
        app.open_profile(me)
        await until(pilot, lambda: isinstance(app.screen, ProfileScreen) and "compiling" in title(app))
        assert "Esc cancels" in title(app)
        # the progress line updates while the compile blocks
        first = seconds(title(app))
        await until(pilot, lambda: seconds(title(app)) > first, 5.0)
        # keys answer at once: o toggles, ? opens help and closes it again
        t0 = time.monotonic()
        await pilot.press("o")
        assert app.screen.which == "offcpu"
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, ProfileScreen)
        assert time.monotonic() - t0 < 2.0  # generous on a shared machine; the bench measures latency
        assert slow_bpf.compiles == 1 and not slow_bpf.gate.is_set()
        # Esc cancels: back one level (the ring detail it was opened from), the compile still blocked
        await pilot.press("escape")
        assert isinstance(app.screen, RingDetailScreen)
        assert sessions.profile_phase(me) == "compiling the eBPF program"
        slow_bpf.gate.set()  # the compile ends; the profile it started is stopped and parked
        await until(pilot, lambda: sessions.profile_phase(me) == "" and sessions._parked is not None)
        # a second visit reuses the parked program: no second compile, a report comes
        app.open_profile(me)
        await until(pilot, lambda: app.profile_report is not None, 15.0)
        assert slow_bpf.compiles == 1
        await pilot.pause(0.05)
        assert "compiling" not in title(app) and "profile of pid" in title(app)
        assert str(app.screen.query_one("#profile-threads").content).strip()  # real /proc threads
        await pilot.press("escape")
        assert isinstance(app.screen, RingDetailScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, RingDetailScreen) and len(app.screen_stack) == 1
    sessions.close()


def test_a_parked_program_serves_another_pid_but_not_other_options(slow_bpf) -> None:
    """The target pid is a map entry: a parked program is retargeted, not compiled again."""
    slow_bpf.gate.set()
    sessions = ProfileSessions()
    opts = ProfileOptions(pyspy=False)
    me, parent = os.getpid(), os.getppid()
    sessions.profile_start(me, opts)
    sessions.profile_stop(me)
    sessions.profile_start(me, opts)  # same pid and options: reused
    assert slow_bpf.compiles == 1
    sessions.profile_stop(me)
    sessions.profile_start(parent, opts)  # another pid: retargeted, no compile
    assert slow_bpf.compiles == 1
    assert sessions._sessions[parent].profilers[0].pid == parent
    sessions.profile_stop(parent)
    sessions.profile_start(me, ProfileOptions(pyspy=False, oncpu_hz=99))  # other options: compiled anew
    assert slow_bpf.compiles == 2
    old = sessions._parked  # the 49 Hz program waits, unused
    assert old is not None and old[1].state == "parked"
    sessions.profile_stop(me)  # the 99 Hz one is parked now; only one is kept: the older is closed
    assert old[1].state == "closed" and sessions._parked is not None
    newest = sessions._parked[1]
    assert newest.state == "parked"
    sessions.close()
    assert sessions._parked is None and newest.state == "closed"


def test_a_parked_program_is_closed_after_park_s(slow_bpf) -> None:
    """Parked, the compiled program holds LLVM's memory: it goes after park_s."""
    slow_bpf.gate.set()
    sessions = ProfileSessions(park_s=0.05)
    me = os.getpid()
    sessions.profile_start(me, ProfileOptions(pyspy=False))
    sessions.profile_stop(me)
    parked = sessions._parked
    assert parked is not None
    deadline = time.monotonic() + 5
    while sessions._parked is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sessions._parked is None and parked[1].state == "closed"
    sessions.close()


@pytest.mark.parametrize("size", SIZES)
async def test_without_bcc_the_screen_says_why_in_one_line(size, monkeypatch) -> None:
    """The real BpfProfiler, with bcc made unimportable."""
    import sys

    monkeypatch.setitem(sys.modules, "bcc", None)  # import bcc raises ImportError
    app = make_app(12)
    sessions = ProfileSessions()
    app.profiling = sessions
    app.profile_options = ProfileOptions(pyspy=False)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        app.open_profile(os.getpid())
        await until(pilot, lambda: app.profile_report is not None, 15.0)
        await pilot.pause(0.05)
        lines = str(app.screen.query_one("#profile-unavailable").content).splitlines()
        why = [ln for ln in lines if "bpf" in ln]
        assert len(why) == 1 and "bpf: not available: bcc is not importable" in why[0], why
        assert "apt-get install python3-bpfcc" in why[0]
    sessions.close()
