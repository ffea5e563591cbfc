"""Deterministic synthetic raw samples, for tests, screenshots and benchmarks.

:func:`domain_snapshot` builds a :class:`fipstop.ring.DomainSnapshot` from
numpy arrays laid out exactly as the binding returns them (dtypes from
``fipstop._fips``), so the model and the views run on it unchanged.

:func:`demo_samples` simulates a small host for N seconds: domain ``named``
(four resolver threads, ~25-45 k records/s) read by an IPS that keeps up, an
archiver that falls behind from t=25 s until its ring fills and drops records,
then catches up from t=70 s, a forwarder whose heartbeat stops at t=50 s
(stale) and a Fail2Ban consumer that was evicted; domain ``nginx`` with two
workers, one of them exited (ring closed).  ``hostile=True`` adds a ring whose
thread name and a consumer whose name carry ANSI escapes and textual markup.

:func:`many_rings_samples` gives one domain with N busy rings (benchmarks);
:func:`many_domains_samples` several domains of a few rings each, whose
producer processes straddle two domains (grouping, the chart per domain);
:func:`backend_samples` the other backends' raw samples of a host whose
tailer falls behind and whose syslog socket blocks a sender;
:func:`fipsipc_samples` the FIPS paper's prototype rings beside them.

No clock and no shared memory: every timestamp derives from the arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from fipstop.probes.audit import AuditSample
from fipstop.probes.backends import BackendsSample
from fipstop.probes.fipsipc import FipsIpcSample
from fipstop.probes.journald import JournaldSample
from fipstop.probes.logfiles import FileReader, LogFileSample
from fipstop.probes.netsyslog import NetSyslogSample, UdpSocket
from fipstop.probes.ring import RawSample
from fipstop.probes.rsyslog_stats import QueueStats, RsyslogStatsSample
from fipstop.probes.unixsock import BlockedSender, Holder, UnixSocketSample
from fipstop.ring import (
    OLDEST_TS_FIELD,
    DomainSnapshot,
    consumer_stat_dtype,
    pos_dtype,
    pos_stat_dtype,
    ring_stat_dtype,
)

#: 2025-01-01 12:00:00 UTC, the fixtures' wall clock at t=0.
EPOCH_REALTIME_NS = 1_735_732_800_000_000_000
EPOCH_MONO_NS = 5_000_000_000_000
HOST = "dns-edge-1"

RING_FREE, RING_ACTIVE, RING_CLOSED = 0, 1, 2
CONS_FREE, CONS_JOINING, CONS_ACTIVE, CONS_EVICTED, CONS_CLOSED = 0, 1, 2, 3, 4

HOSTILE_THREAD = "\x1b[31mred\x1b[0m[bold]x[/bold]\x07"
HOSTILE_CONSUMER = "[blink]ips[/blink]\x1b]0;pwn\x07\x1b[2J"


def empty_arrays(max_rings: int, max_consumers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rings = np.zeros(max_rings, dtype=ring_stat_dtype())
    rings["index"] = np.arange(max_rings)
    cons = np.zeros(max_consumers, dtype=consumer_stat_dtype())
    cons["index"] = np.arange(max_consumers)
    pos = np.zeros((max_consumers, max_rings), dtype=pos_dtype())
    return rings, cons, pos


def domain_snapshot(
    name: str,
    rings: np.ndarray,
    consumers: np.ndarray,
    pos: np.ndarray,
    *,
    taken_mono_ns: int,
    taken_realtime_ns: int,
    ring_capacity: int = 1 << 20,
    max_record: int = 4096,
    created_realtime_ns: int = EPOCH_REALTIME_NS - 3_723_000_000_000,
    created_mono_ns: int = EPOCH_MONO_NS - 3_723_000_000_000,
    grace_ns: int = 5_000_000_000,
    creator_pid: int = 1,
    shm_dir: str = "/dev/shm",
    records_no_ring: int | None = 0,
) -> DomainSnapshot:
    """A DomainSnapshot over copies of the given arrays (binding layout; ``pos`` may carry
    :data:`fipstop.ring.OLDEST_TS_FIELD`, which the binding's layout has not)."""
    header = SimpleNamespace(
        name=name,
        version=1,
        ring_capacity=ring_capacity,
        max_record=max_record,
        file_size=0,
        grace_ns=grace_ns,
        creator_pid=creator_pid,
        created_realtime_ns=created_realtime_ns,
        created_mono_ns=created_mono_ns,
    )
    raw = (
        taken_realtime_ns,
        taken_mono_ns,
        np.ascontiguousarray(rings).tobytes(),
        np.ascontiguousarray(consumers).tobytes(),
        _c_layout(pos).tobytes(),
    )
    oldest = np.asarray(pos[OLDEST_TS_FIELD]) if OLDEST_TS_FIELD in (pos.dtype.names or ()) else None
    return DomainSnapshot.from_raw(raw, header, f"{shm_dir}/fips.{name}", oldest, records_no_ring=records_no_ring)


def _c_layout(pos: np.ndarray) -> np.ndarray:
    out = np.zeros(pos.shape, dtype=pos_stat_dtype())
    for f in out.dtype.names or ():
        if f in (pos.dtype.names or ()):
            out[f] = pos[f]
    return out


def raw_sample(t_s: float, domains: list[DomainSnapshot], *, host: str = HOST, shm_dir: str = "/dev/shm",
               errors: tuple = ()) -> RawSample:
    return RawSample(
        host=host,
        shm_dir=shm_dir,
        taken_mono_ns=EPOCH_MONO_NS + int(round(t_s * 1e9)),
        taken_realtime_ns=EPOCH_REALTIME_NS + int(round(t_s * 1e9)),
        domains=tuple(sorted(domains, key=lambda d: d.name)),
        errors=tuple(errors),
    )


# ---------------------------------------------------------------------------
# the demo simulation
# ---------------------------------------------------------------------------

_STRIDE = 136  # bytes per record in the ring (24-byte header + 112 payload)
_PAYLOAD = 112


@dataclass
class _Ring:
    slot: int
    pid: int
    tid: int
    name: str
    rate: Callable[[float], float]  # t -> attempted records/s
    state: int = RING_ACTIVE
    closes_at: float | None = None
    committed: int = 0
    dropped: int = 0
    full_events: int = 0
    high_water: int = 0
    generation: int = 1
    #: (records committed after a step, time of that step): when each record was written
    commits: list = field(default_factory=list)

    def commit_time(self, seq: int) -> float | None:
        """When record ``seq`` was committed (interpolated within its step), None if not yet."""
        import bisect

        i = bisect.bisect_right([c for c, _t in self.commits], seq)
        if i >= len(self.commits):
            return None
        c1, t1 = self.commits[i]
        c0, t0 = self.commits[i - 1] if i else (0, t1)
        return t0 + (t1 - t0) * (seq - c0 + 1) / max(c1 - c0, 1)


@dataclass
class _Consumer:
    slot: int
    name: str
    pid: int
    speed: Callable[[float], float]  # t -> records/s it can release per ring
    state: int = CONS_ACTIVE
    heartbeat_stops_at: float | None = None
    readers: int = 1
    latency_s: float = 0.02
    evicted_at: float | None = None
    released: dict = field(default_factory=dict)  # ring slot -> released_seq
    records_released: int = 0
    batches: int = 0
    lost_seen: dict = field(default_factory=dict)


class _Domain:
    def __init__(self, name: str, capacity: int, max_rings: int, max_consumers: int, pid: int) -> None:
        self.name = name
        self.capacity = capacity
        self.cap_records = capacity // _STRIDE
        self.max_rings = max_rings
        self.max_consumers = max_consumers
        self.pid = pid
        self.rings: list[_Ring] = []
        self.consumers: list[_Consumer] = []
        self.grace_s = 10.0

    def step(self, t: float, dt: float) -> None:
        for r in self.rings:
            if r.state != RING_ACTIVE:
                # a closed ring: its consumers read what is left (nothing more comes)
                for c in self.consumers:
                    if c.state == CONS_ACTIVE and r.slot in c.released and c.released[r.slot] < r.committed:
                        stopped = c.heartbeat_stops_at is not None and t >= c.heartbeat_stops_at
                        n = 0 if stopped else min(r.committed - c.released[r.slot], int(c.speed(t) * dt))
                        c.released[r.slot] += n
                        c.records_released += n
                continue
            active = [c for c in self.consumers if c.state == CONS_ACTIVE]
            for c in active:
                c.released.setdefault(r.slot, r.committed)
            # the producer first: what the slowest consumer holds bounds it
            floor = min((c.released[r.slot] for c in active), default=r.committed)
            free = self.cap_records - (r.committed - floor)
            rate = r.rate(t)
            want = int(rate * dt)
            took = max(min(want, free), 0)
            if took < want:
                r.full_events += 1
            r.committed += took
            if took:
                r.commits.append((r.committed, t))
            r.dropped += want - took
            r.high_water = max(r.high_water, (r.committed - floor) * _STRIDE)
            # then the consumers, each a little behind (its processing latency)
            for c in active:
                pos = c.released[r.slot]
                stopped = c.heartbeat_stops_at is not None and t >= c.heartbeat_stops_at
                can = 0 if stopped else int(c.speed(t) * dt)
                behind = int(rate * c.latency_s)
                n = max(min(r.committed - behind - pos, can), 0)
                if took < want:
                    c.lost_seen[r.slot] = c.lost_seen.get(r.slot, 0) + (want - took)
                c.released[r.slot] = pos + n
                c.records_released += n
                c.batches += (n + 255) // 256
                # libfips evicts a dead consumer that holds a full ring past the grace period
                if (stopped and took < want and c.heartbeat_stops_at is not None
                        and t - c.heartbeat_stops_at > self.grace_s):
                    c.state = CONS_EVICTED
                    c.evicted_at = t
            if r.closes_at is not None and t >= r.closes_at:
                r.state = RING_CLOSED

    def snapshot(self, t: float) -> DomainSnapshot:
        rings, cons, pos = empty_arrays(self.max_rings, self.max_consumers)
        mono = EPOCH_MONO_NS + int(round(t * 1e9))
        real = EPOCH_REALTIME_NS + int(round(t * 1e9))
        active = [c for c in self.consumers if c.state == CONS_ACTIVE]
        for r in self.rings:
            row = rings[r.slot]
            floor_seq = min((c.released.get(r.slot, r.committed) for c in active), default=r.committed)
            row["state"] = r.state
            row["generation"] = r.generation
            row["pid"] = r.pid
            row["tid"] = r.tid
            row["thread_name"] = r.name.encode()[:31]
            row["head"] = r.committed * _STRIDE
            row["reserved"] = r.committed * _STRIDE + (_STRIDE if r.state == RING_ACTIVE and r.slot % 2 else 0)
            row["floor"] = floor_seq * _STRIDE
            row["floor_seq"] = floor_seq
            row["records_committed"] = r.committed
            row["bytes_committed"] = r.committed * _PAYLOAD
            row["records_dropped"] = r.dropped
            row["bytes_dropped"] = r.dropped * _PAYLOAD
            row["full_events"] = r.full_events
            row["high_water_bytes"] = r.high_water
            row["last_commit_ns"] = real - 1_000_000 if r.committed else 0
            row["created_ns"] = EPOCH_REALTIME_NS - 3_600_000_000_000
            row["closed_ns"] = real if r.state == RING_CLOSED else 0
        for c in self.consumers:
            row = cons[c.slot]
            row["state"] = c.state
            row["generation"] = 1
            row["pid"] = c.pid
            row["readers"] = c.readers
            row["name"] = c.name.encode()[:63]
            hb = mono - 150_000_000
            if c.heartbeat_stops_at is not None and t > c.heartbeat_stops_at:
                hb = EPOCH_MONO_NS + int(c.heartbeat_stops_at * 1e9)
            row["heartbeat_mono_ns"] = hb
            row["registered_ns"] = EPOCH_REALTIME_NS - 3_000_000_000_000
            row["records_released"] = c.records_released
            row["batches_released"] = c.batches
            if c.state == CONS_EVICTED:
                at = c.evicted_at if c.evicted_at is not None else -590.0
                if c.heartbeat_stops_at is None:
                    row["heartbeat_mono_ns"] = EPOCH_MONO_NS + int((at - 10) * 1e9)
                row["evicted_ns"] = EPOCH_REALTIME_NS + int(at * 1e9)
            for r in self.rings:
                seq = c.released.get(r.slot, r.committed)
                p = pos[c.slot, r.slot]
                p["released_seq"] = seq
                p["released"] = seq * _STRIDE
                p["records_released"] = seq
                p["lost_seen"] = c.lost_seen.get(r.slot, 0)
                written = r.commit_time(seq) if c.state == CONS_ACTIVE and seq < r.committed else None
                if written is not None:
                    p[OLDEST_TS_FIELD] = EPOCH_REALTIME_NS + int(round(written * 1e9))
        return domain_snapshot(
            self.name,
            rings,
            cons,
            pos,
            taken_mono_ns=mono,
            taken_realtime_ns=real,
            ring_capacity=self.capacity,
            creator_pid=self.pid,
            grace_ns=int(self.grace_s * 1e9),
        )


def _wave(base: float, amp: float, period: float, phase: float = 0.0):
    return lambda t: base + amp * math.sin(2 * math.pi * t / period + phase)


def demo_samples(n: int = 90, interval_s: float = 1.0, *, hostile: bool = False) -> list[RawSample]:
    """``n`` raw samples, ``interval_s`` apart, of the simulated host (see module doc)."""
    named = _Domain("named", 16 << 20, 64, 8, pid=4242)
    for i in range(4):
        named.rings.append(
            _Ring(i, 4242, 4250 + i, f"isc-net-{i:04d}", _wave(9000 + 1500 * i, 2500, 37 + 5 * i, i))
        )
    # archiver: keeps up at first, then slows down (ring fills, drops), then recovers
    named.consumers.append(_Consumer(0, "crowdsec", 5100, lambda t: 60000, readers=4))
    named.consumers.append(
        _Consumer(1, "archiver", 5200, lambda t: 60000 if t < 25 or t >= 70 else 4000, readers=2, latency_s=0.5)
    )
    named.consumers.append(_Consumer(2, "forwarder", 5300, lambda t: 60000, heartbeat_stops_at=50.0))
    named.consumers.append(_Consumer(3, "fail2ban", 5400, lambda t: 0, state=CONS_EVICTED))

    nginx = _Domain("nginx", 4 << 20, 32, 4, pid=3100)
    nginx.rings.append(_Ring(0, 3100, 3101, "nginx: worker process", _wave(1800, 600, 23)))
    nginx.rings.append(_Ring(1, 3100, 3102, "nginx: worker process", _wave(700, 300, 17), closes_at=40.0))
    nginx.consumers.append(_Consumer(0, "crowdsec", 5100, lambda t: 60000))
    if hostile:
        nginx.rings.append(_Ring(2, 6666, 6667, HOSTILE_THREAD, lambda t: 50))
        nginx.consumers.append(_Consumer(1, HOSTILE_CONSUMER, 6668, lambda t: 60000))

    out = []
    for k in range(n):
        t = k * interval_s
        if k:
            for d in (named, nginx):
                d.step(t, interval_s)
        out.append(raw_sample(t, [named.snapshot(t), nginx.snapshot(t)]))
    return out


def many_rings_samples(n_rings: int = 1024, n: int = 3, *, n_consumers: int = 2, seed: int = 7) -> list[RawSample]:
    """One domain ``bench`` with ``n_rings`` busy rings and ``n_consumers``
    consumers, ``n`` samples one second apart (vectorised; for benchmarks)."""
    rng = np.random.default_rng(seed)
    rate = rng.integers(100, 20000, n_rings)
    drops = np.where(rng.random(n_rings) < 0.1, rng.integers(1, 500, n_rings), 0)
    out = []
    for k in range(n):
        rings, cons, pos = empty_arrays(n_rings, max(n_consumers, 1))
        committed = (rate * (k + 10)).astype(np.uint64)
        rings["state"] = RING_ACTIVE
        rings["generation"] = 1
        rings["pid"] = 1000 + np.arange(n_rings) // 8
        rings["tid"] = 20000 + np.arange(n_rings)
        rings["thread_name"] = [f"worker-{i:04d}".encode() for i in range(n_rings)]
        rings["head"] = committed * _STRIDE
        rings["reserved"] = committed * _STRIDE
        rings["records_committed"] = committed
        rings["bytes_committed"] = committed * _PAYLOAD
        rings["records_dropped"] = (drops * (k + 1)).astype(np.uint64)
        rings["bytes_dropped"] = rings["records_dropped"] * _PAYLOAD
        rings["last_commit_ns"] = EPOCH_REALTIME_NS + k * 1_000_000_000
        for c in range(n_consumers):
            lag = (rng.integers(0, 2000, n_rings) * (c + 1)).astype(np.uint64)
            lag = np.minimum(lag, committed)
            cons[c]["state"] = CONS_ACTIVE
            cons[c]["generation"] = 1
            cons[c]["pid"] = 9000 + c
            cons[c]["name"] = f"consumer-{c}".encode()
            cons[c]["heartbeat_mono_ns"] = EPOCH_MONO_NS + k * 1_000_000_000
            cons[c]["records_released"] = int((committed - lag).sum())
            pos[c]["released_seq"] = committed - lag
            pos[c]["released"] = (committed - lag) * _STRIDE
            pos[c]["records_released"] = committed - lag
            # a constant rate: the oldest unreleased record was written lag / rate seconds ago
            age_ns = (lag.astype(np.float64) / rate * 1e9).astype(np.uint64)
            pos[c][OLDEST_TS_FIELD] = np.where(lag > 0, EPOCH_REALTIME_NS + k * 1_000_000_000 - age_ns, 0)
        rings["floor"] = pos["released"][:n_consumers].min(axis=0) if n_consumers else rings["head"]
        rings["high_water_bytes"] = rings["head"] - rings["floor"]
        snap = domain_snapshot(
            "bench", rings, cons, pos, taken_mono_ns=EPOCH_MONO_NS + k * 1_000_000_000,
            taken_realtime_ns=EPOCH_REALTIME_NS + k * 1_000_000_000, ring_capacity=1 << 20,
        )
        out.append(raw_sample(float(k), [snap]))
    return out


def many_domains_samples(n_domains: int = 8, rings_per_domain: int = 3, n: int = 12) -> list[RawSample]:
    """``n`` samples one second apart of ``n_domains`` domains ``dom-0`` ... with ``rings_per_domain`` rings each;
    domain k is the busier the smaller k; every process (pid 2000 + ring // 2, counting the rings of
    all domains in order) holds two rings, some of them in two domains; the odd domains' consumer is
    slower than their producers, so their rings fill and drop records; the last ring of ``dom-1``
    closes at t = 4 s."""
    doms = []
    g = 0
    for k in range(n_domains):
        slow = k % 2 == 1
        d = _Domain(f"dom-{k}", 64 << 10 if slow else 4 << 20, 16, 2, pid=1900 + k)
        for r in range(rings_per_domain):
            base = 1000.0 * (n_domains - k) + 100.0 * r
            d.rings.append(_Ring(r, 2000 + g // 2, 3000 + g, f"dom{k}-worker-{r}",
                                 _wave(base, base / 5, 7 + r + k, k),
                                 closes_at=4.0 if (k == 1 and r == rings_per_domain - 1) else None))
            g += 1
        d.consumers.append(_Consumer(0, "reader", 5000 + k, (lambda t: 300.0) if slow else (lambda t: 1e6)))
        doms.append(d)
    out = []
    for i in range(n):
        t = float(i)
        if i:
            for d in doms:
                d.step(t, 1.0)
        out.append(raw_sample(t, [d.snapshot(t) for d in doms]))
    return out


def backend_samples(n: int = 3, t0_ns: int = 1_000_000_000_000) -> list[BackendsSample]:
    """Deterministic samples one second apart (tests, screenshots): a tailer
    falling behind, a syslog socket with a blocked sender, UDP drops, audit
    lost, an rsyslog queue discarding, and one hostile process name."""
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


def fipsipc_samples(samples: list[RawSample]) -> list[FipsIpcSample]:
    """FIPS-IPC prototype segments beside ``samples`` (same clocks): ``/run/bind/fips_buf.key``, 16 rings of 4096
    slots whose reader was killed (every ring 4090 slots behind, the writer waiting, one process gone), and
    ``/run/tap/fips_buf.key``, 2 OVERWRITE rings of 64 slots whose writer laps its stuck reader (50 slots a
    second)."""
    from fipstop.probes.fipsipc import FipsIpcSegment, SysvShm
    from fipstop.probes.fipsipc_layout import Layout, Positions

    def seg(shmid: int, name: str, t: int, *, rings: int, exp: int, overwrite: bool, nattch: int) -> FipsIpcSegment:
        lay = Layout(1, 3, 0, rings, 2, 16, 1, 1, exp, 1 if overwrite else 0, 254, 1024, 200, 120, 128, b"")
        n = 1 << exp
        if overwrite:
            w = np.full(rings, (50 * t) % n, dtype=np.uint32)
            r = np.zeros((2, rings), dtype=np.uint32)
        else:
            w = np.full(rings, n - 6, dtype=np.uint32)
            r = np.zeros((2, rings), dtype=np.uint32)
        pos = Positions(np.ones(rings, dtype=np.uint8), w, w, r, r, np.array([16, 0], dtype=np.uint16))
        shm = SysvShm(0x0100_0000 + shmid, shmid, 0o644, 1, 4242, 4300, nattch, 0, 0, 0, 0)
        return FipsIpcSegment(shm, lay, pos, (name,))

    return [FipsIpcSample(s.taken_mono_ns, s.taken_realtime_ns,
                          (seg(7, "/run/bind/fips_buf.key", i, rings=16, exp=12, overwrite=False, nattch=1),
                           seg(9, "/run/tap/fips_buf.key", i, rings=2, exp=6, overwrite=True, nattch=2)))
            for i, s in enumerate(samples)]
