"""The FIPS paper's prototype rings written out: text, JSON and OpenMetrics.

One vocabulary with libfips' outputs: rings (the prototype's writer
segments), readers (its reader processes), fill, lag.  Units are the
prototype's: slots (one record each).  Unknown is "-" in text, null in JSON
and absent in OpenMetrics; estimates carry ``~`` in text and ``_est`` in
JSON keys; OpenMetrics exports no rates and no estimates (Prometheus
derives rates itself, and positions modulo the ring are not counters).
Names given on the command line and the name prefix folded into the
checksum come from files and memory of other processes: escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from fipstop.model.fipsipc import FipsIpcView, IpcSegmentView
from fipstop.outputs.jsondoc import jsonable
from fipstop.probes.fipsipc import IpcTap
from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["fipsipc_json", "fipsipc_metrics", "format_fipsipc", "format_taps", "taps_json"]


def fipsipc_json(view: FipsIpcView) -> dict[str, Any]:
    """Stable keys; unknown values are null; estimates end in ``_est``."""
    doc: dict[str, Any] = jsonable(asdict(view))
    for seg, s in zip(doc["segments"], view.segments):
        seg["label"] = s.label
    return doc


def _n(v: float | int | None, fmt: str = "{:.0f}", est: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return ("~" if est else "") + fmt.format(v)


def _segment_text(s: IpcSegmentView, esc: Callable[[str], str]) -> list[str]:
    mode = "OVERWRITE" if s.overwrite else "writer waits when full"
    state = "destroyed" if s.destroyed else "set up"
    lines = [
        f"FIPS-IPC {esc(s.label)}  shmid {s.shmid}  key {s.key:#010x}  {state}  {len(s.rings)} rings x {s.slots} "
        f"slots of {s.line_size} B  ({mode})",
        f"  processes: {s.writers_registered} writer(s) and {s.readers_registered} reader(s) registered, "
        f"{s.attached} attached" + (f", {s.gone} gone (killed without fips_buf_destroy)" if s.gone else "")
        + f"; creator pid {s.creator_pid}, last attach/detach pid {s.last_pid}",
    ]
    if s.lock_owner is not None:
        held = {True: "", False: ", which is gone: it stays locked for ever (the mutex is not robust)",
                None: ", unknown whether it exists"}[s.lock_owner_alive]
        lines.append(f"  assignment lock held by thread {s.lock_owner}{held}")
    rows = []
    for r in s.rings:
        if r.writer == "free" and not r.committed_pos and r.lag_slots in (None, 0):
            continue
        rows.append((str(r.ring), r.writer, _n(r.fill_pct, "{:.1f}%"), _n(r.lag_slots), _n(r.slowest_reader),
                     _n(r.claimed_slots), _n(r.commit_per_s_est, est=True), _n(r.lapped_slots_est, est=s.overwrite)))
    if rows:
        heads = ("ring", "writer", "fill", "lag", "slowest", "claimed", "commit/s", "lapped")
        widths = [max(len(h), *(len(x[i]) for x in rows)) for i, h in enumerate(heads)]
        lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(heads, widths)))
        lines.extend("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows)
    for rd in s.readers:
        lines.append(f"  reader {rd.reader}: {rd.threads} thread(s), lag max {_n(rd.lag_max_slots)} slots, "
                     f"released {_n(rd.release_per_s_est, est=True)}/s")
    return lines


def format_fipsipc(view: FipsIpcView, escape: Callable[[str], str] = escape_text) -> str:
    """The ``fipstop snapshot --fipsipc`` section (``~``: an estimate, ``-``: unknown)."""
    if view.unavailable:
        return f"FIPS-IPC: {escape(view.unavailable)}"
    lines: list[str] = []
    for s in view.segments:
        if lines:
            lines.append("")
        lines.extend(_segment_text(s, escape))
    for r in view.rejected:
        where = f"shmid {r.shmid} key {r.key:#010x}" if r.shmid >= 0 else "not found"
        lines.append(f"FIPS-IPC {where}: not read: {escape(r.reason)}")
    if not lines:
        lines.append("FIPS-IPC: no prototype segment on this host")
    return "\n".join(lines)


Sample = tuple[str, str, str, dict[str, Any], float | int]  # family, kind, help, labels, value


def fipsipc_metrics(view: FipsIpcView) -> Iterable[Sample]:
    """Gauges of the prototype's segments (``fips_ipc_*``), exact values only."""
    for s in view.segments:
        seg = {"shmid": s.shmid, "key": f"{s.key:#010x}", "name": s.label}
        yield ("fips_ipc_segment_attached_processes", "gauge", "Processes the kernel sees attached to the segment.",
               seg, s.attached)
        yield ("fips_ipc_segment_gone_processes", "gauge", "Registered writers and readers no longer attached "
               "(killed without fips_buf_destroy).", seg, s.gone)
        yield ("fips_ipc_segment_readers", "gauge", "Reader processes registered.", seg, s.readers_registered)
        if s.lock_owner is None or s.lock_owner_alive is not None:
            yield ("fips_ipc_segment_lock_orphaned", "gauge", "1 when the header's assignment lock is held by a "
                   "thread that no longer exists (it stays locked for ever), else 0.", seg,
                   int(s.lock_owner is not None and s.lock_owner_alive is False))
        for r in s.rings:
            lab = {**seg, "ring": r.ring}
            yield ("fips_ipc_ring_slots", "gauge", "Slots of the ring (one record each).", lab, s.slots)
            if r.fill_pct is not None:
                yield ("fips_ipc_ring_fill_ratio", "gauge", "Share of the ring the slowest registered reader "
                       "has not released.", lab, r.fill_pct / 100.0)
            if r.lag_slots is not None:
                yield ("fips_ipc_ring_slowest_lag_records", "gauge", "Records the slowest registered reader has "
                       "not released.", lab, r.lag_slots)
        for p in s.positions:
            yield ("fips_ipc_reader_lag_records", "gauge", "Records committed the reader has not released.",
                   {**seg, "reader": p.reader, "ring": p.ring}, p.lag_slots)


def _tap_head(t: IpcTap) -> str:
    return f"tap shmid {t.shmid} ring {t.ring}"


def format_taps(taps: list[IpcTap]) -> str:
    """``snapshot --fipsipc-tap N``: each ring's newest records, escaped, with the copy's caveat."""
    lines: list[str] = []
    for t in taps:
        if t.error:
            lines.append(f"  {_tap_head(t)}: {escape_text(t.error)}")
            continue
        note = "  (the writer may have overwritten some while they were copied)" if t.maybe_rewritten else ""
        lines.append(f"  {_tap_head(t)}: {len(t.records)} newest record(s), oldest first{note}")
        for r in t.records:
            cut = "  [length prefix past the slot: cut]" if r.length_bad else ""
            lines.append(f"    slot {r.slot}: {escape_bytes(r.payload)}{cut}")
    return "\n".join(lines)


def taps_json(taps: list[IpcTap]) -> list[dict[str, Any]]:
    """Payloads as escaped text (control bytes as \\xNN), like the ring tap of libfips domains."""
    return [{"shmid": t.shmid, "ring": t.ring, "maybe_rewritten": t.maybe_rewritten, "error": t.error or None,
             "records": [{"slot": r.slot, "payload": escape_bytes(r.payload), "length_bad": r.length_bad}
                         for r in t.records]} for t in taps]
