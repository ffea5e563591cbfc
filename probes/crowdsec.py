"""The CrowdSec probe: a third ban source beside ``fipstop ips`` and Fail2Ban.

CrowdSec keeps every decision in the local API's database (SQLite by
default, ``/var/lib/crowdsec/data/crowdsec.db``; 1.4's ``decisions`` and
``alerts`` tables).  The probe opens it read-only (``mode=ro``: it never
takes a write lock, never asks the local API for credentials) and, at every
sample, reads the decisions added since the last id it saw, each joined with
its alert: the alert's ``started_at`` (the bucket's first event) is the
first offence, its ``stopped_at`` (the overflow) the trigger, the decision's
``created_at`` the ban.  Decisions present at the first sample are history;
bans in force are the addresses with a ``ban`` decision whose ``until`` is
still ahead (CrowdSec may decide on one address more than once).

Rows are hostile input (an attacker chooses which address is decided on,
and a database may be anything): a row that is not an address or a network,
whose times do not parse, or that has no alert (``cscli decisions add``, or an
alert lost: no first offence, so no time-to-ban) is counted in
``bad_records``, never raised;
at most :data:`MAX_ROWS_PER_SAMPLE` rows a sample.

Never imports textual.
"""

from __future__ import annotations

import calendar
import ipaddress
import os
import re
import sqlite3
import threading
import time
import urllib.parse

from fipstop.bans import BanEvent
from fipstop.errors import one_line
from fipstop.probes.bans import BansSample

__all__ = ["DEFAULT_DB", "CrowdSecProbe", "parse_time_ns", "running"]

DEFAULT_DB = "/var/lib/crowdsec/data/crowdsec.db"
MAX_ROWS_PER_SAMPLE = 65536

_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$")


def parse_time_ns(text: object) -> int | None:
    """``2026-12-02 04:22:53.458947081+00:00`` (how CrowdSec's ORM stores a time) -> ns since the epoch, UTC.
    None for anything else (no zone: taken as UTC, as CrowdSec writes them)."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    m = _TIME.match(text.strip())
    if not m:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    try:
        secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    zone = m.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        z = zone[1:].replace(":", "")
        secs -= sign * (int(z[:2]) * 3600 + int(z[2:]) * 60)
    return secs * 1_000_000_000 + int((m.group(7) or "0").ljust(9, "0"))


def running(proc_root: str = "/proc") -> bool:
    """Whether a process called ``crowdsec`` runs here (the default database exists as soon as the package is
    installed, so only a running agent makes it a live ban source worth showing unasked)."""
    try:
        pids = [d for d in os.listdir(proc_root) if d.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "comm"), encoding="utf-8", errors="replace") as f:
                if f.read().strip() == "crowdsec":
                    return True
        except OSError:
            continue
    return False


class CrowdSecProbe:
    """Follows a CrowdSec local API's database, read-only."""

    name = "crowdsec"
    source = "crowdsec"

    def __init__(self, db_path: str = DEFAULT_DB) -> None:
        self.db_path = db_path
        self._last_id: int | None = None  # None: not started (rows present then are history)
        self._seen = 0
        self._bad = 0
        self._lock = threading.Lock()

    def available(self) -> tuple[bool, str]:
        if not os.path.isfile(self.db_path):
            return False, f"no CrowdSec database here ({self.db_path})"
        if not os.access(self.db_path, os.R_OK):
            return False, f"{self.db_path}: permission denied"
        return True, ""

    def _empty(self, reason: str) -> BansSample:
        return BansSample(self.source, time.monotonic_ns(), time.time_ns(), (), self._seen, self._bad, 0,
                          self._seen, None, reason, probe=self.name)

    def sample(self) -> BansSample:
        with self._lock:
            ok, reason = self.available()
            if not ok:
                return self._empty(reason)
            try:
                return self._from_db()
            except (sqlite3.Error, OSError) as e:
                return self._empty(one_line(f"{self.db_path}: {e}", 300))

    def _from_db(self) -> BansSample:
        mono, now = time.monotonic_ns(), time.time_ns()
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.db_path)) + "?mode=ro"
        con = sqlite3.connect(uri, uri=True, timeout=0.5, check_same_thread=False)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "decisions" not in tables:
                return self._empty(f"{self.db_path}: no decisions table (not a CrowdSec database?)")
            alerts = "alerts" in tables
            start = self._last_id
            since = -1 if start is None else start
            join = ("LEFT JOIN alerts a ON a.id = d.alert_decisions" if alerts else "")
            cols = "a.started_at, a.stopped_at, a.events_count" if alerts else "NULL, NULL, NULL"
            rows = con.execute(f"SELECT d.id, d.created_at, d.until, d.scenario, d.type, d.scope, d.value, "
                               f"d.origin, d.simulated, {cols} FROM decisions d {join} WHERE d.id > ? "
                               f"ORDER BY d.id LIMIT ?", (since, MAX_ROWS_PER_SAMPLE)).fetchall()
            # in force: every ban decision still ahead of its end (CrowdSec stores times in UTC)
            until = con.execute("SELECT value, until FROM decisions WHERE type = 'ban' AND simulated = 0").fetchall()
        finally:
            con.close()
        # CrowdSec may decide on one address several times (one decision per alert): in force counts addresses
        active = len({v for v, u in until if (t := parse_time_ns(u)) is not None and t > now})
        events = []
        for row in rows:
            rid = row[0]
            if isinstance(rid, int):
                self._last_id = max(self._last_id or 0, rid)
            self._seen += 1
            ev = self._event(row, observed_ns=None if start is None else now)
            if ev is None:
                self._bad += 1
            else:
                events.append(ev)
        if self._last_id is None:
            self._last_id = 0
        return BansSample(self.source, mono, now, tuple(events), self._seen, self._bad, 0, self._seen, active, "",
                          probe=self.name)

    def _event(self, row: tuple, observed_ns: int | None) -> BanEvent | None:
        _id, created, until, scenario, typ, scope, value, _origin, simulated, started, stopped, count = row
        if not isinstance(value, str) or not isinstance(scenario, str) or not isinstance(typ, str):
            return None
        if not isinstance(scope, str) or scope.lower() not in ("ip", "range"):
            return None  # a country, an AS, a user name...: no address to show
        try:
            ip = str(ipaddress.ip_network(value.strip(), strict=False)) if "/" in value else \
                str(ipaddress.ip_address(value.strip()))
        except ValueError:
            return None
        ban = parse_time_ns(created)
        if ban is None:
            return None
        if observed_ns is not None and observed_ns < ban:
            ban = observed_ns
        trigger = parse_time_ns(stopped)
        first = parse_time_ns(started)
        if trigger is None or first is None:
            return None  # no alert to say when the offence began: no time-to-ban to show (counted, not guessed)
        trigger = min(trigger, ban)
        first = min(first, trigger)
        hits = count if isinstance(count, int) and not isinstance(count, bool) and 0 <= count < 1 << 31 else 0
        action = f"crowdsec:{typ[:32]}" + (" (simulated)" if simulated else "")
        return BanEvent("ban", ip, scenario[:200], first, trigger, ban, hits, action, "ok", self.source,
                        expires_ns=parse_time_ns(until))

    def close(self) -> None:
        pass
