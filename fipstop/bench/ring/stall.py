"""The machine's stall floor for keep-up (issue 21), measured in the same run:
``ringbench stall`` spins on the consumer's CPU reading the clock and reports
the longest time the CPU was taken from it.  No consumer on that CPU can look
at its ring more often than that, so a ring of C bytes survives at most
C / (record bytes x longest gap) records/s without a drop, however fast the
consumer reads (keepup.stall_ceiling).  A second thread spins on the
producer's CPU at the same time, because a keep-up probe keeps both CPUs busy
and this VM takes a vCPU away for ~10x longer then (0.4 ms with the other
idle, 3.8-4.0 ms beside a spinning one, 2026-12-04): a floor taken with the
producer's CPU idle would not be one.  The floor is what this machine did
during those seconds, not a bound on every later second: it is measured for as
long as one keep-up probe runs, just before the keep-up searches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fipstop.bench.ring.children import run_to_end
from fipstop.bench.ring.workspace import Workspace

__all__ = ["measure"]


def measure(ws: Workspace, harness: Path | None, seconds: float) -> dict[str, Any]:
    """The stall probe on the consumer's CPU for ``seconds``, or a status saying why there is none."""
    if harness is None:
        return {"status": "skipped", "reason": "C harness unavailable"}
    if ws.cons_cpu is None:
        return {"status": "skipped", "reason": "fewer than 2 CPUs: no consumer CPU of its own"}
    both = [] if ws.prod_cpu is None else ["--cpu2", str(ws.prod_cpu)]
    p, why = run_to_end([str(harness), "stall", "--cpu", str(ws.cons_cpu), *both, "--duration", f"{seconds:g}"],
                        seconds + 30.0, preexec=ws.preexec())
    if p is None:
        return {"status": "error", "reason": why}
    other = p.get("other") or {}
    if p.get("pin_ok") is not True or (both and other.get("pin_ok") is not True):
        return {"status": "error", "reason": "ringbench stall could not pin its threads to the consumer's and the "
                                             "producer's CPU: its gaps would not be that CPU's"}
    return {"status": "ok", "seconds": seconds, "cpu": p.get("cpu"), "pin_ok": p.get("pin_ok"),
            "max_gap_ns": p.get("max_gap_ns"), "lost_ns": p.get("lost_ns"), "gaps_over_ns": p.get("gaps_over"),
            "producer_cpu": other.get("cpu"), "producer_cpu_max_gap_ns": other.get("max_gap_ns"),
            "producer_cpu_lost_ns": other.get("lost_ns"),
            "method": "ringbench stall: one thread pinned to the consumer's CPU and one to the producer's, niced "
                      "like the cases, each reading CLOCK_MONOTONIC in a loop at the same time; a gap between two "
                      "reads is time the CPU was taken from it; the floor is the consumer CPU's longest gap"}
