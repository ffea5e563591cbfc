"""FipsTopApp: the live monitor (``fipstop`` / ``fipstop top``).

Data flow: a :class:`fipstop.sources.protocol.Source` is polled in one exclusive
thread worker per probe group (``@work(exclusive=True, thread=True)``); the
worker posts a :class:`FrameReady` message and never touches a widget; the
handler stores the snapshot in the history, shows it (unless paused) and
re-arms the worker for the next interval.  A slow probe therefore never
freezes the screen: keys, scrolling and stepping keep working while a poll
is in flight.  The message tap of the ring detail goes the same way
(:class:`TapReady`).

Screens: overview (1), ring detail (2 / Enter on a ring), consumer detail
(3 / Enter on a consumer), bans (5), empty state (no domain), help (?).
Esc pops exactly one level (profile -> ring detail -> overview); Ctrl-C
quits as q does (htop); Ctrl-L repaints the whole terminal.

The profile's start-up (bcc compiles for seconds) runs in the profile
worker; the screen shows what it is doing and for how long, and Esc leaves
at once (the compile finishes in the background and is parked for reuse:
:mod:`fipstop.sources.profiling`).  The screen goes to the terminal through
:class:`fipstop.views.driver.PrivateScreenDriver`, so the compile's
redirection of fd 2 can no longer swallow frames.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Sequence

from textual import work
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message
from textual.screen import Screen

from fipstop.errors import exc_line
from fipstop.model.bans import BanStats
from fipstop.model.snapshot import Frame, Snapshot
from fipstop.probes.ring import TapResult
from fipstop.profile.accumulate import Accumulated, accumulate
from fipstop.profile.session import ProfileOptions, ProfileReport
from fipstop.sources.protocol import Profiling, Seekable, Source, Timeline
from fipstop.views import evict_action, palette
from fipstop.views.backends import BackendsScreen
from fipstop.views.bans import BansScreen
from fipstop.views.base import FipsScreen
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.diagnosis import DiagnosisScreen
from fipstop.views.driver import PrivateScreenDriver
from fipstop.views.empty import EmptyScreen
from fipstop.views.fipsipc_rings import FipsIpcTapMixin, ipc_rings
from fipstop.views.help import HelpScreen
from fipstop.views.history import History
from fipstop.views.overview import OverviewScreen
from fipstop.views.profile import ProfileScreen
from fipstop.views.replay_controls import ReplayControls
from fipstop.views.ring_detail import RingDetailScreen
from fipstop.views.state import Dashboard
from fipstop.views.widgets.header import HeaderState, StatusHeader


class FrameReady(Message):
    """A poll finished (posted from the worker thread)."""

    def __init__(self, frame: Frame | None, error: str, started: float) -> None:
        super().__init__()
        self.frame = frame
        self.error = error
        self.started = started


class ProfileReady(Message):
    """A profile report (or why none) arrived from the profile worker."""

    def __init__(self, pid: int, report: ProfileReport | None, error: str) -> None:
        super().__init__()
        self.pid = pid
        self.report = report
        self.error = error


class TapReady(Message):
    def __init__(self, result: TapResult) -> None:
        super().__init__()
        self.result = result


class FipsTopApp(FipsIpcTapMixin, ReplayControls):
    CSS_PATH = "app.tcss"
    TITLE = "fipstop"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),  # as htop, top, less
        Binding("ctrl+l", "repaint", "Repaint", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("space", "paused_toggle", "Resume"),  # shown instead of Pause while paused (check_action)
        Binding("space", "toggle_pause", "Pause"),
        # the first t/T is in the footer only while paused (check_action); the second works always
        Binding("t", "paused_step(1)", "Step", key_display="t"),
        Binding("T", "paused_step(-1)", "Step back", key_display="T"),
        Binding("t", "step(1)", "Step", show=False),
        Binding("T", "step(-1)", "Step back", show=False),
        Binding("1", "screen('overview')", "Overview", show=False),
        Binding("2", "screen('ring')", "Ring", show=False),
        Binding("3", "screen('consumer')", "Consumer", show=False),
        Binding("4", "screen('profile')", "Profile", show=False),
        Binding("p", "profile", "Profile", show=False),
        Binding("ctrl+k", "evict", "Evict", show=False),  # k9s's kill; htop's F9
        Binding("f9", "evict", "Evict", show=False),
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
        # NO_COLOR (textual read and removed it from the environment): the dashboard's own styles too
        palette.use_no_color() if self.no_color else palette.use_color()
        self.source = source
        #: the replay controls' source, checked once: None when live (the replay keys ring the bell)
        self.replay: Seekable | None = source if isinstance(source, Seekable) else None
        #: who profiles processes for the Profile screen (None: a recording cannot)
        self.profiling: Profiling | None = source.profiling
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
        self.timeline: Timeline | None = None  # refreshed by the poll worker while replaying
        self._poll_idle = False  # replay paused: no poll is armed
        self._step_pending = False
        #: the process being profiled (Profile screen), its newest report and why none came
        self.profile_pid: int | None = None
        self.profile_report: ProfileReport | None = None
        self.profile_total: Accumulated | None = None
        self.profile_error = ""
        self.profile_options: ProfileOptions | None = None  # None: the defaults
        self._profile_stop: threading.Event | None = None
        #: when the newest profile's start-up began (monotonic s; None: none is starting)
        self.profile_started_mono: float | None = None

    def get_driver_class(self) -> type[Driver]:
        cls = super().get_driver_class()
        return PrivateScreenDriver if cls is LinuxDriver else cls

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("paused_step", "paused_toggle"):
            return self.paused  # shown (and taken) only while paused
        if action == "toggle_pause":
            return not self.paused
        return True
    # -- state the screens read -----------------------------------------------------------

    @property
    def interval_s(self) -> float:
        return float(self.source.interval_s)

    @property
    def snapshot(self) -> Snapshot | None:
        return self.history.get(self.shown)

    def header_state(self) -> HeaderState:
        # a replay shows the interval it was recorded at, not the pace of its speed
        interval = self.replay.recorded_interval_s if self.replay is not None else self.interval_s
        return HeaderState(
            snapshot=self.snapshot,
            interval_s=float(interval),
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
        snap = self.snapshot
        return snap.bans if snap is not None else None

    def _bans_per_s(self) -> float | None:
        b = self.ban_stats()
        if b is None or not any(not s.unavailable or s.bans_total for s in b.sources):
            return None  # no ban source on this host: no slot in the header
        return b.bans_per_s

    # -- start / polling -----------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return OverviewScreen()

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
        if self.replay is not None:
            try:
                self.timeline = self.replay.timeline()
            except Exception:  # the timeline is decoration: never fail a frame for it
                pass
        self.post_message(FrameReady(frame, error, started))

    def on_frame_ready(self, message: FrameReady) -> None:
        self.poll_error = message.error
        if message.frame is not None:
            self.accept_frame(message.frame)
        elif not message.error and not (self.replay is not None and self.replay.following):
            self.exhausted = True  # the source has no more frames
            self._update_views()
            return
        else:
            self._update_views()
        if self.autopoll and self.paused and self.replay is not None:
            self._poll_idle = True  # a paused replay reads no further; unpause or t re-arms
        elif self.autopoll:
            delay = max(self.interval_s - (time.monotonic() - message.started), 0.0) if self.paced else 0.0
            if delay > 0.001:
                self.set_timer(delay, self.poll_now, name="poll")
            else:
                self.call_later(self.poll_now)

    def preload(self, frames: Sequence[Frame]) -> None:
        """Put frames into the history without drawing each one, then show
        the last (tests, screenshots, a replay's seek)."""
        frames = list(frames)
        for f in frames[:-1]:
            self.frames_received += 1
            self.history.append(f.snapshot)
        if frames:
            self.accept_frame(frames[-1])

    def accept_frame(self, frame: Frame) -> None:
        """Store a frame (and show it unless paused)."""
        self.frames_received += 1
        if self.frames_received == 1:
            self.call_after_refresh(self._freeze_startup_objects)
        no = self.history.append(frame.snapshot)
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
        if not self.screen_stack:  # a frame that arrived while the app shuts down
            return
        snap = self.snapshot
        if snap is not None:
            empty = not snap.domains and not ipc_rings(snap.fipsipc)  # prototype rings show on the overview too
            on_empty = any(isinstance(s, EmptyScreen) for s in self.screen_stack)
            if empty and not on_empty and isinstance(self.screen, OverviewScreen):
                self.push_screen(EmptyScreen())
                return  # the new screen refreshes itself when mounted
            if not empty and isinstance(self.screen, EmptyScreen):
                self.pop_screen()
                return
        screen = self.screen
        if isinstance(screen, FipsScreen) and screen.is_mounted:
            try:
                screen.refresh_view()
            except NoMatches:
                # a frame that arrived while the screen's widgets are being taken down (the app quits:
                # CI saw the overview's #ipc-panel gone under a late frame) or not all there yet: this
                # frame is not drawn, the next one is; a traceback at quit is worse than a skipped frame
                pass

    # -- actions -------------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self.shown = self.history.newest
            self._rearm()
        self.refresh_bindings()  # the footer shows t/T while paused
        self._update_views()

    def action_paused_toggle(self) -> None:
        self.action_toggle_pause()

    def action_paused_step(self, delta: int) -> None:
        self.action_step(delta)

    def action_repaint(self) -> None:
        """Ctrl-L: lay out and send every cell of the screen again."""
        self.screen.refresh(repaint=True, layout=True)
        self.refresh(repaint=True, layout=True)

    def _rearm(self) -> None:
        if self._poll_idle:
            self._poll_idle = False
            self.poll_now()

    def action_step(self, delta: int) -> None:
        if not len(self.history):
            return
        if not self.paused:
            self.paused = True
            self.refresh_bindings()
            if delta > 0:
                self._update_views()
                return
        if delta > 0 and self.shown == self.history.newest and self.replay is not None and self._poll_idle:
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

    async def action_back(self) -> None:
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
            screen = self.screen
            if isinstance(screen, OverviewScreen) and (group := screen.highlighted_group()) is not None:
                # a group row: its first ring as drawn, not the ring highlighted before the cursor moved
                key = screen.first_ring_shown(group)
                if key is None:
                    self.notify("the group is folded: unfold it (+) or highlight a ring", severity="warning")
                    return
                self.open_ring(key)
                return
            self.open_ring(self.selected_ring or self._first_ring())
        elif which == "consumer":
            self.open_consumer(self.selected_consumer or self._first_consumer())

    def _first_ring(self) -> tuple[str, int] | None:
        s = self.snapshot
        return s.ring_key(0) if s is not None and s.rings.size else None

    def _first_consumer(self) -> tuple[str, int] | None:
        s = self.snapshot
        return s.consumer_key(0) if s is not None and s.consumers.size else None

    def open_ring(self, key: tuple[str, int] | None) -> None:
        if key is None:
            self.notify("no ring to show", severity="warning")
            return
        key = (str(key[0]), int(key[1]))
        self.selected_ring = key
        self._base()
        self.push_screen(RingDetailScreen(key))

    def open_consumer(self, key: tuple[str, int] | None) -> None:
        if key is None:
            self.notify("no consumer to show", severity="warning")
            return
        key = (str(key[0]), int(key[1]))
        self.selected_consumer = key
        self._base()
        self.push_screen(ConsumerDetailScreen(key))

    # -- profile of one process (the Profile screen) ---------------------------------------

    def _pid_to_profile(self) -> int | None:
        """The consumer shown, or highlighted in the focused consumers table; else the producer of the ring
        shown (or highlighted)."""
        s = self.snapshot
        if s is None:
            return None
        screen = self.screen
        if isinstance(screen, ConsumerDetailScreen):
            row = s.consumer_row(*screen.key)
            return int(s.consumers[row]["pid"]) if row is not None else None
        if isinstance(screen, OverviewScreen) and screen.focused is screen.consumers_table:
            key = screen.consumers_table.cursor_key  # p on a consumer row profiles that consumer
            row = s.consumer_row(*key) if key is not None else None
            return int(s.consumers[row]["pid"]) if row is not None else None
        if isinstance(screen, OverviewScreen) and (group := screen.highlighted_group()) is not None:
            # a process group row profiles that process; a domain's rings may be many processes' (None asks)
            return int(group.value) if group.mode == "process" else None
        key = screen.key if isinstance(screen, RingDetailScreen) else (self.selected_ring or self._first_ring())
        row = s.ring_row(*key) if key is not None else None
        return int(s.rings[row]["pid"]) if row is not None else None

    def action_evict(self) -> None:
        evict_action.start(self, self.snapshot, replaying=self.replay is not None)

    def action_profile(self) -> None:
        screen = self.screen
        if isinstance(screen, OverviewScreen) and (group := screen.highlighted_group()) is not None \
                and group.mode != "process":
            self.notify("a domain's rings may be several processes': highlight a ring, or group by process (F5)",
                        severity="warning")
            return
        self.open_profile(self._pid_to_profile())

    def open_profile(self, pid: int | None) -> None:
        """Profile ``pid`` (a worker starts the samplers and polls them every
        interval) and show it on top of the screen it was opened from (Esc
        goes back there); the profile stops when its screen is closed."""
        if not pid or pid <= 0:
            self.notify("no process to profile: open a ring or a consumer first", severity="warning")
            return
        pid = int(pid)
        while len(self.screen_stack) > 1 and isinstance(self.screen, (ProfileScreen, HelpScreen)):
            self.pop_screen()  # an older Profile screen goes, and its profile with it
        self.profile_close()
        self.profile_pid, self.profile_report, self.profile_error = pid, None, ""
        self.profile_total = None
        self.profile_started_mono = time.monotonic()
        self._profile_stop = stop = threading.Event()
        self._profile_loop(pid, stop)
        self.push_screen(ProfileScreen(pid, stop))

    def profile_progress(self) -> str:
        """The progress line of a profile still starting ("compiling the eBPF
        program, 12 s…"), "" once a report or an error came."""
        started = self.profile_started_mono
        if started is None or self.profile_report is not None or self.profile_error:
            return ""
        phase = ""
        if self.profiling is not None and self.profile_pid is not None:
            try:
                phase = self.profiling.profile_phase(self.profile_pid)
            except Exception:
                phase = ""
        return f"{phase or 'starting the profilers'}, {time.monotonic() - started:.0f} s…"

    def profile_close(self) -> None:
        if self._profile_stop is not None:
            self._profile_stop.set()
            self._profile_stop = None

    def _profile_loop(self, pid: int, stop: threading.Event) -> None:
        """The profile's thread: a daemon thread, not a textual thread worker.
        Those run in asyncio's default executor, which the app's exit joins,
        so Ctrl-C during a bcc compile waited for the compile (7 s measured);
        a daemon thread is left behind instead (the kernel detaches whatever
        it attached when the process exits)."""
        threading.Thread(target=self._profile_run, args=(pid, stop), name=f"fipstop-profile-{pid}",
                         daemon=True).start()

    def _profile_run(self, pid: int, stop: threading.Event) -> None:
        profiling = self.profiling
        if profiling is None:
            self.post_message(ProfileReady(pid, None, "this source cannot profile processes (a recording?)"))
            return
        try:
            profiling.profile_start(pid, self.profile_options)
        except Exception as exc:
            self.post_message(ProfileReady(pid, None, f"profiling failed to start: {exc_line(exc)}"))
            return
        if stop.is_set() and self.profile_pid == pid and self._profile_stop is not stop:
            return  # left during the start and reopened on the same pid: that start takes this session over
        try:
            while not stop.wait(self.interval_s):
                report: ProfileReport | None
                try:
                    report, error = profiling.profile_poll(pid), ""
                except Exception as exc:
                    report, error = None, exc_line(exc)
                self.post_message(ProfileReady(pid, report, error))
        finally:
            try:
                profiling.profile_stop(pid)
            except Exception:
                pass

    def on_profile_ready(self, message: ProfileReady) -> None:
        if message.pid != self.profile_pid:
            return
        self.profile_started_mono = None
        if message.report is self.profile_report and message.error == self.profile_error:
            return  # nothing new (a fixture source repeats its last report)
        self.profile_error = message.error
        if message.report is not None:
            self.profile_report = message.report
            self.profile_total = accumulate(self.profile_total, message.report)
        if not self.screen_stack:  # shutting down
            return
        screen = self.screen
        if isinstance(screen, ProfileScreen) and screen.is_mounted and not self.paused:
            screen.refresh_view()

    def on_status_header_seek(self, message: StatusHeader.Seek) -> None:
        self.seek_to(message.t_ns)

    def on_unmount(self) -> None:
        self.profile_close()
        gc.unfreeze()  # what the app held can be collected again (tests run many apps in one process)
        try:
            self.source.close()
        except Exception:
            pass


def _implements_dashboard(app: FipsTopApp) -> Dashboard:
    """Never called: mypy checks here that the app is what the screens read."""
    return app
