"""A fixed fleet, as a Prometheus server's query answers: for tests and the fleet screenshots.

:func:`answers` maps each query name of :data:`fipstop.model.fleet.QUERIES`
to a result vector shaped like ``/api/v1/query``'s; :func:`fixture_query`
answers the real PromQL text with them, so :class:`fipstop.sources.
prometheus.PrometheusFleet` runs unchanged on it.
"""

from __future__ import annotations

from typing import Any

from fipstop.model.fleet import fleet_queries

__all__ = ["AT", "A", "B", "C", "D", "answers", "cons", "fixture_query", "ring", "s"]

AT = 1_800_000_000.0
A, B, C, D = "10.0.0.1:9464", "10.0.0.2:9464", "10.0.0.3:9464", "10.0.0.4:9464"


def s(value: Any, **labels: Any) -> dict[str, Any]:
    return {"metric": {"job": "fipstop", **{k: str(v) for k, v in labels.items()}}, "value": [AT, str(value)]}


def ring(inst: str, r: int, value: Any) -> dict[str, Any]:
    return s(value, instance=inst, domain="named", ring=r)


def cons(inst: str, name: str, value: Any, **more: Any) -> dict[str, Any]:
    return s(value, instance=inst, domain="named", consumer=name, **more)


def answers() -> dict[str, list[dict[str, Any]]]:
    """A up and healthy, B up and dropping (its consumer alive but behind), C serving a 100 s old sample,
    D down (its series are gone); a hostile thread name on A."""
    return {
        "up": [s(1, instance=A), s(1, instance=B), s(1, instance=C), s(0, instance=D)],
        "sample_ts": [s(AT - 0.5, instance=A), s(AT - 1, instance=B), s(AT - 100, instance=C)],
        "ring_info": [s(1, instance=A, domain="named", ring=0, pid=42, tid=43, thread="\x1b[31mevil[b]"),
                      s(1, instance=B, domain="named", ring=1, pid=7, tid=7, thread="worker")],
        "records": [ring(A, 0, 1000), ring(B, 1, 46), ring(C, 0, 5)],
        "drops": [ring(A, 0, 0), ring(B, 1, 5414), ring(C, 0, 0)],
        "records_rate": [ring(A, 0, 12.5), ring(B, 1, 0)],  # C: fewer than two samples in the window
        "drops_rate": [ring(A, 0, 0), ring(B, 1, 400)],
        "fill": [ring(A, 0, 0.01), ring(B, 1, 0.988), ring(C, 0, 0)],
        "open": [ring(A, 0, 1), ring(B, 1, 1), ring(C, 0, 0)],
        "producer_alive": [ring(A, 0, 1), ring(B, 1, 1)],
        "ring_lag": [ring(A, 0, 0), ring(B, 1, 46)],
        "ring_lag_s": [ring(A, 0, 0), ring(B, 1, "NaN")],
        "consumer_health": [cons(A, "ips", 1, fips_consumer_health="alive"),
                            cons(B, "archiver", 1, fips_consumer_health="alive")],
        "released": [cons(A, "ips", 1000), cons(B, "archiver", 0)],
        "released_rate": [cons(A, "ips", 12.5), cons(B, "archiver", 0)],
        "lost": [cons(A, "ips", 0), cons(B, "archiver", 0)],
        "lag": [cons(A, "ips", 0), cons(B, "archiver", 46)],
        "lag_s": [cons(A, "ips", 0), cons(B, "archiver", "NaN")],
        "heartbeat_age": [cons(A, "ips", 0.1), cons(B, "archiver", 0.2)],
        "domain_error": [],
        # B's domain also has more logging threads than rings; A reports none dropped; C, D: no such series
        "no_ring": [s(0, instance=A, domain="named"), s(1200, instance=B, domain="named")],
        "no_ring_rate": [s(0, instance=A, domain="named"), s(30, instance=B, domain="named")],
    }




def fixture_query(job: str = "fipstop", rate_window: str = "10s") -> Any:
    """A query function (PromQL, time) answering from :func:`answers`."""
    by_expr = {expr: name for name, expr in fleet_queries(job, rate_window).items()}

    def query(expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return answers()[by_expr[expr]]

    return query
