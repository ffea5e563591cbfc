"""The replay timeline: one line under the header while replaying.

``12:00:00 ━━━━━▲━━━━━━━━━●━━━━━━ 12:45:10  2x``: the recording's extent,
where drops (red), bans (magenta) and findings (yellow) happened - one cell
shows the most severe mark of the frames it covers - and the position (●).
A click on the bar seeks there (:func:`time_at`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from fipstop.views import format as fmt
from fipstop.views import palette

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.replay import Timeline

MARK_DROPS, MARK_BANS, MARK_FINDINGS = 1, 2, 4  # fipstop.recording's bits (kept import-free)
_MARK_STYLE = ((MARK_DROPS, palette.DROPS), (MARK_BANS, "bold #c678dd"), (MARK_FINDINGS, "bold yellow"))
_LEFT_PAD = 1


def _bar_geometry(tl: Timeline, width: int) -> tuple[int, int, str, str]:
    """(bar start column, bar width, left label, right label)."""
    left = fmt.clock(tl.first_t_ns) + " "
    speed = f"{tl.speed:g}x"
    right = " " + fmt.clock(tl.last_t_ns) + ("  following" if tl.following else "") + f"  {speed}"
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
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" " * _LEFT_PAD)
    t.append(left, style=palette.LABEL)
    for i, m in enumerate(cells):
        if i == at:
            t.append("●", style="bold")
            continue
        style = palette.LABEL
        ch = "━"
        for bit, st in _MARK_STYLE:  # the most severe mark wins
            if m & bit:
                style, ch = st, "▲"
                break
        t.append(ch, style=style if i < at or m else palette.ZERO)
    t.append(right, style=palette.LABEL)
    return t


def time_at(tl: Timeline, width: int, x: int) -> int | None:
    """The time under column ``x`` of the bar, or None outside it."""
    start, bar_w, _, _ = _bar_geometry(tl, width)
    if not start <= x < start + bar_w:
        return None
    span = max(tl.last_t_ns - tl.first_t_ns, 1)
    return tl.first_t_ns + int((x - start + 0.5) * span / bar_w)


def next_mark(times: list[int], at_ns: int, direction: int, gap_ns: int) -> int | None:
    """Where the next (direction > 0) or previous run of marks starts.

    Marked frames come in runs (a drop lasts several frames): standing in a
    run, "next" skips to the first mark more than ``gap_ns`` after the run's
    end, and "previous" to the start of the run before the current one."""
    if direction > 0:
        prev = at_ns
        for t in (t for t in times if t > at_ns):
            if t - prev > gap_ns:
                return t
            prev = t
        return None
    earlier = [t for t in times if t < at_ns]
    nxt = at_ns
    for i in range(len(earlier) - 1, -1, -1):
        t = earlier[i]
        if nxt - t > gap_ns:
            run_start = t
            for u in reversed(earlier[:i]):
                if run_start - u > gap_ns:
                    break
                run_start = u
            return run_start
        nxt = t
    return None
