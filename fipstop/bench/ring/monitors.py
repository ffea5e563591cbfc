"""What a monitor costs: the latency of one snapshot of 1024 live rings, and a
producer's throughput with and without a monitor attached (interleaved A/B
with the consumer draining, and isolated from it: bench/ring/monitor_ab.c)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import FIPS_SRC, build_c, source
from fipstop.bench.results import output_line
from fipstop.bench.ring.cases import run_fips
from fipstop.bench.ring.children import Child, parse_json_lines, run_to_end
from fipstop.bench.ring.intervals import median_ci
from fipstop.bench.ring.spec import (
    AB_RING_CAPACITY,
    DISTURBED_WAIT,
    MONITOR_HZ,
    SNAP_RING_CAPACITY,
    SNAP_RINGS,
    TARGET_SIZE,
)
from fipstop.bench.ring.workspace import Workspace

__all__ = ["MONITOR_AB_SRC", "median_ci", "run_monitor_ab", "run_monitor_isolated", "run_snapshot"]

MONITOR_AB_SRC = source("ring/monitor_ab.c")


def run_snapshot(ws: Workspace) -> dict[str, Any]:
    res: dict[str, Any] = {
        "name": "monitor_snapshot_1024_rings",
        "rings": SNAP_RINGS,
        "ring_capacity_bytes": SNAP_RING_CAPACITY,
        "iters": ws.snap_iters,
        "setup": f"one process with {SNAP_RINGS} live threads, each logged one record and waits "
        "(1024 ACTIVE rings), one registered consumer; default max_consumers",
    }
    if ws.harness is None:
        res["status"] = "skipped"
        res["skip_reason"] = ws.harness_reason
        return res
    dom = f"{ws.tag}-snap"
    ws.unlink_domain(dom)
    hold = Child(
        [
            str(ws.harness),
            "hold",
            "--shm-dir",
            str(ws.shm_dir),
            "--domain",
            dom,
            "--threads",
            str(SNAP_RINGS),
            "--max-rings",
            str(SNAP_RINGS),
            "--ring-capacity",
            str(SNAP_RING_CAPACITY),
        ],
        stdin=True,
    )
    try:
        why = hold.wait_ready(timeout=60)
        if why:
            res["status"] = "error"
            res["skip_reason"] = f"holder failed: {why}"
            return res
        res["holder"] = parse_json_lines(hold.ready_line)
        argv = [
            str(ws.harness),
            "snap",
            "--shm-dir",
            str(ws.shm_dir),
            "--domain",
            dom,
            "--iters",
            str(ws.snap_iters),
        ]
        if ws.prod_cpu is not None:
            argv += ["--cpu", str(ws.prod_cpu)]
        c, why = run_to_end(argv, 120, preexec=ws.preexec())
        if c is None:
            res["c"] = {"status": "error", "skip_reason": why}
        else:
            c["status"] = "ok"
            c["call"] = "fips_monitor_snapshot (C, caller-provided arrays)"
            res["c"] = c
        res["python"] = py_snapshot(ws, dom)
        res["status"] = "ok"
    finally:
        hold.stop()
        hold.kill()
        ws.unlink_domain(dom)
    return res


def py_snapshot(ws: Workspace, dom: str) -> dict[str, Any]:
    """Monitor.snapshot() timed in a child process (pinned and niced like the C side)."""
    if ws.py_reason:
        return {"status": "skipped", "skip_reason": ws.py_reason}
    argv = [
        sys.executable,
        "-m",
        "fipstop.bench.ring.pychild",
        "snap",
        "--shm-dir",
        str(ws.shm_dir),
        "--domain",
        dom,
        "--iters",
        str(ws.snap_iters),
    ]
    if ws.prod_cpu is not None:
        argv += ["--cpu", str(ws.prod_cpu)]
    out, why = run_to_end(argv, 120, env=ws.py_env(), preexec=ws.preexec())
    if out is None:
        return {"status": "error", "skip_reason": why}
    return out


def run_monitor_ab(
    ws: Workspace,
    *,
    name: str = "monitor_overhead_10hz",
    monitor_argv: Callable[[str], list[str]] | None = None,
    monitor_desc: str | None = None,
    duration: float | None = None,
) -> dict[str, Any]:
    """Producer throughput without / with a monitor attached, interleaved
    pairs; the monitor is the C harness at MONITOR_HZ unless
    ``monitor_argv`` gives another (see run_fips)."""
    ab_duration = duration if duration is not None else ws.ab_duration
    res: dict[str, Any] = {
        "name": name,
        "case": "fips_c",
        "size_bytes": TARGET_SIZE,
        "monitor": monitor_desc
        or f"separate C process calling fips_monitor_snapshot at {MONITOR_HZ:g} Hz (unpinned)",
        "method": "runs interleaved in pairs, order alternating (AB, BA, ...); ratio = records/s with "
        "monitor / without, per pair; reported: median of the pair ratios and the pooled ratio",
        "pairs": ws.ab_pairs,
        "duration_s_per_run": ab_duration,
        "ring_capacity_bytes": AB_RING_CAPACITY,
        "ring_note": "a larger ring than the cases' so that a consumer hiccup (a scheduler slice of other "
        "work) does not turn into drops, which would swamp a 1 % effect",
    }
    if ws.harness is None:
        res["status"] = "skipped"
        res["skip_reason"] = ws.harness_reason
        return res
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    for i in range(ws.ab_pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        pair: dict[bool, float] = {}
        for with_mon in order:
            r = run_fips(ws,
                "fips_c",
                TARGET_SIZE,
                monitor=with_mon,
                domain=f"{ws.tag}-ab{i}{int(with_mon)}",
                duration=ab_duration,
                ring_capacity=AB_RING_CAPACITY,
                monitor_argv=monitor_argv,
            )
            if r.status != "ok" or not r.records_per_s:
                res["status"] = "error"
                res["skip_reason"] = r.skip_reason
                res["runs"] = runs
                return res
            pair[with_mon] = r.records_per_s
            runs.append(
                {
                    "pair": i,
                    "monitor": with_mon,
                    "disturbed": r.disturbed,
                    "cpu_share": r.cpu_share,
                    "records_per_s": r.records_per_s,
                    "attempted_per_s": r.attempted_per_s,
                    "drops": r.drops,
                    "monitor_snapshots": r.drop_detail.get("monitor_snapshots"),
                    **({"monitor_result": r.drop_detail["monitor_result"]}
                       if monitor_argv is not None and r.drop_detail.get("monitor_result") else {}),
                }
            )
        ratios.append(pair[True] / pair[False])
    calm_pairs = [
        i for i in range(ws.ab_pairs) if not any(r["disturbed"] for r in runs if r["pair"] == i)
    ]
    use = calm_pairs or list(range(ws.ab_pairs))
    a = [r["records_per_s"] for r in runs if not r["monitor"] and r["pair"] in use]
    b = [r["records_per_s"] for r in runs if r["monitor"] and r["pair"] in use]
    med = statistics.median([ratios[i] for i in use])
    res.update(
        {
            "status": "ok",
            "runs": runs,
            "pair_ratios": ratios,
            "pairs_used": use,
            "pairs_used_note": "pairs where neither run was disturbed (producer and consumer waited "
            f"runnable <= {DISTURBED_WAIT:g} of the wall time); all pairs when none was",
            "ratio_median": med,
            "ratio_pooled": (sum(b) / len(b)) / (sum(a) / len(a)),
            "attempted_ratio_median": statistics.median(
                [
                    wb["attempted_per_s"] / wa["attempted_per_s"]
                    for wa in runs
                    for wb in runs
                    if wa["pair"] == wb["pair"] and wa["pair"] in use and not wa["monitor"] and wb["monitor"]
                ]
            ),
            "change_pct": (med - 1.0) * 100.0,
            "spread_pct": (max(ratios[i] for i in use) - min(ratios[i] for i in use)) * 100.0,
        }
    )
    return res


def run_monitor_isolated(shm_dir: Path, pairs: int) -> dict[str, Any]:
    """What a monitor costs a producer without a concurrent consumer's noise
    (bench/ring/monitor_ab.c): paired runs into a ring emptied in between,
    with and without a monitor process snapshotting at 10 Hz, and back to
    back (an upper bound). Ratio = throughput with / without."""
    binary, why, build = build_c("monitor_ab", (MONITOR_AB_SRC, FIPS_SRC))
    if binary is None:
        return {"name": "monitor_overhead_isolated", "status": "skipped", "skip_reason": why}
    records = 400_000
    out: dict[str, Any] = {
        "name": "monitor_overhead_isolated",
        "status": "ok",
        "method": "monitor_ab.c: producer pinned to CPU 0 logs 10 x 400k records of 128 B per run into a 64 MiB "
                  "ring that a consumer in the same process empties (untimed) before each fill, so no "
                  "concurrent consumer and no drop; runs with and without a monitor process (CPU 1) "
                  "alternate AB/BA, each run forking a child on CPU 1 and waiting 20 ms before timing "
                  "(only in 'with' does the child snapshot); ratio = throughput with / without per pair; "
                  "interval = ~95 % order-statistic interval of the median",
        "build_command": build.get("build_command", build.get("binary", "")),
        "records_per_run": records * 10,
        "pairs": pairs,
    }
    for label, hz in (("10hz", 10.0), ("back_to_back", 0.0)):
        run = subprocess.run([str(binary), str(shm_dir), str(records), f"{hz:g}", str(pairs)],
                             capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            return {**out, "status": "skipped", "skip_reason": output_line(run.stderr, 240)}
        ratios = []
        for line in run.stdout.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "pair":
                without_ns, with_ns = int(parts[2]), int(parts[3])
                ratios.append(without_ns / with_ns)
        med, lo, hi = median_ci(ratios)
        out[label] = {"hz": hz, "ratio_median": med, "ratio_ci95": [lo, hi], "pair_ratios": ratios}
    return out
