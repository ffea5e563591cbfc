"""The dashboard on the real prototype (FIPS-IPC, built from ../shared/third_party): its rings on the overview,
and Enter on one opens its ring screen with the message tap of what the producer wrote.

The producer is fipsipc_seq.c on the prototype's own library (it writes ``seq N`` records and says how many);
the reader is registered and reads nothing, so lag and fill are exactly what was written.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fipsipc_run import Run
from test_fipsipc import SeqProc

from fipstop.bench.fipsipc_proto import build_program, write_config
from fipstop.config import FipsIpcConfig, ProbeConfig
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_overview_row_and_ring_screen_tap(tmp_path: Path, shm_dir: Path) -> None:
    from fipstop.views.app import FipsTopApp
    from fipstop.views.fipsipc_rings import FipsIpcRingScreen, FipsIpcRingsPanel

    binary, why = build_program("fipsipc_seq", (Path(__file__).with_name("fipsipc_seq.c"),))
    if binary is None:
        pytest.skip(why)
    run = Run(tmp_path, exp=8, line_size=32)
    write_config(run.conf, run.shm_name, line_size=32, line_count_exp=8, segments=1, readers=2, reader_threads=1)
    procs: list[SeqProc] = []
    try:
        procs.append(SeqProc(binary, "consumer", run.conf, tmp_path))
        prod = SeqProc(binary, "producer", run.conf, tmp_path)
        procs.append(prod)
        assert prod.ask("w 100") == "wrote 100"
        cfg = ProbeConfig(shm_dir=str(shm_dir), domains=(), backends=None, bans_domain=None, cpu=False,
                          fipsipc=FipsIpcConfig((run.shm_name,), discover=False))
        app = FipsTopApp(LiveSource(build_probes(cfg), 0.3))

        async def go() -> tuple[list[str], str, str]:
            async with app.run_test(size=(200, 50)) as pilot:
                for _ in range(400):
                    await pilot.pause(0.02)
                    if app.frames_received >= 2:
                        break
                panel = app.screen.query_one("#ipc-panel", FipsIpcRingsPanel)
                assert panel.display
                table = panel.table
                rows = [table.render_line(y).text for y in range(1, table.row_count + 1)]
                table.focus()
                await pilot.press("enter")
                for _ in range(200):
                    await pilot.pause(0.02)
                    if isinstance(app.screen, FipsIpcRingScreen) and app.screen.tap is not None:
                        break
                assert isinstance(app.screen, FipsIpcRingScreen)
                return (rows, str(app.screen.query_one("#ipc-ring-title").render()),
                        str(app.screen.query_one("#ipc-tap").render()))

        try:
            rows, title, tap = asyncio.run(go())
        finally:
            app.source.close()
        (row,) = rows  # one ring in use
        cells = row.split()
        assert cells[1:3] == ["in", "use"] and cells[3] == f"{100 * 100 / 256:.0f}%"  # 100 of 256 slots
        assert cells[6] == "0" and cells[7] == "100"  # claimed, slowest lag (the reader read nothing)
        assert "drops/s ?" in title and "committed at slot 100" in title
        lines = tap.splitlines()
        assert lines[0].endswith("seq 99\\x00") and lines[1].endswith("seq 98\\x00")  # newest first, escaped
        assert len(lines) == 64 and "slot     99" in lines[0]
    finally:
        for p in procs:
            p.close()
        run.close()
