"""What one syslog(3) call costs in the fips shim, next to a no-op syslog(3).

Why a separate measurement: named's queries/s on a shared 2-vCPU VM moves by
+-30 % between runs a few seconds apart, so the bind modes of
``fipstop bench bind`` cannot resolve a transport cost of a few per cent.
bench/bind/shimcall.c dlopen()s the shim and the no-op syslog(3) into one
process and times named's own call (``__syslog_chk`` with
``%s%s%s%s%s%s%s%s%s%s``) through each in turns a few milliseconds apart, so
host noise hits both sides of a pair alike; the difference per call is the
shim's cost.  A consumer (bench/bind/drain.c) drains the domain as in mode
``fips``.  With named's CPU per query measured in the same bench run
(mode ``null_syslog``), the cost per call becomes the throughput the shim
leaves named relative to that floor: us / (us + cost).
"""

from __future__ import annotations

import os
import select
import statistics
import subprocess
from pathlib import Path
from typing import Any

from fipstop import _fips
from fipstop.bench.bind.procs import stop_drain
from fipstop.bench.cbuild import build_c, source
from fipstop.bench.results import mean_ci
from fipstop.children import popen
from fipstop.ring import RingState, snapshot_domain

SHIMCALL_SRC = source("bind/shimcall.c")
CALLS = 1000          # per turn
PAIRS = 60
WORK_KIB = 256        # other memory read between two calls (named's work between two log lines)
RING_CAPACITY = 1 << 22
WARMUP_CALLS = 60_000  # > one lap of the ring: its pages faulted in


def measure_shim_call(shm: Path, shim: Path, nullsyslog: Path, drain: Path, named_us_per_query: float | None,
                      pairs: int = PAIRS) -> dict[str, Any]:
    """Run shimcall against a domain drained by ``drain``; return the cost per
    call (mean of pairs, 95 % t-interval) and what it predicts for named."""
    binary, why, build = build_c("shimcall", (SHIMCALL_SRC,), ("-D_FORTIFY_SOURCE=2", "-ldl"))
    out: dict[str, Any] = {
        "status": "ok",
        "method": f"bench/bind/shimcall.c: named's __syslog_chk call (\"%s\" x 10, a {WORK_KIB} KiB read of other "
                  f"memory between calls) through the shim and through a no-op syslog(3), both dlopen()ed in one "
                  f"process, {CALLS} calls per turn, {pairs} pairs A/B B/A; {WARMUP_CALLS} untimed calls first "
                  f"(the ring's pages faulted in); a C consumer drains the domain ({RING_CAPACITY >> 20} MiB "
                  "rings); cost = (shim - no-op) per call, mean with a 95 % t-interval",
        "build_command": build.get("build_command", build.get("binary", "")),
        "calls_per_turn": CALLS, "pairs": pairs, "work_kib": WORK_KIB,
    }
    if binary is None:
        return {**out, "status": "skipped", "reason": why}
    domain = "bench-shimcall"
    _fips.Domain(domain, str(shm), create=True, ring_capacity=RING_CAPACITY).close()
    dr = popen([str(drain), str(shm), domain, "shimcall", "query: "], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    consumer = None
    try:
        assert dr.stdout is not None
        ready = dr.stdout.readline() if select.select([dr.stdout], [], [], 15)[0] else ""
        if not ready.startswith("ready"):
            return {**out, "status": "error", "reason": f"drain did not start: {ready.strip()[:200] or 'no output'}"}
        env = dict(os.environ, FIPS_DOMAIN=domain, FIPS_SHM_DIR=str(shm), FIPS_SYSLOG_MISSING="drop")
        env.pop("LD_PRELOAD", None)
        run = subprocess.run([str(binary), str(shim), str(nullsyslog), str(CALLS), str(pairs), str(WORK_KIB),
                              str(WARMUP_CALLS)], capture_output=True, text=True, timeout=600, env=env)
    finally:
        consumer = stop_drain(dr)  # SIGTERM, its last JSON line
    if run.returncode != 0:
        return {**out, "status": "error", "reason": (run.stderr.strip().splitlines() or ["?"])[-1][:240]}
    null_ns, fips_ns, shim_dropped = [], [], None
    for line in run.stdout.splitlines():
        p = line.split()
        if len(p) == 4 and p[0] == "pair":
            null_ns.append(int(p[2]) / CALLS)
            fips_ns.append(int(p[3]) / CALLS)
        elif len(p) == 3 and p[:2] == ["shim", "dropped"]:
            shim_dropped = int(p[2])
    if len(null_ns) < 2:
        return {**out, "status": "error", "reason": "shimcall printed no pairs"}
    rings = [r for r in snapshot_domain(domain, shm).ring_stats() if r.state != RingState.FREE]
    try:
        (shm / f"fips.{domain}").unlink()
    except OSError:
        pass
    diff = [f - n for n, f in zip(null_ns, fips_ns)]
    m, lo, hi = mean_ci(diff)
    half = m - lo
    out.update(
        cost_ns_per_call=round(m, 1), cost_ns_ci95=[round(m - half, 1), round(m + half, 1)],
        noop_ns_per_call_median=round(statistics.median(null_ns), 1),
        shim_ns_per_call_median=round(statistics.median(fips_ns), 1),
        shim_dropped_no_domain=shim_dropped,
        consumer=consumer,
    )
    out["ring"] = {"records_committed": sum(int(r.records_committed) for r in rings),
                   "records_dropped": sum(int(r.records_dropped) for r in rings)}
    lost = (out["ring"]["records_dropped"] + (shim_dropped or 0)
            + int((out["consumer"] or {}).get("lost") or 0))
    if lost:
        # a drop is cheaper than a record: the figure would understate the cost
        out["status"] = "warning"
        out["reason"] = f"{lost} lines dropped during the measurement: the cost per call is understated"
    if named_us_per_query:
        us = named_us_per_query
        out["named_us_per_query_null_syslog"] = us
        out["predicted_ratio_to_null_syslog"] = round(us / (us + m / 1000), 4)
        out["predicted_ratio_ci95"] = [round(us / (us + (m + half) / 1000), 4),
                                       round(us / (us + max(0.0, m - half) / 1000), 4)]
    return out

