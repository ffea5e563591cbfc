"""Watching the live host for a while, for ``fipstop diagnose``.

It polls the live probe set every ``interval_s`` for ``duration_s`` and, at
the start, profiles the processes on both ends of the rings (consumers
reading, producers of open rings, senders blocked on a watched syslog
socket) plus the suspects given, at most eight: the thread time split and
py-spy, never bpf (its compile would eat the window).  A process that
cannot be profiled, or vanishes meanwhile, becomes a note, not a failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fipstop.config import ProbeConfig
from fipstop.errors import one_line
from fipstop.model.backends import BackendsView
from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.profile.session import ProfileOptions, ProfileReport, ProfileSession
from fipstop.ring import RingState
from fipstop.sources.live import LiveSource
from fipstop.sources.probeset import build_probes

__all__ = ["MAX_PROFILED", "Watch", "WatchConfig", "watch"]

#: processes profiled at most (each py-spy costs the target a little)
MAX_PROFILED = 8


@dataclass(frozen=True)
class WatchConfig:
    probes: ProbeConfig
    duration_s: float = 5.0
    interval_s: float = 0.5
    profile: bool = True
    suspects: tuple[int, ...] = ()  # pids to profile first (suspected producers)


@dataclass(frozen=True)
class Watch:
    window: list[Snapshot]
    profiles: dict[int, ProfileReport]
    notes: list[str]


def _ends(snap: Snapshot) -> set[int]:
    """The pids on both ends of the rings in ``snap``."""
    pids = {int(c["pid"]) for c in snap.consumers if Health(int(c["health"])) in (Health.ALIVE, Health.STALE)}
    pids |= {int(r["pid"]) for r in snap.rings if int(r["state"]) == RingState.ACTIVE}
    if isinstance(snap.backends, BackendsView):
        for s in snap.backends.sockets:
            pids |= {int(x.pid) for x in s.blocked}
    return {p for p in pids if p > 0}


def watch(config: WatchConfig) -> Watch:
    src = LiveSource(build_probes(config.probes), config.interval_s)
    window: list[Snapshot] = []
    notes: list[str] = []
    sessions: dict[int, ProfileSession] = {}
    profiles: dict[int, ProfileReport] = {}
    try:
        first = src.poll().snapshot
        window.append(first)
        if config.profile:
            for pid in list(dict.fromkeys([*config.suspects, *sorted(_ends(first))]))[:MAX_PROFILED]:
                try:
                    sess = ProfileSession(pid, ProfileOptions(bpf=False, rate_hz=50, idle=False))
                    sess.start()
                    sessions[pid] = sess
                except Exception as e:
                    notes.append(f"cannot profile pid {pid}: {one_line(e, 120)}")
        end = time.monotonic() + config.duration_s
        while time.monotonic() < end:
            time.sleep(min(config.interval_s, max(0.0, end - time.monotonic())))
            window.append(src.poll().snapshot)
        for pid, sess in sessions.items():
            try:
                profiles[pid] = sess.poll()
            except Exception as e:  # the process vanished mid-diagnosis: a note, not a failure
                notes.append(f"process {pid} vanished during the diagnosis ({one_line(e, 80)})")
    finally:
        for sess in sessions.values():
            try:
                sess.close()
            except Exception:
                pass
        src.close()
    return Watch(window, profiles, notes)
