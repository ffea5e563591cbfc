"""The valid clients' response rate over time, and what ``fipstop bench attack`` reads off it (pure).

The valid-client helper (``bench/attack/valid.c``) counts, per 100 ms bin of
send time, the queries sent and those answered within the timeout.  Here
those bins are put on the attack's clock (0 = the first attack packet) and
reduced to the paper's figures:

- the time to X % (99, 99.5): the start of the first bin from which the
  valid clients' response rate, over every window of :data:`WINDOW_BINS`
  bins (1 s) that starts there or later and ends before the attack does,
  stays at or above X %.  A single bin is too noisy on a shared machine; a
  window that must hold until the attack ends means a recovery that
  collapses again does not count.  0 when it held from the attack's first
  bin (the attack never hurt the valid clients that much).  ``None`` when it never held during the
  attack (the figure is then "more than the attack's length": the attack's
  end, not the IPS, ended the outage);
- the mean valid response before that point: answered / sent over the
  attack's bins before it (the whole attack when it was not reached).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WINDOW_BINS = 10
THRESHOLDS = (0.99, 0.995)


@dataclass(frozen=True)
class Series:
    """Bins on the attack's clock: bin i covers [t_s[i], t_s[i] + bin_s)."""

    bin_s: float
    t_s: tuple[float, ...]
    sent: tuple[int, ...]
    answered: tuple[int, ...]
    attack_s: float  # the attack lasted [0, attack_s)

    @property
    def rate(self) -> tuple[float | None, ...]:
        return tuple(a / s if s else None for a, s in zip(self.answered, self.sent))

    def attack_bins(self) -> range:
        """Bins that start in [0, attack_s)."""
        lo = next((i for i, t in enumerate(self.t_s) if t >= -1e-9), len(self.t_s))
        hi = next((i for i, t in enumerate(self.t_s) if t >= self.attack_s - 1e-9), len(self.t_s))
        return range(lo, max(lo, hi))


def from_valid(doc: dict[str, Any], attack_first_ns: int, attack_last_ns: int) -> Series:
    """``valid``'s JSON, aligned so that 0 is the first attack packet."""
    bin_s = float(doc["bin_ms"]) / 1000.0
    sent = tuple(int(x) for x in doc["sent"])
    answered = tuple(int(x) for x in doc["answered"])
    if len(sent) != len(answered):
        raise ValueError("valid: sent and answered differ in length")
    off = (int(doc["t0_ns"]) - attack_first_ns) / 1e9
    # the last bin may be partial (the send loop ended inside it): drop it
    n = len(sent) - 1 if len(sent) > 1 else len(sent)
    return Series(bin_s, tuple(round(off + i * bin_s, 4) for i in range(n)), sent[:n], answered[:n],
                  (attack_last_ns - attack_first_ns) / 1e9)


def _window_rate(s: Series, i: int, n: int) -> float | None:
    sent = sum(s.sent[i:i + n])
    return sum(s.answered[i:i + n]) / sent if sent else None


def time_to(s: Series, threshold: float, window: int = WINDOW_BINS) -> float | None:
    """Seconds from the attack's start to the recovery above (see the module); None if it never held."""
    bins = s.attack_bins()
    if not bins:
        return None
    last_start = bins.stop - window  # the last window that ends within the attack
    if last_start < bins.start:
        window, last_start = len(bins), bins.start
    ok_from = None
    for i in range(last_start, bins.start - 1, -1):
        r = _window_rate(s, i, window)
        if r is not None and r < threshold:
            break
        ok_from = i
    if ok_from is None:
        return None
    if ok_from == bins.start:
        return 0.0  # it never fell below
    return max(0.0, s.t_s[ok_from])


def mean_before(s: Series, t: float | None) -> float | None:
    """Valid response (answered / sent) over the attack's bins before ``t`` (all of them when ``t`` is None)."""
    bins = [i for i in s.attack_bins() if t is None or s.t_s[i] < t - 1e-9]
    sent = sum(s.sent[i] for i in bins)
    return sum(s.answered[i] for i in bins) / sent if sent else None


def baseline(s: Series) -> float | None:
    """Response before the attack (the machine's regime: below 1 the valid load alone is too much)."""
    bins = [i for i, t in enumerate(s.t_s) if t + s.bin_s <= 1e-9]
    sent = sum(s.sent[i] for i in bins)
    return sum(s.answered[i] for i in bins) / sent if sent else None


def rolling(t_s: list[float], sent: list[int], answered: list[int], n: int = WINDOW_BINS) -> tuple[list[float],
                                                                                               list[float]]:
    """The response rate (%) over the ``n`` bins ending at each bin (answered / sent of the window, so a bin with
    few queries weighs little): what the charts draw, the same 1 s window the time-to figures use.  Bins whose
    window sent nothing are left out."""
    xs: list[float] = []
    ys: list[float] = []
    for i in range(len(sent)):
        lo = max(0, i - n + 1)
        sn = sum(sent[lo:i + 1])
        if sn:
            xs.append(t_s[i])
            ys.append(100.0 * sum(answered[lo:i + 1]) / sn)
    return xs, ys


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of sorted values (None for none)."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), math.ceil(q * len(sorted_values) - 1e-9)))
    return sorted_values[rank - 1]


def summarize(s: Series) -> dict[str, Any]:
    out: dict[str, Any] = {"baseline_response": _r4(baseline(s)), "attack_s": round(s.attack_s, 3)}
    for th in THRESHOLDS:
        key = f"{th * 100:g}".replace(".", "_")
        t = time_to(s, th)
        out[f"time_to_{key}_s"] = None if t is None else round(t, 3)
        out[f"mean_response_before_{key}"] = _r4(mean_before(s, t))
    out["mean_response_attack"] = _r4(mean_before(s, None))
    return out


def _r4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
