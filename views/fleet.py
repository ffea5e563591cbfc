"""FleetApp: the dashboard over a fleet (``fipstop top --prometheus URL``).

Every host a Prometheus server scrapes (the ``fipstop serve`` targets of one
job), read through its HTTP API by :class:`fipstop.sources.prometheus.
PrometheusFleet`: a hosts table (state up / down / stale / unknown, age of
the sample it serves), a rings table and a consumers table with a host
column.  The cells are :mod:`fipstop.outputs.fleet`'s, so the screen and
``fipstop snapshot --prometheus`` read the same; unknown is ``?``.

Keys (the monitors' own): ``/`` host filter (a substring of the instance),
Enter on a host drills into it (only its rows), Esc back one level (drill-down,
then filter), space pause, ``r`` poll now, ? help, q / Ctrl-C quit.

The poll (HTTP, seconds when Prometheus is slow) runs in an exclusive thread
worker that posts :class:`FleetReady`; widgets are only touched in the
handler, so a slow server never freezes the keys.  A failed poll keeps the
last view on screen and says why in the status line.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from fipstop.errors import FipsError, exc_line
from fipstop.model.fleet import FleetView
from fipstop.outputs.fleet import (
    CONSUMER_COLUMNS,
    CONSUMER_NUMERIC,
    HOST_COLUMNS,
    HOST_NUMERIC,
    RING_COLUMNS,
    RING_NUMERIC,
    consumer_cells,
    header_line,
    host_cells,
    ring_cells,
)
from fipstop.sources.prometheus import PrometheusFleet

__all__ = ["FleetApp", "FleetReady"]

HELP = ("keys: / host filter  Enter drill into the host  Esc back  space pause  r poll now  q quit  - "
        "rates are Prometheus' rate() over the window in the header; ? unknown")

_STATE_STYLE = {"up": "green", "down": "bold red", "stale": "yellow", "unknown": "magenta"}


def _cells(row: tuple[str, ...], numeric: tuple[bool, ...]) -> list[Text]:
    """Plain text (never markup: the names come from other hosts), numbers right-aligned."""
    return [Text(c, justify="right" if n else "left") for c, n in zip(row, numeric, strict=True)]


class FleetReady(Message):
    """A poll finished: the view, or the one-line reason it failed."""

    def __init__(self, view: FleetView | None, error: str | None) -> None:
        super().__init__()
        self.view = view
        self.error = error


class FleetApp(App[int]):
    CSS = """
    #fleet-header { height: 1; background: $primary-background; }
    #fleet-status { height: 1; }
    #fleet-filter { display: none; }
    #fleet-filter.shown { display: block; }
    DataTable { height: auto; max-height: 1fr; }
    .section { height: 1; text-style: bold; margin-top: 1; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("slash", "filter", "filter"),
        Binding("escape", "fleet_back", "back"),
        Binding("space", "pause", "pause"),
        Binding("r", "poll_now", "poll"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, source: PrometheusFleet) -> None:
        super().__init__()
        self.source = source
        self.view: FleetView | None = None
        self.error: str | None = None
        self.host_filter = ""
        self.drilled: str | None = None  # the instance drilled into
        self.paused = False
        self.polls = 0

    def compose(self) -> ComposeResult:
        yield Static("fleet: connecting to Prometheus ...", id="fleet-header")
        yield Input(placeholder="host filter (a substring of the instance; Enter applies, Esc clears)",
                    id="fleet-filter")
        with Vertical():
            yield Static("hosts", classes="section")
            yield DataTable(id="hosts", cursor_type="row", zebra_stripes=True)
            yield Static("rings", classes="section")
            yield DataTable(id="rings", cursor_type="row", zebra_stripes=True)
            yield Static("consumers", classes="section")
            yield DataTable(id="consumers", cursor_type="row", zebra_stripes=True)
        yield Static(HELP, id="fleet-status")

    def on_mount(self) -> None:
        for tid, cols in (("hosts", HOST_COLUMNS), ("rings", RING_COLUMNS), ("consumers", CONSUMER_COLUMNS)):
            self.query_one(f"#{tid}", DataTable).add_columns(*cols)
        self.query_one("#hosts", DataTable).focus()
        self.poll_now()
        self.set_interval(self.source.interval_s, self.poll_now, name="fleet-poll")

    # -- polling ---------------------------------------------------------------

    def poll_now(self) -> None:
        self._poll()

    @work(exclusive=True, thread=True, group="fleet", exit_on_error=False)
    def _poll(self) -> None:
        try:
            view, error = self.source.poll(), None
        except FipsError as e:  # the HTTP API's one-line reason
            view, error = None, e.message[:200]
        except Exception as e:  # anything else: said, not raised
            view, error = None, exc_line(e, 200)
        self.post_message(FleetReady(view, error))

    def on_fleet_ready(self, msg: FleetReady) -> None:
        self.polls += 1
        self.error = msg.error
        if msg.view is not None and not self.paused:
            self.view = msg.view
        self.refresh_tables()

    # -- drawing ---------------------------------------------------------------

    def shown(self) -> FleetView | None:
        """The view as the filter and the drill-down leave it."""
        if self.view is None:
            return None
        v = self.view.only(self.host_filter)
        if self.drilled is not None:
            d = self.drilled
            v = FleetView(v.url, v.job, v.rate_window, v.at_s, tuple(h for h in v.hosts if h.instance == d),
                          tuple(r for r in v.rings if r.instance == d),
                          tuple(c for c in v.consumers if c.instance == d))
        return v

    def refresh_tables(self) -> None:
        v = self.shown()
        head = self.query_one("#fleet-header", Static)
        if v is None:
            head.update(Text(f"fleet: no answer from Prometheus yet{': ' + self.error if self.error else ''}"))
            return
        extra = []
        if self.drilled is not None:
            extra.append(f"host {self.drilled} (Esc: all hosts)")
        if self.host_filter:
            extra.append(f"filter {self.host_filter!r}")
        if self.paused:
            extra.append("PAUSED")
        if self.error:
            extra.append(f"last poll failed: {self.error} (showing the one before)")
        head.update(Text(" | ".join([header_line(v), *extra])))
        hosts = self.query_one("#hosts", DataTable)
        keep = hosts.cursor_row
        hosts.clear()
        for h in v.hosts:
            cells = _cells(host_cells(h), HOST_NUMERIC)
            cells[1].stylize(_STATE_STYLE.get(h.state, ""))
            hosts.add_row(*cells, key=h.instance)
        if v.hosts:
            hosts.move_cursor(row=min(keep, len(v.hosts) - 1))
        for tid, rows, numeric in (("rings", [ring_cells(r) for r in v.rings], RING_NUMERIC),
                                   ("consumers", [consumer_cells(c) for c in v.consumers], CONSUMER_NUMERIC)):
            t = self.query_one(f"#{tid}", DataTable)
            keep = t.cursor_row
            t.clear()
            for row in rows:
                t.add_row(*_cells(row, numeric))
            if rows:
                t.move_cursor(row=min(keep, len(rows) - 1))

    def table_text(self, table_id: str) -> list[tuple[str, ...]]:
        """The cells of one table as plain text (tests read what is on screen)."""
        t = self.query_one(f"#{table_id}", DataTable)
        return [tuple(str(c) for c in t.get_row_at(i)) for i in range(t.row_count)]

    # -- keys ------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "hosts" and event.row_key.value is not None:
            self.drilled = str(event.row_key.value)
            self.refresh_tables()

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.add_class("shown")
        box.value = self.host_filter
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.host_filter = event.value.strip()[:100]
        event.input.remove_class("shown")
        self.query_one("#hosts", DataTable).focus()
        self.refresh_tables()

    def action_fleet_back(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        if box.has_class("shown"):
            box.remove_class("shown")
            self.query_one("#hosts", DataTable).focus()
        elif self.drilled is not None:
            self.drilled = None
        elif self.host_filter:
            self.host_filter = ""
        else:
            return
        self.refresh_tables()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_tables()

    def action_poll_now(self) -> None:
        self.poll_now()

    def action_help(self) -> None:
        self.query_one("#fleet-status", Static).update(Text(HELP + f" (polled {self.polls} times, "
                                                        f"{time.strftime('%H:%M:%S')})"))
