"""The FIPS paper's prototype rings (FIPS-IPC, ``--fipsipc``) on the overview and on a ring screen of their own.

- :class:`FipsIpcRingsPanel`: a table under the overview's rings, one row
  per prototype ring (writer segment) in the rings table's vocabulary: ring
  (segment/slot), writer state, fill, records/s, drops/s, claimed, slowest
  lag, laps.  What the prototype cannot tell is ``?`` (drops: it counts
  nothing; fill without a registered reader), estimates carry ``~`` (rates and
  laps come from slot positions modulo the ring size).  Hidden when there is
  no prototype segment.  Enter on a row opens :class:`FipsIpcRingScreen`.
- :class:`FipsIpcRingScreen`: the ring's positions, every registered reader
  in it, and a message tap of its newest records (escaped, plain Text, never
  markup).  The prototype has no sequence numbers: a slot the writer reaches
  again while it is copied is rewritten under the copy, and the screen says
  when that may have happened.
- :class:`FipsIpcTapMixin`: what the app adds for the tap: a thread worker
  asking the source (``fipsipc_tap``, :class:`fipstop.sources.protocol.
  FipsIpcTapping`) and a message back; a source that cannot (a recording)
  is said so on the screen.

Kept apart from the overview and ring-detail modules so the libfips screens
do not grow prototype branches.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Footer

from fipstop.errors import exc_line
from fipstop.model.fipsipc import FipsIpcView, IpcRing, IpcSegmentView
from fipstop.model.snapshot import Snapshot
from fipstop.probes.fipsipc import IpcTap
from fipstop.sources.protocol import FipsIpcTapping
from fipstop.textsafe import escape_bytes
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import Column, VirtualTable
from fipstop.views.widgets.textline import TextLine

__all__ = ["FipsIpcRingScreen", "FipsIpcRingsPanel", "FipsIpcTapMixin", "FipsIpcTapReady", "ipc_ring_cells",
           "ipc_rings", "ipc_tap_lines"]

TAP_RECORDS = 64
#: the panel is at most this many rows tall (it scrolls), so the libfips tables keep their room
MAX_ROWS = 6
UNKNOWN = "?"

Key = tuple[int, int]  # (shmid, ring)


def ipc_columns() -> list[Column]:
    return [
        Column("ring", "RING", 28, "left", 0, sortable=False),
        Column("writer", "WRITER", 9, "left", 1, sortable=False),
        Column("fill", "FILL", 8, "right", 0, sortable=False),
        Column("rate", "RECORDS/S", 10, "right", 0, sortable=False),
        Column("drops", "DROPS/S", 8, "right", 1, sortable=False),
        Column("claimed", "CLAIMED", 8, "right", 3, sortable=False),
        Column("lag", "SLOWEST LAG", 11, "right", 0, sortable=False),
        Column("lapped", "LAPPED", 8, "right", 2, sortable=False),
        Column("mode", "MODE", 12, "left", 4, flex=True, sortable=False),
    ]


def ipc_rings(view: FipsIpcView | object | None) -> list[tuple[IpcSegmentView, IpcRing]]:
    """Every ring a writer uses or used (a free slot that never committed is left out), segment by segment."""
    if not isinstance(view, FipsIpcView):
        return []
    return [(s, r) for s in view.segments for r in s.rings if r.writer != "free" or r.committed_pos]


def _est(v: float | None) -> str:
    return UNKNOWN if v is None else "~" + fmt.si(v)


def ipc_ring_cells(seg: IpcSegmentView, r: IpcRing) -> dict[str, str]:
    """One row's cells as plain strings (the panel styles them; tests read them)."""
    return {
        "ring": f"{fmt.name(seg.label)}/{r.ring}",
        "writer": r.writer,
        "fill": UNKNOWN if r.fill_pct is None else fmt.pct(r.fill_pct),
        "rate": _est(r.commit_per_s_est),
        "drops": UNKNOWN,  # the prototype's writers wait or overwrite and count nothing
        "claimed": str(r.claimed_slots),
        "lag": UNKNOWN if r.lag_slots is None else fmt.count(r.lag_slots),
        "lapped": UNKNOWN if r.lapped_slots_est is None else "~" + fmt.count(r.lapped_slots_est),
        "mode": "overwrite" if seg.overwrite else "writer waits",
    }


class FipsIpcRingsPanel(Vertical):
    """The overview's prototype-rings section (hidden without prototype segments)."""

    DEFAULT_CSS = """
    FipsIpcRingsPanel { height: auto; }
    FipsIpcRingsPanel > VirtualTable { height: 3; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[tuple[IpcSegmentView, IpcRing]] = []
        self._cells: list[dict[str, str]] = []

    def compose(self) -> ComposeResult:
        yield TextLine(id="ipc-rings-title", classes="section-title")
        yield VirtualTable(ipc_columns(), id="ipc-rings")

    def on_mount(self) -> None:
        self.display = False

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#ipc-rings", VirtualTable)

    @property
    def height_wanted(self) -> int:
        """Lines it takes on screen (0 when hidden)."""
        return 0 if not self.rows else min(len(self.rows), MAX_ROWS) + 2

    def show(self, snap: Snapshot | None) -> None:
        self.rows = ipc_rings(snap.fipsipc if snap is not None else None)
        self.display = bool(self.rows)
        if not self.rows:
            return
        self._cells = [ipc_ring_cells(s, r) for s, r in self.rows]
        segs = len({s.shmid for s, _ in self.rows})
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" FIPS-IPC prototype rings ", style="bold")
        t.append(f"{len(self.rows)}", style="bold")
        # a lock its dead holder left locked: every later attach blocks for ever (red: nothing gets through);
        # first, so a narrow terminal shows it
        for seg in {s.shmid: s for s, _ in self.rows}.values():
            if seg.lock_owner is not None and seg.lock_owner_alive is False:
                t.append(f"  {fmt.name(seg.label)}: assignment lock held by gone thread {seg.lock_owner}",
                         style=palette.DROPS)
        t.append(f"  in {segs} segment(s) (System V shm): ~ estimate, ? unknown (the prototype counts no drops)",
                 style=palette.LABEL)
        self.query_one("#ipc-rings-title", TextLine).update(t)
        table = self.table
        table.styles.height = min(len(self.rows), MAX_ROWS) + 1
        table.set_rows([(s.shmid, r.ring) for s, r in self.rows], self._cell)

    def _cell(self, row: int, col: str):
        c = self._cells[row][col]
        seg, r = self.rows[row]
        if col == "ring":
            return [(fmt.name(seg.label), "bold"), (f"/{r.ring}", palette.LABEL)]
        if col == "fill" and r.fill_pct is not None:
            return (c, palette.fill_style(r.fill_pct))
        if col == "writer":
            return (c, palette.RING_STATE.get("active" if c == "in use" else "closed", "default"))
        if col == "lapped" and r.lapped_slots_est:
            return (c, palette.DROPS)
        if c == UNKNOWN or c in ("0", "~0"):
            return (c, palette.ZERO)
        return c

    @on(VirtualTable.Selected, "#ipc-rings")
    def _selected(self, event: VirtualTable.Selected) -> None:
        event.stop()
        opener = getattr(self.app, "open_fipsipc_ring", None)
        if opener is not None:
            opener(event.key)


def ipc_tap_lines(tap: IpcTap | None, *, can_tap: bool = True) -> Text:
    """The tapped records as plain Text, newest first: escaped payloads, never markup."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not can_tap:
        text.append("this source cannot tap prototype rings (a recording keeps no records)", style="italic dim")
        return text
    if tap is None:
        text.append("waiting for the tap…", style="italic dim")
        return text
    if tap.error:
        text.append("tap: " + escape_bytes(tap.error.encode()), style=palette.WARN)
        return text
    if not tap.records:
        text.append("no committed record in the ring", style="italic dim")
        return text
    if tap.maybe_rewritten:
        text.append("the writer moved far enough during the copy to have rewritten the oldest of these\n",
                    style=palette.WARN)
    for i, rec in enumerate(reversed(tap.records)):
        if i:
            text.append("\n")
        text.append(f"slot {rec.slot:>6} ", style=palette.LABEL)
        if rec.length_bad:
            text.append("[length prefix past the slot: cut] ", style=palette.WARN)
        text.append(escape_bytes(rec.payload))
    return text


class FipsIpcRingScreen(FipsScreen):
    """One prototype ring: positions, its readers, the newest records."""

    SCREEN_NAME = "fipsipc ring"
    BINDINGS = [Binding("escape", "leave", "Back"), Binding("1", "leave", "Overview", show=False)]

    def __init__(self, key: Key) -> None:
        super().__init__()
        self.key = (int(key[0]), int(key[1]))
        self.tap: IpcTap | None = None

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Vertical(id="ipc-ring-body"):
            yield TextLine(id="ipc-ring-title", classes="detail-title")
            yield TextLine(" Readers in this ring (registered processes; the prototype keeps no names or pids)",
                           classes="section-title")
            yield TextLine(id="ipc-readers")
            yield TextLine(" Newest records (message tap, escaped; no sequence numbers: a slot can be rewritten "
                           "while it is copied)", classes="section-title")
            yield TextLine(id="ipc-tap", classes="tap")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#ipc-ring-title", TextLine).styles.height = 2
        self.query_one("#ipc-tap", TextLine).styles.height = "1fr"

    def _find(self) -> tuple[IpcSegmentView, IpcRing] | None:
        snap = self.fips.snapshot
        for s, r in ipc_rings(snap.fipsipc if snap is not None else None):
            if (s.shmid, r.ring) == self.key:
                return s, r
        return None

    def refresh_view(self) -> None:
        super().refresh_view()
        found = self._find()
        title = self.query_one("#ipc-ring-title", TextLine)
        if found is None:
            title.update(Text(f" prototype ring {self.key[1]} of shmid {self.key[0]} is not there any more "
                              "(segment removed?)", style=palette.WARN_BOLD))
            return
        seg, r = found
        c = ipc_ring_cells(seg, r)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" {fmt.name(seg.label)}", style="bold")
        t.append(f"/{r.ring}", style=palette.LABEL)
        t.append(f"  shmid {seg.shmid} key {seg.key:#010x}  {c['mode']}  {seg.slots} slots of {seg.line_size} B  "
                 f"writer {r.writer}", style=palette.LABEL)
        t.append("\n ")
        for label, key in (("fill", "fill"), ("records/s", "rate"), ("drops/s", "drops"), ("claimed", "claimed"),
                           ("slowest lag", "lag"), ("lapped", "lapped")):
            t.append(f"{label} ", style=palette.LABEL)
            t.append(c[key] + "  ")
        t.append(f"committed at slot {r.committed_pos}", style=palette.LABEL)
        title.update(t)
        readers = Text(no_wrap=True, overflow="ellipsis")
        mine = [p for p in seg.positions if p.ring == r.ring]
        if not mine:
            readers.append(" no reader registered: nothing holds the writer back", style="italic dim")
        for i, p in enumerate(mine):
            if i:
                readers.append("\n")
            readers.append(f" reader {p.reader}: released to slot {p.released_pos}, lag {p.lag_slots}, taken "
                           f"{p.taken_slots}, released/s {_est(p.release_per_s_est)}")
        line = self.query_one("#ipc-readers", TextLine)
        line.styles.height = max(len(mine), 1)
        line.update(readers)
        can = isinstance(getattr(self.app, "source", None), FipsIpcTapping)
        if not can:
            self.query_one("#ipc-tap", TextLine).update(ipc_tap_lines(None, can_tap=False))
        elif not self.fips.paused:
            request = getattr(self.app, "request_fipsipc_tap", None)
            if request is not None:
                request(self.key[0], self.key[1], TAP_RECORDS)

    def action_leave(self) -> None:
        """Esc: back one level (to the overview)."""
        if len(self.app.screen_stack) > 1 and self.app.screen is self:
            self.app.pop_screen()

    def show_ipc_tap(self, tap: IpcTap) -> None:
        if (tap.shmid, tap.ring) != self.key:
            return
        self.tap = tap
        self.query_one("#ipc-tap", TextLine).update(ipc_tap_lines(tap))


class FipsIpcTapReady(Message):
    def __init__(self, tap: IpcTap) -> None:
        super().__init__()
        self.tap = tap


class FipsIpcTapMixin:
    """Mixed into the app: open a prototype ring, tap it in a worker (the source call blocks on shmat)."""

    def open_fipsipc_ring(self, key: Key | None) -> None:
        if key is None:
            return
        self.push_screen(FipsIpcRingScreen((int(key[0]), int(key[1]))))  # type: ignore[attr-defined]

    @work(exclusive=True, thread=True, group="fipsipc-tap", exit_on_error=False)
    def request_fipsipc_tap(self, shmid: int, ring: int, max_records: int = TAP_RECORDS) -> None:
        source = getattr(self, "source", None)
        try:
            if not isinstance(source, FipsIpcTapping):
                raise RuntimeError("this source cannot tap prototype rings")
            tap = source.fipsipc_tap(shmid, ring, max_records)
        except Exception as e:  # the screen says why; the dashboard goes on
            tap = IpcTap(shmid, ring, error=exc_line(e, 200))
        self.post_message(FipsIpcTapReady(tap))  # type: ignore[attr-defined]

    def on_fips_ipc_tap_ready(self, message: FipsIpcTapReady) -> None:  # textual names it after the class
        screen = self.screen  # type: ignore[attr-defined]
        if isinstance(screen, FipsIpcRingScreen):
            screen.show_ipc_tap(message.tap)
