"""Replay controls of the dashboard: seek, jump to marks, speed, go to a time.

The part of :class:`fipstop.views.app.FipsTopApp` that drives a recording,
active when its source is :class:`fipstop.sources.protocol.Seekable` (checked
once, in ``app.replay``); on a live source every key rings the bell.
Seeking reads the file in a worker and posts :class:`SeekReady` with the
frames before the target, so the charts have their history right after the
jump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from textual import work
from textual.app import App
from textual.message import Message

from fipstop.errors import exc_line
from fipstop.model.snapshot import Frame, Snapshot
from fipstop.sources.protocol import Seekable, Timeline
from fipstop.views.goto import GotoScreen
from fipstop.views.history import History
from fipstop.views.widgets.timeline import next_mark


class SeekReady(Message):
    """A replay seek finished: the frames to show (oldest first)."""

    def __init__(self, frames: list[Frame], error: str = "") -> None:
        super().__init__()
        self.frames = frames
        self.error = error


class ReplayControls(App[None]):
    """The replay keys; the app supplies the state below and the methods
    that raise NotImplementedError here."""

    replay: Seekable | None
    history: History
    timeline: Timeline | None
    paused: bool
    exhausted: bool
    poll_error: str
    shown: int

    @property
    def snapshot(self) -> Snapshot | None:
        raise NotImplementedError

    @property
    def interval_s(self) -> float:
        raise NotImplementedError

    def preload(self, frames: Sequence[Frame]) -> None:
        raise NotImplementedError

    def _update_views(self) -> None:
        raise NotImplementedError

    def _rearm(self) -> None:
        raise NotImplementedError

    def _position(self) -> int:
        """Where the replay stands: the frame shown, else the timeline's mark."""
        snap = self.snapshot
        if snap is not None:
            return snap.taken_realtime_ns
        return self.timeline.at_t_ns if self.timeline is not None else 0

    def action_seek(self, delta_s: float) -> None:
        if self.replay is None:
            self.bell()
            return
        self.seek_to(self._position() + int(float(delta_s) * 1e9))

    def seek_to(self, t_ns: int) -> None:
        """Replay from the frame at ``t_ns`` (a worker reads the file)."""
        if self.replay is not None:
            self._seek(self.replay, int(t_ns))

    @work(exclusive=True, thread=True, group="seek", exit_on_error=False)
    def _seek(self, replay: Seekable, t_ns: int) -> None:
        try:
            frames = replay.seek(t_ns, history=min(self.history.max_frames, 300))
            self.timeline = replay.timeline()
            self.post_message(SeekReady(frames))
        except Exception as exc:
            self.post_message(SeekReady([], exc_line(exc)))

    def on_seek_ready(self, message: SeekReady) -> None:
        if message.error:
            self.poll_error = message.error
            self._update_views()
            return
        self.history.clear()
        self.exhausted = False
        if message.frames:
            self.preload(message.frames)
            self.shown = self.history.newest
        self._update_views()
        if not self.paused:  # paused: stay on the frame sought; t reads on
            self._rearm()

    def action_mark(self, direction: int) -> None:
        tl = self.timeline
        if self.replay is None or tl is None:
            self.bell()
            return
        gap = int(max(self.interval_s * self.replay.speed * 1.5e9, 1e9))  # more than a frame apart: a new run
        target = next_mark([t for t, _ in tl.marks], self._position(), direction, gap)
        if target is None:
            self.bell()
            return
        self.seek_to(target)

    def action_speed(self, steps: int) -> None:
        if self.replay is None:
            self.bell()
            return
        speed = self.replay.faster(int(steps))
        if self.timeline is not None:
            self.timeline = replace(self.timeline, speed=speed)
        self._update_views()

    def action_goto(self) -> None:
        replay = self.replay
        if replay is None:
            self.bell()
            return

        def done(t_ns: int | None) -> None:
            if t_ns is not None:
                self.seek_to(t_ns)

        tl = self.timeline or replay.timeline()
        self.push_screen(GotoScreen(tl.first_t_ns, tl.last_t_ns, replay.parse_time), done)
