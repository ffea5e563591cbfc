"""From ban samples to what the Bans panel shows: ``derive_bans(prev, samples)``.

Pure, like :func:`fipstop.model.rings.derive_rings`: no clock, no I/O.  A bans sample
carries only the events that are new since the one before (plus cumulative
counters), so the derived :class:`BanStats` also carries what must persist
between frames (bans in force, per-jail counts, the histogram, the feed);
``derive_bans(prev, samples)`` returns a new one and never changes ``prev``.

- bans/s: ban events in this interval / the time between the two samples of
  that source (``taken_mono_ns``), 0 without a baseline;
- active bans: bans minus unbans per (source, jail, ip), or the source's own
  count where it knows it (Fail2Ban's database);
- bans in force, listed: address, jail, banned at, expires (``in_force``):
  at most :data:`IN_FORCE_MAX` per source, the newest reported, so 2^16 attackers
  cost a bounded snapshot and a bounded frame; the counts stay exact (the
  source's own, or the fold's), and ``listed_partial`` says the list is not
  all of them.  A ban whose ``expires_ns`` is behind the sample's clock
  (``taken_realtime_ns``) leaves the list: Fail2Ban and CrowdSec write no
  unban event;
- time-to-ban: ``ban_ns - first_ns`` of every ban (first offending record ->
  ban), counted in a log-spaced histogram (``TTB_EDGES_NS``); percentiles are
  read from the histogram (the bucket's upper edge, capped at the largest
  value seen: never optimistic).

Where the source publishes its own cumulative counters (``fipstop ips``'s
:class:`fipstop.bans.IpsTally`, in ``BansSample.ips``), those win: totals,
bans in force, failed actions, per-jail counts, bans/s and the time-to-ban
percentiles come from the IPS itself (``exact`` is True), because a monitor
that follows the events is lapped when 2^16 bans arrive in a second and the
events it did read are the newest ones, a biased sample.  The histogram and
the feed stay what the probe read (``missed_records`` says how much it did
not).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from fipstop.bans import BanEvent, IpsTally
from fipstop.model.raw import ProbeFailure
from fipstop.probes import names
from fipstop.probes.bans import BansSample

__all__ = ["FEED_MAX", "IN_FORCE_MAX", "TTB_EDGES_NS", "BanStats", "JailCount", "SourceStats", "derive_bans",
           "ttb_percentile_ns"]

_NO_KEYS: Mapping[tuple[str, str, str], BanEvent] = MappingProxyType({})

#: bans in force listed per source in a snapshot (the newest); the counts are not bounded by it
IN_FORCE_MAX = 1000

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
    """One ban source (``fipstop-ips``, ``fail2ban``, ``crowdsec``)."""

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
    #: totals, in force, failed, bans/s and percentiles are the source's own counters (not the events read)
    exact: bool = False
    #: bans the percentiles are over (the source's count when ``exact``, else the events read)
    ttb_count: int = 0
    #: where the source takes commands ('' none known): ``BansSample.control`` (the banned-addresses view's ``u``)
    control: str = ""


@dataclass(frozen=True)
class BanStats:
    sources: tuple[SourceStats, ...] = ()
    jails: tuple[JailCount, ...] = ()
    feed: tuple[BanEvent, ...] = ()  # oldest first, at most FEED_MAX
    #: the events of this frame only (every source), in the order they came
    new_events: tuple[BanEvent, ...] = ()
    #: bans in force, newest ban first, at most IN_FORCE_MAX per source (see ``listed_partial``)
    in_force: tuple[BanEvent, ...] = ()
    # carried state: (source, jail, ip) -> the ban in force, oldest first; only the
    # fold's newest stats hold it (:meth:`shown`): with 2^16 bans in force it is
    # too big to keep per frame
    active_keys: Mapping[tuple[str, str, str], BanEvent] = field(default_factory=lambda: _NO_KEYS)
    #: carried with it: (source, jail) -> how many keys of active_keys, and the earliest end among them, so a
    #: frame with no event and no end due costs no walk over 2^16 bans
    key_counts: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    next_expiry_ns: int | None = None

    def listed(self, source: str) -> int:
        """How many of ``source``'s bans in force ``in_force`` lists."""
        return sum(1 for b in self.in_force if b.source == source)

    @property
    def listed_partial(self) -> bool:
        """True when some source has more bans in force than ``in_force`` lists of it."""
        return any(s.active > self.listed(s.source) for s in self.sources)

    def shown(self) -> BanStats:
        """These stats without the carried state: what a snapshot keeps."""
        return replace(self, active_keys=_NO_KEYS, key_counts=MappingProxyType({}), next_expiry_ns=None) \
            if self.active_keys else self

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


def _derive_source(prev: SourceStats | None, cur: BansSample, active_keys: dict[tuple[str, str, str], BanEvent],
                   jails: dict[tuple[str, str], tuple[int, int]], counts: dict[tuple[str, str], int],
                   ends: list[int]) -> SourceStats:
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
                if active_keys.pop(akey, None) is None:  # a ban again: the newest, at the end
                    counts[jkey] = counts.get(jkey, 0) + 1
                active_keys[akey] = ev if ev.source == name else replace(ev, source=name)
                if ev.expires_ns is not None:
                    ends.append(ev.expires_ns)
                ttb = ev.time_to_ban_ns
                hist[ttb_bucket(ttb)] += 1
                ttb_max = max(ttb_max, ttb)
                jails[jkey] = (jb + 1, jf)
            else:
                failed += 1
                jails[jkey] = (jb + 1, jf + 1)
        else:
            unbans += 1
            if active_keys.pop(akey, None) is not None:
                counts[jkey] -= 1
            jails.setdefault(jkey, (jb, jf))
    bans += new_bans
    rate, valid = 0.0, False
    if prev is not None and not prev.unavailable and prev.taken_mono_ns and cur.taken_mono_ns > prev.taken_mono_ns:
        rate = new_bans / ((cur.taken_mono_ns - prev.taken_mono_ns) / 1e9)
        valid = True
    if cur.active is not None:
        active = int(cur.active)
    else:
        active = sum(n for (src, _jail), n in counts.items() if src == name)
    out = SourceStats(
        source=name, unavailable=cur.unavailable, taken_mono_ns=cur.taken_mono_ns,
        bans_total=bans, unbans_total=unbans, failed_total=failed, bans_per_s=rate, rate_valid=valid,
        active=active, records_seen=cur.records_seen, bad_records=cur.bad_records,
        missed_records=cur.missed_records, records_published=cur.records_published,
        ttb_hist=tuple(hist), ttb_p50_ns=_capped(ttb_percentile_ns(hist, 0.50), ttb_max),
        ttb_p90_ns=_capped(ttb_percentile_ns(hist, 0.90), ttb_max),
        ttb_p99_ns=_capped(ttb_percentile_ns(hist, 0.99), ttb_max), ttb_max_ns=ttb_max, ttb_count=sum(hist),
        control=getattr(cur, "control", "") or "",
    )
    tally = getattr(cur, "ips", None)
    return out if tally is None else _from_tally(prev, out, tally)


def _from_tally(prev: SourceStats | None, out: SourceStats, t: IpsTally) -> SourceStats:
    """The source's own counters over what the events gave (see the module's docstring)."""
    total = t.bans + t.failed  # every ban event, as the events count them: a failed ban is a ban attempt
    rate, valid = 0.0, False
    if (prev is not None and prev.exact and not prev.unavailable and prev.taken_mono_ns
            and out.taken_mono_ns > prev.taken_mono_ns and total >= prev.bans_total):
        rate = (total - prev.bans_total) / ((out.taken_mono_ns - prev.taken_mono_ns) / 1e9)
        valid = True
    return replace(out, bans_total=total, unbans_total=t.unbans, failed_total=t.failed, active=t.active,
                   bans_per_s=rate, rate_valid=valid, ttb_p50_ns=t.ttb_p50_ns, ttb_p90_ns=t.ttb_p90_ns,
                   ttb_p99_ns=t.ttb_p99_ns, ttb_max_ns=t.ttb_max_ns or 0, exact=True, ttb_count=t.ttb_count,
                   control=t.control or out.control)


#: probe name -> the source its samples carry
_PROBE_SOURCE = {names.BANS: "fipstop-ips", names.FAIL2BAN: "fail2ban", names.CROWDSEC: "crowdsec"}


def derive_bans(prev: BanStats | None, samples: Sequence[BansSample | ProbeFailure]) -> BanStats:
    """Fold this frame's ban samples (one per source) into the stats of the
    previous frame.  Sources absent from ``samples`` keep their previous
    figures with a rate of 0; a failed probe keeps them and says why."""
    prev = prev or BanStats()
    clocks = {s.source: s.taken_realtime_ns for s in samples if not isinstance(s, ProbeFailure)}
    due = prev.next_expiry_ns is not None and any(c >= prev.next_expiry_ns for c in clocks.values())
    quiet = not due and not any(not isinstance(s, ProbeFailure) and s.events for s in samples)
    # a quiet frame changes no key: it reads the previous map (never writes it) instead of copying 2^16 keys
    active_keys: dict[tuple[str, str, str], BanEvent] = {} if quiet else dict(prev.active_keys)
    counts = dict(prev.key_counts)
    ends: list[int] = [] if prev.next_expiry_ns is None else [prev.next_expiry_ns]
    jail_counts = {(j.source, j.jail): (j.bans, j.failed) for j in prev.jails}
    by_name = {s.source: s for s in prev.sources}
    out: dict[str, SourceStats] = {}
    feed = list(prev.feed)
    new: list[BanEvent] = []
    for cur in samples:
        if isinstance(cur, ProbeFailure):  # keep the figures, say why
            name = _PROBE_SOURCE.get(cur.probe, "")
            if name:
                base = by_name.get(name) or SourceStats(name)
                out[name] = replace(base, unavailable=cur.reason or "failed", bans_per_s=0.0, rate_valid=False)
            continue
        out[cur.source] = _derive_source(by_name.get(cur.source), cur, active_keys, jail_counts, counts, ends)
        events = [ev if ev.source == cur.source else replace(ev, source=cur.source) for ev in cur.events]
        feed.extend(events)
        new.extend(events)
    for name, s in by_name.items():
        if name not in out:
            out[name] = replace(s, bans_per_s=0.0, rate_valid=False)
    feed.sort(key=lambda e: e.ban_ns)
    feed = feed[-FEED_MAX:]
    next_end = min(ends) if ends else None
    if due:
        expired, next_end = _expire(active_keys, clocks, counts)
    if not quiet:
        in_force = _newest_in_force(active_keys)
    else:
        in_force = prev.in_force
    actives = dict(counts)
    for cur in samples:  # a source's own per-jail counters win over what its events gave
        tally = getattr(cur, "ips", None)
        if isinstance(cur, ProbeFailure) or tally is None:
            continue
        for jail, jb, ja, jf in tally.jails:
            jail_counts[(cur.source, jail)] = (jb + jf, jf)
            actives[(cur.source, jail)] = ja
    jails = tuple(sorted(
        (JailCount(src, jail, b, actives.get((src, jail), 0), f) for (src, jail), (b, f) in jail_counts.items()),
        key=lambda j: (-j.bans, j.source, j.jail)))
    return BanStats(sources=tuple(out[k] for k in sorted(out)), jails=jails, feed=tuple(feed),
                    new_events=tuple(new), in_force=in_force,
                    active_keys=prev.active_keys if quiet else MappingProxyType(active_keys),
                    key_counts=MappingProxyType(counts), next_expiry_ns=next_end)


def _expire(active_keys: dict[tuple[str, str, str], BanEvent], clocks: Mapping[str, int],
            counts: dict[tuple[str, str], int]) -> tuple[int, int | None]:
    """Drop the bans whose end is behind their source's clock (the sample's ``taken_realtime_ns``);
    (how many, the earliest end left)."""
    gone = []
    left: int | None = None
    for k, ev in active_keys.items():
        end = ev.expires_ns
        if end is None:
            continue
        if k[0] in clocks and end <= clocks[k[0]]:
            gone.append(k)
        elif left is None or end < left:
            left = end
    for k in gone:
        del active_keys[k]
        counts[(k[0], k[1])] -= 1
    return len(gone), left


def _newest_in_force(active_keys: dict[tuple[str, str, str], BanEvent]) -> tuple[BanEvent, ...]:
    """At most IN_FORCE_MAX of each source's bans in force, the newest (the map keeps ban order), newest first."""
    per: dict[str, int] = {}
    out: list[BanEvent] = []
    for ev in reversed(active_keys.values()):
        n = per.get(ev.source, 0)
        if n < IN_FORCE_MAX:
            per[ev.source] = n + 1
            out.append(ev)
    out.sort(key=lambda e: -e.ban_ns)
    return tuple(out)
