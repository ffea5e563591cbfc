"""A C program whose threads contend on one mutex, profiled live.

The /proc thread sampler (no root, no BPF) must show each worker >= 50 %
blocked on a lock and name the mutex's address as the top lock; with root
and bcc, the bpf profiler must name the same address as its top lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fipstop.bench.cbuild import build_c

pytestmark = pytest.mark.integration

PROGS = Path(__file__).resolve().parents[1] / "progs"
THREADS = 6


def contend_binary() -> Path:
    binary, why, _ = build_c("contend", (PROGS / "contend.c",))
    if binary is None:
        pytest.skip(f"cannot build the contention program: {why}")
    return binary


class Contend:
    """The running program: ``pid`` and the mutex's ``lock`` address."""

    def __init__(self, binary: Path, seconds: int = 30, argv_prefix: tuple[str, ...] = ()) -> None:
        # 200 us spin + 1 ms sleep under the lock, 300 us outside: long enough
        # for a woken waiter to take the lock before the releaser comes back
        # (with a shorter gap one thread can barge in again and again)
        self.proc = subprocess.Popen([*argv_prefix, str(binary), str(THREADS), str(seconds), "200", "1000", "300"],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()  # pid P lock 0x... threads N
        assert line[:1] == ["pid"], line
        self.pid, self.lock = int(line[1]), int(line[3], 16)
        time.sleep(0.3)  # every worker started

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def contend():
    c = Contend(contend_binary())
    yield c
    c.close()


def check_workers(threads: list[dict], lock: int, top_lock: int) -> None:
    # workers are contend-0 .. contend-5; the main thread has the binary's name, contend-<hash>
    workers = [t for t in threads if re.fullmatch(r"contend-\d{1,3}", t["name"])]
    assert len(workers) == THREADS, [t["name"] for t in threads]
    for t in workers:
        total = sum(t[f"{c}_pct"] for c in ("oncpu", "runqueue", "lock", "io", "sleep", "other"))
        assert total == pytest.approx(100.0)
        assert t["lock_pct"] >= 50.0, t
    assert top_lock == lock


def test_threads_blocked_on_the_lock_and_its_address_is_top(contend: Contend) -> None:
    from fipstop.profile.session import ProfileOptions, profile_once

    r = profile_once(contend.pid, 2.0, ProfileOptions(bpf=False, pyspy=False))
    assert r.threads.available and r.threads.method == "syscall+wchan"
    src, locks = r.top_locks()
    assert src == "procfs" and locks
    j = r.to_json()
    check_workers(j["threads"]["threads"], contend.lock, locks[0].address)
    assert len(locks[0].waiter_tids) == THREADS
    assert r.profile("py-spy").reason.startswith("off")


def test_cli_json_names_the_lock(contend: Contend) -> None:
    out = subprocess.run([sys.executable, "-m", "fipstop", "profile", "--pid", str(contend.pid), "--duration",
                          "1.5", "--no-bpf", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    check_workers(j["threads"]["threads"], contend.lock, int(j["top_locks"]["addresses"][0], 16))
    pyspy = next(p for p in j["profiles"] if p["source"] == "py-spy")
    assert not pyspy["available"] and "not a Python process" in pyspy["reason"]


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.slow
def test_bpf_top_lock_is_the_mutex(contend: Contend) -> None:
    try:
        from fipstop.probes.bpf import BpfProfiler
    except ImportError as e:
        pytest.skip(f"the bpf profiler is not available: {e}")
    ok, why = BpfProfiler(contend.pid).available()
    if not ok:
        pytest.skip(f"bpf profiler: {why}")
    from fipstop.profile.session import ProfileOptions, profile_once

    r = profile_once(contend.pid, 3.0, ProfileOptions(pyspy=False))
    bpf = r.profile("bpf")
    assert bpf is not None and bpf.available, bpf.reason if bpf else "no bpf sample"
    src, locks = r.top_locks()
    assert src == "bpf"
    assert locks[0].address == contend.lock
    check_workers(r.to_json()["threads"]["threads"], contend.lock, locks[0].address)


def _nobody() -> tuple[int, int]:
    import pwd

    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    return pw.pw_uid, pw.pw_gid


def test_no_root_path_as_unprivileged_user(tmp_path_factory) -> None:
    """``fipstop profile`` run as nobody against nobody's own process: the
    /proc split and the lock address come without any privilege."""
    import shutil

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to the unprivileged user (already unprivileged: the other tests "
                    "cover this path)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not installed")
    uid, gid = _nobody()
    d = tmp_path_factory.mktemp("noroot")
    d.chmod(0o755)
    binary = d / "contend"
    shutil.copy(contend_binary(), binary)
    binary.chmod(0o755)
    as_nobody = (setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups")
    probe = subprocess.run([*as_nobody, sys.executable, "-c", "import fipstop.commands.profile"], capture_output=True,
                           text=True, timeout=60, cwd=d)
    if probe.returncode != 0:
        pytest.skip("the unprivileged user cannot run this Python/fipstop: "
                    + (probe.stderr.strip().splitlines() or ["?"])[-1])
    c = Contend(binary, argv_prefix=as_nobody)
    try:
        assert os.stat(f"/proc/{c.pid}").st_uid == uid
        out = subprocess.run([*as_nobody, sys.executable, "-m", "fipstop", "profile", "--pid", str(c.pid),
                              "--duration", "1.5", "--json"], capture_output=True, text=True, timeout=60, cwd=d)
        assert out.returncode == 0, out.stderr
        j = json.loads(out.stdout)
        assert j["threads"]["method"] == "syscall+wchan"  # its own process: /proc/TID/syscall is readable
        check_workers(j["threads"]["threads"], c.lock, int(j["top_locks"]["addresses"][0], 16))
        bpf = next(p for p in j["profiles"] if p["source"] == "bpf")
        assert not bpf["available"] and bpf["reason"]  # no root: bpf says why
        # another user's process (ours, root's): degrades with a note, never fails
        out = subprocess.run([*as_nobody, sys.executable, "-m", "fipstop", "profile", "--pid", str(os.getpid()),
                              "--duration", "0.3", "--no-bpf", "--json"], capture_output=True, text=True,
                             timeout=60, cwd=d)
        assert out.returncode == 0, out.stderr
        j = json.loads(out.stdout)
        assert j["threads"]["method"] == "state+wchan" and j["threads"]["notes"]
        pyspy = next(p for p in j["profiles"] if p["source"] == "py-spy")
        assert not pyspy["available"] and "not permitted" in pyspy["reason"]
    finally:
        c.close()
