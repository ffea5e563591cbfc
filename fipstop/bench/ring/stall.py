"""The machine's stall floor for keep-up (issue 21), measured in the same run:
``ringbench stall`` spins on the consumer's CPU reading the clock and reports
the longest time the CPU was taken from it.  No consumer on that CPU can look
at its ring more often than that, so a ring of C bytes survives at most
C / (record bytes x longest gap) records/s without a drop, however fast the
consumer reads (keepup.stall_ceiling).  The floor is what this machine did
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
    p, why = run_to_end([str(harness), "stall", "--cpu", str(ws.cons_cpu), "--duration", f"{seconds:g}"],
                        seconds + 30.0, preexec=ws.preexec())
    if p is None:
        return {"status": "error", "reason": why}
    return {"status": "ok", "seconds": seconds, "cpu": p.get("cpu"), "pin_ok": p.get("pin_ok"),
            "max_gap_ns": p.get("max_gap_ns"), "lost_ns": p.get("lost_ns"), "gaps_over_ns": p.get("gaps_over"),
            "method": "ringbench stall: one thread pinned to the consumer's CPU, niced like the cases, reads "
                      "CLOCK_MONOTONIC in a loop; a gap between two reads is time the CPU was taken from it"}
