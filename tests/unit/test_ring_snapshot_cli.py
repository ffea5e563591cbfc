"""``fipstop snapshot``: human and JSON output, bad files, hostile names."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fipstop
from fipstop import _fips
from fipstop._fips import Consumer, Domain, Producer
from fipstop.commands.snapshot import run
from fipstop.outputs.jsondoc import domain_json as to_json
from fipstop.outputs.text import format_human
from fipstop.textsafe import escape_text

PKG_PARENT = str(Path(fipstop.__file__).parent.parent)

HOSTILE_THREAD = "\x1b[31mred\x1b[0m[bold]x\x07"
HOSTILE_CONSUMER = "ips"  # consumer names are restricted by libfips


@pytest.fixture
def domain_dir(shm_dir: Path) -> Path:
    return shm_dir


def fipstop_cmd(shm_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, "-P", "-m", "fipstop", "--shm-dir", str(shm_dir), "snapshot", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def run_direct(shm_dir: Path, *, domain: str | None = None, as_json: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run(argparse.Namespace(shm_dir=str(shm_dir), domain=domain, json=as_json, backends=False), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def live(domain_dir: Path):
    """A domain with a producer (hostile thread name), a lagging consumer and
    a drained one, kept open for the test."""
    d = Domain("live", domain_dir, max_rings=8, max_consumers=4, ring_capacity=4096, max_record=256)
    p = Producer(d)
    p.set_name(HOSTILE_THREAD)
    lag = Consumer(d, "laggard")
    fast = Consumer(d, "fast")
    for i in range(100):
        p.log(b"%03d" % i + b"-" * 37)  # 64 bytes a record: 64 fit
    while (b := fast.read()) is not None:
        fast.release(b)
    yield d, p, lag, fast
    d.close()


def test_escape_text() -> None:
    assert escape_text("plain [bold] text") == "plain [bold] text"
    assert escape_text("\x1b[31m") == "\\x1b[31m"
    assert escape_text("a\nb\tc\x7f\x9b") == "a\\x0ab\\x09c\\x7f\\x9b"
    assert escape_text("\u202eevil") == "\\u202eevil"  # bidi override
    assert escape_text("é✓") == "é✓"


def test_human_output(live, domain_dir: Path) -> None:
    d, p, lag, fast = live
    rc, out, err = run_direct(domain_dir)
    assert rc == 0 and err == ""
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[31mred\\x1b[0m[bold]x\\x07" in out  # escaped, markup left literal
    assert f"domain live  ({domain_dir / 'fips.live'})" in out
    lines = out.splitlines()
    hdr = next(i for i, ln in enumerate(lines) if ln.strip().startswith("RING"))
    ring_row = lines[hdr + 1].split()
    assert ring_row[0] == str(p.ring) and ring_row[1] == "active" and ring_row[2] == str(os.getpid())
    assert "64" in ring_row and "36" in ring_row  # committed, dropped
    assert "100.0" in ring_row  # fill%: the laggard has read nothing
    # consumers: state, lag
    cons_lines = [ln for ln in lines if ln.strip().startswith(("0 ", "1 ")) and ("laggard" in ln or "fast" in ln)]
    laggard = next(ln for ln in cons_lines if "laggard" in ln).split()
    fast_l = next(ln for ln in cons_lines if "fast" in ln).split()
    assert laggard[2] == "active" and laggard[-1] == "64"
    assert fast_l[2] == "active" and fast_l[-1] == "0"
    assert "positions" in out
    # columns are aligned: header and rows of the ring table end at the same column for right-aligned numbers
    assert len({len(ln) for ln in lines[hdr : hdr + 2]}) >= 1


def test_json_output(live, domain_dir: Path) -> None:
    d, p, lag, fast = live
    rc, out, err = run_direct(domain_dir, as_json=True)
    assert rc == 0
    doc = json.loads(out)
    assert list(doc) == ["domains"]
    (dom,) = doc["domains"]
    assert dom["name"] == "live" and dom["max_rings"] == 8 and dom["ring_capacity_bytes"] == 4096
    (r,) = dom["rings"]
    assert r["thread_name"] == HOSTILE_THREAD  # JSON carries the real name ...
    assert "\x1b" not in out  # ... escaped by the JSON encoder
    assert r["records_committed"] == 64 and r["records_dropped"] == 36
    assert r["fill_ratio"] == 1.0 and r["used_bytes"] == 4096 and r["state"] == "active"
    cons = {c["name"]: c for c in dom["consumers"]}
    assert cons["laggard"]["lag_records"] == 64 and cons["fast"]["lag_records"] == 0
    assert cons["fast"]["positions"][0]["released_seq"] == 64
    assert cons["fast"]["positions"][0]["ring"] == p.ring
    assert all(c["state"] == "active" for c in cons.values())

    def numbers(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from numbers(v)
        elif isinstance(x, list):
            for v in x:
                yield from numbers(v)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            yield x

    ints = json.loads(out)
    for ring in ints["domains"][0]["rings"]:  # the one float: fill as a 0-1 ratio, as every other output has it
        assert isinstance(ring.pop("fill_ratio"), float)
    assert all(isinstance(n, int) for n in numbers(ints))
    # stable keys: the same document structure twice
    rc2, out2, _ = run_direct(domain_dir, as_json=True)

    def keys(x):
        if isinstance(x, dict):
            return {k: keys(v) for k, v in x.items()}
        if isinstance(x, list):
            return [keys(v) for v in x]
        return None

    assert keys(json.loads(out2)) == keys(doc)


def test_subprocess_human_and_json(live, domain_dir: Path) -> None:
    proc = fipstop_cmd(domain_dir)
    assert proc.returncode == 0, proc.stderr
    assert "domain live" in proc.stdout and "\x1b" not in proc.stdout
    assert "laggard" in proc.stdout
    proc = fipstop_cmd(domain_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["domains"][0]["name"] == "live"
    proc = fipstop_cmd(domain_dir, "--domain", "live", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["domains"]) == 1


def test_bad_domain_reported_and_others_still_shown(live, domain_dir: Path) -> None:
    (domain_dir / "fips.broken").write_bytes(b"\x00" * 5000)
    (domain_dir / "fips.zzz").write_bytes(b"short")
    proc = fipstop_cmd(domain_dir)
    assert proc.returncode == 2
    assert "domain live" in proc.stdout
    errs = proc.stderr.strip().splitlines()
    assert len(errs) == 2
    assert errs[0].startswith(f"fipstop: {domain_dir / 'fips.broken'}: ") and "magic" in errs[0]
    assert errs[1].startswith(f"fipstop: {domain_dir / 'fips.zzz'}: ") and "truncated" in errs[1]
    proc = fipstop_cmd(domain_dir, "--json")
    assert proc.returncode == 2
    assert [d["name"] for d in json.loads(proc.stdout)["domains"]] == ["live"]
    assert len(proc.stderr.strip().splitlines()) == 2


def test_missing_domain_option(domain_dir: Path) -> None:
    rc, out, err = run_direct(domain_dir, domain="nope")
    assert rc == 2 and err.startswith(f"fipstop: {domain_dir / 'fips.nope'}: ")
    rc, out, err = run_direct(domain_dir, domain="\x1b[2J")
    assert rc == 2 and "\x1b" not in err


def test_no_domains(domain_dir: Path) -> None:
    rc, out, err = run_direct(domain_dir)
    assert rc == 0
    assert "no FIPS domains" in out and "Domain(" in out
    rc, out, err = run_direct(domain_dir, as_json=True)
    assert rc == 0 and json.loads(out) == {"domains": []}
    proc = fipstop_cmd(domain_dir, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"domains": []}


def test_missing_dir_is_an_error(tmp_path: Path) -> None:
    proc = fipstop_cmd(tmp_path / "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"fipstop: {tmp_path / 'nope'}: no such directory"


def test_closed_domain_and_consumer_states(domain_dir: Path) -> None:
    with Domain("old", domain_dir, max_rings=2, max_consumers=2, ring_capacity=4096, max_record=64) as d:
        p = Producer(d)
        c = Consumer(d, "gone")
        p.log(b"x")
        c.close()
    rc, out, err = run_direct(domain_dir)
    assert rc == 0
    assert "closed" in out and "gone" in out
    rc, out, err = run_direct(domain_dir, as_json=True)
    dom = json.loads(out)["domains"][0]
    assert dom["rings"][0]["state"] == "closed" and dom["rings"][0]["closed_ns"] > 0
    assert dom["consumers"][0]["state"] == "closed" and dom["consumers"][0]["lag_records"] is None


def test_format_functions_directly(live, domain_dir: Path) -> None:
    from fipstop.ring import snapshot_domain

    s = snapshot_domain("live", domain_dir)
    assert "\x1b" not in format_human(s)
    j = to_json(s)
    assert j["rings"][0]["thread_name"] == HOSTILE_THREAD
    json.dumps(j)
    assert _fips.THREAD_NAME_MAX == 32
