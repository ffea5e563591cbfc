"""FipsTopApp: the live monitor (``fipstop`` / ``fipstop top``).

Data flow: a :class:`fipstop.sources.Source` is polled in one exclusive
thread worker per probe group (``@work(exclusive=True, thread=True)``); the
worker posts a :class:`FrameReady` message and never touches a widget; the
handler stores the snapshot in the history, shows it (unless paused) and
re-arms the worker for the next interval.  A slow probe therefore never
freezes the screen: keys, scrolling and stepping keep working while a poll
is in flight.  The message tap of the ring detail goes the same way
(:class:`TapReady`).

Screens: overview (1), ring detail (2 / Enter on a ring), consumer detail
(3 / Enter on a consumer), empty state (no domain), help (?).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen

from fipstop.model import Snapshot
from fipstop.probes.ring import TapResult
from fipstop.sources import Frame, Source
from fipstop.views.base import FipsScreen
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.empty import EmptyScreen
from fipstop.views.help import HelpScreen
from fipstop.views.history import History
from fipstop.views.overview import OverviewScreen
from fipstop.views.ring_detail import RingDetailScreen
from fipstop.views.widgets.header import HeaderState


class FrameReady(Message):
    """A poll finished (posted from the worker thread)."""

    def __init__(self, frame: Frame | None, error: str, started: float) -> None:
        super().__init__()
        self.frame = frame
        self.error = error
        self.started = started


class TapReady(Message):
    def __init__(self, result: TapResult) -> None:
        super().__init__()
        self.result = result


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class FipsTopApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "fipstop"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("space", "toggle_pause", "Pause"),
        Binding("t", "step(1)", "Step", show=False),
        Binding("T", "step(-1)", "Step back", show=False),
        Binding("1", "screen('overview')", "Overview", show=False),
        Binding("2", "screen('ring')", "Ring", show=False),
        Binding("3", "screen('consumer')", "Consumer", show=False),
    ]

    def __init__(self, source: Source, *, autopoll: bool = True, paced: bool = True,
                 history_frames: int = 600, history_bytes: int = 64 << 20) -> None:
        """``autopoll=False``: nothing is polled until ``poll_now()``;
        ``paced=False``: the next poll starts as soon as a frame is shown
        (fixtures, benchmarks) instead of one interval after the last."""
        super().__init__()
        self.source = source
        self.autopoll = autopoll
        self.paced = paced
        self.history = History(history_frames, history_bytes)
        self.shown = 0  # frame number on screen (0: none yet)
        self.paused = False
        self.poll_error = ""
        self.frames_received = 0
        self.selected_ring: tuple[str, int] | None = None
        self.selected_consumer: tuple[str, int] | None = None
        self.last_tap: TapResult | None = None
        self.exhausted = False

    # -- state the screens read -----------------------------------------------------------

    @property
    def interval_s(self) -> float:
        return float(getattr(self.source, "interval_s", 1.0))

    @property
    def snapshot(self) -> Snapshot | None:
        return self.history.get(self.shown)

    @property
    def aux(self) -> Mapping[str, Any]:
        """The shown frame's other probes' raw samples (``Frame.aux``: "bans",
        "backends", ...; a ``ProbeFailure`` where a probe failed)."""
        return self.history.aux(self.shown)

    def header_state(self) -> HeaderState:
        return HeaderState(
            snapshot=self.snapshot,
            interval_s=self.interval_s,
            paused=self.paused,
            behind=max(self.history.newest - self.shown, 0),
            frame_no=self.shown - self.history.oldest + 1 if self.shown else 0,
            frames=len(self.history),
            note=self.poll_error,
        )

    # -- start / polling -----------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return OverviewScreen()

    def on_mount(self) -> None:
        if self.autopoll:
            self.poll_now()

    def poll_now(self) -> None:
        self._poll_ring()

    @work(exclusive=True, thread=True, group="probe:ring", exit_on_error=False)
    def _poll_ring(self) -> None:
        started = time.monotonic()
        try:
            frame = self.source.poll()
            error = ""
        except Exception as exc:  # report, keep polling
            frame, error = None, _one_line(exc)
        self.post_message(FrameReady(frame, error, started))

    def on_frame_ready(self, message: FrameReady) -> None:
        self.poll_error = message.error
        if message.frame is not None:
            self.accept_frame(message.frame)
        elif not message.error:
            self.exhausted = True  # the source has no more frames
            self._update_views()
            return
        else:
            self._update_views()
        if self.autopoll:
            delay = max(self.interval_s - (time.monotonic() - message.started), 0.0) if self.paced else 0.0
            if delay > 0.001:
                self.set_timer(delay, self.poll_now, name="poll")
            else:
                self.call_later(self.poll_now)

    def preload(self, frames) -> None:
        """Put frames into the history without drawing each one, then show
        the last (tests, screenshots, and later a replay's seek)."""
        frames = list(frames)
        for f in frames[:-1]:
            self.frames_received += 1
            self.history.append(f.snapshot, f.aux)
        if frames:
            self.accept_frame(frames[-1])

    def accept_frame(self, frame: Frame) -> None:
        """Store a frame (and show it unless paused)."""
        self.frames_received += 1
        if self.frames_received == 1:
            self.call_after_refresh(self._freeze_startup_objects)
        no = self.history.append(frame.snapshot, frame.aux)
        if not self.paused or self.shown < self.history.oldest:
            self.shown = self.history.clamp(no if not self.paused else self.shown)
        self._update_views()

    @staticmethod
    def _freeze_startup_objects() -> None:
        """Once the first frame is on screen: move everything alive (modules,
        textual's DOM, styles, screens) out of the collector's reach.  Without
        it every full collection walks them all, a 50-80 ms stall of the UI
        thread every few seconds (the frame-time p95 with 1024 rings)."""
        gc.collect()
        gc.freeze()

    @work(exclusive=True, thread=True, group="tap", exit_on_error=False)
    def _tap(self, domain: str, ring: int, max_records: int) -> None:
        try:
            result = self.source.tap(domain, ring, max_records)
        except Exception as exc:
            result = TapResult(domain, ring, error=_one_line(exc))
        self.post_message(TapReady(result))

    def request_tap(self, domain: str, ring: int, max_records: int = 64) -> None:
        self._tap(domain, ring, max_records)

    def on_tap_ready(self, message: TapReady) -> None:
        self.last_tap = message.result
        screen = self.screen
        if isinstance(screen, FipsScreen):
            screen.show_tap(message.result)

    # -- views ---------------------------------------------------------------------------

    def _update_views(self) -> None:
        snap = self.snapshot
        if snap is not None:
            empty = not snap.domains
            on_empty = any(isinstance(s, EmptyScreen) for s in self.screen_stack)
            if empty and not on_empty and isinstance(self.screen, OverviewScreen):
                self.push_screen(EmptyScreen())
                return  # the new screen refreshes itself when mounted
            if not empty and isinstance(self.screen, EmptyScreen):
                self.pop_screen()
                return
        screen = self.screen
        if isinstance(screen, FipsScreen) and screen.is_mounted:
            screen.refresh_view()

    # -- actions -------------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self.shown = self.history.newest
        self._update_views()

    def action_step(self, delta: int) -> None:
        if not len(self.history):
            return
        if not self.paused:
            self.paused = True
            if delta > 0:
                self._update_views()
                return
        target = self.history.clamp(self.shown + delta)
        if target == self.shown:
            self.bell()
        self.shown = target
        self._update_views()

    def action_back(self) -> None:
        if len(self.screen_stack) > 1 and isinstance(self.screen, (RingDetailScreen, ConsumerDetailScreen)):
            self.pop_screen()

    def _base(self) -> None:
        while len(self.screen_stack) > 1 and isinstance(self.screen, (RingDetailScreen, ConsumerDetailScreen,
                                                                       HelpScreen)):
            self.pop_screen()

    def action_screen(self, which: str) -> None:
        if isinstance(self.screen, EmptyScreen):
            return
        if which == "overview":
            self._base()
        elif which == "ring":
            self.open_ring(self.selected_ring or self._first_ring())
        elif which == "consumer":
            self.open_consumer(self.selected_consumer or self._first_consumer())

    def _first_ring(self) -> tuple[str, int] | None:
        s = self.snapshot
        return s.ring_key(0) if s is not None and s.rings.size else None

    def _first_consumer(self) -> tuple[str, int] | None:
        s = self.snapshot
        return s.consumer_key(0) if s is not None and s.consumers.size else None

    def open_ring(self, key: Any) -> None:
        if key is None:
            self.notify("no ring to show", severity="warning")
            return
        key = (str(key[0]), int(key[1]))
        self.selected_ring = key
        self._base()
        self.push_screen(RingDetailScreen(key))

    def open_consumer(self, key: Any) -> None:
        if key is None:
            self.notify("no consumer to show", severity="warning")
            return
        key = (str(key[0]), int(key[1]))
        self.selected_consumer = key
        self._base()
        self.push_screen(ConsumerDetailScreen(key))

    def on_unmount(self) -> None:
        gc.unfreeze()  # what the app held can be collected again (tests run many apps in one process)
        try:
            self.source.close()
        except Exception:
            pass
