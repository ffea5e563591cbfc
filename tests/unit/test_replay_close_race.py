"""Closing a replay (or a recording tee) while the poll worker is inside it.

The dashboard polls its source from a worker thread and closes it from the main
thread when it unmounts; the recording is sqlite3 opened with
check_same_thread=False, and a close during a query crashed the whole test
process in CI (a segfault in store.refresh, under test_replay_end).  Every use of
the reader and the writer is now under the source's lock: this test closes while
a thread polls as fast as it can, many times, and the process must survive with
poll answering None after the close."""

from __future__ import annotations

import threading
from pathlib import Path

from fipstop import fixtures
from fipstop.model.raw import RawFrame
from fipstop.recording.replay import ReplaySource
from fipstop.recording.store import RecordingWriter
from fipstop.recording.tee import RecordingTee


def _recording(path: Path, frames: int = 8) -> str:
    w = RecordingWriter(str(path), interval_s=1.0, host="race-host")
    for s in fixtures.demo_samples(frames):
        w.append(RawFrame(s), 0)
    w.close()
    return str(path)


def _hammer(source, stop: threading.Event, errors: list[BaseException]) -> None:
    try:
        while not stop.is_set():
            source.poll()
            if hasattr(source, "timeline"):
                source.timeline()
    except BaseException as e:  # an error is fine to report, a crash is not: collect and fail below
        errors.append(e)


def test_close_while_polling_replay(tmp_path: Path) -> None:
    path = _recording(tmp_path / "r.fsr")
    for _ in range(60):
        src = ReplaySource(path, follow=True, speed=16)
        stop, errors = threading.Event(), []
        t = threading.Thread(target=_hammer, args=(src, stop, errors))
        t.start()
        src.close()  # while the worker is (most likely) inside a query
        assert src.poll() is None and src.seek(0) == []
        stop.set()
        t.join(10)
        assert not t.is_alive() and errors == [], errors


def test_close_while_polling_a_recording_tee(tmp_path: Path) -> None:
    path = _recording(tmp_path / "in.fsr")
    for i in range(30):
        tee = RecordingTee(ReplaySource(path, follow=True, speed=16), str(tmp_path / f"out{i}.fsr"))
        stop, errors = threading.Event(), []
        t = threading.Thread(target=_hammer, args=(tee, stop, errors))
        t.start()
        tee.close()
        stop.set()
        t.join(10)
        assert not t.is_alive() and errors == [], errors
