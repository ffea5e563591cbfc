"""The Fail2Ban probe on a database built here with Fail2Ban's schema (read-only, hostile rows)."""

from __future__ import annotations

import json
import os
import sqlite3
import time

from fipstop.probes.fail2ban import Fail2BanProbe, line_time_ns

SCHEMA = """
CREATE TABLE jails(name TEXT NOT NULL UNIQUE, enabled INTEGER NOT NULL DEFAULT 1);
CREATE TABLE bans(jail TEXT NOT NULL, ip TEXT, timeofban INTEGER NOT NULL, bantime INTEGER NOT NULL,
                  bancount INTEGER NOT NULL default 1, data JSON);
CREATE TABLE bips(ip TEXT NOT NULL, jail TEXT NOT NULL, timeofban INTEGER NOT NULL, bantime INTEGER NOT NULL,
                  bancount INTEGER NOT NULL default 1, data JSON, PRIMARY KEY(ip, jail));
"""


def bind_line(t: float, ip: str) -> str:
    ms = int((t % 1) * 1000)  # never 1000
    return time.strftime("%d-%b-%Y %H:%M:%S", time.localtime(t)) + f".{ms:03d} client @0x7f3a2c0 {ip}#5353 " \
        f"(example.com): query (cache) 'example.com/A/IN' denied"


def add_ban(db, ip, tob, data, bantime=600, jail="named-refused"):
    con = sqlite3.connect(db)
    con.execute("INSERT INTO bans VALUES (?,?,?,?,1,?)", (jail, ip, tob, bantime, data))
    con.execute("INSERT OR REPLACE INTO bips VALUES (?,?,?,?,1,?)", (ip, jail, tob, bantime, data))
    con.commit()
    con.close()


def make_db(tmp_path):
    db = str(tmp_path / "fail2ban.sqlite3")
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.commit()
    con.close()
    return db


def test_line_times():
    t = 1_764_504_000.25
    assert line_time_ns(bind_line(t, "10.0.0.1")) == 1_764_504_000_250_000_000
    assert line_time_ns("no time here") is None
    assert line_time_ns("99-Foo-2026 12:00:00 x") is None
    assert line_time_ns(None) is None  # type: ignore[arg-type]


def test_history_then_new_bans_with_time_to_ban(tmp_path):
    db = make_db(tmp_path)
    now = int(time.time())
    add_ban(db, "10.0.0.1", now - 100, json.dumps({"matches": [bind_line(now - 103.5, "10.0.0.1")], "failures": 5}))
    os.chmod(db, 0o444)
    p = Fail2BanProbe(db)
    assert p.available() == (True, "")
    s1 = p.sample()
    assert s1.unavailable == "" and s1.source == "fail2ban"
    (e,) = s1.events
    assert e.ip == "10.0.0.1" and e.hits == 5 and e.source == "fail2ban"
    assert e.ban_ns == (now - 100) * 10**9  # history: timeofban
    assert e.time_to_ban_ns == 3_500_000_000
    assert s1.active == 1
    assert e.expires_ns == (now - 100 + 600) * 10**9 and not e.permanent  # timeofban + bantime
    os.chmod(db, 0o644)
    add_ban(db, "10.0.0.9", now - 50, "{}", bantime=-1, jail="recidive")  # for ever
    (perm,) = p.sample().events
    assert perm.permanent and perm.expires_ns is None
    t_first = time.time() - 2.0
    add_ban(db, "10.0.0.2", int(time.time()), json.dumps({"matches": [bind_line(t_first, "10.0.0.2"),
                                                                       bind_line(t_first + 1, "10.0.0.2")]}))
    s2 = p.sample()
    (e2,) = s2.events
    assert e2.ip == "10.0.0.2" and e2.hits == 2
    assert 1.5e9 < e2.time_to_ban_ns < 5e9  # observed now, first line ~2 s ago
    assert s2.active == 3 and s2.records_seen == 3
    assert p.sample().events == ()
    con = sqlite3.connect(db)  # fail2ban-client set named-refused unbanip 10.0.0.2
    con.execute("DELETE FROM bips WHERE ip = '10.0.0.2'")
    con.commit()
    con.close()
    (un,) = p.sample().events
    assert (un.kind, un.ip, un.jail, un.source) == ("unban", "10.0.0.2", "named-refused", "fail2ban")


def test_hostile_rows_are_counted_not_raised(tmp_path):
    db = make_db(tmp_path)
    now = int(time.time())
    add_ban(db, "not-an-ip", now, "{}")
    add_ban(db, "10.0.0.3", now, "\x1b[2J not json")
    add_ban(db, "10.0.0.4", now, json.dumps({"matches": "nope", "failures": True}))
    add_ban(db, "10.0.0.5", now, json.dumps({"matches": [["old", "style"], 7, "\x1b[31m12-Zzz-2026"]}))
    s = Fail2BanProbe(db).sample()
    assert [e.ip for e in s.events] == ["10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert s.bad_records == 1 and s.records_seen == 4


def test_degrades_with_a_reason(tmp_path):
    p = Fail2BanProbe(str(tmp_path / "missing.sqlite3"))
    ok, why = p.available()
    assert not ok and "missing.sqlite3" in why
    assert p.sample().unavailable
    bad = tmp_path / "garbage.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    s = Fail2BanProbe(str(bad)).sample()
    assert "garbage.sqlite3" in s.unavailable and s.events == ()
    empty = tmp_path / "other.sqlite3"
    sqlite3.connect(empty).close()
    assert "no bans table" in Fail2BanProbe(str(empty)).sample().unavailable
