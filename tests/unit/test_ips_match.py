"""fipstop._ipsfast: matching, address extraction, counting, bounded memory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fipstop import _ipsfast
from fipstop.bans import MAX_EVENT_BYTES, BanEvent, decode, encode, event_parts, wire_str
from fipstop.ips.filters import FilterDef
from fipstop.ips.jails import BUILTIN_JAILS, JailSpec, compile_jail

S = 1_000_000_000
T0 = 1_700_000_000 * S


def denied(ip: str, header: str = "<30>named[77]: ") -> bytes:
    return f"{header}client @0x7f00aa {ip}#5353 (example.com): query (cache) 'example.com/A/IN' denied".encode()


def query(ip: str) -> bytes:
    return f"<30>named[77]: client @0x7f00aa {ip}#5353 (example.com): query: example.com IN A +E(0) (127.0.0.1)".encode()


def refused(**kw) -> object:
    return compile_jail(replace(BUILTIN_JAILS["named-refused"], **kw))


@pytest.mark.parametrize("line, want", [
    (denied("1.2.3.4"), ("hit", "1.2.3.4")),
    (denied("1.2.3.4", header=""), ("hit", "1.2.3.4")),  # native libfips producer: no syslog header
    (denied("9.9.9.9", header="myhost named[12]: "), ("hit", "9.9.9.9")),  # a file line with a host prefix
    (denied("2001:db8::1"), ("hit", "2001:db8::1")),
    (denied("::ffff:10.0.0.1"), ("hit", "10.0.0.1")),  # IPv4-mapped IPv6 is the IPv4 address
    (denied("2001:DB8:0:0::1"), ("hit", "2001:db8::1")),  # canonical form
    (denied("evil.example"), ("not_ip", None)),  # <HOST> matched a DNS name: never resolved
    (denied("999.1.1.1"), ("not_ip", None)),  # looks like IPv4, is not
    (query("1.2.3.4"), ("nomatch", None)),
    (b"", ("nomatch", None)),
    (b"<30>", ("nomatch", None)),
    (b"\xff\xfe\x00garbage\n", ("nomatch", None)),
])
def test_named_refused_match(line: bytes, want: tuple) -> None:
    assert refused().match(line) == want


def test_query_rate_jail_matches_query_lines_only() -> None:
    j = compile_jail(BUILTIN_JAILS["named-query-rate"])
    assert j.match(query("10.1.2.3")) == ("hit", "10.1.2.3")
    assert j.match(query("fe80::1")) == ("hit", "fe80::1")
    assert j.match(denied("10.1.2.3"))[0] == "nomatch"


def test_ignoreregex_and_ignoreip() -> None:
    f = FilterDef("t", failregex=(r"^fail from <HOST>$",), ignoreregex=(r"from 10\.9\.",))
    j = compile_jail(JailSpec("t", f, maxretry=1, ignoreip=("192.168.0.0/16", "2001:db8::/32 127.0.0.1")))
    assert j.match(b"fail from 10.9.0.1") == ("ignored", None)
    assert _ipsfast.feed_lines([b"fail from 192.168.7.7", b"fail from 2001:db8::5", b"fail from 127.0.0.1",
                                b"fail from 10.9.0.1"], T0, (j,)) == []
    st = j.stats()
    assert (st["matched"], st["ignored_ip"], st["ignored"], st["tracked"]) == (3, 3, 1, 0)
    assert [t[1] for t in _ipsfast.feed_lines([b"fail from 192.169.0.1"], T0, (j,))] == ["192.169.0.1"]


def test_window_counts_like_fail2ban() -> None:
    j = refused(maxretry=3, findtime_s=10, bantime_s=60)
    ip = "10.0.0.1"
    assert _ipsfast.feed_lines([denied(ip)], T0, (j,)) == []
    assert _ipsfast.feed_lines([denied(ip)], T0 + 1 * S, (j,)) == []
    (t,) = _ipsfast.feed_lines([denied(ip)], T0 + 2 * S, (j,))
    assert t == ("named-refused", ip, T0, T0 + 2 * S, 3, None)  # first offending record, the crossing one, hits
    # banned: further hits are counted, no second trigger
    assert _ipsfast.feed_lines([denied(ip)] * 10, T0 + 3 * S, (j,)) == []
    assert j.stats()["hits_while_banned"] == 10
    # hits further apart than findtime never add up
    other = "10.0.0.2"
    for k in range(6):
        assert _ipsfast.feed_lines([denied(other)], T0 + k * 11 * S, (j,)) == []
    # after bantime (record time) the address counts again
    assert _ipsfast.feed_lines([denied(ip)] * 3, T0 + 70 * S, (j,))[0][1] == ip


def test_bucket_leaks() -> None:
    # capacity 5, leaks 5 per 10 s: one hit every 2.5 s never overflows; a burst does
    j = refused(maxretry=5, findtime_s=10, mode="bucket")
    for k in range(40):
        assert _ipsfast.feed_lines([denied("10.0.0.3")], T0 + int(k * 2.5 * S), (j,)) == []
    trig = _ipsfast.feed_lines([denied("10.0.0.4")] * 5, T0, (j,))
    assert [(t[1], t[4]) for t in trig] == [("10.0.0.4", 5)]


def test_several_jails_one_pass_and_order() -> None:
    a = refused(maxretry=2)
    b = compile_jail(replace(BUILTIN_JAILS["named-query-rate"], maxretry=2))
    lines = [denied("10.0.0.1"), query("10.0.0.9"), denied("10.0.0.1"), query("10.0.0.9")]
    trig = _ipsfast.feed_lines(lines, T0, (a, b))
    assert sorted((t[0], t[1]) for t in trig) == [("named-query-rate", "10.0.0.9"), ("named-refused", "10.0.0.1")]


def test_ipv6_prefix_aggregation() -> None:
    spec = replace(BUILTIN_JAILS["named-refused"], maxretry=3, v6_prefix=64)
    j = compile_jail(spec)
    trig = _ipsfast.feed_lines([denied("2001:db8:1:2::1"), denied("2001:db8:1:2::2"), denied("2001:db8:1:2:ff::3")],
                               T0, (j,))
    assert [t[1] for t in trig] == ["2001:db8:1:2::"]


def test_flood_of_unique_addresses_is_bounded() -> None:
    j = refused(maxretry=3, findtime_s=600, max_tracked=1000)
    cap = j.capacity
    n = 50_000
    lines = [denied(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}") for i in range(n)]
    for k in range(0, n, 5000):
        assert _ipsfast.feed_lines(lines[k:k + 5000], T0 + k, (j,)) == []
    st = j.stats()
    assert st["tracked"] <= 1000
    assert st["evictions"] >= n - 1000
    assert j.capacity == cap  # the table never grows
    # a real attacker still gets banned in the middle of the flood
    trig = _ipsfast.feed_lines([denied("172.16.0.1")] * 3, T0 + n, (j,))
    assert [t[1] for t in trig] == ["172.16.0.1"]


def test_state_expires_after_findtime() -> None:
    j = refused(maxretry=5, findtime_s=1, max_tracked=10_000)
    _ipsfast.feed_lines([denied(f"10.0.{i >> 8}.{i & 255}") for i in range(2000)], T0, (j,))
    assert j.stats()["tracked"] == 2000
    j.expire(T0 + 5 * S, 1 << 20)  # a sweep over the whole table, as the scheduler does bit by bit
    st = j.stats()
    assert st["tracked"] == 0 and st["expired"] == 2000 and st["evictions"] == 0


def test_truncated_records_counted_matched_or_skipped() -> None:
    trunc = _ipsfast.REC_TRUNC
    j = refused(maxretry=1)
    assert len(_ipsfast.feed_lines([denied("10.0.0.1")], T0, (j,), trunc)) == 1
    assert j.stats()["truncated"] == 1
    # a truncated line that lost its end does not match (the filter needs "denied$")
    assert _ipsfast.feed_lines([denied("10.0.0.2")[:60]], T0, (j,), trunc) == []
    s = refused(maxretry=1, skip_truncated=True)
    assert _ipsfast.feed_lines([denied("10.0.0.1")], T0, (s,), trunc) == []
    st = s.stats()
    assert (st["truncated"], st["truncated_skipped"], st["matched"]) == (1, 1, 0)


def test_unban_forgets() -> None:
    j = refused(maxretry=1)
    assert len(_ipsfast.feed_lines([denied("10.0.0.1")], T0, (j,))) == 1
    assert _ipsfast.feed_lines([denied("10.0.0.1")], T0, (j,)) == []
    assert j.unban("10.0.0.1") is True
    assert j.unban("10.0.0.1") is False
    assert len(_ipsfast.feed_lines([denied("10.0.0.1")], T0, (j,))) == 1
    with pytest.raises(ValueError):
        j.unban("not-an-ip")


def test_bad_jail_arguments() -> None:
    a = ("a", "a", (-1,), ())
    with pytest.raises(ValueError, match="PCRE2 refuses"):
        _ipsfast.Jail("x", [("(unclosed", "(unclosed", (-1,), ())])
    with pytest.raises(TypeError, match="a regex is"):
        _ipsfast.Jail("x", ["a plain string"])
    with pytest.raises(ValueError, match="needs a failregex"):
        _ipsfast.Jail("x", [])
    with pytest.raises(ValueError):
        _ipsfast.Jail("x", [a], (), None, 0)
    with pytest.raises(ValueError):
        _ipsfast.Jail("x", [a], mode="sideways")
    with pytest.raises(ValueError, match="out of range"):
        _ipsfast.Jail("x", [("(a)", "(a)", (-1, 3), ())], names=("user",))
    with pytest.raises(TypeError):
        _ipsfast.feed_lines([b"x"], 0, ["not a jail"])
    with pytest.raises(TypeError):
        _ipsfast.feed_lines(["str"], 0, (refused(),))


def test_feed_reads_ring_batches(shm_dir: Path) -> None:
    from fipstop import _fips

    j = refused(maxretry=2)
    with _fips.Domain("m", shm_dir, ring_capacity=1 << 16, max_record=512) as d:
        p = _fips.Producer(d)
        c = _fips.Consumer(d, "ips")
        p.log(denied("10.0.0.1"))
        p.log(b"noise")
        p.log(denied("10.0.0.1"))
        b = c.read()
        ts = [r.ts_ns for r in b]
        trig = _ipsfast.feed(b, (j,))
        b.release()
        assert trig == [("named-refused", "10.0.0.1", ts[0], ts[2], 2, None)]
        assert j.stats()["records"] == 3 and j.stats()["nomatch"] == 1


def test_format_events_is_encode() -> None:
    data = (("user", "r\u00f6\"ot\x7f\x01" + "x" * 100), ("alt_user", "\U0001f600"), ("fport", "22"))
    many = tuple((f"k{i}", "v" * 60) for i in range(8))  # more than fits: the first items only
    trig = [("named-refused", "10.0.0.1", 1, 2, 5), ("we\"ird\tjail%s", "2001:db8::1", 10, 20, 7, None),
            ("sshd", "10.0.0.2", 3, 4, 5, data), ("sshd", "10.0.0.3", 3, 4, 5, many), ("sshd", "10.0.0.4", 3, 4, 5, ())]
    jj = {t[0]: wire_str(t[0]) for t in trig}
    for kind, action, result in (("ban", "dry-run", "ok"), ("unban", "nft", "nft exit 1: \"no\" 100%")):
        head, tail = event_parts(kind, action, result)
        out = _ipsfast.format_events(trig, head, jj, 99, tail)
        want = [encode(BanEvent(kind, t[1], t[0], t[2], t[3], 99, t[4], action, result, data=t[5] or ()))
                if len(t) > 5 else encode(BanEvent(kind, t[1], t[0], t[2], t[3], 99, t[4], action, result))
                for t in trig]
        assert out == want
        assert all(len(o) <= MAX_EVENT_BYTES for o in out)
        ev = decode(out[2])
        assert ev.data == (("user", data[0][1][:64]), ("alt_user", data[1][1]), ("fport", "22"))
        assert 1 <= len(decode(out[3]).data) < 8 and b'"data"' not in out[4]
