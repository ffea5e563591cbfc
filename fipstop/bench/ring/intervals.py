"""The interval the ring bench's A/B pairs are decided by, shared by the monitor and the prototype A/Bs
(its own module so that neither imports the other's runners)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["median_ci"]


def median_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Median and a ~95 % distribution-free interval for it: the order
    statistics at ranks n/2 -+ 0.98 sqrt(n) (binomial, sign-test style)."""
    v = sorted(values)
    n = len(v)
    med = statistics.median(v)
    k = max(0, int(n / 2 - 0.98 * math.sqrt(n)))
    return med, v[k], v[min(n - 1, n - 1 - k)]
