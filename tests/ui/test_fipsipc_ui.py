"""The Backends screen (key 6) with FIPS-IPC segments (``--fipsipc``): one row per segment.

The samples are built from the prototype's layout directly (positions the
test knows): a segment whose reader was killed (full rings, one process
gone) and an OVERWRITE one lapping its reader.  A hostile shm_name is escaped.
"""

from __future__ import annotations

import numpy as np
from uihelpers import wait_frames

from fipstop import fixtures
from fipstop.fixtures import backend_samples
from fipstop.probes.fipsipc import FipsIpcSample, FipsIpcSegment, SysvShm
from fipstop.probes.fipsipc_layout import Layout, Positions
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.backends import BackendsScreen
from fipstop.views.widgets.table import VirtualTable


def _seg(shmid: int, name: str, t: int, *, overwrite: bool, nattch: int) -> FipsIpcSegment:
    exp, rings = 6, 2  # 64 slots
    lay = Layout(1, 3, 0, rings, 1, 1, 1, 1, exp, 1 if overwrite else 0, 30, 4, 200, 120, 128, b"")
    if overwrite:  # the writer moves 40 a frame, the reader 2: lapped from the second interval on
        w = np.array([(40 * t) % 64] * rings, dtype=np.uint32)
        r = np.array([[(2 * t) % 64] * rings], dtype=np.uint32)
    else:  # reader gone at 0, writer full at 63
        w = np.array([63] * rings, dtype=np.uint32)
        r = np.zeros((1, rings), dtype=np.uint32)
    pos = Positions(np.ones(rings, dtype=np.uint8), w, w, r, r, np.array([1], dtype=np.uint16))
    shm = SysvShm(0x0100_0000 + shmid, shmid, 0o644, 1, 10, 11, nattch, 0, 0, 0, 0)
    return FipsIpcSegment(shm, lay, pos, (name,))


def ipc_app(n: int = 3) -> FipsTopApp:
    samples = fixtures.demo_samples(n)
    aux = []
    for i, b in enumerate(backend_samples(n)):
        t = samples[i].taken_mono_ns
        ipc = FipsIpcSample(t, t, (_seg(5, "/run/ipc-evil\x1b[31m", i, overwrite=False, nattch=1),
                                   _seg(6, "lapping", i, overwrite=True, nattch=2)))
        aux.append({"backends": b, "fipsipc": ipc})
    return FipsTopApp(SampleListSource(samples, 1.0, aux=aux), autopoll=False, paced=False)


async def test_backends_screen_shows_fipsipc_segments() -> None:
    app = ipc_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("6")
        await pilot.pause(0.1)
        assert isinstance(app.screen, BackendsScreen)
        table = app.screen.query_one("#bk-queues", VirtualTable)
        lines = [table.render_line(y).text for y in range(min(table.row_count + 1, table.size.height))]
        gone = next(ln for ln in lines if "ipc-evil" in ln)
        assert "\x1b" not in gone and "\\x1b[31m" in gone
        assert "63 rec" in gone and "1 gone" in gone and "fill max 98.4%" in gone  # 63 of 64 slots
        lap = next(ln for ln in lines if "lapping" in ln)
        # frame t=2 against t=1: lag 38, +40 written, -2 released = 76 >= 64 slots: one lap (64 records) per
        # ring, two rings; the commit rate estimate is 40/s per ring
        assert "~128" in lap and "~80" in lap, lap


async def test_only_prototype_rings_show_the_overview_idle_segments_the_empty_screen() -> None:
    """A host with prototype rings in use and no libfips domain: the overview (their table); a segment none of
    whose rings a writer ever used: the empty state, pointing at it (key 6)."""
    from fipstop.views.fipsipc_rings import FipsIpcRingsPanel
    from fipstop.views.overview import OverviewScreen

    samples = [fixtures.raw_sample(float(i), []) for i in range(2)]
    aux = [{"fipsipc": FipsIpcSample(s.taken_mono_ns, s.taken_mono_ns,
                                     (_seg(5, "a", i, overwrite=False, nattch=1),))} for i, s in enumerate(samples)]
    app = FipsTopApp(SampleListSource(samples, 1.0, aux=aux), autopoll=False, paced=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_frames(pilot, app)
        await pilot.pause(0.1)
        assert isinstance(app.screen, OverviewScreen)
        assert len(app.screen.query_one("#ipc-panel", FipsIpcRingsPanel).rows) == 2

    def idle(i: int) -> FipsIpcSegment:
        seg = _seg(5, "a", i, overwrite=False, nattch=1)
        z = np.zeros(2, dtype=np.uint32)
        zr = np.zeros((1, 2), dtype=np.uint32)
        pos = Positions(np.zeros(2, dtype=np.uint8), z, z, zr, zr, np.array([1], dtype=np.uint16))
        return FipsIpcSegment(seg.shm, seg.layout, pos, seg.names)

    aux = [{"fipsipc": FipsIpcSample(s.taken_mono_ns, s.taken_mono_ns, (idle(i),))} for i, s in enumerate(samples)]
    app = FipsTopApp(SampleListSource(samples, 1.0, aux=aux), autopoll=False, paced=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_frames(pilot, app)
        await pilot.pause(0.1)
        assert "1 FIPS-IPC prototype segment(s): press 6" in app.screen.query_one("#empty-text").render().plain


async def test_an_orphaned_assignment_lock_is_shown_in_red_on_the_overview() -> None:
    """A segment whose assignment lock a dead thread still holds: the prototype rings' title says so, in the
    drops colour (nothing can attach any more), at 80x24 and 200x60; a live holder is not mentioned."""
    from dataclasses import replace

    from fipstop.views import palette
    from fipstop.views.widgets.textline import TextLine

    samples = [fixtures.raw_sample(float(i), []) for i in range(2)]

    def seg(i: int, alive: bool) -> FipsIpcSegment:
        s = _seg(5, "held", i, overwrite=False, nattch=1)
        return replace(s, positions=replace(s.positions, lock_owner=4321), lock_owner_alive=alive)

    for alive in (False, True):
        aux = [{"fipsipc": FipsIpcSample(s.taken_mono_ns, s.taken_mono_ns, (seg(i, alive),))}
               for i, s in enumerate(samples)]
        for size in ((80, 24), (200, 60)):
            app = FipsTopApp(SampleListSource(samples, 1.0, aux=aux), autopoll=False, paced=False)
            async with app.run_test(size=size) as pilot:
                await wait_frames(pilot, app)
                await pilot.pause(0.1)
                title = app.screen.query_one("#ipc-rings-title", TextLine)
                shown = "".join(s.text for s in title.render_line(0))  # what the terminal shows, cut to width
                if alive:
                    assert "assignment lock" not in shown, shown
                else:
                    assert "held: assignment lock held by gone thread 4321" in shown, shown
                    assert any(span.style == palette.DROPS for span in title._text.spans)
