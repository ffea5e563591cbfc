"""fipstop.ips.prefilter: the literals every match must contain, checked against Python's re (the
oracle: a line Python matches always holds one of them), and the C matcher with its prefilter
against the same jail without it."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from fipstop import _ipsfast
from fipstop.ips.jails import BUILTIN_JAILS, jail_args, parse_nets
from fipstop.ips.pcre import translate


def req(p: str, flags: int = 0) -> tuple[bytes, ...]:
    return translate(p, flags).required


def test_named_refused_needs_denied_or_notauth() -> None:
    cf = BUILTIN_JAILS["named-refused"].filter.compiled()
    assert cf.prefregex is not None and cf.prefregex.pcre.required == (b"(NOTAUTH)", b"denied")
    # a literal before the first '.+' is PCRE2's own business (it fails fast without it)
    assert all(not r.pcre.required for r in BUILTIN_JAILS["named-query-rate"].filter.compiled().failregex)


@pytest.mark.parametrize("pattern, flags, want", [
    (r"^x (.+) denied$", 0, (b" denied",)),
    (r"^.*(?:foo|barbaz) end", 0, (b" end",)),
    (r"^.*(?:foo|barbaz)", 0, (b"barbaz", b"foo")),
    (r".+ denied", re.IGNORECASE, ()),  # case folding: no prefilter
    (r"(?i).+ denied", 0, ()),
    (r".+(?i: denied)", 0, ()),  # a group with case folding requires nothing
    (r".+(?:denied)?", 0, ()),  # optional
    (r".+(?:denied|x)", 0, ()),  # too short an alternative
    (r".+(?:aaa|bbb|ccc|ddd|eee)", 0, ()),  # too many alternatives
    (r".+(?:denied){2,}", 0, (b"denied",)),
    (r".+(?=denied)", 0, ()),  # lookahead: not followed
    (r".+d\u00e9ni", 0, ()),  # only ASCII literals count ('d' alone is too short)
    (r".+caf\u00e9 au lait", 0, (b" au lait",)),
    (r"abc\d+xyz", 0, ()),  # no unbounded '.'
])
def test_required_literals(pattern: str, flags: int, want: tuple[bytes, ...]) -> None:
    assert req(pattern, flags) == want


ATOMS = ["a", "b", "ab", "abc", "x", " ", r"\d", r"\s", ".", "[ab]"]


def _rand_pattern(rnd: random.Random, depth: int = 0, repeat: bool = True) -> str:
    out = []
    for _ in range(rnd.randint(1, 4)):
        k = rnd.random()
        if k < 0.45 or depth > 2:
            out.append(rnd.choice(ATOMS))
        elif k < 0.65:
            alts = [_rand_pattern(rnd, depth + 1, False) for _ in range(rnd.randint(2, 3))]
            out.append(rnd.choice(["(?:", "(", "(?i:", "(?>"]) + "|".join(alts) + ")")
        elif k < 0.85 and repeat:
            # a repeat of one atom or a literal alternation (a repeated group holding repeats
            # can take Python's re exponential time)
            inner = rnd.choice([rnd.choice(ATOMS), "abc|b", "x|ab"])
            out.append("(?:" + inner + ")" + rnd.choice(["*", "+", "?", "{2}", "{1,3}", "+?"]))
        elif repeat:
            out.append(rnd.choice([".+", ".*", "(.+)", ".+?"]))
        else:
            out.append(rnd.choice(ATOMS))
    return "".join(out)


def test_every_python_match_holds_a_required_literal() -> None:
    """Soundness against the oracle, Python's re: random patterns (groups, alternations, repeats,
    case folding, atomic groups), random lines; where the pattern has a prefilter, every line
    re.search matches contains one of its literals."""
    rnd = random.Random(19)
    with_prefilter = checked = 0
    for _ in range(3000):
        p = rnd.choice([".+", ".*", "^.+", "x.*"]) + _rand_pattern(rnd)
        lits = req(p)
        if not lits:
            continue
        with_prefilter += 1
        rx = re.compile(p)
        # lines of pieces: the literals, each cut short or upper-cased, and other characters
        near = [t for lit in lits for t in (lit.decode(), lit.decode()[:-1], lit.decode().upper())]
        for _ in range(40):
            line = "".join(rnd.choice(near) if rnd.random() < 0.3 else rnd.choice("abcxAB \t1")
                           for _ in range(rnd.randint(0, 12)))
            if rx.search(line):
                checked += 1
                assert any(lit.decode() in line for lit in lits), (p, line, lits)
    assert with_prefilter > 300 and checked > 1000, (with_prefilter, checked)


def _jail(name: str, prefilter: bool):
    s = replace(BUILTIN_JAILS[name], maxretry=10**9)
    args = jail_args(s.filter.compiled())
    if not prefilter:  # the 4-tuple form: no required literals
        for key in ("failregex", "ignoreregex"):
            args[key] = [r[:4] for r in args[key]]
        if args["prefregex"]:
            args["prefregex"] = args["prefregex"][:4]
    return _ipsfast.Jail(name, maxretry=s.maxretry, max_tracked=s.max_tracked, mode=s.mode,
                         ignoreip=parse_nets(s.ignoreip), **args)


def test_prefilter_changes_no_result() -> None:
    """The C matcher with its prefilter against the same jail without it, line by line, on lines
    that match, that nearly match (the literal elsewhere, cut, in another case) and that do not."""
    a, b = _jail("named-refused", True), _jail("named-refused", False)
    rnd = random.Random(7)
    tails = ["denied", "(NOTAUTH)", "Denied", "denie", "(NOTAUTH", "denied ", "denied\t", "denied x", "DENIED"]
    n_hit = 0
    for i in range(3000):
        ip = f"10.{i % 7}.{i % 251}.{1 + i % 250}"
        head = rnd.choice(["<30>named[7]: ", "", "ns1 named[9]: ", "Nov  1 01:02:03 ns1 named[9]: "])
        mid = rnd.choice(["query (cache) 'x.example/A/IN' ", "zone transfer 'x/AXFR/IN' ", "query: x IN A ",
                          "denied then ", "bad zone transfer request: 'x/IN': non-authoritative zone "])
        line = f"{head}client @0x7f {ip}#53 (x.example): {mid}{rnd.choice(tails)}".encode()
        got = a.match(line)
        assert got == b.match(line), line
        n_hit += got[0] == "hit"
    assert n_hit > 300
