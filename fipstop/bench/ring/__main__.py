"""``python -m fipstop.bench.ring``: the ring benchmark on its own, with more
knobs than ``fipstop bench ring`` (cases, sizes, duration, rounds, nice)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from fipstop.bench.results import Output
from fipstop.bench.ring.run import main as run_bench
from fipstop.bench.ring.spec import CASES, ENV_DURATION, ENV_NICE, ISSUE14_BASE, RingConfig


def _argparser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fipstop.bench.ring", description="libfips ring benchmark")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", metavar="PATH")
    p.add_argument("--shm-dir", default=os.environ.get("FIPS_SHM_DIR") or "/dev/shm")
    p.add_argument("--duration", type=float, default=None, help="seconds per case (overrides --quick)")
    p.add_argument("--cases", nargs="+", choices=CASES, default=None)
    p.add_argument("--sizes", nargs="+", type=int, default=None)
    p.add_argument("--reps", type=int, default=None, help="rounds over all cases (default 3, --quick 1)")
    p.add_argument(
        "--nice", type=int, default=None, help=f"nice level of the bench's processes (default ${ENV_NICE} or 0)"
    )
    p.add_argument("--against", nargs="?", const=ISSUE14_BASE, metavar="REV",
                   help=f"only fips_c of this libfips against REV's, A/B/B/A with an A/A control (default REV "
                   f"{ISSUE14_BASE}); --reps is its rounds")
    return p


def main(argv: Sequence[str]) -> int:
    args = _argparser().parse_args(argv)
    env = [f"{k}={os.environ[k]}" for k in (ENV_DURATION, ENV_NICE) if os.environ.get(k)]
    command = shlex.join([*env, Path(sys.executable).name, "-m", "fipstop.bench.ring", *argv])
    return run_bench(RingConfig(Output(args.json, args.out, command), args.quick, args.shm_dir, args.duration,
                                tuple(args.cases or ()), tuple(args.sizes or ()), args.reps, args.nice,
                                args.against))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
