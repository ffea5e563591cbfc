"""Finding the date in a log line as Fail2Ban does, so that the rest of the
line is what a filter's regexes were written for.

Fail2Ban removes the date from every line before matching ("Feb 25 14:34:10
belka sshd[31603]: Failed password ..." is matched as " belka sshd[31603]:
Failed password ...").  Filters depend on that: their ``__prefix_line``
expects the host name first.  A line that reached fipstop through a file, a
syslog daemon or a forwarder carries a date; a record of libfips_syslog.so
does not; both must work.  This module builds Fail2Ban's date templates --
its default list (each also anchored at the line start, with a higher
weight), a filter's ``datepattern`` (strptime ``%`` fields, ``%%`` for a
percent sign, ``{^LN-BEG}``, ``{DEFAULT}``, ``{DATE}`` inside a larger pattern,
``{NONE}``, ``{UNB}``, ``EPOCH``/``LEPOCH``/``{EPOCH}``, ``TAI64N``) -- as Python
regexes exactly as Fail2Ban's datetemplate.py writes them; the C matcher
(ips_match.c) searches them with Fail2Ban's template-selection rules and cuts
the date out.  :func:`parse_time` turns a found date into a time stamp the
way Fail2Ban's strptime does (for ``--check``: a live IPS counts findtime on
the records' ring time stamps, see fipstop/ips/check.py).

Not reproduced: the re-ordering of templates by hit count (it changes which
of two templates that match the same line is tried first, an optimisation
in Fail2Ban), and ``logtimezone`` (lines without a zone are local time).
"""

from __future__ import annotations

import calendar
import datetime as _dt
import re
import time
from dataclasses import dataclass, field

from fipstop.errors import FipsError

LINE_BEGIN, LINE_END, WORD_BEGIN, WORD_END = 8, 4, 2, 1

_RE_GROUPED = re.compile(r"(?<!(?:\(\?))(?<!\\)\((?!\?)")
_RE_GROUP = (re.compile(r"^((?:\(\?\w+\))?\^?(?:\(\?\w+\))?)(.*?)(\$?)$"), r"\1(\2)\3")
_RE_GLOBALFLAGS = re.compile(r"((?:^|(?!<\\))\(\?[a-z]+\))")
_RE_EXLINE_NO_BOUNDS = re.compile(r"^\{UNB\}")
_RE_EXLINE_BOUND_BEG = re.compile(r"^\{\^LN-BEG\}")
_RE_EXSANC_BOUND_BEG = re.compile(r"^\((?:\?:)?\^\|\\b\|\\W\)")
_RE_EXEANC_BOUND_BEG = re.compile(r"\(\?=\\b\|\\W\|\$\)$")
_RE_NO_WRD_BOUND_BEG = re.compile(r"^\(*(?:\(\?\w+\))?(?:\^|\(*\*\*|\((?:\?:)?\^)")
_RE_NO_WRD_BOUND_END = re.compile(r"(?<!\\)(?:\$\)?|\\b|\\s|\*\*\)*)$")
_RE_DEL_WRD_BOUNDS = (re.compile(r"^\(*(?:\(\?\w+\))?\(*\*\*|(?<!\\)\*\*\)*$"), lambda m: m.group().replace("**", ""))
_RE_LINE_BOUND_BEG = re.compile(r"^(?:\(\?\w+\))?(?:\^|\((?:\?:)?\^(?!\|))")
_RE_LINE_BOUND_END = re.compile(r"(?<![\\\|])(?:\$\)?)$")
_RE_ALPHA_PATTERN = re.compile(r"(?<!\%)\%[aAbBpc]")
_RE_EPOCH_PATTERN = re.compile(r"(?<!\\)\{L?EPOCH\}", re.IGNORECASE)
_RE_DATE_PREMATCH = re.compile(r"(?<!\\)\{DATE\}", re.IGNORECASE)

_TZ_ABBR_RE = r"[A-Z](?:[A-Z]{2,4})?"
_FIXED_OFFSET_TZ = re.compile(r"(%s)?([+-][01]\d(?::?\d{2})?)?$" % (_TZ_ABBR_RE,))


def _year_cent_re(now_year: int) -> str:
    """Fail2Ban's _getYearCentRE: the centuries-and-decades of the years from 2000 to now + 3."""
    alt = 2001  # Fail2Ban: min(alternateNowTime or 978393600, 978393600)
    exprset = {str(now_year + i)[0:3] for i in (-1, 3)}
    exprset |= {str(alt + i)[0:3] for i in range(-1, now_year - alt + 1, 3)}

    def grp(es: list[str]) -> str:
        c = None
        if len(es) > 1:
            for i in es:
                if c is None or i[0:-1] == c:
                    c = i[0:-1]
                else:
                    c = None
                    break
            if not c:
                for i in es:
                    if c is None or i[0] == c:
                        c = i[0]
                    else:
                        c = None
                        break
            if c:
                return "%s%s" % (c, grp([i[len(c):] for i in es]))
        return (("(?:%s)" % "|".join(es) if len(es[0]) > 1 else "[%s]" % "".join(es)) if len(es) > 1
                else "".join(es))

    return grp(sorted(exprset))


# Python's _strptime.TimeRE in the C locale, then Fail2Ban's strptime.py overrides, in
# Fail2Ban's key order (the order decides the %-directive regex below).
TIME_RE: dict[str, str] = {
    "d": r"(?P<d>[1-2]\d|[0 ]?[1-9]|3[0-1])", "f": r"(?P<f>[0-9]{1,6})", "H": r"(?P<H>[0-1]?\d|2[0-3])",
    "I": r"(?P<I>1[0-2]|0[1-9]|[1-9])", "G": r"(?P<G>\d\d\d\d)",
    "j": r"(?P<j>36[0-6]|3[0-5]\d|[1-2]\d\d|0[1-9]\d|00[1-9]|[1-9]\d|0[1-9]|[1-9])",
    "m": r"(?P<m>0?[1-9]|1[0-2])", "M": r"(?P<M>[0-5]?\d)", "S": r"(?P<S>[0-5]?\d|6[0-1])",
    "U": r"(?P<U>5[0-3]|[0-4]\d|\d)", "w": r"(?P<w>[0-6])", "u": r"(?P<u>[1-7])",
    "V": r"(?P<V>5[0-3]|0[1-9]|[1-4]\d|\d)", "y": r"(?P<y>\d\d)", "Y": r"(?P<Y>\d{4})",
    "z": r"(?P<z>Z|UTC|GMT|[+-][01]\d(?::?\d{2})?)",
    "A": r"(?P<A>wednesday|thursday|saturday|tuesday|monday|friday|sunday)",
    "a": r"(?P<a>mon|tue|wed|thu|fri|sat|sun)",
    "B": r"(?P<B>september|february|november|december|january|october|august|march|april|june|july|may)",
    "b": r"(?P<b>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)", "p": r"(?P<p>am|pm)",
    "Z": r"(?P<Z>Z|[A-Z]{3,5})", "%": "%", "W": r"(?P<W>5[0-3]|[0-4]\d|\d)",
    "c": r"(?P<a>mon|tue|wed|thu|fri|sat|sun)\s+(?P<b>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)\s+"
         r"(?P<d>3[0-1]|[1-2]\d|0[1-9]|[1-9]| [1-9])\s+(?P<H>2[0-3]|[0-1]\d|\d):(?P<M>[0-5]\d|\d):"
         r"(?P<S>6[0-1]|[0-5]\d|\d)\s+(?P<Y>\d\d\d\d)",
    "x": r"(?P<m>1[0-2]|0[1-9]|[1-9])/(?P<d>3[0-1]|[1-2]\d|0[1-9]|[1-9]| [1-9])/(?P<y>\d\d)",
    "X": r"(?P<H>2[0-3]|[0-1]\d|\d):(?P<M>[0-5]\d|\d):(?P<S>6[0-1]|[0-5]\d|\d)",
    "k": r" ?(?P<H>[0-2]?\d)", "l": r" ?(?P<I>1?\d)",
    "ExZ": r"(?P<Z>%s)" % _TZ_ABBR_RE, "Exz": r"(?P<z>(?:%s)?[+-][01]\d(?::?\d{2})?|%s)" % (_TZ_ABBR_RE, _TZ_ABBR_RE),
    "Exd": r"(?P<d>[1-2]\d|0[1-9]|3[0-1])", "Exm": r"(?P<m>0[1-9]|1[0-2])", "ExH": r"(?P<H>[0-1]\d|2[0-3])",
    "Exk": r" ?(?P<H>[0-1]?\d|2[0-3])", "Exl": r" ?(?P<I>1[0-2]|\d)", "ExM": r"(?P<M>[0-5]\d)",
    "ExS": r"(?P<S>[0-5]\d|6[0-1])", "ExY": r"(?P<Y>%s\d)" % _year_cent_re(_dt.datetime.now().year),
    "Exy": r"(?P<y>\d{2})",
}
_NAMES = {"a": "DAY", "A": "DAYNAME", "b": "MON", "B": "MONTH", "d": "Day", "H": "24hour", "I": "12hour",
          "j": "Yearday", "m": "Month", "M": "Minute", "p": "AMPM", "S": "Second", "U": "Yearweek", "w": "Weekday",
          "W": "Yearweek", "y": "Year2", "Y": "Year", "%": "%", "z": "Zone offset", "f": "Microseconds",
          "Z": "Zone name"}
for _k in TIME_RE:
    if _k not in _NAMES:
        _NAMES[_k] = ("Ex" + _NAMES[_k[2:]]) if _k.startswith("Ex") and _k[2:] in _NAMES else "%" + _k
_PATTERN_RE = re.compile(r"%%(%%|%s|[%s])" % ("|".join(k for k in TIME_RE if len(k) > 1),
                                              "".join(k for k in TIME_RE if len(k) == 1)))


@dataclass(eq=False)
class Template:
    """One date template: Fail2Ban's DateTemplate with its regex and flags."""

    name: str
    regex: str
    flags: int
    kind: str = "pattern"  # pattern | epoch | lepoch | tai64n
    group: int = 1  # epoch: the group that holds the number
    weight: float = 1.0
    pattern: str | None = None
    _compiled: re.Pattern | None = field(default=None, repr=False)

    @property
    def anchored(self) -> bool:
        return bool(self.flags & (LINE_BEGIN | LINE_END))

    def compiled(self) -> re.Pattern:
        if self._compiled is None:
            self._compiled = re.compile(self.regex)
        return self._compiled


def _set_regex(name: str, regex: str, word_begin, word_end: bool) -> tuple[str, str, int]:
    """DateTemplate.setRegex: word/line boundaries, the date group, flags -> (name, regex, flags)."""
    regex = regex.strip()
    gf = _RE_GLOBALFLAGS.search(regex)
    if gf:
        regex = _RE_GLOBALFLAGS.sub("", regex, count=1)
    bound_begin = word_begin and not _RE_NO_WRD_BOUND_BEG.search(regex)
    bound_end = word_end and not _RE_NO_WRD_BOUND_END.search(regex)
    if not _RE_GROUPED.search(regex):
        regex = _RE_GROUP[0].sub(_RE_GROUP[1], regex)
    flags = 0
    if bound_begin:
        flags |= WORD_BEGIN if word_begin != "start" else LINE_BEGIN
        if word_begin != "start":
            regex = r"(?=^|\b|\W)" + regex
        else:
            regex = r"^(?:\W{0,2})?" + regex
            if not name.startswith("{^LN-BEG}"):
                name = "{^LN-BEG}" + name
    if bound_end:
        flags |= WORD_END
        regex += r"(?=\b|\W|$)"
    if not (flags & LINE_BEGIN) and _RE_LINE_BOUND_BEG.search(regex):
        flags |= LINE_BEGIN
    if not (flags & LINE_END) and _RE_LINE_BOUND_END.search(regex):
        flags |= LINE_END
    regex = _RE_DEL_WRD_BOUNDS[0].sub(_RE_DEL_WRD_BOUNDS[1], regex)
    if gf:
        regex = gf.group(1) + regex
    return name, regex, flags


def pattern_template(pattern: str, word_begin=True, word_end: bool = True) -> Template:
    """DatePatternRegex: strptime-style ``%`` fields in a regex."""
    src = pattern
    if _RE_EXLINE_NO_BOUNDS.search(pattern):
        pattern = _RE_EXLINE_NO_BOUNDS.sub("", pattern)
        word_begin = word_end = False
    if word_begin and _RE_EXLINE_BOUND_BEG.search(pattern):
        pattern = _RE_EXLINE_BOUND_BEG.sub("", pattern)
        word_begin = "start"
    fmt = _PATTERN_RE.sub(r"%(\1)s", pattern)
    try:
        name = fmt % _NAMES
        regex = fmt % TIME_RE
    except (TypeError, ValueError, KeyError) as exc:
        raise FipsError(f"datepattern {src[:80]!r}: not a valid date pattern (a '%' that is not a date "
                        f"field? write %% for a percent sign): {exc}") from None
    if _RE_ALPHA_PATTERN.search(pattern):
        regex = r"(?iu)" + regex
    name, regex, flags = _set_regex(name, regex, word_begin, word_end)
    return Template(name=name, regex=regex, flags=flags, pattern=src)


def epoch_template(line_begin_only: bool = False, pattern: str | None = None, long_form: bool = False) -> Template:
    """DateEpoch: Unix time stamps (10-11 digits, optional fraction; LEPOCH also ms and us)."""
    name = "Epoch" if not pattern else pattern
    epoch_re = r"\d{10,11}\b(?:\.\d{3,6})?"
    if long_form:
        name = "LongEpoch" if not pattern else pattern
        epoch_re = r"\d{10,11}(?:\d{3}(?:\.\d{1,6}|\d{3})?)?"
    group = 1
    if pattern:
        regex = "(" + _RE_EPOCH_PATTERN.sub(lambda v: "(%s)" % epoch_re, pattern) + ")"
        group = 2
        name, regex, flags = _set_regex(name, regex, True, True)
    elif not line_begin_only:
        regex = (r"((?:^|(?P<square>(?<=^\[))|(?P<selinux>(?<=\baudit\()))%s)(?:(?(selinux)(?=:\d+\)))|"
                 r"(?(square)(?=\])))" % epoch_re)
        name, regex, flags = _set_regex(name, regex, False, True)
    else:
        regex = r"((?P<square>(?<=^\[))?%s)(?(square)(?=\]))" % epoch_re
        name, regex, flags = _set_regex(name, regex, "start", True)
    return Template(name=name, regex=regex, flags=flags, kind="lepoch" if long_form else "epoch", group=group,
                    pattern=pattern)


def tai64n_template(word_begin=False) -> Template:
    name, regex, flags = _set_regex("TAI64N", "@[0-9a-f]{24}", word_begin, True)
    return Template(name=name, regex=regex, flags=flags, kind="tai64n")


_CACHE: dict[str, Template] = {}


def _get_pattern_template(pattern: str, key: str | None = None) -> Template:
    """Fail2Ban's _getPatternTemplate (cached by key: the pattern, upper-cased without '%')."""
    if key is None:
        key = pattern if "%" in pattern else pattern.upper()
    t = _CACHE.get(key)
    if t is None:
        if "EPOCH" in key:
            if _RE_EPOCH_PATTERN.search(pattern):
                t = epoch_template(pattern=pattern, long_form="LEPOCH" in key)
            elif key in ("EPOCH", "{^LN-BEG}EPOCH", "^EPOCH"):
                t = epoch_template(line_begin_only=(key != "EPOCH"))
            elif key in ("LEPOCH", "{^LN-BEG}LEPOCH", "^LEPOCH"):
                t = epoch_template(line_begin_only=(key != "LEPOCH"), long_form=True)
        if t is None:
            if key in ("TAI64N", "{^LN-BEG}TAI64N", "^TAI64N"):
                t = tai64n_template(word_begin=("start" if key != "TAI64N" else False))
            else:
                t = pattern_template(pattern)
        _CACHE[key] = t
    return t


def _unbound(pattern: str) -> str:
    return _RE_EXEANC_BOUND_BEG.sub("", _RE_EXSANC_BOUND_BEG.sub("", _RE_EXLINE_BOUND_BEG.sub(
        "", _RE_EXLINE_NO_BOUNDS.sub("", pattern))))


def _anchored(t: Template, wrap=lambda s: "{^LN-BEG}" + s) -> Template:
    """Fail2Ban's _getAnchoredTemplate."""
    name = wrap(t.name)
    t2 = _CACHE.get(name)
    if t2 is None:
        regex = wrap(t.pattern if t.kind == "pattern" else t.regex)
        if t.kind == "pattern":
            t2 = _CACHE.get(regex)
        if t2 is None:
            t2 = _get_pattern_template(name) if t.kind != "pattern" else _get_pattern_template(regex)
    return t2


DEFAULT_TEMPLATES = (
    r"%ExY(?P<_sep>[-/.])%m(?P=_sep)%d(?:T|  ?)%H:%M:%S(?:[.,]%f)?(?:\s*%z)?",
    r"(?:%a )?%b %d %k:%M:%S(?:\.%f)?(?: %ExY)?",
    r"(?:%a )?%b %d %ExY %k:%M:%S(?:\.%f)?",
    r"%d(?P<_sep>[-/])%m(?P=_sep)(?:%ExY|%Exy) %k:%M:%S",
    r"%d(?P<_sep>[-/])%b(?P=_sep)%ExY[ :]?%H:%M:%S(?:\.%f)?(?: %z)?",
    r"%m/%d/%ExY:%H:%M:%S",
    r"%m-%d-%ExY %k:%M:%S(?:\.%f)?",
    r"EPOCH",
    r"{^LN-BEG}%H:%M:%S",
    r"^<%m/%d/%Exy@%H:%M:%S>",
    r"%Exy%Exm%Exd  ?%H:%M:%S",
    r"%b %d, %ExY %I:%M:%S %p",
    r"^%b-%d-%Exy %k:%M:%S",
    r"%ExY%Exm%Exd(?:T|  ?)%ExH%ExM%ExS(?:[.,]%f)?(?:\s*%z)?",
    r"(?:%Z )?(?:%a )?%b %d %k:%M:%S(?:\.%f)?(?: %ExY)?",
    r"(?:%z )?(?:%a )?%b %d %k:%M:%S(?:\.%f)?(?: %ExY)?",
    r"TAI64N",
)


def _defaults() -> list[Template]:
    return [_get_pattern_template(p) for p in DEFAULT_TEMPLATES]


def _default_list() -> list[Template]:
    """DateDetectorCache.templates: the anchored copies (weight 100) first, then the defaults."""
    anchored, plain = [], []
    for t in _defaults():
        if not t.name.startswith("{^LN-BEG}") and not t.name.startswith("^"):
            t2 = _anchored(t)
            if t2.name != t.name:
                t2.weight = 100.0
                anchored.append(t2)
        plain.append(t)
    return anchored + plain


class DateDetector:
    """The templates a filter's ``datepattern`` selects, in Fail2Ban's order."""

    def __init__(self) -> None:
        self.templates: list[Template] = []
        self._names: set[str] = set()

    def _append(self, t: Template, ignore_dup: bool = False) -> None:
        if t.name in self._names:
            if ignore_dup:
                return
            raise FipsError(f"datepattern: there is already a template named {t.name!r}")
        self._names.add(t.name)
        self.templates.append(t)

    def add_defaults(self, only=None, prematch: str | None = None, all_defaults: bool = True) -> None:
        ignore_dup = len(self.templates) > 0
        for t in (_default_list() if all_defaults else _defaults()):
            if only is not None and not only(t):
                continue
            if prematch is not None:
                t = _anchored(t, wrap=lambda s: _RE_DATE_PREMATCH.sub(lambda m: _unbound(s), prematch))
            self._append(t, ignore_dup=ignore_dup)

    def append(self, pattern: str) -> None:
        key = pattern if "%" in pattern else pattern.upper()
        t = _CACHE.get(key)
        if t is None:
            if key in ("{^LN-BEG}", "{DEFAULT}"):
                self.add_defaults(only=(lambda t: t.flags & LINE_BEGIN) if key == "{^LN-BEG}" else None)
                return
            if "{DATE}" in key:
                self.add_defaults(prematch=pattern, all_defaults=False)
                return
            if key == "{NONE}":
                t = _get_pattern_template("{UNB}^", key)
            else:
                t = _get_pattern_template(pattern, key)
        _CACHE[key] = t
        self._append(t)


def detector_for(datepattern: str | None) -> DateDetector:
    """A filter's date templates: ``datepattern`` lines, or Fail2Ban's defaults when it has none."""
    dd = DateDetector()
    if datepattern is None:
        dd.add_defaults()
        return dd
    for line in re.split("\n+", datepattern):
        if line.strip():
            dd.append(line.strip())
    if not dd.templates:  # an empty datepattern: Fail2Ban adds the defaults on first use
        dd.add_defaults()
    for t in dd.templates:
        try:
            t.compiled()
        except re.error as exc:
            raise FipsError(f"datepattern template {t.name[:60]!r}: not a valid regex: {exc}") from None
    return dd


# --- time stamps -------------------------------------------------------------------------------

_A_MONTH = ["", "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_F_MONTH = ["", "january", "february", "march", "april", "may", "june", "july", "august", "september",
            "october", "november", "december"]
_A_WEEKDAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_F_WEEKDAY = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


def _tz_offsets() -> dict[str | None, int]:
    table = """-12 Y|-11 X NUT SST|-10 W CKT HAST HST TAHT TKT|-9 V AKST GAMT GIT HADT HNY|-8 U AKDT CIST HAY HNP PST PT
    |-7 T HAP HNR MST PDT|-6 S CST EAST GALT HAR HNC MDT|-5 R CDT COT EASST ECT EST ET HAC HNE PET
    |-4 Q AST BOT CLT COST EDT FKT GYT HAE HNA PYT|-3 P ADT ART BRT CLST FKST GFT HAA PMST PYST SRT UYT WGT
    |-2 O BRST FNT PMDT UYST WGST|-1 N AZOT CVT EGT|0 Z EGST GMT UTC WET WT|1 A CET DFT WAT WEDT WEST
    |2 B CAT CEDT CEST EET SAST WAST|3 C EAT EEDT EEST IDT MSK|4 D AMT AZT GET GST KUYT MSD MUT RET SAMT SCT
    |5 E AMST AQTT AZST HMT MAWT MVT PKT TFT TJT TMT UZT YEKT|6 F ALMT BIOT BTT IOT KGT NOVT OMST YEKST
    |7 G CXT DAVT HOVT ICT KRAT NOVST OMSST THA WIB|8 H ACT AWST BDT BNT CAST HKT IRKT KRAST MYT PHT SGT ULAT WITA WST
    |9 I AWDT IRKST JST KST PWT TLT WDT WIT YAKT|10 K AEST ChST PGT VLAT YAKST YAPT|11 L AEDT LHDT MAGT NCT PONT SBT VLAST VUT
    |12 M ANAST ANAT FJT GILT MAGST MHT NZST PETST PETT TVT WFT|13 FJST NZDT|11.5 NFT|10.5 ACDT LHST|9.5 ACST
    |6.5 CCT MMT|5.75 NPT|5.5 SLT|4.5 AFT IRDT|3.5 IRST|-2.5 HAT NDT|-3.5 HNT NST NT|-4.5 HLV VET|-9.5 MART MIT"""
    out: dict[str | None, int] = {"": 0, None: 0}
    for row in table.split("|"):
        parts = row.split()
        for tz in parts[1:]:
            out[tz] = int(float(parts[0]) * 60)
    return out


_TZ_ABBR_OFFS = _tz_offsets()


def _zone_offset(z: str) -> int:
    m = _FIXED_OFFSET_TZ.match(z)
    if m is None:
        raise ValueError(f"unknown time zone {z!r}")
    tz, tzo = m.groups()
    base = _TZ_ABBR_OFFS[tz]
    if not tzo:
        return base
    if len(tzo) <= 3:
        return base + int(tzo) * 60
    sign = -1 if tzo[0] == "-" else 1
    return base + sign * (int(tzo[1:3]) * 60 + int(tzo[4:6] if tzo[3] == ":" else tzo[3:5]))


def strptime_groups(found: dict[str, str | None], now: _dt.datetime) -> float:
    """Fail2Ban's reGroupDictStrptime: a time stamp from the groups a date template matched;
    the year (and day) a date lacks are the ones that put it at or before ``now``."""
    year = month = day = tzoffset = weekday = julian = week_of_year = None
    hour = minute = second = 0
    for key, val in found.items():
        if val is None:
            continue
        if key == "y":
            year = int(val)
            if year <= 2000:
                year += 2000
        elif key == "Y":
            year = int(val)
        elif key == "m":
            month = int(val)
        elif key == "B":
            month = _F_MONTH.index(val.lower())
        elif key == "b":
            month = _A_MONTH.index(val.lower())
        elif key == "d":
            day = int(val)
        elif key == "H":
            hour = int(val)
        elif key == "I":
            hour = int(val)
            ampm = (found.get("p") or "").lower()
            if ampm in ("", "am"):
                if hour == 12:
                    hour = 0
            elif ampm == "pm" and hour != 12:
                hour += 12
        elif key == "M":
            minute = int(val)
        elif key == "S":
            second = int(val)
        elif key == "A":
            weekday = _F_WEEKDAY.index(val.lower())
        elif key == "a":
            weekday = _A_WEEKDAY.index(val.lower())
        elif key == "w":
            weekday = int(val) - 1
            if weekday < 0:
                weekday = 6
        elif key == "j":
            julian = int(val)
        elif key in ("U", "W"):
            week_of_year = int(val)
            week_start = 6 if key == "U" else 0
        elif key in ("z", "Z"):
            tzoffset = 0 if val in ("Z", "UTC", "GMT") else _zone_offset(val)
    assume_year = year is None
    if year is None:
        year = now.year
    if (month is None or day is None) and julian is None and week_of_year is not None and weekday is not None:
        from _strptime import _calc_julian_from_U_or_W  # type: ignore[import-not-found]

        julian = _calc_julian_from_U_or_W(year, week_of_year, weekday, week_start == 0)
    if (month is None or day is None) and julian is not None:
        d = _dt.datetime.fromordinal((julian - 1) + _dt.datetime(year, 1, 1).toordinal())
        year, month, day = d.year, d.month, d.day
    assume_today = month is None and day is None
    if assume_today:
        month, day = now.month, now.day
    result = _dt.datetime(year, month or 1, day or 1, hour, minute, second)
    if tzoffset is not None:
        result -= _dt.timedelta(seconds=tzoffset * 60)
    if assume_today and result > now:
        result -= _dt.timedelta(days=1)
    if assume_year and result > now + _dt.timedelta(days=1):
        result = result.replace(year=year - 1)
    if tzoffset is not None:
        return float(calendar.timegm(result.utctimetuple()))
    return time.mktime(result.timetuple())


def parse_time(t: Template, line: str, g0: int, now: _dt.datetime | None = None) -> float | None:
    """The time stamp of the date template ``t`` found at character offset ``g0`` of ``line``
    (None when the text is not a valid date, e.g. "Feb 30")."""
    m = t.compiled().match(line, g0) if g0 else t.compiled().search(line)
    if m is None:
        return None
    now = now or _dt.datetime.now()
    try:
        if t.kind == "tai64n":
            return float(int(m.group(1)[2:17], 16))
        if t.kind in ("epoch", "lepoch"):
            v = m.group(t.group)
            if t.kind == "lepoch" and len(v) >= 13:
                return float(v) / (1_000_000 if len(v) >= 16 and "." not in v else 1000)
            return float(v)
        return strptime_groups(m.groupdict(), now)
    except (ValueError, OverflowError, IndexError):
        return None
