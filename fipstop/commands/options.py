"""Options several commands share, and the config objects they become.

The dashboard's options are accepted by ``fipstop`` itself, ``fipstop top``
and (some of them) ``record``, ``serve``, ``diagnose``; the backends' by
every command that samples them.  Each is validated here, into a one-line
error naming the flag, before any library code runs: the library takes
plain config objects (:class:`fipstop.sources.probeset.ProbeConfig`,
:class:`fipstop.config.BackendsConfig`) and never an argparse namespace.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from typing import Any

from fipstop.bans import BANS_AUTO
from fipstop.config import BackendsConfig, ConfigError, FipsIpcConfig, ProbeConfig, load_config
from fipstop.errors import FipsError
from fipstop.ring import valid_domain_name
from fipstop.textsafe import escape_text

DEFAULT_INTERVAL_S = 1.0


def given(args: argparse.Namespace, name: str) -> Any:
    """Option ``name``, or None where this command does not have it."""
    return vars(args).get(name)


def add_backend_options(p: argparse.ArgumentParser, default: Any = None) -> None:
    """The backends' flags: ``--config``, ``--watch-file``, ``--watch-socket``."""
    p.add_argument("--config", metavar="PATH", default=default,
                   help="fipstop.toml to read (default: $FIPSTOP_CONFIG, ./fipstop.toml, /etc/fipstop.toml)")
    p.add_argument("--watch-file", action="append", metavar="PATH", default=default,
                   help="also watch this log file: growth and every reader's lag (repeatable)")
    p.add_argument("--watch-socket", action="append", metavar="PATH", default=default,
                   help="also watch this unix syslog socket: receiver, queue, blocked senders (repeatable)")
    p.add_argument("--fipsipc", action="append", nargs="?", const="", metavar="SHM_NAME", default=default,
                   help="also read the FIPS paper's prototype rings (FIPS-IPC, System V shm), read-only: the one "
                   "whose shm_name file is SHM_NAME (its ftok key; repeatable), or with no SHM_NAME every one")


def add_dashboard_options(p: argparse.ArgumentParser, *, suppress_defaults: bool = False) -> None:
    """What the live monitor takes (``fipstop`` alone accepts them too)."""
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
    p.add_argument("--crowdsec-db", metavar="PATH", default=default,
                   help="CrowdSec's local API database, read-only (default: /var/lib/crowdsec/data/crowdsec.db "
                   "when it exists and crowdsec runs)")
    add_backend_options(p, default)


def interval_of(args: argparse.Namespace, default: float = DEFAULT_INTERVAL_S) -> float:
    value = given(args, "interval")
    if value is None:
        return default
    if not math.isfinite(value) or value < 0.05 or value > 3600:
        raise FipsError(f"--interval {value:g}: give seconds between 0.05 and 3600")
    return float(value)


def domains_of(args: argparse.Namespace) -> tuple[str, ...] | None:
    """``--domain`` (repeatable) checked; None: every domain."""
    names = given(args, "domain")
    if not names:
        return None
    if isinstance(names, str):
        names = [names]
    for n in names:
        if not valid_domain_name(n):
            raise FipsError(f"--domain {escape_text(n)!r}: not a domain name (1-63 of A-Z a-z 0-9 . _ -)")
    return tuple(names)


def backends_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> BackendsConfig:
    """fipstop.toml (if any) plus ``--watch-file`` / ``--watch-socket``."""
    files = given(args, "watch_file") or ()
    socks = given(args, "watch_socket") or ()
    try:
        return load_config(given(args, "config"), env).with_flags(
            [files] if isinstance(files, str) else files, [socks] if isinstance(socks, str) else socks)
    except ConfigError as e:
        raise FipsError(escape_text(str(e))) from None


def fipsipc_config(args: argparse.Namespace, backends: BackendsConfig | None = None) -> FipsIpcConfig | None:
    """``--fipsipc [SHM_NAME]`` (repeatable) and fipstop.toml's ``[fipsipc] shm_names``: None when neither."""
    given_names = given(args, "fipsipc") or []
    if isinstance(given_names, str):
        given_names = [given_names]
    configured = list(backends.fipsipc) if backends is not None else []
    if not given_names and not configured:
        return None
    names = tuple(dict.fromkeys([*(n for n in given_names if n), *configured]))
    for n in names:
        if "\0" in n or len(n) > 4096:
            raise FipsError(f"--fipsipc {escape_text(n[:80])!r}: not a file name")
    return FipsIpcConfig(names, discover="" in given_names or not names)


def fipsipc_config_of(args: argparse.Namespace) -> FipsIpcConfig | None:
    """For the one-shot commands (snapshot, check), which read fipstop.toml only when asked: with
    ``--fipsipc``, ``--backends`` or ``--config`` (a broken config must not break a plain check)."""
    if not (given(args, "fipsipc") or given(args, "backends") or given(args, "config")):
        return None
    return fipsipc_config(args, backends_config(args))


def probe_config(args: argparse.Namespace) -> ProbeConfig:
    """The live probe set the dashboard's options describe."""
    bans_domain = given(args, "bans_domain") or BANS_AUTO  # not told: find it (fips-bans, or NAME-bans)
    if bans_domain != BANS_AUTO and not valid_domain_name(bans_domain):
        raise FipsError(f"--bans-domain {escape_text(bans_domain)!r}: not a domain name")
    backends = backends_config(args)
    return ProbeConfig(shm_dir=given(args, "shm_dir"), domains=domains_of(args), backends=backends,
                       bans_domain=bans_domain, fail2ban_db=given(args, "fail2ban_db"),
                       fail2ban_socket=given(args, "fail2ban_socket"), crowdsec_db=given(args, "crowdsec_db"),
                       fipsipc=fipsipc_config(args, backends))


def have_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()



def require_shm_dir(shm_dir: str | None) -> None:
    """A service started on an shm dir that does not exist would serve nothing and say nothing:
    a given ``--shm-dir`` (or FIPS_SHM_DIR) must be a directory."""
    import os

    from fipstop.ring import resolve_shm_dir

    d = resolve_shm_dir(shm_dir)
    if not os.path.isdir(d):
        what = "no such directory" if not os.path.exists(d) else "not a directory"
        raise FipsError(f"--shm-dir {escape_text(d)}: {what} (start the producers first, or give the right one)")


def add_prometheus_options(p: argparse.ArgumentParser) -> None:
    """``--prometheus URL`` and what goes with it: the fleet a Prometheus server scrapes instead of this host."""
    p.add_argument("--prometheus", metavar="URL", help="show every host the Prometheus server at URL scrapes "
                   "(the fipstop serve targets of --job), read through its HTTP API, instead of this host")
    p.add_argument("--job", default="fipstop", metavar="NAME",
                   help="with --prometheus: the scrape job of the fipstop serve targets (default %(default)s)")
    p.add_argument("--rate-window", default="1m", metavar="DURATION",
                   help="with --prometheus: the window of Prometheus' rate() (default %(default)s)")
    p.add_argument("--host", metavar="TEXT", default="",
                   help="with --prometheus: only the hosts whose instance contains TEXT")


def fleet_config_of(args: argparse.Namespace, interval_s: float = 2.0) -> Any:
    """The :class:`fipstop.sources.prometheus.FleetSourceConfig` of ``--prometheus`` and its options,
    validated (a one-line error naming the flag)."""
    from fipstop.sources.prometheus import FleetSourceConfig, valid_window

    url = str(given(args, "prometheus"))
    if not url.startswith(("http://", "https://")):
        raise FipsError(f"--prometheus {escape_text(url[:80])!r}: give an http:// or https:// URL")
    job = str(given(args, "job") or "fipstop")
    if not job or len(job) > 200 or "\n" in job:
        raise FipsError(f"--job {escape_text(job[:80])!r}: not a job name")
    return FleetSourceConfig(url, job, valid_window(str(given(args, "rate_window") or "1m")),
                             interval_s=interval_s)
