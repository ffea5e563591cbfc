"""``fipstop bench ring --against REV``: the current libfips producer against
another revision's, in the same run.

Why: a fix in the ring's protocol (issue 14) must not cost producer speed, and
on a shared 2-CPU machine two runs made minutes apart differ by more than any
such cost.  So both builds are measured here, interleaved, with a control that
shows how far two measurements of the *same* code drift apart:

- REV's ``fipstop/csrc/fips.c``, ``fips.h`` (and every header fips.c or fips.h
  includes with ``#include "..."``, e.g. ``fips_explore.h``) and REV's own
  ``bench/ring/ringbench.c`` come from ``git show REV:...`` into
  ``build/bench/against-<rev>/src`` and are built there with the same compiler
  and flags as the current harness (:func:`fipstop.bench.cbuild.build_c`), so
  the old library runs with its own bench driver and its own consumer.
- Per round and payload (64/128/256 B) the ``fips_c`` case (one producer
  thread calling ``fips_log``, a C consumer process draining; same pinning)
  runs A B B A for current vs REV, and A A' A' A for current vs current (the
  A/A control; same binary).  A side's figure for the round is the mean of its
  two runs, so a linear drift of the machine's speed cancels; the round's
  ratio is current / other.  Reported per payload: the median records/s of
  each side, the median of the per-round ratios, every round, and the records
  attempted / delivered to the consumer / dropped for each side.
- With valgrind installed, the instructions per record of the producer's
  ``fips_log`` (callgrind, ``--toggle-collect=fips_log``: counted only inside
  fips_log and what it calls) for both builds and for the current build
  twice: a figure the machine's load cannot move.
- ``uptime`` before and after and the runs the scheduler disturbed (the
  producer or consumer waited runnable > 5 % of the run) say how noisy the
  machine was.

The result goes to ``bench/results/ring-against-<UTC stamp>.json`` (or
``--out``) with the exact command.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import FIPS_HDR, FIPS_SRC, PACKAGE_DIR, SOURCE_TREE, build_c
from fipstop.bench.results import machine_info, output_line, publish
from fipstop.bench.ring.cases import run_fips
from fipstop.bench.ring.children import Child, build_harness, log, run_to_end
from fipstop.bench.ring.report import to_json
from fipstop.bench.ring.spec import CONSUMER_MIN_BATCH, ENV_DURATION, ISSUE14_BASE, CaseResult, RingConfig
from fipstop.bench.ring.workspace import Workspace
from fipstop.errors import FipsError

__all__ = ["ISSUE14_BASE", "main"]

SCHEMA = 1
CASE = "fips_c"
DURATION_S = 1.0  # per run; 4 runs per comparison, payload and round
QUICK_DURATION_S = 0.3
ROUNDS = 7
QUICK_ROUNDS = 3
TINY_ROUNDS = 2
CALLGRIND_DURATION_S = 0.5  # producer time under callgrind (~1/50 of native speed)
# a ring the producer under callgrind cannot fill in CALLGRIND_DURATION_S even with its consumer starved by
# other load: a dropped record takes a shorter path and would pull the count down
CALLGRIND_RING_CAPACITY = 64 << 20
LIB_FILES = ("fipstop/csrc/fips.c", "fipstop/csrc/fips.h")
HARNESS_FILE = "bench/ring/ringbench.c"
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)"', re.M)


def _git(*args: str) -> str:
    if SOURCE_TREE is None:
        raise FipsError("bench ring --against needs the git checkout fipstop runs from (this is an installed package)")
    try:
        res = subprocess.run(["git", "-C", str(SOURCE_TREE), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise FipsError(f"bench ring --against: git unavailable: {exc}") from None
    if res.returncode != 0:
        raise FipsError(f"bench ring --against: git {' '.join(args)}: {output_line(res.stderr, 200)}")
    return res.stdout


def resolve(spec: str) -> str:
    """REV as a full commit hash; a one-line FipsError when it is not one."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}").strip()
    except FipsError as exc:
        if "git rev-parse" not in str(exc):
            raise
        raise FipsError(f"bench ring --against: {spec!r} is not a commit of {SOURCE_TREE} "
                        "(or the clone is shallow)") from None


def fetch_sources(rev: str, dest: Path) -> tuple[Path, Path, list[str]]:
    """REV's fips.c, its local headers and ringbench.c written into ``dest``;
    returns (ringbench.c, fips.c, the repository paths taken)."""
    dest.mkdir(parents=True, exist_ok=True)
    taken: list[str] = []
    pending = list(LIB_FILES)
    while pending:
        path = pending.pop(0)
        if path in taken:
            continue
        text = _git("show", f"{rev}:{path}")
        (dest / Path(path).name).write_text(text, encoding="utf-8")
        taken.append(path)
        for inc in _LOCAL_INCLUDE.findall(text):
            pending.append(f"{Path(path).parent.as_posix()}/{inc}")
    harness = dest / Path(HARNESS_FILE).name
    harness.write_text(_git("show", f"{rev}:{HARNESS_FILE}"), encoding="utf-8")
    taken.append(HARNESS_FILE)
    return harness, dest / "fips.c", taken


def build_against(rev: str) -> tuple[Path, dict[str, Any]]:
    """REV's harness with REV's libfips, built in a directory of its own."""
    base = (SOURCE_TREE / "build" / "bench" if SOURCE_TREE is not None
            else Path(tempfile.gettempdir()) / f"fipstop-bench-{os.getuid()}")
    d = base / f"against-{rev[:12]}"
    src = d / "src"
    try:
        harness_c, fips_c, taken = fetch_sources(rev, src)
    except OSError as exc:
        raise FipsError(f"bench ring --against: cannot write {src}: {exc}") from None
    binary, why, info = build_c("ringbench", (harness_c, fips_c), cache_dir=d, include_dir=src)
    if binary is None:
        raise FipsError(f"bench ring --against: cannot build {rev[:12]}'s harness: {why}")
    info["sources"] = [f"git show {rev[:12]}:{p}" for p in taken]
    return binary, info


def current_source() -> dict[str, Any]:
    """Which code "current" is: the working tree at HEAD, with or without uncommitted changes."""
    rel = [str(p.relative_to(PACKAGE_DIR.parent)) for p in (FIPS_SRC, FIPS_HDR)]
    head = _git("rev-parse", "HEAD").strip()
    dirty = _git("status", "--porcelain", "--", *rel, HARNESS_FILE).strip()
    return {"rev": head, "source": "working tree: " + ", ".join([*rel, HARNESS_FILE]),
            "uncommitted_changes": bool(dirty)}


def _uptime() -> dict[str, Any]:
    try:
        text = subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        text = ""
    return {"uptime": text or None, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _run(ws: Workspace, harness: Path, size: int, label: str) -> CaseResult:
    try:
        return run_fips(ws, CASE, size, domain=f"{ws.tag}-ab{size}-{label}", harness=harness)
    except Exception as exc:  # one broken run must not lose the others
        return ws.skip(CASE, size, f"{type(exc).__name__}: {exc}", "error")


def _run_facts(r: CaseResult) -> dict[str, Any]:
    return {"status": r.status, "reason": r.skip_reason, "records_per_s": r.records_per_s,
            "attempted_per_s": r.attempted_per_s, "attempted": r.attempted, "delivered": r.delivered,
            "dropped": r.drops, "elapsed_s": r.elapsed_s, "ns_per_record_p50": r.ns_per_record_p50,
            "consumer_lost": r.drop_detail.get("consumer_lost"),
            "consumer_evicted": r.drop_detail.get("consumer_evicted"),
            "disturbed": r.disturbed, "cpu_share": r.cpu_share}


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _side_round(runs: list[CaseResult], key: str) -> float | None:
    vals = [getattr(r, key) for r in runs if r.status == "ok" and getattr(r, key)]
    return statistics.fmean(vals) if len(vals) == len(runs) else None


def _totals(runs: list[CaseResult]) -> dict[str, Any]:
    ok = [r for r in runs if r.status == "ok"]
    return {"runs": len(runs), "runs_ok": len(ok),
            "attempted": sum(r.attempted or 0 for r in ok),
            "delivered": sum(r.delivered or 0 for r in ok) if all(r.delivered is not None for r in ok) else None,
            "dropped": sum(r.drops or 0 for r in ok),
            "disturbed_runs": sum(1 for r in ok if r.disturbed)}


def summarize(name: str, sides: tuple[str, str], size: int,
              rounds: list[dict[str, list[CaseResult]]]) -> dict[str, Any]:
    """One comparison at one payload: per side the median over rounds, and the median of the
    per-round ratios (each round's two figures come from the same minutes)."""
    a, b = sides
    out: dict[str, Any] = {"comparison": name, "size_bytes": size, "ratio_of": f"{a} / {b}", "sides": {}}
    per: dict[str, dict[str, list[float | None]]] = {s: {"records_per_s": [], "attempted_per_s": []} for s in sides}
    for rd in rounds:
        for s in sides:
            for key in ("records_per_s", "attempted_per_s"):
                per[s][key].append(_side_round(rd[s], key))
    for s in sides:
        rec = [x for x in per[s]["records_per_s"] if x is not None]
        att = [x for x in per[s]["attempted_per_s"] if x is not None]
        out["sides"][s] = {"records_per_s_median": _median(rec), "attempted_per_s_median": _median(att),
                           "rounds_records_per_s": per[s]["records_per_s"],
                           **_totals([r for rd in rounds for r in rd[s]])}
    for key, tag in (("records_per_s", "ratio"), ("attempted_per_s", "attempted_ratio")):
        ratios = [x / y if x is not None and y else None for x, y in zip(per[a][key], per[b][key], strict=True)]
        good = [x for x in ratios if x is not None]
        out[f"{tag}_median"] = _median(good)
        out[f"round_{tag}s"] = ratios
        if tag == "ratio":
            out["ratio_min"] = min(good) if good else None
            out["ratio_max"] = max(good) if good else None
    out["rounds"] = [{s: [_run_facts(r) for r in rd[s]] for s in sides} for rd in rounds]
    return out


def _callgrind_one(ws: Workspace, vg: str, harness: Path, size: int, label: str, duration: float) -> dict[str, Any]:
    """Instructions inside fips_log per record: the producer under callgrind, its consumer native."""
    dom = f"{ws.tag}-cg{size}-{label}"
    ws.unlink_domain(dom)
    cg = ws.tmp / f"callgrind.{label}.{size}"
    cons = Child([str(harness), "consume", "--shm-dir", str(ws.shm_dir), "--domain", dom, "--name", "bench",
                  "--ring-capacity", str(CALLGRIND_RING_CAPACITY), "--backoff-us", f"{ws.consumer_backoff_us:g}",
                  "--min-batch", str(CONSUMER_MIN_BATCH)]
                 + (["--cpu", str(ws.cons_cpu)] if ws.cons_cpu is not None else []))
    try:
        why = cons.wait_ready()
        if why:
            return {"status": "error", "reason": f"consumer failed: {why}"}
        argv = [vg, "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=fips_log",
                f"--callgrind-out-file={cg}",
                *ws.produce_argv(CASE, size, duration, harness=harness,
                                 **{**ws.fips_args(dom), "ring_capacity": CALLGRIND_RING_CAPACITY})]
        p, why = run_to_end(argv, duration * 200 + 120, preexec=ws.preexec())
        c = cons.stop()
    finally:
        cons.kill()
        ws.unlink_domain(dom)
    if p is None:
        return {"status": "error", "reason": f"producer under callgrind failed: {why}"}
    total = None
    try:
        for ln in cg.read_text(encoding="utf-8", errors="replace").splitlines():
            if ln.startswith(("summary:", "totals:")):
                total = int(ln.split()[1])
                break
    except (OSError, ValueError, IndexError):
        total = None
    finally:
        cg.unlink(missing_ok=True)
    attempted = int(p.get("attempted") or 0)
    if total is None or attempted <= 0:
        return {"status": "error", "reason": f"no callgrind total (records {attempted})"}
    return {"status": "ok", "instructions_per_record": round(total / attempted, 2), "instructions": total,
            "records": attempted, "dropped": p.get("dropped"), "delivered": (c or {}).get("records")}


def instruction_counts(ws: Workspace, builds: dict[str, Path]) -> dict[str, Any]:
    """Per payload: fips_log's instructions per record for each build, the current one twice."""
    vg = shutil.which("valgrind")
    if vg is None:
        return {"status": "unavailable", "reason": "valgrind is not installed (apt-get install valgrind)"}
    duration = min(CALLGRIND_DURATION_S, ws.duration)
    out: dict[str, Any] = {
        "status": "ok",
        "tool": "valgrind --tool=callgrind --collect-atstart=no --toggle-collect=fips_log (inclusive: "
                "fips_log and what it calls; the record formatting and the clock reads are outside; user-space "
                "instructions only, a system call would not be counted)",
        "producer_seconds": duration,
        "ring_capacity_bytes": CALLGRIND_RING_CAPACITY,
        "note": "records with a consumer draining natively, on a ring the slowed producer cannot fill; a dropped "
                "record (ring full) would take a shorter path, so drops are listed",
        "sizes": []}
    for size in ws.sizes:
        row: dict[str, Any] = {"size_bytes": size}
        for label, harness in (("current", builds["current"]), ("previous", builds["previous"]),
                               ("current_again", builds["current"])):
            row[label] = _callgrind_one(ws, vg, harness, size, label, duration)
            log(f"callgrind {label} {size} B: {row[label].get('instructions_per_record', row[label].get('reason'))}")
        ipr = {k: row[k].get("instructions_per_record") for k in ("current", "previous", "current_again")}
        row["ratio_current_over_previous"] = (round(ipr["current"] / ipr["previous"], 4)
                                              if ipr["current"] and ipr["previous"] else None)
        row["ratio_current_over_current_again"] = (round(ipr["current"] / ipr["current_again"], 4)
                                                   if ipr["current"] and ipr["current_again"] else None)
        out["sizes"].append(row)
    return out


def measure(ws: Workspace, builds: dict[str, Path], rounds: int) -> list[dict[str, Any]]:
    """The interleaved rounds: per payload, A B B A of each comparison; the comparisons alternate
    which goes first from round to round."""
    comparisons = (("current_vs_previous", ("current", "previous")),
                   ("control_current_vs_current", ("current", "current_again")))
    data: dict[tuple[str, int], list[dict[str, list[CaseResult]]]] = {
        (n, z): [] for n, _ in comparisons for z in ws.sizes}
    for rnd in range(rounds):
        for size in ws.sizes:
            order = comparisons if rnd % 2 == 0 else comparisons[::-1]
            for name, (a, b) in order:
                runs: dict[str, list[CaseResult]] = {a: [], b: []}
                for side in (a, b, b, a):
                    harness = builds["previous"] if side == "previous" else builds["current"]
                    runs[side].append(_run(ws, harness, size, side))
                data[(name, size)].append(runs)
                rate = {s: _side_round(runs[s], "records_per_s") for s in (a, b)}
                log(f"round {rnd + 1}/{rounds} {size} B {name}: "
                    + ", ".join(f"{s} {x / 1e6:.2f} M rec/s" if x else f"{s} failed" for s, x in rate.items()))
    return [summarize(n, sides, z, data[(n, z)]) for n, sides in comparisons for z in ws.sizes]


def verdicts(comps: list[dict[str, Any]], ins: dict[str, Any]) -> list[dict[str, Any]]:
    """Per payload: the ratio beside the control's spread and the instruction ratio."""
    by = {(c["comparison"], c["size_bytes"]): c for c in comps}
    irow = {r["size_bytes"]: r for r in ins.get("sizes", [])}
    out = []
    for (name, size), c in by.items():
        if name != "current_vs_previous":
            continue
        ctl = by.get(("control_current_vs_current", size), {})
        lo = ctl.get("ratio_min")
        r = c.get("ratio_median")
        out.append({"size_bytes": size, "ratio_current_over_previous": r,
                    "control_ratio_median": ctl.get("ratio_median"),
                    "control_ratio_range": [lo, ctl.get("ratio_max")],
                    "no_loss_beyond_noise": (r >= lo) if r is not None and lo is not None else None,
                    "instructions_ratio_current_over_previous": irow.get(size, {}).get("ratio_current_over_previous")})
    return out


def render(doc: dict[str, Any]) -> str:
    lines = [f"bench ring --against {doc['previous']['rev_spec']} ({doc['previous']['rev'][:12]}): "
             f"{CASE}, {doc['params']['rounds']} rounds of A B B A, {doc['params']['duration_s_per_run']:g} s a run",
             f"load before: {doc['regime']['before']['uptime']}", f"load after:  {doc['regime']['after']['uptime']}",
             f"{'size':>6} {'current M/s':>12} {'previous M/s':>13} {'ratio':>7} {'A/A ratio':>10} "
             f"{'A/A range':>14} {'instr cur':>10} {'instr prev':>11}"]
    irow = {r["size_bytes"]: r for r in doc["instructions"].get("sizes", [])}
    by = {(c["comparison"], c["size_bytes"]): c for c in doc["comparisons"]}

    def f(x: float | None, spec: str) -> str:
        return format(x, spec) if x is not None else "-"

    def m(x: float | None) -> str:
        return f(x / 1e6 if x is not None else None, ".2f")

    for v in doc["verdicts"]:
        z = v["size_bytes"]
        s = by[("current_vs_previous", z)]["sides"]
        ir = irow.get(z, {})
        lo, hi = v["control_ratio_range"]
        lines.append(
            f"{z:>5}B {m(s['current']['records_per_s_median']):>12} {m(s['previous']['records_per_s_median']):>13} "
            f"{f(v['ratio_current_over_previous'], '.3f'):>7} {f(v['control_ratio_median'], '.3f'):>10} "
            f"{f(lo, '.3f') + '..' + f(hi, '.3f'):>14} "
            f"{f(ir.get('current', {}).get('instructions_per_record'), '.1f'):>10} "
            f"{f(ir.get('previous', {}).get('instructions_per_record'), '.1f'):>11}")
    if doc["instructions"].get("status") != "ok":
        lines.append(f"instructions: {doc['instructions'].get('reason')}")
    for c in doc["comparisons"]:
        sides = ", ".join(f"{k} {v['disturbed_runs']}/{v['runs_ok']} disturbed, {v['dropped']}/{v['attempted']} dropped"
                          for k, v in c["sides"].items())
        lines.append(f"{c['size_bytes']:>5}B {c['comparison']}: {sides}")
    return "\n".join(lines)


def main(config: RingConfig) -> int:
    """Run ``fipstop bench ring --against REV``, publish the result."""
    assert config.against
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    rev = resolve(config.against)
    cur_src = current_source()
    if config.duration is None and not os.environ.get(ENV_DURATION):
        config = replace(config, duration=QUICK_DURATION_S if config.quick else DURATION_S)
    before = _uptime()
    started = time.monotonic()
    ws = Workspace(config)
    try:
        cur, why, cur_info = build_harness()
        if cur is None:
            raise FipsError(f"bench ring --against: cannot build the current harness: {why}")
        prev, prev_info = build_against(rev)
        builds = {"current": cur, "previous": prev}
        rounds = config.reps or (TINY_ROUNDS if ws.tiny else QUICK_ROUNDS if ws.quick else ROUNDS)
        log(f"current ({cur_src['rev'][:12]}{' + changes' if cur_src['uncommitted_changes'] else ''}) vs "
            f"{config.against} ({rev[:12]}), {rounds} rounds, {ws.duration:g} s a run")
        comps = measure(ws, builds, rounds)
        ins = instruction_counts(ws, builds)
    finally:
        ws.cleanup()
    after = _uptime()
    ncpu = os.cpu_count() or 1
    doc = to_json({
        "bench": "ring-against",
        "schema": SCHEMA,
        "command": config.output.command,
        "date": now.isoformat().replace("+00:00", "Z"),
        "machine": machine_info(),
        "regime": {
            "before": before, "after": after, "cpus": ncpu,
            "note": "a shared machine: the load average counts runnable tasks over the last 1/5/15 min; above "
                    f"{ncpu} the bench's two pinned processes competed for their CPUs (see each run's disturbed "
                    "flag and cpu_share, and the A/A control's spread, for how much that moved the figures); "
                    "instruction counts are not moved by load",
        },
        "current": {**cur_src, "build": cur_info},
        "previous": {"rev_spec": config.against, "rev": rev, "build": prev_info},
        "params": {
            "case": CASE, "duration_s_per_run": ws.duration, "rounds": rounds, "sizes_bytes": list(ws.sizes),
            "order": "per round and payload: current previous previous current, then current current' current' "
                     "current (the A/A control, same binary); the two comparisons alternate which runs first; "
                     "a side's figure for a round is the mean of its two runs",
            "ratio": "median over rounds of (current's figure / the other side's figure in the same round)",
            "records_per_s": "records accepted by fips_log (not dropped) per second of producer time; with the "
                             "ring full (dropped > 0) that is the consumer's drain rate more than the producer's",
            "attempted_per_s": "fips_log calls per second (accepted + dropped: the drop path is shorter)",
            "no_loss_beyond_noise": "ratio median >= the lowest round ratio of the A/A control",
            "pinning": ws.pin_note, "nice": ws.nice, "ring_capacity_bytes": ws.ring_capacity,
            "consumer": "each build's own harness: C consumer process, fips_consumer_read(max 4096)/release, "
                        f"{ws.consumer_backoff_us:g} us local back-off after a read of < {CONSUMER_MIN_BATCH}",
        },
        "comparisons": comps,
        "instructions": ins,
        "verdicts": verdicts(comps, ins),
        "wall_s": round(time.monotonic() - started, 2),
    })
    publish("ring-against", doc, config.output, now, render, log)
    return 0
