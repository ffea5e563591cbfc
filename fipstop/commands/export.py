"""``fipstop export FILE --format csv|jsonl|openmetrics [--from T] [--to T]``.

Every frame of a recording (or of a time window of it), re-derived as the
replay shows it (:mod:`fipstop.recording.export`), to stdout or ``-o FILE``.
"""

from __future__ import annotations

import argparse
import sys

from fipstop.errors import FipsError

#: what fipstop.recording.export writes
FORMATS = ("csv", "jsonl", "openmetrics")
TABLES = ("rings", "consumers", "totals")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="export a recording as CSV, JSON lines or OpenMetrics",
        description="Write the frames of a recording (re-derived as the replay shows them) as CSV, JSON lines "
        "or OpenMetrics text.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--table", choices=TABLES, default="rings",
                   help="csv only: one row per ring (default), per consumer, or per frame")
    p.add_argument("--from", dest="from_", metavar="T", help="first time (ISO 8601, HH:MM[:SS], or +SECONDS)")
    p.add_argument("--to", metavar="T", help="last time (same forms)")
    p.add_argument("-o", "--output", metavar="PATH", help="write here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fipstop.recording.export import ExportOptions, export

    options = ExportOptions(args.format, args.table, args.from_, args.to)
    if args.output:
        try:
            f = open(args.output, "w", encoding="utf-8", newline="")
        except OSError as e:
            raise FipsError(f"{args.output}: cannot write ({e.strerror})") from None
        with f:
            export(args.file, options, f)
    else:
        export(args.file, options, sys.stdout)
    return 0
