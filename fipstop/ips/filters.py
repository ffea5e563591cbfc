"""Fail2Ban filters: read a ``[Definition]`` filter file the way Fail2Ban does,
and expand Fail2Ban's regex tags into plain PCRE2/Python syntax.

What is supported (the parts of Fail2Ban's config reader a filter needs):

* ``[INCLUDES]`` ``before =`` / ``after =`` files (relative to the filter's
  directory, recursively), and ``NAME.local`` next to ``NAME.conf``;
* sections ``[DEFAULT]``, ``[Definition]``, ``[Init]`` (later files and
  ``[Init]`` override), and any other section for cross references;
* ``%(name)s`` and ``%(section/name)s`` interpolation, and Fail2Ban's
  ``<name>`` / ``<section/name>`` substitution of known options, nested like
  ``<lt_<logtype>/__prefix_line>``, both to a fixed point (depth 50);
* ``prefregex`` (with ``<F-CONTENT>``: failregex is matched on the content),
  multi-line ``failregex`` / ``ignoreregex`` (one regex per line);
* tags ``<HOST>`` (ip4, ip6, dns alternatives — a DNS name is never resolved:
  it counts as "not an IP"), ``<ADDR>``, ``<IP4>``, ``<IP6>``, ``<DNS>``,
  ``<CIDR>``, ``<SUBNET>``, ``<F-ID/>``, ``<F-PORT/>``, ``<F-NAME>...</F-NAME>``
  groups.

Not supported: ``<SKIPLINES>`` / ``maxlines`` (multi-line matching), ``%(known/...)s``,
``datepattern`` (records carry their time in the ring header) and
``journalmatch``.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from pathlib import Path

from fipstop.errors import FipsError

IP_4_RE = r"(?:\d{1,3}\.){3}\d{1,3}"
IP_6_RE = r"(?:[0-9a-fA-F]{1,4}::?|::){1,7}(?:[0-9a-fA-F]{1,4}|(?<=:):)"
_R_IP4 = rf"(?:::f{{4,6}}:)?(?P<ip4>{IP_4_RE})"
_R_IP6 = rf"(?P<ip6>{IP_6_RE})"
_R_DNS = r"(?P<dns>[\w\-.^_]*\w)"
_R_ADDR = rf"\[?(?:{_R_IP4}|{_R_IP6})\]?"
_R_HOST = rf"(?:{_R_ADDR}|{_R_DNS})"
_R_CIDR = r"(?P<cidr>\d+)"
_R_SUBNET = rf"\[?(?:{_R_IP4}|{_R_IP6})(?:/{_R_CIDR})?\]?"
_TAGS = {
    "HOST": _R_HOST, "ADDR": _R_ADDR, "F-ADDR/": _R_ADDR, "IP4": _R_IP4, "F-IP4/": _R_IP4,
    "IP6": _R_IP6, "F-IP6/": _R_IP6, "DNS": _R_DNS, "F-DNS/": _R_DNS, "CIDR": _R_CIDR, "F-CIDR/": _R_CIDR,
    "SUBNET": _R_SUBNET, "F-SUBNET/": _R_SUBNET, "F-ID/": r"(?P<fid>\S+)", "F-PORT/": r"(?P<fport>\w+)",
}
_FTAG = re.compile(r"</?[\w\-]+/?>")
_FCUST = re.compile(r"^(/?)F-([A-Z0-9_\-]+)$")
_GLOB2LOC = re.compile(r"(?<!\\)\((?:\?:)?(\(\?[a-z]+)\)")
_PCT = re.compile(r"%\(([\w/.\-]+)\)s")
_ANGLE = re.compile(r"<([\w/.\-]+)>")
_MAX_DEPTH = 50


def expand_tags(regex: str) -> str:
    """Fail2Ban's ``Regex._resolveHostTag``: tags -> named groups."""
    open_tags: set[str] = set()

    def subst(m: re.Match[str]) -> str:
        tag = m.group()
        tn = tag[1:-1]
        if tn == "SKIPLINES":
            raise FipsError("filter: <SKIPLINES> (multi-line matching) is not supported")
        if tn in _TAGS:
            return _TAGS[tn]
        c = _FCUST.match(tn)
        if c:
            closing, name = c.groups()
            if closing:
                return ")" if name in open_tags else tag
            open_tags.add(name)
            return f"(?P<{ {'ID': 'fid', 'PORT': 'fport'}.get(name, name.lower().replace('-', '_')) }>"
        return tag

    out = _FTAG.sub(subst, regex)
    out = _GLOB2LOC.sub(r"\1:", out)
    # Python's \Z is PCRE2's \z (end of subject, no newline allowance)
    return re.sub(r"(?<!\\)\\Z", r"\\z", out)


@dataclass(frozen=True, slots=True)
class FilterDef:
    """Regexes of one filter, tags not yet expanded (as Fail2Ban shows them)."""

    name: str
    failregex: tuple[str, ...]
    ignoreregex: tuple[str, ...] = ()
    prefregex: str | None = None
    source: str = "built-in"
    options: dict[str, str] = field(default_factory=dict, compare=False)

    def compiled(self) -> tuple[str | None, list[str], list[str]]:
        """(prefregex, failregex, ignoreregex) in PCRE2 syntax."""
        return (expand_tags(self.prefregex) if self.prefregex else None,
                [expand_tags(r) for r in self.failregex], [expand_tags(r) for r in self.ignoreregex])


def _read_sections(path: Path, seen: set[Path], depth: int = 0) -> list[dict[str, dict[str, str]]]:
    """Parsed files in override order: before-includes, the file, its .local, after-includes."""
    if depth > 10:
        raise FipsError(f"filter: includes nested too deeply at {path}")
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    cp = configparser.RawConfigParser(strict=False, interpolation=None, default_section="\0none")
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        with open(path, encoding="utf-8") as f:
            cp.read_file(f, source=str(path))
    except OSError as exc:
        raise FipsError(f"filter: cannot read {path}: {exc.strerror}") from None
    except configparser.Error as exc:
        raise FipsError(f"filter: {path}: {str(exc).splitlines()[0]}") from None
    secs = {s: dict(cp.items(s)) for s in cp.sections()}
    inc = secs.pop("INCLUDES", {})
    out: list[dict[str, dict[str, str]]] = []
    for key in ("before",):
        for name in inc.get(key, "").split():
            out += _read_sections(path.parent / name, seen, depth + 1) if (path.parent / name).exists() else []
    out.append(secs)
    local = path.with_suffix(".local")
    if local.exists() and local != path:
        out += _read_sections(local, seen, depth + 1)
    for name in inc.get("after", "").split():
        if (path.parent / name).exists():
            out += _read_sections(path.parent / name, seen, depth + 1)
    return out


def _merge(parts: list[dict[str, dict[str, str]]]) -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for secs in parts:
        for s, kv in secs.items():
            merged.setdefault(s, {}).update(kv)
    return merged


def _interpolate(value: str, defs: dict[str, str], sections: dict[str, dict[str, str]]) -> str:
    def lookup(name: str) -> str | None:
        if "/" in name:
            sec, _, key = name.partition("/")
            s = sections.get(sec)
            if s is None:
                return None
            return s.get(key, sections.get("DEFAULT", {}).get(key))
        return defs.get(name)

    for _ in range(_MAX_DEPTH):
        new = _PCT.sub(lambda m: v if (v := lookup(m.group(1))) is not None else m.group(0), value)
        new = _ANGLE.sub(lambda m: v if (v := lookup(m.group(1))) is not None else m.group(0), new)
        if new == value:
            return value
        value = new
    raise FipsError("filter: interpolation does not terminate (a recursive %(...)s or <...>)")


def _regex_lines(text: str) -> tuple[str, ...]:
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def load_filter(spec: str, filter_dir: str | Path = "/etc/fail2ban/filter.d") -> FilterDef:
    """Load a Fail2Ban filter by name (``named-refused`` -> FILTER_DIR/named-refused.conf) or path."""
    p = Path(spec)
    if not (p.suffix in (".conf", ".local") or "/" in spec):
        p = Path(filter_dir) / f"{spec}.conf"
    if not p.exists():
        raise FipsError(f"filter: {p} does not exist")
    sections = _merge(_read_sections(p, set()))
    defs = dict(sections.get("DEFAULT", {}))
    defs.update(sections.get("Definition", {}))
    defs.update(sections.get("Init", {}))
    resolved = {k: _interpolate(v, defs, sections) for k, v in defs.items()}
    fail = _regex_lines(resolved.get("failregex", ""))
    pref = resolved.get("prefregex", "").strip() or None
    if not fail and not pref:
        raise FipsError(f"filter: {p} has no failregex")
    return FilterDef(name=p.stem, failregex=fail, ignoreregex=_regex_lines(resolved.get("ignoreregex", "")),
                     prefregex=pref, source=str(p), options=resolved)


# --- built-in filters ---------------------------------------------------------------------------------

#: Equivalent to Fail2Ban 1.0's filter.d/named-refused.conf (its prefix is optional, so it matches
#: records with or without a syslog "HOST named[PID]:" prefix).
NAMED_REFUSED = FilterDef(
    name="named-refused",
    prefregex=r"^\s*(?:\S+ (?:(?:\[\d+\])?:\s+\(?named(?:-\w+)?(?:\(\S+\))?\)?:?|\(?named(?:-\w+)?(?:\(\S+\))?\)?:?"
    r"(?:\[\d+\])?:)\s+)?(?:(?!error|info)[\w-]+: )?(?:(?:error|info):\s*)?client(?: @\S*)? <HOST>#\S+"
    r"(?: \([\S.]+\))?: <F-CONTENT>.+</F-CONTENT>\s(?:denied|\(NOTAUTH\))\s*$",
    failregex=(r"^(?:view (?:internal|external): )?query(?: \(cache\))?", r"^zone transfer",
               r"^bad zone transfer request: '\S+/IN': non-authoritative zone"),
)

#: Every BIND query-log line counts: a rate jail ("client @0x.. ADDR#PORT (NAME): query: NAME IN A ...").
NAMED_QUERY_RATE = FilterDef(
    name="named-query-rate",
    failregex=(r"^\s*(?:\S+ named(?:-\w+)?(?:\[\d+\])?:\s+)?(?:queries: )?(?:info: )?client(?: @\S*)? <ADDR>#\d+"
               r"(?: \([^)\s]*\))?: (?:view \S+: )?query: ",),
)

BUILTIN_FILTERS = {f.name: f for f in (NAMED_REFUSED, NAMED_QUERY_RATE)}
