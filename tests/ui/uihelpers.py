"""Helpers of the dashboard tests: deterministic frames, no clock.

The app runs headless (``App.run_test``) on ``SampleListSource`` fed with
``fipstop.fixtures.demo_samples``; times are shown in UTC.
"""

from __future__ import annotations

import os
import time

os.environ["TZ"] = "UTC"
time.tzset()

from fipstop import fixtures  # noqa: E402
from fipstop.probes.ring import TapRecord, TapResult  # noqa: E402
from fipstop.sources.samples import SampleListSource  # noqa: E402
from fipstop.views.app import FipsTopApp  # noqa: E402

SIZES = [(80, 24), (200, 60)]


FRAMES = 58  # t = 57 s: drops, a stale forwarder, an evicted consumer


def demo_taps() -> dict[tuple[str, int], TapResult]:
    recs = tuple(
        TapRecord(seq=100 + i, ts_ns=fixtures.EPOCH_REALTIME_NS + 57_000_000_000 + i * 1000, flags=0,
                  lost=5 if i == 1 else 0, payload=f"query: host{i}.example.com IN A".encode())
        for i in range(5)
    )
    return {("named", 0): TapResult("named", 0, records=recs)}


def make_app(n: int = FRAMES, *, hostile: bool = False, taps=None, samples=None, **kw) -> FipsTopApp:
    samples = samples if samples is not None else fixtures.demo_samples(n, hostile=hostile)
    src = SampleListSource(samples, 1.0, taps=demo_taps() if taps is None else taps)
    kw.setdefault("paced", False)
    kw.setdefault("autopoll", False)
    return FipsTopApp(src, **kw)


async def wait_frames(pilot, app: FipsTopApp, n: int | None = None, limit: int = 3000) -> None:
    """Let the app poll until the source is exhausted (or n frames arrived).

    A SampleListSource on an app that does not poll by itself is preloaded:
    all frames but the last go straight into the history (fast)."""
    src = app.source
    if not app.autopoll and isinstance(src, SampleListSource):
        frames = []
        while (f := src.poll()) is not None:
            frames.append(f)
        app.preload(frames)
        app.exhausted = True
        await pilot.pause()
        return
    for _ in range(limit):
        await pilot.pause(0.002)
        if app.exhausted or (n is not None and app.frames_received >= n):
            break
    await pilot.pause()

