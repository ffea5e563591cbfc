"""The dashboard as ``fipstop bench ui`` runs it: a child process
(``python -m fipstop.bench.ui_app _app ...``) with every probe ``fipstop``
samples, headless or under a pseudo-terminal with textual's real driver, for
``--seconds`` or until SIGTERM; it reports its frames and CPU as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from typing import IO, Any

from fipstop.config import ProbeConfig
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes
from fipstop.views.app import FipsTopApp


def _attach_pty(cols: int, rows: int) -> tuple[IO[str], list[int]]:
    """Make fds 0, 1 and 2 a pseudo-terminal of ``cols`` x ``rows`` whose
    output a thread drains (what a terminal emulator would read), so the app
    runs its real driver and pays for encoding every update; returns a file
    on the original stdout for reports."""
    import fcntl
    import struct
    import termios
    import threading

    report = os.fdopen(os.dup(1), "w", buffering=1)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    for fd in (0, 1, 2):  # textual's driver writes to stderr
        os.dup2(slave, fd)
    os.close(slave)
    drained = [0]

    def drain() -> None:
        while True:
            try:
                b = os.read(master, 1 << 16)
            except OSError:
                return
            if not b:
                return
            drained[0] += len(b)

    threading.Thread(target=drain, daemon=True, name="pty-drain").start()
    return report, drained


def _die_with_parent(sig: int) -> None:
    """prctl(PR_SET_PDEATHSIG): a child the bench started with --until-term
    must not outlive a bench that was killed (best effort, Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _app_child(ns: argparse.Namespace) -> int:
    """Run the real dashboard (child process): headless, or under a pty with
    the real terminal driver (``--pty``); for ``--seconds`` or, with
    ``--until-term``, until SIGTERM (then one JSON line: frames and CPU)."""
    if ns.until_term:
        _die_with_parent(signal.SIGTERM)
    report, drained = (_attach_pty(200, 60) if ns.pty else (sys.stdout, None))

    # the probes `fipstop` itself samples (ring, process CPU, backends, bans)
    probes = ProbeConfig(shm_dir=ns.shm_dir, domains=(ns.domain,) if ns.domain else None)
    app = FipsTopApp(LiveSource(build_probes(probes), ns.interval))
    mark: dict[str, Any] = {}

    def _ready() -> None:
        mark["t"], mark["cpu"], mark["frames"] = time.monotonic(), os.times(), app.frames_received
        print("ready" if ns.until_term else "started", file=report, flush=True)

    def _started() -> None:
        if ns.plain_sigcont:
            # The A/B pauses this process with SIGSTOP/SIGCONT hundreds of
            # times; textual's driver answers each SIGCONT by re-entering
            # application mode and repainting the whole screen (Ctrl+Z
            # support), a cost no attached dashboard has.  Measured: 16.7 %
            # of a core during the A/B with it, against ~4.6 % steady.
            signal.signal(signal.SIGCONT, signal.SIG_DFL)
        if ns.until_term:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, app.exit)
            # ready once the first frame is on screen and the start-up work is done
            app.set_timer(max(ns.interval, 0.5) + 0.5, _ready)
        else:
            _ready()
            app.set_timer(ns.seconds, app.exit)

    app.call_later(_started)
    app.run(headless=not ns.pty, size=None if ns.pty else (200, 60))
    rings = app.snapshot.rings.size if app.snapshot else 0
    if ns.until_term:
        t1, c1 = time.monotonic(), os.times()
        c0 = mark.get("cpu", c1)
        busy = (c1.user - c0.user) + (c1.system - c0.system)
        wall = t1 - mark.get("t", t1)
        print(json.dumps({
            "role": "fipstop-app", "mode": "pty" if ns.pty else "headless",
            "frames": app.frames_received - mark.get("frames", 0), "rings": rings,
            "cpu_s": round(busy, 4), "wall_s": round(wall, 3),
            "cpu_pct_of_one_core": round(100 * busy / wall, 2) if wall > 0 else None,
            "terminal_bytes": drained[0] if drained else None,
        }), file=report, flush=True)
    else:
        print(f"frames {app.frames_received} rings {rings}", file=report, flush=True)
    return 0


def _child_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m fipstop.bench.ui_app")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("_app")
    a.add_argument("--shm-dir", required=True)
    a.add_argument("--interval", type=float, default=1.0)
    a.add_argument("--seconds", type=float, default=20.0)
    a.add_argument("--domain", default=None)
    a.add_argument("--until-term", action="store_true")
    a.add_argument("--pty", action="store_true")
    a.add_argument("--plain-sigcont", action="store_true",
                   help="no repaint on SIGCONT (the producer A/B stops and continues the app)")
    ns = p.parse_args(argv)
    return _app_child(ns)


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
