"""`fipstop bench attack`'s reading of the valid clients' series, against hand-built bins whose answers are known."""

from __future__ import annotations

import json

from fipstop.bench.attack import plot, report, series
from fipstop.bench.attack.fail2ban import read_marks
from fipstop.bench.attack.logscan import denied_times
from fipstop.bench.attack.netns import attacker_ip, is_attacker, valid_ips


def make(rates: list[float], start: float = -1.0, attack_s: float = 3.0, n: int = 200) -> series.Series:
    t = tuple(round(start + i * 0.1, 4) for i in range(len(rates)))
    return series.Series(0.1, t, tuple([n] * len(rates)), tuple(round(r * n) for r in rates), attack_s)


def test_from_valid_aligns_on_the_attack_and_drops_the_partial_last_bin():
    doc = {"t0_ns": 1_000_000_000, "bin_ms": 100, "sent": [10, 10, 10, 4], "answered": [10, 5, 9, 4]}
    s = series.from_valid(doc, attack_first_ns=1_100_000_000, attack_last_ns=1_300_000_000)
    assert s.t_s == (-0.1, 0.0, 0.1) and s.sent == (10, 10, 10) and s.answered == (10, 5, 9)
    assert s.attack_s == 0.2 and list(s.attack_bins()) == [1, 2]


def test_time_to_threshold_is_where_the_rate_stays_up_until_the_attack_ends():
    # 1 s before, then 1 s at 20 %, then 2 s at 100 %: recovered at 1.0 s
    s = make([1.0] * 10 + [0.2] * 10 + [1.0] * 20, attack_s=3.0)
    assert series.time_to(s, 0.995) == 1.0
    assert series.mean_before(s, 1.0) == 0.2
    assert series.baseline(s) == 1.0
    out = series.summarize(s)
    assert out["time_to_99_5_s"] == 1.0 and out["mean_response_before_99_5"] == 0.2
    assert out["mean_response_attack"] == round((10 * 0.2 + 20 * 1.0) / 30, 4)


def test_a_recovery_that_collapses_again_does_not_count():
    s = make([1.0] * 10 + [0.2] * 5 + [1.0] * 10 + [0.5] * 5 + [1.0] * 10, attack_s=3.0)
    # windows of 10 bins that include the 0.5 dip are below 99.5 %: recovered only after it
    assert series.time_to(s, 0.995) == 2.0


def test_never_reached_during_the_attack_is_none_and_never_hurt_is_zero():
    bad = make([1.0] * 10 + [0.3] * 30, attack_s=3.0)
    assert series.time_to(bad, 0.99) is None
    assert series.mean_before(bad, None) == 0.3
    assert series.summarize(bad)["time_to_99_s"] is None
    good = make([1.0] * 40, attack_s=3.0)
    assert series.time_to(good, 0.995) == 0.0


def test_a_noisy_single_bin_inside_a_good_window_is_averaged():
    # one bin at 96 % among nine at 100 %: the 1 s window holds 99.6 % >= 99.5 %
    s = make([1.0] * 10 + [0.0] * 10 + [0.96] + [1.0] * 19, attack_s=3.0)
    assert series.time_to(s, 0.995) == 1.0
    assert series.time_to(s, 0.999) == 1.1


def test_percentile_nearest_rank():
    assert series.percentile([], 0.5) is None
    v = [float(i) for i in range(1, 101)]
    assert series.percentile(v, 0.5) == 50.0 and series.percentile(v, 0.99) == 99.0
    assert series.percentile([7.0], 0.99) == 7.0


def test_addresses():
    assert attacker_ip(0) == "10.96.0.0" and attacker_ip(65535) == "10.96.255.255"
    assert attacker_ip(1 << 16) == "10.97.0.0"
    assert is_attacker("10.96.3.4") and not is_attacker("10.24.1.1") and not is_attacker("nonsense")
    assert valid_ips(2) == ["10.24.1.1", "10.24.1.2"] and not any(is_attacker(a) for a in valid_ips(64))


def test_log_scan_first_and_nth_denied_line(tmp_path):
    log = tmp_path / "query.log"
    lines = []
    for i in range(6):
        lines.append(f"02-Dec-2026 04:05:1{i}.1{i}0 client @0x7f 10.96.0.9#4000 (h1.example.test): query: "
                     "h1.example.test IN A +E(0) (10.24.0.1)")
        lines.append(f"02-Dec-2026 04:05:1{i}.1{i}0 client @0x7f 10.96.0.9#4000 (h1.example.test): query "
                     "(cache) 'h1.example.test/A/IN' denied")
    lines.append("02-Dec-2026 04:05:19.000 client @0x7f 10.24.1.1#53 (h1.example.test): query (cache) "
                 "'h1.example.test/A/IN' denied")
    lines.append("garbage denied")
    log.write_text("\n".join(lines) + "\n")
    times, total = denied_times(log, 5, is_attacker)
    assert total == 6 and set(times) == {"10.96.0.9"}
    first, fifth = times["10.96.0.9"]
    assert fifth is not None and fifth - first == 4 * 1_010_000_000  # .100 s -> 4 s later at .140 s
    assert denied_times(tmp_path / "missing.log", 5) == ({}, 0)


def test_fail2ban_marks(tmp_path):
    m = tmp_path / "bans.txt"
    m.write_text("1700000000.5 10.96.0.1\n1700000001.0 10.96.0.1\nbad line here\nx 10.96.0.2\n"
                 "1700000002.0 10.24.1.1\n")
    assert read_marks(m, is_attacker) == {"10.96.0.1": 1_700_000_000_500_000_000}
    assert read_marks(tmp_path / "none.txt", is_attacker) == {}


def _doc() -> dict:
    s = make([1.0] * 10 + [0.2] * 10 + [1.0] * 20, attack_s=3.0)
    run = {"label": "FIPS -> fipstop ips", "series": {"bin_s": 0.1, "t_s": list(s.t_s), "sent": list(s.sent),
                                                        "answered": list(s.answered)},
           **series.summarize(s), "attackers": 4, "attackers_banned": 4, "attack": {"rate_qps": 1000.0}}
    return {"runs": {"3s": {"fips": run, "fail2ban": {"label": "file -> Fail2Ban", "error": "boom <x>"}}},
            "ratios": {"3s": {}}, "params": {"attackers": 4, "skipped": {"crowdsec": "not installed"}},
            "targets": [{"name": "t", "target": ">= 5x", "measured": None, "ok": None, "note": "n"}],
            "machine": {"loadavg_at_end": [1.5]}, "date": "2026-12-02"}


def test_report_table_and_chart_show_the_figures():
    text = report.render_table(_doc())
    assert "time to 99.5 %" in text and "1.0 s" in text and "20.00 %" in text  # mean before recovery
    assert "fail2ban failed: boom <x>" in text and "crowdsec: skipped: not installed" in text
    assert "response rate" in text  # the plotext chart
    assert "target t: >= 5x, measured -: n/a (n)" in text


def test_report_shows_the_ips_reaction_split_and_dashes_without_it():
    """The two parts of fipstop ips's reaction come from its stats file; a run without them (an older JSON, an
    IPS that tells none) shows "-", never a 0."""
    doc = _doc()
    doc["runs"]["3s"]["fips"]["ips_stats"] = {"reaction_read_ms": {"count": 4, "p99": 12.5},
                                              "reaction_action_ms": {"count": 0, "p99": 0.0}}
    lines = report.render_table(doc).splitlines()
    read = next(ln for ln in lines if "its part: record -> read by the IPS" in ln)
    act = next(ln for ln in lines if "its part: handed to the action" in ln)
    whole = next(ln for ln in lines if "fipstop ips's own stats: reaction p99" in ln)
    assert whole.split()[-2:] == ["-", "failed"]  # no reaction_ms in these stats
    assert read.split()[-3:] == ["12.5", "ms", "failed"]  # fips, then the failed fail2ban column
    assert act.split()[-2:] == ["-", "failed"]


def test_svg_has_one_polyline_per_series_and_escapes_labels(tmp_path):
    doc = _doc()
    doc["runs"]["3s"]["fips"]["label"] = "a<b"
    svg = plot.svg(doc)
    assert svg.count("<polyline") == 1 and "a&lt;b" in svg and "99.5 % at 1.0 s" in svg
    p = tmp_path / "attack.json"
    p.write_text(json.dumps(doc))
    written = plot.write(doc, p)
    assert written[0].read_text() == svg
    assert "every IPS" not in svg
    doc["params"]["ips_scheduling"] = "SCHED_FIFO 10 (chrt -f) for fipstop ips, fail2ban-server, crowdsec and ..."
    assert "every IPS SCHED_FIFO 10; " not in plot.svg(doc) and "every IPS SCHED_FIFO 10<" in plot.svg(doc)


def test_ban_figures_from_known_ban_times():
    from fipstop.bench.attack.run import AttackConfig, Bench

    b = Bench(AttackConfig(attackers_log2=2))  # 4 attackers; nothing started until run()
    try:
        s = 1_000_000_000
        t0 = 100 * s
        # first offending record, maxretry-th record, ban in force
        bans = {"10.96.0.0": (t0, t0 + s // 2, t0 + s), "10.96.0.1": (t0 + s, t0 + 2 * s, t0 + 2 * s + s // 10)}
        f = b._ban_figures(bans, t0)
        assert f["attackers_banned"] == 2 and f["banned_share"] == 0.5
        assert f["ttb_ms"] == {"n": 2, "p50": 1000.0, "p99": 1100.0, "max": 1100.0}
        assert f["reaction_ms"]["p50"] == 100.0 and f["reaction_ms"]["max"] == 500.0
        assert f["last_ban_after_s"] == 2.1 and f["bans_per_s"] == round(2 / 2.1, 2)
        assert f["all_banned_estimate_s"] == round(4 / (2 / 2.1), 1)  # not all banned: an estimate
        bans.update({"10.96.0.2": (None, None, t0 + 3 * s), "10.96.0.3": (t0, None, t0 + 4 * s)})
        f = b._ban_figures(bans, t0)
        assert f["ttb_ms"]["n"] == 3 and f["reaction_ms"]["n"] == 2  # unknown first/trigger: left out, not 0
        assert f["all_banned_estimate_s"] == 4.0  # all banned: measured
    finally:
        b.cleanup()


def test_real_time_ipss_are_said_in_every_verdict():
    """--ips-rt runs every IPS under SCHED_FIFO: each target of such a run says so (its verdict is not one of the
    default set-up), and the params name the policy; a default run's targets say nothing of it."""
    from fipstop.bench.attack.run import AttackConfig, Bench

    fips = {"attackers_banned": 4, "records_dropped": 0, "reaction_ms": {"p99": 5.0}, "ttb_ms": {"p99": 9.0},
            "attack_length_s": 3.0, "time_to_99_5_s": 1.0}
    for rt in (None, 10):
        b = Bench(AttackConfig(attackers_log2=2, ips_rt=rt))
        try:
            doc = b.document({"3s": {"fips": fips}})
        finally:
            b.cleanup()
        notes = [t.get("note") or "" for t in doc["targets"]]
        assert notes and all(("every IPS SCHED_FIFO 10" in n) == (rt == 10) for n in notes)
        assert doc["params"]["ips_scheduling"].startswith("SCHED_FIFO 10" if rt else "SCHED_OTHER")


def test_bad_options_are_one_line_errors():
    import pytest

    from fipstop.bench.attack.run import AttackConfig, Bench
    from fipstop.errors import FipsError

    for cfg, what in ((AttackConfig(attackers_log2=21), "--attackers-log2"), (AttackConfig(lengths=(0.5,)),
                      "--lengths"), (AttackConfig(pipelines=("snort",)), "--pipelines")):
        with pytest.raises(FipsError, match=what):
            Bench(cfg)


def test_rolling_mean_weighs_by_queries():
    xs, ys = series.rolling([0.0, 0.1, 0.2, 0.3], [10, 0, 30, 10], [10, 0, 0, 10], n=2)
    # bin 1's window is bins 0-1: 10/10; bin 2's: 0/30; bin 3's: 10/40
    assert xs == [0.0, 0.1, 0.2, 0.3] and ys == [100.0, 100.0, 0.0, 25.0]
    assert series.rolling([0.0], [0], [0]) == ([], [])
