"""From ban samples to what the Bans panel shows: ``derive_bans(prev, samples)``.

Pure, like :func:`fipstop.model.derive`: no clock, no I/O.  A bans sample
carries only the events that are new since the one before (plus cumulative
counters), so the derived :class:`BanStats` also carries what must persist
between frames (bans in force, per-jail counts, the histogram, the feed);
``derive_bans(prev, samples)`` returns a new one and never changes ``prev``.

- bans/s: ban events in this interval / the time between the two samples of
  that source (``taken_mono_ns``), 0 without a baseline;
- active bans: bans minus unbans per (source, jail, ip), or the source's own
  count where it knows it (Fail2Ban's database);
- time-to-ban: ``ban_ns - first_ns`` of every ban (first offending record ->
  ban), counted in a log-spaced histogram (``TTB_EDGES_NS``); percentiles are
  read from the histogram (the bucket's upper edge, capped at the largest
  value seen: never optimistic).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from fipstop.bans import BanEvent

__all__ = ["FEED_MAX", "TTB_EDGES_NS", "BanStats", "JailCount", "SourceStats", "derive_bans", "ttb_percentile_ns"]

#: newest events kept for the live feed
FEED_MAX = 200


def _edges() -> tuple[int, ...]:
    """Upper edges, 1-2-5 per decade from 100 µs to 20 min."""
    out = []
    for exp in range(5, 12):  # 1e5 ns .. 5e11 ns
        for m in (1, 2, 5):
            out.append(m * 10**exp)
    out.append(1_200_000_000_000)
    return tuple(out)


#: histogram bucket upper edges (ns); one more bucket for anything above
TTB_EDGES_NS: tuple[int, ...] = _edges()


@dataclass(frozen=True, slots=True)
class JailCount:
    source: str
    jail: str
    bans: int
    active: int
    failed: int  # ban actions that did not succeed


@dataclass(frozen=True)
class SourceStats:
    """One ban source (``fipstop-ips``, ``fail2ban``)."""

    source: str
    unavailable: str = ""
    taken_mono_ns: int = 0
    bans_total: int = 0
    unbans_total: int = 0
    failed_total: int = 0
    bans_per_s: float = 0.0
    rate_valid: bool = False
    active: int = 0
    records_seen: int = 0
    bad_records: int = 0
    missed_records: int = 0
    records_published: int = 0
    ttb_hist: tuple[int, ...] = (0,) * (len(TTB_EDGES_NS) + 1)
    ttb_p50_ns: int | None = None
    ttb_p90_ns: int | None = None
    ttb_p99_ns: int | None = None
    ttb_max_ns: int = 0


@dataclass(frozen=True)
class BanStats:
    sources: tuple[SourceStats, ...] = ()
    jails: tuple[JailCount, ...] = ()
    feed: tuple[BanEvent, ...] = ()  # oldest first, at most FEED_MAX
    # carried state: (source, jail, ip) -> ban_ns of the ban in force
    active_keys: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def bans_per_s(self) -> float:
        return sum(s.bans_per_s for s in self.sources)

    @property
    def bans_total(self) -> int:
        return sum(s.bans_total for s in self.sources)

    @property
    def active(self) -> int:
        return sum(s.active for s in self.sources)

    def source(self, name: str) -> SourceStats | None:
        for s in self.sources:
            if s.source == name:
                return s
        return None


def ttb_bucket(ns: int) -> int:
    return bisect.bisect_left(TTB_EDGES_NS, ns)


def ttb_percentile_ns(hist: Sequence[int], q: float) -> int | None:
    """Upper edge of the bucket holding quantile ``q`` (0..1); None if empty.
    The overflow bucket reports the last edge."""
    total = sum(hist)
    if total <= 0:
        return None
    rank = max(1, -(-int(q * total * 1000) // 1000))  # ceil(q * total), at least 1
    rank = min(rank, total)
    acc = 0
    for i, c in enumerate(hist):
        acc += c
        if acc >= rank:
            return TTB_EDGES_NS[min(i, len(TTB_EDGES_NS) - 1)]
    return TTB_EDGES_NS[-1]  # pragma: no cover


def _capped(edge: int | None, max_ns: int) -> int | None:
    """A bucket's upper edge, but never above the largest value seen."""
    return None if edge is None else min(edge, max_ns)


def _derive_source(prev: SourceStats | None, cur: Any, active_keys: dict, jails: dict) -> SourceStats:
    name = cur.source
    hist = list(prev.ttb_hist) if prev is not None else [0] * (len(TTB_EDGES_NS) + 1)
    bans = prev.bans_total if prev is not None else 0
    unbans = prev.unbans_total if prev is not None else 0
    failed = prev.failed_total if prev is not None else 0
    ttb_max = prev.ttb_max_ns if prev is not None else 0
    new_bans = 0
    for ev in cur.events:
        jkey = (name, ev.jail)
        jb, jf = jails.get(jkey, (0, 0))
        akey = (name, ev.jail, ev.ip)
        if ev.kind == "ban":
            new_bans += 1
            if ev.ok:
                active_keys[akey] = ev.ban_ns
                ttb = ev.time_to_ban_ns
                hist[ttb_bucket(ttb)] += 1
                ttb_max = max(ttb_max, ttb)
                jails[jkey] = (jb + 1, jf)
            else:
                failed += 1
                jails[jkey] = (jb + 1, jf + 1)
        else:
            unbans += 1
            active_keys.pop(akey, None)
            jails.setdefault(jkey, (jb, jf))
    bans += new_bans
    rate, valid = 0.0, False
    if prev is not None and not prev.unavailable and prev.taken_mono_ns and cur.taken_mono_ns > prev.taken_mono_ns:
        rate = new_bans / ((cur.taken_mono_ns - prev.taken_mono_ns) / 1e9)
        valid = True
    if cur.active is not None:
        active = int(cur.active)
    else:
        active = sum(1 for k in active_keys if k[0] == name)
    return SourceStats(
        source=name, unavailable=cur.unavailable, taken_mono_ns=cur.taken_mono_ns,
        bans_total=bans, unbans_total=unbans, failed_total=failed, bans_per_s=rate, rate_valid=valid,
        active=active, records_seen=cur.records_seen, bad_records=cur.bad_records,
        missed_records=cur.missed_records, records_published=cur.records_published,
        ttb_hist=tuple(hist), ttb_p50_ns=_capped(ttb_percentile_ns(hist, 0.50), ttb_max),
        ttb_p90_ns=_capped(ttb_percentile_ns(hist, 0.90), ttb_max),
        ttb_p99_ns=_capped(ttb_percentile_ns(hist, 0.99), ttb_max), ttb_max_ns=ttb_max,
    )


#: probe name -> the source its samples carry
_PROBE_SOURCE = {"bans": "fipstop-ips", "fail2ban": "fail2ban"}


def derive_bans(prev: BanStats | None, samples: Sequence[Any]) -> BanStats:
    """Fold this frame's ban samples (one per source, e.g. ``BansSample``)
    into the stats of the previous frame.  Sources absent from ``samples``
    keep their previous figures with a rate of 0."""
    prev = prev or BanStats()
    active_keys = dict(prev.active_keys)
    jail_counts = {(j.source, j.jail): (j.bans, j.failed) for j in prev.jails}
    by_name = {s.source: s for s in prev.sources}
    out: dict[str, SourceStats] = {}
    feed = list(prev.feed)
    for cur in samples:
        if cur is None:
            continue
        if not hasattr(cur, "events"):  # a ProbeFailure: keep the figures, say why
            name = _PROBE_SOURCE.get(getattr(cur, "probe", ""), "")
            if name:
                base = by_name.get(name) or SourceStats(name)
                out[name] = replace(base, unavailable=str(getattr(cur, "reason", "failed")), bans_per_s=0.0,
                                    rate_valid=False)
            continue
        out[cur.source] = _derive_source(by_name.get(cur.source), cur, active_keys, jail_counts)
        feed.extend(ev if ev.source == cur.source else replace(ev, source=cur.source) for ev in cur.events)
    for name, s in by_name.items():
        if name not in out:
            out[name] = replace(s, bans_per_s=0.0, rate_valid=False)
    feed.sort(key=lambda e: e.ban_ns)
    feed = feed[-FEED_MAX:]
    actives: dict[tuple[str, str], int] = {}
    for src, jail, _ip in active_keys:
        actives[(src, jail)] = actives.get((src, jail), 0) + 1
    jails = tuple(sorted(
        (JailCount(src, jail, b, actives.get((src, jail), 0), f) for (src, jail), (b, f) in jail_counts.items()),
        key=lambda j: (-j.bans, j.source, j.jail)))
    return BanStats(sources=tuple(out[k] for k in sorted(out)), jails=jails, feed=tuple(feed),
                    active_keys=MappingProxyType(active_keys))


def bans_from_aux(prev: BanStats | None, aux: Mapping[str, Any]) -> BanStats | None:
    """The ban sources of one ``Frame.aux`` (probes "bans" and "fail2ban"),
    folded into ``prev``; None when the frame has no ban source at all."""
    samples = [aux.get(k) for k in ("bans", "fail2ban")]
    samples = [s for s in samples if s is not None]
    if not samples and prev is None:
        return None
    return derive_bans(prev, samples)


class BanHistory:
    """The derived ban stats of every frame the dashboard keeps.

    Ban samples carry only new events, so the stats of frame N fold every
    frame up to N; this keeps that fold per frame number (for stepping while
    paused) and forgets frames older than the dashboard's history."""

    def __init__(self) -> None:
        self._by_frame: dict[int, BanStats] = {}
        self._last: BanStats | None = None
        self._last_no = 0

    def add(self, no: int, aux: Mapping[str, Any], oldest: int = 1) -> BanStats | None:
        stats = bans_from_aux(self._last, aux)
        if stats is not None:
            # only the newest frame needs the (possibly 2^16-entry) active map
            prev_no = self._last_no
            if prev_no in self._by_frame and self._by_frame[prev_no].active_keys:
                self._by_frame[prev_no] = replace(self._by_frame[prev_no], active_keys=MappingProxyType({}))
            self._by_frame[no] = stats
            self._last = stats
        self._last_no = no
        for k in [k for k in self._by_frame if k < oldest]:
            del self._by_frame[k]
        return stats

    def get(self, no: int) -> BanStats | None:
        """Stats as of frame ``no`` (the nearest older frame that had any)."""
        if no in self._by_frame:
            return self._by_frame[no]
        older = [k for k in self._by_frame if k <= no]
        return self._by_frame[max(older)] if older else None

    @property
    def latest(self) -> BanStats | None:
        return self._last

    def clear(self) -> None:
        """Forget everything (a replay's seek: the frames after it are folded anew;
        bans before the seek point are then not counted)."""
        self._by_frame.clear()
        self._last = None
        self._last_no = 0
