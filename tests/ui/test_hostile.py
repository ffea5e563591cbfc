"""Attacker-controlled text (thread names, consumer names, record payloads)
reaches the screen escaped: no ESC byte, no markup interpretation."""

from __future__ import annotations

import time

from rich.text import Text

from fipstop import fixtures
from fipstop.probes.ring import TapRecord, TapResult
from fipstop.views.ring_detail import RingDetailScreen, tap_lines
from fipstop.views.widgets.table import VirtualTable

from uihelpers import make_app, wait_frames

PAYLOADS = [
    b"\x1b[31mRED\x1b[0m [bold]not bold[/bold] \x1b]0;title\x07 end",
    b"[link=http://evil]click[/link] [@click=app.quit]quit[/] \x1b[2J\x1b[H",
    b"\xff\xfe invalid utf-8 \x00 nul \x7f del \xc2\x9b csi",
    "bidi \u202e reversed \u2066 isolate".encode(),
]


def _segments_text(strip) -> str:
    return "".join(seg.text for seg in strip)


def test_tap_lines_escape_and_never_interpret_markup() -> None:
    recs = tuple(TapRecord(seq=i, ts_ns=fixtures.EPOCH_REALTIME_NS, flags=0, lost=0, payload=p)
                 for i, p in enumerate(PAYLOADS))
    text = tap_lines(TapResult("d", 0, records=recs))
    assert isinstance(text, Text)
    plain = text.plain
    assert "\x1b" not in plain and "\x07" not in plain and "\x00" not in plain and "\x9b" not in plain
    assert "\\x1b[31mRED\\x1b[0m [bold]not bold[/bold]" in plain
    assert "[link=http://evil]click[/link] [@click=app.quit]quit[/]" in plain
    assert "\\xff\\xfe" in plain and "\\x00" in plain and "\\x7f" in plain
    assert "\\u202e" in plain and "\u202e" not in plain
    # no span styles came from the payload: only ours (seq/time labels)
    for span in text.spans:
        assert "bold" not in str(span.style) or span.style == "bold"
        assert "link" not in str(span.style)


async def test_hostile_names_and_records_on_screen() -> None:
    taps = {("nginx", 2): TapResult("nginx", 2, records=tuple(
        TapRecord(seq=i, ts_ns=fixtures.EPOCH_REALTIME_NS, flags=0, lost=0, payload=p)
        for i, p in enumerate(PAYLOADS)))}
    app = make_app(30, hostile=True, taps=taps)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_frames(pilot, app)
        rings = app.screen.query_one("#rings", VirtualTable)
        cons = app.screen.query_one("#consumers", VirtualTable)
        row = rings.keys.index(("nginx", 2))
        line = _segments_text(rings.render_line(row + 1))
        assert "\x1b" not in line and "\x07" not in line
        assert "\\x1b[31mred" in line  # the thread name, escaped, literally
        crow = cons.keys.index(("nginx", 1))
        cline = _segments_text(cons.render_line(crow + 1))
        assert "[blink]ips[/blink]\\x1b]0;pwn" in cline
        svg = app.export_screenshot()
        assert "\x1b" not in svg
        # the ring detail of the hostile ring: title, positions, tap
        rings.move_to_key(("nginx", 2))
        await pilot.press("enter")
        deadline = time.monotonic() + 10  # the tap is a worker's: slow on a loaded machine
        while not (isinstance(app.screen, RingDetailScreen) and app.screen.tap is not None) \
                and time.monotonic() < deadline:
            await pilot.pause(0.01)
        screen = app.screen
        assert isinstance(screen, RingDetailScreen)
        title = screen.query_one("#ring-title").render().plain
        assert "\\x1b[31mred\\x1b[0m[bold]x[/bold]\\x07" in title
        tap = screen.query_one("#tap").render().plain
        assert "[bold]not bold[/bold]" in tap and "\\x1b[2J" in tap
        svg = app.export_screenshot()
        assert "\x1b" not in svg and "\x07" not in svg
        assert "[@click=app.quit]" in svg  # shown, not acted on
        assert app.is_running
        # the consumer name in the positions table
        pos = screen.query_one("#positions", VirtualTable)
        names = [_segments_text(pos.render_line(i + 1)) for i in range(pos.row_count)]
        assert any("[blink]ips[/blink]" in n for n in names)
