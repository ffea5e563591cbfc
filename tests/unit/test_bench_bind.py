"""``fipstop bench bind`` pure parts: dnsperf parsing, named.conf per mode,
the summary (ratios, disturbed rounds) and the targets.  No processes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from fipstop.bench.bind import dns, report
from fipstop.bench.bind.modes import ALL_MODES, BindConfig, Run
from fipstop.bench.bind.run import Bench

DNSPERF_OUT = """\
DNS Performance Testing Tool
Version 2.10.0

[Status] Command line: dnsperf -s 127.0.0.1 -p 5353 -d queries.txt -l 10 -c 8 -T 2 -q 200
[Status] Sending queries (to 127.0.0.1:5353)
[Status] Started at: Mon Nov 30 10:00:00 2026
[Status] Stopping after 10.000000 seconds
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         218934
  Queries completed:    218900 (99.98%)
  Queries lost:         34 (0.02%)

  Response codes:       NOERROR 197010 (90.00%), NXDOMAIN 21890 (10.00%)
  Average packet size:  request 35, response 51
  Run time (s):         10.002
  Queries per second:   21885.622875

  Average Latency (s):  0.009016 (min 0.000021, max 0.031004)
  Latency StdDev (s):   0.002337
"""


def test_parse_dnsperf() -> None:
    r = dns.parse_dnsperf(DNSPERF_OUT)
    assert r is not None
    assert r["queries_sent"] == 218934
    assert r["queries_completed"] == 218900
    assert r["queries_lost"] == 34
    assert r["qps"] == pytest.approx(21885.622875)
    assert r["run_time_s"] == pytest.approx(10.002)
    assert r["latency_avg_s"] == pytest.approx(0.009016)
    assert r["rcodes"] == {"NOERROR": 197010, "NXDOMAIN": 21890}


def test_parse_dnsperf_rejects_a_failed_run() -> None:
    assert dns.parse_dnsperf("[Fatal] invalid port\n") is None


@pytest.mark.parametrize("mode", ALL_MODES)
def test_named_conf_differs_only_in_query_logging(mode: str, tmp_path: Path) -> None:
    conf = dns.named_conf(mode, tmp_path, 15353, tmp_path / "z.zone")
    assert "listen-on port 15353 { 127.0.0.1; };" in conf
    assert "listen-on-v6 { none; };" in conf
    assert "recursion no;" in conf
    assert "controls { };" in conf  # no rndc listener on 953 to collide with
    assert "category default { main; };" in conf
    q = re.search(r"category queries \{ (\w+); \};", conf)
    assert q is not None
    if mode in ("none", "none_native"):
        assert "querylog no;" in conf and q.group(1) == "null"
        assert "dnstap" not in conf
    elif mode == "dnstap":
        assert "querylog no;" in conf and q.group(1) == "null"
        assert "dnstap { auth query; };" in conf
        assert f'dnstap-output unix "{tmp_path}/dnstap.sock";' in conf
    elif mode == "file":
        assert "querylog yes;" in conf and q.group(1) == "qfile"
        assert f'file "{tmp_path}/queries.log"' in conf
    else:
        assert "querylog yes;" in conf and q.group(1) == "qsyslog"
        assert "syslog daemon; severity info;" in conf


def test_queries_file_has_nxdomain_names(tmp_path: Path) -> None:
    info = dns.write_queries(tmp_path / "q.txt", n=100)
    lines = (tmp_path / "q.txt").read_text().splitlines()
    assert len(lines) == 100 == info["lines"]
    nx = [ln for ln in lines if ln.startswith("nx")]
    assert len(nx) == info["nxdomain_lines"] == 10
    assert all(re.fullmatch(r"(h\d+|nx\d+)\.example\.test A", ln) for ln in lines)


def _run(mode: str, rnd: int, qps: float, *, disturbed: bool = False, **kw) -> Run:
    r = Run(mode=mode, round=rnd, qps=qps, queries_completed=int(qps * 10), queries_sent=int(qps * 10) + 5,
            disturbed=disturbed, **kw)
    return r


def test_summary_ratios_pair_rounds_and_skip_disturbed() -> None:
    runs = [
        _run("none", 0, 20000.0), _run("fips", 0, 19000.0),
        _run("none", 1, 10000.0, disturbed=True), _run("fips", 1, 9000.0),
        _run("none", 2, 22000.0), _run("fips", 2, 22000.0),
    ]
    res = {r["mode"]: r for r in report.summarize(("none", "fips"), runs)}
    f = res["fips"]
    assert f["status"] == "ok"
    assert f["ratio_by_round"] == [0.95, 0.9, 1.0]
    assert f["ratio_rounds_used"] == [0, 2]  # round 1's baseline was disturbed
    assert f["ratio_to_none"] == pytest.approx(0.975)
    assert res["none"]["rounds_disturbed"] == [1]
    assert res["none"]["qps"] in (20000.0, 22000.0)  # median of the calm rounds


def test_summary_reports_a_failed_mode() -> None:
    runs = [_run("none", 0, 20000.0), Run(mode="syslog", round=0, status="skipped", reason="no rsyslogd")]
    res = {r["mode"]: r for r in report.summarize(("none", "syslog"), runs)}
    assert res["syslog"]["status"] == "skipped"
    assert res["syslog"]["skip_reason"] == "no rsyslogd"
    assert res["syslog"]["qps"] is None


def test_targets() -> None:
    ring_ok = {"records_committed": 9000, "records_dropped": 191100}
    runs = [
        _run("none", 0, 20000.0),
        _run("fips", 0, 19500.0, log_lines=195000, logged_per_answered=1.0,
             ring={"records_committed": 195000, "records_dropped": 0}, consumer={"lost": 0}),
        _run("fips_nocons", 0, 18000.0, ring=ring_ok, ring_load=ring_ok),
    ]
    ts = {t["name"]: t for t in report.targets(report.summarize(("none", "fips", "fips_nocons"), runs))}
    assert ts["fips_with_consumer_qps_vs_none"]["pass"] is True
    assert ts["fips_with_consumer_qps_vs_none"]["measured"] == pytest.approx(0.975)
    assert ts["fips_with_consumer_logged_vs_answered"]["pass"] is True
    assert ts["fips_no_consumer_qps_vs_none"]["pass"] is False  # 90 %
    acc = ts["fips_no_consumer_drops_counted"]
    assert acc["measured"] == pytest.approx(200100 / 180000, rel=1e-5) and acc["pass"] is True


def test_ratio_to_the_no_op_syslog_floor() -> None:
    runs = [_run("none", 0, 20000.0), _run("null_syslog", 0, 16000.0), _run("fips", 0, 15200.0)]
    res = {r["mode"]: r for r in report.summarize(("none", "null_syslog", "fips"), runs)}
    assert res["fips"]["ratio_to_none"] == pytest.approx(0.76)
    assert res["fips"]["ratio_to_null_syslog"] == pytest.approx(0.95)
    ts = {t["name"]: t for t in report.targets(list(res.values()))}
    t = ts["fips_with_consumer_qps_vs_null_syslog"]
    assert t["measured"] == pytest.approx(0.95) and t["pass"] is None and t["target"] == "informational"
    floor = ts["null_syslog_qps_vs_none"]
    assert floor["measured"] == pytest.approx(0.8) and floor["pass"] is None


def test_targets_without_fips_runs_are_not_applicable() -> None:
    ts = report.targets(report.summarize(("none",), [_run("none", 0, 1.0)]))
    assert all(t["pass"] is None and t["measured"] is None for t in ts)


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        Bench(BindConfig(modes=("none", "bogus"), shm_dir=str(tmp_path)))


def test_cli_wires_bench_bind() -> None:
    from fipstop.commands import bench as cli

    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    cli.register(sub)
    args = p.parse_args(["bench", "bind", "--quick", "--seconds", "1", "--json", "--out", "x.json"])
    assert args.func is cli.run_bind
    assert args.quick and args.json and args.seconds == 1.0 and args.out == "x.json"
