"""The Bans panel (key 5) and the bans/s slot of the header, on fixed ban samples."""

from __future__ import annotations

from uihelpers import FRAMES, demo_taps, wait_frames

from fipstop import fixtures
from fipstop.banfixtures import demo_ban_aux
from fipstop.sources.samples import SampleListSource
from fipstop.views import format as fmt
from fipstop.views.app import FipsTopApp
from fipstop.views.bans import BansScreen
from fipstop.views.overview import OverviewScreen
from fipstop.views.widgets.header import header_text
from fipstop.views.widgets.table import VirtualTable


def bans_app(n: int = FRAMES, *, hostile: bool = False, aux=None) -> FipsTopApp:
    samples = fixtures.demo_samples(n)
    aux = demo_ban_aux(n, hostile=hostile) if aux is None else aux
    return FipsTopApp(SampleListSource(samples, 1.0, taps=demo_taps(), aux=aux), paced=False, autopoll=False)


def _line(table: VirtualTable, row: int) -> str:
    return "".join(seg.text for seg in table.render_line(row + 1))


async def test_key_5_shows_both_sources_and_esc_goes_back() -> None:
    app = bans_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        assert "bans 504/s" in header_text(app.header_state()).plain
        await pilot.press("5")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, BansScreen)
        srcs = screen.query_one("#ban-sources", VirtualTable)
        assert list(srcs.keys) == ["fail2ban", "fipstop-ips"]
        ips = _line(srcs, 1)
        assert "480" in ips and "15.6k" in ips and "10ms" in ips
        feed = screen.query_one("#ban-feed", VirtualTable)
        assert feed.row_count == 200
        hist = screen.query_one("#ttb-hist").render().plain
        assert "≤5ms" in hist and "≤10s" in hist and "fail2ban" in hist
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)


async def test_paused_stepping_shows_older_ban_stats() -> None:
    app = bans_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("5")
        newest = app.ban_stats().bans_total
        for _ in range(10):
            await pilot.press("T")
        await pilot.pause()
        assert app.paused and app.ban_stats().bans_total < newest
        title = app.screen.query_one("#bans-title").render().plain
        assert f"total {fmt.count(app.ban_stats().bans_total)}" in title


async def test_no_ban_source_says_how_to_get_one() -> None:
    app = bans_app(5, aux=[{} for _ in range(5)])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        assert " bans " not in header_text(app.header_state()).plain
        await pilot.press("5")
        await pilot.pause()
        line = _line(app.screen.query_one("#ban-sources", VirtualTable), 0)
        assert "fipstop ips" in line


async def test_hostile_ban_text_is_escaped() -> None:
    app = bans_app(40, hostile=True)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("5")
        await pilot.pause()
        jails = app.screen.query_one("#ban-jails", VirtualTable)
        text = " ".join(_line(jails, i) for i in range(jails.row_count))
        assert "\\x1b[31mred\\x1b[0m[bold]x[/bold]" in text
        feed = app.screen.query_one("#ban-feed", VirtualTable)
        feed_text = " ".join(_line(feed, i) for i in range(feed.row_count))
        assert "\x1b" not in feed_text
        svg = app.export_screenshot()
        assert "\x1b" not in svg and "\x07" not in svg
        assert app.is_running
