"""Empty state: no FIPS domain on this host (yet) - how to start one.

Shown instead of the overview while the shm dir holds no readable domain;
the app leaves it by itself as soon as a domain appears.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Center, Middle
from textual.css.query import NoMatches
from textual.widgets import Footer, Static

from fipstop.model.fipsipc import FipsIpcView
from fipstop.textsafe import escape_text
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader


def empty_text(shm_dir: str, unavailable: str = "", errors=(), interval_s: float = 1.0,
               fipsipc_segments: int = 0) -> Text:
    d = escape_text(shm_dir)
    t = Text(justify="left")
    t.append("No FIPS domain here yet\n\n", style="bold")
    if fipsipc_segments:  # --fipsipc: the FIPS paper's prototype rings are shown on the Backends screen
        t.append(f"{fipsipc_segments} FIPS-IPC prototype segment(s): press 6 (Backends)\n\n", style=palette.WARN_BOLD)
    if unavailable:
        t.append(escape_text(unavailable) + "\n\n", style=palette.WARN_BOLD)
    else:
        t.append("fipstop watches ", style=palette.LABEL)
        t.append(d)
        t.append(" for files named fips.<domain>.\n\n", style=palette.LABEL)
    t.append("Start one:\n\n", style="bold")
    rows = [
        ("fipstop wrap -- CMD", "run CMD with its syslog(3) going into a domain (LD_PRELOAD shim)"),
        ("fipstop demo", "a C producer under attack and fipstop ips banning the attackers"),
        ("examples/producer demo 30 4", "a C program logging through libfips (make examples)"),
    ]
    for cmd, what in rows:
        t.append("  ")
        t.append(cmd, style="bold #56b6c2")
        t.append("\n      " + what + "\n", style="default")
    t.append("\nUse --shm-dir DIR (or FIPS_SHM_DIR) if the domains live elsewhere.\n", style=palette.LABEL)
    if errors:
        t.append("\nUnreadable domains:\n", style=palette.WARN_BOLD)
        for e in errors[:8]:
            t.append(f"  {escape_text(e.domain)}: {escape_text(e.reason)}\n", style=palette.WARN)
    t.append(f"\nChecking again every {interval_s:g} s.  q quits, ? shows the keys.", style=palette.LABEL)
    return t


class EmptyScreen(FipsScreen):
    SCREEN_NAME = "empty"

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Middle(id="empty-body"):
            with Center():
                yield Static(id="empty-text")
        yield Footer()

    def refresh_view(self) -> None:
        super().refresh_view()
        s = self.fips.snapshot
        shm_dir = s.shm_dir if s is not None else ""
        ipc = s.fipsipc if s is not None else None
        try:
            text = self.query_one("#empty-text", Static)
        except NoMatches:  # a frame arrived between push_screen and compose: the mount redraws it
            return
        text.update(empty_text(shm_dir, s.unavailable if s else "", s.errors if s else (), self.fips.interval_s,
                               len(ipc.segments) if isinstance(ipc, FipsIpcView) else 0))
