"""``fipstop`` / ``fipstop top``: the live monitor (a textual dashboard).

``--interval S`` (default 1 s) is the sampling period, ``--domain NAME``
(repeatable) limits it to some domains.  It needs a terminal: without one it
says so in one line and points to ``fipstop snapshot`` (exit 2).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from fipstop.errors import FipsError

DEFAULT_INTERVAL_S = 1.0


def add_options(p: argparse.ArgumentParser, *, suppress_defaults: bool = False) -> None:
    default = argparse.SUPPRESS if suppress_defaults else None
    p.add_argument("--interval", type=float, metavar="S", default=default,
                   help=f"sampling interval in seconds (default {DEFAULT_INTERVAL_S:g})")
    p.add_argument("--domain", action="append", metavar="NAME", default=default,
                   help="only this domain (repeat for several; default: every domain in the shm dir)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "top",
        help="live monitor of rings, consumers, drops and lag (the default command)",
        description="An htop-like dashboard of every FIPS domain: per-ring fill, rates and drops, "
        "per-consumer lag; ? in the dashboard lists the keys.",
    )
    add_options(p)
    p.set_defaults(func=run)


def _interval(args: argparse.Namespace) -> float:
    value = getattr(args, "interval", None)
    if value is None:
        return DEFAULT_INTERVAL_S
    if not math.isfinite(value) or value < 0.05 or value > 3600:
        raise FipsError(f"--interval {value:g}: give seconds between 0.05 and 3600")
    return float(value)


def _domains(args: argparse.Namespace) -> list[str] | None:
    from fipstop.ring import valid_domain_name
    from fipstop.textsafe import escape_text

    names = getattr(args, "domain", None)
    if not names:
        return None
    if isinstance(names, str):
        names = [names]
    for n in names:
        if not valid_domain_name(n):
            raise FipsError(f"--domain {escape_text(n)!r}: not a domain name (1-63 of A-Z a-z 0-9 . _ -)")
    return list(names)


def have_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def run(args: argparse.Namespace) -> int:
    interval = _interval(args)
    domains = _domains(args)
    if not have_terminal():
        raise FipsError("the live monitor needs a terminal (stdin and stdout are not a tty); "
                        "for a one-shot dump use `fipstop snapshot` (or `fipstop snapshot --json`)")
    if os.environ.get("TERM") == "dumb":
        raise FipsError("the live monitor needs a terminal that can draw (TERM=dumb); use `fipstop snapshot`")
    from fipstop.probes.ring import RingProbe
    from fipstop.sources import LiveSource
    from fipstop.views.app import FipsTopApp

    probe = RingProbe(shm_dir=getattr(args, "shm_dir", None), domains=domains)
    source = LiveSource([probe], interval)
    app = FipsTopApp(source)
    app.run()
    return int(app.return_code or 0)
