"""SVG snapshots of the dashboard (pytest-textual-snapshot) on the fixed fixture.

Update after an intended change with ``pytest tests/ui --snapshot-update``
and look at the new pictures (``scripts/screenshots.py`` makes PNGs).
"""

from __future__ import annotations

import time

import pytest
from uihelpers import make_app, wait_frames

from fipstop import fixtures
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp

pytest.importorskip("pytest_textual_snapshot", reason="pytest-textual-snapshot is not installed")


def _run_before(keys=(), until=None):
    """Press ``keys``; then, with ``until``, wait (up to 10 s) for
    ``until(app)``: a worker's result (the ring detail's message tap) must be
    on screen however slow the machine."""

    async def run_before(pilot) -> None:
        await wait_frames(pilot, pilot.app)
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.05)
        if until is not None:
            deadline = time.monotonic() + 10
            while not until(pilot.app):
                assert time.monotonic() < deadline, "the awaited result never arrived"
                await pilot.pause(0.05)
        await pilot.pause(0.1)

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_overview(snap_compare, size) -> None:
    assert snap_compare(make_app(), terminal_size=size, run_before=_run_before())


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_ring_detail(snap_compare, size) -> None:
    assert snap_compare(make_app(), terminal_size=size, run_before=_run_before(["enter"], until=lambda app: app.last_tap is not None))


def test_consumer_detail(snap_compare) -> None:
    assert snap_compare(make_app(), terminal_size=(200, 60), run_before=_run_before(["tab", "down", "enter"]))


def test_paused_sorted_filtered(snap_compare) -> None:
    keys = ["space", "T", "T", "s", "s", "s", "s", "s", "s", "s", "slash", "n", "a", "m", "e", "d", "enter"]
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=_run_before(keys))


def test_help(snap_compare) -> None:
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_run_before(["question_mark"]))


def test_empty(snap_compare) -> None:
    app = FipsTopApp(SampleListSource([fixtures.raw_sample(0.0, [])], 1.0), autopoll=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_run_before())
