"""``fipstop bench bind --quick --seconds 1``: every mode runs against a real
named and the JSON has the documented shape.  No timing asserts: the numbers
of a 1-second run on a shared machine mean nothing; that they are there and
consistent does."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fipstop.bench.bind import modes
from fipstop.bench.bind.procs import find_program

pytestmark = [pytest.mark.integration, pytest.mark.root]


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    for prog in ("named", "dnsperf"):
        if find_program(prog) is None:
            pytest.skip(f"{prog} not installed (apt-get install bind9 dnsperf)")
    tmp = tmp_path_factory.mktemp("benchbind")
    shm = tmp / "shm"
    shm.mkdir()
    out = tmp / "bind.json"
    exe = Path(sys.executable).parent / "fipstop"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "fipstop"]
    argv += ["--shm-dir", str(shm), "bench", "bind", "--quick", "--seconds", "1", "--json", "--out", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    assert json.loads(r.stdout) == d  # --json prints the same document
    assert list(shm.iterdir()) == []  # the bench's private domain dir is gone
    return d


def test_top_level(doc: dict) -> None:
    assert doc["bench"] == "bind"
    assert doc["schema"] == modes.SCHEMA
    assert "bench bind" in doc["command"] and "--seconds 1" in doc["command"]
    assert doc["date"].endswith("Z")
    m = doc["machine"]
    for k in ("hostname", "kernel", "cpu_model", "nproc", "loadavg_at_start", "loadavg_at_end"):
        assert k in m, k
    p = doc["params"]
    assert p["seconds_per_mode"] == 1.0 and p["rounds"] == 1
    assert p["modes"] == list(modes.MODES)
    assert p["dnsperf_command"].split()[1:] == [
        "-s", "127.0.0.1", "-p", "PORT", "-d", "TMP/queries.txt", "-l", "1", "-c", "8", "-T", "2", "-q", "200",
    ]
    assert p["named_command"].endswith("-f -c CONF -n 2")
    assert p["versions"]["named"].startswith("BIND 9")
    assert set(doc["reference"]) >= {"none", "file", "syslog"}


def test_every_mode_reports_numbers_or_a_reason(doc: dict) -> None:
    by = {r["mode"]: r for r in doc["results"]}
    assert list(by) == list(modes.MODES)
    for mode, r in by.items():
        assert r["status"] in ("ok", "skipped", "error"), mode
        if r["status"] != "ok":
            assert isinstance(r["skip_reason"], str) and r["skip_reason"].strip(), mode
            continue
        for k in ("qps", "ratio_to_none", "queries_answered", "queries_sent", "named_cpu_cores"):
            assert _num(r[k]), f"{mode}: {k}={r[k]!r}"
        assert r["qps"] > 0 and r["queries_answered"] > 0
        assert len(r["runs"]) == 1
    # on this machine (root, packages installed) every mode runs
    assert all(r["status"] == "ok" for r in by.values()), [(m, r["skip_reason"]) for m, r in by.items()]
    assert by["none"]["ratio_to_none"] == 1.0
    assert by["none"]["log_lines"] is None


def test_log_lines_are_counted(doc: dict) -> None:
    by = {r["mode"]: r for r in doc["results"]}
    for mode in ("file", "syslog", "fips"):
        r = by[mode]
        assert r["log_lines"] > 0, mode
        assert _num(r["logged_per_answered"]), mode
    f = by["fips"]
    assert f["consumer"]["kind"] == "C drain"
    assert f["ring"]["rings"] >= 1 and f["ring"]["foreign_rings"] == 0
    # the drain's count is what the rings committed (nothing else logs to syslog here)
    assert f["consumer"]["records"] == f["ring"]["records_committed"]
    assert f["consumer"]["lost"] <= f["ring"]["records_dropped"]
    assert f["logged_per_answered"] >= 0.999  # not a timing figure: a consumer that keeps up sees every line
    b = by["fips_bind"]
    assert b["consumer"]["kind"] == "C drain" and b["ring"]["foreign_rings"] == 0
    assert b["consumer"]["records"] == b["ring"]["records_committed"]
    assert b["logged_per_answered"] >= 0.999 and b["ring_dropped_total"] == 0
    t = by["dnstap"]
    assert t["helper"] == "fstrm_capture"
    assert t["dnstap"]["damaged"] is None
    # recursion no: BIND 9.18 types every query it answers AUTH_QUERY
    assert set(t["dnstap"]["types"]) == {"1"} and t["dnstap"]["client_query"] == 0
    assert 0 < t["log_lines"] == t["dnstap"]["matched"] <= t["dnstap"]["auth_query"]
    n = by["fips_nocons"]
    load = n["ring_load"]
    assert load["records_committed"] == n["log_lines"]
    # with no consumer every query line named logged during the load is either
    # committed or counted as dropped: between what dnsperf got answered and sent
    assert n["queries_answered"] <= load["records_committed"] + load["records_dropped"] <= n["queries_sent"]
    assert n["ring"]["records_dropped"] == load["records_dropped"]  # no drops outside the load


def test_targets_are_reported_not_asserted(doc: dict) -> None:
    names = [t["name"] for t in doc["targets"]]
    assert names == [
        "fips_with_consumer_qps_vs_none",
        "fips_with_consumer_logged_vs_answered",
        "fips_no_consumer_qps_vs_none",
        "null_syslog_qps_vs_none",
        "fips_with_consumer_qps_vs_null_syslog",
        "fips_shim_cost_vs_null_syslog_per_call",
        "fips_bind_cpu_vs_null_syslog",
        "fips_bind_logged_vs_answered",
        "fips_bind_qps_vs_null_syslog",
        "fips_bind_cpu_vs_none",
        "fips_native_cpu_vs_none_native",
        "fips_native_qps_vs_none_native",
        "fips_native_logged_vs_answered",
        "none_native_cpu_vs_none",
        "dnstap_frames_vs_answered",
        "dnstap_cpu_vs_none",
        "fips_no_consumer_drops_counted",
    ]
    for t in doc["targets"]:
        assert _num(t["measured"]), t
        if t["target"] == "informational":
            assert t["pass"] is None
        else:
            assert t["pass"] in (True, False), t


@pytest.mark.skipif(shutil.which("named") is None and not os.access("/usr/sbin/named", os.X_OK),
                    reason="named not installed")
def test_no_named_left_behind(doc: dict) -> None:
    # every named the bench started was stopped (by pid: only ours had a bench conf)
    left = subprocess.run(["pgrep", "-af", "fipstop-bench-bind-"], capture_output=True, text=True).stdout
    assert "named" not in left, left
