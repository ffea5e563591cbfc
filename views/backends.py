"""Backends (key 6): the logging paths beside FIPS rings, in the rings' words.

Two tables: log files (growth per second, and every reader's lag in bytes
and seconds), and everything with a queue and drops (unix syslog sockets
with their receiver and blocked senders, UDP syslog sockets and host
counters, the ARP discards, journald, Linux audit, rsyslog's queues, and
with ``--fipsipc`` the FIPS paper's prototype rings, one row per segment).
Red is kept for drops/lost, as on the rings.  The data is the shown
snapshot's ``backends`` (derived by the model; no probe is called).  Paths,
process and queue names are escaped and shown as plain Text.
"""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer

from fipstop.model.backends import BackendsView, SocketRow
from fipstop.model.fipsipc import FipsIpcView
from fipstop.model.raw import ProbeFailure
from fipstop.probes.unixsock import Holder
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

FILE_COLUMNS = [
    Column("file", "FILE", 20, "left", 0, flex=True, sortable=False),
    Column("size", "SIZE", 9, "right", 2, sortable=False),
    Column("growth", "BYTES/S", 9, "right", 0, sortable=False),
    Column("lines", "LINES/S", 8, "right", 1, sortable=False),
    Column("reader", "READER", 26, "left", 0, sortable=False),
    Column("lag_bytes", "LAG", 9, "right", 0, sortable=False),
    Column("lag_s", "LAG (s)", 7, "right", 0, sortable=False),
    Column("rot", "ROT/TRUNC", 9, "right", 3, sortable=False),
]

QUEUE_COLUMNS = [
    Column("kind", "BACKEND", 8, "left", 0, sortable=False),
    Column("name", "NAME", 22, "left", 0, sortable=False),
    Column("rate", "RATE", 8, "right", 2, sortable=False),
    Column("queue", "QUEUE", 9, "right", 0, sortable=False),
    Column("drops", "DROPS/LOST", 10, "right", 0, sortable=False),
    Column("drops_s", "DROPS/S", 8, "right", 0, sortable=False),
    Column("detail", "DETAIL", 16, "left", 1, flex=True, sortable=False),
]


def _rate(v: float, unit: str = "") -> tuple[str, str]:
    if v is None or math.isnan(v):
        return (fmt.DASH, palette.LABEL)
    return ((fmt.size(v) + "/s") if unit == "B" else fmt.si(v), palette.RATE if v else palette.ZERO)


def _drops(total: int) -> tuple[str, str]:
    if total < 0:
        return (fmt.DASH, palette.LABEL)
    return (fmt.count(total), palette.DROPS_LEGEND if total else palette.ZERO)


def _drops_s(v: float) -> tuple[str, str]:
    if math.isnan(v):
        return (fmt.DASH, palette.LABEL)
    return (fmt.si(v), palette.DROPS if v > 0 else palette.ZERO)


def _queue(v: int) -> tuple[str, str]:
    if v < 0:
        return (fmt.DASH, palette.LABEL)
    return (fmt.size(v), "default" if v else palette.ZERO)


def _who(holders: tuple[Holder, ...]) -> str:
    return ", ".join(f"{fmt.name(h.comm)}[{h.pid}]" for h in holders)


def file_rows(v: BackendsView) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in v.files:
        base: dict[str, Any] = {"file": fmt.name(f.path)}
        if not f.ok:
            rows.append(base | {"reader": (fmt.name(f.reason), palette.WARN)})
            continue
        base |= {
            "size": fmt.size(f.size_bytes),
            "growth": _rate(f.bytes_per_s, "B"),
            "lines": _rate(f.lines_per_s) if not f.lines_estimated else (f"~{fmt.si(f.lines_per_s)}", palette.RATE),
            "rot": (f"{f.rotations}/{f.truncations}", palette.WARN if f.rotations or f.truncations else palette.ZERO),
        }
        if not f.readers:
            rows.append(base | {"reader": ("no reader", palette.LABEL)})
        for i, r in enumerate(f.readers):
            who = f"{fmt.name(r.comm)}[{r.pid}]" + ("" if r.open_now else " closed") + \
                ("" if r.same_file else " old file")
            row = {} if i else dict(base)
            row |= {"reader": (who, "default" if r.open_now else palette.LABEL),
                    "lag_bytes": _queue(r.lag_bytes), "lag_s": (fmt.duration(r.lag_s), palette.lag_style(r.lag_s))}
            rows.append(row)
    return rows


def _socket_row(kind: str, s: SocketRow) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": kind, "name": fmt.name(s.path)}
    if not s.ok:
        return row | {"detail": (fmt.name(s.reason), palette.WARN)}
    detail = f"→ {_who(s.receivers) or '?'}  {s.senders_connected} senders"
    if s.blocked:  # first: the narrow screen keeps the start of the cell
        detail = f"{len(s.blocked)} blocked: " + ", ".join(
            f"{fmt.name(b.comm)}[{b.tid}] {b.syscall}" for b in s.blocked[:3]) + "  " + detail
    if s.reason:
        detail += "  " + fmt.name(s.reason)
    styled = (detail, palette.WARN_BOLD if s.blocked or s.reason else "default")
    return row | {"queue": _queue(s.queue_bytes), "drops": _drops(s.drops), "drops_s": _drops_s(s.drops_per_s),
                  "detail": styled}


def queue_rows(v: BackendsView) -> list[dict[str, Any]]:
    rows = [_socket_row("socket", s) for s in v.sockets]
    if v.journald is not None:
        j = v.journald
        if not j.running:
            rows.append({"kind": "journald", "name": fmt.name(j.reason or "not running"),
                         "detail": ("systemd-journald is not running here", palette.LABEL)})
        else:
            rows.append({"kind": "journald", "name": f"stored (pid {j.pid})",
                         "rate": _rate(j.stored_bytes_per_s, "B"), "queue": _queue(-1),
                         "detail": (f"journal files {fmt.size(max(j.journal_bytes, 0))}"
                                    + (f"  {fmt.name(j.reason)}" if j.reason else ""), palette.LABEL)})
            rows.extend(_socket_row("journald", s) for s in j.sockets)
    if v.net is not None:
        n = v.net
        if not n.ok:
            rows.append({"kind": "udp", "name": "host", "detail": (fmt.name(n.reason), palette.WARN)})
        else:
            for u in n.sockets:
                rows.append({"kind": "udp", "name": f"{u.proto} {u.local}:{u.port}", "queue": _queue(u.rx_queue_bytes),
                             "drops": _drops(u.drops), "drops_s": _drops_s(u.drops_per_s),
                             "detail": (f"{fmt.name(u.comm)}[{','.join(map(str, u.pids))}]" if u.pids else "?",
                                        "default")})
            rows.append({"kind": "udp", "name": "host RcvbufErrors", "rate": _rate(n.in_datagrams_per_s),
                         "drops": _drops(n.rcvbuf_errors), "drops_s": _drops_s(n.rcvbuf_errors_per_s),
                         "detail": (f"InErrors {fmt.count(n.in_errors)}; rate: datagrams in/s", palette.LABEL)})
            rows.append({"kind": "arp", "name": "unresolved discards", "drops": _drops(n.arp_unresolved_discards),
                         "drops_s": _drops_s(n.arp_unresolved_discards_per_s),
                         "detail": ("sent before the next hop resolved", palette.LABEL)})
    if v.audit is not None:
        a = v.audit
        if not a.ok:
            rows.append({"kind": "audit", "name": "kernel", "detail": (fmt.name(a.reason), palette.WARN)})
        else:
            rows.append({"kind": "audit", "name": f"kernel (auditd pid {a.pid})" if a.pid else "kernel (no auditd)",
                         "queue": (f"{a.backlog}/{a.backlog_limit}", "default" if a.backlog else palette.ZERO),
                         "drops": _drops(a.lost), "drops_s": _drops_s(a.lost_per_s),
                         "detail": (f"enabled {a.enabled} failure {a.failure} rate_limit {a.rate_limit} "
                                    f"wait {a.backlog_wait_time}", palette.LABEL)})
    if v.rsyslog is not None:
        r = v.rsyslog
        if not r.ok:
            rows.append({"kind": "rsyslog", "name": fmt.name(r.path), "detail": (fmt.name(r.reason), palette.WARN)})
        for q in r.queues:
            rows.append({"kind": "rsyslog", "name": fmt.name(q.name), "rate": _rate(q.enqueued_per_s),
                         "queue": (f"{fmt.count(q.size)}", "default" if q.size else palette.ZERO),
                         "drops": _drops(q.discarded_full + q.discarded_nf), "drops_s": _drops_s(q.discarded_per_s),
                         "detail": (f"max {fmt.count(q.maxqsize)} full {fmt.count(q.full)} "
                                    f"disc.full {fmt.count(q.discarded_full)} disc.nf {fmt.count(q.discarded_nf)}",
                                    palette.LABEL)})
    for note in v.notes:
        rows.append({"kind": "note", "detail": (fmt.name(note), palette.WARN)})
    return rows


def fipsipc_rows(v: FipsIpcView | ProbeFailure | None) -> list[dict[str, Any]]:
    """One row per FIPS-IPC segment (``--fipsipc``): the FIPS paper's prototype rings.
    QUEUE is the slowest reader's lag in records; DROPS/LOST what OVERWRITE lapped
    unread in the interval, an estimate (``~``), unknown (-) when the writer waits."""
    if v is None:
        return []
    if isinstance(v, ProbeFailure):
        return [{"kind": "fipsipc", "detail": ("probe failed: " + fmt.name(v.reason), palette.WARN)}]
    if v.unavailable:
        return [{"kind": "fipsipc", "detail": (fmt.name(v.unavailable), palette.WARN)}]
    rows: list[dict[str, Any]] = []
    for s in v.segments:
        rates = [r.commit_per_s_est for r in s.rings if r.commit_per_s_est is not None]
        lags = [r.lag_slots for r in s.rings if r.lag_slots is not None]
        fills = [r.fill_pct for r in s.rings if r.fill_pct is not None]
        lapped = [r.lapped_slots_est for r in s.rings if r.lapped_slots_est is not None]
        row: dict[str, Any] = {"kind": "fipsipc", "name": fmt.name(s.label)}
        row["rate"] = (f"~{fmt.si(sum(rates))}", palette.RATE if sum(rates) else palette.ZERO) if rates \
            else (fmt.DASH, palette.LABEL)
        row["queue"] = (f"{fmt.count(max(lags))} rec", "default" if max(lags) else palette.ZERO) if lags \
            else (fmt.DASH, palette.LABEL)
        if s.overwrite and lapped and s.dt_s > 0:
            row["drops"] = (f"~{fmt.count(sum(lapped))}", palette.DROPS_LEGEND if sum(lapped) else palette.ZERO)
            row["drops_s"] = (f"~{fmt.si(sum(lapped) / s.dt_s)}", palette.DROPS if sum(lapped) else palette.ZERO)
        detail = f"{len(s.rings)} rings x {s.slots}, fill max " + (f"{max(fills):.1f}%" if fills else fmt.DASH)
        detail += f", {s.writers_registered}w/{s.readers_registered}r registered, {s.attached} attached"
        if s.gone:
            detail = f"{s.gone} gone (killed?)  " + detail
        full = bool(fills) and max(fills) >= 99 and not s.overwrite
        rows.append(row | {"detail": (detail, palette.WARN_BOLD if s.gone or full else palette.LABEL)})
    for r in v.rejected:
        if r.name:
            rows.append({"kind": "fipsipc", "name": fmt.name(r.name), "detail": (fmt.name(r.reason), palette.WARN)})
    return rows


def summary(v: BackendsView | ProbeFailure | None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" Backends", style="bold")
    if v is None:
        t.append("  waiting for the first sample (or not sampled by this source)", style="italic " + palette.LABEL)
        return t
    if isinstance(v, ProbeFailure):
        t.append("  probe failed: " + fmt.name(v.reason), style=palette.WARN)
        return t
    readers = sum(len(f.readers) for f in v.files)
    t.append(f"  {len(v.files)} files, {readers} readers, {len(v.sockets)} sockets", style=palette.LABEL)
    worst = max(((r.lag_bytes, r.lag_s) for f in v.files for r in f.readers), default=None)
    if worst:
        t.append("  max lag ", style=palette.LABEL)
        t.append(f"{fmt.size(worst[0])} {fmt.duration(worst[1])}", style=palette.lag_style(worst[1]))
    d = v.drops_per_s
    t.append("  drops ", style=palette.LABEL)
    t.append(fmt.si(d) + "/s", style=palette.DROPS if d else palette.ZERO)
    if not v.dt_s:
        t.append("  (rates after the next sample)", style="italic " + palette.LABEL)
    return t


class BackendsScreen(FipsScreen):
    SCREEN_NAME = "backends"
    BINDINGS = [Binding("escape", "app.back", "Back")]
    DEFAULT_CSS = """
    #bk-body { height: 1fr; }
    #bk-files { height: auto; max-height: 12; min-height: 2; }
    #bk-queues { height: 1fr; min-height: 3; }
    """

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="bk-body"):
            yield TextLine(id="bk-title", classes="section-title")
            yield TextLine(" Log files: growth and each reader's lag", classes="section-title")
            yield VirtualTable(FILE_COLUMNS, id="bk-files")
            yield TextLine(" Sockets, network, journald, audit, rsyslog: queue and drops", classes="section-title")
            yield VirtualTable(QUEUE_COLUMNS, id="bk-queues")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#bk-files", VirtualTable).empty_text = \
            "no file watched: --watch-file PATH, fipstop.toml [backends] files, or a tailer under /var/log"
        self.query_one("#bk-queues", VirtualTable).empty_text = "nothing sampled yet"
        self.query_one("#bk-files", VirtualTable).focus()

    def refresh_view(self) -> None:
        super().refresh_view()
        snap = self.fips.snapshot
        v = snap.backends if snap is not None else None
        self.query_one("#bk-title", TextLine).update(summary(v))
        ipc = fipsipc_rows(snap.fipsipc if snap is not None else None)
        if not isinstance(v, BackendsView):
            self.query_one("#bk-files", VirtualTable).set_rows([], lambda r, c: "")
            self.query_one("#bk-queues", VirtualTable).set_rows(list(range(len(ipc))), lambda r, c: ipc[r].get(c, ""))
            return
        frows, qrows = file_rows(v), queue_rows(v) + ipc
        self.query_one("#bk-files", VirtualTable).set_rows(list(range(len(frows))),
                                                             lambda r, c: frows[r].get(c, ""))
        self.query_one("#bk-queues", VirtualTable).set_rows(list(range(len(qrows))),
                                                              lambda r, c: qrows[r].get(c, ""))
