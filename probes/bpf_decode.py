"""The pure parts of the bpf profiler: what its maps hold and how they become stacks and locks.

Rows of the kernel's maps (:class:`OffRow`, :class:`FutexRow`,
:class:`WakeRow`), decoding stack ids into frames (lost stacks, frames
without frame pointers, scanned callers), aggregating rows into
:class:`fipstop.probes.stacks.StackCount` and
:class:`fipstop.probes.stacks.LockWait`, placing a lock address in the
target's memory map, and draining the maps of a loaded program
(:func:`read_maps`).  Unit-tested without bcc or root;
:class:`fipstop.probes.bpf.BpfProfiler` runs them on its maps.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fipstop.probes.bpf_program import ERRORS, OFF_SAMPLE, WAKE_SAMPLE
from fipstop.probes.stacks import LockWait, StackCount

EEXIST, ENOMEM, EFAULT, ENOENT = 17, 12, 14, 2
PREEMPTED_FRAME = "[preempted: runnable]"
WOKEN_FRAME = "[woken: waiting for a CPU]"


# --------------------------------------------------------------------------- #
# pure parts: decoding and aggregation (unit-tested without bcc or root)
# --------------------------------------------------------------------------- #
@dataclass(frozen=True, slots=True)
class OffRow:
    """One entry of the offcpu/oncpu maps."""

    tid: int
    ustack: int
    kstack: int
    #: 0 blocked; 1 preempted (still runnable); 2 woken, waiting for a CPU
    runnable: int
    value: int
    #: return-address candidates from scanning the user stack (innermost first)
    scan: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FutexRow:
    uaddr: int
    tid: int
    ustack: int
    wait_ns: int
    waits: int
    #: FUTEX_WAIT_BITSET-like: a condition variable, semaphore or join (waiting
    #: for work), not a lock; kept out of the lock table
    condvar: bool = False
    scan: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class WakeRow:
    uaddr: int
    tid: int
    ustack: int
    woken: int
    scan: tuple[int, ...] = ()


def lost_frame(stack_id: int, user: bool) -> str | None:
    """The placeholder frame for a negative stack id (None: no frames, as
    for the kernel stack of a thread sampled in user mode)."""
    side = "user" if user else "kernel"
    if stack_id == -ENOENT:  # not taken on purpose (a preempted thread)
        return None
    if stack_id == -EEXIST:
        return f"[{side} stack lost: hash collision]"
    if stack_id == -ENOMEM:
        return f"[{side} stack lost: stack map full]"
    if stack_id == -EFAULT:
        return "[no user stack]" if user else None
    return f"[{side} stack lost: error {-stack_id}]"


def clean_user_frames(leaf_first: list[str]) -> tuple[str, ...]:
    """Frame-pointer walks through code built without frame pointers run
    into garbage: stop at the first address that lies in no mapping (shown
    as ``0x...``) and collapse runs of one repeated frame."""
    out: list[str] = []
    for i, f in enumerate(leaf_first):
        if f.startswith("0x") and i > 0:
            out.append("[truncated: no frame pointer]")
            break
        if out and out[-1] == f:
            continue
        out.append(f)
    return tuple(out)


def merge_frames(user_leaf_first: Iterable[str], kernel_leaf_first: Iterable[str]) -> tuple[str, ...]:
    """Root first: the user stack from its outermost frame down to the
    leaf, then the kernel stack from the syscall entry to the leaf; kernel
    frames carry flamegraph.pl's ``_[k]`` suffix."""
    user = list(user_leaf_first)[::-1]
    kernel = [f if f.endswith("_[k]") else f + "_[k]" for f in list(kernel_leaf_first)[::-1]]
    return tuple(user + kernel)


StackResolver = Callable[[int, bool], tuple[str, ...]]
"""(stack id >= 0, user?) -> frames, leaf first."""


ScanResolver = Callable[[tuple[int, ...]], tuple[str, ...]]
"""return-address candidates -> the frames of those that hold up, innermost first."""

TRUNCATED = "[truncated: no frame pointer]"


def looks_like_call(before: bytes) -> bool:
    """Do the bytes just before a return-address candidate end with an x86-64
    call instruction?  (``e8 rel32``, or ``ff /2`` register/memory forms of
    2, 3, 4, 6 or 7 bytes.)  Filters stale data out of scanned stacks."""
    n = len(before)
    if n >= 5 and before[-5] == 0xE8:
        return True
    for size in (2, 3, 4, 6, 7):
        if n >= size and before[-size] == 0xFF and (before[-size + 1] & 0x38) == 0x10:
            return True
    return False


def combine_user(fp_leaf_first: tuple[str, ...], scanned: tuple[str, ...]) -> tuple[str, ...]:
    """The frame-pointer walk when it got anywhere; else its leaf followed by
    the scanned callers (consecutive repeats collapsed)."""
    real = [f for f in fp_leaf_first if f != TRUNCATED]
    if not scanned or (len(real) >= 3 and TRUNCATED not in fp_leaf_first):
        return fp_leaf_first
    out = real[:1] if real else []
    for f in scanned:
        if not out or out[-1] != f:
            out.append(f)
    return tuple(out)


def _frames(ustack: int, kstack: int, resolve: StackResolver, scan: tuple[int, ...] = (),
            resolve_scan: ScanResolver | None = None) -> tuple[str, ...]:
    if ustack >= 0:
        u: tuple[str, ...] = resolve(ustack, True)
        if scan and resolve_scan is not None:
            u = combine_user(u, resolve_scan(scan))
    else:
        lf = lost_frame(ustack, True)
        u = (lf,) if lf else ()
    if kstack >= 0:
        k: tuple[str, ...] = resolve(kstack, False)
    else:
        lf = lost_frame(kstack, False)
        k = (lf,) if lf else ()
    return merge_frames(u, k)


def build_stacks(rows: Iterable[OffRow], resolve: StackResolver, thread_name: Callable[[int], str],
                 *, mark_runnable: bool = True, resolve_scan: ScanResolver | None = None) -> tuple[StackCount, ...]:
    """One :class:`StackCount` per (tid, frames), largest first; run-queue
    time stands apart from blocking: a stack the thread left while still
    runnable gets :data:`PREEMPTED_FRAME` as its leaf, and the time between a
    blocked thread's wake-up and its return to a CPU is the stackless
    :data:`WOKEN_FRAME`."""
    agg: dict[tuple[int, tuple[str, ...]], int] = defaultdict(int)
    for r in rows:
        if r.value <= 0:
            continue
        frames = _frames(r.ustack, r.kstack, resolve, r.scan, resolve_scan)
        if mark_runnable and r.runnable:
            frames = frames + (WOKEN_FRAME if r.runnable == 2 else PREEMPTED_FRAME,)
        agg[(r.tid, frames)] += r.value
    out = [StackCount(frames=f, value=v, tid=tid, thread=thread_name(tid)) for (tid, f), v in agg.items()]
    out.sort(key=lambda s: (-s.value, s.tid, s.frames))
    return tuple(out)


def build_locks(futex_rows: Iterable[FutexRow], wake_rows: Iterable[WakeRow], resolve: StackResolver,
                thread_name: Callable[[int], str], region: Callable[[int], str] = lambda a: "",
                *, limit: int = 64, resolve_scan: ScanResolver | None = None) -> tuple[LockWait, ...]:
    """Lock waits grouped by futex address, most waited-on first; waiting
    stacks valued in ns, holder (waker) stacks in threads woken."""
    waits: dict[int, list[FutexRow]] = defaultdict(list)
    for r in futex_rows:
        if not r.condvar:
            waits[r.uaddr].append(r)
    wakes: dict[int, list[WakeRow]] = defaultdict(list)
    for w in wake_rows:
        wakes[w.uaddr].append(w)
    locks = []
    for addr, rows in waits.items():
        stacks = build_stacks((OffRow(r.tid, r.ustack, -EFAULT, False, r.wait_ns, r.scan) for r in rows),
                              resolve, thread_name, mark_runnable=False, resolve_scan=resolve_scan)
        holders = build_stacks((OffRow(w.tid, w.ustack, -EFAULT, False, w.woken, w.scan)
                                for w in wakes.get(addr, ())),
                               resolve, thread_name, mark_runnable=False, resolve_scan=resolve_scan)
        locks.append(LockWait(
            address=addr,
            wait_ns=sum(r.wait_ns for r in rows),
            waits=sum(r.waits for r in rows),
            waiter_tids=tuple(sorted({r.tid for r in rows})),
            stacks=stacks,
            holder_stacks=holders,
            region=region(addr),
        ))
    locks.sort(key=lambda lk: (-lk.wait_ns, lk.address))
    return tuple(locks[:limit])


def region_of(addr: int, maps_text: str) -> str:
    """Where ``addr`` lies in a process given its /proc/PID/maps text:
    ``libc.so.6 data``, ``[heap]``, ``[stack]``, ``anon``, or ``""``."""
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        try:
            lo_s, hi_s = parts[0].split("-")
            lo, hi = int(lo_s, 16), int(hi_s, 16)
        except ValueError:
            continue
        if not lo <= addr < hi:
            continue
        perms = parts[1]
        path = parts[5].strip() if len(parts) > 5 else ""
        if path.startswith("["):
            return path
        if not path:
            return "anon"
        kind = "text" if "x" in perms else ("data" if "w" in perms else "rodata")
        return f"{os.path.basename(path)} {kind}"
    return ""


def text_ranges(maps_text: str, limit: int) -> tuple[list[tuple[int, int]], int]:
    """The executable mappings of a /proc/PID/maps text, sorted, adjacent
    ones merged, at most ``limit`` (the largest kept); returns (ranges,
    how many were left out)."""
    spans = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 2 or "x" not in parts[1]:
            continue
        if len(parts) > 5 and parts[5].strip() == "[vsyscall]":
            continue
        try:
            lo_s, hi_s = parts[0].split("-")
            spans.append((int(lo_s, 16), int(hi_s, 16)))
        except ValueError:
            continue
    spans.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    dropped = max(0, len(merged) - limit)
    if dropped:
        merged = sorted(sorted(merged, key=lambda r: r[1] - r[0], reverse=True)[:limit])
    return merged, dropped


@dataclass(frozen=True, slots=True)
class InFlight:
    """One entry of the offstart map: a followed thread off the CPU right now (since ``ts``; runnable again
    since ``woken`` when that is not 0)."""

    tid: int
    ts: int
    woken: int
    ustack: int
    kstack: int
    runnable: int
    kind: int  # 0, 1 mutex-like wait, 3 condvar-like wait
    uaddr: int
    scan: tuple[int, ...] = ()


def inflight_rows(entries: Iterable[InFlight], start_ns: int, end_ns: int, *, min_ns: int, off_sample: int
                  ) -> tuple[list[OffRow], list[FutexRow]]:
    """The part inside [start_ns, end_ns) of the off-CPU periods still in progress at ``end_ns``, as the
    program would count them had they ended then (blocked until woken, then waiting for a CPU; a lock wait
    also in the futex rows, with no completed wait to count).  The program counts the rest from ``end_ns``
    when they end, so each period is split at the interval's edge and no interval holds more of a thread's
    time than it lasted.  Scaled by ``off_sample`` like the maps."""
    off: list[OffRow] = []
    fx: list[FutexRow] = []
    for e in entries:
        if e.ts >= end_ns:
            continue  # began after the interval's end (read late): the next interval's
        until = e.woken if e.ts <= e.woken < end_ns else end_ns
        blocked = max(0, until - max(e.ts, start_ns))
        waiting = max(0, end_ns - max(until, start_ns))
        if waiting >= min_ns:
            off.append(OffRow(e.tid, -2, -2, 2, waiting * off_sample))
        if blocked >= min_ns:
            off.append(OffRow(e.tid, e.ustack, e.kstack, e.runnable, blocked * off_sample, e.scan))
        if e.kind in (1, 3) and blocked > 0:
            fx.append(FutexRow(e.uaddr, e.tid, e.ustack, blocked * off_sample, 0, e.kind == 3, e.scan))
    return off, fx


def read_inflight(bpf) -> list[InFlight]:
    """The offstart map of a loaded program, read without deleting (the program deletes an entry when its
    thread runs again)."""
    out = []
    for k, v in bpf[b"offstart"].items():
        out.append(InFlight(int(getattr(k, "value", k)), int(v.ts), int(v.woken), int(v.ustack), int(v.kstack),
                            int(v.runnable), int(v.kind), int(v.uaddr), tuple(int(a) for a in v.scan.ip if a)))
    return out


def read_maps(bpf, off_sample: int = OFF_SAMPLE
              ) -> tuple[list[OffRow], list[OffRow], list[FutexRow], list[WakeRow], dict[str, int]]:
    """Read and delete every aggregation map of a loaded program (batch
    lookup-and-delete where the kernel has it, so nothing counted between
    the read and the delete is lost); the error counters are read and zeroed.
    Off-CPU sums are scaled by ``off_sample``, the program's sampling."""

    def drain(name: bytes):
        table = bpf[name]
        try:
            return list(table.items_lookup_and_delete_batch())
        except Exception:  # older kernels: read, then delete what was read
            items = list(table.items())
            for k, _ in items:
                try:
                    del table[k]
                except KeyError:
                    pass
            return items

    def num(v) -> int:  # batch reads give ints, item reads ctypes
        return int(getattr(v, "value", v))

    def scan(k) -> tuple[int, ...]:
        return tuple(int(a) for a in k.scan.ip if a)

    # off-CPU periods and lock waits are followed 1 in off_sample times: scale the sums back
    off = [OffRow(k.tid, k.ustack, k.kstack, int(k.runnable), num(v) * off_sample, scan(k))
           for k, v in drain(b"offcpu")]
    on = [OffRow(k.tid, k.ustack, k.kstack, False, num(v), scan(k)) for k, v in drain(b"oncpu")]
    fx = [FutexRow(k.uaddr, k.tid, k.ustack, int(v.wait_ns) * off_sample, int(v.waits) * off_sample, k.kind == 3,
                   scan(k)) for k, v in drain(b"futex")]
    # a wake-up is seen only for a followed wait (1 in off_sample), then kept 1 in WAKE_SAMPLE
    wk = [WakeRow(k.uaddr, k.tid, k.ustack, num(v) * WAKE_SAMPLE * off_sample, scan(k)) for k, v in drain(b"wakes")]
    errs: dict[str, int] = {}
    table = bpf[b"errors"]
    for i, name in enumerate(ERRORS):
        v = int(getattr(table[table.Key(i)], "value", 0))
        if v:
            table[table.Key(i)] = table.Leaf(0)
        errs[name] = int(v)
    return off, on, fx, wk, errs
