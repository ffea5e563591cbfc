"""``fipstop bench ring`` in a tiny mode: schema and completeness, never timing.

The run builds the C harness with cc (when there is one), runs every case for
0.05 s and checks that each (case, size) reports its numbers or says why it
was skipped.  Targets are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from fipstop.bench import ring

NUMBERS = ("records_per_s", "attempted_per_s", "ns_per_record_p50", "ns_per_record_p99", "drops")


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("bench")
    shm = tmp / "shm"
    shm.mkdir()
    out = tmp / "ring.json"
    args = argparse.Namespace(json=False, quick=True, out=str(out), shm_dir=str(shm), duration=0.05)
    mp = pytest.MonkeyPatch()
    mp.setenv(ring.ENV_DURATION, "0.05")
    try:
        rc = ring.main(args)
    finally:
        mp.undo()
    assert rc == 0
    assert out.is_file()
    # the private domain directory the bench made inside shm_dir is gone
    assert list(shm.iterdir()) == []
    return json.loads(out.read_text()), str(tmp)


def test_top_level_schema(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    assert doc["bench"] == "ring"
    assert doc["schema"] == ring.SCHEMA
    assert isinstance(doc["command"], str) and doc["command"]
    assert doc["date"].endswith("Z")
    for key in ("hostname", "kernel", "cpu_model", "nproc", "python"):
        assert key in doc["machine"]
    p = doc["params"]
    assert p["duration_s_per_case"] == pytest.approx(0.05)
    assert p["sizes_bytes"] == [64, 128, 256]
    assert "latency_method" in p and "pinning" in p
    assert isinstance(doc["results"], list) and isinstance(doc["targets"], list)


def test_every_case_reports_numbers_or_a_reason(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    seen = {(r["case"], r["size_bytes"]) for r in doc["results"]}
    assert seen == {(c, s) for c in ring.CASES for s in ring.SIZES}
    for r in doc["results"]:
        where = f"{r['case']} {r['size_bytes']} B"
        assert r["status"] in ("ok", "skipped", "error"), where
        if r["status"] == "ok":
            for k in NUMBERS:
                assert _is_num(r[k]), f"{where}: {k}={r[k]!r}"
            assert r["records_per_s"] > 0, where
            assert r["skip_reason"] is None, where
        else:
            assert isinstance(r["skip_reason"], str) and r["skip_reason"].strip(), where
            assert "\n" not in r["skip_reason"], where


def test_ratios_are_consistent(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    by = {(r["case"], r["size_bytes"]): r for r in doc["results"]}
    for size in ring.SIZES:
        fc, none = by[("fips_c", size)], by[("none", size)]
        for r in (by[(c, size)] for c in ring.CASES):
            if r["status"] != "ok":
                continue
            if fc["status"] == "ok":
                assert r["fips_c_over_case"] == pytest.approx(fc["records_per_s"] / r["records_per_s"])
            if none["status"] == "ok":
                assert r["case_over_none"] == pytest.approx(r["records_per_s"] / none["records_per_s"])


def test_monitor_measurements_and_targets(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    names = [m["name"] for m in doc["monitor"]]
    assert names == ["monitor_snapshot_1024_rings", "monitor_overhead_10hz", "monitor_overhead_isolated"]
    for m in doc["monitor"]:
        assert m["status"] in ("ok", "skipped", "error")
        if m["status"] != "ok":
            assert m["skip_reason"]
    snap, ab, iso = doc["monitor"]
    if iso["status"] == "ok":
        for k in ("10hz", "back_to_back"):
            r = iso[k]
            assert len(r["pair_ratios"]) == iso["pairs"]
            lo, hi = r["ratio_ci95"]
            assert lo <= r["ratio_median"] <= hi
    if snap["status"] == "ok" and snap["c"].get("status") == "ok":
        assert _is_num(snap["c"]["us_p50"]) and _is_num(snap["c"]["us_p99"])
        assert snap["c"]["active_rings"] == ring.SNAP_RINGS
    if ab["status"] == "ok":
        assert len(ab["pair_ratios"]) == ab["pairs"]
        assert _is_num(ab["ratio_median"])
    ids = {t["id"] for t in doc["targets"]}
    assert ids == {
        "fips_c_rate",
        "fips_c_vs_syslog",
        "python_log_rate",
        "python_log_batch_rate",
        "snapshot_1024_rings_c",
        "snapshot_1024_rings_python",
        "monitor_overhead_10hz",
    }
    for t in doc["targets"]:
        assert t["op"] in (">=", "<=")
        assert t["passed"] in (True, False, None)
        if t["passed"] is None:  # not measured, or measured but not decided by its interval
            assert t["reason"]
        else:
            assert _is_num(t["measured"])


def test_table_renders(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    text = ring.render_table(doc)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["case", "size", "rec/s"]
    assert "targets (issue #2):" in text
    # one table row per (case, size)
    rows = [ln for ln in lines[2:] if ln.split() and ln.split()[0] in ring.CASES]
    assert len(rows) == len(ring.CASES) * len(ring.SIZES)


def test_targets_pure() -> None:
    ok = dict(status="ok", ns_per_record_p50=1.0, ns_per_record_p99=2.0, drops=0)
    results = ring._add_ratios(
        [
            ring.CaseResult(case="none", size_bytes=128, records_per_s=40e6, **ok),
            ring.CaseResult(case="fips_c", size_bytes=128, records_per_s=25e6, **ok),
            ring.CaseResult(case="syslog", size_bytes=128, records_per_s=0.25e6, **ok),
            ring.CaseResult(case="fips_python", size_bytes=128, status="skipped", skip_reason="no binding"),
        ]
    )
    by = {r.case: r for r in results}
    assert by["syslog"].fips_c_over_case == pytest.approx(100.0)
    assert by["fips_c"].case_over_none == pytest.approx(0.625)
    snap = {
        "status": "ok",
        "c": {"status": "ok", "us_p99": 1500.0},
        "python": {"status": "skipped", "skip_reason": "x"},
    }
    ab = {"status": "ok", "change_pct": -0.4}
    t = {x.id: x for x in ring._targets(results, snap, ab)}
    assert t["fips_c_rate"].passed is True
    assert t["fips_c_vs_syslog"].passed is True and t["fips_c_vs_syslog"].measured == pytest.approx(100.0)
    assert t["python_log_rate"].passed is None and "no binding" in t["python_log_rate"].reason
    assert t["python_log_batch_rate"].passed is None
    assert t["snapshot_1024_rings_c"].passed is False
    assert t["snapshot_1024_rings_python"].passed is None
    assert t["monitor_overhead_10hz"].passed is True


def test_record_matches_the_c_harness() -> None:
    for size in ring.SIZES:
        rec = ring._record_bytes(size, 0x2A)
        assert len(rec) == size
        assert rec.startswith(b"bench ring seq=000000000000002a ")
        assert rec.endswith(b"x\n")


def test_missing_source_tree_is_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ring, "HARNESS_SRC", tmp_path / "nope.c")
    binary, why, _ = ring.build_harness(tmp_path)
    assert binary is None and "not found" in why


def test_median_ci_brackets_the_median() -> None:
    med, lo, hi = ring.median_ci([1.0, 0.9, 1.1, 1.05, 0.95, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.0, 1.04, 0.96, 1.0])
    assert lo <= med <= hi and med == 1.0
    assert ring.median_ci([2.0]) == (2.0, 2.0, 2.0)
