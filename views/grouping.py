"""Grouping of the overview's rings (F5, as htop's tree): by domain, by process, or off (pure; no textual).

A group holds every ring of one domain (by domain) or of one producer
process (by pid).  Its figures are what is true of the group as a whole:
the sums of records/s, bytes/s, drops/s, dropped and claimed, the largest
fill and high water (never a mean), and the ring with the most slowest lag
(its records, its age and its consumer).  A rate is summed over the rings
that have one this interval; a group whose rings have none shows none.

:func:`layout` gives the rows of the table: a group row (``-1 - group``)
followed by its rings (their indices in the snapshot) unless it is folded.
Groups sort by their figure of the sort column, rings within a group by
their own; the filter keeps a group when any of its rings matches (or its
name does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fipstop.model.snapshot import Snapshot

#: the order F5 goes through
MODES: tuple[str | None, ...] = (None, "domain", "process")


@dataclass(frozen=True)
class GroupKey:
    """The table key of a group row (a ring row's key is ``(domain, ring)``)."""

    mode: str
    value: str | int  # the domain's name, or the producer's pid


@dataclass(frozen=True)
class Groups:
    """The groups of one snapshot in one mode, with their figures (one entry per group)."""

    mode: str
    keys: list[GroupKey]
    labels: list[str]  # the domain's name; the pid (its comm apart, below)
    comms: list[str | None]  # process mode: the producer's comm from the CPU probe (None: unknown)
    of_ring: np.ndarray  # group index of every ring of the snapshot
    rings: np.ndarray  # rings in the group (count)
    records_per_s: np.ndarray  # sums over the rings with a rate (NaN: no ring of the group has one)
    bytes_per_s: np.ndarray
    drops_per_s: np.ndarray
    records_dropped: np.ndarray  # sums (int)
    claimed_bytes: np.ndarray
    fill_pct: np.ndarray  # the largest of the group's rings
    high_water_pct: np.ndarray
    lag_ring: np.ndarray  # snapshot index of the ring with the most slowest lag (-1: no ring has a consumer)

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: GroupKey) -> int | None:
        try:
            return self.keys.index(key)
        except ValueError:
            return None


def _sum_rate(of: np.ndarray, values: np.ndarray, valid: np.ndarray, n: int) -> np.ndarray:
    total = np.bincount(of, weights=np.where(valid, values, 0.0), minlength=n)
    known = np.bincount(of, weights=valid.astype(np.float64), minlength=n)
    return np.where(known > 0, total, np.nan)


def _max(of: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, -np.inf)
    np.maximum.at(out, of, values.astype(np.float64))
    return out


def groups(s: Snapshot, mode: str) -> Groups:
    """The groups of ``s`` by ``mode`` ("domain" or "process"), in their natural order
    (domains as the snapshot lists them, processes by pid)."""
    r = s.rings
    if mode == "domain":
        present = np.unique(r["domain"]).astype(np.int64)
        of = np.searchsorted(present, r["domain"].astype(np.int64))
        keys = [GroupKey("domain", s.domains[int(d)].name) for d in present]
        labels = [k.value for k in keys]
        comms: list[str | None] = [None] * len(keys)
    elif mode == "process":
        pids = np.unique(r["pid"]).astype(np.int64)
        of = np.searchsorted(pids, r["pid"].astype(np.int64))
        keys = [GroupKey("process", int(p)) for p in pids]
        labels = [str(int(p)) for p in pids]
        cpu = s.cpu
        comms = []
        for p in pids.tolist():
            proc = cpu.get(int(p)) if cpu is not None else None
            comms.append(proc.comm if proc is not None else None)
    else:
        raise ValueError(f"no such grouping: {mode!r}")
    n = len(keys)
    of = of.astype(np.int64)
    valid = r["rates_valid"].astype(bool)
    lag = r["slowest_lag_records"].astype(np.int64)
    lag_ring = np.full(n, -1, dtype=np.int64)
    ok = np.flatnonzero(lag >= 0)
    if ok.size:  # per group the ring with the largest lag (the first of them on a tie)
        o = ok[np.lexsort((ok, -lag[ok], of[ok]))]
        first = np.concatenate(([True], of[o][1:] != of[o][:-1]))
        lag_ring[of[o][first]] = o[first]
    return Groups(
        mode=mode, keys=keys, labels=[str(v) for v in labels], comms=comms, of_ring=of,
        rings=np.bincount(of, minlength=n),
        records_per_s=_sum_rate(of, r["records_per_s"], valid, n),
        bytes_per_s=_sum_rate(of, r["bytes_per_s"], valid, n),
        drops_per_s=_sum_rate(of, r["drops_per_s"], valid, n),
        records_dropped=np.bincount(of, weights=r["records_dropped"].astype(np.float64), minlength=n).astype(
            np.int64) if n else np.zeros(0, np.int64),
        claimed_bytes=np.bincount(of, weights=r["claimed_bytes"].astype(np.float64), minlength=n).astype(
            np.int64) if n else np.zeros(0, np.int64),
        fill_pct=_max(of, r["fill_pct"], n),
        high_water_pct=_max(of, r["high_water_pct"], n),
        lag_ring=lag_ring,
    )


def search_text(g: Groups) -> list[str]:
    """What the filter matches in a group's own name (its rings have their own text)."""
    return [f"{lab} {c or ''}".lower() for lab, c in zip(g.labels, g.comms)]


def sort_values(g: Groups, s: Snapshot, column: str) -> np.ndarray:
    """Each group's figure for ``column``: what its row shows (sums, largest), its name for the name columns."""
    r = s.rings
    if column in ("ring", "thread"):
        if g.mode == "process":
            return np.array([int(k.value) for k in g.keys], dtype=np.float64)
        return np.array([lab.lower() for lab in g.labels]) if g.labels else np.zeros(0)
    if column == "pid":
        if g.mode == "process":
            return np.array([int(k.value) for k in g.keys], dtype=np.float64)
        return _max(g.of_ring, r["pid"], len(g)) if len(g) else np.zeros(0)
    if column == "tid":
        return np.full(len(g), np.nan)
    simple = {"rate": "records_per_s", "bytes": "bytes_per_s", "drops": "drops_per_s", "dropped": "records_dropped",
              "claimed": "claimed_bytes", "fill": "fill_pct", "high": "high_water_pct"}
    if column in simple:
        return getattr(g, simple[column]).astype(np.float64)
    lr = g.lag_ring
    if column == "lag":
        return np.where(lr >= 0, r["slowest_lag_records"][np.maximum(lr, 0)].astype(np.float64), np.nan)
    if column == "slowest":
        return np.where(lr >= 0, r["slowest_consumer"][np.maximum(lr, 0)].astype(np.float64), np.nan)
    raise KeyError(column)


def layout(g: Groups, perm: np.ndarray, group_order: np.ndarray,
           collapsed: set[GroupKey]) -> tuple[np.ndarray, np.ndarray]:
    """The table's rows: for each group of ``group_order`` that has a ring in ``perm``
    (the filtered rings in their sorted order), its row
    (``-1 - group``) then its rings of ``perm`` in that order, unless folded.
    Also returns, per group, how many of its rings ``perm`` holds."""
    of = g.of_ring[perm] if perm.size else np.zeros(0, np.int64)
    rank = np.empty(len(g), dtype=np.int64)
    rank[group_order] = np.arange(len(group_order))
    grouped = perm[np.argsort(rank[of], kind="stable")] if perm.size else perm
    counts = np.bincount(of, minlength=len(g)) if len(g) else np.zeros(0, np.int64)
    starts = np.concatenate(([0], np.cumsum(counts[group_order])))
    out: list[np.ndarray] = []
    for k, gi in enumerate(group_order.tolist()):
        n = int(counts[gi])
        if n == 0:
            continue
        out.append(np.array([-1 - gi], dtype=np.int64))
        if n and g.keys[gi] not in collapsed:
            out.append(grouped[starts[k]:starts[k] + n].astype(np.int64))
    rows = np.concatenate(out) if out else np.zeros(0, np.int64)
    return rows, counts
