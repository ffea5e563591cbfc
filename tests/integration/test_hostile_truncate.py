"""Issue 17 item 1, end to end: a daemon started under `fipstop wrap` drops root
(setgroups/setgid/setuid to ``nobody``) and shrinks its domain under the live
mappings of every long-lived reader.

* It holds no descriptor on the root-owned domain, so after the drop neither
  ftruncate() on anything it holds nor truncate(PATH) can shrink it (the
  issue's attack: the root ``fipstop ips`` died of SIGBUS).
* Where the domain is group-writable for the daemon (a deployment that lets
  the producer write its file), the unprivileged daemon truncates it for real:
  `fipstop check` (UNKNOWN, exit 3), `fipstop record`, `fipstop tail`,
  `fipstop ips`, the dashboard's source (LiveSource) and a Python ``Monitor``
  all survive and each says one line; the IPS reopens the domain once a valid
  one is back under the name and bans again.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fipstop import _fips
from fipstop.ips.stats import read_stats

pytestmark = [pytest.mark.root, pytest.mark.integration]

DAEMON = Path(__file__).resolve().parents[1] / "progs" / "hostile_daemon.py"
FIRST = ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
AFTER = ["203.0.113.7", "203.0.113.8"]


def denied(ip: str) -> bytes:
    return f"<30>named[7]: client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


@pytest.fixture
def open_shm() -> Iterator[Path]:
    """A shm dir ``nobody`` can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="fips-hostile-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def nobody() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    return pw.pw_uid, pw.pw_gid


def fipstop(shm: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def daemon(shm: Path, mode: str, uid: int, gid: int) -> subprocess.Popen:
    return fipstop(shm, "wrap", "--domain", "hostile", "--", sys.executable, str(DAEMON), mode,
                   str(shm / "fips.hostile"), str(uid), str(gid), ",".join(FIRST), stdin=subprocess.PIPE)


def line(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    text = proc.stdout.readline()
    assert text, proc.communicate(timeout=10)
    return json.loads(text)


def wait_until(cond, timeout: float = 30.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out: {what}")


def maps(proc: subprocess.Popen, path: Path) -> bool:
    """The process has the domain file mapped (a live mapping a truncation hits)."""
    assert proc.poll() is None, proc.communicate(timeout=10)
    try:
        return str(path) in Path(f"/proc/{proc.pid}/maps").read_text()
    except OSError:
        return False


def stats(path: Path):
    try:
        return read_stats(path)
    except (OSError, ValueError):
        return None


def test_dropped_daemon_cannot_shrink_a_root_owned_domain(open_shm: Path) -> None:
    uid, gid = nobody()
    d = daemon(open_shm, "fd", uid, gid)
    try:
        ready = line(d)
        assert ready["fds_on_domain"] == []  # no descriptor kept after mapping
        size = (open_shm / "fips.hostile").stat().st_size
        assert d.stdin is not None
        d.stdin.write("go\n")
        d.stdin.flush()
        did = line(d)
        assert (did["uid"], did["euid"]) == (uid, uid)
        assert did["ftruncated"] == [] and did["truncate"] == "Permission denied", did
        assert did["size_after"] == size == (open_shm / "fips.hostile").stat().st_size
        assert line(d) == {"logged_after": True}
        d.stdin.write("stop\n")
        d.stdin.flush()
        d.wait(timeout=20)
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    assert d.returncode == 0, d.stderr.read() if d.stderr else ""
    with _fips.Monitor("hostile", open_shm) as m:
        from fipstop.ring import take_snapshot

        snap = take_snapshot(m)
        # 15 denied lines and the 200 after the drop: the domain took every one
        assert int(snap.rings["records_committed"].sum()) == 3 * 5 + 200


def test_every_reader_survives_a_real_truncation_by_a_dropped_producer(open_shm: Path, tmp_path: Path) -> None:
    from fipstop.config import ProbeConfig
    from fipstop.ring import TRUNCATED, is_truncated
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes

    uid, gid = nobody()
    path = open_shm / "fips.hostile"
    # the producer's group may write its domain (0660, group nobody's): root creates it, wrap opens it
    _fips.Domain("hostile", open_shm, create=2, max_rings=8, ring_capacity=1 << 16, max_record=512, mode=0o660,
                 gid=gid).close()
    d = daemon(open_shm, "path", uid, gid)
    procs: list[subprocess.Popen] = [d]
    try:
        assert line(d)["fds_on_domain"] == []
        ips_stats = tmp_path / "ips.json"
        ips = fipstop(open_shm, "ips", "--domain", "hostile", "--consumer", "ips", "--maxretry", "5",
                      "--bans-domain", "hostile-bans", "--stats-json", str(ips_stats), "--duration", "120")
        tail = fipstop(open_shm, "tail", "--domain", "hostile", "--consumer", "tail", "--timeout", "120")
        rec = fipstop(open_shm, "record", "-o", str(tmp_path / "rec.fsr"), "--interval", "0.2", "--duration", "120",
                      "--domain", "hostile")
        check = fipstop(open_shm, "check", "--domain", "hostile", "--window", "12", "--timeout", "30")
        procs += [ips, tail, rec, check]
        wait_until(lambda: (s := stats(ips_stats)) is not None and s.bans == len(FIRST), what="first bans")
        for p in (tail, rec, check):
            wait_until(lambda p=p: maps(p, path), what=f"{p.args[4]} mapped the domain")
        mon = _fips.Monitor("hostile", open_shm)
        mon.snapshot()
        source = LiveSource(build_probes(ProbeConfig(shm_dir=str(open_shm), domains=("hostile",), backends=None,
                                                     bans_domain=None, cpu=False)), 1.0)
        assert source.poll().raw.ring.domain("hostile") is not None

        assert d.stdin is not None
        d.stdin.write("go\n")
        d.stdin.flush()
        did = line(d)
        assert (did["euid"], did["truncate"], did["size_after"]) == (uid, "ok", 4096), did
        assert line(d) == {"logged_after": True}  # the shim itself survived its domain shrinking

        # the Python Monitor: FipsError(ETRUNC), not SIGBUS
        with pytest.raises(_fips.FipsError) as e:
            mon.snapshot()
        assert is_truncated(e.value)
        mon.close()
        # the dashboard's source: the domain is one line among the frame's errors, the frame comes
        errs = source.poll().raw.ring.errors
        assert [e.domain for e in errs] == ["hostile"] and errs[0].reason.startswith(TRUNCATED + ": hostile")
        assert "now 4096 bytes" in errs[0].reason and "\n" not in errs[0].reason
        source.close()
        # check: UNKNOWN, exit 3, one line
        out, err = check.communicate(timeout=60)
        assert check.returncode == 3, (out, err)
        assert out.startswith("FIPS UNKNOWN - domain truncated: hostile") and out.count("\n") == 1, out
        assert err == ""
        # tail: one line, exit 1
        out, err = tail.communicate(timeout=30)
        assert tail.returncode == 1 and err.startswith("fipstop: tail: domain truncated: hostile"), err
        assert err.count("\n") == 1 and "Traceback" not in err
        # the IPS: still running, said it once, counted it
        wait_until(lambda: (s := stats(ips_stats)) is not None and s.domain_truncations == 1, what="ips finding")
        assert ips.poll() is None
        s = stats(ips_stats)
        assert s is not None and s.findings and s.findings[0].startswith("domain truncated: hostile")
        # record: still recording (its line is read below, once it has stopped)
        time.sleep(1.0)
        assert rec.poll() is None

        # a valid domain back under the name: the IPS reopens it and bans again
        path.unlink()
        with _fips.Domain("hostile", open_shm, create=2, max_rings=8, ring_capacity=1 << 16, max_record=512) as dom:
            wait_until(lambda: (s := stats(ips_stats)) is not None and s.domain_reopens == 1, what="ips reopened")
            p = _fips.Producer(dom)
            for ip in AFTER:
                for _ in range(5):
                    p.log(denied(ip))
            wait_until(lambda: (s := stats(ips_stats)) is not None and s.bans == len(FIRST) + len(AFTER),
                       what="bans after the reopen")
            p.close()
        for p in (ips, rec):
            p.terminate()
        ips_out, ips_err = ips.communicate(timeout=30)
        rec_out, rec_err = rec.communicate(timeout=30)
        assert ips.returncode == 0, ips_err
        cut = [x for x in ips_err.splitlines() if "truncated" in x]
        assert len(cut) == 1 and cut[0].startswith("fipstop ips: domain truncated: hostile"), ips_err
        assert "reopened: consuming again" in ips_err and "Traceback" not in ips_err
        assert rec.returncode == 0, rec_err
        cut = [x for x in rec_err.splitlines() if "truncated" in x]
        assert len(cut) == 1 and cut[0].startswith("fipstop: record: domain truncated: hostile"), rec_err
        d.stdin.write("stop\n")
        d.stdin.flush()
        d.wait(timeout=20)
        assert d.returncode == 0
        # what was recorded replays; the truncation is in it as the domain's one line
        exp = subprocess.run([sys.executable, "-m", "fipstop", "export", str(tmp_path / "rec.fsr"), "--format",
                              "jsonl"], capture_output=True, text=True, timeout=60)
        assert exp.returncode == 0 and exp.stdout, exp.stderr
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p in procs:
        assert p.returncode is not None and p.returncode >= 0, (p.args, p.returncode)  # none died of a signal

