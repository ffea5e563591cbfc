"""The Backends screen (key 6) on fixture samples: pilot checks and SVG snapshots.

Update the snapshots after an intended change with
``pytest tests/ui/test_backends_ui.py --snapshot-update`` and look at them.
"""

from __future__ import annotations

import pytest
from uihelpers import wait_frames

from fipstop import fixtures
from fipstop.fixtures import backend_samples
from fipstop.model.raw import ProbeFailure
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.backends import BackendsScreen
from fipstop.views.widgets.table import VirtualTable


def backends_app(n: int = 3, *, empty_rings: bool = False, aux=None) -> FipsTopApp:
    samples = [fixtures.raw_sample(float(i), []) for i in range(n)] if empty_rings else fixtures.demo_samples(n)
    aux = aux if aux is not None else [{"backends": b} for b in backend_samples(n)]
    return FipsTopApp(SampleListSource(samples, 1.0, aux=aux), autopoll=False, paced=False)


def _plain(table: VirtualTable) -> str:
    return "\n".join(table.render_line(y).text for y in range(min(table.row_count + 1, table.size.height)))


async def test_key_6_shows_backends_and_escape_goes_back() -> None:
    app = backends_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("6")
        await pilot.pause(0.1)
        assert isinstance(app.screen, BackendsScreen)
        files = _plain(app.screen.query_one("#bk-files", VirtualTable))
        assert "fail2ban-server[812]" in files and "12.4 MiB" in files and "6.5s" in files
        queues = _plain(app.screen.query_one("#bk-queues", VirtualTable))
        assert "/dev/log" in queues and "not a socket" in queues and "main Q" in queues
        assert "\x1b" not in queues and "evil\\x1b[31m[bold]" in queues
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert not isinstance(app.screen, BackendsScreen)


async def test_backends_without_any_domain_and_probe_failure() -> None:
    aux = [{"backends": ProbeFailure("backends", "OSError: boom")}, {}]
    app = backends_app(2, empty_rings=True, aux=aux)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_frames(pilot, app)
        await pilot.press("6")
        await pilot.pause(0.1)
        assert isinstance(app.screen, BackendsScreen)
        assert "waiting" in app.screen.query_one("#bk-title").render().plain
        await pilot.press("T")  # the frame before: the failure, shown as a reason
        await pilot.pause(0.05)
        assert "probe failed: OSError: boom" in app.screen.query_one("#bk-title").render().plain


def _run_before(keys=()):
    async def run_before(pilot) -> None:
        await wait_frames(pilot, pilot.app)
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.05)
        await pilot.pause(0.1)

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_backends_snapshot(snap_compare, size) -> None:
    pytest.importorskip("pytest_textual_snapshot", reason="pytest-textual-snapshot is not installed")
    assert snap_compare(backends_app(), terminal_size=size, run_before=_run_before(["6"]))
