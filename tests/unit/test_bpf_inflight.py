"""inflight_rows: the part of each off-CPU period still in progress at an interval's end that lies inside the
interval (the kernel program counts the rest from there when the period ends)."""

from __future__ import annotations

from fipstop.probes.bpf_decode import InFlight, OffRow, inflight_rows

S, E = 1_000_000_000, 2_000_000_000  # the interval [S, E)


def entry(ts: int, woken: int = 0, kind: int = 1, runnable: int = 0) -> InFlight:
    return InFlight(tid=7, ts=ts, woken=woken, ustack=3, kstack=4, runnable=runnable, kind=kind, uaddr=0x1000)


def test_blocked_since_before_the_interval_counts_from_its_start() -> None:
    off, fx = inflight_rows([entry(S - 500)], S, E, min_ns=1000, off_sample=1)
    assert off == [OffRow(7, 3, 4, 0, E - S)]
    assert [(f.wait_ns, f.waits, f.condvar) for f in fx] == [(E - S, 0, False)]  # no completed wait to count


def test_blocked_then_woken_splits_into_blocked_and_waiting_for_a_cpu() -> None:
    off, fx = inflight_rows([entry(S + 100_000, woken=S + 400_000)], S, E, min_ns=1000, off_sample=1)
    assert sorted((r.runnable, r.value) for r in off) == [(0, 300_000), (2, E - S - 400_000)]
    assert [f.wait_ns for f in fx] == [300_000]


def test_woken_before_the_interval_is_only_waiting_for_a_cpu() -> None:
    off, fx = inflight_rows([entry(S - 900, woken=S - 100)], S, E, min_ns=1000, off_sample=1)
    assert [(r.runnable, r.value) for r in off] == [(2, E - S)] and fx == []


def test_scaled_thresholded_and_late_entries() -> None:
    off, fx = inflight_rows([entry(E - 500, kind=0), entry(E + 5, kind=0), entry(S, kind=3)], S, E, min_ns=1000,
                            off_sample=8)
    # 500 ns is under the threshold; an entry that began after the end is the next interval's; a condvar wait
    assert [(r.value, r.runnable) for r in off] == [(8 * (E - S), 0)]
    assert [(f.wait_ns, f.condvar) for f in fx] == [(8 * (E - S), True)]


def test_preempted_is_runnable_time() -> None:
    off, fx = inflight_rows([entry(S + 10, kind=0, runnable=1)], S, E, min_ns=1, off_sample=1)
    assert [(r.runnable, r.value) for r in off] == [(1, E - S - 10)] and fx == []
