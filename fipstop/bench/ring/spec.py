"""What ``fipstop bench ring`` measures: its cases, sizes and constants, its
config, and the records of its results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fipstop.bench.results import Output

SCHEMA = 1
SIZES: tuple[int, ...] = (64, 128, 256)
#: fips_c_so: fips_c through libfips.so (-fPIC, a PLT call, the TLS of a shared library), as programs link it;
#: the other C cases have fips.c compiled into the harness; none_tsc: none + the TSC read a record's
#: timestamp costs (a floor for any ring that stamps each record; boost's queue and the prototype do not)
C_CASES = ("none", "none_tsc", "fips_c", "fips_c_so", "fips_c_batch")
PY_CASES = ("none_python", "fips_python", "fips_python_batch")
OTHER_CASES = ("syslog", "file", "unix_dgram")
#: the FIPS paper's prototype ring (fipstop/bench/ring/proto.py), built from its source when it is found
PROTO_CASES = ("fipsipc", "fipsipc_batch")
#: issue 21's peers (fipstop/bench/ring/peers.py), built from Debian's packages when they are installed
PEER_CASES = ("boost_spsc", "lttng_ust", "spdlog_async")
CASES: tuple[str, ...] = C_CASES + PEER_CASES + PY_CASES + OTHER_CASES + PROTO_CASES
FIPS_CASES = ("fips_c", "fips_c_so", "fips_c_batch", "fips_python", "fips_python_batch")

#: ``--against``'s default: the commit before issue 14's fixes (e536b36: the floor never moves back,
#: a release after eviction says so)
ISSUE14_BASE = "e536b36^"
DEFAULT_DURATION_S = 2.0
QUICK_DURATION_S = 0.3
ENV_DURATION = "FIPSTOP_BENCH_DURATION"
ENV_NICE = "FIPSTOP_BENCH_NICE"  # nice level for the bench's own processes (negative needs root)
LAT_BATCH = 64  # records per timed batch (single-record cases)
LOG_BATCH = 256  # records per log_batch call
RING_CAPACITY = 1 << 20  # libfips default, bytes per ring
AB_RING_CAPACITY = 16 << 20  # monitor A/B runs: ~5 ms of buffer at 20 M records/s of 128 B
# keep-up searches run on the default ring and on this one (~22 ms of buffer at 20 M records/s of 128 B):
# on the default ring any stall of the consumer's CPU longer than the ring lasts (0.34 ms at that rate)
# drops, whoever the consumer is; the larger ring tells the consumer's speed from the host's stalls.
KEEPUP_RING_CAPACITIES = (RING_CAPACITY, 64 << 20)
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


@dataclass(frozen=True)
class RingConfig:
    """``fipstop bench ring``'s options; None: the default, $FIPSTOP_BENCH_DURATION /
    $FIPSTOP_BENCH_NICE, or the --quick one."""

    output: Output = Output()
    quick: bool = False
    shm_dir: str | None = None
    duration: float | None = None  # seconds per case
    cases: tuple[str, ...] = ()  # (): CASES
    sizes: tuple[int, ...] = ()  # (): SIZES
    reps: int | None = None
    nice: int | None = None
    against: str | None = None  # a git rev: only the A/B of fips_c against that revision's libfips (against.py)
    attach_pairs: int | None = None  # AB/BA pairs of proto.run_attach_isolated (None: 80, --quick 8; >= 6)


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
    libfips_over_case: float | None = None  # prototype cases: records/s of fips_c (fips_c_batch) / this case
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
    # records the consumer received per second of producer time (None: the case has no consumer count)
    delivered_per_s: float | None = None
    # the cache-line round trip between the producer's and the consumer's CPU, timed just before this run
    # (regime.py), and the regime it puts the run in ("fast" / "slow")
    round_trip_ns: float | None = None
    regime: str | None = None


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
