"""``fipstop check``: a Nagios / Icinga plugin for FIPS rings, and a textfile writer.

Plugin semantics (the Monitoring Plugins development guidelines): exit 0 OK,
1 WARNING, 2 CRITICAL, 3 UNKNOWN; one status line, performance data after
``|``; thresholds are Nagios ranges (``10``, ``10:``, ``~:10``, ``10:20``,
``@10:20``; a value equal to a threshold is OK); ``-w``/``-c`` set the
thresholds of the ``--metric`` (default the ring fill), ``-t`` bounds the
run, ``-V`` prints the version.  Anything that goes wrong inside the check
itself (no shm dir, a bad or unknown option, a threshold that is no range, a
``--domain`` that does not exist) is UNKNOWN with the reason on stdout (what
Nagios shows), never a traceback and never exit 2 (which would page someone
as CRITICAL).  The checks are :mod:`fipstop.analysis.check`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from dataclasses import asdict, fields
from types import FrameType

from fipstop import __version__
from fipstop.analysis.levels import STATUS, UNKNOWN, Thresholds, as_range
from fipstop.analysis.ranges import Range, RangeError, parse_range
from fipstop.commands.options import add_backend_options, backends_config, domains_of, fipsipc_config_of
from fipstop.config import ProbeConfig
from fipstop.errors import FipsError, exc_line
from fipstop.textsafe import escape_text

#: --metric NAME -> the Thresholds fields -w / -c set
METRICS = {"fill": "fill_pct", "drops": "drops_per_s", "lag-records": "lag_records", "lag-seconds": "lag_s"}
_UNITS = {"fill_pct": "%% ring fill", "drops_per_s": "records dropped/s", "lag_records": "records of lag",
          "lag_s": "s of lag"}


def _usage_error(prog: str, message: str) -> int:
    """A bad or unknown option: UNKNOWN on stdout (Nagios reads stdout), as check_procs answers."""
    print(f"FIPS UNKNOWN - {escape_text(prog)}: {escape_text(message)} (see {escape_text(prog)} --help)")
    sys.stdout.flush()
    return UNKNOWN


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check", help="Nagios-compatible health check of the rings (exit 0/1/2/3, perfdata)",
        description="Check every FIPS domain (or --domain): header, invariants, record contents, permissions, "
        "drops, fill, consumer lag and health, producers gone with their ring open, and with --backends the "
        "other logging backends' losses. Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one status line with "
        "performance data. Thresholds are Nagios ranges: X alerts above X (X itself is OK), X: below X, "
        "~:X above X, X:Y outside X..Y, @X:Y inside X..Y.")
    p.add_argument("-V", "--version", action="version", version=f"fipstop check {__version__}")
    p.add_argument("--domain", action="append", metavar="NAME", help="check this domain (repeatable; default all)")
    p.add_argument("--window", type=float, default=1.0, metavar="S",
                   help="seconds between the two samples that give rates (default 1; 0: one sample, no rates)")
    p.add_argument("-t", "--timeout", type=float, default=10.0, metavar="S",
                   help="UNKNOWN when the check takes longer than S seconds (default %(default)g)")
    p.add_argument("-m", "--metric", choices=sorted(METRICS), default="fill",
                   help="what -w / -c apply to (default fill)")
    p.add_argument("-w", "--warning", metavar="RANGE", help="WARNING range of the --metric")
    p.add_argument("-c", "--critical", metavar="RANGE", help="CRITICAL range of the --metric")
    defaults = Thresholds()
    for attr, unit in _UNITS.items():
        flag = attr.replace("_", "-")
        for level, word in (("warn", "WARNING"), ("crit", "CRITICAL")):
            default = str(as_range(getattr(defaults, f"{level}_{attr}")))
            p.add_argument(f"--{level}-{flag}", dest=f"{level}_{attr}", default=default, metavar="RANGE",
                           help=f"{word} range, {unit} (default %(default)s)")
    p.add_argument("--prometheus", metavar="URL", help="check every host the Prometheus server at URL scrapes "
                   "(fipstop serve targets of --job) instead of this host")
    p.add_argument("--job", default="fipstop", metavar="NAME",
                   help="with --prometheus: the scrape job of the fipstop serve targets (default %(default)s)")
    p.add_argument("--backends", action="store_true", help="also check the other logging backends' loss counters")
    p.add_argument("--json", action="store_true", help="print the results as JSON (the exit status is the same)")
    p.add_argument("--textfile", metavar="DIR", help="also write DIR/fipstop.prom for node_exporter's textfile "
                   "collector (atomically)")
    add_backend_options(p)
    p.set_defaults(func=run, usage_error=_usage_error)


def _unknown(msg: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"status": UNKNOWN, "status_text": "UNKNOWN", "summary": msg, "checks": [], "perfdata": []}))
    else:
        print(f"FIPS UNKNOWN - {msg}")
    sys.stdout.flush()
    return UNKNOWN


def thresholds_of(args: argparse.Namespace) -> Thresholds:
    """The --warn-*/--crit-* ranges, with -w / -c for the --metric; FipsError naming the flag."""
    options = vars(args)
    values: dict[str, Range] = {}
    for f in fields(Thresholds):
        flag = "--" + f.name.replace("_", "-")
        try:
            values[f.name] = parse_range(str(options[f.name]))
        except RangeError as e:
            raise FipsError(f"{flag}: {escape_text(str(e))}") from None
    target = METRICS[args.metric]
    for flag, level, given in (("-w", "warn", args.warning), ("-c", "crit", args.critical)):
        if given is None:
            continue
        try:
            values[f"{level}_{target}"] = parse_range(given)
        except RangeError as e:
            raise FipsError(f"{flag}: {escape_text(str(e))}") from None
    return Thresholds(**values)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def run(args: argparse.Namespace) -> int:
    from fipstop.analysis.check import CheckConfig, Report, check_host
    from fipstop.outputs.textfile import textfile, write_textfile

    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        return _unknown(f"--timeout {args.timeout:g}: give seconds between 0 and 3600", args.json)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    try:
        th = thresholds_of(args)
        if not (math.isfinite(args.window) and 0 <= args.window <= 60):
            return _unknown(f"--window {args.window:g}: give seconds between 0 and 60", args.json)
        if args.window >= args.timeout:
            return _unknown(f"--window {args.window:g} leaves no time within --timeout {args.timeout:g}", args.json)
        rep: Report
        if args.prometheus:
            if args.domain or args.textfile:
                return _unknown("--prometheus checks every host: --domain and --textfile do not apply", args.json)
            from fipstop.analysis.fleet import FleetConfig, check_fleet

            rep = check_fleet(FleetConfig(args.prometheus, args.job, th, backends=args.backends,
                                          timeout_s=max(0.5, args.timeout - 0.5)))
        else:
            probes = ProbeConfig(shm_dir=args.shm_dir, domains=domains_of(args),
                                 backends=backends_config(args) if args.backends else None, bans_domain=None,
                                 cpu=False, fipsipc=fipsipc_config_of(args))
            rep = check_host(CheckConfig(probes, th, args.window, args.backends))
    except _Timeout:
        return _unknown(f"the check did not finish within --timeout {args.timeout:g} s", args.json)
    except FipsError as e:
        return _unknown(e.message, args.json)
    except Exception as e:  # the plugin must answer UNKNOWN, never a traceback
        return _unknown(exc_line(e, 300), args.json)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if args.textfile:
        try:
            write_textfile(args.textfile, textfile(rep, time.time()))
        except OSError as e:
            rep.add("textfile", UNKNOWN, f"cannot write {escape_text(args.textfile)}/fipstop.prom: {e.strerror}")
    if args.json:
        print(json.dumps({"status": rep.status, "status_text": STATUS[rep.status], "summary": rep.summary(),
                          "checks": [asdict(r) | {"status_text": STATUS[r.status]} for r in rep.results],
                          "perfdata": [p.json() for p in rep.perf]}, allow_nan=False, default=str))
    else:
        print(rep.status_line())
    sys.stdout.flush()
    return rep.status
