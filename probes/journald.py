"""systemd-journald, when it runs: its sockets' queues and how fast it stores.

journald receives on three unix sockets (native protocol, the syslog
``dev-log`` socket that ``/dev/log`` links to, and stream connections from
services' stdout); their queues come from :mod:`fipstop.probes.unixsock`.
What it stores is the growth of its journal files (persistent under
/var/log/journal, volatile under /run/log/journal): the sum of their sizes,
whose difference between samples is the store rate (journal files grow in
preallocated steps, so the rate is coarse over short intervals).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from fipstop.probes.unixsock import UnixSocketProbe, UnixSocketSample, pids

SOCKETS = ("/run/systemd/journal/socket", "/run/systemd/journal/dev-log", "/run/systemd/journal/stdout")
JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")
MAX_FILES = 10_000


@dataclass(frozen=True, slots=True)
class JournaldSample:
    running: bool
    reason: str = ""  # "not running", or what could not be read
    pid: int = 0
    sockets: tuple[UnixSocketSample, ...] = ()
    journal_bytes: int = -1  # sum of the journal files' sizes
    journal_files: int = 0
    taken_mono_ns: int = 0


def find_journald(procfs_root: str) -> int:
    for pid in pids(procfs_root):
        try:
            with open(f"{procfs_root}/{pid}/comm", "rb") as f:
                if f.read(64).rstrip(b"\n") == b"systemd-journal":
                    return pid
        except OSError:
            continue
    return 0


def journal_size(dirs: tuple[str, ...]) -> tuple[int, int]:
    total = n = 0
    for d in dirs:
        for root, _dirs, files in os.walk(d):
            for name in files:
                if not (name.endswith(".journal") or name.endswith(".journal~")):
                    continue
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                n += 1
                if n >= MAX_FILES:
                    return total, n
    return total, n


class JournaldProbe:
    name = "journald"

    def __init__(self, *, procfs_root: str = "/proc", sockets: tuple[str, ...] = SOCKETS,
                 journal_dirs: tuple[str, ...] = JOURNAL_DIRS) -> None:
        self.procfs_root = procfs_root
        self.sockets = sockets
        self.journal_dirs = journal_dirs
        self._pids: frozenset[int] | None = None  # the processes at the last search
        self._pid = 0

    def _find(self, live: frozenset[int] | None = None) -> int:
        """find_journald, searched again only when the set of processes
        (``live``, listed here when not given) changed."""
        if live is None:
            live = frozenset(pids(self.procfs_root))
        if live != self._pids:
            self._pids, self._pid = live, find_journald(self.procfs_root)
        return self._pid

    def available(self) -> tuple[bool, str]:
        pid = find_journald(self.procfs_root)
        return (True, "") if pid else (False, "systemd-journald is not running")

    def sample(self, fd_scan=None, diag=None, live: frozenset[int] | None = None) -> JournaldSample:
        """``fd_scan``/``diag``/``live``: what BackendsProbe already read this poll."""
        now = time.monotonic_ns()
        pid = self._find(live)
        if not pid:
            return JournaldSample(False, "not running", taken_mono_ns=now)
        socks = tuple(UnixSocketProbe(p, procfs_root=self.procfs_root).sample(fd_scan, diag)
                      for p in self.sockets if os.path.exists(p))
        size, n = journal_size(self.journal_dirs)
        return JournaldSample(True, "" if n else "no journal files found", pid, socks, size if n else -1, n, now)
