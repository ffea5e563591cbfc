"""Playing a recording back: the source behind ``fipstop replay FILE`` and export.

:class:`ReplaySource` is a source like the live one - the views cannot tell
them apart - and also :class:`fipstop.sources.protocol.Seekable`.  It
re-derives every frame from the recorded raw samples with its own
:class:`fipstop.model.snapshot.ModelStep` (so the numbers, the bans
included, are the live ones), paces at the recorded interval divided by
``speed``, seeks by time (O(log n) in the file, then at most one key-frame
interval of decoding; the ban fold starts anew there), and, when the file is
still being written, follows its end: ``poll`` then returns None with
``following`` set, and the app polls again one interval later instead of
stopping.  :func:`replay_frames` derives a stretch of a recording the same
way, for export.

Taps (the newest records of a ring) are not recorded: ``tap`` says so.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Iterator

from fipstop.errors import FipsError
from fipstop.model.rings import STALE_AFTER_NS
from fipstop.model.snapshot import Frame, ModelStep
from fipstop.probes.ring import TapResult
from fipstop.recording.store import RecordedFrame, RecordingReader
from fipstop.sources.protocol import Timeline

__all__ = ["SPEEDS", "ReplaySource", "parse_time", "replay_frames"]

#: speeds the replay steps through with < and >
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


class ReplaySource:
    """Implements :class:`fipstop.sources.protocol.Source` and ``Seekable`` on a recording."""

    #: a recording holds counters, not processes to profile
    profiling = None

    def __init__(self, path: str, *, speed: float = 1.0, follow: bool = True,
                 stale_after_ns: int = STALE_AFTER_NS) -> None:
        self.reader = RecordingReader(path)
        if not self.reader.count:
            self.reader.close()
            raise FipsError(f"{path}: the recording has no frames yet")
        try:
            self.reader.read(self.reader.first_seq)  # a first frame that does not decode is said now, not
        except FipsError:  # by a dashboard waiting for a frame that never comes
            self.reader.close()
            raise
        self.path = path
        self.speed = 1.0
        self.set_speed(speed)
        self.follow = follow
        self.following = False
        self._step = ModelStep(self.reader.interval_s, stale_after_ns=stale_after_ns)
        #: held around every use of the reader: the app polls from a worker thread while it unmounts and closes on
        #: the main thread, and sqlite3 with check_same_thread=False does not survive a close during a query
        #: (a segfault in CI); after close, poll and seek find nothing and timeline stops refreshing
        self._lock = threading.Lock()
        self._closed = False
        self._next: int | None = self.reader.first_seq
        self._prev: RecordedFrame | None = None
        self.at_t_ns = self.reader.first_t_ns
        self._marks: tuple[tuple[int, int], ...] = tuple(self.reader.marks())
        self._marks_upto = self.reader.last_seq
        self._extent = (self.reader.first_t_ns, self.reader.last_t_ns)

    # -- Source ---------------------------------------------------------------------

    @property
    def interval_s(self) -> float:
        return self.reader.interval_s / self.speed

    @property
    def recorded_interval_s(self) -> float:
        return self.reader.interval_s

    def set_speed(self, speed: float) -> None:
        if not (math.isfinite(speed) and 0.25 <= speed <= 16):
            raise FipsError(f"--speed {speed:g}: give a speed between 0.25 and 16")
        self.speed = float(speed)

    def faster(self, steps: int = 1) -> float:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        self.speed = SPEEDS[min(max(i + steps, 0), len(SPEEDS) - 1)]
        return self.speed

    def poll(self) -> Frame | None:
        with self._lock:
            if self._closed:
                return None
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
            frame = self._step(rec.raw)
            self._prev = rec
            self.at_t_ns = rec.t_ns
            self._next = self.reader.next_seq(rec.seq)
            return frame

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        return TapResult(domain, ring, error="a recording holds counters, not the records themselves")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.reader.close()

    # -- replay controls (the app calls these from a worker) ---------------------------

    def seek(self, t_ns: int, *, history: int = 120) -> list[Frame]:
        """Moves to the last frame at or before ``t_ns`` (the first frame if
        earlier) and returns up to ``history`` frames ending there, for the
        charts; ``poll`` goes on after the last of them."""
        with self._lock:
            if self._closed:
                return []
            self.reader.refresh()
            target = self.reader.seq_at(int(t_ns))
            if target is None:
                return []
            start = self.reader.seq_back(target, max(history, 1))  # history frames + one before them for rates
            frames: list[Frame] = []
            prev: RecordedFrame | None = None
            self._step.reset()  # the ban fold starts at the new position
            for rec in self.reader.iter_frames(start, target):
                frame = self._step(rec.raw)
                if prev is not None or start == self.reader.first_seq:
                    frames.append(frame)
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
            if not self._closed:
                self.reader.refresh()
            if not self._closed:
                if self.reader.last_seq > self._marks_upto:
                    self._marks = tuple(self.reader.marks())
                    self._marks_upto = self.reader.last_seq
                self._extent = (self.reader.first_t_ns, self.reader.last_t_ns)  # queries: not after close
            return Timeline(self._extent[0], self._extent[1], self.at_t_ns, self._marks, self.speed, self.following)

    def parse_time(self, text: str) -> int:
        return parse_time(text, self.reader.first_t_ns)


def parse_time(text: str, first_t_ns: int) -> int:
    """TIME as the recording understands it -> realtime ns."""
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


def replay_frames(reader: RecordingReader, start: int | None = None, *,
                  stale_after_ns: int = STALE_AFTER_NS) -> Iterator[tuple[RecordedFrame, Frame]]:
    """The frames of ``reader`` from ``start`` (a seq; None: the first) to the
    end, each derived as the replay derives it (the frame before ``start`` is
    read too, as the baseline of the first one's rates)."""
    step = ModelStep(reader.interval_s, stale_after_ns=stale_after_ns)
    first = reader.first_seq if start is None else start
    before = reader.prev_seq(first)
    if before is not None:
        step(reader.read(before).raw)
    for rec in reader.iter_frames(first):
        yield rec, step(rec.raw)
