"""``fipstop record -o FILE``: record what the dashboard shows, headless.

It samples the same probes as the live monitor (``fipstop.top.live_probes``)
every ``--interval`` and appends raw frames to a recording
(:mod:`fipstop.recording`) until ``--duration`` passes or it gets SIGINT /
SIGTERM, so it runs as a service as well as by hand.  ``fipstop --record FILE``
records while watching, through :class:`RecordingTee`.

A full disk stops the recorder with one line saying how many frames were
kept (they replay); any other write error likewise.  Each frame is one
committed transaction, so ``kill -9`` loses at most the frame in flight.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from typing import Any

from fipstop.errors import FipsError
from fipstop.recording import MARK_BANS, MARK_DROPS, MARK_FINDINGS, RecordingWriter
from fipstop.sources import Frame

__all__ = ["Marker", "RecordingTee", "register", "run"]


class Marker:
    """The timeline marks of each frame: drops, bans, diagnosis findings.

    Findings need a window of frames, so the marker keeps the last few; a
    bans sample is recognised by its new ``events`` (duck typing: this module
    need not know the probes' classes)."""

    def __init__(self, window: int = 10) -> None:
        from collections import deque

        self.window: deque = deque(maxlen=window)

    def __call__(self, frame: Frame) -> int:
        m = 0
        if frame.snapshot.totals.drops_per_s > 0:
            m |= MARK_DROPS
        for name, sample in frame.aux.items():
            if getattr(sample, "events", None) and (name.startswith("bans") or name == "fail2ban"):
                m |= MARK_BANS
        self.window.append((frame.snapshot, frame.aux))
        try:
            from fipstop.diagnose import WARNING, diagnose

            if any(f.severity >= WARNING for f in diagnose(list(self.window))):
                m |= MARK_FINDINGS
        except Exception:  # a mark is decoration: never lose a frame for it
            pass
        return m


class RecordingTee:
    """A Source that records every frame it passes on (in the poll worker,
    never in the UI thread).  A write error stops the recording, not the
    dashboard: it is reported through ``error``."""

    def __init__(self, inner: Any, path: str) -> None:
        import socket

        self.inner = inner
        self.writer = RecordingWriter(path, interval_s=inner.interval_s, host=socket.gethostname())
        self.error = ""
        self.marker = Marker()

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    def poll(self) -> Frame | None:
        frame = self.inner.poll()
        if frame is not None and self.writer is not None:
            try:
                self.writer.append(frame.raw, dict(frame.aux), self.marker(frame))
            except FipsError as e:
                self.error = e.message
                self.writer.close()
                self.writer = None
                raise FipsError(f"recording stopped: {e.message}") from None
        return frame

    def tap(self, domain: str, ring: int, max_records: int = 32):
        return self.inner.tap(domain, ring, max_records)

    def __getattr__(self, name: str) -> Any:  # profile_*, anything else the inner source offers
        return getattr(self.inner, name)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.inner.close()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "record", help="record rings, consumers and the other probes to a file (headless)",
        description="Sample what the dashboard shows every --interval and append it to FILE (SQLite, crash-safe, "
        "appendable). Stops after --duration or on SIGINT/SIGTERM. Replay with `fipstop replay FILE`, export "
        "with `fipstop export FILE`.")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="recording to create or append to")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: never)")
    p.add_argument("--domain", action="append", metavar="NAME", default=None,
                   help="only this domain (repeatable; default every domain)")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import socket

    from fipstop.sources import LiveSource
    from fipstop.top import live_probes

    if not (math.isfinite(args.interval) and 0.05 <= args.interval <= 3600):
        raise FipsError(f"--interval {args.interval:g}: give seconds between 0.05 and 3600")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise FipsError(f"--duration {args.duration:g}: give a positive number of seconds")
    source = LiveSource(live_probes(args), args.interval)
    writer = RecordingWriter(args.output, interval_s=args.interval, host=socket.gethostname())
    from fipstop.sigflag import SignalFlag

    stop = SignalFlag()  # not a threading.Event: set from a signal handler
    marker = Marker()
    old = {s: signal.signal(s, stop.set) for s in (signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    deadline = t0 + args.duration if args.duration else math.inf
    next_t = t0
    err = None
    if not args.quiet:
        print(f"fipstop: recording to {args.output} every {args.interval:g} s"
              + (f" for {args.duration:g} s" if args.duration else " (Ctrl-C stops)"), file=sys.stderr)
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            frame = source.poll()
            try:
                writer.append(frame.raw, dict(frame.aux), marker(frame))
            except FipsError as e:
                err = e
                break
            next_t += args.interval
            now = time.monotonic()
            if next_t < now:  # we fell behind (slow probe): don't burst to catch up
                next_t = now
            stop.wait(max(0.0, min(next_t, deadline) - now))
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        n, b = writer.frames_written, writer.bytes_written
        writer.close()
        source.close()
    if not args.quiet:
        per = b / n if n else 0
        print(f"fipstop: recorded {n} frames, {b} bytes ({per:.0f} bytes/frame) to {args.output}", file=sys.stderr)
    if err is not None:
        raise err
    return 0
