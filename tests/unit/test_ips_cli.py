"""`fipstop ips` as a process: consume a real domain, ban, publish events, write stats; bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.bans import decode
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
            out += [decode(r) for r in b]
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
    assert err.startswith("fipstop: jail broken: bad regex") and err.count("\n") == 1


def test_usage_errors() -> None:
    assert main(["ips", "--readers", "0"]) == 2
    assert main(["ips", "--maxretry", "x"]) == 2


def test_check_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "lines"
    f.write_bytes(denied("10.0.0.1") + b"\n" + denied("10.0.0.1")[len("<30>named[7]: "):] + b"\n"
                  + denied("bad.host") + b"\n\x1b[31mjunk\n")
    assert main(["ips", "--check", str(f), "--maxretry", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == [
        "4 lines",
        "jail named-refused: 2 matched, 0 ignored (ignoreregex), 1 not an IP, 1 not matched; 1 addresses, "
        "1 at or above maxretry 2",
        "         2  10.0.0.1"]
    assert main(["ips", "--check", str(tmp_path / "missing")]) == 2
