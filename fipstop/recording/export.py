"""Exporting a recording: ``fipstop export FILE --format csv|jsonl|openmetrics``.

Every frame of a recording (or of a time window of it) is re-derived as the
replay does (:func:`fipstop.recording.replay.replay_frames`), then written:

- ``jsonl``: one object per frame - ``t_ns``, the derived totals, and per
  domain exactly what ``fipstop snapshot --json`` prints for that raw sample
  (so an export can be compared with a live snapshot field by field), plus
  the derived per-ring rates;
- ``csv``: one row per (frame, ring) with ``--table rings`` (default), per
  (frame, consumer) with ``--table consumers``, or per frame with
  ``--table totals``; numbers as the live view derives them, in the units
  /metrics uses, named in the column (``fill_ratio``, ``lag_max_seconds``,
  ``records_per_second``); a consumer's health as its label;
- ``openmetrics``: one exposition of every frame, timestamped, each family
  once and each series' points together in time order, as the format wants
  (:class:`fipstop.outputs.openmetrics.Timeline`; what ``promtool tsdb
  create-blocks-from openmetrics`` and prometheus_client's parser read).

"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np

from fipstop.model.fipsipc import FipsIpcView
from fipstop.model.rings import Health
from fipstop.outputs.fipsipc import fipsipc_json
from fipstop.outputs.jsondoc import domain_json
from fipstop.outputs.openmetrics import Timeline
from fipstop.recording.replay import parse_time, replay_frames
from fipstop.recording.store import RecordingReader
from fipstop.textsafe import escape_bytes

__all__ = ["ExportOptions", "export"]


@dataclass(frozen=True)
class ExportOptions:
    fmt: str  # csv, jsonl or openmetrics
    table: str = "rings"  # csv only: rings, consumers or totals
    from_t: str | None = None  # TIME as parse_time reads it; None: the first frame
    to_t: str | None = None  # None: the last frame



def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (bytes, bytearray)):
        return escape_bytes(bytes(v).split(b"\0", 1)[0])
    if isinstance(v, np.generic):
        return _clean(v.item())
    return v


# Columns: (name in the output, field of the derived row, factor).  One unit per quantity in every output,
# named in the column as /metrics names it: fill as a 0-1 ratio (``_ratio``), times in seconds (``_seconds``),
# rates per second (``_per_second``); a consumer's health as its label (alive, stale, evicted, closed, joining).
_RING_COLS: tuple[tuple[str, str, float], ...] = (
    ("records_committed", "records_committed", 1), ("bytes_committed", "bytes_committed", 1),
    ("records_dropped", "records_dropped", 1), ("bytes_dropped", "bytes_dropped", 1),
    ("full_events", "full_events", 1), ("records_per_second", "records_per_s", 1),
    ("bytes_per_second", "bytes_per_s", 1), ("drops_per_second", "drops_per_s", 1),
    ("fill_ratio", "fill_pct", 0.01), ("high_water_ratio", "high_water_pct", 0.01),
    ("claimed_bytes", "claimed_bytes", 1), ("slowest_lag_records", "slowest_lag_records", 1),
    ("slowest_lag_seconds", "slowest_lag_s", 1))
_CONS_COLS: tuple[tuple[str, str, float], ...] = (
    ("heartbeat_age_seconds", "heartbeat_age_ns", 1e-9), ("records_released", "records_released", 1),
    ("release_per_second", "release_per_s", 1), ("lag_max_records", "lag_max_records", 1),
    ("lag_mean_records", "lag_mean_records", 1), ("lag_max_seconds", "lag_max_s", 1),
    ("lost_records", "lost_seen", 1))
_TOTAL_COLS: tuple[tuple[str, str, float], ...] = (
    ("rings", "rings", 1), ("rings_active", "rings_active", 1), ("consumers", "consumers", 1),
    ("consumers_alive", "consumers_alive", 1), ("consumers_stale", "consumers_stale", 1),
    ("consumers_evicted", "consumers_evicted", 1), ("records_per_second", "records_per_s", 1),
    ("bytes_per_second", "bytes_per_s", 1), ("drops_per_second", "drops_per_s", 1),
    ("records_committed", "records_committed", 1), ("records_dropped", "records_dropped", 1))
_RATE_COLS = ("records_per_second", "bytes_per_second", "drops_per_second", "fill_ratio", "slowest_lag_records",
              "slowest_lag_seconds")


def _col(row: Any, field: str, factor: float) -> Any:
    if field.endswith("_per_s") and not _rated(row):
        # a rate without a baseline (the first frame, a reset ring) is unknown (empty / null), never a
        # 0.0 that reads as "nothing happened": the dashboard shows it as -
        return None
    v = _clean(row[field])
    if factor == 1 or v is None:
        return v
    return round(v * factor, 9) if v >= 0 else None  # a negative age (clock skew) is unknown


def _rated(row: Any) -> bool:
    """Whether a row's rates have a baseline: a ring's or consumer's ``rates_valid``; totals carry
    ``_rated`` (set by :func:`_totals`)."""
    if isinstance(row, dict):
        return bool(row.get("_rated", True))
    names = row.dtype.names or ()
    return "rates_valid" not in names or bool(row["rates_valid"])


def _totals(snap: Any) -> dict[str, Any]:
    t = asdict(snap.totals)
    t["_rated"] = bool(snap.rings.size and snap.rings["rates_valid"].any())
    return t


def _ring_values(r: Any) -> dict[str, Any]:
    return {name: _col(r, field, f) for name, field, f in _RING_COLS}


def _iso(t_ns: int) -> str:
    return dt.datetime.fromtimestamp(t_ns / 1e9, dt.UTC).isoformat(timespec="milliseconds")


def export(path: str, options: ExportOptions, out: TextIO) -> int:
    """Writes the frames of the recording at ``path`` to ``out``; returns how many."""
    fmt, table = options.fmt, options.table
    reader = RecordingReader(path)
    try:
        if not reader.count:
            return 0
        first_t = reader.first_t_ns
        lo = parse_time(options.from_t, first_t) if options.from_t else None
        hi = parse_time(options.to_t, first_t) if options.to_t else None
        start: int | None = reader.first_seq
        if lo is not None:
            s = reader.seq_at(lo)
            start = s if s is not None and (reader.time_of(s) or 0) >= lo else (reader.next_seq(s) if s else None)
            if start is None:
                return 0
        writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
        timeline = Timeline() if fmt == "openmetrics" else None
        if writer is not None:
            if table == "rings":
                writer.writerow(("time", "t_ns", "domain", "ring", "pid", "tid", "thread", *(c[0] for c in _RING_COLS)))
            elif table == "consumers":
                writer.writerow(("time", "t_ns", "domain", "consumer", "pid", "name", "health",
                                 *(c[0] for c in _CONS_COLS)))
            else:
                writer.writerow(("time", "t_ns", *(c[0] for c in _TOTAL_COLS)))
        n = 0
        for rec, frame in replay_frames(reader, start):
            if hi is not None and rec.t_ns > hi:
                break
            snap = frame.snapshot
            n += 1
            names = [d.name for d in snap.domains]
            totals = _totals(snap)
            if timeline is not None:
                timeline.add(snap)
            elif fmt == "jsonl":
                rates = [{"domain": names[int(r["domain"])], "ring": int(r["ring"]),
                          **{k: v for k, v in _ring_values(r).items() if k in _RATE_COLS}}
                         for r in snap.rings]
                obj = {"t_ns": rec.t_ns, "time": _iso(rec.t_ns), "marks": rec.marks,
                       "totals": {name: _col(totals, field, f) for name, field, f in _TOTAL_COLS},
                       "domains": [domain_json(d) for d in rec.raw.ring.domains], "ring_rates": rates}
                if isinstance(snap.fipsipc, FipsIpcView):
                    obj["fipsipc"] = fipsipc_json(snap.fipsipc)
                out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
            elif writer is None:
                raise ValueError(f"export: unknown format {fmt!r}")
            elif table == "rings":
                for r in snap.rings:
                    writer.writerow((_iso(rec.t_ns), rec.t_ns, names[int(r["domain"])], int(r["ring"]), int(r["pid"]),
                                     int(r["tid"]), _clean(bytes(r["thread_name"])), *_ring_values(r).values()))
            elif table == "consumers":
                for c in snap.consumers:
                    writer.writerow((_iso(rec.t_ns), rec.t_ns, names[int(c["domain"])], int(c["consumer"]),
                                     int(c["pid"]), _clean(bytes(c["name"])), Health(int(c["health"])).label,
                                     *(_col(c, field, f) for _, field, f in _CONS_COLS)))
            else:
                writer.writerow((_iso(rec.t_ns), rec.t_ns, *(_col(totals, field, f) for _, field, f in _TOTAL_COLS)))
        if timeline is not None:
            timeline.write(out)
        return n
    finally:
        reader.close()
