"""JSON for programs: a domain's raw snapshot and the other backends' derived view.

``fipstop snapshot --json`` and ``fipstop export --format jsonl`` print these:
stable keys, integer counters, fill as a 0-1 ``fill_ratio`` (as /metrics,
the textfile and the CSV export have it), strings unescaped (``json.dumps`` escapes
control characters itself), and for the backends floats or null where a rate
has no baseline.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from fipstop._fips import EVICTED_BY_OPERATOR
from fipstop.model.backends import BackendsView
from fipstop.ring import ConsumerState, DomainSnapshot

__all__ = ["backends_json", "domain_json"]


def domain_json(snap: DomainSnapshot) -> dict[str, Any]:
    """A JSON-ready dict of one snapshot: stable keys, integer numbers,
    unescaped strings (json.dumps escapes control characters)."""
    hb = snap.heartbeat_age_ns()
    lag = snap.lag_records()
    rings = []
    for r in snap.ring_stats():
        rings.append(
            {
                "index": r.index,
                "state": r.state_label,
                "generation": r.generation,
                "pid": r.pid,
                "tid": r.tid,
                "thread_name": r.thread_name,
                "head": r.head,
                "floor": r.floor,
                "floor_seq": r.floor_seq,
                "records_committed": r.records_committed,
                "bytes_committed": r.bytes_committed,
                "records_dropped": r.records_dropped,
                "bytes_dropped": r.bytes_dropped,
                "records_truncated": r.records_truncated,
                "full_events": r.full_events,
                "evictions": r.evictions,
                "blocked_ns": r.blocked_ns,
                "used_bytes": r.used_bytes,
                "capacity_bytes": r.capacity_bytes,
                "fill_ratio": r.used_bytes / r.capacity_bytes if r.capacity_bytes else None,
                "high_water_bytes": r.high_water_bytes,
                "last_commit_ns": r.last_commit_ns,
                "created_ns": r.created_ns,
                "closed_ns": r.closed_ns,
            }
        )
    consumers = []
    for c in snap.consumer_stats():
        active = c.state == ConsumerState.ACTIVE
        positions = []
        if active:
            for ri in snap.active_ring_indices():
                p = snap.pos[c.index, ri]
                positions.append(
                    {
                        "ring": int(ri),
                        "released": int(p["released"]),
                        "released_seq": int(p["released_seq"]),
                        "records_released": int(p["records_released"]),
                        "lost_seen": int(p["lost_seen"]),
                        "lag_records": int(lag[c.index, ri]),
                    }
                )
        consumers.append(
            {
                "index": c.index,
                "name": c.name,
                "state": c.state_label,
                "generation": c.generation,
                "pid": c.pid,
                "heartbeat_age_ns": int(hb[c.index]),
                "registered_ns": c.registered_ns,
                "evicted_ns": c.evicted_ns,
                # which ring's producer evicted it; null with "evicted_by": "operator" (fips_consumer_evict)
                "evicted_by_ring": None if c.evicted_by_ring == EVICTED_BY_OPERATOR else c.evicted_by_ring,
                "evicted_by": (None if not c.evicted_ns else
                               "operator" if c.evicted_by_ring == EVICTED_BY_OPERATOR else "ring"),
                "resumes": c.resumes,
                "records_released": c.records_released,
                "batches_released": c.batches_released,
                "lag_records": c.lag_records if active else None,
                "positions": positions,
            }
        )
    return {
        "name": snap.name,
        "path": snap.path,
        "version": snap.version,
        "max_rings": snap.max_rings,
        "max_consumers": snap.max_consumers,
        "ring_capacity_bytes": snap.ring_capacity_bytes,
        "max_record_bytes": snap.max_record_bytes,
        "file_size_bytes": snap.file_size_bytes,
        "grace_ns": snap.grace_ns,
        "creator_pid": snap.creator_pid,
        "created_realtime_ns": snap.created_realtime_ns,
        "taken_realtime_ns": snap.taken_realtime_ns,
        "taken_mono_ns": snap.taken_mono_ns,
        # dropped with no ring to take them (ring table full), not in any ring's records_dropped; null: unknown
        "records_no_ring": snap.records_no_ring,
        "rings": rings,
        "consumers": consumers,
    }



def jsonable(x: Any) -> Any:
    """A dataclass tree (after ``asdict``) as JSON values: NaN and inf become null, floats 3 decimals."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 3)
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def backends_json(view: BackendsView) -> dict[str, Any]:
    """Stable keys; rates are floats or null (no baseline / unknown); names unescaped (JSON escapes them)."""
    doc: dict[str, Any] = jsonable(asdict(view))
    return doc
