"""Replay controls of the dashboard: seek, jump to marks, speed, go to a time.

A mixin of :class:`fipstop.views.app.FipsTopApp`, active when its source can
seek (a :class:`fipstop.replay.ReplaySource`); on a live source every key
rings the bell.  Seeking reads the file in a worker and posts
:class:`SeekReady` with the frames before the target, so the charts have
their history right after the jump.
"""

from __future__ import annotations

from textual import work
from textual.message import Message

from fipstop.errors import exc_line
from fipstop.sources import Frame
from fipstop.views.widgets.timeline import next_mark


class SeekReady(Message):
    """A replay seek finished: the frames to show (oldest first)."""

    def __init__(self, frames: list[Frame], error: str = "") -> None:
        super().__init__()
        self.frames = frames
        self.error = error


class ReplayControls:
    """Needs from the app: source, history, snapshot, timeline, paused, exhausted,
    poll_error, ban_history, interval_s, is_replay, preload, _update_views, _rearm."""

    def action_seek(self, delta_s: float) -> None:
        if not self.is_replay:
            self.bell()
            return
        tl = self.timeline
        at = tl.at_t_ns if tl is not None else 0
        snap = self.snapshot
        if snap is not None:
            at = snap.taken_realtime_ns
        self.seek_to(at + int(float(delta_s) * 1e9))

    def seek_to(self, t_ns: int) -> None:
        """Replay from the frame at ``t_ns`` (a worker reads the file)."""
        if self.is_replay:
            self._seek(int(t_ns))

    @work(exclusive=True, thread=True, group="seek", exit_on_error=False)
    def _seek(self, t_ns: int) -> None:
        try:
            frames = self.source.seek(t_ns, history=min(self.history.max_frames, 300))
            self.timeline = self.source.timeline()
            self.post_message(SeekReady(frames))
        except Exception as exc:
            self.post_message(SeekReady([], exc_line(exc)))

    def on_seek_ready(self, message: SeekReady) -> None:
        if message.error:
            self.poll_error = message.error
            self._update_views()
            return
        self.history.clear()
        reset = getattr(self.ban_history, "clear", None)
        if callable(reset):
            reset()
        self.exhausted = False
        if message.frames:
            self.preload(message.frames)
            self.shown = self.history.newest
        self._update_views()
        if not self.paused:  # paused: stay on the frame sought; t reads on
            self._rearm()

    def action_mark(self, direction: int) -> None:
        tl = self.timeline
        if not self.is_replay or tl is None:
            self.bell()
            return
        at = tl.at_t_ns
        snap = self.snapshot
        if snap is not None:
            at = snap.taken_realtime_ns
        gap = int(max(self.interval_s * self.source.speed * 1.5e9, 1e9))  # more than a frame apart: a new run
        target = next_mark([t for t, _ in tl.marks], at, direction, gap)
        if target is None:
            self.bell()
            return
        self.seek_to(target)

    def action_speed(self, steps: int) -> None:
        faster = getattr(self.source, "faster", None)
        if faster is None:
            self.bell()
            return
        faster(int(steps))
        if self.timeline is not None:
            from dataclasses import replace

            self.timeline = replace(self.timeline, speed=self.source.speed)
        self._update_views()

    def action_goto(self) -> None:
        if not self.is_replay:
            self.bell()
            return
        from fipstop.views.goto import GotoScreen

        def done(text: str | None) -> None:
            if not text:
                return
            from fipstop.errors import FipsError
            from fipstop.replay import parse_time

            try:
                self.seek_to(parse_time(text, self.source.reader.first_t_ns))
            except FipsError as e:
                self.poll_error = e.message
                self._update_views()

        self.push_screen(GotoScreen(), done)

