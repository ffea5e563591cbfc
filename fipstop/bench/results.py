"""Where benchmark results go, shared by every ``fipstop bench`` command, and
the one t-interval they report.

Each run writes one JSON document: to ``--out`` when given, else to
``<kind>-<UTC stamp>.json`` and ``<kind>-latest.json`` in :data:`RESULTS_DIR`
- ``bench/results/`` of the source tree when fipstop runs from one (a
committed result always carries the command that made it), else
``./bench-results`` - and prints it: the JSON with ``--json``, else a table.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from fipstop.bench.cbuild import SOURCE_TREE

RESULTS_DIR = SOURCE_TREE / "bench" / "results" if SOURCE_TREE is not None else Path("bench-results")


@dataclass(frozen=True)
class Output:
    """What every bench does with its result (its --json, --out)."""

    json: bool = False  # print the JSON document instead of the table
    out: str | None = None  # write the document only here
    command: str = ""  # the command that made it, recorded in the document


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """What every result records about the machine it ran on."""
    u = os.uname()
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except OSError:
        affinity = []
    return {
        "hostname": socket.gethostname(),
        "kernel": u.release,
        "arch": u.machine,
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "cpus_allowed": affinity,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "loadavg_at_end": list(os.getloadavg()),
    }


def publish(kind: str, doc: dict[str, Any], output: Output, now: datetime,
            render_table: Callable[[dict[str, Any]], str], log: Callable[[str], None]) -> list[Path]:
    """Write ``doc`` as described above, then print it: the JSON text with
    ``--json``, else the human table. Returns the files written."""
    text = json.dumps(doc, indent=2) + "\n"
    written: list[Path] = []
    out = output.out
    if out:
        p = Path(out)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        written.append(p)
    else:
        try:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            stamp = now.strftime("%Y%m%dT%H%M%SZ")
            for name in (f"{kind}-{stamp}.json", f"{kind}-latest.json"):
                (RESULTS_DIR / name).write_text(text, encoding="utf-8")
                written.append(RESULTS_DIR / name)
        except OSError as exc:
            log(f"cannot write results to {RESULTS_DIR}: {exc}")
    if output.json:
        sys.stdout.write(text)
    else:
        print(render_table(doc))
    for p in written:
        log(f"wrote {p}")
    return written


def output_line(text: str, limit: int = 300) -> str:
    """A program's output (stderr, a log tail) as one line: its non-empty
    lines joined by `` | ``, cut to ``limit`` characters, for a result's
    "reason" field."""
    return " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())[:limit]


# 97.5 % quantiles of Student's t by degrees of freedom (a df between two keys
# takes the next key's, the conservative side); 1.96 beyond 30.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df: int) -> float:
    if df <= 0:
        return float("nan")
    for k in sorted(_T975):
        if df <= k:
            return _T975[k]
    return 1.96


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95 % t-interval; one value decides nothing (-inf, inf)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, float("-inf"), float("inf")
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half
