"""The dashboard's screen survives a library redirecting fd 2 (issue 18).

bcc's compile points fd 2 at a temporary file for seconds; textual's own
Linux driver wrote the screen to fd 2, so every frame of that time was lost
(a frozen clock, then stale cells).  PrivateScreenDriver writes to a copy of
fd 2 taken at start-up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile

from textual.app import App
from textual.drivers.linux_driver import LinuxDriver

from fipstop import fixtures
from fipstop.sources.samples import SampleListSource
from fipstop.views.app import FipsTopApp
from fipstop.views.driver import PrivateScreenDriver


async def _driver() -> PrivateScreenDriver:
    return PrivateScreenDriver(App())  # a driver wants a running loop


def test_screen_output_does_not_follow_a_redirected_fd2() -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)  # "the terminal"
        driver = asyncio.run(_driver())
        with tempfile.TemporaryFile() as swallow:
            os.dup2(swallow.fileno(), 2)  # what bcc's compile does for its diagnostics
            driver._file.write("frame drawn during the compile")
            driver._file.flush()
            os.dup2(w, 2)
            swallow.seek(0)
            assert swallow.read() == b""
        driver.close()
        os.close(w)
        w = -1
        os.dup2(saved, 2)
        assert os.read(r, 100) == b"frame drawn during the compile"
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(r)
        if w >= 0:
            os.close(w)
        for s, h in handlers.items():
            signal.signal(s, h)


def test_app_uses_it_where_textual_would_use_its_linux_driver(monkeypatch) -> None:
    app = FipsTopApp(SampleListSource(fixtures.demo_samples(2), 1.0))
    monkeypatch.setattr(App, "get_driver_class", lambda self: LinuxDriver)
    assert app.get_driver_class() is PrivateScreenDriver
    other = type("OtherDriver", (LinuxDriver,), {})
    monkeypatch.setattr(App, "get_driver_class", lambda self: other)
    assert app.get_driver_class() is other  # TEXTUAL_DRIVER or another platform: left alone
