"""The fleet dashboard (``fipstop top --prometheus``) on a fixed fleet: the cells, the host filter, the
drill-down into one host and Esc back, a failed poll said in the header (the real Prometheus is in
tests/integration/test_fleet_prometheus.py)."""

from __future__ import annotations

from fipstop.errors import FipsError
from fipstop.fixtures_fleet import AT, A, B, C, D, fixture_query
from fipstop.model.fleet import QUERIES
from fipstop.sources.prometheus import FleetSourceConfig, PrometheusFleet
from fipstop.views.fleet import FleetApp


def fleet_app(query=None) -> FleetApp:
    src = PrometheusFleet(FleetSourceConfig("http://prom:9090", rate_window="10s", interval_s=60),
                          query or fixture_query(), clock=lambda: AT)
    return FleetApp(src)


async def _ready(pilot, app: FleetApp) -> None:
    for _ in range(100):
        await pilot.pause(0.02)
        if app.polls:
            break
    await pilot.pause()


async def test_tables_filter_drill_down_and_back() -> None:
    app = fleet_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot, app)
        hosts = app.table_text("hosts")
        assert [(h[0], h[1]) for h in hosts] == [(A, "up"), (B, "up"), (C, "stale"), (D, "down")]
        rings = {(r[0], r[2]): r for r in app.table_text("rings")}
        assert rings[(B, "1")][6:10] == ("46", "5414", "0.0", "400.0")
        assert rings[(C, "0")][8] == "?"  # no rate yet: unknown
        assert "\x1b" not in rings[(A, "0")][3]
        await pilot.press("slash", *"0.0.2", "enter")
        assert [h[0] for h in app.table_text("hosts")] == [B]
        await pilot.press("escape")
        assert len(app.table_text("hosts")) == 4
        await pilot.press("down", "enter")  # drill into the second host
        assert app.drilled == B and {r[0] for r in app.table_text("rings")} == {B}
        assert {c[0] for c in app.table_text("consumers")} == {B}
        await pilot.press("escape")
        assert app.drilled is None and len(app.table_text("rings")) == 3


async def test_failed_poll_is_said_and_the_last_view_kept() -> None:
    calls = [0]
    good = fixture_query()

    def flaky(expr: str, at: float | None = None):
        calls[0] += 1
        if calls[0] > len(QUERIES):  # the second poll fails (a poll is one query each)
            raise FipsError("Prometheus at http://prom:9090: connection refused")
        return good(expr, at)

    app = fleet_app(flaky)
    async with app.run_test(size=(250, 40)) as pilot:
        await _ready(pilot, app)
        app.poll_now()
        for _ in range(100):
            await pilot.pause(0.02)
            if app.polls >= 2:
                break
        head = str(app.query_one("#fleet-header").render())
        assert "last poll failed: Prometheus at http://prom:9090: connection refused" in head
        assert len(app.table_text("hosts")) == 4
