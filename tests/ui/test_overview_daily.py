"""The overview as a daily driver (issue 18), at 80x24 and 200x60: direct
sort keys (Shift+letter, as k9s), name columns sized to their content at
wide widths and cut in the middle where they must be, NO_COLOR."""

from __future__ import annotations

import pytest
from uihelpers import SIZES, make_app, wait_frames

from fipstop.views import format as fmt
from fipstop.views.overview import OverviewScreen
from fipstop.views.widgets.table import fit


def overview(app) -> OverviewScreen:
    assert isinstance(app.screen, OverviewScreen)
    return app.screen


@pytest.mark.parametrize("size", SIZES)
async def test_shift_letters_sort_the_focused_table(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        ov = overview(app)
        await pilot.press("D")  # drops/s, biggest first
        assert (ov.ring_state.sort, ov.ring_state.descending) == ("drops", True)
        s = app.snapshot
        shown = [s.rings["drops_per_s"][i] for i in ov._ring_perm]
        assert shown == sorted(shown, reverse=True)
        await pilot.press("D")  # again: reversed
        assert (ov.ring_state.sort, ov.ring_state.descending) == ("drops", False)
        await pilot.press("N")  # names: A first
        assert (ov.ring_state.sort, ov.ring_state.descending) == ("ring", False)
        await pilot.press("tab")  # the consumers table
        await pilot.press("L")
        assert (ov.consumer_state.sort, ov.consumer_state.descending) == ("lag_max", True)
        assert ov.ring_state.sort == "ring"  # the other table keeps its order
        await pilot.press("F")  # fill: a rings column, not a consumers one
        await pilot.pause()
        assert ov.consumer_state.sort == "lag_max"
        assert "no such sort key" in " ".join(str(n.message) for n in app._notifications)


@pytest.mark.parametrize("size", SIZES)
async def test_name_columns_fit_their_content_when_wide(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        await pilot.pause()
        ov = overview(app)
        s = app.snapshot
        names = [d.name for d in s.domains]
        longest_ring = max(len(f"{names[d]}/{r}") for d, r in zip(s.rings["domain"], s.rings["ring"]))
        longest_thread = max(len(fmt.name(t)) + (9 if st == 2 else 0)
                             for t, st in zip(s.rings["thread_name"], s.rings["state"]))
        ov.rings_table._ensure_layout()
        widths = {c.key: w for c, _, w in ov.rings_table._layout}
        if size[0] >= 150:
            assert widths["ring"] >= longest_ring and widths["thread"] >= longest_thread
            assert widths["thread"] <= max(longest_thread, 16)  # no blank spare: it went to the last column
        else:
            assert widths["ring"] == 9  # narrow: the width stays, long names are cut in the middle


def test_cells_cut_in_the_middle_keep_the_ends() -> None:
    def text(cell, w):
        return "".join(t for t, _ in fit(cell, w, "left", "middle"))

    rows = [[("demo-net", "bold"), (f"/{i}", "dim")] for i in range(10, 14)]
    cut = [text(r, 8) for r in rows]
    assert cut == ["demo…/10", "demo…/11", "demo…/12", "demo…/13"]
    assert text("demo-net-0003", 10) == "demo-…0003" and text("short", 10) == "short     "
    # the end cut is still there for numbers and text
    assert "".join(t for t, _ in fit("demo-net-0003", 10)) == "demo-net-…"


@pytest.mark.parametrize("size", SIZES)
async def test_no_color_keeps_drops_apart(size, monkeypatch) -> None:
    """NO_COLOR (https://no-color.org): no colour at all, and drops still stand out (reverse video)."""
    monkeypatch.setenv("NO_COLOR", "1")
    from fipstop.views import palette

    app = make_app()  # t = 57 s: the named rings drop
    try:
        async with app.run_test(size=size) as pilot:
            await wait_frames(pilot, app)
            await pilot.pause()
            assert app.no_color
            ov = overview(app)
            s = app.snapshot
            row = next(r for r, i in enumerate(ov._ring_perm) if s.rings["drops_per_s"][i] > 0)
            text, style = ov._ring_cell(row, "drops")
            assert "reverse" in style and "#" not in style
            zero = next(r for r, i in enumerate(ov._ring_perm) if s.rings["drops_per_s"][i] == 0)
            assert "reverse" not in str(ov._ring_cell(zero, "drops")[1])
            svg = app.export_screenshot()
            assert "#ff4d4f" not in svg  # the drops red is gone with every other colour
    finally:
        palette.use_color()


def test_log_scale_keeps_the_steady_line_off_the_floor() -> None:
    """A catch-up spike of 10^6 over a steady 10^3: linear, the steady line lies on the bottom row;
    in decades it sits half way up (log10(1001) / log10(10^6 + 1) = 0.5)."""
    from fipstop.views.widgets.chart import Series, chart_lines, log_ticks

    x = list(range(-59, 1))
    v = [1000.0] * 60
    v[30] = 1e6
    rows_of = {}
    for log in (False, True):
        lines = chart_lines(80, 23, x, [Series("r", v, (1, 2, 3))], log=log)
        body = lines[1:-2]  # between the top border and the x axis
        cells = [[rgb for t, rgb in ln for _ in t] for ln in body]
        chars = ["".join(t for t, _ in ln) for ln in body]
        axis = min(i for i, ch in enumerate(chars[0]) if ch in "│┤")  # the y axis, left
        # the first ten cells of the plot: the steady part, before the spike
        rows_of[log] = sorted({i for i, row in enumerate(cells)
                               for c in range(axis + 1, axis + 11) if row[c] == (1, 2, 3) and chars[i][c] != " "})
    rows = 23 - 3
    assert rows_of[False] == [rows - 1]  # the floor
    assert len(rows_of[True]) == 1 and abs(rows_of[True][0] - (rows - 1) / 2) <= 1
    ticks = log_ticks(1e6, 5)
    assert ticks[0] == 0.0 and ticks[-1] == 1e6 and len(ticks) <= 6
    assert all(b / a in (10.0, 100.0) for a, b in zip(ticks[1:], ticks[2:]))


@pytest.mark.parametrize("size", SIZES)
async def test_l_toggles_the_chart_log_scale(size) -> None:
    from fipstop.views.widgets.chart import LineChart

    app = make_app(20)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        chart = app.screen.query_one("#chart", LineChart)
        await pilot.press("l")
        assert chart.log_scale and "log scale" in str(chart.border_title)
        await pilot.press("l")
        assert not chart.log_scale and "log scale" not in str(chart.border_title)


@pytest.mark.parametrize("size", SIZES)
async def test_f6_sort_menu_lists_hidden_columns_and_sorts(size) -> None:
    from textual.widgets import OptionList

    from fipstop.views.sort_menu import SortMenu

    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        ov = overview(app)
        await pilot.press("f6")
        assert isinstance(app.screen, SortMenu)
        ol = app.screen.query_one(OptionList)
        labels = {ol.get_option_at_index(i).id: str(ol.get_option_at_index(i).prompt) for i in range(ol.option_count)}
        sortable = [c.key for c in ov.rings_table.columns if c.sortable]
        assert list(labels) == sortable
        hidden = [k for k in sortable if k not in ov.rings_table.visible_columns()]
        assert all("hidden at this width" in labels[k] for k in hidden)
        assert size[0] < 150 or not hidden  # at 200 columns every column is on screen
        assert size[0] >= 150 or hidden  # at 80 some are not, and the menu says which
        ol.highlighted = sortable.index("lag")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen) and ov.ring_state.sort == "lag"
        await pilot.press("f6", "escape")
        assert ov.ring_state.sort == "lag"


@pytest.mark.parametrize("size", SIZES)
async def test_p_on_a_row_profiles_that_rings_producer_or_that_consumer(size) -> None:
    from fipstop.views.profile import ProfileScreen

    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        ov = overview(app)
        s = app.snapshot
        await pilot.press("down")  # the second ring
        key = ov.rings_table.cursor_key
        await pilot.press("p")
        assert isinstance(app.screen, ProfileScreen)
        assert app.screen.pid == int(s.rings[s.ring_row(*key)]["pid"])
        await pilot.press("escape")
        await pilot.press("tab", "down")  # the consumers table, its second row
        ckey = ov.consumers_table.cursor_key
        await pilot.press("p")
        assert isinstance(app.screen, ProfileScreen)
        assert app.screen.pid == int(s.consumers[s.consumer_row(*ckey)]["pid"])
