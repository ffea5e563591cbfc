"""The FIPS paper's prototype as cases of ``fipstop bench ring``: ``fipsipc`` and ``fipsipc_batch``.

The harness (bench/ring/fipsipc_bench.c, fipstop's code) is built with the
prototype's own ring library by :mod:`fipstop.bench.fipsipc_proto` - from
its source at ``$FIPSIPC_SRC``, never shipped; without it (or libconfig-dev)
both cases are skipped with the reason.  It runs the same records, timing
and JSON as ringbench's libfips cases, on a ring of the same byte capacity
(slots of exactly the record size), with one reader process draining:
``fipsipc`` takes one slot per record, ``fipsipc_batch`` ten per call (the
batch of the prototype's own programs).  A full ring drops and counts, as
libfips does by default.  ``libfips_over_case`` compares each with its
libfips counterpart (fips_c, fips_c_batch) of the same size.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import source
from fipstop.bench.fipsipc_proto import build_program, write_config
from fipstop.bench.ring.children import Child, run_to_end
from fipstop.bench.ring.intervals import median_ci
from fipstop.bench.ring.spec import CaseResult
from fipstop.bench.ring.workspace import Workspace
from fipstop.probes.fipsipc import FipsIpcProbe, ftok, read_sysvipc

__all__ = ["COUNTERPART", "PROTO_CASES", "run_attach_ab", "run_attach_isolated", "run_fipsipc"]

PROTO_CASES = ("fipsipc", "fipsipc_batch")
#: the libfips case each prototype case is compared with
COUNTERPART = {"fipsipc": "fips_c", "fipsipc_batch": "fips_c_batch"}
PROTO_BATCH = 10


def _remove(shm_name: Path) -> None:
    """The segment and semaphore a run that died may leave behind."""
    try:
        key = ftok(str(shm_name))
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        for s in read_sysvipc():
            if s.key == key:
                libc.shmctl(s.shmid, 0, None)  # IPC_RMID
    except OSError:
        pass
    try:
        os.unlink(f"/dev/shm/sem.{shm_name.name}_sem_open")
    except OSError:
        pass


def _run(ws: Workspace, binary: Path, case: str, size: int, *, sample_hz: float = 0.0, reader: bool = True,
         duration: float | None = None
         ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None, int, list[float]]:
    """One run: (producer JSON, consumer JSON, why it failed, ring slots, probe sample times in us).
    ``sample_hz``: meanwhile fipstop's FIPS-IPC probe samples the segment from this process.
    ``reader`` False: no reader, the segment in the prototype's OVERWRITE mode (its default), so the
    writer never waits and its rate is its own."""
    exp = max(4, (ws.ring_capacity // size).bit_length() - 1)  # slots of `size` bytes: the same capacity
    shm_name = ws.tmp / f"fipsipc-{case}-{size}"
    shm_name.touch()
    conf = write_config(ws.tmp / f"fipsipc-{case}-{size}.conf", str(shm_name), line_size=size,
                        line_count_exp=exp, segments=1, readers=1, reader_threads=1, sqe=1024,
                        overwrite=not reader)
    cpu = ["--cpu", str(ws.cons_cpu)] if ws.cons_cpu is not None else []
    cons = Child([str(binary), "consume", "--conf", str(conf), "--backoff-us", f"{ws.consumer_backoff_us:g}", *cpu]) \
        if reader else None
    times: list[float] = []
    stop = threading.Event()

    def sampler() -> None:
        probe = FipsIpcProbe([str(shm_name)], discover=False)
        while not stop.wait(1.0 / sample_hz):
            t0 = time.perf_counter_ns()
            probe.sample()
            times.append((time.perf_counter_ns() - t0) / 1e3)

    th = threading.Thread(target=sampler, daemon=True) if sample_hz > 0 else None
    c: dict[str, Any] | None = None
    try:
        failed = cons.wait_ready() if cons is not None else None
        if failed:
            return None, None, f"consumer failed: {failed}", 1 << exp, times
        if th is not None:
            th.start()
        argv = [str(binary), "produce", "--case", case, "--size", str(size), "--duration",
                f"{duration or ws.duration:g}", "--conf", str(conf)] + (
                    ["--cpu", str(ws.prod_cpu)] if ws.prod_cpu is not None else [])
        p, failed = run_to_end(argv, ws.timeout(), preexec=ws.preexec())
        stop.set()
        if th is not None:
            th.join()
        c = cons.stop() if cons is not None else None
    finally:
        stop.set()
        if cons is not None:
            cons.kill()
        _remove(shm_name)
    if p is None:
        return None, c, f"producer failed: {failed}", 1 << exp, times
    return p, c, None, 1 << exp, times


def _ab_pairs(ws: Workspace, binary: Path, pairs: int, size: int, hz: float, *, reader: bool = True,
              duration: float | None = None) -> tuple[list[float], list[float], str | None]:
    """``pairs`` AB/BA pairs of fipsipc runs with and without the probe sampling at ``hz``:
    (records/s with / without per pair, every sample's time in us, None) or ([], [], why a run failed)."""
    ratios: list[float] = []
    times: list[float] = []
    for i in range(pairs):
        rate: dict[bool, float] = {}
        for with_probe in ((True, False) if i % 2 == 0 else (False, True)):
            p, _c, failed, _slots, t = _run(ws, binary, "fipsipc", size, sample_hz=hz if with_probe else 0.0,
                                            reader=reader, duration=duration)
            if p is None or not float(p["elapsed_ns"]):
                return [], [], failed or "no result"
            rate[with_probe] = int(p["accepted"]) / (float(p["elapsed_ns"]) / 1e9)
            times.extend(t)
        if rate[False] > 0:
            ratios.append(rate[True] / rate[False])
    return ratios, times, None


def run_attach_isolated(ws: Workspace, pairs: int, size: int = 128, hz: float = 10.0,
                        run_s: float = 0.5) -> dict[str, Any]:
    """What fipstop attaching costs the prototype's writer, without a reader's noise: ``pairs``
    AB/BA pairs of ``run_s`` runs of one fipsipc writer alone in an OVERWRITE segment (nothing waits,
    nothing drops), with and without the probe sampling at ``hz``; the median ratio with its ~95 %
    order-statistic interval (a reader's pace moves the paired runs of run_attach_ab by up to 10 %)."""
    name = f"fipsipc_attach_isolated_{hz:g}hz"
    binary, why = build_program("fipsipc_bench", (source("ring/fipsipc_bench.c"),))
    if binary is None:
        return {"name": name, "status": "skipped", "skip_reason": why}
    ratios, times, failed = _ab_pairs(ws, binary, pairs, size, hz, reader=False, duration=run_s)
    if failed is not None:
        return {"name": name, "status": "error", "skip_reason": failed}
    samples = len(times)
    med, lo, hi = median_ci(ratios)
    return {
        "name": name, "status": "ok", "pairs": pairs, "size_bytes": size, "hz": hz, "run_s": run_s,
        "pair_ratios": [round(r, 4) for r in ratios], "ratio_median": med, "ratio_ci95": [lo, hi],
        "samples": samples,
        "method": f"records/s of one fipsipc writer (CPU {ws.prod_cpu}) alone in an OVERWRITE segment, no reader, "
        f"{run_s:g} s a run, with / without fipstop's FIPS-IPC probe sampling it at {hz:g} Hz from the bench "
        "process (unpinned), AB/BA pairs; interval = ~95 % order-statistic interval of the median",
    }


def run_fipsipc(ws: Workspace, case: str, size: int) -> CaseResult:
    binary, why = build_program("fipsipc_bench", (source("ring/fipsipc_bench.c"),))
    if binary is None:
        return ws.skip(case, size, why)
    p, c, failed, slots, _ = _run(ws, binary, case, size)
    if p is None:
        return ws.skip(case, size, failed or "producer failed", "error")
    delivered = int(c["records"]) if c else None
    return ws.from_producer(
        case, size, p, delivered=delivered, drops=int(p["dropped"]),
        drop_detail={"source": "the producer's NO_SPACE returns (the prototype counts nothing)",
                     "slots": slots, "line_size": size},
        consumer=c,
        pinned={"producer_cpu": p.get("pinned_cpu"), "consumer_cpu": c.get("pinned_cpu") if c else None,
                "consumer": f"separate process (C, fips_buf_read of {PROTO_BATCH}, else 1, + fips_buf_return)"},
        notes=f"FIPS-IPC prototype ring (fips_buf.c, -O3 -march=native), {slots} slots of {size} B, "
        f"{'10 slots' if case == 'fipsipc_batch' else 'one slot'} per call; compare with "
        f"{COUNTERPART[case]}")


def run_attach_ab(ws: Workspace, pairs: int, size: int = 128, hz: float = 10.0) -> dict[str, Any]:
    """What fipstop attaching costs the prototype: ``pairs`` AB/BA pairs of fipsipc runs with and
    without the FIPS-IPC probe sampling at ``hz`` (shmat SHM_RDONLY, copy, shmdt), and the sample time."""
    name = f"fipsipc_attach_{hz:g}hz"
    binary, why = build_program("fipsipc_bench", (source("ring/fipsipc_bench.c"),))
    if binary is None:
        return {"name": name, "status": "skipped", "skip_reason": why}
    ratios, times, failed = _ab_pairs(ws, binary, pairs, size, hz)
    if failed is not None:
        return {"name": name, "status": "error", "skip_reason": failed}
    ratios.sort()
    times.sort()
    med = ratios[len(ratios) // 2] if ratios else None
    return {
        "name": name, "status": "ok", "pairs": pairs, "size_bytes": size, "hz": hz,
        "pair_ratios": [round(r, 4) for r in ratios], "ratio_median": med,
        "spread_pct": round(100 * (ratios[-1] - ratios[0]), 1) if ratios else None,
        "sample_us_p50": times[len(times) // 2] if times else None,
        "sample_us_p99": times[min(len(times) - 1, int(0.99 * len(times)))] if times else None,
        "samples": len(times),
        "method": "records/s of fipsipc (one writer, one reader draining) with / without fipstop's FIPS-IPC probe "
        f"sampling the segment at {hz:g} Hz from the bench process (unpinned), AB/BA pairs; sample time = "
        "FipsIpcProbe.sample() wall time (reads /proc/sysvipc/shm, shmat SHM_RDONLY, copies, shmdt)",
    }
