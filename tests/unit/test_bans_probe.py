"""The bans probe on a real (temporary) domain: follows new records, counts
what it missed when lapped and records that are not ban events."""

from __future__ import annotations

import pytest

from fipstop._fips import Domain, Producer
from fipstop.bans import BanEvent, encode
from fipstop.probes.bans import BansProbe


def ban(i: int) -> bytes:
    return encode(BanEvent("ban", f"10.0.{i // 256}.{i % 256}", "named-refused", 1, 2, 3, 5, "dry-run", "ok"))


@pytest.fixture
def shm(tmp_path):
    return str(tmp_path)


def test_missing_domain_degrades(shm):
    p = BansProbe(shm, "nope")
    ok, reason = p.available()
    assert not ok and "nope" in reason
    s = p.sample()
    assert s.unavailable and s.events == ()


def test_follows_new_records_and_counts_bad_ones(shm):
    with Domain("bans", shm, max_record=1024, ring_capacity=1 << 16) as dom:
        prod = Producer(dom)
        for i in range(3):
            prod.log(ban(i))
        p = BansProbe(shm, "bans")
        s1 = p.sample()
        assert [e.ip for e in s1.events] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]  # what the ring still holds
        assert p.sample().events == ()
        prod.log(ban(3))
        prod.log(b"\x1b[31m not json")
        prod.log(b'{"v":1,"kind":"ban","ip":"not-an-ip"}')
        s3 = p.sample()
        assert [e.ip for e in s3.events] == ["10.0.0.3"]
        assert s3.bad_records == 2 and s3.records_seen == 6 and s3.missed_records == 0
        assert s3.records_published == 6
        p.close()


def test_lapped_probe_counts_missed(shm):
    with Domain("bans", shm, max_record=1024, ring_capacity=1 << 14) as dom:
        prod = Producer(dom)
        # a draining consumer keeps the small ring from filling (the monitor cannot)
        from fipstop._fips import Consumer
        cons = Consumer(dom, "drain")
        p = BansProbe(shm, "bans")
        prod.log(ban(0))
        p.sample()
        n = 0
        for i in range(1, 2000):  # ~200 KiB through a 16 KiB ring
            prod.log(ban(i))
            b = cons.read(256)
            if b is not None:
                b.release()
            n += 1
        s = p.sample()
        assert s.missed_records > 0
        assert len(s.events) + s.missed_records == n
        assert s.events[-1].ip == "10.0.7.207"
        cons.close()
        p.close()


def test_recreated_domain_starts_over(shm):
    with Domain("bans", shm, max_record=1024, ring_capacity=1 << 16) as dom:
        Producer(dom).log(ban(1))
        p = BansProbe(shm, "bans")
        assert len(p.sample().events) == 1
    Domain.unlink("bans", shm)
    with Domain("bans", shm, max_record=1024, ring_capacity=1 << 16) as dom:
        Producer(dom).log(ban(2))
        s = p.sample()
        assert [e.ip for e in s.events] == ["10.0.0.2"] and s.missed_records == 0
        p.close()


def test_finds_the_bans_domain_without_being_told(shm):
    """Plain `fipstop` beside `fipstop demo` (issue 16, item 7): the demo's NAME-bans is followed."""
    from fipstop.bans import BANS_AUTO

    p = BansProbe(shm, BANS_AUTO)
    s = p.sample()
    assert s.unavailable and "fips-bans or NAME-bans" in s.unavailable
    with Domain("demo-bans", shm, max_record=1024, ring_capacity=1 << 16) as d, Producer(d) as prod:
        prod.log(ban(1))
        s = p.sample()
        assert not s.unavailable and p.domain == "demo-bans" and [e.ip for e in s.events] == ["10.0.0.1"]
    p.close()


def test_the_ips_tally_gives_exact_totals_when_events_are_missed(shm):
    """Item 1: the IPS's own counters ride along in the domain; the probe keeps the newest."""
    from fipstop.bans import IpsTally, encode_tally
    from fipstop.model.bans import derive_bans

    t = IpsTally("fipstop-ips", 1, 10, 20, bans=65536, unbans=0, active=65536, failed=0, published=65536,
                 dropped=0, ttb_count=65536, ttb_p50_ns=2_450_000_000, ttb_p90_ns=4_190_000_000,
                 ttb_p99_ns=4_800_000_000, ttb_max_ns=5_000_000_000, jails=(("named-refused", 65536, 65536, 0),))
    with Domain("fips-bans", shm, max_record=1024, ring_capacity=1 << 16) as d, Producer(d) as prod:
        prod.log(ban(1))
        prod.log(encode_tally(t))
        p = BansProbe(shm)
        s = p.sample()
        p.close()
    assert s.ips == t and len(s.events) == 1 and s.bad_records == 0
    st = derive_bans(None, [s]).source("fipstop-ips")
    assert st is not None and st.exact
    assert (st.bans_total, st.active, st.ttb_p50_ns, st.ttb_p90_ns) == (65536, 65536, 2_450_000_000, 4_190_000_000)
