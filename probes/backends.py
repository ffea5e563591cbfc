"""The other logging backends beside FIPS rings, sampled as one probe.

:class:`BackendsProbe` (name ``"backends"``) samples log files, unix syslog
sockets, UDP syslog, journald, Linux audit and rsyslog impstats into one
frozen :class:`BackendsSample` per poll: raw cumulative counters, so a
recording replays; :func:`fipstop.model.backends.derive_backends` turns two
of them into rates, queues and lags.

Discovery: ``/dev/log`` and its receiver, and files under /var/log that
rsyslogd, fail2ban-server or crowdsec have open.  One scan of ``/proc/*/fd``
serves every part; it is repeated when the set of processes changed, when a
watched socket has a receiver or a connected sender the scan does not know
(at most once a second), when a file reader's fd no longer points at its
file, and at least every RESCAN_S seconds - not at every poll: it was most of
the probe's ~5 ms a poll (and of the dashboard's CPU budget), while queues,
sizes and reader positions are read fresh at every poll.  What can be up to
RESCAN_S late: a file an already running rsyslogd opened (for discovery) and
the owner of a UDP socket opened by a running process.

Never imports textual.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fipstop.config import BackendsConfig
from fipstop.probes import names
from fipstop.probes.audit import AuditProbe, AuditSample
from fipstop.probes.journald import JournaldProbe, JournaldSample
from fipstop.probes.logfiles import LogFileProbe, LogFileSample
from fipstop.probes.netlink import Message, NetlinkError, permission_reason
from fipstop.probes.netsyslog import NetSyslogProbe, NetSyslogSample
from fipstop.probes.rsyslog_stats import RsyslogStatsProbe, RsyslogStatsSample
from fipstop.probes.unixsock import (
    DiagInfo,
    UnixSocketProbe,
    UnixSocketSample,
    comm_of,
    fds_by_path,
    fds_by_socket,
    pids,
    scan_fds,
    unix_diag,
)

__all__ = ["BackendsProbe", "BackendsSample"]

DISCOVER_COMMS = ("rsyslogd", "fail2ban-server", "crowdsec", "syslog-ng", "promtail")
DISCOVER_UNDER = "/var/log/"
MAX_DISCOVERED_FILES = 32
RESCAN_S = 5.0  # an fd opened by a process already running shows within this


@dataclass(frozen=True, slots=True)
class _FdScan:
    """The last scan of /proc/*/fd and when it was taken."""

    taken_mono_ns: int
    pids: frozenset[int]
    skipped: int  # processes that could not be read
    by_socket: dict[int, list[tuple[int, int]]]  # socket inode -> [(pid, fd)]
    by_path: dict[str, list[tuple[int, int]]]  # path -> [(pid, fd)]


@dataclass(frozen=True, slots=True)
class BackendsSample:
    taken_mono_ns: int
    files: tuple[LogFileSample, ...] = ()
    sockets: tuple[UnixSocketSample, ...] = ()
    net: NetSyslogSample | None = None
    journald: JournaldSample | None = None
    audit: AuditSample | None = None
    rsyslog: RsyslogStatsSample | None = None
    notes: tuple[str, ...] = ()  # what discovery or the scan could not do
    config_source: str = ""


# ---------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------


class BackendsProbe:
    """All backends in one probe: one fd scan and one sock_diag dump per poll."""

    name = names.BACKENDS

    def __init__(self, config: BackendsConfig | None = None, *, procfs_root: str = "/proc",
                 diag: Callable[[], dict[int, DiagInfo]] = unix_diag,
                 audit_query: Callable[[], Sequence[Message]] | None = None, dev_log: str = "/dev/log",
                 journald: JournaldProbe | None = None, discover_under: str = DISCOVER_UNDER) -> None:
        self.config = config or BackendsConfig()
        self.procfs_root = procfs_root
        self.diag = diag
        self.dev_log = dev_log
        self.discover_under = discover_under
        self._files: dict[str, LogFileProbe] = {}
        for p in self.config.files:
            self._file(p)
        self._audit = (AuditProbe(query=audit_query) if audit_query else AuditProbe()) if self.config.audit else None
        self._journald = (journald or JournaldProbe(procfs_root=procfs_root)) if self.config.journald else None
        self._net = NetSyslogProbe(self.config.udp_ports, procfs_root=procfs_root)
        self._rsyslog = RsyslogStatsProbe(self.config.rsyslog_impstats) if self.config.rsyslog_impstats else None
        self._last_scan: _FdScan | None = None

    def _file(self, path: str) -> LogFileProbe:
        p = self._files.get(path)
        if p is None:
            p = self._files[path] = LogFileProbe(path, procfs_root=self.procfs_root)
        return p

    def available(self) -> tuple[bool, str]:
        return True, ""

    def _socket_paths(self) -> list[str]:
        paths = list(self.config.sockets)
        if self.config.discover and os.path.exists(self.dev_log) and self.dev_log not in paths:
            paths.insert(0, self.dev_log)
        return paths

    def _discover_files(self, scan: Mapping[int, Mapping[int, str]], notes: list[str]) -> None:
        for pid, fds in scan.items():
            comm = comm_of(self.procfs_root, pid)
            if comm not in DISCOVER_COMMS:
                continue
            for t in fds.values():
                if not t.startswith(self.discover_under) or t.endswith(" (deleted)") or t in self._files:
                    continue
                if len(self._files) >= len(self.config.files) + MAX_DISCOVERED_FILES:
                    notes.append(f"more than {MAX_DISCOVERED_FILES} files discovered: the rest not watched")
                    return
                if os.path.isfile(t):
                    self._file(t)

    def _rescan(self, now: int, live: frozenset[int], notes: list[str]) -> _FdScan:
        scan, skipped = scan_fds(self.procfs_root)
        if self.config.discover:
            self._discover_files(scan, notes)
        for f in self._files.values():
            f.scan_stale = False
        self._last_scan = _FdScan(now, live, skipped, fds_by_socket(scan), fds_by_path(scan))
        return self._last_scan

    def _sample_sockets(self, scan: _FdScan, paths: list[str],
                        diag: dict[int, DiagInfo] | None) -> tuple[UnixSocketSample, ...]:
        by_sock = (scan.by_socket, scan.skipped)
        return tuple(UnixSocketProbe(p, procfs_root=self.procfs_root).sample(by_sock, diag) for p in paths)

    @staticmethod
    def _socket_scan_stale(scan: _FdScan, socks: tuple[UnixSocketSample, ...], diag: dict[int, DiagInfo]) -> bool:
        """A watched socket's receiver, or a sender connected to it, that the
        scan does not know: the scan is older than that connection."""
        recv = {s.inode for s in socks if s.ok and s.inode}
        if not recv:
            return False
        holders = scan.by_socket
        if any(i not in holders for i in recv):
            return True
        return any(x.peer in recv and x.inode not in recv and x.inode not in holders for x in diag.values())

    def sample(self) -> BackendsSample:
        now = time.monotonic_ns()
        notes: list[str] = []
        live = frozenset(pids(self.procfs_root))
        stale = any(f.scan_stale for f in self._files.values())
        scan = self._last_scan
        if stale or scan is None or scan.pids != live or now - scan.taken_mono_ns >= RESCAN_S * 1e9:
            scan = self._rescan(now, live, notes)
        diag: dict[int, DiagInfo] | None = None
        paths = self._socket_paths()
        if paths or self._journald is not None:
            try:
                diag = self.diag()
            except NetlinkError as e:
                notes.append(permission_reason(e, "sock_diag", "root"))
                diag = {}
        socks = self._sample_sockets(scan, paths, diag)
        if diag and self._socket_scan_stale(scan, socks, diag) and now - scan.taken_mono_ns >= 1e9:
            # a process already running connected to (or bound) a watched
            # socket since the scan: its senders must show now, not in 5 s
            scan = self._rescan(now, live, notes)
            socks = self._sample_sockets(scan, paths, diag)
        skipped, socket_holders, path_holders = scan.skipped, scan.by_socket, scan.by_path
        if skipped:
            notes.append(f"{skipped} processes could not be read (gone or not permitted)")
        by_sock = (socket_holders, skipped)
        by_path = (path_holders, skipped)
        files = tuple(p.sample(by_path) for p in self._files.values())
        jd = self._journald.sample(by_sock, diag, live) if self._journald is not None else None
        return BackendsSample(
            now, files, socks, self._net.sample(by_sock), jd,
            self._audit.sample() if self._audit is not None else None,
            self._rsyslog.sample() if self._rsyslog is not None else None,
            tuple(notes), self.config.source,
        )

    def close(self) -> None:
        pass

