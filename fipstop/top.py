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
    p.add_argument("--record", metavar="FILE", default=default,
                   help="also record what the dashboard shows into FILE (replay with `fipstop replay FILE`)")
    p.add_argument("--bans-domain", metavar="NAME", default=default,
                   help="domain of the ban events `fipstop ips` publishes (default fips-bans)")
    p.add_argument("--fail2ban-db", metavar="PATH", default=default,
                   help="a running fail2ban-server's database, read live (default: "
                   "/var/lib/fail2ban/fail2ban.sqlite3 when it exists)")
    p.add_argument("--fail2ban-socket", metavar="PATH", default=default,
                   help="a running fail2ban-server's socket (default: /var/run/fail2ban/fail2ban.sock when it exists)")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p, default)


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


def live_probes(args: argparse.Namespace) -> list:
    """Every probe the live monitor samples, the ring probe first.  `fipstop
    record` and `fipstop serve` use the same list, so a recording holds what the
    dashboard shows.  Add a probe here (its raw sample lands in
    ``Frame.aux[probe.name]``)."""
    from fipstop.probes.ring import RingProbe

    from fipstop.probes.proccpu import ProcCpuProbe

    ring = RingProbe(shm_dir=getattr(args, "shm_dir", None), domains=_domains(args))
    probes: list = [ring, ProcCpuProbe(ring.pids)]
    probes.append(backends_probe(args))
    probes.extend(ban_probes(args))
    return probes


def ban_probes(args: argparse.Namespace) -> list:
    """The bans probe (ban events of `fipstop ips`), and the Fail2Ban probe when
    a database or socket is given or found at Fail2Ban's usual place."""
    from fipstop.bans import BANS_DOMAIN
    from fipstop.probes.bans import BansProbe
    from fipstop.probes.fail2ban import DEFAULT_DB, DEFAULT_SOCKET, Fail2BanProbe
    from fipstop.ring import valid_domain_name
    from fipstop.textsafe import escape_text

    bans_domain = getattr(args, "bans_domain", None) or BANS_DOMAIN
    if not valid_domain_name(bans_domain):
        raise FipsError(f"--bans-domain {escape_text(bans_domain)!r}: not a domain name")
    probes: list = [BansProbe(getattr(args, "shm_dir", None), bans_domain)]
    db = getattr(args, "fail2ban_db", None) or (DEFAULT_DB if os.path.isfile(DEFAULT_DB) else None)
    sock = getattr(args, "fail2ban_socket", None) or (DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None)
    if db or sock:
        probes.append(Fail2BanProbe(db, sock))
    return probes


def backends_probe(args: argparse.Namespace):
    """The BackendsProbe configured by fipstop.toml and the flags (FipsError if the config is bad)."""
    from fipstop.backends import BackendsProbe
    from fipstop.config import ConfigError, from_args
    from fipstop.textsafe import escape_text

    try:
        return BackendsProbe(from_args(args))
    except ConfigError as e:
        raise FipsError(escape_text(str(e))) from None


def run(args: argparse.Namespace) -> int:
    interval = _interval(args)
    _domains(args)  # bad --domain names are reported before the terminal check
    if not have_terminal():
        raise FipsError("the live monitor needs a terminal (stdin and stdout are not a tty); "
                        "for a one-shot dump use `fipstop snapshot` (or `fipstop snapshot --json`)")
    if os.environ.get("TERM") == "dumb":
        raise FipsError("the live monitor needs a terminal that can draw (TERM=dumb); use `fipstop snapshot`")
    from fipstop.sources import LiveSource
    from fipstop.views.app import FipsTopApp

    source = LiveSource(live_probes(args), interval)
    record = getattr(args, "record", None)
    if record:
        from fipstop.record import RecordingTee

        source = RecordingTee(source, record)
    app = FipsTopApp(source)
    app.run()
    return int(app.return_code or 0)
