"""TextLine: a fixed-size line (or lines) of rich Text that repaints without
asking for a new layout (``Static.update`` re-lays out the whole screen on
every call, which costs a full repaint per frame)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextLine(Widget):
    DEFAULT_CSS = """
    TextLine {
        height: 1;
        width: 1fr;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, text: Text | str = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._text = Text(text) if isinstance(text, str) else text

    def update(self, text: Text | str) -> None:
        self._text = Text(text) if isinstance(text, str) else text
        self.refresh()

    def render(self) -> Text:
        return self._text
