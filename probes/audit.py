"""Linux audit: the kernel's AUDIT_GET status, the numbers ``auditctl -s`` shows.

``lost`` counts audit records the kernel threw away (backlog full with
``failure`` 1 or rate limit hit): the audit equivalent of ring drops;
``backlog`` is its queue towards auditd.  Reading it needs CAP_AUDIT_CONTROL
(root in the initial user namespace); without it the sample says so.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fipstop.probes.netlink import NETLINK_AUDIT, Message, NetlinkError, permission_reason, request

AUDIT_GET = 1000
FIELDS = ("mask", "enabled", "failure", "pid", "rate_limit", "backlog_limit", "lost", "backlog",
          "feature_bitmap", "backlog_wait_time", "backlog_wait_time_actual")


@dataclass(frozen=True, slots=True)
class AuditSample:
    ok: bool
    reason: str = ""
    enabled: int = -1
    failure: int = -1
    pid: int = -1
    rate_limit: int = -1
    backlog_limit: int = -1
    lost: int = -1
    backlog: int = -1
    backlog_wait_time: int = -1  # -1: not reported by this kernel
    backlog_wait_time_actual: int = -1
    taken_mono_ns: int = 0


def parse_status(payload: bytes) -> dict[str, int]:
    """struct audit_status (u32 each; older kernels send fewer fields)."""
    n = min(len(payload) // 4, len(FIELDS))
    if n < 8:
        raise ValueError(f"audit status of {len(payload)} bytes is too short (need at least 32)")
    return dict(zip(FIELDS, struct.unpack_from(f"={n}I", payload, 0)))


def sample_from_messages(msgs: Sequence[Message], now: int = 0) -> AuditSample:
    for m in msgs:
        if m.type == AUDIT_GET:
            try:
                st = parse_status(m.payload)
            except ValueError as e:
                return AuditSample(False, f"AUDIT_GET: {e}", taken_mono_ns=now)
            return AuditSample(True, "", st["enabled"], st["failure"], st["pid"], st["rate_limit"],
                               st["backlog_limit"], st["lost"], st["backlog"], st.get("backlog_wait_time", -1),
                               st.get("backlog_wait_time_actual", -1), now)
    return AuditSample(False, "AUDIT_GET: no status in the reply", taken_mono_ns=now)


def audit_get() -> list[Message]:
    return request(NETLINK_AUDIT, AUDIT_GET, 0)  # no ACK: it may arrive before the (queued) reply


class AuditProbe:
    name = "audit"

    def __init__(self, *, query: Callable[[], Sequence[Message]] = audit_get) -> None:
        self.query = query

    def available(self) -> tuple[bool, str]:
        s = self.sample()
        return s.ok, s.reason

    def sample(self) -> AuditSample:
        now = time.monotonic_ns()
        try:
            msgs = self.query()
        except NetlinkError as e:
            return AuditSample(False, permission_reason(e, "audit status", "CAP_AUDIT_CONTROL"), taken_mono_ns=now)
        return sample_from_messages(msgs, now)
