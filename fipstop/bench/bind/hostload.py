"""How busy this machine is, for ``fipstop bench bind``: CPU time of a
process, of the whole machine and of everyone else, and waiting for calm.

A run during which other processes used more than ``DISTURBED_CORES`` was
disturbed (:mod:`fipstop.bench.bind.modes`); before each run the bench waits
until the machine is quiet.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Before each run, wait (up to --calm-wait seconds) until the machine is
# quiet: busy < CALM_CORES over a 1 s sample.
CALM_CORES = 0.3


def proc_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process (all its threads), seconds; None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def busy_cpu_s() -> float | None:
    """CPU time the whole machine spent busy (all CPUs, /proc/stat), seconds."""
    try:
        with open("/proc/stat", "rb") as f:
            parts = f.readline().split()
    except OSError:
        return None
    vals = [int(x) for x in parts[1:]] + [0] * 8
    # user nice system idle iowait irq softirq steal guest guest_nice; guest is inside user.
    # Tick accounting charges a softirq to the task it interrupted (its stime)
    # and to the softirq column, so irq/softirq are counted here too.
    return sum(vals[i] for i in (0, 1, 2, 5, 6, 7)) / CLK_TCK


def proc_table(exclude: set[int]) -> dict[int, tuple[str, float]]:
    """pid -> (comm, cpu seconds) of every process but those in exclude."""
    out: dict[int, tuple[str, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                s = f.read()
        except OSError:
            continue
        i, j = s.find(b"("), s.rfind(b")")
        fields = s[j + 2 :].split()
        try:
            out[int(name)] = (s[i + 1 : j].decode(errors="replace"), (int(fields[11]) + int(fields[12])) / CLK_TCK)
        except (IndexError, ValueError):
            continue
    return out


def top_others(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], wall_s: float,
               n: int = 3) -> list[dict[str, Any]]:
    """The processes (not ours) that used the most CPU between two proc_table()s."""
    use: dict[str, float] = {}
    for pid, (comm, cpu) in after.items():
        d = cpu - before[pid][1] if pid in before else cpu
        if d > 0:
            use[comm] = use.get(comm, 0.0) + d
    top = sorted(use.items(), key=lambda kv: -kv[1])[:n]
    return [{"comm": c, "cores": round(v / wall_s, 3)} for c, v in top if v / wall_s >= 0.01]


def wait_calm(max_wait_s: float, threshold: float = CALM_CORES) -> tuple[float, float | None]:
    """Sample the machine's busy CPU for 1 s at a time until it is below
    threshold cores or max_wait_s passed: (seconds waited, last sample)."""
    t0 = time.monotonic()
    load = None
    while True:
        b0, w0 = busy_cpu_s(), time.monotonic()
        time.sleep(1.0)
        b1, w1 = busy_cpu_s(), time.monotonic()
        if b0 is None or b1 is None:
            return round(time.monotonic() - t0, 1), None
        load = round((b1 - b0) / (w1 - w0), 3)
        if load < threshold or time.monotonic() - t0 >= max_wait_s:
            return round(time.monotonic() - t0, 1), load


def comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --------------------------------------------------------------------------- #
# results
