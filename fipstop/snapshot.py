"""``fipstop snapshot``: a one-shot dump of every FIPS domain in the shm dir.

Per domain: its geometry, then per ring in use the producer (pid, tid,
thread name), state, records committed/dropped, fill and high-water, then
per consumer its state, heartbeat age and lag, then every (consumer, ring)
position.  ``--json`` prints one JSON document with stable keys and integer
numbers instead.

Everything that comes from shared memory (thread names, consumer names,
domain names) is attacker-controlled: the human output escapes control
characters as ``\\xNN`` (no ANSI sequences reach the terminal) and prints
plain text (no markup is interpreted); JSON escapes them itself.

A bad domain file prints ``fipstop: <file>: <reason>`` on stderr and the dump
goes on with the next domain; the exit status is then 2, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from fipstop.textsafe import escape_text

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.ring import DomainSnapshot

PROG = "fipstop"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "snapshot",
        help="one-shot dump of the rings and consumers of every domain",
        description="Print every domain's rings (producer, fill, drops) and consumers "
        "(state, heartbeat, lag) once, as tables or as JSON.",
    )
    p.add_argument("--domain", metavar="NAME", help="only this domain (file fips.NAME in the shm dir)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--backends", action="store_true",
                   help="also the other logging backends (files, syslog sockets, UDP, journald, audit, rsyslog): "
                   "a \"backends\" key in --json, a section in the text")
    p.add_argument("--backends-window", type=float, metavar="S", default=0.5,
                   help="seconds between the two backend samples that give rates (default 0.5; 0: no rates)")
    from fipstop.config import add_options as add_backend_options

    add_backend_options(p)
    p.set_defaults(func=run)


def backends_now(args: argparse.Namespace):
    """Two samples ``--backends-window`` apart, derived (FipsError on a bad config)."""
    import math
    import time

    from fipstop.backends import derive_backends
    from fipstop.errors import FipsError
    from fipstop.top import backends_probe

    window = getattr(args, "backends_window", 0.5)
    if window is None or not math.isfinite(window) or not 0 <= window <= 60:
        raise FipsError("--backends-window: give seconds between 0 and 60")
    probe = backends_probe(args)
    first = probe.sample()
    if window <= 0:
        return derive_backends(None, first)
    time.sleep(window)
    return derive_backends(first, probe.sample())


# ---------------------------------------------------------------------------
# formatting helpers
# ---------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool], indent: str = "  ") -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def fmt(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if numeric[i]:
                parts.append(cell.rjust(widths[i]))
            else:
                parts.append(cell if last else cell.ljust(widths[i]))
        return (indent + "  ".join(parts)).rstrip()

    lines = [fmt(headers)]
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)


def _bytes_h(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _age_h(ns: int) -> str:
    if ns < 0:
        return "-"
    s = ns / 1e9
    if s < 10:
        return f"{s:.2f}s"
    if s < 600:
        return f"{s:.1f}s"
    if s < 3 * 86400:
        return f"{s / 3600:.1f}h" if s >= 7200 else f"{s / 60:.0f}m"
    return f"{s / 86400:.1f}d"


def _pct(frac: float) -> str:
    return f"{100.0 * frac:.1f}"


def _ago(now_ns: int, then_ns: int) -> str:
    if then_ns == 0:
        return "never"
    return _age_h(max(now_ns - then_ns, 0)) + " ago"


# ---------------------------------------------------------------------------
# human output
# ---------------------------------------------------------------------------


def format_human(snap: DomainSnapshot) -> str:
    from fipstop.ring import ConsumerState

    ring_stats = snap.ring_stats()
    cons_stats = snap.consumer_stats()
    n_active_cons = sum(1 for c in cons_stats if c.state == ConsumerState.ACTIVE)
    lines = [
        f"domain {escape_text(snap.name)}  ({escape_text(snap.path)})",
        f"  {snap.max_rings} rings x {_bytes_h(snap.ring_capacity_bytes)}, max record "
        f"{_bytes_h(snap.max_record_bytes)}, consumers {n_active_cons} active of {snap.max_consumers}, "
        f"creator pid {snap.creator_pid}, eviction grace {snap.grace_ns / 1e9:g}s",
        "",
    ]
    if ring_stats:
        rows = []
        for r in ring_stats:
            rows.append(
                [
                    str(r.index),
                    r.state_label,
                    str(r.pid),
                    str(r.tid),
                    escape_text(r.thread_name) or "-",
                    str(r.records_committed),
                    str(r.records_dropped),
                    _pct(r.fill_fraction),
                    _pct(min(r.high_water_fraction, 1.0)),
                    _ago(snap.taken_realtime_ns, r.last_commit_ns),
                ]
            )
        lines.append(f"  rings: {len(ring_stats)} in use of {snap.max_rings}")
        lines.append(
            _table(
                ["RING", "STATE", "PID", "TID", "THREAD", "COMMITTED", "DROPPED", "FILL%", "HIGH%", "LAST COMMIT"],
                rows,
                [True, False, True, True, False, True, True, True, True, False],
            )
        )
    else:
        lines.append("  rings: none in use (no producer has logged yet)")
    lines.append("")
    if cons_stats:
        rows = []
        hb = snap.heartbeat_age_ns()
        for c in cons_stats:
            active = c.state == ConsumerState.ACTIVE
            rows.append(
                [
                    str(c.index),
                    escape_text(c.name) or "-",
                    c.state_label,
                    str(c.pid),
                    _age_h(int(hb[c.index])),
                    str(c.records_released),
                    str(c.lag_records) if active else "-",
                ]
            )
        lines.append(f"  consumers: {len(cons_stats)} registered of {snap.max_consumers}")
        lines.append(
            _table(
                ["IDX", "NAME", "STATE", "PID", "HEARTBEAT AGE", "RELEASED", "LAG (records)"],
                rows,
                [True, False, False, True, True, True, True],
            )
        )
        pos = [p for p in snap.pos_stats() if p.lag_records >= 0]
        if pos:
            names = {c.index: escape_text(c.name) or "-" for c in cons_stats}
            rows = [
                [
                    names.get(p.consumer, str(p.consumer)),
                    str(p.ring),
                    str(p.released_seq),
                    str(p.lag_records),
                    str(p.lag_bytes),
                    str(p.lost_seen),
                ]
                for p in pos
            ]
            lines.append("")
            lines.append("  positions (active consumers x rings in use)")
            lines.append(
                _table(
                    ["CONSUMER", "RING", "NEXT SEQ", "LAG (records)", "LAG (bytes)", "LOST SEEN"],
                    rows,
                    [False, True, True, True, True, True],
                )
            )
    else:
        lines.append("  consumers: none registered")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------


def to_json(snap: DomainSnapshot) -> dict[str, Any]:
    """A JSON-ready dict of one snapshot: stable keys, integer numbers,
    unescaped strings (json.dumps escapes control characters)."""
    from fipstop.ring import ConsumerState

    hb = snap.heartbeat_age_ns()
    lag = snap.lag_records()
    rings = []
    for r in snap.ring_stats():
        rings.append(
            {
                "index": r.index,
                "state": r.state_label,
                "generation": r.generation,
                "pid": r.pid,
                "tid": r.tid,
                "thread_name": r.thread_name,
                "head": r.head,
                "floor": r.floor,
                "floor_seq": r.floor_seq,
                "records_committed": r.records_committed,
                "bytes_committed": r.bytes_committed,
                "records_dropped": r.records_dropped,
                "bytes_dropped": r.bytes_dropped,
                "records_truncated": r.records_truncated,
                "full_events": r.full_events,
                "evictions": r.evictions,
                "blocked_ns": r.blocked_ns,
                "used_bytes": r.used_bytes,
                "capacity_bytes": r.capacity_bytes,
                "fill_ppm": (r.used_bytes * 1_000_000) // r.capacity_bytes if r.capacity_bytes else 0,
                "high_water_bytes": r.high_water_bytes,
                "last_commit_ns": r.last_commit_ns,
                "created_ns": r.created_ns,
                "closed_ns": r.closed_ns,
            }
        )
    consumers = []
    for c in snap.consumer_stats():
        active = c.state == ConsumerState.ACTIVE
        positions = []
        if active:
            for ri in snap.active_ring_indices():
                p = snap.pos[c.index, ri]
                positions.append(
                    {
                        "ring": int(ri),
                        "released": int(p["released"]),
                        "released_seq": int(p["released_seq"]),
                        "records_released": int(p["records_released"]),
                        "lost_seen": int(p["lost_seen"]),
                        "lag_records": int(lag[c.index, ri]),
                    }
                )
        consumers.append(
            {
                "index": c.index,
                "name": c.name,
                "state": c.state_label,
                "generation": c.generation,
                "pid": c.pid,
                "heartbeat_age_ns": int(hb[c.index]),
                "registered_ns": c.registered_ns,
                "evicted_ns": c.evicted_ns,
                "evicted_by_ring": c.evicted_by_ring,
                "resumes": c.resumes,
                "records_released": c.records_released,
                "batches_released": c.batches_released,
                "lag_records": c.lag_records if active else None,
                "positions": positions,
            }
        )
    return {
        "name": snap.name,
        "path": snap.path,
        "version": snap.version,
        "max_rings": snap.max_rings,
        "max_consumers": snap.max_consumers,
        "ring_capacity_bytes": snap.ring_capacity_bytes,
        "max_record_bytes": snap.max_record_bytes,
        "file_size_bytes": snap.file_size_bytes,
        "grace_ns": snap.grace_ns,
        "creator_pid": snap.creator_pid,
        "created_realtime_ns": snap.created_realtime_ns,
        "taken_realtime_ns": snap.taken_realtime_ns,
        "taken_mono_ns": snap.taken_mono_ns,
        "rings": rings,
        "consumers": consumers,
    }


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def _no_domains_hint(shm_dir: str) -> str:
    d = escape_text(shm_dir)
    return (
        f"no FIPS domains in {d} (files named fips.<name>).\n"
        f"Start a producer to create one, e.g. `make demo`, or from Python:\n"
        f"  FIPS_SHM_DIR={d} python -c \"from fipstop._fips import Domain, Producer; "
        f"d = Domain('demo'); Producer(d).log(b'hello')\""
    )


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from fipstop import _fips
    from fipstop.errors import FipsError
    from fipstop.ring import list_domains, resolve_shm_dir, snapshot_domain

    out = out or sys.stdout
    err = err or sys.stderr
    shm_dir = resolve_shm_dir(getattr(args, "shm_dir", None))
    want = getattr(args, "domain", None)
    as_json = bool(getattr(args, "json", False))

    if want is not None:
        names = [want]
    else:
        try:
            names = list_domains(shm_dir)
        except FileNotFoundError:
            raise FipsError(f"{escape_text(shm_dir)}: no such directory") from None
        except NotADirectoryError:
            raise FipsError(f"{escape_text(shm_dir)}: not a directory") from None
        except OSError as exc:
            raise FipsError(f"{escape_text(shm_dir)}: {exc.strerror or exc}") from None

    backends = backends_now(args) if getattr(args, "backends", False) else None
    snaps = []
    bad = 0
    for name in names:
        try:
            snaps.append(snapshot_domain(name, shm_dir))
        except _fips.FipsError as exc:
            bad += 1
            print(f"{PROG}: {escape_text(str(exc))}", file=err)
            err.flush()

    if as_json:
        doc: dict[str, Any] = {"domains": [to_json(s) for s in snaps]}
        if backends is not None:
            from fipstop.backends import view_to_json

            doc["backends"] = view_to_json(backends)
        json.dump(doc, out, sort_keys=True, indent=2)
        out.write("\n")
    elif not names:
        print(_no_domains_hint(shm_dir), file=out)
    else:
        first = True
        for s in snaps:
            if not first:
                out.write("\n")
            first = False
            out.write(format_human(s) + "\n")
    if backends is not None and not as_json:
        from fipstop.backends import format_text

        out.write("\n" + format_text(backends, escape_text) + "\n")
    out.flush()
    return 2 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m fipstop.snapshot``), same options."""
    parser = argparse.ArgumentParser(prog=f"{PROG} snapshot")
    parser.add_argument("--shm-dir", default=os.environ.get("FIPS_SHM_DIR") or "/dev/shm")
    parser.add_argument("--domain")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from fipstop.errors import FipsError

    try:
        return run(args)
    except FipsError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
