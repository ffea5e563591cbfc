"""Prototype (FIPS-IPC) rings on the overview and their ring screen with the message tap.

The samples are test_fipsipc_ui's (positions the test knows: a segment whose
reader was killed, full at 63 of 64 slots, and an OVERWRITE one lapping its
reader); the tap is a fixed one with a hostile payload.  The real prototype
is in tests/integration/test_fipsipc_dashboard.py.
"""

from __future__ import annotations

from test_fipsipc_ui import ipc_app
from uihelpers import wait_frames

from fipstop.probes.fipsipc import IpcTap, IpcTapRecord
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.fipsipc_rings import FipsIpcRingScreen, FipsIpcRingsPanel
from fipstop.views.widgets.table import VirtualTable


class TappingSource(SampleListSource):
    """The fixture frames, plus a prototype tap (what LiveSource.fipsipc_tap returns)."""

    def fipsipc_tap(self, shmid: int, ring: int, max_records: int = 32) -> IpcTap:
        recs = (IpcTapRecord(61, b"query: example.com A"), IpcTapRecord(62, b"\x1b[31mevil[bold]x"))
        return IpcTap(shmid, ring, recs, maybe_rewritten=True)


def _lines(table: VirtualTable) -> list[str]:
    return [table.render_line(y).text for y in range(min(table.row_count + 1, table.size.height))]


async def test_overview_lists_prototype_rings_and_enter_taps_one() -> None:
    base = ipc_app(3)
    src = base.source
    assert isinstance(src, SampleListSource)
    app = FipsTopApp(TappingSource([f.ring for f in src.raw], 1.0, aux=[f.aux for f in src.raw]), autopoll=False,
                     paced=False)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.pause(0.1)
        panel = app.screen.query_one("#ipc-panel", FipsIpcRingsPanel)
        assert panel.display and len(panel.rows) == 4  # 2 segments x 2 rings
        lines = _lines(panel.table)
        full = next(ln for ln in lines if "ipc-evil" in ln)
        assert "\x1b" not in full and "\\x1b[31m" in full
        assert "98%" in full and " 63 " in full and "writer waits" in full and "?" in full  # drops unknown
        lap = next(ln for ln in lines if ln.lstrip().startswith("lapping"))
        assert "~" in lap and "overwrite" in lap
        panel.table.focus()
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, FipsIpcRingScreen) and app.screen.key == (5, 0)
        for _ in range(50):
            if app.screen.tap is not None:
                break
            await pilot.pause(0.05)
        tap = app.screen.query_one("#ipc-tap").render()
        text = str(tap)
        assert "\x1b" not in text and "\\x1b[31mevil[bold]x" in text
        assert text.index("slot     62") < text.index("slot     61")  # newest first
        assert "may have rewritten" in text or "rewritten the oldest" in text
        title = str(app.screen.query_one("#ipc-ring-title").render())
        assert "fill 98%" in title and "drops/s ?" in title and "reader 0" in str(
            app.screen.query_one("#ipc-readers").render())
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, FipsIpcRingScreen)


async def test_a_recording_cannot_tap_and_says_so() -> None:
    app = ipc_app(3)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        app.open_fipsipc_ring((6, 1))
        await pilot.pause(0.3)
        assert "this source cannot tap prototype rings" in str(app.screen.query_one("#ipc-tap").render())
        await pilot.press("1")  # the overview key leaves it as Esc does
        await pilot.pause(0.1)
        assert not isinstance(app.screen, FipsIpcRingScreen)


async def test_no_prototype_no_panel() -> None:
    from fipstop import fixtures

    app = FipsTopApp(SampleListSource(fixtures.demo_samples(3), 1.0), autopoll=False, paced=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_frames(pilot, app)
        assert not app.screen.query_one("#ipc-panel", FipsIpcRingsPanel).display


def test_live_source_without_fipsipc_says_so(tmp_path) -> None:
    from fipstop.config import ProbeConfig
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes
    from fipstop.sources.protocol import FipsIpcTapping

    src = LiveSource(build_probes(ProbeConfig(shm_dir=str(tmp_path), domains=(), backends=None, bans_domain=None,
                                              cpu=False)), 1.0)
    try:
        assert isinstance(src, FipsIpcTapping)
        tap = src.fipsipc_tap(1, 0)
        assert tap.records == () and "start with --fipsipc" in tap.error
    finally:
        src.close()
