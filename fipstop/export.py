"""``fipstop export FILE --format csv|jsonl|openmetrics [--from T] [--to T]``.

Every frame of a recording (or of a time window of it) is re-derived as the
replay does, then written:

- ``jsonl``: one object per frame - ``t_ns``, the derived totals, and per
  domain exactly what ``fipstop snapshot --json`` prints for that raw sample
  (so an export can be compared with a live snapshot field by field), plus
  the derived per-ring rates;
- ``csv``: one row per (frame, ring) with ``--table rings`` (default), per
  (frame, consumer) with ``--table consumers``, or per frame with
  ``--table totals``; numbers as the live view derives them;
- ``openmetrics``: one exposition per frame, timestamped, ``# EOF`` once at
  the end (what ``promtool tsdb create-blocks-from openmetrics`` reads).

Output goes to stdout or ``-o FILE``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from typing import Any, TextIO

from fipstop.errors import FipsError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="export a recording as CSV, JSON lines or OpenMetrics",
        description="Write the frames of a recording (re-derived as the replay shows them) as CSV, JSON lines "
        "or OpenMetrics text.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", required=True, choices=("csv", "jsonl", "openmetrics"))
    p.add_argument("--table", choices=("rings", "consumers", "totals"), default="rings",
                   help="csv only: one row per ring (default), per consumer, or per frame")
    p.add_argument("--from", dest="from_", metavar="T", help="first time (ISO 8601, HH:MM[:SS], or +SECONDS)")
    p.add_argument("--to", metavar="T", help="last time (same forms)")
    p.add_argument("-o", "--output", metavar="PATH", help="write here instead of stdout")
    p.set_defaults(func=run)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (bytes, bytearray)):
        from fipstop.textsafe import escape_bytes

        return escape_bytes(bytes(v).split(b"\0", 1)[0])
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


_RING_COLS = ("records_committed", "bytes_committed", "records_dropped", "bytes_dropped", "full_events",
              "records_per_s", "bytes_per_s", "drops_per_s", "fill_pct", "high_water_pct", "claimed_bytes",
              "slowest_lag_records", "slowest_lag_s")
_CONS_COLS = ("health", "heartbeat_age_ns", "records_released", "release_per_s", "lag_max_records", "lag_mean_records",
              "lag_max_s", "lost_seen")
_TOTAL_COLS = ("rings", "rings_active", "consumers", "consumers_alive", "consumers_stale", "consumers_evicted",
               "records_per_s", "bytes_per_s", "drops_per_s", "records_committed", "records_dropped")


def _iso(t_ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t_ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds")


def export(path: str, fmt: str, out: TextIO, *, table: str = "rings", from_t: str | None = None,
           to_t: str | None = None) -> int:
    from fipstop.model import derive
    from fipstop.openmetrics import render
    from fipstop.recording import RecordingReader
    from fipstop.replay import parse_time
    from fipstop.snapshot import to_json

    reader = RecordingReader(path)
    try:
        if not reader.count:
            return 0
        first_t = reader.first_t_ns
        lo = parse_time(from_t, first_t) if from_t else None
        hi = parse_time(to_t, first_t) if to_t else None
        start = reader.first_seq
        if lo is not None:
            s = reader.seq_at(lo)
            start = s if s is not None and (reader.time_of(s) or 0) >= lo else (reader.next_seq(s) if s else None)
            if start is None:
                return 0
        writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
        if writer is not None:
            if table == "rings":
                writer.writerow(("time", "t_ns", "domain", "ring", "pid", "tid", "thread", *_RING_COLS))
            elif table == "consumers":
                writer.writerow(("time", "t_ns", "domain", "consumer", "pid", "name", *_CONS_COLS))
            else:
                writer.writerow(("time", "t_ns", *_TOTAL_COLS))
        prev_seq = reader.prev_seq(start)
        prev = reader.read(prev_seq).raw if prev_seq is not None else None
        n = 0
        for rec in reader.iter_frames(start):
            if hi is not None and rec.t_ns > hi:
                break
            snap = derive(prev, rec.raw, reader.interval_s)
            prev = rec.raw
            n += 1
            names = [d.name for d in snap.domains]
            if fmt == "openmetrics":
                out.write(render(snap, aux=rec.aux, timestamp=True, eof=False))
            elif fmt == "jsonl":
                rates = [{"domain": names[int(r["domain"])], "ring": int(r["ring"]),
                          **{k: _clean(r[k]) for k in ("records_per_s", "bytes_per_s", "drops_per_s", "fill_pct",
                                                        "slowest_lag_records", "slowest_lag_s")}}
                         for r in snap.rings]
                obj = {"t_ns": rec.t_ns, "time": _iso(rec.t_ns), "marks": rec.marks,
                       "totals": {k: _clean(getattr(snap.totals, k)) for k in _TOTAL_COLS},
                       "domains": [to_json(d) for d in rec.raw.domains], "ring_rates": rates}
                out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
            elif table == "rings":
                for r in snap.rings:
                    writer.writerow((_iso(rec.t_ns), rec.t_ns, names[int(r["domain"])], int(r["ring"]), int(r["pid"]),
                                     int(r["tid"]), _clean(bytes(r["thread_name"])),
                                     *(_clean(r[k]) for k in _RING_COLS)))
            elif table == "consumers":
                for c in snap.consumers:
                    writer.writerow((_iso(rec.t_ns), rec.t_ns, names[int(c["domain"])], int(c["consumer"]),
                                     int(c["pid"]), _clean(bytes(c["name"])), *(_clean(c[k]) for k in _CONS_COLS)))
            else:
                writer.writerow((_iso(rec.t_ns), rec.t_ns, *(_clean(getattr(snap.totals, k)) for k in _TOTAL_COLS)))
        if fmt == "openmetrics":
            out.write("# EOF\n")
        return n
    finally:
        reader.close()


def run(args: argparse.Namespace) -> int:
    if args.output:
        try:
            f = open(args.output, "w", encoding="utf-8", newline="")
        except OSError as e:
            raise FipsError(f"{args.output}: cannot write ({e.strerror})") from None
        with f:
            export(args.file, args.format, f, table=args.table, from_t=args.from_, to_t=args.to)
    else:
        export(args.file, args.format, sys.stdout, table=args.table, from_t=args.from_, to_t=args.to)
    return 0
