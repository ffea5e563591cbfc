"""VirtualTable: a read-only table that renders only the rows on screen.

textual's DataTable measures and stores every cell of every row; refilling it
with 1024 rings takes most of a second here.  This table keeps nothing but
the row keys: each visible line asks ``cell(row, column_key)`` for its cells
when it is drawn (textual's line API), so a refresh costs the same for 10
rings and for 10 000.

Columns have a preferred width and a priority: when the terminal is narrow,
the columns with the highest ``priority`` number are left out first (like
htop and k9s), and one ``flex`` column takes the width that is left.

A cell is a ``str``, a ``(text, style)`` pair or a list of such pairs; text
is shown as it is (never parsed as markup), cut with "…" when too long.
The header shows the sort column with ▲/▼; clicking it asks to sort by it.
The cursor follows its row key across refreshes; clicking a row moves the
cursor there, clicking it again (or Enter) selects it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = str | tuple[str, Any] | list[tuple[str, Any]]


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int
    align: str = "right"  # "left" | "right"
    priority: int = 0  # higher numbers are dropped first on narrow screens
    flex: bool = False  # takes the width left over (at least ``width``)
    sortable: bool = True
    descending: bool = True  # the first sort direction (numbers: biggest first)
    #: where a too-long cell is cut: "end" (numbers, text) or "middle" (names:
    #: ``demo-net-0003`` and ``demo-net-0004`` differ at their ends)
    cut: str = "end"


_EMPTY = Style()


@lru_cache(maxsize=512)
def _style(spec: Any) -> Style:
    if spec is None or spec == "":
        return _EMPTY
    if isinstance(spec, Style):
        return spec
    return Style.parse(str(spec))


def _spans(cell: Cell) -> list[tuple[str, Any]]:
    if isinstance(cell, str):
        return [(cell, None)]
    if isinstance(cell, tuple):
        return [cell]
    return list(cell)


def _len(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _cut_middle(spans: list[tuple[str, Any]], total: int, width: int) -> list[tuple[str, Style]]:
    """Spans of ``total`` cells in ``width``: the first half and the last cells
    kept, "…" between (in the style of the span it replaces)."""
    left = width // 2
    right = width - 1 - left
    out: list[tuple[str, Style]] = []
    pos = 0
    mark_style: Style | None = None
    for text, st in spans:
        n = _len(text)
        start, end = pos, pos + n
        pos = end
        keep_l = max(0, min(end, left) - start)  # cells of this span in the left part
        keep_r = max(0, end - max(start, total - right))  # cells of this span in the right part
        if keep_l:
            out.append((text if keep_l == n else set_cell_size(text, keep_l), _style(st)))
        if mark_style is None and end > left:
            out.append(("…", _style(st)))
            mark_style = _style(st)
        if keep_r and keep_l != n:
            tail = text
            while _len(tail) > keep_r:
                tail = tail[1:]
            out.append((tail, _style(st)))
    return out


def fit(cell: Cell, width: int, align: str = "left", cut: str = "end") -> list[tuple[str, Style]]:
    """The cell's spans cut (at the end, or in the middle) or padded to exactly ``width`` cells."""
    if isinstance(cell, str) and cell.isascii() and len(cell) <= width:  # the common case, fast
        pad = " " * (width - len(cell))
        return [(pad + cell if align == "right" else cell + pad, _EMPTY)]
    spans = _spans(cell)
    total = 0
    for t, _ in spans:
        total += len(t) if t.isascii() else cell_len(t)
    out: list[tuple[str, Style]] = []
    if total > width and cut == "middle" and width >= 3:
        return _cut_middle(spans, total, width)
    if total > width:
        room = width - 1
        for text, st in spans:
            if room <= 0:
                break
            n = _len(text)
            if n > room:
                text = set_cell_size(text, room)
                n = room
            out.append((text, _style(st)))
            room -= n
        if width >= 1:
            out.append(("…", out[-1][1] if out else Style()))
        return out
    pad = " " * (width - total)
    out = [(t, _style(s)) for t, s in spans]
    if pad:
        if align == "right":
            out.insert(0, (pad, Style()))
        else:
            out.append((pad, Style()))
    return out


class VirtualTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    VirtualTable {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
        background: $surface;
    }
    VirtualTable > .vtable--header {
        background: $panel;
        color: $text;
        text-style: bold;
    }
    VirtualTable > .vtable--header-sorted {
        background: $panel;
        color: $accent;
        text-style: bold;
    }
    VirtualTable > .vtable--cursor {
        background: $primary 20%;
    }
    VirtualTable:focus > .vtable--cursor {
        background: $primary 45%;
    }
    VirtualTable > .vtable--empty {
        color: $text-muted;
        text-style: italic;
    }
    """

    COMPONENT_CLASSES = {"vtable--header", "vtable--header-sorted", "vtable--cursor", "vtable--empty"}

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding("end,G", "last", "Last", show=False),
        Binding("enter", "select_cursor", "Detail", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, always_update=True, init=False)

    class _TableMessage(Message):
        """A message about this table (``control`` lets handlers tell tables apart)."""

        def __init__(self, table: VirtualTable) -> None:
            super().__init__()
            self.table = table

        @property
        def control(self) -> VirtualTable:
            return self.table

    class Highlighted(_TableMessage):
        def __init__(self, table: VirtualTable, key: Any) -> None:
            super().__init__(table)
            self.key = key

    class Selected(_TableMessage):
        def __init__(self, table: VirtualTable, key: Any) -> None:
            super().__init__(table)
            self.key = key

    class HeaderClicked(_TableMessage):
        def __init__(self, table: VirtualTable, column: str) -> None:
            super().__init__(table)
            self.column = column

    def __init__(self, columns: Sequence[Column], *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = list(columns)
        self._keys: Sequence[Any] = ()
        self._cell: Callable[[int, str], Cell] = lambda row, key: ""
        self._layout: list[tuple[Column, int, int]] = []
        self._layout_width = -1
        self.sort_column: str | None = None
        self.sort_descending = True
        self.empty_text = "nothing to show"
        self._pass_styles: tuple[Style, Style, Style, Style, Style] | None = None
        self._row_version: Any = None
        self._row_ids: Sequence[Any] | None = None
        #: (row id, cursor?) -> Strip of the current data version and layout
        self._row_cache: dict[tuple[Any, bool], Strip] = {}
        self._row_cache_key: tuple = ()

    # -- data ----------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_key(self) -> Any:
        if 0 <= self.cursor_row < len(self._keys):
            return self._keys[self.cursor_row]
        return None

    @property
    def keys(self) -> Sequence[Any]:
        return self._keys

    def set_rows(self, keys: Sequence[Any], cell: Callable[[int, str], Cell], *,
                 version: Any = None, row_ids: Sequence[Any] | None = None) -> None:
        """Show ``len(keys)`` rows; ``cell(row, column_key)`` draws one cell.
        The cursor stays on the row with the same key when there is one.

        ``version`` and ``row_ids`` (optional) let the table keep the lines
        it drew: while ``version`` stays the same (same data, only a new
        order or filter), a row whose ``row_ids[row]`` was drawn before is
        not drawn again."""
        old = self.cursor_key
        if version is None or version != self._row_version:
            self._row_cache.clear()
        self._row_version = version
        self._row_ids = row_ids if version is not None else None
        self._keys = keys
        self._cell = cell
        row = self.cursor_row
        if old is not None:
            try:
                row = keys.index(old) if isinstance(keys, list) else list(keys).index(old)
            except ValueError:
                row = min(self.cursor_row, len(keys) - 1)
        self._set_virtual()
        new_row = max(min(row, len(keys) - 1), 0)
        if new_row != self.cursor_row or self.cursor_key != old:
            self.cursor_row = new_row
        self.refresh()

    def set_sort(self, column: str | None, descending: bool) -> None:
        self.sort_column = column
        self.sort_descending = descending
        self.refresh()

    def move_to_key(self, key: Any) -> bool:
        try:
            self.cursor_row = list(self._keys).index(key)
        except ValueError:
            return False
        return True

    def visible_columns(self) -> list[str]:
        self._ensure_layout()
        return [c.key for c, _, _ in self._layout]

    # -- layout ----------------------------------------------------------------------

    def _set_virtual(self) -> None:
        size = Size(max(self.size.width, 1), len(self._keys) + 1)
        if size != self.virtual_size:  # a new virtual size means a new layout
            self.virtual_size = size

    def on_resize(self, event: events.Resize) -> None:
        self._layout_width = -1
        self._set_virtual()
        self._scroll_cursor_into_view()

    def _ensure_layout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width
        if width == self._layout_width:
            return
        self._layout_width = width
        chosen: set[int] = set()
        used = 0
        order = sorted(range(len(self.columns)), key=lambda i: (self.columns[i].priority, i))
        for i in order:
            w = self.columns[i].width + (1 if chosen else 0)
            if used + w <= width or not chosen:
                chosen.add(i)
                used += w
        cols = [c for i, c in enumerate(self.columns) if i in chosen]
        extra = max(width - used, 0)
        layout = []
        x = 0
        flex_given = False
        for c in cols:
            w = c.width
            if c.flex and not flex_given:
                w += extra
                flex_given = True
            layout.append((c, x, w))
            x += w + 1
        if not flex_given and layout and extra:
            c, x0, w = layout[-1]
            layout[-1] = (c, x0, w + extra)
        self._layout = layout

    # -- rendering ---------------------------------------------------------------------

    def render_lines(self, crop):
        # the styles are the same for every line of one pass: compute them once
        self._pass_styles = (
            self.rich_style,
            self.get_component_rich_style("vtable--header"),
            self.get_component_rich_style("vtable--header-sorted"),
            self.get_component_rich_style("vtable--cursor"),
            self.get_component_rich_style("vtable--empty"),
        )
        try:
            return super().render_lines(crop)
        finally:
            self._pass_styles = None

    def _styles(self) -> tuple[Style, Style, Style, Style, Style]:
        st = self._pass_styles
        if st is None:
            st = (
                self.rich_style,
                self.get_component_rich_style("vtable--header"),
                self.get_component_rich_style("vtable--header-sorted"),
                self.get_component_rich_style("vtable--cursor"),
                self.get_component_rich_style("vtable--empty"),
            )
        return st

    def render_line(self, y: int) -> Strip:
        self._ensure_layout()
        width = self.scrollable_content_region.width or self.size.width
        styles = self._styles()
        base, header_st, sorted_st, cursor_st, empty_st = styles
        if y == 0:
            return self._header(width, base, header_st, sorted_st)
        row = int(self.scroll_offset.y) + y - 1
        if row >= len(self._keys):
            if row == 0 and not self._keys:
                st = base + empty_st
                return Strip([Segment(set_cell_size(" " + self.empty_text, width), st)], width)
            return Strip([Segment(" " * width, base)], width)
        cursor = row == self.cursor_row
        ids = self._row_ids
        ck = None
        if ids is not None:
            # a new layout or new styles (focus, theme) draw every row again
            key = (width, self._layout_width, styles)
            if key != self._row_cache_key:
                self._row_cache.clear()
                self._row_cache_key = key
            ck = (ids[row], cursor)
            hit = self._row_cache.get(ck)
            if hit is not None:
                return hit
        strip = self._draw_row(row, width, base + cursor_st if cursor else base)
        if ck is not None:
            self._row_cache[ck] = strip
        return strip

    def _draw_row(self, row: int, width: int, row_style: Style) -> Strip:
        # adjacent spans of the same style become one segment: fewer segments
        # make every later step (textual's styles, compositor, terminal) cheaper
        texts: list[str] = []
        styles: list[Style] = []
        combined: dict[Any, Style] = {}
        x = 0
        for col, cx, w in self._layout:
            if cx > x:
                texts.append(" " * (cx - x))
                styles.append(row_style)
            try:
                cell = self._cell(row, col.key)
            except Exception as exc:  # a bad cell must not take the screen down
                cell = (f"<{type(exc).__name__}>", "#e5c07b")
            for text, st in fit(cell, w, col.align, col.cut):
                if st is _EMPTY:
                    style = row_style
                else:
                    known = combined.get(st)
                    if known is None:
                        known = combined[st] = row_style + st
                    style = known
                if styles and styles[-1] is style:
                    texts[-1] += text
                else:
                    texts.append(text)
                    styles.append(style)
            x = cx + w
        if x < width:
            if styles and styles[-1] is row_style:
                texts[-1] += " " * (width - x)
            else:
                texts.append(" " * (width - x))
                styles.append(row_style)
        strip = Strip([Segment(t, st) for t, st in zip(texts, styles)], width if x <= width else None)
        return strip.crop(0, width) if x > width else strip

    def _header(self, width: int, base: Style, header_st: Style, sorted_st: Style) -> Strip:
        hs = base + header_st
        ss = base + sorted_st
        segs: list[Segment] = []
        x = 0
        for col, cx, w in self._layout:
            if cx > x:
                segs.append(Segment(" " * (cx - x), hs))
            label = col.label
            st = hs
            if col.key == self.sort_column:
                label = label + ("▼" if self.sort_descending else "▲")
                st = ss
            for text, _ in fit(label, w, col.align):
                segs.append(Segment(text, st))
            x = cx + w
        if x < width:
            segs.append(Segment(" " * (width - x), hs))
        return Strip(segs, width).crop(0, width)

    # -- cursor ------------------------------------------------------------------------

    def watch_cursor_row(self, old: int, new: int) -> None:
        self._scroll_cursor_into_view()
        self.refresh()
        if self.cursor_key is not None:
            self.post_message(self.Highlighted(self, self.cursor_key))

    def _page_rows(self) -> int:
        return max(self.scrollable_content_region.height - 1, 1)

    def _scroll_cursor_into_view(self) -> None:
        top = int(self.scroll_offset.y)
        rows = self._page_rows()
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + rows:
            self.scroll_to(y=self.cursor_row - rows + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        if self._keys:
            self.cursor_row = max(min(self.cursor_row + delta, len(self._keys) - 1), 0)

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * self._page_rows())

    def action_first(self) -> None:
        if self._keys:
            self.cursor_row = 0

    def action_last(self) -> None:
        if self._keys:
            self.cursor_row = len(self._keys) - 1

    def action_select_cursor(self) -> None:
        if self.cursor_key is not None:
            self.post_message(self.Selected(self, self.cursor_key))

    def _column_at(self, x: int) -> Column | None:
        for col, cx, w in self._layout:
            if cx <= x < cx + w + 1:
                return col
        return None

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        event.stop()
        if offset.y == 0:
            col = self._column_at(offset.x)
            if col is not None and col.sortable:
                self.post_message(self.HeaderClicked(self, col.key))
            return
        row = int(self.scroll_offset.y) + offset.y - 1
        if not (0 <= row < len(self._keys)):
            return
        if row == self.cursor_row or event.chain >= 2:
            self.cursor_row = row
            self.action_select_cursor()
        else:
            self.cursor_row = row
