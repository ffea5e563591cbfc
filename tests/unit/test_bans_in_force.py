"""The bans-in-force list (``BanStats.in_force``): exact against an oracle that replays the same fixture,
bounded per source at 2^16 attackers, expiry by the source's clock, and old recordings still load."""

from __future__ import annotations

import dataclasses

from fipstop.bans import BanEvent
from fipstop.model.bans import IN_FORCE_MAX, derive_bans
from fipstop.probes.bans import BansSample
from fipstop.recording.auxcodec import from_jsonable, to_jsonable

S = 1_000_000_000
T0 = 1_764_000_000 * S  # a realtime clock: 2025-11


def ban(i: int, *, source="fipstop-ips", jail="named-refused", at=0, expires=None, permanent=False, kind="ban"):
    ip = f"198.18.{(i >> 8) & 255}.{i & 255}"
    return BanEvent(kind, ip, jail, T0 + at - S, T0 + at, T0 + at, 5, "dry-run", "ok", source,
                    expires_ns=expires, permanent=permanent)


def sample(t_s: float, events, source="fipstop-ips", active=None):
    return BansSample(source, int(t_s * S), T0 + int(t_s * S), tuple(events), active=active, probe=source)


def oracle(samples_per_frame):
    """The bans in force after each frame, the naive way: a list, expiry checked against every sample's clock."""
    live: dict[tuple[str, str, str], BanEvent] = {}
    for frame in samples_per_frame:
        for s in frame:
            for e in s.events:
                k = (s.source, e.jail, e.ip)
                if e.kind == "ban":
                    live.pop(k, None)
                    live[k] = e
                else:
                    live.pop(k, None)
            for k in [k for k, e in live.items() if k[0] == s.source and e.expires_ns is not None
                      and e.expires_ns <= s.taken_realtime_ns]:
                del live[k]
    return live


def test_list_and_counts_exact_with_unbans_and_expiry():
    frames = [
        [sample(1, [ban(i, at=i * 1000) for i in range(300)]),
         sample(1, [ban(i, source="fail2ban", jail="sshd", at=i, expires=T0 + (i + 2) * S) for i in range(10)]
                + [ban(99, source="fail2ban", jail="sshd", permanent=True)], source="fail2ban", active=11)],
        [sample(2, [ban(i, kind="unban") for i in range(0, 300, 3)]),
         sample(2, [], source="fail2ban", active=11)],
        [sample(5, [ban(7, at=5 * S)]),  # banned again: listed once, with the newer time
         sample(5, [], source="fail2ban", active=8)],  # expires at T0+2..T0+11 s: 0..3 are over at T0+5 s
    ]
    st = None
    for f in frames:
        st = derive_bans(st, f)
    assert st is not None
    want = oracle(frames)
    got = {(e.source, e.jail, e.ip): e for e in st.in_force}
    assert got == want
    assert st.source("fipstop-ips").active == 200 == st.listed("fipstop-ips")
    assert st.listed("fail2ban") == 7  # 4..9 with an end ahead, and the permanent one
    assert st.listed_partial  # 8 in force (the source's count) > 7 listed
    assert [e.ban_ns for e in st.in_force] == sorted((e.ban_ns for e in st.in_force), reverse=True)
    assert st.in_force[0].ip == ban(7).ip and st.in_force[0].ban_ns == T0 + 5 * S
    perm = got[("fail2ban", "sshd", ban(99).ip)]
    assert perm.permanent and perm.expires_ns is None


def test_bound_respected_at_65536_attackers():
    n = 1 << 16
    st = derive_bans(None, [sample(1, [ban(i, at=i) for i in range(n)]),
                            sample(1, [ban(i, source="crowdsec", jail="crowdsecurity/http-probing", at=i,
                                           expires=T0 + 4 * 3600 * S) for i in range(3)],
                                   source="crowdsec", active=3)])
    s = st.source("fipstop-ips")
    assert s.active == n  # the count is exact above the bound
    assert st.listed("fipstop-ips") == IN_FORCE_MAX and st.listed_partial
    assert st.listed("crowdsec") == 3  # a small source is not crowded out by a big one
    # the newest IN_FORCE_MAX, exactly
    want = {ban(i).ip for i in range(n - IN_FORCE_MAX, n)}
    assert {e.ip for e in st.in_force if e.source == "fipstop-ips"} == want
    shown = st.shown()
    assert len(shown.in_force) == IN_FORCE_MAX + 3 and not shown.active_keys  # a snapshot keeps the bounded list
    # a frame with nothing new reuses the list (no rebuild over the 2^16 map)
    st2 = derive_bans(st, [sample(2, [])])
    assert st2.in_force is st.in_force and st2.source("fipstop-ips").active == n
    assert st2.active_keys is st.active_keys  # nor a copy of it


def test_an_end_due_in_a_frame_without_events_takes_the_ban_off():
    st = derive_bans(None, [sample(1, [ban(1, source="crowdsec", expires=T0 + 3 * S), ban(2, source="crowdsec"),
                                       ban(3, source="crowdsec", expires=T0 + 9 * S)], source="crowdsec", active=3)])
    assert st.next_expiry_ns == T0 + 3 * S
    st = derive_bans(st, [sample(2, [], source="crowdsec", active=3)])
    assert len(st.in_force) == 3
    st = derive_bans(st, [sample(3, [], source="crowdsec", active=2)])  # the first one's end: no event says so
    assert {e.ip for e in st.in_force} == {ban(2).ip, ban(3).ip} and st.next_expiry_ns == T0 + 9 * S
    assert st.jails[0].active == 2 and st.source("crowdsec").active == 2


def test_old_recording_events_load_with_expiry_unknown():
    e = ban(1, source="fail2ban", expires=T0 + S)
    j = to_jsonable(BansSample("fail2ban", 1, T0, (e,), probe="fail2ban"))
    text = repr(j)
    assert "expires_ns" in text

    def strip(o):  # a recording made before the fields existed
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("expires_ns", "permanent")}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    old = from_jsonable(strip(j))
    assert isinstance(old, BansSample)
    ev = old.events[0]
    assert ev.expires_ns is None and not ev.permanent
    assert dataclasses.replace(ev, expires_ns=e.expires_ns) == e
    st = derive_bans(None, [old])
    assert st.in_force == (ev,)
