"""Syslog over the network: where UDP log datagrams are lost on this host.

- per UDP socket (``/proc/net/udp``, ``udp6``): receive queue bytes and the
  socket's ``drops`` (datagrams discarded because its receive buffer was
  full), with the owning process;
- host-wide: ``Udp: InErrors RcvbufErrors`` from ``/proc/net/snmp``
  (``Udp6...`` from ``snmp6``);
- the neighbour table's ``unresolved_discards`` (``/proc/net/stat/arp_cache``,
  summed over CPUs): packets a *sender* queued while the next hop's address
  was unresolved, dropped when that small queue overflowed - log traffic
  silently lost before it ever left.

Lines that do not parse are skipped and counted in ``bad_lines``.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

#: ports looked at when none is configured (syslog, syslog-tls, common relays)
DEFAULT_PORTS = (514, 1514, 5140, 6514)


@dataclass(frozen=True, slots=True)
class UdpSocket:
    proto: str  # "udp" | "udp6"
    local: str  # address as text
    port: int
    rx_queue_bytes: int
    tx_queue_bytes: int
    drops: int
    inode: int
    uid: int
    pids: tuple[int, ...] = ()
    comm: str = ""  # raw process name of the first owner: escape before showing


@dataclass(frozen=True, slots=True)
class NetSyslogSample:
    ok: bool
    reason: str = ""
    sockets: tuple[UdpSocket, ...] = ()
    udp_in_datagrams: int = -1
    udp_in_errors: int = -1
    udp_rcvbuf_errors: int = -1
    udp6_in_datagrams: int = -1
    udp6_in_errors: int = -1
    udp6_rcvbuf_errors: int = -1
    arp_unresolved_discards: int = -1
    bad_lines: int = 0
    taken_mono_ns: int = 0


def _addr(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    if len(raw) == 16:
        words = struct.unpack(">4I", raw)
        return socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words))
    raise ValueError("address length")


def parse_proc_net_udp(text: str, proto: str) -> tuple[list[UdpSocket], int]:
    out, bad = [], 0
    for line in text.splitlines()[1:]:
        f = line.split()
        if not f:
            continue
        try:
            laddr, lport = f[1].rsplit(":", 1)
            tx, rx = f[4].split(":")
            out.append(UdpSocket(proto, _addr(laddr), int(lport, 16), int(rx, 16), int(tx, 16),
                                 int(f[12]), int(f[9]), int(f[7])))
        except (ValueError, IndexError):
            bad += 1
    return out, bad


def parse_snmp(text: str, section: str = "Udp") -> dict[str, int]:
    """``/proc/net/snmp``: pairs of header/value lines for ``section``."""
    lines = [ln for ln in text.splitlines() if ln.startswith(section + ":")]
    out: dict[str, int] = {}
    for head, vals in zip(lines[0::2], lines[1::2]):
        for k, v in zip(head.split()[1:], vals.split()[1:]):
            try:
                out[k] = int(v)
            except ValueError:
                continue
    return out


def parse_snmp6(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 2:
            try:
                out[f[0]] = int(f[1])
            except ValueError:
                continue
    return out


def parse_arp_cache(text: str) -> int:
    """Sum of ``unresolved_discards`` over the per-CPU lines (hex); -1 if absent."""
    lines = text.splitlines()
    if not lines:
        return -1
    head = lines[0].split()
    if "unresolved_discards" not in head:
        return -1
    i = head.index("unresolved_discards")
    total = 0
    for line in lines[1:]:
        f = line.split()
        try:
            total += int(f[i], 16)
        except (ValueError, IndexError):
            continue
    return total


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(16 << 20).decode("ascii", "replace")
    except OSError:
        return None


class NetSyslogProbe:
    name = "netsyslog"

    def __init__(self, ports: Iterable[int] = (), *, procfs_root: str = "/proc", all_sockets: bool = False) -> None:
        self.ports = frozenset(int(p) for p in ports) or frozenset(DEFAULT_PORTS)
        self.procfs_root = procfs_root
        self.all_sockets = all_sockets

    def available(self) -> tuple[bool, str]:
        s = self.sample(fd_scan=({}, 0))
        return s.ok, s.reason

    def sample(self, fd_scan: tuple[dict[int, list[tuple[int, int]]], int] | None = None) -> NetSyslogSample:
        from fipstop.probes.unixsock import comm_of, scan_socket_fds

        now = time.monotonic_ns()
        root = self.procfs_root
        socks: list[UdpSocket] = []
        bad = 0
        missing = []
        for proto in ("udp", "udp6"):
            text = _read(f"{root}/net/{proto}")
            if text is None:
                missing.append(proto)
                continue
            s, b = parse_proc_net_udp(text, proto)
            socks.extend(s)
            bad += b
        if len(missing) == 2:
            return NetSyslogSample(False, f"{root}/net/udp: cannot be read", taken_mono_ns=now)
        socks = [s for s in socks if self.all_sockets or s.port in self.ports]
        if socks:
            by_inode, _ = fd_scan if fd_scan is not None else scan_socket_fds(root)
            named = []
            for u in socks:
                owners = tuple(sorted({pid for pid, _ in by_inode.get(u.inode, [])}))
                named.append(UdpSocket(u.proto, u.local, u.port, u.rx_queue_bytes, u.tx_queue_bytes, u.drops,
                                       u.inode, u.uid, owners, comm_of(root, owners[0]) if owners else ""))
            socks = named
        snmp = parse_snmp(_read(f"{root}/net/snmp") or "")
        snmp6 = parse_snmp6(_read(f"{root}/net/snmp6") or "")
        arp = parse_arp_cache(_read(f"{root}/net/stat/arp_cache") or "")
        return NetSyslogSample(
            True, "", tuple(sorted(socks, key=lambda s: (s.port, s.proto, s.local))),
            snmp.get("InDatagrams", -1), snmp.get("InErrors", -1), snmp.get("RcvbufErrors", -1),
            snmp6.get("Udp6InDatagrams", -1), snmp6.get("Udp6InErrors", -1), snmp6.get("Udp6RcvbufErrors", -1),
            arp, bad, now,
        )
