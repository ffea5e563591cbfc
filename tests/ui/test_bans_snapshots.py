"""SVG snapshots of the Bans panel (pytest-textual-snapshot) on the fixed fixtures.

Update after an intended change with ``pytest tests/ui/test_bans_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import pytest
from test_bans_panel import bans_app
from uihelpers import wait_frames

pytest.importorskip("pytest_textual_snapshot", reason="pytest-textual-snapshot is not installed")


async def _to_bans(pilot) -> None:
    await wait_frames(pilot, pilot.app)
    await pilot.press("5")
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_bans(snap_compare, size) -> None:
    assert snap_compare(bans_app(), terminal_size=size, run_before=_to_bans)
