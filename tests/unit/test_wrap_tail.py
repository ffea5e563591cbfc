"""`fipstop wrap` (a program run with the syslog(3) drop-in preloaded, after
the checks that keep it from preloading into what it must not) and `fipstop
tail` (a domain's records printed in order, escaped, with losses said)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shimprog import CC, DOMAIN_OPTS, REPO, Ring, drain, parse_output, strerror

from fipstop import _fips
from fipstop._fips import Consumer, Domain, Producer
from fipstop.ring import snapshot_domain
from fipstop.textsafe import escape_bytes

# ---------------------------------------------------------------------------
# fipstop wrap
# ---------------------------------------------------------------------------


def fipstop(*args: str, shm: Path | None = None, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fipstop"]
    if shm is not None:
        cmd += ["--shm-dir", str(shm)]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([*cmd, *args], capture_output=True, timeout=timeout, env=env, cwd=REPO, **kw)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    err = proc.stderr.decode() if isinstance(proc.stderr, bytes) else proc.stderr
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fipstop"), err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


def test_wrap_dynamic_binary(progs: dict[str, Path], shm_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fipstop", "--shm-dir", str(shm_dir), "wrap", "--domain", "w",
         "--ring-size", "64K", "--", str(progs["fortify"]), "plain"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    run = parse_output(out.decode())
    assert int(run["pid"][0]) == proc.pid  # exec'd: the program keeps the pid
    assert run["dropped"] == ["0"]
    with Domain("w", shm_dir, create=False) as d:
        assert d.ring_capacity == 1 << 16
        c = Consumer(d, "t")
        payloads = [r.data for r in drain(c)]
        c.close()
    assert payloads == [
        b"<14>syslog_prog: hello 42 world 003.1 ff",
        b"<11>syslog_prog: open failed: " + strerror(errno.ENOENT),
        b"<12>syslog_prog: again: " + strerror(errno.EACCES) + b" (7)",
    ]


def test_wrap_existing_domain_and_script(progs: dict[str, Path], shm_dir: Path, tmp_path: Path) -> None:
    """A #! script is wrapped (its interpreter is dynamic) and the preload
    reaches the program it execs; an existing domain is reused."""
    ring = Ring(shm_dir, name="w")
    try:
        script = tmp_path / "run.sh"
        script.write_text(f"#!/bin/sh\nexec {progs['plain']} many 3\n")
        script.chmod(0o755)
        proc = fipstop("wrap", "--domain", "w", "--", str(script), shm=shm_dir)
        assert proc.returncode == 0, proc.stderr
        assert ring.payloads() == [b"<14>syslog_prog: many %d" % i for i in range(3)]
    finally:
        ring.close()


def _shm_is_empty(shm: Path) -> bool:
    return list(shm.iterdir()) == []


@pytest.mark.root
def test_wrap_refuses_setuid_binary_of_another_user(tmp_path: Path, shm_dir: Path) -> None:
    exe = tmp_path / "true-suid"
    shutil.copy("/bin/true", exe)
    os.chown(exe, 65534, -1)
    os.chmod(exe, 0o4755)
    line = assert_one_line_error(fipstop("wrap", "--", str(exe), shm=shm_dir), "set-uid", "LD_PRELOAD")
    assert str(exe) in line
    assert _shm_is_empty(shm_dir)  # refused before creating anything


@pytest.mark.root
def test_wrap_refuses_setgid_binary_of_another_group(tmp_path: Path, shm_dir: Path) -> None:
    exe = tmp_path / "true-sgid"
    shutil.copy("/bin/true", exe)
    os.chown(exe, os.getuid(), 65534)
    os.chmod(exe, 0o2755)
    assert_one_line_error(fipstop("wrap", "--", str(exe), shm=shm_dir), "set-gid")
    assert _shm_is_empty(shm_dir)


def test_wrap_accepts_setuid_binary_of_our_own(progs: dict[str, Path], tmp_path: Path, shm_dir: Path) -> None:
    exe = tmp_path / "syslog_prog"
    shutil.copy(progs["fortify"], exe)
    os.chmod(exe, 0o4755)  # owned by us: exec changes no credential, LD_PRELOAD works
    proc = fipstop("wrap", "--domain", "s", "--", str(exe), "many", "1", shm=shm_dir)
    assert proc.returncode == 0, proc.stderr
    assert parse_output(proc.stdout.decode())["dropped"] == ["0"]


def test_wrap_refuses_file_capabilities_for_non_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fipstop import preload as wrap
    from fipstop.errors import FipsError

    exe = tmp_path / "capbin"
    shutil.copy("/bin/true", exe)
    monkeypatch.setattr(wrap, "file_capabilities", lambda path: b"\x01\x00\x00\x02")
    monkeypatch.setattr(wrap.os, "getuid", lambda: 1000)
    with pytest.raises(FipsError, match="file capabilities"):
        wrap.check_preloadable(str(exe))
    monkeypatch.setattr(wrap.os, "getuid", lambda: 0)  # root: no secure-execution mode
    wrap.check_preloadable(str(exe))


@pytest.fixture(scope="session")
def static_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CC is None:
        pytest.skip("no C compiler (cc)")
    d = tmp_path_factory.mktemp("static")
    src = d / "s.c"
    src.write_text("int main(void){return 0;}\n")
    exe = d / "static-true"
    proc = subprocess.run([CC, "-static", "-o", str(exe), str(src)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"cannot link statically (glibc static libs missing?): {proc.stderr.strip()[:200]}")
    return exe


def test_wrap_refuses_static_binary(static_binary: Path, shm_dir: Path) -> None:
    assert_one_line_error(fipstop("wrap", "--", str(static_binary), shm=shm_dir), "statically linked")
    assert _shm_is_empty(shm_dir)


def test_wrap_refuses_missing_command(shm_dir: Path) -> None:
    assert_one_line_error(fipstop("wrap", "--", "no-such-command-fipstop-test", shm=shm_dir), "command not found")
    assert_one_line_error(fipstop("wrap", "--", "/nonexistent/prog", shm=shm_dir), "not found")
    assert_one_line_error(fipstop("wrap", shm=shm_dir), "no command")
    assert_one_line_error(fipstop("wrap", "--", shm=shm_dir), "no command")
    assert _shm_is_empty(shm_dir)


@pytest.mark.parametrize("size", ["3000", "1.5M", "0", "-4096", "lots"])
def test_wrap_refuses_bad_ring_size(size: str, shm_dir: Path) -> None:
    assert_one_line_error(fipstop("wrap", "--ring-size", size, "--", "/bin/true", shm=shm_dir), "--ring-size")
    assert _shm_is_empty(shm_dir)


def test_wrap_refuses_ring_size_out_of_range(shm_dir: Path) -> None:
    # a power of two, but below libfips' minimum ring (4 KiB)
    assert_one_line_error(fipstop("wrap", "--ring-size", "1K", "--", "/bin/true", shm=shm_dir))


# ---------------------------------------------------------------------------
# fipstop tail
# ---------------------------------------------------------------------------


@pytest.fixture
def tdomain(shm_dir: Path):
    d = Domain("t", shm_dir, create=2, **DOMAIN_OPTS)
    yield d
    d.close()


def tail(shm: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return fipstop("tail", *args, shm=shm, timeout=timeout)


def test_tail_prints_in_order_escaped(shm_dir: Path, tdomain: Domain) -> None:
    p = Producer(tdomain)
    records = [
        b"first",
        b"\x1b[31mred\x1b[0m \x1b]0;title\x07",  # SGR and an OSC title change
        b"[bold]markup[/bold] [link=http://x]y[/link]",
        b"nul\x00byte\ttab\r\n",
        "é ✓ \u202eevil".encode(),
        b"\xff\xfe bad utf-8",
        b"last",
    ]
    for rec in records:
        assert p.log(rec)
    proc = tail(shm_dir, "--count", str(len(records)))
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and b"\x00" not in proc.stdout and b"\r" not in proc.stdout
    lines = proc.stdout.decode().split("\n")
    assert lines[-1] == ""
    assert lines[:-1] == [escape_bytes(r) for r in records]
    assert lines[1] == "\\x1b[31mred\\x1b[0m \\x1b]0;title\\x07"
    assert lines[2] == "[bold]markup[/bold] [link=http://x]y[/link]"  # plain text, never markup
    assert lines[3] == "nul\\x00byte\\x09tab\\x0d\\x0a"
    assert lines[4] == "é ✓ \\u202eevil"
    p.close()


def test_tail_shows_shim_records_and_truncation(progs: dict[str, Path], shm_dir: Path) -> None:
    proc = fipstop("wrap", "--domain", "w", "--max-record", "1024", "--", str(progs["fortify"]), "control", shm=shm_dir)
    assert proc.returncode == 0, proc.stderr
    proc = fipstop("wrap", "--domain", "w", "--", str(progs["fortify"]), "long", "3000", shm=shm_dir)
    assert proc.returncode == 0, proc.stderr
    out = tail(shm_dir, "--count", "4").stdout.decode().splitlines()
    assert out[0] == "<14>syslog_prog: ctl:\\x01\\x1b[31mred\\x1b[0m\\x7f\\x09\\x0d\\x0aline2\\x00nul\\xff\\xfe[bold]b[/bold]\\\\x41 end"  # a literal backslash is doubled
    assert out[1] == "<14>syslog_prog: \\x00"
    assert out[2] == "<14>syslog_prog: trailing newline\\x0a"
    assert out[3].endswith(" [truncated]") and len(out[3]) == 1024 + len(" [truncated]")


def test_tail_reports_lost_records(shm_dir: Path, tdomain: Domain) -> None:
    # A registered consumer that does not read: the ring fills and drops.
    assert tail(shm_dir, "--consumer", "slow", "--keep", "--timeout", "0.2").returncode == 0
    p = Producer(tdomain)
    n_ok = 0
    while p.log(b"r%04d" % n_ok + b"." * 200):
        n_ok += 1
    for _ in range(4):  # 5 drops in all
        assert not p.log(b"dropped" + b"." * 200)
    # The slow consumer reads everything that was kept ...
    first = tail(shm_dir, "--consumer", "slow", "--keep", "--count", str(n_ok))
    assert first.returncode == 0, first.stderr
    assert [x[:5] for x in first.stdout.decode().splitlines()] == [f"r{i:04d}" for i in range(n_ok)]
    # ... then the next record carries the drops before it.
    assert p.log(b"after the drops")
    second = tail(shm_dir, "--consumer", "slow", "--count", "1")
    assert second.returncode == 0, second.stderr
    ring = p.ring
    assert second.stdout.decode().splitlines() == [f"-- 5 records lost (ring {ring} full) --", "after the drops"]
    p.close()


def test_tail_count_and_timeout_exit(shm_dir: Path, tdomain: Domain) -> None:
    t0 = time.monotonic()
    proc = tail(shm_dir, "--timeout", "0.5")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0 and proc.stdout == b""
    assert elapsed < 15
    p = Producer(tdomain)
    for i in range(5):
        p.log(b"m%d" % i)
    proc = tail(shm_dir, "--count", "2")
    assert proc.returncode == 0
    assert proc.stdout.decode().splitlines() == ["m0", "m1"]
    # --timeout with records: prints what there is, then exits
    proc = tail(shm_dir, "--timeout", "0.5")
    assert proc.stdout.decode().splitlines() == [f"m{i}" for i in range(5)]
    p.close()


def test_tail_keep_resumes_where_it_stopped(shm_dir: Path, tdomain: Domain) -> None:
    p = Producer(tdomain)
    for i in range(10):
        p.log(b"k%d" % i)
    a = tail(shm_dir, "--consumer", "k", "--keep", "--count", "3")
    assert a.stdout.decode().splitlines() == ["k0", "k1", "k2"]
    snap = snapshot_domain("t", shm_dir)
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in snap.consumers["name"]]
    idx = names.index("k")
    assert int(snap.consumers[idx]["state"]) == _fips.CONS_ACTIVE  # still registered
    b = tail(shm_dir, "--consumer", "k", "--keep", "--timeout", "0.5")
    assert b.stdout.decode().splitlines() == [f"k{i}" for i in range(3, 10)]
    # without --keep the consumer unregisters
    c = tail(shm_dir, "--consumer", "k", "--timeout", "0.2")
    assert c.returncode == 0 and c.stdout == b""
    snap = snapshot_domain("t", shm_dir)
    assert int(snap.consumers[idx]["state"]) == _fips.CONS_CLOSED
    p.close()


def test_tail_two_domains_needs_domain(shm_dir: Path) -> None:
    with Domain("one", shm_dir, create=2, **DOMAIN_OPTS), Domain("two", shm_dir, create=2, **DOMAIN_OPTS):
        assert_one_line_error(tail(shm_dir, "--timeout", "0.1"), "--domain", "one", "two")
        assert tail(shm_dir, "--domain", "two", "--timeout", "0.1").returncode == 0


def test_tail_no_domain_and_missing_domain(shm_dir: Path) -> None:
    assert_one_line_error(tail(shm_dir, "--timeout", "0.1"), "no fips domain")
    assert_one_line_error(tail(shm_dir, "--domain", "nope", "--timeout", "0.1"), "nope")
    assert_one_line_error(tail(shm_dir, "--count", "-1"), "--count")


def test_tail_consumer_name_in_use(shm_dir: Path, tdomain: Domain) -> None:
    c = Consumer(tdomain, "busy")  # held by this live process
    try:
        assert_one_line_error(tail(shm_dir, "--consumer", "busy", "--timeout", "0.1"))
    finally:
        c.close()
