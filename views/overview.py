"""The overview: header, rings table, consumers table, records/s vs drops/s chart.

Rings: one row per producer ring of every domain (domain/slot, producer
pid/tid/thread name, fill bar, records/s with a sparkline, bytes/s, drops/s
and dropped total in red, claimed-not-committed, high-water, slowest
consumer's lag).  Consumers: name, pid, state, heartbeat age, lag max/mean in
records and seconds, release rate.  Both tables are virtualised (only the
rows on screen are drawn), sort with ``s``/``S`` (or a click on a column
header) and filter with ``/`` (a substring of any text column, shown in cyan
as "filter", never mistaken for drops).  F5 groups the rings by domain, then
by process (:mod:`fipstop.views.grouping`), Enter / ``+`` / ``-`` / ``*`` fold
the groups; ``c`` splits the chart per domain (:mod:`fipstop.views.domain_chart`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.widgets import Footer, Input

from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.views import domain_chart, grouping, palette
from fipstop.views import format as fmt
from fipstop.views.base import FipsScreen
from fipstop.views.fipsipc_rings import FipsIpcRingsPanel
from fipstop.views.grouping import GroupKey, Groups
from fipstop.views.history import History
from fipstop.views.widgets.chart import LineChart, Series
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

SPARK_FRAMES = 8
CHART_FRAMES = 300
#: the overview chart spans minutes: redrawing it every 2 s of sample time is
#: enough, and halves its cost at the default 1 s interval
CHART_EVERY_NS = 2_000_000_000


#: under NO_COLOR the chart's lines are told apart by these (the first line keeps its blocks; drops are ``x``)
CHART_MARKERS = palette.CHART_MARKERS
DROPS_MARKER = palette.DROPS_MARKER
#: a ring row under its group row (grouping on) is indented so
RING_INDENT = "  "


#: the name columns at wide widths are as wide as their longest content, within (least, most) cells;
#: narrower they keep their width and are cut in the middle
NAME_BOUNDS = {"ring": (12, 28), "thread": (16, 32), "slowest": (12, 24), "name": (18, 40)}
#: content widths are measured again every this many frames (or when the rows change)
NAME_WIDTH_EVERY = 16


def content_widths(s: Snapshot) -> dict[str, int]:
    """The longest cell of each name column (escaped text, as drawn)."""
    names = [fmt.name(d.name) for d in s.domains]
    r, c = s.rings, s.consumers
    ring = max((len(names[d]) + 1 + len(str(n)) for d, n in zip(r["domain"].tolist(), r["ring"].tolist())),
               default=0)
    thread = max((len(fmt.name(t)) + (9 if st == 2 else 0)  # " (closed)"
                  for t, st in zip(r["thread_name"].tolist(), r["state"].tolist())), default=0)
    cnames = [fmt.name(n) for n in c["name"].tolist()]
    cons = max((len(names[d]) + 1 + len(n) for d, n in zip(c["domain"].tolist(), cnames)), default=0)
    return {"ring": ring, "thread": thread, "slowest": max((len(n) for n in cnames), default=0), "name": cons}


def sized(columns: list[Column], widths: dict[str, int] | None) -> list[Column]:
    """``columns`` with the name columns as wide as ``widths`` says (within NAME_BOUNDS)."""
    if not widths:
        return columns
    out = []
    for col in columns:
        if col.key in widths and col.key in NAME_BOUNDS:
            least, most = NAME_BOUNDS[col.key]
            col = replace(col, width=max(least, min(most, widths[col.key])))
        out.append(col)
    return out


def ring_columns(wide: bool, widths: dict[str, int] | None = None) -> list[Column]:
    """``widths``: content widths of the name columns (wide screens only)."""
    bar = 16 if wide else 8
    spark = 16 if wide else 6
    # at wide widths the spare cells go to the last name (BY), not to THREAD: sized to its names, it is full
    sized_names = wide and widths is not None
    return sized([
        Column("ring", "RING", 12 if wide else 9, "left", 0, sortable=True, descending=False, cut="middle"),
        Column("pid", "PID", 7, "right", 3),
        Column("tid", "TID", 7, "right", 5),
        Column("thread", "THREAD", 16 if wide else 10, "left", 1, flex=not sized_names, descending=False,
               cut="middle"),
        Column("fill", "FILL", bar + 6, "left", 0),
        Column("rate", "RECORDS/S", spark + 7, "right", 0),
        Column("bytes", "BYTES/S", 10, "right", 3),
        Column("drops", "DROPS/S", 8, "right", 0),
        Column("dropped", "DROPPED", 8, "right", 2),
        Column("claimed", "CLAIMED", 8, "right", 5),
        Column("high", "HIGH", 5, "right", 4),
        Column("lag", "SLOWEST LAG", 12 if wide else 11, "right", 1),
        Column("slowest", "BY", 12, "left", 4, descending=False, cut="middle", flex=sized_names),
    ], widths if wide else None)


def consumer_columns(wide: bool, widths: dict[str, int] | None = None) -> list[Column]:
    spark = 12 if wide else 6
    return sized([
        Column("name", "CONSUMER", 18 if wide else 14, "left", 0, flex=True, descending=False, cut="middle"),
        Column("pid", "PID", 7, "right", 2),
        Column("state", "STATE", 8, "left", 0, descending=False),
        Column("heartbeat", "HEARTBEAT", 9, "right", 1),
        Column("lag_max", "LAG MAX", 8, "right", 0),
        Column("lag_mean", "LAG MEAN", 8, "right", 3),
        Column("lag_max_s", "MAX (s)", 7, "right", 1),
        Column("lag_mean_s", "MEAN (s)", 8, "right", 3),
        Column("release", "RELEASED/S", spark + 7, "right", 1),
        Column("readers", "READERS", 7, "right", 4),
        Column("lost", "DROPS SEEN", 10, "right", 4),
    ], widths if wide else None)


def _nan_last(values: np.ndarray, descending: bool) -> np.ndarray:
    v = values.astype(np.float64)
    return np.where(np.isnan(v), -np.inf if descending else np.inf, v)


def ring_sort_values(s: Snapshot, column: str) -> np.ndarray:
    r = s.rings
    simple = {
        "pid": "pid", "tid": "tid", "fill": "fill_pct", "rate": "records_per_s", "bytes": "bytes_per_s",
        "drops": "drops_per_s", "dropped": "records_dropped", "claimed": "claimed_bytes",
        "high": "high_water_pct", "lag": "slowest_lag_records", "slowest": "slowest_consumer",
    }
    if column == "ring":
        return r["domain"].astype(np.int64) * (1 << 32) + r["ring"].astype(np.int64)
    if column == "thread":
        return np.char.lower(r["thread_name"])
    return r[simple[column]]


def consumer_sort_values(s: Snapshot, column: str) -> np.ndarray:
    c = s.consumers
    simple = {
        "pid": "pid", "state": "health", "heartbeat": "heartbeat_age_ns", "lag_max": "lag_max_records",
        "lag_mean": "lag_mean_records", "lag_max_s": "lag_max_s", "lag_mean_s": "lag_mean_s",
        "release": "release_per_s", "readers": "readers", "lost": "lost_seen",
    }
    if column == "name":
        return np.char.lower(c["name"])
    return c[simple[column]]


def order(values: np.ndarray, descending: bool) -> np.ndarray:
    """Stable sort permutation; NaN sorts last either way."""
    if values.dtype.kind in "SU":
        perm = np.argsort(values, kind="stable")
        return perm[::-1] if descending else perm
    v = _nan_last(values, descending)
    return np.argsort(-v if descending else v, kind="stable")


def ring_search_text(s: Snapshot) -> list[str]:
    names = [d.name for d in s.domains]
    r = s.rings
    return [
        f"{names[d]}/{ring} {pid} {tid} {fmt.name(t)}".lower()
        for d, ring, pid, tid, t in zip(r["domain"].tolist(), r["ring"].tolist(), r["pid"].tolist(),
                                        r["tid"].tolist(), r["thread_name"].tolist())
    ]


def consumer_search_text(s: Snapshot) -> list[str]:
    names = [d.name for d in s.domains]
    c = s.consumers
    return [
        f"{names[d]}/{fmt.name(n)} {pid} {Health(h).label}".lower()
        for d, n, pid, h in zip(c["domain"].tolist(), c["name"].tolist(), c["pid"].tolist(), c["health"].tolist())
    ]


#: Shift+letter -> the column it sorts the focused table by (k9s's way; htop has P/M/T)
RING_SORT_KEYS = {"N": "ring", "P": "pid", "F": "fill", "R": "rate", "B": "bytes", "D": "drops", "L": "lag",
                  "H": "high"}
CONSUMER_SORT_KEYS = {"N": "name", "P": "pid", "L": "lag_max", "R": "release", "H": "heartbeat", "D": "lost"}


@dataclass
class TableState:
    sort: str | None = None
    descending: bool = True


class OverviewScreen(FipsScreen):
    SCREEN_NAME = "overview"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (150, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("l", "log_scale", "Log scale", show=False),
        Binding("f6", "sort_menu", "Sort by…", show=False),
        # htop's tree key: rings by domain, by process, then one row per ring again
        Binding("f5", "group", "Group", show=False),
        Binding("plus", "fold('open')", "Unfold", show=False),
        Binding("minus", "fold('close')", "Fold", show=False),
        Binding("asterisk", "fold_all", "Fold all", show=False),
        Binding("c", "chart_split", "Chart per domain", show=False),
        # direct sort keys, as k9s's Shift+letter (htop's P/M/T): the same key again reverses
        *(Binding(k, f"sort_by('{k}')", f"Sort by {k}", show=False) for k in sorted({*RING_SORT_KEYS,
                                                                                   *CONSUMER_SORT_KEYS})),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self.ring_state = TableState()
        self.consumer_state = TableState()
        self._wide: bool | None = None
        self._ring_perm = np.zeros(0, dtype=np.int64)
        self._cons_perm = np.zeros(0, dtype=np.int64)
        self._spark_cache: dict = {}
        self._shown: Snapshot | None = None
        self._ring_spark_top = 0.0
        self._cons_spark_top = 0.0
        self._ring_rows_cache: dict = {}
        self._cons_rows_cache: dict = {}
        self._search_cache: tuple[Snapshot, dict[str, list[str]]] | None = None
        self._chart_t: int | None = None
        self._chart_size: Size | None = None
        self._heights: tuple[int, int] | None = None
        self._frames: list[Snapshot] = []
        #: content widths of the name columns and when they were measured
        self._name_widths: dict[str, int] | None = None
        self._name_widths_key: tuple = ()
        self._name_widths_age = 0
        #: grouping of the rings (F5): None, "domain" or "process"; the folded groups (kept across
        #: frames, sorts and modes)
        self.group_mode: str | None = None
        self.collapsed: set[GroupKey] = set()
        self._groups: Groups | None = None  # of the shown snapshot, in group_mode
        self._groups_snap: Snapshot | None = None
        self._group_counts = np.zeros(0, dtype=np.int64)  # rings of each group the filter keeps
        #: the chart: "totals" (records/s and drops/s of all rings) or "domains" (records/s per domain)
        self.chart_mode = "totals"
        #: bumped for every frame shown: rows drawn for one version are kept
        #: by the tables across sorting and filtering
        self._version = 0

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="overview-body"):
            yield TextLine(id="rings-title", classes="section-title")
            yield VirtualTable(ring_columns(False), id="rings")
            yield FipsIpcRingsPanel(id="ipc-panel")  # --fipsipc: the prototype's rings (hidden without)
            yield TextLine(id="consumers-title", classes="section-title")
            yield VirtualTable(consumer_columns(False), id="consumers")
            yield LineChart("all rings", id="chart")
        yield Input(placeholder="filter rings and consumers (Enter: keep, Esc: clear)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one("#rings", VirtualTable).empty_text = "no ring in use: no producer has logged yet"
        self.query_one("#consumers", VirtualTable).empty_text = "no consumer registered"
        self.query_one("#rings", VirtualTable).focus()

    def on_resize(self) -> None:
        self._heights = None
        wide = self.size.width >= 150
        if wide != self._wide:
            self._wide = wide
            if wide and self._shown is not None and self._name_widths is None:
                self._name_widths = content_widths(self._shown)
            self._set_columns(wide)

    # -- data ------------------------------------------------------------------------

    @property
    def rings_table(self) -> VirtualTable:
        return self.query_one("#rings", VirtualTable)

    @property
    def consumers_table(self) -> VirtualTable:
        return self.query_one("#consumers", VirtualTable)

    def refresh_view(self) -> None:
        """A new frame is shown: header, tables and chart."""
        super().refresh_view()
        s = self.fips.snapshot
        if s is None:
            return
        self._shown = s
        self._version += 1
        self._ring_rows_cache = {}
        self._cons_rows_cache = {}
        self._frames = self.fips.history.window(self.fips.shown, max(CHART_FRAMES, SPARK_FRAMES))
        self._spark_cache = {}
        recent = self._frames[-SPARK_FRAMES * 2:]
        self._ring_spark_top = max((float(f.rings["records_per_s"].max(initial=0)) for f in recent), default=0.0)
        self._cons_spark_top = max((float(f.consumers["release_per_s"].max(initial=0)) for f in recent),
                                   default=0.0)
        self.query_one("#ipc-panel", FipsIpcRingsPanel).show(s)
        self._size_name_columns(s)
        self._refresh_rings(s)
        self._refresh_consumers(s)
        self._refresh_chart()

    def _size_name_columns(self, s: Snapshot) -> None:
        """At wide widths the name columns follow their content (measured
        when the rows change, else every NAME_WIDTH_EVERY frames)."""
        if not self._wide:
            return
        key = (s.rings.size, s.consumers.size, tuple(d.name for d in s.domains))
        self._name_widths_age += 1
        if key == self._name_widths_key and self._name_widths_age < NAME_WIDTH_EVERY:
            return
        self._name_widths_key, self._name_widths_age = key, 0
        widths = content_widths(s)
        if widths == self._name_widths:
            return
        self._name_widths = widths
        self._set_columns(True)

    def _set_columns(self, wide: bool) -> None:
        widths = self._name_widths if wide else None
        if widths is not None and self.group_mode is not None:  # ring names are indented under their group
            widths = dict(widths, ring=widths["ring"] + len(RING_INDENT))
        for table, cols in ((self.query_one("#rings", VirtualTable), ring_columns(wide, widths)),
                            (self.query_one("#consumers", VirtualTable), consumer_columns(wide, widths))):
            if table.columns != cols:
                table.columns = cols
                table._layout_width = -1
                table._row_cache.clear()
                table.refresh()

    def refresh_tables(self) -> None:
        """Sort or filter changed: the tables only (not the chart)."""
        s = self._shown
        if s is None:
            return
        self._refresh_rings(s)
        self._refresh_consumers(s)

    @property
    def _snap(self) -> Snapshot:
        """The snapshot on screen: cells are drawn only once one was shown."""
        assert self._shown is not None
        return self._shown

    def _search(self, s: Snapshot, kind: str) -> list[str]:
        cache = self._search_cache
        if cache is None or cache[0] is not s:
            cache = (s, {})
            self._search_cache = cache
        texts = cache[1].get(kind)
        if texts is None:
            texts = ring_search_text(s) if kind == "rings" else consumer_search_text(s)
            cache[1][kind] = texts
        return texts

    def _filter_mask(self, texts: list[str]) -> np.ndarray:
        if not self.filter_text:
            return np.ones(len(texts), dtype=bool)
        needle = self.filter_text.lower()
        return np.fromiter((needle in t for t in texts), dtype=bool, count=len(texts))

    def _permutation(self, n: int, mask: np.ndarray, state: TableState, values) -> np.ndarray:
        idx = np.flatnonzero(mask)
        if state.sort is None or idx.size == 0:
            return idx
        vals = values(state.sort)[idx]
        return idx[order(vals, state.descending)]

    def _title(self, label: str, shown: int, total: int, state: TableState, columns: list[Column]) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" {label} ", style="bold")
        t.append(f"{total}", style="bold")
        if self.filter_text:
            t.append("   filter ", style=palette.FILTER)
            t.append(repr(self.filter_text), style=palette.FILTER)
            t.append(f"  {shown} of {total} shown", style=palette.FILTER)
        if state.sort is not None:
            lab = next((c.label for c in columns if c.key == state.sort), state.sort)
            t.append("   sort ", style=palette.LABEL)
            t.append(lab.lower() + (" ▼" if state.descending else " ▲"))
        return t

    def _refresh_rings(self, s: Snapshot) -> None:
        table = self.rings_table
        mask = self._filter_mask(self._search(s, "rings")) if self.filter_text else np.ones(s.rings.size, bool)
        g = None
        if self.group_mode is not None:
            g = self._groups_of(s)
            if self.filter_text:  # a group's own name (its pid, its comm) keeps every ring of it
                mask = mask | self._filter_mask(grouping.search_text(g))[g.of_ring]
        perm = self._permutation(s.rings.size, mask, self.ring_state, lambda c: ring_sort_values(s, c))
        names = [d.name for d in s.domains]
        table.set_sort(self.ring_state.sort, self.ring_state.descending)
        table.empty_text = (f"no ring matches the filter {self.filter_text!r} ({s.rings.size} hidden)"
                            if self.filter_text and s.rings.size else "no ring in use: no producer has logged yet")
        shown_rings = int(perm.size)
        if g is None:
            self._ring_perm = perm
            keys: list = [(names[d], r) for d, r in zip(s.rings["domain"][perm].tolist(),
                                                         s.rings["ring"][perm].tolist())]
            table.set_rows(keys, self._ring_cell, version=self._version, row_ids=perm.tolist())
        else:
            rows, ids = self._group_rows(s, g, perm)
            dom, ring = s.rings["domain"], s.rings["ring"]
            keys = [g.keys[-1 - i] if i < 0 else (names[int(dom[i])], int(ring[i])) for i in rows.tolist()]
            # a ring row is drawn indented under its group: not the same line as ungrouped
            table.set_rows(keys, self._ring_cell, version=(self._version, self.group_mode), row_ids=ids)
        title = self._title("Rings", shown_rings, s.rings.size, self.ring_state, table.columns)
        if g is not None:
            title.append(f"   by {self.group_mode} ", style=palette.LABEL)
            n_groups = int((self._group_counts > 0).sum())
            title.append(f"{n_groups} group{'s' if n_groups != 1 else ''}", style="bold")
            folded = sum(1 for k in g.keys if k in self.collapsed)
            if folded:
                title.append(f", {folded} folded", style=palette.LABEL)
        no_ring = [(d.name, int(d.records_no_ring), d.max_rings) for d in s.domains if d.records_no_ring]
        for dname, n, mr in no_ring[:3]:  # drops no ring row shows: the domain's ring table was full
            title.append("   no ring ", style=palette.LABEL)
            title.append(fmt.count(n), style=palette.DROPS)
            title.append(f" dropped in {fmt.name(dname)} (all {mr} rings taken)", style=palette.LABEL)
        self.query_one("#rings-title", TextLine).update(title)
        if table.cursor_key is not None and not isinstance(table.cursor_key, GroupKey):
            self.fips.selected_ring = table.cursor_key

    # -- grouping ------------------------------------------------------------------------

    def highlighted_group(self) -> GroupKey | None:
        """The group row under the cursor (None: a ring row, or no grouping)."""
        key = self.rings_table.cursor_key
        return key if isinstance(key, GroupKey) else None

    def first_ring_shown(self, group: GroupKey) -> tuple[str, int] | None:
        """The first ring row under ``group`` in the table as drawn (None: the group is folded or
        the filter keeps none of it): what ``2`` opens on a group row, as Enter on a ring row would."""
        keys = list(self.rings_table.keys)
        try:
            at = keys.index(group)
        except ValueError:
            return None
        nxt = keys[at + 1] if at + 1 < len(keys) else None
        return nxt if nxt is not None and not isinstance(nxt, GroupKey) else None

    def _groups_of(self, s: Snapshot) -> Groups:
        g = self._groups
        if g is None or self._groups_snap is not s or g.mode != self.group_mode:
            assert self.group_mode is not None
            g = grouping.groups(s, self.group_mode)
            self._groups, self._groups_snap = g, s
        return g

    def _group_rows(self, s: Snapshot, g: Groups, perm: np.ndarray) -> tuple[np.ndarray, list]:
        """The rows of the grouped table (``-1 - group`` for a group row) and their row ids."""
        state = self.ring_state
        if state.sort is None or not len(g):
            group_order = np.arange(len(g))
        else:
            group_order = order(grouping.sort_values(g, s, state.sort), state.descending)
        rows, counts = grouping.layout(g, perm, group_order, self.collapsed)
        self._group_counts = counts
        self._ring_perm = rows
        # a group row is drawn again when it folds or the filter changes its count
        ids = [("group", -1 - i, g.keys[-1 - i] in self.collapsed, int(counts[-1 - i])) if i < 0 else i
               for i in rows.tolist()]
        return rows, ids

    def _group_spark(self) -> tuple[np.ndarray, float]:
        """(frames, groups) of the groups' records/s (sums of their rings, NaN where none has a rate)
        and the top of their sparklines."""
        hit = self._spark_cache.get(("groups", self.group_mode))
        if hit is not None:
            return hit
        g = self._groups
        assert g is not None
        m = self._spark_matrix("ring", "records_per_s")
        out = np.full((m.shape[0], len(g)), np.nan)
        for k in range(m.shape[0]):
            row = m[k]
            ok = ~np.isnan(row)
            total = np.bincount(g.of_ring, weights=np.where(ok, row, 0.0), minlength=len(g))
            known = np.bincount(g.of_ring, weights=ok.astype(np.float64), minlength=len(g))
            out[k] = np.where(known > 0, total, np.nan)
        top = float(np.nanmax(out)) if out.size and not np.isnan(out).all() else 0.0
        self._spark_cache[("groups", self.group_mode)] = (out, top)
        return out, top
    def _refresh_consumers(self, s: Snapshot) -> None:
        table = self.consumers_table
        mask = self._filter_mask(self._search(s, "consumers")) if self.filter_text else np.ones(s.consumers.size, bool)
        perm = self._permutation(s.consumers.size, mask, self.consumer_state, lambda c: consumer_sort_values(s, c))
        self._cons_perm = perm
        names = [d.name for d in s.domains]
        keys = [(names[d], c) for d, c in zip(s.consumers["domain"][perm].tolist(),
                                              s.consumers["consumer"][perm].tolist())]
        table.set_sort(self.consumer_state.sort, self.consumer_state.descending)
        table.empty_text = (f"no consumer matches the filter {self.filter_text!r} ({s.consumers.size} hidden)"
                            if self.filter_text and s.consumers.size else "no consumer registered")
        table.set_rows(keys, self._consumer_cell, version=self._version, row_ids=perm.tolist())
        self._allocate_heights(len(keys))
        self.query_one("#consumers-title", TextLine).update(
            self._title("Consumers", len(keys), s.consumers.size, self.consumer_state, table.columns))
        if table.cursor_key is not None and self.fips.selected_consumer is None:
            self.fips.selected_consumer = table.cursor_key

    def _allocate_heights(self, n_consumers: int) -> None:
        """Tables as tall as their rows when they fit; the chart (tall
        screens) takes what is left, at least 10 lines."""
        rings, cons = self.rings_table, self.consumers_table
        tall = self.size.height >= 36
        avail = self.size.height - 2 - 2 - 1 - (10 if tall else 0)
        avail -= self.query_one("#ipc-panel", FipsIpcRingsPanel).height_wanted
        want_r = max(rings.row_count, 1) + 1
        want_c = max(n_consumers, 1) + 1
        if want_r + want_c <= avail:
            h_r, h_c = want_r, want_c
        else:
            h_c = min(want_c, max(avail // 3, 3))
            h_r = max(avail - h_c, 3)
        h_r = h_r if tall else max(h_r, avail - h_c)
        # only on a change: a new height means a new layout (a full repaint)
        if self._heights != (h_r, h_c):
            self._heights = (h_r, h_c)
            cons.styles.height = h_c
            rings.styles.height = h_r

    def _refresh_chart(self) -> None:
        chart = self.query_one("#chart", LineChart)
        if not chart.display or not self._frames:
            return
        t = self._frames[-1].taken_mono_ns
        last = self._chart_t
        if (last is not None and 0 <= t - last < CHART_EVERY_NS and not self.fips.paused
                and chart.size == self._chart_size):
            return
        self._chart_t = t
        self._chart_size = chart.size
        frames = self._frames[-CHART_FRAMES:]
        x = History.seconds_ago(frames)
        mono = bool(getattr(self.app, "no_color", False))
        drops = Series("drops/s (ring full)", History.totals_series(frames, lambda tot: tot.drops_per_s),
                       palette.CHART_DROPS, DROPS_MARKER if mono else "")
        if self.chart_mode == "domains":
            series = []
            for k, (label, values) in enumerate(domain_chart.split(frames)):
                named = label if k == domain_chart.TOP_DOMAINS else fmt.name(label)
                series.append(Series(named, values, palette.CHART_DOMAINS[k % len(palette.CHART_DOMAINS)],
                                     CHART_MARKERS[(k - 1) % len(CHART_MARKERS)] if mono and k else ""))
            chart.set_data(x, [*series, drops])
            return
        chart.set_data(
            x,
            [Series("records/s", History.totals_series(frames, lambda tot: tot.records_per_s), palette.CHART_RATE),
             drops],
        )

    # -- cells -------------------------------------------------------------------------

    def _spark_matrix(self, kind: str, field: str) -> np.ndarray:
        """(frames, rows of the shown snapshot) of ``field`` over the last
        frames, NaN where a row did not exist or had no rate; one pass per
        frame, vectorised when a frame has the same rows as the shown one."""
        key = ("matrix", kind, field)
        hit = self._spark_cache.get(key)
        if hit is not None:
            return hit
        s = self._snap
        cur = s.rings if kind == "ring" else s.consumers
        slot = "ring" if kind == "ring" else "consumer"
        frames = self._frames[-SPARK_FRAMES * 2:]
        out = np.full((len(frames), cur.size), np.nan)
        names = [d.name for d in s.domains]
        for k, f in enumerate(frames):
            arr = f.rings if kind == "ring" else f.consumers
            vals = np.where(arr["rates_valid"], arr[field], np.nan) if field.endswith("_per_s") else arr[field]
            same = (arr.size == cur.size and [d.name for d in f.domains] == names
                    and np.array_equal(arr["domain"], cur["domain"]) and np.array_equal(arr[slot], cur[slot]))
            if same:
                out[k] = vals
                continue
            for i in range(cur.size):
                dn = names[int(cur["domain"][i])]
                row = f.ring_row(dn, int(cur[slot][i])) if kind == "ring" else f.consumer_row(dn, int(cur[slot][i]))
                if row is not None:
                    out[k, i] = vals[row]
        self._spark_cache[key] = out
        return out

    def _ring_row(self, i: int) -> dict:
        r = self._ring_rows_cache.get(i)
        if r is None:
            rings = self._snap.rings
            r = dict(zip(rings.dtype.names or (), rings[i].item()))
            self._ring_rows_cache[i] = r
        return r

    def _cons_row(self, i: int) -> dict:
        c = self._cons_rows_cache.get(i)
        if c is None:
            cons = self._snap.consumers
            c = dict(zip(cons.dtype.names or (), cons[i].item()))
            self._cons_rows_cache[i] = c
        return c

    def _ring_cell(self, row: int, col: str):
        i = int(self._ring_perm[row])
        if i < 0:
            return self._group_cell(-1 - i, col)
        return self._ring_index_cell(i, col)

    def _ring_index_cell(self, i: int, col: str):
        """Cell ``col`` of ring ``i`` (its index in the shown snapshot)."""
        v: float
        s = self._snap
        r = self._ring_row(i)
        dname = s.domains[int(r["domain"])].name
        wide = bool(self._wide)
        if col == "ring":
            closed = int(r["state"]) == 2
            cell = [(fmt.name(dname), "bold" if not closed else palette.LABEL),
                    (f"/{int(r['ring'])}", palette.LABEL)]
            return [(RING_INDENT, None), *cell] if self.group_mode is not None else cell
        if col == "pid":
            return str(int(r["pid"]))
        if col == "tid":
            return str(int(r["tid"]))
        if col == "thread":
            name = fmt.name(r["thread_name"]) or "-"
            if int(r["state"]) == 2:
                return [(name, palette.LABEL), (" (closed)", palette.LABEL)]
            return name
        if col == "fill":
            pct = float(r["fill_pct"])
            width = 16 if wide else 8
            b = fmt.bar(pct / 100.0, width)
            filled = b.rstrip(" ")
            return [(filled, palette.fill_style(pct)), ("·" * (width - len(filled)), palette.FILL_EMPTY),
                    (f" {fmt.pct(pct):>5}", "default")]
        if col == "rate":
            width = 16 if wide else 6
            series = self._spark_matrix("ring", "records_per_s")[:, i]
            rate = float(r["records_per_s"])
            val = fmt.si(rate) if r["rates_valid"] else fmt.DASH
            return [(fmt.sparkline(series, width, top=self._ring_spark_top), palette.RATE_SPARK),
                    (f" {val:>6}", "bold" if rate else palette.ZERO)]
        if col == "bytes":
            v = float(r["bytes_per_s"])
            return (fmt.size(v) if r["rates_valid"] else fmt.DASH, "default" if v else palette.ZERO)
        if col == "drops":
            v = float(r["drops_per_s"])
            if not r["rates_valid"]:
                return (fmt.DASH, palette.ZERO)
            return (fmt.si(v), palette.DROPS) if v > 0 else ("0", palette.ZERO)
        if col == "dropped":
            v = int(r["records_dropped"])
            return (fmt.count(v), palette.DROPS_LEGEND) if v else ("0", palette.ZERO)
        if col == "claimed":
            v = int(r["claimed_bytes"])
            return (fmt.size(v), "default") if v else ("0", palette.ZERO)
        if col == "high":
            return fmt.pct(float(r["high_water_pct"]))
        if col == "lag":
            lag = int(r["slowest_lag_records"])
            if lag < 0:
                return (fmt.DASH, palette.ZERO)
            ls = float(r["slowest_lag_s"])
            return [(fmt.count(lag), "default" if lag else palette.ZERO), (" ", None),
                    (f"{fmt.duration(ls):>5}", palette.lag_style(ls))]
        if col == "slowest":
            c = int(r["slowest_consumer"])
            if c < 0:
                return (fmt.DASH, palette.ZERO)
            row_c = s.consumer_row(dname, c)
            if row_c is None:
                return str(c)
            return fmt.name(s.consumers["name"][row_c])
        return ""

    def _column_width(self, key: str) -> int:
        table = self.rings_table
        table._ensure_layout()
        return next((w for c, _x, w in table._layout if c.key == key), 0)

    def _group_cell(self, gi: int, col: str):
        """Cell ``col`` of group ``gi``: its name and ring count, the sums and largest figures of its rings."""
        g = self._groups
        assert g is not None
        wide = bool(self._wide)
        key = g.keys[gi]
        if col == "ring":
            arrow = "▸ " if key in self.collapsed else "▾ "
            if g.mode == "domain":
                return [(arrow, "bold"), (fmt.name(g.labels[gi]), "bold")]
            comm = g.comms[gi]
            head = [(arrow, "bold"), (g.labels[gi], "bold"), (" ", None)]
            room = self._column_width("ring") - len(arrow) - len(g.labels[gi]) - 1
            text = fmt.name(comm) if comm is not None else "?"  # ?: the CPU probe did not see the process
            if 0 < room < len(text):  # the pid stays whole: the comm is cut
                text = text[:room - 1] + "…" if room > 1 else "…"
            return [*head, (text, "default" if comm is not None else palette.LABEL)]
        if col == "pid":
            return str(key.value) if g.mode == "process" else ""
        if col == "tid":
            return ""
        if col == "thread":
            n, shown = int(g.rings[gi]), int(self._group_counts[gi]) if gi < self._group_counts.size else 0
            what = f"{n} ring{'s' if n != 1 else ''}"
            if self.filter_text and shown < n:
                return [(f"{shown} of ", palette.FILTER), (what, "bold")]
            return (what, "bold")
        if col == "fill":
            pct = float(g.fill_pct[gi])
            width = 16 if wide else 8
            b = fmt.bar(pct / 100.0, width)
            filled = b.rstrip(" ")
            return [(filled, palette.fill_style(pct)), ("·" * (width - len(filled)), palette.FILL_EMPTY),
                    (f" {fmt.pct(pct):>5}", "bold")]
        if col == "rate":
            width = 16 if wide else 6
            m, top = self._group_spark()
            rate = float(g.records_per_s[gi])
            val = fmt.DASH if math.isnan(rate) else fmt.si(rate)
            return [(fmt.sparkline(m[:, gi], width, top=top), palette.RATE_SPARK),
                    (f" {val:>6}", "bold" if rate else palette.ZERO)]
        if col == "bytes":
            v = float(g.bytes_per_s[gi])
            return (fmt.DASH, palette.ZERO) if math.isnan(v) else (fmt.size(v), "bold" if v else palette.ZERO)
        if col == "drops":
            v = float(g.drops_per_s[gi])
            if math.isnan(v):
                return (fmt.DASH, palette.ZERO)
            return (fmt.si(v), palette.DROPS) if v > 0 else ("0", palette.ZERO)
        if col == "dropped":
            n = int(g.records_dropped[gi])
            return (fmt.count(n), palette.DROPS_LEGEND) if n else ("0", palette.ZERO)
        if col == "claimed":
            n = int(g.claimed_bytes[gi])
            return (fmt.size(n), "bold") if n else ("0", palette.ZERO)
        if col == "high":
            return (fmt.pct(float(g.high_water_pct[gi])), "bold")
        if col in ("lag", "slowest"):
            lr = int(g.lag_ring[gi])
            return self._ring_index_cell(lr, col) if lr >= 0 else (fmt.DASH, palette.ZERO)
        return ""

    def _consumer_cell(self, row: int, col: str):
        v: float
        s = self._snap
        i = int(self._cons_perm[row])
        c = self._cons_row(i)
        dname = s.domains[int(c["domain"])].name
        health = Health(int(c["health"])).label
        active = health in ("alive", "stale")
        if col == "name":
            return [(fmt.name(dname), palette.LABEL), ("/", palette.LABEL),
                    (fmt.name(c["name"]) or "-", "bold" if active else palette.LABEL)]
        if col == "pid":
            return str(int(c["pid"]))
        if col == "state":
            return (health, palette.HEALTH.get(health, "default"))
        if col == "heartbeat":
            age = int(c["heartbeat_age_ns"])
            return (fmt.age_ns(age), palette.HEALTH["stale"] if health == "stale" else "default")
        if not active and col in ("lag_max", "lag_mean", "lag_max_s", "lag_mean_s", "release"):
            return (fmt.DASH, palette.ZERO)
        if col == "lag_max":
            v = int(c["lag_max_records"])
            return (fmt.count(v), "default" if v else palette.ZERO) if v >= 0 else (fmt.DASH, palette.ZERO)
        if col == "lag_mean":
            v = float(c["lag_mean_records"])
            return (fmt.DASH, palette.ZERO) if math.isnan(v) else (fmt.si(v), "default" if v else palette.ZERO)
        if col in ("lag_max_s", "lag_mean_s"):
            v = float(c[col])
            return (fmt.duration(v), palette.lag_style(v))
        if col == "release":
            width = 12 if self._wide else 6
            series = self._spark_matrix("consumer", "release_per_s")[:, i]
            v = float(c["release_per_s"])
            val = fmt.si(v) if c["rates_valid"] else fmt.DASH
            return [(fmt.sparkline(series, width, top=self._cons_spark_top), palette.RATE_SPARK),
                    (f" {val:>6}", "bold" if v else palette.ZERO)]
        if col == "readers":
            return str(int(c["readers"]))
        if col == "lost":
            v = int(c["lost_seen"])
            return (fmt.count(v), palette.DROPS_LEGEND) if v else ("0", palette.ZERO)
        return ""

    # -- actions ---------------------------------------------------------------------------

    def _focused_table(self) -> tuple[VirtualTable, TableState]:
        if self.focused is self.consumers_table:
            return self.consumers_table, self.consumer_state
        return self.rings_table, self.ring_state

    def action_sort(self) -> None:
        table, state = self._focused_table()
        cols = [c for c in table.columns if c.sortable and c.key in table.visible_columns()]
        keys = [None] + [c.key for c in cols]
        nxt = keys[(keys.index(state.sort) + 1) % len(keys)] if state.sort in keys else keys[1]
        self._set_sort(table, state, nxt)

    def action_sort_by(self, key: str) -> None:
        """Sort the focused table by the column of ``key`` (Shift+letter); again: reverse."""
        table, state = self._focused_table()
        keys = CONSUMER_SORT_KEYS if table is self.consumers_table else RING_SORT_KEYS
        column = keys.get(key)
        if column is None:
            self.notify(f"{key}: no such sort key for this table ({' '.join(sorted(keys))})", severity="warning")
            return
        if state.sort == column:
            state.descending = not state.descending
            self.refresh_tables()
        else:
            self._set_sort(table, state, column)

    def action_sort_menu(self) -> None:
        """F6, as htop: the focused table's sortable columns in a list."""
        from fipstop.views.sort_menu import SortMenu

        table, state = self._focused_table()
        consumers = table is self.consumers_table
        keys = CONSUMER_SORT_KEYS if consumers else RING_SORT_KEYS

        def chosen(column: str | None) -> None:
            if column is not None and column != state.sort:
                self._set_sort(table, state, column)

        self.app.push_screen(SortMenu("consumers" if consumers else "rings", table.columns, table.visible_columns(),
                                      state.sort, keys), chosen)

    def action_group(self) -> None:
        """F5: rings grouped by domain, then by process, then one row per ring again;
        the highlighted ring stays highlighted (a highlighted group: its first ring)."""
        table = self.rings_table
        cur = table.cursor_key
        ring = cur
        if isinstance(cur, GroupKey):
            ring = self._first_ring_of(cur)
        modes = grouping.MODES
        self.group_mode = modes[(modes.index(self.group_mode) + 1) % len(modes)]
        self._groups = None
        if self._wide:
            self._set_columns(True)
        self.refresh_tables()
        if ring is not None and not table.move_to_key(ring) and self.group_mode is not None:
            g = self._groups
            s = self._shown
            if g is not None and s is not None:  # its group is folded: the group row
                row = s.ring_row(str(ring[0]), int(ring[1]))
                if row is not None:
                    table.move_to_key(g.keys[int(g.of_ring[row])])
        what = {None: "one row per ring", "domain": "rings grouped by domain",
                "process": "rings grouped by process"}[self.group_mode]
        self.notify(what, timeout=2)

    def _first_ring_of(self, key: GroupKey) -> tuple[str, int] | None:
        s, g = self._shown, self._groups
        if s is None or g is None:
            return None
        gi = g.index(key)
        if gi is None:
            return None
        for i in self._ring_perm.tolist():  # the first shown, else the first of the snapshot
            if i >= 0 and int(g.of_ring[i]) == gi:
                return s.ring_key(i)
        rows = np.flatnonzero(g.of_ring == gi)
        return s.ring_key(int(rows[0])) if rows.size else None

    def _cursor_group(self) -> GroupKey | None:
        """The group of the highlighted row of the rings table (grouping on)."""
        table = self.rings_table
        cur = table.cursor_key
        if self.group_mode is None or cur is None or self._groups is None:
            return None
        if isinstance(cur, GroupKey):
            return cur
        i = int(self._ring_perm[table.cursor_row])
        return self._groups.keys[int(self._groups.of_ring[i])] if i >= 0 else None

    def action_fold(self, how: str) -> None:
        """``+`` unfolds, ``-`` folds (on a ring: its group, the cursor goes to the group's row),
        Enter on a group row does either (``toggle``)."""
        if self.focused is self.consumers_table:
            return
        key = self._cursor_group()
        if key is None:
            if self.group_mode is None:
                self.notify("no groups: F5 groups the rings by domain, then by process", timeout=2)
            return
        fold = key not in self.collapsed if how == "toggle" else how == "close"
        self.rings_table.move_to_key(key)
        if fold:
            self.collapsed.add(key)
        else:
            self.collapsed.discard(key)
        self.refresh_tables()

    def action_fold_all(self) -> None:
        """``*``: every group folded, or, when they all are, every one unfolded."""
        g = self._groups
        if self.group_mode is None or g is None:
            self.notify("no groups: F5 groups the rings by domain, then by process", timeout=2)
            return
        key = self._cursor_group()
        if all(k in self.collapsed for k in g.keys):
            self.collapsed.difference_update(g.keys)
        else:
            self.collapsed.update(g.keys)
            if key is not None:
                self.rings_table.move_to_key(key)
        self.refresh_tables()

    def action_chart_split(self) -> None:
        """``c``: the chart's records/s per domain (the busiest apart, the rest as other), or the totals again."""
        self.chart_mode = "domains" if self.chart_mode == "totals" else "totals"
        chart = self.query_one("#chart", LineChart)
        chart.set_title("per domain" if self.chart_mode == "domains" else "all rings")
        self._chart_t = None
        self._refresh_chart()
        if not chart.display:
            self.notify("the chart is shown on terminals 36 lines tall or more", timeout=3)

    def action_log_scale(self) -> None:
        """The chart's y axis in decades, or linear again."""
        chart = self.query_one("#chart", LineChart)
        chart.set_log(not chart.log_scale)

    def _set_sort(self, table: VirtualTable, state: TableState, column: str | None) -> None:
        state.sort = column
        col = next((c for c in table.columns if c.key == column), None)
        state.descending = col.descending if col is not None else True
        self.refresh_tables()

    def action_reverse(self) -> None:
        table, state = self._focused_table()
        if state.sort is None:
            first = next((c for c in table.columns if c.sortable), None)
            if first is None:
                return
            state.sort = first.key
            state.descending = first.descending
        state.descending = not state.descending
        self.refresh_tables()

    @on(VirtualTable.HeaderClicked)
    def _header_clicked(self, event: VirtualTable.HeaderClicked) -> None:
        state = self.consumer_state if event.table is self.consumers_table else self.ring_state
        if state.sort == event.column:
            state.descending = not state.descending
            self.refresh_tables()
        else:
            self._set_sort(event.table, state, event.column)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.filter_text
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display or self.filter_text:
            self.filter_text = ""
            box.value = ""
            box.display = False
            self.rings_table.focus()
            self.refresh_tables()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.refresh_tables()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.filter_text = event.value.strip()
        box = self.query_one("#filter", Input)
        box.display = False
        self.rings_table.focus()
        self.refresh_tables()

    @on(VirtualTable.Highlighted, "#rings")
    def _ring_highlighted(self, event: VirtualTable.Highlighted) -> None:
        if not isinstance(event.key, GroupKey):  # a group row: the ring highlighted before stays selected
            self.fips.selected_ring = event.key

    @on(VirtualTable.Highlighted, "#consumers")
    def _consumer_highlighted(self, event: VirtualTable.Highlighted) -> None:
        self.fips.selected_consumer = event.key

    @on(VirtualTable.Selected, "#rings")
    def _ring_selected(self, event: VirtualTable.Selected) -> None:
        if isinstance(event.key, GroupKey):  # Enter (or a second click) on a group row folds or unfolds it
            self.action_fold("toggle")
            return
        self.fips.open_ring(event.key)

    @on(VirtualTable.Selected, "#consumers")
    def _consumer_selected(self, event: VirtualTable.Selected) -> None:
        self.fips.open_consumer(event.key)
