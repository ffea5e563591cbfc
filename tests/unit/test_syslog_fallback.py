"""The syslog(3) drop-in when its domain cannot be used: a missing,
unwritable, full or bogus shm dir falls back as FIPS_SYSLOG_MISSING says and
never kills the host program, and what passthrough hands on is what glibc's
syslog(3) would have sent (a private /dev/log in a mount namespace).

Tests that need root (``unshare -m``: a private /dev/log, a read-only or full
tmpfs) are marked ``root``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from shimprog import DOMAIN_OPTS, Ring, run_prog, shim_env

from fipstop._fips import Domain

# ---------------------------------------------------------------------------
# missing, unwritable, bogus shm dir: fall back as configured, never kill the host
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["passthrough", "drop", "create"])
@pytest.mark.parametrize("scenario", ["many", "percent_n", "fork", "perror"])
def test_missing_shm_dir_never_kills(progs: dict[str, Path], missing: str, scenario: str) -> None:
    args = ("many", 5) if scenario == "many" else (scenario,)
    r = run_prog(progs["fortify"], *args, env=shim_env("/nonexistent/fipstop-test", missing=missing))
    assert r.rc == 0, (r.rc, r.stderr)
    assert not Path("/nonexistent").exists()
    if missing == "drop":
        expected = {"many": "5", "percent_n": "9", "fork": "2", "perror": "2"}[scenario]
        assert r.dropped == expected
    else:
        assert r.dropped == "0"  # handed to the real syslog(3), not dropped
    if scenario == "perror":
        # the stderr copy is made in every mode (glibc's, or the shim's in drop mode)
        assert b"pe[%d]: to stderr 7\n" % r.pid in r.stderr


def _bogus_entries(shm: Path, kind: str) -> None:
    path = shm / "fips.syslog"
    if kind == "garbage":
        path.write_bytes(os.urandom(8192))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "half":
        with Domain("syslog", shm, create=2, **DOMAIN_OPTS) as d:
            size = d.header.file_size
        os.truncate(path, size // 2)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink":
        (shm / "target").write_bytes(b"")
        path.symlink_to(shm / "target")
    else:  # pragma: no cover
        raise AssertionError(kind)


@pytest.mark.parametrize("missing", ["passthrough", "drop", "create"])
@pytest.mark.parametrize("kind", ["garbage", "empty", "half", "fifo", "dir", "symlink"])
def test_bogus_domain_file_never_kills(progs: dict[str, Path], shm_dir: Path, kind: str, missing: str) -> None:
    _bogus_entries(shm_dir, kind)
    r = run_prog(progs["fortify"], "many", 3, env=shim_env(shm_dir, missing=missing), timeout=20)
    assert r.rc == 0, (r.rc, r.stderr)
    assert r.dropped == ("3" if missing == "drop" else "0")


def test_shm_dir_that_is_a_file(progs: dict[str, Path], tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("")
    for missing in ("passthrough", "drop", "create"):
        r = run_prog(progs["fortify"], "many", 2, env=shim_env(f, missing=missing))
        assert r.rc == 0, r.stderr
        assert r.dropped == ("2" if missing == "drop" else "0")


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare -m` (mount namespaces)")


def _ns_prefix(script: str, *args: str) -> list[str]:
    """Run the command in a private mount namespace after `script` (sh)."""
    return ["unshare", "-m", "sh", "-c", script + ' && exec "$@"', "sh", *args]


@pytest.mark.parametrize("missing", ["passthrough", "drop", "create"])
def test_readonly_shm_dir_never_kills(progs: dict[str, Path], tmp_path: Path, missing: str) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        os.chmod(ro, 0o555)
        prefix = None
    elif _can_unshare():
        # root ignores mode bits: a read-only bind mount in a namespace of our own
        prefix = _ns_prefix('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift', str(ro))
    else:
        pytest.skip("as root a read-only dir needs `unshare -m`")
    r = run_prog(progs["fortify"], "many", 4, env=shim_env(ro, missing=missing), prefix=prefix)
    assert r.rc == 0, (r.rc, r.stderr)
    assert r.dropped == ("4" if missing == "drop" else "0")
    assert list(ro.iterdir()) == []


@pytest.mark.root
@needs_unshare
def test_full_shm_dir_never_kills(progs: dict[str, Path], tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    prefix = _ns_prefix('mount -t tmpfs -o size=256k none "$1" && shift', str(full))
    env = shim_env(full, missing="create", FIPS_RING_SIZE=str(1 << 20))
    r = run_prog(progs["fortify"], "many", 5000, env=env, prefix=prefix)
    assert r.rc == 0, f"killed by signal {-r.rc if r.rc < 0 else r.rc - 128}"


# ---------------------------------------------------------------------------
# what reaches the real syslog(3): a private /dev/log in a mount namespace
# ---------------------------------------------------------------------------


class DevLog:
    """A datagram socket that a private mount namespace shows as /dev/log."""

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "log.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(0.3)

    @property
    def prefix(self) -> list[str]:
        return _ns_prefix(
            'mount -t tmpfs none /dev && touch /dev/log && mount --bind "$1" /dev/log && shift', str(self.path)
        )

    def messages(self) -> list[bytes]:
        """Datagrams received, with glibc's timestamp removed."""
        out = []
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                return out
            out.append(re.sub(rb"\A(<\d+>)[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d ", rb"\1", data))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def devlog(tmp_path: Path):
    if not _can_unshare():
        pytest.skip("needs root and `unshare -m` for a private /dev/log")
    d = DevLog(tmp_path)
    yield d
    d.close()


@pytest.mark.root
@pytest.mark.parametrize("missing", ["passthrough", "create"])
def test_passthrough_reaches_the_real_syslog(progs: dict[str, Path], devlog: DevLog, missing: str) -> None:
    env = shim_env("/nonexistent/fipstop-test", missing=missing)
    r = run_prog(progs["fortify"], "openlog", env=env, prefix=devlog.prefix)
    assert r.rc == 0, r.stderr
    pid = b"%d" % r.pid
    # openlog's ident/LOG_PID/facility were passed on too (also when "create" failed)
    assert devlog.messages() == [
        b"<30>myident[" + pid + b"]: one",
        b"<156>myident[" + pid + b"]: two",
        b"<24>myident[" + pid + b"]: three",
        b"<7>second: four",
        b"<5>syslog_prog: five",
    ]


@pytest.mark.root
def test_passthrough_defuses_percent_n(progs: dict[str, Path], devlog: DevLog) -> None:
    r = run_prog(progs["fortify"], "percent_n", env=shim_env("/nonexistent/x", missing="passthrough"),
                 prefix=devlog.prefix)
    assert r.rc == 0, (r.rc, r.stderr)  # before the fix: %n wrote, then SIGSEGV
    got = devlog.messages()
    assert got[0] == b"<14>syslog_prog: beforeafter"
    assert got[-1].endswith(b"L%n tail")
    assert len(got) == 9


@pytest.mark.root
def test_drop_sends_nothing_to_the_real_syslog(progs: dict[str, Path], devlog: DevLog) -> None:
    r = run_prog(progs["fortify"], "many", 7, env=shim_env("/nonexistent/x", missing="drop"), prefix=devlog.prefix)
    assert r.rc == 0 and r.dropped == "7"
    assert devlog.messages() == []


@pytest.mark.root
@pytest.mark.parametrize("scenario", ["plain", "concat", "openlog", "mask", "vsyslog", "control", "perror"])
def test_shim_payloads_match_glibc(prog: Path, devlog: DevLog, shm_dir: Path, scenario: str) -> None:
    """Without the shim, glibc sends "<PRI>TIMESTAMP IDENT[PID]: MSG" to /dev/log;
    with it the ring gets the same bytes minus the timestamp."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    real = run_prog(prog, scenario, env=env, prefix=devlog.prefix)
    assert real.rc == 0, real.stderr
    expected = devlog.messages()
    ring = Ring(shm_dir)
    try:
        shim = run_prog(prog, scenario, env=shim_env(shm_dir))
        assert shim.rc == 0, shim.stderr
        got = ring.payloads()
    finally:
        ring.close()

    def norm(data: bytes, pid: int) -> bytes:
        return data.replace(b"[%d]" % pid, b"[PID]")

    assert [norm(x, shim.pid) for x in got] == [norm(x, real.pid) for x in expected]
    assert norm(shim.stderr, shim.pid) == norm(real.stderr, real.pid)
    assert {k: v for k, v in shim.out.items() if k not in ("pid", "dropped")} == {
        k: v for k, v in real.out.items() if k not in ("pid", "dropped")
    }
