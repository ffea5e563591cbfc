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
(3 / Enter on a consumer), bans (5), empty state (no domain), help (?).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Mapping
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen

from fipstop.errors import exc_line
from fipstop.banmodel import BanHistory, BanStats
from fipstop.model import Snapshot
from fipstop.probes.ring import TapResult
from fipstop.sources import Frame, Source
from fipstop.views.backends import BackendsScreen
from fipstop.views.diagnosis import DiagnosisScreen
from fipstop.views.bans import BansScreen
from fipstop.views.base import FipsScreen
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.empty import EmptyScreen
from fipstop.views.help import HelpScreen
from fipstop.views.history import History
from fipstop.views.overview import OverviewScreen
from fipstop.views.profile import ProfileScreen
from fipstop.views.replay_controls import ReplayControls
from fipstop.views.ring_detail import RingDetailScreen
from fipstop.views.widgets.header import HeaderState


class FrameReady(Message):
    """A poll finished (posted from the worker thread)."""

    def __init__(self, frame: Frame | None, error: str, started: float) -> None:
        super().__init__()
        self.frame = frame
        self.error = error
        self.started = started


class ProfileReady(Message):
    """A profile report (or why none) arrived from the profile worker."""

    def __init__(self, pid: int, report: Any, error: str) -> None:
        super().__init__()
        self.pid = pid
        self.report = report
        self.error = error


class TapReady(Message):
    def __init__(self, result: TapResult) -> None:
        super().__init__()
        self.result = result


class FipsTopApp(ReplayControls, App):
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
        Binding("4", "screen('profile')", "Profile", show=False),
        Binding("p", "profile", "Profile", show=False),
        Binding("5", "screen('bans')", "Bans", show=False),
        Binding("6", "screen('backends')", "Backends", show=False),
        Binding("7", "screen('diagnosis')", "Diagnosis", show=False),
        # replay only (a bell when live)
        Binding("left_square_bracket", "seek(-10)", "-10 s", show=False),
        Binding("right_square_bracket", "seek(10)", "+10 s", show=False),
        Binding("left_curly_bracket", "mark(-1)", "Previous mark", show=False),
        Binding("right_curly_bracket", "mark(1)", "Next mark", show=False),
        Binding("less_than_sign", "speed(-1)", "Slower", show=False),
        Binding("greater_than_sign", "speed(1)", "Faster", show=False),
        Binding("colon", "goto", "Go to time", show=False),
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
        #: frames to show at start instead of polling first (a replay's --start)
        self.initial_frames: list[Frame] = []
        self.timeline = None  # fipstop.replay.Timeline, refreshed by the poll worker while replaying
        self._poll_idle = False  # replay paused: no poll is armed
        self._step_pending = False
        #: ban stats folded frame by frame (ban samples carry only new events)
        self.ban_history = BanHistory()
        #: the process being profiled (Profile screen), its newest report and why none came
        self.profile_pid: int | None = None
        self.profile_report: Any = None
        self.profile_error = ""
        self.profile_options: Any = None  # fipstop.profile.session.ProfileOptions; None: the defaults
        self._profile_stop: threading.Event | None = None

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
        reader = getattr(self.source, "reader", None)  # a replay: the interval it was recorded at
        return HeaderState(
            snapshot=self.snapshot,
            interval_s=float(getattr(reader, "interval_s", self.interval_s)),
            paused=self.paused,
            behind=max(self.history.newest - self.shown, 0),
            frame_no=self.shown - self.history.oldest + 1 if self.shown else 0,
            frames=len(self.history),
            note=self.poll_error,
            replay=self.timeline,
            bans_per_s=self._bans_per_s(),
        )

    def ban_stats(self) -> BanStats | None:
        """Ban activity as of the shown frame (None: no ban source)."""
        return self.ban_history.get(self.shown)

    def _bans_per_s(self) -> float | None:
        b = self.ban_stats()
        if b is None or not any(not s.unavailable or s.bans_total for s in b.sources):
            return None  # no ban source on this host: no slot in the header
        return b.bans_per_s

    # -- start / polling -----------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return OverviewScreen()

    @property
    def is_replay(self) -> bool:
        return callable(getattr(self.source, "seek", None))

    def on_mount(self) -> None:
        if self.initial_frames:
            frames, self.initial_frames = self.initial_frames, []
            self.preload(frames)
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
            frame, error = None, exc_line(exc)
        if self.is_replay:
            try:
                self.timeline = self.source.timeline()
            except Exception:  # the timeline is decoration: never fail a frame for it
                pass
        self.post_message(FrameReady(frame, error, started))

    def on_frame_ready(self, message: FrameReady) -> None:
        self.poll_error = message.error
        if message.frame is not None:
            self.accept_frame(message.frame)
        elif not message.error and not getattr(self.source, "following", False):
            self.exhausted = True  # the source has no more frames
            self._update_views()
            return
        else:
            self._update_views()
        if self.autopoll and self.paused and self.is_replay:
            self._poll_idle = True  # a paused replay reads no further; unpause or t re-arms
        elif self.autopoll:
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
            self.ban_history.add(self.history.append(f.snapshot, f.aux), f.aux, self.history.oldest)
        if frames:
            self.accept_frame(frames[-1])

    def accept_frame(self, frame: Frame) -> None:
        """Store a frame (and show it unless paused)."""
        self.frames_received += 1
        if self.frames_received == 1:
            self.call_after_refresh(self._freeze_startup_objects)
        no = self.history.append(frame.snapshot, frame.aux)
        self.ban_history.add(no, frame.aux, self.history.oldest)
        if not self.paused or self.shown < self.history.oldest:
            self.shown = self.history.clamp(no if not self.paused else self.shown)
        if self._step_pending:  # t on a paused replay asked for exactly this frame
            self._step_pending = False
            self.shown = no
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
            result = TapResult(domain, ring, error=exc_line(exc))
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
            self._rearm()
        self._update_views()

    def _rearm(self) -> None:
        if self._poll_idle:
            self._poll_idle = False
            self.poll_now()

    def action_step(self, delta: int) -> None:
        if not len(self.history):
            return
        if not self.paused:
            self.paused = True
            if delta > 0:
                self._update_views()
                return
        if delta > 0 and self.shown == self.history.newest and self.is_replay and self._poll_idle:
            self.paused = True
            self._poll_idle = False
            self._step_pending = True
            self.poll_now()  # a paused replay reads the next frame from the file
            return
        target = self.history.clamp(self.shown + delta)
        if target == self.shown:
            self.bell()
        self.shown = target
        self._update_views()

    def action_back(self) -> None:
        if len(self.screen_stack) > 1 and isinstance(self.screen, (RingDetailScreen, ConsumerDetailScreen,
                                                                   BackendsScreen, BansScreen, ProfileScreen,
                                                                   DiagnosisScreen)):
            self.pop_screen()

    def _base(self) -> None:
        while len(self.screen_stack) > 1 and isinstance(self.screen, (RingDetailScreen, ConsumerDetailScreen,
                                                                       HelpScreen, BackendsScreen, BansScreen,
                                                                       ProfileScreen, DiagnosisScreen)):
            self.pop_screen()

    def action_screen(self, which: str) -> None:
        if which == "diagnosis":  # works from any state: "healthy" or "no domain" is a diagnosis too
            if not isinstance(self.screen, DiagnosisScreen):
                self._base()
                self.push_screen(DiagnosisScreen())
            return
        if which == "backends":  # also without any FIPS domain: a host may log only to files and syslog
            if not isinstance(self.screen, BackendsScreen):
                self._base()
                self.push_screen(BackendsScreen())
            return
        if which == "bans":  # ban sources need no FIPS domain of their own either (Fail2Ban)
            if not isinstance(self.screen, BansScreen):
                self._base()
                self.push_screen(BansScreen())
            return
        if which == "profile":
            if not isinstance(self.screen, ProfileScreen):
                self.open_profile(self.profile_pid or self._pid_to_profile())
            return
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

    # -- profile of one process (the Profile screen) ---------------------------------------

    def _pid_to_profile(self) -> int | None:
        """The producer of the ring shown (or highlighted), else the consumer shown."""
        s = self.snapshot
        if s is None:
            return None
        screen = self.screen
        if isinstance(screen, ConsumerDetailScreen):
            row = s.consumer_row(*screen.key)
            return int(s.consumers[row]["pid"]) if row is not None else None
        key = screen.key if isinstance(screen, RingDetailScreen) else (self.selected_ring or self._first_ring())
        row = s.ring_row(*key) if key is not None else None
        return int(s.rings[row]["pid"]) if row is not None else None

    def action_profile(self) -> None:
        self.open_profile(self._pid_to_profile())

    def open_profile(self, pid: int | None) -> None:
        """Profile ``pid`` (a worker starts the samplers and polls them every
        interval) and show it; the profile stops when its screen is closed."""
        if not pid or pid <= 0:
            self.notify("no process to profile: open a ring or a consumer first", severity="warning")
            return
        pid = int(pid)
        self._base()  # an older Profile screen goes, and its profile with it
        self.profile_close()
        self.profile_pid, self.profile_report, self.profile_error = pid, None, ""
        self._profile_stop = stop = threading.Event()
        self._profile_loop(pid, stop)
        self.push_screen(ProfileScreen(pid, stop))

    def profile_close(self) -> None:
        if self._profile_stop is not None:
            self._profile_stop.set()
            self._profile_stop = None

    @work(thread=True, group="profile", exit_on_error=False)
    def _profile_loop(self, pid: int, stop: threading.Event) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        start = getattr(self.source, "profile_start", None)
        if start is None:
            self.post_message(ProfileReady(pid, None, "this source cannot profile processes (a recording?)"))
            return
        try:
            start(pid, self.profile_options)
        except Exception as exc:
            self.post_message(ProfileReady(pid, None, f"profiling failed to start: {exc_line(exc)}"))
            return
        try:
            while not stop.wait(self.interval_s) and not worker.is_cancelled:
                try:
                    report, error = self.source.profile_poll(pid), ""
                except Exception as exc:
                    report, error = None, exc_line(exc)
                self.post_message(ProfileReady(pid, report, error))
        finally:
            try:
                self.source.profile_stop(pid)
            except Exception:
                pass

    def on_profile_ready(self, message: ProfileReady) -> None:
        if message.pid != self.profile_pid:
            return
        if message.report is self.profile_report and message.error == self.profile_error:
            return  # nothing new (a fixture source repeats its last report)
        self.profile_error = message.error
        if message.report is not None:
            self.profile_report = message.report
        if not self.screen_stack:  # shutting down
            return
        screen = self.screen
        if isinstance(screen, ProfileScreen) and screen.is_mounted and not self.paused:
            screen.refresh_view()

    def on_unmount(self) -> None:
        self.profile_close()
        gc.unfreeze()  # what the app held can be collected again (tests run many apps in one process)
        try:
            self.source.close()
        except Exception:
            pass
