"""Attacker-controlled text (thread names, consumer names, record payloads)
reaches the screen escaped: no ESC byte, no markup interpretation."""

from __future__ import annotations

import time

from rich.text import Text
from uihelpers import make_app, wait_frames

from fipstop import fixtures
from fipstop.probes.ring import TapRecord, TapResult
from fipstop.views.ring_detail import RingDetailScreen, tap_lines
from fipstop.views.widgets.table import VirtualTable

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


async def test_dashboard_survives_a_domain_truncated_under_it(tmp_path) -> None:
    """Issue 17 item 1: the live dashboard's domain shrinks under its mapping; the app goes on and
    shows the one line."""
    import os

    from fipstop._fips import Domain, Producer
    from fipstop.config import ProbeConfig
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes
    from fipstop.views.app import FipsTopApp

    shm = tmp_path / "shm"
    shm.mkdir()
    dom = Domain("app", shm, max_rings=2, ring_capacity=1 << 16)
    Producer(dom).log(b"hello")
    src = LiveSource(build_probes(ProbeConfig(shm_dir=str(shm), domains=None, backends=None, bans_domain=None,
                                              cpu=False)), 0.1)
    app = FipsTopApp(src, paced=False)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            deadline = time.monotonic() + 20
            while app.frames_received < 2 and time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert app.frames_received >= 2
            os.truncate(shm / "fips.app", 4096)
            seen = app.frames_received
            while app.frames_received < seen + 3 and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            assert app.is_running and app.frames_received >= seen + 3
            svg = app.export_screenshot()
            assert "domain truncated: app" in svg.replace("&#160;", " ")
    finally:
        # no truncated mapping may outlive the test: pytest's faulthandler, disabled at the end of the
        # session, puts back the SIGBUS handler it found at its start, over libfips' own
        src.close()
        dom.close()


async def test_dashboard_header_says_a_domain_is_world_writable(tmp_path) -> None:
    """Issue 17 item 10: a domain file made world-writable after creation (libfips refuses to
    create one) is named in the dashboard's header as long as it is, and recorded as such."""
    import os

    from fipstop._fips import Domain, Producer
    from fipstop.config import ProbeConfig
    from fipstop.model.raw import RawFrame
    from fipstop.model.snapshot import ModelStep
    from fipstop.probes.ring import RawSample, RingProbe
    from fipstop.recording.rawcodec import FrameCodec
    from fipstop.sources.live import LiveSource
    from fipstop.sources.probeset import build_probes
    from fipstop.views.app import FipsTopApp

    shm = tmp_path / "shm"
    shm.mkdir()
    doms = [Domain(n, shm, max_rings=2, ring_capacity=1 << 16) for n in ("open", "shut")]
    Producer(doms[0]).log(b"hello")
    src = LiveSource(build_probes(ProbeConfig(shm_dir=str(shm), domains=None, backends=None, bans_domain=None,
                                              cpu=False)), 0.1)
    app = FipsTopApp(src, paced=False)

    async def frames(n: int) -> None:
        seen = app.frames_received
        deadline = time.monotonic() + 20
        while app.frames_received < seen + n and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.frames_received >= seen + n

    def screen() -> str:
        return app.export_screenshot().replace("&#160;", " ")

    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await frames(2)
            assert "world-writable" not in screen()
            os.chmod(shm / "fips.open", 0o666)
            await frames(3)
            assert "world-writable: open" in screen()
            probe = RingProbe(shm_dir=str(shm))
            raw: RawSample = probe.sample()
            probe.close()
            s = ModelStep(0.1)(RawFrame(raw)).snapshot
            assert [w.domain for w in s.warnings] == ["open"]
            assert "chmod o-w" in s.warnings[0].reason
            enc, dec = FrameCodec(), FrameCodec()
            blob, _key = enc.encode(raw)
            assert dec.decode(blob).warnings == raw.warnings  # a recording keeps it
            os.chmod(shm / "fips.open", 0o640)
            await frames(3)
            assert "world-writable" not in screen()
    finally:
        src.close()
        for d in doms:
            d.close()
