"""``fipstop replay FILE``: the dashboard driven by a recording.

:class:`ReplaySource` is a :class:`fipstop.sources.Source` like
``LiveSource``: the views cannot tell them apart.  It re-derives every frame
from the recorded raw samples (so the numbers are the live ones), paces at the
recorded interval divided by ``speed``, seeks by time (O(log n) in the file,
then at most one key-frame interval of decoding), and, when the file is still
being written, follows its end: ``poll`` then returns None with ``following``
set, and the app polls again one interval later instead of stopping.

Taps (the newest records of a ring) are not recorded: ``tap`` says so.
"""

from __future__ import annotations

import argparse
import math
import threading
from dataclasses import dataclass

from fipstop.errors import FipsError
from fipstop.model import STALE_AFTER_NS, derive
from fipstop.probes.ring import TapResult
from fipstop.recording import RecordedFrame, RecordingReader
from fipstop.sources import Frame

__all__ = ["SPEEDS", "ReplaySource", "Timeline", "register", "run"]

#: speeds the replay steps through with < and >
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the timeline bar draws: the extent, where we are, and the marks."""

    first_t_ns: int
    last_t_ns: int
    at_t_ns: int
    marks: tuple[tuple[int, int], ...]  # (t_ns, MARK_* bits)
    speed: float
    following: bool


class ReplaySource:
    def __init__(self, path: str, *, speed: float = 1.0, follow: bool = True,
                 stale_after_ns: int = STALE_AFTER_NS) -> None:
        self.reader = RecordingReader(path)
        if not self.reader.count:
            raise FipsError(f"{path}: the recording has no frames yet")
        self.path = path
        self.set_speed(speed)
        self.follow = follow
        self.following = False
        self.stale_after_ns = stale_after_ns
        self._lock = threading.Lock()
        self._next: int | None = self.reader.first_seq
        self._prev: RecordedFrame | None = None
        self.at_t_ns = self.reader.first_t_ns
        self._marks: tuple[tuple[int, int], ...] = tuple(self.reader.marks())
        self._marks_upto = self.reader.last_seq

    # -- Source ---------------------------------------------------------------------

    @property
    def interval_s(self) -> float:
        return self.reader.interval_s / self.speed

    def set_speed(self, speed: float) -> None:
        if not (math.isfinite(speed) and 0.25 <= speed <= 16):
            raise FipsError(f"--speed {speed:g}: give a speed between 0.25 and 16")
        self.speed = float(speed)

    def faster(self, steps: int = 1) -> float:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        self.speed = SPEEDS[min(max(i + steps, 0), len(SPEEDS) - 1)]
        return self.speed

    def _frame(self, rec: RecordedFrame, prev: RecordedFrame | None) -> Frame:
        snap = derive(prev.raw if prev else None, rec.raw, self.reader.interval_s,
                      stale_after_ns=self.stale_after_ns)
        return Frame(rec.raw, snap, rec.aux)

    def poll(self) -> Frame | None:
        with self._lock:
            if self._next is None:
                if self.follow:
                    self.reader.refresh()
                    if self._prev is not None:
                        self._next = self.reader.next_seq(self._prev.seq)
                if self._next is None:
                    self.following = self.follow
                    return None
            self.following = False
            rec = self.reader.read(self._next)
            frame = self._frame(rec, self._prev)
            self._prev = rec
            self.at_t_ns = rec.t_ns
            self._next = self.reader.next_seq(rec.seq)
            return frame

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        return TapResult(domain, ring, error="a recording holds counters, not the records themselves")

    def close(self) -> None:
        self.reader.close()

    # -- replay controls (the app calls these from a worker) ---------------------------

    def seek(self, t_ns: int, *, history: int = 120) -> list[Frame]:
        """Moves to the last frame at or before ``t_ns`` (the first frame if
        earlier) and returns up to ``history`` frames ending there, for the
        charts; ``poll`` goes on after the last of them."""
        with self._lock:
            self.reader.refresh()
            target = self.reader.seq_at(int(t_ns))
            if target is None:
                return []
            start = self.reader.seq_back(target, max(history, 1))  # history frames + one before them for rates
            frames: list[Frame] = []
            prev: RecordedFrame | None = None
            for rec in self.reader.iter_frames(start, target):
                if prev is not None or start == self.reader.first_seq:
                    frames.append(self._frame(rec, prev))
                prev = rec
            self._prev = prev
            self.at_t_ns = prev.t_ns if prev else self.at_t_ns
            self._next = self.reader.next_seq(target)
            self.following = False
            return frames[-history:]

    def seek_relative(self, delta_s: float, *, history: int = 120) -> list[Frame]:
        return self.seek(self.at_t_ns + int(delta_s * 1e9), history=history)

    def timeline(self) -> Timeline:
        with self._lock:
            self.reader.refresh()
            if self.reader.last_seq > self._marks_upto:
                self._marks = tuple(self.reader.marks())
                self._marks_upto = self.reader.last_seq
            return Timeline(self.reader.first_t_ns, self.reader.last_t_ns, self.at_t_ns, self._marks,
                            self.speed, self.following)


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="play a recording back in the dashboard",
        description="Replay a recording made by `fipstop record` (or `fipstop --record`) in the same dashboard: "
        "space pause, t/T step, [ and ] seek -/+10 s, { and } jump to the previous/next mark (drops, bans, "
        "findings), < and > speed 0.25x-16x, : jump to a time. A file still being written is followed.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--speed", type=float, default=1.0, metavar="X", help="playback speed, 0.25 to 16 (default 1)")
    p.add_argument("--start", metavar="TIME", help="start at TIME (ISO 8601, HH:MM:SS of the recording's day, "
                   "or +S seconds from its start)")
    p.add_argument("--no-follow", action="store_true", help="stop at the end even if the file grows")
    p.set_defaults(func=run)


def parse_time(text: str, first_t_ns: int) -> int:
    """TIME as the recording understands it -> realtime ns."""
    import datetime as dt

    s = text.strip()
    try:
        if s.startswith("+"):
            return first_t_ns + int(float(s[1:]) * 1e9)
        if len(s) <= 8 and s.count(":") in (1, 2):
            day = dt.datetime.fromtimestamp(first_t_ns / 1e9).astimezone()
            parts = [int(x) for x in s.split(":")] + [0]
            t = day.replace(hour=parts[0], minute=parts[1], second=parts[2], microsecond=0)
            return int(t.timestamp() * 1e9)
        t = dt.datetime.fromisoformat(s)
        if t.tzinfo is None:
            t = t.astimezone()
        return int(t.timestamp() * 1e9)
    except (ValueError, OverflowError):
        raise FipsError(f"time {s[:40]!r}: give ISO 8601 (2026-11-30T03:12:00), HH:MM[:SS], or +SECONDS") from None


def run(args: argparse.Namespace) -> int:
    from fipstop.top import have_terminal

    source = ReplaySource(args.file, speed=args.speed, follow=not args.no_follow)
    if not have_terminal():
        source.close()
        raise FipsError("replay needs a terminal; `fipstop export FILE --format jsonl` prints a recording")
    from fipstop.views.app import FipsTopApp

    app = FipsTopApp(source)
    if args.start:
        t = parse_time(args.start, source.reader.first_t_ns)
        app.initial_frames = source.seek(t)
    app.run()
    source.close()
    return int(app.return_code or 0)
