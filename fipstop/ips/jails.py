"""Jails: a filter plus the counting policy (maxretry / findtime / bantime /
ignoreip / mode), from built-in defaults, a ``--config`` file and command-line
overrides, compiled into ``fipstop._ipsfast.Jail`` objects.

A jail's ``filter =`` takes Fail2Ban's jail options: ``filter =
sshd[mode=aggressive]`` (``mode`` there is the filter's mode; the jail's own
``mode = window|bucket`` is fipstop's counting).

Time: findtime counts on each record's ring time stamp (its producer's
commit time), never on a date written in the line.  The date is found and
cut out so that the filter matches, but a date is text: a forwarder's clock,
a replayed old line or an attacker's own "date" must not decide whether
hits fall inside findtime (Fail2Ban itself treats a line more than a minute
off as "just happened").  ``--check FILE`` counts on the lines' dates, as
Fail2Ban does when it reads a file (fipstop/ips/check.py)."""

from __future__ import annotations

import configparser
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fipstop.errors import FipsError
from fipstop.ips.filters import BUILTIN_FILTERS, CompiledFilter, FilterDef, load_filter
from fipstop.ips.interpolation import extract_options
from fipstop.ips.pcre import translate
from fipstop.safefile import NotRegular, read_regular

if TYPE_CHECKING:
    from fipstop._ipsfast import Jail as CJail

DEFAULT_IGNOREIP: tuple[str, ...] = ()
#: never banned, whatever the configuration: no packet comes from these (unspecified, "this network",
#: limited broadcast, multicast), and handing them to nft blocks nothing an attacker sends
NEVER_BAN: tuple[str, ...] = ("0.0.0.0/8", "255.255.255.255/32", "224.0.0.0/4", "::/128", "ff00::/8")
#: Fail2Ban's default ignoreip; with ``ignoreself`` (the default) they and this host's own addresses are not banned
LOOPBACK: tuple[str, ...] = ("127.0.0.0/8", "::1/128")


def self_addresses() -> tuple[str, ...]:
    """This host's own addresses (every interface's, as Fail2Ban's ``ignoreself``): log text a
    client influences must not make the IPS ban the host it protects."""
    import psutil

    texts: list[str] = []
    try:
        for addrs in psutil.net_if_addrs().values():
            texts += [a.address.split("%", 1)[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
    except OSError:
        pass
    ok = []
    for text in texts:
        try:
            ok.append(str(ipaddress.ip_address(text)))
        except ValueError:
            continue
    return tuple(sorted(set(ok)))


def protected_nets(ignoreself: bool) -> tuple[str, ...]:
    """What no jail bans on top of its ignoreip: NEVER_BAN always, loopback and self with ``ignoreself``."""
    return NEVER_BAN + ((LOOPBACK + self_addresses()) if ignoreself else ())


@dataclass(frozen=True, slots=True)
class JailSpec:
    name: str
    filter: FilterDef
    maxretry: int = 5
    findtime_s: float = 600.0
    bantime_s: float = 600.0
    mode: str = "window"  # window (Fail2Ban) | bucket (CrowdSec leaky bucket)
    ignoreip: tuple[str, ...] = DEFAULT_IGNOREIP
    max_tracked: int = 100_000
    skip_truncated: bool = False
    v6_prefix: int = 128
    #: Fail2Ban's ignoreself: also never ban loopback and this host's own addresses
    ignoreself: bool = True
    #: <F-MLFID> sessions kept (an attacker opens them: bounded, the least recently used evicted)
    max_sessions: int = 4096
    #: a session is forgotten this long after it started (Fail2Ban: 5 minutes)
    session_s: float = 300.0


BUILTIN_JAILS = {
    "named-refused": JailSpec("named-refused", BUILTIN_FILTERS["named-refused"]),
    "named-query-rate": JailSpec("named-query-rate", BUILTIN_FILTERS["named-query-rate"], maxretry=50,
                                 findtime_s=1.0, bantime_s=600.0, mode="bucket"),
}


def parse_nets(items: tuple[str, ...] | list[str]) -> list[tuple[bytes, int]]:
    """ignoreip entries -> (16-byte network, prefix bits) with IPv4 as ::ffff:a.b.c.d/96+n."""
    out = []
    for item in items:
        for word in item.replace(",", " ").split():
            try:
                net = ipaddress.ip_network(word, strict=False)
            except ValueError:
                raise FipsError(f"ignoreip: {word[:60]!r} is not an address or CIDR network "
                                "(host names are not resolved)") from None
            if net.version == 4:
                mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + net.network_address.packed)
                out.append((mapped.packed, 96 + net.prefixlen))
            else:
                out.append((net.network_address.packed, net.prefixlen))
    return out


def _float(v: str, what: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise FipsError(f"config: {what} = {v[:40]!r} is not a number") from None
    if not 0 <= x < 1e9:
        raise FipsError(f"config: {what} out of range")
    return x


def _lines(section: Mapping[str, str], key: str) -> tuple[str, ...]:
    """The non-empty lines of a multi-line option (failregex, ignoreregex)."""
    return tuple(x.strip() for x in section.get(key, "").splitlines() if x.strip())


def load_config(path: str, filter_dir: str) -> dict[str, JailSpec]:
    """Jails of an ini file: one ``[NAME]`` section each (``enabled = false`` skips it)."""
    cp = configparser.RawConfigParser(interpolation=None)
    try:
        cp.read_string(read_regular(path).decode("utf-8"), source=path)
    except NotRegular as exc:
        raise FipsError(f"config: {exc}") from None
    except OSError as exc:
        raise FipsError(f"config: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise FipsError(f"config: {path} is not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset "
                        f"{exc.start})") from None
    except configparser.Error as exc:
        raise FipsError(f"config: {path}: {str(exc).splitlines()[0]}") from None
    jails = {}
    for name in cp.sections():
        s = cp[name]
        if s.get("enabled", "true").strip().lower() in ("false", "no", "0"):
            continue
        base = BUILTIN_JAILS.get(name)
        if "failregex" in s or "prefregex" in s:
            ml = s.get("maxlines", "1").strip()
            if not ml.isdigit():
                raise FipsError(f"config: [{name}] maxlines = {ml[:20]!r} is not a whole number")
            filt = FilterDef(name=name, failregex=_lines(s, "failregex"), ignoreregex=_lines(s, "ignoreregex"),
                             prefregex=s.get("prefregex", "").strip() or None, source=path, maxlines=int(ml),
                             datepattern=s.get("datepattern", "{^LN-BEG}").strip() or None)
        elif "filter" in s:
            fname = s["filter"].strip()
            _base, fopts = extract_options(fname)
            builtin = fname in BUILTIN_FILTERS and not fopts and not Path(filter_dir, f"{fname}.conf").exists()
            filt = BUILTIN_FILTERS[fname] if builtin else load_filter(fname, filter_dir)
        elif base is not None:
            filt = base.filter
        else:
            raise FipsError(f"config: [{name}] has neither filter nor failregex")
        spec = base if base is not None else JailSpec(name, filt)
        spec = replace(spec, name=name, filter=filt)
        if "maxretry" in s:
            spec = replace(spec, maxretry=max(1, int(_float(s["maxretry"], "maxretry"))))
        if "findtime" in s:
            spec = replace(spec, findtime_s=_float(s["findtime"], "findtime"))
        if "bantime" in s:
            spec = replace(spec, bantime_s=_float(s["bantime"], "bantime"))
        if "mode" in s:
            if s["mode"] not in ("window", "bucket"):
                raise FipsError(f"config: [{name}] mode must be window or bucket")
            spec = replace(spec, mode=s["mode"])
        if "ignoreip" in s:
            spec = replace(spec, ignoreip=tuple(s["ignoreip"].split()))
        if "ignoreself" in s:
            v = s["ignoreself"].strip().lower()
            if v not in ("true", "yes", "1", "false", "no", "0"):
                raise FipsError(f"config: [{name}] ignoreself = {v[:20]!r}: give true or false")
            spec = replace(spec, ignoreself=v in ("true", "yes", "1"))
        jails[name] = spec
    return jails


@dataclass(frozen=True)
class JailOptions:
    """Which jails ``fipstop ips`` runs and what overrides them (its --jail,
    --config, --filter ... options, see fipstop/commands/ips.py)."""

    jail: tuple[str, ...] = ()  # () : named-refused, or every jail of ``config``
    config: str | None = None
    filter: tuple[str, ...] = ()
    filter_dir: str = "/etc/fail2ban/filter.d"
    maxretry: int | None = None
    findtime: float | None = None
    bantime: float | None = None
    mode: str | None = None
    ignoreip: tuple[str, ...] = ()
    ignoreself: bool | None = None  # None: each jail's own (true unless its config says false)
    max_tracked: int = 100_000
    skip_truncated: bool = False
    ipv6_prefix: int = 128


def select_jails(args: JailOptions) -> list[JailSpec]:
    """The jails ``fipstop ips`` runs, from its options."""
    available = dict(BUILTIN_JAILS)
    from_config: list[str] = []
    if args.config:
        cfg = load_config(args.config, args.filter_dir)
        available.update(cfg)
        from_config = list(cfg)
    names = list(args.jail or [])
    if not names:
        names = from_config or ([] if args.filter else ["named-refused"])
    specs = []
    for n in names:
        if n not in available:
            raise FipsError(f"unknown jail {n!r} (built in: {', '.join(BUILTIN_JAILS)}; or define it in --config)")
        specs.append(available[n])
    for f in args.filter or []:
        filt = load_filter(f, args.filter_dir)
        specs.append(JailSpec(filt.name, filt))
    out = []
    for s in specs:
        if args.maxretry is not None:
            s = replace(s, maxretry=args.maxretry)
        if args.findtime is not None:
            s = replace(s, findtime_s=args.findtime)
        if args.bantime is not None:
            s = replace(s, bantime_s=args.bantime)
        if args.mode is not None:
            s = replace(s, mode=args.mode)
        if args.ignoreip:
            s = replace(s, ignoreip=tuple(s.ignoreip) + tuple(args.ignoreip))
        if args.ignoreself is not None:
            s = replace(s, ignoreself=args.ignoreself)
        s = replace(s, max_tracked=args.max_tracked, skip_truncated=args.skip_truncated, v6_prefix=args.ipv6_prefix)
        if not 1 <= s.v6_prefix <= 128:
            raise FipsError(f"--ipv6-prefix must be 1..128, not {s.v6_prefix}")
        out.append(s)
    if len({s.name for s in out}) != len(out):
        raise FipsError("two jails have the same name")
    return out


_DATE_PCRE: dict[str, tuple[str, str]] = {}


def date_templates(cf: CompiledFilter) -> tuple[tuple[str, str, bool], ...]:
    """The filter's date templates as the C matcher takes them: (ascii, utf, anchored)."""
    out = []
    for t in cf.dates.templates:
        if t.regex not in _DATE_PCRE:
            tr = translate(t.regex)
            _DATE_PCRE[t.regex] = (tr.ascii, tr.utf)
        out.append((*_DATE_PCRE[t.regex], t.anchored))
    return tuple(out)


def date_prefilter(templates: tuple[tuple[str, str, bool], ...]) -> tuple[str, str] | None:
    """One regex that matches where any of the templates does: ``(?|(?:t1)|(?:t2)|...)``.

    Most records of a busy jail carry no date (libfips_syslog.so's do not): searching 18 line-start
    templates one by one costs ~0.8 us a line, this union one search.  A branch reset group keeps
    each template's group numbers (its backreferences stay right); each template's own flags stay
    inside its (?:...).  Only a line the union matches goes through Fail2Ban's template choice."""
    if len(templates) < 2:
        return None
    out = []
    for k in (0, 1):
        alts = [str(t[k]).removeprefix("(*LF)") for t in templates]
        out.append("(*LF)(?|" + "|".join(f"(?:{a})" for a in alts) + ")")
    return out[0], out[1]


def jail_args(cf: CompiledFilter) -> dict:
    """The regex, group-name and date arguments of ``_ipsfast.Jail`` for a compiled filter."""
    ids = {n: i for i, n in enumerate(cf.names)}

    def rx(r):
        return (r.pcre.ascii, r.pcre.utf, cf.name_ids(r), tuple((ids[a], ids[b]) for a, b in r.alts),
                r.pcre.required)

    return {"failregex": [rx(r) for r in cf.failregex], "ignoreregex": [rx(r) for r in cf.ignoreregex],
            "prefregex": rx(cf.prefregex) if cf.prefregex else None, "names": cf.names,
            "dates": (dates := date_templates(cf)), "date_any": date_prefilter(dates), "maxlines": cf.maxlines,
            "data": tuple(ids[n] for n in cf.data_names)}


def compile_jail(spec: JailSpec, compiled: CompiledFilter | None = None, *, protect: bool = True) -> CJail:
    """The C jail (``fipstop._ipsfast.Jail``) of a spec; FipsError (one line) on a bad filter.
    ``protect``: add :func:`protected_nets` to its ignoreip (off for ``--check``, which reports
    what the filter matches, as fail2ban-regex does)."""
    from fipstop import _ipsfast

    ok, reason = _ipsfast.available()
    if not ok:
        raise FipsError(f"ips: {reason}")
    cf = compiled or spec.filter.compiled()
    try:
        return _ipsfast.Jail(spec.name, maxretry=spec.maxretry, findtime_s=spec.findtime_s,
                             bantime_s=spec.bantime_s, max_tracked=spec.max_tracked, mode=spec.mode,
                             ignoreip=parse_nets(spec.ignoreip + (protected_nets(spec.ignoreself) if protect else ())),
                             skip_truncated=spec.skip_truncated,
                             v6_prefix=spec.v6_prefix, max_sessions=spec.max_sessions, session_s=spec.session_s,
                             **jail_args(cf))
    except ValueError as exc:
        raise FipsError(f"jail {spec.name}: {' '.join(str(exc).split())[:300]}") from None
