"""The syslog(3) drop-in (fipstop/lib/libfips_syslog.so) writing into a ring
(issue 3: item 1 and "Bad input"); when it cannot, test_syslog_fallback.py;
`fipstop wrap` and `fipstop tail`, test_wrap_tail.py.

tests/c/syslog_prog.c is compiled twice into a temporary directory: with
``-O2 -D_FORTIFY_SOURCE=2`` (it then imports ``__syslog_chk``/``__vsyslog_chk``,
like Debian's named) and with ``-O0 -U_FORTIFY_SOURCE`` (``syslog``/``vsyslog``).
It runs with the shim preloaded and FIPS_SHM_DIR pointing at a directory of
the test's own; the test reads the ring with a registered Consumer and checks
payload bytes (``<PRI>IDENT[PID]: MESSAGE``) exactly.

"""

from __future__ import annotations

import errno
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from shimprog import (
    IDENT,
    LOG_DAEMON,
    LOG_DEBUG,
    LOG_EMERG,
    LOG_ERR,
    LOG_INFO,
    LOG_KERN,
    LOG_LOCAL3,
    LOG_NOTICE,
    LOG_USER,
    LOG_WARNING,
    SHIM,
    VARIANTS,
    Rec,
    Ring,
    drain,
    pri,
    run_prog,
    shim_env,
    strerror,
)

from fipstop import _fips
from fipstop._fips import Consumer, Domain

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
