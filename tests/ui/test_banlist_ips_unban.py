"""`u` on a fipstop-ips row of the banned-addresses view, at 80x24 and 200x60: the confirmation shows the exact
`fipstop ips-client unban JAIL ADDR --control SOCKET`, y sends it to a real control socket (fipstop.ips.control's
server in front of a real ban engine that holds the row's ban), the note says what the IPS did and the engine no
longer holds the ban; refused with a reason for an IPS that publishes no socket, one whose socket is gone, one
that would refuse us (another uid), in a replay; an IPS's error (not banned there) is the note.  On a Fail2Ban
row, fail2ban-client is given the socket the dashboard follows (-s)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from uihelpers import demo_taps, wait_frames

from fipstop import fixtures, unban
from fipstop.banfixtures import demo_ban_aux
from fipstop.ips import run as ips_run
from fipstop.ips.actions import DryRun
from fipstop.ips.control import ControlServer
from fipstop.ips.jails import BUILTIN_JAILS, compile_jail
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.banlist import BanListScreen, ConfirmUnban
from fipstop.views.bans import BansScreen
from fipstop.views.widgets.table import VirtualTable

FRAMES = 34
SIZES = [(80, 24), (200, 60)]


class Publisher:
    published = dropped = 0

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def publish_many(self, records) -> None:
        self.records += records


class EngineCtl:
    """The two calls the socket makes, on a real ban engine (fipstop ips's own, dry-run)."""

    def __init__(self, engine: ips_run.Engine) -> None:
        self.engine = engine

    def control_status(self):
        return {"active": len(self.engine.active)}

    def control_unban(self, jail, ip):
        return self.engine.unban_now(jail, ip)


def app_with(control: str = "", f2b_socket: str = "") -> FipsTopApp:
    aux = demo_ban_aux(FRAMES)
    for a in aux:
        a["bans"] = replace(a["bans"], control=control)
        a["fail2ban"] = replace(a["fail2ban"], control=f2b_socket)
    return FipsTopApp(SampleListSource(fixtures.demo_samples(FRAMES), 1.0, taps=demo_taps(), aux=aux),
                      paced=False, autopoll=False)


async def open_list(pilot, app) -> BanListScreen:
    await wait_frames(pilot, app)
    await pilot.press("5")
    await pilot.pause()
    assert isinstance(app.screen, BansScreen)
    await pilot.press("b")
    await pilot.pause()
    assert isinstance(app.screen, BanListScreen)
    return app.screen


def note(screen: BanListScreen) -> str:
    return screen.query_one("#banlist-note").render().plain


async def wait_note(pilot, screen: BanListScreen, *words: str) -> str:
    for _ in range(200):
        await pilot.pause(0.05)
        if any(w in note(screen) for w in words):
            break
    return note(screen)


def first_ips_row(screen: BanListScreen, table: VirtualTable):
    b = next(r for r in screen.rows if r.source == "fipstop-ips")
    table.move_to_key((b.source, b.jail, b.ip))
    return b


@pytest.fixture
def ips(tmp_path: Path):
    spec = BUILTIN_JAILS["named-refused"]
    eng = ips_run.Engine([spec], [compile_jail(spec)], DryRun(), Publisher(), 3, 1, lambda m: None)
    srv = ControlServer(str(tmp_path / "ips.sock"), EngineCtl(eng), lambda m: None)
    srv.start()
    yield eng, srv
    srv.close()


@pytest.mark.parametrize("size", SIZES)
async def test_u_on_a_fipstop_ips_row_unbans_through_its_socket(size, ips) -> None:
    eng, srv = ips
    app = app_with(control=srv.path)
    async with app.run_test(size=size) as pilot:
        screen = await open_list(pilot, app)
        table = screen.query_one("#banlist-table", VirtualTable)
        b = first_ips_row(screen, table)
        eng.triggers([(b.jail, b.ip, b.first_ns, b.trigger_ns, b.hits, None)])  # the IPS holds this ban
        assert (b.jail, b.ip) in eng.active
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmUnban)
        text = app.screen.text.plain
        assert f"runs: fipstop ips-client unban {b.jail} {b.ip} --control {srv.path}" in " ".join(text.split())
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is screen and "cancelled" in note(screen) and (b.jail, b.ip) in eng.active
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        got = await wait_note(pilot, screen, "unbanned", "fipstop ips:")
        assert got.strip() == f"unbanned {b.ip} in {b.jail} (fipstop ips)"
        assert (b.jail, b.ip) not in eng.active and eng.unbans == 1  # the oracle: the engine
        # again: the IPS says it is not banned there (the fixture's frames do not move): its error is the note
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        got = await wait_note(pilot, screen, "not banned")
        assert got.strip() == f"fipstop ips: {b.ip} is not banned in {b.jail}"


@pytest.mark.parametrize("size", SIZES)
async def test_u_on_a_fipstop_ips_row_refusals(size, ips, tmp_path: Path, monkeypatch) -> None:
    eng, srv = ips
    # an IPS that publishes no socket
    app = app_with(control="")
    async with app.run_test(size=size) as pilot:
        screen = await open_list(pilot, app)
        first_ips_row(screen, screen.query_one("#banlist-table", VirtualTable))
        await pilot.press("u")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmUnban)
        assert "publishes no control socket" in note(screen)
    # a socket that is gone; one that would refuse us; a replay
    gone = str(tmp_path / "gone.sock")
    for control, monkey, want in ((gone, False, "is gone"), (srv.path, True, "permission denied"),
                                  (srv.path, False, "a recording")):
        app = app_with(control=control)
        async with app.run_test(size=size) as pilot:
            screen = await open_list(pilot, app)
            b = first_ips_row(screen, screen.query_one("#banlist-table", VirtualTable))
            eng.triggers([(b.jail, b.ip, b.first_ns, b.trigger_ns, b.hits, None)])
            if monkey:  # the dashboard as uid 1000, the socket root's
                monkeypatch.setattr(unban.os, "geteuid", lambda: 1000)
            if want == "a recording":
                app.replay = object()  # type: ignore[assignment]
            await pilot.press("u")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmUnban)
            assert want in note(screen), note(screen)
            if monkey:
                assert f"its control socket {srv.path} is for root only" in note(screen)
                monkeypatch.undo()
            app.replay = None
            assert (b.jail, b.ip) in eng.active  # nothing was sent


@pytest.mark.parametrize("size", SIZES)
async def test_u_on_a_fail2ban_row_uses_the_dashboards_socket(size, tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "argv"
    fake = tmp_path / "fail2ban-client"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {log}\necho 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sock = str(tmp_path / "f2b.sock")
    app = app_with(f2b_socket=sock)
    async with app.run_test(size=size) as pilot:
        screen = await open_list(pilot, app)
        table = screen.query_one("#banlist-table", VirtualTable)
        b = next(r for r in screen.rows if r.source == "fail2ban")
        table.move_to_key((b.source, b.jail, b.ip))
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmUnban)
        assert f"-s {sock} set {b.jail} unbanip {b.ip}" in " ".join(app.screen.text.plain.split())
        await pilot.press("y")
        got = await wait_note(pilot, screen, "unbanned", "exit")
        assert f"unbanned {b.ip} in {b.jail}" in got
        assert log.read_text().split() == ["-s", sock, "set", b.jail, "unbanip", b.ip]
