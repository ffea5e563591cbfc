"""Consumer detail (Enter on a consumer): its readers, its lag per ring over
time, its release rate.

Header lines: name, domain, pid, state, reader threads seen, resumes,
heartbeat age, registration and eviction times.  Charts: release rate and
the largest lag (records) over the history.  Table: one row per ring in
use with this consumer's lag (records with a sparkline of its history,
bytes, seconds), release rate and the drops it saw.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from fipstop._fips import EVICTED_BY_OPERATOR
from fipstop.model.rings import POSITION_DTYPE, Health
from fipstop.model.snapshot import Snapshot
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.history import History
from fipstop.views.widgets.chart import LineChart, Series
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

LAG_COLUMNS = [
    Column("ring", "RING", 10, "left", 0),
    Column("thread", "THREAD", 14, "left", 1, flex=True),
    Column("lag", "LAG (records, history)", 22, "right", 0),
    Column("lag_bytes", "LAG BYTES", 10, "right", 2),
    Column("lag_s", "LAG (s)", 7, "right", 0),
    Column("release", "RELEASED/S", 10, "right", 1),
    Column("seq", "NEXT SEQ", 10, "right", 3),
    Column("lost", "DROPS SEEN", 10, "right", 2),
]


class ConsumerDetailScreen(FipsScreen):
    SCREEN_NAME = "consumer"
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [Binding("escape", "app.back", "Back")]

    def __init__(self, key: tuple[str, int]) -> None:
        super().__init__()
        self.key = key
        self._shown: Snapshot | None = None
        self._pos = np.zeros(0, dtype=POSITION_DTYPE)
        self._frames: list[Snapshot] = []

    @property
    def _snap(self) -> Snapshot:
        """The snapshot on screen: cells are drawn only once one was shown."""
        assert self._shown is not None
        return self._shown

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="consumer-body"):
            yield TextLine(id="consumer-title", classes="detail-title")
            with Horizontal(id="consumer-charts", classes="charts"):
                yield LineChart("", id="consumer-release-chart")
                yield LineChart("", id="consumer-lag-chart")
            yield TextLine(" Lag per ring", classes="section-title")
            yield VirtualTable(LAG_COLUMNS, id="lag-per-ring")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#lag-per-ring", VirtualTable)
        t.empty_text = "not reading: only an alive or stale consumer has positions"
        t.focus()

    def refresh_view(self) -> None:
        super().refresh_view()
        s = self.fips.snapshot
        if s is None or not self.query("#consumer-title"):
            return  # nothing yet, or pushed and not composed yet (a resume or a frame in between): the next draws
        self._shown = s
        domain, slot = self.key
        row = s.consumer_row(domain, slot)
        title = self.query_one("#consumer-title", TextLine)
        table = self.query_one("#lag-per-ring", VirtualTable)
        if row is None:
            title.update(Text(f" consumer slot {slot} of {fmt.name(domain)} is free now", style=palette.WARN_BOLD))
            table.set_rows([], lambda r, c: "")
            return
        c = s.consumers[row]
        health = Health(int(c["health"])).label
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" " + (fmt.name(c["name"]) or "-"), style="bold")
        t.append(f"  in {fmt.name(domain)} (slot {slot})", style=palette.LABEL)
        t.append("  pid ", style=palette.LABEL)
        t.append(str(int(c["pid"])))
        t.append("  ")
        t.append(health, style=palette.HEALTH.get(health, "default"))
        t.append("  readers ", style=palette.LABEL)
        t.append(str(int(c["readers"])))
        t.append("  resumes ", style=palette.LABEL)
        t.append(str(int(c["resumes"])))
        t.append("  heartbeat ", style=palette.LABEL)
        t.append(fmt.age_ns(int(c["heartbeat_age_ns"])) + " ago",
                 style=palette.HEALTH["stale"] if health == "stale" else "default")
        t.append("\n ")
        t.append("released ", style=palette.LABEL)
        t.append(fmt.si(float(c["release_per_s"])) + "/s", style=palette.RATE)
        t.append(f" ({fmt.count(int(c['records_released']))} records in {fmt.count(int(c['batches_released']))}"
                 " batches)", style=palette.LABEL)
        t.append("  lag max ", style=palette.LABEL)
        lag_max = int(c["lag_max_records"])
        t.append(fmt.count(lag_max) if lag_max >= 0 else fmt.DASH)
        t.append(" / ", style=palette.LABEL)
        t.append(fmt.duration(float(c["lag_max_s"])), style=palette.lag_style(float(c["lag_max_s"])))
        t.append("  mean ", style=palette.LABEL)
        t.append(fmt.si(float(c["lag_mean_records"])))
        t.append(" / ", style=palette.LABEL)
        t.append(fmt.duration(float(c["lag_mean_s"])))
        # an estimate, named as one: lag in seconds above is the age of the oldest unreleased record
        t.append("  drain estimate ", style=palette.LABEL)
        t.append(fmt.duration(float(c["drain_max_s"])) if "drain_max_s" in (c.dtype.names or ()) else fmt.DASH)
        t.append("  drops seen ", style=palette.LABEL)
        lost = int(c["lost_seen"])
        t.append(fmt.count(lost), style=palette.DROPS_LEGEND if lost else palette.ZERO)
        t.append("  registered ", style=palette.LABEL)
        t.append(fmt.datetime_s(int(c["registered_realtime_ns"])))
        if int(c["evicted_realtime_ns"]):
            t.append("  evicted ", style=palette.HEALTH["evicted"])
            by = int(c["evicted_by_ring"])
            t.append(fmt.datetime_s(int(c["evicted_realtime_ns"]))
                     + (" by an operator" if by == EVICTED_BY_OPERATOR else f" by ring {by}"))
        title.update(t)

        frames = self.fips.history.window(self.fips.shown, 300)
        self._frames = frames
        x = History.seconds_ago(frames)
        released = History.consumer_series(frames, domain, slot, "release_per_s")
        lag = History.consumer_series(frames, domain, slot, "lag_max_records")
        self.query_one("#consumer-release-chart", LineChart).set_data(
            x, [Series("released/s", released, palette.CHART_RATE)])
        self.query_one("#consumer-lag-chart", LineChart).set_data(
            x, [Series("lag, largest of its rings (records)", lag, palette.CHART_LAG)])

        self._pos = s.positions_of_consumer(domain, slot)
        keys = [(domain, int(r)) for r in self._pos["ring"].tolist()]
        table.set_rows(keys, self._cell)

    def _cell(self, row: int, col: str):
        v: float
        s = self._snap
        p = self._pos[row]
        domain = self.key[0]
        ring = int(p["ring"])
        rrow = s.ring_row(domain, ring)
        if col == "ring":
            return [(fmt.name(domain), "bold"), (f"/{ring}", palette.LABEL)]
        if col == "thread":
            return fmt.name(s.rings["thread_name"][rrow]) if rrow is not None else "-"
        if col == "lag":
            v = int(p["lag_records"])
            series = History.position_series(self._frames[-12:], domain, self.key[1], ring, "lag_records")
            top = float(np.nanmax(series)) if np.isfinite(series).any() else 0.0
            return [(fmt.sparkline(series, 12, top=top), palette.WARN),
                    (f" {fmt.count(v):>8}", "default" if v else palette.ZERO)]
        if col == "lag_bytes":
            v = int(p["lag_bytes"])
            return (fmt.size(v), "default" if v else palette.ZERO)
        if col == "lag_s":
            v = float(p["lag_s"])
            return (fmt.duration(v), palette.lag_style(v))
        if col == "release":
            v = float(p["release_per_s"])
            return (fmt.si(v), "bold" if v else palette.ZERO)
        if col == "seq":
            return str(int(p["released_seq"]))
        if col == "lost":
            v = int(p["lost_seen"])
            return (fmt.count(v), palette.DROPS_LEGEND) if v else ("0", palette.ZERO)
        return ""

    @on(VirtualTable.Selected, "#lag-per-ring")
    def _open_ring(self, event: VirtualTable.Selected) -> None:
        self.fips.open_ring(event.key)

    @on(VirtualTable.Highlighted, "#lag-per-ring")
    def _ring_highlighted(self, event: VirtualTable.Highlighted) -> None:
        self.fips.selected_ring = event.key
