"""``fipstop bench profile`` runs end to end (short) and reports every
variant's ratio or why it could not run.  No performance assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.root, pytest.mark.bpf]


def test_bench_profile_quick(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (the bpf variant)")
    out = tmp_path / "profile.json"
    r = subprocess.run([sys.executable, "-m", "fipstop", "bench", "profile", "--quick", "--json",
                        "--variants", "bpf,threads", "--seconds", "0.5", "--out", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc == json.loads(out.read_text())
    assert doc["bench"] == "profile" and doc["schema"] == 1
    assert "bench profile" in doc["command"]
    by = {e["variant"]: e for e in doc["results"]}
    assert set(by) == {"none", "bpf", "threads"}, "the baseline is added to the run"
    assert len([x for x in doc["runs"] if x["variant"] == "none"]) == 2
    for v in ("bpf", "threads"):
        e = by[v]
        if e["status"] == "ok":
            assert e["baseline"] == "none" and len(e["ratios"]) == 2
            assert e["ratio"]["n"] >= 1 and e["ratio"]["drop_pct"] is not None
            t = next(t for t in doc["targets"] if t["id"] == f"drop_{v}")
            assert t["target"] == 5.0 and t["passed"] in (True, False)
        else:
            assert e.get("reason"), e
    for run in doc["runs"]:
        if run["status"] == "ok":
            assert run["ops_per_s"] > 0 and "others_cores" in run
    bpf_runs = [x for x in doc["runs"] if x["variant"] == "bpf" and x["status"] == "ok"]
    for x in bpf_runs:
        assert x["profiler_start_s"] > 0 and "bpf_lost_totals" in x
