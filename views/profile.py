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
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Static, Tree
from textual.widgets.tree import TreeNode

from fipstop.probes.threads import CATEGORIES
from fipstop.textsafe import escape_text
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader

if TYPE_CHECKING:  # pragma: no cover
    from fipstop.probes.stacks import StackCount
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
BAR_WIDTH = 40
TOP = 8
TREE_CHILDREN = 25


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
            t.append("█" * cells[c], style=CATEGORY_STYLE[c])
    return t


def legend() -> Text:
    t = Text(no_wrap=True)
    for c in CATEGORIES:
        t.append(" ■ ", style=CATEGORY_STYLE[c])
        t.append(CATEGORY_LABEL[c] + " ", style=palette.LABEL)
    return t


def threads_text(report: ProfileReport, width: int = BAR_WIDTH) -> Text:
    th = report.threads
    t = Text(no_wrap=True, overflow="ellipsis")
    if not th.available:
        t.append(" thread split not available: ", style=palette.WARN_BOLD)
        t.append(escape_text(th.reason))
        return t
    t.append(f" {'TID':>7} {'THREAD':<15} ", style="bold")
    t.append(f"{'TIME SPLIT':<{width}} ", style="bold")
    t.append(" ".join(f"{c[:5].upper():>5}" for c in ("oncpu", "runq", "lock", "io", "sleep")) + "  TOP WAIT\n",
             style="bold")
    rows = [("process", report.pid, th.process_split(), "")]
    for s in sorted(th.threads, key=lambda s: (-(s.lock_pct + s.io_pct + s.runqueue_pct), s.tid)):
        rows.append((escape_text(s.name), s.tid, {c: s.pct(c) for c in CATEGORIES},
                     escape_text(s.top_waits[0][0]) if s.top_waits else ""))
    for i, (name, tid, shares, wait) in enumerate(rows):
        t.append(f" {tid:>7} ", style=palette.LABEL)
        t.append(f"{name[:15]:<15} ", style="bold" if i == 0 else "default")
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


def short_stack(st: StackCount, limit: int = 5) -> str:
    frames = [escape_text(f) for f in st.frames]
    if len(frames) > limit:
        frames = ["…", *frames[-limit:]]
    return " › ".join(frames) or "?"


def locks_text(report: ProfileReport) -> Text:
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
            t.append(f"   waiting {short_stack(st)}\n", style=palette.LABEL)
        for st in lw.holder_stacks[:1]:
            t.append(f"   holder  {short_stack(st)}\n", style=palette.LABEL)
    t.rstrip()
    return t


def stacks_text(report: ProfileReport, which: str) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    profiles = report.available_profiles()
    if not profiles:
        t.append(" no stack profiler ran (see below why)", style=palette.WARN)
        return t
    hot = report.hot_functions(which, TOP)
    kind = "on-CPU" if which == "oncpu" else "off-CPU / idle"
    t.append(f" hot {kind} functions (self)\n", style="bold")
    for src, fn, _, pct in hot:
        t.append(f" {pct:5.1f}% ", style=CATEGORY_STYLE["oncpu" if which == "oncpu" else "lock"])
        t.append(f"{src:<7}", style=palette.LABEL)
        t.append(f" {escape_text(fn)}\n")
    if not hot:
        t.append(" none in this interval\n", style=palette.ZERO)
    t.append(f" top {kind} stacks\n", style="bold")
    for p in profiles:
        stacks = p.oncpu if which == "oncpu" else p.offcpu
        total = sum(s.value for s in stacks) or 1
        for st in sorted(stacks, key=lambda s: -s.value)[:TOP // max(len(profiles), 1) + 1]:
            unit = p.oncpu_unit if which == "oncpu" else "ns"
            val = ns_text(st.value) if unit == "ns" else f"{st.value}"
            t.append(f" {100 * st.value / total:5.1f}% {val:>8} ", style=palette.LABEL)
            t.append(f"{p.source:<7} {escape_text(st.thread)[:14]}-{st.tid}: ", style=palette.LABEL)
            t.append(short_stack(st) + "\n")
    t.rstrip()
    return t


def unavailable_text(report: ProfileReport) -> Text:
    t = Text(no_wrap=False)
    for p in report.profiles:
        if not p.available:
            t.append(f" {p.source}: ", style=palette.WARN_BOLD)
            t.append("not available: " + escape_text(p.reason or "no reason given") + "\n", style=palette.WARN)
        elif p.reason:
            t.append(f" {p.source}: ", style=palette.LABEL)
            t.append(escape_text(p.reason) + "\n", style=palette.LABEL)
        if p.available and p.extra:
            t.append(f" {p.source}: ", style=palette.LABEL)
            t.append("  ".join(f"{k} {v:g}" for k, v in sorted(p.extra.items())) + "\n", style=palette.LABEL)
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

    def on_unmount(self) -> None:
        # leaving the screen ends its profile: profilers cost CPU on the profiled machine
        if self.stop is not None:
            self.stop.set()

    @property
    def report(self) -> ProfileReport | None:
        r = getattr(self.fips, "profile_report", None)
        return r if r is not None and r.pid == self.pid else None

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
        err = getattr(self.fips, "profile_error", "")
        if report is None:
            title.append("  " + (escape_text(err) if err else "starting the profilers …"),
                         style=palette.WARN if err else palette.LABEL)
            self.query_one("#profile-title", Static).update(title)
            return
        title.append(f" ({escape_text(report.comm or '?')})", style="bold")
        title.append(f"  interval {report.duration_ns / 1e9:.2f}s  showing ", style=palette.LABEL)
        title.append("on-CPU" if self.which == "oncpu" else "off-CPU", style="bold")
        title.append(" stacks  (o: on/off-CPU, e: export folded)", style=palette.LABEL)
        if err:
            title.append("  " + escape_text(err), style=palette.WARN)
        if self.exported:
            title.append(f"\n exported to {escape_text(self.exported)}", style=palette.LABEL)
        self.query_one("#profile-title", Static).update(title)
        bar = max(8, min(BAR_WIDTH, (self.size.width or 120) - 78))
        self.query_one("#profile-threads", Static).update(threads_text(report, bar))
        self.query_one("#profile-locks", Static).update(locks_text(report))
        self.query_one("#profile-stacks", Static).update(stacks_text(report, self.which))
        self.query_one("#profile-unavailable", Static).update(unavailable_text(report))
        self._rebuild_tree(report)

    # -- the tree ------------------------------------------------------------------------

    def _rebuild_tree(self, report: ProfileReport) -> None:
        key = (report.taken_mono_ns, self.which)
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

    def action_toggle_which(self) -> None:
        self.which = "offcpu" if self.which == "oncpu" else "oncpu"
        self.refresh_view()

    def action_export(self) -> None:
        report = self.report
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
        self.app.call_from_thread(self.notify, f"wrote {len(lines)} folded stacks to {path}")
        self.app.call_from_thread(self.refresh_view)
