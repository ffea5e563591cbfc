"""Jails: a filter plus the counting policy (maxretry / findtime / bantime /
ignoreip / mode), from built-in defaults, a ``--config`` file and command-line
overrides, compiled into ``fipstop._ipsfast.Jail`` objects."""

from __future__ import annotations

import configparser
import ipaddress
from dataclasses import dataclass, replace
from pathlib import Path

from fipstop.errors import FipsError
from fipstop.ips.filters import BUILTIN_FILTERS, FilterDef, load_filter

DEFAULT_IGNOREIP: tuple[str, ...] = ()


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


def load_config(path: str, filter_dir: str) -> dict[str, JailSpec]:
    """Jails of an ini file: one ``[NAME]`` section each (``enabled = false`` skips it)."""
    cp = configparser.RawConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            cp.read_file(f, source=path)
    except OSError as exc:
        raise FipsError(f"config: cannot read {path}: {exc.strerror}") from None
    except configparser.Error as exc:
        raise FipsError(f"config: {path}: {str(exc).splitlines()[0]}") from None
    jails = {}
    for name in cp.sections():
        s = cp[name]
        if s.get("enabled", "true").strip().lower() in ("false", "no", "0"):
            continue
        base = BUILTIN_JAILS.get(name)
        if "failregex" in s or "prefregex" in s:
            lines = lambda k: tuple(x.strip() for x in s.get(k, "").splitlines() if x.strip())  # noqa: E731
            filt = FilterDef(name=name, failregex=lines("failregex"), ignoreregex=lines("ignoreregex"),
                             prefregex=s.get("prefregex", "").strip() or None, source=path)
        elif "filter" in s:
            fname = s["filter"].strip()
            filt = BUILTIN_FILTERS[fname] if fname in BUILTIN_FILTERS and not Path(filter_dir, f"{fname}.conf").exists() \
                else load_filter(fname, filter_dir)
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
        jails[name] = spec
    return jails


def select_jails(args) -> list[JailSpec]:
    """The jails ``fipstop ips`` runs, from its arguments (see fipstop/ips/cli.py)."""
    available = dict(BUILTIN_JAILS)
    from_config: list[str] = []
    if getattr(args, "config", None):
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
        s = replace(s, max_tracked=args.max_tracked, skip_truncated=args.skip_truncated,
                    v6_prefix=getattr(args, "ipv6_prefix", 128))
        if not 1 <= s.v6_prefix <= 128:
            raise FipsError(f"--ipv6-prefix must be 1..128, not {s.v6_prefix}")
        out.append(s)
    if len({s.name for s in out}) != len(out):
        raise FipsError("two jails have the same name")
    return out


def compile_jail(spec: JailSpec):
    """The C jail (``fipstop._ipsfast.Jail``) of a spec; FipsError on a bad regex."""
    from fipstop import _ipsfast

    ok, reason = _ipsfast.available()
    if not ok:
        raise FipsError(f"ips: {reason}")
    pref, fail, ign = spec.filter.compiled()
    if not any("(?P<ip4>" in r or "(?P<ip6>" in r for r in [*fail, pref or ""]):
        raise FipsError(f"jail {spec.name}: no <HOST>, <ADDR>, <IP4> or <IP6> in its failregex/prefregex")
    try:
        return _ipsfast.Jail(spec.name, fail, ign, pref, spec.maxretry, spec.findtime_s, spec.bantime_s,
                             spec.max_tracked, spec.mode, parse_nets(spec.ignoreip), spec.skip_truncated,
                             spec.v6_prefix)
    except ValueError as exc:
        raise FipsError(f"jail {spec.name}: {exc}") from None
