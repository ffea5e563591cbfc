"""The client scaling's sender (bench/bind/clients.c) against a real named,
and ``fipstop bench bind --scaling`` end to end.

The sender's oracle is named's own file channel: every query it counts as
answered is one query-log line, and the lines name exactly 2^k distinct
client addresses, 127.16.0.0 + i.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fipstop.bench.bind import scaling
from fipstop.bench.bind.dns import OUTSTANDING, ZONE, free_port, named_conf, write_zone
from fipstop.bench.bind.procs import find_program, start_named, stop_process
from fipstop.bench.cbuild import build_c

pytestmark = [pytest.mark.integration, pytest.mark.root]


def test_sender_asks_from_every_address_and_counts_answers(tmp_path: Path) -> None:
    named = find_program("named")
    if named is None:
        pytest.skip("named not installed (apt-get install bind9)")
    sender, why, _ = build_c("bindclients", (scaling.CLIENTS_SRC,))
    assert sender is not None, why
    d = tmp_path / "n"
    d.mkdir()
    d.chmod(0o755)
    zone = d / f"{ZONE}.zone"
    write_zone(zone)
    port = free_port()
    conf = d / "named.conf"
    conf.write_text(named_conf("file", d, port, zone), encoding="utf-8")
    proc, why = start_named([named, "-f", "-c", str(conf), "-n", "2"], d, port)
    assert proc is not None, why
    try:
        r = subprocess.run([str(sender), str(port), "1024", "0.5", str(OUTSTANDING), ZONE], capture_output=True,
                           text=True, timeout=30)
    finally:
        stop_process(proc)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["clients_asked"] == 1024 and res["queries_sent"] >= 1024
    assert res["send_errors"] == 0 and res["unmatched"] == 0
    assert res["queries_completed"] + res["queries_lost"] == res["queries_sent"]
    text = (d / "queries.log").read_text(encoding="utf-8")
    peers = re.findall(r"client @0x[0-9a-f]+ ([\d.]+)#\d+ \(\S+\): query: \S+\.example\.test IN A ", text)
    assert len(peers) >= res["queries_completed"]  # lost ones may have been logged too
    assert len(peers) <= res["queries_sent"]
    assert {ipaddress.IPv4Address(p) for p in peers} == {
        ipaddress.IPv4Address("127.16.0.0") + i for i in range(1024)}
    rc = res["rcodes"]
    assert rc["NOERROR"] + rc["NXDOMAIN"] + rc["other"] == res["queries_completed"] and rc["NXDOMAIN"] > 0


def test_bench_bind_scaling_end_to_end(tmp_path: Path) -> None:
    if find_program("named") is None:
        pytest.skip("named not installed (apt-get install bind9)")
    out = tmp_path / "s.json"
    shm = tmp_path / "shm"
    shm.mkdir()
    r = subprocess.run([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "bench", "bind", "--scaling", "11",
                        "--quick", "--modes", "fips_bind,dnstap", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "bind-clients" and "--scaling 11" in doc["command"]
    assert doc["params"]["exponents"] == [11] and doc["params"]["modes"] == ["fips_bind", "dnstap"]
    row = doc["scaling"][0]
    assert row["clients"] == 2048
    for mode in ("fips_bind", "dnstap"):
        c = row["modes"][mode]
        assert c["status"] == "ok", c
        assert c["clients_asked"] == 2048 and c["queries_answered"] > 0
    b = row["modes"]["fips_bind"]
    assert b["ring_dropped"] == 0 and b["logged_per_answered"] >= 0.999
    assert [t["name"] for t in doc["targets"]] == ["fips_bind_logged_at_2^16_clients"]
    assert doc["targets"][0]["pass"] is None  # no 2^16 run here: not applicable, not a pass
    assert list(shm.iterdir()) == []
    assert "2^11" in r.stdout
