"""A producer's throughput with the dashboard attached and stopped (``fipstop bench ui``).

The ring bench's isolated monitor-overhead A/B (bench/ring/monitor_ab.c,
:func:`fipstop.bench.ring.monitors.run_monitor_isolated`) with the whole
dashboard as the monitor: the producer pinned to CPU 0 logs into a ring
emptied before each timed fill (no concurrent consumer, so no consumer
noise); runs with the app running and with it stopped (SIGSTOP) alternate
AB/BA; ratio = records/s with the app / without per pair, mean of the pairs
(the app's cost comes in bursts) with a 95 % t-interval.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import FIPS_SRC, build_c
from fipstop.bench.results import mean_ci
from fipstop.bench.ring.monitors import MONITOR_AB_SRC
from fipstop.children import popen
from fipstop.errors import exc_line

AB_TARGET = 0.01  # attaching the app changes a producer's throughput by <= 1 %
AB_RECORDS = 400_000  # per timed fill of monitor_ab.c (10 fills per run)


def _readline(proc: subprocess.Popen, timeout: float) -> str | None:
    """One line of ``proc``'s stdout within ``timeout`` s, else None."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        return proc.stdout.readline() if sel.select(timeout) else None
    finally:
        sel.close()


def producer_ab(pairs: int, interval: float, pty: bool) -> dict[str, Any]:
    """The ring bench's isolated monitor-overhead A/B (bench/ring/monitor_ab.c,
    ``fipstop.bench.ring.monitors.run_monitor_isolated``) with the whole dashboard as
    the monitor: the producer pinned to CPU 0 logs into a ring emptied before
    each timed fill (no concurrent consumer, so no consumer noise), runs with
    the app running and with it stopped (SIGSTOP) alternate AB/BA."""
    binary, why, build = build_c("monitor_ab", (MONITOR_AB_SRC, FIPS_SRC))
    if binary is None:
        return {"status": "skipped", "reason": why}
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    shm = Path(tempfile.mkdtemp(prefix="fipstop-uiab-", dir=base))
    out: dict[str, Any] = {
        "status": "ok",
        "method": "bench/ring/monitor_ab.c in 'stop' mode: producer pinned to CPU 0 logs 10 x "
                  f"{AB_RECORDS // 1000}k records of 128 B per run into a 64 MiB ring that a consumer in the same "
                  "process empties (untimed) before each fill; the monitor is the full dashboard (every probe "
                  f"`fipstop` samples, {interval:g} s interval, "
                  + ("under a 200x60 pseudo-terminal with textual's real driver" if pty else "headless 200x60")
                  + ", unpinned), started once and attached to the producer's domain; 'without' runs have it "
                  "stopped (SIGSTOP, timing starts once /proc says it is stopped), 'with' runs running (SIGCONT, "
                  "timing starts at once; textual's repaint-on-SIGCONT handler removed: it is no cost of an "
                  "attached dashboard), pairs AB/BA; ratio = throughput with / without per pair; mean with a 95 % "
                  "t-interval. A poll that fell due while the app was stopped runs as it resumes, inside the "
                  "timed 'with' run: its polls bunch into those runs.",
        "build_command": build.get("build_command", build.get("binary", "")),
        "records_per_run": AB_RECORDS * 10, "pairs": pairs, "interval_s": interval,
        "mode": "pty" if pty else "headless",
    }
    mab = app = None
    try:
        mab = popen([str(binary), str(shm), str(AB_RECORDS), "0", str(pairs), "stop"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert mab.stdin is not None and mab.stderr is not None
        if (_readline(mab, 30) or "").strip() != "ready":
            return {**out, "status": "error", "reason": "monitor_ab did not start: "
                    + exc_line(RuntimeError(mab.stderr.read() if mab.poll() is not None else "no 'ready'"))}
        app = popen([sys.executable, "-m", "fipstop.bench.ui_app", "_app", "--shm-dir", str(shm),
                                "--domain", "mab", "--interval", f"{interval:g}", "--until-term",
                                "--plain-sigcont"]
                               + (["--pty"] if pty else []),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TERM": "xterm-256color"})
        if (_readline(app, 60) or "").strip() != "ready":
            err = ""
            if app.poll() is not None and app.stderr is not None:
                err = ": " + exc_line(RuntimeError(app.stderr.read()[-400:] or f"exit {app.returncode}"))
            return {**out, "status": "error", "reason": "the app did not show its first frame within 60 s" + err}
        mab.stdin.write(f"{app.pid}\n")
        mab.stdin.flush()
        ratios: list[float] = []
        detail = []
        while True:
            line = _readline(mab, 120)
            if not line:
                break
            parts = line.split()
            if len(parts) == 4 and parts[0] == "pair":
                without_ns, with_ns = int(parts[2]), int(parts[3])
                ratios.append(without_ns / with_ns)
                n = AB_RECORDS * 10
                detail.append({"pair": int(parts[1]), "order": "A then B" if int(parts[1]) % 2 == 0 else "B then A",
                               "without_records_per_s": round(n / without_ns * 1e9),
                               "with_app_records_per_s": round(n / with_ns * 1e9),
                               "ratio": round(without_ns / with_ns, 5)})
        rc = mab.wait(timeout=30)
        if rc != 0 or not ratios:
            return {**out, "status": "error",
                    "reason": f"monitor_ab exit {rc}: " + exc_line(RuntimeError(mab.stderr.read() or "no pairs"))}
        m, lo, hi = mean_ci(ratios)
        out.update(ratio=round(m, 5), ratio_ci95=[round(lo, 5), round(hi, 5)],
                   ratio_median=round(statistics.median(ratios), 5), pairs_detail=detail)
        # A dead app would make every pair "without": the A/B would say 1.0.
        if app.poll() is not None:
            return {**out, "status": "error", "reason": f"the app exited ({app.returncode}) during the A/B"}
        os.kill(app.pid, signal.SIGCONT)  # it must run to answer SIGTERM
        app.terminate()
        rep = []
        try:
            so, _ = app.communicate(timeout=30)
            rep = [json.loads(x) for x in so.splitlines() if x.startswith("{")]
        except (subprocess.TimeoutExpired, ValueError):
            pass
        if not rep or not rep[-1].get("frames"):
            return {**out, "status": "error", "reason": "the app drew no frame during the A/B"}
        # its CPU over the A/B's wall time, about half of which it spent stopped
        out["app"] = {**rep[-1], "note": "cpu_pct_of_one_core is over the A/B's wall time, "
                                         "about half of which the app was stopped"}
        return out
    finally:
        for proc in (app, mab):
            if proc is not None and proc.poll() is None:
                proc.kill()  # SIGKILL ends a stopped process too
                proc.wait()
        import shutil

        shutil.rmtree(shm, ignore_errors=True)


def ab_verdict(ab: dict[str, Any]) -> str:
    """pass / fail when the 95 % interval of the ratio settles it; otherwise
    the mean's side of the target, marked as not resolved by the noise."""
    if ab.get("status") != "ok":
        return str(ab.get("status"))
    lo, hi = ab.get("ratio_ci95") or (ab["ratio"], ab["ratio"])
    if lo >= 1 - AB_TARGET:
        return "pass"
    if hi < 1 - AB_TARGET:
        return "fail"
    side = "pass" if ab["ratio"] >= 1 - AB_TARGET else "fail"
    return f"inconclusive (mean says {side}; the 95 % interval {lo:.3f}-{hi:.3f} is wider than the 1 % target)"
