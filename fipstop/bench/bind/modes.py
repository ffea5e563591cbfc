"""The modes of ``fipstop bench bind``, what one run of one measures, and its config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fipstop.bench.results import Output

SCHEMA = 1
MODES: tuple[str, ...] = ("none", "null_syslog", "file", "syslog", "fips", "fips_nocons", "fips_bind", "dnstap",
                          "none_native", "fips_native")
OPTIONAL_MODES: tuple[str, ...] = ("fips_tail",)
ALL_MODES = MODES + OPTIONAL_MODES
FIPS_MODES = ("fips", "fips_nocons", "fips_tail", "fips_bind", "fips_native")
DRAINED_MODES = ("fips", "fips_bind", "fips_native")  # a C drain consumes the rings
# the modes of the named built with contrib/bind/fips-native.patch (fipstop.bench.bind.native), and the stock mode
# whose named.conf each uses
NATIVE_MODES = {"none_native": "none", "fips_native": "fips_bind"}
DESCRIPTIONS = {
    "none": "querylog no (baseline)",
    "null_syslog": "queries category -> syslog(3) replaced by a no-op (BIND's own query-log cost; transport floor)",
    "file": "queries category -> BIND file channel (print-time yes)",
    "syslog": "queries category -> syslog(3) -> /dev/log (private mount ns) -> rsyslogd imuxsock -> omfile",
    "fips": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; C drain consumer",
    "fips_nocons": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; no consumer (fills, drops)",
    "fips_tail": "queries category -> syslog(3) -> fips shim (fipstop wrap) -> rings; `fipstop tail > /dev/null`",
    "fips_bind": "queries category taken at ns_client_log (fipstop wrap --bind, libfips_bind.so) -> rings, "
                 "line built once; C drain consumer",
    "dnstap": "querylog no; dnstap { auth query; } -> unix socket -> fstrm_capture (fstrm-bin) -> file",
    "none_native": "querylog no, the named built with contrib/bind/fips-native.patch (baseline of fips_native)",
    "fips_native": "the patched named: log_query() hands binary fields to libfips_bindq.so (fipstop wrap --bind) "
                   "-> rings, no string built on the server; the C drain matches the binary fields (1 in 64 also "
                   "formatted)",
}

DEFAULT_SECONDS = 10.0
QUICK_SECONDS = 3.0
DEFAULT_ROUNDS = 3  # rounds over all modes (1 with --quick); each mode reports its median round
REFERENCE_QPS = {"none": 21800.0, "file": 16400.0, "syslog": 11200.0}  # DESIGN.md, 2-core machine
TARGET_QPS_RATIO = 0.95
# A run during which other processes used more than this many cores (of the
# machine's busy time in /proc/stat, minus named, dnsperf and the helper) was
# disturbed; medians prefer undisturbed rounds.
DISTURBED_CORES = 0.25
# Before each run, wait (up to --calm-wait seconds, default 60; 0 with --quick)
# until the machine is quiet: busy < CALM_CORES over a 1 s sample.
DEFAULT_CALM_WAIT_S = 60.0
TARGET_LOGGED = 0.999
TARGET_BIND_LOGGED = 1.0  # fips_bind, fips_native: 100.00 % of answered queries logged
TARGET_NATIVE_CPU_US = 0.3  # fips_native: named CPU per query within +0.3 us of querylog no (the same named)
TARGET_NATIVE_QPS_RATIO = 0.97  # fips_native: >= 97 % of querylog no's queries/s
MIN_ABBA_ROUNDS = 7  # the CPU-per-query comparison wants >= 7 rounds, order reversed every other one


@dataclass(frozen=True)
class BindConfig:
    """``fipstop bench bind``'s options (None: the default, or the --quick one)."""

    output: Output = Output()
    quick: bool = False
    seconds: float | None = None
    rounds: int | None = None
    modes: tuple[str, ...] = ()  # (): MODES
    calm_wait: float | None = None
    keep: bool = False
    shm_dir: str | None = None
    scaling: tuple[int, ...] = ()  # client scaling: 2^k source addresses for each k (fipstop.bench.bind.scaling)


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
    dnstap: dict[str, Any] | None = None  # mode dnstap: frames captured, by type
    order: int | None = None  # position of this run in its round (rounds alternate the order: ABBA)
    clients: int | None = None  # client scaling: distinct source addresses of the load
    load: dict[str, Any] | None = None  # client scaling: what the sender counted beyond dnsperf's fields
    notes: str = ""
