"""derive_bans: rates, active bans, per-jail counts, feed and time-to-ban histogram (pure),
and the fold a stream of frames carries (ModelStep)."""

from __future__ import annotations

from fipstop import fixtures
from fipstop.bans import BanEvent
from fipstop.model.bans import FEED_MAX, TTB_EDGES_NS, derive_bans, ttb_bucket, ttb_percentile_ns
from fipstop.model.raw import ProbeFailure, RawFrame
from fipstop.model.snapshot import ModelStep
from fipstop.probes.bans import BansSample

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


def frame(t_s: float, aux: dict) -> RawFrame:
    return RawFrame(fixtures.raw_sample(t_s, []), aux)


def test_probe_failure_keeps_figures_and_reason():
    step = ModelStep()
    step(frame(1, {"bans": sample(1, [ev("10.0.0.1")])}))
    s = step(frame(2, {"bans": ProbeFailure("bans", "boom")})).snapshot.bans.source("fipstop-ips")
    assert s.unavailable == "boom" and s.bans_total == 1 and s.bans_per_s == 0
    assert ModelStep()(frame(1, {})).snapshot.bans is None  # no ban source at all


def test_step_folds_frames():
    step = ModelStep()
    first = step(frame(1, {"bans": sample(1, [ev("10.0.0.1")])})).snapshot.bans
    quiet = step(frame(2, {})).snapshot.bans  # a frame without ban sources: the figures stay, rates drop to 0
    third = step(frame(3, {"bans": sample(3, [ev("10.0.0.2")])})).snapshot.bans
    assert first.bans_total == 1 and first.new_events == (ev("10.0.0.1"),)
    assert quiet.bans_total == 1 and quiet.bans_per_s == 0 and not quiet.new_events
    assert third.bans_total == 2 and third.active == 2
    assert not third.active_keys  # the step keeps the active map; a snapshot does not


def test_step_reset_starts_over():
    step = ModelStep()
    step(frame(1, {"bans": sample(1, [ev("10.0.0.1")])}))
    step.reset()  # a replay's seek
    assert step(frame(2, {"bans": sample(2, [ev("10.0.0.2")])})).snapshot.bans.bans_total == 1
