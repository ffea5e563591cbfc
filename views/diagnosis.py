"""Diagnosis (key 7): which stage is the bottleneck right now.

The findings of :func:`fipstop.diagnose.diagnose` over the last
``WINDOW_FRAMES`` frames of the history ending at the shown one (so pausing
and stepping, and a replay, show the diagnosis of that moment), plus the
profile report of the process being profiled (screen 4) when there is one.
Most important first: severity, a one-sentence title, the evidence numbers
and the remedy.  No finding says so in green.  Everything shown is built
as rich Text from escaped strings: names come from other processes.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.textline import TextLine

WINDOW_FRAMES = 10
_SEV_STYLE = {2: ("CRITICAL", "bold white on #be1e2d"), 1: ("WARNING", "bold black on #e5c07b"),
              0: ("INFO", "bold black on #61afef")}


def findings_of(app) -> list:
    from fipstop.diagnose import diagnose

    no = app.shown
    snaps = app.history.window(no, WINDOW_FRAMES)
    auxes = app.history.aux_window(no, WINDOW_FRAMES)
    report = getattr(app, "profile_report", None)
    profiles = {int(report.pid): report} if report is not None and getattr(report, "pid", 0) else {}
    return diagnose(list(zip(snaps, auxes)), profiles=profiles)


def render_findings(findings: list, width: int) -> Text:
    t = Text()
    if not findings:
        t.append(" ✓ healthy ", style="bold black on #98c379")
        t.append("  no bottleneck: rings keep up, nothing dropped, consumers alive, backends lose nothing\n",
                 style=palette.LABEL)
        return t
    for i, f in enumerate(findings, 1):
        label, style = _SEV_STYLE.get(f.severity, _SEV_STYLE[0])
        t.append(f" {i}. ", style="bold")
        t.append(f" {label} ", style=style)
        t.append(" ")
        t.append(f.title, style="bold")
        t.append("\n")
        ev = "  ".join(f"{k}={v}" for k, v in f.evidence.items())
        t.append("    evidence ", style=palette.LABEL)
        t.append(ev + "\n")
        t.append("    remedy   ", style=palette.LABEL)
        t.append(f.remedy + "\n\n", style="#98c379")
    return t


class DiagnosisScreen(FipsScreen):
    SCREEN_NAME = "diagnosis"
    BINDINGS = [Binding("escape", "app.back", "Back")]

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield TextLine(id="diagnosis-title", classes="section-title")
        with VerticalScroll(id="diagnosis-body"):
            yield Static(id="findings")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> None:
        super().refresh_view()
        if not self.is_mounted:
            return
        app = self.fips
        findings = findings_of(app) if app.snapshot is not None else []
        title = Text(no_wrap=True)
        title.append(" DIAGNOSIS ", style="bold reverse")
        n = len(app.history.window(app.shown, WINDOW_FRAMES))
        title.append(f"  over the last {n} frame(s)", style=palette.LABEL)
        if getattr(app, "profile_report", None) is not None:
            title.append(f"  + profile of pid {app.profile_report.pid}", style=palette.LABEL)
        title.append("  ·  `fipstop diagnose` also profiles both ends", style=palette.LABEL)
        self.query_one("#diagnosis-title", TextLine).update(title)
        self.query_one("#findings", Static).update(render_findings(findings, self.size.width))
