"""`fipstop bench ui` is wired next to `ring` and its in-process part runs."""

from __future__ import annotations

import asyncio

from fipstop import cli


def test_bench_ui_is_registered() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "ui", "--quick", "--json", "--out", "/tmp/x.json"])
    assert args.func.__name__ == "run_ui" and args.quick and args.json
    args = parser.parse_args(["bench", "ring", "--quick"])
    assert args.func.__name__ == "run_ring"


def test_frame_sort_filter_measurement_runs() -> None:
    from fipstop.bench.ui import _frames

    res = asyncio.run(_frames(64, 3))
    assert res["rings"] == 64 and res["rows_in_table"] == 64
    for key in ("derive_ms", "update_ms", "render_ms", "frame_ms", "sort_ms", "filter_ms", "frame_cpu_ms"):
        assert res[key]["n"] > 0 and res[key]["median"] >= 0


def test_mean_interval_and_verdict() -> None:
    import pytest

    from fipstop.bench.results import mean_ci
    from fipstop.bench.ui_ab import ab_verdict as _ab_verdict

    m, lo, hi = mean_ci([1.0, 0.98, 1.02, 1.0])
    assert m == pytest.approx(1.0) and lo < 1.0 < hi
    assert _ab_verdict({"status": "ok", "ratio": 0.999, "ratio_ci95": [0.995, 1.003]}) == "pass"
    assert _ab_verdict({"status": "ok", "ratio": 0.95, "ratio_ci95": [0.94, 0.96]}) == "fail"
    assert _ab_verdict({"status": "ok", "ratio": 0.995, "ratio_ci95": [0.97, 1.02]}).startswith("inconclusive")
    assert _ab_verdict({"status": "skipped"}) == "skipped"


def test_producer_ab_with_the_app_stopped_and_running() -> None:
    """The real A/B on a tiny scale: monitor_ab in 'stop' mode pauses and
    resumes the real dashboard attached to its domain; every pair is timed
    and the app reports frames it drew while running."""
    from fipstop.bench.ui_ab import producer_ab as _producer_ab

    res = _producer_ab(4, 0.2, pty=False)
    assert res["status"] == "ok", res
    assert len(res["pairs_detail"]) == 4
    assert all(p["without_records_per_s"] > 0 and p["with_app_records_per_s"] > 0 for p in res["pairs_detail"])
    lo, hi = res["ratio_ci95"]
    assert lo <= res["ratio"] <= hi
    assert res["app"]["frames"] >= 1 and res["app"]["rings"] == 1


def test_frame_measurement_runs_grouped() -> None:
    """The bench's grouped run (F5, by process): 64 rings of 8 processes, a group row each."""
    from fipstop.bench.ui import _frames

    res = asyncio.run(_frames(64, 3, group="process"))
    assert res["grouped_by"] == "process" and res["rows_in_table"] == 64 + 8
    assert res["frame_ms"]["n"] > 0
