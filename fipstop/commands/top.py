"""``fipstop`` / ``fipstop top``: the live monitor (a textual dashboard).

``--interval S`` (default 1 s) is the sampling period, ``--domain NAME``
(repeatable) limits it to some domains, ``--record FILE`` records what it
shows.  ``--prometheus URL`` shows the fleet that Prometheus server scrapes
instead (:mod:`fipstop.views.fleet`).  It needs a terminal: without one it says so in one line and points
to ``fipstop snapshot`` (exit 2).
"""

from __future__ import annotations

import argparse
import os

from fipstop.commands.options import (
    add_dashboard_options,
    add_prometheus_options,
    domains_of,
    fleet_config_of,
    have_terminal,
    interval_of,
    probe_config,
)
from fipstop.errors import FipsError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "top",
        help="live monitor of rings, consumers, drops and lag (the default command)",
        description="An htop-like dashboard of every FIPS domain: per-ring fill, rates and drops, "
        "per-consumer lag; ? in the dashboard lists the keys.",
    )
    add_dashboard_options(p)
    add_prometheus_options(p)
    p.set_defaults(func=run)


def _fleet(args: argparse.Namespace) -> int:
    """``--prometheus URL``: the fleet dashboard (polling every ``--interval``, default 2 s)."""
    if vars(args).get("record") or vars(args).get("domain"):
        raise FipsError("--prometheus shows every host: --record and --domain do not apply")
    config = fleet_config_of(args, interval_of(args, 2.0))
    if not have_terminal():
        raise FipsError("the fleet dashboard needs a terminal (stdin and stdout are not a tty); "
                        "use `fipstop snapshot --prometheus URL` (or with --json)")
    from fipstop.sources.prometheus import PrometheusFleet
    from fipstop.views.fleet import FleetApp

    app = FleetApp(PrometheusFleet(config))
    app.host_filter = str(vars(args).get("host") or "")
    app.run()
    return int(app.return_code or 0)


def run(args: argparse.Namespace) -> int:
    if vars(args).get("prometheus"):
        return _fleet(args)
    interval = interval_of(args)
    domains_of(args)  # bad --domain names are reported before the terminal check
    if not have_terminal():
        raise FipsError("the live monitor needs a terminal (stdin and stdout are not a tty); "
                        "for a one-shot dump use `fipstop snapshot` (or `fipstop snapshot --json`)")
    if os.environ.get("TERM") == "dumb":
        raise FipsError("the live monitor needs a terminal that can draw (TERM=dumb); use `fipstop snapshot`")
    from fipstop.recording.tee import RecordingTee
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes
    from fipstop.sources.protocol import Source
    from fipstop.views.app import FipsTopApp

    source: Source = LiveSource(build_probes(probe_config(args)), interval)
    record = vars(args).get("record")
    if record:
        source = RecordingTee(source, record)
    app = FipsTopApp(source)
    app.run()
    return int(app.return_code or 0)
