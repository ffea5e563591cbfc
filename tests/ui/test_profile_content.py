"""The Profile screen's content (issue 18): accumulated by default with
sample counts, `a` shows the last interval, thread names as the overview
shows them, the lost-stack share as a number, raw counters as counted,
stack rows that keep their leaf; at 80x24 and 200x60."""

from __future__ import annotations

from dataclasses import replace

import pytest
from uihelpers import SIZES, wait_frames

from fipstop import fixtures
from fipstop.probes.stacks import StackCount
from fipstop.profile.demo import DEMO_PID, demo_report
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.profile import ProfileScreen

SECOND = 1_000_000_000


def reports(n: int = 3):
    """n intervals of the demo's profile; the threads' comm is the process's (as a C producer's threads often
    are: fips-demo-produ), the rings name them isc-net-000i; one on-CPU stack is lost each interval."""
    out = []
    for i in range(n):
        r = demo_report(taken_mono_ns=(60 + i) * SECOND)
        th = r.threads
        th = replace(th, threads=tuple(replace(t, name="fips-demo-produ") if 4250 <= t.tid < 4254 else t
                                       for t in th.threads))
        bpf = r.profile("bpf")
        lost = StackCount(("[user stack lost: hash collision]", "do_syscall_64"), 13, DEMO_PID + 8, "fips-demo-produ")
        bpf = replace(bpf, oncpu=(*bpf.oncpu, lost), extra={"ustack_eexist": 13.0, "blocked_ns": 123456789012.0,
                                                            "compile_s": 3.5, "oncpu_hz": 49.0})
        out.append(replace(r, threads=th, profiles=(bpf, *r.profiles[1:])))
    return out


async def until(pilot, cond, limit: int = 300) -> None:
    for _ in range(limit):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not met in time")


def text(app, sel: str) -> str:
    return str(app.screen.query_one(sel).content)


@pytest.mark.parametrize("size", SIZES)
async def test_accumulated_counts_interval_toggle_and_names(size) -> None:
    src = SampleListSource(fixtures.demo_samples(10), 0.05, profiles={DEMO_PID: reports(3)})
    app = FipsTopApp(src, autopoll=False, paced=False)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        app.open_profile(DEMO_PID)
        await until(pilot, lambda: app.profile_total is not None and app.profile_total.intervals == 3)
        await pilot.pause(0.1)
        assert isinstance(app.screen, ProfileScreen) and app.screen.accumulated
        assert "on-CPU, sum of 3 intervals (3.0 s)" in text(app, "#profile-title")  # fits 80 columns
        stacks = text(app, "#profile-stacks")
        # 41 of 126 samples per interval are __vfprintf_internal: 123 over three
        hot = next(ln for ln in stacks.splitlines() if "__vfprintf_internal" in ln and "›" not in ln)
        assert hot.split()[1] == "123" and hot.split()[0] == f"{100 * 41 / 126:.1f}%"
        # every stack row ends in its leaf, whatever the width
        for ln in stacks.splitlines():
            if "›" in ln:
                assert len(ln) <= size[0] and not ln.endswith("…"), ln
        # the overview's names (the rings'), not the comm every thread shares
        threads = text(app, "#profile-threads")
        workers = [ln for ln in threads.splitlines() if any(f" {t} " in ln for t in range(4250, 4254))]
        assert len(workers) == 4 and all("fips-demo-produ" not in ln for ln in workers)
        assert [ln.split()[1] for ln in workers] == [f"isc-net-{i:04d}" for i in range(4)]
        assert "isc-net-0000-4250:" in stacks
        assert "thread split: last interval (1.00 s)" in threads  # the split is not a total: it says so
        unavailable = text(app, "#profile-unavailable")
        assert f"stacks lost: {100 * 13 / 126:.1f} % of on-CPU samples" in unavailable  # 13 of 126 per interval
        assert "39 hash collisions" in unavailable
        assert "blocked_ns 370370367036" in unavailable and "e+" not in unavailable
        # a: the last interval only
        await pilot.press("a")
        await pilot.pause(0.05)
        assert not app.screen.accumulated
        assert "last interval (1.00 s)" in text(app, "#profile-title")
        hot = next(ln for ln in text(app, "#profile-stacks").splitlines()
                   if "__vfprintf_internal" in ln and "›" not in ln)
        assert hot.split()[1] == "41"
        assert "13 hash collisions" in text(app, "#profile-unavailable")


@pytest.mark.parametrize("size", SIZES)
async def test_no_color_time_split_keeps_each_category_apart(size, monkeypatch) -> None:
    """Issue 18, NO_COLOR keeps every meaning: the time-split bar's categories were colours only (five blocks of one
    shade); without colour each has its own glyph, in the bar and the legend, and the cells still add up."""
    from fipstop.profile.demo import demo_report
    from fipstop.views import palette
    from fipstop.views.profile import CATEGORIES, CATEGORY_GLYPH, stacked_bar

    monkeypatch.setenv("NO_COLOR", "1")
    src = SampleListSource(fixtures.demo_samples(10), 0.05, profiles={DEMO_PID: reports(1)})
    app = FipsTopApp(src, autopoll=False, paced=False)
    try:
        async with app.run_test(size=size) as pilot:
            await wait_frames(pilot, app)
            assert app.no_color and palette.MONOCHROME
            app.open_profile(DEMO_PID)
            await until(pilot, lambda: app.profile_total is not None)
            await pilot.pause(0.1)
            threads = text(app, "#profile-threads")
            assert len(set(CATEGORY_GLYPH.values())) == len(CATEGORY_GLYPH)  # one glyph per category
            for c in ("oncpu", "lock", "sleep"):
                assert f" {CATEGORY_GLYPH[c]} " in threads  # the legend names each glyph
            # the process row's bar: each category's cells in its own glyph, as many as its share
            split = demo_report(taken_mono_ns=60 * SECOND).threads.process_split()
            row = next(ln for ln in threads.splitlines() if " process " in ln)
            glyphs = set(CATEGORY_GLYPH.values())
            bar = row.split(" process ", 1)[1].lstrip()
            bar = bar[:next((i for i, ch in enumerate(bar) if ch not in glyphs), len(bar))]
            assert bar == stacked_bar(split, len(bar)).plain and len(bar) >= 8  # as wide as the screen allows
            for c in CATEGORIES:
                assert abs(bar.count(CATEGORY_GLYPH[c]) - split.get(c, 0.0) * len(bar) / 100) <= 1, c
            assert "#98c379" not in app.export_screenshot()  # the on-CPU green is gone with every colour
    finally:
        palette.use_color()
    assert set(stacked_bar({"oncpu": 50.0, "lock": 50.0}).plain) == {"█"}  # in colour: blocks, told apart by colour
