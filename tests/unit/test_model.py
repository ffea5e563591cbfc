"""The ring part of fipstop.model.snapshot.derive on synthetic raw samples: no clock, no shared memory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fipstop import fixtures as fx
from fipstop.model import snapshot
from fipstop.model.raw import RawFrame
from fipstop.model.rings import Health
from fipstop.probes.ring import DomainError, RawSample
from fipstop.ring import OLDEST_TS_FIELD

CAP = 1 << 20


def derive(prev: RawSample | None, cur: RawSample, dt: float, **kw) -> snapshot.Snapshot:
    """The snapshot of two ring samples (frames without other probes)."""
    return snapshot.derive(RawFrame(prev) if prev is not None else None, RawFrame(cur), interval_s=dt, **kw)


def _domain(t_s: float, *, rings=(), consumers=(), pos=(), name="d", max_rings=4, max_consumers=3,
            created=fx.EPOCH_REALTIME_NS - 10**12, mono_offset_s: float | None = None):
    """rings: dicts of ring fields (slot = "index"), consumers: dicts, pos: ((c, r), dict)."""
    R, C, P = fx.empty_arrays(max_rings, max_consumers)
    for spec in rings:
        spec = dict(spec)
        i = spec.pop("index")
        R[i]["state"] = spec.pop("state", fx.RING_ACTIVE)
        R[i]["generation"] = spec.pop("generation", 1)
        for k, v in spec.items():
            R[i][k] = v.encode() if isinstance(v, str) else v
    for spec in consumers:
        spec = dict(spec)
        i = spec.pop("index")
        C[i]["state"] = spec.pop("state", fx.CONS_ACTIVE)
        C[i]["generation"] = spec.pop("generation", 1)
        for k, v in spec.items():
            C[i][k] = v.encode() if isinstance(v, str) else v
    for (c, r), spec in pos:
        for k, v in spec.items():
            P[c, r][k] = v
    mono = fx.EPOCH_MONO_NS + int(round((t_s if mono_offset_s is None else mono_offset_s) * 1e9))
    return fx.domain_snapshot(
        name, R, C, P, taken_mono_ns=mono, taken_realtime_ns=fx.EPOCH_REALTIME_NS + int(t_s * 1e9),
        ring_capacity=CAP, created_realtime_ns=created,
    )


def _sample(t_s: float, *domains, errors=()):
    return fx.raw_sample(t_s, list(domains), errors=errors)


def _ring(index=0, committed=0, dropped=0, rec_bytes=100, **kw):
    d = dict(index=index, records_committed=committed, bytes_committed=committed * rec_bytes,
             records_dropped=dropped, bytes_dropped=dropped * rec_bytes)
    d.update(kw)
    return d


def _hb(t_s: float, age_s: float) -> int:
    return fx.EPOCH_MONO_NS + int((t_s - age_s) * 1e9)


# ---------------------------------------------------------------------------


def test_first_sample_has_no_rates() -> None:
    snap = derive(None, _sample(0, _domain(0, rings=[_ring(0, 1000, 5)])), 1.0)
    r = snap.rings[0]
    assert snap.dt_s == 0.0
    assert not r["rates_valid"]
    assert r["records_per_s"] == 0 and r["drops_per_s"] == 0 and r["bytes_per_s"] == 0
    assert r["records_committed"] == 1000 and r["records_dropped"] == 5
    assert snap.totals.records_dropped == 5 and snap.totals.records_per_s == 0


def test_rates_from_counter_deltas() -> None:
    a = _sample(10, _domain(10, rings=[_ring(0, 1000, 10), _ring(1, 0)]))
    b = _sample(12, _domain(12, rings=[_ring(0, 5000, 30), _ring(1, 600)]))
    snap = derive(a, b, 2.0)
    r0, r1 = snap.rings
    assert snap.dt_s == pytest.approx(2.0)
    assert r0["rates_valid"] and r1["rates_valid"]
    assert r0["records_per_s"] == pytest.approx(2000.0)
    assert r0["bytes_per_s"] == pytest.approx(200000.0)
    assert r0["drops_per_s"] == pytest.approx(10.0)
    assert r0["drop_bytes_per_s"] == pytest.approx(1000.0)
    assert r1["records_per_s"] == pytest.approx(300.0)
    t = snap.totals
    assert t.records_per_s == pytest.approx(2300.0)
    assert t.drops_per_s == pytest.approx(10.0)
    assert t.records_committed == 5600 and t.records_dropped == 30


def test_time_base_is_the_samples_clock_then_dt() -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 0)]))
    b = _sample(4, _domain(4, rings=[_ring(0, 400)]))
    assert derive(a, b, 1.0).rings[0]["records_per_s"] == pytest.approx(100.0)  # 4 s apart, not dt
    # same monotonic stamp (broken clock): fall back to dt
    b2 = _sample(4, _domain(4, rings=[_ring(0, 400)], mono_offset_s=0))
    assert derive(a, b2, 2.0).rings[0]["records_per_s"] == pytest.approx(200.0)


def test_generation_change_resets_the_baseline() -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 1000, 50)]))
    b = _sample(1, _domain(1, rings=[_ring(0, 1200, 60, generation=2, tid=99)]))
    r = derive(a, b, 1.0).rings[0]
    assert not r["rates_valid"]
    assert r["records_per_s"] == 0 and r["drops_per_s"] == 0
    c = _sample(2, _domain(2, rings=[_ring(0, 1300, 60, generation=2, tid=99)]))
    r = derive(b, c, 1.0).rings[0]
    assert r["rates_valid"] and r["records_per_s"] == pytest.approx(100.0)


@pytest.mark.parametrize("field", ["records_committed", "bytes_committed", "records_dropped", "bytes_dropped"])
def test_counter_going_backwards_resets_never_negative(field: str) -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 1000, 50)]))
    ring = _ring(0, 2000, 80)
    ring[field] = 1 if "records" in field else 3
    snap = derive(a, _sample(1, _domain(1, rings=[ring])), 1.0)
    r = snap.rings[0]
    assert not r["rates_valid"]
    for f in ("records_per_s", "bytes_per_s", "drops_per_s", "drop_bytes_per_s"):
        assert r[f] == 0.0
    assert snap.totals.records_per_s >= 0


def test_recreated_domain_resets_everything() -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 1000)], consumers=[dict(index=0, records_released=900)]))
    b = _sample(1, _domain(1, rings=[_ring(0, 1500)], consumers=[dict(index=0, records_released=1400)],
                           created=fx.EPOCH_REALTIME_NS))
    snap = derive(a, b, 1.0)
    assert not snap.rings[0]["rates_valid"] and snap.rings[0]["records_per_s"] == 0
    assert not snap.consumers[0]["rates_valid"] and snap.consumers[0]["release_per_s"] == 0
    assert snap.domains[0].dt_s == 0.0


def test_ring_that_was_free_has_no_baseline() -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 10)]))
    b = _sample(1, _domain(1, rings=[_ring(0, 20), _ring(1, 500)]))
    snap = derive(a, b, 1.0)
    assert snap.rings[0]["rates_valid"] and not snap.rings[1]["rates_valid"]
    assert snap.rings[1]["records_per_s"] == 0


def test_fill_high_water_and_claimed() -> None:
    ring = _ring(0, 100, head=CAP // 2, reserved=CAP // 2 + 136, floor=CAP // 4, high_water_bytes=CAP // 8)
    consumers = [dict(index=0, heartbeat_mono_ns=_hb(0, 0.1))]
    pos = [((0, 0), dict(released=CAP // 4, released_seq=40))]
    r = derive(None, _sample(0, _domain(0, rings=[ring], consumers=consumers, pos=pos)), 1.0).rings[0]
    assert r["fill_pct"] == pytest.approx(25.0)
    assert r["used_bytes"] == CAP // 4
    assert r["high_water_pct"] == pytest.approx(25.0)  # current fill is above the counter
    assert r["claimed_bytes"] == 136
    ring["high_water_bytes"] = CAP * 3 // 4
    r = derive(None, _sample(0, _domain(0, rings=[ring], consumers=consumers, pos=pos)), 1.0).rings[0]
    assert r["high_water_pct"] == pytest.approx(75.0)
    # reserved below head (torn read) never makes a huge claimed value
    ring["reserved"] = CAP // 2 - 8
    r = derive(None, _sample(0, _domain(0, rings=[ring], consumers=consumers, pos=pos)), 1.0).rings[0]
    assert r["claimed_bytes"] == 0


def _lag_domain(t_s: float, committed: tuple[int, int], released: dict[int, tuple[int, int]], *,
                hb_age: dict[int, float] | None = None, states: dict[int, int] | None = None,
                records_released: dict[int, int] | None = None, ages: dict[tuple[int, int], float] | None = None):
    """``ages[(c, r)]``: how old (s) the record at consumer c's position on ring r is (the
    oldest it has not released); without one, its time is unknown."""
    rings = [_ring(i, committed[i], head=committed[i] * 128, reserved=committed[i] * 128) for i in range(2)]
    consumers, pos = [], []
    now = fx.EPOCH_REALTIME_NS + int(round(t_s * 1e9))
    for c, seqs in released.items():
        consumers.append(dict(index=c, state=(states or {}).get(c, fx.CONS_ACTIVE), name=f"c{c}",
                              heartbeat_mono_ns=_hb(t_s, (hb_age or {}).get(c, 0.1)),
                              records_released=(records_released or {}).get(c, sum(seqs))))
        for r, s in enumerate(seqs):
            p = dict(released_seq=s, released=s * 128, records_released=s)
            if (c, r) in (ages or {}):
                p[OLDEST_TS_FIELD] = now - int(round((ages or {})[(c, r)] * 1e9))
            pos.append(((c, r), p))
    return _domain(t_s, rings=rings, consumers=consumers, pos=pos)


def test_lag_records_seconds_and_slowest_consumer() -> None:
    a = _sample(0, _lag_domain(0, (0, 0), {0: (0, 0), 1: (0, 0)}))
    # the ages of the records at each position (the truth the ring probe reads from their timestamps)
    ages = {(0, 0): 0.01, (1, 0): 0.5, (1, 1): 0.75}
    b = _sample(1, _lag_domain(1, (1000, 400), {0: (990, 400), 1: (500, 100)}, ages=ages))
    snap = derive(a, b, 1.0)
    r0, r1 = snap.rings
    assert r0["slowest_consumer"] == 1 and r0["slowest_lag_records"] == 500
    assert r0["slowest_lag_s"] == pytest.approx(0.5)  # the oldest record it has not released
    assert r1["slowest_consumer"] == 1 and r1["slowest_lag_records"] == 300
    assert r1["slowest_lag_s"] == pytest.approx(0.75)
    c0, c1 = snap.consumers
    assert c0["lag_max_records"] == 10 and c0["lag_mean_records"] == pytest.approx(5.0)
    assert c0["lag_max_s"] == pytest.approx(0.01) and c0["lag_mean_s"] == pytest.approx(0.005)
    assert c1["lag_max_records"] == 500 and c1["lag_mean_records"] == pytest.approx(400.0)
    assert c1["lag_max_s"] == pytest.approx(0.75) and c1["lag_mean_s"] == pytest.approx(0.625)
    # the drain-time estimate is its own figure: lag / what it released on that ring in the interval
    p1 = snap.positions_of_consumer("d", 1)
    assert p1["drain_s"].tolist() == pytest.approx([1.0, 3.0])  # 500 / 500/s, 300 / 100/s
    assert c1["drain_max_s"] == pytest.approx(3.0)
    assert c1["lag_rings"] == 2
    assert c0["release_per_s"] == pytest.approx(1390.0) and c1["release_per_s"] == pytest.approx(600.0)
    pos = snap.positions_of_ring("d", 0)
    assert sorted(pos["consumer"].tolist()) == [0, 1]
    assert dict(zip(pos["consumer"].tolist(), pos["lag_records"].tolist())) == {0: 10, 1: 500}
    assert dict(zip(pos["consumer"].tolist(), pos["lag_bytes"].tolist())) == {0: 1280, 1: 64000}
    p1 = snap.positions_of_consumer("d", 1)
    assert p1["release_per_s"].tolist() == [500.0, 100.0]


def test_lag_seconds_is_the_age_of_the_oldest_unreleased_record_on_an_idle_ring() -> None:
    # nothing committed in the interval: a rate estimate knows nothing, the record's time does
    a = _sample(0, _lag_domain(0, (1000, 50), {0: (900, 50)}, ages={(0, 0): 29.0}))
    b = _sample(1, _lag_domain(1, (1000, 50), {0: (900, 50)}, ages={(0, 0): 30.0}))
    snap = derive(a, b, 1.0)
    r0, r1 = snap.rings
    assert r0["slowest_lag_records"] == 100 and r0["slowest_lag_s"] == pytest.approx(30.0)
    assert r1["slowest_lag_records"] == 0 and r1["slowest_lag_s"] == 0.0
    c = snap.consumers[0]
    assert c["lag_max_records"] == 100 and c["lag_max_s"] == pytest.approx(30.0)
    assert math.isnan(c["drain_max_s"])  # it released nothing: no drain time to estimate


def test_lag_seconds_unknown_without_the_records_time() -> None:
    a = _sample(0, _lag_domain(0, (1000, 50), {0: (900, 50)}))
    b = _sample(1, _lag_domain(1, (1000, 50), {0: (900, 50)}))
    snap = derive(a, b, 1.0)
    r0, r1 = snap.rings
    assert r0["slowest_lag_records"] == 100 and math.isnan(r0["slowest_lag_s"])
    assert r1["slowest_lag_s"] == 0.0
    assert snap.consumers[0]["lag_max_s"] == 0.0  # only ring 1 has a known lag in seconds


def test_consumer_health() -> None:
    d = _domain(10, rings=[_ring(i, 10) for i in range(2)], max_consumers=5, consumers=[
        dict(index=0, heartbeat_mono_ns=_hb(10, 0.5)),
        dict(index=1, heartbeat_mono_ns=_hb(10, 2.5)),
        dict(index=2, state=fx.CONS_EVICTED, heartbeat_mono_ns=_hb(10, 60), evicted_ns=5, evicted_by_ring=1),
        dict(index=3, state=fx.CONS_CLOSED, heartbeat_mono_ns=_hb(10, 1)),
        dict(index=4, state=fx.CONS_JOINING, heartbeat_mono_ns=_hb(10, 0)),
    ])
    snap = derive(None, _sample(10, d), 1.0)
    assert [Health(h).label for h in snap.consumers["health"]] == ["alive", "stale", "evicted", "closed", "joining"]
    assert snap.consumers["heartbeat_age_ns"][1] == 2_500_000_000
    assert snap.consumers["evicted_by_ring"][2] == 1
    assert snap.consumers["lag_max_records"][2] == -1 and math.isnan(snap.consumers["lag_mean_records"][2])
    t = snap.totals
    assert (t.consumers, t.consumers_alive, t.consumers_stale, t.consumers_evicted) == (5, 1, 1, 1)
    # only ACTIVE consumers have positions and count for the slowest lag
    assert set(snap.positions["consumer"].tolist()) == {0, 1}
    lenient = derive(None, _sample(10, d), 1.0, stale_after_ns=5_000_000_000)
    assert Health(lenient.consumers["health"][1]) is Health.ALIVE


def test_release_rate_resets_on_consumer_generation_change() -> None:
    a = _sample(0, _domain(0, rings=[_ring(0, 10)], consumers=[dict(index=0, records_released=100)]))
    b = _sample(1, _domain(1, rings=[_ring(0, 10)],
                           consumers=[dict(index=0, generation=2, records_released=150)]))
    c = derive(a, b, 1.0).consumers[0]
    assert not c["rates_valid"] and c["release_per_s"] == 0
    b2 = _sample(1, _domain(1, rings=[_ring(0, 10)], consumers=[dict(index=0, records_released=50)]))
    c = derive(a, b2, 1.0).consumers[0]
    assert not c["rates_valid"] and c["release_per_s"] == 0


def test_closed_ring_is_shown_free_ring_is_not() -> None:
    d = _domain(0, rings=[_ring(0, 5), _ring(2, 7, state=fx.RING_CLOSED, closed_ns=9)])
    snap = derive(None, _sample(0, d), 1.0)
    assert snap.rings["ring"].tolist() == [0, 2]
    assert snap.rings["state"].tolist() == [fx.RING_ACTIVE, fx.RING_CLOSED]
    assert snap.totals.rings == 2 and snap.totals.rings_active == 1
    assert snap.ring_row("d", 2) == 1 and snap.ring_row("d", 1) is None


def test_several_domains_are_sorted_and_keyed() -> None:
    b1 = _domain(0, name="b", rings=[_ring(0, 1), _ring(1, 2)])
    a1 = _domain(0, name="a", rings=[_ring(3, 3)])
    snap = derive(None, _sample(0, b1, a1, errors=(DomainError("bad", "not a fips domain"),)), 1.0)
    assert [d.name for d in snap.domains] == ["a", "b"]
    assert [snap.ring_key(i) for i in range(3)] == [("a", 3), ("b", 0), ("b", 1)]
    assert snap.errors == (DomainError("bad", "not a fips domain"),)
    assert snap.domains[0].uptime_ns == 10**12


def test_empty_and_unavailable() -> None:
    from fipstop.probes.ring import RawSample

    raw = RawSample(host="h", shm_dir="/nope", taken_mono_ns=1, taken_realtime_ns=2, unavailable="/nope: no such directory")
    snap = derive(None, raw, 1.0)
    assert snap.rings.size == 0 and snap.consumers.size == 0 and snap.positions.size == 0
    assert snap.unavailable == "/nope: no such directory"
    assert snap.totals.rings == 0 and snap.totals.records_per_s == 0


def test_derive_is_pure() -> None:
    samples = fx.demo_samples(40)
    before = [bytes(d.rings.tobytes()) for d in samples[30].domains]
    s1 = derive(samples[29], samples[30], 1.0)
    s2 = derive(samples[29], samples[30], 1.0)
    for f in s1.rings.dtype.names:
        np.testing.assert_array_equal(s1.rings[f], s2.rings[f])
    for f in s1.consumers.dtype.names:
        np.testing.assert_array_equal(s1.consumers[f], s2.consumers[f])
    assert s1.totals == s2.totals
    assert [bytes(d.rings.tobytes()) for d in samples[30].domains] == before
    assert not s1.rings.flags.writeable
    with pytest.raises(ValueError):
        s1.rings["fill_pct"][0] = 1.0


def test_demo_scenario_tells_its_story() -> None:
    """The screenshot fixture: drops while the archiver lags, a stale forwarder, an evicted consumer."""
    from fipstop.sources.samples import SampleListSource

    frames = SampleListSource(fx.demo_samples(90)).frames()
    early, mid, late = frames[10].snapshot, frames[56].snapshot, frames[85].snapshot
    assert early.totals.drops_per_s == 0 and early.totals.records_per_s > 30000
    assert mid.totals.drops_per_s > 0
    named = [Health(h).label for h, d in zip(mid.consumers["health"], mid.consumers["domain"]) if d == 0]
    assert "stale" in named and "evicted" in named
    assert late.totals.drops_per_s == 0
    assert all(r.snapshot.rings["records_per_s"].min() >= 0 for r in frames)
