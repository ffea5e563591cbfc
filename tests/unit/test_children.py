"""fipstop.children: the janitor removes what its parent created when the parent dies, never a file
that replaced it; a child started through the launcher gets SIGTERM when its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_janitor_removes_at_parent_death_but_not_a_replaced_file(tmp_path: Path) -> None:
    prog = tmp_path / "parent.py"
    prog.write_text(
        "import os, sys, time\n"
        "from fipstop.children import Janitor\n"
        "d = sys.argv[1]\n"
        "j = Janitor()\n"
        "os.makedirs(d + '/tree/sub'); open(d + '/tree/sub/x', 'w').close()\n"
        "for n in ('a', 'b'): open(d + '/' + n, 'w').write('created 1'); j.remove_file(d + '/' + n, stamp=(0, 9))\n"
        "j.remove_dir(d + '/tree')\n"
        "print(j.proc.pid, flush=True)\n"
        "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, str(prog), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    janitor = int(p.stdout.readline())
    (tmp_path / "b").unlink()
    (tmp_path / "b").write_text("a later run's file of the same name")
    p.kill()  # SIGKILL: nothing of the parent's own runs
    p.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end and os.path.exists(f"/proc/{janitor}"):
        time.sleep(0.05)
    assert not (tmp_path / "a").exists() and not (tmp_path / "tree").exists()
    assert (tmp_path / "b").read_text() == "a later run's file of the same name"


def test_janitor_done_removes_nothing(tmp_path: Path) -> None:
    from fipstop.children import Janitor

    f = tmp_path / "kept"
    f.write_text("x")
    j = Janitor()
    j.remove_file(f)
    j.done()
    assert f.exists()


def test_launched_child_dies_with_its_parent(tmp_path: Path) -> None:
    out = tmp_path / "child.pid"
    child_prog = tmp_path / "child.py"
    child_prog.write_text(f"import os, time\nopen({str(out)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    prog = tmp_path / "parent.py"
    prog.write_text(
        "import subprocess, sys, time\n"
        "from fipstop.children import dying_with_parent\n"
        f"subprocess.Popen(dying_with_parent([sys.executable, {str(child_prog)!r}]), start_new_session=True)\n"
        "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, str(prog)])
    end = time.monotonic() + 20
    while time.monotonic() < end and not (out.exists() and out.read_text()):
        time.sleep(0.05)
    child = int(out.read_text())
    p.send_signal(signal.SIGKILL)
    p.wait()
    while time.monotonic() < end and os.path.exists(f"/proc/{child}"):
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}"), "the child outlived its parent"


def _alive(pid: int) -> bool:
    """Running (a zombie, reaped by nobody yet, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, s: float) -> bool:
    end = time.monotonic() + s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _parent(tmp_path: Path, body: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A Python parent running BODY, which prints the pids of the children it started."""
    prog = tmp_path / "parent.py"
    prog.write_text("import sys, threading, time\nfrom fipstop.children import popen\n" + body +
                    "\nprint('ready', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, str(prog)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    pids = []
    for line in p.stdout:
        if line.strip() == "ready":
            break
        pids.append(int(line))
    return p, pids


def test_popen_children_die_with_a_killed_parent_from_any_thread(tmp_path: Path) -> None:
    """children.popen from the main thread and from a worker thread that has ended (PR_SET_PDEATHSIG
    follows the thread that forked: the child must outlive that thread, not the process); then
    kill -9 of the parent takes both down."""
    p, pids = _parent(tmp_path,
                      "print(popen(['sleep', '60']).pid, flush=True)\n"
                      # the worker outlives the launcher's prctl, then ends (as a probe's worker does)
                      "t = threading.Thread(target=lambda: (print(popen(['sleep', '60']).pid, flush=True),\n"
                      "                                     time.sleep(1.5)))\n"
                      "t.start(); t.join()\n"
                      "time.sleep(1.0)\n")
    try:
        assert len(pids) == 2
        assert all(_alive(c) for c in pids), "a child died with the worker thread that started it"
        p.kill()
        p.wait()
        assert all(_gone_within(c, 10) for c in pids), [c for c in pids if _alive(c)]
    finally:
        for c in pids:
            if _alive(c):
                os.kill(c, signal.SIGKILL)


def test_pyspy_recorder_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """The py-spy recorder (fipstop.probes.pyspy, started from a probe's worker thread in the
    dashboard and in `fipstop profile`) does not outlive its parent's kill -9."""
    from fipstop.probes.pyspy import find_pyspy

    if find_pyspy() is None:
        import pytest

        pytest.skip("py-spy is not installed")
    p, pids = _parent(tmp_path,
                      "import os\nfrom fipstop.probes.pyspy import PySpyProfiler\n"
                      # a target of its own (py-spy would stop with a target that dies with us)
                      "import subprocess\n"
                      "target = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
                      "                          start_new_session=True)\n"
                      "prof = PySpyProfiler(target.pid)\n"
                      "t = threading.Thread(target=prof.start); t.start(); t.join()\n"
                      "time.sleep(0.5)\n"
                      "print(target.pid, flush=True)\n"
                      "print(*(r.proc.pid for r in prof._recorders.values()), sep='\\n', flush=True)\n")
    try:
        assert len(pids) >= 2, pids  # the target and at least one py-spy record
        assert all(_alive(c) for c in pids)
        p.kill()
        p.wait()
        spies = pids[1:]
        assert all(_gone_within(c, 10) for c in spies), [c for c in spies if _alive(c)]
    finally:
        for c in pids:
            if _alive(c):
                os.kill(c, signal.SIGKILL)
