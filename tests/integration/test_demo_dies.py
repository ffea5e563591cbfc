"""`fipstop demo` takes its children down and removes what it created, however it dies (issue 17).

The demo's children (the C producer, `fipstop ips`, the slow consumer) run in
sessions of their own, so a closed terminal does not reach them directly:
they get SIGTERM from the kernel when the demo dies (PR_SET_PDEATHSIG), and a
janitor removes the demo's domains and its temporary directory.  Each way of
dying is tried on a real demo: the terminal closed under the dashboard (tmux
kill-server: SIGHUP), SIGTERM and SIGKILL of a headless demo.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fipstop.demo import producer_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARGS = ["--attackers", "64", "--attack-rate", "2000", "--legit-rate", "500", "--ramp", "1", "--threads", "2",
        "--slow-consumer", "5"]


@pytest.fixture(autouse=True)
def _built():
    if not os.access(producer_path(), os.X_OK):
        pytest.skip(f"{producer_path()} is not built (make lib)")


def wait_until(cond, timeout: float = 30.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what}")


def demo_children(demo_pid: int) -> list[psutil.Process]:
    """The producer, ips and slow consumer of the demo ``demo_pid`` (its janitor apart)."""
    try:
        kids = psutil.Process(demo_pid).children()
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "janitor" not in " ".join(k.cmdline())]


def all_running(demo_pid: int) -> list[psutil.Process] | None:
    kids = demo_children(demo_pid)
    cmds = [" ".join(k.cmdline()) for k in kids]
    want = (producer_path().name, " ips ", "--slow-child")
    if all(any(w in c for c in cmds) for w in want) and not any("fipstop.children exec" in c for c in cmds):
        return kids
    return None


def tmp_dir_of(kids: list[psutil.Process]) -> Path:
    for k in kids:
        cmd = k.cmdline()
        if "--stats-json" in cmd:
            return Path(cmd[cmd.index("--stats-json") + 1]).parent
    raise AssertionError("no ips child")


def gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def check_left_nothing(shm: Path, kids: list[psutil.Process], tmp: Path) -> None:
    wait_until(lambda: gone(kids), timeout=20, what="the demo's children to exit")
    wait_until(lambda: not list(shm.iterdir()), timeout=20, what=f"the domains removed: {list(shm.iterdir())}")
    wait_until(lambda: not tmp.exists(), timeout=20, what=f"{tmp} removed")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_headless_demo_killed(tmp_path: Path, sig: signal.Signals) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    demo = subprocess.Popen([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--headless",
                             "--duration", "120", "--domain", "diestest", *ARGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        kids: list[psutil.Process] = []
        wait_until(lambda: bool(kids.extend(all_running(demo.pid) or []) or kids), what="the demo's children")
        tmp = tmp_dir_of(kids)
        assert {p.name for p in shm.iterdir()} == {"fips.diestest", "fips.diestest-bans"} and tmp.is_dir()
        demo.send_signal(sig)
        out, err = demo.communicate(timeout=60)
        if sig == signal.SIGTERM:  # a stop it could handle: it still prints its summary
            assert demo.returncode == 0 and b"fipstop demo:" in out, err
        else:
            assert demo.returncode == -sig if sig == signal.SIGKILL else demo.returncode == 128 + sig, err
        assert b"Traceback" not in err
        check_left_nothing(shm, kids, tmp)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_dashboard_demo_terminal_closed(tmp_path: Path) -> None:
    """The issue's case: the demo's dashboard in tmux, then the terminal closed (tmux kill-server)."""
    shm = tmp_path / "shm"
    shm.mkdir()
    sock = str(tmp_path / "tmux.sock")
    cmd = " ".join([sys.executable, "-m", "fipstop", "--shm-dir", str(shm), "demo", "--domain", "diestest", *ARGS])
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "120", "-y", "40", f"cd {REPO} && {cmd}"],
                   check=True, timeout=30)
    try:
        demo_pid: list[int] = []

        def started() -> bool:
            for p in psutil.process_iter(["cmdline"]):
                c = p.info["cmdline"] or []
                if "demo" in c and "diestest" in c and str(shm) in c and "fipstop" in c:
                    if all_running(p.pid):
                        demo_pid.append(p.pid)
                        return True
            return False

        wait_until(started, what="the dashboard demo and its children")
        kids = all_running(demo_pid[0]) or []
        tmp = tmp_dir_of(kids)
        demo = psutil.Process(demo_pid[0])
        subprocess.run(["tmux", "-S", sock, "kill-server"], check=True, timeout=30)
        wait_until(lambda: gone([demo]), timeout=30, what="the demo to exit")
        check_left_nothing(shm, kids, tmp)
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=30)
