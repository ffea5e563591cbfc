"""SortMenu (F6 on the overview, as htop's): pick the focused table's sort column from a list.

Every sortable column is listed, the ones this width hides too (marked
"hidden at this width", so a sort on a column not on screen is a choice made
knowingly), each with its direct key (Shift+letter) where it has one.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from fipstop.views import palette
from fipstop.views.widgets.table import Column


class SortMenu(ModalScreen[str | None]):
    """Dismissed with the column key chosen, or None (Esc)."""

    DEFAULT_CSS = """
    SortMenu { align: center middle; }
    SortMenu > Vertical { width: 52; height: auto; max-height: 90%; border: round $accent;
                          background: $panel; padding: 0 1; }
    SortMenu OptionList { height: auto; max-height: 20; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("f6", "cancel", "Cancel", show=False)]

    def __init__(self, table: str, columns: list[Column], visible: list[str], current: str | None,
                 keys: dict[str, str]) -> None:
        super().__init__()
        self.table = table
        self.columns = [c for c in columns if c.sortable]
        self.on_screen = set(visible)
        self.current = current
        self.keys = {col: k for k, col in keys.items()}  # column -> its Shift+letter

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Sort {self.table} by (Enter; Esc cancels)")
            options = []
            for c in self.columns:
                t = Text(no_wrap=True)
                t.append(f"{self.keys.get(c.key, ' ')}  ", style="bold")
                t.append(c.label.lower(), style="bold" if c.key == self.current else "")
                if c.key == self.current:
                    t.append("  (now)", style=palette.LABEL)
                if c.key not in self.on_screen:
                    t.append("  hidden at this width", style=palette.LABEL)
                options.append(Option(t, id=c.key))
            yield OptionList(*options, id="sort-options")

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.focus()
        keys = [c.key for c in self.columns]
        if self.current in keys:
            ol.highlighted = keys.index(self.current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
