"""Range decisions (fipstop.ips.ranges): networks counted and banned as a whole, bounded, never over
an ignored address; the nft action puts networks in interval sets; ban events carry networks."""

from __future__ import annotations

import stat
from pathlib import Path

from fipstop.bans import BanEvent, decode, encode
from fipstop.ips.actions import OK, BanJob, Nft
from fipstop.ips.ranges import RangeCounter, RangeOptions, network_of

S = 1_000_000_000


def counter(**kw) -> RangeCounter:
    args = {"jail": "j", "maxretry": 2, "findtime_s": 10.0, "mode": "window", "max_tracked": 100,
            "ignore": ("127.0.0.0/8", "192.0.2.5"), "options": RangeOptions()} | kw
    return RangeCounter(**args)


def test_network_of() -> None:
    assert network_of("198.18.7.9", 24, 64) == "198.18.7.0/24"
    assert network_of("2001:db8:1:2:3:4:5:6", 24, 64) == "2001:db8:1:2::/64"
    assert network_of("10.1.2.3", 16, 64) == "10.1.0.0/16"


def test_a_network_needs_hits_from_enough_addresses() -> None:
    c = counter()  # 2 x 4 = 8 hits from 4 addresses
    assert c.count([("198.18.7.1", k * S // 10) for k in range(20)]) == []  # one address: never a range
    trig = c.count([(f"198.18.7.{a}", 3 * S) for a in (2, 3, 4)])
    assert [t[0] for t in trig] == ["198.18.7.0/24"] and trig[0][3] >= 8
    assert c.count([("198.18.7.9", 4 * S)]) == []  # banned once until forgotten
    c.forget("198.18.7.0/24")
    assert c.stats()["range_bans"] == 1


def test_window_restarts_after_findtime() -> None:
    c = counter()
    assert c.count([(f"10.0.0.{a}", a * 4 * S) for a in range(1, 9)]) == []  # spread over 28 s > findtime
    assert c.count([(f"10.0.0.{a}", 100 * S) for a in range(1, 9)])


def test_bucket_leaks() -> None:
    c = counter(mode="bucket")
    assert c.count([(f"10.0.0.{a}", a * 5 * S) for a in range(1, 9)]) == []
    assert c.count([(f"10.0.1.{a}", 0) for a in range(1, 9)])


def test_ignored_networks_are_refused_and_the_table_is_bounded() -> None:
    c = counter(max_tracked=3)
    assert c.count([(f"192.0.2.{a}", 0) for a in range(10, 30)]) == []  # 192.0.2.5 is ignored: not its /24
    assert c.count([(f"127.0.{k}.{a}", 0) for k in range(2) for a in range(1, 20)]) == []
    st = c.stats()
    assert st["range_refused"] >= 3 and st["range_bans"] == 0
    c.count([(f"10.{k}.0.1", 0) for k in range(10)])
    st = c.stats()
    assert st["range_tracked"] == 3 and st["range_evictions"] >= 7


def test_nft_puts_networks_in_interval_sets(tmp_path: Path) -> None:
    log = tmp_path / "nft.log"
    script = tmp_path / "nft"
    # "list table" says it exists, "list set" (the _net sets) that they do not
    script.write_text(f"#!/bin/sh\necho \"ARGS $*\" >> {log}\ncase \"$*\" in 'list set'*) exit 1;; esac\n"
                      f"cat >> {log}\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    n = Nft("inet:fipstop:banned", nft=str(script))
    jobs = [BanJob("j", ip, 1, 2, 8, 60.0) for ip in ("198.18.7.0/24", "10.0.0.1", "2001:db8:1:2::/64")]
    assert n.ban(jobs) == [OK] * 3
    text = log.read_text()
    assert "add set inet fipstop banned_net { type ipv4_addr; flags interval, timeout; }" in text
    assert "add set inet fipstop banned6_net { type ipv6_addr; flags interval, timeout; }" in text
    assert "add rule inet fipstop input ip saddr @banned_net drop" in text
    assert "add rule inet fipstop input ip6 saddr @banned6_net drop" in text
    assert "add element inet fipstop banned_net { 198.18.7.0/24 timeout 60000ms }" in text
    assert "add element inet fipstop banned { 10.0.0.1 timeout 60000ms }" in text
    assert "add element inet fipstop banned6_net { 2001:db8:1:2::/64 timeout 60000ms }" in text


def test_ban_events_carry_networks() -> None:
    ev = decode(encode(BanEvent("ban", "198.18.7.0/24", "j", 1, 2, 3, 8, "dry-run", "ok")))
    assert ev.ip == "198.18.7.0/24"
