"""`fipstop demo --headless`: the C producer, `fipstop ips` and the summary, as separate processes.

Real components: the demo producer (C, libfips) and the real `fipstop ips`
process; the test checks the summary, that every attacker was banned with no
legitimate client banned, that the slow consumer makes the rings drop, and
that the demo leaves nothing behind (domains, processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from fipstop.demo import producer_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def run_demo(shm: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--headless", *extra],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=REPO)


def children_named(*names: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if any(n in cmd for n in names) and p.pid != os.getpid():
            out.append(p)
    return out


@pytest.fixture(autouse=True)
def _built():
    if not os.access(producer_path(), os.X_OK):
        pytest.skip(f"{producer_path()} is not built (make lib)")


def test_headless_summary_bans_every_attacker(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    r = run_demo(shm, "--duration", "4", "--attackers", "256", "--attack-rate", "8000", "--legit-rate", "1000",
                 "--ramp", "1", "--threads", "2", "--json", "--domain", "demotest")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["attackers"] == 256 and s["attackers_banned"] == 256 and s["legit_banned"] == 0
    assert s["records_committed"] > 8000 and s["records_dropped"] == 0
    assert s["ips"]["records"] == s["records_committed"]
    assert s["ban_events"] == 256 and s["time_to_ban_ms"]["p99"] is not None
    assert s["reaction_ms"]["p50"] is not None
    assert list(shm.iterdir()) == []  # both domains removed
    assert not [p for p in children_named("fips-demo-producer", "--consumer ips") if "demotest" in
                " ".join(p.cmdline())]


def test_slow_consumer_makes_drops_and_text_summary(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    r = run_demo(shm, "--duration", "3", "--attackers", "64", "--attack-rate", "30000", "--ramp", "0",
                 "--threads", "2", "--ring-size", "65536", "--slow-consumer", "200", "--domain", "demoslow")
    assert r.returncode == 0, r.stderr
    assert "slow consumer 200 ms/batch" in r.stdout
    dropped = int(r.stdout.split(" committed")[1].split("), ")[1].split(" dropped")[0].replace(",", ""))
    assert dropped > 0
    assert "attackers" in r.stdout and "time-to-ban" in r.stdout
    assert list(shm.iterdir()) == []


def test_refuses_an_existing_domain(tmp_path):
    from fipstop._fips import Domain

    shm = tmp_path / "shm"
    shm.mkdir()
    Domain("taken", str(shm)).close()
    r = run_demo(shm, "--duration", "1", "--domain", "taken")
    assert r.returncode == 2 and "already exists" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in shm.iterdir()) == ["fips.taken"]  # ours untouched, nothing else left


def test_no_terminal_runs_headless(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    r = subprocess.run([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--duration", "2",
                        "--attackers", "16", "--threads", "1"], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "no terminal" in r.stderr and "attackers" in r.stdout


def test_killing_the_slow_consumer_shows_its_eviction_not_an_error(tmp_path):
    """Issue 16, item 7: the demo goes on when its slow consumer dies, and says what happens next."""
    import time

    shm = tmp_path / "shm"
    shm.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--headless", "--duration",
                          "5", "--attackers", "64", "--threads", "1", "--slow-consumer", "50", "--domain", "demokill"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        for _ in range(100):
            slow = [c for c in children_named("--slow-child") if "demokill" in " ".join(c.cmdline())]
            if slow:
                break
            time.sleep(0.05)
        assert slow, "no slow consumer"
        time.sleep(0.5)
        slow[0].kill()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "slow consumer exited (killed by SIGKILL)" in err and "evicts it" in err and "(-9)" not in err
    assert "attackers" in out
