"""fipstop demo: argument checks (one line, exit 2) and the summary's arithmetic."""

from __future__ import annotations

from fipstop.cli import main
from fipstop.demo import format_summary, is_attacker, percentile


def test_bad_arguments_are_one_line(capsys, tmp_path):
    for argv in (["demo", "--attackers", "70000"], ["demo", "--attack-rate", "x"], ["demo", "--duration", "0"]):
        assert main(["--shm-dir", str(tmp_path), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err


def test_bad_domain_name(capsys, tmp_path):
    assert main(["--shm-dir", str(tmp_path), "demo", "--headless", "--domain", "../x"]) == 2
    assert "not a domain name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_percentile_and_attackers():
    assert percentile([], 0.5) is None
    assert percentile([1, 2, 3, 4], 0.5) == 2 and percentile([1, 2, 3, 4], 0.99) == 4
    assert is_attacker("198.18.0.1") and is_attacker("198.19.255.255")
    assert not is_attacker("198.20.0.1") and not is_attacker("192.0.2.1") and not is_attacker("x")


def test_format_summary():
    s = {"seconds": 5.0, "producer": {"threads": 2, "legit_lines": 10, "attack_lines": 100, "dropped": 0},
         "records_committed": 110, "records_dropped": 0, "ips": {"records": 110, "matched": 100, "bans": 4},
         "ban_events": 4, "unban_events": 0, "failed_bans": 0, "ban_events_lost": 0, "bad_ban_records": 0,
         "attackers": 4, "attackers_banned": 4, "legit_banned": 0,
         "time_to_ban_ms": {"p50": 1.5, "p90": 2.0, "p99": 2500.0, "max": 3000.0},
         "reaction_ms": {"p50": 0.2, "p99": None}, "slow_consumer_ms": 0}
    text = format_summary(s)
    assert "4 banned of 4 (100.0 %)" in text and "p99 2.50 s" in text and "p50 1.50 ms" in text


def test_ban_collector_leaves_out_of_order_stamps_unknown() -> None:
    """A ban whose stamps are out of order (the wall clock stepped back) has no true time to ban: the demo's
    summary leaves it out rather than counting 0 ms (max(0, ...) did), and keeps the others exact."""
    from fipstop.demo import BanCollector

    c = BanCollector("unused", "/nonexistent")
    c.first_ban = {"10.0.0.1": (100, 300, 1_000),  # in order: 900 / 700 ns
                   "10.0.0.2": (500, 400, 1_000),  # first hit read after the crossing one: both true
                   "10.0.0.3": (100, 300, 200),    # ban before the trigger: reaction unknown
                   "10.0.0.4": (300, 300, 200)}    # ban before both: both unknown
    assert c.times_to_ban_ns() == ([100, 500, 900], [600, 700])
