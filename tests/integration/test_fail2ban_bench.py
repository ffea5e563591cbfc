"""`fipstop bench ban --quick` runs end to end (real named, dnsperf, fail2ban-server, fipstop wrap + ips)
and writes its JSON; no performance figure is asserted here (targets are checked by the bench)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.slow]


def test_bench_ban_quick(tmp_path):
    for prog in ("named", "dnsperf", "fail2ban-server"):
        if shutil.which(prog) is None and not shutil.which(prog, path="/usr/sbin"):
            pytest.skip(f"{prog} not installed")
    out = tmp_path / "ban.json"
    r = subprocess.run([sys.executable, "-m", "fipstop", "bench", "ban", "--quick", "--attackers-log2", "5",
                        "--timeout", "40", "--json", "--out", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["kind"] == "ban" and doc["params"]["attackers"] == 32
    for side in ("fail2ban", "fips"):
        res = doc["results"][side]
        assert "error" not in res, res
        assert res["attack"]["sent"] == 32 * doc["params"]["burst"]
        assert 0 < res["attackers_banned"] <= 32
        assert res["ttb_ms"]["n"] == res["attackers_banned"]
        assert res["named_qps"] and res["named_qps"] > 0
    assert {t["name"] for t in doc["targets"]} >= {"fips bans every attacker"}
    assert json.loads(r.stdout)["kind"] == "ban"
