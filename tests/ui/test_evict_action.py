"""Issue 18, act on a row: evict a consumer from the dashboard (Ctrl-K / F9), as k9s kills a pod.

A live dashboard on a real domain whose consumer heartbeats but never reads, holding the ring full: the producer is
refused every record (the oracle: the ring says so). Ctrl-K on the consumer detail asks, says what will happen, and
after y the consumer is EVICTED (the domain's own snapshot), the title says "by an operator", and the producer's
records are accepted again. F9 on the overview's consumers table does the same; n cancels and changes nothing; a
replay and an evicted consumer are refused with the reason.
"""

from __future__ import annotations

import time

import pytest
from uihelpers import SIZES, make_app, wait_frames

from fipstop import _fips
from fipstop.config import ProbeConfig
from fipstop.ring import DomainSnapshot, open_monitor
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes
from fipstop.views.app import FipsTopApp
from fipstop.views.confirm import ConfirmAction
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.overview import OverviewScreen


async def until(pilot, cond, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met in time")


def said(app) -> str:
    return " ".join(str(n.message) for n in app._notifications)


def title(app) -> str:
    """The consumer detail's title line ('' while the screen is not composed)."""
    found = app.screen.query("#consumer-title")
    return found.first().render().plain if found else ""


def state_of(shm, index: int) -> tuple[int, int]:
    m = open_monitor("ev", shm)
    try:
        c = DomainSnapshot.from_raw(m.snapshot(), m.header).consumer_stat(index)
        return c.state, c.evicted_by_ring
    finally:
        m.close()


class Stuck:
    """A domain whose one consumer heartbeats and never reads: the ring is full, the producer refused."""

    def __init__(self, shm) -> None:
        self.dom = _fips.Domain("ev", shm, create=2, max_rings=2, max_consumers=4, ring_capacity=4096,
                                max_record=100, grace_s=3600)
        self.cons = _fips.Consumer(self.dom, "stuck-ips")
        self.prod = _fips.Producer(self.dom)
        while self.prod.log(b"x" * 100):
            pass
        self.cons.heartbeat()

    def refused(self) -> bool:
        return not self.prod.log(b"y" * 100)

    def close(self) -> None:
        self.cons.close()
        self.prod.close()
        self.dom.close()


def live_app(shm) -> tuple[FipsTopApp, LiveSource]:
    src = LiveSource(build_probes(ProbeConfig(shm_dir=str(shm), domains=None, backends=None, bans_domain=None,
                                              cpu=False)), 0.1)
    return FipsTopApp(src, paced=False), src


@pytest.mark.parametrize("size", SIZES)
async def test_ctrl_k_on_the_consumer_detail_evicts_it_after_y(tmp_path, size) -> None:
    stuck = Stuck(tmp_path)
    app, src = live_app(tmp_path)
    try:
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.frames_received >= 2)
            assert stuck.refused()
            app.open_consumer(("ev", stuck.cons.index))
            await pilot.pause()
            assert isinstance(app.screen, ConsumerDetailScreen)
            await pilot.press("ctrl+k")
            await until(pilot, lambda: isinstance(app.screen, ConfirmAction))
            question = app.screen.text.plain
            assert "Evict consumer stuck-ips" in question and "from ev?" in question
            assert "records unreleased" in question and "can rejoin by name" in question
            await pilot.press("n")
            await until(pilot, lambda: "evict cancelled" in said(app))
            assert state_of(tmp_path, stuck.cons.index)[0] == _fips.CONS_ACTIVE  # n changes nothing
            assert stuck.refused()
            await pilot.press("ctrl+k")
            await until(pilot, lambda: isinstance(app.screen, ConfirmAction))
            await pilot.press("y")
            await until(pilot, lambda: "evicted stuck-ips from ev" in said(app))
            assert state_of(tmp_path, stuck.cons.index) == (_fips.CONS_EVICTED, _fips.EVICTED_BY_OPERATOR)
            assert not stuck.refused()  # the ring let go: logging goes on
            await until(pilot, lambda: "by an operator" in title(app))
            assert isinstance(app.screen, ConsumerDetailScreen) and "evicted" in title(app)
            await pilot.press("ctrl+k")  # again: refused with the reason
            await until(pilot, lambda: "cannot evict stuck-ips: it is evicted already" in said(app))
    finally:
        src.close()
        stuck.close()


@pytest.mark.parametrize("size", SIZES)
async def test_f9_on_the_overview_consumers_table_evicts_the_highlighted_one(tmp_path, size) -> None:
    stuck = Stuck(tmp_path)
    app, src = live_app(tmp_path)
    try:
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.frames_received >= 2)
            assert isinstance(app.screen, OverviewScreen)
            await pilot.press("f9")  # the rings table has focus: no consumer chosen
            await until(pilot, lambda: "no consumer: open one or highlight it" in said(app))
            await pilot.press("tab")
            ov = app.screen
            await until(pilot, lambda: ov.focused is ov.consumers_table and ov.consumers_table.cursor_key is not None)
            assert ov.consumers_table.cursor_key == ("ev", stuck.cons.index)
            await pilot.press("f9")
            await until(pilot, lambda: isinstance(app.screen, ConfirmAction))
            await pilot.press("y")
            await until(pilot, lambda: "evicted stuck-ips from ev" in said(app))
            assert state_of(tmp_path, stuck.cons.index) == (_fips.CONS_EVICTED, _fips.EVICTED_BY_OPERATOR)
            assert not stuck.refused()
    finally:
        src.close()
        stuck.close()


@pytest.mark.parametrize("size", SIZES)
async def test_evict_is_refused_in_a_replay(size) -> None:
    app = make_app(12)
    async with app.run_test(size=size) as pilot:
        await wait_frames(pilot, app)
        s = app.snapshot
        key = s.consumer_key(0)
        app.open_consumer(key)
        await pilot.pause()
        app.replay = object()  # type: ignore[assignment]  # as a recording's source: the past is not changed
        await pilot.press("ctrl+k")
        await until(pilot, lambda: "a recording: nothing to evict (this is the past)" in said(app))
        assert not isinstance(app.screen, ConfirmAction)
        app.replay = None
