"""A unix datagram socket (``/dev/log`` or any path): who receives, how much
waits, who is stuck sending.

- the receiving socket is found by the path's inode (``UNIX_DIAG_VFS``) or
  its bound name, then its process by ``socket:[inode]`` links in
  ``/proc/*/fd``;
- its queue comes from sock_diag (``UNIX_DIAG_RQLEN`` and
  ``UNIX_DIAG_MEMINFO``).  For a datagram socket the kernel reports in RQLEN
  the length of the *first* waiting datagram, not the queue, and charges
  queued datagrams to the *senders'* write memory: so the bytes waiting are
  the sum of ``wmem_alloc`` over the sockets connected to the receiver
  (``UNIX_DIAG_PEER``), which is what ``queue_bytes`` reports;
- senders blocked on it: threads whose ``/proc/PID/task/TID/syscall`` shows
  sendto/sendmsg/write/connect on a socket whose peer is the receiver
  (independent of the profiles' thread probe on purpose).

Processes that vanish mid-scan or cannot be read are skipped and counted.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fipstop.probes.netlink import (
    NETLINK_SOCK_DIAG,
    NLM_F_DUMP,
    Message,
    NetlinkError,
    parse_attrs,
    permission_reason,
    request,
)

SOCK_DIAG_BY_FAMILY = 20
AF_UNIX = 1
UDIAG_SHOW_NAME, UDIAG_SHOW_VFS, UDIAG_SHOW_PEER, UDIAG_SHOW_ICONS = 0x1, 0x2, 0x4, 0x8
UDIAG_SHOW_RQLEN, UDIAG_SHOW_MEMINFO = 0x10, 0x20
UNIX_DIAG_NAME, UNIX_DIAG_VFS, UNIX_DIAG_PEER, UNIX_DIAG_ICONS, UNIX_DIAG_RQLEN, UNIX_DIAG_MEMINFO = 0, 1, 2, 3, 4, 5
SK_MEMINFO_RMEM_ALLOC, SK_MEMINFO_RCVBUF, SK_MEMINFO_WMEM_ALLOC, SK_MEMINFO_SNDBUF = 0, 1, 2, 3
SK_MEMINFO_DROPS = 8

REQ = struct.Struct("=BBHIIIII")  # family, protocol, pad, states, ino, show, cookie[2]
DIAG_MSG = struct.Struct("=BBBBIII")  # family, type, state, pad, ino, cookie[2]

SOCK_TYPES = {1: "stream", 2: "dgram", 5: "seqpacket"}
#: x86_64 syscall numbers a sender sits in while the receiver's queue is full
SEND_SYSCALLS = {1: "write", 20: "writev", 42: "connect", 44: "sendto", 46: "sendmsg", 307: "sendmmsg"}
MAX_PROCS = 100_000
MAX_FDS_PER_PROC = 65_536


@dataclass(frozen=True, slots=True)
class DiagInfo:
    inode: int
    type: int
    state: int
    name: str = ""
    vfs_ino: int = 0
    peer: int = 0
    rqueue: int = 0
    wqueue: int = 0
    rmem_alloc: int = -1
    rcvbuf: int = -1
    wmem_alloc: int = -1
    sndbuf: int = -1
    drops: int = -1


@dataclass(frozen=True, slots=True)
class ProcNetUnix:
    inode: int
    type: int
    state: int
    path: str


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    comm: str  # raw process name: escape before showing


@dataclass(frozen=True, slots=True)
class BlockedSender:
    pid: int
    tid: int
    comm: str
    syscall: str


@dataclass(frozen=True, slots=True)
class UnixSocketSample:
    """One look at one socket path; ``reason`` says what could not be read."""

    path: str
    ok: bool
    reason: str = ""
    inode: int = 0
    sock_type: str = ""
    receivers: tuple[Holder, ...] = ()
    first_dgram_bytes: int = 0  # UNIX_DIAG_RQLEN of a dgram socket: the head datagram
    queue_bytes: int = -1  # bytes charged to connected senders, waiting to be read (-1 unknown)
    rcvbuf_bytes: int = -1
    drops: int = -1  # sk_drops (SK_MEMINFO_DROPS), -1 unknown
    senders_connected: int = 0
    blocked: tuple[BlockedSender, ...] = ()
    scan_skipped: int = 0  # processes that vanished or could not be read
    taken_mono_ns: int = 0


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def diag_request(show: int = UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN
                 | UDIAG_SHOW_MEMINFO) -> bytes:
    return REQ.pack(AF_UNIX, 0, 0, 0xFFFFFFFF, 0, show, 0xFFFFFFFF, 0xFFFFFFFF)


def parse_diag(msgs: Iterable[Message]) -> dict[int, DiagInfo]:
    """sock_diag replies -> {inode: DiagInfo}; short or odd messages are skipped."""
    out: dict[int, DiagInfo] = {}
    for m in msgs:
        if m.type != SOCK_DIAG_BY_FAMILY or len(m.payload) < DIAG_MSG.size:
            continue
        fam, typ, st, _pad, ino, _c0, _c1 = DIAG_MSG.unpack_from(m.payload, 0)
        if fam != AF_UNIX:
            continue
        a = parse_attrs(m.payload[DIAG_MSG.size:])
        kw: dict = {}
        name = a.get(UNIX_DIAG_NAME)
        if name is not None:
            kw["name"] = ("@" + _dec(name[1:].rstrip(b"\0"))) if name[:1] == b"\0" else _dec(name.split(b"\0", 1)[0])
        if len(a.get(UNIX_DIAG_VFS, b"")) >= 8:
            kw["vfs_ino"] = struct.unpack_from("=I", a[UNIX_DIAG_VFS], 0)[0]
        if len(a.get(UNIX_DIAG_PEER, b"")) >= 4:
            kw["peer"] = struct.unpack_from("=I", a[UNIX_DIAG_PEER], 0)[0]
        if len(a.get(UNIX_DIAG_RQLEN, b"")) >= 8:
            kw["rqueue"], kw["wqueue"] = struct.unpack_from("=II", a[UNIX_DIAG_RQLEN], 0)
        mem = a.get(UNIX_DIAG_MEMINFO, b"")
        n = len(mem) // 4
        if n:
            vals = struct.unpack_from(f"={n}I", mem, 0)
            for idx, key in ((SK_MEMINFO_RMEM_ALLOC, "rmem_alloc"), (SK_MEMINFO_RCVBUF, "rcvbuf"),
                             (SK_MEMINFO_WMEM_ALLOC, "wmem_alloc"), (SK_MEMINFO_SNDBUF, "sndbuf"),
                             (SK_MEMINFO_DROPS, "drops")):
                if idx < n:
                    kw[key] = vals[idx]
        out[ino] = DiagInfo(ino, typ, st, **kw)
    return out


def unix_diag() -> dict[int, DiagInfo]:
    """Every unix socket of this network namespace (raises NetlinkError)."""
    return parse_diag(request(NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, diag_request()))


def parse_proc_net_unix(text: str) -> list[ProcNetUnix]:
    """``/proc/net/unix`` -> entries; lines that do not parse are skipped."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split(None, 7)
        if len(f) < 7:
            continue
        try:
            typ, st, ino = int(f[4], 16), int(f[5], 16), int(f[6])
        except ValueError:
            continue
        out.append(ProcNetUnix(ino, typ, st, f[7].strip() if len(f) > 7 else ""))
    return out


def _read(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return _dec(f.read(limit))
    except OSError:
        return None


def comm_of(procfs_root: str, pid: int) -> str:
    c = _read(f"{procfs_root}/{pid}/comm", 256)
    return c.rstrip("\n") if c is not None else "?"


def pids(procfs_root: str) -> list[int]:
    try:
        names = os.listdir(procfs_root)
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit()][:MAX_PROCS]


def fd_targets(procfs_root: str, pid: int) -> dict[int, str] | None:
    """fd -> readlink target of one process; None if it vanished or is unreadable."""
    d = f"{procfs_root}/{pid}/fd"
    try:
        fds = os.listdir(d)
    except OSError:
        return None
    out = {}
    for n in fds[:MAX_FDS_PER_PROC]:
        try:
            out[int(n)] = os.readlink(f"{d}/{n}")
        except (OSError, ValueError):
            continue
    return out


def socket_inode(target: str) -> int:
    if target.startswith("socket:[") and target.endswith("]"):
        try:
            return int(target[8:-1])
        except ValueError:
            return 0
    return 0


def scan_fds(procfs_root: str) -> tuple[dict[int, dict[int, str]], int]:
    """pid -> {fd: link target} for every readable process; and how many were
    skipped (vanished or not permitted).  The one scan of /proc/*/fd: the
    keyings below serve sockets and files from it."""
    out, skipped = {}, 0
    for pid in pids(procfs_root):
        t = fd_targets(procfs_root, pid)
        if t is None:
            skipped += 1
        else:
            out[pid] = t
    return out, skipped


def fds_by_socket(scan: Mapping[int, Mapping[int, str]]) -> dict[int, list[tuple[int, int]]]:
    """socket inode -> [(pid, fd)] of a scan_fds result."""
    out: dict[int, list[tuple[int, int]]] = {}
    for pid, fds in scan.items():
        for fd, t in fds.items():
            ino = socket_inode(t)
            if ino:
                out.setdefault(ino, []).append((pid, fd))
    return out


def fds_by_path(scan: Mapping[int, Mapping[int, str]]) -> dict[str, list[tuple[int, int]]]:
    """path -> [(pid, fd)] of a scan_fds result ("PATH (deleted)" under PATH)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for pid, fds in scan.items():
        for fd, t in fds.items():
            if t.startswith("/"):
                key = t[:-10] if t.endswith(" (deleted)") else t
                out.setdefault(key, []).append((pid, fd))
    return out


def scan_socket_fds(procfs_root: str) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """socket inode -> [(pid, fd)] over every process; and how many were skipped."""
    scan, skipped = scan_fds(procfs_root)
    return fds_by_socket(scan), skipped


def parse_syscall_line(text: str) -> tuple[int, int] | None:
    """``/proc/PID/task/TID/syscall`` -> (nr, first argument) or None
    (running, idle, garbage)."""
    f = text.split()
    if len(f) < 2:
        return None
    try:
        return int(f[0]), int(f[1], 16)
    except ValueError:
        return None


def blocked_senders(procfs_root: str, sender_fds: Mapping[tuple[int, int], int]) -> list[BlockedSender]:
    """Threads of the processes in ``sender_fds`` ((pid, fd) -> socket inode
    connected to the receiver) sitting in a send syscall on that fd."""
    out = []
    for pid in sorted({p for p, _ in sender_fds}):
        try:
            tids = [int(t) for t in os.listdir(f"{procfs_root}/{pid}/task") if t.isdigit()]
        except OSError:
            continue
        comm = None
        for tid in tids:
            line = _read(f"{procfs_root}/{pid}/task/{tid}/syscall", 512)
            sc = parse_syscall_line(line or "")
            if sc is None or sc[0] not in SEND_SYSCALLS or (pid, sc[1]) not in sender_fds:
                continue
            if comm is None:
                comm = comm_of(procfs_root, pid)
            tcomm = _read(f"{procfs_root}/{pid}/task/{tid}/comm", 256)
            out.append(BlockedSender(pid, tid, (tcomm or comm).rstrip("\n"), SEND_SYSCALLS[sc[0]]))
    return out


def find_receiver(path: str, diag: Mapping[int, DiagInfo], entries: Iterable[ProcNetUnix], vfs_ino: int) -> int:
    """The inode of the socket bound to ``path``: by file inode, then by name."""
    if vfs_ino:
        for d in diag.values():
            if d.vfs_ino == vfs_ino and d.name == path:
                return d.inode
        for d in diag.values():
            if d.vfs_ino == vfs_ino:
                return d.inode
    for d in diag.values():
        if d.name == path and not d.peer:
            return d.inode
    for e in entries:
        if e.path == path:
            return e.inode
    return 0


class UnixSocketProbe:
    """Watch one socket path.  ``diag`` (default: a sock_diag dump) is
    injectable so tests can feed crafted replies."""

    name = "unixsock"

    def __init__(self, path: str = "/dev/log", *, procfs_root: str = "/proc",
                 diag: Callable[[], Mapping[int, DiagInfo]] = unix_diag, check_path: bool = True) -> None:
        self.path = path
        self.procfs_root = procfs_root
        self.diag = diag
        self.check_path = check_path

    def available(self) -> tuple[bool, str]:
        s = self.sample()
        return s.ok, s.reason

    def sample(self, fd_scan: tuple[dict[int, list[tuple[int, int]]], int] | None = None,
               diag: Mapping[int, DiagInfo] | None = None) -> UnixSocketSample:
        """``fd_scan``/``diag``: shared results of one scan when several sockets are watched."""
        now = time.monotonic_ns()
        path = self.path
        vfs_ino = 0
        if self.check_path:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return UnixSocketSample(path, False, "no such file", taken_mono_ns=now)
            except OSError as e:
                return UnixSocketSample(path, False, e.strerror or str(e), taken_mono_ns=now)
            if not stat.S_ISSOCK(st.st_mode):
                return UnixSocketSample(path, False, "not a socket", taken_mono_ns=now)
            vfs_ino = st.st_ino
        if diag is None:
            try:
                diag = self.diag()
            except NetlinkError as e:
                return UnixSocketSample(path, False, permission_reason(e, "sock_diag", "root"), taken_mono_ns=now)
        entries = parse_proc_net_unix(_read(f"{self.procfs_root}/net/unix", 8 << 20) or "")
        ino = find_receiver(path, diag, entries, vfs_ino)
        if not ino:
            return UnixSocketSample(path, False, "nobody is bound to this socket", taken_mono_ns=now)
        d = diag.get(ino)
        if fd_scan is None:
            fd_scan = scan_socket_fds(self.procfs_root)
        by_inode, skipped = fd_scan
        receivers = tuple(Holder(pid, comm_of(self.procfs_root, pid))
                          for pid in sorted({p for p, _ in by_inode.get(ino, [])}))
        peers = [x for x in diag.values() if x.peer == ino and x.inode != ino]
        queue = sum(max(p.wmem_alloc, 0) for p in peers) if d is not None and d.type == 2 else -1
        if d is not None and d.type != 2:
            queue = d.rqueue
        sender_fds = {(pid, fd): p.inode for p in peers for pid, fd in by_inode.get(p.inode, [])}
        blocked = tuple(blocked_senders(self.procfs_root, sender_fds))
        if d is None:
            return UnixSocketSample(path, True, "not in the sock_diag dump (other network namespace?)", ino,
                                    receivers=receivers, scan_skipped=skipped, taken_mono_ns=now)
        return UnixSocketSample(
            path, True, "", ino, SOCK_TYPES.get(d.type, str(d.type)), receivers,
            first_dgram_bytes=d.rqueue if d.type == 2 else 0, queue_bytes=queue, rcvbuf_bytes=d.rcvbuf,
            drops=d.drops, senders_connected=len(peers), blocked=blocked, scan_skipped=skipped,
            taken_mono_ns=now,
        )
