"""``fipstop check``: a Nagios / Icinga plugin for FIPS rings (and the other
logging backends), and a Prometheus textfile writer.

Plugin semantics (Nagios plugin guidelines): exit 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN; one status line, performance data after ``|`` as
``'label'=value[UOM];warn;crit;min;max``; thresholds are Nagios ranges
(:mod:`fipstop.analysis.ranges`: a value equal to a threshold is OK), and the
label set is the same on every run (``U`` for a value not known).  Anything that goes wrong inside
the check itself (no shm dir, a bad option) is UNKNOWN with the reason, never
a traceback and never exit 2 (which would page someone as CRITICAL).

Two frames ``--window`` seconds apart give rates (drops/s, lag in seconds),
derived by the same model as the dashboard (:func:`check_host` polls a live
source; :func:`evaluate` reads the frames and derives nothing).  Checks:

- **header**: every domain file validates (magic, version, sizes: the ring
  probe reports one that does not) -> CRITICAL naming the file and the reason;
- **invariants**: states are known values, the floor and released positions
  are 8-aligned record boundaries, positions and counters agree (floor <= head <= reserved,
  nothing used beyond the capacity, no consumer released past the head or
  past the records committed, counters of the same ring generation never go
  backwards between the two samples) -> CRITICAL;
- **drops**: records dropped because a ring was full, per second;
- **fill**: the fullest ring;
- **lag**: the largest consumer lag, in records and in seconds;
- **consumers**: stale (heartbeat old, not evicted yet) -> WARNING, or
  CRITICAL when it holds a ring above the critical fill; evicted -> WARNING;
- **producers**: a ring still open whose producer process is gone (as seen
  from this pid namespace) -> WARNING;
- **contents**: a ring whose records do not walk from its floor to its head
  (a torn or corrupt record header: its consumers stop there) -> CRITICAL;
- **permissions**: a domain file group- or world-writable (another user can
  inject records the IPS bans on) -> WARNING;
- **backends** (``--backends``): audit ``lost``, UDP receive-buffer drops,
  syslog socket drops, rsyslog discards per second;
- **fipsipc** (``--fipsipc``): the FIPS paper's prototype rings with the same
  thresholds (:mod:`fipstop.analysis.check_fipsipc`).

``--textfile DIR`` writes the report for node_exporter's textfile collector
(:mod:`fipstop.outputs.textfile`).
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field, replace

import numpy as np

from fipstop.analysis.check_fipsipc import check_fipsipc
from fipstop.analysis.levels import CRITICAL, OK, STATUS, UNKNOWN, WARNING, Range, Thresholds, as_range, level
from fipstop.config import ProbeConfig
from fipstop.model.backends import BackendsView
from fipstop.model.fipsipc import FipsIpcView
from fipstop.model.raw import ProbeFailure
from fipstop.model.rings import Health
from fipstop.model.snapshot import Frame
from fipstop.ring import TRUNCATED, ConsumerState, DomainSnapshot, RingState
from fipstop.sources.live import LiveSource, poll_window
from fipstop.sources.probeset import build_probes
from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["CHECK_NAMES", "CRITICAL", "OK", "PERF_LABELS", "STATUS", "UNKNOWN", "WARNING", "CheckConfig", "CheckResult",
           "Inspection", "Perf", "Report", "Thresholds", "check_host", "evaluate", "inspect_host"]

@dataclass(frozen=True)
class CheckResult:
    name: str
    status: int
    message: str


def _fmt(x: float | None) -> str:
    """Plain decimals: some perfdata parsers reject 1e+06."""
    if x is None:
        return ""
    if isinstance(x, float):
        if x == math.inf:
            return ""
        return f"{x:.3f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))
    return str(x)


@dataclass(frozen=True)
class Perf:
    """One performance datum; ``value`` None is unknown (printed ``U``, as the
    guidelines say), so every label is printed on every run (graphs need a
    stable label set)."""

    label: str
    value: float | None
    uom: str = ""
    warn: float | Range | None = None
    crit: float | Range | None = None
    min: float | None = 0
    max: float | None = None

    def text(self) -> str:
        def th(x: float | Range | None) -> str:
            return "" if x is None else str(as_range(x))

        value = "U" if self.value is None or not math.isfinite(self.value) else _fmt(self.value) + self.uom
        return f"'{self.label}'={value};{th(self.warn)};{th(self.crit)};{_fmt(self.min)};{_fmt(self.max)}"

    def json(self) -> dict[str, object]:
        """For ``--json``: the value None when unknown, thresholds as range text."""
        known = self.value is not None and math.isfinite(self.value)
        return {"label": self.label, "value": self.value if known else None, "uom": self.uom,
                "warn": None if self.warn is None else str(as_range(self.warn)),
                "crit": None if self.crit is None else str(as_range(self.crit)), "min": self.min, "max": self.max}


@dataclass(frozen=True)
class Inspection:
    """What :func:`check_host` found beside the frames (the pure
    :func:`evaluate` takes it as given): the domains in the shm dir, each
    domain file's mode, and per open ring the reason its contents do not walk
    (``fips_monitor_tap`` refuses a walk that breaks the format)."""

    present: tuple[str, ...] = ()
    modes: tuple[tuple[str, int], ...] = ()  # (domain, st_mode)
    contents: tuple[tuple[str, int, str], ...] = ()  # (domain, ring, reason)
    walked: tuple[tuple[str, int], ...] = ()  # (domain, ring) of every open ring whose contents were walked


@dataclass
class Report:
    results: list[CheckResult] = field(default_factory=list)
    perf: list[Perf] = field(default_factory=list)

    @property
    def status(self) -> int:
        """CRITICAL > WARNING > UNKNOWN > OK, whatever the order of the results (the Monitoring Plugins'
        ``max_state_alt``): a check that could not tell does not hide one that found trouble."""
        known = [r.status for r in self.results if r.status != UNKNOWN]
        worst = max(known, default=OK)
        if worst == OK and any(r.status == UNKNOWN for r in self.results):
            return UNKNOWN
        return worst

    def add(self, name: str, status: int, message: str) -> None:
        self.results.append(CheckResult(name, status, message))

    def summary(self) -> str:
        bad = [r for r in self.results if r.status != OK]
        order = {CRITICAL: 0, UNKNOWN: 1, WARNING: 2}
        bad.sort(key=lambda r: order.get(r.status, 3))
        if not bad:
            oks = [r.message for r in self.results if r.name == "summary"]
            return oks[0] if oks else "all checks passed"
        return "; ".join(r.message for r in bad[:4]) + (f"; +{len(bad) - 4} more" if len(bad) > 4 else "")

    def status_line(self) -> str:
        perf = " ".join(p.text() for p in self.perf)
        return f"FIPS {STATUS[self.status]} - {self.summary()}" + (f" | {perf}" if perf else "")



def _pid_alive(pid: int, procfs_root: str) -> bool:
    return pid <= 0 or os.path.exists(os.path.join(procfs_root, str(pid)))


_RING_STATES = frozenset(int(x) for x in RingState)
_CONSUMER_STATES = frozenset(int(x) for x in ConsumerState)


def _invariants(d: DomainSnapshot, pd: DomainSnapshot | None) -> list[str]:
    """What is wrong with one domain's positions and counters (the raw sample)."""
    R = d.rings
    cap = int(d.ring_capacity_bytes)
    bad: list[str] = []
    for slot, st in enumerate(R["state"]):
        if int(st) not in _RING_STATES:
            bad.append(f"ring {slot}: unknown state {int(st)}")
    for slot, st in enumerate(d.consumers["state"]):
        if int(st) not in _CONSUMER_STATES:
            bad.append(f"consumer {slot}: unknown state {int(st)}")
    idx = d.active_ring_indices()
    for i in idx:
        r = R[i]
        head, res, floor = int(r["head"]), int(r["reserved"]), int(r["floor"])
        if floor & 7:  # records start 8-aligned: an unaligned floor is no record boundary
            bad.append(f"ring {i}: floor {floor} is not 8-aligned")
        if not floor <= head <= res:
            bad.append(f"ring {i}: floor {floor} <= head {head} <= reserved {res} fails")
        elif head - floor > cap:
            bad.append(f"ring {i}: {head - floor} bytes in use, capacity {cap}")
    act = np.flatnonzero(d.consumers["state"] == ConsumerState.ACTIVE)
    for c in act:
        for i in idx:
            p = d.pos[c, i]
            if int(p["released"]) & 7:
                bad.append(f"consumer {c} released position {int(p['released'])} of ring {i} is not 8-aligned")
            elif int(p["released"]) > int(R[i]["head"]):
                bad.append(f"consumer {c} released past the head of ring {i}")
            elif int(p["released_seq"]) > int(R[i]["records_committed"]):
                bad.append(f"consumer {c} released records ring {i} never committed")
    if pd is not None and pd.created_realtime_ns == d.created_realtime_ns:
        for i in idx:
            a, b = pd.rings[i], R[i]
            if int(a["state"]) != RingState.FREE and int(a["generation"]) == int(b["generation"]):
                for f in ("records_committed", "records_dropped", "head"):
                    if int(b[f]) < int(a[f]):
                        bad.append(f"ring {i}: {f} went backwards ({int(a[f])} -> {int(b[f])})")
    return bad


def _mode_text(mode: int) -> str:
    who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)
    return f"mode {stat.S_IMODE(mode):04o}: {who} can write it"


#: the names of the checks (CheckResult.name), for outputs that need the same set on every run
CHECK_NAMES = ("domains", "header", "invariants", "contents", "permissions", "drops", "fill", "lag", "lag_seconds",
               "consumers", "producers", "backends")

#: the perfdata labels, in the order printed; every run prints all of them
#: (``U`` when unknown), ``backend_losses_per_s`` with --backends
PERF_LABELS = ("drops_per_s", "dropped_total", "fill_max", "lag_max_records", "lag_max_seconds", "consumers_alive",
               "rings")


def evaluate(prev_frame: Frame | None, frame: Frame, th: Thresholds, *, domains: tuple[str, ...] | None = None,
             backends: bool = False, procfs_root: str = "/proc", inspection: Inspection | None = None) -> Report:
    """All checks on the newest frame (its snapshot has rates when it was
    derived against ``prev_frame``, the frame before, which the invariants
    also read); ``backends``: also the other backends' loss counters;
    ``inspection``: what :func:`check_host` saw beside the frames."""
    rep = Report()
    ins = inspection or Inspection()
    perf: dict[str, Perf] = {
        "drops_per_s": Perf("drops_per_s", None, "", th.warn_drops_per_s, th.crit_drops_per_s),
        "dropped_total": Perf("dropped_total", None, "c"),
        "fill_max": Perf("fill_max", None, "%", th.warn_fill_pct, th.crit_fill_pct, 0, 100),
        "lag_max_records": Perf("lag_max_records", None, "", th.warn_lag_records, th.crit_lag_records),
        "lag_max_seconds": Perf("lag_max_seconds", None, "s", th.warn_lag_s, th.crit_lag_s),
        "consumers_alive": Perf("consumers_alive", None),
        "rings": Perf("rings", None),
    }
    if backends:
        perf["backend_losses_per_s"] = Perf("backend_losses_per_s", None, "", th.warn_drops_per_s,
                                            th.crit_drops_per_s)
    try:
        _evaluate(rep, perf, prev_frame, frame, th, domains, backends, procfs_root, ins)
    finally:
        rep.perf.extend(perf.values())
    return rep


def _evaluate(rep: Report, perf: dict[str, Perf], prev_frame: Frame | None, frame: Frame, th: Thresholds,
              domains: tuple[str, ...] | None, backends: bool, procfs_root: str, ins: Inspection) -> None:
    def put(label: str, value: float | None) -> None:
        perf[label] = replace(perf[label], value=value)

    prev = prev_frame.raw.ring if prev_frame is not None else None
    cur = frame.raw.ring
    snap = frame.snapshot
    if cur.unavailable:
        rep.add("domains", UNKNOWN, escape_text(cur.unavailable))
        return
    names = [d.name for d in snap.domains]
    wanted = set(domains or ())
    for e in cur.errors:
        if e.domain in wanted and e.reason == "no such domain":
            continue  # a typo'd --domain: UNKNOWN below, not a broken domain
        if e.reason.startswith(TRUNCATED):
            # shrank under the check's own mapping: what it holds cannot be read, so the
            # check cannot tell (UNKNOWN, the reader survived it); a file found short is CRITICAL
            rep.add("header", UNKNOWN, escape_text(e.reason))
        else:
            rep.add("header", CRITICAL, f"domain {escape_text(e.domain)}: {escape_text(e.reason)}")
    if domains:
        for want in domains:
            if want not in names and not any(e.domain == want and e.reason != "no such domain" for e in cur.errors):
                there = ", ".join(escape_text(n) for n in ins.present[:10]) or "none"
                rep.add("domains", UNKNOWN, f"domain {escape_text(want)} not found in {escape_text(cur.shm_dir)} "
                        f"(domains there: {there})")
    if isinstance(snap.fipsipc, ProbeFailure):
        rep.add("fipsipc", UNKNOWN, f"the FIPS-IPC probe failed: {escape_text(snap.fipsipc.reason)}")
    ipc = snap.fipsipc if isinstance(snap.fipsipc, FipsIpcView) else None
    if ipc is not None:  # `--fipsipc`: the FIPS paper's prototype rings, checked alike
        results, ipc_perf = check_fipsipc(ipc, th)
        for r in results:
            rep.add(*r)
        for p in ipc_perf:
            perf[p[0]] = Perf(*p)
        if not snap.domains and not cur.errors and not domains and (ipc.segments or ipc.rejected):
            if not any(r.status for r in rep.results):
                rep.add("summary", OK, f"{len(ipc.segments)} FIPS-IPC segment(s), no FIPS domain")
            return
    if not snap.domains and not cur.errors and not domains:
        rep.add("domains", UNKNOWN, f"no FIPS domain in {escape_text(cur.shm_dir)}")
        return
    for dname, mode in ins.modes:
        if mode & 0o022:
            rep.add("permissions", WARNING, f"domain {escape_text(dname)} {_mode_text(mode)} (another user can "
                    "inject records or stall the rings)")
    for dname, ring, reason in ins.contents:
        rep.add("contents", CRITICAL, f"domain {escape_text(dname)} ring {ring}: {escape_text(reason)} "
                "(its consumers cannot read past it)")

    prev_by = {d.name: d for d in prev.domains} if prev is not None else {}
    for d in cur.domains:
        bad = _invariants(d, prev_by.get(d.name))
        if bad:
            rep.add("invariants", CRITICAL, f"domain {escape_text(d.name)}: " + "; ".join(bad[:3])
                    + (f" (+{len(bad) - 3})" if len(bad) > 3 else ""))

    rings = snap.rings
    if snap.dt_s > 0:
        # every drop: ring full (per ring) + no ring (per domain: the ring table was full); the no-ring part
        # is unknown only in a recording made before it was kept, then the rate is the rings' alone
        no_ring = [(d.name, d.no_ring_per_s, d.max_rings) for d in snap.domains if d.no_ring_per_s]
        drops = float(snap.totals.drops_per_s) + sum(r for _, r, _ in no_ring)
        st = level(drops, th.warn_drops_per_s, th.crit_drops_per_s)
        if st:
            worst = rings[np.argsort(-rings["drops_per_s"])[:3]]
            who = ", ".join(f"{names[int(r['domain'])]}/{int(r['ring'])} {r['drops_per_s']:.0f}/s"
                            for r in worst if r["drops_per_s"] > 0)
            why = [f"ring full: {escape_text(who)}"] if who else []
            why += [f"no ring: {escape_text(n)} {r:.0f}/s (ring table full, {mr} rings)" for n, r, mr in no_ring[:3]]
            rep.add("drops", st, f"{drops:.0f} records/s dropped ({'; '.join(why)})")
        put("drops_per_s", round(drops, 3))
    dropped = snap.totals.drops_total  # ring full + no ring; U while the no-ring part is unknown
    put("dropped_total", None if dropped is None else int(dropped))
    # fill: of open rings (a closed ring keeps its last records for a consumer to come; it drops nothing)
    open_rows = np.flatnonzero(rings["state"] == RingState.ACTIVE) if rings.size else np.zeros(0, dtype=np.int64)
    if open_rows.size:
        i = int(open_rows[np.argmax(rings["fill_pct"][open_rows])])
        fill = float(rings["fill_pct"][i])
        st = level(fill, th.warn_fill_pct, th.crit_fill_pct)
        if st:
            rep.add("fill", st, f"ring {escape_text(names[int(rings['domain'][i])])}/{int(rings['ring'][i])} "
                    f"{fill:.0f}% full")
        put("fill_max", round(fill, 2))
    # lag
    cons = snap.consumers
    active = cons[cons["health"] != Health.CLOSED] if cons.size else cons
    if active.size:
        lag = active[active["lag_max_records"] >= 0]
        if lag.size:
            j = int(np.argmax(lag["lag_max_records"]))
            lr = int(lag["lag_max_records"][j])
            who = escape_bytes(bytes(lag['name'][j]).split(b'\0', 1)[0])
            st = level(lr, th.warn_lag_records, th.crit_lag_records)
            if st:
                rep.add("lag", st, f"consumer {who} {lr} records behind")
            put("lag_max_records", lr)
            ls = lag["lag_max_s"][np.isfinite(lag["lag_max_s"])]
            if ls.size:
                k = float(ls.max())
                st = level(k, th.warn_lag_s, th.crit_lag_s)
                if st:
                    rep.add("lag_seconds", st, f"a consumer is {k:.1f} s behind")
                put("lag_max_seconds", round(k, 3))
    # consumer health
    crit_fill = as_range(th.crit_fill_pct)
    for c in cons:
        name = escape_bytes(bytes(c["name"]).split(b"\0", 1)[0])
        dom = escape_text(names[int(c["domain"])])
        h = Health(int(c["health"]))
        if h == Health.STALE:
            holds_full = any(
                crit_fill.alerts(float(r["fill_pct"])) and int(r["slowest_consumer"]) == int(c["consumer"])
                for r in rings if int(r["domain"]) == int(c["domain"]))
            age = int(c["heartbeat_age_ns"]) / 1e9
            rep.add("consumers", CRITICAL if holds_full else WARNING,
                    f"consumer {name} ({dom}, pid {int(c['pid'])}) stale: no heartbeat for {age:.1f} s"
                    + (", holding a full ring" if holds_full else ""))
        elif h == Health.EVICTED:
            rep.add("consumers", WARNING, f"consumer {name} ({dom}) was evicted (dead, held a full ring)")
    put("consumers_alive", int(snap.totals.consumers_alive))
    # producers gone with their ring open
    gone = [(names[int(r["domain"])], int(r["ring"]), int(r["pid"])) for r in rings
            if int(r["state"]) == RingState.ACTIVE and not _pid_alive(int(r["pid"]), procfs_root)]
    if gone:
        g = ", ".join(f"{escape_text(dn)}/{ri} pid {pid}" for dn, ri, pid in gone[:3])
        rep.add("producers", WARNING, f"{len(gone)} ring(s) still open whose producer is gone: {g}")
    put("rings", int(snap.totals.rings))
    if backends:
        if isinstance(snap.backends, ProbeFailure):
            rep.add("backends", UNKNOWN, f"the backends probe failed: {escape_text(snap.backends.reason)}")
        elif snap.backends is not None:
            total = _backend_checks(rep, snap.backends, th)
            if total is not None:
                put("backend_losses_per_s", round(total, 3))
    if not any(r.status for r in rep.results):
        rep.add("summary", OK, f"{len(snap.domains)} domain(s), {int(snap.totals.rings)} rings, "
                f"{int(snap.totals.consumers_alive)} consumer(s) alive, no drops")


def _backend_checks(rep: Report, view: BackendsView, th: Thresholds) -> float | None:
    """Loss counters of the other backends; their total per second (None: no rates yet)."""
    if view.dt_s <= 0:
        return None
    losses: list[tuple[str, float]] = []
    if view.audit is not None and view.audit.ok:
        losses.append(("audit lost", view.audit.lost_per_s))
    if view.net is not None and view.net.ok:
        losses.append(("UDP receive-buffer drops", view.net.rcvbuf_errors_per_s))
        for u in view.net.sockets:
            losses.append((f"UDP {u.local} drops", u.drops_per_s))
    for s in view.sockets:
        if s.ok:
            losses.append((f"socket {s.path} drops", s.drops_per_s))
    if view.rsyslog is not None and view.rsyslog.ok:
        for q in view.rsyslog.queues:
            losses.append((f"rsyslog queue {q.name} discards", q.discarded_per_s))
    total = 0.0
    for what, rate in losses:
        if math.isfinite(rate) and rate > 0:
            total += rate
            rep.add("backends", level(rate, th.warn_drops_per_s, th.crit_drops_per_s),
                    f"{escape_text(what)} {rate:.1f}/s")
    return total


@dataclass(frozen=True)
class CheckConfig:
    probes: ProbeConfig  # the ring probe's domains, and the backends when they are checked
    thresholds: Thresholds = Thresholds()
    window_s: float = 1.0  # between the two frames that give rates; 0: one frame, no rates
    backends: bool = False
    procfs_root: str = "/proc"


def inspect_host(frame: Frame) -> Inspection:
    """The domains in the shm dir, the modes of the sampled domains' files,
    and a walk of every open ring's contents (a read-only tap of its newest
    record walks every record header from the floor to the head, and the
    library refuses a walk that breaks the format with ECORRUPT: what a
    consumer would hit)."""
    from fipstop import _fips
    from fipstop.ring import domain_path, list_domains, open_monitor

    raw = frame.raw.ring
    try:
        present = tuple(list_domains(raw.shm_dir))
    except OSError:
        present = ()
    modes: list[tuple[str, int]] = []
    contents: list[tuple[str, int, str]] = []
    walked: list[tuple[str, int]] = []
    for d in raw.domains:
        try:
            modes.append((d.name, os.stat(domain_path(d.name, raw.shm_dir)).st_mode))
        except OSError:
            continue
        try:
            mon = open_monitor(d.name, raw.shm_dir)
        except Exception:  # noqa: S112 - the ring probe already reported why it cannot be opened
            continue
        try:
            for i in d.active_ring_indices():
                try:
                    mon.tap(int(i), 1)
                except _fips.FipsError as e:
                    if e.code == _fips.ECORRUPT:
                        contents.append((d.name, int(i), str(e).split("\n", 1)[0][:200]))
                    else:  # lapped while walking, gone: not known either way
                        continue
                walked.append((d.name, int(i)))
        finally:
            mon.close()
    return Inspection(present, tuple(modes), tuple(contents), tuple(walked))


def check_host(config: CheckConfig) -> Report:
    """Poll the live host twice ``window_s`` apart and check the newest frame."""
    source = LiveSource(build_probes(config.probes), 1.0)
    try:
        prev, cur = poll_window(source, config.window_s)
    finally:
        source.close()
    return evaluate(prev, cur, config.thresholds, domains=config.probes.domains, backends=config.backends,
                    procfs_root=config.procfs_root, inspection=inspect_host(cur))
