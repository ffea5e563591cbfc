"""StatusHeader: the two lines at the top of every screen.

Line 1: program, host, domains, uptime, sampling interval, LIVE / PAUSED and
the time of the frame shown.  Line 2: totals: records/s, bytes/s, drops/s
(red only when there are drops), rings, consumers by state.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget

from fipstop.model.snapshot import Snapshot
from fipstop.sources.protocol import Timeline
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.widgets.timeline import time_at, timeline_text


@dataclass(frozen=True)
class HeaderState:
    snapshot: Snapshot | None
    interval_s: float
    paused: bool
    behind: int = 0  # frames between the one shown and the newest
    frame_no: int = 0
    frames: int = 0
    note: str = ""  # e.g. a poll error
    bans_per_s: float | None = None  # None: no ban source (no IPS, no Fail2Ban)
    replay: Timeline | None = None  # while replaying a recording


def header_text(state: HeaderState, width: int = 200) -> Text:
    s = state.snapshot
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" fipstop ", style="bold reverse")
    t.append(" ")
    if s is None:
        t.append("waiting for the first sample…", style=palette.LABEL)
        return t
    t.append(fmt.name(s.host), style="bold")
    sep = ("  │  " if width >= 110 else " │ ", palette.LABEL)
    t.append(*sep)
    names = [fmt.name(d.name) for d in s.domains]
    if not names:
        t.append("no domain", style=palette.LABEL)
    else:
        label = ", ".join(names)
        if len(label) > max(width // 4, 16):
            label = f"{len(names)} domains"
        t.append(label, style="bold")
    if s.domains:
        t.append(*sep)
        t.append("up ", style=palette.LABEL)
        t.append(fmt.duration(max(d.uptime_ns for d in s.domains) / 1e9))
    t.append(*sep)
    t.append("every ", style=palette.LABEL)
    t.append(fmt.duration(state.interval_s))
    t.append(*sep)
    if state.paused:
        t.append(" ❚❚ PAUSED ", style=palette.PAUSED)
        if state.frames:
            t.append(f" {state.frame_no}/{state.frames}", style=palette.LABEL)
            if state.behind:
                t.append(f" (-{fmt.duration(state.behind * state.interval_s)})", style=palette.LABEL)
    elif state.replay is not None:
        t.append(f"▶ REPLAY {state.replay.speed:g}x", style="bold #61afef")
    else:
        t.append("● LIVE", style=palette.LIVE)
    t.append("  ")
    t.append(fmt.clock(s.taken_realtime_ns), style=palette.LABEL)
    if state.note:
        t.append("  ")
        t.append(state.note, style=palette.WARN_BOLD)

    t2 = Text(no_wrap=True, overflow="ellipsis")
    tot = s.totals
    narrow = width < 110
    t2.append(" records ", style=palette.LABEL)
    t2.append(fmt.si(tot.records_per_s) + "/s", style=palette.RATE + " bold")
    if not narrow:
        t2.append("  bytes ", style=palette.LABEL)
        t2.append(fmt.size(tot.bytes_per_s) + "/s")
    # drops: ring full (the rings' counters) + no ring (the domains' header: the ring table was full);
    # the no-ring part is said apart when there is one, and "?" while unknown (an older recording)
    t2.append("  drops ", style=palette.LABEL)
    drops_per_s = tot.drops_per_s + (tot.no_ring_per_s or 0.0)
    if drops_per_s > 0:
        t2.append(fmt.si(drops_per_s) + "/s", style=palette.DROPS)
    else:
        t2.append("0/s", style=palette.ZERO)
    t2.append(" (", style=palette.LABEL)
    total = tot.drops_total
    if total is None:
        t2.append(fmt.count(tot.records_dropped) + "+?", style=palette.DROPS if tot.records_dropped else palette.LABEL)
    else:
        t2.append(fmt.count(total), style=palette.DROPS if total else palette.ZERO)
    suffix = "" if narrow else " total"
    if tot.records_no_ring:
        t2.append(suffix + ", ", style=palette.LABEL)
        t2.append(fmt.count(tot.records_no_ring), style=palette.DROPS)
        t2.append(" no ring)", style=palette.LABEL)
    elif total is None and not narrow:
        t2.append(suffix + ", no ring unknown)", style=palette.LABEL)
    else:
        t2.append(suffix + ")", style=palette.LABEL)
    if state.bans_per_s is not None:
        t2.append("  bans ", style=palette.LABEL)
        t2.append(fmt.si(state.bans_per_s) + "/s", style="bold #c678dd" if state.bans_per_s > 0 else palette.ZERO)
    t2.append("  rings ", style=palette.LABEL)
    t2.append(str(tot.rings))
    if tot.rings != tot.rings_active and not narrow:
        t2.append(f" ({tot.rings - tot.rings_active} closed)", style=palette.LABEL)
    t2.append("  consumers " if not narrow else "  cons ", style=palette.LABEL)
    t2.append(str(tot.consumers))
    parts = []
    if tot.consumers_stale:
        parts.append((f"{tot.consumers_stale} stale", palette.HEALTH["stale"]))
    if tot.consumers_evicted:
        parts.append((f"{tot.consumers_evicted} evicted", palette.HEALTH["evicted"]))
    if parts:
        t2.append(" (", style=palette.LABEL)
        for i, (txt, st) in enumerate(parts):
            if i:
                t2.append(", ", style=palette.LABEL)
            t2.append(txt, style=st)
        t2.append(")", style=palette.LABEL)
    if s.errors:
        t2.append("  ")
        t2.append(f"{len(s.errors)} unreadable domain" + ("s" if len(s.errors) > 1 else ""), style=palette.WARN_BOLD)
    if s.warnings:  # fipstop.ring.others_may_write: anyone may inject records the IPS bans on
        t2.append("  ")
        ww = [fmt.name(w.domain) for w in s.warnings]
        t2.append("world-writable: " + (", ".join(ww) if len(ww) <= 3 else f"{len(ww)} domains"),
                  style=palette.WARN_BOLD)
    t.append("\n")
    t.append_text(t2)
    if state.replay is not None:
        t.append("\n")
        t.append_text(timeline_text(state.replay, width))
    return t


class StatusHeader(Widget):
    class Seek(Message):
        """The replay timeline was clicked: play from ``t_ns``."""

        def __init__(self, t_ns: int) -> None:
            super().__init__()
            self.t_ns = t_ns

    DEFAULT_CSS = """
    StatusHeader {
        height: 2;
        width: 1fr;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        background: $panel;
        color: $text;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state: HeaderState | None = None

    def show(self, state: HeaderState) -> None:
        self.state = state
        height = 3 if state.replay is not None else 2
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        """A click on the replay timeline seeks there (the app handles :class:`Seek`)."""
        if self.state is None or self.state.replay is None or event.y != 2:
            return
        t = time_at(self.state.replay, self.size.width, event.x)
        if t is not None:
            self.post_message(self.Seek(t))

    def render(self) -> Text:
        if self.state is None:
            return Text(" fipstop ", style="bold reverse")
        return header_text(self.state, self.size.width or 200)
