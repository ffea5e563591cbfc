"""FipsScreen: what every dashboard screen shares.

Screens never call probes or sources: the app hands them the snapshot to
show (live or picked while paused) through ``refresh_view()``, and the
message tap through ``show_tap()``; what they read from the app is
:class:`fipstop.views.state.Dashboard`.
"""

from __future__ import annotations

from typing import cast

from textual.screen import Screen

from fipstop.probes.ring import TapResult
from fipstop.views.state import Dashboard
from fipstop.views.widgets.header import HeaderState, StatusHeader


class FipsScreen(Screen[None]):
    #: shown in the help screen and the footer
    SCREEN_NAME = ""

    @property
    def fips(self) -> Dashboard:
        return cast(Dashboard, self.app)  # FipsTopApp implements it (checked by mypy in views/app.py)

    def on_screen_resume(self) -> None:
        # a screen that comes (back) on top is sent whole: no cell of the one before may stay
        self.refresh(repaint=True, layout=True)
        self.refresh_view()

    def header_state(self) -> HeaderState:
        return self.fips.header_state()

    def refresh_header(self) -> None:
        for h in self.query(StatusHeader):
            h.show(self.header_state())

    def refresh_view(self) -> None:
        """Redraw from ``self.fips.snapshot`` (called for every frame shown)."""
        self.refresh_header()

    def show_tap(self, result: TapResult) -> None:
        """A message tap arrived (only the ring detail uses it)."""
