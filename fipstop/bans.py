"""Ban events: what an IPS publishes when it bans or unbans an address.

``fipstop ips`` writes one record per event into a FIPS domain of its own
(``BANS_DOMAIN`` by default), so any consumer can follow bans the way it
follows logs; the bans probe reads them back; Fail2Ban's bans are converted
to the same :class:`BanEvent` so the Bans panel compares both side by side.

Wire format: one JSON object per record, UTF-8, at most ``MAX_EVENT_BYTES``::

    {"v":1,"kind":"ban","ip":"10.0.0.7","jail":"sshd",
     "first_ns":..., "trigger_ns":..., "ban_ns":..., "hits":5,
     "data":{"user":"root"},"bantime_ms":600000,
     "action":"nft","result":"ok","source":"fipstop-ips"}

``data`` (optional, absent when empty) holds what the filter captured of the
failure that triggered the ban besides its address -- ``<F-USER>``,
``<F-ALT_USER>``, ``<F-ID>``, ``<F-PORT>`` and other groups -- each value cut
to 64 characters, as many items as fit in 384 bytes (:func:`data_json`).

``bantime_ms`` (optional, ban events only) is how long the ban lasts: the ban ends at
``ban_ns + bantime_ms`` ms (``BanEvent.expires_ns``).  Events without it (recordings made before
``fipstop ips`` wrote it) decode with ``expires_ns`` None: unknown.

Times are CLOCK_REALTIME nanoseconds: ``first_ns`` is the timestamp of the
first offending record counted toward the ban, ``trigger_ns`` of the record
that crossed ``maxretry``, ``ban_ns`` when the action returned.  Time-to-ban
is ``ban_ns - first_ns`` (what the issue asks for: first offending record ->
ban); ``ban_ns - trigger_ns`` is the IPS's own reaction time.

A ban record comes from another process: :func:`decode` validates every field
and bounds every string, and raises ``ValueError`` with a one-line reason.

The IPS also publishes its own cumulative counters (:class:`IpsTally`, kind
``"stats"``) a few times a second, from a thread of its own and so on a ring of
its own that a burst of ban events never laps::

    {"v":1,"kind":"stats","source":"fipstop-ips","pid":..,"started_ns":..,"taken_ns":..,
     "bans":..,"unbans":..,"active":..,"failed":..,"published":..,"dropped":..,
     "ttb":[count,p50_ns,p90_ns,p99_ns,max_ns],"control":"/run/fipstop/ips-fips-bans.sock",
     "jails":[[name,bans,active,failed],...]}

``control`` (optional) is the IPS's control socket (:mod:`fipstop.ips.control`): where
``fipstop ips-client`` (and the banned-addresses view's ``u``) asks it to lift a ban.

A monitor that follows the events can be lapped when 2^16 bans arrive in a
second; the tally is how it still shows exact totals, bans in force and the
IPS's own time-to-ban percentiles (over every ban, not over the events it
happened to read).  :func:`decode_record` returns either kind.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass

__all__ = ["BANS_AUTO", "BANS_DOMAIN", "MAX_EVENT_BYTES", "BanEvent", "IpsTally", "decode", "decode_record", "encode",
           "encode_tally", "event_parts", "wire_str"]

#: Default domain ``fipstop ips`` publishes ban events into.
BANS_DOMAIN = "fips-bans"
#: A bans domain name meaning "not told: find it" (``fips-bans``, else a domain named ``NAME-bans``)
BANS_AUTO = "*"
#: An encoded event never exceeds this (strings are cut to fit).
MAX_EVENT_BYTES = 1024
WIRE_VERSION = 1
_KINDS = ("ban", "unban")
_MAX_STR = 200


@dataclass(frozen=True, slots=True)
class BanEvent:
    kind: str  # "ban" | "unban"
    ip: str  # an address, or a network banned as a whole ("198.18.7.0/24")
    jail: str
    first_ns: int
    trigger_ns: int
    ban_ns: int
    hits: int
    action: str  # "dry-run" | "nft" | "command" | "fail2ban" ...
    result: str  # "ok" or a one-line error
    source: str = "fipstop-ips"
    #: (name, value) pairs the filter captured (user, ...); attacker-controlled text
    data: tuple[tuple[str, str], ...] = ()
    #: when the ban ends (ns since the epoch): None when the source does not say (``fipstop ips``'s events
    #: before they carried ``bantime_ms``);
    #: ``permanent`` when it never ends (Fail2Ban's bantime -1)
    expires_ns: int | None = None
    permanent: bool = False

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


_DATA_CHARS = 64
_DATA_ITEMS_MAX = 384
_MAX_DATA = 8


def data_json(data) -> str:
    """The ``,"data":{...}`` part of an event ('' without data): each value cut to 64 characters,
    an item kept while the items so far (each with one separator) fit in 384 bytes -- the rule
    fipstop/csrc/ips_match.c's format_events applies, byte for byte."""
    items: list[str] = []
    budget = 0
    for k, v in data or ():
        one = json.dumps(str(k), ensure_ascii=True) + ":" + json.dumps(str(v)[:_DATA_CHARS], ensure_ascii=True)
        if budget + len(one) + 1 > _DATA_ITEMS_MAX:
            continue
        items.append(one)
        budget += len(one) + 1
    return ',"data":{' + ",".join(items) + "}" if items else ""


def encode(ev: BanEvent) -> bytes:
    d = asdict(ev)
    d.pop("data")
    for k in ("jail", "action", "result", "source"):
        d[k] = _cut(" ".join(str(d[k]).split()))
    head = {"v": WIRE_VERSION, **{k: d[k] for k in ("kind", "ip", "jail", "first_ns", "trigger_ns", "ban_ns", "hits")}}
    tail = {k: d[k] for k in ("action", "result", "source")}
    bt = bantime_json(_bantime_ms(ev))
    out = (json.dumps(head, separators=(",", ":"), ensure_ascii=True)[:-1] + data_json(ev.data) + bt + ","
           + json.dumps(tail, separators=(",", ":"), ensure_ascii=True)[1:]).encode()
    if len(out) > MAX_EVENT_BYTES:  # pragma: no cover - bounded by _cut
        raise ValueError("ban event too long")
    return out


def _bantime_ms(ev: BanEvent) -> int | None:
    if ev.kind != "ban" or ev.permanent or ev.expires_ns is None or ev.expires_ns < ev.ban_ns:
        return None
    return (ev.expires_ns - ev.ban_ns) // 1_000_000


def bantime_json(ms: int | None) -> str:
    """The ``,"bantime_ms":N`` part of a ban event ('' when the bantime is not known)."""
    return "" if ms is None else f',"bantime_ms":{int(ms)}'


def wire_str(v: str) -> bytes:
    """A string field as :func:`encode` writes it (cut, whitespace folded, JSON)."""
    return json.dumps(_cut(" ".join(str(v).split())), ensure_ascii=True).encode()


def event_parts(kind: str, action: str, result: str = "ok", source: str = "fipstop-ips",
                bantime_ms: int | None = None) -> tuple[bytes, bytes]:
    """The constant head and tail of :func:`encode`'s output for one (kind,
    action, result, source), for ``fipstop._ipsfast.format_events``: a record
    is ``head + ip + '","jail":' + wire_str(jail) + ',"first_ns":..,"hits":N' + tail``,
    byte for byte what ``encode(BanEvent(...))`` gives for a canonical ``ip`` (a ban's ``bantime_ms``, constant
    per jail, is in the tail: ``expires_ns = ban_ns + bantime_ms`` ms).
    ``fipstop ips`` bans tens of thousands of addresses in a burst;
    ``asdict`` + ``json.dumps`` per event would dominate its time-to-ban."""
    if kind not in _KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    head = f'{{"v":{WIRE_VERSION},"kind":"{kind}","ip":"'.encode()
    if kind != "ban":
        bantime_ms = None
    tail = (bantime_json(bantime_ms).encode() + b',"action":' + wire_str(action) + b',"result":' + wire_str(result)
            + b',"source":' + wire_str(source) + b"}")
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
        # an address, or a network banned as a whole (fipstop.ips.ranges: "198.18.7.0/24")
        ip = str(ipaddress.ip_network(ip, strict=True)) if "/" in ip else str(ipaddress.ip_address(ip))
    except ValueError:
        raise ValueError(f"ban event: {ip[:60]!r} is not an IP address or network") from None
    data = d.get("data", {})
    if not isinstance(data, dict) or len(data) > _MAX_DATA or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"ban event: field 'data' is not an object of at most {_MAX_DATA} strings")
    ban_ns = _int(d, "ban_ns")
    expires = None
    if "bantime_ms" in d and kind == "ban":
        ms = _int(d, "bantime_ms")
        if ms >= 1 << 40:  # 35 years: a bigger one is not a bantime
            raise ValueError("ban event: field 'bantime_ms' is out of range")
        expires = ban_ns + ms * 1_000_000
    return BanEvent(kind=kind, ip=ip, jail=_str(d, "jail"), first_ns=_int(d, "first_ns"),
                    trigger_ns=_int(d, "trigger_ns"), ban_ns=ban_ns, hits=_int(d, "hits"),
                    action=_str(d, "action"), result=_str(d, "result"),
                    source=_str(d, "source") if "source" in d else "fipstop-ips",
                    data=tuple((_cut(k), _cut(v)) for k, v in data.items()), expires_ns=expires)


@dataclass(frozen=True, slots=True)
class IpsTally:
    """What the IPS itself counted since it started (cumulative), at ``taken_ns``.

    ``bans`` are bans that took effect, ``failed`` ban actions that failed for
    good, ``active`` bans in force; ``published`` / ``dropped`` are ban events
    it put into (or could not put into) the bans domain.  ``ttb_*_ns`` are its
    time-to-ban percentiles over every ban with a latency >= 0 (``ttb_count`` of them; the IPS's
    log histogram, within 2 %), None before the first ban.  ``jails``:
    (name, bans, active, failed) each.
    """

    source: str
    pid: int
    started_ns: int
    taken_ns: int
    bans: int
    unbans: int
    active: int
    failed: int
    published: int
    dropped: int
    ttb_count: int = 0
    ttb_p50_ns: int | None = None
    ttb_p90_ns: int | None = None
    ttb_p99_ns: int | None = None
    ttb_max_ns: int | None = None
    jails: tuple[tuple[str, int, int, int], ...] = ()
    #: the IPS's control socket ('' when it has none): see :mod:`fipstop.ips.control`
    control: str = ""


#: a control socket's path is at most this long (AF_UNIX's sun_path is 108 bytes)
MAX_CONTROL_PATH = 107
_TALLY_INTS = ("pid", "started_ns", "taken_ns", "bans", "unbans", "active", "failed", "published", "dropped")


def encode_tally(t: IpsTally) -> bytes:
    """One ``"stats"`` record, at most :data:`MAX_EVENT_BYTES`: jails that do
    not fit are left out (the totals still count them)."""
    head = {"v": WIRE_VERSION, "kind": "stats", "source": _cut(" ".join(t.source.split()))}
    head.update({k: int(getattr(t, k)) for k in _TALLY_INTS})
    ttb = [int(t.ttb_count)] + [-1 if v is None else int(v)
                                for v in (t.ttb_p50_ns, t.ttb_p90_ns, t.ttb_p99_ns, t.ttb_max_ns)]
    head["ttb"] = ttb
    if t.control and len(t.control.encode()) <= MAX_CONTROL_PATH:
        head["control"] = t.control
    base = json.dumps(head, separators=(",", ":"), ensure_ascii=True)[:-1]
    jails: list[str] = []
    size = len(base) + len(',"jails":[]}')
    for name, bans, active, failed in t.jails:
        one = json.dumps([" ".join(str(name).split())[:64], int(bans), int(active), int(failed)],
                         separators=(",", ":"), ensure_ascii=True)
        if size + len(one) + 1 > MAX_EVENT_BYTES:
            break
        jails.append(one)
        size += len(one) + 1
    return (base + ',"jails":[' + ",".join(jails) + "]}").encode()


def _tally(d: dict) -> IpsTally:
    ttb = d.get("ttb")
    if not (isinstance(ttb, list) and len(ttb) == 5 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            and -1 <= v < 1 << 63 for v in ttb)):
        raise ValueError("ban stats: field 'ttb' is not 5 integers")
    jails_raw = d.get("jails", [])
    if not isinstance(jails_raw, list) or len(jails_raw) > 64:
        raise ValueError("ban stats: field 'jails' is not a list of at most 64")
    jails = []
    for j in jails_raw:
        if not (isinstance(j, list) and len(j) == 4 and isinstance(j[0], str)
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63 for v in j[1:])):
            raise ValueError("ban stats: a jail is not [name, bans, active, failed]")
        jails.append((_cut(j[0]), j[1], j[2], j[3]))
    pct = [None if v < 0 else v for v in ttb[1:]]
    control = d.get("control", "")
    if not isinstance(control, str) or len(control.encode()) > MAX_CONTROL_PATH or not control.isprintable():
        raise ValueError("ban stats: field 'control' is not a socket path")
    return IpsTally(source=_str(d, "source"), **{k: _int(d, k) for k in _TALLY_INTS}, ttb_count=max(ttb[0], 0),
                    ttb_p50_ns=pct[0], ttb_p90_ns=pct[1], ttb_p99_ns=pct[2], ttb_max_ns=pct[3], jails=tuple(jails),
                    control=control)


def decode_record(payload: bytes | bytearray | memoryview) -> BanEvent | IpsTally:
    """A record of a bans domain: a ban event or the IPS's tally; ``ValueError`` (one line) otherwise."""
    b = bytes(payload)
    if b'"kind":"stats"' not in b[:40]:
        return decode(b)
    if len(b) > MAX_EVENT_BYTES:
        raise ValueError(f"ban stats: {len(b)} bytes, more than {MAX_EVENT_BYTES}")
    try:
        d = json.loads(b.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"ban stats: not JSON ({type(e).__name__})") from None
    if not isinstance(d, dict) or d.get("v") != WIRE_VERSION or d.get("kind") != "stats":
        raise ValueError("ban stats: not a version-1 stats object")
    return _tally(d)
