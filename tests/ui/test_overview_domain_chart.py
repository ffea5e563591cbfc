"""The overview chart per domain (``c``): one records/s line per busy domain, the rest as "other".

Oracle: each frame's per-domain sums of the rings' records/s, computed here
from the snapshots the app holds (and, as a cross-check, their sum is the
totals line the chart shows without ``c``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from uihelpers import SIZES

from fipstop import fixtures
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.overview import CHART_FRAMES, OverviewScreen
from fipstop.views.widgets.chart import LineChart, Series, chart_lines

N_DOMAINS = 8


async def loaded(pilot, app: FipsTopApp) -> None:
    src = SampleListSource(fixtures.many_domains_samples(N_DOMAINS, n=20), 1.0)
    frames = []
    while (f := src.poll()) is not None:
        frames.append(f)
    app.preload(frames)
    await pilot.pause()


def oracle(app: FipsTopApp) -> dict[str, list[float]]:
    frames = app.history.window(app.shown, CHART_FRAMES)
    out: dict[str, list[float]] = {}
    for f in frames:
        names = [d.name for d in f.domains]
        for name in names:
            out.setdefault(name, [])
        for k, name in enumerate(names):
            rows = [i for i in range(f.rings.size) if int(f.rings["domain"][i]) == k]
            valid = [i for i in rows if f.rings["rates_valid"][i]]
            if f.dt_s <= 0 or (rows and not valid):
                out[name].append(math.nan)
            else:
                out[name].append(sum(float(f.rings["records_per_s"][i]) for i in valid))
    return out


def legend_of(chart: LineChart) -> str:
    from rich.text import Text

    t = chart.border_title
    return t.plain if isinstance(t, Text) else Text.from_markup(str(t)).plain


def same(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | np.isclose(a, b, rtol=1e-12)))


@pytest.mark.parametrize("size", [*SIZES, (100, 40)])
async def test_c_splits_the_chart_per_domain(size) -> None:
    app = FipsTopApp(SampleListSource([], 1.0), autopoll=False, paced=False)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot, app)
        ov = app.screen
        assert isinstance(ov, OverviewScreen)
        chart = ov.query_one("#chart", LineChart)
        await pilot.press("c")
        await pilot.pause()
        assert ov.chart_mode == "domains"
        if not chart.display:  # 24 lines: no chart on screen; the key says where it is
            assert "36 lines" in " ".join(str(n.message) for n in app._notifications)
            return
        exp = oracle(app)

        def mean(v):
            v = [x for x in v if not math.isnan(x)]
            return sum(v) / len(v) if v else -1.0

        ranked = sorted(exp, key=lambda n: (-mean(exp[n]), n))
        series = chart._series
        labels = [s.label for s in series]
        assert labels == [*ranked[:5], f"other ({N_DOMAINS - 5} domains)", "drops/s (ring full)"]
        for s in series[:5]:
            assert same(s.values, exp[s.label]), s.label
        rest = np.array([exp[n] for n in ranked[5:]])
        assert same(series[5].values, np.where(np.isnan(rest).all(axis=0), np.nan, np.nansum(rest, axis=0)))
        # together they are the totals line
        total = np.nansum(np.array([s.values for s in series[:6]], dtype=float), axis=0)
        frames = app.history.window(app.shown, CHART_FRAMES)
        tot = [f.totals.records_per_s for f in frames]
        assert np.allclose(total[1:], tot[1:])
        legend = legend_of(chart)
        assert "per domain" in legend and all(lab in legend for lab in labels)
        assert len({s.color for s in series}) == len(series)  # one colour each, none the drops red but drops
        await pilot.press("c")
        await pilot.pause()
        assert [s.label for s in chart._series] == ["records/s", "drops/s (ring full)"]
        assert "all rings" in legend_of(chart)


@pytest.mark.parametrize("size", [(200, 60), (100, 40)])
async def test_no_color_lines_have_markers(size, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    from fipstop.views import palette

    app = FipsTopApp(SampleListSource([], 1.0), autopoll=False, paced=False)
    try:
        async with app.run_test(size=size) as pilot:
            await loaded(pilot, app)
            assert app.no_color
            ov = app.screen
            chart = ov.query_one("#chart", LineChart)
            await pilot.press("c")
            await pilot.pause()
            markers = [s.marker for s in chart._series]
            assert markers[0] == "" and len(set(markers)) == len(markers)  # blocks, then a character each
            drawn = "".join(t for line in chart_lines(chart.content_size.width, chart.content_size.height,
                                                      chart._x, chart._series) for t, _ in line)
            legend = legend_of(chart)
            for m in markers[1:]:
                assert m * 2 in legend
            assert "x" in drawn  # the drops line (dropping in the odd domains)
            await pilot.press("c")  # the totals: drops told apart from records/s without colour
            await pilot.pause()
            assert [s.marker for s in chart._series] == ["", "x"]
    finally:
        palette.use_color()


def test_a_marker_line_is_drawn_with_its_character() -> None:
    x = list(range(-9, 1))
    lines = chart_lines(40, 12, x, [Series("a", [5.0] * 10, (1, 1, 1)), Series("b", [1.0] * 10, (2, 2, 2), "o")])
    body = lines[1:-2]
    cells = [(t, rgb) for ln in body for t, rgb in ln]
    o_runs = [t for t, rgb in cells if rgb == (2, 2, 2)]
    a_runs = [t for t, rgb in cells if rgb == (1, 1, 1)]
    assert o_runs and set("".join(o_runs)) == {"o"}  # one 'o' per cell, the whole width
    cols = "".join(t for t, _ in lines[0]).count("─")  # the plot's width, from its top border
    assert len("".join(o_runs)) == cols  # a flat line: one point in every column
    assert a_runs and not set("".join(a_runs)) & {"o"}


@pytest.mark.parametrize("size", SIZES)
async def test_no_color_ring_detail_drops_line_has_its_marker(size, monkeypatch) -> None:
    """The ring detail's records/s and drops/s lines differed only by colour: without it the drops line is x."""
    monkeypatch.setenv("NO_COLOR", "1")
    from uihelpers import make_app, wait_frames

    from fipstop.views import palette
    from fipstop.views.ring_detail import RingDetailScreen

    app = make_app()  # t = 57 s: the named rings drop
    try:
        async with app.run_test(size=size) as pilot:
            await wait_frames(pilot, app)
            s = app.snapshot
            row = int(next(i for i in range(len(s.rings)) if s.rings["drops_per_s"][i] > 0))
            app.open_ring(s.ring_key(row))
            await pilot.pause(0.2)
            assert isinstance(app.screen, RingDetailScreen)
            chart = app.screen.query_one("#ring-rate-chart", LineChart)
            assert [x.marker for x in chart._series] == ["", palette.DROPS_MARKER]
            if chart.content_size.height >= 4:
                drawn = "".join(t for line in chart_lines(chart.content_size.width, chart.content_size.height,
                                                          chart._x, chart._series) for t, _ in line)
                assert palette.DROPS_MARKER in drawn
            assert "xx" in legend_of(chart)
    finally:
        palette.use_color()
