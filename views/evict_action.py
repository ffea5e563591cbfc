"""The evict action (Ctrl-K or F9, as k9s kills and htop's F9 does): on the consumer shown, or highlighted in the
overview's consumers table, after a y/n question that says what will happen.

It is refused with the reason in a replay (the past), for a consumer that is not registered any more, and when the
dashboard has no write access to the domain (it attaches read-only; :mod:`fipstop.evict` opens the file for writing
just for the call).  The eviction runs off the UI thread; its one-line result is a notification.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.text import Text
from textual.app import App

from fipstop import evict
from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.views import format as fmt
from fipstop.views import palette
from fipstop.views.confirm import ConfirmAction
from fipstop.views.consumer_detail import ConsumerDetailScreen
from fipstop.views.overview import OverviewScreen


def target(app: App[Any]) -> tuple[str, int] | None:
    """The consumer shown, or highlighted in the focused consumers table."""
    screen = app.screen
    if isinstance(screen, ConsumerDetailScreen):
        return screen.key
    if isinstance(screen, OverviewScreen) and screen.focused is screen.consumers_table:
        key = screen.consumers_table.cursor_key
        return (str(key[0]), int(key[1])) if key is not None else None
    return None


def start(app: App[Any], s: Snapshot | None, *, replaying: bool) -> None:
    """Ask, then evict (or say why not).  ``s`` is the snapshot on screen (what the operator saw)."""
    key = target(app)
    if key is None:
        app.notify("no consumer: open one or highlight it in the consumers table (Tab)", severity="warning",
                   markup=False)
        return
    domain, slot = key
    row = s.consumer_row(domain, slot) if s is not None else None
    if s is None or row is None:
        app.notify(f"consumer slot {slot} of {fmt.name(domain)} is free now: nothing to evict", severity="warning",
                   markup=False)
        return
    c = s.consumers[row]
    name = fmt.name(c["name"]) or f"slot {slot}"
    health = Health(int(c["health"])).label
    why = evict.refusal(replay=replaying, health=health)
    if why:
        app.notify(f"cannot evict {name}: {why}", severity="warning", markup=False)
        return
    info = next((d for d in s.domains if d.name == domain), None)
    if info is None:
        app.notify(f"domain {fmt.name(domain)} is gone: nothing to evict", severity="warning", markup=False)
        return
    generation = int(c["generation"])
    lag = int(c["lag_max_records"])
    text = Text()
    text.append(f"Evict consumer {name} (pid {int(c['pid'])}) from {fmt.name(domain)}?\n\n", style="bold")
    text.append(f"It is {health}, heartbeat {fmt.age_ns(int(c['heartbeat_age_ns']))} ago, ", style=palette.LABEL)
    text.append(f"{fmt.count(lag) if lag >= 0 else 'unknown'} records unreleased.\n", style=palette.LABEL)
    text.append("Producers stop waiting for it (what it holds may be overwritten); it is told at its next read and "
                "can rejoin by name, what it missed counted lost.\n\n", style=palette.LABEL)
    text.append("y: evict   n / Esc: cancel")

    def answered(yes: bool | None) -> None:
        if not yes:
            app.notify("evict cancelled", markup=False)
            return

        def run() -> None:
            ok, what = evict.evict(info.path, domain, slot, generation, name, info.created_realtime_ns)
            app.call_from_thread(app.notify, fmt.name(what), severity="information" if ok else "error",
                                markup=False)

        threading.Thread(target=run, daemon=True, name="evict").start()

    app.push_screen(ConfirmAction(text), answered)
