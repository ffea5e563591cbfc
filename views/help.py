"""Help (``?``): every key, in one modal screen."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("everywhere", [
        ("q", "quit"),
        ("?", "this help (Esc, q or ? closes it)"),
        ("space", "pause / resume (sampling goes on while paused)"),
        ("t", "while paused: step to the next (newer) snapshot"),
        ("T", "step to the previous (older) snapshot (pauses)"),
        ("1", "overview"),
        ("2", "ring detail of the highlighted ring"),
        ("3", "consumer detail of the highlighted consumer"),
        ("4", "profile: time split, locks and stacks of a process"),
        ("p", "profile the producer of the ring (or the consumer) shown"),
        ("5", "bans: fipstop ips and Fail2Ban, time-to-ban, feed"),
        ("6", "backends: log files, syslog sockets, UDP, audit …"),
        ("7", "diagnosis: the bottleneck, its evidence, a remedy"),
        ("Esc", "back from a detail screen"),
        ("mouse", "click: highlight, click again: open; wheel: scroll"),
    ]),
    ("tables", [
        ("↑ ↓ j k", "move the cursor"),
        ("PgUp PgDn", "a page up / down"),
        ("Home End", "first / last row (also g G)"),
        ("Tab", "next table"),
        ("Enter", "open the highlighted ring or consumer"),
    ]),
    ("overview", [
        ("/", "filter rows: domain, ring, pid, thread, consumer"),
        ("Esc", "clear the filter"),
        ("s", "sort the focused table by the next column"),
        ("S", "reverse the sort order (or click a header)"),
    ]),
    ("profile", [
        ("o", "on-CPU or off-CPU stacks (hot functions, stacks, tree)"),
        ("e", "export the stacks as folded text (flamegraph, speedscope)"),
        ("Enter", "open / close a node of the stack tree"),
        ("Esc", "back; closing the screen stops profiling"),
    ]),
    ("replay (fipstop replay FILE)", [
        ("[ ]", "seek 10 s back / forward"),
        ("{ }", "jump to the previous / next mark (drops, bans, findings)"),
        ("< >", "slower / faster: 0.25x to 16x"),
        (":", "go to a time (HH:MM[:SS], ISO 8601, +SECONDS)"),
        ("click", "on the timeline (third header line): seek there"),
        ("space t", "pause stops reading; t reads the next frame"),
    ]),
    ("colours", [
        ("red", "records dropped, ring full: nothing else is red"),
        ("cyan", "the row filter typed with /"),
        ("yellow", "ring filling up; consumer stale or lagging"),
        ("orange", "ring almost full"),
        ("magenta", "consumer evicted (dead, was holding a full ring)"),
    ]),
]


def help_text() -> Text:
    """Every key, as plain Text in two aligned columns."""
    width = max(len(k) for _, rows in KEYS for k, _ in rows) + 2
    t = Text()
    for i, (section, rows) in enumerate(KEYS):
        if i:
            t.append("\n")
        t.append(section + "\n", style="bold underline")
        for key, what in rows:
            t.append(f"  {key:<{width}}", style="bold #56b6c2")
            t.append(what + "\n")
    t.rstrip()
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Vertical {
        width: 100;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        border-title-style: bold;
        background: $surface;
        padding: 0 1;
        overflow-y: auto;
    }
    """

    def compose(self) -> ComposeResult:
        with Vertical() as v:
            v.border_title = "fipstop keys"
            yield Static(help_text(), id="help-keys")

    def action_dismiss(self) -> None:
        self.dismiss(None)

    def on_click(self) -> None:
        self.dismiss(None)
