"""The terminal driver of the dashboard: the screen on a private copy of fd 2.

Textual's Linux driver writes the screen to ``sys.__stderr__``, that is to
file descriptor 2.  bcc's compiler writes its diagnostics to fd 2 as well,
so the bpf profiler points fd 2 at a temporary file while it compiles
(``fipstop.probes.bpf``), seconds on a loaded host.  With the screen on fd 2
every frame drawn meanwhile went into that file: the clock stopped, keys
seemed dead, and afterwards the terminal kept cells textual believed it had
overwritten (stale pieces of the previous view).

This driver writes the screen to a duplicate of fd 2 taken when the app
starts, so whatever a library does with fd 2 later can no longer take the
screen with it.  Only used where textual would use its Linux driver.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from textual.drivers.linux_driver import LinuxDriver

__all__ = ["PrivateScreenDriver"]


class PrivateScreenDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        err = sys.__stderr__
        if err is None:
            return
        try:
            fd = os.dup(err.fileno())
        except (OSError, ValueError):  # no real fd 2 (a test harness): keep textual's own
            return
        self._private = open(fd, "w", encoding=err.encoding or "utf-8", errors="backslashreplace",
                             closefd=True)
        self._file = self._private

    def close(self) -> None:
        super().close()
        private = getattr(self, "_private", None)
        if private is not None:
            try:
                private.close()
            except OSError:
                pass
