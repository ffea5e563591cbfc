"""``fipstop serve [--listen 127.0.0.1:9464]``: live metrics for Prometheus.

A background sampler takes the dashboard's probes every ``--interval``; each
scrape of ``/metrics`` is answered from the last sample, in OpenMetrics or
the Prometheus text format as the scraper asks
(:class:`fipstop.outputs.serve.MetricsServer`).  9464 is the port the
OpenTelemetry Prometheus exporter uses by convention; the default binds
loopback only: exposing metrics beyond the host is a choice (``--listen
:9464`` for every address, IPv4 and IPv6; ``--listen [::1]:9464``).
"""

from __future__ import annotations

import argparse
import signal
import sys

from fipstop.commands.options import add_backend_options, interval_of, probe_config, require_shm_dir
from fipstop.sigflag import SignalFlag


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="serve live metrics at /metrics (OpenMetrics or Prometheus text, for Prometheus)",
        description="An HTTP endpoint with the live rings, consumers, bans and other logging backends in the "
        "OpenMetrics or Prometheus text format (negotiated from the Accept header). A background sampler takes "
        "the probes every --interval; a scrape is answered from the last sample at once.")
    p.add_argument("--listen", default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="address to listen on: HOST:PORT, [IPv6]:PORT, or :PORT for every address "
                   "(default 127.0.0.1:9464)")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="seconds between samples (default 1; scrape no faster than this)")
    p.add_argument("--domain", action="append", metavar="NAME", default=None, help="only this domain (repeatable)")
    p.add_argument("--bans-domain", metavar="NAME", default=None,
                   help="domain of the ban events `fipstop ips` publishes (default fips-bans)")
    add_backend_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fipstop.outputs.serve import MetricsServer, parse_listen
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes

    host, port = parse_listen(args.listen)
    require_shm_dir(args.shm_dir)
    interval = interval_of(args)
    source = LiveSource(build_probes(probe_config(args)), interval)
    try:
        server = MetricsServer(source, host, port, interval_s=interval)
    except BaseException:
        source.close()
        raise
    where = ", ".join(f"http://[{a[0]}]:{a[1]}/metrics" if ":" in a[0] else f"http://{a[0]}:{a[1]}/metrics"
                      for a in server.sockets)
    print(f"fipstop: serving metrics on {where}", file=sys.stderr, flush=True)
    stop = SignalFlag()  # SIGTERM (systemd, docker stop) ends as Ctrl-C does: connections closed, exit 0
    signal.signal(signal.SIGTERM, stop.set)
    try:
        server.serve_forever(until=stop.is_set)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        source.close()
    return 0
