"""``fipstop diagnose --prometheus URL``: the bottleneck of each host of a fleet, from Prometheus' series.

The local diagnosis watches one host's rings, CPU and profiles; over a fleet
only what ``fipstop serve`` exports is there, so this runs the rules that
need nothing else, per host, with the same finding ids where they mean the
same (``consumer-too-slow``, ``no-consumer``, ``consumer-dead``), plus what
only a fleet has: a host that does not answer (``host-down``), one serving an
old sample (``host-stale``) or that is no fipstop serve (``host-unknown``).
Each finding's subject is the host (the ``instance`` label); the evidence is
Prometheus' numbers (rates over the view's window).  Pure: it reads a
:class:`fipstop.model.fleet.FleetView`.
"""

from __future__ import annotations

from fipstop.analysis.findings import CRITICAL, WARNING, Finding
from fipstop.model.fleet import FleetConsumer, FleetView

__all__ = ["diagnose_fleet"]


def _slowest(view: FleetView, instance: str, domain: str) -> FleetConsumer | None:
    cands = [c for c in view.consumers if c.instance == instance and c.domain == domain and c.health == "alive"]
    return max(cands, key=lambda c: c.lag_records or 0) if cands else None


def diagnose_fleet(view: FleetView) -> list[Finding]:
    """Findings over every host of ``view``, most important first (no finding: the fleet is healthy)."""
    out: list[Finding] = []
    for h in view.hosts:
        if h.state == "down":
            out.append(Finding("host-down", f"{h.instance}: fipstop serve does not answer Prometheus (its rings "
                               "are unknown)", CRITICAL, 100.0, h.instance, {"up": 0},
                               "check that fipstop serve runs there and that Prometheus can reach it"))
        elif h.state == "stale":
            out.append(Finding("host-stale", f"{h.instance}: the sample it serves is {h.sample_age_s:.0f} s old "
                               "(its numbers are old)", WARNING, float(h.sample_age_s or 0), h.instance,
                               {"sample_age_s": round(h.sample_age_s or 0, 1)},
                               "its sampler is stuck: look at fipstop_exporter_sample_errors_total and the "
                               "serve's log"))
        elif h.state == "unknown":
            out.append(Finding("host-unknown", f"{h.instance}: scraped, but it exports no fipstop sample time "
                               "(not a fipstop serve?)", WARNING, 1.0, h.instance, {},
                               "point the scrape job at fipstop serve's /metrics"))
        for dom, total, rate in h.no_ring_domains:
            if rate:
                out.append(Finding("no-ring", f"{h.instance}: domain {dom} drops {rate:.0f} records/s with no ring "
                                   "to take them: its ring table is full", CRITICAL, rate, h.instance,
                                   {"domain": dom, "no_ring_per_s": round(rate, 1), "records_no_ring": total,
                                    "window": view.rate_window},
                                   "more threads log than the domain has rings: recreate it with more "
                                   "(`fipstop wrap --max-rings N`, or max_rings where the program creates it)"))
        for e in h.errors:
            out.append(Finding("domain-unreadable", f"{h.instance}: domain {e}", CRITICAL, 50.0, h.instance,
                               {"error": e}, "run fipstop check on that host"))
    seen_domains: set[tuple[str, str]] = set()
    for r in view.rings:
        if not r.drops_per_s or (r.instance, r.domain) in seen_domains:
            continue
        seen_domains.add((r.instance, r.domain))
        drops = sum(x.drops_per_s or 0.0 for x in view.rings if (x.instance, x.domain) == (r.instance, r.domain))
        ev = {"drops_per_s": round(drops, 1), "fill_pct": None if r.fill_ratio is None else
              round(100 * r.fill_ratio, 1), "window": view.rate_window}
        slow = _slowest(view, r.instance, r.domain)
        registered = [c for c in view.consumers if (c.instance, c.domain) == (r.instance, r.domain)
                      and c.health in ("alive", "stale", "joining")]
        if slow is not None:
            ev |= {"consumer": slow.consumer, "lag_records": slow.lag_records,
                   "release_per_s": None if slow.release_per_s is None else round(slow.release_per_s, 1)}
            out.append(Finding("consumer-too-slow", f"{r.instance}: domain {r.domain} drops {drops:.0f} records/s: "
                               f"consumer {slow.consumer} does not keep up", CRITICAL, drops, r.instance, ev,
                               "speed the consumer up (more reader threads, a cheaper filter) or give the rings "
                               "more capacity"))
        elif not registered:
            out.append(Finding("no-consumer", f"{r.instance}: domain {r.domain} drops {drops:.0f} records/s and "
                               "no consumer reads it", CRITICAL, drops, r.instance, ev,
                               "start the consumer (fipstop ips, the archiver) on that host"))
    for c in view.consumers:
        if c.health in ("stale", "evicted"):
            sev = CRITICAL if c.health == "stale" and (c.lag_records or 0) > 0 else WARNING
            out.append(Finding("consumer-dead", f"{c.instance}: consumer {c.consumer} ({c.domain}) is {c.health}"
                               + (f", {c.lag_records} records behind" if c.lag_records else ""), sev,
                               float(c.lag_records or 0), c.instance,
                               {"health": c.health, "lag_records": c.lag_records,
                                "heartbeat_age_s": None if c.heartbeat_age_s is None else
                                round(c.heartbeat_age_s, 1)},
                               "restart the consumer; it resumes where it released"))
    for r in view.rings:
        if r.open and r.producer_alive is False:
            out.append(Finding("producer-gone", f"{r.instance}: ring {r.domain}/{r.ring} is still open, its "
                               "producer is gone", WARNING, 0.5, r.instance, {"pid": r.pid},
                               "the producer crashed: its ring stays until the domain is recreated"))
    out.sort(key=lambda f: (-f.severity, -f.score))
    return out
