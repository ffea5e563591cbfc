"""GotoScreen: ask for a time to jump to while replaying (key ``:``).

It shows the recording's own range (not an example time) and checks the
answer against it: a time before the first frame or after the last one is
said in the prompt, which stays open, as is a time it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from fipstop.errors import FipsError
from fipstop.views import format as fmt
from fipstop.views import palette


def range_text(first_t_ns: int, last_t_ns: int) -> str:
    """``2026-12-02 12:00:00 – 12:45:10`` (the day again only when it changes)."""
    a, b = fmt.datetime_s(first_t_ns), fmt.datetime_s(last_t_ns)
    return f"{a} – {b[11:] if a[:10] == b[:10] else b}"


def check_time(t_ns: int, first_t_ns: int, last_t_ns: int) -> str:
    """Why ``t_ns`` is outside the recording, or "" when it is inside."""
    if t_ns < first_t_ns:
        return f"{fmt.datetime_s(t_ns)} is before the recording starts ({fmt.clock(first_t_ns)})"
    if t_ns > last_t_ns:
        return f"{fmt.datetime_s(t_ns)} is after the recording ends ({fmt.clock(last_t_ns)})"
    return ""


class GotoScreen(ModalScreen[int | None]):
    """Dismissed with the time to go to (realtime ns), or None (Esc)."""

    DEFAULT_CSS = """
    GotoScreen {
        align: center middle;
    }
    GotoScreen > Vertical {
        width: 72;
        height: auto;
        border: round $accent;
        background: $panel;
        padding: 0 1;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, first_t_ns: int, last_t_ns: int, parse: Callable[[str], int]) -> None:
        super().__init__()
        self.first_t_ns, self.last_t_ns = int(first_t_ns), int(last_t_ns)
        self.parse = parse

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Go to a time in {range_text(self.first_t_ns, self.last_t_ns)}", id="goto-range")
            yield Static("HH:MM[:SS], ISO 8601, or +SECONDS from the start", id="goto-help")
            yield Input(placeholder=fmt.clock(self.first_t_ns), id="goto-input")
            yield Static("", id="goto-error")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.dismiss(None)
            return
        try:
            t_ns = self.parse(text)
        except FipsError as e:
            self._say(e.message)
            return
        why = check_time(t_ns, self.first_t_ns, self.last_t_ns)
        if why:
            self._say(why)
            return
        self.dismiss(t_ns)

    def _say(self, text: str) -> None:
        from rich.text import Text

        self.query_one("#goto-error", Static).update(Text(text, style=palette.WARN))

    def action_cancel(self) -> None:
        self.dismiss(None)
