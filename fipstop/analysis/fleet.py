"""``fipstop check --prometheus URL``: the check over every host a Prometheus server scrapes.

One host is where fipstop starts; a fleet of DNS servers is watched by a
Prometheus server scraping ``fipstop serve`` on each.  This asks that server
(its HTTP API, ``/api/v1/query``) for the same conditions the local check
evaluates, at the same thresholds (Nagios ranges), and answers as one
plugin: the worst host decides the status, each finding names its host.

The conditions are those /metrics can show (the alerting rules in
contrib/prometheus/ are the same ones): a target down or serving an old
sample, unreadable domains, corrupt ring contents, writable domain files,
drops/s, the fill of open rings, consumer lag in records and seconds, stale
and evicted consumers, producers gone with their ring open, and with
``backends`` the other backends' losses.  Rates are Prometheus' ``rate()``
over ``rate_window``.  Label values come from the exporters (thread and
consumer names from other processes): they are escaped before they are
printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from fipstop.analysis.check import Perf, Report
from fipstop.analysis.levels import CRITICAL, UNKNOWN, WARNING, Thresholds, as_range, level
from fipstop.sources.prometheus import Query, prometheus_query
from fipstop.textsafe import escape_text

__all__ = ["FLEET_PERF_LABELS", "FleetConfig", "check_fleet", "prometheus_query"]

#: the fleet's perfdata labels, printed on every run
FLEET_PERF_LABELS = ("hosts", "hosts_down", "drops_per_s", "fill_max", "lag_max_records", "lag_max_seconds")



@dataclass(frozen=True)
class FleetConfig:
    url: str  # the Prometheus server, e.g. http://prometheus:9090
    job: str = "fipstop"  # the scrape job of the fipstop serve targets
    thresholds: Thresholds = Thresholds()
    rate_window: str = "1m"
    stale_after_s: float = 30.0  # a target whose last sample is older serves old numbers
    backends: bool = False
    timeout_s: float = 10.0


def _value(sample: dict[str, Any]) -> float:
    try:
        return float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def _lab(sample: dict[str, Any], name: str) -> str:
    return escape_text(str((sample.get("metric") or {}).get(name, "?")))[:80]



#: the two counters of dropped records: a ring full, no ring for the thread (the domain's ring table full)
RING_FULL, NO_RING = "fips_ring_dropped_records_total", "fips_domain_no_ring_records_total"


def check_fleet(config: FleetConfig, query: Query | None = None) -> Report:
    """The check over every target of ``config.job``; ``query`` (tests) replaces the HTTP API."""
    q = query or prometheus_query(config.url, config.timeout_s)
    th = config.thresholds
    job = config.job.replace("\\", "\\\\").replace('"', '\\"')
    sel = f'job="{job}"'
    w = config.rate_window
    rep = Report()
    perf = {
        "hosts": Perf("hosts", None),
        "hosts_down": Perf("hosts_down", None),
        "drops_per_s": Perf("drops_per_s", None, "", th.warn_drops_per_s, th.crit_drops_per_s),
        "fill_max": Perf("fill_max", None, "%", th.warn_fill_pct, th.crit_fill_pct, 0, 100),
        "lag_max_records": Perf("lag_max_records", None, "", th.warn_lag_records, th.crit_lag_records),
        "lag_max_seconds": Perf("lag_max_seconds", None, "s", th.warn_lag_s, th.crit_lag_s),
    }

    def put(label: str, value: float | None) -> None:
        perf[label] = replace(perf[label], value=value)

    try:
        targets = q(f"up{{{sel}}}")
        if not targets:
            rep.add("fleet", UNKNOWN, f"Prometheus at {escape_text(config.url)} scrapes no target of job "
                    f"{escape_text(config.job)}")
            return rep
        down = [t for t in targets if _value(t) != 1]
        put("hosts", len(targets))
        put("hosts_down", len(down))
        for t in down:
            rep.add("fleet", CRITICAL, f"{_lab(t, 'instance')}: fipstop serve does not answer Prometheus")
        for s in q(f"time() - fipstop_exporter_sample_timestamp_seconds{{{sel}}} > {config.stale_after_s:g}"):
            rep.add("fleet", UNKNOWN, f"{_lab(s, 'instance')}: the sample served is {_value(s):.0f} s old")
        for s in q(f"fips_domain_error{{{sel}}} == 1"):
            rep.add("header", CRITICAL, f"{_lab(s, 'instance')}: domain {_lab(s, 'domain')}: {_lab(s, 'reason')}")
        for s in q(f"fips_ring_contents_valid{{{sel}}} == 0"):
            rep.add("contents", CRITICAL, f"{_lab(s, 'instance')}: domain {_lab(s, 'domain')} ring "
                    f"{_lab(s, 'ring')}: corrupt record contents (its consumers cannot read past them)")
        for s in q(f"fips_domain_writable_by_others{{{sel}}} == 1"):
            rep.add("permissions", WARNING, f"{_lab(s, 'instance')}: domain {_lab(s, 'domain')} is group- or "
                    "world-writable")
        # every drop, as the local check counts them: ring full (per ring) + no ring (per domain: its ring
        # table was full); an exporter too old to report the second contributes the first only
        drops = q(f"sum by (instance) (rate({{__name__=~\"{RING_FULL}|{NO_RING}\",{sel}}}[{w}]))")
        no_ring = {_lab(s, "instance"): _value(s)
                   for s in q(f"sum by (instance) (rate({NO_RING}{{{sel}}}[{w}]))") if math.isfinite(_value(s))}
        if drops:
            put("drops_per_s", round(sum(_value(s) for s in drops if math.isfinite(_value(s))), 3))
        for s in drops:
            st = level(_value(s), th.warn_drops_per_s, th.crit_drops_per_s)
            if st:
                inst = _lab(s, "instance")
                nr = no_ring.get(inst, 0.0)
                why = "; ".join(x for x in (f"ring full {_value(s) - nr:.0f}/s" if _value(s) - nr >= 0.5 else "",
                                            f"no ring {nr:.0f}/s: a ring table full" if nr >= 0.5 else "") if x)
                rep.add("drops", st, f"{inst}: {_value(s):.0f} records/s dropped ({why or 'ring full'})")
        fill = q(f"100 * (fips_ring_fill_ratio{{{sel}}} and on (instance, job, domain, ring) "
                 f"fips_ring_open{{{sel}}} == 1)")
        if fill:
            put("fill_max", round(max(_value(s) for s in fill), 2))
        for s in fill:
            st = level(_value(s), th.warn_fill_pct, th.crit_fill_pct)
            if st:
                rep.add("fill", st, f"{_lab(s, 'instance')}: ring {_lab(s, 'domain')}/{_lab(s, 'ring')} "
                        f"{_value(s):.0f}% full")
        for metric, label, warn, crit, what in (
                ("fips_consumer_lag_records", "lag_max_records", th.warn_lag_records, th.crit_lag_records,
                 "records behind"),
                ("fips_consumer_lag_seconds", "lag_max_seconds", th.warn_lag_s, th.crit_lag_s, "s behind")):
            lag = [s for s in q(f"{metric}{{{sel}}}") if math.isfinite(_value(s))]
            if lag:
                put(label, max(_value(s) for s in lag))
            for s in lag:
                st = level(_value(s), warn, crit)
                if st:
                    rep.add("lag" if label == "lag_max_records" else "lag_seconds", st,
                            f"{_lab(s, 'instance')}: consumer {_lab(s, 'consumer')} ({_lab(s, 'domain')}) "
                            f"{_value(s):.0f} {what}")
        full = {(s.get("metric", {}).get("instance"), s.get("metric", {}).get("domain"))
                for s in fill if as_range(th.crit_fill_pct).alerts(_value(s))}
        for s in q(f'fips_consumer_health{{{sel},fips_consumer_health="stale"}} == 1'):
            m = s.get("metric") or {}
            holds = (m.get("instance"), m.get("domain")) in full
            rep.add("consumers", CRITICAL if holds else WARNING, f"{_lab(s, 'instance')}: consumer "
                    f"{_lab(s, 'consumer')} ({_lab(s, 'domain')}) stale: no heartbeat"
                    + (", a ring of its domain is full" if holds else ""))
        for s in q(f'fips_consumer_health{{{sel},fips_consumer_health="evicted"}} == 1'):
            rep.add("consumers", WARNING, f"{_lab(s, 'instance')}: consumer {_lab(s, 'consumer')} "
                    f"({_lab(s, 'domain')}) was evicted")
        for s in q(f"fips_ring_producer_alive{{{sel}}} == 0"):
            rep.add("producers", WARNING, f"{_lab(s, 'instance')}: ring {_lab(s, 'domain')}/{_lab(s, 'ring')} "
                    "still open, its producer is gone")
        if config.backends:
            lost: dict[str, float] = {}
            for metric in ("fips_backend_audit_lost_total", "fips_backend_udp_receive_buffer_errors_total",
                           "fips_backend_syslog_socket_drops_total", "fips_backend_rsyslog_queue_discarded_total"):
                for s in q(f"sum by (instance) (rate({metric}{{{sel}}}[{w}]))"):
                    if math.isfinite(_value(s)):
                        inst = _lab(s, "instance")
                        lost[inst] = lost.get(inst, 0.0) + _value(s)
            for inst, rate in sorted(lost.items()):
                st = level(rate, th.warn_drops_per_s, th.crit_drops_per_s)
                if st:
                    rep.add("backends", st, f"{inst}: the logging backends lose {rate:.1f} records/s")
        if not any(r.status for r in rep.results):
            rep.add("summary", 0, f"{len(targets)} host(s) up, no drops")
    finally:
        rep.perf.extend(perf.values())
    return rep
