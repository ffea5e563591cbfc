"""Snapshots in the OpenMetrics / Prometheus text format.

Used by ``fipstop serve`` (a live /metrics endpoint) and ``fipstop export
--format openmetrics`` (one exposition per recorded frame, with timestamps).

Naming follows Prometheus conventions: every metric is prefixed ``fips_``,
counters are declared without and exposed with the ``_total`` suffix, units
are in the name (``_bytes``, ``_seconds``, ``_ratio``), one label set per ring
(domain, ring, pid, tid, thread) and per consumer (domain, consumer, name,
pid).  Rates are not exported: Prometheus computes them with ``rate()`` from
the counters, which is more correct across scrapes than our own rates.

Thread and consumer names come from other processes: they are made printable
with :func:`fipstop.textsafe.escape_bytes` and then escaped for label values
(backslash, double quote, newline), so no name can break the exposition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from fipstop.model import Health, Snapshot
from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _label(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        v = escape_bytes(bytes(v).split(b"\0", 1)[0])
    else:
        v = escape_text(str(v))
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(d: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in d.items()) + "}"


def _num(x: float | int) -> str:
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


class _Family:
    def __init__(self, name: str, kind: str, help_: str, unit: str = "") -> None:
        self.name, self.kind, self.help, self.unit = name, kind, help_, unit
        self.samples: list[tuple[str, Mapping[str, Any], float | int]] = []

    def add(self, labels: Mapping[str, Any], value: float | int, suffix: str = "") -> None:
        if suffix == "" and self.kind == "counter":
            suffix = "_total"
        self.samples.append((suffix, labels, value))

    def lines(self, ts: str) -> Iterable[str]:
        if not self.samples:
            return
        yield f"# TYPE {self.name} {self.kind}"
        if self.unit:
            yield f"# UNIT {self.name} {self.unit}"
        yield f"# HELP {self.name} {self.help}"
        for suffix, labels, value in self.samples:
            yield f"{self.name}{suffix}{_labels(labels)} {_num(value)}{ts}"


def render(snap: Snapshot, *, aux: Mapping[str, Any] | None = None, timestamp: bool = False,
           eof: bool = True) -> str:
    """One exposition of ``snap`` (``timestamp``: add the sample time to each line)."""
    ts = f" {snap.taken_realtime_ns / 1e9:.3f}" if timestamp else ""
    F = _Family
    fam = {
        "records": F("fips_ring_records", "counter", "Records committed into the ring."),
        "bytes": F("fips_ring_committed_bytes", "counter", "Bytes committed into the ring.", "bytes"),
        "drops": F("fips_ring_dropped_records", "counter", "Records dropped because the ring was full."),
        "drop_bytes": F("fips_ring_dropped_bytes", "counter", "Bytes dropped because the ring was full.", "bytes"),
        "full": F("fips_ring_full_events", "counter", "Times the producer found the ring full."),
        "fill": F("fips_ring_fill_ratio", "gauge", "Share of the ring holding records some consumer still needs.",
                  "ratio"),
        "hw": F("fips_ring_high_water_ratio", "gauge", "Highest fill seen (sampled by the producer).", "ratio"),
        "cap": F("fips_ring_capacity_bytes", "gauge", "Ring capacity.", "bytes"),
        "claimed": F("fips_ring_claimed_bytes", "gauge", "Bytes claimed by the producer, not committed yet.",
                     "bytes"),
        "active": F("fips_ring_active", "gauge", "1 while the producer thread's ring is open, 0 once closed."),
        "ring_lag": F("fips_ring_slowest_lag_records", "gauge", "Records the slowest active consumer has not "
                      "released."),
        "released": F("fips_consumer_released_records", "counter", "Records the consumer released."),
        "lost": F("fips_consumer_lost_records", "counter", "Records the consumer can prove it lost (dropped "
                  "before it read them)."),
        "lag": F("fips_consumer_lag_records", "gauge", "Largest lag of the consumer over the rings, in records."),
        "lag_s": F("fips_consumer_lag_seconds", "gauge", "Largest lag of the consumer, in seconds at the ring's "
                   "commit rate.", "seconds"),
        "hb": F("fips_consumer_heartbeat_age_seconds", "gauge", "Age of the consumer's heartbeat.", "seconds"),
        "up": F("fips_consumer_up", "gauge", "1 when the consumer is alive (registered, recent heartbeat)."),
        "health": F("fips_consumer_health", "stateset", "The consumer's state."),
        "dom": F("fips_domain_rings", "gauge", "Rings in use in the domain."),
    }
    names = [d.name for d in snap.domains]
    for r in snap.rings:
        lab = {"domain": names[int(r["domain"])], "ring": int(r["ring"]), "pid": int(r["pid"]),
               "tid": int(r["tid"]), "thread": bytes(r["thread_name"])}
        fam["records"].add(lab, int(r["records_committed"]))
        fam["bytes"].add(lab, int(r["bytes_committed"]))
        fam["drops"].add(lab, int(r["records_dropped"]))
        fam["drop_bytes"].add(lab, int(r["bytes_dropped"]))
        fam["full"].add(lab, int(r["full_events"]))
        fam["fill"].add(lab, float(r["fill_pct"]) / 100.0)
        fam["hw"].add(lab, float(r["high_water_pct"]) / 100.0)
        fam["cap"].add(lab, int(r["capacity_bytes"]))
        fam["claimed"].add(lab, int(r["claimed_bytes"]))
        fam["active"].add(lab, 1 if int(r["state"]) == 1 else 0)
        if int(r["slowest_lag_records"]) >= 0:
            fam["ring_lag"].add(lab, int(r["slowest_lag_records"]))
    for c in snap.consumers:
        lab = {"domain": names[int(c["domain"])], "consumer": int(c["consumer"]), "name": bytes(c["name"]),
               "pid": int(c["pid"])}
        fam["released"].add(lab, int(c["records_released"]))
        fam["lost"].add(lab, int(c["lost_seen"]))
        if int(c["lag_max_records"]) >= 0:
            fam["lag"].add(lab, int(c["lag_max_records"]))
        if math.isfinite(float(c["lag_max_s"])):
            fam["lag_s"].add(lab, float(c["lag_max_s"]))
        fam["hb"].add(lab, max(int(c["heartbeat_age_ns"]), 0) / 1e9)
        h = Health(int(c["health"]))
        fam["up"].add(lab, 1 if h == Health.ALIVE else 0)
        for state in Health:
            fam["health"].add({**lab, "fips_consumer_health": state.label}, 1 if state == h else 0)
    for d in snap.domains:
        fam["dom"].add({"domain": d.name}, int(d.rings_in_use))
    out: list[str] = []
    for f in fam.values():
        out.extend(f.lines(ts))
    for extra in _aux_families(aux or {}):
        out.extend(extra.lines(ts))
    if eof:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def _aux_families(aux: Mapping[str, Any]) -> list[_Family]:
    """Metrics of other probes that expose ``metrics()`` -> [(name, kind, help, labels, value)]."""
    fams: dict[str, _Family] = {}
    for sample in aux.values():
        metrics = getattr(sample, "metrics", None)
        if not callable(metrics):
            continue
        try:
            items = list(metrics())
        except Exception:  # a probe's metrics must never break the endpoint
            continue
        for name, kind, help_, labels, value in items:
            f = fams.setdefault(name, _Family(name, kind, help_))
            f.add(labels, value)
    return list(fams.values())
