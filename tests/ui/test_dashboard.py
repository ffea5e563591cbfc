"""Pilot tests of the live monitor: every key path, on deterministic frames."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from uihelpers import FRAMES, SIZES, make_app, wait_frames

from fipstop import fixtures
from fipstop.model.rings import Health
from fipstop.model.snapshot import Frame
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.empty import EmptyScreen
from fipstop.views.help import HelpScreen
from fipstop.views.overview import OverviewScreen
from fipstop.views.ring_detail import RingDetailScreen
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.table import VirtualTable


def header_plain(app: FipsTopApp) -> str:
    h = app.screen.query_one(StatusHeader)
    return h.render().plain


def table(app: FipsTopApp, sel: str) -> VirtualTable:
    return app.screen.query_one(sel, VirtualTable)


def row_text(t: VirtualTable, row: int) -> str:
    """What a table line shows (header is line 0)."""
    strip = t.render_line(row + 1 - int(t.scroll_offset.y))
    return "".join(seg.text for seg in strip)


@pytest.mark.parametrize("size", SIZES)
async def test_overview_shows_rings_consumers_and_header(size) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        assert isinstance(app.screen, OverviewScreen)
        assert app.frames_received == FRAMES
        rings, cons = table(app, "#rings"), table(app, "#consumers")
        assert rings.row_count == 6 and cons.row_count == 5
        assert rings.keys[0] == ("named", 0)
        head = header_plain(app)
        assert "dns-edge-1" in head and "LIVE" in head and "12:00:57" in head
        assert "drops" in head and "stale" in head and "evicted" in head
        line = row_text(rings, 0)
        assert "named" in line and "%" in line
        # the chart is shown on tall screens only
        chart = app.screen.query_one("#chart")
        assert chart.display == (size[1] >= 36)
        if size[0] >= 150:
            assert "isc-net-0000" in line and "archiver" in line
        # every visible line has exactly the table's width (no overflow)
        for r in range(rings.row_count):
            assert len(row_text(rings, r)) == rings.scrollable_content_region.width


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app.is_running


async def test_help_opens_and_closes() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.query_one("#help-keys").render().plain
        for key in ("q", "?", "space", "t", "T", "/", "s", "S", "Enter", "Esc", "1", "2", "3"):
            assert f"  {key} " in text, key
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("question_mark")
        await pilot.press("question_mark")
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("question_mark")
        await pilot.press("q")  # q closes help, it does not quit from there
        assert isinstance(app.screen, OverviewScreen) and app.is_running


async def test_space_pauses_and_t_T_step_through_history() -> None:
    samples = fixtures.demo_samples(20)
    src = SampleListSource(samples, 1.0)
    app = FipsTopApp(src, autopoll=False)
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(10):
            app.accept_frame(src.poll())
        await pilot.pause()
        assert app.shown == 10 and not app.paused
        await pilot.press("space")
        assert app.paused and "PAUSED" in header_plain(app)
        for _ in range(5):  # frames keep arriving while paused, the view stays
            app.accept_frame(src.poll())
        await pilot.pause()
        assert app.shown == 10 and app.history.newest == 15
        assert "10/15" in header_plain(app)
        await pilot.press("T", "T")
        assert app.shown == 8
        assert header_plain(app).count("12:00:07") == 1  # frame 8 is t = 7 s
        await pilot.press("t")
        assert app.shown == 9
        for _ in range(20):
            await pilot.press("t")
        assert app.shown == 15  # stops at the newest
        for _ in range(30):
            await pilot.press("T")
        assert app.shown == 1  # and at the oldest
        await pilot.press("space")
        assert not app.paused and app.shown == 15 and "LIVE" in header_plain(app)
        # T while live pauses and steps back; t while live only pauses
        await pilot.press("T")
        assert app.paused and app.shown == 14
        await pilot.press("space", "t")
        assert app.paused and app.shown == 15


async def test_filter_shows_matching_rows_in_cyan_not_as_drops() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("slash")
        box = app.screen.query_one("#filter")
        assert box.display and box.has_focus
        await pilot.press(*"nginx")
        await pilot.pause()
        rings, cons = table(app, "#rings"), table(app, "#consumers")
        assert [k[0] for k in rings.keys] == ["nginx", "nginx"]
        assert cons.keys == [("nginx", 0)]
        title = app.screen.query_one("#rings-title").render().plain
        assert "filter" in title and "2 of 6" in title and "drop" not in title.lower()
        # its colour is not the drops colour
        from fipstop.views import palette

        assert palette.FILTER.split()[-1] != palette.DROPS.split()[-1]
        await pilot.press("enter")
        assert not box.display and rings.has_focus
        assert rings.row_count == 2  # the filter stays
        await pilot.press("escape")
        assert rings.row_count == 6 and cons.row_count == 5
        # typing q or space into the filter does not quit or pause
        await pilot.press("slash", "q", "space")
        assert app.is_running and not app.paused
        assert app.screen.filter_text == "q"
        await pilot.press("escape")
        assert not box.display and app.screen.filter_text == ""


async def test_sort_cycles_and_reverses() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        screen = app.screen
        rings = table(app, "#rings")
        seen = []
        for _ in range(20):
            await pilot.press("s")
            seen.append(screen.ring_state.sort)
            if screen.ring_state.sort == "drops":
                break
        assert seen[0] == "ring" and "fill" in seen and seen[-1] == "drops"
        snap = app.snapshot
        drops = {snap.ring_key(i): snap.rings["drops_per_s"][i] for i in range(snap.rings.size)}
        order = [drops[k] for k in rings.keys]
        assert order == sorted(order, reverse=True) and order[0] > 0
        header = row_text(rings, -1)  # line 0: the header shows the sort arrow
        assert "DROPS/S▼" in header
        await pilot.press("S")
        order = [drops[k] for k in rings.keys]
        assert order == sorted(order)
        assert "DROPS/S▲" in row_text(rings, -1)
        # the consumers table sorts on its own when focused
        await pilot.press("tab")
        assert table(app, "#consumers").has_focus
        await pilot.press("s")
        assert screen.consumer_state.sort == "name" and screen.ring_state.sort == "drops"
        # cycling comes back to the natural order
        for _ in range(40):
            await pilot.press("s")
            if screen.consumer_state.sort is None:
                break
        assert screen.consumer_state.sort is None


async def test_enter_opens_ring_detail_with_tap_and_escape_goes_back() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("enter")
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, RingDetailScreen) and screen.key == ("named", 0)
        deadline = time.monotonic() + 10  # the tap is a worker's: slow on a loaded machine
        while screen.tap is None and time.monotonic() < deadline:
            await pilot.pause(0.01)
        tap = screen.query_one("#tap").render().plain
        assert "query: host4.example.com IN A" in tap and "5 dropped before" in tap
        title = screen.query_one("#ring-title").render().plain
        assert "isc-net-0000" in title and "pid 4242" in title
        pos = screen.query_one("#positions", VirtualTable)
        assert pos.row_count == 3  # crowdsec, archiver, forwarder (fail2ban was evicted)
        assert "●" in row_text(pos, 0)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


async def test_consumer_detail_and_number_keys() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("tab", "down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ConsumerDetailScreen) and screen.key == ("named", 1)
        assert "archiver" in screen.query_one("#consumer-title").render().plain
        lag = screen.query_one("#lag-per-ring", VirtualTable)
        assert lag.row_count == 4
        await pilot.press("enter")  # a ring of it -> ring detail
        assert isinstance(app.screen, RingDetailScreen) and app.screen.key == ("named", 0)
        await pilot.press("1")
        assert isinstance(app.screen, OverviewScreen)
        assert table(app, "#consumers").has_focus  # focus comes back where it was
        await pilot.press("shift+tab", "down", "2")
        assert isinstance(app.screen, RingDetailScreen) and app.screen.key == ("named", 1)
        await pilot.press("3")  # the consumer highlighted in the ring detail: its first, crowdsec
        assert isinstance(app.screen, ConsumerDetailScreen) and app.screen.key == ("named", 0)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        assert len(app.screen_stack) == 1


async def test_mouse_click_highlights_opens_and_sorts() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        rings = table(app, "#rings")
        await pilot.click("#rings", offset=(5, 3))  # line 3 = third ring
        assert rings.cursor_row == 2 and isinstance(app.screen, OverviewScreen)
        await pilot.click("#rings", offset=(5, 3))
        assert isinstance(app.screen, RingDetailScreen) and app.screen.key == ("named", 2)
        await pilot.press("escape")
        # clicking the DROPS/S header sorts by it, again reverses
        x = next(cx for c, cx, w in rings._layout if c.key == "drops") + 2
        await pilot.click("#rings", offset=(x, 0))
        assert app.screen.ring_state.sort == "drops" and app.screen.ring_state.descending
        await pilot.click("#rings", offset=(x, 0))
        assert not app.screen.ring_state.descending


async def test_empty_state_then_a_domain_appears() -> None:
    empty = [fixtures.raw_sample(float(i), []) for i in range(2)]
    src = SampleListSource(empty + fixtures.demo_samples(3), 1.0)
    app = FipsTopApp(src, autopoll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        app.accept_frame(src.poll())
        await pilot.pause()
        assert isinstance(app.screen, EmptyScreen)
        text = app.screen.query_one("#empty-text").render().plain
        assert "fipstop demo" in text and "fipstop wrap -- CMD" in text and "/dev/shm" in text
        await pilot.press("2")  # nothing to open
        assert isinstance(app.screen, EmptyScreen)
        app.accept_frame(src.poll())
        app.accept_frame(src.poll())
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)
        assert table(app, "#rings").row_count == 6


async def test_missing_shm_dir_is_explained() -> None:
    from fipstop.probes.ring import RawSample

    raw = RawSample(host="h", shm_dir="/nope", taken_mono_ns=1, taken_realtime_ns=1,
                    unavailable="/nope: no such directory")
    app = FipsTopApp(SampleListSource([raw], 1.0), paced=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        assert isinstance(app.screen, EmptyScreen)
        assert "/nope: no such directory" in app.screen.query_one("#empty-text").render().plain


class _Flaky:
    interval_s = 1.0
    profiling = None

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.inner = SampleListSource(fixtures.demo_samples(3), 1.0)
        self.calls = 0

    def poll(self):
        self.threads.append(threading.current_thread().name)
        self.calls += 1
        if self.calls == 2:
            raise OSError("probe exploded")
        return self.inner.poll()

    def tap(self, domain, ring, max_records=32):
        return self.inner.tap(domain, ring, max_records)

    def close(self) -> None:
        pass


async def test_polling_runs_in_a_worker_thread_and_survives_errors() -> None:
    src = _Flaky()
    app = FipsTopApp(src, paced=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        assert app.frames_received == 3 and src.calls == 5
        assert all(name != threading.main_thread().name for name in src.threads)
        app.poll_error = "OSError: probe exploded"
        app.screen.refresh_view()
        assert "probe exploded" in header_plain(app)


async def test_1024_rings_virtualised_sort_and_filter() -> None:
    samples = fixtures.many_rings_samples(1024, 3)
    app = FipsTopApp(SampleListSource(samples, 1.0), paced=False)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        rings = table(app, "#rings")
        assert rings.row_count == 1024
        await pilot.press("end")
        assert rings.cursor_row == 1023 and rings.cursor_key == ("bench", 1023)
        assert "worker-1023" in row_text(rings, 1023)
        await pilot.press("slash", *"worker-10", "enter")
        assert rings.row_count == 24  # worker-1000 .. worker-1023 (names are worker-NNNN)
        await pilot.press("escape")
        for _ in range(8):
            await pilot.press("s")
            if app.screen.ring_state.sort == "drops":
                break
        snap = app.snapshot
        first = snap.ring_row(*rings.keys[0])
        assert snap.rings["drops_per_s"][first] == snap.rings["drops_per_s"].max()


async def test_consumer_states_are_labelled() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        cons = table(app, "#consumers")
        lines = [row_text(cons, i) for i in range(cons.row_count)]
        labels = [Health(int(h)).label for h in app.snapshot.consumers["health"]]
        assert labels == ["alive", "alive", "stale", "evicted", "alive"]
        for line, label in zip(lines, labels):
            assert label in line


def test_frames_are_the_same_for_every_run() -> None:
    a = SampleListSource(fixtures.demo_samples(30), 1.0).frames()
    b = SampleListSource(fixtures.demo_samples(30), 1.0).frames()
    for fa, fb in zip(a, b):
        assert isinstance(fa, Frame)
        np.testing.assert_array_equal(fa.snapshot.rings, fb.snapshot.rings)


def test_fill_chart_ticks_differ_when_fill_is_small() -> None:
    """Issue 16, item 7: a fill of 0.03 % labelled every y tick 0.0%."""
    from fipstop.views import format as fmt
    from fipstop.views.widgets.chart import nice_ticks, tick_labels

    assert tick_labels(nice_ticks(0.03), fmt.pct) == ["0%", "0.01%", "0.02%", "0.03%"]
    assert tick_labels(nice_ticks(40), fmt.pct) == ["0%", "10%", "20%", "30%", "40%"]


async def test_empty_consumer_table_says_the_filter_hides_them() -> None:
    app = make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("slash")
        for ch in "zzzz-no-such":
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        cons = table(app, "#consumers")
        assert cons.row_count == 0
        assert "no consumer matches the filter 'zzzz-no-such'" in cons.empty_text


def test_every_column_is_defined_in_help_and_readme() -> None:
    """Issue 16: README, docs and the help screen define every column in one sentence, with its unit."""
    from pathlib import Path

    from fipstop.views import banlist, bans, consumer_detail, help, overview, ring_detail

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    keys = [k for _, rows in help.COLUMNS for k, _ in rows]
    labels = {c.label for wide in (False, True) for c in overview.ring_columns(wide) + overview.consumer_columns(wide)}
    labels |= {c.label for c in bans.SOURCE_COLUMNS}
    labels |= {c.label for c in banlist.COLUMNS}
    labels |= {c.label for c in consumer_detail.LAG_COLUMNS if c.label != "LAG (records, history)"}
    labels |= {c.label for c in ring_detail.POSITION_COLUMNS if not c.label.startswith(("WHERE", "LAG"))}
    for label in labels:
        assert any(label == k or label in k.split(", ") or label in k.split(" ") or k.startswith(label + " ")
                   for k in keys), label
    for _section, rows in help.COLUMNS:
        for k, what in rows:
            assert f"| `{k}` | {what} |" in readme, k
    assert "columns: rings" in help.help_text().plain
