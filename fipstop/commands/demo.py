"""``fipstop demo``: the whole pipeline on one machine, with the dashboard or headless.

The pipeline is :mod:`fipstop.demo`: a C producer under attack, ``fipstop
ips`` banning, a drained bans domain.  With a terminal the dashboard shows
it (5: the Bans panel); ``--headless`` (or no terminal: ``make demo`` in CI)
runs for ``--duration`` seconds and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable

from fipstop.commands.options import have_terminal
from fipstop.errors import FipsError

#: headless duration when there is no terminal and none was given
NO_TTY_DURATION_S = 10.0
DEFAULT_DOMAIN = "demo"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the whole pipeline: a C producer under attack, `fipstop ips` banning, the dashboard",
        description="Create a domain, start a multi-threaded DNS-server-like producer (C, libfips) logging "
        "BIND query lines with an attack from many addresses, start `fipstop ips` with the named-refused "
        "jail, and open the dashboard (5: the Bans panel).  Everything it starts and creates is removed "
        "on exit.  Without a terminal it runs --headless for "
        f"{NO_TTY_DURATION_S:g} s.",
    )
    p.add_argument("--attackers", type=_int_range(1, 65536), default=4096, metavar="N",
                   help="attacking client addresses, up to 65536 (default %(default)s)")
    p.add_argument("--attack-rate", type=_float_range(0, 1e8), default=20000.0, metavar="R",
                   help="attack lines/s at the end of the ramp (default %(default)g)")
    p.add_argument("--legit-rate", type=_float_range(0, 1e8), default=2000.0, metavar="R",
                   help="legitimate query lines/s (default %(default)g)")
    p.add_argument("--ramp", type=_float_range(0, 3600), default=5.0, metavar="S",
                   help="seconds for the attack to ramp from 0 to --attack-rate (default %(default)g)")
    p.add_argument("--attack-start", type=_float_range(0, 3600), default=1.0, metavar="S",
                   help="seconds of legitimate traffic before the attack (default %(default)g)")
    p.add_argument("--threads", type=_int_range(1, 64), default=4, metavar="N",
                   help="producer threads, one ring each (default %(default)s)")
    p.add_argument("--slow-consumer", type=_float_range(0, 60000), default=0.0, metavar="MS",
                   help="add a consumer that sleeps MS ms per batch of 64: the rings fill and drop")
    p.add_argument("--ring-size", type=_int_range(1 << 16, 1 << 30), default=4 << 20, metavar="BYTES",
                   help="ring capacity per producer thread (power of two, default 4 MiB)")
    p.add_argument("--maxretry", type=_int_range(1, 10**6), default=5, metavar="N",
                   help="refused queries that ban an address (default %(default)s)")
    p.add_argument("--action", choices=("dry-run", "nft"), default="dry-run",
                   help="the IPS's ban action (default dry-run)")
    p.add_argument("--domain", default=DEFAULT_DOMAIN, metavar="NAME",
                   help="domain to create (default %(default)s; NAME-bans holds the ban events)")
    p.add_argument("--headless", action="store_true", help="no dashboard: run --duration seconds, print a summary")
    p.add_argument("--duration", type=_float_range(0.5, 86400), default=None, metavar="S",
                   help="stop after S seconds (headless default 20; dashboard: until q)")
    p.add_argument("--interval", type=_float_range(0.05, 3600), default=None, metavar="S",
                   help="dashboard sampling interval (default 1)")
    p.add_argument("--json", action="store_true", help="headless: print the summary as JSON")
    p.set_defaults(func=run)


def _int_range(lo: int, hi: int) -> Callable[[str], int]:
    def conv(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is not in {lo}..{hi}")
        return v
    return conv


def _float_range(lo: float, hi: float) -> Callable[[str], float]:
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text} is not in {lo:g}..{hi:g}")
        return v
    return conv


def run(args: argparse.Namespace) -> int:
    from fipstop.demo import Demo, DemoConfig, format_summary
    from fipstop.sources.live import LiveSource
    from fipstop.views.app import FipsTopApp

    headless = bool(args.headless)
    duration = args.duration
    if not headless and (not have_terminal() or os.environ.get("TERM") == "dumb"):
        print(f"fipstop demo: no terminal: running headless for {duration or NO_TTY_DURATION_S:g} s "
              "(open a terminal for the dashboard)", file=sys.stderr)
        headless = True
        duration = duration or NO_TTY_DURATION_S
    if headless and duration is None:
        duration = 20.0
    demo = Demo(DemoConfig(args.attackers, args.attack_rate, args.legit_rate, args.ramp, args.attack_start,
                           args.threads, args.slow_consumer, args.ring_size, args.maxretry, args.action,
                           args.domain, args.shm_dir))
    running: list[FipsTopApp] = []

    def on_signal(signum: int, _frame: object) -> None:
        # The terminal closed (SIGHUP): nothing can be shown any more; stop the children, remove what
        # the demo created and go.  SIGTERM: the same, then leave the dashboard (or stop the headless
        # run, which still prints its summary).  SIGKILL: the children get SIGTERM from the kernel
        # (PR_SET_PDEATHSIG) and the demo's janitor removes the domains (fipstop.children).
        if signum == signal.SIGHUP:
            demo.cleanup()
            os._exit(128 + signum)
        if running:
            demo.cleanup()
            running[0].exit(return_code=128 + signum)
            return
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        demo.start(duration if headless else None)
        if not headless:
            app = FipsTopApp(LiveSource(demo.probes(), args.interval or 1.0))
            running.append(app)
            app.run()
            return int(app.return_code or 0)
        t0 = time.monotonic()
        try:
            end = t0 + float(duration)
            slow_noted = False
            while time.monotonic() < end:
                if demo.procs["producer"].poll() is not None:
                    break
                p = demo.procs.get("ips")
                if p is not None and p.poll() is not None:
                    raise FipsError(f"`fipstop ips` exited ({_how(p.returncode)}): {demo.stderr_tail('ips')}")
                p = demo.procs.get("slow")
                if p is not None and p.poll() is not None and not slow_noted:
                    # what a deployment sees when its archiver dies: the demo goes on and shows it
                    print(f"fipstop demo: the slow consumer exited ({_how(p.returncode)}); libfips evicts it once "
                          "it holds a full ring past the domain's grace period, and the rings drain again",
                          file=sys.stderr, flush=True)
                    slow_noted = True
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        demo.stop_producer()
        demo.wait_ips_caught_up()
        s = demo.summary(time.monotonic() - t0)
        print(json.dumps(s, indent=2) if args.json else format_summary(s))
        return 0
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        demo.cleanup()


def _how(returncode: int | None) -> str:
    """'exit status 3' or 'killed by SIGKILL', never a bare -9."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
