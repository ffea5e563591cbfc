"""``fipstop check``: a Nagios / Icinga plugin for FIPS rings (and the other
logging backends), and a Prometheus textfile writer.

Plugin semantics (Nagios plugin guidelines): exit 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN; one status line, performance data after ``|`` as
``'label'=value[UOM];warn;crit;min;max``.  Anything that goes wrong inside
the check itself (no shm dir, a bad option) is UNKNOWN with the reason, never
a traceback and never exit 2 (which would page someone as CRITICAL).

Two samples ``--window`` seconds apart give rates (drops/s, lag in seconds),
derived by the same ``fipstop.model.derive`` as the dashboard.  Checks:

- **header**: every domain file validates (magic, version, sizes: the ring
  probe reports one that does not) -> CRITICAL naming the file and the reason;
- **invariants**: positions and counters agree (floor <= head <= reserved,
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
- **backends** (``--backends``): audit ``lost``, UDP receive-buffer drops,
  syslog socket drops, rsyslog discards per second.

``--textfile DIR`` writes ``DIR/fipstop.prom`` for node_exporter's textfile
collector atomically (write to a temporary file in DIR, then rename).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["CheckResult", "Thresholds", "evaluate", "register", "run"]

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATUS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


@dataclass(frozen=True)
class Thresholds:
    warn_fill_pct: float = 80.0
    crit_fill_pct: float = 95.0
    warn_drops_per_s: float = 0.0  # any drop
    crit_drops_per_s: float = 100.0
    warn_lag_records: float = 100_000
    crit_lag_records: float = 1_000_000
    warn_lag_s: float = 5.0
    crit_lag_s: float = 30.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: int
    message: str


@dataclass(frozen=True)
class Perf:
    label: str
    value: float
    uom: str = ""
    warn: float | None = None
    crit: float | None = None
    min: float | None = 0
    max: float | None = None

    def text(self) -> str:
        def f(x: float | None) -> str:
            if x is None:
                return ""
            if isinstance(x, float):  # plain decimals: some perfdata parsers reject 1e+06
                return f"{x:.3f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))
            return str(x)

        return f"'{self.label}'={f(self.value)}{self.uom};{f(self.warn)};{f(self.crit)};{f(self.min)};{f(self.max)}"


@dataclass
class Report:
    results: list[CheckResult] = field(default_factory=list)
    perf: list[Perf] = field(default_factory=list)

    @property
    def status(self) -> int:
        worst = OK
        for r in self.results:
            if r.status == UNKNOWN and worst < CRITICAL:
                worst = UNKNOWN if worst == OK else worst
            elif r.status != UNKNOWN:
                worst = max(worst, r.status)
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


def _level(value: float, warn: float, crit: float, *, strict_warn: bool = False) -> int:
    if not math.isfinite(value):
        return OK
    if value >= crit:
        return CRITICAL
    if value > warn if strict_warn else value >= warn:
        return WARNING
    return OK


def _pid_alive(pid: int, procfs_root: str) -> bool:
    return pid <= 0 or os.path.exists(os.path.join(procfs_root, str(pid)))


def evaluate(prev: Any, cur: Any, th: Thresholds, *, domains: list[str] | None = None,
             backends: Any = None, procfs_root: str = "/proc") -> Report:
    """All checks on two raw ring samples (``prev`` may be None: no rates)."""
    import numpy as np

    from fipstop.model import Health, derive

    rep = Report()
    if cur.unavailable:
        rep.add("domains", UNKNOWN, escape_text(cur.unavailable))
        return rep
    snap = derive(prev, cur, 1.0, stale_after_ns=2_000_000_000)
    names = [d.name for d in snap.domains]
    for e in cur.errors:
        rep.add("header", CRITICAL, f"domain {escape_text(e.domain)}: {escape_text(e.reason)}")
    if domains:
        for want in domains:
            if want not in names and not any(e.domain == want for e in cur.errors):
                rep.add("domains", CRITICAL, f"domain {escape_text(want)} not found in {escape_text(cur.shm_dir)}")
    if not snap.domains and not cur.errors and not domains:
        rep.add("domains", UNKNOWN, f"no FIPS domain in {escape_text(cur.shm_dir)}")
        return rep

    # invariants, on the raw snapshot
    prev_by = {d.name: d for d in prev.domains} if prev is not None else {}
    for d in cur.domains:
        R = d.rings
        idx = d.active_ring_indices()
        cap = int(d.ring_capacity_bytes)
        bad: list[str] = []
        for i in idx:
            r = R[i]
            head, res, floor = int(r["head"]), int(r["reserved"]), int(r["floor"])
            if not floor <= head <= res:
                bad.append(f"ring {i}: floor {floor} <= head {head} <= reserved {res} fails")
            elif head - floor > cap:
                bad.append(f"ring {i}: {head - floor} bytes in use, capacity {cap}")
        act = np.flatnonzero(d.consumers["state"] == 2)
        for c in act:
            for i in idx:
                p = d.pos[c, i]
                if int(p["released"]) > int(R[i]["head"]):
                    bad.append(f"consumer {c} released past the head of ring {i}")
                elif int(p["released_seq"]) > int(R[i]["records_committed"]):
                    bad.append(f"consumer {c} released records ring {i} never committed")
        pd = prev_by.get(d.name)
        if pd is not None and pd.created_realtime_ns == d.created_realtime_ns:
            for i in idx:
                a, b = pd.rings[i], R[i]
                if int(a["state"]) != 0 and int(a["generation"]) == int(b["generation"]):
                    for f in ("records_committed", "records_dropped", "head"):
                        if int(b[f]) < int(a[f]):
                            bad.append(f"ring {i}: {f} went backwards ({int(a[f])} -> {int(b[f])})")
        if bad:
            rep.add("invariants", CRITICAL, f"domain {escape_text(d.name)}: " + "; ".join(bad[:3])
                    + (f" (+{len(bad) - 3})" if len(bad) > 3 else ""))

    rings = snap.rings
    # drops
    if snap.dt_s > 0:
        drops = float(snap.totals.drops_per_s)
        st = _level(drops, th.warn_drops_per_s, th.crit_drops_per_s, strict_warn=True)
        if st:
            worst = rings[np.argsort(-rings["drops_per_s"])[:3]]
            who = ", ".join(f"{names[int(r['domain'])]}/{int(r['ring'])} {r['drops_per_s']:.0f}/s"
                            for r in worst if r["drops_per_s"] > 0)
            rep.add("drops", st, f"{drops:.0f} records/s dropped (ring full: {escape_text(who)})")
        rep.perf.append(Perf("drops_per_s", round(drops, 3), "", th.warn_drops_per_s, th.crit_drops_per_s))
    rep.perf.append(Perf("dropped_total", int(snap.totals.records_dropped), "c"))
    # fill: of open rings (a closed ring keeps its last records for a consumer to come; it drops nothing)
    open_rows = np.flatnonzero(rings["state"] == 1) if rings.size else np.zeros(0, dtype=np.int64)
    if open_rows.size:
        i = int(open_rows[np.argmax(rings["fill_pct"][open_rows])])
        fill = float(rings["fill_pct"][i])
        st = _level(fill, th.warn_fill_pct, th.crit_fill_pct)
        if st:
            rep.add("fill", st, f"ring {escape_text(names[int(rings['domain'][i])])}/{int(rings['ring'][i])} "
                    f"{fill:.0f}% full")
        rep.perf.append(Perf("fill_max", round(fill, 2), "%", th.warn_fill_pct, th.crit_fill_pct, 0, 100))
    # lag
    cons = snap.consumers
    active = cons[cons["health"] != Health.CLOSED] if cons.size else cons
    if active.size:
        lag = active[active["lag_max_records"] >= 0]
        if lag.size:
            j = int(np.argmax(lag["lag_max_records"]))
            lr = int(lag["lag_max_records"][j])
            who = escape_bytes(bytes(lag['name'][j]).split(b'\0', 1)[0])
            st = _level(lr, th.warn_lag_records, th.crit_lag_records)
            if st:
                rep.add("lag", st, f"consumer {who} {lr} records behind")
            rep.perf.append(Perf("lag_max_records", lr, "", th.warn_lag_records, th.crit_lag_records))
            ls = lag["lag_max_s"][np.isfinite(lag["lag_max_s"])]
            if ls.size:
                k = float(ls.max())
                st = _level(k, th.warn_lag_s, th.crit_lag_s)
                if st:
                    rep.add("lag_seconds", st, f"a consumer is {k:.1f} s behind")
                rep.perf.append(Perf("lag_max_seconds", round(k, 3), "s", th.warn_lag_s, th.crit_lag_s))
    # consumer health
    for c in cons:
        name = escape_bytes(bytes(c["name"]).split(b"\0", 1)[0])
        dom = escape_text(names[int(c["domain"])])
        h = Health(int(c["health"]))
        if h == Health.STALE:
            holds_full = any(
                r["fill_pct"] >= th.crit_fill_pct and int(r["slowest_consumer"]) == int(c["consumer"])
                for r in rings if int(r["domain"]) == int(c["domain"]))
            age = int(c["heartbeat_age_ns"]) / 1e9
            rep.add("consumers", CRITICAL if holds_full else WARNING,
                    f"consumer {name} ({dom}, pid {int(c['pid'])}) stale: no heartbeat for {age:.1f} s"
                    + (", holding a full ring" if holds_full else ""))
        elif h == Health.EVICTED:
            rep.add("consumers", WARNING, f"consumer {name} ({dom}) was evicted (dead, held a full ring)")
    rep.perf.append(Perf("consumers_alive", int(snap.totals.consumers_alive)))
    # producers gone with their ring open
    gone = [(names[int(r["domain"])], int(r["ring"]), int(r["pid"])) for r in rings
            if int(r["state"]) == 1 and not _pid_alive(int(r["pid"]), procfs_root)]
    if gone:
        g = ", ".join(f"{escape_text(dn)}/{ri} pid {pid}" for dn, ri, pid in gone[:3])
        rep.add("producers", WARNING, f"{len(gone)} ring(s) still open whose producer is gone: {g}")
    rep.perf.append(Perf("rings", int(snap.totals.rings)))
    if backends is not None:
        _backend_checks(rep, backends, th)
    if not any(r.status for r in rep.results):
        rep.add("summary", OK, f"{len(snap.domains)} domain(s), {int(snap.totals.rings)} rings, "
                f"{int(snap.totals.consumers_alive)} consumer(s) alive, no drops")
    return rep


def _backend_checks(rep: Report, view: Any, th: Thresholds) -> None:
    """Loss counters of the other backends (a ``fipstop.backends.BackendsView``)."""
    if view.dt_s <= 0:
        return
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
            rep.add("backends", _level(rate, th.warn_drops_per_s, th.crit_drops_per_s, strict_warn=True),
                    f"{escape_text(what)} {rate:.1f}/s")
    rep.perf.append(Perf("backend_losses_per_s", round(total, 3), "", th.warn_drops_per_s, th.crit_drops_per_s))


# ---------------------------------------------------------------------------
# the textfile
# ---------------------------------------------------------------------------


def textfile(rep: Report, now_s: float) -> str:
    lines = ["# HELP fipstop_check_status Status of each fipstop check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
             "# TYPE fipstop_check_status gauge"]
    worst: dict[str, int] = {}
    for r in rep.results:
        worst[r.name] = max(worst.get(r.name, 0), r.status)
    for name, st in sorted(worst.items()):
        lines.append(f'fipstop_check_status{{check="{name}"}} {st}')
    lines += ["# HELP fipstop_check_overall_status The plugin's exit status.", "# TYPE fipstop_check_overall_status gauge",
              f"fipstop_check_overall_status {rep.status}"]
    for p in rep.perf:
        metric = "fipstop_check_" + "".join(ch if ch.isalnum() else "_" for ch in p.label)
        lines += [f"# TYPE {metric} gauge", f"{metric} {p.value}"]
    lines += ["# HELP fipstop_check_last_run_timestamp_seconds When the check ran.",
              "# TYPE fipstop_check_last_run_timestamp_seconds gauge",
              f"fipstop_check_last_run_timestamp_seconds {now_s:.3f}"]
    return "\n".join(lines) + "\n"


def write_textfile(directory: str, text: str) -> str:
    """Write then rename, in the same directory: the collector never reads half a file."""
    import tempfile

    path = os.path.join(directory, "fipstop.prom")
    fd, tmp = tempfile.mkstemp(prefix=".fipstop.prom.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check", help="Nagios-compatible health check of the rings (exit 0/1/2/3, perfdata)",
        description="Check every FIPS domain (or --domain): header, invariants, drops, fill, consumer lag and "
        "health, producers gone with their ring open, and with --backends the other logging backends' losses. "
        "Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one status line with performance data.")
    p.add_argument("--domain", action="append", metavar="NAME", help="check this domain (repeatable; default all)")
    p.add_argument("--window", type=float, default=1.0, metavar="S",
                   help="seconds between the two samples that give rates (default 1; 0: one sample, no rates)")
    d = Thresholds()
    for name, unit in (("fill-pct", "%"), ("drops-per-s", "records/s"), ("lag-records", "records"),
                       ("lag-s", "s")):
        attr = name.replace("-", "_")
        p.add_argument(f"--warn-{name}", type=float, dest=f"warn_{attr}", default=getattr(d, f"warn_{attr}"),
                       metavar="X", help=f"WARNING at {unit} (default %(default)g)")
        p.add_argument(f"--crit-{name}", type=float, dest=f"crit_{attr}", default=getattr(d, f"crit_{attr}"),
                       metavar="X", help=f"CRITICAL at {unit} (default %(default)g)")
    p.add_argument("--backends", action="store_true", help="also check the other logging backends' loss counters")
    p.add_argument("--json", action="store_true", help="print the results as JSON (the exit status is the same)")
    p.add_argument("--textfile", metavar="DIR", help="also write DIR/fipstop.prom for node_exporter's textfile "
                   "collector (atomically)")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p)
    p.set_defaults(func=run)


def _unknown(msg: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"status": UNKNOWN, "status_text": "UNKNOWN", "summary": msg, "checks": [], "perfdata": []}))
    else:
        print(f"FIPS UNKNOWN - {msg}")
    return UNKNOWN


def run(args: argparse.Namespace) -> int:
    from fipstop.errors import FipsError, exc_line

    try:
        th = Thresholds(**{k: getattr(args, k) for k in asdict(Thresholds())})
        for k, v in asdict(th).items():
            if not math.isfinite(v) or v < 0:
                return _unknown(f"--{k.replace('_', '-')} {v:g}: give a number >= 0", args.json)
        if not (math.isfinite(args.window) and 0 <= args.window <= 60):
            return _unknown(f"--window {args.window:g}: give seconds between 0 and 60", args.json)
        rep = _collect(args, th)
    except FipsError as e:
        return _unknown(e.message, args.json)
    except Exception as e:  # the plugin must answer UNKNOWN, never a traceback
        return _unknown(exc_line(e, 300), args.json)
    if args.textfile:
        try:
            write_textfile(args.textfile, textfile(rep, time.time()))
        except OSError as e:
            rep.add("textfile", UNKNOWN, f"cannot write {escape_text(args.textfile)}/fipstop.prom: {e.strerror}")
    if args.json:
        print(json.dumps({"status": rep.status, "status_text": STATUS[rep.status], "summary": rep.summary(),
                          "checks": [asdict(r) | {"status_text": STATUS[r.status]} for r in rep.results],
                          "perfdata": [asdict(p) for p in rep.perf]}, allow_nan=False, default=str))
    else:
        print(rep.status_line())
    sys.stdout.flush()
    return rep.status


def _collect(args: argparse.Namespace, th: Thresholds) -> Report:
    from fipstop.probes.ring import RingProbe

    probe = RingProbe(shm_dir=getattr(args, "shm_dir", None), domains=args.domain)
    bprobe = None
    if args.backends:
        from fipstop.top import backends_probe

        bprobe = backends_probe(args)
    try:
        b0 = bprobe.sample() if bprobe else None
        s0 = probe.sample()
        if args.window > 0:
            time.sleep(args.window)
            s1 = probe.sample()
            b1 = bprobe.sample() if bprobe else None
        else:
            s1, s0, b1 = s0, None, b0
            b0 = None
        view = None
        if bprobe is not None:
            from fipstop.backends import derive_backends

            view = derive_backends(b0, b1)
        return evaluate(s0, s1, th, domains=args.domain, backends=view)
    finally:
        probe.close()
