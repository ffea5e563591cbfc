"""The shared state of one ``fipstop bench ring`` run: what every case needs.

Durations and rounds from the config, the CPUs the producer and the
consumer are pinned to, the private shm dir and temp dir, the C harness and
the reasons a part cannot run; the argv of a producer and how its JSON line
becomes a :class:`fipstop.bench.ring.spec.CaseResult`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import PACKAGE_DIR
from fipstop.bench.ring.children import Child, Preexec, pin_preexec, python_binding_reason
from fipstop.bench.ring.spec import (
    CASES,
    CONSUMER_BACKOFF_US,
    DEFAULT_DURATION_S,
    DEFAULT_REPS,
    DISTURBED_WAIT,
    ENV_DURATION,
    ENV_NICE,
    LAT_BATCH,
    QUICK_DURATION_S,
    RING_CAPACITY,
    SIZES,
    CaseResult,
    RingConfig,
)

__all__ = ["Workspace"]


class Workspace:
    def __init__(self, config: RingConfig) -> None:
        self.config = config
        env_d = os.environ.get(ENV_DURATION)
        dur = config.duration
        if dur is None and env_d:
            try:
                dur = float(env_d)
            except ValueError:
                dur = None
        self.quick = config.quick
        self.duration = float(dur) if dur else (QUICK_DURATION_S if self.quick else DEFAULT_DURATION_S)
        self.tiny = self.duration < 0.2
        self.cases = tuple(c for c in CASES if not config.cases or c in config.cases)
        self.sizes = tuple(config.sizes) if config.sizes else SIZES
        # A/B monitor runs: many short interleaved pairs beat bursty noise better than few long ones
        self.ab_pairs = 2 if self.tiny else (4 if self.quick else 8)
        # the prototype's writer alone (proto.run_attach_isolated): --attach-pairs, else by the run's length
        self.attach_pairs = config.attach_pairs or (2 if self.tiny else (8 if self.quick else 80))
        self.ab_duration = self.duration if (self.quick or self.tiny) else max(0.3, self.duration / 2)
        self.snap_iters = 50 if self.tiny else (300 if self.quick else 2000)
        self.ring_capacity = RING_CAPACITY
        self.reps = int(config.reps) if config.reps else (1 if (self.quick or self.tiny) else DEFAULT_REPS)
        self.consumer_backoff_us = CONSUMER_BACKOFF_US
        nice = config.nice
        if nice is None:
            try:
                nice = int(os.environ.get(ENV_NICE, "0"))
            except ValueError:
                nice = 0
        self.nice = int(nice)
        Child.nice = self.nice
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except OSError:
            cpus = []
        if len(cpus) >= 2:
            self.prod_cpu: int | None = cpus[0]
            self.cons_cpu: int | None = cpus[1]
            self.pin_note = (
                f"producer pinned to CPU {cpus[0]}; consumer / receiver / rsyslogd pinned to CPU {cpus[1]}"
            )
        else:
            self.prod_cpu = self.cons_cpu = None
            self.pin_note = f"not pinned: only {len(cpus) or 1} CPU available"
        shm_base = config.shm_dir or os.environ.get("FIPS_SHM_DIR") or "/dev/shm"
        if not os.path.isdir(shm_base):
            shm_base = tempfile.gettempdir()
        self.shm_dir = Path(tempfile.mkdtemp(prefix="fipstop-bench-", dir=shm_base))
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-"))
        self.tag = f"b{os.getpid()}"
        self.harness: Path | None = None
        self.harness_reason: str | None = None
        self.harness_so: Path | None = None  # fips_c_so (children.build_harness_so)
        self.harness_so_reason: str | None = None
        self.build_info: dict[str, Any] = {}
        self.py_reason = python_binding_reason()
        self.rsyslogd = shutil.which("rsyslogd") or next(
            (p for p in ("/usr/sbin/rsyslogd", "/sbin/rsyslogd") if os.access(p, os.X_OK)), None
        )
        self.notes: list[str] = []
        self.loadavg_start: list[float] | None = None

    def py_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # the child imports this very fipstop, installed or not
        top = str(PACKAGE_DIR.parent)
        env["PYTHONPATH"] = top + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def domain(self, case: str, size: int) -> str:
        return f"{self.tag}-{case}-{size}"

    def unlink_domain(self, name: str) -> None:
        try:
            (self.shm_dir / f"fips.{name}").unlink()
        except OSError:
            pass

    def cleanup(self) -> None:
        shutil.rmtree(self.shm_dir, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def produce_argv(self, case: str, size: int, duration: float | None = None, *,
                     harness: Path | None = None, **kw: Any) -> list[str]:
        harness = harness or self.harness
        assert harness is not None
        argv = [
            str(harness),
            "produce",
            "--case",
            case,
            "--size",
            str(size),
            "--duration",
            f"{duration or self.duration:g}",
            "--lat-batch",
            str(LAT_BATCH),
        ]
        if self.prod_cpu is not None:
            argv += ["--cpu", str(self.prod_cpu)]
        for k, v in kw.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        return argv

    def fips_args(self, domain: str) -> dict[str, Any]:
        return {"shm_dir": self.shm_dir, "domain": domain, "ring_capacity": self.ring_capacity}

    def preexec(self) -> Preexec | None:
        return pin_preexec(None, self.nice)

    def timeout(self) -> float:
        return self.duration + 60.0

    def skip(self, case: str, size: int, reason: str, status: str = "skipped") -> CaseResult:
        return CaseResult(case=case, size_bytes=size, status=status, skip_reason=reason)

    def from_producer(
        self,
        case: str,
        size: int,
        p: dict[str, Any],
        *,
        delivered: int | None,
        drops: int,
        drop_detail: dict[str, Any],
        pinned: dict[str, Any],
        notes: str = "",
        accepted: int | None = None,
        consumer: dict[str, Any] | None = None,
    ) -> CaseResult:
        elapsed = float(p["elapsed_ns"]) / 1e9
        acc = int(p["accepted"]) if accepted is None else accepted
        share: dict[str, Any] = {}
        waits: list[float] = []
        for who, src in (("producer", p), ("consumer", consumer or {})):
            if src.get("cpu_share") is not None:
                share[who] = round(float(src["cpu_share"]), 4)
                share[f"{who}_invol_csw"] = src.get("invol_csw")
            w = src.get("runq_wait_share")
            if w is not None and w >= 0:
                share[f"{who}_runq_wait"] = round(float(w), 4)
                waits.append(float(w))
        disturbed = (max(waits) > DISTURBED_WAIT) if waits else None
        return CaseResult(
            case=case,
            size_bytes=size,
            status="ok",
            records_per_s=acc / elapsed if elapsed > 0 else None,
            delivered_per_s=delivered / elapsed if delivered is not None and elapsed > 0 else None,
            attempted_per_s=int(p["attempted"]) / elapsed if elapsed > 0 else None,
            ns_per_record_p50=float(p["ns_p50"]),
            ns_per_record_p99=float(p["ns_p99"]),
            drops=drops,
            drop_detail=drop_detail,
            delivered=delivered,
            attempted=int(p["attempted"]),
            elapsed_s=elapsed,
            pinned=pinned,
            notes=notes,
            cpu_share=share,
            disturbed=disturbed,
        )
