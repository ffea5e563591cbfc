"""``fipstop bench``: run the shipped benchmarks.

``fipstop bench ring [--json] [--quick] [--out PATH]`` calls
``fipstop.bench.ring.main(args)``; ``fipstop bench bind [--json] [--quick]
[--seconds S] [--out PATH]`` calls ``fipstop.bench.bind.main(args)``. Each
module is imported only when its command runs.
"""

from __future__ import annotations

import argparse
import importlib

from fipstop.errors import FipsError


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="run benchmarks",
        description="Run benchmarks; results are reported as ratios between variants.",
    )
    kinds = bench.add_subparsers(title="benchmarks", metavar="BENCH", dest="bench", required=True)

    ring = kinds.add_parser(
        "ring",
        help="libfips ring throughput and latency",
        description="Benchmark the libfips ring.",
    )
    ring.add_argument("--json", action="store_true", help="print the result as JSON")
    ring.add_argument("--quick", action="store_true", help="short run (for tests and smoke checks)")
    ring.add_argument("--out", metavar="PATH", help="also write the JSON result to PATH")
    ring.set_defaults(func=run_ring)

    ui = kinds.add_parser(
        "ui",
        help="live monitor cost: frame time with 1024 rings, sort/filter, CPU with 256 rings",
        description="Benchmark the live monitor (fipstop top): frame, sort and filter time with 1024 rings "
        "(in-process, fake source) and the CPU of the real app on a real domain of 256 rings.",
    )
    ui.add_argument("--json", action="store_true", help="print the result as JSON")
    ui.add_argument("--quick", action="store_true", help="short run (for tests and smoke checks)")
    ui.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/ui-DATE.json)")
    ui.set_defaults(func=run_ui)

    bind = kinds.add_parser(
        "bind",
        help="BIND 9 under dnsperf: no logging vs file vs syslog vs the fips shim",
        description="Run dnsperf against named on loopback once per query-logging mode, side by side, "
        "and report queries/s as ratios to no logging and log lines recorded vs queries answered.",
    )
    bind.add_argument("--json", action="store_true", help="print the result as JSON")
    bind.add_argument("--quick", action="store_true", help="short run: 3 s per mode, one round")
    bind.add_argument("--seconds", type=float, metavar="S", help="seconds of load per mode (default 10; 3 with --quick)")
    bind.add_argument("--rounds", type=int, metavar="N", help="rounds over all modes (default 3; 1 with --quick)")
    bind.add_argument("--modes", metavar="M,M", help="modes to run (default none,file,syslog,fips,fips_nocons; "
                      "also fips_tail)")
    bind.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    bind.add_argument("--calm-wait", type=float, metavar="S",
                      help="before each run wait up to S s for other load to settle (default 60; 0 with --quick)")
    bind.add_argument("--keep", action="store_true", help="keep the temp dirs (configs, logs) for inspection")
    bind.set_defaults(func=run_bind)

    rec = kinds.add_parser(
        "record",
        help="recording size per hour (64 rings, 4 consumers, 1 s) vs raw and zlib-only, write and seek time",
        description="Record a real domain of 64 producer threads and 4 consumers with the real recorder and report "
        "bytes per frame and MB per hour beside the raw snapshot size and plain zlib, plus write and seek time.",
    )
    rec.add_argument("--json", action="store_true", help="print the result as JSON")
    rec.add_argument("--quick", action="store_true", help="short run (4 s at 0.5 s)")
    rec.add_argument("--seconds", type=float, metavar="S", help="how long to record (default 120)")
    rec.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    rec.set_defaults(func=run_record)

    ips = kinds.add_parser(
        "ips",
        help="fipstop ips: lines/s on one core and time-to-ban with 2^16 attackers, vs Fail2Ban's matcher",
        description="Throughput of the IPS hot path (one thread, one jail) side by side with Fail2Ban's own "
        "regex matcher and a naive per-line Python loop; time-to-ban of the real `fipstop ips` process with "
        "2^16 attackers side by side with a naive per-line Python consumer.",
    )
    ips.add_argument("--json", action="store_true", help="print the result as JSON")
    ips.add_argument("--quick", action="store_true", help="short run: 200 k lines, 4096 attackers, no calm wait")
    ips.add_argument("--attackers", type=int, metavar="N", help="attackers for time-to-ban (default 65536)")
    ips.add_argument("--rate", type=float, metavar="LINES_S", help="producer rate for time-to-ban (default 100000)")
    ips.add_argument("--nice", type=int, metavar="N",
                     help="run producer and consumers at nice N (default -10 as root, else unchanged)")
    ips.add_argument("--calm-wait", type=float, metavar="S",
                     help="before measuring wait up to S s for other load to settle (default 60; 0 with --quick)")
    ips.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    ips.set_defaults(func=run_ips)

    ban = kinds.add_parser(
        "ban",
        help="time-to-ban under a DNS attack: named -> file -> Fail2Ban vs named under wrap -> fipstop ips",
        description="The same attack (refused queries from 2^k loopback addresses, with dnsperf load) against "
        "(a) named logging to a file read by a real fail2ban-server and (b) named under `fipstop wrap` read by "
        "`fipstop ips`; reports time until every attacker is banned, share banned, time-to-ban percentiles, "
        "records dropped and named's queries/s, as ratios.",
    )
    ban.add_argument("--json", action="store_true", help="print the result as JSON")
    ban.add_argument("--quick", action="store_true", help="short run: 2^8 attackers, lower rates")
    ban.add_argument("--attackers-log2", type=int, metavar="K", help="2^K attackers (default 12; 8 with --quick)")
    ban.add_argument("--rate", type=float, metavar="Q_S", help="attack queries/s at the end of the ramp "
                     "(default 10000; 5000 with --quick)")
    ban.add_argument("--timeout", type=float, metavar="S", help="give up waiting for bans after S s (default 300)")
    ban.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    ban.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs) for inspection")
    ban.set_defaults(func=run_ban)

    prof = kinds.add_parser(
        "profile",
        help="what profiling costs a contended producer: none vs ThreadSampler vs bpf vs py-spy",
        description="Run a contended C producer (threads logging through libfips under one mutex) with no "
        "profiler, with the procfs ThreadSampler and with the bpf profiler at their defaults, and a Python "
        "producer (fipstop._fips) with and without py-spy, in alternating rounds; report throughput ratios "
        "with a 95 %% confidence interval (target: each drop <= 5 %%).",
    )
    prof.add_argument("--json", action="store_true", help="print the result as JSON")
    prof.add_argument("--quick", action="store_true", help="short run: 1 s per run, 2 rounds")
    prof.add_argument("--seconds", type=float, metavar="S", help="seconds per run (default 5)")
    prof.add_argument("--rounds", type=int, metavar="N", help="rounds over all variants (default 6)")
    prof.add_argument("--variants", metavar="V,V", help="variants (default none,threads,bpf,py_none,py_pyspy)")
    prof.add_argument("--calm-wait", type=float, metavar="S",
                      help="before each run wait up to S s for other load to settle (default 20; 0 with --quick)")
    prof.add_argument("--out", metavar="PATH", help="write the JSON result to PATH (default bench/results/)")
    prof.set_defaults(func=run_profile)


def _load(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise FipsError(f"{what} is not built") from None
        if exc.name == "fipstop._fips":
            raise FipsError(
                f"{what} is not built: fipstop._fips is missing (run `make lib` or `pip install -e .`)"
            ) from None
        raise


def run_ring(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.ring", "bench ring").main(args)


def run_ui(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.ui", "bench ui").main(args)


def run_bind(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.bind", "bench bind").main(args)


def run_record(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.record", "bench record").main(args)


def run_ips(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.ips", "bench ips").main(args)


def run_ban(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.ban", "bench ban").main(args)


def run_profile(args: argparse.Namespace) -> int | None:
    return _load("fipstop.bench.profile", "bench profile").main(args)
