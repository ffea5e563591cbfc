"""Issue 17 item 4: an address flood larger than `--max-tracked` is still banned.

200 000 attacking addresses (10.0.0.0 .. 10.3.13.63) each send maxretry = 5 refused queries,
round-robin (every address once, then again ...), into a real domain consumed by a real
`fipstop ips` with a table of 10 000 addresses: each address is evicted long before its second
hit, so per-address counting bans nothing (the issue measured 0 bans).  With range decisions the
IPS bans every /24 of the flood - ceil(200 000 / 256) = 782 networks, covering all 200 000
attackers - says so in one finding, and bans no legitimate client (a few addresses of
192.0.2.0/24 with one hit each) and no loopback address.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.bans import BanEvent, decode_record
from fipstop.ips.stats import read_stats

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ATTACKERS = 200_000
MAXRETRY = 5
TRACKED = 10_000


def denied(ip: str) -> bytes:
    return f"<30>named[7]: client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


def attacker(i: int) -> str:
    return str(ipaddress.IPv4Address(0x0A000000 + i))


def test_flood_beyond_max_tracked_is_banned_by_network(shm_dir: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    # block_us: the producer waits for room instead of dropping, so every line reaches the IPS
    with _fips.Domain("flood", shm_dir, max_rings=4, ring_capacity=1 << 22, max_record=256,
                      block_us=2_000_000) as dom:
        ips = subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm_dir), "ips", "--domain", "flood",
                                "--consumer", "ips", "--maxretry", str(MAXRETRY), "--max-tracked", str(TRACKED),
                                "--bans-domain", "flood-bans", "--stats-json", str(stats), "-q"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 30
            while not stats.exists():
                assert ips.poll() is None and time.monotonic() < end, ips.communicate()
                time.sleep(0.05)
            p = _fips.Producer(dom)
            lines = [denied(attacker(i)) for i in range(ATTACKERS)]
            legit = [denied(f"192.0.2.{k}") for k in range(1, 9)] + [denied("127.0.0.1")] * MAXRETRY
            t0 = time.monotonic()
            for _round in range(MAXRETRY):
                for k in range(0, ATTACKERS, 1024):
                    assert p.log_batch(lines[k:k + 1024]) == len(lines[k:k + 1024])
            assert p.log_batch(legit) == len(legit)
            total = ATTACKERS * MAXRETRY + len(legit)
            end = time.monotonic() + 240
            while True:
                s = read_stats(stats)
                if s.records >= total:
                    break
                assert ips.poll() is None and time.monotonic() < end, (s.records, total)
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            time.sleep(1.5)  # one more stats write after the last batch
            ips.terminate()
            _, err = ips.communicate(timeout=30)
        finally:
            if ips.poll() is None:
                ips.kill()
                ips.wait()
    assert ips.returncode == 0, err
    s = read_stats(stats)
    assert s.records == total and s.lost == 0
    assert s.evictions > 0 and s.tracked <= TRACKED  # memory stayed bounded
    want = {f"10.{i >> 16}.{(i >> 8) & 255}.0/24" for i in range(0, ATTACKERS, 256)}
    assert len(want) == 782
    with _fips.Domain("flood-bans", shm_dir, create=False) as d, _fips.Consumer(d, "t") as c:
        evs = []
        while (b := c.read()) is not None:
            evs += [e for r in b if isinstance(e := decode_record(r), BanEvent)]  # tallies are no events
            b.release()
    banned = {e.ip for e in evs if e.kind == "ban"}
    nets = {b for b in banned if "/" in b}
    assert nets == want, (len(nets), sorted(want - nets)[:5], sorted(nets - want)[:5])
    covered = [ipaddress.ip_network(n) for n in nets]
    assert all(any(ipaddress.ip_address(a) in n for n in covered) for a in map(attacker, range(0, ATTACKERS, 97)))
    assert not any(b.startswith(("192.0.2.", "127.")) for b in banned)
    assert s.range_bans == 782 and s.bans == len(banned)
    findings = [f for f in s.findings if "max-tracked" in f]
    assert len(findings) == 1 and "/24" in findings[0] and "/64" in findings[0], s.findings
    assert err.count("max-tracked") == 1 and "Traceback" not in err
    print(f"\n{total} lines, {len(banned)} bans ({len(nets)} networks) in {elapsed:.1f} s")
