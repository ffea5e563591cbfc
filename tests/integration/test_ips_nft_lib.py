"""The nft action through libnftables in-process (the default when it loads), against a real
nftables table in a network namespace of the test's own: every ban lands in the set exactly
once, a failing transaction is an error result (all or nothing, nothing half-applied), and
a table deleted under the IPS is recreated on the retry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.root]

IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"

CHILD = r"""
import json, sys
from fipstop.ips.actions import OK, BanJob, Nft

out = {}
n = Nft("inet:fipstop:banned")  # auto: libnftables
out["backend"] = n.backend
# the table deleted under the IPS: one failed result, then setup again on the retry
out["first"] = n.ban([BanJob("j", "10.200.0.1", 1, 2, 5, 600.0)])
n.runner.run("delete table inet fipstop\n")
out["gone"] = n.ban([BanJob("j", "10.200.0.1", 1, 2, 5, 600.0)])
out["again"] = n.ban([BanJob("j", "10.200.0.1", 1, 2, 5, 600.0)])
v4 = [f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}" for i in range(1500)]
jobs = [BanJob("j", ip, 1, 2, 5, 600.0) for ip in v4] + [BanJob("j", "2001:db8::9", 1, 2, 5, 600.0),
                                                          BanJob("j", "198.18.7.0/24", 1, 2, 5, 600.0)]
res = n.ban(jobs[:700]) + n.ban(jobs[700:])
out["ok"] = sum(r == OK for r in res)
# family ip has no IPv6 set: the whole transaction fails and the IPv4 address beside it is not added
m = Nft("ip:fips4:banned", backend="lib")
bad = m.ban([BanJob("j", "203.0.113.5", 1, 2, 5, 600.0), BanJob("j", "2001:db8::66", 1, 2, 5, 600.0)])
out["bad"] = bad
print(json.dumps(out))
"""


@pytest.fixture
def netns() -> Iterator[str]:
    if not (os.path.exists(IP) and os.path.exists(NFT)):
        pytest.skip("ip (iproute2) and nft (nftables) are needed")
    try:
        from fipstop.ips.nftlib import LibNft

        LibNft().close()
    except OSError as exc:
        pytest.skip(f"libnftables does not load: {exc}")
    name = f"fipstop-test-{uuid.uuid4().hex[:8]}"
    r = subprocess.run([IP, "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run([IP, "netns", "del", name], capture_output=True)


def elements(ns: str, family: str, table: str, set_: str) -> list[str]:
    r = subprocess.run([IP, "netns", "exec", ns, NFT, "-j", "list", "set", family, table, set_],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return []
    (s,) = [x["set"] for x in json.loads(r.stdout)["nftables"] if "set" in x]
    out = []
    for e in s.get("elem", []):
        v = e["elem"]["val"] if isinstance(e, dict) and "elem" in e else e
        if isinstance(v, dict) and "prefix" in v:
            v = f"{v['prefix']['addr']}/{v['prefix']['len']}"
        out.append(v)
    return out


def test_libnftables_bans_exactly_once_and_reports_failures(netns: str) -> None:
    host_before = subprocess.run([NFT, "list", "tables"], capture_output=True, text=True).stdout
    r = subprocess.run([IP, "netns", "exec", netns, sys.executable, "-c", CHILD], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "libnftables"
    assert out["ok"] == 1502
    # the oracle: the kernel's set, read by the nft binary
    v4 = elements(netns, "inet", "fipstop", "banned")
    want = {f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}" for i in range(1500)} | {"10.200.0.1"}
    assert len(v4) == len(set(v4)) == 1501 and set(v4) == want
    assert elements(netns, "inet", "fipstop", "banned6") == ["2001:db8::9"]
    assert elements(netns, "inet", "fipstop", "banned_net") == ["198.18.7.0/24"]
    (b1, b2) = out["bad"]
    assert b1 == b2 and b1.startswith("nft exit 1: Error:") and "\n" not in b1
    assert elements(netns, "ip", "fips4", "banned") == []  # all or nothing
    assert out["gone"][0].startswith("nft exit 1") and "No such file" in out["gone"][0]
    assert out["first"] == out["again"] == ["ok"]
    rules = subprocess.run([IP, "netns", "exec", netns, NFT, "list", "chain", "inet", "fipstop", "input"],
                           capture_output=True, text=True).stdout
    assert "ip saddr @banned drop" in rules and "ip6 saddr @banned6 drop" in rules
    assert subprocess.run([NFT, "list", "tables"], capture_output=True, text=True).stdout == host_before


def test_bench_nft_applies_every_ban_exactly_once(tmp_path) -> None:
    """`fipstop bench nft` (small): every back-end's set ends with exactly the bans it was given."""
    if not os.path.exists(NFT):
        pytest.skip("nft (nftables) is needed")
    out = tmp_path / "nft.json"
    r = subprocess.run([sys.executable, "-m", "fipstop", "bench", "nft", "--bans", "300", "--rounds", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["all_exactly_once"] and len(doc["runs"]) == 8
    for run in doc["runs"]:
        assert run["in_set"] == run["bans"] == run["jobs_to_nft"] == 300 and run["failures"] == 0
        assert run["reaction_ms"]["count"] == 300
    assert {run["via"] for run in doc["runs"]} == {"nft -f", "libnftables", "nft -i"}
