"""``fipstop bench bind``: one run per mode and round, then the result.

:class:`Bench` owns the temporary directories, the tools and the helpers it
built; :meth:`Bench.run_one` starts named for one mode (under ``fipstop
wrap``, in a private mount namespace with rsyslogd, or with a no-op
syslog(3)), loads it with dnsperf, and counts what was logged; the shim's
cost per call is measured apart (:mod:`fipstop.bench.bind.shim`).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fipstop.bench import rsyslog
from fipstop.bench.bind.dns import (
    CLIENTS,
    NAMED_THREADS,
    OUTSTANDING,
    QUERY_TOKEN,
    THREADS,
    ZONE,
    free_port,
    named_conf,
    parse_dnsperf,
    write_queries,
    write_zone,
)
from fipstop.bench.bind.dnstap import CONTENT_TYPE, count_frames
from fipstop.bench.bind.hostload import CALM_CORES, busy_cpu_s, comm_of, proc_cpu_s, proc_table, top_others, wait_calm
from fipstop.bench.bind.modes import (
    ALL_MODES,
    DEFAULT_CALM_WAIT_S,
    DEFAULT_ROUNDS,
    DEFAULT_SECONDS,
    DESCRIPTIONS,
    DISTURBED_CORES,
    DRAINED_MODES,
    FIPS_MODES,
    MODES,
    NATIVE_MODES,
    QUICK_SECONDS,
    REFERENCE_QPS,
    SCHEMA,
    BindConfig,
    Run,
)
from fipstop.bench.bind.native import native_named
from fipstop.bench.bind.procs import (
    build_drain,
    build_nullsyslog,
    find_program,
    start_capture,
    start_drain,
    start_named,
    stop_drain,
    stop_process,
    tool_version,
)
from fipstop.bench.bind.report import quality, reference, render_table, summarize, targets
from fipstop.bench.bind.shim import measure_shim_call
from fipstop.bench.results import machine_info, output_line, publish
from fipstop.children import popen
from fipstop.errors import FipsError
from fipstop.preload import bind_shim_path, shim_path
from fipstop.ring import ConsumerStat, ConsumerState, DomainSnapshot, RingState, snapshot_domain

__all__ = ["Bench", "main"]


def log(msg: str) -> None:
    print(f"bench bind: {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, config: BindConfig) -> None:
        self.config = config
        self.quick = config.quick
        self.seconds = float(config.seconds) if config.seconds else (QUICK_SECONDS if self.quick else DEFAULT_SECONDS)
        self.rounds = int(config.rounds) if config.rounds else (1 if self.quick else DEFAULT_ROUNDS)
        if config.modes:
            bad = [m for m in config.modes if m not in ALL_MODES]
            if bad:
                raise ValueError(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(ALL_MODES)}")
            self.modes = tuple(m for m in ALL_MODES if m in config.modes)
        else:
            self.modes = MODES
        self.keep = config.keep
        cw = config.calm_wait
        self.calm_wait = float(cw) if cw is not None else (0.0 if self.quick else DEFAULT_CALM_WAIT_S)
        self.named = find_program("named")
        self.dnsperf = find_program("dnsperf")
        self.rsyslogd = rsyslog.find_rsyslogd()
        self.fstrm_capture = find_program("fstrm_capture")
        self.native_named: Path | None = None
        self.native_reason = ""
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-bind-"))
        self.tmp.chmod(0o755)
        shm_base = config.shm_dir or os.environ.get("FIPS_SHM_DIR") or "/dev/shm"
        if not os.path.isdir(shm_base):
            shm_base = tempfile.gettempdir()
        self.shm = Path(tempfile.mkdtemp(prefix="fipstop-bench-bind-", dir=shm_base))
        self.zone = self.tmp / f"{ZONE}.zone"
        self.queries = self.tmp / "queries.txt"
        self.queries_info: dict[str, Any] = {}
        self.drain: Path | None = None
        self.drain_reason: str | None = None
        self.drain_info: dict[str, Any] = {}
        self.nullsyslog: Path | None = None
        self.nullsyslog_reason: str | None = None
        self.build_info: dict[str, Any] = {}
        self.fipstop = self._fipstop_argv()
        self.versions: dict[str, Any] = {}
        self.notes: list[str] = []

    @staticmethod
    def _fipstop_argv() -> list[str]:
        exe = Path(sys.executable).parent / "fipstop"
        return [str(exe)] if exe.exists() else [sys.executable, "-m", "fipstop"]

    def dnsperf_argv(self, port: int) -> list[str]:
        return [
            self.dnsperf or "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(self.queries),
            "-l", f"{self.seconds:g}", "-c", str(CLIENTS), "-T", str(THREADS), "-q", str(OUTSTANDING),
        ]

    # the load: dnsperf here; the client scaling (fipstop.bench.bind.scaling) sends from many addresses
    load_name = "dnsperf"

    def load_argv(self, port: int) -> list[str]:
        return self.dnsperf_argv(port)

    def parse_load(self, text: str) -> dict[str, Any] | None:
        return parse_dnsperf(text)

    def named_argv(self, conf: Path, named: str | None = None) -> list[str]:
        return [named or self.named or "named", "-f", "-c", str(conf), "-n", str(NAMED_THREADS)]

    def cleanup(self) -> None:
        if self.keep:
            log(f"kept {self.tmp} and {self.shm}")
            return
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)

    # -- set-up --------------------------------------------------------------- #
    def missing(self) -> str | None:
        if not self.named:
            return "named not found (apt-get install bind9)"
        if not self.dnsperf:
            return "dnsperf not found (apt-get install dnsperf)"
        return None

    def prepare(self) -> None:
        write_zone(self.zone)
        self.queries_info = write_queries(self.queries)
        if any(m in FIPS_MODES for m in self.modes):
            self.drain, self.drain_reason, self.drain_info = build_drain()
            self.build_info["drain"] = self.drain_info
            if self.drain_reason:
                self.notes.append(f"C drain unavailable ({self.drain_reason}): mode fips uses `fipstop tail`")
        if any(m in NATIVE_MODES for m in self.modes):
            self.native_named, self.native_reason = native_named()
        if "null_syslog" in self.modes:
            self.nullsyslog, self.nullsyslog_reason, info = build_nullsyslog()
            self.build_info["nullsyslog"] = info
        self.versions = {
            "named": tool_version([self.named or "named", "-v"], r"(BIND .*)"),
            "rsyslogd": tool_version([self.rsyslogd or "rsyslogd", "-v"], r"rsyslogd\s+([^\s,]+)")
            if self.rsyslogd
            else None,
        }
        if self.native_named is not None:
            self.versions["named_native"] = tool_version([str(self.native_named), "-v"], r"(BIND .*)")
            self.versions["named_native_path"] = str(self.native_named)

    # -- processes ------------------------------------------------------------ #
    def _start_tail(self, domain: str, name: str) -> tuple[subprocess.Popen | None, str | None]:
        proc = popen(
            [*self.fipstop, "--shm-dir", str(self.shm), "tail", "--domain", domain, "--consumer", name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        # registered once the consumer table shows it
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr is not None else ""
                return None, f"fipstop tail exited {proc.returncode}: {output_line(err)}"
            if self._consumer_stat(domain, name) is not None:
                return proc, None
            time.sleep(0.05)
        stop_process(proc, 5)
        return None, "fipstop tail did not register within 15 s"

    def _snapshot(self, domain: str) -> DomainSnapshot:
        return snapshot_domain(domain, self.shm)

    def _consumer_stat(self, domain: str, name: str) -> ConsumerStat | None:
        try:
            snap = self._snapshot(domain)
        except Exception:
            return None
        for cs in snap.consumer_stats():
            if cs.name == name and cs.state != ConsumerState.FREE:
                return cs
        return None

    def _ring_totals(self, domain: str, pid: int) -> dict[str, int]:
        snap = self._snapshot(domain)
        tot = {"rings": 0, "records_committed": 0, "records_dropped": 0, "bytes_committed": 0,
               "bytes_dropped": 0, "records_truncated": 0, "full_events": 0, "foreign_rings": 0}
        for rs in snap.ring_stats():
            if rs.state == RingState.FREE:
                continue
            if rs.pid != pid:
                tot["foreign_rings"] += 1
                continue
            tot["rings"] += 1
            counts = {"records_committed": rs.records_committed, "records_dropped": rs.records_dropped,
                      "bytes_committed": rs.bytes_committed, "bytes_dropped": rs.bytes_dropped,
                      "records_truncated": rs.records_truncated, "full_events": rs.full_events}
            for k, v in counts.items():
                tot[k] += int(v)
        return tot

    # -- one run ---------------------------------------------------------------- #
    def run_one(self, mode: str, rnd: int) -> Run:
        run = Run(mode=mode, round=rnd)
        d = self.tmp / f"{mode}-r{rnd}"
        d.mkdir()
        d.chmod(0o755)
        if self.calm_wait > 0:
            run.calm_wait_s, run.busy_cores_before = wait_calm(self.calm_wait)
        port = free_port()
        conf = d / "named.conf"
        conf.write_text(named_conf(mode, d, port, self.zone), encoding="utf-8")
        domain = f"bind-{mode}-r{rnd}"
        named = helper = rs = None
        env = None
        helper_kind = None
        helper_pid: int | None = None
        try:
            argv = self.named_argv(conf)
            if mode in NATIVE_MODES:
                if self.native_named is None:
                    return self._fail(run, self.native_reason, "skipped")
                argv = self.named_argv(conf, str(self.native_named))
            if mode == "syslog":
                why = rsyslog.devlog_reason()
                if why:
                    return self._fail(run, why, "skipped")
                rs, why = rsyslog.start_rsyslogd(d / "rsyslog", self.rsyslogd)
                if rs is None:
                    return self._fail(run, why or "rsyslogd failed", "error" if self.rsyslogd else "skipped")
                argv = rsyslog.devlog_argv(rs.sock, d, argv)
                run.helper, helper_pid = "rsyslogd", rs.pid
            elif mode in ("fips_bind", "fips_native"):
                if not bind_shim_path().is_file():
                    return self._fail(run, f"{bind_shim_path()} not built (apt-get install bind9-dev; make lib)",
                                      "skipped")
                argv = [*self.fipstop, "--shm-dir", str(self.shm), "wrap", "--bind", "--domain", domain, "--",
                        *argv]
            elif mode in FIPS_MODES:
                argv = [*self.fipstop, "--shm-dir", str(self.shm), "wrap", "--domain", domain, "--", *argv]
            elif mode == "dnstap":
                if not self.fstrm_capture:
                    return self._fail(run, "fstrm_capture not found (apt-get install fstrm-bin)", "skipped")
                helper, why = start_capture(self.fstrm_capture, d / "dnstap.sock", d / "dnstap.fstrm")
                if helper is None:
                    return self._fail(run, why or "fstrm_capture failed", "error")
                helper_kind = "fstrm_capture"
            elif mode == "null_syslog":
                if self.nullsyslog is None:
                    return self._fail(run, self.nullsyslog_reason or "no-op syslog not built", "skipped")
                env = dict(os.environ, LD_PRELOAD=str(self.nullsyslog))
            named, why = start_named(argv, d, port, env)
            if named is None:
                return self._fail(run, why or "named failed", "error")
            if comm_of(named.pid) != "named":
                self.notes.append(f"{mode}: pid {named.pid} is {comm_of(named.pid)!r}, not named")
            try:
                run.named_threads = len(os.listdir(f"/proc/{named.pid}/task"))
            except OSError:
                pass
            if mode in DRAINED_MODES and self.drain is not None:
                helper, why = start_drain(self.drain, self.shm, domain, "bench-drain")
                helper_kind = "drain"
            elif mode == "fips_tail" or (mode in DRAINED_MODES and self.drain is None):
                helper, why = self._start_tail(domain, "bench-tail")
                helper_kind = "tail"
            else:
                why = None
            if why:
                return self._fail(run, why, "error")
            if helper is not None:
                run.helper, helper_pid = {"drain": "drain (bench/bind/drain.c)", "tail": "fipstop tail > /dev/null",
                                          "fstrm_capture": "fstrm_capture"}[helper_kind or ""], helper.pid

            # -- the load ------------------------------------------------------ #
            ring0 = self._ring_totals(domain, named.pid) if mode in FIPS_MODES else None
            run.loadavg_before = [round(x, 2) for x in os.getloadavg()]
            ours = {os.getpid(), named.pid} | ({helper_pid} if helper_pid else set())
            p0 = proc_table(ours)
            n0, h0, b0, w0 = proc_cpu_s(named.pid), proc_cpu_s(helper_pid), busy_cpu_s(), time.monotonic()
            dp = popen(self.load_argv(port), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            # CPU figures come from a window inside the load: dnsperf waits for
            # late answers after -l and then spins at full CPU (up to its 5 s
            # timeout when queries were lost), which is not the load.
            time.sleep(max(0.2, self.seconds - 0.1))
            n1, h1, b1, w1 = proc_cpu_s(named.pid), proc_cpu_s(helper_pid), busy_cpu_s(), time.monotonic()
            d1 = proc_cpu_s(dp.pid)
            run.other_top = top_others(p0, proc_table(ours | {dp.pid}), w1 - w0)
            out = b""
            assert dp.stdout is not None
            while True:
                chunk = dp.stdout.read(65536)
                if not chunk:
                    break
                out += chunk
            _, status, ru = os.wait4(dp.pid, 0)
            dp.returncode = os.waitstatus_to_exitcode(status)
            text = out.decode(errors="replace")
            res = self.parse_load(text)
            if res is None or dp.returncode != 0:
                return self._fail(run, f"{self.load_name} exit {dp.returncode}: {output_line(text, 240)}", "error")
            run.load = res.get("load")
            if "dnsperf" not in self.versions and self.load_name == "dnsperf":
                m = re.search(r"Version\s+(\S+)", text)
                self.versions["dnsperf"] = m.group(1) if m else None
            run.qps, run.queries_sent, run.queries_completed = res["qps"], res["queries_sent"], res["queries_completed"]
            run.queries_lost, run.run_time_s = res["queries_lost"], res["run_time_s"]
            run.latency_avg_s, run.rcodes = res["latency_avg_s"], res["rcodes"]
            win = w1 - w0
            run.cpu_window_s = round(win, 3)
            run.dnsperf_cpu_s = round(d1, 3) if d1 is not None else None
            run.dnsperf_cpu_s_total = round(ru.ru_utime + ru.ru_stime, 3)
            if n0 is not None and n1 is not None and win > 0:
                run.named_cpu_s = round(n1 - n0, 3)
                run.named_cpu_cores = round((n1 - n0) / win, 3)
                if run.qps:
                    run.named_cpu_us_per_query = round((n1 - n0) / win / run.qps * 1e6, 2)
            if h0 is not None and h1 is not None:
                run.helper_cpu_s = round(h1 - h0, 3)
            if b0 is not None and b1 is not None and n0 is not None and n1 is not None and win > 0:
                mine = (n1 - n0) + (run.helper_cpu_s or 0.0) + (d1 or 0.0)
                run.other_cpu_cores = round(max(0.0, (b1 - b0) - mine) / win, 3)
                run.disturbed = run.other_cpu_cores > DISTURBED_CORES

            # -- what was logged ------------------------------------------------ #
            # named stops first: its counters are then final (shutdown messages
            # go to the file channel), and a consumer can read everything.
            named_pid = named.pid
            rc = stop_process(named)
            named = None
            if rc not in (0, None):
                run.notes = f"named exited {rc}"
            if mode in FIPS_MODES:
                run.ring = self._ring_totals(domain, named_pid)
                assert ring0 is not None
                # the load window alone: named's startup messages (logged to syslog
                # before it reads its config) and the probe are not in it
                run.ring_load = {k: run.ring[k] - ring0[k] for k in
                                 ("records_committed", "records_dropped", "records_truncated", "full_events")}
                if helper_kind == "tail":
                    cs = self._consumer_stat(domain, "bench-tail")
                    # tail may still be behind: give it time to catch up
                    deadline = time.monotonic() + 30
                    while cs is not None and cs.lag_records > 0 and time.monotonic() < deadline:
                        time.sleep(0.1)
                        cs = self._consumer_stat(domain, "bench-tail")
                    run.consumer = {"kind": "fipstop tail",
                                    "records": int(cs.records_released) if cs else None,
                                    "lag_records_at_stop": int(cs.lag_records) if cs else None}
                    stop_process(helper, 10)
                    run.log_lines = run.consumer["records"]
                elif helper_kind == "drain" and helper is not None:
                    c = stop_drain(helper)
                    if c is None:
                        return self._fail(run, "drain gave no result", "error")
                    run.consumer = {"kind": "C drain", **c}
                    run.log_lines = int(c["matched"])
                    if c.get("invalid") or c.get("format_mismatched"):
                        return self._fail(run, f"drain: {c.get('invalid')} binary query records did not validate, "
                                               f"{c.get('format_mismatched')} formatted lines disagreed with the "
                                               "binary match", "error")
                else:
                    run.log_lines = run.ring_load["records_committed"]
                helper = None
            if mode == "dnstap" and helper is not None:
                # named closed its dnstap stream on exit; SIGINT ends the capture, which closes the file
                helper.send_signal(signal.SIGINT)
                stop_process(helper, 20)
                helper = None
                tap = count_frames(d / "dnstap.fstrm", ZONE)
                run.dnstap = asdict(tap)
                if tap.damaged:
                    return self._fail(run, f"dnstap capture: {tap.damaged}", "error")
                run.log_lines = tap.matched
            if mode == "file":
                run.log_lines = rsyslog.count_token(d / "queries.log", QUERY_TOKEN)
            elif mode == "syslog":
                assert rs is not None
                want = run.queries_completed or 0
                run.log_lines = rsyslog.wait_settled(rs.out, QUERY_TOKEN, want)
            if run.log_lines is not None and run.queries_completed:
                run.logged_per_answered = round(run.log_lines / run.queries_completed, 6)
            return run
        finally:
            if helper is not None:
                stop_process(helper, 5)
            stop_process(named)
            if rs is not None:
                rs.stop()
            if not self.keep:
                shutil.rmtree(d, ignore_errors=True)
                try:
                    (self.shm / f"fips.{domain}").unlink()
                except OSError:
                    pass

    @staticmethod
    def _fail(run: Run, reason: str, status: str) -> Run:
        run.status, run.reason = status, reason.replace("\n", " ")
        return run

    # -- all modes --------------------------------------------------------------- #
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        runs: list[Run] = []
        why = self.missing()
        if why:
            runs = [self._fail(Run(mode=m, round=0), why, "skipped") for m in self.modes]
        else:
            self.prepare()
            for rnd in range(self.rounds):
                # ABBA: every other round runs the modes in reverse order, so a
                # drift of the machine's load does not favour the modes run first
                order = self.modes if rnd % 2 == 0 else tuple(reversed(self.modes))
                for pos, mode in enumerate(order):
                    log(f"round {rnd + 1}/{self.rounds}: {mode} ({self.seconds:g} s)")
                    try:
                        r = self.run_one(mode, rnd)
                    except Exception as exc:  # one broken mode must not lose the others' results
                        r = self._fail(Run(mode=mode, round=rnd), f"{type(exc).__name__}: {exc}", "error")
                    r.order = pos
                    if r.status != "ok":
                        log(f"  {mode}: {r.status}: {r.reason}")
                    else:
                        log(f"  {mode}: {r.qps:.0f} q/s, logged {r.log_lines}")
                    runs.append(r)
        results = summarize(self.modes, runs)
        shim_call = self.shim_call(results) if not why else None
        return {"results": results, "targets": targets(results, shim_call), "runs": runs,
                "shim_call": shim_call, "wall_s": time.monotonic() - t0}

    def shim_call(self, results: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The shim's cost per syslog(3) call against a no-op one, alternated
        in one process (fipstop.bench.bind.shim): resolves what the noisy
        queries/s cannot.  Runs with mode fips."""
        if "fips" not in self.modes:
            return None
        if self.nullsyslog is None:
            self.nullsyslog, self.nullsyslog_reason, _ = build_nullsyslog()
        if self.nullsyslog is None or self.drain is None or not shim_path().is_file():
            return {"status": "skipped",
                    "reason": self.nullsyslog_reason or self.drain_reason or f"{shim_path()} not built"}
        floor = next((r for r in results if r["mode"] == "null_syslog" and r["status"] == "ok"), None)
        log("the shim's cost per call, against a no-op syslog(3) in the same process ...")
        try:
            return measure_shim_call(self.shm, shim_path(), self.nullsyslog, self.drain,
                                     floor["named_cpu_us_per_query_median"] if floor else None)
        except Exception as exc:  # report, do not lose the modes' results
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}

    def params(self) -> dict[str, Any]:
        return {
            "seconds_per_mode": self.seconds,
            "rounds": self.rounds,
            "modes": list(self.modes),
            "mode_descriptions": {m: DESCRIPTIONS[m] for m in self.modes},
            "dnsperf_command": shlex.join(self.dnsperf_argv(0))
            .replace(" -p 0 ", " -p PORT ")
            .replace(str(self.queries), "TMP/queries.txt"),
            "named_command": shlex.join(self.named_argv(Path("CONF"))),
            "fips_command": shlex.join(["fipstop", "--shm-dir", "DIR", "wrap", "--domain", "D", "--",
                                        *self.named_argv(Path("CONF"))]),
            "fips_bind_command": shlex.join(["fipstop", "--shm-dir", "DIR", "wrap", "--bind", "--domain", "D", "--",
                                             *self.named_argv(Path("CONF"))]),
            "dnstap_setup": f"named.conf: querylog no; dnstap {{ auth query; }}; dnstap-output unix SOCK; "
            f"fstrm_capture -t {CONTENT_TYPE} -u SOCK -w FILE; log_lines = AUTH_QUERY frames of type A "
            f"under {ZONE}",
            "round_order": "ABBA: even rounds run the modes in the listed order, odd rounds in reverse",
            "syslog_setup": "named in `unshare --mount` with /dev/log -> the socket of `rsyslogd -n -f CONF` "
            "(imuxsock, RateLimit.Interval=0, omfile)",
            "queries_file": self.queries_info,
            "zone": ZONE,
            "named_threads": NAMED_THREADS,
            "ring_capacity_bytes": 1 << 20,
            "versions": self.versions,
            "builds": self.build_info,
            "pinning": "none: named, dnsperf and the helpers share the machine's CPUs",
            "ratio_method": "per round, mode q/s / none q/s of the same round; the median over the rounds "
            "where neither run was disturbed (all rounds when none was calm); q/s and the other figures "
            "come from the median (by q/s) undisturbed round",
            "calm_wait_s": self.calm_wait,
            "calm_rule": f"before each run, wait up to calm_wait_s for the machine to be < {CALM_CORES} cores "
            "busy over 1 s",
            "disturbed_rule": f"other processes used > {DISTURBED_CORES} cores during the load (/proc/stat "
            "busy time (user, nice, system, irq, softirq, steal) minus named, dnsperf and the helper; other_top "
            "names the processes)",
            "reference_qps_design_md": REFERENCE_QPS,
            "notes": self.notes,
        }


# --------------------------------------------------------------------------- #


def main(config: BindConfig) -> int:
    """Run ``fipstop bench bind``, publish the result."""
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        bench = Bench(config)
    except ValueError as exc:
        raise FipsError(f"bench bind: {exc}") from None
    try:
        body = bench.run()
    finally:
        bench.cleanup()
    machine = machine_info()
    machine["loadavg_at_start"] = load_start
    machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "bench": "bind",
        "schema": SCHEMA,
        "command": config.output.command,
        "date": now.isoformat().replace("+00:00", "Z"),
        "machine": machine,
        "params": bench.params(),
        "results": body["results"],
        "shim_call": body["shim_call"],
        "targets": body["targets"],
        "reference": reference(body["results"]),
        "quality": quality(body["results"]),
        "wall_s": round(body["wall_s"], 2),
    }
    publish("bind", doc, config.output, now, render_table, log)
    return 0
