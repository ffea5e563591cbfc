"""Multi-line filters (maxlines, <SKIPLINES>) and <F-MLFID> sessions
(<F-NOFAIL>, <F-MLFGAINED>, <F-MLFFORGET>, pending failures), with their
memory bounds: an attacker opens sessions and writes the lines."""

from __future__ import annotations

import time

import pytest

from fipstop import _ipsfast
from fipstop.ips.filters import FilterDef
from fipstop.ips.jails import JailSpec, compile_jail

pytestmark = pytest.mark.skipif(not _ipsfast.available()[0], reason="libpcre2-8 is not installed")

S = 1_000_000_000
T0 = 1_700_000_000 * S


def jail(f: FilterDef, **kw):
    return compile_jail(JailSpec(f.name, f, **kw))


# --- maxlines ------------------------------------------------------------------------------

TWO_LINES = FilterDef("two", failregex=(r"^.*\nWARNING: Authentication attempt from <HOST> for user "
                                        r"\"<F-USER>[^\"]*</F-USER>\" failed\.$",), maxlines=2, datepattern="{NONE}")


def test_two_line_failure_per_source() -> None:
    j = jail(TWO_LINES)
    assert j.stateful
    first = b"Apr 16, 2013 8:32:28 AM org.apache.guacamole.net.basic.BasicAuthenticationProvider authenticate"
    second = b'WARNING: Authentication attempt from 192.0.2.7 for user "pippo" failed.'
    assert j.check(first, source=1)["result"] == "nomatch"
    assert j.check(first, source=2)["result"] == "nomatch"  # another source, its own buffer
    r = j.check(second, source=1)
    assert (r["result"], r["ip"], r["groups"]["user"]) == ("hit", "192.0.2.7", "pippo")
    # the matched lines left source 1's buffer: the same line again has no line before it
    assert j.check(second, source=1)["result"] == "nomatch"
    assert j.check(second, source=1)["result"] == "hit"  # [second, second]: ".*\n" takes the first
    assert j.match(second) == ("nomatch", None)  # maxlines 2 and one line: Fail2Ban matches nothing either


SKIP = FilterDef("mongo", failregex=(
    r"^\s+\[conn(?P<__connid>\d+)\] Failed to authenticate [^\n]+<SKIPLINES>\s+\[conn(?P=__connid)\] end connection "
    r"<HOST>",), maxlines=10, datepattern="{NONE}")


def test_skiplines_joins_the_lines_of_one_connection() -> None:
    j = jail(SKIP)
    lines = [b" [conn7] Failed to authenticate admin@admin with mechanism SCRAM-SHA-1",
             b" [conn8] something else", b" [conn9] Failed to authenticate root@admin",
             b" [conn7] end connection 192.0.2.35:53276", b" [conn9] end connection 192.0.2.36:1"]
    res = [j.check(ln)["result"] for ln in lines]
    assert res == ["nomatch", "nomatch", "nomatch", "hit", "hit"]
    st = j.stats()
    assert st["failregex_hits"] == [0]  # check() counts nothing


def test_sources_are_bounded() -> None:
    j = jail(TWO_LINES)
    for src in range(1500):
        j.check(b"first line", source=src)
    # check() does not count; feed_lines does, and stats show the bound
    _ipsfast.feed_lines([b"x"] * 3, T0, (j,), 0, 99999)
    st = j.stats()
    assert st["sources"] <= 1024 and st["sources_evicted"] >= 1500 - 1024


def test_a_huge_line_is_bounded_in_the_buffer() -> None:
    j = jail(TWO_LINES)
    big = b"A" * (1 << 21)  # 2 MiB: matched on its first 1 MiB, buffered on its first 32 KiB
    assert j.check(big)["result"] == "nomatch"
    assert j.check(b'WARNING: Authentication attempt from 192.0.2.9 for user "u" failed.')["result"] == "hit"


# --- sessions ----------------------------------------------------------------------------------

SESS = FilterDef(
    "sess", prefregex=r"^<F-MLFID>s\d+</F-MLFID>: <F-CONTENT>.+</F-CONTENT>$",
    failregex=(r"^<F-NOFAIL>connect</F-NOFAIL> from <HOST>$",
               r"^auth fail user <F-USER>\S+</F-USER>$",
               r"^<F-NOFAIL>bad key user <F-USER>\S+</F-USER></F-NOFAIL>$",
               r"^<F-MLFFORGET>disconnect</F-MLFFORGET>$",
               r"^<F-MLFFORGET><F-MLFGAINED>login ok</F-MLFGAINED></F-MLFFORGET> user <F-USER>\S+</F-USER>$",
               r"^fail from <HOST>$"),
    datepattern="{NONE}")


def results(j, lines: list[str]) -> list[tuple[str, str | None]]:
    out = []
    for ln in lines:
        r = j.check(ln.encode())
        out.append((r["result"], r["ip"]))
    return out


def test_session_gives_its_address_to_later_failures() -> None:
    j = jail(SESS)
    assert results(j, ["s1: connect from 10.0.0.1", "s1: auth fail user bob", "s2: auth fail user eve"]) == [
        ("nofail", None), ("hit", "10.0.0.1"), ("pending", None)]
    # the pending failure of s2 is a failure once s2's address is known, though the line is nofail
    assert results(j, ["s2: connect from 10.0.0.2"]) == [("hit", "10.0.0.2")]
    r = j.check(b"s1: auth fail user bob")
    assert r["groups"]["user"] == "bob" and r["groups"]["mlfid"] == "s1"


def test_forget_ends_the_session() -> None:
    j = jail(SESS)
    assert results(j, ["s1: connect from 10.0.0.1", "s1: disconnect", "s1: auth fail user bob"]) == [
        ("nofail", None), ("hit", "10.0.0.1"), ("pending", None)]


def test_success_and_several_users() -> None:
    j = jail(SESS)
    # a nofail attempt for one user is no failure; a second user in the same session is
    assert results(j, ["s3: connect from 10.0.0.3", "s3: bad key user alice", "s3: bad key user mallory"]) == [
        ("nofail", None), ("nofail", None), ("hit", "10.0.0.3")]
    # a successful login (gained + forget) is no failure and ends the session
    assert results(j, ["s4: connect from 10.0.0.4", "s4: login ok user alice", "s4: auth fail user x"]) == [
        ("nofail", None), ("nofail", None), ("pending", None)]


def test_sessions_are_bounded_and_evicted() -> None:
    j = jail(SESS, max_sessions=8)
    for i in range(1000):
        j.check(f"s{i}: connect from 10.1.{i >> 8}.{i & 255}".encode())
    _ipsfast.feed_lines([b"s5000: connect from 10.9.9.9"], T0, (j,))
    st = j.stats()
    assert st["sessions"] <= 8 and st["sessions_evicted"] >= 990
    # a long value is cut, the session stays bounded
    r = j.check(b"s1: auth fail user " + b"u" * 100_000)
    assert r["result"] == "pending" and len(r["groups"]["user"]) <= 255


def test_sessions_expire() -> None:
    j = jail(SESS, session_s=60)
    j.check(b"s1: connect from 10.0.0.1", ts_ns=T0)
    assert j.check(b"s1: auth fail user bob", ts_ns=T0 + 30 * S)["result"] == "hit"
    assert j.check(b"s1: auth fail user bob", ts_ns=T0 + 61 * S)["result"] == "pending"


def test_ban_events_carry_the_failure_data() -> None:
    j = jail(SESS, maxretry=2)
    trig = _ipsfast.feed_lines([b"s1: connect from 10.0.0.1", b"s1: auth fail user bob", b"s1: auth fail user bob"],
                               T0, (j,))
    assert len(trig) == 1
    name, ip, _f, _t, hits, data = trig[0]
    assert (ip, hits) == ("10.0.0.1", 2) and ("user", "bob") in data
    st = j.stats()
    assert (st["nofail"], st["matched"], st["failregex_hits"][:2]) == (1, 2, [1, 2])


class FakeBatch(list):
    """What feed() reads of a fipstop._fips.Batch: records plus ring / first_seq / next_seq."""

    def __init__(self, ring: int, first: int, lines: list[bytes]) -> None:
        super().__init__(lines)
        self.ring, self.first_seq, self.next_seq = ring, first, first + len(lines)


def test_a_stateful_jail_waits_for_the_earlier_batch_of_a_ring() -> None:
    j = jail(SESS)
    _ipsfast.feed(FakeBatch(3, 1, [b"s1: connect from 10.0.0.1"]), (j,))
    t = time.monotonic()
    _ipsfast.feed(FakeBatch(3, 2, [b"s1: auth fail user a"]), (j,))  # in order: no wait
    assert time.monotonic() - t < 0.04 and j.stats()["order_waits"] == 0
    t = time.monotonic()
    _ipsfast.feed(FakeBatch(3, 10, [b"s1: auth fail user a"]), (j,))  # batch 3..10 never comes: 50 ms
    assert time.monotonic() - t >= 0.045 and j.stats()["order_waits"] >= 1


def test_invalid_utf8_is_replaced_not_a_miss() -> None:
    """A stray byte in attacker text must not make the line unmatchable (Fail2Ban decodes with
    errors='replace')."""
    f = FilterDef("u", failregex=(r"^user (?P<user>.+) failed from <HOST>$",), datepattern="{NONE}")
    r = jail(f).check(b"user b\xffob\xc3 failed from 10.0.0.5")
    assert (r["result"], r["ip"], r["groups"]["user"]) == ("hit", "10.0.0.5", "b\ufffdob\ufffd")
    r = jail(f).check("user müller failed from 10.0.0.6".encode())
    assert r["groups"]["user"] == "müller"
    w = FilterDef("w", failregex=(r"^user \w+ failed from <HOST>$",), datepattern="{NONE}")
    assert jail(w).match("user müller failed from 10.0.0.7".encode()) == ("hit", "10.0.0.7")
