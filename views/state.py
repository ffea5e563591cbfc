"""What the screens read from the app: the :class:`Dashboard` interface.

Screens never call probes or sources: the app hands them the snapshot to
show (live, or picked while paused) and the history for the charts, and
they ask it to open another screen or tap a ring.  Typed as a protocol so a
screen depends on this, not on the app class (which imports every screen).
"""

from __future__ import annotations

from typing import Protocol

from fipstop.model.bans import BanStats
from fipstop.model.snapshot import Snapshot
from fipstop.profile.accumulate import Accumulated
from fipstop.profile.session import ProfileReport
from fipstop.views.history import History
from fipstop.views.widgets.header import HeaderState

__all__ = ["Dashboard"]


class Dashboard(Protocol):
    history: History
    shown: int  # frame number on screen (0: none yet)
    paused: bool
    selected_ring: tuple[str, int] | None
    selected_consumer: tuple[str, int] | None
    #: the process being profiled (the Profile screen), its newest report and why none came
    profile_pid: int | None
    profile_report: ProfileReport | None
    profile_error: str
    #: every report of this profile summed (py-spy top's default view)
    profile_total: Accumulated | None

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot on screen."""

    @property
    def interval_s(self) -> float: ...

    def header_state(self) -> HeaderState: ...

    def ban_stats(self) -> BanStats | None: ...

    def open_ring(self, key: tuple[str, int] | None) -> None: ...

    def open_consumer(self, key: tuple[str, int] | None) -> None: ...

    def request_tap(self, domain: str, ring: int, max_records: int = 64) -> None: ...

    def profile_progress(self) -> str:
        """What the profile's start-up is doing and for how long; "" when it is done."""
