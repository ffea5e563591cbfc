#!/usr/bin/env python3
"""Regenerate screenshots/*.svg and *.png of the live monitor from a fixed fixture.

The fixture is ``fipstop.fixtures.demo_samples`` (a simulated host: resolver
threads, an archiver that falls behind until its ring drops records, a stale
forwarder, an evicted consumer), played through the real app headless; no
shared memory, no clock: the same run gives the same pictures.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--no-png]

PNG conversion uses rsvg-convert (Debian librsvg2-bin, with fonts-firacode:
both installed by scripts/setup.sh) or, failing that, cairosvg if present.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: frame of the fixture to show (t = 57 s: the archiver's ring is full and
#: dropping, the forwarder is stale, fail2ban was evicted)
FRAME = 58

SHOTS = [
    # (file stem, (columns, rows), keys to press after the frames are in)
    ("overview-200x60", (200, 60), []),
    ("overview-80x24", (80, 24), []),
    ("overview-nocolor-200x60", (200, 60), []),  # NO_COLOR=1: drops in reverse video, no colour anywhere
    ("overview-log-200x60", (200, 60), ["l"]),  # the chart's y axis in decades
    ("overview-grouped-200x60", (200, 60), ["f5", "G", "minus"]),  # F5: rings by domain; nginx folded (-)
    ("overview-grouped-80x24", (80, 24), ["f5", "f5"]),  # F5 twice: rings by process
    ("overview-domains-200x60", (200, 60), ["c"]),  # c: the chart's records/s per domain
    ("sort-menu-80x24", (80, 24), ["f6"]),  # F6: every sortable column, the hidden ones marked
    ("ring-detail-200x60", (200, 60), ["enter"]),
    ("ring-detail-80x24", (80, 24), ["enter"]),
    ("consumer-detail-200x60", (200, 60), ["tab", "down", "enter"]),
    ("help-80x24", (80, 24), ["question_mark"]),
    ("profile-200x60", (200, 60), ["enter", "p"]),
    ("profile-80x24", (80, 24), ["enter", "p"]),
    ("profile-starting-80x24", (80, 24), ["enter", "p"]),
    ("profile-nocolor-120x40", (120, 40), ["enter", "p"]),  # NO_COLOR=1: a glyph per category in the time split
    ("consumer-evict-120x40", (120, 40), ["tab", "down", "enter", "ctrl+k"]),  # Ctrl-K: evict, after a question
    ("backends-200x60", (200, 60), ["6"]),
    ("backends-80x24", (80, 24), ["6"]),
    ("fipsipc-backends-200x60", (200, 60), ["6"]),  # with --fipsipc: the FIPS paper's prototype rings
    ("fipsipc-overview-200x60", (200, 60), []),  # ... and their rings on the overview
    ("bans-200x60", (200, 60), ["5"]),
    ("bans-80x24", (80, 24), ["5"]),
    ("banlist-200x60", (200, 60), ["5", "b"]),  # b: the banned-addresses view
    ("banlist-80x24", (80, 24), ["5", "b"]),
    ("banlist-filtered-120x40", (120, 40), ["5", "b", "slash", *"fail2ban", "enter"]),  # /: Fail2Ban's rows, their ends
    ("diagnosis-200x60", (200, 60), ["7"]),
    ("diagnosis-80x24", (80, 24), ["7"]),
    ("replay-200x60", (200, 60), ["space"]),
    ("empty-80x24", (80, 24), None),
]


def _setup() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    # rich lays the SVG out on cells 0.61 em wide; Fira Code (the font the SVG
    # names) is 1200/1950 em wide and renderers that ignore textLength (rsvg) let
    # long runs drift.  Cells of exactly its advance (1200/1950 em) keep every
    # column aligned.
    from rich.console import Console

    export_svg = Console.export_svg

    def export_svg_06(self, *args, **kwargs):
        kwargs.setdefault("font_aspect_ratio", 1200 / 1950)
        return export_svg(self, *args, **kwargs)

    Console.export_svg = export_svg_06  # type: ignore[method-assign]  # the patch is the point


def normalise_svg(svg: str) -> str:
    """Make an SVG byte-identical between runs: textual names its CSS classes
    after a hash of the terminal (``terminal-1234-r5``)."""
    import re

    ids: dict[str, str] = {}

    def repl(m: re.Match) -> str:
        return ids.setdefault(m.group(0), f"terminal-{len(ids)}")

    return re.sub(r"terminal-\d+", repl, svg)


async def take(stem: str, size: tuple[int, int], keys: list[str] | None, outdir: Path) -> Path:
    from fipstop import fixtures
    from fipstop.probes.ring import TapRecord, TapResult
    from fipstop.sources.protocol import Source
    from fipstop.sources.samples import SampleListSource
    from fipstop.views.app import FipsTopApp

    if keys is None:  # the empty state: a host without domains
        samples = [fixtures.raw_sample(float(i), []) for i in range(3)]
        keys = []
    else:
        samples = fixtures.demo_samples(FRAME)
    taps = {("named", 0): TapResult("named", 0, records=tuple(
        TapRecord(seq=1_000_000 + i, ts_ns=fixtures.EPOCH_REALTIME_NS + 57_000_000_000 + i * 97_000,
                  flags=0, lost=(1289 if i == 3 else 0),
                  payload=(f"client @0x7f3a5c0012a0 10.0.{i % 7}.{20 + i}#{53012 + i} ({name}): query: {name} IN "
                           f"{qt} +E(0) (192.0.2.53)").encode())
        for i, (name, qt) in enumerate([("example.com", "A"), ("www.example.com", "AAAA"), ("mail.example.com", "MX"),
                                        ("xn--bcher-kva.example", "A"), ("_dmarc.example.com", "TXT"),
                                        ("cdn.example.com", "A"), ("api.example.org", "AAAA"),
                                        ("ns1.example.net", "NS")] * 3)))}
    from fipstop.banfixtures import demo_ban_aux

    # ban activity (fipstop ips and Fail2Ban) on every shot: the header's bans/s slot too
    aux = [{"backends": b, **bans} for b, bans in zip(fixtures.backend_samples(len(samples)),
                                                       demo_ban_aux(len(samples)))]
    if stem.startswith("fipsipc"):
        aux = [a | {"fipsipc": f} for a, f in zip(aux, fixtures.fipsipc_samples(samples))]
    profiles = None
    if stem.startswith("profile"):  # the fixture's profile of the first ring's producer (pid 4242)
        from fipstop.profile.demo import DEMO_PID, demo_report

        profiles = {DEMO_PID: [demo_report()]}
    source: Source = SampleListSource(samples, 1.0, taps=taps, aux=aux, profiles=profiles)
    if stem.startswith("replay"):  # the same frames, recorded, then replayed (the timeline line shows)
        import tempfile

        from fipstop.recording.marks import Marker
        from fipstop.recording.replay import ReplaySource
        from fipstop.recording.store import RecordingWriter

        rec = Path(tempfile.mkdtemp(prefix="fipstop-shots-")) / "demo.fsr"
        w = RecordingWriter(str(rec), interval_s=1.0, host=fixtures.HOST)
        marker = Marker()
        while (f := source.poll()) is not None:
            w.append(f.raw, marker(f))
        w.close()
        source = ReplaySource(str(rec), speed=16, follow=False)
    if "nocolor" in stem:
        os.environ["NO_COLOR"] = "1"  # textual reads it when the app is made
    try:
        app = FipsTopApp(source, paced=False)
    finally:  # textual pops it from a copy of the environment: the shots after this one are in colour again
        os.environ.pop("NO_COLOR", None)
    async with app.run_test(size=size) as pilot:
        for _ in range(2000):
            await pilot.pause(0.005)
            if app.exhausted:
                break
        await pilot.pause(0.05)
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.1)
        await pilot.pause(0.2)
        if stem.startswith("profile") and "starting" not in stem:
            for _ in range(400):  # the first report comes one interval after the start
                if app.profile_report is not None:
                    break
                await pilot.pause(0.01)
            await pilot.pause(0.2)
        svg = app.export_screenshot(title=f"fipstop {stem}")
    path = outdir / f"{stem}.svg"
    path.write_text(normalise_svg(svg), encoding="utf-8")
    return path


def to_png(svg: Path) -> Path | None:
    """SVG -> PNG with rsvg-convert (Debian librsvg2-bin; fonts-firacode for
    the font textual's SVG asks for), else cairosvg if it is installed."""
    png = svg.with_suffix(".png")
    # rsvg strips the leading blanks of each <text> unless told to keep them
    text = svg.read_text(encoding="utf-8").replace('<svg class="rich-terminal"',
                                                   '<svg xml:space="preserve" class="rich-terminal"', 1)
    exe = shutil.which("rsvg-convert")
    if exe:
        tmp = png.with_suffix(".tmp.svg")
        tmp.write_text(text, encoding="utf-8")
        try:
            subprocess.run([exe, "-o", str(png), str(tmp)], check=True)
        finally:
            tmp.unlink()
        return png
    try:
        import cairosvg
    except ImportError:
        print("screenshots: neither rsvg-convert nor cairosvg: SVG only", file=sys.stderr)
        return None
    cairosvg.svg2png(bytestring=text.encode(), write_to=str(png))
    return png


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "screenshots"), help="output directory")
    p.add_argument("--no-png", action="store_true", help="SVG only")
    p.add_argument("--only", help="only the shots whose name contains this")
    args = p.parse_args(argv)
    _setup()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, size, keys in SHOTS:
        if args.only and args.only not in stem:
            continue
        svg = asyncio.run(take(stem, size, keys, out))
        png = None if args.no_png else to_png(svg)
        print(f"{svg}" + (f"  {png}" if png else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
