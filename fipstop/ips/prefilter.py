"""The literal texts one of which every match of a regex must contain: a check the C matcher
makes (memmem) before it runs PCRE2 on a line, so that a line lacking all of them is rejected
without the backtracking search.

Where it pays, and only there, it is used: a literal that comes after an unbounded ``.*`` or ``.+``
at the top of the pattern (Fail2Ban's ``<F-CONTENT>.+</F-CONTENT>\\s(?:denied|\\(NOTAUTH\\))``).
PCRE2 then tries every split of the line between the ``.+`` and the rest before it fails, some
40 instructions a byte; memmem scans the line once.  A literal earlier in the pattern is left to
PCRE2, which fails fast on a line that lacks it (and a line that matches would pay for the scan).

The analysis is conservative: an item it does not follow (a lookaround, a backreference, a
conditional, a class, a group with case folding) requires nothing, a pattern with case folding
throughout has no prefilter, and only ASCII literals count, whose bytes mean the same in the ASCII
and the UTF-8 form of a line.  Tested
against Fail2Ban's own sample corpus and a random comparison with and without it
(tests/unit/test_ips_prefilter.py).
"""

from __future__ import annotations

from re import _constants as _C  # type: ignore[attr-defined]

#: the most alternatives a prefilter may have (each is one memmem over the line)
MAX_ALTERNATIVES = 4
#: the shortest literal worth a scan of the line
MIN_LENGTH = 3

Lits = frozenset[str] | None


def _lits(items, ci: bool) -> Lits:
    """One literal set every match of the sequence ITEMS contains (the best one), or None."""
    best: Lits = None
    for cand in _candidates(items, ci):
        best = _better(best, cand)
    return best


def _better(a: Lits, b: Lits) -> Lits:
    if b is None:
        return a
    if a is None:
        return b
    return b if min(map(len, b)) > min(map(len, a)) else a


def _candidates(items, ci: bool):
    """Every literal set the sequence requires: runs of literal characters and what its
    required sub-items require."""
    run: list[str] = []
    for op, av in items:
        if op is _C.LITERAL and not ci and av < 0x80:
            run.append(chr(av))
            continue
        if run:
            yield frozenset(["".join(run)])
            run = []
        yield _item(op, av, ci)
    if run:
        yield frozenset(["".join(run)])


def _item(op, av, ci: bool) -> Lits:
    """What one item requires, or None."""
    if op is _C.SUBPATTERN:
        _gid, add, _del, p = av
        if ci or add & _C.SRE_FLAG_IGNORECASE:
            return None
        return _lits(p, ci)
    if op is _C.ATOMIC_GROUP:
        return _lits(av, ci)
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT):
        lo, _hi, p = av
        return _lits(p, ci) if lo >= 1 else None
    if op is _C.BRANCH:
        out: set[str] = set()
        for alt in av[1]:
            sub = _lits(alt, ci)
            if sub is None:
                return None
            out |= sub
        return frozenset(out) if len(out) <= MAX_ALTERNATIVES else None
    return None


def _greedy_any(op, av) -> bool:
    """An unbounded repeat of '.' (in a group or not): where PCRE2 backtracks over the line."""
    if op is _C.SUBPATTERN:
        p = av[3]
        return len(p) == 1 and _greedy_any(*p[0])
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT):
        _lo, hi, p = av
        return hi is _C.MAXREPEAT and len(p) == 1 and p[0][0] is _C.ANY
    return False


def required_literals(tree, flags: int) -> tuple[bytes, ...]:
    """The prefilter of a parsed pattern (``re._parser.parse``): literals one of which every match
    contains, taken after the pattern's first top-level unbounded '.' repeat; () for none."""
    if flags & _C.SRE_FLAG_IGNORECASE:
        return ()
    items = list(tree)
    for k, (op, av) in enumerate(items):
        if _greedy_any(op, av):
            lits = _lits(items[k + 1:], False)
            if lits is None or min(map(len, lits)) < MIN_LENGTH:
                return ()
            return tuple(sorted(s.encode("ascii") for s in lits))
    return ()
