"""Help (``?``): every key and every column (one sentence each, with its unit), in one modal screen that scrolls.

At 80x24 the keys do not fit: the text sits in a focused VerticalScroll, so
↑ ↓ j k, PgUp PgDn, Home End and the wheel reach every line.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("everywhere", [
        ("q", "quit"),
        ("Ctrl-C", "quit too"),
        ("?", "this help (Esc, q or ? closes it)"),
        ("↑ ↓ PgUp PgDn", "scroll this help"),
        ("Ctrl-L", "repaint the whole screen"),
        ("space", "pause / resume (sampling goes on while paused)"),
        ("t", "while paused: step to the next (newer) snapshot"),
        ("T", "step to the previous (older) snapshot (pauses)"),
        ("1", "overview"),
        ("2", "ring detail of the highlighted ring"),
        ("3", "consumer detail of the highlighted consumer"),
        ("4", "profile: time split, locks and stacks of a process"),
        ("p", "profile the producer of the ring, or the consumer, shown or highlighted"),
        ("Ctrl-K / F9", "evict the consumer shown or highlighted (asks first)"),
        ("5", "bans: fipstop ips and Fail2Ban, time-to-ban, feed"),
        ("b", "bans panel: the banned addresses (Enter on a feed row)"),
        ("u", "banned addresses: unban (Fail2Ban only; asks first)"),
        ("6", "backends: log files, syslog sockets, UDP, audit …"),
        ("7", "diagnosis: the bottleneck, its evidence, a remedy"),
        ("Esc", "back from a detail screen"),
        ("mouse", "click: highlight, click again: open; wheel: scroll"),
    ]),
    ("tables", [
        ("↑ ↓ j k", "move the cursor"),
        ("PgUp PgDn", "a page up / down"),
        ("Home End", "first / last row (also g G)"),
        ("Tab", "next table"),
        ("Enter", "open the highlighted ring or consumer (on a group row: fold / unfold it)"),
    ]),
    ("overview", [
        ("/", "filter rows: domain, ring, pid, thread, consumer"),
        ("Esc", "clear the filter"),
        ("s", "sort the focused table by the next column"),
        ("S", "reverse the sort order (or click a header)"),
        ("F6", "sort menu: every sortable column of the focused table, hidden ones too"),
        ("l", "the chart's y axis in decades (log scale), or linear again"),
        ("F5", "group the rings by domain, then by process (pid comm), then one row per ring again (htop's tree)"),
        ("+ -", "unfold / fold the highlighted group (- on a ring folds its group); Enter on a group does either"),
        ("*", "fold every group, or unfold them all when all are folded"),
        ("c", "the chart per domain (the 5 busiest, the rest summed as other), or the totals again"),
        ("N P F R B D L H", "sort rings by name, pid, fill, records/s, bytes/s, drops/s, lag, high water; "
                            "consumers by N P L (lag) R (released/s) H (heartbeat) D (drops seen); again: reverse"),
    ]),
    ("profile", [
        ("o", "on-CPU or off-CPU stacks (hot functions, stacks, tree)"),
        ("a", "accumulated since the profile started (the default), or the last interval only"),
        ("e", "export the stacks as folded text (flamegraph, speedscope)"),
        ("Enter", "open / close a node of the stack tree"),
        ("Esc", "back; closing the screen stops profiling"),
    ]),
    ("replay (fipstop replay FILE)", [
        ("[ ]", "seek 10 s back / forward"),
        ("{ }", "jump to the previous / next mark (drops, bans, findings)"),
        ("< >", "slower / faster: 0.25x to 16x"),
        (":", "go to a time (HH:MM[:SS], ISO 8601, +SECONDS)"),
        ("click", "on the timeline (third header line): seek there"),
        ("space t", "pause stops reading; t reads the next frame"),
    ]),
    ("colours", [
        ("red", "records dropped, ring full: nothing else is red"),
        ("cyan", "the row filter typed with /"),
        ("yellow", "ring filling up; consumer stale or lagging"),
        ("orange", "ring almost full"),
        ("magenta", "consumer evicted: silent past the domain's grace while a ring was full (a stopped or "
                    "stalled process too, by design; it may rejoin)"),
    ]),
]


#: every column of the tables, one sentence each with its unit (README.md "Columns" says the same)
COLUMNS: list[tuple[str, list[tuple[str, str]]]] = [
    ("rings (overview, 1)", [
        ("RING", "domain and ring slot (one ring per producer thread)"),
        ("PID TID", "the producer's process and thread ids"),
        ("THREAD", "the producer thread's name (escaped)"),
        ("FILL", "bytes between the slowest ACTIVE consumer's position and the head, in % of the ring"),
        ("RECORDS/S", "records committed per second over the last interval, with its history"),
        ("BYTES/S", "payload bytes committed per second over the last interval"),
        ("DROPS/S", "records dropped per second (ring full) over the last interval"),
        ("DROPPED", "records dropped since the ring was created (count)"),
        ("CLAIMED", "bytes claimed by the producer and not committed yet"),
        ("HIGH", "the highest fill measured since the ring was created, in % (never above the true highest)"),
        ("SLOWEST LAG", "records the slowest ACTIVE consumer has not released, and the age in seconds of the oldest"),
        ("BY", "the consumer that slowest lag belongs to"),
        ("group rows", "(F5) the group's rings (count); RECORDS/S, BYTES/S, DROPS/S, DROPPED, CLAIMED summed over "
                       "them; FILL and HIGH the largest of them; SLOWEST LAG and BY those of its ring with the most "
                       "lag"),
    ]),
    ("consumers (overview 1, details 2 and 3)", [
        ("CONSUMER", "domain and the consumer's registered name (escaped)"),
        ("STATE", "alive, stale (no heartbeat for 2 s), evicted (silent past the grace on a full ring), closed"),
        ("HEARTBEAT", "time since the consumer's last sign of life, in s or ms"),
        ("LAG MAX, LAG MEAN", "records committed and not released, the largest and the mean over its rings"),
        ("MAX (s), MEAN (s)", "the age of the oldest record it has not released (now - that record's timestamp), "
                               "largest and mean over its rings, in seconds"),
        ("LAG (s)", "the same age on one ring, in seconds; `-` when the record's time is unknown"),
        ("LAG BYTES", "bytes between its position and the ring's head"),
        ("drain estimate", "an estimate, not lag: records behind / records it released per second, in seconds"),
        ("RELEASED/S", "records it released per second over the last interval"),
        ("NEXT SEQ", "the sequence number of the next record it will read on that ring"),
        ("READERS", "reader threads it has used (count)"),
        ("DROPS SEEN", "records dropped before it read them that it was told about (count)"),
    ]),
    ("bans (5)", [
        ("SOURCE", "the ban source: fipstop-ips (its bans domain), fail2ban (its database or socket) or crowdsec (its "
                   "database)"),
        ("BANS/S", "bans per second over the last interval (from the IPS's own counter when it publishes one)"),
        ("BANS", "bans since the source started, failed ones included (count; exact: the IPS's counter)"),
        ("ACTIVE", "bans in force now (count)"),
        ("FAILED", "ban actions that failed for good (count)"),
        ("TTB P50 P90 P99 MAX", "time from the first offending record to the ban, percentiles over every ban, "
                                "in ms or s (the IPS's own, within 2 %)"),
        ("READ", "records of the bans domain the probe read (count)"),
        ("UNREAD", "records of the feed overwritten before the probe read them (count; the totals do not depend "
                   "on them)"),
        ("BAD", "records that were not ban events (count)"),
        ("STATUS", "where the figures come from: IPS counters, events read, or why the source is unavailable"),
    ]),
    ("banned addresses (5, b)", [
        ("JAIL", "the jail (CrowdSec: the scenario) that banned the address"),
        ("ADDRESS", "the banned address, or network (CrowdSec ranges)"),
        ("BANNED AT", "when the ban began (local time, whole seconds)"),
        ("FOR", "how long the ban has been in force, in s, m, h"),
        ("EXPIRES", "when the ban ends: Fail2Ban's timeofban + bantime, CrowdSec's until; never for a permanent "
                    "ban, unknown where the source does not say (fipstop ips's events)"),
        ("LEFT", "time left until EXPIRES, in s, m, h (never, unknown as EXPIRES)"),
        ("HITS", "offending records that led to the ban (count)"),
        ("TIME-TO-BAN", "first offending record -> ban, in ms or s (as in the feed)"),
        ("ACTION", "how the source banned: dry-run, nft, fail2ban, crowdsec:ban ..."),
    ]),
]


def help_text() -> Text:
    """Every key, as plain Text in two aligned columns."""
    width = max(len(k) for _, rows in KEYS for k, _ in rows) + 2
    t = Text()
    for i, (section, rows) in enumerate(KEYS):
        if i:
            t.append("\n")
        t.append(section + "\n", style="bold underline")
        for key, what in rows:
            t.append(f"  {key:<{width}}", style="bold #56b6c2")
            t.append(what + "\n")
    cw = max(len(k) for _, rows in COLUMNS for k, _ in rows) + 2
    for section, rows in COLUMNS:
        t.append("\n")
        t.append("columns: " + section + "\n", style="bold underline")
        for key, what in rows:
            t.append(f"  {key:<{cw}}", style="bold #56b6c2")
            t.append(what + "\n")
    t.rstrip()
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close"),
        Binding("j", "scroll(1)", "Down", show=False),
        Binding("k", "scroll(-1)", "Up", show=False),
        Binding("space", "scroll_page(1)", "Page down", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 100;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        border-title-style: bold;
        background: $surface;
        padding: 0 1;
        overflow-y: auto;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-scroll") as v:
            v.border_title = "fipstop keys"
            v.border_subtitle = "↑ ↓ PgUp PgDn scroll"
            yield Static(help_text(), id="help-keys")

    def on_mount(self) -> None:
        self.query_one("#help-scroll", VerticalScroll).focus()  # its own keys scroll it

    def action_scroll(self, lines: int) -> None:
        self.query_one("#help-scroll", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_scroll_page(self, pages: int) -> None:
        v = self.query_one("#help-scroll", VerticalScroll)
        v.scroll_relative(y=pages * max(v.scrollable_content_region.height - 1, 1), animate=False)

    def on_click(self) -> None:
        self.dismiss(None)
