"""The statistics of ``fipstop bench profile`` (pure): ratio interval and
the <= 5 % drop verdict."""

from __future__ import annotations

import pytest

from fipstop.bench.profile import judge, ratio_stats, render_table, t975


def test_ratio_stats_mean_ci_and_drop() -> None:
    s = ratio_stats([0.98, 1.0, 0.99, 0.97])
    assert s["n"] == 4 and s["mean"] == pytest.approx(0.985)
    lo, hi = s["ci95"]
    assert lo < 0.985 < hi and hi - lo < 0.05
    assert s["drop_pct"] == pytest.approx(1.5)
    assert s["drop_ci95_pct"] == [pytest.approx((1 - hi) * 100, abs=0.01), pytest.approx((1 - lo) * 100, abs=0.01)]
    one = ratio_stats([0.9])
    assert one["ci95"] is None and one["drop_pct"] == pytest.approx(10.0)
    assert ratio_stats([])["mean"] is None


def test_judge() -> None:
    assert judge(ratio_stats([0.99, 0.995, 0.985, 0.99])) == (True, True)
    assert judge(ratio_stats([0.80, 0.81, 0.79])) == (False, True)
    passed, conclusive = judge(ratio_stats([0.9, 1.1]))
    assert passed is True and conclusive is False
    assert judge(ratio_stats([])) == (None, False)


def test_t_table() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(5) == pytest.approx(2.571)
    assert t975(11) == pytest.approx(2.179)
    assert t975(1000) == pytest.approx(1.96)


def test_table_renders_skips_and_verdicts() -> None:
    doc = {
        "params": {"rounds": 2, "seconds_per_run": 1.0}, "machine": {"nproc": 2}, "notes": ["n1"],
        "results": [
            {"variant": "none", "status": "ok", "ops_per_s_median": 1000.0},
            {"variant": "bpf", "status": "ok", "ops_per_s_median": 990.0, "ratio": ratio_stats([0.99, 0.99])},
            {"variant": "threads", "status": "skipped", "reason": "no ThreadSampler"},
        ],
        "targets": [{"id": "drop_bpf", "passed": True, "conclusive": True},
                    {"id": "drop_threads", "passed": None, "conclusive": False}],
    }
    text = render_table(doc)
    assert "bpf" in text and "pass" in text and "skipped: no ThreadSampler" in text and "note: n1" in text
