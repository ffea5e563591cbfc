"""What the diagnosis rules look at: a window of snapshots, summed up once.

The rules read derived values only - rates, lags, health, CPU shares, the
other backends, ban events - averaged over the window where a single frame
would be noise: a ring's drops and commit rate over the frames that have
rates, a process's CPU share and a backend's loss rate weighted by each
interval's length (which is the share or rate over the whole window).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property

import numpy as np

from fipstop.analysis.findings import mean
from fipstop.bans import BanEvent
from fipstop.model.backends import BackendsView
from fipstop.model.cpu import CpuView
from fipstop.model.rings import Health
from fipstop.model.snapshot import Snapshot
from fipstop.profile.session import ProfileReport
from fipstop.ring import RingState

__all__ = ["Evidence"]

NAN = float("nan")
RingKey = tuple[str, int]  # (domain, ring slot)
ConsumerKey = tuple[str, int]  # (domain, consumer slot)


def _weighted(pairs: Sequence[tuple[float, float]]) -> float:
    """Mean of (value, weight) pairs with a finite value (NaN when none)."""
    num = den = 0.0
    for v, w in pairs:
        if math.isfinite(v) and w > 0:
            num += v * w
            den += w
    return num / den if den > 0 else NAN


class Evidence:
    """The window ``snaps`` (oldest first, not empty), with the profiles of
    some of its processes and the pids given as suspected producers."""

    def __init__(self, snaps: Sequence[Snapshot], profiles: Mapping[int, ProfileReport], suspects: Sequence[int]):
        self.snaps = list(snaps)
        self.last = self.snaps[-1]
        self.rated = [s for s in self.snaps if s.dt_s > 0] or [self.last]
        self.profiles = dict(profiles)
        self.suspects = tuple(int(p) for p in suspects)
        names = [d.name for d in self.last.domains]
        self.consumers: dict[ConsumerKey, np.void] = {
            (names[int(c["domain"])], int(c["consumer"])): c for c in self.last.consumers}
        # per ring: mean drops/s and commit rate over the frames with rates
        self.ring_drops: dict[RingKey, float] = {}
        self.ring_rate: dict[RingKey, float] = {}
        for s in self.rated:
            dn = [d.name for d in s.domains]
            for r in s.rings:
                k = (dn[int(r["domain"])], int(r["ring"]))
                self.ring_drops[k] = self.ring_drops.get(k, 0.0) + float(r["drops_per_s"]) / len(self.rated)
                self.ring_rate[k] = self.ring_rate.get(k, 0.0) + float(r["records_per_s"]) / len(self.rated)
        self.dropping = {k: v for k, v in self.ring_drops.items() if v > 0}
        # who holds each dropping ring: its slowest consumer, or nobody
        self.blame: dict[ConsumerKey, list[int]] = {}
        self.unread: dict[str, list[int]] = {}
        for (dom, ri) in self.dropping:
            row = self.last.ring_row(dom, ri)
            slow = int(self.last.rings["slowest_consumer"][row]) if row is not None else -1
            if slow < 0:
                self.unread.setdefault(dom, []).append(ri)
            else:
                self.blame.setdefault((dom, slow), []).append(ri)

    def health(self, c: np.void) -> Health:
        return Health(int(c["health"]))

    def lag_growth(self, key: ConsumerKey) -> float:
        """Records/s by which the consumer's max lag grew over the window."""
        pts = []
        for s in self.snaps:
            row = s.consumer_row(*key)
            if row is not None and int(s.consumers["lag_max_records"][row]) >= 0:
                pts.append((s.taken_mono_ns, int(s.consumers["lag_max_records"][row])))
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return 0.0
        return (pts[-1][1] - pts[0][1]) / ((pts[-1][0] - pts[0][0]) / 1e9)

    def release_per_s(self, key: ConsumerKey) -> float:
        rows = [(s, s.consumer_row(*key)) for s in self.rated]
        return mean([float(s.consumers["release_per_s"][row]) for s, row in rows if row is not None])

    # -- CPU ------------------------------------------------------------------------------

    @cached_property
    def _cpu_views(self) -> list[CpuView]:
        return [s.cpu for s in self.snaps[1:] if s.cpu is not None]

    def cpu_pct(self, pid: int) -> float:
        """``pid``'s share of one core over the window (NaN: unknown)."""
        return _weighted([(p.cpu_pct, v.dt_s) for v in self._cpu_views if (p := v.get(pid)) is not None])

    def runqueue_pct(self, pid: int) -> float:
        return _weighted([(p.runqueue_pct, v.dt_s) for v in self._cpu_views if (p := v.get(pid)) is not None])

    def process_alive(self, pid: int) -> bool | None:
        """Whether ``pid`` still runs at the end of the window (None: unknown
        without the CPU probe, e.g. an old recording)."""
        for s in reversed(self.snaps):
            if s.cpu is not None:
                return s.cpu.get(pid) is not None
        return None

    # -- the other backends -------------------------------------------------------------

    @cached_property
    def backends(self) -> BackendsView | None:
        """The newest backends view, with its loss rates over the window
        (``dt_s`` 0 when the window has only one backends sample)."""
        views = [s.backends for s in self.snaps if isinstance(s.backends, BackendsView)]
        if not views:
            return None
        last = views[-1]
        rated = [v for v in views[1:] if v.dt_s > 0]
        if not rated:
            return replace(last, dt_s=0.0)
        sockets = tuple(replace(s, drops_per_s=_weighted([(o.drops_per_s, v.dt_s) for v in rated
                                                           for o in v.sockets if o.path == s.path]))
                        for s in last.sockets)
        audit = last.audit
        if audit is not None:
            audit = replace(audit, lost_per_s=_weighted([(v.audit.lost_per_s, v.dt_s) for v in rated
                                                          if v.audit is not None]))
        net = last.net
        if net is not None:
            net = replace(net, rcvbuf_errors_per_s=_weighted([(v.net.rcvbuf_errors_per_s, v.dt_s) for v in rated
                                                              if v.net is not None]))
        return replace(last, dt_s=sum(v.dt_s for v in rated), sockets=sockets, audit=audit, net=net)

    # -- the processes on both ends ----------------------------------------------------

    @cached_property
    def producer_pids(self) -> set[int]:
        """Producers of open rings, suspects, and senders blocked on a watched socket."""
        pids = {int(r["pid"]) for r in self.last.rings if int(r["state"]) == RingState.ACTIVE}
        pids |= set(self.suspects)
        if self.backends is not None:
            for s in self.backends.sockets:
                pids.update(int(x.pid) for x in s.blocked)
        return pids

    @cached_property
    def consumer_pids(self) -> set[int]:
        return {int(c["pid"]) for c in self.last.consumers}

    # -- bans ---------------------------------------------------------------------------

    @cached_property
    def bans(self) -> list[BanEvent]:
        """Every ban event of the window (not unbans), oldest ban first."""
        out = [e for s in self.snaps if s.bans is not None for e in s.bans.new_events if e.kind == "ban"]
        out.sort(key=lambda e: e.ban_ns)
        return out

