"""The banned-addresses view (b on the Bans panel): rows exact against the fixture's bans in force, the bound
and its partial marker, filter, sort, unban refused with a reason (fipstop ips, replay) and confirmed (Fail2Ban)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from uihelpers import demo_taps, wait_frames

from fipstop import fixtures
from fipstop.banfixtures import F2B_BANTIME_NS, demo_ban_aux
from fipstop.model.bans import IN_FORCE_MAX
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.banlist import BanListScreen, ConfirmUnban
from fipstop.views.bans import BansScreen
from fipstop.views.widgets.table import VirtualTable

FRAMES = 34  # the attack from t = 20 s: > IN_FORCE_MAX fipstop ips bans, a few dozen Fail2Ban ones


def bans_app() -> FipsTopApp:
    aux = demo_ban_aux(FRAMES)
    return FipsTopApp(SampleListSource(fixtures.demo_samples(FRAMES), 1.0, taps=demo_taps(), aux=aux),
                      paced=False, autopoll=False)


def oracle():
    """The bans in force after the fixture's last frame, replayed naively: (source, jail, ip) -> event,
    in the order the sources reported them (the newest last)."""
    live: dict = {}
    for frame in demo_ban_aux(FRAMES):
        for s in frame.values():
            for e in s.events:
                k = (s.source, e.jail, e.ip)
                live.pop(k, None)
                if e.kind == "ban" and e.ok:
                    live[k] = e
    return live


def _line(table: VirtualTable, row: int) -> str:
    return "".join(seg.text for seg in table.render_line(row + 1))


async def _open(pilot, app) -> BanListScreen:
    await wait_frames(pilot, app)
    await pilot.press("5")
    await pilot.pause()
    assert isinstance(app.screen, BansScreen)
    await pilot.press("b")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, BanListScreen)
    return screen


async def test_rows_and_counts_are_the_bans_in_force() -> None:
    size = (80, 24)
    app = bans_app()
    want = oracle()
    ips = [e for k, e in reversed(want.items()) if k[0] == "fipstop-ips"]  # the newest reported first
    f2b = [e for k, e in want.items() if k[0] == "fail2ban"]
    assert len(ips) > IN_FORCE_MAX and 0 < len(f2b) < IN_FORCE_MAX
    async with app.run_test(size=size) as pilot:
        screen = await _open(pilot, app)
        table = screen.query_one("#banlist-table", VirtualTable)
        keys = set(table.keys)
        # every fail2ban ban in force, and the newest IN_FORCE_MAX of fipstop ips
        assert table.row_count == IN_FORCE_MAX + len(f2b)
        assert {k for k in keys if k[0] == "fail2ban"} == {("fail2ban", e.jail, e.ip) for e in f2b}
        assert {k for k in keys if k[0] == "fipstop-ips"} == {("fipstop-ips", e.jail, e.ip)
                                                              for e in ips[:IN_FORCE_MAX]}
        title = screen.query_one("#banlist-title").render().plain
        stats = app.ban_stats()
        assert stats is not None and stats.source("fipstop-ips").active == len(ips)
        assert f"fipstop-ips {len(ips):,}" in title.replace("\u202f", ",") or f"{len(ips)}" in title
        assert "partial" in title or size[0] < 100  # cut at 80 columns; the row count says it
        assert screen.rows[0].ban_ns == max(e.ban_ns for e in want.values())  # newest first
        # sort by address (A), then again reverses
        await pilot.press("A")
        await pilot.pause()
        first = screen.rows[0].ip
        await pilot.press("A")
        await pilot.pause()
        assert screen.rows[-1].ip == first and screen.rows[0].ip != first


async def test_times_filter_and_unban(tmp_path: Path, monkeypatch) -> None:
    # u then y runs fail2ban-client: the real one is exercised against a real fail2ban-server in
    # tests/integration/test_fail2ban.py; here a stand-in on PATH records its arguments
    log = tmp_path / "argv"
    fake = tmp_path / "fail2ban-client"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {log}\necho 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    app = bans_app()
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await _open(pilot, app)
        table = screen.query_one("#banlist-table", VirtualTable)
        now = app.snapshot.taken_realtime_ns
        # filter to the fail2ban rows (bantime known) and check EXPIRES / LEFT against the fixture's bantime
        await pilot.press("slash", *"fail2ban", "enter")
        await pilot.pause()
        assert table.row_count == len(screen.rows) > 0 and all(b.source == "fail2ban" for b in screen.rows)
        b = screen.rows[0]
        assert b.expires_ns == b.ban_ns // 10**9 * 10**9 + F2B_BANTIME_NS
        line = _line(table, 0)
        left_s = (b.expires_ns - now) / 1e9
        assert f"{int(left_s // 60)}m" in line  # e.g. "9m52s"
        assert "unknown" not in line
        # u on a Fail2Ban row asks first; n cancels
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmUnban)
        assert "unbanip" in app.screen.text.plain and b.ip in app.screen.text.plain
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is screen and "cancelled" in screen.query_one("#banlist-note").render().plain
        # u then y: runs it and says what it did
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        for _ in range(50):
            await pilot.pause(0.05)
            if "unbanned" in screen.query_one("#banlist-note").render().plain:
                break
        assert f"unbanned {b.ip} in named-refused" in screen.query_one("#banlist-note").render().plain
        assert log.read_text().split() == ["set", "named-refused", "unbanip", b.ip]
        # Esc clears the filter; fipstop ips rows: expiry unknown, unban refused with the reason
        await pilot.press("escape")
        await pilot.pause()
        assert screen.filter_text == "" and table.row_count > len(screen.rows) - 1
        table.move_to_key(next((r.source, r.jail, r.ip) for r in screen.rows if r.source == "fipstop-ips"))
        row = table.cursor_row
        assert "unknown" in _line(table, row)
        await pilot.press("u")
        await pilot.pause()
        assert "publishes no control socket" in screen.query_one("#banlist-note").render().plain
        app.replay = object()  # type: ignore[assignment]  # as a recording's source: the past is not unbanned
        await pilot.press("u")
        await pilot.pause()
        assert "a recording" in screen.query_one("#banlist-note").render().plain
        app.replay = None
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, BansScreen)
