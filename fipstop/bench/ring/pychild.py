"""The Python side of ``fipstop bench ring``, run as a child process:
``python -m fipstop.bench.ring.pychild produce|snap ...``.

``produce`` logs through the binding (``Producer.log`` / ``log_batch``) or
runs the interpreter's floor (``len(record)``) for the case's duration and
prints one JSON line: attempted, accepted, per-record latency percentiles,
CPU share and run-queue wait, the ring's counters.  ``snap`` times
``Monitor.snapshot()`` and ``fipstop.ring.take_snapshot`` on a domain of
live rings.  A failure prints ``{"error": ...}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from fipstop import _fips
from fipstop.bench.ring.children import record_bytes
from fipstop.bench.ring.report import pct
from fipstop.bench.ring.spec import LAT_BATCH, LOG_BATCH, PY_CASES, RING_CAPACITY
from fipstop.ring import RingState, take_snapshot

_UFMT = {"<u1": "<B", "<u2": "<H", "<u4": "<I", "<u8": "<Q"}
_RING_KEYS = ("index", "state", "pid", "records_committed", "records_dropped", "bytes_dropped",
              "full_events", "high_water_bytes")


def _ring_rows(snap: _fips.RawSnapshot) -> list[dict[str, int]]:
    """Selected fields of every ring of a binding snapshot.

    ``Monitor.snapshot()`` returns ``(realtime_ns, mono_ns, rings, consumers, pos)`` with the C
    ``fips_ring_stat`` array as bytes, described by ``RING_STAT_FIELDS``/``RING_STAT_SIZE``.
    """
    raw = snap[2]
    size = int(_fips.RING_STAT_SIZE)
    fields = {name: (off, _UFMT[fmt]) for name, off, fmt in _fips.RING_STAT_FIELDS if fmt in _UFMT}
    rows = []
    for i in range(len(raw) // size):
        base = i * size
        rows.append(
            {k: struct.unpack_from(fields[k][1], raw, base + fields[k][0])[0] for k in _RING_KEYS if k in fields}
        )
    return rows


def _py_produce(ns: argparse.Namespace) -> int:
    pinned = None
    if ns.cpu is not None:
        try:
            os.sched_setaffinity(0, {ns.cpu})
            pinned = ns.cpu
        except OSError:
            pinned = None
    size = ns.size
    case = ns.case
    dom: _fips.Domain | None = None
    prod: _fips.Producer | None = None
    fn: Any  # the call measured: len, Producer.log or Producer.log_batch
    try:
        if case == "none_python":
            fn = len
        else:
            dom = _fips.Domain(ns.domain, shm_dir=ns.shm_dir, create=True, ring_capacity=ns.ring_capacity)
            prod = _fips.Producer(dom)
            fn = prod.log_batch if case == "fips_python_batch" else prod.log
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 3
    pc = time.perf_counter_ns
    dur = int(ns.duration * 1e9)
    lat: list[int] = []
    app = lat.append
    attempted = accepted = 0
    gc.disable()
    try:
        import resource

        who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
        ru0 = resource.getrusage(who)
    except (ImportError, OSError):
        resource = None  # type: ignore[assignment]
        ru0 = None
    wait0 = _runq_wait_ns()
    if case == "fips_python_batch":
        recs = [record_bytes(size, i) for i in range(LOG_BATCH)]
        fn(recs[:1])  # creates the ring outside the timed loop
        per = LOG_BATCH
        t0 = start = pc()
        end = start + dur
        while True:
            accepted += fn(recs)
            t1 = pc()
            app(t1 - t0)
            attempted += LOG_BATCH
            if t1 >= end:
                break
            t0 = t1
        attempted += 1
        accepted += 1
    else:
        rec = record_bytes(size, 0)
        fn(rec)  # creates the ring outside the timed loop
        per = LAT_BATCH
        r = range(LAT_BATCH)
        t0 = start = pc()
        end = start + dur
        while True:
            for _ in r:
                fn(rec)
            t1 = pc()
            app(t1 - t0)
            attempted += LAT_BATCH
            if t1 >= end:
                break
            t0 = t1
        attempted += 1
    elapsed = t1 - start
    cpu_share = invol = wait_share = None
    wait1 = _runq_wait_ns()
    if wait0 is not None and wait1 is not None and elapsed:
        wait_share = (wait1 - wait0) / elapsed
    if resource is not None and ru0 is not None:
        ru1 = resource.getrusage(who)
        cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        cpu_share = cpu_s / (elapsed / 1e9) if elapsed else None
        invol = ru1.ru_nivcsw - ru0.ru_nivcsw
    gc.enable()
    per_rec = sorted(x / per for x in lat)
    out: dict[str, Any] = {
        "case": case,
        "size": size,
        "elapsed_ns": elapsed,
        "attempted": attempted,
        "accepted": attempted if case == "none_python" else (accepted if case == "fips_python_batch" else None),
        "dropped": (attempted - accepted) if case == "fips_python_batch" else None,
        "errors": 0,
        "eagain": 0,
        "lat_batch": per,
        "lat_samples": len(per_rec),
        "ns_p50": pct(per_rec, 0.5),
        "ns_p99": pct(per_rec, 0.99),
        "pinned_cpu": pinned,
        "cpu_share": cpu_share,
        "runq_wait_share": wait_share,
        "invol_csw": invol,
    }
    if case != "none_python":
        out["note"] = "one untimed warm-up record created the ring and is included in the counts"
        ring = _py_ring_stats(ns)
        if ring:
            out["ring"] = ring
    for o in (prod, dom):
        if o is not None:
            try:
                o.close()
            except Exception:
                pass
    print(json.dumps(out), flush=True)
    return 0


def _py_snap(ns: argparse.Namespace) -> int:
    """Child: time Monitor.snapshot() (and fipstop.ring.take_snapshot) on an existing domain."""
    if ns.cpu is not None:
        try:
            os.sched_setaffinity(0, {ns.cpu})
        except OSError:
            pass
    try:
        mon = _fips.Monitor(ns.domain, ns.shm_dir)
        snap = mon.snapshot
        for _ in range(5):
            snap()
        lat: list[float] = []
        gc.disable()
        for _ in range(ns.iters):
            t0 = time.perf_counter_ns()
            s = snap()
            t1 = time.perf_counter_ns()
            lat.append((t1 - t0) / 1000.0)
            del s
        gc.enable()
        last = snap()
        wrapped = _py_wrapped_snapshot(mon, max(10, ns.iters // 4))
        mon.close()
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 3
    lat.sort()
    out: dict[str, Any] = {
        "status": "ok",
        "call": "fipstop._fips.Monitor.snapshot() (binding: C fips_monitor_snapshot into bytes objects)",
        "iters": len(lat),
        "us_p50": pct(lat, 0.5),
        "us_p99": pct(lat, 0.99),
        "us_min": lat[0],
        "us_max": lat[-1],
    }
    try:
        out["active_rings"] = sum(1 for r in _ring_rows(last) if r.get("state") == RingState.ACTIVE)
    except Exception:
        pass
    if wrapped:
        out["wrapped"] = wrapped
    print(json.dumps(out), flush=True)
    return 0


def _py_wrapped_snapshot(mon: _fips.Monitor, iters: int) -> dict[str, Any] | None:
    """fipstop.ring.take_snapshot (numpy views, what the dashboard uses)."""
    take = take_snapshot
    try:
        for _ in range(3):
            take(mon)
        lat: list[float] = []
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            take(mon)
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
    except Exception as exc:
        return {"status": "error", "skip_reason": f"{type(exc).__name__}: {exc}"}
    lat.sort()
    return {
        "status": "ok",
        "call": "fipstop.ring.take_snapshot(monitor)",
        "iters": len(lat),
        "us_p50": pct(lat, 0.5),
        "us_p99": pct(lat, 0.99),
    }


def _runq_wait_ns() -> int | None:
    """schedstat run_delay of the calling thread: ns spent runnable while another task had the CPU."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _py_ring_stats(ns: argparse.Namespace) -> dict[str, Any] | None:
    """records_committed/dropped of this process's ring, from a monitor snapshot."""
    try:
        mon = _fips.Monitor(ns.domain, ns.shm_dir)
        rows = _ring_rows(mon.snapshot())
        mon.close()
        pid = os.getpid()
        for i, r in enumerate(rows):
            if r.get("pid") == pid and r.get("records_committed"):
                out = {"index": r.get("index", i)}
                for k in ("records_committed", "records_dropped", "bytes_dropped", "full_events", "high_water_bytes"):
                    if k in r:
                        out[k] = int(r[k])
                return out
    except Exception:
        return None
    return None


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "produce":
        p = argparse.ArgumentParser(prog="python -m fipstop.bench.ring.pychild produce")
        p.add_argument("--case", required=True, choices=PY_CASES)
        p.add_argument("--size", type=int, required=True)
        p.add_argument("--duration", type=float, required=True)
        p.add_argument("--shm-dir", required=True)
        p.add_argument("--domain", required=True)
        p.add_argument("--ring-capacity", type=int, default=RING_CAPACITY)
        p.add_argument("--cpu", type=int, default=None)
        return _py_produce(p.parse_args(argv[1:]))
    if argv and argv[0] == "snap":
        p = argparse.ArgumentParser(prog="python -m fipstop.bench.ring.pychild snap")
        p.add_argument("--shm-dir", required=True)
        p.add_argument("--domain", required=True)
        p.add_argument("--iters", type=int, default=1000)
        p.add_argument("--cpu", type=int, default=None)
        return _py_snap(p.parse_args(argv[1:]))
    print("usage: python -m fipstop.bench.ring.pychild produce|snap ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
