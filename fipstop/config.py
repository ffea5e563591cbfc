"""fipstop.toml: what to watch beside the rings.

Looked for in this order: ``--config PATH``, ``$FIPSTOP_CONFIG``,
``./fipstop.toml``, ``/etc/fipstop.toml``; none is fine (discovery alone).
An explicit path that is missing or a file that does not parse is an error
(one line), never a traceback::

    [backends]
    files = ["/var/log/auth.log", "/var/log/named/query.log"]
    sockets = ["/dev/log"]
    udp_ports = [514]
    rsyslog_impstats = "/var/log/rsyslog-stats.json"
    discover = true      # /dev/log and files under /var/log opened by rsyslogd, fail2ban, crowdsec
    audit = true
    journald = true
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

SEARCH = ("./fipstop.toml", "/etc/fipstop.toml")


class ConfigError(ValueError):
    """A config file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class BackendsConfig:
    files: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    udp_ports: tuple[int, ...] = ()
    rsyslog_impstats: str = ""
    discover: bool = True
    audit: bool = True
    journald: bool = True
    source: str = ""  # the file it came from ("" : defaults/flags)

    def with_flags(self, files: Iterable[str] = (), sockets: Iterable[str] = ()) -> BackendsConfig:
        return replace(self, files=_unique(self.files + tuple(files)), sockets=_unique(self.sockets + tuple(sockets)))


def _unique(xs: Iterable) -> tuple:
    return tuple(dict.fromkeys(xs))


def find_config(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"{explicit}: no such config file")
        return explicit
    if env.get("FIPSTOP_CONFIG"):
        p = env["FIPSTOP_CONFIG"]
        if not os.path.isfile(p):
            raise ConfigError(f"{p} ($FIPSTOP_CONFIG): no such config file")
        return p
    return next((p for p in SEARCH if os.path.isfile(p)), None)


def _strs(v: object, key: str, path: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ConfigError(f"{path}: backends.{key} must be a list of non-empty strings")
    return tuple(v)


def parse_config(text: str, path: str = "fipstop.toml") -> BackendsConfig:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {' '.join(str(e).split())}") from None
    b = doc.get("backends", {})
    if not isinstance(b, dict):
        raise ConfigError(f"{path}: [backends] must be a table")
    unknown = set(b) - {"files", "sockets", "udp_ports", "rsyslog_impstats", "discover", "audit", "journald"}
    if unknown:
        raise ConfigError(f"{path}: unknown key backends.{sorted(unknown)[0]}")
    ports = b.get("udp_ports", [])
    if not isinstance(ports, list) or not all(isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536
                                              for p in ports):
        raise ConfigError(f"{path}: backends.udp_ports must be a list of port numbers (1-65535)")
    imp = b.get("rsyslog_impstats", "")
    if not isinstance(imp, str):
        raise ConfigError(f"{path}: backends.rsyslog_impstats must be a path")
    flags = {}
    for k in ("discover", "audit", "journald"):
        v = b.get(k, True)
        if not isinstance(v, bool):
            raise ConfigError(f"{path}: backends.{k} must be true or false")
        flags[k] = v
    return BackendsConfig(_unique(_strs(b.get("files", []), "files", path)),
                          _unique(_strs(b.get("sockets", []), "sockets", path)),
                          _unique(ports), imp, source=path, **flags)


def load_config(explicit: str | None = None, env: Mapping[str, str] | None = None) -> BackendsConfig:
    path = find_config(explicit, env)
    if path is None:
        return BackendsConfig()
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 20)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    return parse_config(raw.decode("utf-8", "replace"), path)


def add_options(p, default=None) -> None:
    """The backends' flags, shared by ``fipstop top``, ``record`` and ``snapshot``."""
    p.add_argument("--config", metavar="PATH", default=default,
                   help="fipstop.toml to read (default: $FIPSTOP_CONFIG, ./fipstop.toml, /etc/fipstop.toml)")
    p.add_argument("--watch-file", action="append", metavar="PATH", default=default,
                   help="also watch this log file: growth and every reader's lag (repeatable)")
    p.add_argument("--watch-socket", action="append", metavar="PATH", default=default,
                   help="also watch this unix syslog socket: receiver, queue, blocked senders (repeatable)")


def from_args(args, env: Mapping[str, str] | None = None) -> BackendsConfig:
    """The config file (if any) plus the flags; raises ConfigError."""
    files = getattr(args, "watch_file", None) or ()
    socks = getattr(args, "watch_socket", None) or ()
    return load_config(getattr(args, "config", None), env).with_flags(
        [files] if isinstance(files, str) else files, [socks] if isinstance(socks, str) else socks)
