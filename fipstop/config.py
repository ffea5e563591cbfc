"""What to watch: the probe set's config, and fipstop.toml for the backends.

:class:`ProbeConfig` says which probes a live source samples (the commands
build it from their options); :class:`BackendsConfig` which logging paths
beside the rings, read from fipstop.toml.  Plain frozen objects, cheap to
import: ``fipstop --help`` loads this module.

fipstop.toml is looked for in this order: ``--config PATH``, ``$FIPSTOP_CONFIG``,
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

    [fipsipc]            # the FIPS paper's prototype rings (docs/fipsipc.md), as with --fipsipc NAME
    shm_names = ["/run/app/fips_buf.key"]
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from fipstop.bans import BANS_DOMAIN

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
    fipsipc: tuple[str, ...] = ()  # [fipsipc] shm_names: prototype segments to read (their ftok files)

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
    f = doc.get("fipsipc", {})
    if not isinstance(f, dict):
        raise ConfigError(f"{path}: [fipsipc] must be a table")
    if set(f) - {"shm_names"}:
        raise ConfigError(f"{path}: unknown key fipsipc.{sorted(set(f) - {'shm_names'})[0]}")
    ipc = f.get("shm_names", [])
    if not isinstance(ipc, list) or not all(isinstance(x, str) and x and "\0" not in x for x in ipc):
        raise ConfigError(f"{path}: fipsipc.shm_names must be a list of non-empty file names")
    return BackendsConfig(_unique(_strs(b.get("files", []), "files", path)),
                          _unique(_strs(b.get("sockets", []), "sockets", path)),
                          _unique(ports), imp, source=path, fipsipc=_unique(ipc), **flags)


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


@dataclass(frozen=True)
class FipsIpcConfig:
    """Which FIPS-IPC prototype segments to sample: the ones whose
    ``shm_name`` files are given (their ``ftok`` keys), and with ``discover``
    every other one the kernel lists."""

    shm_names: tuple[str, ...] = ()
    discover: bool = True


@dataclass(frozen=True)
class ProbeConfig:
    """What a live source samples.  ``domains`` None: every domain in the shm
    dir, (): none (only the other probes)."""

    shm_dir: str | None = None
    domains: tuple[str, ...] | None = None
    backends: BackendsConfig | None = field(default_factory=BackendsConfig)  # None: no backends probe
    bans_domain: str | None = BANS_DOMAIN  # None: no bans probe
    fail2ban_db: str | None = None  # None: Fail2Ban's default database when it exists
    fail2ban_socket: str | None = None  # None: Fail2Ban's default socket when it exists
    crowdsec_db: str | None = None  # None: CrowdSec's default database when it exists
    cpu: bool = True
    fipsipc: FipsIpcConfig | None = None  # None: no FIPS-IPC probe (opt-in: `--fipsipc`)
