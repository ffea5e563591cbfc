"""The Bans panel (key 5): live ban activity of every ban source side by side.

Sources: ``fipstop-ips`` (ban events read from its bans domain by the bans
probe), ``fail2ban`` (a running fail2ban-server's database) and ``crowdsec``
(its local API's database, read-only: :mod:`fipstop.probes.crowdsec`).  Per source:
bans/s, bans, bans in force, failed actions, time-to-ban percentiles (first
offending record -> ban) and what the probe could not read of the event feed
(UNREAD: overwritten before it was read, BAD: not a ban record).  The totals,
bans in force and percentiles of ``fipstop-ips`` are the IPS's own counters
(STATUS ``IPS counters``), exact however many events the feed missed; the
histogram and the feed are the events read.  Below: bans per jail, the time-to-ban
histogram (one bar per source and bucket) and the live feed, newest first.
``b`` opens the banned-addresses view (:mod:`fipstop.views.banlist`); Enter on a feed row opens it
filtered to that address.

Addresses, jails and results come from other processes: everything shown is
escaped (``fipstop.views.format.name``) and drawn as plain text.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from fipstop.model.bans import TTB_EDGES_NS, BanStats
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.banlist import BanListScreen
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

SOURCE_STYLE = {"fipstop-ips": "#98c379", "fail2ban": "#ff9e3b", "crowdsec": "#61afef"}
BAN = "bold #c678dd"

SOURCE_COLUMNS = [
    Column("source", "SOURCE", 11, "left", 0, sortable=False),
    Column("rate", "BANS/S", 7, "right", 0, sortable=False),
    Column("bans", "BANS", 7, "right", 0, sortable=False),
    Column("active", "ACTIVE", 7, "right", 1, sortable=False),
    Column("failed", "FAILED", 6, "right", 2, sortable=False),
    Column("p50", "TTB P50", 7, "right", 0, sortable=False),
    Column("p90", "P90", 6, "right", 3, sortable=False),
    Column("p99", "P99", 6, "right", 0, sortable=False),
    Column("max", "MAX", 6, "right", 3, sortable=False),
    Column("seen", "READ", 7, "right", 4, sortable=False),
    Column("missed", "UNREAD", 6, "right", 2, sortable=False),
    Column("bad", "BAD", 5, "right", 3, sortable=False),
    Column("status", "STATUS", 10, "left", 5, flex=True, sortable=False),
]

JAIL_COLUMNS = [
    Column("source", "SOURCE", 11, "left", 0, sortable=False),
    Column("jail", "JAIL", 13, "left", 0, flex=True, sortable=False),
    Column("bans", "BANS", 7, "right", 0, sortable=False),
    Column("active", "ACTIVE", 7, "right", 0, sortable=False),
    Column("failed", "FAILED", 6, "right", 2, sortable=False),
]

FEED_COLUMNS = [
    Column("time", "TIME", 12, "left", 0, sortable=False),
    Column("source", "SOURCE", 11, "left", 1, sortable=False),
    Column("jail", "JAIL", 14, "left", 2, sortable=False),
    Column("kind", "EVENT", 5, "left", 0, sortable=False),
    Column("ip", "ADDRESS", 15, "left", 0, flex=True, sortable=False),
    Column("hits", "HITS", 5, "right", 2, sortable=False),
    Column("ttb", "TIME-TO-BAN", 11, "right", 0, sortable=False),
    Column("reaction", "REACTION", 8, "right", 4, sortable=False),
    Column("action", "ACTION", 8, "left", 4, sortable=False),
    Column("result", "RESULT", 8, "left", 1, sortable=False),
]


def _ms(ns: int | None) -> str:
    return fmt.DASH if ns is None else fmt.duration(ns / 1e9)


def edge_label(i: int) -> str:
    if i >= len(TTB_EDGES_NS):
        return f">{fmt.duration(TTB_EDGES_NS[-1] / 1e9)}"
    return f"≤{fmt.duration(TTB_EDGES_NS[i] / 1e9)}"


def histogram_text(stats: BanStats | None, width: int, height: int) -> Text:
    """One line per non-empty range of buckets: label, then a bar and a count per source."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" Time-to-ban", style="bold")
    srcs = [s for s in (stats.sources if stats else ()) if sum(s.ttb_hist)]
    if not srcs:
        t.append("\n no ban yet", style=palette.LABEL)
        return t
    for s in srcs:
        t.append("  ■ ", style=SOURCE_STYLE.get(s.source, "default"))
        t.append(fmt.name(s.source), style=palette.LABEL)
    t.append("\n")
    used = [i for i in range(len(TTB_EDGES_NS) + 1) if any(s.ttb_hist[i] for s in srcs)]
    lo, hi = used[0], used[-1]
    rows = list(range(lo, hi + 1))
    while len(rows) > max(height - 1, 1):  # too tall: keep the range, drop empty rows first
        empty = [i for i in rows if not any(s.ttb_hist[i] for s in srcs)]
        if not empty:
            rows = rows[-(max(height - 1, 1)):]
            break
        rows.remove(empty[0])
    label_w = 8
    per = max((width - label_w - 1) // len(srcs), 8)
    bar_w = max(per - 8, 2)
    for n, i in enumerate(rows):
        t.append(f" {edge_label(i):>{label_w - 1}}", style=palette.LABEL)
        for s in srcs:
            top = max(s.ttb_hist) or 1
            c = s.ttb_hist[i]
            t.append(" ")
            t.append(fmt.bar(c / top, bar_w).ljust(bar_w), style=SOURCE_STYLE.get(s.source, "default"))
            t.append(f"{fmt.count(c):>6} ", style="default" if c else palette.ZERO)
        if n < len(rows) - 1:
            t.append("\n")
    return t


class HistogramLine(TextLine):
    """The time-to-ban histogram; redrawn on resize: how many buckets fit
    depends on its height."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stats: BanStats | None = None

    def show(self, stats: BanStats | None) -> None:
        self.stats = stats
        self.redraw()

    def redraw(self) -> None:
        self.update(histogram_text(self.stats, self.size.width or 60, self.size.height or 10))

    def on_resize(self) -> None:
        self.redraw()


class BansScreen(FipsScreen):
    SCREEN_NAME = "bans"
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [Binding("escape", "app.screen('overview')", "Overview"), Binding("b", "banlist", "Banned addresses")]

    DEFAULT_CSS = """
    BansScreen #bans-body { height: 1fr; }
    BansScreen #ban-sources { height: 4; }
    BansScreen #bans-mid { height: 12; }
    BansScreen.-short #bans-mid { height: 7; }
    BansScreen #ban-jails { width: 1fr; min-width: 30; }
    BansScreen #ttb-hist { width: 1fr; height: 1fr; padding: 0 0 0 1; }
    BansScreen #ban-feed { height: 1fr; min-height: 3; }
    """

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="bans-body"):
            yield TextLine(id="bans-title", classes="detail-title")
            yield VirtualTable(SOURCE_COLUMNS, id="ban-sources")
            with Horizontal(id="bans-mid"):
                yield VirtualTable(JAIL_COLUMNS, id="ban-jails")
                yield HistogramLine(id="ttb-hist")
            yield TextLine(" Live feed, newest first", classes="section-title")
            yield VirtualTable(FEED_COLUMNS, id="ban-feed")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#ban-sources", VirtualTable).empty_text = (
            "no ban source: start `fipstop ips` (or `fipstop demo`); Fail2Ban: `fipstop top --fail2ban-db PATH`")
        self.query_one("#ban-jails", VirtualTable).empty_text = "no jail has banned yet"
        self.query_one("#ban-feed", VirtualTable).empty_text = "no ban yet"
        self.query_one("#ban-feed", VirtualTable).focus()

    def action_banlist(self, filter_text: str = "") -> None:
        self.app.push_screen(BanListScreen(filter_text))

    @on(VirtualTable.Selected, "#ban-feed")
    def _feed_selected(self, event: VirtualTable.Selected) -> None:
        self.action_banlist(str(event.key[1]))  # (source, ip, ban_ns, kind)

    def refresh_view(self) -> None:
        super().refresh_view()
        stats = self.fips.ban_stats()
        self._refresh_title(stats)
        self._refresh_sources(stats)
        self._refresh_jails(stats)
        if self.is_mounted:
            self.query_one("#ttb-hist", HistogramLine).show(stats)
        self._refresh_feed(stats)

    def _refresh_title(self, stats: BanStats | None) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" Bans", style="bold")
        if stats is None or not stats.sources:
            t.append("  no ban source", style=palette.LABEL)
        else:
            t.append("  ")
            t.append(fmt.si(stats.bans_per_s) + "/s", style=BAN)
            t.append("  total ", style=palette.LABEL)
            t.append(fmt.count(stats.bans_total))
            t.append("  in force ", style=palette.LABEL)
            t.append(fmt.count(stats.active))
            t.append("  jails ", style=palette.LABEL)
            t.append(str(len(stats.jails)))
        t.append("\n ")
        t.append("time-to-ban: first offending record → ban   reaction: record crossing maxretry → ban",
                 style=palette.LABEL)
        self.query_one("#bans-title", TextLine).update(t)

    def _refresh_sources(self, stats: BanStats | None) -> None:
        srcs = list(stats.sources) if stats else []

        def cell(row: int, col: str):
            s = srcs[row]
            st = SOURCE_STYLE.get(s.source, "default")
            if col == "source":
                return (fmt.name(s.source), st)
            if col == "rate":
                return (fmt.si(s.bans_per_s), BAN) if s.bans_per_s > 0 else (
                    "0" if s.rate_valid else fmt.DASH, palette.ZERO)
            if col == "bans":
                return fmt.count(s.bans_total)
            if col == "active":
                return fmt.count(s.active)
            if col == "failed":
                return (fmt.count(s.failed_total), palette.WARN_BOLD) if s.failed_total else ("0", palette.ZERO)
            if col == "p50":
                return _ms(s.ttb_p50_ns)
            if col == "p90":
                return _ms(s.ttb_p90_ns)
            if col == "p99":
                return _ms(s.ttb_p99_ns)
            if col == "max":
                return _ms(s.ttb_max_ns if s.bans_total else None)
            if col == "seen":
                return fmt.count(s.records_seen)
            if col == "missed":
                # events of the feed the probe was lapped on; the totals do not depend on them when exact
                return (fmt.count(s.missed_records), palette.WARN) if s.missed_records else ("0", palette.ZERO)
            if col == "bad":
                return (fmt.count(s.bad_records), palette.WARN_BOLD) if s.bad_records else ("0", palette.ZERO)
            if col == "status":
                if s.unavailable:
                    return (fmt.name(s.unavailable), palette.WARN)
                return ("IPS counters", palette.LIVE) if s.exact else ("events read", palette.LIVE)
            return ""

        self.query_one("#ban-sources", VirtualTable).set_rows([s.source for s in srcs], cell)

    def _refresh_jails(self, stats: BanStats | None) -> None:
        jails = list(stats.jails) if stats else []

        def cell(row: int, col: str):
            j = jails[row]
            if col == "source":
                return (fmt.name(j.source), SOURCE_STYLE.get(j.source, "default"))
            if col == "jail":
                return fmt.name(j.jail)
            if col == "bans":
                return fmt.count(j.bans)
            if col == "active":
                return fmt.count(j.active)
            if col == "failed":
                return (fmt.count(j.failed), palette.WARN_BOLD) if j.failed else ("0", palette.ZERO)
            return ""

        self.query_one("#ban-jails", VirtualTable).set_rows([(j.source, j.jail) for j in jails], cell)

    def _refresh_feed(self, stats: BanStats | None) -> None:
        feed = list(reversed(stats.feed)) if stats else []

        def cell(row: int, col: str):
            e = feed[row]
            if col == "time":
                return fmt.clock(e.ban_ns) + f".{(e.ban_ns // 1_000_000) % 1000:03d}"
            if col == "source":
                return (fmt.name(e.source), SOURCE_STYLE.get(e.source, "default"))
            if col == "jail":
                return fmt.name(e.jail)
            if col == "kind":
                return (e.kind, BAN) if e.kind == "ban" else (e.kind, palette.LABEL)
            if col == "ip":
                return fmt.name(e.ip)
            if col == "hits":
                return str(e.hits)
            if col == "ttb":
                return _ms(e.time_to_ban_ns) if e.kind == "ban" else fmt.DASH
            if col == "reaction":
                return _ms(e.reaction_ns) if e.kind == "ban" and e.trigger_ns else fmt.DASH
            if col == "action":
                return fmt.name(e.action)
            if col == "result":
                return ("ok", palette.LIVE) if e.ok else (fmt.name(e.result), palette.WARN_BOLD)
            return ""

        keys = [(e.source, e.ip, e.ban_ns, e.kind) for e in feed]
        self.query_one("#ban-feed", VirtualTable).set_rows(keys, cell)
