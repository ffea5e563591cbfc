"""``fipstop bench ring``: the side-by-side ring benchmark of issue #2.

One run measures, for payloads of 64/128/256 bytes, one producer thread
logging for a fixed time through each transport:

========================  ==================================================
case                      what the producer thread does per record
========================  ==================================================
``none``                  formats the record into a local buffer (baseline)
``fips_c``                ... then ``fips_log`` (C); a C consumer process drains
``fips_c_batch``          ... 256 records, then one ``fips_log_batch``
``none_python``           Python loop calling ``len(record)`` (Python floor)
``fips_python``           ``Producer.log(record)`` through the binding
``fips_python_batch``     ``Producer.log_batch(list_of_256)``
``syslog``                ``syslog(3)`` to an rsyslogd the bench starts
``file``                  ``write(2)`` of the line to a file (O_APPEND)
``unix_dgram``            ``send(2)`` on a unix datagram socket to a receiver
========================  ==================================================

plus the latency of a monitor snapshot of a domain with 1024 live rings and
the producer throughput with and without a monitor snapshotting at 10 Hz
(interleaved A/B runs).  The issue's targets are reported as target vs
measured with pass/fail; nothing here asserts them.

The C side is ``bench/ring/ringbench.c``, built on demand with ``cc -O2``
together with ``fipstop/csrc/fips.c`` into ``build/bench/`` (or a temporary
directory when the tree is read-only).  The Python cases run in a child
process (``python -m fipstop.bench.ring _pyproducer ...``).

``FIPSTOP_BENCH_DURATION`` (seconds per case) overrides the duration; the unit
test sets it to 0.05.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gc
import json
import os
import select
import shlex
import shutil
import signal
import statistics
import math
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import build_c
from fipstop.bench.results import machine_info, output_line, publish

SCHEMA = 1
SIZES: tuple[int, ...] = (64, 128, 256)
C_CASES = ("none", "fips_c", "fips_c_batch")
PY_CASES = ("none_python", "fips_python", "fips_python_batch")
OTHER_CASES = ("syslog", "file", "unix_dgram")
CASES: tuple[str, ...] = C_CASES + PY_CASES + OTHER_CASES
FIPS_CASES = ("fips_c", "fips_c_batch", "fips_python", "fips_python_batch")

DEFAULT_DURATION_S = 2.0
QUICK_DURATION_S = 0.3
ENV_DURATION = "FIPSTOP_BENCH_DURATION"
ENV_NICE = "FIPSTOP_BENCH_NICE"  # nice level for the bench's own processes (negative needs root)
LAT_BATCH = 64  # records per timed batch (single-record cases)
LOG_BATCH = 256  # records per log_batch call
RING_CAPACITY = 1 << 20  # libfips default, bytes per ring
AB_RING_CAPACITY = 16 << 20  # monitor A/B runs: ~5 ms of buffer at 20 M records/s of 128 B
SNAP_RINGS = 1024
SNAP_RING_CAPACITY = 64 * 1024
MONITOR_HZ = 10.0
TARGET_SIZE = 128
DEFAULT_REPS = 3  # rounds over all cases (1 with --quick); each cell reports its median round
CONSUMER_BACKOFF_US = 20.0  # consumer busy-waits this long after a read of < CONSUMER_MIN_BATCH records
CONSUMER_MIN_BATCH = 64
DISTURBED_WAIT = 0.05  # a round whose producer/consumer waited runnable longer than this share was disturbed

LATENCY_METHOD = (
    "per-record ns = wall time (CLOCK_MONOTONIC, read once per batch) of a batch of "
    f"{LAT_BATCH} consecutive records / {LAT_BATCH}; for fips_c_batch and fips_python_batch "
    f"the batch is one log_batch call of {LOG_BATCH} records / {LOG_BATCH}; p50/p99 are over "
    "all batches of the run (so p99 is a 99th-percentile batch average, not a single record)"
)

REPO_ROOT = Path(__file__).resolve().parents[2]
HARNESS_SRC = REPO_ROOT / "bench" / "ring" / "ringbench.c"
FIPS_SRC = REPO_ROOT / "fipstop" / "csrc" / "fips.c"
FIPS_HDR = REPO_ROOT / "fipstop" / "csrc" / "fips.h"
CFLAGS = ("-O2", "-std=c11", "-D_GNU_SOURCE", "-pthread")


# --------------------------------------------------------------------------- #
# result records
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class CaseResult:
    """One (case, payload size) cell of the table."""

    case: str
    size_bytes: int
    status: str  # "ok" | "skipped" | "error"
    skip_reason: str | None = None
    records_per_s: float | None = None  # records accepted (not dropped) per second
    attempted_per_s: float | None = None  # log/send calls per second
    ns_per_record_p50: float | None = None
    ns_per_record_p99: float | None = None
    drops: int | None = None  # fips: ring records_dropped; others: send errors + EAGAIN
    drop_detail: dict[str, Any] = field(default_factory=dict)
    delivered: int | None = None  # records the consumer/receiver/rsyslog saw
    attempted: int | None = None
    elapsed_s: float | None = None
    fips_c_over_case: float | None = None  # records/s of fips_c / records/s of this case
    case_over_none: float | None = None  # records/s of this case / records/s of none
    case_over_none_python: float | None = None  # Python cases only
    overhead_ns_p50: float | None = None  # ns_per_record_p50 - none's p50
    pinned: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    reps: list[dict[str, Any]] = field(default_factory=list)  # every round: records_per_s, p50, drops
    # share of the run's wall time the producer thread (and the consumer process) ran on a CPU and
    # waited runnable on a run queue (schedstat run_delay: another task had its CPU), and involuntary
    # context switches
    cpu_share: dict[str, Any] = field(default_factory=dict)
    disturbed: bool | None = None  # producer or consumer waited runnable > DISTURBED_WAIT of the time


@dataclass(frozen=True)
class Target:
    id: str
    description: str
    metric: str
    op: str  # ">=" or "<="
    target: float
    measured: float | None
    unit: str
    passed: bool | None  # None: not measured (see reason)
    reason: str = ""


# --------------------------------------------------------------------------- #
# small helpers
# --------------------------------------------------------------------------- #
def _log(msg: str) -> None:
    print(f"bench ring: {msg}", file=sys.stderr, flush=True)


def _one_line(text: str, limit: int = 300) -> str:
    return output_line(text, limit)


def _parse_json_lines(text: str) -> dict[str, Any] | None:
    """The last JSON object line of a harness's stdout."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("ready "):
            line = line[len("ready ") :]
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _record_bytes(size: int, seq: int) -> bytes:
    """The same record the C harness formats: 'bench ring seq=<16 hex> xxx...\\n'."""
    head = b"bench ring seq=%016x " % seq
    return head + b"x" * (size - len(head) - 1) + b"\n"


def _fs_type(path: Path) -> str:
    try:
        best, fstype = "", "unknown"
        p = str(path.resolve())
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (p == parts[1] or p.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) >= len(best):
                        best, fstype = parts[1], parts[2]
        return fstype
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------- #
# building the C harness
# --------------------------------------------------------------------------- #
def build_harness(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """Compile ringbench.c + fips.c; returns (binary, None, info) or (None, reason, info)."""
    return build_c("ringbench", (HARNESS_SRC, FIPS_SRC), cache_dir=cache_dir)


# --------------------------------------------------------------------------- #
# child processes
# --------------------------------------------------------------------------- #
class Child:
    """A helper process that prints 'ready' once set up and a JSON line at exit."""

    nice = 0  # set by Bench; applied to every helper process

    def __init__(self, argv: Sequence[str], *, stdin: bool = False, preexec=None, env=None) -> None:
        if preexec is None and Child.nice:
            preexec = _pin_preexec(None, Child.nice)
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=preexec,
            env=env,
        )
        self.ready_line = ""

    def wait_ready(self, timeout: float = 30.0) -> str | None:
        """None once ready, else a reason."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return f"{Path(self.argv[0]).name} {self.argv[1]}: not ready after {timeout:.0f} s"
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                continue
            line = self.proc.stdout.readline()
            if not line:  # EOF: it died
                err = self.proc.stderr.read() if self.proc.stderr else ""
                self.proc.wait()
                return f"{Path(self.argv[0]).name} {self.argv[1]} exited {self.proc.returncode}: " + _one_line(
                    err, 200
                )
            if line.startswith("ready"):
                self.ready_line = line.strip()
                return None
            if line.startswith("{"):
                obj = _parse_json_lines(line) or {}
                if "error" in obj:
                    self.proc.wait()
                    return str(obj["error"])

    def stop(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """SIGTERM (and stdin EOF), then the JSON line it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # communicate() also closes stdin
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        return _parse_json_lines(out or "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            pass


def _run(
    argv: Sequence[str], timeout: float, env=None, preexec=None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run to completion; returns (json, None) or (None, reason)."""
    try:
        res = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=preexec
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return None, str(exc)
    obj = _parse_json_lines(res.stdout)
    if obj is None:
        return None, f"exit {res.returncode}: " + _one_line(res.stderr or res.stdout, 240)
    if "error" in obj:
        return None, str(obj["error"])
    return obj, None


def _pin_preexec(cpu: int | None, nice: int = 0):
    if cpu is None and not nice:
        return None

    def _pin() -> None:  # runs in the child before exec
        try:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})
        except OSError:
            pass
        if nice:
            # With autogroup scheduling (kernel.sched_autogroup_enabled=1) a task's nice value weighs only
            # against tasks of its own session: the CPU is shared per session. A new session gets a new
            # autogroup, whose nice is set through /proc/self/autogroup.
            try:
                os.setsid()
                with open("/proc/self/autogroup", "w", encoding="ascii") as f:
                    f.write(str(nice))
            except OSError:
                pass
            try:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
            except OSError:
                pass

    return _pin


# --------------------------------------------------------------------------- #
# the bench
# --------------------------------------------------------------------------- #
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        env_d = os.environ.get(ENV_DURATION)
        dur = getattr(args, "duration", None)
        if dur is None and env_d:
            try:
                dur = float(env_d)
            except ValueError:
                dur = None
        self.quick = bool(getattr(args, "quick", False))
        self.duration = float(dur) if dur else (QUICK_DURATION_S if self.quick else DEFAULT_DURATION_S)
        self.tiny = self.duration < 0.2
        cases = getattr(args, "cases", None)
        self.cases = tuple(c for c in CASES if not cases or c in cases)
        sizes = getattr(args, "sizes", None)
        self.sizes = tuple(sizes) if sizes else SIZES
        # A/B monitor runs: many short interleaved pairs beat bursty noise better than few long ones
        self.ab_pairs = 2 if self.tiny else (4 if self.quick else 8)
        self.ab_duration = self.duration if (self.quick or self.tiny) else max(0.3, self.duration / 2)
        self.snap_iters = 50 if self.tiny else (300 if self.quick else 2000)
        self.ring_capacity = RING_CAPACITY
        reps = getattr(args, "reps", None)
        self.reps = int(reps) if reps else (1 if (self.quick or self.tiny) else DEFAULT_REPS)
        self.consumer_backoff_us = CONSUMER_BACKOFF_US
        nice = getattr(args, "nice", None)
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
        shm_base = getattr(args, "shm_dir", None) or os.environ.get("FIPS_SHM_DIR") or "/dev/shm"
        if not os.path.isdir(shm_base):
            shm_base = tempfile.gettempdir()
        self.shm_dir = Path(tempfile.mkdtemp(prefix="fipstop-bench-", dir=shm_base))
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-"))
        self.tag = f"b{os.getpid()}"
        self.harness: Path | None = None
        self.harness_reason: str | None = None
        self.build_info: dict[str, Any] = {}
        self.py_reason = self._python_binding_reason()
        self.rsyslogd = shutil.which("rsyslogd") or next(
            (p for p in ("/usr/sbin/rsyslogd", "/sbin/rsyslogd") if os.access(p, os.X_OK)), None
        )
        self.notes: list[str] = []

    # -- environment ------------------------------------------------------- #
    @staticmethod
    def _python_binding_reason() -> str | None:
        try:
            from fipstop import _fips  # noqa: F401
        except Exception as exc:  # ImportError or a broken build
            return f"Python binding fipstop._fips not importable ({type(exc).__name__}: {exc}); run `make lib`"
        for name in ("Domain", "Producer", "Monitor"):
            if not hasattr(_fips, name):
                return f"fipstop._fips has no {name}"
        return None

    def _py_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def _domain(self, case: str, size: int) -> str:
        return f"{self.tag}-{case}-{size}"

    def _unlink_domain(self, name: str) -> None:
        try:
            (self.shm_dir / f"fips.{name}").unlink()
        except OSError:
            pass

    def cleanup(self) -> None:
        shutil.rmtree(self.shm_dir, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- harness arguments ------------------------------------------------ #
    def _produce_argv(self, case: str, size: int, duration: float | None = None, **kw: Any) -> list[str]:
        assert self.harness is not None
        argv = [
            str(self.harness),
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

    def _fips_args(self, domain: str) -> dict[str, Any]:
        return {"shm_dir": self.shm_dir, "domain": domain, "ring_capacity": self.ring_capacity}

    def _preexec(self):
        return _pin_preexec(None, self.nice)

    def _timeout(self) -> float:
        return self.duration + 60.0

    # -- one case ---------------------------------------------------------- #
    def _skip(self, case: str, size: int, reason: str, status: str = "skipped") -> CaseResult:
        return CaseResult(case=case, size_bytes=size, status=status, skip_reason=reason)

    def _from_producer(
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

    def run_none(self, size: int) -> CaseResult:
        p, why = _run(self._produce_argv("none", size), self._timeout(), preexec=self._preexec())
        if p is None:
            return self._skip("none", size, f"producer failed: {why}", "error")
        return self._from_producer(
            "none", size, p, delivered=None, drops=0, drop_detail={}, pinned={"producer_cpu": p.get("pinned_cpu")}
        )

    def run_fips(
        self,
        case: str,
        size: int,
        *,
        monitor: bool = False,
        domain: str | None = None,
        duration: float | None = None,
        ring_capacity: int | None = None,
        monitor_argv: Callable[[str], list[str]] | None = None,
    ) -> CaseResult:
        """fips_c / fips_c_batch / fips_python / fips_python_batch with a C consumer process.

        ``monitor``: a monitor attached during the run: the C harness
        snapshotting at MONITOR_HZ, or ``monitor_argv(domain)`` (a Child:
        prints 'ready', a JSON line at SIGTERM), e.g. the full dashboard."""
        if case.startswith("fips_python") and self.py_reason:
            return self._skip(case, size, self.py_reason)
        assert self.harness is not None
        dom = domain or self._domain(case, size)
        self._unlink_domain(dom)
        cap = ring_capacity or self.ring_capacity
        fa = self._fips_args(dom)
        fa["ring_capacity"] = cap
        cons = Child(
            [
                str(self.harness),
                "consume",
                "--shm-dir",
                str(self.shm_dir),
                "--domain",
                dom,
                "--name",
                "bench",
                "--ring-capacity",
                str(cap),
                "--backoff-us",
                f"{self.consumer_backoff_us:g}",
                "--min-batch",
                str(CONSUMER_MIN_BATCH),
            ]
            + (["--cpu", str(self.cons_cpu)] if self.cons_cpu is not None else [])
        )
        mon: Child | None = None
        try:
            why = cons.wait_ready()
            if why:
                return self._skip(case, size, f"consumer failed: {why}", "error")
            if monitor and monitor_argv is not None:
                mon = Child(monitor_argv(dom))
                why = mon.wait_ready(60.0)
                if why:
                    return self._skip(case, size, f"monitor failed: {why}", "error")
            elif monitor:
                mon = Child(
                    [
                        str(self.harness),
                        "monitor",
                        "--shm-dir",
                        str(self.shm_dir),
                        "--domain",
                        dom,
                        "--hz",
                        f"{MONITOR_HZ:g}",
                    ]
                )
                why = mon.wait_ready()
                if why:
                    return self._skip(case, size, f"monitor failed: {why}", "error")
            if case.startswith("fips_c"):
                p, why = _run(self._produce_argv(case, size, duration, **fa), self._timeout(), preexec=self._preexec())
            else:
                p, why = self._run_python(case, size, dom, cap)
            mon_res = mon.stop() if mon else None
            c = cons.stop()
        finally:
            if mon:
                mon.kill()
            cons.kill()
            self._unlink_domain(dom)
        if p is None:
            return self._skip(case, size, f"producer failed: {why}", "error")
        delivered = int(c["records"]) if c else None
        ring = p.get("ring") or {}
        if "records_dropped" in ring:
            drops = int(ring["records_dropped"])
        elif delivered is not None:
            drops = max(0, int(p["attempted"]) - delivered)
        else:
            drops = int(p.get("dropped", 0))
        detail: dict[str, Any] = {
            "source": "ring records_dropped" if "records_dropped" in ring else "attempted - delivered",
            "producer_saw_dropped": p.get("dropped"),
            "producer_errors": p.get("errors"),
        }
        for k in ("full_events", "high_water_bytes", "records_committed"):
            if k in ring:
                detail[k] = ring[k]
        if c:
            detail["consumer_lost"] = c.get("lost")
            detail["consumer_errors"] = c.get("errors")
            detail["consumer_evicted"] = c.get("evicted")
        if mon_res:
            detail["monitor_snapshots"] = mon_res.get("snapshots")
            detail["monitor_busy_ns"] = mon_res.get("busy_ns")
            detail["monitor_result"] = mon_res
        accepted = None
        if p.get("accepted") is None:  # Python single log: producer does not count
            accepted = int(ring["records_committed"]) if "records_committed" in ring else delivered
            if accepted is None:
                accepted = max(0, int(p["attempted"]) - drops)
        notes = ""
        if p.get("last_error"):
            notes = f"last producer error {p['last_error']}"
        if p.get("note"):
            notes = (notes + "; " if notes else "") + str(p["note"])
        return self._from_producer(
            case,
            size,
            p,
            delivered=delivered,
            drops=drops,
            drop_detail=detail,
            accepted=accepted,
            consumer=c,
            pinned={
                "producer_cpu": p.get("pinned_cpu"),
                "consumer_cpu": c.get("pinned_cpu") if c else None,
                "consumer": "separate process (C, fips_consumer_read/release, batches of up to 4096)",
                "consumer_batches": c.get("batches") if c else None,
            },
            notes=notes,
        )

    def _run_python(
        self, case: str, size: int, dom: str, ring_capacity: int | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        argv = [
            sys.executable,
            "-m",
            "fipstop.bench.ring",
            "_pyproducer",
            "--case",
            case,
            "--size",
            str(size),
            "--duration",
            f"{self.duration:g}",
            "--shm-dir",
            str(self.shm_dir),
            "--domain",
            dom,
            "--ring-capacity",
            str(ring_capacity or self.ring_capacity),
        ]
        if self.prod_cpu is not None:
            argv += ["--cpu", str(self.prod_cpu)]
        return _run(argv, self._timeout(), env=self._py_env(), preexec=self._preexec())

    def run_none_python(self, size: int) -> CaseResult:
        p, why = self._run_python("none_python", size, self._domain("none_python", size))
        if p is None:
            return self._skip("none_python", size, f"producer failed: {why}", "error")
        return self._from_producer(
            "none_python",
            size,
            p,
            delivered=None,
            drops=0,
            drop_detail={},
            pinned={"producer_cpu": p.get("pinned_cpu")},
            notes="Python loop calling len(record): the interpreter's floor for the Python cases",
        )

    def run_file(self, size: int) -> CaseResult:
        path = self.tmp / f"file-{size}.log"
        try:
            p, why = _run(self._produce_argv("file", size, file=path), self._timeout(), preexec=self._preexec())
            written = path.stat().st_size if path.exists() else 0
        finally:
            try:
                path.unlink()
            except OSError:
                pass
        if p is None:
            return self._skip("file", size, f"producer failed: {why}", "error")
        drops = int(p["errors"]) + int(p["eagain"])
        return self._from_producer(
            "file",
            size,
            p,
            delivered=written // size,
            drops=drops,
            drop_detail={"write_errors": p["errors"], "eagain": p["eagain"], "bytes_written": written},
            pinned={"producer_cpu": p.get("pinned_cpu")},
            notes=f"write(2) per record, O_APPEND, file in {self.tmp.parent} ({_fs_type(self.tmp)})",
        )

    def run_unix(self, size: int) -> CaseResult:
        sock = self.tmp / f"u{size}.sock"
        rx = Child(
            [str(self.harness), "recv", "--sock", str(sock)]
            + (["--cpu", str(self.cons_cpu)] if self.cons_cpu is not None else [])
        )
        try:
            why = rx.wait_ready()
            if why:
                return self._skip("unix_dgram", size, f"receiver failed: {why}", "error")
            p, why = _run(self._produce_argv("unix_dgram", size, sock=sock), self._timeout(), preexec=self._preexec())
            r = rx.stop()
        finally:
            rx.kill()
        if p is None:
            return self._skip("unix_dgram", size, f"producer failed: {why}", "error")
        drops = int(p["errors"]) + int(p["eagain"])
        return self._from_producer(
            "unix_dgram",
            size,
            p,
            delivered=int(r["records"]) if r else None,
            drops=drops,
            drop_detail={"send_errors": p["errors"], "eagain": p["eagain"]},
            pinned={"producer_cpu": p.get("pinned_cpu"), "receiver_cpu": r.get("pinned_cpu") if r else None},
            notes="blocking send(2) on a connected SOCK_DGRAM socket; receiver is a C process doing recv(2)",
        )

    # -- syslog ------------------------------------------------------------ #
    def _start_rsyslog(self, d: Path) -> tuple[subprocess.Popen | None, Path, Path, str | None]:
        sock = d / "log.sock"
        out = d / "messages"
        conf = d / "rsyslog.conf"
        pidf = d / "rsyslogd.pid"
        conf.write_text(
            f'global(workDirectory="{d}")\n'
            'module(load="imuxsock" SysSock.Use="off")\n'
            f'input(type="imuxsock" Socket="{sock}" CreatePath="on" RateLimit.Interval="0")\n'
            f'*.* action(type="omfile" file="{out}")\n',
            encoding="utf-8",
        )
        assert self.rsyslogd is not None
        proc = subprocess.Popen(
            [self.rsyslogd, "-n", "-f", str(conf), "-i", str(pidf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_pin_preexec(self.cons_cpu, self.nice),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if sock.exists():
                return proc, sock, out, None
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                return None, sock, out, f"rsyslogd exited {proc.returncode}: {_one_line(err, 200)}"
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        return None, sock, out, "rsyslogd did not create its socket within 10 s"

    @staticmethod
    def _count_records(path: Path) -> int:
        token = b"bench ring seq="
        n, carry = 0, b""
        try:
            with open(path, "rb") as f:
                while True:
                    chunk = f.read(1 << 22)
                    if not chunk:
                        break
                    buf = carry + chunk
                    n += buf.count(token)
                    carry = buf[-(len(token) - 1) :]
                    # a token wholly inside carry was counted already; carry is shorter than it
        except OSError:
            return 0
        return n

    def run_syslog(self, size: int) -> CaseResult:
        if not self.rsyslogd:
            return self._skip("syslog", size, "rsyslogd not found (apt-get install rsyslog)")
        d = self.tmp / f"syslog-{size}"
        d.mkdir(exist_ok=True)
        proc, sock, out, why = self._start_rsyslog(d)
        if proc is None:
            return self._skip("syslog", size, why or "rsyslogd failed", "error")
        fallback = None
        try:
            p, why = _run(
                self._produce_argv("syslog", size, sock=sock, tmp=d, syslog_mode="ns"),
                self._timeout(),
                preexec=self._preexec(),
            )
            if p is None:
                fallback = f"real syslog(3) via mount namespace unavailable ({why}); used the wire-path emulation"
                p, why = _run(
                    self._produce_argv("syslog", size, sock=sock, tmp=d, syslog_mode="wire"),
                    self._timeout(),
                    preexec=self._preexec(),
                )
            # let rsyslog write out what it queued, then stop it
            delivered, last, stable_since = 0, -1, time.monotonic()
            deadline = time.monotonic() + 15
            while p is not None and time.monotonic() < deadline:
                delivered = self._count_records(out)
                if delivered >= int(p["attempted"]):
                    break
                if delivered != last:
                    last, stable_since = delivered, time.monotonic()
                elif time.monotonic() - stable_since > 1.0:
                    break
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr:
                proc.stderr.close()
        if p is None:
            return self._skip("syslog", size, f"producer failed: {why}", "error")
        delivered = self._count_records(out)
        try:
            out.unlink()
        except OSError:
            pass
        notes = str(p.get("syslog_how", ""))
        if fallback:
            notes += f"; {fallback}"
        notes += "; rsyslogd imuxsock on a private socket (rate limit off) -> omfile in a temp dir"
        return self._from_producer(
            "syslog",
            size,
            p,
            delivered=delivered,
            drops=int(p["errors"]) + int(p["eagain"]),
            drop_detail={
                "send_errors": p["errors"],
                "syslog_3_reports_no_errors": p.get("syslog_how", "").startswith("syslog(3) via"),
                "not_in_rsyslog_output": max(0, int(p["attempted"]) - delivered),
            },
            pinned={"producer_cpu": p.get("pinned_cpu"), "rsyslogd_cpu": self.cons_cpu},
            notes=notes,
        )

    # -- monitor measurements ---------------------------------------------- #
    def run_snapshot(self) -> dict[str, Any]:
        res: dict[str, Any] = {
            "name": "monitor_snapshot_1024_rings",
            "rings": SNAP_RINGS,
            "ring_capacity_bytes": SNAP_RING_CAPACITY,
            "iters": self.snap_iters,
            "setup": f"one process with {SNAP_RINGS} live threads, each logged one record and waits "
            "(1024 ACTIVE rings), one registered consumer; default max_consumers",
        }
        if self.harness is None:
            res["status"] = "skipped"
            res["skip_reason"] = self.harness_reason
            return res
        dom = f"{self.tag}-snap"
        self._unlink_domain(dom)
        hold = Child(
            [
                str(self.harness),
                "hold",
                "--shm-dir",
                str(self.shm_dir),
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
            res["holder"] = _parse_json_lines(hold.ready_line)
            argv = [
                str(self.harness),
                "snap",
                "--shm-dir",
                str(self.shm_dir),
                "--domain",
                dom,
                "--iters",
                str(self.snap_iters),
            ]
            if self.prod_cpu is not None:
                argv += ["--cpu", str(self.prod_cpu)]
            c, why = _run(argv, 120, preexec=self._preexec())
            if c is None:
                res["c"] = {"status": "error", "skip_reason": why}
            else:
                c["status"] = "ok"
                c["call"] = "fips_monitor_snapshot (C, caller-provided arrays)"
                res["c"] = c
            res["python"] = self._py_snapshot(dom)
            res["status"] = "ok"
        finally:
            hold.stop()
            hold.kill()
            self._unlink_domain(dom)
        return res

    def _py_snapshot(self, dom: str) -> dict[str, Any]:
        """Monitor.snapshot() timed in a child process (pinned and niced like the C side)."""
        if self.py_reason:
            return {"status": "skipped", "skip_reason": self.py_reason}
        argv = [
            sys.executable,
            "-m",
            "fipstop.bench.ring",
            "_pysnap",
            "--shm-dir",
            str(self.shm_dir),
            "--domain",
            dom,
            "--iters",
            str(self.snap_iters),
        ]
        if self.prod_cpu is not None:
            argv += ["--cpu", str(self.prod_cpu)]
        out, why = _run(argv, 120, env=self._py_env(), preexec=self._preexec())
        if out is None:
            return {"status": "error", "skip_reason": why}
        return out

    def run_monitor_ab(
        self,
        *,
        name: str = "monitor_overhead_10hz",
        monitor_argv: Callable[[str], list[str]] | None = None,
        monitor_desc: str | None = None,
        duration: float | None = None,
    ) -> dict[str, Any]:
        """Producer throughput without / with a monitor attached, interleaved
        pairs; the monitor is the C harness at MONITOR_HZ unless
        ``monitor_argv`` gives another (see run_fips)."""
        ab_duration = duration if duration is not None else self.ab_duration
        res: dict[str, Any] = {
            "name": name,
            "case": "fips_c",
            "size_bytes": TARGET_SIZE,
            "monitor": monitor_desc
            or f"separate C process calling fips_monitor_snapshot at {MONITOR_HZ:g} Hz (unpinned)",
            "method": "runs interleaved in pairs, order alternating (AB, BA, ...); ratio = records/s with "
            "monitor / without, per pair; reported: median of the pair ratios and the pooled ratio",
            "pairs": self.ab_pairs,
            "duration_s_per_run": ab_duration,
            "ring_capacity_bytes": AB_RING_CAPACITY,
            "ring_note": "a larger ring than the cases' so that a consumer hiccup (a scheduler slice of other "
            "work) does not turn into drops, which would swamp a 1 % effect",
        }
        if self.harness is None:
            res["status"] = "skipped"
            res["skip_reason"] = self.harness_reason
            return res
        runs: list[dict[str, Any]] = []
        ratios: list[float] = []
        for i in range(self.ab_pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            pair: dict[bool, float] = {}
            for with_mon in order:
                r = self.run_fips(
                    "fips_c",
                    TARGET_SIZE,
                    monitor=with_mon,
                    domain=f"{self.tag}-ab{i}{int(with_mon)}",
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
            i for i in range(self.ab_pairs) if not any(r["disturbed"] for r in runs if r["pair"] == i)
        ]
        use = calm_pairs or list(range(self.ab_pairs))
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

    # -- everything ---------------------------------------------------------- #
    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.loadavg_start = list(os.getloadavg())
        if self.loadavg_start[0] > 0.5 * (os.cpu_count() or 1):
            _log(
                f"warning: load average {self.loadavg_start[0]:.2f} on {os.cpu_count()} CPUs: other work "
                "competes with the bench, expect noisy numbers"
            )
        self.harness, self.harness_reason, self.build_info = build_harness()
        if self.harness_reason:
            _log(f"C harness unavailable: {self.harness_reason}")
        # Repetitions run round-robin over every (size, case), so a burst of load from elsewhere
        # hits different cases in different rounds; each cell reports its median repetition.
        reps: dict[tuple[str, int], list[CaseResult]] = {(c, z): [] for z in self.sizes for c in self.cases}
        for rep in range(self.reps):
            for size in self.sizes:
                for case in self.cases:
                    done = reps[(case, size)]
                    if done and done[0].status == "skipped":
                        continue  # a skip reason does not change between rounds
                    tag = f"{case} {size} B" + (f" (round {rep + 1}/{self.reps})" if self.reps > 1 else "")
                    r = self._run_case(case, size)
                    if r.status == "ok":
                        _log(
                            f"{tag}: {r.records_per_s / 1e6:.3f} M rec/s, "
                            f"p50 {r.ns_per_record_p50:.1f} ns, drops {r.drops}"
                        )
                    else:
                        _log(f"{tag}: {r.status}: {r.skip_reason}")
                    done.append(r)
        results = _add_ratios([_median_rep(v) for v in reps.values()])
        _log("snapshot of 1024 rings ...")
        snap = self.run_snapshot()
        _log("monitor overhead A/B ...")
        ab = self.run_monitor_ab()
        _log("monitor overhead, isolated from the consumer ...")
        iso = run_monitor_isolated(self.shm_dir, 2 if self.tiny else (8 if self.quick else 64))
        return {
            "results": results,
            "monitor": [snap, ab, iso],
            "targets": _targets(results, snap, ab, iso),
            "wall_s": time.monotonic() - started,
        }

    def _run_case(self, case: str, size: int) -> CaseResult:
        if case in ("none_python", "fips_python", "fips_python_batch") and self.py_reason:
            return self._skip(case, size, self.py_reason)
        if case == "none_python":
            return self.run_none_python(size)
        if self.harness is None:
            if case == "syslog" and not self.rsyslogd:
                return self._skip(case, size, "rsyslogd not found (apt-get install rsyslog)")
            return self._skip(case, size, f"C harness unavailable: {self.harness_reason}")
        try:
            if case == "none":
                return self.run_none(size)
            if case in FIPS_CASES:
                return self.run_fips(case, size)
            if case == "file":
                return self.run_file(size)
            if case == "unix_dgram":
                return self.run_unix(size)
            if case == "syslog":
                return self.run_syslog(size)
        except Exception as exc:  # one broken case must not lose the others
            return self._skip(case, size, f"{type(exc).__name__}: {exc}", "error")
        return self._skip(case, size, "unknown case", "error")

    def params(self) -> dict[str, Any]:
        return {
            "duration_s_per_case": self.duration,
            "quick": self.quick,
            "sizes_bytes": list(self.sizes),
            "cases": list(self.cases),
            "ring_capacity_bytes": self.ring_capacity,
            "reps": self.reps,
            "reps_note": "rounds run round-robin over all (size, case); each result is its median round by "
            "records_per_s, results[].reps lists every round",
            "consumer_policy": f"C consumer process: fips_consumer_read(max 4096) + fips_batch_next + "
            f"fips_consumer_release; after a read of < {CONSUMER_MIN_BATCH} records (or none) it busy-waits "
            f"{self.consumer_backoff_us:g} us locally so records accumulate instead of polling the producer's "
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
            "pinning": self.pin_note,
            "nice": self.nice,
            "producer_cpu": self.prod_cpu,
            "consumer_cpu": self.cons_cpu,
            "shm_dir": str(self.shm_dir.parent),
            "loadavg_at_start": getattr(self, "loadavg_start", None),
            "monitor_hz": MONITOR_HZ,
            "snapshot_rings": SNAP_RINGS,
            "snapshot_iters": self.snap_iters,
            "monitor_ab_pairs": self.ab_pairs,
            "build": self.build_info,
            "rsyslogd": self.rsyslogd,
        }


_UFMT = {"<u1": "<B", "<u2": "<H", "<u4": "<I", "<u8": "<Q"}
_RING_KEYS = ("index", "state", "pid", "records_committed", "records_dropped", "bytes_dropped",
              "full_events", "high_water_bytes")


def _ring_rows(fips_mod: Any, snap: Any) -> list[dict[str, int]]:
    """Selected fields of every ring of a binding snapshot.

    ``Monitor.snapshot()`` returns ``(realtime_ns, mono_ns, rings, consumers, pos)`` with the C
    ``fips_ring_stat`` array as bytes, described by ``RING_STAT_FIELDS``/``RING_STAT_SIZE``.
    """
    raw = snap[2] if isinstance(snap, tuple) else getattr(snap, "rings", None)
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        return []
    size = int(fips_mod.RING_STAT_SIZE)
    fields = {name: (off, _UFMT[fmt]) for name, off, fmt in fips_mod.RING_STAT_FIELDS if fmt in _UFMT}
    rows = []
    for i in range(len(raw) // size):
        base = i * size
        rows.append(
            {k: struct.unpack_from(fields[k][1], raw, base + fields[k][0])[0] for k in _RING_KEYS if k in fields}
        )
    return rows


def _pct(sorted_vals: Sequence[float], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = int(p * (len(sorted_vals) - 1) + 0.5)
    return float(sorted_vals[min(i, len(sorted_vals) - 1)])


def _median_rep(runs: list[CaseResult]) -> CaseResult:
    """The round with the median records/s, carrying every round's numbers in ``reps``."""
    ok = [r for r in runs if r.status == "ok" and r.records_per_s]
    if not ok:
        return runs[-1]
    calm = [r for r in ok if not r.disturbed]
    pool = calm or ok
    pool.sort(key=lambda r: r.records_per_s or 0.0)
    med = pool[(len(pool) - 1) // 2]
    summary = [
        {
            "records_per_s": r.records_per_s,
            "ns_per_record_p50": r.ns_per_record_p50,
            "ns_per_record_p99": r.ns_per_record_p99,
            "drops": r.drops,
            "cpu_share": r.cpu_share,
            "disturbed": r.disturbed,
            "status": r.status,
        }
        for r in runs
    ]
    notes = med.notes
    if len(runs) > 1:
        how = (
            f"median of the {len(calm)} undisturbed rounds" if calm and len(calm) < len(ok)
            else "median round" if calm
            else f"all {len(ok)} rounds disturbed (another process took the CPU): median of all"
        )
        notes = (notes + "; " if notes else "") + how
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        notes = (notes + "; " if notes else "") + f"{len(failed)} of {len(runs)} rounds failed: {failed[0].skip_reason}"
    return dataclasses.replace(med, reps=summary, notes=notes)


def _add_ratios(results: list[CaseResult]) -> list[CaseResult]:
    by = {(r.case, r.size_bytes): r for r in results}
    out = []
    for r in results:
        if r.status != "ok" or not r.records_per_s:
            out.append(r)
            continue
        upd: dict[str, Any] = {}
        fc = by.get(("fips_c", r.size_bytes))
        if fc and fc.status == "ok" and fc.records_per_s:
            upd["fips_c_over_case"] = fc.records_per_s / r.records_per_s
        none = by.get(("none", r.size_bytes))
        if none and none.status == "ok" and none.records_per_s:
            upd["case_over_none"] = r.records_per_s / none.records_per_s
            if none.ns_per_record_p50 is not None and r.ns_per_record_p50 is not None:
                upd["overhead_ns_p50"] = r.ns_per_record_p50 - none.ns_per_record_p50
        if r.case.startswith("fips_python") or r.case == "none_python":
            npy = by.get(("none_python", r.size_bytes))
            if npy and npy.status == "ok" and npy.records_per_s:
                upd["case_over_none_python"] = r.records_per_s / npy.records_per_s
                if r.case != "none_python" and npy.ns_per_record_p50 is not None and r.ns_per_record_p50 is not None:
                    upd["overhead_ns_p50"] = r.ns_per_record_p50 - npy.ns_per_record_p50
        out.append(dataclasses.replace(r, **upd))
    return out


MONITOR_AB_SRC = REPO_ROOT / "bench" / "ring" / "monitor_ab.c"


def median_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Median and a ~95 % distribution-free interval for it: the order
    statistics at ranks n/2 -+ 0.98 sqrt(n) (binomial, sign-test style)."""
    v = sorted(values)
    n = len(v)
    med = statistics.median(v)
    k = max(0, int(n / 2 - 0.98 * math.sqrt(n)))
    return med, v[k], v[min(n - 1, n - 1 - k)]


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
                  "alternate AB/BA; ratio = throughput with / without per pair; interval = ~95 % "
                  "order-statistic interval of the median",
        "build_command": build.get("build_command", build.get("binary", "")),
        "records_per_run": records * 10,
        "pairs": pairs,
    }
    for label, hz in (("10hz", 10.0), ("back_to_back", 0.0)):
        run = subprocess.run([str(binary), str(shm_dir), str(records), f"{hz:g}", str(pairs)],
                             capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            return {**out, "status": "skipped", "skip_reason": _one_line(run.stderr, 240)}
        ratios = []
        for line in run.stdout.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "pair":
                without_ns, with_ns = int(parts[2]), int(parts[3])
                ratios.append(without_ns / with_ns)
        med, lo, hi = median_ci(ratios)
        out[label] = {"hz": hz, "ratio_median": med, "ratio_ci95": [lo, hi], "pair_ratios": ratios}
    return out


def _target(
    tid: str, desc: str, metric: str, op: str, target: float, measured: float | None, unit: str, reason: str = ""
) -> Target:
    if measured is None:
        return Target(tid, desc, metric, op, target, None, unit, None, reason or "not measured")
    ok = measured >= target if op == ">=" else measured <= target
    return Target(tid, desc, metric, op, target, measured, unit, ok, reason)


def _targets(
    results: list[CaseResult], snap: dict[str, Any], ab: dict[str, Any], iso: dict[str, Any] | None = None
) -> list[Target]:
    by = {(r.case, r.size_bytes): r for r in results}

    def rate(case: str) -> tuple[float | None, str]:
        r = by.get((case, TARGET_SIZE))
        if r is None:
            return None, f"{case} {TARGET_SIZE} B not run"
        if r.status != "ok":
            return None, f"{case}: {r.skip_reason}"
        return r.records_per_s, ""

    fc, why_fc = rate("fips_c")
    sl, why_sl = rate("syslog")
    py, why_py = rate("fips_python")
    pyb, why_pyb = rate("fips_python_batch")
    ts = [
        _target(
            "fips_c_rate",
            f"C producer, {TARGET_SIZE} B, one consumer draining",
            f"fips_c records_per_s @ {TARGET_SIZE} B",
            ">=",
            20e6,
            fc,
            "records/s",
            why_fc,
        ),
        _target(
            "fips_c_vs_syslog",
            f"C producer vs syslog(3), {TARGET_SIZE} B",
            "records_per_s(fips_c) / records_per_s(syslog)",
            ">=",
            50.0,
            (fc / sl) if fc and sl else None,
            "x",
            why_fc or why_sl,
        ),
        _target(
            "python_log_rate",
            f"Python Producer.log, {TARGET_SIZE} B",
            f"fips_python records_per_s @ {TARGET_SIZE} B",
            ">=",
            2e6,
            py,
            "records/s",
            why_py,
        ),
        _target(
            "python_log_batch_rate",
            f"Python Producer.log_batch (batches of {LOG_BATCH}), {TARGET_SIZE} B",
            f"fips_python_batch records_per_s @ {TARGET_SIZE} B",
            ">=",
            10e6,
            pyb,
            "records/s",
            why_pyb,
        ),
    ]
    c = snap.get("c") if isinstance(snap.get("c"), dict) else {}
    p = snap.get("python") if isinstance(snap.get("python"), dict) else {}
    ts.append(
        _target(
            "snapshot_1024_rings_c",
            "fips_monitor_snapshot of a domain with 1024 active rings",
            "p99 latency",
            "<=",
            1000.0,
            c.get("us_p99") if c.get("status") == "ok" else None,
            "us",
            str(c.get("skip_reason") or snap.get("skip_reason") or ""),
        )
    )
    ts.append(
        _target(
            "snapshot_1024_rings_python",
            "Monitor.snapshot() (binding) of a domain with 1024 active rings",
            "p99 latency",
            "<=",
            1000.0,
            p.get("us_p99") if p.get("status") == "ok" else None,
            "us",
            str(p.get("skip_reason") or snap.get("skip_reason") or ""),
        )
    )
    if iso and iso.get("status") == "ok":
        # The isolated measurement decides; pass/fail only when its interval
        # settles the 1 % question, else "not decided" with the interval.
        m = iso["10hz"]
        lo, hi = m["ratio_ci95"]
        change = abs(m["ratio_median"] - 1.0) * 100.0
        decided = True if (lo >= 0.99 and hi <= 1.01) else False if (hi < 0.99 or lo > 1.01) else None
        ts.append(Target(
            "monitor_overhead_10hz",
            f"a monitor snapshotting at {MONITOR_HZ:g} Hz changes a C producer's {TARGET_SIZE} B throughput by "
            "at most 1 % (isolated from consumer noise)",
            "|median(with/without) - 1| in %", "<=", 1.0, change, "%", decided,
            "" if decided is not None else
            f"not decided: ~95 % interval of the ratio {lo:.3f}..{hi:.3f} is wider than the 1 % asked "
            f"(machine noise); back-to-back snapshots: median {iso['back_to_back']['ratio_median']:.3f}",
        ))
        return ts
    change = ab.get("change_pct") if ab.get("status") == "ok" else None
    ts.append(
        _target(
            "monitor_overhead_10hz",
            f"a monitor snapshotting at {MONITOR_HZ:g} Hz changes fips_c {TARGET_SIZE} B throughput by at most 1 %",
            "|median(with/without) - 1| in %",
            "<=",
            1.0,
            abs(change) if change is not None else None,
            "%",
            str(ab.get("skip_reason") or ""),
        )
    )
    return ts


# --------------------------------------------------------------------------- #
# output
# --------------------------------------------------------------------------- #
def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_table(doc: dict[str, Any]) -> str:
    rows = [("case", "size", "rec/s", "case/none", "fips_c/case", "p50 ns", "p99 ns", "drops", "note")]
    for r in doc["results"]:
        if r["status"] != "ok":
            why = f"{r['status']}: {r['skip_reason']}"
            rows.append((r["case"], str(r["size_bytes"]), "-", "-", "-", "-", "-", "-", why))
            continue
        rows.append(
            (
                r["case"],
                str(r["size_bytes"]),
                _fmt_rate(r["records_per_s"]),
                _fmt(r["case_over_none"], ".3f"),
                _fmt(r["fips_c_over_case"], ".2f"),
                _fmt(r["ns_per_record_p50"], ".1f"),
                _fmt(r["ns_per_record_p99"], ".1f"),
                str(r["drops"]),
                _disturbed_note(r),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    right = {2, 3, 4, 5, 6, 7}
    lines = []
    for n, row in enumerate(rows):
        cells = [row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i]) for i in range(len(widths))]
        lines.append("  ".join(cells) + ("  " + row[-1] if row[-1] else ""))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for m in doc["monitor"]:
        if m["name"] == "monitor_snapshot_1024_rings":
            if m.get("status") != "ok":
                lines.append(f"snapshot, 1024 rings: {m.get('status')}: {m.get('skip_reason')}")
                continue
            for k in ("c", "python"):
                s = m.get(k) or {}
                if s.get("status") == "ok":
                    lines.append(
                        f"snapshot, 1024 rings ({k}): p50 {s['us_p50']:.1f} us, p99 {s['us_p99']:.1f} us"
                        + (f", active rings {s['active_rings']}" if "active_rings" in s else "")
                    )
                else:
                    lines.append(f"snapshot, 1024 rings ({k}): {s.get('status')}: {s.get('skip_reason')}")
        elif m["name"] == "monitor_overhead_isolated":
            if m.get("status") != "ok":
                lines.append(f"monitor, isolated: {m.get('status')}: {m.get('skip_reason')}")
                continue
            for k in ("10hz", "back_to_back"):
                r = m[k]
                lines.append(
                    f"monitor ({k.replace('_', ' ')}), isolated from the consumer: with/without = "
                    f"{r['ratio_median']:.4f} (~95 % interval {r['ratio_ci95'][0]:.3f}..{r['ratio_ci95'][1]:.3f}, "
                    f"{len(r['pair_ratios'])} pairs)"
                )
        else:
            if m.get("status") != "ok":
                lines.append(f"monitor at 10 Hz: {m.get('status')}: {m.get('skip_reason')}")
                continue
            lines.append(
                f"monitor at {MONITOR_HZ:g} Hz, fips_c {TARGET_SIZE} B: with/without = {m['ratio_median']:.4f} "
                f"(median of {len(m['pair_ratios'])} pairs; pooled {m['ratio_pooled']:.4f}; "
                f"pair spread {m['spread_pct']:.1f} %)"
            )
    lines.append("")
    lines.append("targets (issue #2):")
    for t in doc["targets"]:
        verdict = "n/a " if t["passed"] is None else ("PASS" if t["passed"] else "FAIL")
        meas = "-" if t["measured"] is None else _fmt_target(t["measured"], t["unit"])
        tgt = _fmt_target(t["target"], t["unit"])
        why = f"  ({t['reason']})" if t["reason"] and t["passed"] is None else ""
        lines.append(f"  {verdict}  {t['id']:<28} {t['op']} {tgt:<10} measured {meas}{why}")
    lines.append("")
    lines.append(f"{doc['params']['pinning']}; {doc['params']['duration_s_per_case']:g} s per case")
    return "\n".join(lines)


def _disturbed_note(r: dict[str, Any]) -> str:
    if not r.get("disturbed"):
        return ""
    share = r.get("cpu_share") or {}
    parts = [
        f"{k} waited for its CPU {share[k + '_runq_wait'] * 100:.0f} %"
        for k in ("producer", "consumer")
        if k + "_runq_wait" in share
    ]
    return "disturbed: " + ", ".join(parts) + " of the time"


def _fmt_target(x: float, unit: str) -> str:
    if unit == "records/s":
        return _fmt_rate(x) + "/s"
    if unit == "x":
        return f"{x:.1f}x"
    if unit == "%":
        return f"{x:.2f} %"
    return f"{x:.1f} {unit}"


def _to_json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: _to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_json(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def _command_line(argv0: str | None = None) -> str:
    """The command as typed, with the bench's environment overrides in front."""
    env = [f"{k}={os.environ[k]}" for k in (ENV_DURATION, ENV_NICE) if os.environ.get(k)]
    return shlex.join(env + _argv(argv0)) if env else shlex.join(_argv(argv0))


def _argv(argv0: str | None) -> list[str]:
    py = Path(sys.executable).name
    if argv0 == "-m":
        return [py, "-m", "fipstop.bench.ring", *sys.argv[1:]]
    a0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("fipstop")
    if a0.name == "__main__.py" and a0.parent.name == "fipstop":
        return [py, "-m", "fipstop", *sys.argv[1:]]
    return [a0.name, *sys.argv[1:]]


# --------------------------------------------------------------------------- #
# entry points
# --------------------------------------------------------------------------- #
def main(args: argparse.Namespace) -> int:
    """``fipstop bench ring``: args has .json, .quick, .out, .shm_dir
    (optional: .duration, .cases, .sizes, .command)."""
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    bench = Bench(args)
    try:
        body = bench.run()
    finally:
        bench.cleanup()
    doc = _to_json(
        {
            "bench": "ring",
            "schema": SCHEMA,
            "command": getattr(args, "command_line", None) or _command_line(),
            "date": now.isoformat().replace("+00:00", "Z"),
            "machine": machine_info(),
            "params": bench.params(),
            "results": body["results"],
            "monitor": body["monitor"],
            "targets": body["targets"],
            "wall_s": round(body["wall_s"], 2),
        }
    )
    publish("ring", doc, args, now, render_table, _log)
    return 0


# -- the Python producer (child process) ----------------------------------- #
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
    dom = prod = None
    try:
        if case == "none_python":
            fn = len
        else:
            from fipstop import _fips

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
        recs = [_record_bytes(size, i) for i in range(LOG_BATCH)]
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
        rec = _record_bytes(size, 0)
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
        "ns_p50": _pct(per_rec, 0.5),
        "ns_p99": _pct(per_rec, 0.99),
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
        close = getattr(o, "close", None)
        if callable(close):
            try:
                close()
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
        from fipstop import _fips

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
        close = getattr(mon, "close", None)
        if callable(close):
            close()
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 3
    lat.sort()
    out: dict[str, Any] = {
        "status": "ok",
        "call": "fipstop._fips.Monitor.snapshot() (binding: C fips_monitor_snapshot into bytes objects)",
        "iters": len(lat),
        "us_p50": _pct(lat, 0.5),
        "us_p99": _pct(lat, 0.99),
        "us_min": lat[0],
        "us_max": lat[-1],
    }
    try:
        out["active_rings"] = sum(1 for r in _ring_rows(_fips, last) if r.get("state") == 1)
    except Exception:
        pass
    if wrapped:
        out["wrapped"] = wrapped
    print(json.dumps(out), flush=True)
    return 0


def _py_wrapped_snapshot(mon: Any, iters: int) -> dict[str, Any] | None:
    """fipstop.ring.take_snapshot (numpy views, what the dashboard uses), when importable."""
    try:
        from fipstop import ring as fring

        take = fring.take_snapshot
    except Exception:
        return None
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
        "us_p50": _pct(lat, 0.5),
        "us_p99": _pct(lat, 0.99),
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
        from fipstop import _fips

        mon = _fips.Monitor(ns.domain, ns.shm_dir)
        rows = _ring_rows(_fips, mon.snapshot())
        close = getattr(mon, "close", None)
        if callable(close):
            close()
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


def _argparser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fipstop.bench.ring", description="libfips ring benchmark")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", metavar="PATH")
    p.add_argument("--shm-dir", default=os.environ.get("FIPS_SHM_DIR") or "/dev/shm")
    p.add_argument("--duration", type=float, default=None, help="seconds per case (overrides --quick)")
    p.add_argument("--cases", nargs="+", choices=CASES, default=None)
    p.add_argument("--sizes", nargs="+", type=int, default=None)
    p.add_argument("--reps", type=int, default=None, help="rounds over all cases (default 3, --quick 1)")
    p.add_argument(
        "--nice", type=int, default=None, help=f"nice level of the bench's processes (default ${ENV_NICE} or 0)"
    )
    return p


def _cli(argv: Sequence[str]) -> int:
    if argv and argv[0] == "_pyproducer":
        p = argparse.ArgumentParser(prog="ring _pyproducer")
        p.add_argument("--case", required=True, choices=PY_CASES)
        p.add_argument("--size", type=int, required=True)
        p.add_argument("--duration", type=float, required=True)
        p.add_argument("--shm-dir", required=True)
        p.add_argument("--domain", required=True)
        p.add_argument("--ring-capacity", type=int, default=RING_CAPACITY)
        p.add_argument("--cpu", type=int, default=None)
        return _py_produce(p.parse_args(argv[1:]))
    if argv and argv[0] == "_pysnap":
        p = argparse.ArgumentParser(prog="ring _pysnap")
        p.add_argument("--shm-dir", required=True)
        p.add_argument("--domain", required=True)
        p.add_argument("--iters", type=int, default=1000)
        p.add_argument("--cpu", type=int, default=None)
        return _py_snap(p.parse_args(argv[1:]))
    args = _argparser().parse_args(argv)
    args.command_line = _command_line("-m")
    return main(args)


if __name__ == "__main__":
    raise SystemExit(_cli(sys.argv[1:]))
