"""derive_bans: rates, active bans, per-jail counts, feed and time-to-ban histogram (pure)."""

from __future__ import annotations

from fipstop.bans import BanEvent
from fipstop.banmodel import (FEED_MAX, TTB_EDGES_NS, BanHistory, bans_from_aux, derive_bans,
                              ttb_bucket, ttb_percentile_ns)
from fipstop.probes.bans import BansSample
from fipstop.sources import ProbeFailure

S = 1_000_000_000


def ev(ip, kind="ban", jail="named-refused", first=0, ban=1_000_000, result="ok", source="fipstop-ips"):
    return BanEvent(kind, ip, jail, first, ban, ban, 5, "dry-run", result, source)


def sample(t_s, events=(), source="fipstop-ips", active=None, **kw):
    return BansSample(source, int(t_s * S), int(t_s * S), tuple(events), active=active, **kw)


def test_first_sample_counts_but_has_no_rate():
    st = derive_bans(None, [sample(1, [ev("10.0.0.1"), ev("10.0.0.2")])])
    s = st.source("fipstop-ips")
    assert s.bans_total == 2 and s.active == 2
    assert s.bans_per_s == 0 and not s.rate_valid


def test_rate_active_and_unban():
    st = derive_bans(None, [sample(1, [ev("10.0.0.1")])])
    st2 = derive_bans(st, [sample(3, [ev("10.0.0.2"), ev("10.0.0.3"), ev("10.0.0.4"), ev("10.0.0.5"),
                                      ev("10.0.0.1", kind="unban")])])
    s = st2.source("fipstop-ips")
    assert s.rate_valid and s.bans_per_s == 2.0  # 4 bans in 2 s
    assert s.bans_total == 5 and s.unbans_total == 1 and s.active == 4
    assert st.source("fipstop-ips").active == 1  # prev untouched (pure)
    assert st2.jails[0].jail == "named-refused" and st2.jails[0].bans == 5 and st2.jails[0].active == 4


def test_failed_action_counted_not_active():
    st = derive_bans(None, [sample(1, [ev("10.0.0.1", result="nft: permission denied")])])
    s = st.source("fipstop-ips")
    assert s.failed_total == 1 and s.active == 0 and sum(s.ttb_hist) == 0
    assert st.jails[0].failed == 1


def test_histogram_and_percentiles():
    events = [ev(f"10.0.{i // 256}.{i % 256}", first=0, ban=(i + 1) * 1_000_000) for i in range(100)]
    s = derive_bans(None, [sample(1, events)]).source("fipstop-ips")
    assert sum(s.ttb_hist) == 100
    assert s.ttb_p50_ns == 50_000_000  # 50 ms: the upper edge of its bucket
    assert s.ttb_p99_ns == 100_000_000
    assert s.ttb_max_ns == 100_000_000
    assert ttb_bucket(0) == 0 and ttb_bucket(TTB_EDGES_NS[-1] + 1) == len(TTB_EDGES_NS)
    assert ttb_percentile_ns([0] * (len(TTB_EDGES_NS) + 1), 0.5) is None


def test_two_sources_side_by_side_and_feed_bounded():
    ips = [ev(f"10.1.{i // 256}.{i % 256}", ban=i) for i in range(FEED_MAX + 50)]
    f2b = [ev("10.9.9.9", source="x", ban=10**12)]
    st = derive_bans(None, [sample(1, ips), sample(1, f2b, source="fail2ban", active=7)])
    assert [s.source for s in st.sources] == ["fail2ban", "fipstop-ips"]
    assert st.source("fail2ban").active == 7  # the source's own count wins
    assert len(st.feed) == FEED_MAX and st.feed[-1].source == "fail2ban"
    assert st.bans_total == FEED_MAX + 51


def test_probe_failure_keeps_figures_and_reason():
    st = derive_bans(None, [sample(1, [ev("10.0.0.1")])])
    st2 = bans_from_aux(st, {"bans": ProbeFailure("bans", "boom")})
    s = st2.source("fipstop-ips")
    assert s.unavailable == "boom" and s.bans_total == 1 and s.bans_per_s == 0
    assert bans_from_aux(None, {}) is None


def test_history_folds_and_forgets():
    h = BanHistory()
    h.add(1, {"bans": sample(1, [ev("10.0.0.1")])})
    h.add(2, {})  # a frame without ban sources: the figures stay, rates drop to 0
    h.add(3, {"bans": sample(2, [ev("10.0.0.2")])}, oldest=2)
    assert h.get(1) is None  # forgotten with the frame
    assert h.get(2).bans_total == 1 and h.get(2).bans_per_s == 0
    assert h.get(3).bans_total == 2 and h.latest is h.get(3)
    assert h.get(3).active_keys  # only the newest keeps the active map


def test_history_clear_starts_over():
    h = BanHistory()
    h.add(1, {"bans": sample(1, [ev("10.0.0.1")])})
    h.clear()
    assert h.latest is None and h.get(1) is None
    h.add(2, {"bans": sample(2, [ev("10.0.0.2")])})
    assert h.get(2).bans_total == 1
