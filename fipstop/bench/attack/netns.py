"""The network of ``fipstop bench attack``: two namespaces of the bench's own joined by a veth pair.

``atk24s<pid>`` (the server) holds named, the nftables ruleset the IPSs
write their bans into, and the IPSs themselves; ``atk24c<pid>`` (the
clients) holds the attack sender and the valid clients.  Every packet
crosses the veth, so a banned source is dropped by the server's ``input``
hook before named sees it, as on a real host.

The attackers' block is a local route in the client namespace ("AnyIP":
``ip route add local NET dev lo``): one socket may send from any address of
it (IP_PKTINFO), and the answers to those addresses are dropped there in
``prerouting`` (a real spoofer never sees them either).  The valid clients'
addresses are ordinary addresses on the client's loopback; named allows
them, and no IPS ever sees a refused query from them.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass, field

IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"
SERVER_IP = "10.24.0.1"
CLIENT_IP = "10.24.0.2"
VALID_NET = "10.24.1.0/24"
ATTACK_NET = "10.96.0.0/12"  # room for 2^20 attackers
PREFIX = "atk24"


def attacker_ip(i: int) -> str:
    return str(ipaddress.IPv4Address(ATTACK_NET.split("/")[0]) + i)


def is_attacker(ip: str) -> bool:
    try:
        return ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(ATTACK_NET)
    except ValueError:
        return False


def valid_ips(n: int) -> list[str]:
    base = ipaddress.IPv4Network(VALID_NET).network_address
    return [str(base + 1 + i) for i in range(n)]


class NetnsError(RuntimeError):
    pass


def _run(argv: list[str], input_text: str | None = None) -> None:
    r = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise NetnsError(f"{' '.join(argv[:6])}: {(r.stderr or r.stdout).strip()[:200]}")


@dataclass
class Topology:
    """Both namespaces and the veth pair; :meth:`up` creates them, :meth:`down` removes what it created."""

    tag: str = field(default_factory=lambda: str(os.getpid()))
    valid_count: int = 4
    created: list[str] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"{PREFIX}s{self.tag}"

    @property
    def client(self) -> str:
        return f"{PREFIX}c{self.tag}"

    def in_server(self, argv: list[str]) -> list[str]:
        return [IP, "netns", "exec", self.server, *argv]

    def in_client(self, argv: list[str]) -> list[str]:
        return [IP, "netns", "exec", self.client, *argv]

    @staticmethod
    def missing() -> str | None:
        if os.geteuid() != 0:
            return "needs root (network namespaces, nftables)"
        for prog in (IP, NFT):
            if not os.path.exists(prog):
                return f"{os.path.basename(prog)} not found (Debian: iproute2, nftables)"
        return None

    def up(self) -> None:
        s, c = self.server, self.client
        for ns in (s, c):
            _run([IP, "netns", "add", ns])
            self.created.append(ns)
        # interface names: at most 15 characters (the namespace names are)
        _run([IP, "link", "add", s[:15], "netns", s, "type", "veth", "peer", "name", c[:15], "netns", c])
        sx, cx = self.in_server, self.in_client
        _run(sx([IP, "link", "set", "lo", "up"]))
        _run(sx([IP, "addr", "add", f"{SERVER_IP}/24", "dev", s[:15]]))
        _run(sx([IP, "link", "set", s[:15], "up"]))
        _run(sx([IP, "route", "add", "default", "via", CLIENT_IP]))
        _run(cx([IP, "link", "set", "lo", "up"]))
        _run(cx([IP, "addr", "add", f"{CLIENT_IP}/24", "dev", c[:15]]))
        _run(cx([IP, "link", "set", c[:15], "up"]))
        for a in valid_ips(self.valid_count):
            _run(cx([IP, "addr", "add", f"{a}/32", "dev", "lo"]))
        _run(cx([IP, "route", "add", "local", ATTACK_NET, "dev", "lo"]))
        _run(cx([NFT, "-f", "-"]), f"""table ip {PREFIX}client {{
    chain pre {{ type filter hook prerouting priority -300; policy accept; ip daddr {ATTACK_NET} drop; }}
}}
""")

    def down(self) -> None:
        while self.created:
            subprocess.run([IP, "netns", "del", self.created.pop()], capture_output=True, timeout=30)

    def flush_server_nft(self) -> None:
        """A cold start for the next pipeline: no table of the last one's bans."""
        subprocess.run(self.in_server([NFT, "flush", "ruleset"]), capture_output=True, timeout=30)

    def server_set_size(self) -> dict[str, int]:
        """Elements per set in the server's ruleset (what was really banned)."""
        r = subprocess.run(self.in_server([NFT, "-j", "list", "sets"]), capture_output=True, text=True, timeout=60)
        out: dict[str, int] = {}
        if r.returncode != 0:
            return out
        import json

        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return out
        for item in doc.get("nftables", []):
            st = item.get("set") if isinstance(item, dict) else None
            if isinstance(st, dict):
                out[f"{st.get('table')}:{st.get('name')}"] = len(st.get("elem") or [])
        return out
