"""``fipstop ips --check FILE``, the library half: what each jail would do
with the lines of a file, without a domain -- fipstop's ``fail2ban-regex``
(fipstop/commands/ips.py prints the report).

Every line goes through the same C matcher as a live record (date found and
cut out, multi-line buffer, <F-MLFID> sessions; a line that starts with
``<PRI>`` is read as a record of libfips_syslog.so).  Printed per jail, as
fail2ban-regex prints it: the regexes in use with their hit counts, the
date templates that matched, the line counts (matched, ignored by an
ignoreregex, not failures by <F-NOFAIL>/<F-MLFGAINED>, waiting for an
address of their <F-MLFID> session, missed), the addresses with the data
the filter captured (<F-USER> ...), the DNS names <HOST> matched (never
resolved: resolving is a lookup an attacker controls), and on request the
missed and ignored lines.

Counting: unlike a running ``fipstop ips`` (which counts findtime on the
records' ring time stamps), ``--check`` counts on the lines' own dates, as
Fail2Ban does when it reads a file: a line without a date takes the last
date seen.  Every text from the file is escaped before it is printed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fipstop.ips import datedetect
from fipstop.ips.jails import JailOptions, JailSpec, compile_jail, select_jails

if TYPE_CHECKING:
    from fipstop._ipsfast import Jail
    from fipstop.ips.filters import CompiledFilter


@dataclass
class JailCheck:
    """What one jail made of the file."""

    spec: JailSpec
    jail: Jail
    compiled: CompiledFilter
    results: Counter = field(default_factory=Counter)
    fail_hits: Counter = field(default_factory=Counter)
    ign_hits: Counter = field(default_factory=Counter)
    pref_hits: int = 0
    date_hits: Counter = field(default_factory=Counter)
    addrs: Counter = field(default_factory=Counter)
    data: dict[str, dict[str, Counter]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Counter)))
    dns: Counter = field(default_factory=Counter)
    not_ip: Counter = field(default_factory=Counter)
    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    missed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    last_time: float | None = None
    lines: int = 0

    def add(self, raw: bytes, r: dict) -> None:
        self.lines += 1
        res = r["result"]
        self.results[res] += 1
        self.pref_hits += bool(r.get("prefregex"))
        if r["regex"] is not None:
            self.fail_hits[r["regex"]] += 1
        if r["ignore"] is not None:
            self.ign_hits[r["ignore"]] += 1
        t = None
        if r["date"] is not None:
            tmpl, g0, s, e = r["date"]
            self.date_hits[tmpl] += 1
            if e > s:
                dl = r["line"]
                t = datedetect.parse_time(self.compiled.dates.templates[tmpl], dl.decode("utf-8", "replace"),
                                          len(dl[:g0].decode("utf-8", "replace")))
        if t is not None:
            self.last_time = t
        t = self.last_time
        if res == "hit":
            self.addrs[r["ip"]] += 1
            self.times[r["ip"]].append(t if t is not None else float(self.lines))
            for k, v in (r.get("groups") or {}).items():
                if k in self.compiled.data_names and v:
                    self.data[r["ip"]][k][v] += 1
        elif res == "dns":
            self.dns[r["host"]] += 1
        elif res == "not_ip":
            self.not_ip[r["host"]] += 1
        elif res == "ignored":
            self.ignored.append(raw.decode("utf-8", "replace"))
        else:  # nomatch, nofail, pending: missed, as fail2ban-regex counts them
            why = {"nofail": "[not a failure] ", "pending": "[waiting for an address] "}.get(res, "")
            self.missed.append(why + raw.decode("utf-8", "replace"))

    def would_ban(self) -> dict[str, int]:
        """Bans Fail2Ban's window would give each address on these lines' times."""
        s = self.spec
        out: dict[str, int] = {}
        for ip, ts in self.times.items():
            bans, first, n, until = 0, None, 0, None
            for t in ts:
                if until is not None and t < until:
                    continue
                if first is None or t - first > s.findtime_s:
                    first, n = t, 0
                n += 1
                if n >= s.maxretry:
                    bans += 1
                    until = t + s.bantime_s
                    first, n = None, 0
            if bans:
                out[ip] = bans
        return out


def check_stream(opts: JailOptions, lines: Iterable[bytes]) -> tuple[int, list[JailCheck]]:
    """Every line of a file through the jails of ``opts`` (comments and empty lines skipped, as
    fail2ban-regex does): the number of lines and what each jail made of them."""
    checks = []
    for s in select_jails(opts):
        cf = s.filter.compiled()
        checks.append(JailCheck(spec=s, jail=compile_jail(s, cf, protect=False), compiled=cf))
    n = 0
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if not line or line.startswith(b"#"):
            continue
        n += 1
        for c in checks:
            c.add(line, c.jail.check(line))
    return n, checks
