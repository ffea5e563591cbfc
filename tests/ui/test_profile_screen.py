"""The Profile screen driven by fixture reports (no live profiler)."""

from __future__ import annotations

import os
from pathlib import Path

from uihelpers import wait_frames

from fipstop import fixtures
from fipstop.profile.demo import DEMO_PID, LOCK_ADDR, demo_report
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.profile import ProfileScreen


def make(profiles=None, **kw) -> tuple[FipsTopApp, SampleListSource]:
    src = SampleListSource(fixtures.demo_samples(10), 0.05,
                           profiles={DEMO_PID: [demo_report()]} if profiles is None else profiles)
    return FipsTopApp(src, autopoll=False, paced=False, **kw), src


async def until(pilot, cond, limit: int = 200) -> None:
    for _ in range(limit):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not met in time")


def text_of(app: FipsTopApp, sel: str) -> str:
    return str(app.screen.query_one(sel).content)


async def test_p_on_ring_detail_profiles_its_producer() -> None:
    app, src = make()
    async with app.run_test(size=(160, 60)) as pilot:
        await wait_frames(pilot, app)
        app.open_ring(("named", 0))
        await pilot.pause()
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProfileScreen) and app.profile_report is not None)
        await pilot.pause(0.05)
        assert app.screen.pid == DEMO_PID == app.profile_pid
        threads = text_of(app, "#profile-threads")
        assert "isc-net-0000" in threads and "process" in threads and "futex FUTEX_WAIT" in threads
        locks = text_of(app, "#profile-locks")
        assert f"{LOCK_ADDR:#018x}" in locks and "measured by bpf" in locks
        assert "holder" in locks and "__lll_lock_wait" in locks
        assert "__vfprintf_internal" in text_of(app, "#profile-stacks")
        # the unavailable profiler says why, in place of its panel
        assert "py-spy: not available: not a Python process" in text_of(app, "#profile-unavailable")
        tree = app.screen.query_one("#profile-tree")
        assert [str(n.label).split()[-1] for n in tree.root.children] == ["bpf"]
        # toggle to off-CPU: the panels and the tree follow
        await pilot.press("o")
        await pilot.pause()
        assert app.screen.which == "offcpu"
        assert "off-CPU" in text_of(app, "#profile-stacks")
        assert "futex_wait" in text_of(app, "#profile-stacks")
        # Esc closes the screen and stops the profile
        stop = app.screen.stop
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ProfileScreen) and stop.is_set())
        await until(pilot, lambda: DEMO_PID not in src.profiling.next_report)


async def test_e_exports_folded_stacks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    app, _ = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("4")  # the first ring's producer (named, 4242)
        await until(pilot, lambda: app.profile_report is not None)
        await pilot.press("e")
        await until(pilot, lambda: list(tmp_path.glob("*.folded")))
        out = next(tmp_path.glob("*.folded"))
        assert out.name.startswith(f"fipstop-{DEMO_PID}-oncpu-")
        lines = out.read_text().splitlines()
        assert lines and all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines)
        assert any(ln.endswith("__vfprintf_internal 41") for ln in lines)
        # the message names the weights' unit (samples here; off-CPU: microseconds)
        await until(pilot, lambda: any("folded stacks to" in str(n.message) for n in app._notifications))
        said = " ".join(str(n.message) for n in app._notifications)
        assert "on-CPU weights are samples" in said, said
        await pilot.press("o", "e")
        await until(pilot, lambda: list(tmp_path.glob("*-offcpu-*.folded")))
        await until(pilot, lambda: "off-CPU weights are microseconds" in " ".join(str(n.message) for n in app._notifications))


async def test_hostile_thread_names_are_escaped() -> None:
    other = 777  # a process without rings: its threads are named by their comm, the hostile text
    app, _ = make({other: [demo_report(other, hostile=True)]})
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_frames(pilot, app)
        app.open_profile(other)
        await until(pilot, lambda: app.profile_report is not None)
        await pilot.pause(0.05)
        threads = text_of(app, "#profile-threads")
        assert "\x1b" not in threads and "isc-net-\\x1b" in threads
        assert "\x1b" not in text_of(app, "#profile-stacks")


async def test_no_report_says_why() -> None:
    src = SampleListSource(fixtures.demo_samples(5), 0.05)
    src.profiling = None  # e.g. a recording: nothing to profile
    app = FipsTopApp(src, autopoll=False, paced=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_frames(pilot, app)
        app.open_profile(4242)
        await until(pilot, lambda: bool(app.profile_error))
        await pilot.pause(0.05)
        assert "cannot profile" in text_of(app, "#profile-title")


async def test_unknown_pid_gets_no_report_but_screen_stays() -> None:
    app, _ = make()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_frames(pilot, app)
        app.open_profile(os.getpid())
        await pilot.pause(0.2)
        assert isinstance(app.screen, ProfileScreen) and app.profile_report is None
        assert "starting" in text_of(app, "#profile-title")


async def test_p_on_consumer_detail_profiles_the_consumer() -> None:
    app, _ = make()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_frames(pilot, app)
        app.open_consumer(("named", 0))
        await pilot.pause()
        s = app.snapshot
        want = int(s.consumers[s.consumer_row("named", 0)]["pid"])
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProfileScreen))
        assert app.profile_pid == app.screen.pid == want != DEMO_PID
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ProfileScreen))
