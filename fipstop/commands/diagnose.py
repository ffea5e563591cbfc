"""``fipstop diagnose``: which stage is the bottleneck, with evidence and a remedy.

It watches the live host for ``--duration`` seconds while profiling the
processes on both ends of the rings (:mod:`fipstop.analysis.watch`), then
prints the findings of :func:`fipstop.analysis.diagnose.diagnose`, most
important first.  No finding: healthy.

Exit status, so scripts can use it: 0 no critical finding (healthy, or
warnings only), 2 at least one critical finding (or a usage error), 3
nothing to diagnose: no libfips domain in the shm dir and no backend named to
watch (``--pid``, ``--watch-*``), or a ``--domain`` that does not exist (the message names the domains
that do).  Nothing to look at
is never called healthy.

``--prometheus URL`` diagnoses every host that Prometheus server scrapes from
the series ``fipstop serve`` exports (:mod:`fipstop.analysis.fleet_diagnose`):
one query set, no profiling; 3 when it scrapes no host of ``--job``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict

from fipstop.analysis.findings import CRITICAL
from fipstop.commands.options import add_backend_options, add_prometheus_options, fleet_config_of, probe_config
from fipstop.errors import FipsError
from fipstop.textsafe import escape_text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diagnose", help="which stage is the bottleneck: ranked findings with evidence and a remedy",
        description="Sample the rings, the other backends and the CPU of every process on both ends for "
        "--duration seconds while profiling them (thread time split; py-spy for Python consumers), then print "
        "the findings, most important first. No finding: healthy. Exit status: 0 no critical finding, 2 a "
        "critical finding, 3 nothing to diagnose (no domain, or --domain names none that exists).")
    p.add_argument("--duration", type=float, default=5.0, metavar="S", help="seconds to watch (default 5)")
    p.add_argument("--domain", action="append", metavar="NAME", help="only this domain (repeatable)")
    p.add_argument("--no-profile", action="store_true", help="do not profile the processes (rings and CPU only)")
    p.add_argument("--pid", type=int, action="append", metavar="PID", default=None,
                   help="also profile this process, a suspected producer (e.g. named logging through syslog; "
                   "repeatable)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    add_backend_options(p)
    add_prometheus_options(p)
    p.set_defaults(func=run)


def _print_findings(findings: list, healthy: str) -> None:
    if not findings:
        print(healthy)
    for i, f in enumerate(findings, 1):
        print(f"{i}. [{f.severity_label.upper()}] {f.title}")
        ev = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
        print(f"   evidence: {ev}")
        print(f"   remedy: {f.remedy}")


def _fleet(args: argparse.Namespace) -> int:
    """``--prometheus URL``: the findings over every host of the fleet, from one set of queries."""
    from fipstop.analysis.fleet_diagnose import diagnose_fleet
    from fipstop.sources.prometheus import PrometheusFleet

    if args.domain or args.pid:
        raise FipsError("--prometheus diagnoses every host: --domain and --pid do not apply")
    config = fleet_config_of(args)
    view = PrometheusFleet(config).poll().only(args.host)
    if not view.hosts:
        raise FipsError(f"nothing to diagnose: Prometheus at {escape_text(config.url)} scrapes no host of job "
                        f"{escape_text(config.job)}" + (f" matching {escape_text(args.host)!r}" if args.host else ""),
                        exit_code=NOTHING)
    findings = diagnose_fleet(view)
    status = 2 if any(f.severity == CRITICAL for f in findings) else 0
    if args.json:
        print(json.dumps({"findings": [asdict(f) | {"severity": f.severity_label} for f in findings],
                          "healthy": not findings, "hosts": [h.instance for h in view.hosts],
                          "at_s": view.at_s, "rate_window": view.rate_window}, default=str, allow_nan=False))
        return status
    _print_findings(findings, f"healthy: {len(view.hosts)} host(s) up, no drops, consumers alive")
    return status


def run(args: argparse.Namespace) -> int:
    from fipstop.analysis.diagnose import diagnose
    from fipstop.analysis.watch import WatchConfig, watch

    if args.prometheus:
        return _fleet(args)
    if not (math.isfinite(args.duration) and 0.5 <= args.duration <= 600):
        raise FipsError(f"--duration {args.duration:g}: give seconds between 0.5 and 600")
    config = probe_config(args)
    b = config.backends
    _something_to_look_at(config.shm_dir, config.domains,
                          others=bool(args.pid) or (b is not None and bool(b.files or b.sockets or b.udp_ports
                                                                              or b.rsyslog_impstats)))
    if not args.json:
        print(f"fipstop: watching for {args.duration:g} s ...", file=sys.stderr, flush=True)
    suspects = tuple(args.pid or ())
    for p in suspects:
        if p <= 0 or not os.path.exists(f"/proc/{p}"):
            raise FipsError(f"--pid {p}: no such process")
    seen = watch(WatchConfig(config, args.duration, profile=not args.no_profile, suspects=suspects))
    findings = diagnose(seen.window, profiles=seen.profiles, suspects=suspects)
    status = 2 if any(f.severity == CRITICAL for f in findings) else 0
    if args.json:
        window_s = (seen.window[-1].taken_mono_ns - seen.window[0].taken_mono_ns) / 1e9
        print(json.dumps({"findings": [asdict(f) | {"severity": f.severity_label} for f in findings],
                          "healthy": not findings, "notes": seen.notes, "window_s": round(window_s, 2),
                          "profiled_pids": sorted(seen.profiles)}, default=str, allow_nan=False))
        return status
    _print_findings(findings, "healthy: no bottleneck found (rings keep up, no drops, consumers alive, backends "
                    "lose nothing)")
    for n in seen.notes:
        print(f"note: {escape_text(n)}")
    return status


#: exit status when there is nothing to diagnose (as a Nagios plugin's UNKNOWN)
NOTHING = 3


def _something_to_look_at(shm_dir: str | None, domains: tuple[str, ...] | None, *, others: bool) -> None:
    """Raise (exit 3) when nothing would be watched: an empty or missing shm dir and nothing
    else named (``--pid``, ``--watch-file``, ``--watch-socket``, fipstop.toml), or a ``--domain``
    that does not exist; the message names the domains that do."""
    from fipstop.ring import list_domains, resolve_shm_dir

    where = resolve_shm_dir(shm_dir)
    try:
        have = list_domains(where)
    except OSError as exc:
        if others and not domains:
            return
        raise FipsError(f"nothing to diagnose: {where}: {exc.strerror or exc}", exit_code=NOTHING) from None
    there = f"domains in {where}: {', '.join(escape_text(d) for d in have)}" if have else f"no domain in {where}"
    if not have and not (others and not domains):
        raise FipsError(f"nothing to diagnose: no libfips domain in {where} (is a producer running? "
                        "--shm-dir names another directory)", exit_code=NOTHING)
    missing = [d for d in domains or () if d not in have]
    if missing:
        raise FipsError(f"nothing to diagnose: --domain {escape_text(missing[0])}: no such domain ({there})",
                        exit_code=NOTHING)
