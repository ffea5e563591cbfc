"""`fipstop ips` as a process: consume a real domain, ban, publish events, write stats; bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.bans import BanEvent, decode_record
from fipstop.cli import main
from fipstop.ips.stats import read_stats


def denied(ip: str) -> bytes:
    return f"<30>named[7]: client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


def ips_proc(shm: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "ips", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_registered(shm: Path, domain: str, name: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    from fipstop.ring import take_snapshot

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        with _fips.Monitor(domain, shm) as m:
            s = take_snapshot(m)
            if name.encode() in [bytes(c["name"]).rstrip(b"\0") for c in s.consumers if c["state"] == 2]:
                return
        time.sleep(0.05)
    raise AssertionError("fipstop ips did not register")


def wait_until(cond, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def stats_ok(path: Path, cond) -> bool:
    try:
        return cond(read_stats(path))
    except (OSError, ValueError):
        return False


def read_bans(shm: Path, name: str = "fips-bans") -> list:
    with _fips.Domain(name, shm, create=False) as d, _fips.Consumer(d, "test") as c:
        out = []
        while (b := c.read()) is not None:
            out += [e for r in b if isinstance(e := decode_record(r), BanEvent)]  # tallies are no events
            b.release()
        return out


def test_bans_from_a_domain(shm_dir: Path, tmp_path: Path) -> None:
    stats = tmp_path / "stats.json"
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        proc = ips_proc(shm_dir, "--domain", "app", "--consumer", "ips", "--maxretry", "3", "--bantime", "1",
                        "--ignoreip", "10.9.0.0/16", "--stats-json", str(stats), "--duration", "30")
        wait_registered(shm_dir, "app", "ips", proc)
        for ip in ("10.0.0.1", "2001:db8::7", "10.9.1.1", "evil.example", "10.0.0.2"):
            n = 3 if ip != "10.0.0.2" else 2  # 10.0.0.2 stays below maxretry
            for _ in range(n):
                p.log(denied(ip))
        p.log(b"<30>named[7]: an unrelated line")
        wait_until(lambda: stats_ok(stats, lambda s: s.unbans == 2 and s.records == 15))
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    s = read_stats(stats)
    assert (s.records, s.matched, s.not_ip, s.bans, s.unbans, s.active_bans) == (15, 11, 3, 2, 2, 0)
    assert s.jails["named-refused"].maxretry == 3 and s.action == "dry-run" and s.consumer == "ips"
    assert s.time_to_ban_ms.count == 2 and s.events_published == 4
    evs = read_bans(shm_dir)
    assert sorted((e.kind, e.ip) for e in evs) == [("ban", "10.0.0.1"), ("ban", "2001:db8::7"),
                                                   ("unban", "10.0.0.1"), ("unban", "2001:db8::7")]
    assert all(e.jail == "named-refused" and e.hits == 3 and e.first_ns <= e.trigger_ns <= e.ban_ns for e in evs)
    assert "ban 10.0.0.1 jail=named-refused hits=3" in err


def test_a_session_filter_on_dated_and_shim_records(shm_dir: Path, tmp_path: Path) -> None:
    """A Fail2Ban filter with <F-MLFID> sessions, <F-NOFAIL> and <F-USER> on a live domain whose
    records come with and without dates: the session gives its address to a later failure, the
    <F-NOFAIL> line is no failure, the ban event carries the user."""
    d = tmp_path / "filter.d"
    d.mkdir()
    (d / "authd.conf").write_text(
        "[Definition]\nprefregex = ^<F-MLFID>\\s*\\S+ authd\\[\\d+\\]: </F-MLFID><F-CONTENT>.+</F-CONTENT>$\n"
        "failregex = ^<F-NOFAIL>connect from <HOST></F-NOFAIL>$\n"
        "            ^bad password for <F-USER>\\S+</F-USER>$\n"
        "datepattern = {^LN-BEG}\n")
    stats = tmp_path / "stats.json"
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as dom:
        p = _fips.Producer(dom)
        proc = ips_proc(shm_dir, "--domain", "app", "--consumer", "ips", "--filter-dir", str(d), "--filter", "authd",
                        "--maxretry", "2", "--stats-json", str(stats), "--duration", "30")
        wait_registered(shm_dir, "app", "ips", proc)
        p.log(b"Feb 25 14:34:10 host authd[7]: connect from 10.0.0.7")  # dated (a forwarded line)
        p.log(b"<38>authd[8]: connect from 10.0.0.8")  # libfips_syslog.so: no date, no host
        p.log(b"Feb 25 14:34:11 host authd[7]: bad password for root")
        p.log(b"<38>authd[8]: bad password for eve")
        p.log(b"<38>authd[8]: bad password for eve")
        p.log(b"Feb 25 14:34:12 host authd[7]: bad password for root")
        wait_until(lambda: stats_ok(stats, lambda s: s.bans == 2 and s.records == 6))
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    s = read_stats(stats)
    assert (s.matched, s.nofail, s.dated) == (4, 2, 3), s
    assert s.jails["authd"].failregex_hits == (2, 4)
    evs = {e.ip: e for e in read_bans(shm_dir) if e.kind == "ban"}
    assert set(evs) == {"10.0.0.7", "10.0.0.8"}
    assert evs["10.0.0.7"].data == (("user", "root"),) and evs["10.0.0.8"].data == (("user", "eve"),)
    assert "ban 10.0.0.8 jail=authd hits=2" in err and "user=eve" in err


def test_stats_to_stdout_and_command_action(shm_dir: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "banned"
    with _fips.Domain("app", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        proc = ips_proc(shm_dir, "--domain", "app", "--consumer", "ips", "--maxretry", "2", "--no-bans-domain",
                        "--action", "command", "--command", f"sh -c 'echo $0 $1 >> {out_file}' <ip> <jail>",
                        "--stats-json", "-", "--duration", "30", "-q")
        wait_registered(shm_dir, "app", "ips", proc)
        for _ in range(2):
            p.log(denied("192.0.2.5"))
        wait_until(lambda: out_file.exists() and out_file.read_text().endswith("\n"))
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs and docs[-1]["bans"] == 1 and docs[-1]["action"] == "command"
    assert out_file.read_text() == "192.0.2.5 named-refused\n"
    assert not (shm_dir / "fips.fips-bans").exists()
    assert err == ""


@pytest.mark.parametrize("argv, msg", [
    (["ips", "--domain", "nope"], "nope"),
    (["ips", "--jail", "nope"], "unknown jail"),
    (["ips", "--filter", "/nonexistent/x.conf"], "does not exist"),
    (["ips", "--action", "command"], "--command"),
    (["ips", "--action", "nft", "--nft-set", "inet:x"], "FAMILY:TABLE:SET"),
    (["ips", "--ignoreip", "not-a-net"], "not an address"),
    (["ips", "--ipv6-prefix", "200"], "ipv6-prefix"),
    (["ips", "--bans-domain", "only"], "is the domain being consumed"),
])
def test_bad_input_is_one_line(argv: list[str], msg: str, shm_dir: Path, capsys: pytest.CaptureFixture) -> None:
    _fips.Domain("only", shm_dir, ring_capacity=1 << 16).close()
    assert main(["--shm-dir", str(shm_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fipstop: ") and err.count("\n") == 1 and msg in err


def test_bad_regex_in_config(shm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _fips.Domain("only", shm_dir, ring_capacity=1 << 16).close()
    cfg = tmp_path / "j.ini"
    cfg.write_text("[broken]\nfailregex = ^(unclosed <HOST>\n")
    assert main(["--shm-dir", str(shm_dir), "ips", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fipstop: filter broken: failregex 1: Python's re rejects it: missing ), unterminated "
                          "subpattern (in '^(unclosed <HOST>')") and err.count("\n") == 1, err


def test_non_utf8_filter_and_config_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = tmp_path / "filter.d"
    d.mkdir()
    (d / "b.conf").write_bytes(b"[Definition]\nfailregex = ^a \xff <HOST>\n")
    (tmp_path / "j.ini").write_bytes(b"[x]\nfailregex = ^a \xff <HOST>\n")
    (tmp_path / "log").write_bytes(b"")
    for argv in (["--filter-dir", str(d), "--filter", "b"], ["--config", str(tmp_path / "j.ini")]):
        assert main(["ips", "--check", str(tmp_path / "log"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not UTF-8 (byte 0xff" in err, err


def test_usage_errors() -> None:
    assert main(["ips", "--readers", "0"]) == 2
    assert main(["ips", "--maxretry", "x"]) == 2


def test_check_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "lines"
    f.write_bytes(denied("10.0.0.1") + b"\n" + b"Nov 30 12:00:01 ns1 " + denied("10.0.0.1")[len("<30>"):] + b"\n"
                  + denied("bad.host") + b"\n\x1b[31mjunk\xff\n# a comment\n")
    assert main(["ips", "--check", str(f), "--maxretry", "2", "--print-missed"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "4 lines"
    assert "  Failregex: 3 total" in lines and "  |   1) [3] ^(?:view (?:internal|external): )?query(?: \\(cache\\))?" in lines
    assert "  Lines: 4 lines, 0 ignored, 3 matched, 1 missed" in lines
    assert "  |  matched: 2 with an address, 1 with a DNS name (not resolved, by design), 0 with a host that is not " \
           "an address" in lines
    assert "  |         2  10.0.0.1" in lines and "  |         1  bad.host" in lines
    assert "  Date template hits: 1 of 4 lines" in lines
    assert "  |  \\x1b[31mjunk\ufffd" in lines  # attacker text escaped, never raw ESC
    assert "\x1b" not in out
    assert main(["ips", "--check", str(tmp_path / "missing")]) == 2


def test_check_with_a_real_filter_and_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = tmp_path / "filter.d"
    d.mkdir()
    (d / "demo.conf").write_text(
        "[Definition]\nprefregex = ^<F-MLFID>\\s*\\S+ demo\\[\\d+\\]: </F-MLFID><F-CONTENT>.+</F-CONTENT>$\n"
        "failregex = ^bad password for <F-USER>\\S+</F-USER> from <HOST>$\n"
        "            <mode-<mode>>\n"
        "            ^<F-NOFAIL>connect from <HOST></F-NOFAIL>$\n"
        "            ^gave up$\n"
        "mode-normal =\nmode-strict = ^probe from <HOST>$\n"
        "ignoreregex = for admin\nmode = normal\n")
    f = tmp_path / "log"
    f.write_text("Feb 25 14:34:10 host demo[1]: bad password for root from 10.0.0.1\n"
                 "Feb 25 14:34:20 host demo[1]: bad password for bob from 10.0.0.1\n"
                 "Feb 25 14:34:30 host demo[1]: probe from 10.0.0.2\n"
                 "Feb 25 14:34:40 host demo[2]: bad password for admin from 10.0.0.3\n"
                 "Feb 25 14:34:41 host demo[3]: connect from 10.0.0.4\n"
                 "Feb 25 14:34:42 host demo[3]: gave up\n")
    argv = ["ips", "--check", str(f), "--filter-dir", str(d), "--maxretry", "2", "--print-ignored"]
    assert main(argv + ["--filter", "demo[mode=strict]"]) == 0
    out = capsys.readouterr().out
    assert "jail demo: filter " in out and "[mode=strict]" in out
    assert "  Lines: 6 lines, 1 ignored, 4 matched, 1 missed" in out
    assert "  |         2  10.0.0.1  user=bob,root" in out or "  |         2  10.0.0.1  user=root,bob" in out
    assert "1 would be banned" in out
    assert "  |  [6] {^LN-BEG}(?:DAY )?MON Day %k:Minute:Second(?:\\.Microseconds)?(?: ExYear)?" in out
    assert "Ignored line(s): 1" in out and "bad password for admin" in out
    # a mode the filter does not have: refused in one line, exit 2
    assert main(argv + ["--filter", "demo[mode=lax]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'<mode-lax>', a tag no option defines" in err


