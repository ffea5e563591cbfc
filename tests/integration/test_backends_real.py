"""Backends probes against real components: rsyslogd on a socket of the
test's own (queue, rate, impstats), fail2ban-server outpaced by a writer
(lag in bytes and seconds), ``auditctl -s``, UDP drops on loopback."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fipstop.bench.bind.dns import free_port
from fipstop.bench.rsyslog import find_rsyslogd
from fipstop.model.backends import derive_backends
from fipstop.probes.audit import AuditProbe
from fipstop.probes.backends import BackendsSample
from fipstop.probes.logfiles import FileReader, LogFileProbe, LogFileSample
from fipstop.probes.netsyslog import NetSyslogProbe
from fipstop.probes.rsyslog_stats import RsyslogStatsProbe
from fipstop.probes.unixsock import UnixSocketProbe

pytestmark = [pytest.mark.integration, pytest.mark.root]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (sock_diag of other processes, audit)")


def _wait(pred, timeout: float = 10.0, step: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


@pytest.fixture
def rsyslogd(tmp_path: Path):
    exe = find_rsyslogd()
    if not exe:
        pytest.skip("rsyslogd not installed (apt-get install rsyslog)")
    sock, out, stats = tmp_path / "log.sock", tmp_path / "messages", tmp_path / "stats.json"
    conf = tmp_path / "rsyslog.conf"
    conf.write_text(
        f'global(workDirectory="{tmp_path}")\n'
        f'module(load="impstats" interval="1" format="json" log.syslog="off" log.file="{stats}" '
        'resetCounters="off")\n'
        'module(load="imuxsock" SysSock.Use="off")\n'
        f'input(type="imuxsock" Socket="{sock}" CreatePath="on" RateLimit.Interval="0")\n'
        f'*.* action(type="omfile" file="{out}")\n')
    errlog = open(tmp_path / "rsyslogd.stderr", "wb")  # a file, not a pipe: a full pipe would stall rsyslogd
    proc = subprocess.Popen([exe, "-n", "-f", str(conf), "-i", str(tmp_path / "pid")], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        if not _wait(sock.exists):
            pytest.fail(f"rsyslogd did not create its socket: {(tmp_path / 'rsyslogd.stderr').read_text()[:2000]}")
        yield proc, sock, out, stats
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errlog.close()


@needs_root
def test_rsyslog_socket_queue_rate_and_impstats(rsyslogd) -> None:
    proc, sock, out, stats = rsyslogd
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.connect(str(sock))
    probe = UnixSocketProbe(str(sock))
    s = probe.sample()
    assert s.ok, s.reason
    assert [h.pid for h in s.receivers] == [proc.pid] and s.receivers[0].comm == "rsyslogd"
    assert s.sock_type == "dgram" and s.senders_connected >= 1
    files = LogFileProbe(str(out))
    c.send(b"<13>fipstop-test: first")  # rsyslogd creates its output file on the first message
    assert _wait(lambda: out.exists() and out.stat().st_size > 0)
    f0 = files.sample()
    for i in range(500):
        c.send(f"<13>fipstop-test: message {i}".encode())
    _wait(lambda: out.exists() and out.read_bytes().count(b"fipstop-test") >= 501)
    f1 = files.sample()
    v = derive_backends(BackendsSample(f0.taken_mono_ns, files=(f0,)), BackendsSample(f1.taken_mono_ns, files=(f1,)))
    assert f1.lines_total >= 500 and v.files[0].lines_per_s > 0 and v.files[0].bytes_per_s > 0
    # impstats: the main queue enqueued at least what was sent
    st = _wait(lambda: (lambda x: x if x.ok and any(q.enqueued >= 500 for q in x.queues) else None)(
        RsyslogStatsProbe(str(stats)).sample()), timeout=8)
    assert st is not None, RsyslogStatsProbe(str(stats)).sample()
    main = next(q for q in st.queues if q.name == "main Q")
    assert main.enqueued >= 500 and main.maxqsize >= 1 and main.discarded_full == 0
    # stop the receiver: datagrams pile up in its socket queue until a sender blocks
    proc.send_signal(signal.SIGSTOP)

    def all_stopped() -> bool:  # SIGSTOP is asynchronous: a thread may still drain the socket for a moment
        task = Path(f"/proc/{proc.pid}/task")
        return all(t.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for t in task.iterdir())

    assert _wait(all_stopped, timeout=5)
    try:
        c.setblocking(False)
        sent = 0
        try:
            while sent < 100_000:
                c.send(b"<13>fipstop-test: piling up")
                sent += 1
        except BlockingIOError:
            pass
        s = probe.sample()
        assert s.queue_bytes > 0 and sent > 0, s
        blocker = subprocess.Popen(["logger", "-u", str(sock), "--socket-errors=off", "blocked sender"])
        try:
            s = _wait(lambda: (lambda x: x if x.blocked else None)(probe.sample()), timeout=15)
            assert s is not None and any(b.pid == blocker.pid for b in s.blocked), probe.sample()
        finally:
            blocker.kill()
            blocker.wait()
    finally:
        proc.send_signal(signal.SIGCONT)
        c.close()


FAIL2BAN_CONF = """[Definition]
loglevel = INFO
logtarget = {d}/fail2ban.log
socket = {d}/fail2ban.sock
pidfile = {d}/fail2ban.pid
dbfile = :memory:
"""
JAIL = """[test]
enabled = true
backend = polling
filter = fipstoptest
action = dummy
logpath = {log}
maxretry = 1000000
findtime = 600
bantime = 60
"""


@needs_root
def test_fail2ban_lag_grows_in_bytes_and_seconds(tmp_path: Path) -> None:
    exe = shutil.which("fail2ban-server")
    if not exe:
        pytest.skip("fail2ban-server not installed (apt-get install fail2ban)")
    d = tmp_path / "f2b"
    (d / "filter.d").mkdir(parents=True)
    (d / "action.d").mkdir()
    log = tmp_path / "auth.log"
    log.write_bytes(b"")
    (d / "fail2ban.conf").write_text(FAIL2BAN_CONF.format(d=d))
    (d / "jail.conf").write_text(JAIL.format(log=log))
    (d / "filter.d" / "fipstoptest.conf").write_text(
        "[Definition]\nfailregex = ^\\S+ \\S+ login failed from <HOST> user \\w+ (?:x+)$\n")
    (d / "action.d" / "dummy.conf").write_text("[Definition]\nactionban = true\nactionunban = true\n")
    proc = subprocess.Popen([exe, "-f", "-x", "-c", str(d)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert _wait(lambda: (d / "fail2ban.sock").exists(), timeout=15), "fail2ban-server did not start"
        probe = LogFileProbe(str(log))
        line = b"2026-01-01T00:00:00 host login failed from 10.1.2.%d user root " + b"x" * 120 + b"\n"
        chunk = b"".join(line % (k % 250) for k in range(2000))  # 372 kB

        def mine(s: LogFileSample) -> FileReader | None:
            return next((r for r in s.readers if r.pid == proc.pid), None)

        with open(log, "ab") as w:
            # it reads: a flood, then its position has moved
            for _ in range(20):
                w.write(chunk)
                w.flush()
                time.sleep(0.02)
            # fail2ban's polling backend opens the file only while it reads (FileContainer.open/close around each
            # poll): keep feeding it so that a poll is in progress when the probe looks (CI once saw every 50 ms
            # look fall between reads for 15 s)
            def reading() -> bool:
                r = mine(probe.sample())
                if r is not None and r.pos_bytes > 0:
                    return True
                w.write(chunk)
                w.flush()
                return False

            assert _wait(reading, timeout=30), "fail2ban-server was never seen reading the log"
            # the oracle: a stopped fail2ban-server reads nothing, so every byte written meanwhile is lag, and the
            # lag is the file's size less the position it stopped at, exactly (how fast it reads on this host no
            # longer matters: CI once saw it keep pace with 19 MB/s)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                time.sleep(0.3)  # a read in flight when the signal came lands before the first sample
                s1 = probe.sample()
                r1 = mine(s1)
                assert r1 is not None, "fail2ban-server closed the log"
                written = 0
                for _ in range(8):
                    w.write(chunk)
                    w.flush()
                    written += len(chunk)
                    time.sleep(0.05)
                s2 = probe.sample()
                r2 = mine(s2)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        assert r2 is not None
        print(f"fail2ban lag: {r1.lag_bytes} B stopped, {r2.lag_bytes} B after {written} B more")
        assert r2.pos_bytes == r1.pos_bytes, "it read while stopped"
        assert r1.lag_bytes == s1.size_bytes - r1.pos_bytes and r2.lag_bytes == s2.size_bytes - r2.pos_bytes
        assert r2.lag_bytes == r1.lag_bytes + written and s2.size_bytes == log.stat().st_size
        # lag in seconds: bytes behind / growth rate of the file over the two samples
        v = derive_backends(BackendsSample(s1.taken_mono_ns, files=(s1,)), BackendsSample(s2.taken_mono_ns, files=(s2,)))
        row = next(r for r in v.files[0].readers if r.pid == proc.pid)
        rate = written / ((s2.taken_mono_ns - s1.taken_mono_ns) / 1e9)
        print(f"fail2ban lag {row.lag_bytes} B = {row.lag_s:.2f} s at {v.files[0].bytes_per_s / 1e6:.2f} MB/s growth")
        assert v.files[0].bytes_per_s == pytest.approx(rate)
        assert row.lag_bytes == r2.lag_bytes and row.lag_s == pytest.approx(row.lag_bytes / rate)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@needs_root
def test_audit_status_matches_auditctl() -> None:
    exe = shutil.which("auditctl") or "/sbin/auditctl"
    if not os.access(exe, os.X_OK):
        pytest.skip("auditctl not installed (apt-get install auditd)")
    r = subprocess.run([exe, "-s"], capture_output=True, text=True, timeout=10)
    s = AuditProbe().sample()
    if r.returncode != 0:
        assert not s.ok and s.reason  # the same refusal: a reason, no traceback
        return
    want = {k: int(v) for k, v in re.findall(r"^(\w+) (\d+)", r.stdout, re.M)}
    assert s.ok, s.reason
    for k in ("enabled", "failure", "pid", "rate_limit", "backlog_limit", "backlog_wait_time"):
        assert getattr(s, k) == want[k], k
    assert abs(s.lost - want["lost"]) <= 5 and s.backlog <= max(want["backlog"], s.backlog_limit)


def test_udp_drops_with_a_small_receive_buffer() -> None:
    port = free_port()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    rx.bind(("127.0.0.1", port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe = NetSyslogProbe([port])
        a = probe.sample()
        (s0,) = a.sockets
        assert s0.port == port and os.getpid() in s0.pids
        for i in range(3000):
            tx.sendto(b"<13>fipstop udp flood %d" % i + b"x" * 200, ("127.0.0.1", port))
        b = probe.sample()
        (s1,) = b.sockets
        assert s1.drops > s0.drops and s1.rx_queue_bytes > 0
        assert b.udp_rcvbuf_errors - a.udp_rcvbuf_errors >= s1.drops - s0.drops
        v = derive_backends(BackendsSample(a.taken_mono_ns, net=a), BackendsSample(b.taken_mono_ns, net=b))
        assert v.net.sockets[0].drops_per_s > 0 and v.net.rcvbuf_errors_per_s > 0
    finally:
        rx.close()
        tx.close()
