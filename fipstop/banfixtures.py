"""Deterministic ban samples for tests and screenshots (no clock, no shm).

``demo_ban_aux(n)`` gives, per frame of :func:`fipstop.fixtures.demo_samples`,
the ``Frame.aux`` a live dashboard would get from the bans probe and the
Fail2Ban probe during an attack that starts at t = 20 s: ``fipstop ips`` bans
within milliseconds, Fail2Ban (polling a query log file) seconds later and
fewer of them; a few records the probe could not decode, one failed action.
``hostile=True`` puts terminal escapes and markup into jail and result text.
"""

from __future__ import annotations

from fipstop.bans import BanEvent
from fipstop.fixtures import EPOCH_MONO_NS, EPOCH_REALTIME_NS, HOSTILE_THREAD
from fipstop.probes.bans import BansSample

ATTACK_START_S = 20
#: Fail2Ban's bantime in the fixture (its default, 10 min): each ban's end is timeofban + this
F2B_BANTIME_NS = 600_000_000_000


def _ip(i: int) -> str:
    return f"198.18.{(i >> 8) & 255}.{i & 255}"


def demo_ban_aux(n: int = 58, interval_s: float = 1.0, *, hostile: bool = False,
                 fail2ban: bool = True) -> list[dict]:
    out: list[dict] = []
    ips_seen = f2b_seen = bad = 0
    ips_n = f2b_n = 0
    jail = HOSTILE_THREAD if hostile else "named-refused"
    for k in range(n):
        t = k * interval_s
        mono = EPOCH_MONO_NS + int(round(t * 1e9))
        real = EPOCH_REALTIME_NS + int(round(t * 1e9))
        ips_events: list[BanEvent] = []
        f2b_events: list[BanEvent] = []
        if t >= ATTACK_START_S:
            ramp = min(t - ATTACK_START_S + 1, 12)
            for _ in range(int(40 * ramp)):
                i = ips_n
                ips_n += 1
                first = real - 4_000_000 - (i * 7919 % 9_000_000)
                ban = real - (i * 104729 % 900_000)
                result = "ok"
                if i == 417:
                    result = ("\x1b[2Jnft: Operation not permitted [red]x[/red]" if hostile
                              else "nft: Operation not permitted")
                ips_events.append(BanEvent("ban", _ip(i), jail, first, ban - 150_000, ban, 5,
                                           "dry-run", result, "fipstop-ips"))
            if t >= ATTACK_START_S + 6 and fail2ban:
                for _ in range(int(3 * min(t - ATTACK_START_S - 5, 8))):
                    i = f2b_n
                    f2b_n += 1
                    ban = real - 200_000_000
                    first = ban - 1_500_000_000 - (i * 2_654_435_761 % 7_000_000_000)
                    f2b_events.append(BanEvent("ban", _ip(i), "named-refused", first, first, ban, 5,
                                               "fail2ban", "ok", "fail2ban",
                                               expires_ns=ban // 1_000_000_000 * 1_000_000_000 + F2B_BANTIME_NS))
            if t >= ATTACK_START_S + 30:  # bantime is over for the first ones
                for j in range(10):
                    i = (k - ATTACK_START_S - 30) * 10 + j
                    ips_events.append(BanEvent("unban", _ip(i), jail, 0, 0, real, 0, "dry-run", "ok"))
            if k % 7 == 3:
                bad += 1
        ips_seen += len(ips_events)
        f2b_seen += len(f2b_events)
        aux = {"bans": BansSample("fipstop-ips", mono, real, tuple(ips_events), ips_seen + bad, bad, 0,
                                  ips_seen + bad)}
        if fail2ban:
            aux["fail2ban"] = BansSample("fail2ban", mono, real, tuple(f2b_events), f2b_seen, 0, 0, f2b_seen,
                                         active=f2b_n, probe="fail2ban")
        out.append(aux)
    return out
