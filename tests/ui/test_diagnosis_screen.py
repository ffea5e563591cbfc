"""The Diagnosis panel (key 7): findings of the shown frames, ranked."""

from __future__ import annotations

from uihelpers import make_app, wait_frames

from fipstop.views.diagnosis import DiagnosisScreen


def _text(app) -> str:
    return str(app.screen.query_one("#findings").render())


async def test_diagnosis_panel_ranks_the_demo_trouble() -> None:
    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        assert isinstance(app.screen, DiagnosisScreen)
        text = _text(app)
        # the demo at t=57 s: resolver rings full and dropping behind a consumer; an evicted consumer
        assert "1.  CRITICAL" in text and "dropped" in text
        assert "remedy" in text and "evidence" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DiagnosisScreen)


async def test_diagnosis_panel_healthy_early_frames() -> None:
    app = make_app(6)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        text = _text(app)
        assert "CRITICAL" not in text


async def test_hostile_names_are_not_markup() -> None:
    app = make_app(hostile=True)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        text = _text(app)
        assert "\x1b" not in text


async def test_diagnosis_says_what_was_dropped_in_the_window_and_before() -> None:
    """Issue 16, item 4: a healthy window after drops says the drops happened before it."""
    from fipstop.views.diagnosis import window_counts

    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        window = app.history.window(app.shown, 10)
        span, inside, before = window_counts(window)
        assert before + inside == int(window[-1].totals.records_dropped) and before > 0
        text = _text(app)
        assert f"in the last {span:.0f} s: {inside:,} records dropped" in text
        assert f"before: {before:,} dropped since the rings were created" in text
        assert "nothing dropped" not in text.split("before:")[1].split("\n")[0]
