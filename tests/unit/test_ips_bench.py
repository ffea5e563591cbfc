"""`fipstop bench ips --quick` runs end to end and writes its JSON (numbers are not asserted)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fipstop.cli import main

pytestmark = pytest.mark.slow


def test_bench_ips_quick(shm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "ips.json"
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert main(["bench", "ips", "--quick", "--json", "--attackers", "512", "--nice", str(nice), "--out",
                 str(out)]) == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == nice
    doc = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == doc
    assert doc["bench"] == "ips" and doc["quick"] is True and doc["nice"] == nice and isinstance(doc["command"], str)
    thr = doc["throughput"]
    for k in ("fipstop", "fipstop_named_refused_nomatch", "naive_python"):
        assert thr[k]["lines"] >= 30_000 and thr[k]["lines_per_cpu_s"] > 0
    assert thr["fipstop"]["matched"] == thr["fipstop"]["lines"]  # every query line matched the rate jail
    tb = doc["time_to_ban"]
    assert tb["fipstop"]["bans"] == 512 and tb["fipstop"]["reaction_ms"]["count"] == 512
    assert tb["naive_python"]["attackers"] == 512
    assert [t["name"] for t in doc["targets"]] == ["lines_per_cpu_s_one_core_one_jail",
                                                    "reaction_p99_ms_512_attackers",
                                                    "bind_query_rate_vs_previous",
                                                    "bind_named_refused_nomatch_vs_previous",
                                                    "dated_file_lines_per_cpu_s"]
    mv = thr["matcher_vs_previous"]
    assert len(mv["previous_rev"]) == 40, mv  # built from git in the same run
    for k in ("bind_query_rate", "bind_named_refused_nomatch", "dated_file_query_rate"):
        assert mv[k]["previous"]["lines_per_cpu_s"] > 0 and mv[k]["current"]["lines_per_cpu_s"] > 0
    assert mv["dated_file_query_rate"]["current"]["matched"] > 0  # dates are cut out: dated lines match
    assert list(shm_dir.iterdir()) == []  # the bench removed its domains
