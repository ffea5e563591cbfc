"""`fipstop ips --action nft` for real: inside a network namespace of the
test's own, the banned address appears in the nftables set and expires after
bantime; a failing nft (an IPv6 ban into a family-ip table, which has no IPv6
set) is counted, retried and reported, and the IPS keeps banning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.ips.stats import read_stats

pytestmark = [pytest.mark.integration, pytest.mark.root]

IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"


def denied(ip: str) -> bytes:
    return f"<30>named[7]: client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


@pytest.fixture
def netns() -> Iterator[str]:
    if not (os.path.exists(IP) and os.path.exists(NFT)):
        pytest.skip("ip (iproute2) and nft (nftables) are needed")
    name = f"fipstop-test-{uuid.uuid4().hex[:8]}"
    r = subprocess.run([IP, "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run([IP, "netns", "del", name], capture_output=True)


def nft_set(ns: str, family: str, table: str, set_: str) -> str:
    r = subprocess.run([IP, "netns", "exec", ns, NFT, "list", "set", family, table, set_], capture_output=True,
                       text=True)
    return r.stdout if r.returncode == 0 else ""


def start_ips(ns: str, shm: Path, stats: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([IP, "netns", "exec", ns, sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "ips",
                             "--domain", "app", "--consumer", "ips", "--maxretry", "2", "--action", "nft",
                             "--stats-json", str(stats), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    _out, err = proc.communicate(timeout=20)
    return err


def test_nft_set_element_appears_and_expires(netns: str, shm_dir: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    host_before = subprocess.run([NFT, "list", "tables"], capture_output=True, text=True).stdout
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        proc = start_ips(netns, shm_dir, stats, "--bantime", "6")  # outlives the checks below on a slow machine
        try:
            assert wait(lambda: stats.exists(), 15), proc.stderr.read() if proc.poll() is not None else "no stats"
            # the IPS created table, sets and the drop chain inside the namespace only
            assert "type ipv4_addr" in nft_set(netns, "inet", "fipstop", "banned")
            p.log(denied("198.51.100.7"))
            p.log(denied("198.51.100.7"))
            p.log(denied("2001:db8::7"))
            p.log(denied("2001:db8::7"))
            assert wait(lambda: "198.51.100.7" in nft_set(netns, "inet", "fipstop", "banned"), 10)
            assert wait(lambda: "2001:db8::7" in nft_set(netns, "inet", "fipstop", "banned6"), 10)
            assert "expires" in nft_set(netns, "inet", "fipstop", "banned")
            ruleset = subprocess.run([IP, "netns", "exec", netns, NFT, "list", "table", "inet", "fipstop"],
                                     capture_output=True, text=True).stdout
            assert "ip saddr @banned drop" in ruleset and "ip6 saddr @banned6 drop" in ruleset
            # the kernel removes the element after bantime; the IPS publishes the unban
            assert wait(lambda: "198.51.100.7" not in nft_set(netns, "inet", "fipstop", "banned"), 20)
            assert wait(lambda: read_stats(stats).unbans == 2, 15)
        finally:
            err = stop(proc)
    s = read_stats(stats)
    assert (s.bans, s.unbans, s.action_failures, s.action) == (2, 2, 0, "nft"), err
    host_after = subprocess.run([NFT, "list", "tables"], capture_output=True, text=True).stdout
    assert host_after == host_before  # nothing leaked into the host's ruleset


def test_failing_nft_is_counted_retried_and_not_fatal(netns: str, shm_dir: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        # family ip: no IPv6 set, so an IPv6 ban fails every time
        proc = start_ips(netns, shm_dir, stats, "--nft-set", "ip:fips4:banned", "--action-retries", "2")
        try:
            assert wait(lambda: stats.exists(), 15)
            for ip in ("2001:db8::66", "2001:db8::66"):
                p.log(denied(ip))
            assert wait(lambda: read_stats(stats).bans_failed == 1, 15)
            p.log(denied("203.0.113.5"))
            p.log(denied("203.0.113.5"))
            assert wait(lambda: "203.0.113.5" in nft_set(netns, "ip", "fips4", "banned"), 10)
            assert proc.poll() is None  # still running
        finally:
            err = stop(proc)
    s = read_stats(stats)
    assert s.bans == 1 and s.bans_failed == 1 and s.action_failures == 3 and s.action_retries == 2
    assert s.last_action_error.startswith("nft exit 1")
    assert "FAILED after 3 attempts" in err
    assert proc.returncode == 0
    with _fips.Domain("fips-bans", shm_dir, create=False) as bd, _fips.Consumer(bd, "t") as c:
        from fipstop.bans import BanEvent, decode_record

        evs = []
        while (b := c.read()) is not None:
            evs += [e for r in b if isinstance(e := decode_record(r), BanEvent)]
            b.release()
    failed = [e for e in evs if e.ip == "2001:db8::66"]
    assert len(failed) == 1 and failed[0].result.startswith("nft exit 1")
    assert json.loads(stats.read_text())["v"] == 1


def test_network_bans_go_to_interval_sets(netns: str, tmp_path: Path) -> None:
    """A range decision (fipstop.ips.ranges) is an element of SET_net / SET6_net, which real nft
    accepts (flags interval, timeout) and whose rule drops the whole network."""
    wrapper = tmp_path / "nft"
    wrapper.write_text(f"#!/bin/sh\nexec {IP} netns exec {netns} {NFT} \"$@\"\n")
    wrapper.chmod(0o755)
    from fipstop.ips.actions import OK, BanJob, Nft

    n = Nft("inet:fipstop:banned", nft=str(wrapper))
    jobs = [BanJob("j", ip, 1, 2, 20, 60.0) for ip in ("198.18.7.0/24", "2001:db8:1:2::/64", "10.0.0.1")]
    assert n.ban(jobs) == [OK] * 3
    assert "198.18.7.0/24" in nft_set(netns, "inet", "fipstop", "banned_net")
    assert "2001:db8:1:2::/64" in nft_set(netns, "inet", "fipstop", "banned6_net")
    assert "10.0.0.1" in nft_set(netns, "inet", "fipstop", "banned")
    rules = subprocess.run([IP, "netns", "exec", netns, NFT, "list", "chain", "inet", "fipstop", "input"],
                           capture_output=True, text=True).stdout
    assert "ip saddr @banned_net drop" in rules and "ip6 saddr @banned6_net drop" in rules
    # a second IPS on the same table adds no second rule
    assert Nft("inet:fipstop:banned", nft=str(wrapper)).ban(jobs[:1]) == [OK]
    rules = subprocess.run([IP, "netns", "exec", netns, NFT, "list", "chain", "inet", "fipstop", "input"],
                           capture_output=True, text=True).stdout
    assert rules.count("@banned_net drop") == 1
