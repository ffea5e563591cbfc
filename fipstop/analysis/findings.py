"""What a diagnosis says: findings, their severity, and how numbers are worded.

A :class:`Finding` names the bottleneck (``id``), says it in one sentence
(``title``), carries the numbers that show it (``evidence``) and what to do
(``remedy``).  Everything in a title, subject or evidence that came from
another process (consumer, process, socket names, function names) is
escaped here, once, so every output (text, JSON, the Diagnosis panel) can
print it as it is.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fipstop.profile.session import ProfileReport
from fipstop.textsafe import escape_bytes, escape_text

__all__ = ["CRITICAL", "INFO", "WARNING", "Finding", "Severity", "hot_spot"]


class Severity(enum.IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


INFO, WARNING, CRITICAL = Severity.INFO, Severity.WARNING, Severity.CRITICAL
#: a process using this share of one core (or waiting for one) is CPU-bound
CPU_SATURATED_PCT = 85.0
#: producer threads blocked this share of the time are held up by the logging path
LOCK_BLOCKED_PCT = 30.0


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    severity: int  # a Severity
    score: float  # ranks findings of the same severity (larger first)
    subject: str
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str = ""

    @property
    def severity_label(self) -> str:
        return Severity(self.severity).label


def name_of(raw: Any) -> str:
    """A NUL-padded name from shared memory, escaped."""
    return escape_bytes(bytes(raw).split(b"\0", 1)[0])


def mean(xs: Sequence[float]) -> float:
    """Mean of the finite values (0 when there are none)."""
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else 0.0


def pct(x: float) -> str:
    return f"{x:.0f}%"


def si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def hot_spot(report: ProfileReport | None) -> tuple[str, dict[str, Any]]:
    """A few words on where a profiled process spends its time, and the numbers."""
    if report is None:
        return "", {}
    ev: dict[str, Any] = {}
    words = []
    th = report.threads
    if th.available and th.threads:
        busy = [t for t in th.threads if t.oncpu_pct + t.runqueue_pct + t.lock_pct + t.io_pct > 5] or list(th.threads)
        for cat in ("oncpu", "lock", "io", "runqueue", "sleep"):
            ev[f"threads_{cat}_pct"] = round(mean([t.pct(cat) for t in busy]), 1)
    try:
        hot = report.hot_functions("oncpu", 3)
    except Exception:  # a report of another version, a profiler's odd stack: the rest still says enough
        hot = []
    if hot:
        _source, func, _value, share = hot[0]
        ev["hot_function"] = escape_text(str(func))[:120]
        words.append(f"hot: {escape_text(str(func))[:60]} {share:.0f}%")
    if "threads_oncpu_pct" in ev:
        words.append(f"threads on CPU {ev['threads_oncpu_pct']:.0f}%, waiting for a CPU "
                     f"{ev['threads_runqueue_pct']:.0f}%, lock {ev['threads_lock_pct']:.0f}%, "
                     f"I/O {ev['threads_io_pct']:.0f}%, sleeping {ev['threads_sleep_pct']:.0f}%")
    return "; ".join(words), ev
