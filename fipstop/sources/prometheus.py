"""A Prometheus server as a source: the fleet it scrapes, read through its HTTP API.

``fipstop top/snapshot/diagnose/check --prometheus URL`` read every host
that server scrapes (the ``fipstop serve`` targets of one job) instead of
this host's shared memory.  :func:`prometheus_query` runs one instant query
(``/api/v1/query``) and turns every failure - no server, an HTTP error, an
answer that is not a vector - into a one-line :class:`fipstop.errors.
FipsError`; :class:`PrometheusFleet` evaluates the fleet's queries
(:data:`fipstop.model.fleet.QUERIES`) at one time, so the numbers of one view
belong together, and hands them to the pure :func:`fipstop.model.fleet.
fleet_view`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fipstop.errors import FipsError
from fipstop.model.fleet import FleetView, fleet_queries, fleet_view
from fipstop.textsafe import escape_text

__all__ = ["FleetSourceConfig", "PrometheusFleet", "Query", "prometheus_query", "valid_window"]

#: an instant query: PromQL (and the evaluation time, Unix seconds, or None: now) -> the result vector
Query = Callable[..., list[dict[str, Any]]]


def prometheus_query(url: str, timeout_s: float) -> Query:
    """A function running an instant query on the Prometheus at ``url``; FipsError with the reason on failure."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise FipsError(f"--prometheus {escape_text(url[:80])!r}: give an http:// or https:// URL")

    def query(expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        full = f"{base}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(full, timeout=timeout_s) as r:
                doc = json.loads(r.read(16 << 20))
        except urllib.error.HTTPError as e:
            try:
                doc = json.loads(e.read(1 << 16))
                why = str(doc.get("error", e.reason))
            except (ValueError, OSError, AttributeError):
                why = str(e.reason)
            raise FipsError(f"Prometheus at {escape_text(base)}: HTTP {e.code}: {escape_text(why[:200])}") from None
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise FipsError(f"Prometheus at {escape_text(base)}: {escape_text(str(reason)[:200])}") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise FipsError(f"Prometheus at {escape_text(base)}: query failed: "
                            f"{escape_text(str(doc.get('error') if isinstance(doc, dict) else doc)[:200])}")
        data = doc.get("data") or {}
        if not isinstance(data, dict) or data.get("resultType") != "vector":
            raise FipsError(f"Prometheus at {escape_text(base)}: expected a vector for {escape_text(expr[:80])}")
        result = data.get("result") or []
        if not isinstance(result, list):
            raise FipsError(f"Prometheus at {escape_text(base)}: a malformed answer to {escape_text(expr[:80])}")
        return [s for s in result if isinstance(s, dict)]

    return query


def valid_window(text: str) -> str:
    """A PromQL range duration (``30s``, ``1m``, ``1h30m``) or FipsError naming ``--rate-window``."""
    import re

    if not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", text or ""):
        raise FipsError(f"--rate-window {escape_text((text or '')[:40])!r}: give a Prometheus duration "
                        "(30s, 1m, 5m)")
    return text


@dataclass(frozen=True)
class FleetSourceConfig:
    url: str  # the Prometheus server, e.g. http://prometheus:9090
    job: str = "fipstop"  # the scrape job of the fipstop serve targets
    rate_window: str = "1m"
    stale_after_s: float = 30.0  # a host serving an older sample is shown stale
    timeout_s: float = 10.0
    interval_s: float = 2.0  # the dashboard's poll period


class PrometheusFleet:
    """Polls the fleet: one :class:`FleetView` per :meth:`poll` (blocking: HTTP)."""

    def __init__(self, config: FleetSourceConfig, query: Query | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self._query = query or prometheus_query(config.url, config.timeout_s)
        self._queries = fleet_queries(config.job, config.rate_window)
        self._clock = clock

    def poll(self, at_s: float | None = None) -> FleetView:
        """The fleet at ``at_s`` (default now): every query evaluated at that one time."""
        at = round(self._clock() if at_s is None else at_s, 3)
        results = {name: self._query(expr, at) for name, expr in self._queries.items()}
        return fleet_view(results, at_s=at, url=self.config.url, job=self.config.job,
                          rate_window=self.config.rate_window, stale_after_s=self.config.stale_after_s)

    def close(self) -> None:
        pass
