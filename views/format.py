"""Number, time and bar formatting shared by the screens (pure, no textual).

Every function returns plain strings; colours are chosen by the callers from
:mod:`fipstop.views.palette`.  Attacker-controlled names go through
:func:`name` (escaped, never markup).
"""

from __future__ import annotations

import math
import time

from fipstop.textsafe import escape_bytes, escape_text

DASH = "-"
_BLOCKS = " ▏▎▍▌▋▊▉█"
_SPARK = "▁▂▃▄▅▆▇█"


def name(raw: bytes | str) -> str:
    """A fixed-size C name field (NUL-padded bytes) or str, escaped for display."""
    if isinstance(raw, bytes | bytearray):
        return escape_bytes(bytes(raw).split(b"\0", 1)[0])
    return escape_text(raw)


def si(value: float) -> str:
    """12 -> "12", 12345 -> "12.3k", 1.5e6 -> "1.50M"; NaN -> "-"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    v = float(value)
    neg = v < 0
    v = abs(v)
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div * 0.9995:
            q = v / div
            s = f"{q:.2f}" if q < 9.995 else f"{q:.1f}" if q < 99.95 else f"{q:.0f}"
            return ("-" if neg else "") + s + unit
    if v == int(v) or v >= 99.5:
        s = f"{v:.0f}"
    elif v >= 9.95:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}".rstrip("0").rstrip(".")
    return ("-" if neg else "") + s


def count(value: int) -> str:
    """An integer counter, SI-shortened from 10 000 on."""
    v = int(value)
    if v < 10_000:
        return str(v)
    return si(v)


def size(value: float) -> str:
    """Bytes: "512 B", "1.5 KiB", "16 MiB"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    v = float(value)
    for div, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if v >= div:
            q = v / div
            return f"{q:.0f} {unit}" if q >= 100 or q == int(q) else f"{q:.1f} {unit}"
    return f"{v:.0f} B"


def pct(value: float) -> str:
    if value is None or math.isnan(value):
        return DASH
    if value >= 99.95 or value == 0:
        return f"{value:.0f}%"
    return f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


def duration(seconds: float) -> str:
    """0.0123 -> "12ms", 1.5 -> "1.5s", 75 -> "1m15s", 4000 -> "1h06m"; NaN -> "-"."""
    if seconds is None or math.isnan(seconds):
        return DASH
    if math.isinf(seconds):
        return "∞"
    s = max(float(seconds), 0.0)
    if s == 0:
        return "0s"
    if s < 0.001:
        return f"{s * 1e6:.0f}µs"
    if s < 1:
        return f"{s * 1e3:.0f}ms"
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def age_ns(ns: int) -> str:
    if ns is None or ns < 0:
        return DASH
    return duration(ns / 1e9)


def clock(realtime_ns: int) -> str:
    """HH:MM:SS in local time."""
    return time.strftime("%H:%M:%S", time.localtime(realtime_ns / 1e9))


def datetime_s(realtime_ns: int) -> str:
    if not realtime_ns:
        return DASH
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(realtime_ns / 1e9))


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of ``width`` cells with eighth-cell resolution."""
    if width <= 0:
        return ""
    f = 0.0 if fraction is None or math.isnan(fraction) else min(max(fraction, 0.0), 1.0)
    eighths = int(round(f * width * 8))
    full, part = divmod(eighths, 8)
    out = "█" * full
    if full < width:
        out += _BLOCKS[part] if part else ""
    return out.ljust(width)


def sparkline(values, width: int, *, top: float | None = None) -> str:
    """The last ``width`` values as block characters scaled to ``top``
    (default: their max); NaN (no data) is a blank, 0 the lowest block."""
    vals = list(values)[-width:] if width > 0 else []
    finite = [v for v in vals if v is not None and not math.isnan(v)]
    hi = top if top is not None else (max(finite) if finite else 0.0)
    out = []
    for v in vals:
        if v is None or math.isnan(v):
            out.append(" ")
        elif hi <= 0 or v <= 0:
            out.append(_SPARK[0])
        else:
            out.append(_SPARK[min(int(v / hi * (len(_SPARK) - 1) + 0.5), len(_SPARK) - 1)])
    return "".join(out).rjust(width)


def middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut in the middle where it must be
    (``demo-net-0003`` in 10: ``demo-…0003``): names that share a prefix differ
    at their ends, and an end cut would make them look the same."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    left = width // 2
    right = width - 1 - left
    return text[:left] + "…" + (text[len(text) - right:] if right else "")


def fit_frames(frames: list[str], width: int, sep: str = " › ") -> str:
    """A stack (root first) in ``width`` cells: the frames nearest the leaf,
    where stacks differ, are kept; the root side is dropped behind ``…``,
    and a leaf longer than the width is cut in its middle."""
    whole = sep.join(frames)
    if len(whole) <= width or not frames:
        return whole if len(whole) <= width else middle(whole, width)
    kept: list[str] = []
    used = len("…")
    for f in reversed(frames):
        need = len(f) + len(sep)
        if used + need > width:
            break
        kept.insert(0, f)
        used += need
    if not kept:
        return middle(frames[-1], width)
    return "…" + sep + sep.join(kept)
