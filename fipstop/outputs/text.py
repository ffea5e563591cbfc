"""Text for people: a domain's raw snapshot and the other backends' derived view.

``fipstop snapshot`` prints these.  Everything that comes from shared memory
or another process (thread, consumer and domain names, paths, process names)
is attacker-controlled: control characters are escaped as ``\\xNN`` (no ANSI
sequence reaches the terminal) and the text is plain (no markup is
interpreted).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fipstop.model.backends import BackendsView
from fipstop.ring import ConsumerState, DomainSnapshot
from fipstop.textsafe import escape_text

__all__ = ["format_backends", "format_human", "no_domains_hint"]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool], indent: str = "  ") -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def fmt(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if numeric[i]:
                parts.append(cell.rjust(widths[i]))
            else:
                parts.append(cell if last else cell.ljust(widths[i]))
        return (indent + "  ".join(parts)).rstrip()

    lines = [fmt(headers)]
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)


def _bytes_h(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _age_h(ns: int) -> str:
    if ns < 0:
        return "-"
    s = ns / 1e9
    if s < 10:
        return f"{s:.2f}s"
    if s < 600:
        return f"{s:.1f}s"
    if s < 3 * 86400:
        return f"{s / 3600:.1f}h" if s >= 7200 else f"{s / 60:.0f}m"
    return f"{s / 86400:.1f}d"


def _pct(frac: float) -> str:
    return f"{100.0 * frac:.1f}"


def _ago(now_ns: int, then_ns: int) -> str:
    if then_ns == 0:
        return "never"
    return _age_h(max(now_ns - then_ns, 0)) + " ago"


def format_human(snap: DomainSnapshot) -> str:
    ring_stats = snap.ring_stats()
    cons_stats = snap.consumer_stats()
    n_active_cons = sum(1 for c in cons_stats if c.state == ConsumerState.ACTIVE)
    lines = [
        f"domain {escape_text(snap.name)}  ({escape_text(snap.path)})",
        f"  {snap.max_rings} rings x {_bytes_h(snap.ring_capacity_bytes)}, max record "
        f"{_bytes_h(snap.max_record_bytes)}, consumers {n_active_cons} active of {snap.max_consumers}, "
        f"creator pid {snap.creator_pid}, eviction grace {snap.grace_ns / 1e9:g}s",
        "",
    ]
    if ring_stats:
        rows = []
        for r in ring_stats:
            rows.append(
                [
                    str(r.index),
                    r.state_label,
                    str(r.pid),
                    str(r.tid),
                    escape_text(r.thread_name) or "-",
                    str(r.records_committed),
                    str(r.records_dropped),
                    _pct(r.fill_fraction),
                    _pct(min(r.high_water_fraction, 1.0)),
                    _ago(snap.taken_realtime_ns, r.last_commit_ns),
                ]
            )
        lines.append(f"  rings: {len(ring_stats)} in use of {snap.max_rings}")
        lines.append(
            _table(
                ["RING", "STATE", "PID", "TID", "THREAD", "COMMITTED", "DROPPED", "FILL%", "HIGH%", "LAST COMMIT"],
                rows,
                [True, False, True, True, False, True, True, True, True, False],
            )
        )
    else:
        lines.append("  rings: none in use (no producer has logged yet)")
    if snap.records_no_ring:
        lines.append(f"  no ring: {snap.records_no_ring} records dropped because the ring table was full "
                     f"(more producer threads than the {snap.max_rings} rings); not in any ring's DROPPED")
    lines.append("")
    if cons_stats:
        rows = []
        hb = snap.heartbeat_age_ns()
        for c in cons_stats:
            active = c.state == ConsumerState.ACTIVE
            rows.append(
                [
                    str(c.index),
                    escape_text(c.name) or "-",
                    c.state_label,
                    str(c.pid),
                    _age_h(int(hb[c.index])),
                    str(c.records_released),
                    str(c.lag_records) if active else "-",
                ]
            )
        lines.append(f"  consumers: {len(cons_stats)} registered of {snap.max_consumers}")
        lines.append(
            _table(
                ["IDX", "NAME", "STATE", "PID", "HEARTBEAT AGE", "RELEASED", "LAG (records)"],
                rows,
                [True, False, False, True, True, True, True],
            )
        )
        pos = [p for p in snap.pos_stats() if p.lag_records >= 0]
        if pos:
            names = {c.index: escape_text(c.name) or "-" for c in cons_stats}
            rows = [
                [
                    names.get(p.consumer, str(p.consumer)),
                    str(p.ring),
                    str(p.released_seq),
                    str(p.lag_records),
                    str(p.lag_bytes),
                    str(p.lost_seen),
                ]
                for p in pos
            ]
            lines.append("")
            lines.append("  positions (active consumers x rings in use)")
            lines.append(
                _table(
                    ["CONSUMER", "RING", "NEXT SEQ", "LAG (records)", "LAG (bytes)", "LOST SEEN"],
                    rows,
                    [False, True, True, True, True, True],
                )
            )
    else:
        lines.append("  consumers: none registered")
    return "\n".join(lines)



def no_domains_hint(shm_dir: str) -> str:
    d = escape_text(shm_dir)
    return (
        f"no FIPS domains in {d} (files named fips.<name>).\n"
        f"Start a producer to create one, e.g. `make demo`, or from Python:\n"
        f"  FIPS_SHM_DIR={d} python -c \"from fipstop._fips import Domain, Producer; "
        f"d = Domain('demo'); Producer(d).log(b'hello')\""
    )



def _r(v: float, unit: str = "/s") -> str:
    return "-" if math.isnan(v) else f"{v:.1f}{unit}"


def format_backends(view: BackendsView, escape: Callable[[str], str] = escape_text) -> str:
    """A short human section; ``escape`` makes attacker-controlled names safe."""
    out = ["backends" + (f"  (rates over {view.dt_s:.2f}s)" if view.dt_s else "  (no rates: one sample)")]
    for f in view.files:
        if not f.ok:
            out.append(f"  file {escape(f.path)}: {escape(f.reason)}")
            continue
        out.append(f"  file {escape(f.path)}: {f.size_bytes} B, {_r(f.bytes_per_s, ' B/s')}, "
                   f"{_r(f.lines_per_s, ' lines/s')}, rotations {f.rotations}, truncations {f.truncations}")
        for r in f.readers:
            lag_s = "-" if math.isnan(r.lag_s) else f"{r.lag_s:.2f}s"
            out.append(f"    reader {escape(r.comm)}[{r.pid}] at {r.pos_bytes}: lag {r.lag_bytes} B, {lag_s}"
                       + ("" if r.open_now else " (closed since)") + ("" if r.same_file else " (old file)"))
    for s in view.sockets:
        if not s.ok:
            out.append(f"  socket {escape(s.path)}: {escape(s.reason)}")
            continue
        who = ", ".join(f"{escape(h.comm)}[{h.pid}]" for h in s.receivers) or "?"
        queue = "?" if s.queue_bytes < 0 else f"{s.queue_bytes} B"
        out.append(f"  socket {escape(s.path)} ({s.sock_type}) -> {who}: queue {queue}, "
                   f"{s.senders_connected} senders, {len(s.blocked)} blocked, drops {s.drops}")
    if view.net is not None:
        n = view.net
        if not n.ok:
            out.append(f"  udp: {escape(n.reason)}")
        else:
            out.append(f"  udp: RcvbufErrors {n.rcvbuf_errors} ({_r(n.rcvbuf_errors_per_s)}), InErrors "
                       f"{n.in_errors}, ARP unresolved discards {n.arp_unresolved_discards}")
            for u in n.sockets:
                out.append(f"    {u.proto} {u.local}:{u.port} {escape(u.comm) or '?'}: queue {u.rx_queue_bytes} B, "
                           f"drops {u.drops} ({_r(u.drops_per_s)})")
    if view.journald is not None:
        j = view.journald
        out.append(f"  journald: {escape(j.reason) or 'not running'}" if not j.running else
                   f"  journald[{j.pid}]: journal {j.journal_bytes} B, stores {_r(j.stored_bytes_per_s, ' B/s')}")
    if view.audit is not None:
        a = view.audit
        out.append(f"  audit: {escape(a.reason)}" if not a.ok else
                   f"  audit: enabled {a.enabled} failure {a.failure} pid {a.pid} rate_limit {a.rate_limit} "
                   f"backlog {a.backlog}/{a.backlog_limit} lost {a.lost} ({_r(a.lost_per_s)})")
    if view.rsyslog is not None:
        rs = view.rsyslog
        if not rs.ok:
            out.append(f"  rsyslog impstats {escape(rs.path)}: {escape(rs.reason)}")
        for q in rs.queues:
            out.append(f"  rsyslog queue {escape(q.name)}: size {q.size} max {q.maxqsize}, enqueued {q.enqueued}, "
                       f"full {q.full}, discarded.full {q.discarded_full}, discarded.nf {q.discarded_nf}")
    for note in view.notes:
        out.append(f"  note: {escape(note)}")
    return "\n".join(out)
