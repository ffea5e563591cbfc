"""Profile (4, or ``p`` on a ring or consumer): where one process's time goes.

- per thread, a stacked bar of its wall time: on CPU, run queue, lock, I/O,
  sleep, other (from /proc: always there, no root needed);
- the top locks: address, wait time, waits, waiters, the waiting and (where
  bpf knows them) the holders' stacks;
- hot functions and the top stacks, on-CPU or off-CPU (``o`` toggles);
- a collapsible flame-graph-like tree of the same stacks;
- every profiler that cannot run says why, in place of its panel.

``e`` writes the shown stacks as folded text (flamegraph.pl, speedscope).
The screen never calls a probe: the app polls the source's profile in a
worker and hands the newest :class:`fipstop.profile.session.ProfileReport`
over through ``refresh_view``.  Thread names and frames come from the
profiled process: everything shown goes through ``escape_text`` and plain
``Text`` (never markup).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Static, Tree
from textual.widgets.tree import TreeNode

from fipstop.probes.threads import CATEGORIES
from fipstop.profile.accumulate import lost_stack_shares
from fipstop.profile.render import extra_text
from fipstop.profile.session import folded_note
from fipstop.textsafe import escape_text
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.format import fit_frames, middle
from fipstop.views.widgets.header import StatusHeader

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.model.snapshot import Snapshot
    from fipstop.probes.stacks import ProfileSample
    from fipstop.profile.session import ProfileReport

#: one colour per share of a thread's time (red stays reserved for drops)
CATEGORY_STYLE = {
    "oncpu": "#98c379",
    "runqueue": "#61afef",
    "lock": "#c678dd",
    "io": "#d19a66",
    "sleep": "#4b5263",
    "other": "#5c6370",
}
CATEGORY_LABEL = {"oncpu": "on CPU", "runqueue": "run queue", "lock": "lock", "io": "I/O", "sleep": "sleep",
                  "other": "other"}
#: without colour (NO_COLOR) each category of the time split keeps a glyph of its own, in the bar and the legend
CATEGORY_GLYPH = {"oncpu": "█", "runqueue": "▓", "lock": "▒", "io": "░", "sleep": "·", "other": "-"}
BAR_WIDTH = 40
TOP = 8
TREE_CHILDREN = 25
#: the THREAD column: as wide as the overview's at 200 columns
NAME_WIDTH = 16
#: a row is this wide when the screen's width is not known yet
DEFAULT_WIDTH = 120


def ring_thread_names(snapshot: Snapshot | None, pid: int) -> dict[int, str]:
    """tid -> the thread name the overview shows (the name the producer gave
    its ring), for the rings of process ``pid``: /proc's comm is cut at 15
    bytes and is often the process's, so the profile would name the same
    thread differently (``fips-demo-produ`` vs ``demo-net-0000``)."""
    if snapshot is None:
        return {}
    r = snapshot.rings
    out: dict[int, str] = {}
    for p, tid, name in zip(r["pid"].tolist(), r["tid"].tolist(), r["thread_name"].tolist()):
        if int(p) == pid and tid:
            n = fmt.name(name)
            if n:
                out[int(tid)] = n
    return out


def name_width(names: Iterable[str], least: int = NAME_WIDTH, most: int = 2 * NAME_WIDTH) -> int:
    """The THREAD column sized to its content: at least ``least`` (the
    header and the overview's width), at most ``most`` (longer ones are cut in
    the middle)."""
    return max(least, min(most, max((len(n) for n in names), default=0)))


def thread_name(tid: int, comm: str, names: dict[int, str]) -> str:
    """The overview's name of thread ``tid`` when a ring names it, else its comm (escaped)."""
    return names.get(tid) or escape_text(comm)


def ns_text(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f}ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.0f}us"
    return f"{ns:.0f}ns"


def stacked_bar(shares: dict[str, float], width: int = BAR_WIDTH) -> Text:
    """``width`` cells split by the shares (percent), largest remainders
    rounded up so the cells always add up to ``width``."""
    raw = [(c, max(shares.get(c, 0.0), 0.0) * width / 100.0) for c in CATEGORIES]
    cells = {c: int(v) for c, v in raw}
    left = width - sum(cells.values())
    for c, v in sorted(raw, key=lambda cv: cv[1] - int(cv[1]), reverse=True):
        if left <= 0:
            break
        if v > 0:
            cells[c] += 1
            left -= 1
    if left > 0:
        cells["other"] += left
    t = Text(no_wrap=True)
    for c in CATEGORIES:
        if cells[c]:
            t.append(glyph(c) * cells[c], style=CATEGORY_STYLE[c])
    return t


def glyph(category: str) -> str:
    """The bar's cell for ``category``: one block in colour, the category's own glyph without."""
    return CATEGORY_GLYPH[category] if palette.MONOCHROME else "█"


def legend() -> Text:
    t = Text(no_wrap=True)
    for c in CATEGORIES:
        t.append(f" {CATEGORY_GLYPH[c] if palette.MONOCHROME else '■'} ", style=CATEGORY_STYLE[c])
        t.append(CATEGORY_LABEL[c] + " ", style=palette.LABEL)
    return t


def threads_text(report: ProfileReport, width: int = BAR_WIDTH, names: dict[int, str] | None = None,
                 label: str = "") -> Text:
    """``names``: the overview's thread names (:func:`ring_thread_names`);
    ``label``: what span the split covers, shown above it."""
    names = names or {}
    th = report.threads
    t = Text(no_wrap=True, overflow="ellipsis")
    if not th.available:
        t.append(" thread split not available: ", style=palette.WARN_BOLD)
        t.append(escape_text(th.reason))
        return t
    if label:
        t.append(f" thread split: {label}\n", style=palette.LABEL)
    rows = [("process", report.pid, th.process_split(), "")]
    for s in sorted(th.threads, key=lambda s: (-(s.lock_pct + s.io_pct + s.runqueue_pct), s.tid)):
        rows.append((thread_name(s.tid, s.name, names), s.tid, {c: s.pct(c) for c in CATEGORIES},
                     escape_text(s.top_waits[0][0]) if s.top_waits else ""))
    nw = name_width(r[0] for r in rows)
    t.append(f" {'TID':>7} {'THREAD':<{nw}} ", style="bold")
    t.append(f"{'TIME SPLIT':<{width}} ", style="bold")
    t.append(" ".join(f"{c[:5].upper():>5}" for c in ("oncpu", "runq", "lock", "io", "sleep")) + "  TOP WAIT\n",
             style="bold")
    for i, (name, tid, shares, wait) in enumerate(rows):
        t.append(f" {tid:>7} ", style=palette.LABEL)
        t.append(f"{middle(name, nw):<{nw}} ", style="bold" if i == 0 else "default")
        t.append_text(stacked_bar(shares, width))
        t.append(" ")
        for c in ("oncpu", "runqueue", "lock", "io", "sleep"):
            v = shares[c]
            t.append(f"{v:5.1f}", style=CATEGORY_STYLE[c] if v >= 0.05 and c != "sleep" else palette.ZERO)
            t.append(" ")
        t.append(f" {wait}\n", style=palette.LABEL)
    if th.untracked_threads:
        t.append(f" ... {th.untracked_threads} more threads not sampled\n", style=palette.WARN)
    t.append_text(legend())
    t.append(f"\n ticks {th.hz_achieved:.0f}/{th.hz:.0f} Hz by {th.method}, sampler CPU {th.sampler_cpu_pct:.2f}%",
             style=palette.LABEL)
    for n in th.notes:
        t.append("\n note: " + escape_text(n), style=palette.WARN)
    return t


def locks_text(report: ProfileReport, width: int = DEFAULT_WIDTH) -> Text:
    src, locks = report.top_locks()
    t = Text(no_wrap=True, overflow="ellipsis")
    how = "measured by bpf" if src == "bpf" else "estimated from /proc ticks; bpf adds stacks"
    t.append(f" top locks ({how})\n", style=palette.LABEL)
    if not locks:
        t.append(" no thread was seen waiting on a lock", style=palette.ZERO)
        return t
    t.append(f" {'ADDRESS':<18} {'WAIT':>8} {'WAITS':>6}  WAITERS\n", style="bold")
    for lw in locks[:TOP]:
        t.append(f" {lw.address:#018x}", style=CATEGORY_STYLE["lock"])
        t.append(f" {ns_text(lw.wait_ns):>8} {lw.waits:>6}  ")
        tids = " ".join(str(x) for x in lw.waiter_tids[:8]) + (" …" if len(lw.waiter_tids) > 8 else "")
        t.append(f"{len(lw.waiter_tids)}: {tids}\n", style=palette.LABEL)
        for st in lw.stacks[:1]:
            t.append(f"   waiting {fit_frames([escape_text(f) for f in st.frames], max(8, width - 11))}\n",
                     style=palette.LABEL)
        for st in lw.holder_stacks[:1]:
            t.append(f"   holder  {fit_frames([escape_text(f) for f in st.frames], max(8, width - 11))}\n",
                     style=palette.LABEL)
    t.rstrip()
    return t


def value_text(value: float, unit: str) -> str:
    """A stack's or function's value: a sample count, or time for ns."""
    return ns_text(value) if unit == "ns" else f"{int(value)}"


def stacks_text(report: ProfileReport, which: str, width: int = DEFAULT_WIDTH,
                names: dict[int, str] | None = None) -> Text:
    """Hot functions and top stacks, with their sample counts (or times);
    each row fits ``width`` cells by dropping root-side frames, never the leaf."""
    names = names or {}
    t = Text(no_wrap=True, overflow="ellipsis")
    profiles = report.available_profiles()
    if not profiles:
        t.append(" no stack profiler ran (see below why)", style=palette.WARN)
        return t
    hot = report.hot_functions(which, TOP)
    kind = "on-CPU" if which == "oncpu" else "off-CPU / idle"
    units = {p.source: (p.oncpu_unit if which == "oncpu" else "ns") for p in profiles}
    t.append(f" hot {kind} functions (self)\n", style="bold")
    t.append(f" {'SHARE':>6} {'SAMPLES' if which == 'oncpu' else 'TIME':>8} {'SOURCE':<7} FUNCTION\n", style="bold")
    for src, fn, value, pct in hot:
        t.append(f" {pct:5.1f}% ", style=CATEGORY_STYLE["oncpu" if which == "oncpu" else "lock"])
        t.append(f"{value_text(value, units.get(src, 'samples')):>8} {src:<7}", style=palette.LABEL)
        t.append(f" {middle(escape_text(fn), max(8, width - 25))}\n")
    if not hot:
        t.append(" none in this interval\n", style=palette.ZERO)
    t.append(f" top {kind} stacks\n", style="bold")
    for p in profiles:
        stacks = p.oncpu if which == "oncpu" else p.offcpu
        total = sum(s.value for s in stacks) or 1
        top = sorted(stacks, key=lambda s: (-s.value, s.tid, s.frames))[:TOP // max(len(profiles), 1) + 1]
        nw = name_width((thread_name(st.tid, st.thread, names) for st in top), least=1)
        for st in top:
            who = middle(thread_name(st.tid, st.thread, names), nw)
            head = (f" {100 * st.value / total:5.1f}% {value_text(st.value, units[p.source]):>8} "
                    f"{p.source:<7} {f'{who}-{st.tid}:':<{nw + 9}} ")
            t.append(head, style=palette.LABEL)
            t.append(fit_frames([escape_text(f) for f in st.frames], max(8, width - len(head))) + "\n")
    t.rstrip()
    return t


def lost_text(sample: ProfileSample) -> str:
    """The share of samples (on-CPU) and of time (off-CPU) whose stack was
    lost, as numbers: what ``[... stack lost: hash collision]`` rows add up to."""
    shares = lost_stack_shares(sample)
    parts = []
    for which, what in (("oncpu", "of on-CPU samples"), ("offcpu", "of off-CPU time")):
        v = shares[which]
        parts.append(f"{v:.1f} % {what}" if v is not None else f"no {what[3:]}")
    e = sample.extra
    lost = int(e.get("ustack_eexist", 0) + e.get("kstack_eexist", 0))
    full = int(e.get("ustack_enomem", 0) + e.get("kstack_enomem", 0))
    return (f"stacks lost: {parts[0]}, {parts[1]} ({lost} hash collisions, {full} with the stack map full,"
            f" {int(e.get('stack_map_resets', 0))} map resets)")


def unavailable_text(report: ProfileReport) -> Text:
    t = Text(no_wrap=False)
    for p in report.profiles:
        if not p.available:
            t.append(f" {p.source}: ", style=palette.WARN_BOLD)
            t.append("not available: " + escape_text(p.reason or "no reason given") + "\n", style=palette.WARN)
        elif p.reason:
            t.append(f" {p.source}: ", style=palette.LABEL)
            t.append(escape_text(p.reason) + "\n", style=palette.LABEL)
        if p.available and p.source == "bpf":
            t.append(f" {p.source}: ", style=palette.LABEL)
            t.append(lost_text(p) + "\n")
        if p.available and p.extra:
            t.append(f" {p.source}: ", style=palette.LABEL)
            t.append(extra_text(p.extra) + "\n", style=palette.LABEL)
    t.rstrip()
    return t


def stack_tree(report: ProfileReport, which: str) -> dict:
    """Merged stacks as nested dicts: name -> [value, children]; one root per source."""
    root: dict = {}
    for p in report.available_profiles():
        stacks = p.oncpu if which == "oncpu" else p.offcpu
        if not stacks:
            continue
        node = root.setdefault(p.source, [0, {}])
        for st in stacks:
            node[0] += st.value
            level = node[1]
            for f in st.frames:
                entry = level.setdefault(f, [0, {}])
                entry[0] += st.value
                level = entry[1]
    return root


class ProfileScreen(FipsScreen):
    SCREEN_NAME = "profile"
    BINDINGS = [
        Binding("escape", "app.back", "Back"),
        Binding("o", "toggle_which", "On/off-CPU"),
        Binding("a", "toggle_accumulated", "Total/interval"),
        Binding("e", "export", "Export folded"),
    ]
    DEFAULT_CSS = """
    #profile-body { height: 1fr; }
    #profile-body > Static { width: 1fr; height: auto; margin: 0 0 1 0; text-wrap: nowrap;
                             text-overflow: ellipsis; }
    #profile-body > #profile-unavailable { text-wrap: wrap; }
    #profile-tree { height: auto; max-height: 30; min-height: 3; }
    """

    def __init__(self, pid: int, stop: threading.Event | None = None) -> None:
        """``stop`` ends the app's profile worker of this screen when it closes."""
        super().__init__()
        self.pid = int(pid)
        self.stop = stop
        self.which = "oncpu"
        #: every interval summed (py-spy top's default), or the last interval only
        self.accumulated = True
        self._tree_key: tuple | None = None
        self.exported: str | None = None

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with VerticalScroll(id="profile-body"):
            yield Static(id="profile-title")
            yield Static(id="profile-threads")
            yield Static(id="profile-locks")
            yield Static(id="profile-stacks")
            yield Static(id="profile-unavailable")
            yield Tree("stacks", id="profile-tree")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#profile-tree", Tree).show_root = False
        self.refresh_view()
        # the start-up line counts seconds while bcc compiles (the report's own refresh stops it)
        self.set_interval(0.5, self._tick_progress, name="profile-progress")

    def _tick_progress(self) -> None:
        if self.report is None and not self.fips.profile_error:
            self.refresh_view()

    def on_unmount(self) -> None:
        # leaving the screen ends its profile: profilers cost CPU on the profiled machine
        if self.stop is not None:
            self.stop.set()

    @property
    def report(self) -> ProfileReport | None:
        r = self.fips.profile_report
        return r if r is not None and r.pid == self.pid else None

    def shown_report(self) -> ProfileReport | None:
        """What the panes show: the accumulated total, or the last interval."""
        report = self.report
        total = self.fips.profile_total
        if report is not None and self.accumulated and total is not None and total.report.pid == self.pid:
            return total.report
        return report

    def span_text(self) -> str:
        """What the shown stacks cover, in words (the title's)."""
        report = self.report
        total = self.fips.profile_total
        if report is None:
            return ""
        if self.accumulated and total is not None and total.report.pid == self.pid:
            n = total.intervals
            return f"sum of {n} interval{'s' if n != 1 else ''} ({total.report.duration_ns / 1e9:.1f} s)"
        return f"last interval ({report.duration_ns / 1e9:.2f} s)"

    def refresh_view(self) -> None:
        super().refresh_view()
        if not self.is_mounted:
            return
        try:
            self._show()
        except NoMatches:  # a report arrived while the screen was being taken down
            pass

    def _show(self) -> None:
        report = self.report
        title = Text(no_wrap=True, overflow="ellipsis")
        title.append(f" profile of pid {self.pid}", style="bold")
        err = self.fips.profile_error
        if report is None:
            progress = self.fips.profile_progress()
            if err:
                title.append("  " + escape_text(err), style=palette.WARN)
            else:
                title.append("  " + (progress or "starting the profilers…"), style=palette.WARN_BOLD)
                title.append("  (Esc cancels)", style=palette.LABEL)
            self.query_one("#profile-title", Static).update(title)
            for sel in ("#profile-threads", "#profile-locks", "#profile-stacks", "#profile-unavailable"):
                self.query_one(sel, Static).update("")  # nothing of an older profile stays on screen
            return
        shown = self.shown_report() or report
        title.append(f" ({escape_text(report.comm or '?')})", style="bold")
        title.append("  ")
        title.append("on-CPU" if self.which == "oncpu" else "off-CPU", style="bold")
        title.append(", ", style=palette.LABEL)
        title.append(self.span_text(), style="bold")
        title.append("  (o: on/off-CPU, a: total/interval, e: export folded)", style=palette.LABEL)
        if err:
            title.append("  " + escape_text(err), style=palette.WARN)
        if self.exported:
            title.append(f"\n exported to {escape_text(self.exported)}", style=palette.LABEL)
        self.query_one("#profile-title", Static).update(title)
        width = max(40, (self.size.width or DEFAULT_WIDTH) - 2)  # the scroll bar
        names = ring_thread_names(self.fips.snapshot, self.pid)
        bar = max(8, min(BAR_WIDTH, width - 80 - (name_width(names.values()) - NAME_WIDTH)))
        split = "last interval" if shown is not report else ""
        self.query_one("#profile-threads", Static).update(
            threads_text(report, bar, names, label=f"{split} ({report.duration_ns / 1e9:.2f} s)" if split else ""))
        self.query_one("#profile-locks", Static).update(locks_text(shown, width))
        self.query_one("#profile-stacks", Static).update(stacks_text(shown, self.which, width, names))
        self.query_one("#profile-unavailable", Static).update(unavailable_text(shown))
        self._rebuild_tree(shown)

    # -- the tree ------------------------------------------------------------------------

    def _rebuild_tree(self, report: ProfileReport) -> None:
        key = (report.taken_mono_ns, report.duration_ns, self.which)
        if key == self._tree_key:
            return
        self._tree_key = key
        tree = self.query_one("#profile-tree", Tree)
        expanded = self._expanded_paths(tree.root)
        first = not expanded and not tree.root.children
        tree.clear()
        data = stack_tree(report, self.which)
        total = sum(v[0] for v in data.values()) or 1
        kind = "on-CPU" if self.which == "oncpu" else "off-CPU"
        tree.root.set_label(Text(f"{kind} stacks"))
        for src, (value, children) in sorted(data.items()):
            node = tree.root.add(self._label(src, value, total), data=(src,), expand=first or (src,) in expanded)
            self._add(node, children, total, (src,), expanded, hot=first)
        if not data:
            tree.root.add_leaf(Text(f"no {kind} stacks (no stack profiler ran, or nothing sampled)",
                                    style=palette.LABEL))

    def _add(self, parent: TreeNode, children: dict, total: int, path: tuple, expanded: set, hot: bool) -> None:
        items = sorted(children.items(), key=lambda kv: -kv[1][0])
        for i, (name, (value, sub)) in enumerate(items[:TREE_CHILDREN]):
            p = (*path, name)
            open_it = p in expanded or (hot and i == 0)
            if sub:
                node = parent.add(self._label(name, value, total), data=p, expand=open_it)
                self._add(node, sub, total, p, expanded, hot and i == 0)
            else:
                parent.add_leaf(self._label(name, value, total), data=p)
        if len(items) > TREE_CHILDREN:
            rest = sum(v[0] for _, v in items[TREE_CHILDREN:])
            parent.add_leaf(Text(f"… {len(items) - TREE_CHILDREN} more ({100 * rest / total:.1f}%)",
                                 style=palette.LABEL))

    def _label(self, name: str, value: int, total: int) -> Text:
        pct = 100.0 * value / total
        t = Text(no_wrap=True)
        t.append(f"{pct:5.1f}% ", style=CATEGORY_STYLE["oncpu" if self.which == "oncpu" else "lock"])
        t.append(escape_text(name))
        return t

    @staticmethod
    def _expanded_paths(node: TreeNode) -> set:
        out = set()
        stack = list(node.children)
        while stack:
            n = stack.pop()
            if n.is_expanded and n.data is not None:
                out.add(n.data)
                stack.extend(n.children)
        return out

    # -- keys ----------------------------------------------------------------------------

    def action_toggle_accumulated(self) -> None:
        self.accumulated = not self.accumulated
        self.refresh_view()

    def action_toggle_which(self) -> None:
        self.which = "offcpu" if self.which == "oncpu" else "oncpu"
        self.refresh_view()

    def action_export(self) -> None:
        report = self.shown_report()
        if report is None:
            self.notify("no profile yet", severity="warning")
            return
        lines = report.folded(self.which)
        if not lines:
            self.notify(f"no {self.which} stacks to export", severity="warning")
            return
        path = os.path.abspath(f"fipstop-{self.pid}-{self.which}-{time.strftime('%Y%m%d-%H%M%S')}.folded")
        self.run_worker(lambda: self._write(path, lines), thread=True, group="profile-export", exit_on_error=False)

    def _write(self, path: str, lines: list[str]) -> None:
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        except OSError as e:
            self.app.call_from_thread(self.notify, f"export failed: {e.strerror or e}", severity="error")
            return
        self.exported = path
        # the unit with the file: off-CPU weights are microseconds, on-CPU ones samples (flamegraph.pl needs to know)
        self.app.call_from_thread(self.notify, f"wrote {len(lines)} folded stacks to {path}; {folded_note(self.which)}",
                                  timeout=10)
        self.app.call_from_thread(self.refresh_view)
