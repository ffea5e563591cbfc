"""The banned-addresses view (``b`` or Enter on the Bans panel): the bans in force now, as
``fail2ban-client status JAIL`` lists them, for every ban source side by side.

One row per ban in force: source, jail (CrowdSec: the scenario), address, when it was banned, for how
long it has been, when it ends and the time left ("never" for a permanent ban, "unknown" where the source
does not say: ``fipstop ips``'s events before they carried their bantime).  The list is what the snapshot
holds: the newest :data:`fipstop.model.bans.IN_FORCE_MAX` bans per source; the title gives each source's
exact count in force and says when the list is partial.  ``/`` filters (a substring of source, jail, address or action),
Shift+letter sorts (again reverses), ``u`` lifts a ban after a confirmation that shows the exact command:
a Fail2Ban ban through ``fail2ban-client`` (``-s`` the socket the dashboard follows), a ``fipstop ips`` ban
through the control socket the IPS publishes (``fipstop ips-client unban JAIL ADDR``); for the other
sources, in a replay, for an IPS without a socket or one that would refuse us, it says why not.  The
command runs off the UI thread; its result is the note under the table.  Times are the shown frame's, so a
replay is consistent.

Addresses and jails come from other processes: shown escaped (``fmt.name``), passed to fail2ban-client as
separate arguments (to the IPS as JSON fields) after :func:`fipstop.unban.refusal` checked them.
"""

from __future__ import annotations

import shlex
import threading

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Input

from fipstop import unban
from fipstop.bans import BanEvent
from fipstop.model.bans import IN_FORCE_MAX
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.confirm import ConfirmAction
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

SOURCE_STYLE = {"fipstop-ips": "#98c379", "fail2ban": "#ff9e3b", "crowdsec": "#61afef"}

COLUMNS = [
    Column("source", "SOURCE", 11, "left", 1, descending=False),
    Column("jail", "JAIL", 14, "left", 0, descending=False),
    Column("ip", "ADDRESS", 15, "left", 0, flex=True, descending=False),
    Column("banned", "BANNED AT", 10, "left", 0),
    Column("age", "FOR", 7, "right", 2, descending=False),
    Column("expires", "EXPIRES", 10, "left", 3),
    Column("left", "LEFT", 7, "right", 0, descending=False),
    Column("hits", "HITS", 5, "right", 2),
    Column("ttb", "TIME-TO-BAN", 11, "right", 3),
    Column("action", "ACTION", 10, "left", 4, descending=False),
]

#: Shift+letter -> sort column
SORT_KEYS = {"S": "source", "J": "jail", "A": "ip", "B": "banned", "F": "age", "E": "expires", "L": "left",
             "H": "hits", "T": "ttb"}

_FOREVER = 1 << 62  # sorts a permanent ban after every dated one (never shown)


def _left_ns(b: BanEvent, now_ns: int) -> int | None:
    if b.permanent:
        return _FOREVER
    return None if b.expires_ns is None else max(0, b.expires_ns - now_ns)


def _whole_s(ns: int) -> str:
    """A span in whole seconds, as the clock columns beside it ("0s" under one)."""
    s = max(0, ns) // 1_000_000_000
    return f"{s}s" if s < 60 else fmt.duration(s)


def _ip_key(ip: str) -> tuple:
    parts = ip.replace("/", ".").replace(":", ".").split(".")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def sort_key(col: str, now_ns: int):
    """The sort key of column ``col``; an unknown end sorts before every known one."""
    def key(b: BanEvent):
        if col == "source":
            return (b.source, b.jail)
        if col == "jail":
            return (b.jail, b.source)
        if col == "ip":
            return _ip_key(b.ip)
        if col in ("banned", "age"):
            return b.ban_ns
        if col in ("expires", "left"):
            left = _left_ns(b, now_ns)
            return -1 if left is None else left
        if col == "hits":
            return b.hits
        if col == "ttb":
            return b.time_to_ban_ns
        return b.action
    return key


def matches(b: BanEvent, needle: str) -> bool:
    n = needle.lower()
    return any(n in fmt.name(x).lower() for x in (b.source, b.jail, b.ip, b.action))


class ConfirmUnban(ConfirmAction):
    """The unban question (views.confirm.ConfirmAction): the address, its jail and the exact command it runs;
    y runs it, n / Esc does nothing."""

    def __init__(self, ip: str, jail: str, argv: list[str]) -> None:
        text = Text()
        text.append(f"Lift the ban of {fmt.name(ip)} in jail {fmt.name(jail)}?\n\n", style="bold")
        text.append("runs: " + " ".join(fmt.name(shlex.quote(a)) for a in argv) + "\n\n", style=palette.LABEL)
        text.append("y: unban   n / Esc: cancel")
        super().__init__(text)


class BanListScreen(FipsScreen):
    SCREEN_NAME = "banned addresses"
    BINDINGS = [
        Binding("escape", "leave", "Back"),
        Binding("slash", "filter", "Filter"),
        Binding("u", "unban", "Unban"),
        *[Binding(k, f"sort('{c}')", f"Sort {c}", show=False) for k, c in SORT_KEYS.items()],
    ]
    DEFAULT_CSS = """
    BanListScreen #banlist-body { height: 1fr; }
    BanListScreen #banlist-table { height: 1fr; }
    BanListScreen #banlist-filter { height: 1; border: none; padding: 0 1; }
    """

    def __init__(self, filter_text: str = "") -> None:
        super().__init__()
        self.filter_text = filter_text
        self.sort = "banned"
        self.descending = True
        self.rows: list[BanEvent] = []
        self.now_ns = 0

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="banlist-body"):
            yield TextLine(id="banlist-title", classes="detail-title")
            yield Input(placeholder="filter source, jail, address (Enter: keep, Esc: clear)", id="banlist-filter")
            yield VirtualTable(COLUMNS, id="banlist-table")
            yield TextLine(id="banlist-note")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#banlist-title", TextLine).styles.height = 2
        self.query_one("#banlist-filter", Input).display = False
        self.query_one("#banlist-table", VirtualTable).focus()

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#banlist-table", VirtualTable)

    def refresh_view(self) -> None:
        super().refresh_view()
        if not self.is_mounted:
            return
        stats = self.fips.ban_stats()
        snap = self.fips.snapshot
        self.now_ns = int(snap.taken_realtime_ns) if snap is not None else 0
        self._title(stats)
        listed = list(stats.in_force) if stats is not None else []
        rows = [b for b in listed if matches(b, self.filter_text)] if self.filter_text else listed
        rows.sort(key=sort_key(self.sort, self.now_ns), reverse=self.descending)
        self.rows = rows
        table = self.table
        table.set_sort(self.sort, self.descending)
        if self.filter_text and listed:
            table.empty_text = f"no ban in force matches the filter {self.filter_text!r} ({len(listed)} hidden)"
        elif stats is None or not stats.sources:
            table.empty_text = "no ban source: start `fipstop ips` (or `fipstop demo`), or give --fail2ban-db"
        else:
            table.empty_text = "no ban in force"
        table.set_rows([(b.source, b.jail, b.ip) for b in rows], self._cell)

    def _title(self, stats) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" Banned addresses", style="bold")
        if stats is None or not stats.sources:
            t.append("  no ban source", style=palette.LABEL)
        else:
            t.append("  in force ", style=palette.LABEL)
            t.append(fmt.count(stats.active))
            for s in stats.sources:
                t.append("   ")
                t.append(fmt.name(s.source), style=SOURCE_STYLE.get(s.source, "default"))
                t.append(f" {fmt.count(s.active)}")
                n = stats.listed(s.source)
                if s.active > n:
                    t.append(f" (newest {fmt.count(n)} listed)", style=palette.WARN)
        t.append("\n ")
        if stats is not None and stats.listed_partial:
            t.append(f"partial list: at most {IN_FORCE_MAX:,} per source, the newest; the counts are exact   ",
                     style=palette.WARN)
        if self.filter_text:
            t.append("filter ", style=palette.FILTER)
            t.append(repr(self.filter_text) + "   ", style=palette.FILTER)
        t.append("/ filter  S J A B F E L H T sort  u unban (Fail2Ban, fipstop ips)", style=palette.LABEL)
        self.query_one("#banlist-title", TextLine).update(t)

    def _cell(self, row: int, col: str):
        b = self.rows[row]
        if col == "source":
            return (fmt.name(b.source), SOURCE_STYLE.get(b.source, "default"))
        if col == "jail":
            return fmt.name(b.jail)
        if col == "ip":
            return fmt.name(b.ip)
        if col == "banned":
            return fmt.clock(b.ban_ns)
        if col == "age":
            return _whole_s(self.now_ns - b.ban_ns) if self.now_ns else fmt.DASH
        if col == "expires":
            if b.permanent:
                return ("never", palette.WARN)
            return ("unknown", palette.LABEL) if b.expires_ns is None else fmt.clock(b.expires_ns)
        if col == "left":
            if b.permanent:
                return ("never", palette.WARN)
            if b.expires_ns is None:
                return ("unknown", palette.LABEL)
            return _whole_s(b.expires_ns - self.now_ns)
        if col == "hits":
            return str(b.hits)
        if col == "ttb":
            return fmt.duration(b.time_to_ban_ns / 1e9)
        if col == "action":
            return fmt.name(b.action)
        return ""

    # -- keys -----------------------------------------------------------------------------

    def action_sort(self, col: str) -> None:
        if self.sort == col:
            self.descending = not self.descending
        else:
            self.sort = col
            self.descending = next(c.descending for c in COLUMNS if c.key == col)
        self.refresh_view()

    @on(VirtualTable.HeaderClicked, "#banlist-table")
    def _header_clicked(self, event: VirtualTable.HeaderClicked) -> None:
        self.action_sort(event.column)

    def action_leave(self) -> None:
        """Esc: clears the filter first, then back one level (the Bans panel)."""
        box = self.query_one("#banlist-filter", Input)
        if box.display or self.filter_text:
            self.filter_text = ""
            box.value = ""
            box.display = False
            self.table.focus()
            self.refresh_view()
            return
        if len(self.app.screen_stack) > 1 and self.app.screen is self:
            self.app.pop_screen()

    def action_filter(self) -> None:
        box = self.query_one("#banlist-filter", Input)
        box.display = True
        box.value = self.filter_text
        box.focus()

    @on(Input.Changed, "#banlist-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.refresh_view()

    @on(Input.Submitted, "#banlist-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        self.query_one("#banlist-filter", Input).display = False
        self.table.focus()
        self.refresh_view()

    def _note(self, text: str, style: str) -> None:
        self.query_one("#banlist-note", TextLine).update(Text(" " + text, style=style, no_wrap=True,
                                                              overflow="ellipsis"))

    def action_unban(self) -> None:
        key = self.table.cursor_key
        if key is None:
            self._note("no row: nothing to unban", palette.LABEL)
            return
        source, jail, ip = key
        if getattr(self.app, "replay", None) is not None:
            self._note("a recording: nothing to unban (this is the past)", palette.WARN)
            return
        stats = self.fips.ban_stats()
        src = stats.source(source) if stats is not None else None
        control = src.control if src is not None else ""  # fail2ban-server's / fipstop ips's socket
        why = unban.refusal(source, jail, ip, control)
        if why:
            self._note(f"cannot unban {fmt.name(ip)} here: {fmt.name(why)}", palette.WARN)
            return
        argv = unban.unban_argv(jail, ip, socket=control or None, source=source)

        def answered(yes: bool | None) -> None:
            if not yes:
                self._note("unban cancelled", palette.LABEL)
                return
            self._note(f"unbanning {fmt.name(ip)} in {fmt.name(jail)}…", palette.LABEL)
            threading.Thread(target=self._run_unban, args=(source, jail, ip, control), daemon=True,
                             name="unban").start()

        self.app.push_screen(ConfirmUnban(ip, jail, argv), answered)

    def _run_unban(self, source: str, jail: str, ip: str, control: str) -> None:
        ok, what = unban.unban(jail, ip, socket=control or None, source=source)
        self.app.call_from_thread(self._note, fmt.name(what), palette.LIVE if ok else palette.WARN_BOLD)
