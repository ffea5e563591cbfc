"""``fipstop check --fipsipc``: the FIPS paper's prototype rings, in the same checks.

The thresholds are the libfips checks' own: fill (the fullest prototype
ring), lag in records (slots), and drops per second for records lapped
unread (an estimate: the message says so).  A segment named with
``--fipsipc NAME`` that cannot be read is CRITICAL (a header that fails
validation, like a bad domain file); one the scan found and refused is not
checked (another program's segment).  A registered writer or reader whose
process is gone is a WARNING, CRITICAL when it holds a full ring the writer
must wait on.
"""

from __future__ import annotations

from fipstop.analysis.levels import CRITICAL, UNKNOWN, WARNING, Range, Thresholds, as_range, level
from fipstop.model.fipsipc import FipsIpcView, IpcRing
from fipstop.textsafe import escape_text

__all__ = ["check_fipsipc"]


Result = tuple[str, int, str]  # name, status, message
# as check.Perf: label, value, unit, warn, crit, min, max
PerfData = tuple[str, float, str, float | Range | None, float | Range | None, float | None, float | None]


class _Report:
    def __init__(self) -> None:
        self.results: list[Result] = []
        self.perf: list[PerfData] = []

    def add(self, name: str, status: int, message: str) -> None:
        self.results.append((name, status, message))

    def perf_add(self, label: str, value: float, uom: str, warn: float | Range | None, crit: float | Range | None,
                 min_: float | None, max_: float | None) -> None:
        self.perf.append((label, value, uom, warn, crit, min_, max_))



def _shown(x: float | Range) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) else str(x)


def check_fipsipc(view: FipsIpcView, th: Thresholds) -> tuple[list[Result], list[PerfData]]:
    """The results and performance data of the prototype's segments."""
    rep = _Report()
    if view.unavailable:
        rep.add("fipsipc", UNKNOWN, f"FIPS-IPC: {escape_text(view.unavailable)}")
        return rep.results, rep.perf
    for rej in view.rejected:
        if rej.name:
            rep.add("fipsipc", CRITICAL, f"FIPS-IPC {escape_text(rej.name)}: {escape_text(rej.reason)}")
    fill_max = lag_max = 0.0
    lapped_per_s = 0.0
    have_fill = have_lag = False
    for s in view.segments:
        name = escape_text(s.label)
        full_waiting = [r for r in s.rings if not s.overwrite and r.fill_pct is not None
                        and as_range(th.crit_fill_pct).alerts(r.fill_pct)]
        worst: IpcRing | None = None
        for r in s.rings:
            if r.fill_pct is not None:
                have_fill = True
                fill_max = max(fill_max, r.fill_pct)
                if worst is None or r.fill_pct > (worst.fill_pct or 0):
                    worst = r
            if r.lag_slots is not None:
                have_lag = True
                lag_max = max(lag_max, float(r.lag_slots))
            if r.lapped_slots_est and s.dt_s > 0:
                lapped_per_s += r.lapped_slots_est / s.dt_s
        if s.gone:
            rep.add("fipsipc", CRITICAL if full_waiting else WARNING,
                    f"FIPS-IPC {name}: {s.gone} registered process(es) gone"
                    + (", the writer waits on a full ring" if full_waiting else ""))
        if worst is not None and worst.fill_pct is not None:
            st = level(worst.fill_pct, th.warn_fill_pct, th.crit_fill_pct)
            if st:
                over = sum(1 for r in s.rings
                           if r.fill_pct is not None and as_range(th.warn_fill_pct).alerts(r.fill_pct))
                rep.add("fipsipc", st, f"FIPS-IPC {name}: {over} of {len(s.rings)} rings outside the fill "
                        f"threshold {_shown(th.warn_fill_pct)}% (ring {worst.ring} {worst.fill_pct:.1f}%)")
    if have_lag:
        st = level(lag_max, th.warn_lag_records, th.crit_lag_records)
        if st:
            rep.add("fipsipc", st, f"a FIPS-IPC reader is {lag_max:.0f} records behind")
        rep.perf_add("fipsipc_lag_max_records", int(lag_max), "", th.warn_lag_records, th.crit_lag_records, 0, None)
    if have_fill:
        rep.perf_add("fipsipc_fill_max", round(fill_max, 2), "%", th.warn_fill_pct, th.crit_fill_pct, 0, 100)
    st = level(lapped_per_s, th.warn_drops_per_s, th.crit_drops_per_s)
    if st:
        rep.add("fipsipc", st, f"FIPS-IPC readers lapped: ~{lapped_per_s:.0f} records/s overwritten unread "
                "(estimate)")
    rep.perf_add("fipsipc_segments", len(view.segments), "", None, None, 0, None)
    return rep.results, rep.perf
