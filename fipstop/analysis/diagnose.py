"""Which stage is the bottleneck right now: ranked findings with evidence.

:func:`diagnose` is pure: it reads a window of derived snapshots (rings,
consumers, the CPU of the processes on both ends, the other backends, ban
events) and, when given, profile reports of the processes involved, runs
every rule of :data:`RULES` in turn and returns their :class:`Finding`
objects, most important first.  The live Diagnosis panel runs it on the
dashboard's history; ``fipstop diagnose`` samples for ``--duration`` seconds
while profiling the processes on both ends of the rings
(:mod:`fipstop.analysis.watch`), then runs it once.  A recording replays to
the same findings.

The catalogue (each has a scripted scenario in tests/integration/test_diagnose.py):

=========================  ==============================================================
``consumer-too-slow``      rings full and dropping, their slowest consumer alive: it is
                           the bottleneck (with its CPU share and hot spot when known)
``no-consumer``            a ring drops and nobody reads its domain
``no-ring``                records dropped because every ring slot is taken (more logging
                           threads than max_rings; tests/unit/test_no_ring_shown.py)
``consumer-dead``          a consumer stopped heart-beating and its lag grows (or it was
                           evicted)
``producer-lock``          producer threads blocked on the logging path (a syslog or file
                           mutex, a blocking send): BIND 9 with syslog
``consumer-cpu``           logging keeps up, but the IPS process is CPU-saturated
``bans-behind``            time-to-ban grows during the window: bans lag the attack
``syslog-socket``          a syslog socket overflows: queue near full, drops, blocked senders
``audit-lost``             Linux audit loses events (``lost`` grows) or its backlog is full
``udp-drops``              UDP syslog receive-buffer drops
``fipsipc-*``              the FIPS paper's prototype rings: a reader or writer gone, a
                           full ring, laps (:mod:`fipstop.analysis.rules_fipsipc`)
=========================  ==============================================================

No finding means healthy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from fipstop.analysis.evidence import Evidence
from fipstop.analysis.findings import Finding
from fipstop.analysis.rules_fipsipc import fipsipc_rules
from fipstop.analysis.rules_hosts import audit_lost, bans_behind, producer_locks, syslog_sockets, udp_drops
from fipstop.analysis.rules_rings import consumer_cpu, dead_consumers, no_ring_domains, slow_consumers, unread_domains
from fipstop.model.snapshot import Snapshot
from fipstop.profile.session import ProfileReport

__all__ = ["RULES", "Rule", "diagnose"]

#: a rule reads the evidence and the findings of the rules before it (so two
#: rules never report the same consumer twice) and returns its own
Rule = Callable[[Evidence, Sequence[Finding]], list[Finding]]

#: every rule, in the order they run (the order findings of equal rank keep)
RULES: tuple[Rule, ...] = (
    unread_domains,
    no_ring_domains,
    slow_consumers,
    dead_consumers,
    producer_locks,
    consumer_cpu,
    bans_behind,
    syslog_sockets,
    audit_lost,
    udp_drops,
    fipsipc_rules,
)


def diagnose(window: Sequence[Snapshot], *, profiles: Mapping[int, ProfileReport] | None = None,
             suspects: Sequence[int] = ()) -> list[Finding]:
    """Findings for ``window`` (snapshots, oldest first); ``profiles`` by pid;
    ``suspects``: pids given as possible producers (``--pid``)."""
    if not window:
        return []
    ev = Evidence(window, profiles or {}, suspects)
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(ev, out))
    out.sort(key=lambda f: (-f.severity, -f.score))
    return out
