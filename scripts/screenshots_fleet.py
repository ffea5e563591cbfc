#!/usr/bin/env python3
"""Regenerate screenshots/fleet-*.svg and *.png: the fleet dashboard (``fipstop top --prometheus``) on the
fixed fleet of fipstop.fixtures_fleet (no Prometheus, no clock: the same run gives the same pictures).

    .venv/bin/python scripts/screenshots_fleet.py [--out screenshots] [--no-png]

It reuses scripts/screenshots.py's SVG set-up and PNG conversion.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import screenshots  # noqa: E402  (the sibling script)

SHOTS = [("fleet-200x60", (200, 60), []), ("fleet-80x24", (80, 24), []),
         ("fleet-host-200x60", (200, 60), ["down", "enter"])]


async def take(stem: str, size: tuple[int, int], keys: list[str], outdir: Path) -> Path:
    from fipstop.fixtures_fleet import AT, fixture_query
    from fipstop.sources.prometheus import FleetSourceConfig, PrometheusFleet
    from fipstop.views.fleet import FleetApp

    app = FleetApp(PrometheusFleet(FleetSourceConfig("http://prometheus:9090", rate_window="10s",
                                                     interval_s=3600), fixture_query(), clock=lambda: AT))
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.01)
            if app.polls:
                break
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.1)
        await pilot.pause(0.2)
        svg = app.export_screenshot(title=f"fipstop {stem}")
    path = outdir / f"{stem}.svg"
    path.write_text(screenshots.normalise_svg(svg), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", default=str(screenshots.ROOT / "screenshots"), help="output directory")
    p.add_argument("--no-png", action="store_true", help="SVG only")
    args = p.parse_args(argv)
    screenshots._setup()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, size, keys in SHOTS:
        svg = asyncio.run(take(stem, size, keys, out))
        png = None if args.no_png else screenshots.to_png(svg)
        print(f"{svg}" + (f"  {png}" if png else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
