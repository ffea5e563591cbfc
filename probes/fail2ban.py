"""The Fail2Ban probe: bans of a running fail2ban-server, as ban events.

Reads the server's sqlite database read-only (a ``mode=ro`` URI: never a
write, never a lock held across samples): every row of the ``bans`` table
added since the last sample becomes a :class:`fipstop.bans.BanEvent` with
source ``fail2ban``, so the Bans panel shows Fail2Ban beside ``fipstop ips``
and measures its time-to-ban the same way (first offending log line -> ban):

- ``first_ns``: the earliest timestamp among the ban's stored ``matches``
  (the log lines Fail2Ban matched; BIND ``30-Nov-2026 12:00:00.123``, ISO
  ``2026-11-30 12:00:00,123`` and syslog ``Nov 30 12:00:00`` prefixes are
  understood, local time); ``timeofban`` when no line carries a time;
- ``trigger_ns``: ``timeofban`` (whole seconds: Fail2Ban rounds it);
- ``ban_ns``: when this probe first saw the row, for rows that appeared
  while it was watching (the ban happened at most one sample interval
  earlier); ``timeofban`` for rows that were there before it started.

Bans in force come from the ``bips`` table (``bantime`` < 0 or
``timeofban + bantime`` in the future); a ban that leaves it (lifted with
``fail2ban-client set JAIL unbanip``, or ended) becomes an ``unban`` event.
Each ban event carries its end (``expires_ns``: timeofban + bantime, or
``permanent``).  With only a socket
(``fail2ban-client -s SOCK status``) the probe reports the bans in force per
jail and no events.  Rows are hostile input (anyone who can log a line chooses
part of ``matches``): bad rows are counted, never raised.

Never imports textual.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import sqlite3
import subprocess
import threading
import time
import urllib.parse

from fipstop.bans import BanEvent
from fipstop.errors import one_line
from fipstop.probes.bans import BansSample

__all__ = ["DEFAULT_DB", "DEFAULT_SOCKET", "Fail2BanProbe", "line_time_ns"]

DEFAULT_DB = "/var/lib/fail2ban/fail2ban.sqlite3"
DEFAULT_SOCKET = "/var/run/fail2ban/fail2ban.sock"
MAX_ROWS_PER_SAMPLE = 65536
#: bans in force the probe follows for unban events (``bips``); above it, only the bans' ends
IN_FORCE_ROWS_MAX = 1 << 17

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                       "dec"), 1)}
_BIND = re.compile(r"\s*(\d{1,2})-([A-Za-z]{3})-(\d{4}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")
_ISO = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")
_SYSLOG = re.compile(r"\s*([A-Za-z]{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")


def _frac_ns(frac: str | None) -> int:
    return int((frac or "0").ljust(9, "0")[:9])


def _local_ns(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None) -> int | None:
    try:
        t = time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return int(t) * 1_000_000_000 + _frac_ns(frac)


def line_time_ns(line: str, *, year: int | None = None) -> int | None:
    """The local-time timestamp a log line starts with, in ns (None if none)."""
    if not isinstance(line, str):
        return None
    line = line[:64]
    m = _BIND.match(line)
    if m:
        mo = _MONTHS.get(m.group(2).lower())
        if mo is None:
            return None
        return _local_ns(int(m.group(3)), mo, int(m.group(1)), int(m.group(4)), int(m.group(5)), int(m.group(6)),
                         m.group(7))
    m = _ISO.match(line)
    if m:
        y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            return None
        return _local_ns(y, mo, d, h, mi, s, m.group(7))
    m = _SYSLOG.match(line)
    if m:
        mo = _MONTHS.get(m.group(1).lower())
        if mo is None:
            return None
        y = year if year is not None else time.localtime().tm_year
        return _local_ns(y, mo, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6))
    return None


def _one_line(text: object) -> str:
    return one_line(text, 300)


class Fail2BanProbe:
    """Follows a fail2ban-server's database (and/or asks its socket)."""

    name = "fail2ban"
    source = "fail2ban"

    def __init__(self, db_path: str | None = DEFAULT_DB, socket_path: str | None = None, *,
                 client: str | None = None) -> None:
        self.db_path = db_path
        self.socket_path = socket_path
        self.client = client or shutil.which("fail2ban-client") or "fail2ban-client"
        self._last_rowid: int | None = None  # None: not started (rows present then are history)
        self._in_force_before: set[tuple[str, str]] | None = None  # bips in force at the previous sample
        self._seen = 0
        self._bad = 0
        self._lock = threading.Lock()

    def available(self) -> tuple[bool, str]:
        if self.db_path and os.path.isfile(self.db_path):
            if not os.access(self.db_path, os.R_OK):
                return False, f"{self.db_path}: permission denied"
            return True, ""
        if self.socket_path and os.path.exists(self.socket_path):
            return True, ""
        where = " or ".join(x for x in (self.db_path, self.socket_path) if x) or "no database or socket given"
        return False, f"no fail2ban-server here ({where})"

    def _empty(self, reason: str, active: int | None = None) -> BansSample:
        return BansSample(self.source, time.monotonic_ns(), time.time_ns(), (), self._seen, self._bad, 0,
                          self._seen, active, reason, probe=self.name, control=self.socket_path or "")

    def sample(self) -> BansSample:
        with self._lock:
            ok, reason = self.available()
            if not ok:
                return self._empty(reason)
            if self.db_path and os.path.isfile(self.db_path):
                try:
                    return self._from_db()
                except (sqlite3.Error, OSError) as e:
                    return self._empty(_one_line(f"{self.db_path}: {e}"))
            return self._from_socket()

    # -- database ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.db_path or "")) + "?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=0.5, check_same_thread=False)

    def _from_db(self) -> BansSample:
        mono, now = time.monotonic_ns(), time.time_ns()
        con = self._connect()
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "bans" not in tables:
                return self._empty(f"{self.db_path}: no bans table (not a Fail2Ban database?)")
            start = self._last_rowid
            since = -1 if start is None else start
            rows = con.execute("SELECT rowid, jail, ip, timeofban, bantime, bancount, data FROM bans "
                               "WHERE rowid > ? ORDER BY rowid LIMIT ?", (since, MAX_ROWS_PER_SAMPLE)).fetchall()
            active = None
            table = "bips" if "bips" in tables else "bans"
            in_force = self._in_force(con, now) if "bips" in tables else None
            try:
                active = int(con.execute(f"SELECT count(*) FROM {table} WHERE bantime < 0 OR timeofban + bantime > ?",
                                         (now // 1_000_000_000,)).fetchone()[0])
            except (sqlite3.Error, TypeError, ValueError):
                active = None
        finally:
            con.close()
        events = []
        for rowid, jail, ip, timeofban, bantime, bancount, data in rows:
            self._last_rowid = max(self._last_rowid or 0, int(rowid))
            self._seen += 1
            ev = self._event(jail, ip, timeofban, bancount, data, observed_ns=None if start is None else now,
                             bantime=bantime)
            if ev is None:
                self._bad += 1
            else:
                events.append(ev)
        if self._last_rowid is None:
            self._last_rowid = 0
        if in_force is not None:
            # a ban lifted (fail2ban-client unbanip) or ended: an unban event, so the list of bans in force follows
            # (also one banned and lifted between two samples)
            if self._in_force_before is not None:
                banned = {(e.jail, e.ip) for e in events}
                events += [BanEvent("unban", ip, jail, 0, 0, now, 0, "fail2ban", "ok", self.source)
                           for jail, ip in sorted((self._in_force_before | banned) - in_force)]
            self._in_force_before = in_force
        return BansSample(self.source, mono, now, tuple(events), self._seen, self._bad, 0, self._seen, active, "",
                          probe=self.name, control=self.socket_path or "")

    def _in_force(self, con: sqlite3.Connection, now_ns: int) -> set[tuple[str, str]] | None:
        """(jail, address) of every ban in force (``bips``); None when there are more than IN_FORCE_ROWS_MAX
        (no unban events then: the bans' ends still take them off the list)."""
        try:
            rows = con.execute("SELECT jail, ip FROM bips WHERE bantime < 0 OR timeofban + bantime > ? LIMIT ?",
                               (now_ns // 1_000_000_000, IN_FORCE_ROWS_MAX + 1)).fetchall()
        except sqlite3.Error:
            return None
        if len(rows) > IN_FORCE_ROWS_MAX:
            return None
        out = set()
        for jail, ip in rows:
            if isinstance(jail, str) and isinstance(ip, str):
                try:
                    out.add((jail, str(ipaddress.ip_address(ip.strip()))))
                except ValueError:
                    continue
        return out

    def _event(self, jail, ip, timeofban, bancount, data, observed_ns: int | None,
               bantime: object = None) -> BanEvent | None:
        if not isinstance(jail, str) or not isinstance(ip, str) or not isinstance(timeofban, int):
            return None
        try:
            ip = str(ipaddress.ip_address(ip.strip()))
        except ValueError:
            return None
        if not 0 <= timeofban < 1 << 32:
            return None
        trigger = timeofban * 1_000_000_000
        matches: list = []
        failures = 0
        if isinstance(data, (str, bytes)) and data:
            try:
                d = json.loads(data)
            except (ValueError, UnicodeDecodeError):
                d = None
            if isinstance(d, dict):
                m = d.get("matches")
                matches = m if isinstance(m, list) else []
                f = d.get("failures")
                failures = f if isinstance(f, int) and not isinstance(f, bool) and f >= 0 else 0
        times = []
        for x in matches[:64]:
            if isinstance(x, list):  # older versions store a line as its parts
                x = "".join(p for p in x if isinstance(p, str))
            t = line_time_ns(x)
            if t is not None and 0 < t <= trigger + 1_000_000_000:
                times.append(t)
        first = min(times) if times else trigger
        ban = observed_ns if observed_ns is not None else trigger
        ban = max(ban, first)
        hits = failures or len(matches) or (bancount if isinstance(bancount, int) and bancount > 0 else 0)
        # bantime: seconds, -1 for ever; absent (Fail2Ban before 0.10) or not a number: unknown
        expires, permanent = None, False
        if isinstance(bantime, int) and not isinstance(bantime, bool):
            if bantime < 0:
                permanent = True
            elif bantime < 1 << 32:
                expires = (timeofban + bantime) * 1_000_000_000
        return BanEvent("ban", ip, jail, min(first, ban), min(trigger, ban), ban, int(min(hits, 1 << 31)),
                        "fail2ban", "ok", self.source, expires_ns=expires, permanent=permanent)

    # -- socket -----------------------------------------------------------------------------

    def _client(self, *args: str) -> str:
        out = subprocess.run([self.client, "-s", str(self.socket_path), *args], capture_output=True, text=True,
                             timeout=3, check=False)
        if out.returncode != 0:
            raise OSError(_one_line(out.stderr or out.stdout) or f"fail2ban-client exit {out.returncode}")
        return out.stdout

    def _from_socket(self) -> BansSample:
        try:
            status = self._client("status")
            m = re.search(r"Jail list:\s*(.*)", status)
            jails = [j.strip() for j in (m.group(1) if m else "").split(",") if j.strip()]
            active = 0
            for j in jails[:64]:
                js = self._client("status", j)
                cm = re.search(r"Currently banned:\s*(\d+)", js)
                active += int(cm.group(1)) if cm else 0
        except (OSError, subprocess.SubprocessError) as e:
            return self._empty(_one_line(f"{self.socket_path}: {e}"))
        return self._empty("socket only: bans in force, no events (give the database for time-to-ban)", active)

    def close(self) -> None:
        pass
