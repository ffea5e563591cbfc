"""A real BIND 9 under ``fipstop wrap``: every query's log line lands in the rings.

named (Debian's, FORTIFY-built: it calls ``__syslog_chk`` with the format
``%s%s%s%s%s%s%s%s%s%s``) runs in the foreground on 127.0.0.1 on a port of
the test's own, with a test zone, ``querylog yes`` and the queries, default
and general categories sent to a syslog channel.  It is started as

    fipstop --shm-dir DIR wrap --domain bindtest -- named -f -c CONF -n 2

so syslog(3) goes through the preload shim into per-thread FIPS rings.  The
test registers a consumer, sends N distinct queries with one ``dig -f``, and
reads the rings with the binding: each query's line must be there, in a ring
whose producer is a thread of the named process (pid match, /proc/PID/task/TID
exists while named runs, thread name matches), and named's startup and
zone-load messages must have arrived too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fipstop.bench.bind.dns import free_port

pytestmark = [pytest.mark.integration, pytest.mark.root]

DOMAIN = "bindtest"
ZONE = "example.test"
N_QUERIES = 200
REPO = Path(__file__).resolve().parents[2]


def _find(prog: str) -> str | None:
    return shutil.which(prog) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/bin") if os.access(p := f"{d}/{prog}", os.X_OK)), None
    )


NAMED = _find("named")
DIG = _find("dig")


def _fipstop_argv() -> list[str]:
    exe = Path(sys.executable).parent / "fipstop"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "fipstop"]


def write_named_conf(d: Path, port: int) -> Path:
    zone = d / f"{ZONE}.zone"
    lines = [
        "$TTL 300",
        f"@ IN SOA ns.{ZONE}. admin.{ZONE}. 1 3600 600 86400 300",
        f"@ IN NS ns.{ZONE}.",
        "ns IN A 127.0.0.1",
        "www IN A 192.0.2.1",
    ]
    lines += [f"q{i} IN A 192.0.2.{i % 250 + 1}" for i in range(N_QUERIES)]
    zone.write_text("\n".join(lines) + "\n", encoding="utf-8")
    conf = d / "named.conf"
    conf.write_text(
        f"""options {{
    directory "{d}";
    pid-file "{d}/named.pid";
    session-keyfile "{d}/session.key";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    querylog yes;
}};
controls {{ }};
logging {{
    channel fips {{ syslog daemon; severity info; }};
    category queries {{ fips; }};
    category default {{ fips; }};
    category general {{ fips; }};
}};
zone "{ZONE}" {{ type primary; file "{zone}"; }};
""",
        encoding="utf-8",
    )
    return conf


def dig(port: int, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    assert DIG is not None
    return subprocess.run(
        [DIG, "@127.0.0.1", "-p", str(port), "+time=1", "+tries=2", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Named:
    proc: subprocess.Popen
    port: int
    shm: Path
    dir: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self) -> str:
        out = (self.dir / "wrap.out").read_text(errors="replace")[-2000:]
        return out or "(no output)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def named(tmp_path: Path) -> Iterator[Named]:
    if NAMED is None or DIG is None:
        pytest.skip("named and dig are needed (apt-get install bind9 bind9-dnsutils)")
    if not (REPO / "fipstop" / "lib" / "libfips_syslog.so").exists():
        pytest.skip("fipstop/lib/libfips_syslog.so is not built (make lib)")
    d = tmp_path / "named"
    d.mkdir()
    d.chmod(0o755)
    shm = tmp_path / "shm"
    shm.mkdir()
    port = free_port()
    conf = write_named_conf(d, port)
    out = open(d / "wrap.out", "wb")
    # named is run as root with -u omitted: it keeps its uid, so the domain
    # wrap created (owned by root) is the one the shim opens.
    proc = subprocess.Popen(
        [*_fipstop_argv(), "--shm-dir", str(shm), "wrap", "--domain", DOMAIN, "--",
         NAMED, "-f", "-c", str(conf), "-n", "2"],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=d,
    )
    out.close()
    n = Named(proc, port, shm, d)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"named exited {proc.returncode} before answering: {n.log_tail()}")
            r = dig(port, ZONE, "SOA", "+short", "+tries=1", timeout=5)
            if r.returncode == 0 and "admin." in r.stdout:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"named did not answer on 127.0.0.1#{port} within 30 s: {n.log_tail()}")
            time.sleep(0.2)
        yield n
    finally:
        _stop(proc)


def _ring_table(shm: Path) -> dict[int, object]:
    from fipstop.ring import snapshot_domain

    snap = snapshot_domain(DOMAIN, shm)
    return {rs.index: rs for rs in snap.ring_stats() if rs.state != 0}


def test_named_logs_every_query_into_its_threads_rings(named: Named) -> None:
    from fipstop import _fips

    # The domain exists (wrap created it before exec); register before the
    # queries so none can be missed (startup records were kept meanwhile: a
    # ring with no consumer keeps its records until it fills).
    dom = _fips.Domain(DOMAIN, named.shm, create=False)
    cons = _fips.Consumer(dom, "test-bind")
    try:
        names = [f"q{i}.{ZONE}" for i in range(N_QUERIES)]
        batch = named.dir / "queries.txt"
        batch.write_text("".join(f"{q} A\n" for q in names), encoding="utf-8")
        r = dig(named.port, "+noall", "+answer", "-f", str(batch), timeout=120)
        assert r.returncode == 0, r.stderr
        answered = set(re.findall(r"^(q\d+\.example\.test)\.\s", r.stdout, re.M))
        assert answered == set(names), f"named did not answer {sorted(set(names) - answered)[:5]}..."

        # read until every query line has arrived (bounded)
        query_re = re.compile(rb"query: (q\d+\.example\.test) IN A ")
        seen: dict[str, list[int]] = {}  # query name -> rings it was logged in
        records: list[tuple[int, bytes]] = []
        lost = 0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(seen) < N_QUERIES:
            b = cons.read(1024)
            if b is None:
                time.sleep(0.05)
                continue
            lost += b.lost
            for rec in b:
                data = rec.tobytes()
                records.append((b.ring, data))
                m = query_re.search(data)
                if m:
                    seen.setdefault(m.group(1).decode(), []).append(b.ring)
            b.release()
        # the ring table while named still runs: /proc/PID/task/TID must exist
        rings = _ring_table(named.shm)
        tasks = {
            rs.tid: (Path(f"/proc/{named.pid}/task/{rs.tid}").exists(),
                     _read(f"/proc/{named.pid}/task/{rs.tid}/comm"))
            for rs in rings.values()
        }
        assert named.proc.poll() is None, "named died during the test"
    finally:
        cons.close()
        dom.close()

    missing = sorted(set(names) - set(seen), key=lambda s: int(s[1:].split(".")[0]))
    assert not missing, f"{len(missing)} queries have no log line in the rings, e.g. {missing[:5]}"
    assert lost == 0, f"{lost} records lost"

    # every record: named's syslog header with named's own pid
    head = re.compile(rb"^<(\d+)>named\[(\d+)\]: ")
    for ring, data in records:
        m = head.match(data)
        assert m, f"ring {ring}: unexpected record {data[:120]!r}"
        assert int(m.group(2)) == named.pid, f"record pid {m.group(2)} != named {named.pid}"

    # each query line is in the ring of a named thread (a worker, not the main thread)
    query_rings = {ring for rs in seen.values() for ring in rs}
    for ring in query_rings:
        rs = rings[ring]
        assert rs.pid == named.pid, f"ring {ring}: producer pid {rs.pid} != named pid {named.pid}"
        exists, comm = tasks[rs.tid]
        assert exists, f"ring {ring}: tid {rs.tid} is not a thread of named ({named.pid})"
        assert rs.tid != named.pid, f"ring {ring}: queries logged from named's main thread?"
        assert comm == rs.thread_name, f"ring {ring}: thread name {rs.thread_name!r} != /proc comm {comm!r}"
        assert rs.records_dropped == 0
    for q, rl in seen.items():
        for ring in rl:
            assert ring in rings, f"{q}: ring {ring} is not in use"
    # the query lines carry the queries category's priority: daemon.info = <30>
    qprio = {m.group(1) for ring, data in records if query_re.search(data) and (m := head.match(data))}
    assert qprio == {b"30"}, qprio

    # named's other messages arrived too
    texts = [data for _, data in records]
    assert any(b"starting BIND" in t for t in texts), "no 'starting BIND' record"
    assert any(re.search(rb"zone example\.test/IN: loaded serial 1", t) for t in texts), "no zone-load record"
    assert any(b"all zones loaded" in t for t in texts)
    # and every ring in use belongs to named
    for rs in rings.values():
        assert rs.pid == named.pid


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def test_named_stops_cleanly_under_wrap(named: Named) -> None:
    """SIGTERM ends named (the shim does not get in the way of shutdown) and
    its shutdown messages reach the ring."""
    from fipstop import _fips

    named.proc.send_signal(signal.SIGTERM)
    assert named.proc.wait(timeout=20) == 0, named.log_tail()
    dom = _fips.Domain(DOMAIN, named.shm, create=False)
    cons = _fips.Consumer(dom, "after-exit")
    texts: list[bytes] = []
    try:
        while (b := cons.read(1024)) is not None:
            texts += b.payloads()
            b.release()
    finally:
        cons.close()
        dom.close()
    assert any(b"shutting down" in t for t in texts), texts[-5:]
    assert any(b"exiting" in t for t in texts), texts[-5:]
