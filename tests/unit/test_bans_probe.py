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
