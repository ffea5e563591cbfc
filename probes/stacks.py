"""Stack profiles as every profiler probe reports them (bpf, py-spy).

One shape for all sources so the profile screen, ``fipstop profile --json``,
the folded-stack export and the recorder never care where a stack came from:

- :class:`StackCount`: one aggregated stack of one thread, root first, with a
  value whose unit the owning :class:`ProfileSample` names (``ns`` for off-CPU
  and lock waits, ``samples`` for on-CPU sampling).
- :class:`LockWait`: one lock (a futex word address in the target's address
  space) with the time threads spent waiting on it, how many waits, which
  threads waited, and the waiting stacks.
- :class:`ProfileSample`: what one profiler saw of one process over one
  interval.  ``available``/``reason`` carry why a profiler could not run, so
  the screen shows the reason instead of an empty panel.

Frames and thread names are raw text from the target process (symbol names,
Python function names, thread names an attacker may have set): escape them
before they reach a terminal (``fipstop.textsafe.escape_text``).

Never imports textual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["LockWait", "ProfileSample", "StackCount", "folded_lines"]


@dataclass(frozen=True, slots=True)
class StackCount:
    """One aggregated stack of one thread; ``frames[0]`` is the root."""

    frames: tuple[str, ...]
    value: int
    tid: int = 0
    thread: str = ""


@dataclass(frozen=True, slots=True)
class LockWait:
    """Waits on one futex word (``address`` in the target's address space)."""

    address: int
    wait_ns: int
    waits: int
    waiter_tids: tuple[int, ...] = ()
    stacks: tuple[StackCount, ...] = ()
    #: where known, the stacks of the threads that held it (woke the waiters)
    holder_stacks: tuple[StackCount, ...] = ()
    #: where the address lies in the target's memory map, e.g. ``libc.so.6
    #: data`` (glibc's own static locks: syslog's), ``[heap]``, ``anon``
    region: str = ""


@dataclass(frozen=True)
class ProfileSample:
    """What one profiler (``source``) saw of process ``pid`` in one interval.

    ``oncpu`` values are in ``oncpu_unit`` (``"samples"`` at ``oncpu_hz``),
    ``offcpu`` and lock waits in nanoseconds.  ``extra`` holds
    source-specific numbers with units in their names (py-spy: ``gil_pct``,
    ``idle_pct``, ``rate_hz``).
    """

    source: str
    pid: int
    taken_mono_ns: int
    duration_ns: int
    available: bool = True
    reason: str = ""
    oncpu: tuple[StackCount, ...] = ()
    oncpu_unit: str = "samples"
    oncpu_hz: float = 0.0
    offcpu: tuple[StackCount, ...] = ()
    locks: tuple[LockWait, ...] = ()
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def unavailable(cls, source: str, pid: int, reason: str, taken_mono_ns: int = 0) -> ProfileSample:
        return cls(source=source, pid=pid, taken_mono_ns=taken_mono_ns, duration_ns=0,
                   available=False, reason=reason)


def _frame(s: str) -> str:
    # Folded format: ';' separates frames and the last ' ' separates the count.
    return s.replace(";", ":").replace("\n", " ").replace("\r", " ") or "?"


def folded_lines(stacks: Sequence[StackCount], *, with_thread: bool = True, divisor: int = 1) -> list[str]:
    """Brendan Gregg's folded format (flamegraph.pl, speedscope, inferno).

    ``thread;root;...;leaf value`` per line, merged when equal, sorted.  The
    format has no place for a unit: ``divisor`` converts the values once
    merged (1000: nanoseconds to the microseconds bcc's ``offcputime -f``
    writes), rounded to the nearest; a stack that rounds to 0 is left out.
    """
    merged: dict[str, int] = {}
    for st in stacks:
        frames = [_frame(f) for f in st.frames]
        if with_thread:
            frames.insert(0, _frame(f"{st.thread or 'thread'}-{st.tid}"))
        key = ";".join(frames) if frames else "?"
        merged[key] = merged.get(key, 0) + int(st.value)
    half = divisor // 2
    scaled = ((k, (v + half) // divisor) for k, v in sorted(merged.items()))
    return [f"{k} {v}" for k, v in scaled if v > 0]
