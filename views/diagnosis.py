"""Diagnosis (key 7): which stage is the bottleneck right now.

The findings of :func:`fipstop.analysis.diagnose.diagnose` over the last
``WINDOW_FRAMES`` frames of the history ending at the shown one (so pausing
and stepping, and a replay, show the diagnosis of that moment), plus the
profile report of the process being profiled (screen 4) when there is one.
Most important first: severity, a one-sentence title, the evidence numbers
and the remedy.  No finding says so in green; either way a line says what
was dropped in the window and what before it (a quiet window after an attack
is healthy now, not "nothing dropped").  Everything shown is built
as rich Text from escaped strings: names come from other processes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from fipstop.analysis.diagnose import diagnose
from fipstop.analysis.findings import CRITICAL, INFO, WARNING, Finding
from fipstop.model.snapshot import Snapshot
from fipstop.views import palette
from fipstop.views.base import FipsScreen
from fipstop.views.state import Dashboard
from fipstop.views.widgets.header import StatusHeader
from fipstop.views.widgets.textline import TextLine

WINDOW_FRAMES = 10
_SEV_STYLE: dict[int, tuple[str, str]] = {
    CRITICAL: ("CRITICAL", "bold white on #be1e2d"),
    WARNING: ("WARNING", "bold black on #e5c07b"),
    INFO: ("INFO", "bold black on #61afef"),
}


def findings_of(app: Dashboard) -> list[Finding]:
    report = app.profile_report
    profiles = {int(report.pid): report} if report is not None and report.pid else {}
    return diagnose(app.history.window(app.shown, WINDOW_FRAMES), profiles=profiles)


def window_counts(window: Sequence[Snapshot]) -> tuple[float, int, int]:
    """(seconds the window spans, records dropped in it, records dropped before it, since the rings
    were created): what the panel says beside its verdict, so "healthy" over the last frames is
    never read as "nothing was ever dropped" while the header counts hundreds of thousands."""
    if not window:
        return 0.0, 0, 0
    first, last = window[0], window[-1]
    span = max((last.taken_realtime_ns - first.taken_realtime_ns) / 1e9, 0.0)
    before = int(first.totals.records_dropped)
    inside = max(int(last.totals.records_dropped) - before, 0)
    return span, inside, before


def _window_line(window: Sequence[Snapshot]) -> Text:
    span, inside, before = window_counts(window)
    t = Text()
    t.append(f"    in the last {span:.0f} s: ", style=palette.LABEL)
    t.append(f"{inside:,} records dropped", style=palette.DROPS if inside else "")
    t.append("   before: ", style=palette.LABEL)
    t.append(f"{before:,} dropped since the rings were created" if before else "nothing dropped",
             style=palette.DROPS if before else "")
    t.append("\n\n")
    return t


def render_findings(findings: list[Finding], width: int, window: Sequence[Snapshot] = ()) -> Text:
    t = Text()
    if not findings:
        _span, inside, before = window_counts(window)
        t.append(" ✓ healthy ", style="bold black on #98c379")
        t.append("  no bottleneck in this window: rings keep up, consumers alive, backends lose nothing"
                 + ("" if before else ", nothing ever dropped") + "\n", style=palette.LABEL)
        if window:
            t.append(_window_line(window))
        return t
    if window:
        t.append(_window_line(window))
    for i, f in enumerate(findings, 1):
        label, style = _SEV_STYLE.get(f.severity, _SEV_STYLE[INFO])
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
        if app.profile_report is not None:
            title.append(f"  + profile of pid {app.profile_report.pid}", style=palette.LABEL)
        title.append("  ·  `fipstop diagnose` also profiles both ends", style=palette.LABEL)
        self.query_one("#diagnosis-title", TextLine).update(title)
        window = app.history.window(app.shown, WINDOW_FRAMES) if app.snapshot is not None else []
        self.query_one("#findings", Static).update(render_findings(findings, self.size.width, window))
