"""Keys a user of htop expects (issue 18), at 80x24 and 200x60.

Ctrl-C quits; Esc pops exactly one level (profile -> ring detail ->
overview); help scrolls to every line; the footer shows t/T while paused;
Ctrl-L and every screen switch send the whole screen again (no cell of the
previous view can stay on the terminal).
"""

from __future__ import annotations

import pytest
from textual._compositor import Compositor
from textual.containers import VerticalScroll
from textual.widgets._footer import FooterKey
from uihelpers import SIZES, make_app, wait_frames

from fipstop import fixtures
from fipstop.profile.demo import DEMO_PID, demo_report
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.help import HelpScreen, help_text
from fipstop.views.overview import OverviewScreen
from fipstop.views.profile import ProfileScreen
from fipstop.views.ring_detail import RingDetailScreen


def footer_keys(app) -> dict[str, str]:
    return {k.key: k.description for k in app.screen.query(FooterKey)}


@pytest.mark.parametrize("size", SIZES)
async def test_ctrl_c_quits(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("question_mark")  # from any screen, help included
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


@pytest.mark.parametrize("size", SIZES)
async def test_escape_pops_one_level(size) -> None:
    src = SampleListSource(fixtures.demo_samples(10), 0.05, profiles={DEMO_PID: [demo_report()]})
    app = FipsTopApp(src, autopoll=False, paced=False)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("enter")  # the highlighted ring
        assert isinstance(app.screen, RingDetailScreen)
        await pilot.press("p")
        assert isinstance(app.screen, ProfileScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RingDetailScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("escape")  # the bottom: nothing to pop
        assert isinstance(app.screen, OverviewScreen) and app.is_running


@pytest.mark.parametrize("size", SIZES)
async def test_help_scrolls_to_every_key(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        scroll = app.screen.query_one("#help-scroll", VerticalScroll)
        text_lines = len(help_text().plain.splitlines())
        lines = scroll.virtual_size.height  # every row of the help, wrapped lines included
        assert lines >= text_lines
        view = scroll.scrollable_content_region.height
        if size == (80, 24):
            assert lines > view and scroll.max_scroll_y > 0  # it does not fit: it must scroll
        seen = set()
        for _ in range(lines):  # ↓ one line at a time, until the end
            top = round(scroll.scroll_y)
            seen.update(range(top, top + view))
            if scroll.scroll_y >= scroll.max_scroll_y:
                break
            await pilot.press("down")
        assert seen >= set(range(lines)), "a line of the help was never on screen"
        await pilot.press("home")
        assert scroll.scroll_y == 0
        await pilot.press("end")
        assert scroll.scroll_y == scroll.max_scroll_y
        await pilot.press("k")
        assert scroll.scroll_y == max(scroll.max_scroll_y - 1, 0)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


@pytest.mark.parametrize("size", SIZES)
async def test_pause_footer_shows_the_step_keys(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        assert "t" not in footer_keys(app) and "T" not in footer_keys(app)
        assert footer_keys(app).get("space") == "Pause"
        await pilot.press("space")
        await pilot.pause()
        keys = footer_keys(app)
        assert keys.get("t") == "Step" and keys.get("T") == "Step back" and keys.get("space") == "Resume", keys
        shown = app.shown
        await pilot.press("T")
        assert app.shown == shown - 1  # the footer's binding steps
        await pilot.press("t")
        assert app.shown == shown
        await pilot.press("space")
        await pilot.pause()
        assert "t" not in footer_keys(app) and footer_keys(app).get("space") == "Pause"
        await pilot.press("t")  # not paused: t pauses on the newest frame
        assert app.paused and app.shown == app.history.newest


@pytest.mark.parametrize("size", SIZES)
async def test_ctrl_l_and_screen_switches_send_the_whole_screen(size, monkeypatch) -> None:
    full = []
    original = Compositor.render_full_update

    def spy(self, *a, **kw):
        full.append(self)
        return original(self, *a, **kw)

    monkeypatch.setattr(Compositor, "render_full_update", spy)
    src = SampleListSource(fixtures.demo_samples(10), 0.05, profiles={DEMO_PID: [demo_report()]})
    app = FipsTopApp(src, autopoll=False, paced=False)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        await pilot.pause(0.1)
        for key in ("ctrl+l", "enter", "p", "escape", "escape"):
            before = len(full)
            await pilot.press(key)
            await pilot.pause(0.1)
            assert len(full) > before, f"{key}: no full update of the screen"
