"""SignalFlag: what a signal handler may set (threading.Event.set may deadlock there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from fipstop.sigflag import SignalFlag


def test_flag_set_wait_timeout() -> None:
    f = SignalFlag()
    t0 = time.monotonic()
    assert f.wait(0.05) is False and time.monotonic() - t0 >= 0.05
    f.set()
    assert f.is_set() and f.wait(10) is True


def test_sigterm_during_tight_waits_always_stops() -> None:
    """A process whose main loop waits 1 ms at a time (as the IPS's did with an
    Event) gets SIGTERM many times over: it must stop every time."""
    prog = (
        "import signal, sys\n"
        "from fipstop.sigflag import SignalFlag\n"
        "f = SignalFlag()\n"
        "signal.signal(signal.SIGTERM, f.set)\n"
        "print('ready', flush=True)\n"
        "while not f.wait(0.001, step=0.001):\n"
        "    pass\n"
    )
    for _ in range(20):
        p = subprocess.Popen([sys.executable, "-c", prog], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=10) == 0
        p.stdout.close()
