"""Ring detail (Enter on a ring): its history, its consumers, its newest records.

- charts of records/s vs drops/s and of fill % over the history;
- where every consumer stands in the ring: a gauge of the ring's window
  (the last ``capacity`` bytes up to head) with the consumer's released
  position, its lag in records, bytes and seconds;
- a message tap of the newest records.  Payloads are attacker-controlled:
  they are escaped with ``escape_bytes`` and shown as plain ``Text`` (never
  markup), so ANSI sequences and ``[bold]`` show as the characters they are.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from fipstop.bindq import record_text
from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.probes.ring import TapResult
from fipstop.textsafe import escape_bytes
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.history import History
from fipstop.views.widgets.chart import LineChart, Series
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

TAP_RECORDS = 64

POSITION_COLUMNS = [
    Column("name", "CONSUMER", 14, "left", 0, flex=True),
    Column("state", "STATE", 8, "left", 1),
    Column("where", "WHERE (░free ▒read ●here ▓unread)", 34, "left", 0),
    Column("seq", "NEXT SEQ", 10, "right", 3),
    Column("lag", "LAG", 8, "right", 0),
    Column("lag_bytes", "LAG BYTES", 10, "right", 2),
    Column("lag_s", "LAG (s)", 7, "right", 1),
    Column("release", "RELEASED/S", 10, "right", 2),
    Column("lost", "DROPS SEEN", 10, "right", 3),
]


def gauge(width: int, capacity: int, head: int, floor: int, released: int) -> list[tuple[str, str]]:
    """The ring's window [head - capacity, head] as ``width`` cells: ``░``
    free, ``▒`` read by this consumer but still held for a slower one, ``●``
    where it stands, ``▓`` what it has not read yet (coloured by how much of
    the ring that is)."""
    if width <= 2 or capacity <= 0:
        return [("", "")]
    start = head - capacity

    def cell(pos: int) -> int:
        return min(max(int((pos - start) * width / capacity), 0), width - 1)

    held_from = cell(max(floor, start))
    me = cell(max(released, start))
    unread = palette.fill_style(100.0 * (head - released) / capacity)
    out = []
    for i in range(width):
        if i == me:
            out.append(("●", "bold #56b6c2"))
        elif i > me:
            out.append(("▓", unread))
        elif i >= held_from:
            out.append(("▒", "#5c6370"))
        else:
            out.append(("░", palette.FILL_EMPTY))
    merged: list[tuple[str, str]] = []
    for ch, st in out:
        if merged and merged[-1][1] == st:
            merged[-1] = (merged[-1][0] + ch, st)
        else:
            merged.append((ch, st))
    return merged


def tap_lines(result: TapResult | None, width: int = 200) -> Text:
    """The tapped records as plain Text: escaped payloads, never markup."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if result is None:
        text.append("waiting for the tap…", style="italic dim")
        return text
    if result.error:
        text.append("tap: " + escape_bytes(result.error.encode()), style=palette.WARN)
        return text
    if not result.records:
        text.append("no record in the ring", style="italic dim")
        return text
    if result.lapped:
        text.append("some records were overwritten while they were copied (lapped)\n", style=palette.WARN)
    for i, rec in enumerate(reversed(result.records)):  # newest first
        if i:
            text.append("\n")
        text.append(f"{rec.seq:>10} ", style=palette.LABEL)
        text.append(fmt.clock(rec.ts_ns) + f".{(rec.ts_ns // 1_000_000) % 1000:03d} ", style=palette.LABEL)
        if rec.lost:
            text.append(f"[{fmt.count(rec.lost)} dropped before] ", style=palette.DROPS_LEGEND)
        if rec.flags & 2:
            text.append("[truncated] ", style=palette.WARN)
        text.append(escape_bytes(record_text(rec.payload, rec.flags)))
    return text


class RingDetailScreen(FipsScreen):
    SCREEN_NAME = "ring"
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [Binding("escape", "app.back", "Back")]

    def __init__(self, key: tuple[str, int]) -> None:
        super().__init__()
        self.key = key
        self.tap: TapResult | None = None
        self._shown: Snapshot | None = None

    @property
    def _snap(self) -> Snapshot:
        """The snapshot on screen: cells are drawn only once one was shown."""
        assert self._shown is not None
        return self._shown

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="ring-body"):
            yield TextLine(id="ring-title", classes="detail-title")
            with Horizontal(id="ring-charts", classes="charts"):
                yield LineChart("", id="ring-rate-chart")
                yield LineChart("", id="ring-fill-chart")
            yield TextLine(" Consumers in this ring", classes="section-title")
            yield VirtualTable(POSITION_COLUMNS, id="positions")
            yield TextLine(" Newest records (message tap, escaped)", classes="section-title")
            yield TextLine(id="tap", classes="tap")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#positions", VirtualTable)
        t.empty_text = "no active consumer: records stay in the ring for the first one to come"
        t.focus()

    def refresh_view(self) -> None:
        super().refresh_view()
        s = self.fips.snapshot
        if s is None:
            return
        self._shown = s
        domain, ring = self.key
        row = s.ring_row(domain, ring)
        title = self.query_one("#ring-title", TextLine)
        if row is None:
            title.update(Text(f" ring {fmt.name(domain)}/{ring} is not in use any more", style=palette.WARN_BOLD))
            self.query_one("#positions", VirtualTable).set_rows([], lambda r, c: "")
            return
        r = s.rings[row]
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" {fmt.name(domain)}", style="bold")
        t.append(f"/{ring} ", style=palette.LABEL)
        t.append(fmt.name(r["thread_name"]) or "-", style="bold")
        t.append(f"  pid {int(r['pid'])} tid {int(r['tid'])}", style=palette.LABEL)
        state = {1: "active", 2: "closed"}.get(int(r["state"]), "?")
        t.append(f"  {state}", style=palette.RING_STATE.get(state, "default"))
        t.append(f"  gen {int(r['generation'])}  capacity {fmt.size(int(r['capacity_bytes']))}", style=palette.LABEL)
        t.append("\n ")
        t.append("fill ", style=palette.LABEL)
        t.append(fmt.pct(float(r["fill_pct"])), style=palette.fill_style(float(r["fill_pct"])))
        t.append("  high ", style=palette.LABEL)
        t.append(fmt.pct(float(r["high_water_pct"])))
        t.append("  drops ", style=palette.LABEL)
        dps = float(r["drops_per_s"])
        t.append(fmt.si(dps) + "/s", style=palette.DROPS if dps else palette.ZERO)
        t.append(f" ({fmt.count(int(r['records_dropped']))} total, {fmt.count(int(r['full_events']))} full events)",
                 style=palette.DROPS_LEGEND if int(r["records_dropped"]) else palette.LABEL)
        t.append("  records ", style=palette.LABEL)
        t.append(fmt.si(float(r["records_per_s"])) + "/s", style=palette.RATE)
        t.append(f" ({fmt.count(int(r['records_committed']))} total)", style=palette.LABEL)
        t.append("  bytes ", style=palette.LABEL)
        t.append(fmt.size(float(r["bytes_per_s"])) + "/s")
        t.append("  claimed ", style=palette.LABEL)
        t.append(fmt.size(int(r["claimed_bytes"])))
        age = int(r["last_commit_age_ns"])
        t.append("  last commit ", style=palette.LABEL)
        t.append(fmt.age_ns(age) + (" ago" if age >= 0 else ""))
        title.update(t)

        frames = self.fips.history.window(self.fips.shown, 300)
        x = History.seconds_ago(frames)
        rate = History.ring_series(frames, domain, ring, "records_per_s")
        drops = History.ring_series(frames, domain, ring, "drops_per_s")
        self.query_one("#ring-rate-chart", LineChart).set_data(x, [
            Series("records/s", rate, palette.CHART_RATE),
            Series("drops/s (ring full)", drops, palette.CHART_DROPS,
                   palette.DROPS_MARKER if getattr(self.app, "no_color", False) else ""),
        ])
        fill = History.ring_series(frames, domain, ring, "fill_pct")
        self.query_one("#ring-fill-chart", LineChart).set_data(x, [Series("fill %", fill, palette.CHART_FILL)],
                                                               yfmt=fmt.pct)

        self._pos = s.positions_of_ring(domain, ring)
        self._ring = r
        keys = [(domain, int(c)) for c in self._pos["consumer"].tolist()]
        self.query_one("#positions", VirtualTable).set_rows(keys, self._pos_cell)
        if not self.fips.paused:
            self.fips.request_tap(domain, ring, TAP_RECORDS)

    def _pos_cell(self, row: int, col: str):
        v: float
        s = self._snap
        p = self._pos[row]
        domain = self.key[0]
        crow = s.consumer_row(domain, int(p["consumer"]))
        c = s.consumers[crow] if crow is not None else None
        if col == "name":
            return fmt.name(c["name"]) if c is not None else str(int(p["consumer"]))
        if col == "state":
            h = Health(int(c["health"])).label if c is not None else "?"
            return (h, palette.HEALTH.get(h, "default"))
        if col == "where":
            table = self.query_one("#positions", VirtualTable)
            w = next((w for cc, _, w in table._layout if cc.key == "where"), 34)
            r = self._ring
            return gauge(w, int(r["capacity_bytes"]), int(r["head_bytes"]), int(r["floor_bytes"]),
                         int(p["released_bytes"]))
        if col == "seq":
            return str(int(p["released_seq"]))
        if col == "lag":
            v = int(p["lag_records"])
            return (fmt.count(v), "default" if v else palette.ZERO)
        if col == "lag_bytes":
            v = int(p["lag_bytes"])
            return (fmt.size(v), "default" if v else palette.ZERO)
        if col == "lag_s":
            v = float(p["lag_s"])
            return (fmt.duration(v), palette.lag_style(v))
        if col == "release":
            v = float(p["release_per_s"])
            return (fmt.si(v), "bold" if v else palette.ZERO)
        if col == "lost":
            v = int(p["lost_seen"])
            return (fmt.count(v), palette.DROPS_LEGEND) if v else ("0", palette.ZERO)
        return ""

    def show_tap(self, result: TapResult) -> None:
        if (result.domain, int(result.ring)) != tuple(self.key):
            return
        self.tap = result
        self.query_one("#tap", TextLine).update(tap_lines(result))

    @on(VirtualTable.Selected, "#positions")
    def _open_consumer(self, event: VirtualTable.Selected) -> None:
        self.fips.open_consumer(event.key)

    @on(VirtualTable.Highlighted, "#positions")
    def _consumer_highlighted(self, event: VirtualTable.Highlighted) -> None:
        self.fips.selected_consumer = event.key

