"""A yes/no question before an action that changes something outside the dashboard (evicting a consumer).

y runs it, n or Esc does nothing: k9s asks the same way before it deletes a pod. The text says exactly what will
happen, so the answer is informed.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmAction(ModalScreen[bool]):
    """y: go ahead; n / Esc: cancel.  Dismisses with the answer."""

    DEFAULT_CSS = """
    ConfirmAction { align: center middle; background: $background 60%; }
    ConfirmAction > Vertical { width: 76; max-width: 100%; height: auto; border: round $warning;
                               background: $panel; padding: 0 1; }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "Cancel"),
                Binding("escape", "answer(False)", "Cancel", show=False)]

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.text, id="confirm-text")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
