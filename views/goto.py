"""GotoScreen: ask for a time to jump to while replaying (key g)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class GotoScreen(ModalScreen[str | None]):
    DEFAULT_CSS = """
    GotoScreen {
        align: center middle;
    }
    GotoScreen > Vertical {
        width: 60;
        height: auto;
        border: round $accent;
        background: $panel;
        padding: 0 1;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Go to: HH:MM[:SS], ISO 8601, or +SECONDS from the start")
            yield Input(placeholder="03:12:00", id="goto-input")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
