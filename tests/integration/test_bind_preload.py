"""``fipstop wrap --bind``: BIND 9's query lines taken at ns_client_log
(libfips_bind.so), byte for byte what BIND itself writes.

The oracle is BIND in the same process.  With ``FIPS_BIND_VERIFY=1`` the
preload writes its record and then passes the call on to BIND, whose
``queries`` category goes to a file channel (``print-time yes``) and to a
syslog channel (the drop-in, into the same ring).  So for every query the
ring holds the preload's record immediately followed by BIND's own, and the
file holds BIND's line: the two records must be equal byte for byte, and the
preload's text after ``<30>named[PID]: `` must be the file's line after its
timestamp.  The queries cover each field of the line: TCP, DO, CD, no
recursion, no EDNS, no cookie, ECS, a TSIG signer (``/key``), a class other
than IN, an escaped name, a long name, NXDOMAIN; once without views and once
inside a view (``: view NAME``).

Without the verify switch the query lines reach only the rings (the file
channel gets none of them: the preload took them), other categories still
follow named.conf, and a process without BIND's libns (or with another one)
logs through the drop-in after one line on stderr saying so.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fipstop.bench.bind.dns import free_port
from fipstop.bench.bind.procs import find_program, start_named, stop_process
from fipstop.ips.jails import BUILTIN_JAILS, compile_jail

pytestmark = [pytest.mark.integration, pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]
BIND_SHIM = REPO / "fipstop" / "lib" / "libfips_bind.so"
NAMED = find_program("named")
DIG = find_program("dig")
CC = shutil.which("cc") or shutil.which("gcc")
ZONE = "example.test"
DOMAIN = "bindpre"
SECRET = base64.b64encode(b"fipstop-bind-preload-test-key-32").decode()
LONG = ".".join(["l" * 63] * 3)
# one dig batch line per query: every flag and field of the query-log line
QUERIES = [
    f"h1.{ZONE} A",
    f"nx1.{ZONE} AAAA",
    f"+dnssec h3.{ZONE} A",
    f"+nocookie h4.{ZONE} A",
    f"+noedns h5.{ZONE} A",
    f"+cdflag h6.{ZONE} A",
    f"+norecurse h7.{ZONE} A",
    f"+subnet=192.0.2.0/24 h9.{ZONE} A",
    f"a\\032b.{ZONE} TXT",
    f'e\\@1\\$\\(2\\)\\;\\"x\\\\.{ZONE} A',  # every character BIND escapes in a name
    f"{LONG}.{ZONE} A",
] + [f"q{i}.{ZONE} A" for i in range(40)]
# dig's batch file takes these options only on its command line: one dig each
SINGLE = [["+tcp", f"h2.{ZONE}", "A"], ["-y", f"hmac-sha256:fipskey:{SECRET}", f"h8.{ZONE}", "A"],
          ["-c", "CH", "-t", "TXT", "version.bind"]]


#: the LD_PRELOAD of the last named _run_named started (which preload `fipstop wrap --bind` chose)
PRELOADED: list[str] = []


# over IPv6 loopback (peer and destination ::1): UDP, TCP, an IPv6 ECS option
SINGLE_V6 = [["@::1", f"h1.{ZONE}", "A"], ["@::1", "+tcp", f"h2.{ZONE}", "AAAA"],
             ["@::1", "+subnet=2001:db8:1::/48", f"h3.{ZONE}", "A"]]


def _fipstop_argv() -> list[str]:
    exe = Path(sys.executable).parent / "fipstop"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fipstop"]


def _named_conf(d: Path, port: int, view: bool, v6: bool = False) -> Path:
    zone = d / f"{ZONE}.zone"
    zone.write_text("\n".join([
        "$TTL 300",
        f"@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 3600 600 86400 300",
        f"@ IN NS ns.{ZONE}.",
        "ns IN A 127.0.0.1",
        *(f"h{i} IN A 192.0.2.{i + 1}" for i in range(10)),
        *(f"q{i} IN A 192.0.2.{i + 20}" for i in range(40)),
    ]) + "\n", encoding="utf-8")
    zone_stmt = f'zone "{ZONE}" {{ type primary; file "{zone}"; }};'
    body = f'view "inside" {{ match-clients {{ any; }}; {zone_stmt} }};' if view else zone_stmt
    conf = d / "named.conf"
    conf.write_text(f"""key "fipskey" {{ algorithm hmac-sha256; secret "{SECRET}"; }};
options {{
    directory "{d}";
    pid-file "{d}/named.pid";
    session-keyfile "{d}/session.key";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {f"port {port} {{ ::1; }}" if v6 else "{ none; }"};
    recursion no;
    dnssec-validation no;
    notify no;
    querylog yes;
}};
controls {{ }};
logging {{
    channel main {{ file "{d}/named.log"; severity info; print-time yes; }};
    channel qfile {{ file "{d}/queries.log"; severity info; print-time yes; }};
    channel qsys {{ syslog daemon; severity info; }};
    category default {{ main; }};
    category general {{ main; }};
    category queries {{ qfile; qsys; }};
}};
{body}
""", encoding="utf-8")
    return conf


def _run_named(tmp: Path, *, verify: bool, view: bool = False, preload: list[str] | None = None,
               named: str | None = NAMED, v6: bool = False) -> tuple[list[tuple[int, int, bytes]], list[str], int, str]:
    """``named`` under `fipstop wrap --bind` (or, with ``preload``, with exactly
    that LD_PRELOAD), the QUERIES sent with one dig batch; (ring records
    (ring, flags, payload), the file channel's query lines without their
    timestamp, named's pid, named's output)."""
    from fipstop import _fips

    if named is None or DIG is None:
        pytest.skip("named and dig are needed (apt-get install bind9 bind9-dnsutils)")
    if not BIND_SHIM.exists():
        pytest.skip(f"{BIND_SHIM} is not built (apt-get install bind9-dev; make lib)")
    d = tmp / "named"
    d.mkdir()
    d.chmod(0o755)
    shm = tmp / "shm"
    shm.mkdir()
    port = free_port()
    conf = _named_conf(d, port, view, v6)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if verify:
        env["FIPS_BIND_VERIFY"] = "1"
    argv = [*_fipstop_argv(), "--shm-dir", str(shm), "wrap", "--bind", "--domain", DOMAIN, "--",
            named, "-f", "-c", str(conf), "-n", "2"]
    if preload:
        _fips.Domain(DOMAIN, str(shm), create=True).close()
        env.update(LD_PRELOAD=" ".join(preload), FIPS_DOMAIN=DOMAIN, FIPS_SHM_DIR=str(shm))
        argv = argv[argv.index("--") + 1:]
    proc, why = start_named(argv, d, port, env)
    assert proc is not None, why
    try:
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        PRELOADED[:] = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"LD_PRELOAD=")]
        batch = d / "batch.txt"
        batch.write_text("".join(f"{q}\n" for q in QUERIES), encoding="utf-8")
        r = subprocess.run([DIG, "@127.0.0.1", "-p", str(port), "+time=2", "+tries=2", "-f", str(batch)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        for args in SINGLE + (SINGLE_V6 if v6 else []):
            server = args[0] if args[0].startswith("@") else "@127.0.0.1"
            r = subprocess.run([DIG, server, "-p", str(port), "+time=2", "+tries=2",
                                *(a for a in args if not a.startswith("@"))],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
        pid = proc.pid
    finally:
        rc = stop_process(proc)
    assert rc == 0, (d / "named.out").read_text(errors="replace")[-2000:]
    dom = _fips.Domain(DOMAIN, shm, create=False)
    cons = _fips.Consumer(dom, "test")
    records: list[tuple[int, int, bytes]] = []
    try:
        while (b := cons.read(4096)) is not None:
            assert b.lost == 0
            records += [(b.ring, r.flags, bytes(r)) for r in b]
            b.release()
    finally:
        cons.close()
        dom.close()
    lines = [ln.split(" ", 2)[2] for ln in (d / "queries.log").read_text(encoding="utf-8").splitlines()
             if " query: " in ln]
    return records, lines, pid, (d / "named.out").read_text(errors="replace")


@pytest.mark.parametrize("view", [False, True], ids=["no-view", "view"])
def test_preload_lines_are_byte_identical_to_binds(tmp_path: Path, view: bool) -> None:
    records, file_lines, pid, out = _run_named(tmp_path, verify=True, view=view)
    assert "fipstop wrap --bind" not in out, out  # the preload did not fall back
    head = f"<30>named[{pid}]: ".encode()
    by_ring: dict[int, list[bytes]] = {}
    for ring, _, p in records:
        if b": query: " in p:
            by_ring.setdefault(ring, []).append(p)
    ours: list[bytes] = []
    for ring, recs in by_ring.items():
        # the preload's record, then BIND's own through the drop-in: equal pairs
        assert len(recs) % 2 == 0, (ring, recs[-3:])
        for a, b in zip(recs[0::2], recs[1::2]):
            assert a == b, f"preload {a!r}\n   BIND {b!r}"
            ours.append(a)
    assert all(p.startswith(head) for p in ours), ours[:3]
    texts = [p[len(head):].decode() for p in ours]
    # every query BIND wrote to its file channel, the preload wrote too
    assert Counter(texts) == Counter(file_lines)
    assert len(file_lines) >= len(QUERIES) + len(SINGLE)  # + the readiness probe's SOA queries
    joined = "\n".join(file_lines)
    for needle in ("/key fipskey", "IN A +SE(0)K", "(127.0.0.1) [ECS 192.0.2.0/24/0]", "a\\032b.example.test",
                   "version.bind CH TXT", f"({LONG}.{ZONE})", "IN A -E(0)K", "IN A +E(0)DK", "IN A +E(0)CK",
                   "IN A +E(0) ", "IN A + (127.0.0.1)", "IN A +E(0)TK"):
        assert needle in joined, needle
    assert (": view inside: query: " in joined) == view


def _native_named() -> str:
    from fipstop.bench.bind.native import native_named

    path, why = native_named()
    if path is None:
        pytest.skip(why)
    return str(path)


def _expected_needles(view: bool) -> tuple[str, ...]:
    return ("/key fipskey", "IN A +SE(0)K", "(127.0.0.1) [ECS 192.0.2.0/24/0]", "a\\032b.example.test",
            "version.bind CH TXT", f"({LONG}.{ZONE})", "IN A -E(0)K", "IN A +E(0)DK", "IN A +E(0)CK",
            "IN A +E(0) ", "IN A + (127.0.0.1)", "IN A +E(0)TK", f'e\\@1\\$\\(2\\)\\;\\"x\\\\.{ZONE} IN A',
            ) + ((": view inside: query: ",) if view else ())


@pytest.mark.parametrize("view,v6", [(False, False), (True, False), (False, True)], ids=["no-view", "view", "ipv6"])
def test_native_records_format_to_binds_own_lines(tmp_path: Path, view: bool, v6: bool) -> None:
    """The patched named (contrib/bind/fips-native.patch) under `fipstop wrap
    --bind`, verifying: each query's binary record (flag REC_BIND_QUERY) is
    followed in its ring by BIND's own line through the drop-in, and the
    consumer's formatter (_fips.format_bind_query, the one fipstop tail and the
    dashboard use) must give those bytes exactly, for every field of the line."""
    from fipstop import _fips

    records, file_lines, pid, out = _run_named(tmp_path, verify=True, view=view, named=_native_named(), v6=v6)
    assert "fipstop wrap --bind" not in out, out
    by_ring: dict[int, list[tuple[int, bytes]]] = {}
    for ring, flags, p in records:
        by_ring.setdefault(ring, []).append((flags, p))
    pairs = 0
    formatted: list[str] = []
    for recs in by_ring.values():
        for i, (flags, p) in enumerate(recs):
            if not flags & _fips.REC_BIND_QUERY:
                continue
            assert i + 1 < len(recs), "a binary record without BIND's own line after it"
            text = _fips.format_bind_query(p)
            assert text == recs[i + 1][1], f"formatted {text!r}\n      BIND {recs[i + 1][1]!r}"
            assert not recs[i + 1][0] & _fips.REC_BIND_QUERY
            formatted.append(text.decode())
            pairs += 1
    head = f"<30>named[{pid}]: "
    assert all(t.startswith(head) for t in formatted)
    assert Counter(t[len(head):] for t in formatted) == Counter(file_lines)
    assert pairs >= len(QUERIES) + len(SINGLE) + (len(SINGLE_V6) if v6 else 0)
    joined = "\n".join(file_lines)
    for needle in _expected_needles(view):
        assert needle in joined, needle
    if v6:
        for needle in ("client @0x", " ::1#", "(::1)", "IN AAAA +E(0)TK (::1)", "(::1) [ECS 2001:db8:1::/48/0]"):
            assert needle in joined, needle


def test_native_named_logs_binary_only_and_ips_matches_it(tmp_path: Path) -> None:
    """Without the verify switch the patched named writes one binary record per
    query and no text (its file channel gets none: the hook took them), and the
    IPS matcher sees their formatted lines: a filter on the query line's client
    address counts every query (the oracle: the queries dig sent)."""
    from fipstop import _fips, _ipsfast

    records, file_lines, pid, out = _run_named(tmp_path, verify=False, named=_native_named())
    assert "fipstop wrap --bind" not in out, out
    # wrap chose the preload that leaves libns's own ns_client_log calls direct
    assert PRELOADED and PRELOADED[0].endswith("/libfips_bindq.so"), PRELOADED
    assert file_lines == []
    binary = [p for _, f, p in records if f & _fips.REC_BIND_QUERY]
    assert not [p for _, f, p in records if not f & _fips.REC_BIND_QUERY and b": query: " in p]
    texts = [_fips.format_bind_query(p) for p in binary]
    assert None not in texts
    names = Counter(m.group(1).decode() for t in texts if t and (m := re.search(rb": query: (\S+) ", t)))
    for q in (f"q{i}.{ZONE}" for i in range(40)):
        assert names[q] == 1, q

    class Rec(bytes):
        flags = _fips.REC_BIND_QUERY
        ts_ns = 1

    def jail() -> Any:
        return compile_jail(replace(BUILTIN_JAILS["named-query-rate"], maxretry=10**9, ignoreip=(),
                                    ignoreself=False), protect=False)

    from_binary, from_text = jail(), jail()
    _ipsfast.feed([Rec(p) for p in binary], [from_binary])
    _ipsfast.feed_lines([t for t in texts if t], 1, [from_text])
    st = from_binary.stats()
    assert st == from_text.stats()
    hits = [t for t in texts if t and from_text.match(t)[0] == "hit"]
    # the filter's own verdicts on the formatted text (it skips, e.g., a line with a /key signer): q0..q39 at least
    assert st["matched"] == len(hits) >= 40, (st, [t for t in texts if t not in hits])


def test_preload_takes_the_queries_category_and_leaves_the_rest(tmp_path: Path) -> None:
    records, file_lines, pid, out = _run_named(tmp_path, verify=False)
    assert "fipstop wrap --bind" not in out, out
    assert file_lines == []  # taken before isc_log: no channel of the category saw them
    queries = [p for _, _, p in records if b": query: " in p]
    names = Counter(m.group(1).decode() for p in queries if (m := re.search(rb": query: (\S+) ", p)))
    for q in (f"q{i}.{ZONE}" for i in range(40)):
        assert names[q] == 1, q
    assert len(queries) >= len(QUERIES) + len(SINGLE)
    assert all(p.startswith(f"<30>named[{pid}]: client @0x".encode()) for p in queries)
    log = (tmp_path / "named" / "named.log").read_text(errors="replace")
    assert "all zones loaded" in log and "running" in log  # other categories: as named.conf says


@pytest.mark.parametrize("native", [False, True], ids=["stock", "native"])
def test_preload_under_asan_and_ubsan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """The same byte-for-byte check with the preload built with AddressSanitizer
    and UndefinedBehaviorSanitizer (preloaded after their runtimes): a read or
    write outside a piece, the ring slot or a BIND structure stops named; in
    the patched named, outside the binary record BIND hands over."""
    if CC is None or NAMED is None:
        pytest.skip("needs a C compiler and named")
    named = _native_named() if native else NAMED
    libns = subprocess.run([CC, "-print-file-name=libns.so"], capture_output=True, text=True).stdout.strip()
    rts = [subprocess.run([CC, f"-print-file-name={n}"], capture_output=True, text=True).stdout.strip()
           for n in ("libasan.so", "libubsan.so")]
    if not os.path.isabs(libns) or not all(os.path.isabs(r) and os.path.exists(r) for r in rts):
        pytest.skip("needs libns.so (bind9-dev) and the ASan/UBSan runtimes")
    lib = tmp_path / "libfips_bind_asan.so"
    csrc = REPO / "fipstop" / "csrc"
    subprocess.run([CC, "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-std=c11",
                    "-D_GNU_SOURCE", "-DHAVE_STDATOMIC_H=1", "-fPIC", "-shared", f"-I{csrc}",
                    f'-DFIPS_BIND_LIBNS="{os.path.basename(os.path.realpath(libns))}"', str(csrc / "fips_bind.c"),
                    str(csrc / "fips_bind_layout.c"), str(csrc / "fips.c"), "-o", str(lib), "-ldl", "-lpthread"],
                   check=True)
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1")
    monkeypatch.setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    records, file_lines, pid, out = _run_named(tmp_path, verify=True, named=named,
                                               preload=[os.path.realpath(r) for r in rts] + [str(lib)])
    assert "Sanitizer" not in out and "runtime error" not in out, out[-3000:]
    queries = [p for _, _, p in records if b": query: " in p]
    assert len(file_lines) >= len(QUERIES) + len(SINGLE)
    if native:  # BIND's own line after each binary record
        from fipstop import _fips

        binary = [p for _, f, p in records if f & _fips.REC_BIND_QUERY]
        assert len(binary) == len(queries) == len(file_lines)
    else:  # the preload's line and BIND's own
        assert len(queries) == 2 * len(file_lines)


def _wrap(shm: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([*_fipstop_argv(), "--shm-dir", str(shm), "wrap", "--bind", "--domain", DOMAIN, "--",
                           *cmd], capture_output=True, text=True, timeout=60, env=env)


def _payloads(shm: Path) -> list[bytes]:
    from fipstop import _fips

    with _fips.Domain(DOMAIN, shm, create=False) as dom:
        cons = _fips.Consumer(dom, "t")
        out: list[bytes] = []
        while (b := cons.read(1024)) is not None:
            out += b.payloads()
            b.release()
        cons.close()
    return out


def test_no_libns_falls_back_to_the_drop_in_with_one_line(tmp_path: Path) -> None:
    if not BIND_SHIM.exists():
        pytest.skip(f"{BIND_SHIM} is not built")
    shm = tmp_path / "shm"
    shm.mkdir()
    r = _wrap(shm, sys.executable, "-c", "import syslog; syslog.syslog('hello from python')")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("fipstop wrap --bind:")]
    assert len(lines) == 1 and "no ns_client_log/ns_client_logv in this process" in lines[0], r.stderr
    assert any(p.endswith(b"hello from python") for p in _payloads(shm))


FAKE_LIBNS = r"""
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>
void ns_client_logv(void *c, void *cat, void *mod, int level, const char *fmt, va_list ap) {
    char buf[256]; (void)c; (void)cat; (void)mod; (void)level;
    vsnprintf(buf, sizeof buf, fmt, ap);
    syslog(LOG_DAEMON | LOG_INFO, "fake libns: %s", buf);
}
void ns_client_log(void *c, void *cat, void *mod, int level, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); ns_client_logv(c, cat, mod, level, fmt, ap); va_end(ap);
}
int isc_log_wouldlog(void *lctx, int level) { (void)lctx; (void)level; return 1; }
void *ns_lctx;
"""
FAKE_MAIN = r"""
void ns_client_log(void *c, void *cat, void *mod, int level, const char *fmt, ...);
int main(void) { int x; ns_client_log(&x, 0, 0, -1, "query: %s %s", "a.example", "IN"); return 0; }
"""


def test_other_libns_falls_back_to_the_drop_in_with_one_line(tmp_path: Path) -> None:
    """A libns that is not the one the preload was built for (here a small
    stand-in with another file name) keeps its own ns_client_log: its lines
    reach the ring through syslog(3) and the drop-in."""
    if not BIND_SHIM.exists() or CC is None:
        pytest.skip("needs libfips_bind.so and a C compiler")
    lib = tmp_path / "libns-9.99.0-Other.so"
    (tmp_path / "fake.c").write_text(FAKE_LIBNS)
    (tmp_path / "main.c").write_text(FAKE_MAIN)
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True)
    prog = tmp_path / "fakenamed"
    subprocess.run([CC, "-o", str(prog), str(tmp_path / "main.c"), str(lib), f"-Wl,-rpath,{tmp_path}"], check=True)
    shm = tmp_path / "shm"
    shm.mkdir()
    r = _wrap(shm, str(prog))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("fipstop wrap --bind:")]
    assert len(lines) == 1, r.stderr
    assert "libns is libns-9.99.0-Other.so, this preload was built with the headers of libns-" in lines[0]
    assert any(p.endswith(b"fake libns: query: a.example IN") for p in _payloads(shm))
