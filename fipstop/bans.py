"""Ban events: what an IPS publishes when it bans or unbans an address.

``fipstop ips`` writes one record per event into a FIPS domain of its own
(``BANS_DOMAIN`` by default), so any consumer can follow bans the way it
follows logs; the bans probe reads them back; Fail2Ban's bans are converted
to the same :class:`BanEvent` so the Bans panel compares both side by side.

Wire format: one JSON object per record, UTF-8, at most ``MAX_EVENT_BYTES``::

    {"v":1,"kind":"ban","ip":"10.0.0.7","jail":"named-refused",
     "first_ns":..., "trigger_ns":..., "ban_ns":..., "hits":5,
     "action":"nft","result":"ok","source":"fipstop-ips"}

Times are CLOCK_REALTIME nanoseconds: ``first_ns`` is the timestamp of the
first offending record counted toward the ban, ``trigger_ns`` of the record
that crossed ``maxretry``, ``ban_ns`` when the action returned.  Time-to-ban
is ``ban_ns - first_ns`` (what the issue asks for: first offending record ->
ban); ``ban_ns - trigger_ns`` is the IPS's own reaction time.

A ban record comes from another process: :func:`decode` validates every field
and bounds every string, and raises ``ValueError`` with a one-line reason.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass

__all__ = ["BANS_DOMAIN", "MAX_EVENT_BYTES", "BanEvent", "decode", "encode", "event_parts", "wire_str"]

#: Default domain ``fipstop ips`` publishes ban events into.
BANS_DOMAIN = "fips-bans"
#: An encoded event never exceeds this (strings are cut to fit).
MAX_EVENT_BYTES = 1024
WIRE_VERSION = 1
_KINDS = ("ban", "unban")
_MAX_STR = 200


@dataclass(frozen=True, slots=True)
class BanEvent:
    kind: str  # "ban" | "unban"
    ip: str
    jail: str
    first_ns: int
    trigger_ns: int
    ban_ns: int
    hits: int
    action: str  # "dry-run" | "nft" | "command" | "fail2ban" ...
    result: str  # "ok" or a one-line error
    source: str = "fipstop-ips"

    @property
    def time_to_ban_ns(self) -> int:
        return max(0, self.ban_ns - self.first_ns)

    @property
    def reaction_ns(self) -> int:
        return max(0, self.ban_ns - self.trigger_ns)

    @property
    def ok(self) -> bool:
        return self.result == "ok"


def _cut(s: str) -> str:
    return s if len(s) <= _MAX_STR else s[: _MAX_STR - 1] + "\u2026"


def encode(ev: BanEvent) -> bytes:
    d = asdict(ev)
    for k in ("jail", "action", "result", "source"):
        d[k] = _cut(" ".join(str(d[k]).split()))
    out = json.dumps({"v": WIRE_VERSION, **d}, separators=(",", ":"), ensure_ascii=True).encode()
    if len(out) > MAX_EVENT_BYTES:  # pragma: no cover - bounded by _cut
        raise ValueError("ban event too long")
    return out


def wire_str(v: str) -> bytes:
    """A string field as :func:`encode` writes it (cut, whitespace folded, JSON)."""
    return json.dumps(_cut(" ".join(str(v).split())), ensure_ascii=True).encode()


def event_parts(kind: str, action: str, result: str = "ok", source: str = "fipstop-ips") -> tuple[bytes, bytes]:
    """The constant head and tail of :func:`encode`'s output for one (kind,
    action, result, source), for ``fipstop._ipsfast.format_events``: a record
    is ``head + ip + '","jail":' + wire_str(jail) + ',"first_ns":..,"hits":N' + tail``,
    byte for byte what ``encode(BanEvent(...))`` gives for a canonical ``ip``.
    ``fipstop ips`` bans tens of thousands of addresses in a burst;
    ``asdict`` + ``json.dumps`` per event would dominate its time-to-ban."""
    if kind not in _KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    head = f'{{"v":{WIRE_VERSION},"kind":"{kind}","ip":"'.encode()
    tail = b',"action":' + wire_str(action) + b',"result":' + wire_str(result) + b',"source":' + wire_str(source) + b"}"
    return head, tail


def _int(d: dict, k: str) -> int:
    v = d.get(k)
    if not isinstance(v, int) or isinstance(v, bool) or not (0 <= v < 1 << 63):
        raise ValueError(f"ban event: field {k!r} is not a non-negative 64-bit integer")
    return v


def _str(d: dict, k: str) -> str:
    v = d.get(k)
    if not isinstance(v, str):
        raise ValueError(f"ban event: field {k!r} is not a string")
    return _cut(v)


def decode(payload: bytes | bytearray | memoryview) -> BanEvent:
    """Parse one ban record; ``ValueError`` (one line) when it is not one."""
    b = bytes(payload)
    if len(b) > MAX_EVENT_BYTES:
        raise ValueError(f"ban event: {len(b)} bytes, more than {MAX_EVENT_BYTES}")
    try:
        d = json.loads(b.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"ban event: not JSON ({type(e).__name__})") from None
    if not isinstance(d, dict):
        raise ValueError("ban event: not a JSON object")
    if d.get("v") != WIRE_VERSION:
        raise ValueError(f"ban event: unknown version {str(d.get('v'))[:20]!r}")
    kind = _str(d, "kind")
    if kind not in _KINDS:
        raise ValueError(f"ban event: unknown kind {kind[:20]!r}")
    ip = _str(d, "ip")
    try:
        ip = str(ipaddress.ip_address(ip))
    except ValueError:
        raise ValueError(f"ban event: {ip[:60]!r} is not an IP address") from None
    return BanEvent(kind=kind, ip=ip, jail=_str(d, "jail"), first_ns=_int(d, "first_ns"),
                    trigger_ns=_int(d, "trigger_ns"), ban_ns=_int(d, "ban_ns"), hits=_int(d, "hits"),
                    action=_str(d, "action"), result=_str(d, "result"),
                    source=_str(d, "source") if "source" in d else "fipstop-ips")
