"""The Diagnosis panel (key 7): findings of the shown frames, ranked."""

from __future__ import annotations

from fipstop.views.diagnosis import DiagnosisScreen

from uihelpers import make_app, wait_frames


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
