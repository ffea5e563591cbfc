"""``fipstop bench bind``'s new parts without processes: the dnstap capture
count (a Frame Streams file built here, frame by frame, is the oracle), the
CPU-per-query differences round by round and their targets, the ABBA order,
the client scaling's exponents, sender output and table."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from fipstop.bench.bind import dnstap, report, scaling
from fipstop.bench.bind.modes import BindConfig, Run


def _varint(v: int) -> bytes:
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _field(num: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _query(name: str, qtype: int) -> bytes:
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack(">HHHHHH", 7, 0, 1, 0, 0, 0) + q + struct.pack(">HH", qtype, 1)


def _frame(mtype: int, name: str, qtype: int) -> bytes:
    msg = _field(1, mtype) + _field(2, 1) + _field(10, _query(name, qtype))
    return _field(2, b"BIND 9") + _field(14, msg) + _field(15, 1)


def _fstrm(frames: list[bytes]) -> bytes:
    ctype = dnstap.CONTENT_TYPE.encode()
    start = struct.pack(">II", 2, 1) + struct.pack(">I", len(ctype)) + ctype  # START, CONTENT_TYPE field
    out = struct.pack(">II", 0, len(start)) + start
    for f in frames:
        out += struct.pack(">I", len(f)) + f
    stop = struct.pack(">I", 3)
    return out + struct.pack(">II", 0, len(stop)) + stop


def test_count_frames_counts_auth_queries_of_the_zone(tmp_path: Path) -> None:
    frames = [_frame(dnstap.AUTH_QUERY, f"h{i}.example.test", 1) for i in range(5)]
    frames += [_frame(dnstap.AUTH_QUERY, "example.test", 6),  # the readiness probe's SOA: not counted
               _frame(dnstap.AUTH_QUERY, "h1.other.test", 1),
               _frame(dnstap.CLIENT_QUERY, "H2.Example.Test", 1),  # names compare case-insensitively
               _frame(2, "h3.example.test", 1)]  # AUTH_RESPONSE
    p = tmp_path / "t.fstrm"
    p.write_bytes(_fstrm(frames))
    c = dnstap.count_frames(p, "example.test")
    assert (c.frames, c.auth_query, c.client_query, c.other, c.matched) == (9, 7, 1, 1, 6)
    assert c.damaged is None and c.types == {1: 7, 5: 1, 2: 1}


def test_count_frames_reports_a_damaged_file(tmp_path: Path) -> None:
    p = tmp_path / "t.fstrm"
    good = _fstrm([_frame(1, "h1.example.test", 1)])
    p.write_bytes(good[:-12] + struct.pack(">I", 1 << 30) + b"xx")  # the STOP frame (12 bytes) replaced
    c = dnstap.count_frames(p, "example.test")
    assert c.matched == 1 and c.damaged and "runs past the end" in c.damaged
    p.write_bytes(struct.pack(">I", 5) + b"\x08\xff\xff\xff\xff")  # a varint that never ends
    c = dnstap.count_frames(p, "example.test")
    assert c.frames == 1 and c.damaged and "varint" in c.damaged
    assert dnstap.count_frames(tmp_path / "missing", "x").damaged.startswith("cannot read")


def _run(mode: str, rnd: int, us: float, **kw) -> Run:
    return Run(mode=mode, round=rnd, qps=10000.0, queries_completed=100000, queries_sent=100000,
               named_cpu_us_per_query=us, disturbed=False, **kw)


def test_cpu_per_query_is_a_per_round_difference() -> None:
    none = [14.0, 15.0, 13.0, 16.0, 14.5, 15.5, 13.5]
    floor = [x + 3.0 for x in none]
    bind = [x + 1.0 + (0.1 if i % 2 else -0.1) for i, x in enumerate(none)]
    ok = {"records_committed": 100000, "records_dropped": 0}
    runs = [_run("none", i, x) for i, x in enumerate(none)]
    runs += [_run("null_syslog", i, x) for i, x in enumerate(floor)]
    runs += [_run("fips_bind", i, x, log_lines=100000, logged_per_answered=1.0, ring_load=ok, ring=ok)
             for i, x in enumerate(bind)]
    res = {r["mode"]: r for r in report.summarize(("none", "null_syslog", "fips_bind"), runs)}
    d = res["fips_bind"]["cpu_us_per_query_minus_none"]
    assert d["rounds"] == 7 and d["median_us"] == pytest.approx(0.9) and d["rounds_below_zero"] == 0
    assert d["by_round"] == pytest.approx([0.9, 1.1, 0.9, 1.1, 0.9, 1.1, 0.9])
    f = res["fips_bind"]["cpu_us_per_query_minus_null_syslog"]
    assert f["median_us"] == pytest.approx(-2.1) and f["rounds_below_zero"] == 7 and f["ci95_us"][1] < 0
    ts = {t["name"]: t for t in report.targets(list(res.values()))}
    assert ts["fips_bind_cpu_vs_null_syslog"]["pass"] is True
    assert ts["fips_bind_cpu_vs_null_syslog"]["measured"] == pytest.approx(-2.1)
    assert ts["fips_bind_logged_vs_answered"]["pass"] is True
    assert ts["fips_bind_cpu_vs_none"]["measured"] == pytest.approx(0.9)
    # six rounds are not enough for the target, however clear they are
    six = [r for r in runs if r.round < 6]
    res6 = report.summarize(("none", "null_syslog", "fips_bind"), six)
    assert {t["name"]: t for t in report.targets(res6)}["fips_bind_cpu_vs_null_syslog"]["pass"] is False


def test_a_dropped_line_fails_the_bind_logging_target() -> None:
    drop = {"records_committed": 99999, "records_dropped": 1}
    runs = [_run("none", 0, 10.0),
            _run("fips_bind", 0, 11.0, log_lines=99999, logged_per_answered=0.99999, ring_load=drop, ring=drop)]
    ts = {t["name"]: t for t in report.targets(report.summarize(("none", "fips_bind"), runs))}
    assert ts["fips_bind_logged_vs_answered"]["pass"] is False


def test_rounds_alternate_the_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fipstop.bench.bind import run as runmod

    b = runmod.Bench(BindConfig(modes=("none", "fips", "dnstap"), rounds=4, shm_dir=str(tmp_path), calm_wait=0))
    seen: list[tuple[int, str]] = []
    monkeypatch.setattr(b, "missing", lambda: None)
    monkeypatch.setattr(b, "prepare", lambda: None)
    monkeypatch.setattr(b, "shim_call", lambda results: None)
    monkeypatch.setattr(b, "run_one", lambda mode, rnd: seen.append((rnd, mode)) or _run(mode, rnd, 10.0))
    try:
        b.run()
    finally:
        b.cleanup()
    assert [m for r, m in seen if r == 0] == ["none", "fips", "dnstap"]
    assert [m for r, m in seen if r == 1] == ["dnstap", "fips", "none"]
    assert [m for r, m in seen if r == 2] == ["none", "fips", "dnstap"]


def test_scaling_exponents() -> None:
    assert scaling.parse_exponents("10-16") == tuple(range(10, 17))
    assert scaling.parse_exponents("16,10, 12") == (10, 12, 16)
    for bad in ("", "x", "16-10", "21", "-3"):
        with pytest.raises(ValueError, match="--scaling"):
            scaling.parse_exponents(bad)


def test_scaling_reads_the_senders_line_and_tabulates(tmp_path: Path) -> None:
    b = scaling.ScalingBench(BindConfig(shm_dir=str(tmp_path), scaling=(10,)))
    try:
        line = ('{"queries_sent":100,"queries_completed":98,"queries_lost":2,"unmatched":0,"send_errors":0,'
                '"rcodes":{"NOERROR":90,"NXDOMAIN":8,"other":0},"clients":1024,"clients_asked":100,'
                '"run_time_s":1.000,"qps":98.0}')
        r = b.parse_load("noise\n" + line + "\n")
        assert r is not None and r["queries_completed"] == 98 and r["qps"] == 98.0
        assert r["load"]["clients_asked"] == 100 and r["rcodes"]["NXDOMAIN"] == 8
        assert b.parse_load("no json") is None
        assert b.modes == scaling.DEFAULT_SCALING_MODES
    finally:
        b.cleanup()
    runs = [Run(mode="fips", round=16, clients=1 << 16, qps=5.0, queries_completed=10, log_lines=10,
                logged_per_answered=1.0, ring_load={"records_dropped": 0}),
            Run(mode="dnstap", round=16, clients=1 << 16, status="skipped", reason="no fstrm_capture")]
    rows = scaling.table(runs, ("fips", "dnstap"))
    assert rows[0]["exponent"] == 16 and rows[0]["modes"]["fips"]["ring_dropped"] == 0
    assert rows[0]["modes"]["dnstap"] == {"status": "skipped", "reason": "no fstrm_capture"}
    ts = scaling.scaling_targets(rows, ("fips", "dnstap"))
    assert [(t["name"], t["pass"]) for t in ts] == [("fips_logged_at_2^16_clients", True)]


CALLGRIND_OUT = """# callgrind format
version: 1
events: Ir
fn=(1) isc__nm_udp_read_cb
cfn=(2) ns__client_request
calls=600 0
0 1000
fn=(3) other
cfn=(2)
calls=418 0
0 500
fn=(2)
0 77
cfn=(4) ns__client_requestx
calls=5 0
0 9
summary: 16787506
totals: 16787506
"""


def test_parse_callgrind_sums_the_calls_of_the_toggled_function() -> None:
    from fipstop.bench.bind.callgrind import parse_callgrind

    assert parse_callgrind(CALLGRIND_OUT) == (16787506, 1018)  # (2) twice; (4) is another function
    assert parse_callgrind("summary: 5\n") == (5, None)
    assert parse_callgrind("garbage") == (None, None)


@pytest.mark.parametrize("args,needle", [
    (["wrap", "--facility", "local0", "--", "true"], "--facility needs --bind"),
    (["wrap", "--bind", "--facility", "bogus", "--", "true"], "unknown --facility 'bogus'"),
    (["bench", "bind", "--scaling", "16-10"], "low to high"),
    (["bench", "bind", "--callgrind", "--modes", "syslog"], "not measured this way"),
])
def test_bad_options_give_one_line(args: list[str], needle: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "fipstop", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
