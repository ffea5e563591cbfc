"""``fipstop record -o FILE``: record what the dashboard shows, headless.

It samples the same probes as the live monitor every ``--interval`` and
appends raw frames to a recording until ``--duration`` passes or it gets
SIGINT / SIGTERM, so it runs as a service as well as by hand
(:mod:`fipstop.recording.recorder`).  ``fipstop --record FILE`` records
while watching.

An existing FILE is refused unless ``--append`` says to add a session to
it; then the line that says it is recording also says which session this is
and how long after the previous one it starts (the replay's timeline shows
the jump in time; a mark of its own is the recording format's business).

A full disk stops the recorder with one line saying how many frames were
kept (they replay); any other write error likewise.  Each frame is one
committed transaction, so ``kill -9`` loses at most the frame in flight.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time

from fipstop.commands.options import add_backend_options, probe_config
from fipstop.errors import FipsError
from fipstop.textsafe import escape_text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "record", help="record rings, consumers and the other probes to a file (headless)",
        description="Sample what the dashboard shows every --interval and append it to FILE (SQLite, crash-safe, "
        "appendable). Stops after --duration or on SIGINT/SIGTERM. Replay with `fipstop replay FILE`, export "
        "with `fipstop export FILE`.")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="recording to create (an existing one only with --append)")
    p.add_argument("--append", action="store_true",
                   help="add a new session to an existing FILE (without it an existing FILE is refused)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: never)")
    p.add_argument("--domain", action="append", metavar="NAME", default=None,
                   help="only this domain (repeatable; default every domain)")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    add_backend_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fipstop.recording.recorder import RecordConfig, record
    from fipstop.sigflag import SignalFlag

    if not (math.isfinite(args.interval) and 0.05 <= args.interval <= 3600):
        raise FipsError(f"--interval {args.interval:g}: give seconds between 0.05 and 3600")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise FipsError(f"--duration {args.duration:g}: give a positive number of seconds")
    appending = _existing(args.output, args.append)
    config = RecordConfig(args.output, args.interval, args.duration, probe_config(args))
    stop = SignalFlag()  # not a threading.Event: set from a signal handler
    old = {s: signal.signal(s, stop.set) for s in (signal.SIGINT, signal.SIGTERM)}

    def started() -> None:
        if not args.quiet:
            print(f"fipstop: recording to {args.output} every {args.interval:g} s"
                  + (f" for {args.duration:g} s" if args.duration else " (Ctrl-C stops)")
                  + (f"; {appending}" if appending else ""), file=sys.stderr)

    def notice(line: str) -> None:
        print(f"fipstop: record: {escape_text(line)} (recording goes on)", file=sys.stderr, flush=True)

    try:
        result = record(config, stop, started, notice)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if not args.quiet:
        n, b = result.frames, result.bytes
        per = b / n if n else 0
        print(f"fipstop: recorded {n} frames, {b} bytes ({per:.0f} bytes/frame) to {args.output}", file=sys.stderr)
    if result.error is not None:
        raise result.error
    return 0


def _existing(path: str, append: bool) -> str:
    """Refuse an existing recording unless ``append``; then say what is
    appended to (the session boundary), "" for a new file."""
    if not os.path.exists(path):
        return ""
    from fipstop.recording.store import RecordingReader

    if not append:
        raise FipsError(f"{escape_text(path)}: exists; give --append to add a session to it, or another -o FILE")
    reader = RecordingReader(path)  # not a recording, or a damaged one: its own one-line error
    try:
        frames, last_ns = reader.count, reader.last_t_ns
    finally:
        reader.close()
    if not frames:
        return "appending to an empty recording"
    gap = max(time.time_ns() - last_ns, 0) / 1e9
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last_ns / 1e9))
    return (f"appending a new session after its {frames} frames (last at {last}, {gap:.0f} s ago): "
            "the replay jumps over the gap")
