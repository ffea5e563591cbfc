"""The machine's cache-line regime, measured in the same run as the cases
(issue 21): the round trip of one cache line between the producer's CPU and
the consumer's, timed by ``ringbench pingpong`` (two pinned threads taking
turns on one counter) just before each case runs.

On this shared 2-vCPU machine the round trip switches over minutes between
~110-160 ns and ~900-1200 ns (the issue's one-way figures ~55-80 and
~440-600 ns), and a ring whose producer and consumer share lines follows it.
Every fast run committed so far (bench/results/ring-*.json) had case round
trips of 50-225 ns; a third state was seen on 2026-12-04 (ring-20261204T170739Z,
kernel -v1252: case round trips median 325 ns, max 335, and every case, the
prototype's included, 5-7x slower than in the fast run three hours before on
another host; ring-20261204T200946Z, -v1272: 44 of 150 runs at 299-351 ns,
boost's queue as slow as libfips in them).  A run is called "fast" at or
below ``SLOW_ROUND_TRIP_NS`` and "slow" above, so that state counts as slow;
the figure itself is in every result, so a reader can draw another line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fipstop.bench.ring.children import run_to_end
from fipstop.bench.ring.workspace import Workspace

__all__ = ["SLOW_ROUND_TRIP_NS", "measure", "regime_of"]

SLOW_ROUND_TRIP_NS = 250.0
ROUNDS = 15  # of 2000 round trips each: a few ms in the fast regime, ~30 ms in the slow one


def regime_of(round_trip_ns: float | None) -> str | None:
    if round_trip_ns is None:
        return None
    return "slow" if round_trip_ns > SLOW_ROUND_TRIP_NS else "fast"


def measure(ws: Workspace, harness: Path | None) -> dict[str, Any]:
    """One ping-pong between the producer's and the consumer's CPU: its median round trip (ns)
    and the regime, or a status saying why there is none."""
    if harness is None:
        return {"status": "skipped", "reason": "C harness unavailable"}
    if ws.prod_cpu is None or ws.cons_cpu is None:
        return {"status": "skipped", "reason": "fewer than 2 CPUs: producer and consumer share one"}
    p, why = run_to_end([str(harness), "pingpong", "--cpu", str(ws.prod_cpu), "--cpu2", str(ws.cons_cpu),
                         "--iters", str(ROUNDS)], 60.0, preexec=ws.preexec())
    if p is None:
        return {"status": "error", "reason": why}
    rt = float(p["round_trip_ns_p50"])
    return {"status": "ok", "round_trip_ns": rt, "round_trip_ns_min": p.get("round_trip_ns_min"),
            "round_trip_ns_max": p.get("round_trip_ns_max"), "regime": regime_of(rt),
            "rounds_ns": p.get("rounds_ns")}
