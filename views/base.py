"""FipsScreen: what every dashboard screen shares.

Screens never call probes or sources: the app hands them the snapshot to
show (live or picked while paused) through ``refresh_view()``, and the
message tap through ``show_tap()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from fipstop.views.widgets.header import HeaderState, StatusHeader

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.probes.ring import TapResult
    from fipstop.views.app import FipsTopApp


class FipsScreen(Screen):
    #: shown in the help screen and the footer
    SCREEN_NAME = ""

    @property
    def fips(self) -> FipsTopApp:
        return self.app  # type: ignore[return-value]

    def on_screen_resume(self) -> None:
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
