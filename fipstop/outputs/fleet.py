"""The fleet (``--prometheus``) as text tables and as JSON: what ``fipstop snapshot --prometheus`` prints.

The cells are shared with the fleet dashboard (:mod:`fipstop.views.fleet`),
so a number reads the same on both.  Unknown is ``?`` in text and ``null`` in
JSON, never 0; counters are printed exactly (they are compared with the
producers' own counts), rates are Prometheus' ``rate()`` over the window the
header names.  Every label value was escaped by the model.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from fipstop.model.fleet import FleetConsumer, FleetHost, FleetRing, FleetView
from fipstop.outputs.jsondoc import jsonable
from fipstop.outputs.text import _table

__all__ = ["CONSUMER_COLUMNS", "CONSUMER_NUMERIC", "HOST_COLUMNS", "HOST_NUMERIC", "RING_COLUMNS", "RING_NUMERIC",
           "UNKNOWN", "consumer_cells", "fleet_json",
           "format_fleet", "header_line", "host_cells", "ring_cells"]

UNKNOWN = "?"

HOST_COLUMNS = ("HOST", "STATE", "SAMPLE AGE", "RINGS", "CONSUMERS", "NO RING", "NO RING/S", "ERRORS")
RING_COLUMNS = ("HOST", "DOMAIN", "RING", "THREAD", "PID", "OPEN", "RECORDS", "DROPPED", "REC/S", "DROPS/S", "FILL",
                "LAG", "LAG S")
CONSUMER_COLUMNS = ("HOST", "DOMAIN", "CONSUMER", "HEALTH", "RELEASED", "REL/S", "LOST", "LAG", "LAG S",
                    "HEARTBEAT")
#: which columns are numbers (right-aligned)
HOST_NUMERIC = (False, False, True, True, True, True, True, False)
RING_NUMERIC = (False, False, True, False, True, False, True, True, True, True, True, True, True)
CONSUMER_NUMERIC = (False, False, False, False, True, True, True, True, True, True)


def _int(v: int | None) -> str:
    return UNKNOWN if v is None else str(v)


def _rate(v: float | None) -> str:
    return UNKNOWN if v is None else f"{v:.1f}"


def _secs(v: float | None) -> str:
    return UNKNOWN if v is None else f"{v:.2f}s" if v < 100 else f"{v:.0f}s"


def _flag(v: bool | None, yes: str = "yes", no: str = "no") -> str:
    return UNKNOWN if v is None else yes if v else no


def host_cells(h: FleetHost) -> tuple[str, ...]:
    return (h.instance, h.state, _secs(h.sample_age_s), str(h.rings), str(h.consumers), _int(h.no_ring_total),
            _rate(h.no_ring_per_s), "; ".join(h.errors) or "-")


def ring_cells(r: FleetRing) -> tuple[str, ...]:
    open_ = _flag(r.open)
    if r.open and r.producer_alive is False:
        open_ = "yes (producer gone)"
    fill = UNKNOWN if r.fill_ratio is None else f"{100 * r.fill_ratio:.1f}%"
    lag = "-" if r.lag_records is None and r.lag_s is None else _int(r.lag_records)
    return (r.instance, r.domain, str(r.ring), r.thread or "-", _int(r.pid), open_, _int(r.records_total),
            _int(r.dropped_total), _rate(r.records_per_s), _rate(r.drops_per_s), fill, lag,
            "-" if r.lag_records is None else _secs(r.lag_s))


def consumer_cells(c: FleetConsumer) -> tuple[str, ...]:
    return (c.instance, c.domain, c.consumer, c.health or UNKNOWN, _int(c.released_total), _rate(c.release_per_s),
            _int(c.lost_total), "-" if c.lag_records is None else str(c.lag_records),
            "-" if c.lag_records is None else _secs(c.lag_s), _secs(c.heartbeat_age_s))


def header_line(view: FleetView) -> str:
    up = sum(1 for h in view.hosts if h.state == "up")
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(view.at_s))
    return (f"fleet: {len(view.hosts)} host(s), {up} up - Prometheus {view.url} job {view.job}, "
            f"rates over {view.rate_window}, at {at}")


def format_fleet(view: FleetView) -> str:
    """Three tables: hosts, rings, consumers (a host that is down has no rings: its series are gone)."""
    parts = [header_line(view), "",
             _table(HOST_COLUMNS, [host_cells(h) for h in view.hosts], HOST_NUMERIC)]
    if view.rings:
        parts += ["", "rings:", _table(RING_COLUMNS, [ring_cells(r) for r in view.rings], RING_NUMERIC)]
    if view.consumers:
        parts += ["", "consumers:", _table(CONSUMER_COLUMNS, [consumer_cells(c) for c in view.consumers],
                                           CONSUMER_NUMERIC)]
    gone = [h.instance for h in view.hosts if h.state != "up"]
    if gone:
        parts += ["", "not current: " + ", ".join(f"{h.instance} ({h.state})" for h in view.hosts
                                                  if h.state != "up")]
    return "\n".join(parts)


def fleet_json(view: FleetView) -> dict[str, Any]:
    """Stable keys; unknown is null; ``at_s`` is the evaluation time of every query."""
    doc: dict[str, Any] = jsonable(asdict(view))
    return doc
