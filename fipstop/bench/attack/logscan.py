"""Per attacker, the times of its refused-query lines in named's log file (first and the maxretry-th).

What a file-reading IPS was given: the first line starts an attacker's
time-to-ban, the maxretry-th is when a ban became due (the reaction time
starts there).  BIND's ``print-time yes`` stamps carry milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from fipstop.probes.fail2ban import line_time_ns


def denied_times(log: Path, nth: int, want=None) -> tuple[dict[str, tuple[int, int | None]], int]:
    """ip -> (first line's time ns, nth line's time ns or None), and the denied lines counted.
    ``want(ip)``: only these addresses (default all)."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    nth_t: dict[str, int] = {}
    total = 0
    try:
        f = open(log, encoding="utf-8", errors="replace")
    except OSError:
        return {}, 0
    with f:
        for line in f:
            if not line.endswith("denied\n") and not line.endswith("denied"):
                continue
            i = line.find(" client @")
            if i < 0:
                continue
            rest = line[i + 9:].split(" ", 2)
            if len(rest) < 2:
                continue
            ip = rest[1].rsplit("#", 1)[0]
            if want is not None and not want(ip):
                continue
            total += 1
            c = count.get(ip, 0) + 1
            count[ip] = c
            if c == 1 or c == nth:
                t = line_time_ns(line)
                if t is None:
                    continue
                if c == 1:
                    first[ip] = t
                if c == nth:
                    nth_t[ip] = t
    return {ip: (t, nth_t.get(ip)) for ip, t in first.items()}, total
