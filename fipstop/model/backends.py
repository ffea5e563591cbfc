"""The other logging backends' raw samples turned into rates, queues and lags.

:func:`derive_backends` is pure, like the ring part of the model: no clock,
counters and ``taken_mono_ns`` only, so a recording replays to the same
numbers.  Vocabulary shared with the rings: *rate* (bytes/s, lines/s,
enqueued/s), *queue* or *lag* (bytes waiting in a socket, bytes and seconds a
file reader is behind), *drops* or *lost* (socket drops, UDP RcvbufErrors,
ARP unresolved discards, audit lost, rsyslog discarded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fipstop.probes.backends import BackendsSample
from fipstop.probes.logfiles import LogFileSample
from fipstop.probes.netsyslog import NetSyslogSample
from fipstop.probes.unixsock import BlockedSender, Holder, UnixSocketSample

__all__ = ["BackendsView", "derive_backends", "rate"]

NAN = float("nan")


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
    before = prev.drops if prev is not None and prev.inode == cur.inode else None
    return SocketRow(cur.path, cur.ok, cur.reason, cur.sock_type, cur.receivers, cur.queue_bytes,
                     cur.first_dgram_bytes, cur.rcvbuf_bytes, cur.drops,
                     rate(before, cur.drops, dt), cur.senders_connected, cur.blocked)


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

