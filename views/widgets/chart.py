"""LineChart: a line chart drawn with quadrant blocks to fit the widget.

The chart (axes, tick labels, one coloured line per series) is rasterised
with numpy straight into textual ``Strip``s: a frame of the overview chart
costs about a millisecond, where building it with plotext and parsing its
ANSI output back cost 20-30 ms (the largest part of the dashboard's CPU).
The look is plotext's "hd" marker: 2x2 pixels per cell drawn with quadrant
block characters (every terminal font with block elements has them; braille
is finer but missing from many fonts), y ticks on the left, x ticks below.

Lines are drawn in series order: where two series share a cell, the later
one's colour and pixels win.  NaN values (no rate yet, row absent) are left
out rather than drawn as 0; the line joins the points around them.  A series
with a ``marker`` is drawn with that character, one point per cell, so that
lines stay apart without colour (NO_COLOR).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from fipstop.views import format as fmt

#: quadrant block for the 4-bit pixel mask (1 upper-left, 2 upper-right, 4 lower-left, 8 lower-right)
QUADRANTS = " ▘▝▀▖▌▞▛▗▚▐▜▄▙▟█"


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float] | np.ndarray  # NaN: no value (a gap in the line)
    color: tuple[int, int, int]  # RGB (line and legend)
    #: "": the line in quadrant blocks; a character: the line drawn with it, one point per cell
    #: (under NO_COLOR the series are told apart by it, not only by colour)
    marker: str = ""


def nice_ticks(top: float, n: int = 4) -> list[float]:
    """0 and up to ``n`` round steps reaching at least ``top``."""
    if not (top > 0) or math.isinf(top):
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if step >= raw:
            break
    k = math.ceil(top / step - 1e-9)
    return [i * step for i in range(k + 1)]


def log_ticks(top: float, n: int = 5) -> list[float]:
    """0 and powers of ten up to the first one at or above ``top`` (every
    other one, or fewer, when there are more than ``n``)."""
    if not (top > 0) or math.isinf(top):
        return [0.0, 1.0]
    k = max(0, math.ceil(math.log10(top) - 1e-9))
    decades = list(range(0, k + 1))
    stride = max(1, math.ceil(len(decades) / n))
    picked = decades[::-1][::stride][::-1]  # the top decade always
    return [0.0, *(10.0 ** d for d in picked)]


def _ypos(v: np.ndarray | float, ymax: float, log: bool):
    """0..1 up the chart: linear, or log10(1 + v) (0 stays at the bottom)."""
    if log:
        return np.log10(1.0 + np.maximum(v, 0.0)) / math.log10(1.0 + ymax)
    return np.asarray(v) / ymax


def tick_labels(ticks: Sequence[float], yfmt: Callable[[float], str]) -> list[str]:
    """``yfmt`` of each tick, unless that gives two ticks the same label (a fill of 0.02 %
    printed 0.0% on every line): then as many decimals as the step needs."""
    labels = [yfmt(t) for t in ticks]
    if len(set(labels)) == len(labels) or len(ticks) < 2:
        return labels
    step = abs(ticks[1] - ticks[0]) or 1.0
    dec = min(max(0, -math.floor(math.log10(step))), 6)
    unit = "%" if all(lab.endswith("%") for lab in labels) else ""
    return [("0" if t == 0 else f"{t:.{dec}f}") + unit for t in ticks]


def _x_label(v: float) -> str:
    return "now" if abs(v) < 1e-9 else fmt.duration(-v) if v < 0 else fmt.duration(v)


def _raster(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixels of the polyline through (px, py) (integers), every segment
    joined by its ``max(|dx|, |dy|) + 1`` rounded steps."""
    if px.size == 1:
        return px, py
    dx = np.diff(px)
    dy = np.diff(py)
    steps = np.maximum(np.abs(dx), np.abs(dy))
    n = steps + 1
    seg = np.repeat(np.arange(dx.size), n)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    frac = k / np.maximum(steps[seg], 1)
    xs = np.rint(px[seg] + dx[seg] * frac).astype(np.int64)
    ys = np.rint(py[seg] + dy[seg] * frac).astype(np.int64)
    return xs, ys


def chart_lines(width: int, height: int, x: Sequence[float], series: Sequence[Series], *,
                yfmt: Callable[[float], str] = fmt.si,
                log: bool = False) -> list[list[tuple[str, tuple[int, int, int] | None]]]:
    """The chart as ``height`` lines of ``width`` cells, each line a list of
    ``(text, rgb or None)`` runs (None: the axis colour).  ``log``: the y
    axis in decades (log10(1 + v)), so one catch-up spike does not squash
    the steady line to the bottom."""
    xa = np.asarray(x, dtype=np.float64)
    data = []
    top = 0.0
    for s in series:
        v = np.asarray(s.values, dtype=np.float64)[: xa.size]
        ok = ~np.isnan(v)
        if ok.any():
            top = max(top, float(v[ok].max()))
            data.append((xa[: v.size][ok], v[ok], s.color, s.marker))
    ticks = log_ticks(top, 3 if height < 10 else 5) if log else nice_ticks(top, 3 if height < 10 else 4)
    labels = tick_labels(ticks, yfmt)
    lw = max(len(t) for t in labels)
    rows = max(height - 3, 1)  # top border, bottom border with x ticks, x labels
    cols = max(width - lw - 2, 1)
    ymax = ticks[-1]
    lo, hi = (float(xa.min()), float(xa.max())) if xa.size else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0

    # pixels: 2 per cell each way; y grows downwards
    mask = np.zeros((rows, cols), dtype=np.int64)
    colour = np.full((rows, cols), -1, dtype=np.int64)
    marks = np.full((rows, cols), "", dtype=object)  # a marker series' character, where it won the cell
    for idx, (sx, sv, _rgb, marker) in enumerate(data):
        if marker:  # one point per cell, drawn with the marker
            px = np.rint((sx - lo) / span * (cols - 1)).astype(np.int64)
            py = np.rint((1.0 - np.clip(_ypos(sv, ymax, log), 0.0, 1.0)) * (rows - 1)).astype(np.int64)
            xs, ys = _raster(px, py)
            xs, ys = np.clip(xs, 0, cols - 1), np.clip(ys, 0, rows - 1)
            mask[ys, xs] = 0
            marks[ys, xs] = marker
            colour[ys, xs] = idx
            continue
        px = np.rint((sx - lo) / span * (2 * cols - 1)).astype(np.int64)
        py = np.rint((1.0 - np.clip(_ypos(sv, ymax, log), 0.0, 1.0)) * (2 * rows - 1)).astype(np.int64)
        xs, ys = _raster(px, py)
        xs = np.clip(xs, 0, 2 * cols - 1)
        ys = np.clip(ys, 0, 2 * rows - 1)
        bits = np.zeros((rows, cols), dtype=np.int64)
        np.bitwise_or.at(bits, (ys // 2, xs // 2), 1 << ((ys % 2) * 2 + (xs % 2)))
        hit = bits > 0
        mask[hit] = bits[hit]  # the later series wins a shared cell
        marks[hit] = ""
        colour[hit] = idx

    tick_rows: dict[int, str] = {}
    for t, lab in zip(ticks, labels):
        r = int(round((1.0 - float(_ypos(t, ymax, log))) * (rows - 1)))
        tick_rows.setdefault(r, lab)

    out: list[list[tuple[str, tuple[int, int, int] | None]]] = []
    out.append([(" " * lw + "┌" + "─" * cols + "┐", None)])
    chars = np.array(list(QUADRANTS))
    for r in range(rows):
        tick = tick_rows.get(r)
        line: list[tuple[str, tuple[int, int, int] | None]] = [
            ((tick.rjust(lw) + "┤") if tick is not None else (" " * lw + "│"), None)]
        cells = chars[mask[r]]
        marked = marks[r] != ""
        if marked.any():
            cells = np.where(marked, marks[r], cells)
        text = "".join(cells.tolist())
        c = colour[r]
        # runs of one colour (-1: blank)
        cuts = np.flatnonzero(np.diff(c)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), cols]
        for a, b in zip(starts, ends):
            ci = int(c[a])
            line.append((text[a:b], data[ci][2] if ci >= 0 else None))
        line.append(("│", None))
        out.append(line)

    # bottom border with x ticks, then the x labels centred under them
    n_xt = 4 if width < 60 else 6
    tick_cols = sorted({int(round(i / n_xt * (cols - 1))) for i in range(n_xt + 1)}) if xa.size > 1 else []
    border = ["─"] * cols
    for tc in tick_cols:
        border[tc] = "┬"
    out.append([(" " * lw + "└" + "".join(border) + "┘", None)])
    lab_line = [" "] * width
    last_end = -1
    for i, tc in enumerate(tick_cols):
        lab = _x_label(lo + span * tc / max(cols - 1, 1)) if i not in (0, len(tick_cols) - 1) else \
            _x_label(lo if i == 0 else hi)
        centre = lw + 1 + tc
        start = min(max(centre - len(lab) // 2, 0), width - len(lab))
        if start <= last_end or start < 0:
            continue  # no room: leave this label out rather than overwrite
        lab_line[start:start + len(lab)] = list(lab)
        last_end = start + len(lab)
    out.append([("".join(lab_line), None)])
    return out[:height]


def legend(title: str, series: Sequence[Series]) -> Text:
    """Border title: the chart's title, then a coloured line per series."""
    t = Text(no_wrap=True)
    if title:
        t.append(f" {title} ", style="bold")
    for s in series:
        r, g, b = s.color
        t.append(f" {s.marker * 2 if s.marker else '━━'} ", style=f"bold rgb({r},{g},{b})")
        t.append(s.label + " ")
    return t


class LineChart(Widget):
    DEFAULT_CSS = """
    LineChart {
        height: 12;
        width: 1fr;
        background: $surface;
        border: round $panel-lighten-2;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1 0 0;
    }
    """

    def __init__(self, title: str = "", *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.title = title
        self.border_title = title
        self._x: list[float] = []
        self._series: list[Series] = []
        self._yfmt: Callable[[float], str] = fmt.si
        #: the y axis in decades (toggled by the screen: ``l`` on the overview)
        self.log_scale = False
        self._cache: tuple[tuple, list[Strip]] | None = None
        self._version = 0
        self.empty_text = "collecting samples…"

    def set_title(self, title: str) -> None:
        """A new title (the legend follows it)."""
        self.title = title
        self.border_title = legend(self.title + (" (log scale)" if self.log_scale else ""), self._series)

    def set_data(self, x: Sequence[float], series: Sequence[Series], *,
                 yfmt: Callable[[float], str] = fmt.si) -> None:
        self._x = list(x)
        if [(s.label, s.color, s.marker) for s in series] != [(s.label, s.color, s.marker) for s in self._series]:
            self.border_title = legend(self.title + (" (log scale)" if self.log_scale else ""), series)
        self._series = list(series)
        self._yfmt = yfmt
        self._version += 1
        self.refresh()

    def set_log(self, log: bool) -> None:
        """Log or linear y axis; the title says which."""
        self.log_scale = bool(log)
        self.border_title = legend(self.title + (" (log scale)" if self.log_scale else ""), self._series)
        self.refresh()

    def _strips(self, w: int, h: int) -> list[Strip]:
        base = self.rich_style
        key = (w, h, self._version, base, self.log_scale)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        if w < 12 or h < 4:
            strips = []
        elif len(self._x) < 2:
            strips = [Strip([Segment(self.empty_text[:w], base + Style(italic=True, dim=True))])]
        else:
            styles: dict = {None: base}
            strips = []
            for line in chart_lines(w, h, self._x, self._series, yfmt=self._yfmt, log=self.log_scale):
                segs = []
                for text, rgb in line:
                    st = styles.get(rgb)
                    if st is None:
                        colour = Style.parse(f"rgb({rgb[0]},{rgb[1]},{rgb[2]})") if rgb is not None else Style()
                        st = styles[rgb] = base + colour
                    segs.append(Segment(text, st))
                strips.append(Strip(segs))
        self._cache = (key, strips)
        return strips

    def render_line(self, y: int) -> Strip:
        w, h = self.content_size.width, self.content_size.height
        strips = self._strips(w, h)
        if 0 <= y < len(strips):
            return strips[y].adjust_cell_length(w, self.rich_style)
        return Strip.blank(w, self.rich_style)
