"""Profiling the live host's processes: one :class:`ProfileSession` per pid.

The live source offers this as its ``profiling`` capability (the Profile
screen starts, polls and stops it from a worker thread).  Sessions have a
lock of their own, so a profile poll never waits for a ring poll.

bcc compiles the eBPF program in seconds (43 s on a loaded host), so a
stopped session's bpf profiler is parked (detached, still compiled) and the
next profile with the same options reuses it, of any pid (the target is a
map entry, not compiled in): one compile while the user goes back and forth.  A parked program holds
LLVM's memory (measured: 81 MB baseline, 175 MB compiled, 113 MB after
close and malloc_trim), so only the newest is kept, and only for
``park_s`` seconds (default 120): then it is closed and the memory goes
back.
"""

from __future__ import annotations

import threading
from typing import Any

from fipstop.profile.session import ProfileOptions, ProfileReport, ProfileSession

__all__ = ["ProfileSessions"]


class ProfileSessions:
    """Implements :class:`fipstop.sources.protocol.Profiling` for this host."""

    def __init__(self, procfs_root: str = "/proc", *, park_s: float = 120.0) -> None:
        self.procfs_root = procfs_root
        self.park_s = float(park_s)
        self._expiry: threading.Timer | None = None
        self._sessions: dict[int, ProfileSession] = {}
        self._starting: dict[int, ProfileSession] = {}
        #: (options, a parked bpf profiler): at most one
        self._parked: tuple[ProfileOptions, Any] | None = None
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()  # one start at a time: a second one reuses the first's compile

    def profile_start(self, pid: int, options: ProfileOptions | None = None) -> None:
        """Start profiling ``pid`` (None: the default options); may take
        seconds (bcc compiles) unless a parked program (of any pid) is reused."""
        pid = int(pid)
        options = options or ProfileOptions()
        with self._start_lock:
            self.profile_stop(pid)
            reuse = None
            with self._lock:
                if self._parked is not None and self._parked[0] == options:
                    reuse, self._parked = self._parked[1], None
            session = ProfileSession(pid, options, procfs_root=self.procfs_root, bpf=reuse)
            with self._lock:
                self._starting[pid] = session
            try:
                session.start()
            finally:
                with self._lock:
                    self._starting.pop(pid, None)
            with self._lock:
                self._sessions[pid] = session

    def profile_phase(self, pid: int) -> str:
        """What a start in progress is doing ("compiling the eBPF program"), else ""."""
        with self._lock:
            session = self._starting.get(int(pid))
        return session.phase if session is not None else ""

    def profile_poll(self, pid: int) -> ProfileReport | None:
        with self._lock:
            session = self._sessions.get(int(pid))
        return session.poll() if session is not None else None

    def profile_stop(self, pid: int) -> None:
        with self._lock:
            session = self._sessions.pop(int(pid), None)
        if session is None:
            return
        parked = session.close(park=True)
        if parked is None:
            return
        entry = (session.options, parked)
        with self._lock:
            old, self._parked = self._parked, entry
            if self._expiry is not None:
                self._expiry.cancel()
            self._expiry = threading.Timer(self.park_s, self._expire, args=(entry,))
            self._expiry.daemon = True
            self._expiry.start()
        if old is not None:
            _close(old[1])

    def _expire(self, entry: tuple[ProfileOptions, Any]) -> None:
        with self._lock:
            if self._parked is not entry:
                return  # reused or replaced meanwhile
            self._parked = None
        _close(entry[1])

    def close(self) -> None:
        for pid in list(self._sessions):
            self.profile_stop(pid)
        with self._lock:
            old, self._parked = self._parked, None
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None
        if old is not None:
            _close(old[1])


def _close(profiler: Any) -> None:
    try:
        profiler.close()
    except Exception:
        pass
