"""One function per case of ``fipstop bench ring``: the producer and, for
fips, the C consumer draining; file, unix datagram and syslog(3) to an
rsyslogd of the bench's own."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fipstop.bench.results import output_line
from fipstop.bench.ring.children import Child, count_records, fs_type, pin_preexec, run_to_end
from fipstop.bench.ring.spec import CONSUMER_MIN_BATCH, FIPS_CASES, MONITOR_HZ, PEER_CASES, PROTO_CASES, CaseResult
from fipstop.bench.ring.workspace import Workspace
from fipstop.children import popen

__all__ = ["run_case", "run_fips"]


def run_none(ws: Workspace, size: int, case: str = "none") -> CaseResult:
    """none: the harness's loop alone (format each record); none_tsc: and one TSC read per record."""
    p, why = run_to_end(ws.produce_argv(case, size), ws.timeout(), preexec=ws.preexec())
    if p is None:
        return ws.skip(case, size, f"producer failed: {why}", "error")
    return ws.from_producer(
        case, size, p, delivered=None, drops=0, drop_detail={}, pinned={"producer_cpu": p.get("pinned_cpu")},
        notes="none + one __rdtsc() a record: what a per-record hardware timestamp costs" if case == "none_tsc"
        else "")


def run_fips(
    ws: Workspace,
    case: str,
    size: int,
    *,
    monitor: bool = False,
    domain: str | None = None,
    duration: float | None = None,
    ring_capacity: int | None = None,
    monitor_argv: Callable[[str], list[str]] | None = None,
    harness: Path | None = None,
    rate: float = 0.0,
) -> CaseResult:
    """fips_c / fips_c_batch / fips_python / fips_python_batch with a C consumer process.
    ``rate`` > 0 (C cases): the producer paced to that many records/s (keepup.py).

    ``monitor``: a monitor attached during the run: the C harness
    snapshotting at MONITOR_HZ, or ``monitor_argv(domain)`` (a Child:
    prints 'ready', a JSON line at SIGTERM), e.g. the full dashboard.
    ``harness``: another build of the C harness (``--against``: the previous
    libfips) for both the producer and the consumer; default ``ws.harness``."""
    if case.startswith("fips_python") and ws.py_reason:
        return ws.skip(case, size, ws.py_reason)
    if case == "fips_c_so" and harness is None:
        if ws.harness_so is None:
            return ws.skip(case, size, f"shared-library harness unavailable: {ws.harness_so_reason}")
        harness = ws.harness_so
    harness = harness or ws.harness
    assert harness is not None
    dom = domain or ws.domain(case, size)
    ws.unlink_domain(dom)
    cap = ring_capacity or ws.ring_capacity
    fa = ws.fips_args(dom)
    fa["ring_capacity"] = cap
    if rate > 0:
        fa["rate"] = f"{rate:.0f}"
    cons = Child(
        [
            str(harness),
            "consume",
            "--shm-dir",
            str(ws.shm_dir),
            "--domain",
            dom,
            "--name",
            "bench",
            "--ring-capacity",
            str(cap),
            "--backoff-us",
            f"{ws.consumer_backoff_us:g}",
            "--min-batch",
            str(CONSUMER_MIN_BATCH),
        ]
        + (["--cpu", str(ws.cons_cpu)] if ws.cons_cpu is not None else [])
    )
    mon: Child | None = None
    try:
        why = cons.wait_ready()
        if why:
            return ws.skip(case, size, f"consumer failed: {why}", "error")
        if monitor and monitor_argv is not None:
            mon = Child(monitor_argv(dom))
            why = mon.wait_ready(60.0)
            if why:
                return ws.skip(case, size, f"monitor failed: {why}", "error")
        elif monitor:
            mon = Child(
                [
                    str(harness),
                    "monitor",
                    "--shm-dir",
                    str(ws.shm_dir),
                    "--domain",
                    dom,
                    "--hz",
                    f"{MONITOR_HZ:g}",
                ]
            )
            why = mon.wait_ready()
            if why:
                return ws.skip(case, size, f"monitor failed: {why}", "error")
        if case.startswith("fips_c"):
            p, why = run_to_end(ws.produce_argv("fips_c" if case == "fips_c_so" else case, size, duration,
                                                harness=harness, **fa),
                                max(ws.timeout(), (duration or 0.0) + 60.0), preexec=ws.preexec())
        else:
            p, why = run_python(ws, case, size, dom, cap)
        mon_res = mon.stop() if mon else None
        c = cons.stop()
    finally:
        if mon:
            mon.kill()
        cons.kill()
        ws.unlink_domain(dom)
    if p is None:
        return ws.skip(case, size, f"producer failed: {why}", "error")
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
        detail["consumer_max_gap_ns"] = c.get("max_gap_ns")
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
    return ws.from_producer(
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


def run_python(ws: Workspace, case: str, size: int, dom: str,
               ring_capacity: int | None = None) -> tuple[dict[str, Any] | None, str | None]:
    argv = [
        sys.executable,
        "-m",
        "fipstop.bench.ring.pychild",
        "produce",
        "--case",
        case,
        "--size",
        str(size),
        "--duration",
        f"{ws.duration:g}",
        "--shm-dir",
        str(ws.shm_dir),
        "--domain",
        dom,
        "--ring-capacity",
        str(ring_capacity or ws.ring_capacity),
    ]
    if ws.prod_cpu is not None:
        argv += ["--cpu", str(ws.prod_cpu)]
    return run_to_end(argv, ws.timeout(), env=ws.py_env(), preexec=ws.preexec())


def run_none_python(ws: Workspace, size: int) -> CaseResult:
    p, why = run_python(ws, "none_python", size, ws.domain("none_python", size))
    if p is None:
        return ws.skip("none_python", size, f"producer failed: {why}", "error")
    return ws.from_producer(
        "none_python",
        size,
        p,
        delivered=None,
        drops=0,
        drop_detail={},
        pinned={"producer_cpu": p.get("pinned_cpu")},
        notes="Python loop calling len(record): the interpreter's floor for the Python cases",
    )


def run_file(ws: Workspace, size: int) -> CaseResult:
    path = ws.tmp / f"file-{size}.log"
    try:
        p, why = run_to_end(ws.produce_argv("file", size, file=path), ws.timeout(), preexec=ws.preexec())
        written = path.stat().st_size if path.exists() else 0
    finally:
        try:
            path.unlink()
        except OSError:
            pass
    if p is None:
        return ws.skip("file", size, f"producer failed: {why}", "error")
    drops = int(p["errors"]) + int(p["eagain"])
    return ws.from_producer(
        "file",
        size,
        p,
        delivered=written // size,
        drops=drops,
        drop_detail={"write_errors": p["errors"], "eagain": p["eagain"], "bytes_written": written},
        pinned={"producer_cpu": p.get("pinned_cpu")},
        notes=f"write(2) per record, O_APPEND, file in {ws.tmp.parent} ({fs_type(ws.tmp)})",
    )


def run_unix(ws: Workspace, size: int) -> CaseResult:
    sock = ws.tmp / f"u{size}.sock"
    rx = Child(
        [str(ws.harness), "recv", "--sock", str(sock)]
        + (["--cpu", str(ws.cons_cpu)] if ws.cons_cpu is not None else [])
    )
    try:
        why = rx.wait_ready()
        if why:
            return ws.skip("unix_dgram", size, f"receiver failed: {why}", "error")
        p, why = run_to_end(ws.produce_argv("unix_dgram", size, sock=sock), ws.timeout(), preexec=ws.preexec())
        r = rx.stop()
    finally:
        rx.kill()
    if p is None:
        return ws.skip("unix_dgram", size, f"producer failed: {why}", "error")
    drops = int(p["errors"]) + int(p["eagain"])
    return ws.from_producer(
        "unix_dgram",
        size,
        p,
        delivered=int(r["records"]) if r else None,
        drops=drops,
        drop_detail={"send_errors": p["errors"], "eagain": p["eagain"]},
        pinned={"producer_cpu": p.get("pinned_cpu"), "receiver_cpu": r.get("pinned_cpu") if r else None},
        notes="blocking send(2) on a connected SOCK_DGRAM socket; receiver is a C process doing recv(2)",
    )


def start_rsyslog(ws: Workspace, d: Path) -> tuple[subprocess.Popen | None, Path, Path, str | None]:
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
    assert ws.rsyslogd is not None
    proc = popen(
        [ws.rsyslogd, "-n", "-f", str(conf), "-i", str(pidf)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=pin_preexec(ws.cons_cpu, ws.nice),
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sock.exists():
            return proc, sock, out, None
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            return None, sock, out, f"rsyslogd exited {proc.returncode}: {output_line(err, 200)}"
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    return None, sock, out, "rsyslogd did not create its socket within 10 s"


def run_syslog(ws: Workspace, size: int) -> CaseResult:
    if not ws.rsyslogd:
        return ws.skip("syslog", size, "rsyslogd not found (apt-get install rsyslog)")
    d = ws.tmp / f"syslog-{size}"
    d.mkdir(exist_ok=True)
    proc, sock, out, why = start_rsyslog(ws, d)
    if proc is None:
        return ws.skip("syslog", size, why or "rsyslogd failed", "error")
    fallback = None
    try:
        p, why = run_to_end(
            ws.produce_argv("syslog", size, sock=sock, tmp=d, syslog_mode="ns"),
            ws.timeout(),
            preexec=ws.preexec(),
        )
        if p is None:
            fallback = f"real syslog(3) via mount namespace unavailable ({why}); used the wire-path emulation"
            p, why = run_to_end(
                ws.produce_argv("syslog", size, sock=sock, tmp=d, syslog_mode="wire"),
                ws.timeout(),
                preexec=ws.preexec(),
            )
        # let rsyslog write out what it queued, then stop it
        delivered, last, stable_since = 0, -1, time.monotonic()
        deadline = time.monotonic() + 15
        while p is not None and time.monotonic() < deadline:
            delivered = count_records(out)
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
        return ws.skip("syslog", size, f"producer failed: {why}", "error")
    delivered = count_records(out)
    try:
        out.unlink()
    except OSError:
        pass
    notes = str(p.get("syslog_how", ""))
    if fallback:
        notes += f"; {fallback}"
    notes += "; rsyslogd imuxsock on a private socket (rate limit off) -> omfile in a temp dir"
    return ws.from_producer(
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
        pinned={"producer_cpu": p.get("pinned_cpu"), "rsyslogd_cpu": ws.cons_cpu},
        notes=notes,
    )


def run_case(ws: Workspace, case: str, size: int) -> CaseResult:
    if case in PROTO_CASES:  # its own harness, built with the prototype's library
        from fipstop.bench.ring.proto import run_fipsipc

        try:
            return run_fipsipc(ws, case, size)
        except Exception as exc:  # one broken case must not lose the others
            return ws.skip(case, size, f"{type(exc).__name__}: {exc}", "error")
    if case in PEER_CASES:
        from fipstop.bench.ring.peers import run_peer

        try:
            return run_peer(ws, case, size)
        except Exception as exc:  # one broken case must not lose the others
            return ws.skip(case, size, f"{type(exc).__name__}: {exc}", "error")
    if case in ("none_python", "fips_python", "fips_python_batch") and ws.py_reason:
        return ws.skip(case, size, ws.py_reason)
    if case == "none_python":
        return run_none_python(ws, size)
    if ws.harness is None:
        if case == "syslog" and not ws.rsyslogd:
            return ws.skip(case, size, "rsyslogd not found (apt-get install rsyslog)")
        return ws.skip(case, size, f"C harness unavailable: {ws.harness_reason}")
    try:
        if case in ("none", "none_tsc"):
            return run_none(ws, size, case)
        if case in FIPS_CASES:
            return run_fips(ws, case, size)
        if case == "file":
            return run_file(ws, size)
        if case == "unix_dgram":
            return run_unix(ws, size)
        if case == "syslog":
            return run_syslog(ws, size)
    except Exception as exc:  # one broken case must not lose the others
        return ws.skip(case, size, f"{type(exc).__name__}: {exc}", "error")
    return ws.skip(case, size, "unknown case", "error")
