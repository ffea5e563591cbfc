"""Fail2Ban's configuration reader, as far as a filter needs it: which files
are read in which order, how they merge, and how ``%(...)s`` and ``<...>``
are substituted -- reproduced rule for rule, because a filter's regexes are
whatever these rules make of its text, and a rule done differently gives a
filter that loads and then silently matches something else.

Files (Fail2Ban's ``ConfigReaderUnshared.read`` + ``SafeConfigParserWithIncludes``):
``NAME.conf``, ``NAME.d/*.conf``, ``NAME.local``, ``NAME.d/*.local``, each
preceded by its ``[INCLUDES] before =`` files and followed by its ``after =``
files (recursively, each include with its own ``.local``).  Merging: later
files override earlier ones option by option; the value an option had before
being overridden stays reachable as ``%(known/OPTION)s`` (section
``KNOWN/<section>``).

``%(...)s`` (configparser's BasicInterpolation, with Fail2Ban's additions):
``%(name)s`` from the jail's options, the section, then ``[DEFAULT]``;
``%(section/name)s`` from another section; ``%(known/name)s`` the overridden
value; ``%(__name__)s`` the section's name; ``%%`` a percent sign; at most 10
levels deep.  ``<...>`` (Fail2Ban's ``substituteRecursiveTags``): ``<name>``
and ``<section/name>`` replaced from the combined options to a fixed point
(``<mdre-<mode>>`` works), unknown tags such as ``<HOST>`` left alone.

``[Init]`` options and the jail's ``filter = NAME[opt=val, ...]`` options
(:func:`extract_options`) override definitions in ``<...>`` substitution, as in
Fail2Ban; the jail's options also feed ``%(...)s``.
"""

from __future__ import annotations

import configparser
import os
import re
from collections import ChainMap
from dataclasses import dataclass, field
from pathlib import Path

from fipstop.errors import FipsError
from fipstop.safefile import NotRegular, read_regular

MAX_INTERPOLATION_DEPTH = 10  # configparser's
MAX_TAG_REPLACE_COUNT = 25  # Fail2Ban's
MAX_INCLUDE_DEPTH = 20

_KEYCRE = re.compile(r"%\(([^)]+)\)s")
_SECTION_OPTSUBST = re.compile(r"%\(([\w\-]+/([^\)]+))\)s")
_SECTION_OPTNAME = re.compile(r"^([\w\-]+)/([^\s>]+)$")
_CONDITIONAL = re.compile(r"^(\w+)(\?.+)$")
_TAG = re.compile(r"<([^ <>]+)>")

# Fail2Ban's helpers.OPTION_CRE / OPTION_EXTRACT_CRE: ``name[p1=v, p2="v", p3='v'][p4=v]``
_OPTION = re.compile(r"^([^\[]+)(?:\[(.*)\])?\s*$", re.DOTALL)
_OPTION_EXTRACT = re.compile(
    r'\s*([\w\-_\.]+)=(?:"([^"]*)"|\'([^\']*)\'|([^,\]]*))(?:,|\]\s*\[|$|(?P<wrngA>.+))|,?\s*$|(?P<wrngB>.+)',
    re.DOTALL)

#: the options a filter file defines for the filter itself (Fail2Ban's FilterReader._configOpts)
FILTER_OPTIONS = ("usedns", "prefregex", "ignoreregex", "failregex", "maxlines", "datepattern", "journalmatch")


class ConfigError(FipsError):
    """A filter's configuration cannot be read as Fail2Ban reads it (one line)."""


class _NoSection(Exception):
    pass


class _NoOption(Exception):
    pass


def extract_options(spec: str) -> tuple[str, dict[str, str]]:
    """``"sshd[mode=aggressive, logtype=short]"`` -> ``("sshd", {"mode": "aggressive", ...})``
    (Fail2Ban's ``extractOptions``; quotes may hold commas and brackets)."""
    m = _OPTION.match(spec)
    if not m:
        raise ConfigError(f"filter {spec[:80]!r}: expected NAME or NAME[option=value, ...]")
    name, optstr = m.groups()
    opts: dict[str, str] = {}
    if optstr:
        for om in _OPTION_EXTRACT.finditer(optstr):
            if om.group("wrngA"):
                raise ConfigError(f"filter {spec[:80]!r}: unexpected text after option {om.group(1)!r}: "
                                  f"{om.group('wrngA')[:25]!r}")
            if om.group("wrngB"):
                raise ConfigError(f"filter {spec[:80]!r}: expected option=value, found {om.group('wrngB')[:25]!r}")
            if not om.group(1):
                continue
            value = next(v for v in om.group(2, 3, 4) if v is not None)
            opts[om.group(1).strip()] = value.strip()
    return name.strip(), opts


def _parse_file(path: str) -> tuple[dict[str, str], dict[str, dict[str, str]]] | None:
    """(defaults, sections) of one file, raw; None if it does not exist (as Fail2Ban skips it)."""
    # "[DEFAULT]" is read as an ordinary section (default_section is a name no file uses) so that
    # each section's items are its own; Fail2Ban's parser: ';' starts an inline comment, keys lowercase.
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",), default_section="\0")
    try:
        raw = read_regular(path)  # never /dev/zero read for ever, nor a FIFO that blocks the open
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None
    except NotRegular as exc:
        raise ConfigError(f"filter: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"filter: cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"filter: {path} is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        cp.read_string(text, source=path)
    except configparser.Error as exc:
        raise ConfigError(f"filter: {path}: {' '.join(str(exc).split())[:200]}") from None
    secs = {s: dict(cp.items(s, raw=True)) for s in cp.sections()}
    return secs.pop("DEFAULT", {}), secs


@dataclass
class MergedConfig:
    """What Fail2Ban's SafeConfigParserWithIncludes holds after reading a filter."""

    defaults: dict[str, str] = field(default_factory=dict)
    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    #: includes (before = / after =) that name no file: skipped, as Fail2Ban skips them, and warned about
    missing: list[str] = field(default_factory=list)
    _cache: dict[str, tuple[dict[str, str], dict[str, dict[str, str]]] | None] = field(default_factory=dict)

    # -- reading -------------------------------------------------------------------------
    def _file(self, path: str):
        if path not in self._cache:
            self._cache[path] = _parse_file(path)
        return self._cache[path]

    def _includes(self, filenames: list[str], seen: list[str], depth: int) -> list[str]:
        """Fail2Ban's _getIncludes: each file with its .local, each with its before/after includes."""
        if depth > MAX_INCLUDE_DEPTH:
            raise ConfigError(f"filter: includes nested more than {MAX_INCLUDE_DEPTH} deep at {filenames[0]}")
        expanded: list[str] = []
        for fn in filenames:
            expanded.append(fn)
            local = os.path.splitext(fn)[0] + ".local"
            if local not in filenames and os.path.isfile(local):
                expanded.append(local)
        out: list[str] = []
        for fn in expanded:
            out += self._includes_of(fn, seen, depth)
        return out

    def _includes_of(self, resource: str, seen: list[str], depth: int) -> list[str]:
        parsed = self._file(resource)
        if parsed is None:
            return [resource]  # read() skips it and says so
        _defaults, secs = parsed
        before: list[str] = []
        after: list[str] = []
        inc = secs.get("INCLUDES")
        if inc is not None:
            rdir = os.path.dirname(resource)
            for key, lst in (("before", before), ("after", after)):
                if key not in inc:
                    continue
                value = self._interpolate_single(inc[key], "INCLUDES", key, parsed)
                for new in value.split("\n"):
                    r = new if os.path.isabs(new) else os.path.join(rdir, new)
                    if r in seen:
                        continue
                    lst += self._includes([r], seen + [resource], depth + 1)
        return before + [resource] + after

    def _interpolate_single(self, value: str, section: str, option: str, parsed) -> str:
        """An [INCLUDES] value, interpolated within its own file (as Fail2Ban's per-file parser does)."""
        if "%" not in value:
            return value
        single = MergedConfig(defaults=dict(parsed[0]), sections={k: dict(v) for k, v in parsed[1].items()})
        return single.get(section, option)

    def read(self, config_files: list[str]) -> None:
        for fn in self._includes(config_files, [], 0):
            parsed = self._file(fn)
            if parsed is None:
                # X.local is the optional override by convention (common.conf: after = common.local)
                if fn not in config_files and fn not in self.missing and not fn.endswith(".local"):
                    self.missing.append(fn)
                continue
            self.files.append(fn)
            d, secs = parsed
            self.defaults.update(d)
            for n, s in secs.items():
                cond = _CONDITIONAL.match(n)
                if cond:
                    n, c = cond.groups()
                    s = {k + c: v for k, v in s.items()}
                old = self.sections.get(n)
                if old is not None:
                    known = self.sections.setdefault("KNOWN/" + n, {})
                    known.update({k: v for k, v in old.items() if k in s})
                    old.update(s)
                else:
                    self.sections[n] = dict(s)

    # -- getting (configparser.get + BasicInterpolation + Fail2Ban's wrapper) ------------
    def has_section(self, section: str) -> bool:
        return section in self.sections

    def get(self, section: str, option: str, vars: dict[str, str] | None = None, raw: bool = False) -> str:
        option = option.lower()
        if section == "DEFAULT":
            sec: dict[str, str] = {}
        elif section in self.sections:
            sec = self.sections[section]
        else:
            raise _NoSection(section)
        vardict = {k.lower(): v for k, v in (vars or {}).items() if v is not None}
        chain = ChainMap(vardict, sec, self.defaults)
        try:
            value = chain[option]
        except KeyError:
            raise _NoOption(option) from None
        if raw or value is None:
            return value
        out: list[str] = []
        self._interpolate_some(option, out, value, section, chain, 1)
        return "".join(out)

    def _map_section_options(self, section: str, rest: str, chain: ChainMap) -> None:
        """Fail2Ban's _map_section_options: make %(sec/opt)s and %(known/opt)s resolvable."""
        if "/" not in rest or "%(" not in rest:
            return
        for sopt, opt in _SECTION_OPTSUBST.findall(rest):
            if sopt in chain:
                continue
            sec = sopt[: -len(opt) - 1]
            low = sec.lower()
            usedef = False
            if low == "default":
                usedef = True
            elif low == "known":
                try:
                    v = self.sections["KNOWN/" + section][opt]
                except KeyError:
                    usedef = True
            else:
                if sec not in self.sections:
                    continue
                try:
                    v = self.sections[sec][opt]
                except KeyError:
                    usedef = True
            if usedef:
                try:
                    v = self.defaults[opt]
                except KeyError:
                    continue
            chain.maps[0][sopt] = v

    def _interpolate_some(self, option: str, accum: list[str], rest: str, section: str, chain: ChainMap,
                          depth: int) -> None:
        chain = chain.new_child()  # Fail2Ban copies the map per level and adds __name__ and sec/opt keys
        chain["__name__"] = section
        self._map_section_options(section, rest, chain)
        if depth > MAX_INTERPOLATION_DEPTH:
            raise ConfigError(f"[{section}] {option}: %(...)s nested more than {MAX_INTERPOLATION_DEPTH} deep "
                              "(a recursive definition?)")
        while rest:
            p = rest.find("%")
            if p < 0:
                accum.append(rest)
                return
            if p > 0:
                accum.append(rest[:p])
                rest = rest[p:]
            c = rest[1:2]
            if c == "%":
                accum.append("%")
                rest = rest[2:]
            elif c == "(":
                m = _KEYCRE.match(rest)
                if m is None:
                    raise ConfigError(f"[{section}] {option}: bad interpolation reference {rest[:40]!r}")
                var = m.group(1).lower()
                rest = rest[m.end():]
                try:
                    v = chain[var]
                except KeyError:
                    raise ConfigError(f"[{section}] {option}: %({m.group(1)})s refers to an option that is not "
                                      "defined") from None
                if "%" in v:
                    self._interpolate_some(option, accum, v, section, chain, depth + 1)
                else:
                    accum.append(v)
            else:
                raise ConfigError(f"[{section}] {option}: '%' must be followed by '%' or '(', found {rest[:20]!r} "
                                  "(write %% for a percent sign)")

    def get_ex(self, section: str, option: str, vars: dict[str, str] | None = None) -> str:
        """Fail2Ban's get_ex: ``sec/opt`` and ``known/opt`` names, else ``option`` in ``section``."""
        m = _SECTION_OPTNAME.search(option) if "/" in option else None
        if m:
            sec, opt = m.groups()
            low = sec.lower()
            secs = ("KNOWN/" + section, section) if low == "known" else (("DEFAULT",) if low == "default" else (sec,))
            for s in secs:
                try:
                    return self.get(s, opt)
                except (_NoSection, _NoOption):
                    pass
        return self.get(section, option, vars=vars)


def substitute_tags(tags: dict[str, str], ignore: set[str], addrepl) -> dict[str, str]:
    """Fail2Ban's substituteRecursiveTags (``<name>`` in values, to a fixed point)."""
    inp = tags
    done: set[str] = set()
    rep_counts: dict[str, dict[str, int]] = {}
    while True:
        rep = False
        for tag in list(tags.keys()):
            if tag in ignore or tag in done:
                continue
            value = orgval = str(tags[tag])
            m = _TAG.search(value)
            rplc = rep_counts.get(tag, {})
            while m:
                rtag = m.group(1)
                if rtag in ignore:
                    m = _TAG.search(value, m.end())
                    continue
                if rtag == tag or rplc.get(rtag, 1) > MAX_TAG_REPLACE_COUNT:
                    raise ConfigError(f"option {tag}: <{rtag}> refers back to itself (a recursive definition)")
                repl = tags.get(rtag)
                if repl is None and addrepl is not None:
                    repl = addrepl(rtag)
                if repl is None:
                    m = _TAG.search(value, m.end())
                    continue
                value = value.replace(f"<{rtag}>", str(repl))
                rplc[rtag] = rplc.get(rtag, 0) + 1
                m = _TAG.search(value, m.start())
            if orgval != value:
                if _TAG.search(value):
                    rep_counts[tag] = rplc
                    rep = True
                if tags is inp:
                    tags = dict(inp)
                tags[tag] = value
            if "<" not in value:
                done.add(tag)
        if not rep:
            return tags


@dataclass(frozen=True)
class FilterOptions:
    """A filter's options after every substitution (Fail2Ban's FilterReader.getCombined)."""

    path: str
    options: dict[str, str]
    files: tuple[str, ...]
    missing: tuple[str, ...] = ()  # includes that name no file (skipped, as Fail2Ban does)


def filter_files(path: Path) -> list[str]:
    """NAME.conf, NAME.d/*.conf, NAME.local, NAME.d/*.local (the existing ones)."""
    base = str(path.with_suffix("")) if path.suffix in (".conf", ".local") else str(path)
    d = Path(base + ".d")
    files = [base + ".conf"] + sorted(str(p) for p in d.glob("*.conf")) + [base + ".local"]
    files += sorted(str(p) for p in d.glob("*.local"))
    return [f for f in files if os.path.exists(f)]


def read_filter_options(path: Path, init: dict[str, str] | None = None) -> FilterOptions:
    """The combined options of the filter at ``path`` (``.../filter.d/NAME.conf``) with the jail's
    options ``init`` (``filter = NAME[...]``), as Fail2Ban's FilterReader computes them."""
    files = filter_files(path)
    if not files:
        raise ConfigError(f"filter: {path} does not exist")
    cfg = MergedConfig()
    cfg.read(files)
    if not cfg.has_section("Definition"):
        raise ConfigError(f"filter: {files[0]} has no [Definition] section (an include-only file?)")
    p_opts = dict(init or {})
    opts: dict[str, str] = {}
    try:
        for name in FILTER_OPTIONS:
            if name in p_opts:
                continue
            try:
                opts[name] = cfg.get("Definition", name, vars=p_opts)
            except _NoOption:
                pass
        init_opts = dict(init or {})
        if cfg.has_section("Init"):
            for opt in cfg.sections["Init"]:
                v = None
                if not opt.startswith("known/"):
                    v = cfg.get("Init", opt)
                    init_opts["known/" + opt] = v
                if opt not in init_opts:
                    init_opts[opt] = v if v is not None else cfg.get("Init", opt)
        combined = {**opts, **init_opts}
        ignore = {c.group(1) for n in combined if (c := _CONDITIONAL.match(n))}
        cache: dict[str, str | None] = {}

        def comb_option(name: str) -> str | None:
            if name not in cache:
                try:
                    cache[name] = cfg.get_ex("Definition", name, vars=p_opts)
                except (_NoSection, _NoOption):
                    cache[name] = None
            return cache[name]

        result = substitute_tags(combined, ignore, comb_option)
    except ConfigError as exc:
        raise ConfigError(f"filter {path.stem}: {exc}") from None
    except _NoSection as exc:
        raise ConfigError(f"filter {path.stem}: no section [{exc}]") from None
    return FilterOptions(path=files[0], options=result, files=tuple(cfg.files), missing=tuple(cfg.missing))
