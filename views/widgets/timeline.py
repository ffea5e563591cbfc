"""The replay timeline: one line under the header while replaying.

``12:00:00 ━━━━━▲━━━━━━━━━●━━━━━━ 12:45:10  2x``: the recording's extent,
where drops (red), bans (magenta) and findings (yellow) happened - one cell
shows the most severe mark of the frames it covers - and the position (●).
A click on the bar seeks there (:func:`time_at`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text

from fipstop.views import format as fmt
from fipstop.views import palette

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.recording.replay import Timeline

MARK_DROPS, MARK_BANS, MARK_FINDINGS = 1, 2, 4  # fipstop.recording.store's bits (kept import-free)
_MARK_STYLE = ((MARK_DROPS, palette.DROPS), (MARK_BANS, "bold #c678dd"), (MARK_FINDINGS, "bold yellow"))
_LEFT_PAD = 1


#: a recording whose last frame is older than this is finished, not being written: its end says "end"
FRESH_NS = 15_000_000_000


def end_state(tl: Timeline, now_ns: int | None = None) -> str:
    """At the end of the recording: "following" while it is being written
    (its last frame is recent), "end" once it is finished; "" elsewhere.
    A finished recording shown as "following" promised frames that never come."""
    if not tl.following:
        return "end" if tl.at_t_ns >= tl.last_t_ns else ""
    now = time.time_ns() if now_ns is None else now_ns
    return "following" if now - tl.last_t_ns <= FRESH_NS else "end"


def _bar_geometry(tl: Timeline, width: int) -> tuple[int, int, str, str]:
    """(bar start column, bar width, left label, right label)."""
    left = fmt.clock(tl.first_t_ns) + " "
    speed = f"{tl.speed:g}x"
    state = end_state(tl)
    right = " " + fmt.clock(tl.last_t_ns) + (f"  {state}" if state else "") + f"  {speed}"
    bar_w = max(width - _LEFT_PAD - len(left) - len(right), 4)
    return _LEFT_PAD + len(left), bar_w, left, right


def timeline_text(tl: Timeline, width: int) -> Text:
    start, bar_w, left, right = _bar_geometry(tl, width)
    span = max(tl.last_t_ns - tl.first_t_ns, 1)
    cells = [0] * bar_w
    for t, m in tl.marks:
        i = min(max(int((t - tl.first_t_ns) * bar_w / span), 0), bar_w - 1)
        cells[i] |= m
    at = min(max(int((tl.at_t_ns - tl.first_t_ns) * bar_w / span), 0), bar_w - 1)
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(" " * _LEFT_PAD)
    out.append(left, style=palette.LABEL)
    for i, m in enumerate(cells):
        if i == at:
            out.append("●", style="bold")
            continue
        style = palette.LABEL
        ch = "━"
        for bit, st in _MARK_STYLE:  # the most severe mark wins
            if m & bit:
                style, ch = st, "▲"
                break
        out.append(ch, style=style if i < at or m else palette.ZERO)
    out.append(right, style=palette.LABEL)
    return out


def time_at(tl: Timeline, width: int, x: int) -> int | None:
    """The time under column ``x`` of the bar, or None outside it."""
    start, bar_w, _, _ = _bar_geometry(tl, width)
    if not start <= x < start + bar_w:
        return None
    span = max(tl.last_t_ns - tl.first_t_ns, 1)
    return tl.first_t_ns + int((x - start + 0.5) * span / bar_w)


def run_starts(times: list[int], gap_ns: int) -> list[int]:
    """The first mark of each run: marked frames come in runs (a drop lasts
    several frames); a mark more than ``gap_ns`` after the one before starts a run."""
    out: list[int] = []
    prev: int | None = None
    for t in sorted(times):
        if prev is None or t - prev > gap_ns:
            out.append(t)
        prev = t
    return out


def next_mark(times: list[int], at_ns: int, direction: int, gap_ns: int) -> int | None:
    """Where the next (``}``, direction > 0) or previous (``{``) run of marks
    starts: the nearest run start after ``at_ns``, or before it.  The two
    mirror each other, as vim's paragraph keys: standing inside a run, ``}``
    goes to the next run and ``{`` to the start of this one; from a run's
    start, ``{`` goes to the run before."""
    starts = run_starts(times, gap_ns)
    if direction > 0:
        return next((t for t in starts if t > at_ns), None)
    return next((t for t in reversed(starts) if t < at_ns), None)
