"""Diagnosis rules about what is outside the rings: producers, bans, the other backends.

``producer-lock`` (producer threads blocked on the logging path: a syslog or
file mutex, a blocking send), ``bans-behind`` (time-to-ban grows during the
window), ``syslog-socket``, ``audit-lost`` and ``udp-drops``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from fipstop.analysis.evidence import Evidence
from fipstop.analysis.findings import CRITICAL, LOCK_BLOCKED_PCT, WARNING, Finding, mean, pct
from fipstop.textsafe import escape_text

__all__ = ["audit_lost", "bans_behind", "producer_locks", "syslog_sockets", "udp_drops"]

#: words of a blocking call or wait channel that belong to a logging path
_LOGGING_WAITS = ("futex", "sendto", "sendmsg", "connect", "write", "unix", "sock")


def producer_locks(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """A profiled producer whose threads spend much of their time blocked."""
    out: list[Finding] = []
    for pid, rep in ev.profiles.items():
        th = rep.threads
        if not th.available or not th.threads:
            continue
        if pid in ev.consumer_pids and pid not in ev.producer_pids:
            continue
        busy = [t for t in th.threads if t.sleep_pct < 90] or list(th.threads)
        lock = mean([t.lock_pct for t in busy])
        io = mean([t.io_pct for t in busy])
        blocked = lock + io
        if blocked < LOCK_BLOCKED_PCT:
            continue
        waits: dict[str, int] = {}
        for t in busy:
            for label, n in t.top_waits:
                waits[label] = waits.get(label, 0) + n
        top = sorted(waits.items(), key=lambda kv: -kv[1])[:3]
        _src, locks = rep.top_locks()
        evidence: dict[str, Any] = {"pid": pid, "threads": len(busy), "lock_pct": round(lock, 1),
                                    "io_pct": round(io, 1), "top_waits": [escape_text(w) for w, _ in top]}
        if locks:
            evidence["top_lock_address"] = hex(locks[0].address)
            evidence["top_lock_wait_ms"] = round(locks[0].wait_ns / 1e6, 1)
        comm = escape_text(rep.comm or str(pid))
        logging_path = any(k in w for w, _ in top for k in _LOGGING_WAITS)
        out.append(Finding(
            "producer-lock", f"Producer {comm} (pid {pid}): its threads are blocked {pct(blocked)} of the time "
            f"({pct(lock)} on a lock, {pct(io)} in I/O) — the logging path serialises them",
            CRITICAL if blocked >= 60 else WARNING, blocked, f"process {comm} (pid {pid})", evidence,
            "syslog(3) and shared log files serialise every thread on one lock and a blocking write; run the "
            "server under `fipstop wrap -- CMD` so each thread logs into its own ring (no code change)"
            if logging_path else "profile it (`fipstop profile --pid " + str(pid) + "`) to see which lock"))
    return out


def bans_behind(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """The median time-to-ban of the window's later half at least twice the earlier half's."""
    events = ev.bans
    if len(events) < 6:
        return []
    half = len(events) // 2
    early = statistics.median(e.time_to_ban_ns for e in events[:half]) / 1e9
    late = statistics.median(e.time_to_ban_ns for e in events[half:]) / 1e9
    if not (late >= 1.0 and late >= 2 * max(early, 1e-3)):
        return []
    src = sorted({e.source for e in events})
    return [Finding(
        "bans-behind", f"Bans lag behind the attack: time-to-ban rose from {early:.1f} s to {late:.1f} s",
        CRITICAL if late >= 60 else WARNING, late, ", ".join(escape_text(s) for s in src),
        {"ttb_early_p50_s": round(early, 3), "ttb_late_p50_s": round(late, 3), "bans": len(events)},
        "the IPS sees offending lines later and later: check its lag (a log file tailer falls behind under "
        "load; FIPS + `fipstop ips` reads the rings directly) and its CPU")]


def syslog_sockets(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """A watched syslog socket whose queue is near full, drops, or blocks its senders."""
    view = ev.backends
    if view is None or view.dt_s <= 0:
        return []
    out: list[Finding] = []
    for s in view.sockets:
        if not s.ok:
            continue
        full = s.rcvbuf_bytes > 0 and s.queue_bytes >= 0.8 * s.rcvbuf_bytes
        if not (s.drops_per_s > 0 or s.blocked or full):
            continue
        recv = ", ".join(f"{escape_text(h.comm)} ({h.pid})" for h in s.receivers[:2]) or "nobody"
        out.append(Finding(
            "syslog-socket", f"syslog socket {escape_text(s.path)} overflows: receiver {recv} is behind"
            + (f", {len(s.blocked)} sender thread(s) blocked" if s.blocked else "")
            + (f", {s.drops_per_s:.0f}/s dropped" if s.drops_per_s > 0 else ""),
            CRITICAL if s.drops_per_s > 0 or len(s.blocked) > 1 else WARNING,
            len(s.blocked) + s.drops_per_s, escape_text(s.path),
            {"queue_bytes": s.queue_bytes, "rcvbuf_bytes": s.rcvbuf_bytes, "drops_per_s": round(s.drops_per_s, 1),
             "blocked_senders": len(s.blocked)},
            "the syslog daemon cannot keep up and its clients block (or lose lines): log through FIPS rings "
            "(`fipstop wrap -- CMD`), or give the daemon a bigger queue"))
    return out


def audit_lost(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    view = ev.backends
    a = view.audit if view is not None and view.dt_s > 0 else None
    if a is None or not a.ok or not (a.lost_per_s > 0 or (a.backlog_limit and a.backlog >= 0.9 * a.backlog_limit)):
        return []
    return [Finding(
        "audit-lost", f"Linux audit is losing events: {a.lost_per_s:.0f}/s lost, backlog {a.backlog}/"
        f"{a.backlog_limit}", CRITICAL if a.lost_per_s > 0 else WARNING, a.lost_per_s + 1, "audit",
        {"lost_per_s": round(a.lost_per_s, 1), "lost": a.lost, "backlog": a.backlog,
         "backlog_limit": a.backlog_limit, "rate_limit": a.rate_limit},
        "raise the backlog (`auditctl -b`), make auditd drain faster, or narrow the rules that fire most")]


def udp_drops(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    view = ev.backends
    n = view.net if view is not None and view.dt_s > 0 else None
    if n is None or not n.ok or not n.rcvbuf_errors_per_s > 0:
        return []
    return [Finding(
        "udp-drops", f"UDP syslog is dropping: {n.rcvbuf_errors_per_s:.0f} datagrams/s lost to full "
        "receive buffers", WARNING, n.rcvbuf_errors_per_s, "udp",
        {"rcvbuf_errors_per_s": round(n.rcvbuf_errors_per_s, 1)},
        "raise the receiver's SO_RCVBUF (rsyslog imudp rcvbufSize) or send over TCP/RELP")]
