"""`fipstop bench attack --quick` end to end at a tiny scale (real named in a netns of its own, the spoofed flood
over veth, fipstop wrap + ips with nft, fail2ban-server with Debian's nftables action, no IPS): the JSON holds what
the run did, checked against what the test knows (the attackers it asked for, the queries the valid clients sent,
the nft elements the kernel holds); no performance figure is asserted (the bench checks its targets)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.slow]


def test_bench_attack_quick(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    for prog in ("named", "dig", "fail2ban-server", "nft", "ip"):
        if shutil.which(prog) is None and not shutil.which(prog, path="/usr/sbin"):
            pytest.skip(f"{prog} not installed")
    out = tmp_path / "attack.json"
    pipelines = "fips,fail2ban,crowdsec,none"
    r = subprocess.run([sys.executable, "-m", "fipstop", "bench", "attack", "--quick", "--attackers-log2", "8",
                        "--rate", "8000", "--lengths", "3", "--pipelines", pipelines, "--out", str(out), "--keep"],
                       capture_output=True, text=True, timeout=240)
    kept = re.search(r"kept (\S+)", r.stderr)
    try:
        check(r, out, pipelines, kept.group(1) if kept else None)
    finally:
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)


def check(r: subprocess.CompletedProcess, out, pipelines: str, kept: str | None) -> None:
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["kind"] == "attack" and doc["params"]["attackers"] == 256
    runs = doc["runs"]["3s"]
    skipped = doc["params"]["skipped"]
    for p in pipelines.split(","):
        if p in skipped:
            assert p == "crowdsec", skipped  # only CrowdSec may be missing, and then with a reason
            assert skipped[p]
            continue
        res = runs[p]
        assert "error" not in res, res
        # the flood ran for its length at about its rate, from the spoofed block
        assert 2.5 < res["attack"]["seconds"] < 4 and res["attack"]["sent"] > 0
        s = res["series"]
        # every bin counted is a query the valid clients sent; the partial last bin is left out
        assert 0 < sum(s["sent"]) <= res["valid"]["sent"] and all(0 <= a <= n for a, n in zip(s["answered"], s["sent"]))
        assert res["baseline_response"] is not None
        banned = res["attackers_banned"]
        assert res["ttb_ms"]["n"] <= banned <= 256
        if p == "none":
            assert banned == 0 and sum(res["nft_sets"].values()) == 0
        else:
            # a ban the IPS reports is an element the kernel holds (the drop rule is what makes it a ban)
            assert sum(res["nft_sets"].values()) >= banned > 0
    fips = runs["fips"]
    assert fips["nft_sets"].get("fipstop:banned", 0) >= fips["attackers_banned"]
    assert fips["records_dropped"] == 0 and fips["ips_stats"]["action"] == "nft"
    assert out.with_suffix(".svg").read_text().count("<polyline") == len(pipelines.split(",")) - len(skipped)
    assert "valid clients' response rate" in r.stdout  # the plotext chart
    if "crowdsec" not in skipped and kept:
        # the Bans panel's CrowdSec source, on the database of the run: every address the bouncer put in the nft set
        # (what the bench counted as banned) is a decision the probe reads, with its alert's times
        from fipstop.probes.crowdsec import CrowdSecProbe

        marks = {ln.split()[1] for ln in open(os.path.join(kept, "crowdsec-3s", "crowdsec", "bans.txt"))
                 if ln.strip()}
        sample = CrowdSecProbe(os.path.join(kept, "crowdsec-3s", "crowdsec", "data", "crowdsec.db")).sample()
        assert sample.unavailable == "", sample.unavailable
        ips = {e.ip for e in sample.events}
        assert len(marks) == runs["crowdsec"]["attackers_banned"] and marks <= ips
        assert all(e.first_ns <= e.trigger_ns <= e.ban_ns for e in sample.events)
