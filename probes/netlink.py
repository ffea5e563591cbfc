"""A small netlink reader (sock_diag and audit) with the socket module only.

Why not pyroute2: two requests are all fipstop needs, and a reader small
enough to read is one whose failure modes are known.  Everything received is
parsed defensively: lengths are checked against what is left, a message or
attribute that does not fit ends the parse with a reason, and the number of
messages and bytes read per request is bounded, so a hostile or broken reply
costs a reason, never a traceback or an endless loop.
"""

from __future__ import annotations

import errno as _errno
import os
import socket
import struct
from dataclasses import dataclass

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTA_HDR = struct.Struct("=HH")  # len, type

NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE = 1, 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_DUMP = 0x300

NETLINK_SOCK_DIAG = 4
NETLINK_AUDIT = 9

#: a reply larger than this is cut (and said so)
MAX_REPLY_BYTES = 32 << 20
MAX_MESSAGES = 200_000


class NetlinkError(Exception):
    """A request failed; ``str()`` is the one-line reason for the panel."""

    def __init__(self, reason: str, errno: int = 0) -> None:
        super().__init__(reason)
        self.errno = errno


@dataclass(frozen=True, slots=True)
class Message:
    type: int
    flags: int
    seq: int
    payload: bytes


def align4(n: int) -> int:
    return (n + 3) & ~3


def pack_message(msg_type: int, flags: int, seq: int, payload: bytes = b"") -> bytes:
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(payload), msg_type, flags, seq, 0) + payload


def parse_messages(buf: bytes) -> tuple[list[Message], str]:
    """The messages in one datagram and, when it ends early, why."""
    out: list[Message] = []
    off = 0
    while off + NLMSG_HDR.size <= len(buf):
        length, mtype, flags, seq, _pid = NLMSG_HDR.unpack_from(buf, off)
        if length < NLMSG_HDR.size or off + length > len(buf):
            return out, f"netlink message length {length} does not fit ({len(buf) - off} bytes left)"
        out.append(Message(mtype, flags, seq, bytes(buf[off + NLMSG_HDR.size: off + length])))
        off += align4(length)
    if len(buf) - off > 0:
        return out, f"{len(buf) - off} trailing bytes after the last netlink message"
    return out, ""


def parse_attrs(buf: bytes) -> dict[int, bytes]:
    """rtattr list -> {type: payload}; stops at the first attribute that does not fit."""
    out: dict[int, bytes] = {}
    off = 0
    while off + RTA_HDR.size <= len(buf):
        length, atype = RTA_HDR.unpack_from(buf, off)
        if length < RTA_HDR.size or off + length > len(buf):
            break
        out[atype & 0x3FFF] = bytes(buf[off + RTA_HDR.size: off + length])  # drop NLA_F_NESTED/NET_BYTEORDER
        off += align4(length)
    return out


def error_code(msg: Message) -> int:
    """The (positive) errno of an NLMSG_ERROR message, 0 for an ACK; -1 if short."""
    if len(msg.payload) < 4:
        return -1
    (err,) = struct.unpack_from("=i", msg.payload, 0)
    return -err


def request(protocol: int, msg_type: int, flags: int, payload: bytes = b"", *, timeout_s: float = 1.0,
            max_bytes: int = MAX_REPLY_BYTES, max_messages: int = MAX_MESSAGES) -> list[Message]:
    """Send one request and collect the reply messages up to NLMSG_DONE (dump),
    the ACK, or the first reply of a plain request; raise NetlinkError."""
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    except OSError as e:
        raise NetlinkError(f"netlink socket (protocol {protocol}): {e.strerror or e}", e.errno or 0) from None
    try:
        s.settimeout(timeout_s)
        seq = (os.getpid() ^ id(s)) & 0x7FFFFFFF or 1
        try:
            s.bind((0, 0))
            s.sendto(pack_message(msg_type, flags | NLM_F_REQUEST, seq, payload), (0, 0))
        except OSError as e:
            raise NetlinkError(f"netlink request: {e.strerror or e}", e.errno or 0) from None
        out: list[Message] = []
        got = 0
        dump = bool(flags & NLM_F_DUMP)
        ack = bool(flags & NLM_F_ACK)
        while True:
            try:
                buf = s.recv(1 << 16)
            except TimeoutError:
                raise NetlinkError(f"netlink: no complete reply within {timeout_s:g} s") from None
            except OSError as e:
                raise NetlinkError(f"netlink receive: {e.strerror or e}", e.errno or 0) from None
            if not buf:
                raise NetlinkError("netlink: empty reply")
            got += len(buf)
            msgs, why = parse_messages(buf)
            if why and not msgs:
                raise NetlinkError(f"netlink: malformed reply: {why}")
            for m in msgs:
                if m.seq != seq:
                    continue  # not ours (e.g. an audit multicast): skip
                if m.type == NLMSG_ERROR:
                    code = error_code(m)
                    if code < 0:
                        raise NetlinkError("netlink: short error message")
                    if code:
                        raise NetlinkError(f"netlink: {os.strerror(code)}", code)
                    return out  # the ACK closes the exchange
                if m.type == NLMSG_DONE:
                    return out
                if m.type == NLMSG_NOOP:
                    continue
                out.append(m)
                if not dump and not ack:
                    return out
            if got > max_bytes or len(out) > max_messages:
                raise NetlinkError(f"netlink: reply larger than {max_bytes} bytes / {max_messages} messages")
    finally:
        s.close()


def permission_reason(err: NetlinkError, what: str, cap: str) -> str:
    if err.errno in (_errno.EPERM, _errno.EACCES):
        return f"{what}: not permitted (needs {cap})"
    if err.errno == _errno.EPROTONOSUPPORT:
        return f"{what}: not supported by this kernel"
    return f"{what}: {err}"
