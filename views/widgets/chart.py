"""PlotextChart: a plotext line chart drawn to fit the widget.

plotext is pinned to 5.2.8 (plotext 6 removed the API this uses).  Its
output is ANSI text; it reaches textual through ``Text.from_ansi`` so no
escape byte is left in the segments (raw ESC bytes would break SVG export).
plotext keeps global state: charts are built on the UI thread only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from fipstop.views import format as fmt


#: plotext marker: "hd" draws with quadrant blocks (2x2 per cell), which
#: every terminal font with block elements has; braille (2x4) is finer but
#: missing from many fonts (Fira Code among them) and then misaligns.
MARKER = "hd"


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float]
    color: tuple[int, int, int]  # RGB (plotext and the legend)


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


def build_chart(width: int, height: int, x: Sequence[float], series: Sequence[Series], *,
                yfmt: Callable[[float], str] = fmt.si, xlabel: str = "", title: str = "") -> str:
    """The chart as ANSI text (plotext)."""
    import plotext as plt

    plt.clear_figure()
    # plotext caps the size at the terminal it sees (80x24 when headless)
    plt.limitsize(False, False)
    plt.plotsize(max(width, 10), max(height, 4))
    plt.theme("clear")
    if title:
        plt.title(title)
    top = 0.0
    for s in series:
        # NaN (no rate yet, row absent) is left out rather than drawn as 0
        pts = [(float(a), float(v)) for a, v in zip(x, s.values) if v is not None and not math.isnan(v)]
        if not pts:
            continue
        top = max(top, max(v for _, v in pts))
        # no plotext legend (it would cover the lines): the border title is the legend
        plt.plot([a for a, _ in pts], [v for _, v in pts], color=s.color, marker=MARKER)
    ticks = nice_ticks(top, 3 if height < 10 else 4)
    plt.ylim(0, ticks[-1])
    plt.yticks(ticks, [yfmt(t) for t in ticks])
    if x:
        lo, hi = min(x), max(x)
        span = hi - lo
        if span > 0:
            n = 4 if width < 60 else 6
            xt = [lo + span * i / n for i in range(n + 1)]
            plt.xticks(xt, ["now" if abs(v) < 1e-9 else f"{fmt.duration(-v)}" if v < 0 else fmt.duration(v)
                            for v in xt])
            plt.xlim(lo, hi)
    if xlabel:
        plt.xlabel(xlabel)
    return plt.build()


def legend(title: str, series: Sequence[Series]) -> Text:
    """Border title: the chart's title, then a coloured line per series."""
    t = Text(no_wrap=True)
    if title:
        t.append(f" {title} ", style="bold")
    for s in series:
        r, g, b = s.color
        t.append(" ━━ ", style=f"bold rgb({r},{g},{b})")
        t.append(s.label + " ")
    return t


class PlotextChart(Widget):
    DEFAULT_CSS = """
    PlotextChart {
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
        self._cache: tuple[tuple, Text] | None = None
        self._version = 0
        self.empty_text = "collecting samples…"

    def set_data(self, x: Sequence[float], series: Sequence[Series], *,
                 yfmt: Callable[[float], str] = fmt.si) -> None:
        self._x = list(x)
        if [(s.label, s.color) for s in series] != [(s.label, s.color) for s in self._series]:
            self.border_title = legend(self.title, series)
        self._series = list(series)
        self._yfmt = yfmt
        self._version += 1
        self.refresh()

    def render(self) -> Text:
        w, h = self.content_size.width, self.content_size.height
        if w < 12 or h < 4:
            return Text("")
        if len(self._x) < 2:
            return Text(self.empty_text, style="italic dim")
        key = (w, h, self._version)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        text = Text.from_ansi(build_chart(w, h, self._x, self._series, yfmt=self._yfmt), no_wrap=True)
        self._cache = (key, text)
        return text
