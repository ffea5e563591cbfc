"""A CPU-bound Python consumer profiled with py-spy: it names the hot function."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fipstop.probes.pyspy import PySpyProfiler, find_pyspy

pytestmark = pytest.mark.integration

PROG = Path(__file__).resolve().parents[1] / "progs" / "hot_consumer.py"


@pytest.fixture
def consumer():
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed")
    p = subprocess.Popen([sys.executable, str(PROG), "30"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    ok, why = PySpyProfiler(p.pid).available()
    if not ok:
        p.kill()
        p.wait()
        pytest.skip(f"py-spy cannot attach here: {why}")
    yield p
    p.kill()
    p.wait()


def test_pyspy_names_the_hot_function_and_the_idle_thread(consumer) -> None:
    from fipstop.profile.session import ProfileOptions, profile_once

    r = profile_once(consumer.pid, 2.0, ProfileOptions(bpf=False))
    s = r.profile("py-spy")
    assert s is not None and s.available, s.reason if s else "no py-spy sample"
    hot = [row for row in r.hot_functions("oncpu") if row[0] == "py-spy"]
    assert hot and hot[0][1].startswith("crunch_records "), hot
    assert hot[0][3] > 50.0
    # the reader thread is idle: its stack is an idle (off-CPU) stack, not an on-CPU one
    assert any(st.thread == "idle-reader" for st in s.offcpu)
    assert not any(st.thread == "idle-reader" for st in s.oncpu)
    assert s.extra["gil_pct"] > 30.0
    # the thread split agrees: the main thread is busy (on CPU or waiting for one)
    main = next(t for t in r.threads.threads if t.tid == consumer.pid)
    assert main.oncpu_pct + main.runqueue_pct > 50.0
    lines = r.folded("oncpu")
    assert any("crunch_records" in ln for ln in lines)


def test_cli_text_and_folded(consumer, tmp_path: Path) -> None:
    folded = tmp_path / "py.folded"
    out = subprocess.run([sys.executable, "-m", "fipstop", "profile", "--pid", str(consumer.pid), "--duration",
                          "1.5", "--no-bpf", "--rate", "50", "--folded", str(folded)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "HOT ON-CPU FUNCTIONS" in out.stdout
    hot_line = out.stdout.split("HOT ON-CPU FUNCTIONS", 1)[1].splitlines()[1]
    assert "crunch_records" in hot_line
    assert "rate_hz 50" in out.stdout
    text = folded.read_text()
    assert "crunch_records" in text and all(ln.rsplit(" ", 1)[1].isdigit() for ln in text.splitlines())
