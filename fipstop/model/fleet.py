"""The fleet model: every host a Prometheus server scrapes, as fipstop's own series show it.

``fipstop serve`` exports each host's rings and consumers (/metrics); a
Prometheus server scraping many hosts holds them all.  :func:`fleet_view`
turns the answers of one set of instant queries (all evaluated at the same
time, so the numbers belong together) into a :class:`FleetView`: one row per
host (target), per ring and per consumer, keyed by the ``instance`` label.

Everything here is what Prometheus said, nothing derived: counters are the
exporter's totals as last scraped, rates are Prometheus' ``rate()`` over the
configured window.  A value Prometheus does not have (a rate before two
scrapes, a lag in seconds the exporter reports as NaN, a host that does not
answer) is None - shown as unknown, never 0.  A host is ``up`` (scraped and
serving a fresh sample), ``down`` (the scrape fails: its series are gone),
``stale`` (scraped, but the sample it serves is older than the limit: its
numbers are old) or ``unknown`` (scraped, but no fipstop sample timestamp:
not a fipstop serve, or an old one).  Label values come from other hosts'
exporters and, further back, other processes: they are escaped here.

:func:`fipstop.sources.prometheus.PrometheusFleet` runs the queries; this
module is pure so tests give it vectors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fipstop.textsafe import escape_text

__all__ = ["HOST_STATES", "QUERIES", "FleetConsumer", "FleetHost", "FleetRing", "FleetView", "fleet_queries",
           "fleet_view"]

#: what a host can be (see the module docstring)
HOST_STATES = ("up", "down", "stale", "unknown")

#: the queries one view needs: name -> PromQL with ``{sel}`` (the job selector) and ``{w}`` (the rate window)
QUERIES: dict[str, str] = {
    "up": "up{{{sel}}}",
    "sample_ts": "fipstop_exporter_sample_timestamp_seconds{{{sel}}}",
    "ring_info": "fips_ring_info{{{sel}}}",
    "records": "fips_ring_records_total{{{sel}}}",
    "drops": "fips_ring_dropped_records_total{{{sel}}}",
    "records_rate": "rate(fips_ring_records_total{{{sel}}}[{w}])",
    "drops_rate": "rate(fips_ring_dropped_records_total{{{sel}}}[{w}])",
    "fill": "fips_ring_fill_ratio{{{sel}}}",
    "open": "fips_ring_open{{{sel}}}",
    "producer_alive": "fips_ring_producer_alive{{{sel}}}",
    "ring_lag": "fips_ring_slowest_lag_records{{{sel}}}",
    "ring_lag_s": "fips_ring_slowest_lag_seconds{{{sel}}}",
    "consumer_health": "fips_consumer_health{{{sel}}} == 1",
    "released": "fips_consumer_released_records_total{{{sel}}}",
    "released_rate": "rate(fips_consumer_released_records_total{{{sel}}}[{w}])",
    "lost": "fips_consumer_lost_records_total{{{sel}}}",
    "lag": "fips_consumer_lag_records{{{sel}}}",
    "lag_s": "fips_consumer_lag_seconds{{{sel}}}",
    "heartbeat_age": "fips_consumer_heartbeat_age_seconds{{{sel}}}",
    "domain_error": "fips_domain_error{{{sel}}} == 1",
    # records dropped because a domain's ring table was full (more logging threads than rings): drops too
    "no_ring": "fips_domain_no_ring_records_total{{{sel}}}",
    "no_ring_rate": "rate(fips_domain_no_ring_records_total{{{sel}}}[{w}])",
}


def fleet_queries(job: str, rate_window: str) -> dict[str, str]:
    """:data:`QUERIES` for scrape job ``job`` (quoted for PromQL) and window ``rate_window``."""
    sel = 'job="' + job.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return {k: v.format(sel=sel, w=rate_window) for k, v in QUERIES.items()}


@dataclass(frozen=True, slots=True)
class FleetHost:
    instance: str
    state: str  # one of HOST_STATES
    sample_age_s: float | None  # age of the sample its exporter serves (None: unknown)
    rings: int
    consumers: int
    errors: tuple[str, ...]  # domain files it cannot read: "domain: reason"
    # records its domains dropped with no ring to take them (ring table full), summed over its domains; None:
    # its exporter does not report them (an older fipstop serve), or no rate yet
    no_ring_total: int | None = None
    no_ring_per_s: float | None = None
    #: per domain: (domain, total, rate)
    no_ring_domains: tuple[tuple[str, int | None, float | None], ...] = ()


@dataclass(frozen=True, slots=True)
class FleetRing:
    instance: str
    host_state: str
    domain: str
    ring: int
    thread: str  # escaped
    pid: int | None
    open: bool | None
    producer_alive: bool | None  # None: the exporter does not know (closed ring, or not reported)
    records_total: int | None
    dropped_total: int | None
    records_per_s: float | None  # rate() over the window
    drops_per_s: float | None
    fill_ratio: float | None
    lag_records: int | None  # slowest active consumer (None: no active consumer)
    lag_s: float | None


@dataclass(frozen=True, slots=True)
class FleetConsumer:
    instance: str
    host_state: str
    domain: str
    consumer: str  # its registered name, escaped
    health: str | None
    released_total: int | None
    release_per_s: float | None
    lost_total: int | None
    lag_records: int | None
    lag_s: float | None
    heartbeat_age_s: float | None


@dataclass(frozen=True, slots=True)
class FleetView:
    """One moment of the fleet: every query evaluated at ``at_s`` (Prometheus' time, Unix seconds)."""

    url: str
    job: str
    rate_window: str
    at_s: float
    hosts: tuple[FleetHost, ...]
    rings: tuple[FleetRing, ...]
    consumers: tuple[FleetConsumer, ...]

    def only(self, instance_filter: str) -> FleetView:
        """The hosts whose instance contains ``instance_filter`` (the host filter; "" keeps all)."""
        if not instance_filter:
            return self
        f = instance_filter.lower()
        return FleetView(self.url, self.job, self.rate_window, self.at_s,
                         tuple(h for h in self.hosts if f in h.instance.lower()),
                         tuple(r for r in self.rings if f in r.instance.lower()),
                         tuple(c for c in self.consumers if f in c.instance.lower()))


Vector = Sequence[Mapping[str, Any]]


def _label(sample: Mapping[str, Any], name: str) -> str:
    return escape_text(str((sample.get("metric") or {}).get(name, "")))[:120]


def _value(sample: Mapping[str, Any]) -> float | None:
    """The sample's value; None when it is not a finite number (NaN is the exporter's unknown)."""
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _count(v: float | None) -> int | None:
    return None if v is None or v < 0 else int(round(v))


def _by(vec: Vector, *labels: str) -> dict[tuple[str, ...], Mapping[str, Any]]:
    return {tuple(_label(s, k) for k in labels): s for s in vec}


def _ring_key(s: Mapping[str, Any]) -> tuple[str, str, int] | None:
    try:
        return _label(s, "instance"), _label(s, "domain"), int(str((s.get("metric") or {}).get("ring", "")))
    except ValueError:
        return None  # not a fipstop ring series: skipped


def fleet_view(results: Mapping[str, Vector], *, at_s: float, url: str = "", job: str = "fipstop",
               rate_window: str = "1m", stale_after_s: float = 30.0) -> FleetView:
    """The view of one set of query answers (``results``: :data:`QUERIES` name -> result vector)."""
    def vec(name: str) -> Vector:
        return results.get(name) or ()

    sample_ts = {k[0]: _value(s) for k, s in _by(vec("sample_ts"), "instance").items()}
    states: dict[str, str] = {}
    ages: dict[str, float | None] = {}
    for s in vec("up"):
        inst = _label(s, "instance")
        ts = sample_ts.get(inst)
        age = max(at_s - ts, 0.0) if ts is not None else None
        ages[inst] = age
        if _value(s) != 1:
            states[inst] = "down"
        elif age is None:
            states[inst] = "unknown"
        elif age > stale_after_s:
            states[inst] = "stale"
        else:
            states[inst] = "up"

    def per_ring(name: str) -> dict[tuple[str, str, int], float | None]:
        out: dict[tuple[str, str, int], float | None] = {}
        for s in vec(name):
            k = _ring_key(s)
            if k is not None:
                out[k] = _value(s)
        return out

    info: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for s in vec("ring_info"):
        k = _ring_key(s)
        if k is not None:
            info[k] = s
    ring_vals = {name: per_ring(name) for name in ("records", "drops", "records_rate", "drops_rate", "fill", "open",
                                                   "producer_alive", "ring_lag", "ring_lag_s")}
    ring_keys = sorted(set(info) | set(ring_vals["records"]))
    rings = []
    for k in ring_keys:
        inst, dom, slot = k
        i = info.get(k)
        pid = None
        if i is not None:
            try:
                pid = int(str((i.get("metric") or {}).get("pid", "")))
            except ValueError:
                pid = None
        op = ring_vals["open"].get(k)
        alive = ring_vals["producer_alive"].get(k)
        rings.append(FleetRing(
            instance=inst, host_state=states.get(inst, "unknown"), domain=dom, ring=slot,
            thread=_label(i, "thread") if i is not None else "", pid=pid,
            open=None if op is None else op == 1, producer_alive=None if alive is None else alive == 1,
            records_total=_count(ring_vals["records"].get(k)), dropped_total=_count(ring_vals["drops"].get(k)),
            records_per_s=ring_vals["records_rate"].get(k), drops_per_s=ring_vals["drops_rate"].get(k),
            fill_ratio=ring_vals["fill"].get(k), lag_records=_count(ring_vals["ring_lag"].get(k)),
            lag_s=ring_vals["ring_lag_s"].get(k)))

    def per_consumer(name: str) -> dict[tuple[str, ...], float | None]:
        return {k: _value(s) for k, s in _by(vec(name), "instance", "domain", "consumer").items()}

    health = {k: _label(s, "fips_consumer_health") or None
              for k, s in _by(vec("consumer_health"), "instance", "domain", "consumer").items()}
    cons_vals = {name: per_consumer(name) for name in ("released", "released_rate", "lost", "lag", "lag_s",
                                                       "heartbeat_age")}
    consumers = []
    for ck in sorted(set(health) | set(cons_vals["released"])):
        inst, dom, name = ck
        consumers.append(FleetConsumer(
            instance=inst, host_state=states.get(inst, "unknown"), domain=dom, consumer=name,
            health=health.get(ck), released_total=_count(cons_vals["released"].get(ck)),
            release_per_s=cons_vals["released_rate"].get(ck), lost_total=_count(cons_vals["lost"].get(ck)),
            lag_records=_count(cons_vals["lag"].get(ck)), lag_s=cons_vals["lag_s"].get(ck),
            heartbeat_age_s=cons_vals["heartbeat_age"].get(ck)))

    errors: dict[str, list[str]] = {}
    for s in vec("domain_error"):
        errors.setdefault(_label(s, "instance"), []).append(f"{_label(s, 'domain')}: {_label(s, 'reason')}")
    nr_total = {k: _count(_value(s)) for k, s in _by(vec("no_ring"), "instance", "domain").items()}
    nr_rate = {k: _value(s) for k, s in _by(vec("no_ring_rate"), "instance", "domain").items()}
    instances = sorted(set(states) | {r.instance for r in rings} | {c.instance for c in consumers})

    def no_ring(inst: str) -> tuple[int | None, float | None, tuple[tuple[str, int | None, float | None], ...]]:
        doms = tuple((d, nr_total.get((i, d)), nr_rate.get((i, d)))
                     for (i, d) in sorted(set(nr_total) | set(nr_rate)) if i == inst)
        totals = [t for _, t, _ in doms]
        rates = [r for _, _, r in doms]
        total = sum(t for t in totals if t is not None) if doms and None not in totals else None
        rate = sum(r for r in rates if r is not None) if doms and None not in rates else None
        return total, rate, doms

    hosts = tuple(FleetHost(inst, states.get(inst, "unknown"), ages.get(inst),
                            sum(1 for r in rings if r.instance == inst),
                            sum(1 for c in consumers if c.instance == inst), tuple(errors.get(inst, ())),
                            *no_ring(inst))
                  for inst in instances)
    return FleetView(url, job, rate_window, at_s, hosts, tuple(rings), tuple(consumers))
