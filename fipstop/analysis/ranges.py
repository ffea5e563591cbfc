"""Nagios threshold ranges, as the Monitoring Plugins development guidelines define them.

A range is ``[@]start:end``; ``start`` defaults to 0 when the colon is left out
(``10`` means ``0:10``), ``~`` is minus infinity, an empty ``end`` is plus
infinity.  A value alerts when it lies *outside* ``start..end`` (the ends
belong to the range, so a value equal to a threshold is OK), or with ``@``
when it lies *inside* it:

==========  =================================================
``10``      alert below 0 or above 10
``10:``     alert below 10
``~:10``    alert above 10
``10:20``   alert below 10 or above 20
``@10:20``  alert from 10 to 20, both included
==========  =================================================

Where the guidelines leave room, ``check_procs`` (Debian's
monitoring-plugins-basic) is followed, and it is the oracle of the tests.  One
deliberate difference: check_procs reads ``abc`` or ``x:`` as 0 (``atoi``); a
threshold that is no number is refused here (UNKNOWN: a check configured with
a typo must not look healthy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Range", "RangeError", "parse_range"]


class RangeError(ValueError):
    """A threshold that is not a Nagios range (the message names it)."""


@dataclass(frozen=True)
class Range:
    start: float = 0.0
    end: float = math.inf
    inside: bool = False  # the '@' form: alert inside start..end
    text: str = ""  # as given (perfdata repeats it)

    @classmethod
    def upto(cls, end: float) -> Range:
        """The plain-number form ``END`` (alert below 0 or above END)."""
        return cls(0.0, float(end), False, _num(end))

    def alerts(self, value: float) -> bool:
        """True when ``value`` is outside the range (inside with ``@``); NaN (unknown) never alerts."""
        if math.isnan(value):
            return False
        within = self.start <= value <= self.end
        return within if self.inside else not within

    def __str__(self) -> str:
        if self.text:
            return self.text
        lo = "" if self.start == 0 else ("~" if self.start == -math.inf else _num(self.start))
        hi = "" if self.end == math.inf else _num(self.end)
        body = hi if lo == "" and self.start == 0 and hi else f"{lo}:{hi}"
        return ("@" if self.inside else "") + body


def _num(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.6f}".rstrip("0").rstrip(".")


def _parse_number(s: str, what: str, whole: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise RangeError(f"{whole!r}: {what} {s!r} is not a number") from None
    if not math.isfinite(v):
        raise RangeError(f"{whole!r}: {what} {s!r} is not a finite number")
    return v


def parse_range(text: str) -> Range:
    """``[@][start:][end]`` -> Range; RangeError with a one-line reason otherwise."""
    whole = text
    s = text.strip()
    if not s:
        raise RangeError("an empty threshold: give a number or a range such as 10:20")
    inside = s.startswith("@")
    if inside:
        s = s[1:]
    if ":" in s:
        lo_s, hi_s = s.split(":", 1)
        if ":" in hi_s:
            raise RangeError(f"{whole!r}: more than one ':'")
        if lo_s == "~":
            lo = -math.inf
        elif lo_s == "":
            lo = 0.0
        else:
            lo = _parse_number(lo_s, "start", whole)
        hi = math.inf if hi_s == "" else _parse_number(hi_s, "end", whole)
    else:
        if s == "":
            raise RangeError(f"{whole!r}: no end after '@'")
        lo, hi = 0.0, _parse_number(s, "end", whole)
    if lo > hi:
        raise RangeError(f"{whole!r}: start {_num(lo)} is above end {_num(hi)}")
    return Range(lo, hi, inside, whole.strip())
