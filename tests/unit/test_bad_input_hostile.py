"""Issue 17 items 8 and 10: bad input is one line naming the wrong thing, never a traceback or a hang;
a world-writable domain is warned about by every reader.

Each case runs the real command line in a process of its own, with a timeout: a hang is a failure,
not a stuck test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fipstop import _fips


def fipstop(*argv: str, timeout: float = 30, shm: Path | None = None) -> subprocess.CompletedProcess:
    pre = ["--shm-dir", str(shm)] if shm is not None else []
    return subprocess.run([sys.executable, "-m", "fipstop", *pre, *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(r: subprocess.CompletedProcess, *words: str, code: int = 2) -> None:
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr[-2000:]
    assert r.stderr.startswith("fipstop"), r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.parametrize("argv, words", [
    (["wrap", "--max-rings", "0", "--", "true"], ["--max-rings", "1..65536", "0"]),
    (["wrap", "--max-rings", "100000000", "--", "true"], ["--max-rings"]),
    (["wrap", "--max-record", "-1", "--", "true"], ["--max-record", "-1"]),
    (["wrap", "--max-record", "lots", "--", "true"], ["--max-record", "lots"]),
    (["tail", "--timeout", "-1"], ["--timeout", "-1"]),
    (["tail", "--timeout", "nan"], ["--timeout", "nan"]),
    (["ips", "--readers", "100000"], ["--readers", "100000"]),
    (["ips", "--range-v4-prefix", "40"], ["--range-v4-prefix"]),
])
def test_bad_options(shm_dir: Path, argv: list[str], words: list[str]) -> None:
    one_line(fipstop(*argv, shm=shm_dir), *words)
    assert list(shm_dir.iterdir()) == []  # nothing created on the way


def test_serve_with_a_missing_shm_dir(tmp_path: Path) -> None:
    one_line(fipstop("serve", "--listen", "127.0.0.1:0", shm=tmp_path / "nope", timeout=20), "--shm-dir",
             "no such directory")


def test_filter_files_that_are_not_filters(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("x 192.0.2.1\n")
    bad = tmp_path / "bad.conf"
    bad.write_bytes(b"[Definition]\nfailregex = ^x \xff <HOST>$\n")
    one_line(fipstop("ips", "--check", str(lines), "--filter", str(bad)), "not UTF-8", "0xff")
    # /dev/zero as the filter, as an include, as the jail config, as the lines: one line, no hang
    one_line(fipstop("ips", "--check", str(lines), "--filter", "/dev/zero", timeout=20), "/dev/zero")
    inc = tmp_path / "inc.conf"
    inc.write_text("[INCLUDES]\nbefore = /dev/zero\n[Definition]\nfailregex = ^x <HOST>$\n")
    one_line(fipstop("ips", "--check", str(lines), "--filter", str(inc), timeout=20), "/dev/zero",
             "character device")
    one_line(fipstop("ips", "--check", str(lines), "--config", "/dev/zero", timeout=20), "/dev/zero",
             "character device")
    one_line(fipstop("ips", "--check", "/dev/zero", timeout=20), "/dev/zero", "device")
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)
    one_line(fipstop("ips", "--check", str(lines), "--filter", str(fifo), timeout=20), "FIFO")


def test_check_lines_without_newlines_are_bounded(tmp_path: Path) -> None:
    """A FIFO (or pipe) may be a log, but never one line the size of memory."""
    p = subprocess.Popen([sys.executable, "-m", "fipstop", "ips", "--check", "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None
    chunk = b"\0" * (1 << 20)
    for _ in range(64):  # 64 MiB without a newline, then a line
        p.stdin.write(chunk)
    p.stdin.write(b"\n<30>named[7]: client @0x1 192.0.2.7#53 (x): query (cache) 'x/A/IN' denied\n")
    p.stdin.close()
    assert p.stdout is not None and p.stderr is not None
    out, err = p.stdout.read(), p.stderr.read()
    p.wait(timeout=120)
    assert p.returncode == 0, err
    assert out.startswith(b"2 lines"), out[:200]


def test_a_missing_before_include_is_warned_about(tmp_path: Path) -> None:
    d = tmp_path / "filter.d"
    d.mkdir()
    (d / "t.conf").write_text("[INCLUDES]\nbefore = nope-common.conf\nafter = t-extra.local\n"
                              "[Definition]\nfailregex = ^x <HOST>$\n")
    lines = tmp_path / "lines.txt"
    lines.write_text("x 192.0.2.1\n")
    r = fipstop("ips", "--check", str(lines), "--filter-dir", str(d), "--filter", "t")
    assert r.returncode == 0, r.stderr
    warned = [x for x in r.stdout.splitlines() if "warning:" in x]
    # the missing .conf is said; a missing X.local is Fail2Ban's optional override, not a mistake
    assert len(warned) == 1 and f"{d}/nope-common.conf does not exist" in warned[0], r.stdout


def test_a_world_writable_domain_is_warned_about(shm_dir: Path, tmp_path: Path) -> None:
    _fips.Domain("open", shm_dir, ring_capacity=1 << 16).close()
    path = shm_dir / "fips.open"
    os.chmod(path, 0o666)
    r = fipstop("snapshot", shm=shm_dir)
    assert r.returncode == 0 and "WARNING" in r.stderr and "world-writable" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
    r = fipstop("tail", "--domain", "open", "--timeout", "0.5", shm=shm_dir)
    assert r.returncode == 0 and r.stderr.count("\n") == 1 and "world-writable (mode 0666)" in r.stderr, r.stderr
    stats = tmp_path / "s.json"
    r = fipstop("ips", "--domain", "open", "--duration", "1.5", "--stats-json", str(stats), "-q",
                "--no-bans-domain", shm=shm_dir)
    assert r.returncode == 0, r.stderr
    assert [x for x in r.stderr.splitlines() if "world-writable" in x], r.stderr
    from fipstop.ips.stats import read_stats

    assert any("world-writable" in f for f in read_stats(stats).findings)
    rec = tmp_path / "r.fsr"
    r = fipstop("record", "-o", str(rec), "--duration", "0.5", "--interval", "0.1", "--quiet", shm=shm_dir)
    assert r.returncode == 0 and "world-writable" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    os.chmod(path, 0o640)
    r = fipstop("snapshot", shm=shm_dir)
    assert r.returncode == 0 and r.stderr == ""
