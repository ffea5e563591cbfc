"""The CrowdSec ban source against a database with CrowdSec 1.4.6's own schema (the two tables as its ORM creates
them), rows the test wrote: the events, their times and the bans in force are what the rows say; hostile rows are
counted, never raised."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from fipstop.probes.crowdsec import CrowdSecProbe, parse_time_ns, running

# CrowdSec 1.4.6 (Debian 12), `select sql from sqlite_master` of a fresh database
SCHEMA = [
    "CREATE TABLE `alerts` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `created_at` datetime NULL, "
    "`updated_at` datetime NULL, `scenario` text NOT NULL, `bucket_id` text NULL DEFAULT '', `message` text NULL "
    "DEFAULT '', `events_count` integer NULL DEFAULT 0, `started_at` datetime NULL, `stopped_at` datetime NULL, "
    "`source_ip` text NULL, `source_range` text NULL, `source_as_number` text NULL, `source_as_name` text NULL, "
    "`source_country` text NULL, `source_latitude` real NULL, `source_longitude` real NULL, `source_scope` text "
    "NULL, `source_value` text NULL, `capacity` integer NULL, `leak_speed` text NULL, `scenario_version` text NULL, "
    "`scenario_hash` text NULL, `simulated` bool NOT NULL DEFAULT false, `machine_alerts` integer NULL)",
    "CREATE TABLE `decisions` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `created_at` datetime NULL, "
    "`updated_at` datetime NULL, `until` datetime NULL, `scenario` text NOT NULL, `type` text NOT NULL, `start_ip` "
    "integer NULL, `end_ip` integer NULL, `start_suffix` integer NULL, `end_suffix` integer NULL, `ip_size` integer "
    "NULL, `scope` text NOT NULL, `value` text NOT NULL, `origin` text NOT NULL, `simulated` bool NOT NULL DEFAULT "
    "false, `alert_decisions` integer NULL, CONSTRAINT `decisions_alerts_decisions` FOREIGN KEY (`alert_decisions`) "
    "REFERENCES `alerts` (`id`) ON DELETE CASCADE)",
]
T0 = 1_796_184_000  # a second of 2026, UTC


def stamp(secs: float) -> str:
    whole = int(secs)
    frac = round((secs - whole) * 1e9)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f".{frac:09d}+00:00"


def make_db(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    for s in SCHEMA:
        con.execute(s)
    return con


def add(con: sqlite3.Connection, ip: str, first: float, overflow: float, decided: float, until: float,
        scope: str = "Ip", typ: str = "ban", count: int = 6) -> None:
    cur = con.execute("INSERT INTO alerts (created_at, scenario, events_count, started_at, stopped_at, source_ip, "
                      "source_scope, source_value) VALUES (?, 'mstilkerich/bind9-refused', ?, ?, ?, ?, ?, ?)",
                      (stamp(decided), count, stamp(first), stamp(overflow), ip, scope, ip))
    con.execute("INSERT INTO decisions (created_at, updated_at, until, scenario, type, scope, value, origin, "
                "alert_decisions) VALUES (?, ?, ?, 'mstilkerich/bind9-refused', ?, ?, ?, 'crowdsec', ?)",
                (stamp(decided), stamp(decided), stamp(until), typ, scope, ip, cur.lastrowid))
    con.commit()


def test_parse_time():
    assert parse_time_ns("2026-12-02 04:22:53.458947081+00:00") == parse_time_ns("2026-12-02T04:22:53.458947081Z")
    assert parse_time_ns("2026-12-02 06:22:53.5+02:00") == parse_time_ns("2026-12-02 04:22:53.500000000+00:00")
    assert parse_time_ns(stamp(T0 + 0.25)) == T0 * 1_000_000_000 + 250_000_000
    for bad in ("", "yesterday", "2026-13-01 00:00:00", None, 5, "2026-12-02 04:22:53" + "9" * 80):
        assert parse_time_ns(bad) is None


def test_history_then_new_decisions_with_their_times(tmp_path):
    db = tmp_path / "crowdsec.db"
    con = make_db(db)
    now = time.time()
    add(con, "10.96.0.1", now - 100, now - 94, now - 93.5, now + 3600)  # before the probe started: history
    probe = CrowdSecProbe(str(db))
    assert probe.available() == (True, "")
    s1 = probe.sample()
    assert s1.source == "crowdsec" and s1.unavailable == "" and s1.active == 1
    (ev,) = s1.events
    assert (ev.ip, ev.jail, ev.hits, ev.action, ev.result) == ("10.96.0.1", "mstilkerich/bind9-refused", 6,
                                                              "crowdsec:ban", "ok")
    assert ev.time_to_ban_ns == 6_500_000_000 and ev.reaction_ns == 500_000_000
    assert ev.expires_ns is not None and abs(ev.expires_ns - (now + 3600) * 1e9) < 1e6  # the decision's until
    add(con, "10.96.0.2", now - 10, now - 4, now - 3, now - 1)  # already expired: not in force
    add(con, "10.96.1.0/24", now - 9, now - 3, now - 2, now + 60, scope="Range")
    add(con, "10.96.0.1", now - 100, now - 94, now - 2, now + 3600)  # decided on again: one address in force
    s2 = probe.sample()
    assert [e.ip for e in s2.events] == ["10.96.0.2", "10.96.1.0/24", "10.96.0.1"]
    assert s2.active == 2 and s2.records_seen == 4 and s2.bad_records == 0
    assert probe.sample().events == ()


def test_hostile_rows_are_counted(tmp_path):
    db = tmp_path / "crowdsec.db"
    con = make_db(db)
    probe = CrowdSecProbe(str(db))
    probe.sample()
    now = time.time()
    add(con, "not-an-ip\x1b[31m", now - 5, now - 4, now - 3, now + 60)
    add(con, "FR", now - 5, now - 4, now - 3, now + 60, scope="Country")
    con.execute("INSERT INTO decisions (created_at, until, scenario, type, scope, value, origin) VALUES "
                "('garbage', 'x', 's', 'ban', 'Ip', '10.0.0.1', 'cscli')")
    con.commit()
    add(con, "2001:db8::1", now - 5, now - 4, now - 3, now + 60)
    # a decision without an alert (cscli decisions add): no first offence, so no time-to-ban to invent
    con.execute("INSERT INTO decisions (created_at, until, scenario, type, scope, value, origin) VALUES "
                "(?, ?, 'manual', 'ban', 'Ip', '10.0.0.2', 'cscli')", (stamp(now - 1), stamp(now + 60)))
    con.commit()
    s = probe.sample()
    assert [e.ip for e in s.events] == ["2001:db8::1"] and s.bad_records == 4 and s.records_seen == 5
    # in force is CrowdSec's own view (every ban decision ahead of its end, whatever its scope or value): not the
    # row whose end does not parse
    assert s.active == 4


def test_not_crowdsec_or_missing(tmp_path):
    assert CrowdSecProbe(str(tmp_path / "none.db")).sample().unavailable.startswith("no CrowdSec database")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)")
    assert "no decisions table" in CrowdSecProbe(str(other)).sample().unavailable
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    s = CrowdSecProbe(str(bad)).sample()
    assert s.unavailable and s.events == ()


def test_running_reads_comm(tmp_path):
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "comm").write_text("named\n")
    assert not running(str(tmp_path))
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "comm").write_text("crowdsec\n")
    assert running(str(tmp_path)) and not running(str(tmp_path / "missing"))


def test_the_model_shows_crowdsec_beside_the_other_sources(tmp_path):
    """A frame carrying the probe's real sample (from rows the test wrote) becomes a third source of the Bans
    panel's model, failures included."""
    from fipstop import fixtures
    from fipstop.bans import BanEvent
    from fipstop.model.raw import ProbeFailure, RawFrame
    from fipstop.model.snapshot import ModelStep
    from fipstop.probes import names
    from fipstop.probes.bans import BansSample

    db = tmp_path / "crowdsec.db"
    con = make_db(db)
    probe = CrowdSecProbe(str(db))
    step = ModelStep()
    ips = BansSample("fipstop-ips", 1, 1, (BanEvent("ban", "10.9.0.1", "named-refused", 0, 1, 1, 5, "nft", "ok"),))
    step(RawFrame(fixtures.raw_sample(1, []), {names.CROWDSEC: probe.sample(), names.BANS: ips}))
    now = time.time()
    for i in range(3):
        add(con, f"10.96.0.{i}", now - 5, now - 4, now - 3, now + 60)
    bans = step(RawFrame(fixtures.raw_sample(2, []), {names.CROWDSEC: probe.sample()})).snapshot.bans
    assert bans is not None
    cs = bans.source("crowdsec")
    assert cs is not None and cs.bans_total == 3 and cs.active == 3
    assert bans.source("fipstop-ips").bans_total == 1
    gone = step(RawFrame(fixtures.raw_sample(3, []), {names.CROWDSEC: ProbeFailure(names.CROWDSEC, "locked")}))
    assert gone.snapshot.bans.source("crowdsec").unavailable == "locked"
