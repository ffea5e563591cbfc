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
