"""fipstop check: Nagios semantics, every check on scripted states, bad input,
the textfile."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fipstop import fixtures
from fipstop._fips import Consumer, Domain, Producer
from fipstop.analysis.check import CRITICAL, OK, UNKNOWN, WARNING, Thresholds, evaluate
from fipstop.model.raw import RawFrame
from fipstop.model.snapshot import ModelStep
from fipstop.outputs.textfile import textfile, write_textfile

FIPSTOP = [sys.executable, "-m", "fipstop"]


def run_check(*args: str, shm: Path | str) -> tuple[int, str]:
    r = subprocess.run([*FIPSTOP, "--shm-dir", str(shm), "check", "--window", "0.2", *args], capture_output=True,
                       text=True, timeout=60)
    assert "Traceback" not in r.stderr and r.stderr == "", r.stderr
    return r.returncode, r.stdout


def evaluate_samples(prev, cur, th: Thresholds, **kw):
    """evaluate() on two raw samples, derived as a live source derives them."""
    step = ModelStep()
    return evaluate(step(RawFrame(prev)), step(RawFrame(cur)), th, **kw)


def _alive_procfs(tmp_path: Path, pids) -> str:
    root = tmp_path / "proc"
    root.mkdir(exist_ok=True)
    for p in pids:
        (root / str(p)).mkdir(exist_ok=True)
    return str(root)


def _pids(sample) -> set[int]:
    return {int(p) for d in sample.domains for p in d.rings["pid"]}


def test_scripted_trouble_is_critical_with_reasons(tmp_path: Path) -> None:
    s = fixtures.demo_samples(58)
    rep = evaluate_samples(s[56], s[57], Thresholds(), procfs_root=_alive_procfs(tmp_path, _pids(s[57])))
    assert rep.status == CRITICAL
    names = {r.name for r in rep.results if r.status}
    assert {"drops", "fill", "consumers"} <= names
    line = rep.status_line()
    assert line.startswith("FIPS CRITICAL - ") and " | " in line and "\n" not in line
    assert any("evicted" in r.message for r in rep.results)
    assert any("stale" in r.message for r in rep.results)
    perf = line.split(" | ", 1)[1]
    assert "'drops_per_s'=" in perf and "'fill_max'=" in perf and "e+" not in perf


def test_thresholds_move_the_verdict(tmp_path: Path) -> None:
    s = fixtures.demo_samples(58)
    proc = _alive_procfs(tmp_path, _pids(s[57]))
    lax = Thresholds(warn_fill_pct=101, crit_fill_pct=102, warn_drops_per_s=1e12, crit_drops_per_s=2e12,
                     warn_lag_records=1e15, crit_lag_records=2e15, warn_lag_s=1e9, crit_lag_s=2e9)
    rep = evaluate_samples(s[56], s[57], lax, procfs_root=proc)
    assert {r.name for r in rep.results if r.status} <= {"consumers"}  # only the stale / evicted consumers remain


def _with_ring(sample, **changes):
    d = sample.domains[0]
    rings = d.rings.copy()
    for k, v in changes.items():
        rings[k][0] = v
    return dataclasses.replace(sample, domains=(dataclasses.replace(d, rings=rings), *sample.domains[1:]))


def test_invariant_violations_are_critical(tmp_path: Path) -> None:
    s = fixtures.demo_samples(5)
    proc = _alive_procfs(tmp_path, _pids(s[4]))
    r0 = s[4].domains[0].rings[0]
    bad = _with_ring(s[4], floor=int(r0["head"]) + 8)
    rep = evaluate_samples(s[3], bad, Thresholds(), procfs_root=proc)
    assert rep.status == CRITICAL and any(r.name == "invariants" and "floor" in r.message for r in rep.results)
    back = _with_ring(s[4], records_committed=int(s[3].domains[0].rings[0]["records_committed"]) - 1)
    rep = evaluate_samples(s[3], back, Thresholds(), procfs_root=proc)
    assert rep.status == CRITICAL and any(r.name == "invariants" and ("went backwards" in r.message or "never committed" in r.message) for r in rep.results)


def test_producer_gone_with_ring_open(tmp_path: Path) -> None:
    s = fixtures.demo_samples(10)
    d = s[9].domains[0]
    gone = int(d.rings["pid"][d.active_ring_indices()[0]])
    pids = [gone] + sorted(_pids(s[9]) - {gone})
    proc = _alive_procfs(tmp_path, pids[1:])  # that producer's process is gone
    rep = evaluate_samples(s[8], s[9], Thresholds(warn_fill_pct=99, crit_fill_pct=100), procfs_root=proc)
    assert rep.status == WARNING and any(r.name == "producers" and f"pid {pids[0]}" in r.message
                                         for r in rep.results)


def test_real_domain_ok_then_drops(shm_dir: Path) -> None:
    # a long grace: the consumer that stops releasing must stay (not be evicted) however slow the machine is
    dom = Domain("chk", shm_dir, max_rings=4, max_consumers=2, ring_capacity=4096, max_record=256, grace_s=300)
    p = Producer(dom)
    c = Consumer(dom, "ips")
    for _ in range(10):
        p.log(b"x" * 50)
    first = c.read()
    assert first is not None
    c.release(first)
    import threading
    import time

    reading = threading.Event()
    reading.set()

    def heartbeat() -> None:  # a live consumer reads now and then (its heartbeat)
        while reading.is_set():
            b = c.read()
            if b is not None and not stop.is_set():
                c.release(b)
            time.sleep(0.1)

    stop = threading.Event()
    hb = threading.Thread(target=heartbeat)
    hb.start()
    code, out = run_check(shm=shm_dir)
    assert code == OK and out.startswith("FIPS OK - "), out
    code, out = run_check("--json", shm=shm_dir)
    doc = json.loads(out)
    assert code == OK and doc["status_text"] == "OK" and doc["perfdata"]
    # a consumer that stops releasing: the ring fills and drops
    reading.clear()
    hb.join()
    stop.set()
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            for _ in range(200):
                assert p2 is not None
                p2.log(b"y" * 100)

    p2: Producer | None = None

    def start() -> None:
        nonlocal p2
        p2 = Producer(dom)
        flood()

    t = threading.Thread(target=start)
    t.start()
    try:
        code, out = run_check(shm=shm_dir)
    finally:
        stop.set()
        t.join()
    assert code == CRITICAL and "dropped" in out and "full" in out, out
    c.close()
    dom.close()


def test_missing_domain_and_unknowns(shm_dir: Path, tmp_path: Path) -> None:
    code, out = run_check(shm=shm_dir)
    assert code == UNKNOWN and out.startswith("FIPS UNKNOWN - no FIPS domain")
    code, out = run_check("--domain", "named", shm=shm_dir)  # a typo'd domain is the check's fault: UNKNOWN
    assert code == UNKNOWN and "domain named not found" in out and "(domains there: none)" in out
    code, out = run_check(shm=tmp_path / "nope")
    assert code == UNKNOWN and "no such directory" in out
    code, out = run_check("--warn-fill-pct", "nan", shm=shm_dir)
    assert code == UNKNOWN and "--warn-fill-pct" in out


@pytest.mark.parametrize("damage", ["garbage", "truncated", "version"])
def test_corrupted_domain_file_is_critical(shm_dir: Path, damage: str) -> None:
    with Domain("ok", shm_dir, max_rings=2, max_consumers=1, ring_capacity=4096, max_record=256) as dom:
        Producer(dom).log(b"hello")
    bad = shm_dir / "fips.bad"
    good = (shm_dir / "fips.ok").read_bytes()
    if damage == "garbage":
        bad.write_bytes(b"\x1b[31mnot a domain\x00" * 400)
    elif damage == "truncated":
        bad.write_bytes(good[:1000])
    else:
        b = bytearray(good)
        b[8:12] = (99).to_bytes(4, "little")  # the version field follows the 8-byte magic
        bad.write_bytes(bytes(b))
    os.chmod(bad, 0o640)
    code, out = run_check(shm=shm_dir)
    assert code == CRITICAL and "domain bad" in out and "\x1b" not in out, out
    assert out.count("\n") == 1


def test_textfile_is_written_atomically(tmp_path: Path) -> None:
    s = fixtures.demo_samples(58)
    rep = evaluate_samples(s[56], s[57], Thresholds(), procfs_root=_alive_procfs(tmp_path, _pids(s[57])))
    d = tmp_path / "textfile"
    d.mkdir()
    path = write_textfile(str(d), textfile(rep, 1700000000.0))
    assert os.listdir(d) == ["fipstop.prom"]  # no temporary file left behind
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(Path(path).read_text())}
    assert fams["fipstop_check_overall_status"].samples[0].value == CRITICAL
    checks = {s.labels["check"]: s.value for s in fams["fipstop_check_status"].samples}
    assert checks["drops"] == CRITICAL


def test_backend_losses(tmp_path: Path) -> None:
    from fipstop.analysis.check import Report, _backend_checks
    from fipstop.model.backends import AuditRow, BackendsView

    view = BackendsView(dt_s=1.0, audit=AuditRow(ok=True, reason="", enabled=1, failure=1, pid=1, rate_limit=0,
                                                   backlog_limit=64, lost=500, lost_per_s=12.0, backlog=64,
                                                   backlog_wait_time=0))
    rep = Report()
    _backend_checks(rep, view, Thresholds())
    assert rep.status == WARNING and "audit lost 12.0/s" in rep.results[0].message
