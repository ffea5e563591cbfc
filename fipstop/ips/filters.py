"""Fail2Ban filters: read a filter file the way Fail2Ban does, expand its
regex tags, and compile it into what the C matcher (fipstop._ipsfast) runs.

The pipeline, each step Fail2Ban's own rules:

1. :mod:`fipstop.ips.interpolation` -- files, includes, ``.local``,
   ``%(...)s`` / ``%(known/...)s`` / ``<...>`` substitution, ``[Init]`` and the
   jail's ``filter = NAME[opt=val, ...]`` options (``mode=``, ``logtype=`` ...);
2. :func:`expand_tags` -- ``<HOST>``, ``<ADDR>``, ``<IP4>``, ``<IP6>``,
   ``<DNS>``, ``<CIDR>``, ``<SUBNET>``, ``<F-ID/>``, ``<F-PORT/>``,
   ``<SKIPLINES>``, ``<F-NAME>...</F-NAME>`` (named groups);
3. :mod:`fipstop.ips.pcre` -- each regex from Python ``re`` syntax to PCRE2
   syntax with the same meaning, or a one-line refusal naming the construct;
4. :mod:`fipstop.ips.datedetect` -- the ``datepattern`` date templates.

What a compiled filter carries to the C matcher beyond regexes: ``maxlines``
(lines buffered per source and matched together, failregexes with
``re.MULTILINE`` as in Fail2Ban), the group roles (``<F-MLFID>`` sessions,
``<F-NOFAIL>``, ``<F-MLFGAINED>``, ``<F-MLFFORGET>``, ``<F-CONTENT>``), and the
``alt_`` groups Fail2Ban merges (``<F-ALT_USER>`` -> ``user``).  A DNS name
in ``<HOST>`` is never resolved (resolution is a lookup an attacker
controls): it is counted as such.  ``journalmatch`` does not apply (records
arrive through a ring, not a journal query) and ``logencoding`` is UTF-8
(invalid bytes become U+FFFD, as Fail2Ban's decoder makes them).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from fipstop.errors import FipsError
from fipstop.ips import datedetect
from fipstop.ips.interpolation import extract_options, read_filter_options
from fipstop.ips.pcre import Translated, Untranslatable, translate

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
    "ADDR": _R_ADDR, "F-ADDR/": _R_ADDR, "IP4": _R_IP4, "F-IP4/": _R_IP4,
    "IP6": _R_IP6, "F-IP6/": _R_IP6, "DNS": _R_DNS, "F-DNS/": _R_DNS, "CIDR": _R_CIDR, "F-CIDR/": _R_CIDR,
    "SUBNET": _R_SUBNET, "F-SUBNET/": _R_SUBNET, "F-ID/": r"(?P<fid>\S+)", "F-PORT/": r"(?P<fport>\w+)",
}
_FTAG = re.compile(r"</?[\w\-]+/?>")
_FCUST = re.compile(r"^(/?)F-([A-Z0-9_\-]+)$")
_GLOB2LOC = re.compile(r"(?<!\\)\((?:\?:)?(\(\?[a-z]+)\)")
_COMPLNAME = re.compile(r"^(alt_|tuple_)(.*?)(?:_\d+)?$")
_R_MAP = {"id": "fid", "port": "fport"}

#: groups that are a failure id (Fail2Ban's FAILURE_ID_PRESENTS): a failregex needs one
FAILURE_ID_GROUPS = ("fid", "ip4", "ip6", "dns", "mlfid")
_INTERNAL = {"ip4", "ip6", "dns", "cidr", "content", "mlfid", "nofail", "mlfgained", "mlfforget"}


def map_tag(tag: str) -> str:
    tag = tag.lower()
    return _R_MAP.get(tag, tag)


def expand_tags(regex: str, usedns: str = "warn") -> str:
    """Fail2Ban's ``Regex._resolveHostTag`` (+ its ``((?i)x)`` -> ``(?i:x)`` rewrite):
    tags -> Python regex syntax.  ``<HOST>`` has no DNS alternative with ``usedns = no``."""
    open_tags: set[str] = set()
    nl = [0]

    def subst(m: re.Match[str]) -> str:
        tag = m.group()
        tn = tag[1:-1]
        if tn == "HOST":
            return _R_HOST if usedns != "no" else _R_ADDR
        if tn == "SKIPLINES":
            n = nl[0]
            nl[0] += 1
            return r"\n(?P<skiplines%i>(?:(?:.*\n)*?))" % n
        if tn in _TAGS:
            return _TAGS[tn]
        c = _FCUST.match(tn)
        if c:
            closing, name = c.groups()
            if closing:
                return ")" if name in open_tags else tag
            open_tags.add(name)
            return f"(?P<{map_tag(name)}>"
        return tag

    return _GLOB2LOC.sub(r"\1:", _FTAG.sub(subst, regex))


def is_data_group(name: str) -> bool:
    """A group whose value may be the failure's data (not one the matcher interprets)."""
    return not (name in _INTERNAL or name.startswith("skiplines"))


def ftag_names(regex: str) -> set[str]:
    """The group names a regex's Fail2Ban tags make (<F-USER> -> user, <F-ID/> -> fid, ...): the
    captures a filter's author meant as the failure's data, as opposed to helper groups such as
    sshd's (?P<cond_user>...)."""
    out = set()
    for m in _FTAG.finditer(regex):
        tn = m.group()[1:-1]
        if tn in ("F-ID/", "F-PORT/"):
            out.add(map_tag(tn[2:-1]))
        c = _FCUST.match(tn)
        if c and not c.group(1):
            out.add(map_tag(c.group(2)))
    return out


@dataclass(frozen=True, slots=True)
class RegexSpec:
    """One regex as Fail2Ban compiles it and as the C matcher gets it."""

    source: str  # as written in the filter (tags not expanded): what --check shows
    expanded: str  # after tag expansion: the Python regex Fail2Ban compiles
    pcre: Translated
    #: (alt group name, target name): Fail2Ban copies alt_user into user when user is empty
    alts: tuple[tuple[str, str], ...] = ()
    #: group names made by <F-...> tags
    ftags: frozenset[str] = frozenset()

    def groups(self) -> set[str]:
        return {n for n in self.pcre.names if n}


def compile_regex(source: str, usedns: str = "warn", multiline: bool = False) -> RegexSpec:
    """Fail2Ban's ``Regex.__init__`` for one regex, then its PCRE2 form."""
    expanded = expand_tags(source, usedns)
    if expanded.lstrip() == "":
        raise FipsError("filter: an empty regex")
    with warnings.catch_warnings():  # "possible nested set": Python warns, Fail2Ban lets it pass
        warnings.simplefilter("ignore", FutureWarning)
        try:
            tr = translate(expanded, re.MULTILINE if multiline else 0)
        except Untranslatable as exc:
            # the position Python gives is in the expanded text: name the regex as written
            raise FipsError(f"{exc.reason.split(' at position ')[0]} (in {source[:100]!r})") from None
    alts = []
    for name in sorted(n for n in tr.names if n and len(n) > 4):
        m = _COMPLNAME.match(name)
        if m:
            kind, target = m.group(1), map_tag(m.group(2))
            if kind == "tuple_":
                raise FipsError(f"filter: <F-{name.upper()}> (a failure id made of several groups) is not "
                                "supported: fipstop bans addresses")
            alts.append((name, target))
    return RegexSpec(source=source, expanded=expanded, pcre=tr, alts=tuple(alts), ftags=frozenset(ftag_names(source)))


@dataclass(frozen=True, slots=True)
class FilterDef:
    """A filter's definition: regexes as written (tags not expanded) and its options."""

    name: str
    failregex: tuple[str, ...]
    ignoreregex: tuple[str, ...] = ()
    prefregex: str | None = None
    source: str = "built-in"
    options: dict[str, str] = field(default_factory=dict, compare=False)
    maxlines: int = 1
    #: the datepattern option (None: Fail2Ban's default templates)
    datepattern: str | None = "{^LN-BEG}"
    usedns: str = "warn"
    #: the jail's options (filter = NAME[opt=val, ...])
    init: tuple[tuple[str, str], ...] = ()
    #: [INCLUDES] before/after files that do not exist (Fail2Ban skips them silently; fipstop warns)
    missing_includes: tuple[str, ...] = field(default=(), compare=False)

    def compiled(self) -> CompiledFilter:
        """Every regex and date template compiled (FipsError, one line, naming what failed)."""
        return compile_filter(self)


@dataclass(frozen=True, slots=True)
class CompiledFilter:
    definition: FilterDef
    prefregex: RegexSpec | None
    failregex: tuple[RegexSpec, ...]
    ignoreregex: tuple[RegexSpec, ...]
    dates: datedetect.DateDetector
    #: every group name of every regex, in a fixed order (the C matcher's name ids)
    names: tuple[str, ...]
    #: things that load but cannot work as the filter's author may think (shown, not refused)
    warnings: tuple[str, ...] = ()

    @property
    def maxlines(self) -> int:
        return self.definition.maxlines

    def name_ids(self, spec: RegexSpec) -> tuple[int, ...]:
        ids = {n: i for i, n in enumerate(self.names)}
        return tuple(-1 if n is None else ids[n] for n in spec.pcre.names)

    @property
    def data_names(self) -> tuple[str, ...]:
        """<F-...> captures other than the ones the matcher interprets (user, alt_user, fid, fport,
        custom tags): what --check shows and ban events carry."""
        tags = set().union(*(r.ftags for r in (self.prefregex, *self.failregex, *self.ignoreregex) if r))
        tags |= {t for r in (self.prefregex, *self.failregex) if r for _a, t in r.alts}
        return tuple(n for n in self.names if n in tags and is_data_group(n))

    @property
    def stateful(self) -> bool:
        return self.maxlines > 1 or "mlfid" in self.names


def _regex_lines(text: str | None) -> tuple[str, ...]:
    """Fail2Ban's _fillStream: one regex per line, empty lines dropped (configparser strips them)."""
    if not text:
        return ()
    return tuple(r for r in text.split("\n") if r != "")


def compile_filter(f: FilterDef) -> CompiledFilter:
    label = f"filter {f.name}"
    if f.maxlines < 1:
        raise FipsError(f"{label}: maxlines must be 1 or more, not {f.maxlines}")
    if f.usedns not in ("yes", "warn", "no", "raw"):
        raise FipsError(f"{label}: usedns must be yes, warn, no or raw, not {f.usedns[:20]!r}")

    def one(kind: str, i: int, src: str, multiline: bool = False) -> RegexSpec:
        try:
            return compile_regex(src, f.usedns, multiline)
        except FipsError as exc:
            msg = str(exc).removeprefix("filter: ")
            raise FipsError(f"{label}: {kind} {i + 1}: {msg}") from None

    pref = one("prefregex", 0, f.prefregex) if f.prefregex else None
    fail = tuple(one("failregex", i, r, f.maxlines > 1) for i, r in enumerate(f.failregex))
    ign = tuple(one("ignoreregex", i, r) for i, r in enumerate(f.ignoreregex))
    if not fail:
        raise FipsError(f"{label} ({f.source}) has no failregex")
    pref_ids = pref.groups() & set(FAILURE_ID_GROUPS) if pref else set()
    for kind, rs in (("failregex", fail), ("ignoreregex", ign)):
        for i, r in enumerate(rs):
            # Fail2Ban would load it as the literal text "<mode-lax>": a filter silently broken
            if re.fullmatch(r"<[^<>\s]+>", r.source.strip()) and r.expanded == r.source:
                raise FipsError(f"{label}: {kind} {i + 1} is {r.source.strip()!r}, a tag no option defines "
                                f"(a mode this filter does not have?)")
    for i, r in enumerate(fail):
        if not (r.groups() & set(FAILURE_ID_GROUPS)) and not pref_ids:
            raise FipsError(f"{label}: failregex {i + 1} has no failure id (<HOST>, <ADDR>, <IP4>, <IP6>, "
                            f"<F-ID>, <F-MLFID>): {r.source[:100]!r}")
    names: list[str] = []
    every: tuple[RegexSpec | None, ...] = (pref, *fail, *ign)
    for rs_ in every:
        for n in (rs_.pcre.names if rs_ else ()):
            if n and n not in names:
                names.append(n)
    for rs_ in every:
        for _src, target in (rs_.alts if rs_ else ()):
            if target not in names:
                names.append(target)
    try:
        dates = datedetect.detector_for(f.datepattern)
    except FipsError as exc:
        raise FipsError(f"{label}: {exc}") from None
    warn = [f"include {inc} does not exist: skipped (as Fail2Ban skips it)" for inc in f.missing_includes]
    if f.maxlines == 1:
        for i, r in enumerate(fail):
            if "skiplines0" in r.groups() or re.search(r"(?<!\\)\\n", r.expanded):
                warn.append(f"failregex {i + 1} spans several lines (\\n or <SKIPLINES>) but maxlines is 1: "
                            "it can never match (as in Fail2Ban)")
    return CompiledFilter(definition=f, prefregex=pref, failregex=fail, ignoreregex=ign, dates=dates,
                          names=tuple(names), warnings=tuple(warn))


def load_filter(spec: str, filter_dir: str | Path = "/etc/fail2ban/filter.d") -> FilterDef:
    """A Fail2Ban filter by name (``sshd`` -> FILTER_DIR/sshd.conf), path, or either with jail
    options: ``sshd[mode=aggressive]``, ``/etc/fail2ban/filter.d/sshd.conf[logtype=short]``."""
    name, init = extract_options(spec)
    p = Path(name)
    if not (p.suffix in (".conf", ".local") or "/" in name):
        p = Path(filter_dir) / f"{name}.conf"
    if not p.with_suffix(".conf").exists() and not p.with_suffix(".local").exists():
        where = p.with_suffix("")
        raise FipsError(f"filter: {where}.conf does not exist (nor {where}.local)"
                        + (f": {p} itself is not a filter file" if p.exists() and p.suffix != ".conf" else ""))
    fo = read_filter_options(p, init)
    o = fo.options
    maxlines = o.get("maxlines")
    try:
        ml = int(maxlines) if maxlines not in (None, "") else 1
    except ValueError:
        raise FipsError(f"filter {p.stem}: maxlines = {str(maxlines)[:20]!r} is not a whole number") from None
    pref = o.get("prefregex")
    return FilterDef(
        name=p.stem, failregex=_regex_lines(o.get("failregex")), ignoreregex=_regex_lines(o.get("ignoreregex")),
        prefregex=pref if pref else None, source=fo.path, options=o, maxlines=ml,
        datepattern=o.get("datepattern"), usedns=(o.get("usedns") or "warn").strip().lower(),
        init=tuple(sorted(init.items())), missing_includes=fo.missing)


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
