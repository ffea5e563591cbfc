"""The syslog(3) drop-in (fipstop/lib/libfips_syslog.so), `fipstop wrap` and
`fipstop tail` (issue 3: item 1 and "Bad input").

tests/c/syslog_prog.c is compiled twice into a temporary directory: with
``-O2 -D_FORTIFY_SOURCE=2`` (it then imports ``__syslog_chk``/``__vsyslog_chk``,
like Debian's named) and with ``-O0 -U_FORTIFY_SOURCE`` (``syslog``/``vsyslog``).
It runs with the shim preloaded and FIPS_SHM_DIR pointing at a directory of
the test's own; the test reads the ring with a registered Consumer and checks
payload bytes (``<PRI>IDENT[PID]: MESSAGE``) exactly.

Tests that need root (a private mount namespace with ``unshare -m``: a
private /dev/log to catch what reaches the real syslog, a read-only or full
tmpfs) are marked ``root``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop._fips import Consumer, Domain, Producer
from fipstop.ring import snapshot_domain
from fipstop.textsafe import escape_bytes

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "fipstop" / "lib" / "libfips_syslog.so"
PROG_SRC = REPO / "tests" / "c" / "syslog_prog.c"
CC = shutil.which("cc") or shutil.which("gcc")
IDENT = b"syslog_prog"  # the program's name: syslog(3)'s default ident

LOG_KERN, LOG_USER, LOG_DAEMON, LOG_LOCAL3 = 0 << 3, 1 << 3, 3 << 3, 19 << 3
LOG_EMERG, LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG = 0, 3, 4, 5, 6, 7

#: Domain shape for most tests: small, so that files stay small.
DOMAIN_OPTS = dict(max_rings=64, max_consumers=4, ring_capacity=1 << 16, max_record=4096)

VARIANTS = {
    # name: (compiler flags, syslog symbols it must import, symbols it must not)
    "fortify": (["-O2", "-D_FORTIFY_SOURCE=2"], {"__syslog_chk", "__vsyslog_chk"}, {"syslog", "vsyslog"}),
    "plain": (["-O0", "-U_FORTIFY_SOURCE"], {"syslog", "vsyslog"}, {"__syslog_chk", "__vsyslog_chk"}),
}


# ---------------------------------------------------------------------------
# building and running syslog_prog
# ---------------------------------------------------------------------------


def _compile(src: Path, out: Path, flags: list[str]) -> subprocess.CompletedProcess[str]:
    assert CC is not None
    return subprocess.run(
        [CC, *flags, "-Wall", "-Wno-format", "-Wno-format-security", "-pthread", "-o", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """variant -> path of the compiled syslog_prog (each named syslog_prog)."""
    if CC is None:
        pytest.skip("no C compiler (cc) to build tests/c/syslog_prog.c")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is missing: build it with `make lib`")
    root = tmp_path_factory.mktemp("syslog_prog")
    os.chmod(root, 0o755)  # the set-uid/non-root tests exec from here
    out = {}
    for name, (flags, _, _) in VARIANTS.items():
        d = root / name
        d.mkdir()
        os.chmod(d, 0o755)
        exe = d / "syslog_prog"
        proc = _compile(PROG_SRC, exe, flags)
        assert proc.returncode == 0, f"cc {' '.join(flags)} failed:\n{proc.stderr}"
        out[name] = exe
    return out


@pytest.fixture(params=sorted(VARIANTS))
def prog(request: pytest.FixtureRequest, progs: dict[str, Path]) -> Path:
    return progs[request.param]


@dataclass
class Run:
    rc: int
    out: dict[str, list[str]]  # key=value lines of stdout
    stdout: str
    stderr: bytes

    @property
    def pid(self) -> int:
        return int(self.out["pid"][0])

    @property
    def dropped(self) -> str:
        return self.out["dropped"][0]


def _parse(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out.setdefault(key, []).append(value)
    return out


def shim_env(shm: Path | str, *, domain: str = "syslog", missing: str = "create", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIPS_") and k != "LD_PRELOAD"}
    env.update(LD_PRELOAD=str(SHIM), FIPS_SHM_DIR=str(shm), FIPS_DOMAIN=domain, FIPS_SYSLOG_MISSING=missing)
    env.update(extra)
    return env


def run_prog(
    exe: Path, *args: object, env: dict[str, str], prefix: list[str] | None = None, timeout: float = 60
) -> Run:
    proc = subprocess.run(
        [*(prefix or []), str(exe), *map(str, args)],
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    stdout = proc.stdout.decode()
    return Run(proc.returncode, _parse(stdout), stdout, proc.stderr)


@dataclass(frozen=True)
class Rec:
    ring: int
    seq: int
    flags: int
    lost: int
    truncated: bool
    ts_ns: int
    data: bytes


def drain(cons: Consumer) -> list[Rec]:
    out = []
    while (b := cons.read(1024)) is not None:
        for r in b:
            out.append(Rec(b.ring, r.seq, r.flags, r.lost, r.truncated, r.ts_ns, bytes(r.data)))
        b.release()
    return out


class Ring:
    """A domain of the test's own with a consumer registered before the
    program runs (so that nothing it logs can be missed)."""

    def __init__(self, shm: Path, name: str = "syslog", **opts: int) -> None:
        self.shm, self.name = shm, name
        self.domain = Domain(name, shm, create=2, **{**DOMAIN_OPTS, **opts})
        self.consumer = Consumer(self.domain, "test")

    def records(self) -> list[Rec]:
        return drain(self.consumer)

    def payloads(self) -> list[bytes]:
        return [r.data for r in self.records()]

    def snapshot(self):
        return snapshot_domain(self.name, self.shm)

    def close(self) -> None:
        self.consumer.close()
        self.domain.close()


@pytest.fixture
def ring(shm_dir: Path):
    r = Ring(shm_dir)
    yield r
    r.close()


def pri(fac: int, sev: int) -> bytes:
    return b"<%d>" % (fac | sev)


def strerror(code: int) -> bytes:
    return os.strerror(code).encode()


# ---------------------------------------------------------------------------
# build checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_prog_imports_the_expected_syslog_symbols(progs: dict[str, Path], variant: str) -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is missing")
    out = subprocess.run(["nm", "-D", "--undefined-only", str(progs[variant])], capture_output=True, text=True).stdout
    imported = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    _, must, must_not = VARIANTS[variant]
    assert must <= imported, out
    assert not (must_not & imported), out


def test_shim_exports_only_the_syslog_api() -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is missing")
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is missing: build it with `make lib`")
    out = subprocess.run(["nm", "-D", "--defined-only", str(SHIM)], capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == {
        "openlog", "closelog", "setlogmask", "syslog", "vsyslog",
        "__syslog_chk", "__vsyslog_chk", "fips_syslog_dropped",
    }


# ---------------------------------------------------------------------------
# records: payload bytes, priority, ident, %m, mask, vsyslog
# ---------------------------------------------------------------------------


def test_plain_formatting_and_percent_m(prog: Path, ring: Ring) -> None:
    t0 = time.time_ns()
    r = run_prog(prog, "plain", env=shim_env(ring.shm))
    t1 = time.time_ns()
    assert r.rc == 0, r.stderr
    assert r.dropped == "0"
    recs = ring.records()
    assert [x.data for x in recs] == [
        pri(LOG_USER, LOG_INFO) + IDENT + b": hello 42 world 003.1 ff",
        pri(LOG_USER, LOG_ERR) + IDENT + b": open failed: " + strerror(errno.ENOENT),
        pri(LOG_USER, LOG_WARNING) + IDENT + b": again: " + strerror(errno.EACCES) + b" (7)",
    ]
    assert len({x.ring for x in recs}) == 1
    assert [x.seq for x in recs] == [0, 1, 2]
    assert all(x.flags == 0 and x.lost == 0 and not x.truncated for x in recs)
    # The timestamp travels in the record header (CLOCK_REALTIME).
    slack = 2 * 10**9
    assert all(t0 - slack <= x.ts_ns <= t1 + slack for x in recs)
    assert recs[0].ts_ns <= recs[1].ts_ns <= recs[2].ts_ns


def test_only_percent_s_formats_are_concatenated_exactly(prog: Path, ring: Ring) -> None:
    """named's "%s%s%s%s%s%s%s%s%s%s" takes the shim's memcpy path: same bytes
    as vsnprintf, NULL printed as glibc does."""
    r = run_prog(prog, "concat", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    assert ring.payloads() == [
        pri(LOG_USER, LOG_INFO) + IDENT + b": client @0x7f00 127.0.0.1#5353 (q.example): query: q.example IN A +E(0) (127.0.0.1)",
        pri(LOG_USER, LOG_NOTICE) + IDENT + b": lit a mid (null) end",
        pri(LOG_USER, LOG_INFO) + IDENT + b": ",
        pri(LOG_USER, LOG_INFO) + IDENT + b": no conversions at all",
    ]


def test_openlog_ident_pid_facility_and_closelog(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "openlog", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    pid = b"%d" % r.pid
    got = ring.payloads()
    assert got == [
        b"<30>myident[" + pid + b"]: one",  # LOG_DAEMON | LOG_INFO
        pri(LOG_LOCAL3, LOG_WARNING) + b"myident[" + pid + b"]: two",  # an explicit facility wins
        pri(LOG_DAEMON, LOG_EMERG) + b"myident[" + pid + b"]: three",
        # openlog(ident, 0, 0): as glibc 2.36, facility 0 is LOG_KERN and LOG_PID is off
        pri(LOG_KERN, LOG_DEBUG) + b"second: four",
        # closelog(): the ident is the program name again
        pri(LOG_KERN, LOG_NOTICE) + IDENT + b": five",
    ]
    # priority/facility decode as syslog(3) encodes them
    m = re.match(rb"<(\d+)>", got[1])
    assert m and int(m.group(1)) >> 3 == 19 and int(m.group(1)) & 7 == LOG_WARNING


def test_setlogmask_filters(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "mask", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr  # also: a filtered call keeps errno
    assert r.out["mask0"] == ["255"]
    assert r.out["mask1"] == [str((1 << (LOG_WARNING + 1)) - 1)]
    assert r.out["mask2"] == [str(1 << LOG_DEBUG)]
    assert ring.payloads() == [
        pri(LOG_USER, LOG_ERR) + IDENT + b": passes err",
        pri(LOG_USER, LOG_WARNING) + IDENT + b": passes warning",
        pri(LOG_USER, LOG_DEBUG) + IDENT + b": passes debug",
        pri(LOG_USER, LOG_DEBUG) + IDENT + b": passes debug again",
    ]


def test_vsyslog(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "vsyslog", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    assert ring.payloads() == [
        pri(LOG_USER, LOG_NOTICE) + IDENT + b": v answer=42",
        pri(LOG_USER, LOG_ERR) + IDENT + b": v errno: " + strerror(errno.EINTR),
    ]


# ---------------------------------------------------------------------------
# bad input: %n, control bytes, NUL, long messages
# ---------------------------------------------------------------------------


def test_percent_n_never_writes(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "percent_n", env=shim_env(ring.shm))
    # syslog_prog exits 3 if any %n wrote into its variables (and would be
    # killed by FORTIFY for the format in writable memory, or crash on the
    # format with more conversions than arguments).
    assert r.rc == 0, r.stderr
    got = ring.payloads()
    assert got[:8] == [
        pri(LOG_USER, LOG_INFO) + IDENT + m
        for m in (
            b": beforeafter",
            b": writable 5 end",
            b": hh l h z",
            b": pos x x",
            b": width ||",
            b": star |ok",
            b": literal %n 3",
            b": missing args",
        )
    ]
    # a format too long to rewrite is logged as its raw text
    assert got[8] == pri(LOG_USER, LOG_INFO) + IDENT + b": " + b"L" * 3000 + b"%n tail"
    assert len(got) == 9


def test_control_bytes_and_nul_byte_exact(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "control", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    head = pri(LOG_USER, LOG_INFO) + IDENT + b": "
    assert ring.payloads() == [
        head + b"ctl:\x01\x1b[31mred\x1b[0m\x7f\t\r\nline2\x00nul\xff\xfe[bold]b[/bold]\\x41 end",
        head + b"\x00",
        head + b"trailing newline\n",
    ]


@pytest.mark.parametrize(
    "mode,max_record,ring_capacity,length",
    [
        ("long", 1024, 1 << 16, 2000),  # cut by the ring's max_record
        ("long", 4096, 1 << 16, 100_000),  # far longer than anything
        ("longfmt", 1024, 1 << 16, 2000),  # the same through vsnprintf
        ("longfmt", 16384, 1 << 16, 10_000),  # cut by the shim's 8 KiB format buffer
    ],
)
def test_long_message_truncated_flagged_counted(
    prog: Path, shm_dir: Path, mode: str, max_record: int, ring_capacity: int, length: int
) -> None:
    ring = Ring(shm_dir, max_record=max_record, ring_capacity=ring_capacity)
    try:
        r = run_prog(prog, mode, length, env=shim_env(shm_dir))
        assert r.rc == 0, r.stderr
        full = pri(LOG_USER, LOG_INFO) + IDENT + b": " + bytes(ord("a") + i % 26 for i in range(length))
        (rec,) = ring.records()
        assert rec.truncated and rec.flags & _fips.REC_TRUNC
        assert 0 < len(rec.data) <= max_record
        assert full.startswith(rec.data)
        if length > max_record + 8192:
            assert len(rec.data) >= min(max_record, 8191)
        snap = ring.snapshot()
        assert int(snap.rings["records_truncated"].sum()) == 1
        assert int(snap.rings["records_committed"].sum()) == 1
    finally:
        ring.close()


def test_plain_percent_s_longer_than_the_format_buffer_is_carried_whole(prog: Path, shm_dir: Path) -> None:
    """The fast path (literal text and %s only, named's format) copies the
    pieces straight into the ring: no 8 KiB buffer in between, so a message
    that fits max_record arrives whole."""
    ring = Ring(shm_dir, max_record=16384, ring_capacity=1 << 16)
    try:
        r = run_prog(prog, "long", 10_000, env=shim_env(shm_dir))
        assert r.rc == 0, r.stderr
        full = pri(LOG_USER, LOG_INFO) + IDENT + b": " + bytes(ord("a") + i % 26 for i in range(10_000))
        (rec,) = ring.records()
        assert rec.data == full and not rec.truncated
        assert int(ring.snapshot().rings["records_truncated"].sum()) == 0
    finally:
        ring.close()


def test_message_that_fits_is_not_truncated(prog: Path, shm_dir: Path) -> None:
    ring = Ring(shm_dir, max_record=1024)
    try:
        head = pri(LOG_USER, LOG_INFO) + IDENT + b": "
        r = run_prog(prog, "long", 1024 - len(head), env=shim_env(shm_dir))
        assert r.rc == 0, r.stderr
        (rec,) = ring.records()
        assert len(rec.data) == 1024 and not rec.truncated and rec.flags == 0
        assert int(ring.snapshot().rings["records_truncated"].sum()) == 0
    finally:
        ring.close()


# ---------------------------------------------------------------------------
# threads and fork
# ---------------------------------------------------------------------------


def test_threads_each_log_into_a_ring_of_their_own(prog: Path, ring: Ring) -> None:
    nthreads, nrec = 8, 300
    r = run_prog(prog, "threads", nthreads, nrec, env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    tids = {int(t) for t in r.out["tid"]}
    assert len(tids) == nthreads
    recs = ring.records()
    assert len(recs) == nthreads * nrec  # every record arrives
    by_ring: dict[int, list[Rec]] = {}
    for x in recs:
        by_ring.setdefault(x.ring, []).append(x)
    assert len(by_ring) == nthreads
    snap = ring.snapshot()
    ring_tids = set()
    for idx, rs in by_ring.items():
        m = [re.fullmatch(rb"<14>syslog_prog: thread (\d+) msg (\d+) tid (\d+)", x.data) for x in rs]
        assert all(m), rs[:3]
        threads = {int(x.group(1)) for x in m}
        assert len(threads) == 1  # one thread per ring
        assert [int(x.group(2)) for x in m] == list(range(nrec))  # in order, none missing
        assert [x.seq for x in rs] == list(range(nrec))
        logged_tid = int(m[0].group(3))
        assert int(snap.rings[idx]["tid"]) == logged_tid
        assert int(snap.rings[idx]["pid"]) == r.pid
        ring_tids.add(logged_tid)
    assert ring_tids == tids
    assert int(snap.rings["records_dropped"].sum()) == 0


def test_fork_child_logs_into_its_own_ring(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "fork", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    parent, child = r.pid, int(r.out["child"][0])
    recs = ring.records()
    by_ring: dict[int, list[bytes]] = {}
    for x in recs:
        by_ring.setdefault(x.ring, []).append(x.data)
    assert len(by_ring) == 2
    snap = ring.snapshot()
    pid_of = {idx: int(snap.rings[idx]["pid"]) for idx in by_ring}
    assert sorted(pid_of.values()) == sorted([parent, child])
    for idx, payloads in by_ring.items():
        if pid_of[idx] == parent:
            assert payloads == [
                b"<14>forky[%d]: parent before fork" % parent,
                b"<14>forky[%d]: parent after fork" % parent,
            ]
        else:
            assert payloads == [
                b"<14>forky[%d]: child after fork" % child,
                b"<14>forky[%d]: child second" % child,
            ]


# ---------------------------------------------------------------------------
# LOG_PERROR, full ring, shim-created domain
# ---------------------------------------------------------------------------


def test_log_perror_copies_to_stderr_like_glibc(prog: Path, ring: Ring) -> None:
    r = run_prog(prog, "perror", env=shim_env(ring.shm))
    assert r.rc == 0, r.stderr
    pid = r.pid
    # glibc: "IDENT[PID]: MESSAGE\n", no second newline after one that ends the message
    assert r.stderr == b"pe[%d]: to stderr 7\npe[%d]: ends with newline\n" % (pid, pid)
    assert ring.payloads() == [
        b"<14>pe[%d]: to stderr 7" % pid,
        b"<14>pe[%d]: ends with newline\n" % pid,
    ]


def test_full_ring_drops_are_counted_never_silent(progs: dict[str, Path], shm_dir: Path) -> None:
    ring = Ring(shm_dir, ring_capacity=4096, max_record=512)  # the consumer never reads
    try:
        n = 1000
        r = run_prog(progs["fortify"], "many", n, env=shim_env(shm_dir))
        assert r.rc == 0, r.stderr
        snap = ring.snapshot()
        committed = int(snap.rings["records_committed"].sum())
        dropped = int(snap.rings["records_dropped"].sum())
        assert dropped > 0 and committed + dropped == n
        assert r.dropped == "0"  # that counter is for "no domain" only
        assert len(ring.records()) == committed
    finally:
        ring.close()


def test_shim_creates_the_domain_with_ring_size(prog: Path, shm_dir: Path) -> None:
    r = run_prog(prog, "plain", env=shim_env(shm_dir, domain="made", FIPS_RING_SIZE=str(1 << 16)))
    assert r.rc == 0, r.stderr
    assert (shm_dir / "fips.made").is_file()
    with Domain("made", shm_dir, create=False) as d:
        assert d.ring_capacity == 1 << 16
        c = Consumer(d, "late")
        assert len(drain(c)) == 3  # kept for the first consumer
        c.close()


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
    run = _parse(out.decode())
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
    assert _parse(proc.stdout.decode())["dropped"] == ["0"]


def test_wrap_refuses_file_capabilities_for_non_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fipstop import wrap
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
    assert [x[:5] for x in first.stdout.decode().splitlines()] == ["r%04d" % i for i in range(n_ok)]
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
