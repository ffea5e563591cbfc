"""The headless text of ``fipstop profile``: a ``perf report``-like summary.

Thread names, symbols and Python function names come from the profiled
process: every one goes through ``escape_text``.
"""

from __future__ import annotations

import textwrap

from fipstop.probes.stacks import ProfileSample, StackCount
from fipstop.probes.threads import CATEGORIES
from fipstop.profile.accumulate import lost_stack_shares
from fipstop.profile.session import ProfileReport
from fipstop.textsafe import escape_text

CATEGORY_TITLES = {"oncpu": "ON-CPU", "runqueue": "RUNQ", "lock": "LOCK", "io": "IO", "sleep": "SLEEP",
                   "other": "OTHER"}
CATEGORY_NAMES = {"oncpu": "on CPU", "runqueue": "run queue", "lock": "lock", "io": "I/O", "sleep": "sleep",
                  "other": "other"}


def ns_text(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.0f} us"
    return f"{ns:.0f} ns"


def number_text(v: float) -> str:
    """A raw counter as it was counted: ``1234567`` and ``0.25``, never
    ``1.23457e+06`` (``{:g}``); NaN is ``unknown``."""
    v = float(v)
    if v != v:
        return "unknown"
    if v.is_integer():
        return str(int(v))
    return f"{v:.3f}".rstrip("0").rstrip(".")


def extra_text(extra: dict[str, float]) -> str:
    """A profiler's ``extra`` numbers, sorted by name: ``compile_s 3.412  ustack_eexist 120``."""
    return "  ".join(f"{k} {number_text(v)}" for k, v in sorted(extra.items()))


def lost_line(sample: ProfileSample) -> str:
    """``stacks lost: 2.1 % of on-CPU samples, 0.4 % of off-CPU time`` (from the stacks' lost frames)."""
    shares = lost_stack_shares(sample)
    parts = [f"{v:.1f} % {what}" if v is not None else f"no {what[3:]}"
             for v, what in ((shares["oncpu"], "of on-CPU samples"), (shares["offcpu"], "of off-CPU time"))]
    return "stacks lost: " + ", ".join(parts)


def stack_text(st: StackCount, limit: int = 6) -> str:
    frames = [escape_text(f) for f in st.frames]
    if len(frames) > limit:
        frames = ["...", *frames[-limit:]]
    return " > ".join(frames) or "?"


def thread_label(st: StackCount) -> str:
    return f"{escape_text(st.thread) or 'thread'}-{st.tid}" if st.tid else escape_text(st.thread)


def _value(v: float, unit: str) -> str:
    return ns_text(v) if unit == "ns" else f"{int(v)}"


def render_text(report: ProfileReport, *, oncpu: bool = True, offcpu: bool = True, top: int = 10) -> str:
    th = report.threads
    out: list[str] = []
    name = escape_text(report.comm or th.comm or "?")
    out.append(f"profile of pid {report.pid} ({name}) over {report.duration_ns / 1e9:.2f} s")
    out.append("probes: " + "; ".join(
        f"{p.name} ok" if p.available else f"{p.name}: {escape_text(p.reason or 'not available')}"
        for p in report.probes))
    if th.available:
        split = th.process_split()
        out.append("process: " + "  ".join(f"{CATEGORY_NAMES[c]} {split[c]:.1f}%" for c in CATEGORIES)
                   + f"   (threads sampled by {th.method} at {th.hz_achieved:.0f}/{th.hz:.0f} Hz,"
                   f" sampler CPU {th.sampler_cpu_pct:.2f}%)")
        for n in th.notes:
            out.append(f"note: {escape_text(n)}")
        out.append("")
        out.append(f"  {'TID':>7}  {'THREAD':<16}" + "".join(f"{CATEGORY_TITLES[c]:>7}" for c in CATEGORIES)
                   + "  TOP WAIT")
        for t in sorted(th.threads, key=lambda t: (-(t.lock_pct + t.io_pct), t.tid)):
            wait = escape_text(t.top_waits[0][0]) if t.top_waits else ""
            out.append(f"  {t.tid:>7}  {escape_text(t.name)[:16]:<16}"
                       + "".join(f"{t.pct(c):>6.1f}%" for c in CATEGORIES) + f"  {wait}")
        if th.untracked_threads:
            out.append(f"  ... {th.untracked_threads} more threads not sampled")
    else:
        out.append(f"threads: not available: {escape_text(th.reason)}")
    src, locks = report.top_locks()
    out.append("")
    how = "measured by bpf" if src == "bpf" else f"estimated from {th.hz_achieved:.0f} Hz /proc ticks"
    out.append(f"TOP LOCKS ({how})")
    if locks:
        out.append(f"  {'ADDRESS':<18} {'WAIT':>9} {'WAITS':>7}  WAITERS")
        for lw in locks[:top]:
            tids = " ".join(str(t) for t in lw.waiter_tids[:6]) + (" ..." if len(lw.waiter_tids) > 6 else "")
            out.append(f"  {lw.address:#018x} {ns_text(lw.wait_ns):>9} {lw.waits:>7}  {len(lw.waiter_tids)}"
                       f" thread(s): {tids}")
            for st in lw.stacks[:2]:
                out.append(f"      waiting: {stack_text(st)}")
            for st in lw.holder_stacks[:1]:
                out.append(f"      holder:  {stack_text(st)}")
    else:
        out.append("  none seen")
    for prof in report.profiles:
        if not prof.available:
            out.append("")
            out.append(f"{prof.source}: not available: {escape_text(prof.reason)}")
            continue
        out.append("")
        out.append(f"== {prof.source} over {prof.duration_ns / 1e9:.2f} s")
        if prof.source == "bpf":
            out.append("  " + lost_line(prof))
        extra = extra_text(prof.extra)
        out.extend(textwrap.wrap(extra, 110, initial_indent="  ", subsequent_indent="  "))
        if prof.reason:
            out.append(f"  note: {escape_text(prof.reason)}")
        sections = []
        if oncpu:
            sections.append(("ON-CPU", prof.oncpu, prof.oncpu_unit))
        if offcpu:
            sections.append(("OFF-CPU" if prof.source != "py-spy" else "IDLE", prof.offcpu, "ns"))
        for title, stacks, unit in sections:
            total = sum(s.value for s in stacks)
            if title == "ON-CPU":
                hot = [r for r in report.hot_functions("oncpu", 1000) if r[0] == prof.source][:top]
                out.append(f"  HOT ON-CPU FUNCTIONS ({unit})")
                for _, fn, v, pct in hot:
                    out.append(f"    {pct:5.1f}% {_value(v, unit):>8}  {escape_text(fn)}")
                if not hot:
                    out.append("    none")
            out.append(f"  TOP {title} STACKS ({'time' if unit == 'ns' else unit})")
            for st in sorted(stacks, key=lambda s: -s.value)[:top]:
                pct = 100.0 * st.value / total if total else 0.0
                out.append(f"    {pct:5.1f}% {_value(st.value, unit):>9}  {thread_label(st)}: {stack_text(st)}")
            if not stacks:
                out.append("    none")
    return "\n".join(out) + "\n"
