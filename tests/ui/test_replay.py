"""Replay in the dashboard: the same screens on a recording, with seek, marks,
speed, pause/step and the timeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from uihelpers import SIZES  # noqa: F401  (sets TZ=UTC)

from fipstop import fixtures
from fipstop.model.raw import RawFrame
from fipstop.recording.marks import MARK_BANS, MARK_DROPS
from fipstop.recording.replay import ReplaySource
from fipstop.recording.store import RecordingWriter
from fipstop.views.app import FipsTopApp
from fipstop.views.goto import GotoScreen, range_text
from fipstop.views.overview import OverviewScreen
from fipstop.views.widgets.header import StatusHeader

N = 120
MARKED = (40, 41, 42, 90)


@pytest.fixture
def recording(tmp_path: Path) -> tuple[str, list]:
    samples = fixtures.demo_samples(N)
    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="replay-host")
    for i, s in enumerate(samples):
        w.append(RawFrame(s), (MARK_DROPS if i < 50 else MARK_BANS) if i in MARKED else 0)
    w.close()
    return str(path), samples


def header(app: FipsTopApp) -> str:
    return app.screen.query_one(StatusHeader).render().plain


async def until(pilot, cond, limit: int = 2000) -> None:
    for _ in range(limit):
        if cond():
            return
        await pilot.pause(0.005)
    raise AssertionError("condition not reached")


def shown_t(app: FipsTopApp) -> int:
    return app.snapshot.taken_realtime_ns


async def test_replay_plays_seeks_and_steps(recording) -> None:
    path, samples = recording
    src = ReplaySource(path, follow=False, speed=16)
    app = FipsTopApp(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.frames_received >= 3)
        assert isinstance(app.screen, OverviewScreen)
        h = header(app)
        assert "REPLAY 16x" in h and "LIVE" not in h
        assert app.screen.query_one(StatusHeader).size.height == 3  # the timeline line
        await pilot.press("space")  # pause: the replay stops reading
        await pilot.pause(0.3)
        n = app.frames_received
        await pilot.pause(0.3)
        assert app.frames_received == n
        at = shown_t(app)
        await pilot.press("right_square_bracket")  # +10 s
        await until(pilot, lambda: shown_t(app) == at + 10 * 10**9)
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: shown_t(app) == at)
        # t on the newest frame of a paused replay reads exactly one more
        newest = app.history.newest
        app.shown = newest
        await pilot.press("t")
        await until(pilot, lambda: shown_t(app) == at + 10**9)
        # jump to the next run of marks, then the one after
        await pilot.press("right_curly_bracket")
        await until(pilot, lambda: shown_t(app) == samples[40].taken_realtime_ns)
        await pilot.press("right_curly_bracket")
        await until(pilot, lambda: shown_t(app) == samples[90].taken_realtime_ns)
        await pilot.press("left_curly_bracket")
        await until(pilot, lambda: shown_t(app) == samples[40].taken_realtime_ns)
        # charts have history after a seek (frames before the target were preloaded)
        assert len(app.history) > 30
        await pilot.press("less_than_sign")
        await pilot.pause()
        assert src.speed == 8 and header(app).endswith("8x")  # paused: the timeline shows the speed


async def test_goto_time_and_timeline_click(recording) -> None:
    path, samples = recording
    src = ReplaySource(path, follow=False)
    app = FipsTopApp(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.frames_received >= 1)
        await pilot.press("space")
        await pilot.press("colon")
        await pilot.pause()
        await pilot.press("plus", "6", "0", "enter")
        await until(pilot, lambda: shown_t(app) == samples[60].taken_realtime_ns)
        # a click near the right end of the timeline bar seeks near the end
        w = app.screen.query_one(StatusHeader)
        await pilot.click(StatusHeader, offset=(w.size.width - 30, 2))
        await until(pilot, lambda: shown_t(app) > samples[90].taken_realtime_ns)
        # bad input: one line in the prompt, which stays open; so does a time outside the recording
        await pilot.press("colon")
        await pilot.pause()
        assert isinstance(app.screen, GotoScreen)
        rng = str(app.screen.query_one("#goto-range").content)
        assert range_text(samples[0].taken_realtime_ns, samples[-1].taken_realtime_ns) in rng  # its own range
        await pilot.press(*"tomorrow", "enter")
        await pilot.pause()
        assert isinstance(app.screen, GotoScreen) and "ISO 8601" in str(app.screen.query_one("#goto-error").content)
        box = app.screen.query_one("#goto-input")
        box.value = "+100000"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, GotoScreen)
        assert "is after the recording ends" in str(app.screen.query_one("#goto-error").content)
        box.value = "+30"
        await pilot.press("enter")
        await until(pilot, lambda: shown_t(app) == samples[30].taken_realtime_ns)
        assert not isinstance(app.screen, GotoScreen)


async def test_live_ignores_replay_keys() -> None:
    from uihelpers import make_app, wait_frames

    app = make_app(5)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_frames(pilot, app)
        before = app.shown
        await pilot.press("right_square_bracket", "greater_than_sign", "colon")
        await pilot.pause()
        assert app.shown == before and "REPLAY" not in header(app)
