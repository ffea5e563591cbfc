"""The end of a replay says what it is (issue 18): "following" only while
the recording is being written, "end" once it is finished."""

from __future__ import annotations

from pathlib import Path

from fipstop import fixtures
from fipstop.model.raw import RawFrame
from fipstop.recording.replay import ReplaySource
from fipstop.recording.store import RecordingWriter
from fipstop.sources.protocol import Timeline
from fipstop.views.app import FipsTopApp
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.timeline import FRESH_NS, end_state

S = 10**9


def test_end_state() -> None:
    tl = Timeline(100 * S, 200 * S, 200 * S, (), 1.0, True)
    assert end_state(tl, now_ns=201 * S) == "following"  # being written: a frame a second ago
    assert end_state(tl, now_ns=200 * S + FRESH_NS + 1) == "end"  # nothing new for longer: finished
    assert end_state(Timeline(100 * S, 200 * S, 150 * S, (), 1.0, False), now_ns=201 * S) == ""
    assert end_state(Timeline(100 * S, 200 * S, 200 * S, (), 1.0, False), now_ns=201 * S) == "end"


async def test_a_finished_recording_ends_with_end_not_following(tmp_path: Path) -> None:
    samples = fixtures.demo_samples(8)  # recorded at the fixture's epoch: long finished
    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="replay-host")
    for s in samples:
        w.append(RawFrame(s), 0)
    w.close()
    app = FipsTopApp(ReplaySource(str(path), follow=True, speed=16))
    for size in ((80, 24), (200, 60)):
        async with app.run_test(size=size) as pilot:
            for _ in range(2000):
                await pilot.pause(0.005)
                if app.replay is not None and app.replay.following:
                    break
            await pilot.pause(0.1)
            app.timeline = app.replay.timeline()
            app.screen.query_one(StatusHeader).show(app.header_state())
            await pilot.pause()
            text = app.screen.query_one(StatusHeader).render().plain
            assert " end " in text + " " and "following" not in text, text
        app = FipsTopApp(ReplaySource(str(path), follow=True, speed=16))
