"""Mode ``dnstap`` of ``fipstop bench bind``: named's own dnstap into
``fstrm_capture`` (Debian's fstrm-bin), and what the capture holds.

named logs ``dnstap { auth query; };`` (with ``recursion no`` BIND 9.18 types
the queries it answers AUTH_QUERY, not CLIENT_QUERY) to a Unix socket that
``fstrm_capture -t protobuf:dnstap.Dnstap -u SOCK -w FILE`` reads.  The
file is a Frame Streams file: a START control frame, data frames (a 32-bit
big-endian length, then one protobuf ``Dnstap`` message), a STOP control
frame.  :func:`count_frames` walks it and counts the frames whose message
is an AUTH_QUERY for a name of the bench's zone with type A: the same
queries the other modes count by their ``example.test IN A`` text (the
readiness probe's SOA queries are not among them).  Bounded: a damaged
file ends the walk with ``damaged`` set, never an exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

CONTENT_TYPE = "protobuf:dnstap.Dnstap"
AUTH_QUERY = 1  # dnstap.Message.Type
CLIENT_QUERY = 5
TYPE_A = 1
MAX_FRAME = 1 << 20


@dataclass
class TapCount:
    frames: int = 0  # data frames
    auth_query: int = 0
    client_query: int = 0
    matched: int = 0  # AUTH_QUERY or CLIENT_QUERY, type A, name under the zone
    other: int = 0
    damaged: str | None = None
    types: dict[int, int] = field(default_factory=dict)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def _fields(b: bytes) -> list[tuple[int, int, int | bytes]]:
    """The (field number, wire type, value) of one protobuf message."""
    out: list[tuple[int, int, int | bytes]] = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
            out.append((num, wt, v))
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            out.append((num, wt, b[i:i + n]))
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
    return out


def question(wire: bytes) -> tuple[str, int] | None:
    """(qname lower-case without the final dot, qtype) of a DNS message, or None."""
    if len(wire) < 12 or struct.unpack_from(">H", wire, 4)[0] < 1:
        return None
    i, labels = 12, []
    while True:
        if i >= len(wire):
            return None
        n = wire[i]
        i += 1
        if n == 0:
            break
        if n > 63 or i + n > len(wire):
            return None
        labels.append(wire[i:i + n].decode("ascii", "replace").lower())
        i += n
    if i + 2 > len(wire):
        return None
    return ".".join(labels), struct.unpack_from(">H", wire, i)[0]


def parse_message(data: bytes, zone: str) -> tuple[int | None, bool]:
    """(dnstap Message.type, whether it is a type-A query under zone) of one Dnstap frame."""
    mtype, match = None, False
    for num, wt, v in _fields(data):
        if num == 14 and wt == 2 and isinstance(v, bytes):  # Dnstap.message
            wire = None
            for n2, w2, v2 in _fields(v):
                if n2 == 1 and w2 == 0 and isinstance(v2, int):  # Message.type
                    mtype = v2
                elif n2 == 10 and w2 == 2 and isinstance(v2, bytes):  # Message.query_message
                    wire = v2
            if wire is not None:
                q = question(wire)
                match = q is not None and q[1] == TYPE_A and (q[0] == zone or q[0].endswith("." + zone))
    return mtype, match


def count_frames(path: Path, zone: str) -> TapCount:
    """Walk a Frame Streams file of dnstap messages (see the module doc)."""
    c = TapCount()
    try:
        data = path.read_bytes()
    except OSError as exc:
        c.damaged = f"cannot read {path}: {exc.strerror}"
        return c
    i = 0
    while i + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, i)
        i += 4
        if n == 0:  # control frame: its length, then the frame
            if i + 4 > len(data):
                c.damaged = "truncated control frame"
                break
            (cl,) = struct.unpack_from(">I", data, i)
            i += 4 + cl
            continue
        if n > MAX_FRAME or i + n > len(data):
            c.damaged = f"frame of {n} bytes at offset {i - 4} runs past the end"
            break
        frame = data[i:i + n]
        i += n
        c.frames += 1
        try:
            mtype, match = parse_message(frame, zone)
        except ValueError as exc:
            c.damaged = f"frame {c.frames}: {exc}"
            break
        if mtype is not None:
            c.types[mtype] = c.types.get(mtype, 0) + 1
        if mtype == AUTH_QUERY:
            c.auth_query += 1
        elif mtype == CLIENT_QUERY:
            c.client_query += 1
        else:
            c.other += 1
        if match and mtype in (AUTH_QUERY, CLIENT_QUERY):
            c.matched += 1
    return c
