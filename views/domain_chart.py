"""The overview chart's series per domain (``c``): the busiest domains each on a line, the rest summed (pure).

A domain's value in a frame is the sum of records/s of its rings that have a
rate in that frame; NaN when none of them has one (no baseline yet: the
first frame, a new domain) or the domain is not in that frame; 0 when the
domain has no ring.  The series of every domain add up to the totals line.
The domains are ranked by their mean records/s over the frames of the chart
(ties by name), so a line keeps its place and colour while the rates wave.
"""

from __future__ import annotations

import numpy as np

from fipstop.model.snapshot import Snapshot

#: domains with a line of their own; the others are summed in "other"
TOP_DOMAINS = 5


def domain_rates(frames: list[Snapshot], field: str = "records_per_s") -> dict[str, np.ndarray]:
    """``field`` (a ring rate) summed per domain, per frame (see the module doc for NaN)."""
    names: dict[str, None] = {}
    for f in frames:
        for d in f.domains:
            names.setdefault(d.name, None)
    out = {n: np.full(len(frames), np.nan) for n in names}
    for k, f in enumerate(frames):
        if f.dt_s <= 0:
            continue
        r = f.rings
        n = len(f.domains)
        dom = r["domain"].astype(np.int64)
        valid = r["rates_valid"].astype(bool)
        total = np.bincount(dom, weights=np.where(valid, r[field], 0.0), minlength=n)
        known = np.bincount(dom, weights=valid.astype(np.float64), minlength=n)
        present = np.bincount(dom, minlength=n)
        for i, d in enumerate(f.domains):
            if known[i] > 0 or present[i] == 0:
                out[d.name][k] = float(total[i])
    return out


def _nansum_rows(rows: list[np.ndarray], n: int) -> np.ndarray:
    """Sum of ``rows`` per frame, NaN only where every row is NaN."""
    if not rows:
        return np.full(n, np.nan)
    m = np.vstack(rows)
    known = ~np.isnan(m)
    return np.where(known.any(axis=0), np.where(known, m, 0.0).sum(axis=0), np.nan)


def split(frames: list[Snapshot], top: int = TOP_DOMAINS,
          field: str = "records_per_s") -> list[tuple[str, np.ndarray]]:
    """(label, values) of the ``top`` busiest domains, then ``other (N domains)`` summing the rest."""
    rates = domain_rates(frames, field)

    def mean(v: np.ndarray) -> float:
        ok = ~np.isnan(v)
        return float(v[ok].mean()) if ok.any() else -1.0

    ranked = sorted(rates, key=lambda name: (-mean(rates[name]), name))
    shown = [(name, rates[name]) for name in ranked[:top]]
    rest = ranked[top:]
    if rest:
        label = f"other ({len(rest)} domain{'s' if len(rest) != 1 else ''})"
        shown.append((label, _nansum_rows([rates[n] for n in rest], len(frames))))
    return shown
