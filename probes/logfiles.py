"""Log files: how fast a file grows and how far behind each reader is.

Consumer lag for any tailer (fail2ban, crowdsec, promtail) without its help:
a process that has the file open for reading (``/proc/*/fd`` links, the
access mode from ``flags:`` in ``/proc/PID/fdinfo/FD``) stands at the
``pos:`` of that fdinfo; its lag is the size of the file it has open minus
that position (the open file, via ``stat`` of the fd link, so a reader still
on a rotated-away or deleted file is measured against *that* file).

Growth is counted incrementally: bytes from the last offset to the new size,
and newlines in that span, read at most ``max_read_bytes`` per sample (the
rest of the lines are extrapolated, and ``lines_estimated`` says so).  An
inode change is a rotation, a size below the last offset a truncation: both
restart the offset at 0, and the cumulative counters keep going up so rates
stay valid.  A reader that closes the file between polls (fail2ban's polling
backend does, after reaching the end) is remembered for ``remember_s`` with
its last position and shown as not open now.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

O_ACCMODE, O_WRONLY = 0o3, 0o1
MAX_READ_BYTES = 4 << 20
REMEMBER_S = 30.0


@dataclass(frozen=True, slots=True)
class FileReader:
    pid: int
    fd: int
    comm: str  # raw process name: escape before showing
    pos_bytes: int
    lag_bytes: int  # size of the file it has open - pos (>= 0)
    same_file: bool  # it has the current file open (False: a rotated-away or deleted one)
    open_now: bool = True  # False: closed since, last position remembered


@dataclass(frozen=True, slots=True)
class LogFileSample:
    path: str
    ok: bool
    reason: str = ""
    inode: int = 0
    size_bytes: int = 0
    bytes_total: int = 0  # cumulative growth counted by this probe (across rotations)
    lines_total: int = 0
    lines_estimated: bool = False
    rotations: int = 0
    truncations: int = 0
    readers: tuple[FileReader, ...] = ()
    writers: tuple[int, ...] = ()  # pids with it open for writing
    taken_mono_ns: int = 0


def parse_fdinfo(text: str) -> tuple[int, int] | None:
    """``pos:`` and ``flags:`` (octal) of an fdinfo file, None if either is missing or garbage."""
    pos = flags = None
    for line in text.splitlines()[:64]:
        k, _, v = line.partition(":")
        try:
            if k == "pos":
                pos = int(v.strip())
            elif k == "flags":
                flags = int(v.strip(), 8)
        except ValueError:
            return None
    if pos is None or flags is None or pos < 0:
        return None
    return pos, flags


def scan_path_fds(procfs_root: str, paths: set[str]) -> tuple[dict[str, list[tuple[int, int]]], int]:
    """path -> [(pid, fd)] of processes with it open (also "PATH (deleted)");
    and the number of processes that vanished or could not be read."""
    from fipstop.probes.unixsock import fds_by_path, scan_fds

    scan, skipped = scan_fds(procfs_root)
    by_path = fds_by_path(scan)
    return {p: by_path[p] for p in paths if p in by_path}, skipped


def count_newlines(path: str, start: int, end: int, limit: int) -> tuple[int, int]:
    """Newlines in [start, min(end, start + limit)); and the bytes read."""
    n = got = 0
    try:
        with open(path, "rb") as f:
            f.seek(start)
            todo = min(end - start, limit)
            while todo > 0:
                chunk = f.read(min(todo, 1 << 20))
                if not chunk:
                    break
                n += chunk.count(b"\n")
                got += len(chunk)
                todo -= len(chunk)
    except OSError:
        return 0, 0
    return n, got


class LogFileProbe:
    name = "logfile"

    def __init__(self, path: str, *, procfs_root: str = "/proc", max_read_bytes: int = MAX_READ_BYTES,
                 remember_s: float = REMEMBER_S) -> None:
        self.path = path
        self.procfs_root = procfs_root
        self.max_read_bytes = max_read_bytes
        self.remember_ns = int(remember_s * 1e9)
        self._ino: int | None = None
        self._offset = 0
        self._bytes = self._lines = self._rot = self._trunc = 0
        self._estimated = False
        self._seen: dict[tuple[int, int], tuple[FileReader, int]] = {}
        #: a (pid, fd) of the shared scan no longer points at this path: the
        #: scan is stale (BackendsProbe repeats it at the next poll)
        self.scan_stale = False

    def available(self) -> tuple[bool, str]:
        try:
            os.stat(self.path)
        except OSError as e:
            return False, f"{self.path}: {e.strerror or e}"
        return True, ""

    def _grow(self, st: os.stat_result) -> None:
        if self._ino is None:  # first look: the baseline
            self._ino, self._offset = st.st_ino, st.st_size
            return
        if st.st_ino != self._ino:
            self._rot += 1
            self._ino, self._offset = st.st_ino, 0
        elif st.st_size < self._offset:
            self._trunc += 1
            self._offset = 0
        grown = st.st_size - self._offset
        if grown <= 0:
            return
        lines, got = count_newlines(self.path, self._offset, st.st_size, self.max_read_bytes)
        if 0 < got < grown:
            lines = lines * grown // got
            self._estimated = True
        self._bytes += grown
        self._lines += lines
        self._offset = st.st_size

    def sample(self, fd_scan: tuple[Mapping[str, list[tuple[int, int]]], int] | None = None) -> LogFileSample:
        """``fd_scan``: one shared ``scan_path_fds`` for every watched file."""
        from fipstop.probes.unixsock import comm_of

        now = time.monotonic_ns()
        try:
            st = os.stat(self.path)
        except OSError as e:
            why = ("no such file (deleted or rotated away)" if isinstance(e, FileNotFoundError)
                   else (e.strerror or str(e)))
            return LogFileSample(self.path, False, why, bytes_total=self._bytes, lines_total=self._lines,
                                 lines_estimated=self._estimated, rotations=self._rot, truncations=self._trunc,
                                 taken_mono_ns=now)
        self._grow(st)
        if fd_scan is None:
            fd_scan = scan_path_fds(self.procfs_root, {self.path})
        readers, writers = [], []
        for pid, fd in fd_scan[0].get(self.path, []):
            try:
                # the scan may be a few seconds old: the fd must still be this path
                link = os.readlink(f"{self.procfs_root}/{pid}/fd/{fd}")
            except OSError:
                continue  # closed or gone since the scan
            if (link[:-10] if link.endswith(" (deleted)") else link) != self.path:
                self.scan_stale = True
                continue
            try:
                with open(f"{self.procfs_root}/{pid}/fdinfo/{fd}", encoding="utf-8", errors="replace") as f:
                    info = parse_fdinfo(f.read(4096))
                fst = os.stat(f"{self.procfs_root}/{pid}/fd/{fd}")
            except OSError:
                continue  # closed or gone mid-scan
            if info is None:
                continue
            pos, flags = info
            if flags & O_ACCMODE == O_WRONLY:
                writers.append(pid)
                continue
            r = FileReader(pid, fd, comm_of(self.procfs_root, pid), pos, max(fst.st_size - pos, 0),
                           fst.st_ino == st.st_ino)
            readers.append(r)
            self._seen[(pid, fd)] = (r, now)
        open_now = {(r.pid, r.fd) for r in readers}
        for key, (r, seen) in list(self._seen.items()):
            if key in open_now:
                continue
            if now - seen > self.remember_ns or not os.path.exists(f"{self.procfs_root}/{key[0]}"):
                del self._seen[key]
                continue
            if any(x.pid == r.pid for x in readers):
                continue
            lag = max(st.st_size - r.pos_bytes, 0) if r.same_file else r.lag_bytes
            readers.append(FileReader(r.pid, r.fd, r.comm, r.pos_bytes, lag, r.same_file, open_now=False))
        return LogFileSample(self.path, True, "", st.st_ino, st.st_size, self._bytes, self._lines, self._estimated,
                             self._rot, self._trunc, tuple(sorted(readers, key=lambda r: (r.pid, r.fd))),
                             tuple(sorted(set(writers))), now)
