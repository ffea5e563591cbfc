"""The check's vocabulary: Nagios status codes and the thresholds.

Kept apart from :mod:`fipstop.analysis.check` (numpy, the model) because
the command line needs the thresholds' defaults to build its parser.

A threshold is a Nagios range (:mod:`fipstop.analysis.ranges`); a plain
number ``X`` is the range ``0:X``: a value above X alerts, a value equal to
X is OK, as the Monitoring Plugins guidelines and ``check_procs`` have it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fipstop.analysis.ranges import Range

__all__ = ["CRITICAL", "OK", "STATUS", "UNKNOWN", "WARNING", "Range", "Thresholds", "as_range", "level"]

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATUS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


def as_range(x: float | Range) -> Range:
    return x if isinstance(x, Range) else Range.upto(x)


def level(value: float, warn: float | Range, crit: float | Range) -> int:
    """CRITICAL when ``crit`` alerts, else WARNING when ``warn`` does (a value
    equal to a threshold is OK); unknown (NaN) is never an alert here."""
    if not math.isfinite(value):
        return OK
    if as_range(crit).alerts(value):
        return CRITICAL
    if as_range(warn).alerts(value):
        return WARNING
    return OK


@dataclass(frozen=True)
class Thresholds:
    warn_fill_pct: float | Range = 80.0
    crit_fill_pct: float | Range = 95.0
    warn_drops_per_s: float | Range = 0.0  # any drop
    crit_drops_per_s: float | Range = 100.0
    warn_lag_records: float | Range = 100_000
    crit_lag_records: float | Range = 1_000_000
    warn_lag_s: float | Range = 5.0
    crit_lag_s: float | Range = 30.0
