"""Recording what a source delivers while it is shown: ``fipstop --record FILE``.

:class:`RecordingTee` is a source around another: every frame it passes on
is appended to a recording first (in the poll worker, never in the UI
thread).  A write error stops the recording, not the dashboard: the next
poll reports it once, and ``error`` keeps it.
"""

from __future__ import annotations

import socket
import threading

from fipstop.errors import FipsError
from fipstop.model.snapshot import Frame
from fipstop.probes.ring import TapResult
from fipstop.recording.marks import Marker
from fipstop.recording.store import RecordingWriter
from fipstop.sources.protocol import Profiling, Source

__all__ = ["RecordingTee"]


class RecordingTee:
    """Implements :class:`fipstop.sources.protocol.Source`: ``inner``'s frames, recorded to ``path``."""

    def __init__(self, inner: Source, path: str) -> None:
        self.inner = inner
        self.writer: RecordingWriter | None = RecordingWriter(path, interval_s=inner.interval_s,
                                                              host=socket.gethostname())
        self.error = ""
        self.marker = Marker()
        #: around every use of the writer: poll runs in the app's worker thread while close comes from the main
        #: thread at unmount (sqlite3 with check_same_thread=False does not survive a close during a write)
        self._lock = threading.Lock()

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    @property
    def profiling(self) -> Profiling | None:
        return self.inner.profiling

    def poll(self) -> Frame | None:
        frame = self.inner.poll()
        with self._lock:
            if frame is not None and self.writer is not None:
                try:
                    self.writer.append(frame.raw, self.marker(frame))
                except FipsError as e:
                    self.error = e.message
                    self.writer.close()
                    self.writer = None
                    raise FipsError(f"recording stopped: {e.message}") from None
        return frame

    def tap(self, domain: str, ring: int, max_records: int = 32) -> TapResult:
        return self.inner.tap(domain, ring, max_records)

    def close(self) -> None:
        with self._lock:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
        self.inner.close()
