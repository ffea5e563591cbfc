"""``fipstop bench ring`` in a tiny mode: schema and completeness, never timing.

The run builds the C harness with cc (when there is one), runs every case for
0.05 s and checks that each (case, size) reports its numbers or says why it
was skipped.  Targets are reported, never asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop.bench.results import Output
from fipstop.bench.ring import children, keepup, monitors, report, spec
from fipstop.bench.ring.run import main as run_bench

NUMBERS = ("records_per_s", "attempted_per_s", "ns_per_record_p50", "ns_per_record_p99", "drops")


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("bench")
    shm = tmp / "shm"
    shm.mkdir()
    out = tmp / "ring.json"
    config = spec.RingConfig(Output(out=str(out), command="test"), quick=True, shm_dir=str(shm), duration=0.05)
    mp = pytest.MonkeyPatch()
    mp.setenv(spec.ENV_DURATION, "0.05")
    try:
        rc = run_bench(config)
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
    assert doc["schema"] == spec.SCHEMA
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
    assert seen == {(c, s) for c in spec.CASES for s in spec.SIZES}
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
    for size in spec.SIZES:
        fc, none = by[("fips_c", size)], by[("none", size)]
        for r in (by[(c, size)] for c in spec.CASES):
            if r["status"] != "ok":
                continue
            if fc["status"] == "ok":
                assert r["fips_c_over_case"] == pytest.approx(fc["records_per_s"] / r["records_per_s"])
            if none["status"] == "ok":
                assert r["case_over_none"] == pytest.approx(r["records_per_s"] / none["records_per_s"])


def test_monitor_measurements_and_targets(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    names = [m["name"] for m in doc["monitor"]]
    assert names[:3] == ["monitor_snapshot_1024_rings", "monitor_overhead_10hz", "monitor_overhead_isolated"]
    # fipstop on the FIPS paper's prototype, with its cases: with a reader, and the writer alone
    assert names[3:] in ([], ["fipsipc_attach_10hz", "fipsipc_attach_isolated_10hz"])
    for m in doc["monitor"]:
        assert m["status"] in ("ok", "skipped", "error")
        if m["status"] != "ok":
            assert m["skip_reason"]
    snap, ab, iso = doc["monitor"][:3]
    if iso["status"] == "ok":
        for k in ("10hz", "back_to_back"):
            r = iso[k]
            assert len(r["pair_ratios"]) == iso["pairs"]
            lo, hi = r["ratio_ci95"]
            assert lo <= r["ratio_median"] <= hi
    if snap["status"] == "ok" and snap["c"].get("status") == "ok":
        assert _is_num(snap["c"]["us_p50"]) and _is_num(snap["c"]["us_p99"])
        assert snap["c"]["active_rings"] == spec.SNAP_RINGS
    if ab["status"] == "ok":
        assert len(ab["pair_ratios"]) == ab["pairs"]
        assert _is_num(ab["ratio_median"])
    for m in doc["monitor"][3:]:
        if m["name"] == "fipsipc_attach_isolated_10hz" and m["status"] == "ok":
            assert len(m["pair_ratios"]) == m["pairs"]
            lo, hi = m["ratio_ci95"]
            assert lo <= m["ratio_median"] <= hi
    ids = {t["id"] for t in doc["targets"]}
    proto = {f"{lib}_vs_fipsipc_batch_{z}_{rg}" for lib in ("fips_c", "fips_c_batch") for z in (64, 128)
             for rg in ("fast", "slow")}
    issue21 = {f"{t}_{z}_{rg}" for t in ("delivered_vs_boost", "producer_ns_vs_boost", "faster_than_lttng")
               for z in spec.SIZES for rg in ("fast", "slow")} | {"keepup_128"}
    assert ids - proto - issue21 - {"fipsipc_attach_10hz", "fipsipc_attach_10hz_isolated"} == {
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
    text = report.render_table(doc)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["case", "size", "rec/s"]
    assert "targets (issue #2, issues 21 and 22):" in text
    # one table row per (case, size)
    rows = [ln for ln in lines[2:] if ln.split() and ln.split()[0] in spec.CASES]
    assert len(rows) == len(spec.CASES) * len(spec.SIZES)


def test_targets_pure() -> None:
    ok = dict(status="ok", ns_per_record_p50=1.0, ns_per_record_p99=2.0, drops=0)
    results = report.add_ratios(
        [
            spec.CaseResult(case="none", size_bytes=128, records_per_s=40e6, **ok),
            spec.CaseResult(case="fips_c", size_bytes=128, records_per_s=25e6, **ok),
            spec.CaseResult(case="syslog", size_bytes=128, records_per_s=0.25e6, **ok),
            spec.CaseResult(case="fips_python", size_bytes=128, status="skipped", skip_reason="no binding"),
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
    t = {x.id: x for x in report.targets(results, snap, ab)}
    assert t["fips_c_rate"].passed is True
    assert t["fips_c_vs_syslog"].passed is True and t["fips_c_vs_syslog"].measured == pytest.approx(100.0)
    assert t["python_log_rate"].passed is None and "no binding" in t["python_log_rate"].reason
    assert t["python_log_batch_rate"].passed is None
    assert t["snapshot_1024_rings_c"].passed is False
    assert t["snapshot_1024_rings_python"].passed is None
    assert t["monitor_overhead_10hz"].passed is True


def test_record_matches_the_c_harness() -> None:
    for size in spec.SIZES:
        rec = children.record_bytes(size, 0x2A)
        assert len(rec) == size
        assert rec.startswith(b"bench ring seq=000000000000002a ")
        assert rec.endswith(b"x\n")


def test_missing_source_is_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(children, "HARNESS_SRC", tmp_path / "nope.c")
    binary, why, _ = children.build_harness(tmp_path)
    assert binary is None and "not found" in why


def test_median_ci_brackets_the_median() -> None:
    med, lo, hi = monitors.median_ci([1.0, 0.9, 1.1, 1.05, 0.95, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0, 1.0, 1.04, 0.96, 1.0])
    assert lo <= med <= hi and med == 1.0
    assert monitors.median_ci([2.0]) == (2.0, 2.0, 2.0)


def test_prototype_cases_compare_with_libfips(tiny_run: tuple[dict, str]) -> None:
    """fipsipc / fipsipc_batch: numbers and the libfips counterpart's ratio, or a one-line reason."""
    doc, _ = tiny_run
    by = {(r["case"], r["size_bytes"]): r for r in doc["results"]}
    for size in spec.SIZES:
        for case, lib in (("fipsipc", "fips_c"), ("fipsipc_batch", "fips_c_batch")):
            r, lf = by[(case, size)], by[(lib, size)]
            if r["status"] == "ok" and lf["status"] == "ok":
                assert r["libfips_over_case"] == pytest.approx(lf["records_per_s"] / r["records_per_s"])
                assert r["delivered"] is not None and r["delivered"] <= r["attempted"]


def test_prototype_skipped_without_its_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fipstop.bench.ring.proto import run_fipsipc
    from fipstop.bench.ring.workspace import Workspace

    monkeypatch.setenv("FIPSIPC_SRC", str(tmp_path / "nowhere"))
    ws = Workspace(spec.RingConfig(quick=True, shm_dir=str(tmp_path), duration=0.05))
    try:
        r = run_fipsipc(ws, "fipsipc", 64)
    finally:
        ws.cleanup()
    assert r.status == "skipped" and "FIPS-IPC source not found" in (r.skip_reason or "")
    assert "FIPSIPC_SRC" in (r.skip_reason or "")


def test_prototype_attach_ab(tiny_run: tuple[dict, str]) -> None:
    doc, _ = tiny_run
    att = [m for m in doc["monitor"] if m["name"] == "fipsipc_attach_10hz"]
    for m in att:
        if m["status"] == "ok":
            assert len(m["pair_ratios"]) == m["pairs"] and _is_num(m["ratio_median"])
            if m["samples"]:
                assert _is_num(m["sample_us_p50"]) and m["sample_us_p50"] <= m["sample_us_p99"]
        else:
            assert m["skip_reason"] and "\n" not in m["skip_reason"]


def test_peers_and_regime_in_the_same_run(tiny_run: tuple[dict, str]) -> None:
    """Issue 21: the peers are cases of the run (numbers or a reason naming the package), every fips_c and
    peer row carries the cache-line round trip timed just before it, and the run states its regime."""
    doc, _ = tiny_run
    by = {(r["case"], r["size_bytes"]): r for r in doc["results"]}
    for case in spec.PEER_CASES:
        for size in spec.SIZES:
            r = by[(case, size)]
            if r["status"] == "ok":
                assert _is_num(r["delivered_per_s"]) and r["delivered"] + r["drops"] >= r["attempted"] * 0.999
            else:
                assert r["skip_reason"]
    g = doc["regime"]
    assert g["status"] in ("ok", "skipped")
    if g["status"] == "ok":
        assert g["round_trip_ns_min"] <= g["round_trip_ns_median"] <= g["round_trip_ns_max"]
        assert g["runs_fast"] + g["runs_slow"] >= len(doc["results"]) - sum(
            1 for r in doc["results"] if r["status"] == "skipped")
        assert by[("fips_c", 128)]["regime"] in ("fast", "slow")
    assert doc["keepup"] == []  # tiny mode: no keep-up search
    assert doc["keepup_stall_floor"] is None  # nor its stall floor


def test_keepup_search_bisects_to_the_boundary() -> None:
    """keepup.search against a consumer that keeps up below 7 M/s: the found rate passes, a failing one is
    within a bisection step above it, and every probe is listed."""

    def probe(rate: float) -> tuple[spec.CaseResult, dict]:
        n = int(rate)
        ok = rate < 7e6
        return (spec.CaseResult("fips_c", 128, "ok", attempted=n, delivered=n if ok else n // 2,
                                drops=0 if ok else n - n // 2, attempted_per_s=rate), {"round_trip_ns": 150.0,
                                                                                        "regime": "fast"})

    k = keepup.search("fips_c", 128, 40e6, probe, steps=8)
    assert k["status"] == "ok" and len(k["probes"]) == 8
    assert k["max_rate_asked"] < 7e6 <= k["lowest_failing_rate"]
    assert k["lowest_failing_rate"] / k["max_rate_asked"] < 1.6
    assert keepup.search("fips_c", 128, None, probe)["status"] == "skipped"
    # kept up unpaced: one probe
    assert len(keepup.search("fips_c", 128, 1e6, probe)["probes"]) == 1


def test_keepup_stall_ceiling() -> None:
    """The rate a ring survives a consumer gap at: bytes in the ring / (bytes a record takes x the gap).
    1 MiB of 128-byte records (152 bytes framed) over a 2 ms gap: 3.45 M/s; each probe that reports the
    consumer's longest gap carries its ceiling."""
    assert keepup.stall_ceiling(1 << 20, 128, 2e6) == pytest.approx((1 << 20) / 152 / 0.002)
    assert keepup.stall_ceiling(1 << 20, 61, 1e6) == pytest.approx((1 << 20) / (24 + 64) / 0.001)
    assert keepup.stall_ceiling(1 << 20, 128, None) is None and keepup.stall_ceiling(1 << 20, 128, 0) is None

    def probe(rate: float) -> tuple[spec.CaseResult, dict]:
        n = int(rate)
        return (spec.CaseResult("fips_c", 128, "ok", attempted=n, delivered=n, drops=0, attempted_per_s=rate,
                                drop_detail={"consumer_max_gap_ns": 2_000_000}), {})

    k = keepup.search("fips_c", 128, 1e6, probe, ring_capacity=1 << 20)
    assert k["probes"][0]["consumer_max_gap_ns"] == 2_000_000
    assert k["probes"][0]["stall_ceiling_per_s"] == pytest.approx(keepup.stall_ceiling(1 << 20, 128, 2e6))


def test_stall_probe_sees_the_time_a_competitor_takes(tmp_path: Path) -> None:
    """The stall floor (stall.py) is time the CPU was taken from a spinning thread: with a busy process
    pinned to the same CPU the probe loses a large share of its wall time in gaps of at least a
    scheduler slice, and the gap counts fall as the edges rise; alone, it loses a smaller share."""
    binary, why, _ = children.build_harness(tmp_path)
    if binary is None:
        pytest.skip(why or "no C harness")
    cpu = sorted(os.sched_getaffinity(0))[-1]

    def stall(seconds: float) -> dict:
        out = subprocess.run([str(binary), "stall", "--cpu", str(cpu), "--duration", f"{seconds:g}"],
                             capture_output=True, text=True, timeout=30, check=True)
        p = children.parse_json_lines(out.stdout)
        assert p is not None and p["role"] == "stall" and p["pin_ok"] is True
        counts = list(p["gaps_over"].values())
        assert counts == sorted(counts, reverse=True)
        assert 0 <= p["lost_ns"] <= p["wall_ns"] and p["max_gap_ns"] <= p["wall_ns"]
        return p

    # the competitor says when it is pinned, then spins: no race with its start-up on a loaded machine
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}}); "
                             "print('ready', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        shared = stall(1.0)
    finally:
        busy.kill()
        busy.wait()
    # CFS gives the competitor about half; the margins leave room for a CI machine's other weights
    assert shared["lost_ns"] >= 0.1 * shared["wall_ns"], shared
    assert shared["max_gap_ns"] >= 200_000, shared  # at least one slice went to it
    assert keepup.stall_ceiling(1 << 20, 128, shared["max_gap_ns"]) < (1 << 20) / 152 / 0.0002
    alone = stall(0.5)
    assert alone["lost_ns"] / alone["wall_ns"] < shared["lost_ns"] / shared["wall_ns"]
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:  # both CPUs probed at once, as stall.py runs it during a keep-up search
        out = subprocess.run([str(binary), "stall", "--cpu", str(cpus[-1]), "--cpu2", str(cpus[0]),
                              "--duration", "0.3"], capture_output=True, text=True, timeout=30, check=True)
        p = children.parse_json_lines(out.stdout)
        assert p is not None and p["cpu"] == cpus[-1] and p["other"]["cpu"] == cpus[0], p
        assert p["other"]["pin_ok"] is True and p["other"]["wall_ns"] >= 300_000_000
        assert 0 <= p["other"]["max_gap_ns"] <= p["other"]["wall_ns"]


def test_stall_ceiling_counts_each_case_framing() -> None:
    """libfips frames a record with a 24-byte header, 8-aligned; boost's queue holds bare fixed-size records."""
    assert keepup.stall_ceiling(1 << 20, 128, 1e6) == pytest.approx((1 << 20) / 152 / 1e-3)
    assert keepup.stall_ceiling(1 << 20, 128, 1e6, framed=False) == pytest.approx((1 << 20) / 128 / 1e-3)
    assert keepup.stall_ceiling(1 << 20, 128, None) is None


def test_keepup_floor_note_names_the_ceiling() -> None:
    """A keep-up target says what the run's stall floor leaves its ring, and nothing without a floor."""
    k = {"stall_floor_max_gap_ns": 800_000, "stall_floor_ceiling_per_s": 8.6e6}
    note = report._floor_note(k)
    assert "0.80 ms" in note and "8.6" in note
    assert report._floor_note({}) == ""


def test_ratios_are_taken_between_rounds_of_one_regime() -> None:
    """A case's rounds can fall in both regimes: each ratio is between the medians of the two cases'
    rounds in one regime, and unmeasured (with the reason) where one side has no round in it."""
    def case(name: str, rounds: list[tuple[float, str]]) -> spec.CaseResult:
        reps = [{"status": "ok", "delivered_per_s": v, "records_per_s": v, "ns_per_record_p50": 1e9 / v,
                 "regime": rg} for v, rg in rounds]
        return spec.CaseResult(case=name, size_bytes=64, status="ok", records_per_s=rounds[0][0],
                          delivered_per_s=rounds[0][0], reps=reps)

    f = case("fips_c", [(40e6, "fast"), (8e6, "slow"), (44e6, "fast")])
    b = case("boost_spsc", [(8e6, "slow"), (40e6, "fast"), (6e6, "slow")])
    fast, why = report.regime_ratio(f, b, "delivered_per_s", "fast")
    assert fast == pytest.approx(42e6 / 40e6) and "2 round(s) of fips_c, 1 of boost_spsc" in why
    slow, _ = report.regime_ratio(f, b, "delivered_per_s", "slow")
    assert slow == pytest.approx(8e6 / 7e6)
    inv, _ = report.regime_ratio(f, b, "ns_per_record_p50", "fast", invert=True)
    assert inv == pytest.approx((1e9 / 40e6) / report.regime_median(f, "ns_per_record_p50", "fast")[0])
    only_fast = case("lttng_ust", [(9e6, "fast")])
    none, why = report.regime_ratio(f, only_fast, "delivered_per_s", "slow")
    assert none is None and "no round of lttng_ust in the slow regime" in why
    ts = {t.id: t for t in report.issue21_targets([f, b, only_fast], [])}
    assert ts["delivered_vs_boost_64_fast"].passed is True and ts["delivered_vs_boost_64_slow"].passed is True
    assert ts["faster_than_lttng_64_slow"].measured is None and ts["faster_than_lttng_64_slow"].reason
