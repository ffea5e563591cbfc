"""`fipstop ips`'s control socket for real: a real IPS with --action nft in a network namespace of the
test's own bans an address; `fipstop ips-client unban` lifts it (the kernel's set no longer holds it, an
unban event is on the bans domain, the IPS's counters say so) and a second burst of failures bans it again.
Also: 0600 and a peer of another uid refused, a stale socket replaced, a live one refused in one line,
the socket's path in the stats record the dashboard reads, and the client's one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.bans import BanEvent, IpsTally, decode_record
from fipstop.ips.stats import read_stats

pytestmark = [pytest.mark.integration, pytest.mark.root]

IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"
JAIL = "named-refused"
ADDR = "198.51.100.7"
NOBODY = 65534


def denied(ip: str) -> bytes:
    return f"<30>named[7]: client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


@pytest.fixture
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace, nftables)")
    if not (os.path.exists(IP) and os.path.exists(NFT)):
        pytest.skip("ip (iproute2) and nft (nftables) are needed")
    name = f"fipstop-test-{uuid.uuid4().hex[:8]}"
    r = subprocess.run([IP, "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run([IP, "netns", "del", name], capture_output=True)


def in_set(ns: str, set_: str = "banned") -> str:
    r = subprocess.run([IP, "netns", "exec", ns, NFT, "list", "set", "inet", "fipstop", set_],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def start_ips(ns: str, shm: Path, stats: Path, ctl: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([IP, "netns", "exec", ns, sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "ips",
                             "--domain", "app", "--maxretry", "2", "--bantime", "600", "--action", "nft",
                             "--stats-json", str(stats), "--control", str(ctl), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def client(ctl: Path, *args: str, uid: int | None = None) -> subprocess.CompletedProcess:
    """`fipstop ips-client ARGS --control CTL`, as root or (``uid``) as another user through setpriv."""
    pre: list[str] = []
    if uid is not None:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is needed to run the client as another uid")
        pre = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return subprocess.run([*pre, sys.executable, "-m", "fipstop", "ips-client", *args, "--control", str(ctl)],
                          capture_output=True, text=True, timeout=60, cwd="/")


def wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    _out, err = proc.communicate(timeout=30)
    return err


def bans_records(shm: Path) -> list:
    """Every record of the bans domain, read by a consumer of the test's own."""
    with _fips.Domain("fips-bans", shm, create=False) as bd, _fips.Consumer(bd, f"t{uuid.uuid4().hex[:6]}") as c:
        out = []
        while (b := c.read()) is not None:
            out += [decode_record(r) for r in b]
            b.release()
        c.close()
    return out


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory another uid can reach (pytest's tmp_path is 0700): the socket's own mode must be what refuses."""
    d = Path(tempfile.mkdtemp(prefix="fipstop-ctl-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_unban_through_the_client_lifts_the_nft_ban(netns: str, shm_dir: Path, tmp_path: Path,
                                                    open_dir: Path) -> None:
    stats, ctl = tmp_path / "stats.json", open_dir / "ips.sock"
    # a stale socket (a dead IPS's: nobody listens) is replaced
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(ctl))
    dead.close()
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        proc = start_ips(netns, shm_dir, stats, ctl)
        try:
            assert wait(lambda: stats.exists(), 30), proc.stderr.read() if proc.poll() is not None else "no stats"
            st = os.stat(ctl)
            assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
            assert read_stats(stats).control == str(ctl)
            p.log(denied(ADDR))
            p.log(denied(ADDR))
            assert wait(lambda: ADDR in in_set(netns), 15)
            r = client(ctl, "status")
            assert r.returncode == 0, r.stderr
            assert "bans in force: 1" in r.stdout and f"{JAIL}: 1 in force, 1 banned, 0 failed" in r.stdout
            # a jail or an address the IPS does not have: one line, exit 255, nothing changed
            r = client(ctl, "unban", JAIL, "203.0.113.9")
            assert r.returncode == 255 and r.stderr.strip() == f"fipstop: ips-client: 203.0.113.9 is not banned in {JAIL}"
            r = client(ctl, "unban", "sshd\n; rm -rf /", ADDR)
            assert r.returncode == 255 and "no jail" in r.stderr and len(r.stderr.strip().splitlines()) == 1
            r = client(ctl, "unban", JAIL, "198.51.100.7; drop table")
            assert r.returncode == 255 and "not an IP address" in r.stderr
            assert ADDR in in_set(netns)
            # another uid: the file's mode refuses it; with the mode opened, SO_PEERCRED does
            r = client(ctl, "status", uid=NOBODY)
            assert r.returncode == 255 and "permission denied" in r.stderr, r.stderr
            os.chmod(ctl, 0o666)
            r = client(ctl, "unban", JAIL, ADDR, uid=NOBODY)
            assert r.returncode == 255 and "permission denied: uid 65534" in r.stderr, r.stderr
            os.chmod(ctl, 0o600)
            assert ADDR in in_set(netns)
            # the unban
            r = client(ctl, "unban", JAIL, ADDR)
            assert r.returncode == 0, r.stderr
            assert r.stdout.strip() == f"unbanned {ADDR} in {JAIL}"
            assert ADDR not in in_set(netns)  # the oracle: the kernel's set
            assert "type ipv4_addr" in in_set(netns)  # the set itself stays
            assert wait(lambda: (lambda s: (s.unbans, s.active_bans))(read_stats(stats)) == (1, 0), 10)
            r = client(ctl, "unban", JAIL, ADDR)
            assert r.returncode == 255 and f"{ADDR} is not banned in {JAIL}" in r.stderr
            # forgotten: a new burst bans it again
            p.log(denied(ADDR))
            p.log(denied(ADDR))
            assert wait(lambda: ADDR in in_set(netns), 15)
            assert wait(lambda: (lambda s: (s.bans, s.active_bans))(read_stats(stats)) == (2, 1), 10)
            # a second IPS on the same socket: refused in one line, the first one untouched
            second = start_ips(netns, shm_dir, tmp_path / "s2.json", ctl, "--consumer", "second")
            err2 = stop(second) if second.wait(timeout=60) is not None else ""
            assert second.returncode == 2
            assert err2.strip().splitlines()[-1].startswith(f"fipstop: ips: control socket {ctl}: another process")
            assert client(ctl, "status").returncode == 0
        finally:
            err = stop(proc)
    assert proc.returncode == 0, err
    assert "unban 198.51.100.7 jail=named-refused action=nft (control socket)" in err
    assert not ctl.exists()  # removed on exit
    recs = bans_records(shm_dir)
    evs = [(e.kind, e.ip, e.result) for e in recs if isinstance(e, BanEvent)]
    assert evs == [("ban", ADDR, "ok"), ("unban", ADDR, "ok"), ("ban", ADDR, "ok")]
    bans = [e for e in recs if isinstance(e, BanEvent) and e.kind == "ban"]
    assert all(e.expires_ns == e.ban_ns + 600 * 10**9 for e in bans)  # the bantime is in the event
    tallies = [t for t in recs if isinstance(t, IpsTally)]
    assert tallies and all(t.control == str(ctl) for t in tallies)
    assert (tallies[-1].bans, tallies[-1].unbans, tallies[-1].active) == (2, 1, 1)
    assert json.loads(stats.read_text())["control"] == str(ctl)


def test_client_errors_are_one_line(tmp_path: Path) -> None:
    r = client(tmp_path / "none.sock", "status")
    assert r.returncode == 255 and r.stderr.count("\n") == 1 and "no fipstop ips is running there" in r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    r = client(f, "status")
    assert r.returncode == 255 and r.stderr.count("\n") == 1
    r = subprocess.run([sys.executable, "-m", "fipstop", "ips-client", "unban", "onlyjail"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    r = subprocess.run([sys.executable, "-m", "fipstop", "ips-client", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "unban" in r.stdout and "255" in r.stdout


def test_default_socket_taken_second_ips_runs_without_one(shm_dir: Path, tmp_path: Path) -> None:
    """Without --control the socket is the bans domain's default; a second IPS on the same bans domain
    keeps banning without a socket, saying so in one warning line (an explicit --control refuses to start)."""
    if os.geteuid() != 0:
        pytest.skip("the default path as root is /run/fipstop")
    from fipstop.ips.control import default_path

    path = default_path("fips-bans", str(shm_dir))
    assert path is not None and path.startswith("/run/fipstop/ips-fips-bans-")

    def ips(name: str, stats: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm_dir), "ips", "--domain", "app",
                                 "--consumer", name, "--stats-json", str(stats)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    s1, s2 = tmp_path / "1.json", tmp_path / "2.json"
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512):
        first = ips("one", s1)
        try:
            assert wait(lambda: s1.exists(), 30)
            assert read_stats(s1).control == path
            second = ips("two", s2)
            try:
                assert wait(lambda: s2.exists(), 30)
                assert read_stats(s2).control == "" and second.poll() is None
                r = subprocess.run([sys.executable, "-m", "fipstop", "--shm-dir", str(shm_dir), "ips-client",
                                    "--json", "status"], capture_output=True, text=True, timeout=60)
                assert r.returncode == 0 and json.loads(r.stdout)["pid"] == first.pid  # the default path found it
            finally:
                err2 = stop(second)
        finally:
            err1 = stop(first)
    assert f"control socket {path} (fipstop ips-client)" in err1
    warn = [ln for ln in err2.splitlines() if "no control socket" in ln]
    assert len(warn) == 1 and "another process answers on it" in warn[0]
    assert not os.path.exists(path)
