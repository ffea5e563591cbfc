"""Diagnosis rules about the rings and their consumers.

``no-consumer`` and ``consumer-dead`` (a domain's rings drop and nobody, or
only an evicted consumer, reads them), ``consumer-too-slow`` (rings drop
behind a live consumer), ``consumer-dead`` (a stale or evicted consumer) and
``consumer-cpu`` (nothing drops, but the IPS is CPU-saturated) and
``no-ring`` (records dropped because every ring slot of the domain is taken:
more producer threads than rings; no consumer can fix that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fipstop.analysis.evidence import Evidence
from fipstop.analysis.findings import CPU_SATURATED_PCT, CRITICAL, WARNING, Finding, hot_spot, name_of, pct, si
from fipstop.model.rings import Health
from fipstop.textsafe import escape_text

__all__ = ["consumer_cpu", "dead_consumers", "no_ring_domains", "slow_consumers", "unread_domains"]

#: a consumer whose threads sleep this much of the time throttles itself (not CPU-bound)
THROTTLED_SLEEP_PCT = 50.0
#: below this share of a core a falling-behind consumer is not short of CPU
IDLE_CPU_PCT = 30.0


def unread_domains(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """Rings dropping with no active consumer: nobody reads the domain, or its reader died."""
    out: list[Finding] = []
    evicted_in: dict[str, list[np.void]] = {}
    for (dn, _), c in ev.consumers.items():
        if ev.health(c) == Health.EVICTED:
            evicted_in.setdefault(dn, []).append(c)
    for dom, rings in ev.unread.items():
        d = sum(ev.dropping[(dom, r)] for r in rings)
        if evicted_in.get(dom):  # its reader died and was evicted: that is the cause
            c = max(evicted_in[dom], key=lambda x: int(x["evicted_realtime_ns"]))
            name = name_of(c["name"])
            pid = int(c["pid"])
            alive = ev.process_alive(pid)
            out.append(Finding(
                "consumer-dead", f"Consumer {name} stopped reading and was evicted: nobody reads domain "
                f"{escape_text(dom)}, {si(d)} records/s dropped", CRITICAL, 1e6 + d, f"consumer {name} (pid {pid})",
                {"drops_per_s": round(d, 1), "rings_dropping": len(rings), "pid": pid,
                 "lag_growth_per_s": round(d, 1)} | ({"process_alive": alive} if alive is not None else {}),
                (f"its process {pid} is alive but stuck: `fipstop profile --pid {pid}` shows where; restarting it "
                 "resumes by name" if alive else "restart it: it resumes by name; records dropped meanwhile are "
                 "counted, not recoverable")))
            continue
        out.append(Finding(
            "no-consumer", f"Nobody reads domain {escape_text(dom)}: {len(rings)} ring(s) full, {si(d)} records/s "
            "dropped", CRITICAL, d, f"domain {escape_text(dom)}",
            {"drops_per_s": round(d, 1), "rings_dropping": len(rings)},
            "start its consumer (e.g. `fipstop ips --domain " + escape_text(dom) + "`); records are kept for the first "
            "consumer only until the ring is full"))
    return out


def slow_consumers(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """Rings dropping behind a live consumer: it is the bottleneck, and why."""
    out: list[Finding] = []
    last = ev.last
    for key, rings in ev.blame.items():
        c = ev.consumers.get(key)
        if c is None:
            continue
        health = ev.health(c)
        if health in (Health.STALE, Health.EVICTED):
            continue  # dead_consumers names it
        d = sum(ev.dropping[(key[0], r)] for r in rings)
        name = name_of(c["name"])
        pid = int(c["pid"])
        rows = [row for r in rings if (row := last.ring_row(key[0], r)) is not None]
        fill = max((float(last.rings["fill_pct"][row]) for row in rows), default=0.0)
        evidence: dict[str, Any] = {
            "drops_per_s": round(d, 1), "rings_dropping": len(rings), "fill_max_pct": round(fill, 1),
            "lag_max_records": int(c["lag_max_records"]), "pid": pid,
            "release_per_s": round(ev.release_per_s(key), 1),
            "commit_per_s": round(sum(ev.ring_rate.get((key[0], r), 0.0) for r in rings), 1)}
        cpu = ev.cpu_pct(pid)
        if math.isfinite(cpu):
            evidence["cpu_pct"] = round(cpu, 1)
        spot, pev = hot_spot(ev.profiles.get(pid))
        evidence.update(pev)
        if math.isfinite(cpu) and cpu >= CPU_SATURATED_PCT:
            why = f"it is CPU-bound ({pct(cpu)} of a core{'; ' + spot if spot else ''})"
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
        elif pev.get("threads_sleep_pct", 0) >= THROTTLED_SLEEP_PCT:
            # a consumer that throttles itself has CPU to spare: more threads would sleep too
            why = (f"it throttles itself: its threads sleep {pev['threads_sleep_pct']:.0f}% of the time"
                   + (f" ({pct(cpu)} of a core busy)" if math.isfinite(cpu) else ""))
            remedy = (f"take the sleep or rate limit out of {name}'s read loop (read again as soon as a batch is "
                      "released); it is not short of CPU, so more reader threads or cheaper processing will not help")
        elif math.isfinite(cpu) and cpu < IDLE_CPU_PCT:
            why = f"it is mostly idle ({pct(cpu)} of a core) yet falls behind: it waits or throttles itself"
            remedy = (f"find what {name} waits for between reads (a sleep, a rate limit, a blocking call: "
                      "`fipstop profile` shows it); it is not short of CPU, so more threads will not help")
        else:
            why = spot or "it releases slower than the producers commit"
            remedy = (f"give {name} more reader threads or cheaper processing; larger rings absorb bursts "
                      "(FIPS_RING_SIZE, `fipstop wrap --ring-size`)")
        out.append(Finding(
            "consumer-too-slow", f"Consumer {name} is too slow: {len(rings)} ring(s) full, {si(d)} records/s dropped; "
            + why, CRITICAL, d, f"consumer {name} (pid {pid})", evidence, remedy))
    return out


def dead_consumers(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """A stale consumer whose lag grows (or that holds full rings), or one evicted."""
    out: list[Finding] = []
    for key, c in ev.consumers.items():
        h = ev.health(c)
        if h not in (Health.STALE, Health.EVICTED):
            continue
        name = name_of(c["name"])
        pid = int(c["pid"])
        growth = ev.lag_growth(key)
        held = ev.blame.get(key, [])
        d = sum(ev.dropping.get((key[0], r), 0.0) for r in held)
        evidence: dict[str, Any] = {
            "heartbeat_age_s": round(int(c["heartbeat_age_ns"]) / 1e9, 1), "lag_growth_per_s": round(growth, 1),
            "lag_max_records": int(c["lag_max_records"]), "pid": pid, "drops_per_s": round(d, 1)}
        named = [*found, *out]
        if h == Health.STALE and (growth > 0 or held):
            alive = ev.process_alive(pid)
            if alive is not None:  # unknown without the CPU probe (an old recording)
                evidence["process_alive"] = alive
            out.append(Finding(
                "consumer-dead", f"Consumer {name} stopped reading: no heartbeat for "
                f"{evidence['heartbeat_age_s']:.0f} s, lag grows {si(growth)} records/s"
                + (f", {si(d)}/s dropped" if d else ""),
                CRITICAL if held else WARNING, 1e6 + d + growth, f"consumer {name} (pid {pid})", evidence,
                (f"its process {pid} is alive but not reading: `fipstop profile --pid {pid}` "
                 "shows where it is stuck" if alive else
                 "restart it (it resumes from its position by name); libfips evicts it after the grace period "
                 "so it cannot stall the rings")))
        elif h == Health.EVICTED and not any(f.id == "consumer-dead" and f"consumer {name} " in f.subject + " "
                                             for f in named):
            out.append(Finding(
                "consumer-dead", f"Consumer {name} was evicted: it died holding a full ring", WARNING, growth,
                f"consumer {name}", evidence, "restart it; its records during the outage were not seen by it"))
    return out


def consumer_cpu(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """Logging keeps up (nothing drops) but a live consumer is CPU-saturated."""
    out: list[Finding] = []
    if ev.dropping:
        return out
    for key, c in ev.consumers.items():
        if ev.health(c) != Health.ALIVE:
            continue
        pid = int(c["pid"])
        cpu = ev.cpu_pct(pid)
        rq = ev.runqueue_pct(pid)
        busy = (cpu if math.isfinite(cpu) else 0.0) + (rq if math.isfinite(rq) else 0.0)
        if not (math.isfinite(cpu) and busy >= CPU_SATURATED_PCT):
            continue
        name = name_of(c["name"])
        growth = ev.lag_growth(key)
        spot, pev = hot_spot(ev.profiles.get(pid))
        evidence: dict[str, Any] = {"pid": pid, "cpu_pct": round(cpu, 1), "lag_growth_per_s": round(growth, 1),
                                    "lag_max_records": int(c["lag_max_records"]), **pev}
        if math.isfinite(rq):
            evidence["runqueue_pct"] = round(rq, 1)
        out.append(Finding(
            "consumer-cpu", f"Logging keeps up, but {name} is CPU-saturated ({pct(cpu)} of a core"
            + (f", {pct(rq)} more waiting for one" if math.isfinite(rq) and rq >= 10 else "")
            + (f"; {spot}" if spot else "") + ")" + (f" and falling behind ({si(growth)} records/s)"
                                                      if growth > 0 else ""),
            WARNING if growth <= 0 else CRITICAL, busy, f"consumer {name} (pid {pid})", evidence,
            "the IPS, not logging, is the bottleneck: make matching cheaper (anchored failregex, a literal "
            "prefilter, fewer jails per line) or spread it over more reader threads or processes"))
    return out


def no_ring_domains(ev: Evidence, found: Sequence[Finding]) -> list[Finding]:
    """Records dropped with no ring to take them: the domain's ring table is full (a thread that logs gets a ring
    of its own, so a process with more logging threads than ``max_rings`` loses the rest's records, counted in
    the header's records_no_ring).  The rate is the mean over the frames that know it; unknown (old recordings)
    is no finding."""
    out: list[Finding] = []
    rates: dict[str, list[float]] = {}
    for s in ev.rated:
        for dd in s.domains:
            if dd.no_ring_per_s is not None:
                rates.setdefault(dd.name, []).append(dd.no_ring_per_s)
    last = {d.name: d for d in ev.last.domains}
    for name, rs in rates.items():
        r = sum(rs) / len(rs)
        d = last.get(name)
        if r <= 0 or d is None:
            continue
        dom = escape_text(name)
        out.append(Finding(
            "no-ring", f"Domain {dom}: {si(r)} records/s dropped with no ring: all {d.max_rings} ring slots are "
            "taken", CRITICAL, r, f"domain {dom}",
            {"no_ring_per_s": round(r, 1), "records_no_ring": d.records_no_ring, "max_rings": d.max_rings,
             "rings_in_use": d.rings_in_use},
            "more threads log than the domain has rings: recreate it with more (`fipstop wrap --max-rings N`, "
            "or max_rings when the program creates it), or log from fewer threads"))
    return out
