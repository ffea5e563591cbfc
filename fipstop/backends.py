"""The other logging backends beside FIPS rings, in the rings' vocabulary.

:class:`BackendsProbe` (name ``"backends"``) samples log files, unix syslog
sockets, UDP syslog, journald, Linux audit and rsyslog impstats into one
frozen :class:`BackendsSample` per poll (raw cumulative counters, so a
recording replays); :func:`derive_backends` turns two of them into rates,
queues and lags the way :func:`fipstop.model.derive` does for rings - pure,
no clock: counters and ``taken_mono_ns`` only.

Vocabulary shared with the rings: *rate* (bytes/s, lines/s, enqueued/s),
*queue* or *lag* (bytes waiting in a socket, bytes and seconds a file reader
is behind), *drops* or *lost* (socket drops, UDP RcvbufErrors, ARP
unresolved discards, audit lost, rsyslog discarded).

Discovery (``discover``): ``/dev/log`` and its receiver, and files under
/var/log that rsyslogd, fail2ban-server or crowdsec have open.  One scan of
``/proc/*/fd`` serves every part; it is repeated when the set of processes
changed, when a watched socket has a receiver or a connected sender the scan
does not know (at most once a second), when a file reader's fd no longer
points at its file, and at least every RESCAN_S seconds - not at every poll:
it was most of the probe's ~5 ms a poll (and of the dashboard's CPU budget),
while queues, sizes and reader positions are read fresh at every poll.  What
can be up to RESCAN_S late: a file an already running rsyslogd opened (for
discovery) and the owner of a UDP socket opened by a running process.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass

from fipstop.config import BackendsConfig
from fipstop.probes.audit import AuditProbe, AuditSample
from fipstop.probes.journald import JournaldProbe, JournaldSample
from fipstop.probes.logfiles import FileReader, LogFileProbe, LogFileSample
from fipstop.probes.netlink import NetlinkError, permission_reason
from fipstop.probes.netsyslog import NetSyslogProbe, NetSyslogSample, UdpSocket
from fipstop.probes.rsyslog_stats import RsyslogStatsProbe, RsyslogStatsSample
from fipstop.probes.unixsock import BlockedSender, Holder, UnixSocketProbe, UnixSocketSample, comm_of, \
    fds_by_path, fds_by_socket, pids, scan_fds, unix_diag

DISCOVER_COMMS = ("rsyslogd", "fail2ban-server", "crowdsec", "syslog-ng", "promtail")
DISCOVER_UNDER = "/var/log/"
MAX_DISCOVERED_FILES = 32
RESCAN_S = 5.0  # an fd opened by a process already running shows within this
NAN = float("nan")


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

    name = "backends"

    def __init__(self, config: BackendsConfig | None = None, *, procfs_root: str = "/proc",
                 diag=unix_diag, audit_query=None, dev_log: str = "/dev/log",
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
        # (taken_mono_ns, pids, skipped, by_socket, by_path) of the last fd scan
        self._scan: tuple | None = None

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

    def _rescan(self, now: int, live: frozenset[int], notes: list[str]) -> None:
        scan, skipped = scan_fds(self.procfs_root)
        if self.config.discover:
            self._discover_files(scan, notes)
        for f in self._files.values():
            f.scan_stale = False
        self._scan = (now, live, skipped, fds_by_socket(scan), fds_by_path(scan))

    def _sample_sockets(self, paths: list[str], diag) -> tuple[UnixSocketSample, ...]:
        by_sock = (self._scan[3], self._scan[2])
        return tuple(UnixSocketProbe(p, procfs_root=self.procfs_root).sample(by_sock, diag) for p in paths)

    def _socket_scan_stale(self, socks: tuple[UnixSocketSample, ...], diag) -> bool:
        """A watched socket's receiver, or a sender connected to it, that the
        scan does not know: the scan is older than that connection."""
        recv = {s.inode for s in socks if s.ok and s.inode}
        if not recv:
            return False
        holders = self._scan[3]
        if any(i not in holders for i in recv):
            return True
        return any(x.peer in recv and x.inode not in recv and x.inode not in holders for x in diag.values())

    def sample(self) -> BackendsSample:
        now = time.monotonic_ns()
        notes: list[str] = []
        live = frozenset(pids(self.procfs_root))
        stale = any(f.scan_stale for f in self._files.values())
        if (stale or self._scan is None or self._scan[1] != live
                or now - self._scan[0] >= RESCAN_S * 1e9):
            self._rescan(now, live, notes)
        diag = None
        paths = self._socket_paths()
        if paths or self._journald is not None:
            try:
                diag = self.diag()
            except NetlinkError as e:
                notes.append(permission_reason(e, "sock_diag", "root"))
                diag = {}
        socks = self._sample_sockets(paths, diag)
        if diag and self._socket_scan_stale(socks, diag) and now - self._scan[0] >= 1e9:
            # a process already running connected to (or bound) a watched
            # socket since the scan: its senders must show now, not in 5 s
            self._rescan(now, live, notes)
            socks = self._sample_sockets(paths, diag)
        _, _, skipped, socket_holders, path_holders = self._scan
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


# ---------------------------------------------------------------------------
# derive: counters + timestamps -> rates (pure)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReaderRow:
    pid: int
    comm: str
    pos_bytes: int
    lag_bytes: int
    lag_s: float  # lag / growth rate; 0 without lag, NaN: lag but no growth to measure by
    open_now: bool
    same_file: bool


@dataclass(frozen=True, slots=True)
class FileRow:
    path: str
    ok: bool
    reason: str
    size_bytes: int
    bytes_per_s: float
    lines_per_s: float
    lines_estimated: bool
    rotations: int
    truncations: int
    readers: tuple[ReaderRow, ...]
    writers: tuple[int, ...]

    @property
    def max_lag_bytes(self) -> int:
        return max((r.lag_bytes for r in self.readers), default=0)


@dataclass(frozen=True, slots=True)
class SocketRow:
    path: str
    ok: bool
    reason: str
    sock_type: str
    receivers: tuple[Holder, ...]
    queue_bytes: int  # -1 unknown
    first_dgram_bytes: int
    rcvbuf_bytes: int
    drops: int
    drops_per_s: float
    senders_connected: int
    blocked: tuple[BlockedSender, ...]


@dataclass(frozen=True, slots=True)
class UdpRow:
    proto: str
    local: str
    port: int
    rx_queue_bytes: int
    drops: int
    drops_per_s: float
    comm: str
    pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NetRow:
    ok: bool
    reason: str
    sockets: tuple[UdpRow, ...]
    rcvbuf_errors: int  # udp + udp6
    rcvbuf_errors_per_s: float
    in_errors: int
    in_errors_per_s: float
    in_datagrams_per_s: float
    arp_unresolved_discards: int
    arp_unresolved_discards_per_s: float


@dataclass(frozen=True, slots=True)
class JournaldRow:
    running: bool
    reason: str
    pid: int
    sockets: tuple[SocketRow, ...]
    journal_bytes: int
    stored_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class AuditRow:
    ok: bool
    reason: str
    enabled: int
    failure: int
    pid: int
    rate_limit: int
    backlog_limit: int
    lost: int
    lost_per_s: float
    backlog: int
    backlog_wait_time: int


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    size: int
    enqueued: int
    enqueued_per_s: float
    full: int
    discarded_full: int
    discarded_nf: int
    discarded_per_s: float
    maxqsize: int


@dataclass(frozen=True, slots=True)
class RsyslogRow:
    ok: bool
    reason: str
    path: str
    queues: tuple[QueueRow, ...]
    file_age_ns: int


@dataclass(frozen=True)
class BackendsView:
    dt_s: float  # 0: no baseline yet (rates NaN)
    files: tuple[FileRow, ...] = ()
    sockets: tuple[SocketRow, ...] = ()
    net: NetRow | None = None
    journald: JournaldRow | None = None
    audit: AuditRow | None = None
    rsyslog: RsyslogRow | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def drops_per_s(self) -> float:
        """Everything lost per second across backends (NaN parts ignored)."""
        parts = [s.drops_per_s for s in self.sockets]
        if self.net is not None:
            parts += [self.net.rcvbuf_errors_per_s, self.net.arp_unresolved_discards_per_s]
        if self.audit is not None:
            parts.append(self.audit.lost_per_s)
        if self.rsyslog is not None:
            parts += [q.discarded_per_s for q in self.rsyslog.queues]
        return sum(p for p in parts if not math.isnan(p))


def rate(prev: int | None, cur: int, dt_s: float) -> float:
    """(cur - prev) / dt; NaN without a baseline, an unknown (-1) or a counter that went back."""
    if prev is None or dt_s <= 0 or prev < 0 or cur < 0 or cur < prev:
        return NAN
    return (cur - prev) / dt_s


def _dt(prev_ns: int, cur_ns: int) -> float:
    return (cur_ns - prev_ns) / 1e9 if cur_ns > prev_ns else 0.0


def _file_row(prev: LogFileSample | None, cur: LogFileSample) -> FileRow:
    dt = _dt(prev.taken_mono_ns, cur.taken_mono_ns) if prev is not None else 0.0
    bps = rate(prev.bytes_total if prev else None, cur.bytes_total, dt)
    lps = rate(prev.lines_total if prev else None, cur.lines_total, dt)
    readers = []
    for r in cur.readers:
        if r.lag_bytes == 0:
            lag_s = 0.0
        elif bps > 0 and r.same_file:
            lag_s = r.lag_bytes / bps
        else:
            lag_s = NAN
        readers.append(ReaderRow(r.pid, r.comm, r.pos_bytes, r.lag_bytes, lag_s, r.open_now, r.same_file))
    return FileRow(cur.path, cur.ok, cur.reason, cur.size_bytes, bps, lps, cur.lines_estimated, cur.rotations,
                   cur.truncations, tuple(readers), cur.writers)


def _socket_row(prev: UnixSocketSample | None, cur: UnixSocketSample) -> SocketRow:
    dt = _dt(prev.taken_mono_ns, cur.taken_mono_ns) if prev is not None else 0.0
    same = prev is not None and prev.inode == cur.inode
    return SocketRow(cur.path, cur.ok, cur.reason, cur.sock_type, cur.receivers, cur.queue_bytes,
                     cur.first_dgram_bytes, cur.rcvbuf_bytes, cur.drops,
                     rate(prev.drops if same else None, cur.drops, dt), cur.senders_connected, cur.blocked)


def _plus(*xs: int) -> int:
    known = [x for x in xs if x >= 0]
    return sum(known) if known else -1


def _net_row(prev: NetSyslogSample | None, cur: NetSyslogSample) -> NetRow:
    dt = _dt(prev.taken_mono_ns, cur.taken_mono_ns) if prev is not None else 0.0
    old = {(s.proto, s.inode): s for s in prev.sockets} if prev is not None else {}
    socks = []
    for s in cur.sockets:
        o = old.get((s.proto, s.inode))
        socks.append(UdpRow(s.proto, s.local, s.port, s.rx_queue_bytes, s.drops,
                            rate(o.drops if o else None, s.drops, dt), s.comm, s.pids))
    rb = _plus(cur.udp_rcvbuf_errors, cur.udp6_rcvbuf_errors)
    ie = _plus(cur.udp_in_errors, cur.udp6_in_errors)
    ind = _plus(cur.udp_in_datagrams, cur.udp6_in_datagrams)
    p = prev
    return NetRow(
        cur.ok, cur.reason, tuple(socks),
        rb, rate(_plus(p.udp_rcvbuf_errors, p.udp6_rcvbuf_errors) if p else None, rb, dt),
        ie, rate(_plus(p.udp_in_errors, p.udp6_in_errors) if p else None, ie, dt),
        rate(_plus(p.udp_in_datagrams, p.udp6_in_datagrams) if p else None, ind, dt),
        cur.arp_unresolved_discards, rate(p.arp_unresolved_discards if p else None, cur.arp_unresolved_discards, dt),
    )


def derive_backends(prev: BackendsSample | None, cur: BackendsSample) -> BackendsView:
    dt = _dt(prev.taken_mono_ns, cur.taken_mono_ns) if prev is not None else 0.0
    pf = {f.path: f for f in prev.files} if prev is not None else {}
    ps = {s.path: s for s in prev.sockets} if prev is not None else {}
    files = tuple(_file_row(pf.get(f.path), f) for f in cur.files)
    socks = tuple(_socket_row(ps.get(s.path), s) for s in cur.sockets)
    net = _net_row(prev.net if prev is not None else None, cur.net) if cur.net is not None else None
    jd = None
    if cur.journald is not None:
        j, pj = cur.journald, prev.journald if prev is not None else None
        pjs = {s.path: s for s in pj.sockets} if pj is not None else {}
        jdt = _dt(pj.taken_mono_ns, j.taken_mono_ns) if pj is not None else 0.0
        jd = JournaldRow(j.running, j.reason, j.pid, tuple(_socket_row(pjs.get(s.path), s) for s in j.sockets),
                         j.journal_bytes, rate(pj.journal_bytes if pj is not None and pj.running else None,
                                               j.journal_bytes, jdt))
    au = None
    if cur.audit is not None:
        a, pa = cur.audit, prev.audit if prev is not None else None
        adt = _dt(pa.taken_mono_ns, a.taken_mono_ns) if pa is not None else 0.0
        au = AuditRow(a.ok, a.reason, a.enabled, a.failure, a.pid, a.rate_limit, a.backlog_limit, a.lost,
                      rate(pa.lost if pa is not None and pa.ok else None, a.lost, adt), a.backlog,
                      a.backlog_wait_time)
    rs = None
    if cur.rsyslog is not None:
        r, pr = cur.rsyslog, prev.rsyslog if prev is not None else None
        rdt = _dt(pr.taken_mono_ns, r.taken_mono_ns) if pr is not None else 0.0
        old = {q.name: q for q in pr.queues} if pr is not None else {}
        rows = []
        for q in r.queues:
            o = old.get(q.name)
            rows.append(QueueRow(q.name, q.size, q.enqueued, rate(o.enqueued if o else None, q.enqueued, rdt),
                                 q.full, q.discarded_full, q.discarded_nf,
                                 rate(o.discarded_full + o.discarded_nf if o else None,
                                      q.discarded_full + q.discarded_nf, rdt), q.maxqsize))
        rs = RsyslogRow(r.ok, r.reason, r.path, tuple(rows), r.file_age_ns)
    return BackendsView(dt, files, socks, net, jd, au, rs, cur.notes)


# ---------------------------------------------------------------------------
# JSON and text (fipstop snapshot)
# ---------------------------------------------------------------------------


def _jsonable(x):
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 3)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def view_to_json(view: BackendsView) -> dict:
    """Stable keys; rates are floats or null (no baseline / unknown); names unescaped (JSON escapes them)."""
    assert is_dataclass(view)
    d = {k: (asdict(v) if is_dataclass(v) else v) for k, v in
         ((f, getattr(view, f)) for f in ("files", "sockets", "net", "journald", "audit", "rsyslog"))}
    d["files"] = [asdict(f) for f in view.files]
    d["sockets"] = [asdict(s) for s in view.sockets]
    d["dt_s"] = view.dt_s
    d["notes"] = list(view.notes)
    return _jsonable(d)


def _r(v: float, unit: str = "/s") -> str:
    return "-" if math.isnan(v) else f"{v:.1f}{unit}"


def format_text(view: BackendsView, escape) -> str:
    """A short human section; ``escape`` makes attacker-controlled names safe."""
    out = ["backends" + (f"  (rates over {view.dt_s:.2f}s)" if view.dt_s else "  (no rates: one sample)")]
    for f in view.files:
        if not f.ok:
            out.append(f"  file {escape(f.path)}: {escape(f.reason)}")
            continue
        out.append(f"  file {escape(f.path)}: {f.size_bytes} B, {_r(f.bytes_per_s, ' B/s')}, "
                   f"{_r(f.lines_per_s, ' lines/s')}, rotations {f.rotations}, truncations {f.truncations}")
        for r in f.readers:
            lag_s = "-" if math.isnan(r.lag_s) else f"{r.lag_s:.2f}s"
            out.append(f"    reader {escape(r.comm)}[{r.pid}] at {r.pos_bytes}: lag {r.lag_bytes} B, {lag_s}"
                       + ("" if r.open_now else " (closed since)") + ("" if r.same_file else " (old file)"))
    for s in view.sockets:
        if not s.ok:
            out.append(f"  socket {escape(s.path)}: {escape(s.reason)}")
            continue
        who = ", ".join(f"{escape(h.comm)}[{h.pid}]" for h in s.receivers) or "?"
        q = "?" if s.queue_bytes < 0 else f"{s.queue_bytes} B"
        out.append(f"  socket {escape(s.path)} ({s.sock_type}) -> {who}: queue {q}, "
                   f"{s.senders_connected} senders, {len(s.blocked)} blocked, drops {s.drops}")
    if view.net is not None:
        n = view.net
        if not n.ok:
            out.append(f"  udp: {escape(n.reason)}")
        else:
            out.append(f"  udp: RcvbufErrors {n.rcvbuf_errors} ({_r(n.rcvbuf_errors_per_s)}), InErrors "
                       f"{n.in_errors}, ARP unresolved discards {n.arp_unresolved_discards}")
            for u in n.sockets:
                out.append(f"    {u.proto} {u.local}:{u.port} {escape(u.comm) or '?'}: queue {u.rx_queue_bytes} B, "
                           f"drops {u.drops} ({_r(u.drops_per_s)})")
    if view.journald is not None:
        j = view.journald
        out.append(f"  journald: {escape(j.reason) or 'not running'}" if not j.running else
                   f"  journald[{j.pid}]: journal {j.journal_bytes} B, stores {_r(j.stored_bytes_per_s, ' B/s')}")
    if view.audit is not None:
        a = view.audit
        out.append(f"  audit: {escape(a.reason)}" if not a.ok else
                   f"  audit: enabled {a.enabled} failure {a.failure} pid {a.pid} rate_limit {a.rate_limit} "
                   f"backlog {a.backlog}/{a.backlog_limit} lost {a.lost} ({_r(a.lost_per_s)})")
    if view.rsyslog is not None:
        r = view.rsyslog
        if not r.ok:
            out.append(f"  rsyslog impstats {escape(r.path)}: {escape(r.reason)}")
        for q in r.queues:
            out.append(f"  rsyslog queue {escape(q.name)}: size {q.size} max {q.maxqsize}, enqueued {q.enqueued}, "
                       f"full {q.full}, discarded.full {q.discarded_full}, discarded.nf {q.discarded_nf}")
    for note in view.notes:
        out.append(f"  note: {escape(note)}")
    return "\n".join(out)


__all__ = ["BackendsProbe", "BackendsSample", "BackendsView", "FileReader", "derive_backends", "fixture_samples",
           "format_text", "rate", "view_to_json"]


def fixture_samples(n: int = 3, t0_ns: int = 1_000_000_000_000) -> list[BackendsSample]:
    """Deterministic samples one second apart (tests, screenshots): a tailer
    falling behind, a syslog socket with a blocked sender, UDP drops, audit
    lost, an rsyslog queue discarding, and one hostile process name."""
    from fipstop.probes.rsyslog_stats import QueueStats

    out = []
    for i in range(n):
        t = t0_ns + i * 1_000_000_000
        size = 40_000_000 + i * 2_000_000
        files = (
            LogFileSample("/var/log/named/query.log", True, "", 1001, size, i * 2_000_000, i * 16_000, False, 0, 0,
                          (FileReader(812, 5, "fail2ban-server", 30_000_000 + i * 500_000,
                                      size - 30_000_000 - i * 500_000, True),
                           FileReader(900, 7, "crowdsec", size - 4096, 4096, True)), (640,), t),
            LogFileSample("/var/log/auth.log", True, "", 1002, 88_000 + i * 120, i * 120, i, False, 1, 0,
                          (FileReader(812, 9, "fail2ban-server", 88_000 + i * 120, 0, True, False),), (640,), t),
            LogFileSample("/var/log/gone.log", False, "no such file (deleted or rotated away)", taken_mono_ns=t),
        )
        socks = (
            UnixSocketSample("/dev/log", True, "", 5001, "dgram", (Holder(640, "rsyslogd"),), 180, 9216 + i * 512,
                             212992, 0, 3, (BlockedSender(700, 701, "named", "sendto"),
                                            BlockedSender(702, 703, "evil\x1b[31m[bold]", "sendmsg")), 0, t),
            UnixSocketSample("/run/custom.sock", False, "not a socket", taken_mono_ns=t),
        )
        net = NetSyslogSample(True, "", (
            UdpSocket("udp", "0.0.0.0", 514, 212_992, 0, 1000 + i * 2500, 7001, 0, (640,), "rsyslogd"),),
            10_000_000 + i * 50_000, 5000 + i * 2500, 5000 + i * 2500, 0, 0, 0, 12 + i * 3, 0, t)
        au = AuditSample(True, "", 1, 1, 733, 0, 8192, 100 + i * 40, 8192, 60000, 0, t)
        rs = RsyslogStatsSample("/var/log/rsyslog-stats.json", True, "", (
            QueueStats("main Q", 99_000, 1_000_000 + i * 30_000, 12 + i, 5000 + i * 1000, 0, 100_000),
            QueueStats("action-0-builtin:omfile", 0, 900_000 + i * 20_000, 0, 0, 0, 800)), 500_000_000, 0, t)
        jd = JournaldSample(False, "not running", taken_mono_ns=t)
        out.append(BackendsSample(t, files, socks, net, jd, au, rs, ("3 processes could not be read",), ""))
    return out
