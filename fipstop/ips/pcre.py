"""Python ``re`` patterns as PCRE2 patterns with the same meaning.

Fail2Ban's regexes are Python ``re`` syntax, matched against ``str`` lines.
PCRE2 reads most of that syntax the same way, but not all of it: ``\\d{,3}``
is Python's "0 to 3 digits" and PCRE2 10.42's literal text ``{,3}``;
``[[:alpha:]]`` is a POSIX class to PCRE2 and the characters ``[:alph`` then a
``]`` to Python; ``\\Z`` is end of subject to Python and "end or before a final
newline" to PCRE2; ``\\s`` is Python's ``str.isspace()`` set (with
``\\x1c``-``\\x1f``, without U+180E) and not quite PCRE2's; group names may be
any identifier in Python, at most 32 ASCII word characters in PCRE2.  Rather
than patch the text construct by construct (and miss the next one), the
pattern is parsed by Python's own parser (``re._parser``, the one ``re.compile``
uses) and re-emitted node by node in explicit PCRE2 syntax, so every construct
is either written out with Python's meaning or refused by name
(:class:`Untranslatable`) -- a filter never loads silently different.

Two PCRE2 patterns come out of one Python pattern:

* ``utf``: the exact one, for any line; the matcher uses it for lines that
  contain a byte >= 0x80 or one of \\x1c-\\x1f (compiled with PCRE2_UTF and
  PCRE2_UCP, so ``\\w``, ``\\d``, ``\\b`` and case folding are Unicode's, as in
  Python: a user name ``müller`` matches ``\\w+`` in both; Python's \\s is
  written out as its set);
* ``ascii``: for every other line -- nearly all -- compiled without UTF, with
  PCRE2's own ``\\s \\S \\d \\w`` (the JIT checks those types faster than an
  equivalent class: named-query-rate ran 6 % slower with classes).  On such
  lines PCRE2's and Python's sets coincide; non-ASCII literals become
  ``(*F)`` and leave character classes (an ASCII line can never match them).

Capture groups are emitted unnamed and in Python's order (so group numbers,
backreferences ``\\g{n}`` and conditionals ``(?(n)..)`` stay the same); the
names travel beside the pattern (:attr:`Translated.names`).  Python's
``re.compile`` runs first: what Python (hence Fail2Ban) rejects is rejected
with Python's message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Python >= 3.11 (pyproject's requires-python); typeshed does not know the private modules
from re import _constants as _C  # type: ignore[attr-defined]
from re import _parser as _P  # type: ignore[attr-defined]

from fipstop.errors import FipsError
from fipstop.ips.prefilter import required_literals

#: PCRE2's largest repeat count ({n,m} with n, m <= 65535)
PCRE2_MAX_REPEAT = 65535

# Python's \s on str: str.isspace() minus nothing, i.e. these ranges (checked
# against ``re`` by tests/unit/test_ips_pcre.py).  PCRE2's UCP \s lacks
# \x1c-\x1f and adds U+180E, so \s is written out.
_PY_SPACE_UTF = r"\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
_ASCII_FLAG_SPACE = r"\t-\r\x{20}"  # (?a)\s: [ \t\n\r\f\v]
_ASCII_WORD = "A-Za-z0-9_"
_ASCII_DIGIT = "0-9"
_WORD_ASCII_LOOK = "[A-Za-z0-9_]"

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_FLAG_LETTERS = ((_C.SRE_FLAG_IGNORECASE, "i"), (_C.SRE_FLAG_MULTILINE, "m"), (_C.SRE_FLAG_DOTALL, "s"))


class Untranslatable(FipsError):
    """A Python regex construct with no PCRE2 equivalent (or a regex Python rejects).

    ``reason`` says what, without the pattern (the caller names the regex as its author wrote it,
    before tags were expanded)."""

    def __init__(self, reason: str, pattern: str) -> None:
        super().__init__(f"{reason}: {pattern[:120]!r}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Translated:
    """A Python pattern in PCRE2 syntax (see the module docstring)."""

    python: str
    ascii: str
    utf: str
    #: names[g] is the name of capture group g (None: unnamed); names[0] is None
    names: tuple[str | None, ...]
    #: ASCII literals one of which every match contains (:mod:`fipstop.ips.prefilter`); () for none
    required: tuple[bytes, ...] = ()

    @property
    def groups(self) -> int:
        return len(self.names) - 1

    def group_index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names) if n}


def _lit(c: int, utf: bool, in_class: bool) -> str | None:
    """One literal character; None when the ASCII pattern cannot contain it."""
    if c > 0x7F and not utf:
        return None
    ch = chr(c)
    if ch in _SAFE:
        return ch
    return "\\x{%x}" % c


class _Emitter:
    def __init__(self, utf: bool, pattern: str) -> None:
        self.utf = utf
        self.pattern = pattern

    def refuse(self, what: str) -> Untranslatable:
        return Untranslatable(f"regex construct {what} has no PCRE2 equivalent", self.pattern)

    # -- sequences ------------------------------------------------------------------
    def seq(self, items, st: tuple[bool, bool]) -> str:
        return "".join(self.node(op, av, st) for op, av in items)

    def body(self, items, st: tuple[bool, bool]) -> str:
        """The inside of a group: a lone alternation needs no (?:..) of its own (each one costs the
        JIT a few instructions a line)."""
        if len(items) == 1 and items[0][0] is _C.BRANCH:
            return "|".join(self.seq(alt, st) for alt in items[0][1][1])
        return self.seq(items, st)

    def atom(self, items, st: tuple[bool, bool]) -> str:
        """A quantifiable unit: a single literal, class or capture group as it is,
        anything else in (?:..).  Every non-word character of a literal is written
        as \\x{..}, so a '[' in the output always opens a class."""
        body = self.seq(items, st)
        if len(items) == 1:
            op, av = items[0]
            if op is _C.LITERAL and not body.startswith("("):
                return body
            if op in (_C.ANY, _C.NOT_LITERAL, _C.IN) and (
                    body in (".", r"\d", r"\w", r"\D", r"\W", r"\s", r"\S")
                    or (body[0] == "[" and body[-1] == "]" and body.count("[") == 1)):
                return body
            if op is _C.SUBPATTERN and av[0] is not None:
                return body
            if op is _C.BRANCH:
                return body  # already (?:a|b)
        return f"(?:{body})"

    def node(self, op, av, st: tuple[bool, bool]) -> str:
        utf = self.utf
        if op is _C.LITERAL:
            s = _lit(av, utf, False)
            return "(?:(*F))" if s is None else s
        if op is _C.NOT_LITERAL:
            s = _lit(av, utf, True)
            if s is None:  # any ASCII character
                return r"[\x{0}-\x{7f}]"
            return f"[^{s}]"
        if op is _C.ANY:
            return "."
        if op is _C.IN:
            return self.klass(av, st)
        if op is _C.BRANCH:
            return "(?:" + "|".join(self.seq(alt, st) for alt in av[1]) + ")"
        if op is _C.SUBPATTERN:
            gid, add, dele, sub = av
            flags = self.flags(add, dele)
            asc, icase = st
            if add & _C.SRE_FLAG_ASCII:
                asc = True
            elif add & _C.SRE_FLAG_UNICODE:
                asc = False
            if add & _C.SRE_FLAG_IGNORECASE:
                icase = True
            elif dele & _C.SRE_FLAG_IGNORECASE:
                icase = False
            body = self.body(sub, (asc, icase))
            if flags:
                body = f"(?{flags}:{body})"
            return f"({body})" if gid is not None else (body if flags else f"(?:{body})")
        if op in (_C.MAX_REPEAT, _C.MIN_REPEAT) or op is getattr(_C, "POSSESSIVE_REPEAT", None):
            lo, hi, item = av
            for n in (lo, hi):
                if n is not _C.MAXREPEAT and n > PCRE2_MAX_REPEAT:
                    raise Untranslatable(f"a repeat count of {n} has no PCRE2 equivalent (PCRE2 allows at most "
                                         f"{PCRE2_MAX_REPEAT})", self.pattern)
            if hi is _C.MAXREPEAT:
                q = {0: "*", 1: "+"}.get(lo, f"{{{lo},}}")
            elif lo == hi:
                q = f"{{{lo}}}"
            elif lo == 0 and hi == 1:
                q = "?"
            else:
                q = f"{{{lo},{hi}}}"
            if op is _C.MIN_REPEAT:
                q += "?"
            elif op is not _C.MAX_REPEAT:
                q += "+"
            return self.atom(item, st) + q
        if op is getattr(_C, "ATOMIC_GROUP", None):
            return f"(?>{self.body(av, st)})"
        if op is _C.GROUPREF:
            return "\\g{%d}" % av
        if op is _C.GROUPREF_EXISTS:
            gid, yes, no = av
            if no is None:
                return f"(?({gid}){self.seq(yes, st)})"
            return f"(?({gid}){self.seq(yes, st)}|{self.seq(no, st)})"
        if op in (_C.ASSERT, _C.ASSERT_NOT):
            direction, sub = av
            kind = {(_C.ASSERT, 1): "?=", (_C.ASSERT, -1): "?<=", (_C.ASSERT_NOT, 1): "?!",
                    (_C.ASSERT_NOT, -1): "?<!"}[(op, direction)]
            return f"({kind}{self.body(sub, st)})"
        if op is _C.AT:
            return self.at(av, st)
        raise self.refuse(str(op))

    def flags(self, add: int, dele: int) -> str:
        on = "".join(ch for bit, ch in _FLAG_LETTERS if add & bit)
        off = "".join(ch for bit, ch in _FLAG_LETTERS if dele & bit)
        return on + ("-" + off if off else "")

    def at(self, code, st: tuple[bool, bool]) -> str:
        if code in (_C.AT_BEGINNING, _C.AT_BEGINNING_LINE):
            return "^"
        if code is _C.AT_BEGINNING_STRING:
            return r"\A"
        if code in (_C.AT_END, _C.AT_END_LINE):
            return "$"
        if code is _C.AT_END_STRING:
            return r"\z"  # Python's \Z: the very end (PCRE2's \Z allows a final newline)
        if code is _C.AT_BOUNDARY:
            if st[0] and self.utf:
                w = _WORD_ASCII_LOOK
                return f"(?:(?<={w})(?!{w})|(?<!{w})(?={w}))"
            return r"\b"
        if code is _C.AT_NON_BOUNDARY:
            if st[0] and self.utf:
                w = _WORD_ASCII_LOOK
                return f"(?:(?<={w})(?={w})|(?<!{w})(?!{w}))"
            return r"\B"
        raise self.refuse(str(code))

    # -- character classes -----------------------------------------------------------
    def category(self, cat, st: tuple[bool, bool]) -> tuple[str, bool]:
        """(class text, complemented): complemented means "any character not in [text]"."""
        neg = st[0]
        if not self.utf:  # lines without non-ASCII bytes and without \x1c-\x1f: PCRE2's own sets are Python's
            return {_C.CATEGORY_DIGIT: r"\d", _C.CATEGORY_NOT_DIGIT: r"\D", _C.CATEGORY_WORD: r"\w",
                    _C.CATEGORY_NOT_WORD: r"\W", _C.CATEGORY_SPACE: r"\s", _C.CATEGORY_NOT_SPACE: r"\S"}[cat], False
        if cat is _C.CATEGORY_DIGIT:
            return (_ASCII_DIGIT if neg else r"\d"), False
        if cat is _C.CATEGORY_NOT_DIGIT:
            return (_ASCII_DIGIT, True) if neg else (r"\D", False)
        if cat is _C.CATEGORY_WORD:
            return (_ASCII_WORD if neg else r"\w"), False
        if cat is _C.CATEGORY_NOT_WORD:
            return (_ASCII_WORD, True) if neg else (r"\W", False)
        space = _ASCII_FLAG_SPACE if neg else _PY_SPACE_UTF
        if cat is _C.CATEGORY_SPACE:
            return space, False
        if cat is _C.CATEGORY_NOT_SPACE:
            return space, True
        raise self.refuse(str(cat))

    def klass(self, items, st: tuple[bool, bool]) -> str:
        """A character class as ONE PCRE2 class.

        In the UTF build Python's \\s (and, under (?a), \\w and \\d) is an explicit set, and the
        complement of such a set (\\S, ...) cannot sit inside a class beside other members.  An
        alternation (?:[..]|[^..]) says the same but costs PCRE2 its fast paths (named-refused's
        prefregex ran 3x slower), so the set is computed instead: a class P + not C1 + not C2 ...
        is not ((C1 & C2 & ...) - P), where the Ci are small explicit sets."""
        negate = False
        pos: list[str] = []
        comp: list[list[int]] = []
        for op, av in items:
            if op is _C.NEGATE:
                negate = True
            elif op is _C.LITERAL:
                s = _lit(av, self.utf, True)
                if s is not None:
                    pos.append(s)
            elif op is _C.RANGE:
                lo, hi = av
                if not self.utf:
                    if lo > 0x7F:
                        continue
                    hi = min(hi, 0x7F)
                pos.append(("\\x{%x}-\\x{%x}" % (lo, hi)) if lo != hi else ("\\x{%x}" % lo))
            elif op is _C.CATEGORY:
                text, complemented = self.category(av, st)
                if complemented:
                    comp.append(_COMPLEMENTED[(av, st[0], self.utf)])
                else:
                    pos.append(text)
            else:
                raise self.refuse(f"{op} in a character class")
        anychar = r"[\x{0}-\x{10ffff}]" if self.utf else r"[\x{0}-\x{7f}]"
        p = "".join(pos)
        if not comp and not negate and len(pos) == 1 and pos[0] in (r"\d", r"\w", r"\D", r"\W", r"\s", r"\S"):
            return pos[0]  # a bare \d: PCRE2's fast type check (UCP's \d and \w are Python's sets)
        if not comp:
            if negate:
                return f"[^{p}]" if p else anychar
            return f"[{p}]" if p else "(?!)"
        common = set(comp[0]).intersection(*comp[1:])
        member = re.compile(_python_class([it for it in items if it[0] is not _C.NEGATE]),
                            (re.ASCII if st[0] else 0) | (re.IGNORECASE if st[1] else 0))
        x = sorted(ch for ch in common if not member.fullmatch(chr(ch)))
        xs = _ranges_text(x)
        if negate:  # not (P or not C...) == X
            return f"[{xs}]" if xs else "(?!)"
        return f"[^{xs}]" if xs else anychar


def _ranges_text(chars: list[int]) -> str:
    """Sorted code points as class text, runs as ranges: [9, 10, 11, 32] -> \\x{9}-\\x{b}\\x{20}."""
    out, i = [], 0
    while i < len(chars):
        j = i
        while j + 1 < len(chars) and chars[j + 1] == chars[j] + 1:
            j += 1
        out.append("\\x{%x}" % chars[i] + ("" if j == i else "-\\x{%x}" % chars[j]))
        i = j + 1
    return "".join(out)


def _python_class(items) -> str:
    """A Python class of the positive members of a parsed class (the complemented categories
    are the C sets of _Emitter.klass, not members)."""
    cat = {_C.CATEGORY_DIGIT: r"\d", _C.CATEGORY_WORD: r"\w", _C.CATEGORY_SPACE: r"\s",
           _C.CATEGORY_NOT_DIGIT: r"\D", _C.CATEGORY_NOT_WORD: r"\W"}

    def ch(c: int) -> str:
        return "\\x%02x" % c if c < 0x100 else "\\u%04x" % c if c < 0x10000 else "\\U%08x" % c

    out = []
    for op, av in items:
        if op is _C.LITERAL:
            out.append(ch(av))
        elif op is _C.RANGE:
            out.append(ch(av[0]) + "-" + ch(av[1]))
        elif op is _C.CATEGORY and av in cat:
            out.append(cat[av])
    return "[" + "".join(out) + "]" if out else "(?!)"


def _ranges(*spans: tuple[int, int]) -> list[int]:
    return [c for lo, hi in spans for c in range(lo, hi + 1)]


_PY_SPACE_SET = _ranges((0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                        (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000))
_ASCII_SPACE_SET = _ranges((0x09, 0x0D), (0x20, 0x20))
_WORD_SET = _ranges((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
#: (category, (?a), utf) -> the set whose complement the category is (the UTF build only: the ASCII
#: build uses PCRE2's \S \W \D, which are Python's on the lines it is used for)
_COMPLEMENTED = {
    (_C.CATEGORY_NOT_SPACE, False, True): _PY_SPACE_SET, (_C.CATEGORY_NOT_SPACE, True, True): _ASCII_SPACE_SET,
    (_C.CATEGORY_NOT_WORD, True, True): _WORD_SET, (_C.CATEGORY_NOT_DIGIT, True, True): _ranges((0x30, 0x39)),
}


def translate(pattern: str, flags: int = 0) -> Translated:
    """The PCRE2 forms of a Python pattern (``flags``: ``re.MULTILINE`` etc.).

    Raises :class:`Untranslatable` (a FipsError: one line) for a pattern
    Python rejects or a construct PCRE2 cannot express."""
    try:
        re.compile(pattern, flags)
        tree = _P.parse(pattern, flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise Untranslatable(f"Python's re rejects it: {exc.msg}{where}", pattern) from None
    except (RecursionError, OverflowError, ValueError) as exc:
        raise Untranslatable(f"Python's re rejects it: {type(exc).__name__}", pattern) from None
    state = tree.state
    gflags = state.flags
    names: list[str | None] = [None] * state.groups
    for name, gid in state.groupdict.items():
        names[gid] = name
    lead = "(*LF)"  # '.' and '$' know only \n as a newline, as in Python
    fl = "".join(ch for bit, ch in _FLAG_LETTERS if gflags & bit)
    if fl:
        lead += f"(?{fl})"
    st = (bool(gflags & _C.SRE_FLAG_ASCII), bool(gflags & _C.SRE_FLAG_IGNORECASE))
    try:
        out = {utf: lead + _Emitter(utf, pattern).seq(tree, st) for utf in (False, True)}
    except RecursionError:
        raise Untranslatable("regex nested too deeply", pattern) from None
    return Translated(python=pattern, ascii=out[False], utf=out[True], names=tuple(names),
                      required=required_literals(tree, gflags))
