"""Which stage is the bottleneck right now: ranked findings with evidence.

:func:`diagnose` is pure: it reads a window of frames (the derived ring
snapshots and the other probes' raw samples: ``cpu``, ``backends``,
``bans`` ...) and, when given, profile reports of the processes involved,
and returns :class:`Finding` objects, most important first.  The live
Diagnosis panel runs it on the dashboard's history; ``fipstop diagnose``
samples for ``--duration`` seconds while profiling the processes on both ends
of the rings, then runs it once.  A recording replays to the same findings.

The catalogue (each has a scripted scenario in tests/integration/test_diagnose.py):

=========================  ==============================================================
``consumer-too-slow``      rings full and dropping, their slowest consumer alive: it is
                           the bottleneck (with its CPU share and hot spot when known)
``no-consumer``            a ring drops and nobody reads its domain
``consumer-dead``          a consumer stopped heart-beating and its lag grows (or it was
                           evicted)
``producer-lock``          producer threads blocked on the logging path (a syslog or file
                           mutex, a blocking send): BIND 9 with syslog
``consumer-cpu``           logging keeps up, but the IPS process is CPU-saturated
``bans-behind``            time-to-ban grows during the window: bans lag the attack
``syslog-socket``          a syslog socket overflows: queue near full, drops, blocked senders
``audit-lost``             Linux audit loses events (``lost`` grows) or its backlog is full
``udp-drops``              UDP syslog receive-buffer drops
=========================  ==============================================================

No finding means healthy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["Finding", "diagnose", "register", "run"]

INFO, WARNING, CRITICAL = 0, 1, 2
SEVERITY = ("info", "warning", "critical")
CPU_SATURATED_PCT = 85.0
LOCK_BLOCKED_PCT = 30.0


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    severity: int
    score: float  # ranks findings of the same severity (larger first)
    subject: str
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str = ""

    @property
    def severity_label(self) -> str:
        return SEVERITY[self.severity]


def _name(raw: Any) -> str:
    return escape_bytes(bytes(raw).split(b"\0", 1)[0])


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else 0.0


def _pct(x: float) -> str:
    return f"{x:.0f}%"


def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def _first_last(window: Sequence[tuple[Any, Mapping[str, Any]]], key: str) -> tuple[Any, Any]:
    from fipstop.sources import ProbeFailure

    vals = [aux.get(key) for _, aux in window if aux.get(key) is not None and not isinstance(aux.get(key),
                                                                                              ProbeFailure)]
    if not vals:
        return None, None
    return vals[0], vals[-1]


def _hot_spot(report: Any) -> tuple[str, dict[str, Any]]:
    """A few words on where a profiled process spends its time, and the numbers."""
    if report is None:
        return "", {}
    ev: dict[str, Any] = {}
    words = []
    th = getattr(report, "threads", None)
    if th is not None and getattr(th, "available", False) and th.threads:
        busy = [t for t in th.threads if t.oncpu_pct + t.runqueue_pct + t.lock_pct + t.io_pct > 5] or list(th.threads)
        for cat in ("oncpu", "lock", "io", "runqueue", "sleep"):
            ev[f"threads_{cat}_pct"] = round(_mean([t.pct(cat) for t in busy]), 1)
    try:
        hot = report.hot_functions("oncpu", 3)
    except Exception:
        hot = []
    if hot:
        func = hot[0][0] if isinstance(hot[0], (tuple, list)) else str(hot[0])
        share = hot[0][3] if isinstance(hot[0], (tuple, list)) and len(hot[0]) > 3 else None
        ev["hot_function"] = escape_text(str(func))[:120]
        words.append(f"hot: {escape_text(str(func))[:60]}" + (f" {share:.0f}%" if isinstance(share, float) else ""))
    if "threads_oncpu_pct" in ev:
        words.append(f"threads on CPU {ev['threads_oncpu_pct']:.0f}%, waiting for a CPU "
                     f"{ev['threads_runqueue_pct']:.0f}%, lock {ev['threads_lock_pct']:.0f}%, "
                     f"I/O {ev['threads_io_pct']:.0f}%, sleeping {ev['threads_sleep_pct']:.0f}%")
    return "; ".join(words), ev


def diagnose(window: Sequence[tuple[Any, Mapping[str, Any]]], *, profiles: Mapping[int, Any] | None = None,
             suspects: Sequence[int] = ()) -> list[Finding]:
    """Findings for ``window`` = [(Snapshot, aux), ...] oldest first;
    ``suspects``: pids given as possible producers (``--pid``)."""

    from fipstop.model import Health

    profiles = dict(profiles or {})
    out: list[Finding] = []
    if not window:
        return out
    snaps = [s for s, _ in window]
    last = snaps[-1]
    rated = [s for s in snaps if s.dt_s > 0] or [last]
    names = [d.name for d in last.domains]
    cpu0, cpu1 = _first_last(window, "cpu")

    def cpu_of(pid: int) -> float:
        from fipstop.probes.proccpu import cpu_pct

        if cpu0 is None or cpu1 is None or cpu0 is cpu1:
            return float("nan")
        return cpu_pct(cpu0, cpu1, pid)

    def rq_of(pid: int) -> float:
        from fipstop.probes.proccpu import runqueue_pct

        if cpu0 is None or cpu1 is None or cpu0 is cpu1:
            return float("nan")
        return runqueue_pct(cpu0, cpu1, pid)

    # per ring: mean drops/s and commit rate over the window
    ring_drops: dict[tuple[str, int], float] = {}
    ring_rate: dict[tuple[str, int], float] = {}
    for s in rated:
        dn = [d.name for d in s.domains]
        for r in s.rings:
            k = (dn[int(r["domain"])], int(r["ring"]))
            ring_drops[k] = ring_drops.get(k, 0.0) + float(r["drops_per_s"]) / len(rated)
            ring_rate[k] = ring_rate.get(k, 0.0) + float(r["records_per_s"]) / len(rated)
    cons_by_key = {(names[int(c["domain"])], int(c["consumer"])): c for c in last.consumers}

    def lag_growth(key: tuple[str, int]) -> float:
        """Records/s by which the consumer's max lag grew over the window."""
        pts = []
        for s in snaps:
            row = s.consumer_row(*key)
            if row is not None and int(s.consumers["lag_max_records"][row]) >= 0:
                pts.append((s.taken_mono_ns, int(s.consumers["lag_max_records"][row])))
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return 0.0
        return (pts[-1][1] - pts[0][1]) / ((pts[-1][0] - pts[0][0]) / 1e9)

    # -- dropping rings: who is the bottleneck -------------------------------------------
    dropping = {k: v for k, v in ring_drops.items() if v > 0}
    blame: dict[tuple[str, int], list[tuple[str, int]]] = {}
    unread: dict[str, list[int]] = {}
    for (dom, ri) in dropping:
        row = last.ring_row(dom, ri)
        slow = int(last.rings["slowest_consumer"][row]) if row is not None else -1
        if slow < 0:
            unread.setdefault(dom, []).append(ri)
        else:
            blame.setdefault((dom, slow), []).append(ri)
    evicted_in: dict[str, list] = {}
    for (dn, _), c in cons_by_key.items():
        if Health(int(c["health"])) == Health.EVICTED:
            evicted_in.setdefault(dn, []).append(c)
    for dom, rings in unread.items():
        d = sum(dropping[(dom, r)] for r in rings)
        if evicted_in.get(dom):  # its reader died and was evicted: that is the cause
            c = max(evicted_in[dom], key=lambda x: int(x["evicted_realtime_ns"]))
            name = _name(c["name"])
            pid = int(c["pid"])
            alive = (cpu1.get(pid) is not None) if cpu1 is not None else None
            out.append(Finding(
                "consumer-dead", f"Consumer {name} stopped reading and was evicted: nobody reads domain "
                f"{escape_text(dom)}, {_si(d)} records/s dropped", CRITICAL, 1e6 + d, f"consumer {name} (pid {pid})",
                {"drops_per_s": round(d, 1), "rings_dropping": len(rings), "pid": pid,
                 "lag_growth_per_s": round(d, 1)} | ({"process_alive": alive} if alive is not None else {}),
                (f"its process {pid} is alive but stuck: `fipstop profile --pid {pid}` shows where; restarting it "
                 "resumes by name" if alive else "restart it: it resumes by name; records dropped meanwhile are "
                 "counted, not recoverable")))
            continue
        out.append(Finding(
            "no-consumer", f"Nobody reads domain {escape_text(dom)}: {len(rings)} ring(s) full, {_si(d)} records/s "
            "dropped", CRITICAL, d, f"domain {escape_text(dom)}",
            {"drops_per_s": round(d, 1), "rings_dropping": len(rings)},
            "start its consumer (e.g. `fipstop ips --domain " + escape_text(dom) + "`); records are kept for the first "
            "consumer only until the ring is full"))
    for key, rings in blame.items():
        c = cons_by_key.get(key)
        if c is None:
            continue
        d = sum(dropping[(key[0], r)] for r in rings)
        name = _name(c["name"])
        pid = int(c["pid"])
        health = Health(int(c["health"]))
        fill = max((float(last.rings["fill_pct"][last.ring_row(key[0], r)]) for r in rings
                    if last.ring_row(key[0], r) is not None), default=0.0)
        ev: dict[str, Any] = {"drops_per_s": round(d, 1), "rings_dropping": len(rings), "fill_max_pct": round(fill, 1),
                              "lag_max_records": int(c["lag_max_records"]), "pid": pid,
                              "release_per_s": round(_mean([float(s.consumers["release_per_s"][s.consumer_row(*key)])
                                                            for s in rated if s.consumer_row(*key) is not None]), 1),
                              "commit_per_s": round(sum(ring_rate.get((key[0], r), 0.0) for r in rings), 1)}
        if health in (Health.STALE, Health.EVICTED):
            continue  # the dead-consumer rule below names it
        cpu = cpu_of(pid)
        if math.isfinite(cpu):
            ev["cpu_pct"] = round(cpu, 1)
        spot, pev = _hot_spot(profiles.get(pid))
        ev.update(pev)
        if math.isfinite(cpu) and cpu >= CPU_SATURATED_PCT:
            why = f"it is CPU-bound ({_pct(cpu)} of a core{'; ' + spot if spot else ''})"
            remedy = (f"make {name}'s per-record work cheaper (the hot spot above) or run more reader threads / "
                      "processes; larger rings (`fipstop wrap --ring-size`) only absorb bursts")
        elif pev.get("threads_runqueue_pct", 0) >= 40:
            why = (f"it is starved of CPU: runnable but waiting for a core {pev['threads_runqueue_pct']:.0f}% of the "
                   "time")
            remedy = (f"the machine is overloaded: give {name} a core of its own (fewer busy processes, CPU "
                      "affinity, a higher priority) before tuning it")
        elif pev.get("threads_lock_pct", 0) + pev.get("threads_io_pct", 0) > 40:
            why = f"it waits instead of reading ({spot})"
            remedy = f"find what {name} waits for (lock or I/O above) and take it off the read loop"
        else:
            why = spot or "it releases slower than the producers commit"
            remedy = (f"give {name} more reader threads or cheaper processing; larger rings absorb bursts "
                      "(FIPS_RING_SIZE, `fipstop wrap --ring-size`)")
        out.append(Finding(
            "consumer-too-slow", f"Consumer {name} is too slow: {len(rings)} ring(s) full, {_si(d)} records/s dropped; "
            + why, CRITICAL, d, f"consumer {name} (pid {pid})", ev, remedy))

    # -- dead consumers -----------------------------------------------------------------
    for key, c in cons_by_key.items():
        h = Health(int(c["health"]))
        if h not in (Health.STALE, Health.EVICTED):
            continue
        name = _name(c["name"])
        growth = lag_growth(key)
        held = blame.get(key, [])
        d = sum(dropping.get((key[0], r), 0.0) for r in held)
        ev = {"heartbeat_age_s": round(int(c["heartbeat_age_ns"]) / 1e9, 1), "lag_growth_per_s": round(growth, 1),
              "lag_max_records": int(c["lag_max_records"]), "pid": int(c["pid"]), "drops_per_s": round(d, 1)}
        if h == Health.STALE and (growth > 0 or held):
            alive = (cpu1.get(int(c["pid"])) is not None) if cpu1 is not None else None
            if alive is not None:  # unknown without the CPU probe (an old recording)
                ev["process_alive"] = alive
            out.append(Finding(
                "consumer-dead", f"Consumer {name} stopped reading: no heartbeat for {ev['heartbeat_age_s']:.0f} s, "
                f"lag grows {_si(growth)} records/s" + (f", {_si(d)}/s dropped" if d else ""),
                CRITICAL if held else WARNING, 1e6 + d + growth, f"consumer {name} (pid {int(c['pid'])})", ev,
                (f"its process {int(c['pid'])} is alive but not reading: `fipstop profile --pid {int(c['pid'])}` "
                 "shows where it is stuck" if alive else
                 "restart it (it resumes from its position by name); libfips evicts it after the grace period "
                 "so it cannot stall the rings")))
        elif h == Health.EVICTED and not any(f.id == "consumer-dead" and f"consumer {name} " in f.subject + " "
                                             for f in out):
            out.append(Finding(
                "consumer-dead", f"Consumer {name} was evicted: it died holding a full ring", WARNING, growth,
                f"consumer {name}", ev, "restart it; its records during the outage were not seen by it"))

    # -- producers blocked on the logging path -----------------------------------------------
    producer_pids = {int(r["pid"]) for r in last.rings if int(r["state"]) == 1} | {int(p) for p in suspects}
    b0, b1 = _first_last(window, "backends")
    bview = None
    if b1 is not None:
        from fipstop.backends import derive_backends

        bview = derive_backends(b0 if b0 is not b1 else None, b1)
        for s in bview.sockets:
            producer_pids.update(int(x.pid) for x in s.blocked)
    consumer_pids = {int(c["pid"]) for c in last.consumers}
    for pid, rep in profiles.items():
        th = getattr(rep, "threads", None)
        if th is None or not getattr(th, "available", False) or not th.threads:
            continue
        if pid in consumer_pids and pid not in producer_pids:
            continue
        busy = [t for t in th.threads if t.sleep_pct < 90] or list(th.threads)
        lock = _mean([t.lock_pct for t in busy])
        io = _mean([t.io_pct for t in busy])
        blocked = lock + io
        if blocked < LOCK_BLOCKED_PCT:
            continue
        waits: dict[str, int] = {}
        for t in busy:
            for label, n in t.top_waits:
                waits[label] = waits.get(label, 0) + n
        top = sorted(waits.items(), key=lambda kv: -kv[1])[:3]
        src, locks = rep.top_locks() if hasattr(rep, "top_locks") else ("", ())
        ev = {"pid": pid, "threads": len(busy), "lock_pct": round(lock, 1), "io_pct": round(io, 1),
              "top_waits": [escape_text(w) for w, _ in top]}
        if locks:
            ev["top_lock_address"] = hex(locks[0].address)
            ev["top_lock_wait_ms"] = round(locks[0].wait_ns / 1e6, 1)
        comm = escape_text(getattr(rep, "comm", "") or str(pid))
        logging_path = any(k in w for w, _ in top for k in ("futex", "sendto", "sendmsg", "connect", "write",
                                                             "unix", "sock"))
        out.append(Finding(
            "producer-lock", f"Producer {comm} (pid {pid}): its threads are blocked {_pct(blocked)} of the time "
            f"({_pct(lock)} on a lock, {_pct(io)} in I/O) — the logging path serialises them",
            CRITICAL if blocked >= 60 else WARNING, blocked, f"process {comm} (pid {pid})", ev,
            "syslog(3) and shared log files serialise every thread on one lock and a blocking write; run the "
            "server under `fipstop wrap -- CMD` so each thread logs into its own ring (no code change)"
            if logging_path else "profile it (`fipstop profile --pid " + str(pid) + "`) to see which lock"))

    # -- the IPS CPU-bound while logging keeps up ---------------------------------------------
    if not dropping:
        for key, c in cons_by_key.items():
            if Health(int(c["health"])) != Health.ALIVE:
                continue
            pid = int(c["pid"])
            cpu = cpu_of(pid)
            rq = rq_of(pid)
            busy = (cpu if math.isfinite(cpu) else 0.0) + (rq if math.isfinite(rq) else 0.0)
            if not (math.isfinite(cpu) and busy >= CPU_SATURATED_PCT):
                continue
            name = _name(c["name"])
            growth = lag_growth(key)
            spot, pev = _hot_spot(profiles.get(pid))
            ev = {"pid": pid, "cpu_pct": round(cpu, 1), "lag_growth_per_s": round(growth, 1),
                  "lag_max_records": int(c["lag_max_records"]), **pev}
            if math.isfinite(rq):
                ev["runqueue_pct"] = round(rq, 1)
            out.append(Finding(
                "consumer-cpu", f"Logging keeps up, but {name} is CPU-saturated ({_pct(cpu)} of a core"
                + (f", {_pct(rq)} more waiting for one" if math.isfinite(rq) and rq >= 10 else "")
                + (f"; {spot}" if spot else "") + ")" + (f" and falling behind ({_si(growth)} records/s)"
                                                          if growth > 0 else ""),
                WARNING if growth <= 0 else CRITICAL, busy, f"consumer {name} (pid {pid})", ev,
                "the IPS, not logging, is the bottleneck: make matching cheaper (anchored failregex, a literal "
                "prefilter, fewer jails per line) or spread it over more reader threads or processes"))

    # -- bans behind the attack -----------------------------------------------------------------
    events = []
    for _, aux in window:
        for k, v in aux.items():
            if k.startswith("bans") or k == "fail2ban":
                events.extend(e for e in getattr(v, "events", ()) if getattr(e, "kind", "") == "ban")
    if len(events) >= 6:
        events.sort(key=lambda e: e.ban_ns)
        half = len(events) // 2
        early = statistics.median(e.time_to_ban_ns for e in events[:half]) / 1e9
        late = statistics.median(e.time_to_ban_ns for e in events[half:]) / 1e9
        if late >= 1.0 and late >= 2 * max(early, 1e-3):
            src = sorted({e.source for e in events})
            out.append(Finding(
                "bans-behind", f"Bans lag behind the attack: time-to-ban rose from {early:.1f} s to {late:.1f} s",
                CRITICAL if late >= 60 else WARNING, late, ", ".join(escape_text(s) for s in src),
                {"ttb_early_p50_s": round(early, 3), "ttb_late_p50_s": round(late, 3), "bans": len(events)},
                "the IPS sees offending lines later and later: check its lag (a log file tailer falls behind under "
                "load; FIPS + `fipstop ips` reads the rings directly) and its CPU"))

    # -- the other backends ------------------------------------------------------------------
    if bview is not None and bview.dt_s > 0:
        for s in bview.sockets:
            if not s.ok:
                continue
            full = s.rcvbuf_bytes > 0 and s.queue_bytes >= 0.8 * s.rcvbuf_bytes
            if s.drops_per_s > 0 or s.blocked or full:
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
        a = bview.audit
        if a is not None and a.ok and (a.lost_per_s > 0 or (a.backlog_limit and a.backlog >= 0.9 * a.backlog_limit)):
            out.append(Finding(
                "audit-lost", f"Linux audit is losing events: {a.lost_per_s:.0f}/s lost, backlog {a.backlog}/"
                f"{a.backlog_limit}", CRITICAL if a.lost_per_s > 0 else WARNING, a.lost_per_s + 1, "audit",
                {"lost_per_s": round(a.lost_per_s, 1), "lost": a.lost, "backlog": a.backlog,
                 "backlog_limit": a.backlog_limit, "rate_limit": a.rate_limit},
                "raise the backlog (`auditctl -b`), make auditd drain faster, or narrow the rules that fire most"))
        n = bview.net
        if n is not None and n.ok and n.rcvbuf_errors_per_s > 0:
            out.append(Finding(
                "udp-drops", f"UDP syslog is dropping: {n.rcvbuf_errors_per_s:.0f} datagrams/s lost to full "
                "receive buffers", WARNING, n.rcvbuf_errors_per_s, "udp",
                {"rcvbuf_errors_per_s": round(n.rcvbuf_errors_per_s, 1)},
                "raise the receiver's SO_RCVBUF (rsyslog imudp rcvbufSize) or send over TCP/RELP"))
    out.sort(key=lambda f: (-f.severity, -f.score))
    return out


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diagnose", help="which stage is the bottleneck: ranked findings with evidence and a remedy",
        description="Sample the rings, the other backends and the CPU of every process on both ends for "
        "--duration seconds while profiling them (thread time split; py-spy for Python consumers), then print "
        "the findings, most important first. No finding: healthy.")
    p.add_argument("--duration", type=float, default=5.0, metavar="S", help="seconds to watch (default 5)")
    p.add_argument("--domain", action="append", metavar="NAME", help="only this domain (repeatable)")
    p.add_argument("--no-profile", action="store_true", help="do not profile the processes (rings and CPU only)")
    p.add_argument("--pid", type=int, action="append", metavar="PID", default=None,
                   help="also profile this process, a suspected producer (e.g. named logging through syslog; "
                   "repeatable)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p)
    p.set_defaults(func=run)


def collect(args: argparse.Namespace, duration: float, *, interval: float = 0.5, profile: bool = True,
            extra_pids: Sequence[int] = ()) -> tuple[list[tuple[Any, Mapping[str, Any]]], dict[int, Any], list[str]]:
    """Sample live for ``duration`` s; profile the processes on both ends."""
    from fipstop.sources import LiveSource
    from fipstop.top import live_probes

    src = LiveSource(live_probes(args), interval)
    window: list[tuple[Any, Mapping[str, Any]]] = []
    notes: list[str] = []
    sessions: dict[int, Any] = {}
    profiles: dict[int, Any] = {}
    try:
        f = src.poll()
        window.append((f.snapshot, f.aux))
        if profile:
            from fipstop.profile.session import ProfileOptions, ProfileSession

            pids = {int(c["pid"]) for c in f.snapshot.consumers if int(c["health"]) in (0, 1)}
            pids |= {int(r["pid"]) for r in f.snapshot.rings if int(r["state"]) == 1}
            b = f.aux.get("backends")
            for s in getattr(b, "sockets", ()) or ():
                pids |= {int(x.pid) for x in getattr(s, "blocked", ())}
            for pid in list(dict.fromkeys([*extra_pids, *sorted(p for p in pids if p > 0)]))[:8]:
                try:
                    sess = ProfileSession(pid, ProfileOptions(bpf=False, rate_hz=50, idle=False))
                    sess.start()
                    sessions[pid] = sess
                except Exception as e:
                    notes.append(f"cannot profile pid {pid}: {' '.join(str(e).split())[:120]}")
        end = time.monotonic() + duration
        while time.monotonic() < end:
            time.sleep(min(interval, max(0.0, end - time.monotonic())))
            f = src.poll()
            window.append((f.snapshot, f.aux))
        for pid, sess in sessions.items():
            try:
                profiles[pid] = sess.poll()
            except Exception as e:  # the process vanished mid-diagnosis: a note, not a failure
                notes.append(f"process {pid} vanished during the diagnosis ({' '.join(str(e).split())[:80]})")
    finally:
        for sess in sessions.values():
            try:
                sess.close()
            except Exception:
                pass
        src.close()
    return window, profiles, notes


def run(args: argparse.Namespace) -> int:
    from fipstop.errors import FipsError

    if not (math.isfinite(args.duration) and 0.5 <= args.duration <= 600):
        raise FipsError(f"--duration {args.duration:g}: give seconds between 0.5 and 600")
    if not args.json:
        print(f"fipstop: watching for {args.duration:g} s ...", file=sys.stderr, flush=True)
    extra = [p for p in (args.pid or [])]
    for p in extra:
        if p <= 0 or not os.path.exists(f"/proc/{p}"):
            raise FipsError(f"--pid {p}: no such process")
    window, profiles, notes = collect(args, args.duration, profile=not args.no_profile, extra_pids=extra)
    findings = diagnose(window, profiles=profiles, suspects=extra)
    if args.json:
        print(json.dumps({"findings": [asdict(f) | {"severity": f.severity_label} for f in findings],
                          "healthy": not findings, "notes": notes,
                          "window_s": round((window[-1][0].taken_mono_ns - window[0][0].taken_mono_ns) / 1e9, 2),
                          "profiled_pids": sorted(profiles)}, default=str, allow_nan=False))
        return 0
    if not findings:
        print("healthy: no bottleneck found (rings keep up, no drops, consumers alive, backends lose nothing)")
    for i, f in enumerate(findings, 1):
        print(f"{i}. [{f.severity_label.upper()}] {f.title}")
        ev = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
        print(f"   evidence: {ev}")
        print(f"   remedy: {f.remedy}")
    for n in notes:
        print(f"note: {escape_text(n)}")
    return 0
