"""The headless recorder behind ``fipstop record``: sample, append, repeat.

It samples the same probe set as the live monitor every ``interval_s`` and
appends raw frames (with their timeline marks) until ``duration_s`` passes or
``stop`` is set - by a signal handler, so the flag is a
:class:`fipstop.sigflag.SignalFlag`.  A slow probe never makes it burst to
catch up.  A full disk (or any write error) ends the recording with the
error kept in the result: every frame written before it replays, because
each frame is one committed transaction.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from fipstop.config import ProbeConfig
from fipstop.errors import FipsError
from fipstop.recording.marks import Marker
from fipstop.recording.store import RecordingWriter
from fipstop.ring import TRUNCATED, others_may_write
from fipstop.sigflag import SignalFlag
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes

__all__ = ["RecordConfig", "RecordResult", "record"]


@dataclass(frozen=True)
class RecordConfig:
    output: str
    interval_s: float = 1.0
    duration_s: float | None = None  # None: until stopped
    probes: ProbeConfig = ProbeConfig()


@dataclass(frozen=True)
class RecordResult:
    frames: int
    bytes: int
    error: FipsError | None = None  # why it stopped early (a full disk ...)


def record(config: RecordConfig, stop: SignalFlag, started: Callable[[], None] | None = None,
           notice: Callable[[str], None] | None = None) -> RecordResult:
    """Record until the duration passes or ``stop`` is set.  ``started`` is
    called once the file and the probes are open, before the first frame: a
    file that cannot be written to fails before anything says it is recording.
    ``notice`` is told, once each, the domains that shrank under the probe's
    mapping (the frames record them as unreadable and recording goes on) and
    the world-writable ones."""
    source = LiveSource(build_probes(config.probes), config.interval_s)
    try:
        writer = RecordingWriter(config.output, interval_s=config.interval_s, host=socket.gethostname())
    except BaseException:
        source.close()
        raise
    if started is not None:
        started()
    marker = Marker()
    t0 = time.monotonic()
    deadline = t0 + config.duration_s if config.duration_s else math.inf
    next_t = t0
    err = None
    said: set[str] = set()
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            frame = source.poll()
            if notice is not None:
                for e in frame.raw.ring.errors:
                    if e.reason.startswith(TRUNCATED) and e.reason not in said:
                        said.add(e.reason)
                        notice(e.reason)
                for d in frame.raw.ring.domains:
                    if d.path not in said:
                        said.add(d.path)
                        if (warning := others_may_write(d.path)) is not None:
                            notice(warning)
            try:
                writer.append(frame.raw, marker(frame))
            except FipsError as e:
                err = e
                break
            next_t += config.interval_s
            now = time.monotonic()
            if next_t < now:  # we fell behind (slow probe): don't burst to catch up
                next_t = now
            stop.wait(max(0.0, min(next_t, deadline) - now))
    finally:
        n, b = writer.frames_written, writer.bytes_written
        writer.close()
        source.close()
    return RecordResult(n, b, err)
