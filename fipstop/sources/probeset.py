"""The probes a live source samples, built from a :class:`fipstop.config.ProbeConfig`.

The dashboard, ``fipstop record``, ``serve``, ``diagnose`` and ``bench ui``
sample the same set, so a recording holds what the dashboard shows: the ring
probe first (its sample drives the frame), then the CPU of the processes it
saw, the other logging backends, and the ban sources - ``fipstop ips``'s
bans domain, Fail2Ban when its database or socket is given or found at its
usual place, and CrowdSec when its database is given or found at its usual
place with a crowdsec process running; and the FIPS paper's prototype rings when asked
(``--fipsipc``).  Options are validated by the commands (one-line errors
naming the flag); here they are only used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fipstop.config import ProbeConfig
from fipstop.probes.backends import BackendsProbe
from fipstop.probes.bans import BansProbe
from fipstop.probes.crowdsec import DEFAULT_DB as CROWDSEC_DB
from fipstop.probes.crowdsec import CrowdSecProbe, running
from fipstop.probes.fail2ban import DEFAULT_DB, DEFAULT_SOCKET, Fail2BanProbe
from fipstop.probes.fipsipc import FipsIpcProbe
from fipstop.probes.proccpu import ProcCpuProbe
from fipstop.probes.ring import RingProbe
from fipstop.sources.protocol import Probe

__all__ = ["ProbeSet", "build_probes"]


@dataclass(frozen=True)
class ProbeSet:
    """The ring probe and the others, in the order they are sampled."""

    ring: RingProbe
    others: tuple[Probe, ...] = ()

    def close(self) -> None:
        self.ring.close()
        for p in self.others:
            p.close()


def build_probes(config: ProbeConfig) -> ProbeSet:
    ring = RingProbe(shm_dir=config.shm_dir, domains=config.domains)
    others: list[Probe] = []
    if config.cpu:
        others.append(ProcCpuProbe(ring.pids))
    if config.backends is not None:
        others.append(BackendsProbe(config.backends))
    if config.bans_domain is not None:
        others.append(BansProbe(config.shm_dir, config.bans_domain))
        db = config.fail2ban_db or (DEFAULT_DB if os.path.isfile(DEFAULT_DB) else None)
        sock = config.fail2ban_socket or (DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None)
        if db or sock:
            others.append(Fail2BanProbe(db, sock))
        cs = config.crowdsec_db or (CROWDSEC_DB if os.path.isfile(CROWDSEC_DB) and running() else None)
        if cs:
            others.append(CrowdSecProbe(cs))
    if config.fipsipc is not None:
        others.append(FipsIpcProbe(config.fipsipc.shm_names, discover=config.fipsipc.discover))
    return ProbeSet(ring, tuple(others))
