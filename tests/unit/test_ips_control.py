"""The control socket of `fipstop ips` (fipstop.ips.control): the protocol against hostile input (oversized
lines, bad JSON, wrong types, unknown commands, bad addresses, injection in the jail name), the server's
socket (0600, stale replaced, live and non-socket refused, a malformed request never kills it), the engine's
unban (the action's unban, forgotten, an unban event, the old expiry not ending a new ban) and the bantime /
control fields on the bans wire (old records still decode: unknown)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fipstop.bans import BanEvent, IpsTally, decode, decode_record, encode, encode_tally, event_parts, wire_str
from fipstop.errors import FipsError
from fipstop.ips import run as ips_run
from fipstop.ips.actions import OK, DryRun
from fipstop.ips.control import MAX_REQUEST, ControlError, ControlServer, default_path, handle_line, request
from fipstop.ips.jails import BUILTIN_JAILS, compile_jail

NOW = time.time_ns()


class FakeCtl:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.banned = {("sshd", "10.0.0.7"), ("sshd", "2001:db8::7"), ("sshd", "198.18.7.0/24")}

    def control_status(self):
        return {"active": len(self.banned), "jails": {"sshd": {"bans": 3, "active": len(self.banned), "failed": 0}}}

    def control_unban(self, jail, ip):
        self.calls.append((jail, ip))
        if (jail, ip) not in self.banned:
            return False, f"{ip} is not banned in {jail}"
        self.banned.discard((jail, ip))
        return True, f"unbanned {ip} in {jail}"


def ask(line: bytes, ctl=None) -> dict:
    out = handle_line(line, ctl or FakeCtl())
    assert out.endswith(b"\n") and out.count(b"\n") == 1  # one line, whatever came in
    assert all(32 <= c < 127 for c in out[:-1])  # ASCII JSON: no raw control character reaches a terminal
    return json.loads(out)


def test_status_and_unban() -> None:
    ctl = FakeCtl()
    assert ask(b'{"cmd":"status"}', ctl) == {"ok": True, **ctl.control_status()}
    assert ask(b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}', ctl) == {"ok": True,
                                                                           "message": "unbanned 10.0.0.7 in sshd"}
    assert ask(b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}', ctl) == {"ok": False,
                                                                           "error": "10.0.0.7 is not banned in sshd"}
    # the address reaches the engine canonical: as the IPS keys it
    assert ask(b'{"cmd":"unban","jail":"sshd","ip":"2001:DB8:0::7"}', ctl)["ok"]
    assert ask(b'{"cmd":"unban","jail":"sshd","ip":"198.18.7.0/24"}', ctl)["ok"]
    assert ctl.calls[-2:] == [("sshd", "2001:db8::7"), ("sshd", "198.18.7.0/24")]


@pytest.mark.parametrize("line, why", [
    (b"x" * (MAX_REQUEST + 1), "longer than"),
    (b"{not json", "not a JSON request"),
    (b"\xff\xfe{}", "not a JSON request"),
    (b"[1,2]", "not a JSON object"),
    (b'"status"', "not a JSON object"),
    (b"{}", "unknown command"),
    (b'{"cmd":"shutdown"}', "unknown command"),
    (b'{"cmd":["status"]}', "unknown command"),
    (b'{"cmd":7}', "unknown command"),
    (b'{"cmd":"unban"}', "'jail' must be"),
    (b'{"cmd":"unban","jail":["sshd"],"ip":"10.0.0.7"}', "'jail' must be"),
    (b'{"cmd":"unban","jail":"","ip":"10.0.0.7"}', "'jail' must be"),
    (b'{"cmd":"unban","jail":"sshd","ip":167772167}', "'ip' must be"),
    (b'{"cmd":"unban","jail":"sshd","ip":null}', "'ip' must be"),
    (b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.256"}', "is not an IP address"),
    (b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7 } ; flush ruleset"}', "is not an IP address"),
    (b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7/24"}', "is not an IP address"),  # host bits set
    (b'{"cmd":"unban","jail":"sshd","ip":"example.com"}', "is not an IP address"),
    (b'{"cmd":"unban","jail":"sshd","ip":"\\u001b[2J10.0.0.7"}', "is not an IP address"),
])
def test_hostile_requests_get_an_error_reply(line: bytes, why: str) -> None:
    ctl = FakeCtl()
    rep = ask(line, ctl)
    assert rep["ok"] is False and why in rep["error"], rep
    assert ctl.calls == []  # never reached the engine


def test_jail_name_injection_is_data() -> None:
    ctl = FakeCtl()
    evil = 'sshd"}\n{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}\x1b[31m'
    rep = ask(json.dumps({"cmd": "unban", "jail": evil, "ip": "10.0.0.7"}).encode(), ctl)
    assert rep == {"ok": False, "error": f"10.0.0.7 is not banned in {' '.join(evil.split())}"}
    assert ctl.calls == [(evil, "10.0.0.7")] and ("sshd", "10.0.0.7") in ctl.banned


def test_a_controller_bug_is_an_error_reply() -> None:
    class Broken(FakeCtl):
        def control_unban(self, jail, ip):
            raise KeyError("oops")
    rep = ask(b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}', Broken())
    assert rep["ok"] is False and rep["error"].startswith("internal error: KeyError")


def test_default_path() -> None:
    assert default_path("fips-bans", "/dev/shm", uid=0, env={}) == "/run/fipstop/ips-fips-bans.sock"
    assert default_path("x-bans", "/dev/shm", uid=1000, env={"XDG_RUNTIME_DIR": "/run/user/1000"}) == \
        "/run/user/1000/fipstop/ips-x-bans.sock"
    assert default_path("fips-bans", "/dev/shm", uid=1000, env={}) is None  # no runtime dir: no default
    assert default_path("fips-bans", "/dev/shm", uid=1000, env={"XDG_RUNTIME_DIR": "rel"}) is None
    a, b = default_path("fips-bans", "/tmp/a", uid=0, env={}), default_path("fips-bans", "/tmp/b", uid=0, env={})
    assert a != b and a is not None and a.startswith("/run/fipstop/ips-fips-bans-")  # a test's own shm dir
    assert default_path(None, "/dev/shm", uid=0, env={}) == "/run/fipstop/ips-no-bans.sock"


# -- the server ----------------------------------------------------------------------------------------------

@pytest.fixture
def server(tmp_path: Path):
    ctl = FakeCtl()
    logs: list[str] = []
    srv = ControlServer(str(tmp_path / "run" / "ips.sock"), ctl, logs.append)
    srv.start()
    yield srv, ctl
    srv.close()


def raw(path: str, data: bytes) -> list[dict]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:  # the server hung up first (an oversized request): its reply is still there
        pass
    buf = b""
    while chunk := s.recv(65536):
        buf += chunk
    s.close()
    return [json.loads(x) for x in buf.splitlines()]


def test_server_socket_is_owner_only_and_answers(server) -> None:
    srv, ctl = server
    st = os.stat(srv.path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert request(srv.path, {"cmd": "status"})["active"] == 3
    # several requests on one connection, a bad one among them: each answered, in order
    reps = raw(srv.path, b'{"cmd":"status"}\nnope\n\n{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}\n'
                         b'{"cmd":"unban","jail":"sshd","ip":"10.0.0.7"}')
    assert [r["ok"] for r in reps] == [True, False, True, False]
    assert reps[3]["error"] == "10.0.0.7 is not banned in sshd"


def test_oversized_request_is_answered_and_cut_off(server) -> None:
    srv, _ = server
    (rep,) = raw(srv.path, b'{"cmd":"status","pad":"' + b"x" * (MAX_REQUEST * 4) + b'"}\n{"cmd":"status"}\n')
    assert rep["ok"] is False and "longer than" in rep["error"]
    assert request(srv.path, {"cmd": "status"})["ok"]  # the server lives on


def test_many_clients_and_a_silent_one_do_not_stop_it(server) -> None:
    srv, _ = server
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(srv.path)  # sends nothing
    results = []
    threads = [threading.Thread(target=lambda: results.append(request(srv.path, {"cmd": "status"})["ok"]))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    silent.close()
    assert results == [True] * 6


def test_stale_socket_replaced_live_and_other_files_refused(tmp_path: Path) -> None:
    path = tmp_path / "ips.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # a dead IPS's socket: nobody listens
    srv = ControlServer(str(path), FakeCtl(), lambda m: None)
    srv.start()
    try:
        assert request(str(path), {"cmd": "status"})["ok"]
        with pytest.raises(FipsError, match="another process answers on it"):
            ControlServer(str(path), FakeCtl(), lambda m: None)
        assert request(str(path), {"cmd": "status"})["ok"]  # the live one untouched
    finally:
        srv.close()
    assert not path.exists()  # removed on close
    path.write_text("not a socket")
    with pytest.raises(FipsError, match="not a socket"):
        ControlServer(str(path), FakeCtl(), lambda m: None)
    assert path.read_text() == "not a socket"
    with pytest.raises(FipsError, match="longer than"):
        ControlServer(str(tmp_path / ("x" * 120)), FakeCtl(), lambda m: None)


def test_client_errors(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="does not exist") as e:
        request(str(tmp_path / "none.sock"), {"cmd": "status"})
    assert e.value.kind == "absent"
    # something else listening there: not our protocol
    path = tmp_path / "other.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)

    def answer() -> None:
        c, _ = s.accept()
        c.recv(100)
        c.sendall(b"HTTP/1.0 400 nope\r\n\r\n")
        c.close()
    t = threading.Thread(target=answer)
    t.start()
    with pytest.raises(ControlError, match="not a fipstop ips control socket") as e:
        request(str(path), {"cmd": "status"})
    t.join()
    s.close()
    assert e.value.kind == "protocol"


# -- the engine -----------------------------------------------------------------------------------------------

class FakePublisher:
    def __init__(self) -> None:
        self.events: list[BanEvent] = []
        self.published = self.dropped = 0

    def publish_many(self, records) -> None:
        self.events += [decode(r) for r in records]


def engine(action, bantime=600.0):
    spec = replace(BUILTIN_JAILS["named-refused"], bantime_s=bantime)
    pub = FakePublisher()
    e = ips_run.Engine([spec], [compile_jail(spec)], action, pub, 3, 2, lambda m: None)
    return e, pub


def trig(ip="10.0.0.1"):
    return ("named-refused", ip, NOW - 5_000_000, NOW - 1_000_000, 5, None)


def test_engine_unban_now() -> None:
    calls = []

    class Recording(DryRun):
        def unban(self, jobs):
            calls.extend((j.kind, j.jail, j.ip) for j in jobs)
            return [OK] * len(jobs)
    e, pub = engine(Recording())
    e.triggers([trig("10.0.0.1"), trig("10.0.0.2")])
    assert e.unban_now("named-refused", "10.0.0.3") == (False, "10.0.0.3 is not banned in named-refused")
    ok, msg = e.unban_now("sshd", "10.0.0.1")
    assert not ok and msg.startswith("no jail 'sshd'")
    assert e.unban_now("named-refused", "10.0.0.1") == (True, "unbanned 10.0.0.1 in named-refused")
    assert calls == [("unban", "named-refused", "10.0.0.1")]
    assert ("named-refused", "10.0.0.1") not in e.active and e.unbans == 1 and e.per_jail["named-refused"][1] == 1
    assert [(ev.kind, ev.ip, ev.result) for ev in pub.events][-1] == ("unban", "10.0.0.1", "ok")
    # the ban events carry the jail's bantime: the end is known
    ban = pub.events[0]
    assert ban.kind == "ban" and ban.expires_ns == ban.ban_ns + 600 * 10**9
    assert pub.events[-1].expires_ns is None
    # forgotten: it can be banned again
    e.triggers([trig("10.0.0.1")])
    assert e.bans == 3 and ("named-refused", "10.0.0.1") in e.active


def test_old_expiry_does_not_end_a_new_ban(monkeypatch: pytest.MonkeyPatch) -> None:
    e, pub = engine(DryRun(), bantime=600.0)
    e.triggers([trig("10.0.0.1")])
    assert e.unban_now("named-refused", "10.0.0.1")[0]
    e.triggers([trig("10.0.0.1")])  # banned again
    # the first ban's expiry comes due: it is not this ban's, so nothing ends
    (jail, dq), = e.expiry.items()
    first = dq[0]
    dq[0] = (0.0, first[1], first[2])
    e.tick()
    assert ("named-refused", "10.0.0.1") in e.active and e.unbans == 1
    dq[0] = (0.0, dq[0][1], dq[0][2])  # the new ban's own expiry: it ends
    e.tick()
    assert ("named-refused", "10.0.0.1") not in e.active and e.unbans == 2


def test_failed_action_unban_keeps_the_ban() -> None:
    class Failing(DryRun):
        def unban(self, jobs):
            return ["nft exit 1: Error: Could not process rule"] * len(jobs)
    e, pub = engine(Failing())
    e.triggers([trig("10.0.0.1")])
    ok, msg = e.unban_now("named-refused", "10.0.0.1")
    assert not ok and "Could not process rule" in msg and "the ban stays" in msg
    assert ("named-refused", "10.0.0.1") in e.active and e.unbans == 0 and e.failures == 1
    assert [ev.kind for ev in pub.events] == ["ban"]


def test_command_without_unban_command_is_refused(tmp_path: Path) -> None:
    from fipstop.ips.actions import Command

    e, _ = engine(Command("true <ip>", None))
    e.triggers([trig("10.0.0.1")])
    assert ips_wait(lambda: ("named-refused", "10.0.0.1") in e.active)
    ok, msg = e.unban_now("named-refused", "10.0.0.1")
    assert not ok and "--unban-command" in msg and ("named-refused", "10.0.0.1") in e.active
    e.stop()


def ips_wait(cond, timeout=10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


# -- the wire --------------------------------------------------------------------------------------------------

def test_bantime_on_the_wire_and_old_events() -> None:
    from fipstop import _ipsfast

    head, tail = event_parts("ban", "nft", bantime_ms=600_000)
    (rec,) = _ipsfast.format_events([("sshd", "10.0.0.1", 1, 2, 5)], head, {"sshd": wire_str("sshd")}, 99, tail)
    ev = decode(rec)
    assert ev.expires_ns == 99 + 600_000 * 10**6 and b'"bantime_ms":600000' in rec
    assert encode(ev) == rec  # byte for byte what the C formats
    # an unban carries none
    assert event_parts("unban", "nft", bantime_ms=5)[1] == event_parts("unban", "nft")[1]
    # a recording made before: no bantime, the end unknown
    old = (b'{"v":1,"kind":"ban","ip":"10.0.0.1","jail":"sshd","first_ns":1,"trigger_ns":2,"ban_ns":99,"hits":5,'
           b'"action":"nft","result":"ok","source":"fipstop-ips"}')
    assert decode(old).expires_ns is None
    for bad in (b'"bantime_ms":-1', b'"bantime_ms":"600"', b'"bantime_ms":1e3', b'"bantime_ms":1099511627776'):
        with pytest.raises(ValueError, match="bantime_ms"):
            decode(old.replace(b'"action"', bad + b',"action"'))


def test_control_path_in_the_tally() -> None:
    t = IpsTally("fipstop-ips", 1, 2, 3, 4, 0, 4, 0, 4, 0, jails=(("sshd", 4, 4, 0),), control="/run/fipstop/x.sock")
    back = decode_record(encode_tally(t))
    assert isinstance(back, IpsTally) and back.control == "/run/fipstop/x.sock" and back.jails == t.jails
    assert decode_record(encode_tally(replace(t, control=""))).control == ""  # type: ignore[union-attr]
    old = encode_tally(replace(t, control=""))
    assert b"control" not in old
    for bad in ('"x\\u001b[2J"', "7", '"' + "a" * 200 + '"'):
        with pytest.raises(ValueError, match="control"):
            decode_record(old.replace(b',"jails"', f',"control":{bad},"jails"'.encode()))


def test_the_socket_reaches_the_dashboards_source_stats() -> None:
    from fipstop.model.bans import derive_bans
    from fipstop.probes.bans import BansSample

    t = IpsTally("fipstop-ips", 1, 2, 3, 4, 0, 4, 0, 4, 0, control="/run/fipstop/ips-fips-bans.sock")
    st = derive_bans(None, [BansSample("fipstop-ips", 1, 2, ips=t),
                            BansSample("fail2ban", 1, 2, probe="fail2ban", control="/tmp/f2b.sock")])
    assert st.source("fipstop-ips").control == "/run/fipstop/ips-fips-bans.sock"  # type: ignore[union-attr]
    assert st.source("fail2ban").control == "/tmp/f2b.sock"  # type: ignore[union-attr]
    # an IPS that publishes none (an old one, --no-control): none
    st = derive_bans(None, [BansSample("fipstop-ips", 1, 2, ips=replace(t, control=""))])
    assert st.source("fipstop-ips").control == ""  # type: ignore[union-attr]


def test_client_reads_the_answer_of_a_server_that_hung_up_without_reading(tmp_path: Path) -> None:
    """A refused peer is answered and hung up on unread: the client's send fails (EPIPE), the answer is
    still read (this was a flaky 'Broken pipe' instead of 'permission denied')."""
    path = tmp_path / "refuser.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)

    def refuse() -> None:
        c, _ = s.accept()
        c.sendall(b'{"ok":false,"error":"permission denied: uid 65534 may not control this fipstop ips"}\n')
        c.close()
    t = threading.Thread(target=refuse)
    t.start()
    with pytest.raises(ControlError, match="permission denied: uid 65534") as e:
        request(str(path), {"cmd": "unban", "jail": "x" * (4 << 20), "ip": "10.0.0.7"})  # > any socket buffer
    t.join()
    s.close()
    assert e.value.kind == "denied"
