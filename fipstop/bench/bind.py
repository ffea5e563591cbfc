"""``fipstop bench bind``: a real BIND 9 under dnsperf load, per logging mode (issue #3).

One run starts named (Debian's, ``named -f -c CONF -n 2``) on 127.0.0.1 on a
port of its own, once per mode and round, and loads it with

    dnsperf -s 127.0.0.1 -p PORT -d queries.txt -l S -c 8 -T 2 -q 200

for S seconds.  The modes differ only in where the ``queries`` category goes
(every other category goes to a file channel in every mode):

===============  ==============================================================
mode             query logging
===============  ==============================================================
``none``         ``querylog no`` (the baseline)
``null_syslog``  a syslog channel, with syslog(3) replaced (LD_PRELOAD) by a
                 no-op (bench/bind/nullsyslog.c): BIND still builds every
                 query line, nothing is sent.  The floor for any transport
                 behind syslog(3); the gap to ``none`` is BIND's own cost
``file``         a BIND file channel (``print-time yes``) in the temp dir
``syslog``       a syslog channel; named runs in a private mount namespace whose
                 ``/dev/log`` is the socket of an rsyslogd of the bench's own,
                 which writes to a file (see fipstop/bench/rsyslog.py)
``fips``         a syslog channel, named started by ``fipstop wrap`` (the
                 LD_PRELOAD shim logs into FIPS rings); a small C consumer
                 (bench/bind/drain.c) drains the rings and counts the lines
``fips_nocons``  the same with no consumer: the rings fill and drop (counted)
``fips_tail``    (optional, ``--modes``) the shim with ``fipstop tail > /dev/null``
                 as the consumer: what a Python consumer costs on this machine
===============  ==============================================================

For each mode it reports queries/s (dnsperf's "Queries per second") and its
ratio to ``none`` (the median of per-round ratios: rounds run the modes back to
back, so each ratio pairs runs that are close in time), the log lines recorded
vs the queries answered, the FIPS ring counters (committed / dropped /
truncated: drops are counted, none silent), and the CPU time named and the
logging helper (rsyslogd, the drain) used during the load.  The issue's
targets are reported as target vs measured with pass/fail; nothing here
asserts them.  Results go to bench/results/bind-<date>.json and
bind-latest.json (or ``--out PATH``) with the exact command, machine, load
average and date.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fipstop.bench import rsyslog

from fipstop.bench.cbuild import build_c
from fipstop.bench.results import machine_info, output_line, publish

SCHEMA = 1
MODES: tuple[str, ...] = ("none", "null_syslog", "file", "syslog", "fips", "fips_nocons")
OPTIONAL_MODES: tuple[str, ...] = ("fips_tail",)
ALL_MODES = MODES + OPTIONAL_MODES
FIPS_MODES = ("fips", "fips_nocons", "fips_tail")
DESCRIPTIONS = {
    "none": "querylog no (baseline)",
    "null_syslog": "queries category -> syslog(3) replaced by a no-op (BIND's own query-log cost; transport floor)",
    "file": "queries category -> BIND file channel (print-time yes)",
    "syslog": "queries category -> syslog(3) -> /dev/log (private mount ns) -> rsyslogd imuxsock -> omfile",
    "fips": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; C drain consumer",
    "fips_nocons": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; no consumer (fills, drops)",
    "fips_tail": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; `fipstop tail > /dev/null`",
}

DEFAULT_SECONDS = 10.0
QUICK_SECONDS = 3.0
DEFAULT_ROUNDS = 3  # rounds over all modes (1 with --quick); each mode reports its median round
CLIENTS, THREADS, OUTSTANDING = 8, 2, 200
NAMED_THREADS = 2
ZONE = "example.test"
N_NAMES = 5000  # hosts h0..h4999 in the zone
NX_EVERY = 10  # every 10th query line is a name that does not exist (NXDOMAIN)
N_QUERY_LINES = 20000
# In the query-log line of every dnsperf query ("... query: h12.example.test IN A -E(0)K ..."),
# not in the SOA query of the readiness probe nor in any other message.
QUERY_TOKEN = f"{ZONE} IN A ".encode()
REFERENCE_QPS = {"none": 21800.0, "file": 16400.0, "syslog": 11200.0}  # DESIGN.md, 2-core machine
TARGET_QPS_RATIO = 0.95
# A run during which other processes used more than this many cores (of the
# machine's busy time in /proc/stat, minus named, dnsperf and the helper) was
# disturbed; medians prefer undisturbed rounds.
DISTURBED_CORES = 0.25
# Before each run, wait (up to --calm-wait seconds, default 60; 0 with --quick)
# until the machine is quiet: busy < CALM_CORES over a 1 s sample.
DEFAULT_CALM_WAIT_S = 60.0
CALM_CORES = 0.3
TARGET_LOGGED = 0.999

REPO_ROOT = Path(__file__).resolve().parents[2]
DRAIN_SRC = REPO_ROOT / "bench" / "bind" / "drain.c"
NULLSYSLOG_SRC = REPO_ROOT / "bench" / "bind" / "nullsyslog.c"
FIPS_SRC = REPO_ROOT / "fipstop" / "csrc" / "fips.c"
FIPS_HDR = REPO_ROOT / "fipstop" / "csrc" / "fips.h"
CFLAGS = ("-O2", "-std=c11", "-D_GNU_SOURCE", "-pthread")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _log(msg: str) -> None:
    print(f"bench bind: {msg}", file=sys.stderr, flush=True)


def _one_line(text: str, limit: int = 300) -> str:
    return output_line(text, limit)


def _find(prog: str) -> str | None:
    return shutil.which(prog) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/bin") if os.access(p := f"{d}/{prog}", os.X_OK)), None
    )


# --------------------------------------------------------------------------- #
# machine, tools
# --------------------------------------------------------------------------- #
def _version(argv: list[str], pattern: str) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, r.stdout + r.stderr)
    return m.group(1).strip() if m else None


def build_drain(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """bench/bind/drain.c + fips.c: the C consumer of mode fips."""
    return build_c("binddrain", (DRAIN_SRC, FIPS_SRC), cache_dir=cache_dir)


def build_nullsyslog(cache_dir: Path | None = None) -> tuple[Path | None, str | None, dict[str, Any]]:
    """bench/bind/nullsyslog.c: the no-op syslog(3) preload of mode null_syslog."""
    return build_c("libnullsyslog", (NULLSYSLOG_SRC,), ("-shared", "-fPIC"), cache_dir=cache_dir)


# --------------------------------------------------------------------------- #
# DNS helpers
# --------------------------------------------------------------------------- #
def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (named listens on both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    t.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port on 127.0.0.1")


def soa_answered(port: int, zone: str = ZONE, timeout: float = 0.5) -> bool:
    """One UDP SOA query to 127.0.0.1#port: True on a NOERROR answer."""
    qid = random.randrange(1, 0xFFFF)
    qname = b"".join(bytes([len(label)]) + label.encode() for label in zone.split(".")) + b"\0"
    pkt = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 0) + qname + struct.pack(">HH", 6, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(pkt, ("127.0.0.1", port))
            data = s.recv(4096)
        except OSError:
            return False
    if len(data) < 12:
        return False
    rid, flags, _qd, an, _ns, _ar = struct.unpack(">HHHHHH", data[:12])
    return rid == qid and flags & 0x8000 and (flags & 0xF) == 0 and an >= 1


def write_zone(path: Path) -> None:
    lines = [
        "$TTL 300",
        f"@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 3600 600 86400 300",
        f"@ IN NS ns.{ZONE}.",
        "ns IN A 127.0.0.1",
    ]
    lines += [f"h{i} IN A 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(N_NAMES)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_queries(path: Path, n: int = N_QUERY_LINES, seed: int = 3) -> dict[str, Any]:
    """dnsperf's input: n lines 'NAME TYPE'; every NX_EVERY-th is NXDOMAIN."""
    rng = random.Random(seed)
    nx = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            if i % NX_EVERY == NX_EVERY - 1:
                f.write(f"nx{rng.randrange(1 << 30)}.{ZONE} A\n")
                nx += 1
            else:
                f.write(f"h{rng.randrange(N_NAMES)}.{ZONE} A\n")
    return {"lines": n, "nxdomain_lines": nx, "names_in_zone": N_NAMES, "seed": seed}


def named_conf(mode: str, d: Path, port: int, zone_file: Path) -> str:
    """named.conf for one query-logging mode of the bench."""
    if mode == "none":
        return render_named_conf(d, port, zone_file, querylog=False, channels={}, categories={"queries": "null"})
    if mode == "file":
        return render_named_conf(d, port, zone_file, querylog=True,
                                 channels={"qfile": f'file "{d}/queries.log"; severity info; print-time yes;'},
                                 categories={"queries": "qfile"})
    # syslog and the fips modes: syslog(3), which the shim replaces under wrap
    return render_named_conf(d, port, zone_file, querylog=True,
                             channels={"qsyslog": "syslog daemon; severity info;"}, categories={"queries": "qsyslog"})


def render_named_conf(d: Path, port: int, zone_file: Path, *, querylog: bool, channels: dict[str, str],
                      categories: dict[str, str], allow_query: str | None = None) -> str:
    """The one named.conf every bench and test here starts named with: foreground-friendly paths in ``d``,
    loopback only on ``port``, no recursion, the test zone, a ``main`` file channel for everything else, and the
    given extra ``channels`` (name -> destination clause) and ``categories`` (name -> channel)."""
    chans = "".join(f"    channel {name} {{ {dest} }};\n" for name, dest in channels.items())
    cats = "".join(f"    category {name} {{ {chan}; }};\n" for name, chan in categories.items())
    allow = f"    allow-query {{ {allow_query}; }};\n" if allow_query else ""
    return f"""options {{
    directory "{d}";
    pid-file "{d}/named.pid";
    session-keyfile "{d}/session.key";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
    querylog {"yes" if querylog else "no"};
{allow}}};
controls {{ }};
logging {{
    channel main {{ file "{d}/named.log"; severity info; print-time yes; }};
{chans}    category default {{ main; }};
    category general {{ main; }};
{cats}}};
zone "{ZONE}" {{ type primary; file "{zone_file}"; }};
"""


_DNSPERF_FIELDS = {
    "queries_sent": r"Queries sent:\s+(\d+)",
    "queries_completed": r"Queries completed:\s+(\d+)",
    "queries_lost": r"Queries lost:\s+(\d+)",
    "qps": r"Queries per second:\s+([\d.]+)",
    "run_time_s": r"Run time \(s\):\s+([\d.]+)",
    "latency_avg_s": r"Average Latency \(s\):\s+([\d.]+)",
}


def parse_dnsperf(text: str) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for key, pat in _DNSPERF_FIELDS.items():
        m = re.search(pat, text)
        if not m:
            if key in ("queries_completed", "qps"):
                return None
            out[key] = None
            continue
        out[key] = float(m.group(1)) if key in ("qps", "run_time_s", "latency_avg_s") else int(m.group(1))
    codes: dict[str, int] = {}
    m = re.search(r"Response codes:\s+(.*)", text)
    if m:
        for name, count in re.findall(r"([A-Z]+) (\d+) \(", m.group(1)):
            codes[name] = int(count)
    out["rcodes"] = codes
    return out


def proc_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process (all its threads), seconds; None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def busy_cpu_s() -> float | None:
    """CPU time the whole machine spent busy (all CPUs, /proc/stat), seconds."""
    try:
        with open("/proc/stat", "rb") as f:
            parts = f.readline().split()
    except OSError:
        return None
    vals = [int(x) for x in parts[1:]] + [0] * 8
    # user nice system idle iowait irq softirq steal guest guest_nice; guest is inside user.
    # Tick accounting charges a softirq to the task it interrupted (its stime)
    # and to the softirq column, so irq/softirq are counted here too.
    return sum(vals[i] for i in (0, 1, 2, 5, 6, 7)) / CLK_TCK


def proc_table(exclude: set[int]) -> dict[int, tuple[str, float]]:
    """pid -> (comm, cpu seconds) of every process but those in exclude."""
    out: dict[int, tuple[str, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                s = f.read()
        except OSError:
            continue
        i, j = s.find(b"("), s.rfind(b")")
        fields = s[j + 2 :].split()
        try:
            out[int(name)] = (s[i + 1 : j].decode(errors="replace"), (int(fields[11]) + int(fields[12])) / CLK_TCK)
        except (IndexError, ValueError):
            continue
    return out


def top_others(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], wall_s: float,
               n: int = 3) -> list[dict[str, Any]]:
    """The processes (not ours) that used the most CPU between two proc_table()s."""
    use: dict[str, float] = {}
    for pid, (comm, cpu) in after.items():
        d = cpu - before[pid][1] if pid in before else cpu
        if d > 0:
            use[comm] = use.get(comm, 0.0) + d
    top = sorted(use.items(), key=lambda kv: -kv[1])[:n]
    return [{"comm": c, "cores": round(v / wall_s, 3)} for c, v in top if v / wall_s >= 0.01]


def wait_calm(max_wait_s: float, threshold: float = CALM_CORES) -> tuple[float, float | None]:
    """Sample the machine's busy CPU for 1 s at a time until it is below
    threshold cores or max_wait_s passed: (seconds waited, last sample)."""
    t0 = time.monotonic()
    load = None
    while True:
        b0, w0 = busy_cpu_s(), time.monotonic()
        time.sleep(1.0)
        b1, w1 = busy_cpu_s(), time.monotonic()
        if b0 is None or b1 is None:
            return round(time.monotonic() - t0, 1), None
        load = round((b1 - b0) / (w1 - w0), 3)
        if load < threshold or time.monotonic() - t0 >= max_wait_s:
            return round(time.monotonic() - t0, 1), load


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --------------------------------------------------------------------------- #
# results
# --------------------------------------------------------------------------- #
@dataclass
class Run:
    """One mode, one round."""

    mode: str
    round: int
    status: str = "ok"  # ok | error | skipped
    reason: str | None = None
    qps: float | None = None
    queries_sent: int | None = None
    queries_completed: int | None = None
    queries_lost: int | None = None
    rcodes: dict[str, int] = field(default_factory=dict)
    run_time_s: float | None = None
    latency_avg_s: float | None = None
    log_lines: int | None = None  # query-log lines recorded (file / rsyslog output / consumed)
    logged_per_answered: float | None = None
    ring: dict[str, int] | None = None  # fips modes: summed over named's rings, at the end
    ring_load: dict[str, int] | None = None  # the same counters, increase during the load
    consumer: dict[str, Any] | None = None  # fips with a consumer
    cpu_window_s: float | None = None  # the CPU figures are over this window inside the load
    named_cpu_s: float | None = None
    named_cpu_cores: float | None = None  # named_cpu_s / cpu_window_s
    named_cpu_us_per_query: float | None = None
    helper: str | None = None  # rsyslogd / drain / tail
    helper_cpu_s: float | None = None
    dnsperf_cpu_s: float | None = None  # in the window
    dnsperf_cpu_s_total: float | None = None  # the whole process, including its wait for late answers
    loadavg_before: list[float] = field(default_factory=list)
    other_cpu_cores: float | None = None  # CPU other processes used during the load
    other_top: list[dict[str, Any]] = field(default_factory=list)  # who used it (processes alive at the end)
    calm_wait_s: float | None = None  # waited this long for a quiet machine before the run
    busy_cores_before: float | None = None  # machine busy just before the run (1 s sample)
    disturbed: bool | None = None
    named_threads: int | None = None
    notes: str = ""


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# --------------------------------------------------------------------------- #
# the bench
# --------------------------------------------------------------------------- #
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick = bool(getattr(args, "quick", False))
        secs = getattr(args, "seconds", None)
        self.seconds = float(secs) if secs else (QUICK_SECONDS if self.quick else DEFAULT_SECONDS)
        rounds = getattr(args, "rounds", None)
        self.rounds = int(rounds) if rounds else (1 if self.quick else DEFAULT_ROUNDS)
        modes = getattr(args, "modes", None)
        if modes:
            want = [m.strip() for m in (modes.split(",") if isinstance(modes, str) else modes) if m.strip()]
            bad = [m for m in want if m not in ALL_MODES]
            if bad:
                raise ValueError(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(ALL_MODES)}")
            self.modes = tuple(m for m in ALL_MODES if m in want)
        else:
            self.modes = MODES
        self.keep = bool(getattr(args, "keep", False))
        cw = getattr(args, "calm_wait", None)
        self.calm_wait = float(cw) if cw is not None else (0.0 if self.quick else DEFAULT_CALM_WAIT_S)
        self.named = _find("named")
        self.dnsperf = _find("dnsperf")
        self.rsyslogd = rsyslog.find_rsyslogd()
        self.tmp = Path(tempfile.mkdtemp(prefix="fipstop-bench-bind-"))
        self.tmp.chmod(0o755)
        shm_base = getattr(args, "shm_dir", None) or os.environ.get("FIPS_SHM_DIR") or "/dev/shm"
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

    def named_argv(self, conf: Path) -> list[str]:
        return [self.named or "named", "-f", "-c", str(conf), "-n", str(NAMED_THREADS)]

    def cleanup(self) -> None:
        if self.keep:
            _log(f"kept {self.tmp} and {self.shm}")
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
        if "null_syslog" in self.modes:
            self.nullsyslog, self.nullsyslog_reason, info = build_nullsyslog()
            self.build_info["nullsyslog"] = info
        self.versions = {
            "named": _version([self.named or "named", "-v"], r"(BIND .*)"),
            "rsyslogd": _version([self.rsyslogd or "rsyslogd", "-v"], r"rsyslogd\s+([^\s,]+)")
            if self.rsyslogd
            else None,
        }

    # -- processes ------------------------------------------------------------ #
    def _start_named(
        self, argv: list[str], d: Path, port: int, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen | None, str | None]:
        out = open(d / "named.out", "wb")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=d,
                                    env=env)
        except OSError as exc:
            return None, f"cannot start named: {exc}"
        finally:
            out.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return None, f"named exited {proc.returncode} before answering: " + self._named_tail(d)
            if soa_answered(port):
                return proc, None
            time.sleep(0.1)
        self._stop(proc)
        return None, f"named did not answer on 127.0.0.1#{port} within 30 s: " + self._named_tail(d)

    @staticmethod
    def _named_tail(d: Path) -> str:
        text = ""
        for name in ("named.out", "named.log"):
            try:
                text += (d / name).read_text(errors="replace")
            except OSError:
                pass
        return _one_line("\n".join(text.splitlines()[-4:]), 300) or "(no output)"

    @staticmethod
    def _stop(proc: subprocess.Popen | None, timeout: float = 20.0) -> int | None:
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return proc.returncode

    def _start_drain(self, domain: str, name: str) -> tuple[subprocess.Popen | None, str | None]:
        assert self.drain is not None
        proc = subprocess.Popen(
            [str(self.drain), str(self.shm), domain, name, QUERY_TOKEN.decode()],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        r, _, _ = select.select([proc.stdout], [], [], 15)
        line = proc.stdout.readline() if r else ""
        if line.startswith("ready"):
            return proc, None
        self._stop(proc, 5)
        err = (proc.stderr.read() if proc.stderr else "") + line
        return None, f"drain did not start: {_one_line(err, 200)}"

    @staticmethod
    def _stop_drain(proc: subprocess.Popen) -> dict[str, Any] | None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None
        for line in reversed((out or "").splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
        return None

    def _start_tail(self, domain: str, name: str) -> tuple[subprocess.Popen | None, str | None]:
        proc = subprocess.Popen(
            [*self.fipstop, "--shm-dir", str(self.shm), "tail", "--domain", domain, "--consumer", name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        # registered once the consumer table shows it
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return None, f"fipstop tail exited {proc.returncode}: {_one_line(proc.stderr.read() or '')}"
            if self._consumer_stat(domain, name) is not None:
                return proc, None
            time.sleep(0.05)
        self._stop(proc, 5)
        return None, "fipstop tail did not register within 15 s"

    def _snapshot(self, domain: str):
        from fipstop.ring import snapshot_domain

        return snapshot_domain(domain, self.shm)

    def _consumer_stat(self, domain: str, name: str):
        try:
            snap = self._snapshot(domain)
        except Exception:
            return None
        for cs in snap.consumer_stats():
            if cs.name == name and cs.state != 0:
                return cs
        return None

    def _ring_totals(self, domain: str, pid: int) -> dict[str, int]:
        snap = self._snapshot(domain)
        tot = {"rings": 0, "records_committed": 0, "records_dropped": 0, "bytes_committed": 0,
               "bytes_dropped": 0, "records_truncated": 0, "full_events": 0, "foreign_rings": 0}
        for rs in snap.ring_stats():
            if rs.state == 0:
                continue
            if rs.pid != pid:
                tot["foreign_rings"] += 1
                continue
            tot["rings"] += 1
            for k in ("records_committed", "records_dropped", "bytes_committed", "bytes_dropped",
                      "records_truncated", "full_events"):
                tot[k] += int(getattr(rs, k))
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
            if mode == "syslog":
                why = rsyslog.devlog_reason()
                if why:
                    return self._fail(run, why, "skipped")
                rs, why = rsyslog.start_rsyslogd(d / "rsyslog", self.rsyslogd)
                if rs is None:
                    return self._fail(run, why or "rsyslogd failed", "error" if self.rsyslogd else "skipped")
                argv = rsyslog.devlog_argv(rs.sock, d, argv)
                run.helper, helper_pid = "rsyslogd", rs.pid
            elif mode in FIPS_MODES:
                argv = [*self.fipstop, "--shm-dir", str(self.shm), "wrap", "--domain", domain, "--", *argv]
            elif mode == "null_syslog":
                if self.nullsyslog is None:
                    return self._fail(run, self.nullsyslog_reason or "no-op syslog not built", "skipped")
                env = dict(os.environ, LD_PRELOAD=str(self.nullsyslog))
            named, why = self._start_named(argv, d, port, env)
            if named is None:
                return self._fail(run, why or "named failed", "error")
            if _comm(named.pid) != "named":
                self.notes.append(f"{mode}: pid {named.pid} is {_comm(named.pid)!r}, not named")
            try:
                run.named_threads = len(os.listdir(f"/proc/{named.pid}/task"))
            except OSError:
                pass
            if mode == "fips" and self.drain is not None:
                helper, why = self._start_drain(domain, "bench-drain")
                helper_kind = "drain"
            elif mode == "fips_tail" or (mode == "fips" and self.drain is None):
                helper, why = self._start_tail(domain, "bench-tail")
                helper_kind = "tail"
            else:
                why = None
            if why:
                return self._fail(run, why, "error")
            if helper is not None:
                run.helper, helper_pid = ("drain (bench/bind/drain.c)" if helper_kind == "drain"
                                          else "fipstop tail > /dev/null"), helper.pid

            # -- the load ------------------------------------------------------ #
            ring0 = self._ring_totals(domain, named.pid) if mode in FIPS_MODES else None
            run.loadavg_before = [round(x, 2) for x in os.getloadavg()]
            ours = {os.getpid(), named.pid} | ({helper_pid} if helper_pid else set())
            p0 = proc_table(ours)
            n0, h0, b0, w0 = proc_cpu_s(named.pid), proc_cpu_s(helper_pid), busy_cpu_s(), time.monotonic()
            dp = subprocess.Popen(self.dnsperf_argv(port), stdin=subprocess.DEVNULL,
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
            res = parse_dnsperf(text)
            if res is None or dp.returncode != 0:
                return self._fail(run, f"dnsperf exit {dp.returncode}: {_one_line(text, 240)}", "error")
            if "dnsperf" not in self.versions:
                m = re.search(r"Version\s+(\S+)", text)
                self.versions["dnsperf"] = m.group(1) if m else None
            for k, v in res.items():
                setattr(run, k, v)
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
            rc = self._stop(named)
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
                    self._stop(helper, 10)
                    run.log_lines = run.consumer["records"]
                elif helper_kind == "drain":
                    c = self._stop_drain(helper)
                    if c is None:
                        return self._fail(run, "drain gave no result", "error")
                    run.consumer = {"kind": "C drain", **c}
                    run.log_lines = int(c["matched"])
                else:
                    run.log_lines = run.ring_load["records_committed"]
                helper = None
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
                self._stop(helper, 5)
            self._stop(named)
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
                for mode in self.modes:
                    _log(f"round {rnd + 1}/{self.rounds}: {mode} ({self.seconds:g} s)")
                    try:
                        r = self.run_one(mode, rnd)
                    except Exception as exc:  # one broken mode must not lose the others' results
                        r = self._fail(Run(mode=mode, round=rnd), f"{type(exc).__name__}: {exc}", "error")
                    if r.status != "ok":
                        _log(f"  {mode}: {r.status}: {r.reason}")
                    else:
                        _log(f"  {mode}: {r.qps:.0f} q/s, logged {r.log_lines}")
                    runs.append(r)
        results = summarize(self.modes, runs)
        shim_call = self.measure_shim_call(results) if not why else None
        return {"results": results, "targets": targets(results, shim_call), "runs": runs,
                "shim_call": shim_call, "wall_s": time.monotonic() - t0}

    def measure_shim_call(self, results: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The shim's cost per syslog(3) call against a no-op one, alternated
        in one process (fipstop.bench.bind_shim): resolves what the noisy
        queries/s cannot.  Runs with mode fips."""
        from fipstop.bench import bind_shim
        from fipstop.wrap import shim_path

        if "fips" not in self.modes:
            return None
        if self.nullsyslog is None:
            self.nullsyslog, self.nullsyslog_reason, _ = build_nullsyslog()
        if self.nullsyslog is None or self.drain is None or not shim_path().is_file():
            return {"status": "skipped",
                    "reason": self.nullsyslog_reason or self.drain_reason or f"{shim_path()} not built"}
        floor = next((r for r in results if r["mode"] == "null_syslog" and r["status"] == "ok"), None)
        _log("the shim's cost per call, against a no-op syslog(3) in the same process ...")
        try:
            return bind_shim.measure(self.shm, shim_path(), self.nullsyslog, self.drain,
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
# summary and targets
# --------------------------------------------------------------------------- #
def paired_ratio(ok: list[Run], runs: list[Run], base_mode: str) -> tuple[float | None, list[int]]:
    """Median over rounds of qps / qps of base_mode in the same round, using
    only rounds where neither run was disturbed when there is one; (ratio,
    rounds used)."""
    base = {r.round: r for r in runs if r.mode == base_mode and r.status == "ok" and r.qps}
    pairs = [(r, base[r.round]) for r in ok if r.round in base]
    calm = [(r, b) for r, b in pairs if not r.disturbed and not b.disturbed]
    use = calm or pairs
    if not use:
        return None, []
    return round(statistics.median(r.qps / b.qps for r, b in use), 4), sorted(r.round for r, _ in use)


def summarize(modes: tuple[str, ...], runs: list[Run]) -> list[dict[str, Any]]:
    base = {r.round: r.qps for r in runs if r.mode == "none" and r.status == "ok"}
    out = []
    for mode in modes:
        mine = [r for r in runs if r.mode == mode]
        ok = [r for r in mine if r.status == "ok" and r.qps]
        entry: dict[str, Any] = {"mode": mode, "description": DESCRIPTIONS[mode]}
        if not ok:
            first = mine[0] if mine else None
            entry.update(status=first.status if first else "skipped",
                         skip_reason=first.reason if first else "not run", qps=None, ratio_to_none=None)
            entry["runs"] = [_run_json(r) for r in mine]
            out.append(entry)
            continue
        calm = [r for r in ok if not r.disturbed]
        pool = sorted(calm or ok, key=lambda r: r.qps or 0.0)
        med = pool[(len(pool) - 1) // 2]
        # per-round ratios; rounds where this run or the baseline was disturbed
        # are left out when at least one calm pair exists
        ratio, used = paired_ratio(ok, runs, "none")
        floor_ratio, floor_used = paired_ratio(ok, runs, "null_syslog")
        by_round = {r.round: round(r.qps / base[r.round], 4) for r in ok if base.get(r.round)}
        all_ratios = [by_round.get(i) for i in range(max((r.round for r in mine), default=-1) + 1)]
        logged = [r.logged_per_answered for r in ok if r.logged_per_answered is not None]
        entry.update(
            status="ok",
            skip_reason=None,
            qps=med.qps,
            qps_runs=[r.qps for r in ok],
            ratio_to_none=ratio,
            ratio_by_round=all_ratios,
            ratio_rounds_used=used,
            ratio_to_null_syslog=floor_ratio,
            ratio_to_null_syslog_rounds_used=floor_used,
            rounds_disturbed=sorted(r.round for r in ok if r.disturbed),
            queries_sent=med.queries_sent,
            queries_answered=med.queries_completed,
            queries_lost=med.queries_lost,
            rcodes=med.rcodes,
            log_lines=med.log_lines,
            logged_per_answered=med.logged_per_answered,
            logged_per_answered_min=min(logged) if logged else None,
            ring=med.ring,
            ring_load=med.ring_load,
            consumer=med.consumer,
            named_cpu_cores=med.named_cpu_cores,
            named_cpu_us_per_query=med.named_cpu_us_per_query,
            named_cpu_us_per_query_median=_med([r.named_cpu_us_per_query for r in ok]),
            helper=med.helper,
            helper_cpu_s=med.helper_cpu_s,
            dnsperf_cpu_s=med.dnsperf_cpu_s,
            median_round=med.round,
            other_cpu_cores=med.other_cpu_cores,
        )
        if mode in FIPS_MODES:
            acc = [_accounted(r) for r in ok]
            entry["ring_accounted_per_answered_min"] = min(x for x in acc if x is not None) if any(
                x is not None for x in acc) else None
        entry["runs"] = [_run_json(r) for r in mine]
        failed = [r for r in mine if r.status != "ok"]
        if failed:
            entry["notes"] = f"{len(failed)} of {len(mine)} rounds failed: {failed[0].reason}"
        out.append(entry)
    return out


def _accounted(r: Run) -> float | None:
    """(committed + dropped) / answered: every query named logged is either in
    a ring or counted as dropped."""
    if not r.ring_load or not r.queries_completed:
        return None
    return round((r.ring_load["records_committed"] + r.ring_load["records_dropped"]) / r.queries_completed, 6)


def _run_json(r: Run) -> dict[str, Any]:
    from dataclasses import asdict

    d = asdict(r)
    d["ring_accounted_per_answered"] = _accounted(r)
    return d


def targets(results: list[dict[str, Any]], shim_call: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    by = {r["mode"]: r for r in results}

    def t(name: str, target: str, measured: float | None, ok: bool | None, note: str = "") -> dict[str, Any]:
        return {"name": name, "target": target, "measured": measured,
                "pass": ok if measured is not None else None, "note": note}

    out = []
    f = by.get("fips", {})
    n = by.get("fips_nocons", {})
    x = f.get("ratio_to_none")
    out.append(t("fips_with_consumer_qps_vs_none", f">= {TARGET_QPS_RATIO:.0%}", x,
                 x is not None and x >= TARGET_QPS_RATIO, "median of per-round ratios"))
    x = f.get("logged_per_answered_min")
    lost = sum(int((run.get("consumer") or {}).get("lost") or 0) for run in f.get("runs", []))
    drops = sum(int((run.get("ring") or {}).get("records_dropped") or 0) for run in f.get("runs", []))
    out.append(t("fips_with_consumer_logged_vs_answered", f">= {TARGET_LOGGED:.1%}", x,
                 x is not None and x >= TARGET_LOGGED,
                 f"worst round; query lines the consumer read / queries dnsperf got answered; "
                 f"ring drops {drops}, consumer lost {lost} over all rounds"))
    x = n.get("ratio_to_none")
    out.append(t("fips_no_consumer_qps_vs_none", f">= {TARGET_QPS_RATIO:.0%} (full speed)", x,
                 x is not None and x >= TARGET_QPS_RATIO, "median of per-round ratios"))
    x = by.get("null_syslog", {}).get("ratio_to_none")
    out.append(t("null_syslog_qps_vs_none", "informational", x, None,
                 "the floor: BIND's own query logging (querylog yes, syslog(3) a no-op); no transport behind "
                 "syslog(3) can exceed it, so a fips ratio to none above it is not reachable"))
    x = f.get("ratio_to_null_syslog")
    out.append(t("fips_with_consumer_qps_vs_null_syslog", "informational", x, None,
                 "the shim's own cost: fips vs BIND query logging into a no-op syslog(3) (the floor for any "
                 "syslog transport); not an issue target"))
    sc = shim_call if shim_call and shim_call.get("status") in ("ok", "warning") else {}
    x = sc.get("predicted_ratio_to_null_syslog")
    out.append(t("fips_shim_cost_vs_null_syslog_per_call", "informational", x, None,
                 f"the shim's cost per call measured against a no-op syslog(3) in one process "
                 f"({sc.get('cost_ns_per_call')} ns, 95 % {sc.get('cost_ns_ci95')}) over named's CPU per query "
                 f"with the no-op ({sc.get('named_us_per_query_null_syslog')} us): the throughput it leaves "
                 "named against the floor, free of the run-to-run noise of queries/s"))
    x = n.get("ring_accounted_per_answered_min")
    out.append(t("fips_no_consumer_drops_counted", "(committed + dropped) / answered >= 100 %", x,
                 x is not None and x >= 1.0,
                 "worst round; every query line named logged is in a ring or in the dropped counter "
                 "(> 100 % when named logged queries whose answers dnsperf counted lost)"))
    return out


# --------------------------------------------------------------------------- #
# output
# --------------------------------------------------------------------------- #
def _k(x: float | None) -> str:
    return "-" if x is None else f"{x / 1000:.1f} k"


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x * 100:.{digits}f} %"


def render_table(doc: dict[str, Any]) -> str:
    rows = [("mode", "q/s", "vs none", "logged/answered", "ring drops", "named CPU", "us/query", "helper CPU s")]
    for r in doc["results"]:
        if r["status"] != "ok":
            rows.append((r["mode"], r["status"], "", "", "", "", "", r.get("skip_reason") or ""))
            continue
        ring = r.get("ring") or {}
        rows.append((
            r["mode"],
            _k(r["qps"]),
            _pct(r["ratio_to_none"]),
            _pct(r["logged_per_answered"], 2) if r["mode"] != "none" else "-",
            str(ring.get("records_dropped", "-")),
            "-" if r["named_cpu_cores"] is None else f"{r['named_cpu_cores']:.2f} cores",
            "-" if r["named_cpu_us_per_query"] is None else f"{r['named_cpu_us_per_query']:.1f}",
            "-" if r["helper_cpu_s"] is None else f"{r['helper_cpu_s']:.2f} ({r['helper']})",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    p = doc["params"]
    lines.append("")
    lines.append(f"{p['rounds']} round(s) x {p['seconds_per_mode']:g} s per mode; {p['dnsperf_command']}")
    lines.append(f"load average before/after: {doc['machine'].get('loadavg_at_start')} / "
                 f"{doc['machine'].get('loadavg_at_end')}")
    w = (doc.get("quality") or {}).get("warning")
    if w:
        lines.append(f"WARNING: {w}")
    sc = doc.get("shim_call") or {}
    if sc.get("status") == "warning":
        lines.append(f"WARNING: shim cost per call: {sc.get('reason')}")
    if sc.get("status") in ("ok", "warning"):
        lines.append(f"shim cost per call (vs a no-op syslog(3), same process): {sc['cost_ns_per_call']} ns, "
                     f"95 % {sc['cost_ns_ci95'][0]}..{sc['cost_ns_ci95'][1]} ns"
                     + (f"; named at {sc['named_us_per_query_null_syslog']} us/query keeps "
                        f"{sc['predicted_ratio_to_null_syslog'] * 100:.1f} % of the floor's q/s"
                        if sc.get("predicted_ratio_to_null_syslog") else ""))
    elif sc:
        lines.append(f"shim cost per call: {sc.get('status')}: {sc.get('reason')}")
    lines.append("targets:")
    for t in doc["targets"]:
        verdict = "info" if t["target"] == "informational" else {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        m = t["measured"]
        lines.append(f"  {verdict:4}  {t['name']}: target {t['target']}, measured "
                     f"{'-' if m is None else f'{m * 100:.2f} %'}")
    return "\n".join(lines)


def _command_line() -> str:
    a0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("fipstop")
    if a0.name == "__main__.py" and a0.parent.name == "fipstop":
        return shlex.join([Path(sys.executable).name, "-m", "fipstop", *sys.argv[1:]])
    return shlex.join([a0.name, *sys.argv[1:]])


def main(args: argparse.Namespace) -> int:
    """``fipstop bench bind``: args has .json, .quick, .seconds, .out, .shm_dir
    (optional: .rounds, .modes, .keep)."""
    from fipstop.errors import FipsError

    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        bench = Bench(args)
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
        "command": getattr(args, "command_line", None) or _command_line(),
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
    publish("bind", doc, args, now, render_table, _log)
    return 0


def quality(results: list[dict[str, Any]]) -> dict[str, Any]:
    """How far the machine's other load can be trusted not to have decided the ratios."""
    calm = {}
    for r in results:
        runs = [x for x in r.get("runs", []) if x.get("status") == "ok"]
        calm[r["mode"]] = sum(1 for x in runs if x.get("disturbed") is False)
    others = [x.get("other_cpu_cores") for r in results for x in r.get("runs", []) if x.get("other_cpu_cores") is not None]
    avg = round(sum(others) / len(others), 3) if others else None
    warning = None
    if any(n == 0 for n in calm.values()):
        bad = ", ".join(m for m, n in calm.items() if n == 0)
        warning = (f"no undisturbed round for {bad}: other processes used {avg} cores on average during the "
                   f"loads (> {DISTURBED_CORES} counts as disturbed); these ratios measure the machine's other "
                   "load as much as logging")
    return {"calm_rounds_per_mode": calm, "other_cpu_cores_mean": avg, "warning": warning}


def reference(results: list[dict[str, Any]]) -> dict[str, Any]:
    """This run next to DESIGN.md's numbers for a 2-core machine."""
    by = {r["mode"]: r for r in results}
    ref_base = REFERENCE_QPS["none"]
    out: dict[str, Any] = {"source": "DESIGN.md (2-core CI-class machine, named -n 2, same dnsperf command)"}
    for mode, q in REFERENCE_QPS.items():
        mine = by.get(mode, {})
        out[mode] = {
            "reference_qps": q,
            "reference_ratio_to_none": round(q / ref_base, 4),
            "measured_qps": mine.get("qps"),
            "measured_ratio_to_none": mine.get("ratio_to_none"),
        }
    return out
