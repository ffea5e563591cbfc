"""Backends probes against fixture trees and crafted bytes: growth, lag,
rotation, truncation, garbage, short netlink replies - a reason, never a traceback."""

from __future__ import annotations

import math
import os
import socket
import struct
from pathlib import Path

import pytest

from fipstop.config import BackendsConfig, ConfigError, find_config, load_config, parse_config
from fipstop.model.backends import derive_backends, rate
from fipstop.outputs.jsondoc import backends_json as view_to_json
from fipstop.outputs.text import format_backends as format_text
from fipstop.probes import audit, netlink, unixsock
from fipstop.probes.backends import BackendsProbe, BackendsSample
from fipstop.probes.journald import JournaldProbe
from fipstop.probes.logfiles import LogFileProbe, parse_fdinfo
from fipstop.probes.netsyslog import NetSyslogProbe, parse_arp_cache, parse_proc_net_udp, parse_snmp
from fipstop.probes.rsyslog_stats import RsyslogStatsProbe, parse_impstats
from fipstop.textsafe import escape_text


def make_proc(root: Path, pid: int, comm: str, fds: dict[int, tuple[str, int, int]]) -> None:
    """A fixture /proc/PID with fd links and fdinfo (target, pos, flags)."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True, exist_ok=True)
    (d / "fdinfo").mkdir(exist_ok=True)
    (d / "comm").write_text(comm + "\n")
    for fd, (target, pos, flags) in fds.items():
        link = d / "fd" / str(fd)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        (d / "fdinfo" / str(fd)).write_text(f"pos:\t{pos}\nflags:\t{flags:o}\nmnt_id:\t24\n")


# -- log files -----------------------------------------------------------------------------


def test_fdinfo_parse() -> None:
    assert parse_fdinfo("pos:\t12\nflags:\t0100002\n") == (12, 0o100002)
    assert parse_fdinfo("pos:\tx\nflags:\t01\n") is None
    assert parse_fdinfo("garbage") is None
    assert parse_fdinfo("pos: -5\nflags: 0\n") is None


def test_logfile_growth_lag_rotation_truncation(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n" * 100)
    proc = tmp_path / "proc"
    make_proc(proc, 100, "fail2ban-server", {3: (str(log), 50, 0o100000)})
    make_proc(proc, 101, "rsyslogd", {4: (str(log), 200, 0o102001)})  # O_WRONLY|O_APPEND: a writer
    (proc / "999").mkdir()  # a process without fd dir: vanished mid-scan
    p = LogFileProbe(str(log), procfs_root=str(proc))
    s0 = p.sample()
    assert s0.ok and s0.size_bytes == 200 and s0.bytes_total == 0  # baseline
    (r,) = s0.readers
    assert (r.pid, r.pos_bytes, r.lag_bytes, r.comm, r.same_file) == (100, 50, 150, "fail2ban-server", True)
    assert s0.writers == (101,)
    with open(log, "ab") as f:
        f.write(b"bb\n" * 10)
    s1 = p.sample()
    assert s1.bytes_total == 30 and s1.lines_total == 10
    s1 = s1.__class__(**{**{k: getattr(s1, k) for k in s1.__slots__}, "taken_mono_ns": s0.taken_mono_ns + 10**9})
    v = derive_backends(BackendsSample(s0.taken_mono_ns, files=(s0,)), BackendsSample(s1.taken_mono_ns, files=(s1,)))
    (f,) = v.files
    assert f.bytes_per_s == pytest.approx(30.0) and f.lines_per_s == pytest.approx(10.0)
    assert f.readers[0].lag_bytes == 180 and f.readers[0].lag_s == pytest.approx(6.0)
    # truncation
    log.write_bytes(b"c\n")
    s2 = p.sample()
    assert s2.truncations == 1 and s2.bytes_total == 32 and s2.lines_total == 11
    # rotation: a new inode under the same name; the reader still on the old one
    old = tmp_path / "app.log.1"
    log.rename(old)
    log.write_bytes(b"d\n" * 5)
    make_proc(proc, 100, "fail2ban-server", {3: (str(old), 2, 0o100000)})
    s3 = p.sample()
    assert s3.rotations == 1 and s3.bytes_total == 42
    assert all(x.pid != 100 or not x.open_now for x in s3.readers)  # its fd now names the old file
    # the file vanishes: a reason, counters kept
    log.unlink()
    s4 = p.sample()
    assert not s4.ok and "no such file" in s4.reason and s4.rotations == 1


def test_logfile_bounded_read_extrapolates(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"")
    p = LogFileProbe(str(log), procfs_root=str(tmp_path), max_read_bytes=1000)
    p.sample()
    log.write_bytes(b"0123456789\n" * 1000)
    s = p.sample()
    assert s.bytes_total == 11000 and s.lines_estimated and 900 <= s.lines_total <= 1100


def test_logfile_reader_closed_is_remembered(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"z" * 1000)
    proc = tmp_path / "proc"
    make_proc(proc, 7, "fail2ban-server", {5: (str(log), 400, 0)})
    p = LogFileProbe(str(log), procfs_root=str(proc))
    assert p.sample().readers[0].lag_bytes == 600
    (proc / "7" / "fd" / "5").unlink()
    with open(log, "ab") as f:
        f.write(b"z" * 100)
    (r,) = p.sample().readers
    assert not r.open_now and r.lag_bytes == 700


# -- unix sockets and netlink ---------------------------------------------------------------


def _diag_msg(ino: int, typ: int = 2, name: bytes = b"", peer: int = 0, rq: tuple = (0, 0),
              mem: tuple = ()) -> netlink.Message:
    attrs = b""

    def attr(t: int, payload: bytes) -> bytes:
        a = struct.pack("=HH", 4 + len(payload), t) + payload
        return a + b"\0" * (netlink.align4(len(a)) - len(a))

    if name:
        attrs += attr(unixsock.UNIX_DIAG_NAME, name)
    if peer:
        attrs += attr(unixsock.UNIX_DIAG_PEER, struct.pack("=I", peer))
    attrs += attr(unixsock.UNIX_DIAG_RQLEN, struct.pack("=II", *rq))
    if mem:
        attrs += attr(unixsock.UNIX_DIAG_MEMINFO, struct.pack(f"={len(mem)}I", *mem))
    return netlink.Message(unixsock.SOCK_DIAG_BY_FAMILY, 0, 1,
                           unixsock.DIAG_MSG.pack(1, typ, 1, 0, ino, 0, 0) + attrs)


def test_netlink_parse_malformed() -> None:
    good = netlink.pack_message(20, 0, 7, b"abcd")
    msgs, why = netlink.parse_messages(good)
    assert len(msgs) == 1 and msgs[0].payload == b"abcd" and not why
    msgs, why = netlink.parse_messages(struct.pack("=IHHII", 1000, 20, 0, 1, 0) + b"x" * 10)
    assert not msgs and "does not fit" in why
    msgs, why = netlink.parse_messages(good + b"\x01\x02")
    assert len(msgs) == 1 and "trailing" in why
    assert netlink.parse_attrs(struct.pack("=HH", 200, 1) + b"xx") == {}
    assert netlink.parse_attrs(b"\x01") == {}
    assert netlink.error_code(netlink.Message(2, 0, 0, b"\x01")) == -1


def test_parse_diag_crafted_and_short() -> None:
    msgs = [
        _diag_msg(10, name=b"/dev/log", rq=(100, 0), mem=(0, 212992, 0, 212992, 0, 0, 0, 0, 3)),
        _diag_msg(11, peer=10, mem=(0, 1, 768, 1)),
        _diag_msg(12, name=b"\0abstract"),
        netlink.Message(20, 0, 1, b"\x01\x02"),  # short: skipped
        netlink.Message(20, 0, 1, unixsock.DIAG_MSG.pack(1, 2, 1, 0, 13, 0, 0) + b"\xff\xff\x01"),  # bad attrs
    ]
    d = unixsock.parse_diag(msgs)
    assert d[10].name == "/dev/log" and d[10].rqueue == 100 and d[10].drops == 3 and d[10].rcvbuf == 212992
    assert d[11].peer == 10 and d[11].wmem_alloc == 768 and d[11].drops == -1
    assert d[12].name == "@abstract"
    assert 13 in d and 20 not in d


def test_unix_socket_probe_fixture(tmp_path: Path) -> None:
    path = str(tmp_path / "log.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    try:
        ino = os.stat(path).st_ino
        proc = tmp_path / "proc"
        (proc / "net").mkdir(parents=True)
        (proc / "net" / "unix").write_text("Num RefCount Protocol Flags Type St Inode Path\ngarbage line\n"
                                           f"0: 00000002 00000000 00000000 0002 01 10 {path}\n")
        make_proc(proc, 50, "rsyslogd", {3: ("socket:[10]", 0, 2)})
        make_proc(proc, 60, "logger", {4: ("socket:[11]", 0, 2)})
        (proc / "60" / "task" / "61").mkdir(parents=True)
        (proc / "60" / "task" / "61" / "syscall").write_text("44 0x4 0x7ffd 0x64 0x4000 0x0 0x0 0x7ffd 0x7f\n")
        (proc / "60" / "task" / "61" / "comm").write_text("logger\n")
        (proc / "60" / "task" / "62").mkdir()
        (proc / "60" / "task" / "62" / "syscall").write_text("running\n")
        diag = unixsock.parse_diag([_diag_msg(10, name=path.encode(), rq=(100, 0)),
                                    _diag_msg(11, peer=10, mem=(0, 1, 768, 1))])
        s = unixsock.UnixSocketProbe(path, procfs_root=str(proc), diag=lambda: diag).sample()
        assert s.ok and s.inode == 10 and s.receivers[0].comm == "rsyslogd" and s.queue_bytes == 768
        assert s.senders_connected == 1 and s.blocked[0].tid == 61 and s.blocked[0].syscall == "sendto"
        assert ino  # the real file is a socket: the path check passed
    finally:
        srv.close()


def test_unix_socket_bad_paths(tmp_path: Path) -> None:
    f = tmp_path / "plain"
    f.write_text("x")
    s = unixsock.UnixSocketProbe(str(f), procfs_root=str(tmp_path)).sample()
    assert not s.ok and s.reason == "not a socket"
    s = unixsock.UnixSocketProbe(str(tmp_path / "nope"), procfs_root=str(tmp_path)).sample()
    assert not s.ok and s.reason == "no such file"

    def denied():
        raise netlink.NetlinkError("netlink: Operation not permitted", 1)

    sk = str(tmp_path / "s")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sk)
    try:
        s = unixsock.UnixSocketProbe(sk, procfs_root=str(tmp_path), diag=denied).sample()
        assert not s.ok and "not permitted" in s.reason
    finally:
        srv.close()


def test_syscall_line_garbage() -> None:
    assert unixsock.parse_syscall_line("running") is None
    assert unixsock.parse_syscall_line("44 zz") is None
    assert unixsock.parse_syscall_line("46 0x3 0 0") == (46, 3)


# -- audit ----------------------------------------------------------------------------------


def test_audit_parse_and_short_replies() -> None:
    payload = struct.pack("=11I", 0, 1, 1, 4242, 100, 8192, 17, 3, 0, 60000, 5)
    s = audit.sample_from_messages([netlink.Message(audit.AUDIT_GET, 0, 1, payload)])
    assert s.ok and (s.enabled, s.pid, s.rate_limit, s.backlog_limit, s.lost, s.backlog, s.backlog_wait_time) == \
        (1, 4242, 100, 8192, 17, 3, 60000)
    s = audit.sample_from_messages([netlink.Message(audit.AUDIT_GET, 0, 1, payload[:20])])
    assert not s.ok and "too short" in s.reason
    s = audit.sample_from_messages([netlink.Message(audit.AUDIT_GET, 0, 1, payload[:32])])
    assert s.ok and s.backlog_wait_time == -1
    assert not audit.sample_from_messages([]).ok

    def eperm():
        raise netlink.NetlinkError("netlink: Operation not permitted", 1)

    s = audit.AuditProbe(query=eperm).sample()
    assert not s.ok and "CAP_AUDIT_CONTROL" in s.reason


# -- network --------------------------------------------------------------------------------

UDP = """   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 0100007F:0202 00000000:0000 07 00000000:00001200 00:00000000 00000000     0        0 555 2 0000000000000000 42
  101: ZZZZ garbage
  102: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 556 2 0000000000000000 0
"""


def test_udp_snmp_arp_parse(tmp_path: Path) -> None:
    socks, bad = parse_proc_net_udp(UDP, "udp")
    assert bad == 1 and socks[0].local == "127.0.0.1" and socks[0].port == 514
    assert socks[0].rx_queue_bytes == 0x1200 and socks[0].drops == 42
    six, _ = parse_proc_net_udp(UDP.splitlines()[0] + "\n  0: 00000000000000000000000001000000:0202 "
                                "00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 "
                                "00000000 0 0 557 2 0 7\n", "udp6")
    assert six[0].local == "::1" and six[0].drops == 7
    snmp = parse_snmp("Ip: a b\nIp: 1 2\nUdp: InDatagrams InErrors RcvbufErrors\nUdp: 10 3 x\n")
    assert snmp == {"InDatagrams": 10, "InErrors": 3}
    assert parse_arp_cache("entries unresolved_discards\n00000001 0000000a\n00000001 00000005\nbad\n") == 15
    assert parse_arp_cache("") == -1 and parse_arp_cache("entries x\n1 2\n") == -1
    proc = tmp_path / "proc"
    (proc / "net" / "stat").mkdir(parents=True)
    (proc / "net" / "udp").write_text(UDP)
    (proc / "net" / "snmp").write_text("Udp: InDatagrams InErrors RcvbufErrors\nUdp: 10 3 3\n")
    (proc / "net" / "stat" / "arp_cache").write_text("unresolved_discards\n00000002\n")
    make_proc(proc, 9, "rsyslogd", {7: ("socket:[555]", 0, 2)})
    s = NetSyslogProbe(procfs_root=str(proc)).sample()
    assert s.ok and [x.port for x in s.sockets] == [514] and s.sockets[0].comm == "rsyslogd"
    assert s.udp_rcvbuf_errors == 3 and s.udp6_rcvbuf_errors == -1 and s.arp_unresolved_discards == 2
    assert s.bad_lines == 1
    assert not NetSyslogProbe(procfs_root=str(tmp_path / "none")).sample().ok


# -- rsyslog, journald, config --------------------------------------------------------------


def test_impstats_parse(tmp_path: Path) -> None:
    text = ('{ "name": "main Q", "origin": "core.queue", "size": 5, "enqueued": 100, "full": 1, '
            '"discarded.full": 2, "discarded.nf": 3, "maxqsize": 9 }\n'
            'not json at all\n{"broken": \n'
            '@cee: { "name": "action-1", "origin": "core.queue", "size": "7", "enqueued": true }\n'
            '{ "name": "imuxsock", "origin": "imuxsock", "submitted": 4 }\n'
            '{ "name": "main Q", "origin": "core.queue", "size": 6, "enqueued": 110, "full": 1, '
            '"discarded.full": 2, "discarded.nf": 3, "maxqsize": 9 }\n')
    q, bad = parse_impstats(text)
    assert q["main Q"].size == 6 and q["main Q"].enqueued == 110 and q["main Q"].discarded_nf == 3
    assert q["action-1"].size == 7 and q["action-1"].enqueued == 0 and bad == 2
    f = tmp_path / "stats.json"
    assert not RsyslogStatsProbe(str(f)).sample().ok
    f.write_text(text)
    s = RsyslogStatsProbe(str(f)).sample()
    assert s.ok and [x.name for x in s.queues] == ["action-1", "main Q"]


def test_journald_not_running(tmp_path: Path) -> None:
    make_proc(tmp_path, 5, "bash", {})
    s = JournaldProbe(procfs_root=str(tmp_path)).sample()
    assert not s.running and s.reason == "not running"
    make_proc(tmp_path, 6, "systemd-journal", {})
    jdir = tmp_path / "journal" / "abc"
    jdir.mkdir(parents=True)
    (jdir / "system.journal").write_bytes(b"x" * 4096)
    s = JournaldProbe(procfs_root=str(tmp_path), sockets=(), journal_dirs=(str(tmp_path / "journal"),)).sample()
    assert s.running and s.pid == 6 and s.journal_bytes == 4096 and s.journal_files == 1


def test_config(tmp_path: Path, monkeypatch) -> None:
    c = parse_config('[backends]\nfiles = ["/var/log/a"]\nsockets = ["/dev/log"]\nudp_ports = [514]\n'
                     'rsyslog_impstats = "/x.json"\ndiscover = false\n')
    assert c.files == ("/var/log/a",) and c.udp_ports == (514,) and not c.discover and c.audit
    assert c.with_flags(["/b", "/var/log/a"]).files == ("/var/log/a", "/b")
    for bad in ("[backends\n", "[backends]\nfiles = 3\n", "[backends]\nudp_ports = [70000]\n",
                "[backends]\nwhat = 1\n", "backends = 1\n", "[backends]\naudit = \"yes\"\n"):
        with pytest.raises(ConfigError) as e:
            parse_config(bad, "f.toml")
        assert "\n" not in str(e.value) and str(e.value).startswith("f.toml")
    with pytest.raises(ConfigError):
        find_config(str(tmp_path / "missing.toml"))
    p = tmp_path / "c.toml"
    p.write_text('[backends]\nfiles = ["/q"]\n')
    assert load_config(None, {"FIPSTOP_CONFIG": str(p)}).files == ("/q",)
    monkeypatch.chdir(tmp_path)
    assert find_config(None, {}) in (None, "/etc/fipstop.toml")


# -- the aggregate probe and derive ----------------------------------------------------------


def test_rate_rules() -> None:
    assert math.isnan(rate(None, 5, 1.0)) and math.isnan(rate(10, 5, 1.0)) and math.isnan(rate(-1, 5, 1.0))
    assert math.isnan(rate(1, 5, 0.0)) and rate(1, 5, 2.0) == 2.0


def test_backends_probe_fixture_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    logdir = tmp_path / "var" / "log"
    logdir.mkdir(parents=True)
    auth = logdir / "auth.log"
    auth.write_bytes(b"line\n" * 20)
    make_proc(proc, 300, "fail2ban-server", {6: (str(auth), 10, 0)})
    make_proc(proc, 301, "bash", {1: (str(logdir / "ignored.log"), 0, 0)})
    payload = struct.pack("=11I", 0, 1, 1, 1, 0, 64, 5, 0, 0, 0, 0)
    lost = [5]

    def query():
        return [netlink.Message(audit.AUDIT_GET, 0, 1, struct.pack("=11I", 0, 1, 1, 1, 0, 64, lost[0], 0, 0, 0, 0))]

    assert payload
    cfg = BackendsConfig(sockets=(str(tmp_path / "not-there.sock"),), journald=False)
    p = BackendsProbe(cfg, procfs_root=str(proc), diag=lambda: {}, audit_query=query,
                      dev_log=str(tmp_path / "nolog"), discover_under=str(logdir) + "/")
    a = p.sample()
    assert [f.path for f in a.files] == [str(auth)] and a.files[0].readers[0].lag_bytes == 90
    assert not a.sockets[0].ok and a.sockets[0].reason == "no such file"
    lost[0] = 15
    b = p.sample()
    b = BackendsSample(a.taken_mono_ns + 2 * 10**9, b.files, b.sockets, b.net, b.journald,
                       audit.AuditSample(**{k: getattr(b.audit, k) for k in b.audit.__slots__
                                            if k != "taken_mono_ns"}, taken_mono_ns=a.audit.taken_mono_ns + 2 * 10**9),
                       b.rsyslog, b.notes)
    v = derive_backends(a, b)
    assert v.audit.lost_per_s == pytest.approx(5.0) and v.drops_per_s >= 5.0
    doc = view_to_json(v)
    assert doc["audit"]["lost"] == 15 and doc["files"][0]["readers"][0]["lag_bytes"] == 90
    text = format_text(v, escape_text)
    assert "auth.log" in text and "lost 15" in text and "not-there.sock: no such file" in text
    assert math.isnan(derive_backends(None, a).files[0].bytes_per_s)


def test_fd_scan_is_reused_but_never_stale(tmp_path: Path) -> None:
    """The /proc fd scan is kept between polls (it was most of a poll's
    cost); a new process forces a new one, and an fd reused for another file
    is never reported as a reader of the watched one."""
    proc = tmp_path / "proc"
    logdir = tmp_path / "var" / "log"
    logdir.mkdir(parents=True)
    auth, other = logdir / "auth.log", logdir / "other.log"
    auth.write_bytes(b"line\n" * 20)
    other.write_bytes(b"o" * 5000)
    make_proc(proc, 300, "fail2ban-server", {6: (str(auth), 10, 0)})
    cfg = BackendsConfig(files=(str(auth),), journald=False, discover=False)
    p = BackendsProbe(cfg, procfs_root=str(proc), diag=lambda: {}, audit_query=lambda: [],
                      dev_log=str(tmp_path / "nolog"))
    assert [r.pid for r in p.sample().files[0].readers] == [300]
    assert p._last_scan is not None
    scanned = p._last_scan.taken_mono_ns
    p.sample()
    assert p._last_scan.taken_mono_ns == scanned  # same processes, within RESCAN_S: not scanned again
    # a new process reading the file: the pid set changed, so it shows at once
    make_proc(proc, 301, "tail", {3: (str(auth), 100, 0)})
    assert [r.pid for r in p.sample().files[0].readers] == [300, 301]
    assert p._last_scan.taken_mono_ns != scanned
    scanned = p._last_scan.taken_mono_ns
    # pid 300 closes fd 6 and reuses it for another file, within the cached scan
    make_proc(proc, 300, "fail2ban-server", {6: (str(other), 4000, 0)})
    s = p.sample()
    assert p._last_scan.taken_mono_ns == scanned
    assert [(r.pid, r.open_now) for r in s.files[0].readers] == [(300, False), (301, True)]
    assert all(r.lag_bytes != 1000 for r in s.files[0].readers)  # never the other file's figures
    p.sample()
    assert p._last_scan.taken_mono_ns != scanned  # the mismatch forced a new scan


def test_hostile_names_escaped(tmp_path: Path) -> None:
    log = tmp_path / "evil\x1b[31m.log"
    log.write_bytes(b"x\n")
    proc = tmp_path / "proc"
    make_proc(proc, 1, "\x1b[2J[bold]x", {3: (str(log), 0, 0)})
    p = BackendsProbe(BackendsConfig(files=(str(log),), discover=False, audit=False, journald=False),
                      procfs_root=str(proc), diag=lambda: {}, dev_log=str(tmp_path / "x"))
    text = format_text(derive_backends(None, p.sample()), escape_text)
    assert "\x1b" not in text and "[bold]x" in text


def test_samples_survive_the_recording_codec() -> None:
    """A recording stores raw samples: replay re-derives the same view."""
    from fipstop.fixtures import backend_samples
    from fipstop.recording import auxcodec

    a, b = backend_samples(2)
    a2, b2 = auxcodec.loads(auxcodec.dumps(a)), auxcodec.loads(auxcodec.dumps(b))
    assert (a2, b2) == (a, b)
    assert view_to_json(derive_backends(a2, b2)) == view_to_json(derive_backends(a, b))
