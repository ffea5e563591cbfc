"""``python -m fipstop.ring --cflags --libs``: the flags a C program needs for this libfips.

Not a ``fipstop`` subcommand: the README's C build line runs it as
``$(python -m fipstop.ring --cflags) $(python -m fipstop.ring --libs)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fipstop.buildflags import cflags, libs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fipstop.ring",
        description="Print the flags a C program needs to build against this package's libfips.",
    )
    parser.add_argument("--cflags", action="store_true", help="compiler flags (-I...)")
    parser.add_argument("--libs", action="store_true", help="linker flags (-L... -lfips)")
    args = parser.parse_args(argv)
    if not (args.cflags or args.libs):
        parser.print_usage(sys.stderr)
        return 2
    out = []
    if args.cflags:
        out.append(cflags())
    if args.libs:
        try:
            out.append(libs())
        except FileNotFoundError as exc:
            print(f"fipstop: {exc}", file=sys.stderr)
            return 1
    print(" ".join(out))
    return 0
