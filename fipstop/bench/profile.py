"""``fipstop bench profile``: what profiling costs a contended producer (issue #5).

Two producers, each run once per variant per round, the variants of a round
back to back in alternating order (ABC, CBA, ...), so each variant is
compared with its baseline run minutes — not hours — apart:

``c`` (bench/profile/contend.c)
    4 threads format a BIND-like query line, take one process-wide mutex, log
    the line with ``fips_log()`` into their rings and spin a little inside.
    Variants: ``none`` (no profiler), ``threads`` (the procfs
    ``ThreadSampler`` at its default rate), ``bpf`` (``BpfProfiler`` at its
    defaults: sched_switch/sched_waking tracepoints for off-CPU stacks and
    lock waits, 49 Hz cpu-clock on-CPU sampling).
``python`` (an inline script on the binding ``fipstop._fips``)
    one thread logs through ``Producer.log`` under a ``threading.Lock``
    (several threads make the rate swing by 2x with GIL hand-offs).
    Variants: ``py_none``, ``py_pyspy`` (``PySpyProfiler`` at its defaults).

Each run: the producer starts with ``--wait``; the profiler starts
(``BpfProfiler`` compiles here, before the clock starts), takes one sample to
reset; the producer is released and logs for S seconds while the bench
samples the profiler once a second (as the dashboard would); the producer
reports operations/s.  Per round, ratio = ops/s with the profiler ÷ ops/s of
the round's baseline; the result is the mean ratio with a 95 % t-interval
over rounds (only pairs in which neither run was disturbed — other
processes used > 0.25 cores — when there are at least two), the median, and
the throughput drop in percent.  Target: each
drop <= 5 % (``passed``: the mean; ``conclusive``: the whole interval is on
one side of 5 %).  Nothing asserts it.  Results go to
bench/results/profile-<UTC stamp>.json and profile-latest.json (or --out).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import FIPS_SRC, build_c, source
from fipstop.bench.results import Output, machine_info, publish, t975
from fipstop.children import popen
from fipstop.errors import FipsError
from fipstop.probes.bpf import BpfProfiler
from fipstop.probes.pyspy import PySpyProfiler
from fipstop.probes.stacks import ProfileSample
from fipstop.probes.threads import ThreadSampler

SCHEMA = 1
CONTEND_SRC = source("profile/contend.c")
TARGET_DROP_PCT = 5.0
DEFAULT_SECONDS, QUICK_SECONDS = 5.0, 1.0
DEFAULT_ROUNDS, QUICK_ROUNDS = 6, 2
SAMPLE_EVERY_S = 1.0
PRODUCER_THREADS = 4
# one Python thread: with several, GIL hand-offs make the rate swing by 2x
# from run to run, and py-spy's cost could not be seen through that
PY_THREADS = 1
C_VARIANTS = ("none", "threads", "bpf")
PY_VARIANTS = ("py_none", "py_pyspy")
BASELINE = {"threads": "none", "bpf": "none", "py_pyspy": "py_none"}
DESCRIPTIONS = {
    "none": "C producer, no profiler (baseline)",
    "threads": "C producer + ThreadSampler (procfs) at its default rate",
    "bpf": "C producer + BpfProfiler at its defaults (sched_switch + sched_waking tracepoints, cpu-clock 49 Hz)",
    "py_none": "Python producer (fipstop._fips), no profiler (baseline)",
    "py_pyspy": "Python producer + PySpyProfiler at its defaults",
}
CALM_CORES = 0.3
# a run during which other processes (not the producer, not this bench and
# its py-spy) used more than this many cores was disturbed
DISTURBED_CORES = 0.25
CLK_TCK = os.sysconf("SC_CLK_TCK")

PY_PRODUCER = r"""
import sys, threading, time
from fipstop import _fips
shm, seconds, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
dom = _fips.Domain("pyprod", shm, create=True)
lock = threading.Lock()
go = threading.Event()
stop = False
counts = [0] * n
def work(i):
    p = _fips.Producer(dom)
    k = 0
    go.wait()
    while not stop:
        line = (f"client @0x7f{k:010x} 127.0.0.{i}#{1024 + k % 60000} (h{k % 5000}.example.test): "
                f"query: h{k % 5000}.example.test IN A +E(0) (127.0.0.1)").encode()
        with lock:
            p.log(line)
        k += 1
    counts[i] = k
    p.close()
ths = [threading.Thread(target=work, args=(i,), name=f"pyprod-{i}") for i in range(n)]
for t in ths:
    t.start()
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
go.set()
time.sleep(seconds)
stop = True
el = time.monotonic() - t0
for t in ths:
    t.join()
ops = sum(counts)
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(f"ops {ops} seconds {el:.6f} ops_per_s {ops / el:.1f} dropped 0 cpu_s {ru.ru_utime + ru.ru_stime:.3f}",
      flush=True)
dom.close()
"""


def _log(msg: str) -> None:
    print(f"bench profile: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- #
# statistics
# --------------------------------------------------------------------------- #
def ratio_stats(ratios: list[float]) -> dict[str, Any]:
    """Mean with a 95 % t-interval, median; drops in percent (1 - ratio)."""
    n = len(ratios)
    if n == 0:
        return {"n": 0, "mean": None, "median": None, "ci95": None, "drop_pct": None, "drop_ci95_pct": None}
    mean = statistics.fmean(ratios)
    ci = None
    if n >= 2:
        half = t975(n - 1) * statistics.stdev(ratios) / math.sqrt(n)
        ci = [round(mean - half, 4), round(mean + half, 4)]
    return {
        "n": n,
        "mean": round(mean, 4),
        "median": round(statistics.median(ratios), 4),
        "ci95": ci,
        "drop_pct": round((1 - mean) * 100, 2),
        "drop_ci95_pct": [round((1 - ci[1]) * 100, 2), round((1 - ci[0]) * 100, 2)] if ci else None,
    }


def judge(stats: dict[str, Any], target_pct: float = TARGET_DROP_PCT) -> tuple[bool | None, bool]:
    """(passed, conclusive) for a drop target."""
    if stats.get("drop_pct") is None:
        return None, False
    passed = stats["drop_pct"] <= target_pct
    ci = stats.get("drop_ci95_pct")
    conclusive = ci is not None and (ci[1] <= target_pct if passed else ci[0] > target_pct)
    return passed, conclusive


# --------------------------------------------------------------------------- #
# machine state
# --------------------------------------------------------------------------- #
def _busy_cores(interval: float = 1.0) -> float:
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v[:8]), idle

    t1, i1 = read()
    time.sleep(interval)
    t2, i2 = read()
    dt = t2 - t1
    return (dt - (i2 - i1)) / dt * (os.cpu_count() or 1) if dt > 0 else 0.0


def _cpu_totals() -> int:
    """Busy jiffies of the whole machine (all CPUs)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - (v[4] if len(v) > 4 else 0)


def _self_cpu() -> float:
    """CPU seconds of this process and its reaped children (py-spy)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def wait_calm(limit_s: float) -> float:
    """Wait up to limit_s for the machine to be quiet; returns busy cores."""
    deadline = time.monotonic() + limit_s
    busy = _busy_cores(0.5)
    while busy >= CALM_CORES and time.monotonic() < deadline:
        busy = _busy_cores(1.0)
    return round(busy, 2)


# --------------------------------------------------------------------------- #
# one run
# --------------------------------------------------------------------------- #
Sampler = ThreadSampler | BpfProfiler | PySpyProfiler


def _profiler(variant: str, pid: int) -> tuple[Sampler | None, str | None]:
    """(profiler or None, reason when the variant cannot run)."""
    p: Sampler
    if variant in ("none", "py_none"):
        return None, None
    if variant == "threads":
        p = ThreadSampler(pid)
    elif variant == "bpf":
        p = BpfProfiler(pid)
    elif variant == "py_pyspy":
        p = PySpyProfiler(pid)
    else:
        return None, f"unknown variant {variant}"
    ok, why = p.available()
    if not ok:
        return None, why
    return p, None


def run_once(variant: str, argv: list[str], seconds: float) -> dict[str, Any]:
    proc = popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    rec: dict[str, Any] = {"variant": variant, "status": "ok"}
    prof = None
    samples = 0
    start = time.monotonic()
    stat0, self0 = _cpu_totals(), _self_cpu()
    try:
        line = proc.stdout.readline()
        if not line.startswith("ready"):
            proc.kill()
            err = proc.communicate(timeout=10)[1]
            return {"variant": variant, "status": "error", "reason": f"producer did not start: {line!r} {err[-300:]}"}
        prof, why = _profiler(variant, proc.pid)
        if why:
            rec.update(status="skipped", reason=why)
        if prof is not None:
            t0 = time.monotonic()
            prof.start()
            rec["profiler_start_s"] = round(time.monotonic() - t0, 3)
            if isinstance(prof, BpfProfiler) and prof.state == "failed":
                rec.update(status="skipped", reason=prof.reason or "failed")
            prof.sample()
        stat0, self0 = _cpu_totals(), _self_cpu()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        start = time.monotonic()
        end = start + seconds
        while prof is not None and rec["status"] == "ok":
            nxt = min(end, time.monotonic() + SAMPLE_EVERY_S)
            time.sleep(max(0.0, nxt - time.monotonic()))
            if time.monotonic() >= end - 0.05:
                break
            s = prof.sample()
            samples += 1
            if not s.available:
                rec.setdefault("sample_problems", []).append(s.reason or "?")
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        if prof is not None:
            try:
                last = prof.sample()
                samples += 1
                extra = last.extra if isinstance(last, ProfileSample) else None
                if isinstance(prof, BpfProfiler) and extra:
                    rec["bpf_losses"] = {k: int(v) for k, v in extra.items()
                                         if k.endswith(("_full", "_eexist", "_enomem")) and v}
                    rec["bpf_lost_totals"] = {k: v for k, v in prof.lost_totals().items() if v}
            except Exception as exc:  # the cost matters here, not the profile
                rec["last_sample_error"] = f"{type(exc).__name__}: {exc}"
            prof.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # after close(): py-spy's recorders are reaped, so their CPU is ours
    wall = time.monotonic() - start
    stat1, self1 = _cpu_totals(), _self_cpu()
    fields = out.split()
    try:
        kv = dict(zip(fields[::2], fields[1::2]))
        rec["ops_per_s"] = float(kv["ops_per_s"])
        rec["ops"] = int(kv["ops"])
        rec["seconds"] = float(kv["seconds"])
        rec["dropped"] = int(kv["dropped"])
    except (KeyError, ValueError):
        return {**rec, "status": "error", "reason": f"bad producer output {out[-200:]!r} {err[-300:]!r}"}
    rec["samples_taken"] = samples
    try:
        rec["cpu_s"] = float(kv["cpu_s"])
        busy = (stat1 - stat0) / CLK_TCK
        # self1 - self0 holds this process, its reaped py-spy and the reaped
        # producer (children); the producer's CPU before "go" makes `others`
        # err on the low side
        others = busy - (self1 - self0)
        rec["bench_cpu_s"] = round(max(0.0, self1 - self0 - rec["cpu_s"]), 3)
        rec["others_cores"] = round(max(0.0, others) / wall, 3)
        rec["disturbed"] = rec["others_cores"] > DISTURBED_CORES
    except (KeyError, ValueError, NameError, ZeroDivisionError):
        pass
    rec["loadavg_1m"] = os.getloadavg()[0]
    return rec


# --------------------------------------------------------------------------- #
# the bench
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class ProfileBenchConfig:
    """``fipstop bench profile``'s options (None: the default, or the --quick one)."""

    output: Output = Output()
    quick: bool = False
    seconds: float | None = None
    rounds: int | None = None
    variants: tuple[str, ...] = ()  # (): every variant
    calm_wait: float | None = None


def main(config: ProfileBenchConfig) -> int:
    """Run ``fipstop bench profile``, publish the result."""
    quick = config.quick
    seconds = config.seconds or (QUICK_SECONDS if quick else DEFAULT_SECONDS)
    rounds = config.rounds or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    calm = config.calm_wait
    calm = (0.0 if quick else 20.0) if calm is None else calm
    variants = list(config.variants) if config.variants else [*C_VARIANTS, *PY_VARIANTS]
    unknown = [v for v in variants if v not in DESCRIPTIONS]
    if unknown:
        raise FipsError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(DESCRIPTIONS)}")
    for v in list(variants):  # every variant needs its baseline in the same run
        b = BASELINE.get(v)
        if b and b not in variants:
            variants.insert(0, b)
    now = _dt.datetime.now(_dt.UTC)
    binary, why, build = build_c("profile-contend", (CONTEND_SRC, FIPS_SRC))
    c_vars = [v for v in variants if v in C_VARIANTS]
    py_vars = [v for v in variants if v in PY_VARIANTS]
    notes: list[str] = []
    if binary is None and c_vars:
        notes.append(f"C producer not built: {why}")
        c_vars = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fipstop-bench-profile-") as tmp:
        shm = Path(tmp) / "shm"
        shm.mkdir()
        argv = {
            "c": [str(binary), "--threads", str(PRODUCER_THREADS), "--seconds", str(seconds), "--mode", "fips",
                  "--shm-dir", str(shm), "--wait"] if binary else [],
            "python": [sys.executable, "-c", PY_PRODUCER, str(shm), str(seconds), str(PY_THREADS)],
        }
        for r in range(rounds):
            for group, vs in (("c", c_vars), ("python", py_vars)):
                order = vs if r % 2 == 0 else vs[::-1]
                for v in order:
                    busy = wait_calm(calm) if calm > 0 else None
                    rec = run_once(v, argv[group], seconds)
                    rec.update(round=r, group=group, busy_cores_before=busy)
                    runs.append(rec)
                    _log(f"round {r + 1}/{rounds} {v}: {rec.get('ops_per_s', rec.get('reason'))}")
    results = []
    targets = []
    for v in variants:
        mine = [x for x in runs if x["variant"] == v]
        entry: dict[str, Any] = {"variant": v, "description": DESCRIPTIONS[v],
                                 "ops_per_s": [x.get("ops_per_s") for x in mine]}
        bad = [x for x in mine if x["status"] != "ok"]
        if bad and len(bad) == len(mine):
            entry.update(status=bad[0]["status"], reason=bad[0].get("reason"))
        else:
            entry["status"] = "ok"
        ok_runs = [x for x in mine if x["status"] == "ok"]
        if ok_runs:
            entry["ops_per_s_median"] = round(statistics.median(x["ops_per_s"] for x in ok_runs), 1)
        if v == "bpf":
            entry["profiler_start_s"] = [x.get("profiler_start_s") for x in ok_runs]
            entry["bpf_lost_totals"] = [x.get("bpf_lost_totals", {}) for x in ok_runs]
        base = BASELINE.get(v)
        if base:
            pairs = []  # (ratio, disturbed)
            for x in ok_runs:
                paired = next((y for y in runs if y["variant"] == base and y["round"] == x["round"]
                               and y["status"] == "ok"), None)
                if paired and paired["ops_per_s"] > 0:
                    pairs.append((x["ops_per_s"] / paired["ops_per_s"],
                                  bool(x.get("disturbed") or paired.get("disturbed"))))
            calm_pairs = [q for q, d in pairs if not d]
            use = calm_pairs if len(calm_pairs) >= 2 else [q for q, _ in pairs]
            entry["baseline"] = base
            entry["ratios"] = [round(q, 4) for q, _ in pairs]
            entry["ratios_disturbed"] = [d for _, d in pairs]
            entry["pairs_used"] = "undisturbed" if use is calm_pairs else "all (fewer than 2 undisturbed)"
            entry["ratio"] = ratio_stats(use)
            passed, conclusive = judge(entry["ratio"])
            targets.append({
                "id": f"drop_{v}", "description": f"{DESCRIPTIONS[v]}: throughput drop vs {base}",
                "metric": "drop_pct", "op": "<=", "target": TARGET_DROP_PCT, "unit": "%",
                "measured": entry["ratio"]["drop_pct"], "ci95": entry["ratio"]["drop_ci95_pct"],
                "passed": passed, "conclusive": conclusive,
                "reason": None if passed is not None else (entry.get("reason") or "no paired runs"),
            })
        results.append(entry)
    doc = {
        "bench": "profile", "schema": SCHEMA,
        "command": config.output.command,
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_info(),
        "params": {"seconds_per_run": seconds, "rounds": rounds, "producer_threads": PRODUCER_THREADS,
                   "python_producer_threads": PY_THREADS,
                   "sample_every_s": SAMPLE_EVERY_S, "order": "alternating per round (ABC, CBA, ...)",
                   "calm_wait_s": calm, "calm_cores": CALM_CORES, "build": build,
                   "ci": "95 % t-interval of the mean of per-round ratios"},
        "notes": notes,
        "results": results,
        "targets": targets,
        "runs": runs,
    }
    publish("profile", doc, config.output, now, render_table, _log)
    return 0


def render_table(doc: dict[str, Any]) -> str:
    lines = [f"profiling cost ({doc['params']['rounds']} rounds x {doc['params']['seconds_per_run']} s, "
             f"{doc['machine'].get('nproc')} CPUs)",
             f"{'variant':<10} {'ops/s (median)':>15} {'ratio':>8} {'95% CI':>17} {'drop %':>7}  target <= 5 %"]
    for e in doc["results"]:
        r = e.get("ratio") or {}
        ci = r.get("ci95")
        t = next((t for t in doc["targets"] if t["id"] == f"drop_{e['variant']}"), None)
        verdict = ""
        if t:
            verdict = {True: "pass", False: "FAIL", None: "n/a"}[t["passed"]]
            verdict += "" if t["conclusive"] else " (inconclusive)"
        if e["status"] != "ok":
            lines.append(f"{e['variant']:<10} {e['status']}: {e.get('reason')}")
            continue
        lines.append(f"{e['variant']:<10} {e.get('ops_per_s_median', float('nan')):>15,.0f} "
                     f"{r.get('mean') if r.get('mean') is not None else '':>8} "
                     f"{(f'[{ci[0]:.3f}, {ci[1]:.3f}]' if ci else ''):>17} "
                     f"{r.get('drop_pct') if r.get('drop_pct') is not None else '':>7}  {verdict}")
    for n in doc.get("notes", []):
        lines.append(f"note: {n}")
    return "\n".join(lines)
