"""Python re -> PCRE2 translation (fipstop/ips/pcre.py): the same matches and
group spans as Python's re, through the real PCRE2 (fipstop._ipsfast.search)."""

from __future__ import annotations

import re

import pytest

from fipstop import _ipsfast
from fipstop.ips.pcre import Untranslatable, translate

pytestmark = [pytest.mark.skipif(not _ipsfast.available()[0], reason="libpcre2-8 is not installed"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]  # [[:alpha:]]: Python warns, as in Fail2Ban


def py_spans(pattern: str, flags: int, s: str):
    m = re.compile(pattern, flags).search(s)
    if not m:
        return None
    return [None if m.span(g) == (-1, -1) else m.span(g) for g in range(m.re.groups + 1)]


def pcre_spans(pattern: str, flags: int, s: str):
    t = translate(pattern, flags)
    b = s.encode()
    got = _ipsfast.search(t.ascii, t.utf, b)
    if got is None:
        return None
    # byte offsets -> character offsets
    return [None if sp is None else (len(b[:sp[0]].decode()), len(b[:sp[1]].decode())) for sp in got]


CASES = [
    # Python's {,n} is 0..n; PCRE2 10.42 reads it as text
    (r"^\d{,3}x", 0, ["12x", "1234x", "x", "{,3}x"]),
    (r"a{2,}b{,2}c", 0, ["aabbc", "abc", "aaac"]),
    # [[:alpha:]] is a set of characters to Python, a POSIX class to PCRE2
    (r"[[:alpha:]]+", 0, ["abc", "[:a]", ":"]),
    # \Z is the very end in Python ("end or before a final newline" in PCRE2)
    (r"end\Z", 0, ["the end", "the end\n"]),
    (r"end$", 0, ["the end", "the end\n", "the end\n\n"]),
    # Python's \s has \x1c-\x1f and not U+180E; \S is its complement
    (r"a\sb", 0, ["a\x1cb", "a\u180eb", "a\u00a0b", "a b"]),
    (r"a[\S.]+b", 0, ["axyb", "a.b", "a b", "a\x1fb"]),
    (r"a[^\S\t]b", 0, ["a b", "a\tb", "a\x1eb"]),
    # named groups, backreferences by name, conditionals
    (r"(?P<user>\w+) (?P=user)(?(user)!|\?)", 0, ["bob bob!", "bob alice!"]),
    (r"(?P<cond_inv>invalid user )?(?P<u>\S+)(?(cond_inv) from| at)", 0, ["invalid user x from", "y at", "y from"]),
    (r"(?P<_sep>[-/.])\d(?P=_sep)", 0, ["2-3-", "2-3/"]),
    # Unicode: \w, \d, \b and case folding as Python's on non-ASCII lines
    (r"for (\w+) from", 0, ["for müller from", "for ÿé from", "for ab from"]),
    (r"\bstraße\b", re.IGNORECASE, ["STRASSE", "Straße", "a straße b"]),
    (r"(?i)STRAßE", 0, ["straße"]),
    (r"x\d+y", 0, ["x١٢٣y", "x12y"]),
    (r"é+[é-ü]", 0, ["ééü", "eeu"]),
    (r"[^é]", 0, ["é", "e"]),
    # (?a): ASCII classes even on a Unicode line
    (r"(?a)\w+", 0, ["müller"]),
    (r"(?a)\bm", 0, ["ümx", "m"]),
    # lookarounds, atomic and possessive (Python 3.11)
    (r"(?<=\[)\d+(?=\])", 0, ["[42]", "42]"]),
    (r"(?<!\\)\(x", 0, [r"\(x", "(x"]),
    (r"(?>a+)b", 0, ["aaab"]),
    (r"a++b", 0, ["aab"]),
    # local flags and Fail2Ban's ((?i)x) rewrite result
    (r"(?i:ab)C", 0, ["ABC", "abc"]),
    (r"(?s:a.b)", 0, ["a\nb"]),
    (r"a.b", 0, ["a\nb"]),
    (r"^b", re.MULTILINE, ["a\nb"]),
    (r"a$\n^b", re.MULTILINE, ["a\nb"]),
    # multi-line: <SKIPLINES>'s expansion
    (r"^start\n(?P<skiplines0>(?:(?:.*\n)*?))end", re.MULTILINE, ["start\nx\ny\nend\n"]),
    # metacharacters as literals
    (r"\.\*\+\?\(\)\[\]\{\}\|\^\$\\/", 0, [".*+?()[]{}|^$\\/"]),
    (r"[\]\-^]+", 0, ["]-^", "a"]),
    (r"\x41\u00e9\N{LATIN SMALL LETTER A}", 0, ["Aéa"]),
    (r"(?x) a b  # comment", 0, ["ab", "a b"]),
    (r"\AThe|end\Z", 0, ["The end", "so end"]),
]


@pytest.mark.parametrize("pattern, flags, subjects", CASES)
def test_same_matches_as_python(pattern: str, flags: int, subjects: list[str]) -> None:
    for s in subjects:
        assert pcre_spans(pattern, flags, s) == py_spans(pattern, flags, s), (pattern, s)


def test_python_whitespace_set_is_complete() -> None:
    """The written-out \\s is Python's str.isspace() set (checked over every code point)."""
    t = translate(r"\s")
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        ch = chr(c)
        want = re.match(r"\s", ch) is not None
        got = _ipsfast.search(t.ascii, t.utf, ch.encode()) is not None
        assert got == want, hex(c)


def test_group_names_travel_beside_the_pattern() -> None:
    t = translate(r"(?P<ip4>\d+)(x)(?P<a_very_long_group_name_that_pcre2_would_refuse_xx>y)")
    assert t.names == (None, "ip4", None, "a_very_long_group_name_that_pcre2_would_refuse_xx")
    assert "(?P<" not in t.ascii and "(?P<" not in t.utf
    assert _ipsfast.search(t.ascii, t.utf, b"12xy") == [(0, 4), (0, 2), (2, 3), (3, 4)]


@pytest.mark.parametrize("pattern, msg", [
    (r"a{,70000}", "a repeat count of 70000 has no PCRE2 equivalent"),
    (r"(?P<x>a)(?P<x>b)", "Python's re rejects it: redefinition of group name"),
    (r"(unclosed", "Python's re rejects it: missing \\), unterminated subpattern"),
    (r"(?<=a+)b", "Python's re rejects it: look-behind requires fixed-width pattern"),
    (r"\q", "Python's re rejects it: bad escape \\\\q"),
])
def test_refused_with_one_line(pattern: str, msg: str) -> None:
    with pytest.raises(Untranslatable, match=msg) as ei:
        translate(pattern)
    assert "\n" not in str(ei.value)


def test_non_ascii_literals_never_match_ascii_lines() -> None:
    t = translate("caf[eé]|naïve")
    assert _ipsfast.search(t.ascii, t.utf, b"cafe") is not None
    assert _ipsfast.search(t.ascii, t.utf, "café".encode()) is not None
    assert _ipsfast.search(t.ascii, t.utf, b"naive") is None
    assert "(*F)" in t.ascii and "\\x{ef}" in t.utf
