"""The overview's rings grouped by domain and by process (F5, htop's tree), foldable, at 80x24 and 200x60.

Every figure of a group row is checked against the fixture's own per-ring
numbers (the snapshot's rings, summed or maxed here by the test), never
against the grouping code: sums of records/s, bytes/s, drops/s, dropped and
claimed; the largest fill and high water; the ring with the most lag.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from uihelpers import SIZES

from fipstop import fixtures
from fipstop.sources.samples import SampleListSource
from fipstop.views import format as fmt
from fipstop.views.app import FipsTopApp
from fipstop.views.grouping import GroupKey
from fipstop.views.overview import OverviewScreen


def many_domains_app() -> tuple[FipsTopApp, list]:
    src = SampleListSource(fixtures.many_domains_samples(), 1.0)
    frames = []
    while (f := src.poll()) is not None:
        frames.append(f)
    return FipsTopApp(SampleListSource([], 1.0), autopoll=False, paced=False), frames


async def start(pilot, app: FipsTopApp, frames: list, keep: int = 2) -> None:
    """All frames but the last ``keep`` shown (those come later, one refresh each)."""
    app.preload(frames[:-keep])
    await pilot.pause()


def overview(app) -> OverviewScreen:
    assert isinstance(app.screen, OverviewScreen)
    return app.screen


def text(cell) -> str:
    if isinstance(cell, str):
        return cell
    if isinstance(cell, tuple):
        return str(cell[0])
    return "".join(t for t, _ in cell)


def expected_groups(s, mode: str) -> dict:
    """The test's own oracle: the per-ring numbers of the snapshot folded by domain or pid."""
    r = s.rings
    names = [d.name for d in s.domains]
    by: dict = defaultdict(list)
    for i in range(r.size):
        key = names[int(r["domain"][i])] if mode == "domain" else int(r["pid"][i])
        by[key].append(i)
    out = {}
    for key, rows in by.items():
        valid = [i for i in rows if r["rates_valid"][i]]
        lagged = [i for i in rows if r["slowest_lag_records"][i] >= 0]
        lag_ring = max(lagged, key=lambda i: (int(r["slowest_lag_records"][i]), -i)) if lagged else None
        out[key] = {
            "rings": len(rows),
            "rate": sum(float(r["records_per_s"][i]) for i in valid) if valid else math.nan,
            "bytes": sum(float(r["bytes_per_s"][i]) for i in valid) if valid else math.nan,
            "drops": sum(float(r["drops_per_s"][i]) for i in valid) if valid else math.nan,
            "dropped": sum(int(r["records_dropped"][i]) for i in rows),
            "claimed": sum(int(r["claimed_bytes"][i]) for i in rows),
            "fill": max(float(r["fill_pct"][i]) for i in rows),
            "high": max(float(r["high_water_pct"][i]) for i in rows),
            "lag": int(r["slowest_lag_records"][lag_ring]) if lag_ring is not None else None,
            "lag_s": float(r["slowest_lag_s"][lag_ring]) if lag_ring is not None else None,
            "rows": rows,
        }
    return out


def group_row(ov: OverviewScreen, key: GroupKey) -> int:
    return list(ov.rings_table.keys).index(key)


def check_group_cells(ov: OverviewScreen, mode: str) -> None:
    s = ov._snap
    exp = expected_groups(s, mode)
    assert {k.value for k in ov.rings_table.keys if isinstance(k, GroupKey)} == set(exp)
    for value, e in exp.items():
        row = group_row(ov, GroupKey(mode, value))

        def cell(col: str, row: int = row) -> str:
            return text(ov._ring_cell(row, col))

        assert cell("thread") == f"{e['rings']} ring{'s' if e['rings'] != 1 else ''}"
        assert cell("rate").endswith(" " + fmt.si(e["rate"])), (value, cell("rate"), e["rate"])
        assert cell("bytes") == fmt.size(e["bytes"])
        assert cell("drops") == (fmt.si(e["drops"]) if e["drops"] > 0 else "0")
        assert cell("dropped") == (fmt.count(e["dropped"]) if e["dropped"] else "0")
        assert cell("claimed") == (fmt.size(e["claimed"]) if e["claimed"] else "0")
        assert cell("fill").endswith(f" {fmt.pct(e['fill']):>5}")
        assert cell("high") == fmt.pct(e["high"])
        assert cell("lag").startswith(fmt.count(e["lag"])) and cell("lag").endswith(fmt.duration(e["lag_s"]))
        label = cell("ring")
        assert label.startswith(("▸ " if GroupKey(mode, value) in ov.collapsed else "▾ ") + str(value))
        # the figures themselves, not only their rounding
        g = ov._groups
        gi = g.index(GroupKey(mode, value))
        assert math.isclose(g.records_per_s[gi], e["rate"]) and math.isclose(g.drops_per_s[gi], e["drops"])
        assert math.isclose(g.bytes_per_s[gi], e["bytes"])
        assert int(g.records_dropped[gi]) == e["dropped"] and int(g.claimed_bytes[gi]) == e["claimed"]
        assert g.fill_pct[gi] == e["fill"] and g.high_water_pct[gi] == e["high"]


@pytest.mark.parametrize("size", SIZES)
async def test_f5_groups_by_domain_then_process_then_off(size) -> None:
    app, frames = many_domains_app()
    async with app.run_test(size=size) as pilot:
        await start(pilot, app, frames, keep=1)
        ov = overview(app)
        s = app.snapshot
        assert ov.rings_table.row_count == s.rings.size
        await pilot.press("f5")
        assert ov.group_mode == "domain"
        check_group_cells(ov, "domain")
        # every ring is under its domain's row, in the snapshot's order
        keys = list(ov.rings_table.keys)
        assert len(keys) == s.rings.size + len(s.domains)
        current = None
        for k in keys:
            if isinstance(k, GroupKey):
                current = k.value
            else:
                assert k[0] == current
        await pilot.press("f5")
        assert ov.group_mode == "process"
        check_group_cells(ov, "process")
        # a process straddles two domains: its row sums rings of both (the fixture gives pid 2001 dom-0 and dom-1)
        exp = expected_groups(s, "process")
        straddling = [p for p, e in exp.items() if len({int(s.rings["domain"][i]) for i in e["rows"]}) > 1]
        assert 2001 in straddling
        await pilot.press("f5")
        assert ov.group_mode is None
        assert ov.rings_table.row_count == s.rings.size and (ov._ring_perm >= 0).all()


@pytest.mark.parametrize("size", SIZES)
async def test_demo_groups_show_true_figures(size) -> None:
    """The demo host (drops in named, a closed ring in nginx): the same oracles on its groups."""
    from uihelpers import make_app, wait_frames

    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        ov = overview(app)
        await pilot.press("f5")
        check_group_cells(ov, "domain")
        row = group_row(ov, GroupKey("domain", "named"))
        assert text(ov._ring_cell(row, "drops")) == fmt.si(float(app.snapshot.rings["drops_per_s"][:4].sum()))
        await pilot.press("f5")
        check_group_cells(ov, "process")
        # the fixture has no CPU probe: the comm is unknown, shown as "?"
        assert text(ov._ring_cell(group_row(ov, GroupKey("process", 4242)), "ring")) == "▾ 4242 ?"


@pytest.mark.parametrize("size", SIZES)
async def test_fold_survives_refresh_and_sort(size) -> None:
    app, frames = many_domains_app()
    async with app.run_test(size=size) as pilot:
        await start(pilot, app, frames)
        ov = overview(app)
        table = ov.rings_table
        await pilot.press("f5")
        assert table.move_to_key(("dom-1", 1))
        await pilot.press("minus")  # on a ring: its group folds, the cursor goes to the group's row
        assert table.cursor_key == GroupKey("domain", "dom-1")
        assert GroupKey("domain", "dom-1") in ov.collapsed
        assert not any(k[0] == "dom-1" for k in table.keys if not isinstance(k, GroupKey))
        assert text(ov._ring_cell(table.cursor_row, "ring")).startswith("▸ dom-1")
        app.accept_frame(frames[-2])  # a new frame
        await pilot.pause()
        assert table.cursor_key == GroupKey("domain", "dom-1")
        assert not any(k[0] == "dom-1" for k in table.keys if not isinstance(k, GroupKey))
        check_group_cells(ov, "domain")  # the folded group's figures are those of the new frame
        await pilot.press("R")  # records/s, biggest first: groups by their sum, rings within by their own
        s = app.snapshot
        exp = expected_groups(s, "domain")
        order = [k.value for k in table.keys if isinstance(k, GroupKey)]
        assert order == sorted(exp, key=lambda d: -exp[d]["rate"])
        assert table.cursor_key == GroupKey("domain", "dom-1")  # the selection stays on the group
        current, rates = None, []
        for k in list(table.keys) + [None]:
            if k is None or isinstance(k, GroupKey):
                assert rates == sorted(rates, reverse=True), current
                current, rates = k, []
            else:
                rates.append(float(s.rings["records_per_s"][s.ring_row(*k)]))
        assert GroupKey("domain", "dom-1") in ov.collapsed
        await pilot.press("enter")  # Enter on a group row unfolds it (never opens a ring)
        assert isinstance(app.screen, OverviewScreen)
        assert GroupKey("domain", "dom-1") not in ov.collapsed
        assert ("dom-1", 1) in table.keys
        await pilot.press("down")
        assert not isinstance(table.cursor_key, GroupKey)
        ring = table.cursor_key
        app.accept_frame(frames[-1])
        await pilot.pause()
        assert table.cursor_key == ring  # a ring's selection survives a refresh too
        assert app.selected_ring == ring
        await pilot.press("asterisk")  # every group folded
        assert table.row_count == len(s.domains) and table.cursor_key == GroupKey("domain", ring[0])
        await pilot.press("asterisk")  # all folded: every group unfolded
        assert table.row_count == len(s.domains) + s.rings.size
        await pilot.press("plus")
        await pilot.press("enter")  # fold again with Enter
        assert GroupKey("domain", ring[0]) in ov.collapsed
        await pilot.press("f5")  # another mode: its own groups, unfolded
        assert ov.group_mode == "process" and table.row_count == len(set(s.rings["pid"].tolist())) + s.rings.size
        assert table.cursor_key == (ring[0], 0)  # the highlighted group's first ring stays highlighted
        await pilot.press("f5")  # off: that ring still
        assert ov.group_mode is None and table.cursor_key == (ring[0], 0) and app.selected_ring == (ring[0], 0)


@pytest.mark.parametrize("size", SIZES)
async def test_filter_keeps_a_group_when_a_ring_matches(size) -> None:
    app, frames = many_domains_app()
    async with app.run_test(size=size) as pilot:
        await start(pilot, app, frames, keep=1)
        ov = overview(app)
        table = ov.rings_table
        await pilot.press("f5", "f5")  # by process
        await pilot.press("slash", *"dom1-worker-0", "enter")
        keys = list(table.keys)
        assert keys == [GroupKey("process", 2001), ("dom-1", 0)]
        s = app.snapshot
        exp = expected_groups(s, "process")[2001]
        assert text(ov._ring_cell(0, "thread")) == f"1 of {exp['rings']} rings"
        # the group row still tells the whole process (both its rings), not only the match
        assert text(ov._ring_cell(0, "rate")).endswith(" " + fmt.si(exp["rate"]))
        await pilot.press("escape")
        await pilot.press("slash", *"2003", "enter")  # a group's own name (the pid) keeps all its rings
        assert [k for k in table.keys if not isinstance(k, GroupKey)] == [s.ring_key(i) for i in exp_rows(s, 2003)]
        await pilot.press("escape")
        await pilot.press("slash", *"no-such-ring", "enter")
        assert table.row_count == 0


def exp_rows(s, pid: int) -> list[int]:
    return [i for i in range(s.rings.size) if int(s.rings["pid"][i]) == pid]


async def test_grouping_works_on_a_replay(tmp_path) -> None:
    """Replay shows the same overview: F5 groups a recording's rings just the same."""
    from fipstop.model.raw import RawFrame
    from fipstop.recording.replay import ReplaySource
    from fipstop.recording.store import RecordingWriter

    path = tmp_path / "r.fsr"
    w = RecordingWriter(str(path), interval_s=1.0, host="replay-host")
    for sample in fixtures.many_domains_samples(n=6):
        w.append(RawFrame(sample), 0)
    w.close()
    app = FipsTopApp(ReplaySource(str(path), follow=False, speed=16))
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(2000):
            if app.exhausted or app.frames_received >= 6:
                break
            await pilot.pause(0.005)
        await pilot.press("space")  # paused: the frame stays while the test reads it
        await pilot.press("f5")
        await pilot.pause()
        ov = overview(app)
        check_group_cells(ov, "domain")
        await pilot.press("minus")
        first = ov.rings_table.cursor_key
        assert isinstance(first, GroupKey) and first in ov.collapsed
        await pilot.press("T")  # an older frame: the fold and the selection stay
        await pilot.pause()
        assert ov.rings_table.cursor_key == first and first in ov.collapsed
        check_group_cells(ov, "domain")


@pytest.mark.parametrize("size", SIZES)
async def test_no_color_groups_and_drops(size, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    from uihelpers import make_app, wait_frames

    from fipstop.views import palette

    app = make_app()
    try:
        async with app.run_test(size=size) as pilot:
            await wait_frames(pilot, app)
            assert app.no_color
            ov = overview(app)
            await pilot.press("f5")
            row = group_row(ov, GroupKey("domain", "named"))
            _t, style = ov._ring_cell(row, "drops")
            assert "reverse" in style and "#" not in style  # the group's drops stand out without colour
            nginx = group_row(ov, GroupKey("domain", "nginx"))
            assert "reverse" not in str(ov._ring_cell(nginx, "drops")[1])
            await pilot.press("minus")
            await pilot.pause()
            svg = app.export_screenshot()
            assert "▸" in svg and "▾" in svg and "#ff4d4f" not in svg  # folded and open told apart by their arrows
    finally:
        palette.use_color()


async def test_grouping_keys_are_free_and_documented() -> None:
    """F5, + - * and c are bound nowhere else; help and README name them."""
    from pathlib import Path

    from fipstop.views import app as app_mod
    from fipstop.views.help import KEYS
    from fipstop.views.widgets.table import VirtualTable

    mine = {"f5", "plus", "minus", "asterisk", "c"}
    others = [b for b in app_mod.FipsTopApp.BINDINGS + VirtualTable.BINDINGS]
    bound = {k for b in others for k in b.key.split(",")}
    assert not mine & bound
    ov_keys = [k for b in OverviewScreen.BINDINGS for k in b.key.split(",")]
    assert all(ov_keys.count(k) == 1 for k in mine)
    help_keys = " ".join(k for _, rows in KEYS for k, _ in rows)
    assert "F5" in help_keys and "+ -" in help_keys and "*" in help_keys and "c" in help_keys.split()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`F5`" in readme and "`c`" in readme and "`*`" in readme


def test_group_sort_values_are_the_row_figures() -> None:
    """Sorting groups uses what their rows show: the sums and the largest, NaN (last) where unknown."""
    from fipstop.model.raw import RawFrame
    from fipstop.model.snapshot import ModelStep
    from fipstop.views import grouping

    step = ModelStep(1.0)
    snaps = [step(RawFrame(x)).snapshot for x in fixtures.many_domains_samples(n=3)]
    first, s = snaps[0], snaps[-1]
    g = grouping.groups(s, "domain")
    exp = expected_groups(s, "domain")
    for col, field in (("rate", "rate"), ("drops", "drops"), ("dropped", "dropped"), ("fill", "fill"),
                       ("high", "high"), ("claimed", "claimed"), ("lag", "lag")):
        vals = grouping.sort_values(g, s, col)
        assert np.allclose(vals, [exp[k.value][field] for k in g.keys]), col
    # the first frame has no rates: every group's rate is unknown (NaN), not 0
    g0 = grouping.groups(first, "domain")
    assert np.isnan(g0.records_per_s).all() and np.isnan(grouping.sort_values(g0, first, "rate")).all()


@pytest.mark.parametrize("size", SIZES)
async def test_process_group_names_its_comm(size) -> None:
    """``pid comm``: the comm from the CPU probe (escaped), cut so the pid stays whole; unknown pids show ``?``."""
    from dataclasses import replace

    from fipstop.model.cpu import CpuView, ProcessCpu

    src = SampleListSource(fixtures.demo_samples(6, hostile=True), 1.0)
    frames = []
    while (f := src.poll()) is not None:
        frames.append(f)
    cpu = CpuView(1.0, (ProcessCpu(4242, "bind9", 5, 12.0, 1.0), ProcessCpu(6666, "\x1b[31mevil", 1, 1.0, 0.0)))
    frames = [replace(f, snapshot=replace(f.snapshot, cpu=cpu)) for f in frames]
    app = FipsTopApp(SampleListSource([], 1.0), autopoll=False, paced=False)
    async with app.run_test(size=size) as pilot:
        app.preload(frames)
        await pilot.pause()
        ov = overview(app)
        await pilot.press("f5", "f5")
        width = ov._column_width("ring")
        named = text(ov._ring_cell(group_row(ov, GroupKey("process", 4242)), "ring"))
        evil = text(ov._ring_cell(group_row(ov, GroupKey("process", 6666)), "ring"))
        unknown = text(ov._ring_cell(group_row(ov, GroupKey("process", 3100)), "ring"))
        assert unknown == "▾ 3100 ?"
        assert "\x1b" not in evil and evil.startswith("▾ 6666 ")
        for cell, whole in ((named, "▾ 4242 bind9"), (evil, "▾ 6666 " + fmt.name("\x1b[31mevil"))):
            if width >= len(whole):
                assert cell == whole
            else:  # the comm is cut, never the pid
                assert cell[:-1] == whole[:width - 1] and cell.endswith("…") and len(cell) == width
        await pilot.press("slash", *"bind9", "enter")  # the comm is searched too: every ring of the process
        s = app.snapshot
        assert list(ov.rings_table.keys) == [GroupKey("process", 4242)] + [
            s.ring_key(i) for i in range(s.rings.size) if int(s.rings["pid"][i]) == 4242]


async def test_ring_and_profile_keys_act_on_the_group_row() -> None:
    """`2` on a group row opens the group's first ring as drawn (not the ring highlighted before the
    cursor moved there); `p` on a process group profiles that process, on a domain group it asks for
    a ring instead of profiling someone else's."""
    from fipstop.views.ring_detail import RingDetailScreen

    app, frames = many_domains_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await start(pilot, app, frames)
        ov = overview(app)
        table = ov.rings_table
        await pilot.press("f5")
        assert table.move_to_key(("dom-0", 0))
        await pilot.pause()
        assert app.selected_ring == ("dom-0", 0)
        assert table.move_to_key(GroupKey("domain", "dom-1"))
        await pilot.pause()
        first = table.keys[list(table.keys).index(GroupKey("domain", "dom-1")) + 1]
        assert first[0] == "dom-1"
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, RingDetailScreen) and app.screen.key == first
        await pilot.press("escape")
        await pilot.pause()
        assert table.move_to_key(GroupKey("domain", "dom-1"))
        await pilot.press("minus")  # folded: nothing to open, said so
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)
        assert app._pid_to_profile() is None  # a domain group: no one process
        await pilot.press("f5")  # by process
        await pilot.pause()
        pid = int(app.snapshot.rings["pid"][0])
        assert table.move_to_key(GroupKey("process", pid))
        await pilot.pause()
        assert app._pid_to_profile() == pid
