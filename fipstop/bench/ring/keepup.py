"""The highest producer rate one consumer keeps up with (issue 21): for an IPS
a consumer that keeps up is the normal case, so the figure that matters is
not the drain rate of a flooded ring but the rate below which nothing is
dropped.

Per size, the producer is paced (``--rate``) and each probe runs
``KEEPUP_S`` seconds (``QUICK_KEEPUP_S`` with --quick); a probe passes when
nothing was dropped and the consumer received every record attempted.  The
search starts at the unpaced attempted rate of the same case in this run
(it passes outright if the consumer kept up with that) and bisects on a
log scale between the last failing and the last passing rate, down to
``FLOOR_FRACTION`` of the start.  Reported: the highest passing rate, as
asked and as achieved (a paced producer may fall behind its schedule), and
every probe with its regime.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fipstop.bench.ring.children import log
from fipstop.bench.ring.spec import CaseResult

__all__ = ["KEEPUP_S", "QUICK_KEEPUP_S", "search"]

KEEPUP_S = 10.0
QUICK_KEEPUP_S = 1.0
STEPS = 6
FLOOR_FRACTION = 1 / 64


def kept_up(r: CaseResult) -> bool:
    return (r.status == "ok" and r.drops == 0 and r.delivered is not None and r.attempted is not None
            and r.delivered >= r.attempted)


def stall_ceiling(ring_capacity: int, size: int, gap_ns: float | None, framed: bool = True) -> float | None:
    """The highest rate a ring of ``ring_capacity`` bytes survives a consumer gap of ``gap_ns``
    without a drop, records of ``size`` bytes: libfips' framing (a 24-byte header, 8-byte aligned)
    when ``framed``, else ``size`` bytes a record (boost's spsc_queue of fixed-size records, peers.cc):
    above it the producer fills the ring before the consumer looks again, however fast it reads."""
    if not gap_ns or gap_ns <= 0:
        return None
    per_record = 24 + ((size + 7) & ~7) if framed else size
    return ring_capacity / per_record / (gap_ns / 1e9)


def search(case: str, size: int, start_rate: float | None,
           probe: Callable[[float], tuple[CaseResult, dict[str, Any]]], steps: int = STEPS,
           ring_capacity: int | None = None) -> dict[str, Any]:
    """``probe(rate)`` runs the case paced to ``rate`` and returns (result, regime).  With
    ``ring_capacity``, each probe where the consumer reported its longest gap (libfips' consumer)
    also gives the stall ceiling of that gap on that ring (stall_ceiling)."""
    out: dict[str, Any] = {"case": case, "size_bytes": size, "probes": []}
    if not start_rate:
        return {**out, "status": "skipped", "reason": f"{case} {size} B has no unpaced rate in this run"}
    good: float | None = None
    good_achieved: float | None = None
    bad: float | None = None
    rate = start_rate
    lo = start_rate * FLOOR_FRACTION
    for _ in range(steps):
        r, reg = probe(rate)
        ok = kept_up(r)
        out["probes"].append({"rate_asked": round(rate), "attempted_per_s": r.attempted_per_s,
                              "delivered": r.delivered, "attempted": r.attempted, "drops": r.drops,
                              "status": r.status, "reason": r.skip_reason, "kept_up": ok,
                              "round_trip_ns": reg.get("round_trip_ns"), "regime": reg.get("regime"),
                              "disturbed": r.disturbed})
        gap = r.drop_detail.get("consumer_max_gap_ns")
        if gap is not None:
            out["probes"][-1]["consumer_max_gap_ns"] = gap
            if ring_capacity:
                out["probes"][-1]["stall_ceiling_per_s"] = stall_ceiling(ring_capacity, size, gap)
        ring = f" ({ring_capacity >> 20} MiB ring)" if ring_capacity else ""
        log(f"keep-up {case} {size} B{ring} at {rate / 1e6:.2f} M/s: "
            + ("kept up" if ok else f"{r.drops} dropped, {r.delivered} of {r.attempted} delivered"
               if r.status == "ok" else f"{r.status}: {r.skip_reason}"))
        if r.status != "ok":
            break
        if ok:
            good, good_achieved = rate, r.attempted_per_s
            if bad is None:
                break  # kept up with the unpaced rate
        else:
            bad = rate
        nxt = math.sqrt(good * bad) if good is not None and bad is not None else rate / 4
        if good is None and nxt < lo:
            break
        rate = nxt
    return {**out, "status": "ok" if good is not None else "not_found",
            "reason": None if good is not None else f"dropped at every rate tried down to {rate / 1e6:.3f} M/s",
            "max_rate_asked": round(good) if good else None, "max_rate_achieved": good_achieved,
            "lowest_failing_rate": round(bad) if bad else None}
