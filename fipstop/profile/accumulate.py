"""The accumulated profile: every interval since the profile started, summed.

py-spy top accumulates by default: a one-second interval holds a few dozen
samples, so the panes flicker between data and "none in this interval".
:func:`accumulate` folds each new :class:`ProfileReport` into the running
total, per profiler source:

- stacks are summed by (tid, frames); the newest thread name is kept;
- locks are summed by address (wait time, waits), their waiters united and
  their stacks summed the same way;
- ``extra`` counters that count per interval (lost stacks, full maps, wait
  totals, py-spy's samples) are summed, percentages are weighted by each
  interval's duration, settings (``oncpu_hz``, ``compile_s``) are the newest;
- the thread split is the newest interval's (a split of "now" is what the
  thread rows say; the screen labels it so).

A profiler that becomes unavailable shows its reason (its totals stop).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from fipstop.probes.bpf_program import ERRORS
from fipstop.probes.stacks import LockWait, ProfileSample, StackCount
from fipstop.profile.session import ProfileReport

__all__ = ["Accumulated", "SUMMED_EXTRA", "accumulate", "lost_stack_shares"]

#: ``extra`` keys that count per interval (summed over intervals)
SUMMED_EXTRA = frozenset({*ERRORS, "runqueue_ns", "blocked_ns", "lock_wait_ns", "condvar_wait_ns", "samples"})


@dataclass(frozen=True)
class Accumulated:
    """The running total of one profile: ``report`` spans ``intervals`` reports."""

    report: ProfileReport
    intervals: int = 1


def merge_stacks(*groups: Iterable[StackCount]) -> tuple[StackCount, ...]:
    """Stacks summed by (tid, frames); the last thread name seen wins."""
    value: dict[tuple[int, tuple[str, ...]], int] = {}
    name: dict[tuple[int, tuple[str, ...]], str] = {}
    for group in groups:
        for s in group:
            k = (s.tid, s.frames)
            value[k] = value.get(k, 0) + int(s.value)
            name[k] = s.thread
    return tuple(StackCount(frames=k[1], value=v, tid=k[0], thread=name[k]) for k, v in value.items())


def merge_locks(old: Iterable[LockWait], new: Iterable[LockWait]) -> tuple[LockWait, ...]:
    out: dict[int, LockWait] = {lw.address: lw for lw in old}
    for lw in new:
        prev = out.get(lw.address)
        if prev is None:
            out[lw.address] = lw
            continue
        out[lw.address] = LockWait(
            address=lw.address, wait_ns=prev.wait_ns + lw.wait_ns, waits=prev.waits + lw.waits,
            waiter_tids=tuple(sorted({*prev.waiter_tids, *lw.waiter_tids})),
            stacks=merge_stacks(prev.stacks, lw.stacks), holder_stacks=merge_stacks(prev.holder_stacks,
                                                                                     lw.holder_stacks),
            region=lw.region or prev.region)
    return tuple(out.values())


def merge_extra(old: dict[str, float], old_ns: int, new: dict[str, float], new_ns: int) -> dict[str, float]:
    out = dict(old)
    span = old_ns + new_ns
    for k, v in new.items():
        if k in SUMMED_EXTRA:
            out[k] = out.get(k, 0.0) + v
        elif k.endswith("_pct") and k in old and span > 0:
            out[k] = (old[k] * old_ns + v * new_ns) / span
        else:
            out[k] = v
    return out


def merge_sample(old: ProfileSample | None, new: ProfileSample) -> ProfileSample:
    if old is None or not old.available or not new.available:
        return new
    return replace(new, duration_ns=old.duration_ns + new.duration_ns,
                   oncpu=merge_stacks(old.oncpu, new.oncpu), offcpu=merge_stacks(old.offcpu, new.offcpu),
                   locks=merge_locks(old.locks, new.locks),
                   extra=merge_extra(old.extra, old.duration_ns, new.extra, new.duration_ns))


def accumulate(total: Accumulated | None, new: ProfileReport) -> Accumulated:
    """``total`` with ``new`` folded in (a report of another pid starts afresh)."""
    if total is None or total.report.pid != new.pid:
        return Accumulated(new, 1)
    old = total.report
    if new.taken_mono_ns <= old.taken_mono_ns:
        return total  # the same report again (a fixture source repeats its last one)
    olds = {p.source: p for p in old.profiles}
    profiles = tuple(merge_sample(olds.get(p.source), p) for p in new.profiles)
    merged = replace(new, duration_ns=old.duration_ns + new.duration_ns, profiles=profiles)
    return Accumulated(merged, total.intervals + 1)


def lost_stack_shares(sample: ProfileSample) -> dict[str, float | None]:
    """The share (percent) of on-CPU samples and of off-CPU time whose user or
    kernel stack was lost (a ``[... stack lost: ...]`` frame: a hash collision
    or a full stack map), from the stacks themselves; None: nothing sampled."""
    out: dict[str, float | None] = {}
    for which, stacks in (("oncpu", sample.oncpu), ("offcpu", sample.offcpu)):
        total = sum(s.value for s in stacks)
        lost = sum(s.value for s in stacks if any("stack lost:" in f for f in s.frames))
        out[which] = 100.0 * lost / total if total else None
    return out
