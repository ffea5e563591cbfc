"""``fipstop bench``: run the shipped benchmarks.

``fipstop bench ring [--json] [--quick] [--out PATH]`` calls
``fipstop.bench.ring.main(args)``; that module is imported only when the
command runs.
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
