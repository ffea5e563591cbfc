"""``fipstop bench ring``: every case, round-robin, then the monitors, then the result."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import statistics
import time
from typing import Any

from fipstop.bench.results import machine_info, publish
from fipstop.bench.ring import keepup, regime, stall
from fipstop.bench.ring.against import main as against_main
from fipstop.bench.ring.cases import run_case, run_fips
from fipstop.bench.ring.children import build_harness, build_harness_so, log
from fipstop.bench.ring.keepup import KEEPUP_S, QUICK_KEEPUP_S
from fipstop.bench.ring.monitors import run_monitor_ab, run_monitor_isolated, run_snapshot
from fipstop.bench.ring.peers import run_peer
from fipstop.bench.ring.report import (
    add_ratios,
    issue21_targets,
    median_rep,
    proto_targets,
    render_table,
    targets,
    to_json,
)
from fipstop.bench.ring.spec import (
    CONSUMER_MIN_BATCH,
    KEEPUP_RING_CAPACITIES,
    LAT_BATCH,
    LATENCY_METHOD,
    LOG_BATCH,
    MONITOR_HZ,
    SCHEMA,
    SNAP_RINGS,
    CaseResult,
    RingConfig,
)
from fipstop.bench.ring.workspace import Workspace

__all__ = ["main", "run"]


def run(ws: Workspace) -> dict[str, Any]:
    started = time.monotonic()
    ws.loadavg_start = list(os.getloadavg())
    if ws.loadavg_start[0] > 0.5 * (os.cpu_count() or 1):
        log(
            f"warning: load average {ws.loadavg_start[0]:.2f} on {os.cpu_count()} CPUs: other work "
            "competes with the bench, expect noisy numbers"
        )
    ws.harness, ws.harness_reason, ws.build_info = build_harness()
    if "fips_c_so" in ws.cases:
        ws.harness_so, ws.harness_so_reason, ws.build_info["shared_library_harness"] = build_harness_so()
    if ws.harness_reason:
        log(f"C harness unavailable: {ws.harness_reason}")
    # Repetitions run round-robin over every (size, case), so a burst of load from elsewhere
    # hits different cases in different rounds; each cell reports its median repetition.
    reps: dict[tuple[str, int], list[CaseResult]] = {(c, z): [] for z in ws.sizes for c in ws.cases}
    regimes: list[float] = []
    for rep in range(ws.reps):
        for size in ws.sizes:
            for case in ws.cases:
                done = reps[(case, size)]
                if done and done[0].status == "skipped":
                    continue  # a skip reason does not change between rounds
                tag = f"{case} {size} B" + (f" (round {rep + 1}/{ws.reps})" if ws.reps > 1 else "")
                reg = regime.measure(ws, ws.harness)  # the cache-line regime this very run is in
                r = run_case(ws, case, size)
                if reg.get("status") == "ok":
                    r = dataclasses.replace(r, round_trip_ns=reg["round_trip_ns"], regime=reg["regime"])
                    regimes.append(reg["round_trip_ns"])
                if r.status == "ok":
                    log(f"{tag}: {(r.records_per_s or 0.0) / 1e6:.3f} M rec/s, "
                        f"p50 {r.ns_per_record_p50 or 0.0:.1f} ns, drops {r.drops}")
                else:
                    log(f"{tag}: {r.status}: {r.skip_reason}")
                done.append(r)
    results = add_ratios([median_rep(v) for v in reps.values()])
    keep, floor = keepup_all(ws, results)
    log("snapshot of 1024 rings ...")
    snap = run_snapshot(ws, )
    log("monitor overhead A/B ...")
    ab = run_monitor_ab(ws, )
    log("monitor overhead, isolated from the consumer ...")
    iso = run_monitor_isolated(ws.shm_dir, 2 if ws.tiny else (8 if ws.quick else 64))
    monitor = [snap, ab, iso]
    extra = []
    if "fipsipc" in ws.cases or "fipsipc_batch" in ws.cases:
        from fipstop.bench.ring.proto import run_attach_ab, run_attach_isolated

        log("fipstop attached to the FIPS paper's prototype, A/B ...")
        attach = run_attach_ab(ws, ws.ab_pairs)
        monitor.append(attach)
        log("fipstop attached to the FIPS paper's prototype, isolated from the reader ...")
        attach_iso = run_attach_isolated(ws, ws.attach_pairs, run_s=0.2 if ws.tiny or ws.quick else 0.5)
        monitor.append(attach_iso)
        extra = proto_targets(results, attach, attach_iso)
    return {
        "results": results,
        "monitor": monitor,
        "keepup": keep,
        "keepup_stall_floor": floor,
        "regime": regime_summary(ws, regimes),
        "targets": targets(results, snap, ab, iso) + extra + issue21_targets(results, keep),
        "wall_s": time.monotonic() - started,
    }


def keepup_all(ws: Workspace, results: list[CaseResult]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The highest rate one consumer keeps up with, for fips_c and the plain SPSC queue (keepup.py),
    on the default ring and on a larger one (KEEPUP_RING_CAPACITIES; --quick: the default only), and
    the machine's stall floor on the consumer's CPU measured just before (stall.py): each search gets
    the rate that floor leaves its ring (``stall_floor_ceiling_per_s``)."""
    if ws.tiny:
        return [], None
    dur = QUICK_KEEPUP_S if ws.quick else KEEPUP_S
    log(f"stall floor: a spinning thread on the consumer's CPU for {dur:g} s ...")
    floor = stall.measure(ws, ws.harness, dur)
    gap = floor.get("max_gap_ns") if floor.get("status") == "ok" else None
    if gap is not None:
        log(f"stall floor: the consumer's CPU was taken for up to {gap / 1e6:.2f} ms")
    by = {(r.case, r.size_bytes): r for r in results}
    out = []
    rings = KEEPUP_RING_CAPACITIES[:1] if ws.quick else KEEPUP_RING_CAPACITIES
    for cap in rings:
        for case in ("fips_c", "boost_spsc"):
            if case not in ws.cases:
                continue
            for size in ws.sizes:
                r0 = by.get((case, size))

                def probe(rate: float, case: str = case, size: int = size,
                          cap: int = cap) -> tuple[CaseResult, dict[str, Any]]:
                    reg = regime.measure(ws, ws.harness)
                    if case == "fips_c":
                        res = run_fips(ws, case, size, duration=dur, rate=rate, ring_capacity=cap)
                    else:
                        res = run_peer(ws, case, size, duration=dur, rate=rate, ring_capacity=cap)
                    return res, reg

                found = keepup.search(case, size, r0.attempted_per_s if r0 and r0.status == "ok" else None,
                                      probe, ring_capacity=cap)
                out.append({**found, "seconds_per_probe": dur, "ring_capacity_bytes": cap,
                            "stall_floor_max_gap_ns": gap,
                            "stall_floor_ceiling_per_s": keepup.stall_ceiling(cap, size, gap,
                                                                              framed=case != "boost_spsc")})
    return out, floor


def regime_summary(ws: Workspace, rts: list[float]) -> dict[str, Any]:
    """The round trips timed before the cases: what regime the run was in."""
    load = list(os.getloadavg())
    if not rts:
        return {"status": "skipped", "reason": "no ping-pong (C harness unavailable or one CPU)",
                "loadavg_start": ws.loadavg_start, "loadavg_end": load}
    fast = sum(1 for x in rts if regime.regime_of(x) == "fast")
    return {"status": "ok", "round_trip_ns_min": min(rts), "round_trip_ns_median": statistics.median(rts),
            "round_trip_ns_max": max(rts), "runs_fast": fast, "runs_slow": len(rts) - fast,
            "slow_above_ns": regime.SLOW_ROUND_TRIP_NS,
            "method": "ringbench pingpong: median of 15 rounds of 2000 round trips of one cache line between the "
                      "producer's and the consumer's CPU, just before each case run",
            "loadavg_start": ws.loadavg_start, "loadavg_end": load, "cpus": os.cpu_count()}


def params(ws: Workspace) -> dict[str, Any]:
    return {
        "duration_s_per_case": ws.duration,
        "quick": ws.quick,
        "sizes_bytes": list(ws.sizes),
        "cases": list(ws.cases),
        "ring_capacity_bytes": ws.ring_capacity,
        "reps": ws.reps,
        "reps_note": "rounds run round-robin over all (size, case); each result is its median round by "
        "records_per_s, results[].reps lists every round",
        "consumer_policy": f"C consumer process: fips_consumer_read(max 4096) + fips_batch_next + "
        f"fips_consumer_release; after a read of < {CONSUMER_MIN_BATCH} records (or none) it busy-waits "
        f"{ws.consumer_backoff_us:g} us locally so records accumulate instead of polling the producer's "
        "head cache line back to back",
        "lat_batch": LAT_BATCH,
        "log_batch": LOG_BATCH,
        "latency_method": LATENCY_METHOD,
        "records_per_s": "records accepted (not dropped) by the transport per second of producer time",
        "ratios": "fips_c_over_case = records_per_s(fips_c) / records_per_s(case), same size; "
        "case_over_none = records_per_s(case) / records_per_s(none)",
        "record": "'bench ring seq=<16 hex digits> ' + 'x' filler + '\\n', exactly size_bytes; "
        "C cases format it per record into a local buffer holding the template (16 hex digits of a "
        "counter, printf-free); "
        "Python cases log a pre-built bytes object",
        "pinning": ws.pin_note,
        "nice": ws.nice,
        "producer_cpu": ws.prod_cpu,
        "consumer_cpu": ws.cons_cpu,
        "shm_dir": str(ws.shm_dir.parent),
        "loadavg_at_start": ws.loadavg_start,
        "monitor_hz": MONITOR_HZ,
        "snapshot_rings": SNAP_RINGS,
        "snapshot_iters": ws.snap_iters,
        "monitor_ab_pairs": ws.ab_pairs,
        "build": ws.build_info,
        "rsyslogd": ws.rsyslogd,
    }


def main(config: RingConfig) -> int:
    """Run ``fipstop bench ring``, publish the result (``--against``: the A/B of against.py instead)."""
    if config.against:
        return against_main(config)
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    ws = Workspace(config)
    try:
        body = run(ws)
    finally:
        ws.cleanup()
    doc = to_json(
        {
            "bench": "ring",
            "schema": SCHEMA,
            "command": config.output.command,
            "date": now.isoformat().replace("+00:00", "Z"),
            "machine": machine_info(),
            "params": params(ws),
            "results": body["results"],
            "monitor": body["monitor"],
            "regime": body["regime"],
            "keepup": body["keepup"],
            "keepup_stall_floor": body["keepup_stall_floor"],
            "targets": body["targets"],
            "wall_s": round(body["wall_s"], 2),
        }
    )
    publish("ring", doc, config.output, now, render_table, log)
    return 0
