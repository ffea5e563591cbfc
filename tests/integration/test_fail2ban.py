"""A real fail2ban-server, read live by the Fail2Ban probe (database read-only, and the socket).

fail2ban-server -f -x -c DIR runs with socket, pid, database and log in the
test's temp dir, ``backend = polling``, Debian's named-refused filter and a
dummy action (fipstop.bench.ban.fail2ban_config).  The test appends BIND
refused-query lines (with BIND's timestamps) for a few addresses to the log
it watches and checks that the probe turns Fail2Ban's bans into ban events
whose time-to-ban starts at the first offending line.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fipstop import unban
from fipstop.bench.ban import fail2ban_config
from fipstop.model.bans import derive_bans
from fipstop.probes.fail2ban import Fail2BanProbe

pytestmark = [pytest.mark.integration, pytest.mark.root]

ATTACKERS = ["203.0.113.7", "203.0.113.8", "198.51.100.9"]


def bind_line(ip: str, t: float) -> str:
    ms = int((t % 1) * 1000)
    return (time.strftime("%d-%b-%Y %H:%M:%S", time.localtime(t)) + f".{ms:03d} client @0x7f3a2c0 {ip}#5353 "
            f"(example.com): query (cache) 'example.com/A/IN' denied\n")


@pytest.fixture
def f2b(tmp_path: Path):
    for prog in ("fail2ban-server", "fail2ban-client"):
        if shutil.which(prog) is None:
            pytest.skip(f"{prog} not installed (Debian package fail2ban)")
    cfg = tmp_path / "f2b"
    log = tmp_path / "security.log"
    log.write_text("")
    marks = tmp_path / "bans.txt"
    marks.touch()
    fail2ban_config(cfg, log, marks)
    sock = cfg / "fail2ban.sock"
    p = subprocess.Popen(["fail2ban-server", "-f", "-x", "-c", str(cfg), "-s", str(sock), "-p",
                          str(cfg / "fail2ban.pid")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = subprocess.run(["fail2ban-client", "-s", str(sock), "status"], capture_output=True, text=True)
            if "named-refused" in r.stdout:
                break
            assert p.poll() is None, (cfg / "fail2ban.log").read_text(errors="replace")[-500:]
            time.sleep(0.2)
        else:
            pytest.fail("fail2ban-server did not start its jail")
        yield cfg, log, marks
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_bans_from_the_database_with_time_to_ban(f2b):
    cfg, log, marks = f2b
    probe = Fail2BanProbe(str(cfg / "fail2ban.sqlite3"), str(cfg / "fail2ban.sock"))
    first = probe.sample()
    assert first.unavailable == "" and first.events == ()
    t0 = time.time()
    with open(log, "a") as f:
        for _ in range(6):
            for ip in ATTACKERS:
                f.write(bind_line(ip, time.time()))
            f.flush()
            time.sleep(0.05)
        f.write(bind_line("192.0.2.1", time.time()))  # once: below maxretry
    events = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(events) < len(ATTACKERS):
        events += probe.sample().events
        time.sleep(0.3)
    assert sorted(e.ip for e in events) == sorted(ATTACKERS)
    for e in events:
        assert e.source == "fail2ban" and e.jail == "named-refused" and e.kind == "ban"
        assert abs(e.first_ns / 1e9 - t0) < 1.0  # the first offending line's BIND timestamp
        assert 0 < e.time_to_ban_ns < 15e9
        assert e.hits >= 5
    s = probe.sample()
    assert s.active == len(ATTACKERS)
    # the dummy action runs after Fail2Ban's observer wrote the ban's row:
    # it may still be running when the last row is seen
    deadline = time.monotonic() + 10
    while len(marks.read_text().splitlines()) < len(ATTACKERS) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(marks.read_text().splitlines()) == len(ATTACKERS)  # the dummy action ran for each, once


def test_socket_only_reports_bans_in_force(f2b):
    cfg, log, _marks = f2b
    with open(log, "a") as f:
        for _ in range(6):
            f.write(bind_line("203.0.113.50", time.time()))
    probe = Fail2BanProbe(None, str(cfg / "fail2ban.sock"))
    deadline = time.monotonic() + 15
    s = probe.sample()
    while time.monotonic() < deadline and not s.active:
        time.sleep(0.5)
        s = probe.sample()
    assert s.active == 1 and s.events == () and "socket only" in s.unavailable


def test_unban_from_the_banned_addresses_view_lifts_it(f2b):
    """u in the banned-addresses view: fail2ban-client set JAIL unbanip ADDR, and the list follows."""
    cfg, log, _marks = f2b
    sock = str(cfg / "fail2ban.sock")
    probe = Fail2BanProbe(str(cfg / "fail2ban.sqlite3"), sock)
    samples = [probe.sample()]
    with open(log, "a") as f:
        for _ in range(6):
            f.write(bind_line("203.0.113.60", time.time()))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(e.kind == "ban" for s in samples for e in s.events):
        time.sleep(0.3)
        samples.append(probe.sample())
    st = None
    for s in samples:
        st = derive_bans(st, [s])
    assert st is not None
    (b,) = st.in_force
    assert b.ip == "203.0.113.60" and b.jail == "named-refused"
    bantime = int(subprocess.run(["fail2ban-client", "-s", sock, "get", "named-refused", "bantime"],
                                 capture_output=True, text=True, check=True).stdout.split()[-1])
    assert b.expires_ns is not None and abs(b.expires_ns - b.trigger_ns - bantime * 10**9) < 10**9
    ok, what = unban.unban("named-refused", "203.0.113.60", socket=sock)
    assert ok, what
    s = probe.sample()
    assert s.active == 0 and [(e.kind, e.ip) for e in s.events] == [("unban", "203.0.113.60")]
    st = derive_bans(st, [s])
    assert st.in_force == () and st.source("fail2ban").active == 0
