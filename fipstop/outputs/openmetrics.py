"""Snapshots in the Prometheus text format (0.0.4) and in OpenMetrics 1.0.

Used by ``fipstop serve`` (a live /metrics endpoint: the format is
negotiated from the scraper's ``Accept`` header exactly as prometheus_client
does, :func:`choose_format`) and ``fipstop export --format openmetrics``
(one exposition per recorded frame, with timestamps).

Naming follows the Prometheus conventions: every metric is prefixed
``fips_``, counters end in ``_total``, units are in the name and are base
units (``_bytes``, ``_seconds``, ``_ratio`` for 0-1 fractions).  The two
formats differ where the formats do: OpenMetrics declares a counter without
its ``_total`` and has ``info``/``stateset`` types and ``# UNIT``; the text
format declares ``name_total`` counters, exposes info and stateset families
as gauges (as prometheus_client does), and has millisecond timestamps.

Label cardinality: series are keyed by what stays when a process restarts,
``domain`` and ``ring`` (the slot) for rings, ``domain`` and ``consumer``
(its registered name) for consumers; the pid, thread id and thread name are
on ``fips_ring_info`` / ``fips_consumer_info`` (value 1), to be joined when
wanted (``fips_ring_records_total * on(domain, ring) group_left(thread)
fips_ring_info``).

Unknown is not a number: a consumer's lag in seconds is NaN while it is
unknown (lag, but nothing committed to measure it by); a quantity that does
not apply (no active consumer on a ring) has no sample.

Thread and consumer names come from other processes: they are made printable
with :func:`fipstop.textsafe.escape_bytes` and then escaped for label values
(backslash, double quote, newline), so no name can break the exposition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fipstop.analysis.check import Inspection
from fipstop.model.backends import BackendsView
from fipstop.model.bans import TTB_EDGES_NS, BanStats
from fipstop.model.fipsipc import FipsIpcView
from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.outputs.fipsipc import fipsipc_metrics
from fipstop.ring import RingState
from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["CONTENT_TYPE", "CONTENT_TYPES", "OPENMETRICS", "TEXT", "Family", "Timeline", "choose_format", "encode",
           "families", "inspection_families", "render"]

TEXT, OPENMETRICS = "text", "openmetrics"
CONTENT_TYPES = {TEXT: "text/plain; version=0.0.4; charset=utf-8",
                 OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8"}
CONTENT_TYPE = CONTENT_TYPES[OPENMETRICS]


def _version(params: list[str]) -> tuple[int, ...] | None:
    for p in params:
        k, _, v = p.partition("=")
        if k.strip() == "version":
            try:
                return tuple(int(x) for x in v.strip().split("."))
            except ValueError:
                return (0,)
    return None


def choose_format(accept: str | None) -> str:
    """prometheus_client's rule (``exposition.choose_encoder``): OpenMetrics
    for the first ``application/openmetrics-text`` the Accept header lists
    with no version or version 1.0.0 or later (older drafts are passed over),
    else the text format 0.0.4.  Quality values are ignored, as there."""
    for accepted in (accept or "").split(","):
        mime, *params = accepted.split(";")
        if mime.strip() == "application/openmetrics-text":
            v = _version(params)
            if v is None or v >= (1, 0, 0):
                return OPENMETRICS
    return TEXT


def _label(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):
        v = escape_bytes(bytes(v).split(b"\0", 1)[0])
    else:
        v = escape_text(str(v))
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(d: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in d.items()) + "}" if d else ""


def _num(x: float | int) -> str:
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


#: sample-name suffix each type adds (OpenMetrics declares the family without it)
_SUFFIX = {"counter": "_total", "info": "_info"}


class Family:
    """One metric family: ``name`` as OpenMetrics declares it (counters
    without ``_total``, info without ``_info``)."""

    def __init__(self, name: str, kind: str, help_: str, unit: str = "") -> None:
        if unit and not name.endswith("_" + unit):
            raise ValueError(f"{name}: a metric with unit {unit} must end in _{unit}")
        self.name, self.kind, self.help, self.unit = name, kind, help_, unit
        self.samples: list[tuple[str, Mapping[str, Any], float | int]] = []

    def add(self, labels: Mapping[str, Any], value: float | int, suffix: str | None = None) -> None:
        self.samples.append((_SUFFIX.get(self.kind, "") if suffix is None else suffix, labels, value))

    def lines(self, fmt: str, ts: str) -> Iterable[str]:
        if not self.samples:
            return
        if fmt == OPENMETRICS:
            yield f"# TYPE {self.name} {self.kind}"
            if self.unit:
                yield f"# UNIT {self.name} {self.unit}"
            yield f"# HELP {self.name} {self.help}"
        else:
            name = self.name + _SUFFIX.get(self.kind, "")
            kind = {"info": "gauge", "stateset": "gauge"}.get(self.kind, self.kind)
            yield f"# HELP {name} {self.help}"
            yield f"# TYPE {name} {kind}"
        for suffix, labels, value in self.samples:
            yield f"{self.name}{suffix}{_labels(labels)} {_num(value)}{ts}"


def encode(fams: Iterable[Family], fmt: str, *, timestamp_ns: int | None = None, eof: bool = True) -> str:
    """The exposition of ``fams`` in ``fmt`` (``timestamp_ns``: on every sample)."""
    if fmt not in CONTENT_TYPES:
        raise ValueError(f"unknown exposition format {fmt!r}")
    ts = ""
    if timestamp_ns is not None:
        ts = f" {timestamp_ns / 1e9:.3f}" if fmt == OPENMETRICS else f" {timestamp_ns // 1_000_000}"
    out: list[str] = []
    for f in fams:
        out.extend(f.lines(fmt, ts))
    if eof and fmt == OPENMETRICS:
        out.append("# EOF")
    return "\n".join(out) + "\n" if out else ""


class Timeline:
    """Many snapshots as one OpenMetrics exposition with timestamps (``fipstop export --format openmetrics``).

    The format wants each family once, each Metric (a label set; for a
    histogram or stateset, the label set without ``le`` or the state label)
    with its points consecutive and in time order: a recording gives them
    frame by frame, so the sample lines are spooled to a temporary SQLite
    database on disk (bounded memory for any length of recording) and read
    back grouped.  prometheus_client's strict parser and ``promtool tsdb
    create-blocks-from openmetrics`` read the result.
    """

    def __init__(self) -> None:
        import sqlite3

        self._db = sqlite3.connect("")  # "" is a private temporary database on disk, removed on close
        self._db.execute("CREATE TABLE line (fam INTEGER, series INTEGER, text TEXT)")
        self._families: dict[str, tuple[int, list[str]]] = {}
        self._series: dict[tuple[int, str], int] = {}

    def add(self, snap: Snapshot) -> None:
        ts = f" {snap.taken_realtime_ns / 1e9:.3f}"
        rows: list[tuple[int, int, str]] = []
        for f in families(snap):
            if not f.samples:
                continue
            known = self._families.get(f.name)
            if known is None:
                header = list(f.lines(OPENMETRICS, ""))[: 3 if f.unit else 2]
                known = self._families[f.name] = (len(self._families), header)
            fam = known[0]
            for suffix, labels, value in f.samples:
                key = _labels({k: v for k, v in labels.items() if k not in ("le", f.name)})
                series = self._series.setdefault((fam, key), len(self._series))
                rows.append((fam, series, f"{f.name}{suffix}{_labels(labels)} {_num(value)}{ts}"))
        self._db.executemany("INSERT INTO line VALUES (?, ?, ?)", rows)

    def write(self, out: Any) -> None:
        """Every family, grouped, then ``# EOF``; closes the spool."""
        try:
            headers = {fam: header for fam, header in self._families.values()}
            current = -1
            for fam, text in self._db.execute("SELECT fam, text FROM line ORDER BY fam, series, rowid"):
                if fam != current:
                    out.write("\n".join(headers[fam]) + "\n")
                    current = fam
                out.write(text + "\n")
            out.write("# EOF\n")
        finally:
            self._db.close()


def render(snap: Snapshot, *, fmt: str = OPENMETRICS, timestamp: bool = False, eof: bool = True,
           pid_alive: Callable[[int], bool] | None = None) -> str:
    """One exposition of ``snap`` (``timestamp``: the sample time on each line)."""
    return encode(families(snap, pid_alive=pid_alive), fmt, timestamp_ns=snap.taken_realtime_ns if timestamp
                  else None, eof=eof)


def families(snap: Snapshot, *, pid_alive: Callable[[int], bool] | None = None) -> list[Family]:
    """Every family of one snapshot; ``pid_alive`` (live only: a recording
    cannot know) adds whether each open ring's producer process still exists."""
    F = Family
    fam = {
        "ring_info": F("fips_ring", "info", "The producer thread behind a ring slot (pid, tid, thread name)."),
        "records": F("fips_ring_records", "counter", "Records committed into the ring."),
        "bytes": F("fips_ring_committed_bytes", "counter", "Bytes committed into the ring.", "bytes"),
        "drops": F("fips_ring_dropped_records", "counter", "Records dropped because the ring was full."),
        "drop_bytes": F("fips_ring_dropped_bytes", "counter", "Bytes dropped because the ring was full.", "bytes"),
        "full": F("fips_ring_full_events", "counter", "Times the producer found the ring full."),
        "fill": F("fips_ring_fill_ratio", "gauge", "Share of the ring holding records some consumer still needs.",
                  "ratio"),
        "hw": F("fips_ring_high_water_ratio", "gauge", "Highest fill seen (sampled by the producer).", "ratio"),
        "cap": F("fips_ring_capacity_bytes", "gauge", "Ring capacity.", "bytes"),
        "claimed": F("fips_ring_claimed_bytes", "gauge", "Bytes claimed by the producer, not committed yet.",
                     "bytes"),
        "active": F("fips_ring_open", "gauge", "1 while the producer thread's ring is open, 0 once closed."),
        "producer": F("fips_ring_producer_alive", "gauge", "1 while the process of an open ring's producer exists "
                      "(seen from the exporter's pid namespace), 0 when it is gone with the ring still open."),
        "commit_age": F("fips_ring_last_commit_age_seconds", "gauge", "Time since the ring's last commit.",
                        "seconds"),
        "ring_lag": F("fips_ring_slowest_lag_records", "gauge", "Records the slowest active consumer of the ring "
                      "has not released."),
        "ring_lag_s": F("fips_ring_slowest_lag_seconds", "gauge", "Lag of the slowest active consumer of the ring, "
                        "in seconds (NaN: unknown).", "seconds"),
        "cons_info": F("fips_consumer", "info", "A registered consumer: its slot and pid."),
        "released": F("fips_consumer_released_records", "counter", "Records the consumer released."),
        "lost": F("fips_consumer_lost_records", "counter", "Records the consumer can prove it lost (dropped "
                  "before it read them)."),
        "lag": F("fips_consumer_lag_records", "gauge", "Largest lag of the consumer over the rings, in records."),
        "lag_s": F("fips_consumer_lag_seconds", "gauge", "Age of the oldest record the consumer has not "
                   "released, largest over the rings (NaN: unknown).", "seconds"),
        "hb": F("fips_consumer_heartbeat_age_seconds", "gauge", "Age of the consumer's heartbeat.", "seconds"),
        "up": F("fips_consumer_up", "gauge", "1 when the consumer is alive (registered, recent heartbeat)."),
        "health": F("fips_consumer_health", "stateset", "The consumer's state."),
        "dom": F("fips_domain_rings", "gauge", "Rings in use in the domain."),
        "dom_cons": F("fips_domain_consumers", "gauge", "Consumers registered in the domain."),
        "no_ring": F("fips_domain_no_ring_records", "counter", "Records dropped because the domain had no ring for "
                     "their thread (the ring table was full: more producer threads than rings); not in "
                     "fips_ring_dropped_records. No sample while unknown (a recording made before it was kept)."),
        "dom_err": F("fips_domain_error", "gauge", "1 for a domain file that cannot be read (the reason is the "
                     "label)."),
    }
    names = [d.name for d in snap.domains]
    for r in snap.rings:
        key = {"domain": names[int(r["domain"])], "ring": int(r["ring"])}
        is_open = int(r["state"]) == RingState.ACTIVE
        fam["ring_info"].add({**key, "pid": int(r["pid"]), "tid": int(r["tid"]), "thread": bytes(r["thread_name"])},
                             1)
        fam["records"].add(key, int(r["records_committed"]))
        fam["bytes"].add(key, int(r["bytes_committed"]))
        fam["drops"].add(key, int(r["records_dropped"]))
        fam["drop_bytes"].add(key, int(r["bytes_dropped"]))
        fam["full"].add(key, int(r["full_events"]))
        fam["fill"].add(key, float(r["fill_pct"]) / 100.0)
        fam["hw"].add(key, float(r["high_water_pct"]) / 100.0)
        fam["cap"].add(key, int(r["capacity_bytes"]))
        fam["claimed"].add(key, int(r["claimed_bytes"]))
        fam["active"].add(key, 1 if is_open else 0)
        if pid_alive is not None and is_open:
            fam["producer"].add(key, 1 if pid_alive(int(r["pid"])) else 0)
        if int(r["last_commit_age_ns"]) >= 0:
            fam["commit_age"].add(key, int(r["last_commit_age_ns"]) / 1e9)
        if int(r["slowest_lag_records"]) >= 0:
            fam["ring_lag"].add(key, int(r["slowest_lag_records"]))
            fam["ring_lag_s"].add(key, float(r["slowest_lag_s"]))
    # one series per (domain, consumer name): a name registered twice (a closed slot, a new one) shows the newest
    newest: dict[tuple[str, str], Any] = {}
    for c in snap.consumers:
        k = (names[int(c["domain"])], escape_bytes(bytes(c["name"]).split(b"\0", 1)[0]))
        old = newest.get(k)
        if old is None or int(c["registered_realtime_ns"]) >= int(old["registered_realtime_ns"]):
            newest[k] = c
    for (dom, cname), c in sorted(newest.items()):
        key = {"domain": dom, "consumer": cname}
        h = Health(int(c["health"]))
        fam["cons_info"].add({**key, "slot": int(c["consumer"]), "pid": int(c["pid"])}, 1)
        fam["released"].add(key, int(c["records_released"]))
        fam["lost"].add(key, int(c["lost_seen"]))
        if int(c["lag_max_records"]) >= 0:
            fam["lag"].add(key, int(c["lag_max_records"]))
            fam["lag_s"].add(key, float(c["lag_max_s"]))
        fam["hb"].add(key, max(int(c["heartbeat_age_ns"]), 0) / 1e9)
        fam["up"].add(key, 1 if h == Health.ALIVE else 0)
        for state in Health:
            fam["health"].add({**key, "fips_consumer_health": state.label}, 1 if state == h else 0, "")
    for d in snap.domains:
        fam["dom"].add({"domain": d.name}, int(d.rings_in_use))
        fam["dom_cons"].add({"domain": d.name}, int(d.consumers_registered))
        if d.records_no_ring is not None:
            fam["no_ring"].add({"domain": d.name}, int(d.records_no_ring))
    for e in snap.errors:
        fam["dom_err"].add({"domain": e.domain, "reason": e.reason[:200]}, 1)
    if isinstance(snap.fipsipc, FipsIpcView):  # the FIPS paper's prototype rings (`--fipsipc`)
        for name, kind, help_, lab, value in fipsipc_metrics(snap.fipsipc):
            if name not in fam:
                fam[name] = Family(name, kind, help_)
            fam[name].add(lab, value)
    out = list(fam.values())
    if snap.bans is not None:
        out += _ban_families(snap.bans)
    if isinstance(snap.backends, BackendsView):
        out += _backend_families(snap.backends)
    return out


def inspection_families(ins: Inspection) -> list[Family]:
    """What :func:`fipstop.analysis.check.inspect_host` saw: group/world-writable domain files, and per open ring
    whether its records walk from the floor to the head (0: a torn or corrupt record its consumers cannot pass)."""
    writable = Family("fips_domain_writable_by_others", "gauge", "1 when the domain file is group- or "
                      "world-writable (another user can inject records).")
    valid = Family("fips_ring_contents_valid", "gauge", "1 when the open ring's records walk from its floor to its "
                   "head, 0 when the format breaks (its consumers stop there).")
    for dom, mode in ins.modes:
        writable.add({"domain": dom}, 1 if mode & 0o022 else 0)
    bad = {(d, r) for d, r, _ in ins.contents}
    for dom, ring in ins.walked:
        valid.add({"domain": dom, "ring": ring}, 0 if (dom, ring) in bad else 1)
    return [writable, valid]


def _ban_families(bans: BanStats) -> list[Family]:
    F = Family
    up = F("fips_ban_source_up", "gauge", "1 when the ban source (fipstop-ips, fail2ban) could be read.")
    total = F("fips_bans", "counter", "Bans the source made.")
    unbans = F("fips_unbans", "counter", "Bans the source lifted.")
    failed = F("fips_ban_actions_failed", "counter", "Ban actions that did not succeed.")
    active = F("fips_bans_active", "gauge", "Bans in force.")
    seen = F("fips_ban_source_records", "counter", "Ban-event records the source published that fipstop read.")
    missed = F("fips_ban_source_missed_records", "counter", "Ban-event records fipstop missed or could not parse.")
    ttb = F("fips_ban_time_to_ban_seconds", "histogram", "Time from the first offending record to the ban "
            "(buckets only).",
            "seconds")
    jail_bans = F("fips_jail_bans", "counter", "Bans the jail made.")
    jail_active = F("fips_jail_bans_active", "gauge", "Bans of the jail in force.")
    jail_failed = F("fips_jail_ban_actions_failed", "counter", "Ban actions of the jail that did not succeed.")
    for s in bans.sources:
        key = {"source": s.source}
        up.add(key, 0 if s.unavailable else 1)
        if s.unavailable:
            continue
        total.add(key, int(s.bans_total))
        unbans.add(key, int(s.unbans_total))
        failed.add(key, int(s.failed_total))
        active.add(key, int(s.active))
        seen.add(key, int(s.records_seen))
        missed.add(key, int(s.missed_records) + int(s.bad_records))
        cum = 0
        for edge, n in zip((*TTB_EDGES_NS, None), s.ttb_hist, strict=True):
            cum += int(n)
            ttb.add({**key, "le": "+Inf" if edge is None else _num(edge / 1e9)}, cum, "_bucket")
        # no _sum (the fold keeps the buckets only) and so no _count: OpenMetrics wants both or neither; the
        # +Inf bucket is the count
    for j in bans.jails:
        key = {"source": j.source, "jail": j.jail}
        jail_bans.add(key, int(j.bans))
        jail_active.add(key, int(j.active))
        jail_failed.add(key, int(j.failed))
    return [up, total, unbans, failed, active, seen, missed, ttb, jail_bans, jail_active, jail_failed]


def _backend_families(view: BackendsView) -> list[Family]:
    F = Family
    audit_lost = F("fips_backend_audit_lost", "counter", "Audit records the kernel lost (auditctl -s lost).")
    audit_backlog = F("fips_backend_audit_backlog", "gauge", "Audit records waiting in the kernel's backlog.")
    udp_rcvbuf = F("fips_backend_udp_receive_buffer_errors", "counter", "UDP datagrams dropped because a "
                   "receive buffer was full (udp and udp6, /proc/net/snmp RcvbufErrors).")
    udp_in = F("fips_backend_udp_in_errors", "counter", "UDP datagrams that could not be delivered (InErrors).")
    arp = F("fips_backend_arp_unresolved_discards", "counter", "Packets dropped waiting for ARP resolution.")
    udp_drops = F("fips_backend_udp_socket_drops", "counter", "Datagrams a watched UDP socket dropped.")
    udp_queue = F("fips_backend_udp_socket_queue_bytes", "gauge", "Bytes waiting in a watched UDP socket.", "bytes")
    sock_drops = F("fips_backend_syslog_socket_drops", "counter", "Datagrams a syslog socket dropped.")
    sock_queue = F("fips_backend_syslog_socket_queue_bytes", "gauge", "Bytes waiting in a syslog socket.", "bytes")
    rs_discard = F("fips_backend_rsyslog_queue_discarded", "counter", "Messages an rsyslog queue discarded (full "
                   "or not-fit).")
    rs_size = F("fips_backend_rsyslog_queue_size", "gauge", "Messages in an rsyslog queue.")
    if view.audit is not None and view.audit.ok:
        audit_lost.add({}, int(view.audit.lost))
        audit_backlog.add({}, int(view.audit.backlog))
    if view.net is not None and view.net.ok:
        udp_rcvbuf.add({}, int(view.net.rcvbuf_errors))
        udp_in.add({}, int(view.net.in_errors))
        arp.add({}, int(view.net.arp_unresolved_discards))
        seen: set[str] = set()
        for u in view.net.sockets:
            if u.local in seen:
                continue
            seen.add(u.local)
            udp_drops.add({"local": u.local}, int(u.drops))
            udp_queue.add({"local": u.local}, int(u.rx_queue_bytes))
    paths: set[str] = set()
    for s in view.sockets:
        if s.ok and s.path not in paths:
            paths.add(s.path)
            sock_drops.add({"path": s.path}, int(s.drops))
            if s.queue_bytes >= 0:
                sock_queue.add({"path": s.path}, int(s.queue_bytes))
    if view.rsyslog is not None and view.rsyslog.ok:
        queues: set[str] = set()
        for q in view.rsyslog.queues:
            if q.name in queues:
                continue
            queues.add(q.name)
            rs_discard.add({"queue": q.name}, int(q.discarded_full) + int(q.discarded_nf))
            rs_size.add({"queue": q.name}, int(q.size))
    return [audit_lost, audit_backlog, udp_rcvbuf, udp_in, arp, udp_drops, udp_queue, sock_drops, sock_queue,
            rs_discard, rs_size]
