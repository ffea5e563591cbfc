"""Evicting a consumer by hand (the dashboard's Ctrl-K / F9 on a consumer).

A producer evicts the consumer holding a full ring once its heartbeat is older than the domain's grace. A consumer
that is stuck but still heartbeats (a reader thread wedged while its heartbeat thread runs, a joiner looping on a
corrupt ring) is never evicted that way and holds the ring full for ever: every record is dropped. The operator's way
out is the same step a producer takes, ``fips_consumer_evict``: a compare-and-swap of the consumer's (ACTIVE,
generation) to EVICTED, with the generation the operator saw, so a consumer restarted in that entry meanwhile is not
evicted in its place. The consumer is told at its next read and can rejoin by name; what it missed is counted lost.

The dashboard attaches read-only: the eviction opens the domain for writing just for the call, which needs the rights
a producer has on the file (refused in one line otherwise).
"""

from __future__ import annotations

import errno
import os

from fipstop import _fips

__all__ = ["evict", "refusal"]


def refusal(*, replay: bool, health: str) -> str:
    """Why this consumer cannot be evicted from here ('' if it can)."""
    if replay:
        return "a recording: nothing to evict (this is the past)"
    if health in ("evicted", "closed", "free"):
        return f"it is {health} already"
    if health == "joining":
        return "it is still joining (evict it once it is registered)"
    return ""


def evict(path: str, domain: str, index: int, generation: int, name: str,
          created_realtime_ns: int | None = None) -> tuple[bool, str]:
    """Evict consumer ``index`` of ``domain`` (the file ``path``) if it is still the one seen (``generation``, in
    the domain file created at ``created_realtime_ns``: generations start again in a recreated file);
    (ok, one line saying what happened)."""
    shm_dir, base = os.path.split(path)
    if base != f"fips.{domain}":
        return False, f"{path}: not the file of domain {domain}"
    try:
        d = _fips.Domain(domain, shm_dir=shm_dir, create=False, any_owner=True)
    except _fips.FipsError as e:
        code = getattr(e, "code", 0)
        if code in (errno.EACCES, errno.EPERM):
            return False, f"no write access to {path}: evicting needs a producer's rights on the domain"
        return False, f"cannot open {path} for writing: {e}"
    except OSError as e:
        return False, f"cannot open {path} for writing: {e.strerror or e}"
    try:
        if created_realtime_ns is not None and d.header.created_realtime_ns != created_realtime_ns:
            return False, (f"{name} was not evicted: domain {domain} was recreated since it was shown "
                           "(refresh and retry)")
        d.evict_consumer(int(index), int(generation))
    except _fips.FipsError as e:
        if getattr(e, "code", 0) == errno.ESRCH:
            return False, f"{name} was not evicted: it left or was replaced since it was shown (refresh and retry)"
        return False, f"{name} was not evicted: {e}"
    finally:
        d.close()
    return True, (f"evicted {name} from {domain}: producers stop waiting for it; it is told at its next read "
                  "and can rejoin by name (what it missed counted lost)")
