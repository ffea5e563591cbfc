"""Range decisions when a jail's address table overflows (CrowdSec-style).

Each jail counts hits per address in a bounded table (``--max-tracked``).  A
flood of more distinct addresses than that evicts every address before it
reaches maxretry, and nothing is ever banned.  Once a jail evicts (the
pressure), every record it sees is also counted here per network - IPv4 /24,
IPv6 /64 by default - and a network is banned as a whole (``198.18.7.0/24``)
when, within findtime, it gathered ``maxretry x min_addrs`` hits from at
least ``min_addrs`` distinct addresses (with the jail's counting mode:
Fail2Ban's window or CrowdSec's leaky bucket, on the records' ring time
stamps).  A network that overlaps the jail's ignoreip (loopback, this host,
...) is never banned.

The table of networks is bounded too (``max_tracked`` networks, the least
recently hit evicted and counted): a flood spread over more networks than
that falls through here as well, and says so in the stats.  Aggregation
stays on for findtime after the jail's last eviction.

Matching here uses the jail's own regexes one record at a time
(``Jail.match``, with the GIL held), so a reader under pressure reads more
slowly; per-address counting in C goes on at the same time.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass

__all__ = ["RangeCounter", "RangeOptions", "network_of"]


@dataclass(frozen=True)
class RangeOptions:
    v4_prefix: int = 24
    v6_prefix: int = 64
    min_addrs: int = 4  # distinct addresses a network needs before it is banned as a whole
    enabled: bool = True


def network_of(ip: str, v4_prefix: int, v6_prefix: int) -> str:
    """``ip``'s network as CIDR text (``198.18.7.0/24``, ``2001:db8:1:2::/64``)."""
    if ":" in ip:
        raw = int.from_bytes(socket.inet_pton(socket.AF_INET6, ip), "big")
        bits = 128 - v6_prefix
        net = (raw >> bits) << bits
        return f"{ipaddress.IPv6Address(net)}/{v6_prefix}"
    raw = int.from_bytes(socket.inet_aton(ip), "big")
    bits = 32 - v4_prefix
    net = (raw >> bits) << bits
    return f"{socket.inet_ntoa(net.to_bytes(4, 'big'))}/{v4_prefix}"


class _Net:
    __slots__ = ("first_ns", "last_ns", "level", "addrs")

    def __init__(self, ts: int) -> None:
        self.first_ns = ts
        self.last_ns = ts
        self.level = 0.0
        self.addrs: set[str] = set()


class RangeCounter:
    """Per-network counting for one jail (thread-safe; one lock per batch)."""

    def __init__(self, jail: str, maxretry: int, findtime_s: float, mode: str, max_tracked: int,
                 ignore: tuple[str, ...], options: RangeOptions) -> None:
        self.jail = jail
        self.opt = options
        self.need_addrs = max(1, options.min_addrs)
        self.need_hits = max(1, maxretry) * self.need_addrs
        self.findtime_ns = int(findtime_s * 1e9)
        self.bucket = mode == "bucket"
        self.max_tracked = max(1, max_tracked)
        self._ignore = []
        for word in ignore:
            for w in word.replace(",", " ").split():
                try:
                    self._ignore.append(ipaddress.ip_network(w, strict=False))
                except ValueError:
                    continue
        self._nets: dict[str, _Net] = {}
        self._banned: set[str] = set()
        self._lock = threading.Lock()
        self.hits = self.evictions = self.refused = self.bans = 0

    def _allowed(self, net: str) -> bool:
        n = ipaddress.ip_network(net)
        for ig in self._ignore:
            if ig.version == n.version and n.overlaps(ig):
                return False
        return True

    def count(self, hits: list[tuple[str, int]]) -> list[tuple[str, int, int, int]]:
        """Count (address, ts_ns) hits; returns (network, first_ns, trigger_ns, hits) of the networks
        that crossed the threshold now (each once until :meth:`forget`)."""
        v4, v6 = self.opt.v4_prefix, self.opt.v6_prefix
        keyed = []
        for ip, ts in hits:
            try:
                keyed.append((network_of(ip, v4, v6), ip, ts))
            except (OSError, ValueError):
                continue
        out = []
        with self._lock:
            nets, banned = self._nets, self._banned
            window = self.findtime_ns
            leak = (self.need_hits / window) if window else float("inf")
            for key, ip, ts in keyed:
                self.hits += 1
                if key in banned:
                    continue
                e = nets.pop(key, None)  # re-inserted last: dict order is least recently hit first
                if e is None:
                    if len(nets) >= self.max_tracked:
                        del nets[next(iter(nets))]
                        self.evictions += 1
                    e = _Net(ts)
                if self.bucket:
                    dt = ts - e.last_ns if ts > e.last_ns else 0
                    e.level = max(0.0, e.level - dt * leak)
                    if e.level == 0.0:
                        e.addrs.clear()
                        e.first_ns = ts
                elif e.level and ts - e.first_ns > window:
                    e.level = 0.0  # Fail2Ban: the window restarts at this hit
                    e.addrs.clear()
                    e.first_ns = ts
                if not e.level:
                    e.first_ns = ts
                e.level += 1.0
                e.last_ns = max(e.last_ns, ts)
                if len(e.addrs) < self.need_addrs:
                    e.addrs.add(ip)
                if e.level >= self.need_hits and len(e.addrs) >= self.need_addrs:
                    if self._allowed(key):
                        banned.add(key)
                        self.bans += 1
                        out.append((key, e.first_ns, ts, int(e.level)))
                    else:
                        self.refused += 1
                        e.level = 0.0
                        e.addrs.clear()
                        nets[key] = e
                    continue
                nets[key] = e
        return out

    def forget(self, net: str) -> None:
        """The network's ban ended: count it afresh."""
        with self._lock:
            self._banned.discard(net)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"range_hits": self.hits, "range_tracked": len(self._nets), "range_evictions": self.evictions,
                    "range_refused": self.refused, "range_bans": self.bans}
