"""The accumulated profile (py-spy top's default view), counters without
scientific notation, the lost-stack share, and middle truncation."""

from __future__ import annotations

from dataclasses import replace

from fipstop.probes.stacks import LockWait, ProfileSample, StackCount
from fipstop.profile.accumulate import accumulate, lost_stack_shares
from fipstop.profile.demo import DEMO_PID, LOCK_ADDR, demo_report
from fipstop.profile.render import extra_text, number_text
from fipstop.views.format import fit_frames, middle

SECOND = 1_000_000_000


def bpf(report):
    return report.profile("bpf")


def test_three_intervals_sum_stacks_locks_and_counters() -> None:
    reports = [demo_report(taken_mono_ns=(60 + i) * SECOND) for i in range(3)]
    reports = [replace(r, profiles=tuple(replace(p, extra={"ustack_eexist": 7.0, "oncpu_hz": 49.0,
                                                             "gil_pct": 10.0 * (i + 1)})
                                         if p.available else p for p in r.profiles))
               for i, r in enumerate(reports)]
    total = None
    for r in reports:
        total = accumulate(total, r)
    assert total is not None and total.intervals == 3
    t = total.report
    assert t.duration_ns == 3 * SECOND and t.taken_mono_ns == 62 * SECOND
    one = bpf(reports[0])
    for st in bpf(t).oncpu:
        same = [s for s in one.oncpu if (s.tid, s.frames) == (st.tid, st.frames)]
        assert len(same) == 1 and st.value == 3 * same[0].value
    assert sum(s.value for s in bpf(t).oncpu) == 3 * sum(s.value for s in one.oncpu)
    (lock,) = bpf(t).locks
    assert lock.address == LOCK_ADDR and lock.waits == 3 * 5310 and lock.wait_ns == 3 * 2_810_000_000
    assert lock.stacks[0].value == 3 * one.locks[0].stacks[0].value
    extra = bpf(t).extra
    assert extra["ustack_eexist"] == 21.0  # counted per interval: summed
    assert extra["oncpu_hz"] == 49.0  # a setting: the newest
    assert abs(extra["gil_pct"] - 20.0) < 1e-9  # a share: weighted by duration (10, 20, 30 over equal seconds)
    # the thread split is the newest interval's; the unavailable py-spy says why
    assert t.threads is reports[-1].threads
    assert not t.profile("py-spy").available and "not a Python process" in t.profile("py-spy").reason
    # the hot functions' counts are the sums
    hot = {fn: v for src, fn, v, _ in t.hot_functions("oncpu")}
    assert hot["__vfprintf_internal"] == 3 * 41


def test_the_same_report_again_and_another_pid() -> None:
    r = demo_report()
    total = accumulate(None, r)
    assert accumulate(total, r) is total  # a fixture repeating its last report adds nothing
    other = demo_report(pid=777, taken_mono_ns=70 * SECOND)
    fresh = accumulate(total, other)
    assert fresh.intervals == 1 and fresh.report is other


def test_a_profiler_that_stops_shows_its_reason() -> None:
    r1 = demo_report(taken_mono_ns=60 * SECOND)
    r2 = demo_report(taken_mono_ns=61 * SECOND)
    gone = ProfileSample.unavailable("bpf", DEMO_PID, "process 4242 exited", 61 * SECOND)
    r2 = replace(r2, profiles=(gone, *r2.profiles[1:]))
    t = accumulate(accumulate(None, r1), r2).report
    assert not bpf(t).available and bpf(t).reason == "process 4242 exited"


def test_lost_stack_shares_are_counted_from_the_stacks() -> None:
    s = ProfileSample(source="bpf", pid=1, taken_mono_ns=0, duration_ns=SECOND, oncpu=(
        StackCount(("main", "work"), 30, 2),
        StackCount(("[user stack lost: hash collision]", "do_syscall_64"), 10, 2),
    ), offcpu=(StackCount(("[kernel stack lost: stack map full]",), 5, 3), StackCount(("a",), 15, 3)))
    assert lost_stack_shares(s) == {"oncpu": 25.0, "offcpu": 25.0}
    assert lost_stack_shares(replace(s, oncpu=(), offcpu=())) == {"oncpu": None, "offcpu": None}


def test_lock_waiters_are_united() -> None:
    a = replace(demo_report(taken_mono_ns=60 * SECOND))
    b = demo_report(taken_mono_ns=61 * SECOND)
    bb = bpf(b)
    lw = bb.locks[0]
    b = replace(b, profiles=(replace(bb, locks=(LockWait(lw.address, 1, 1, (99999,)),)), *b.profiles[1:]))
    (lock,) = bpf(accumulate(accumulate(None, a), b).report).locks
    assert 99999 in lock.waiter_tids and set(lw.waiter_tids) <= set(lock.waiter_tids)


def test_counters_are_never_in_scientific_notation() -> None:
    assert number_text(1234567.0) == "1234567"  # {:g} gave 1.23457e+06
    assert number_text(0.25) == "0.25" and number_text(3.41234) == "3.412" and number_text(float("nan")) == "unknown"
    assert extra_text({"ustack_eexist": 2.5e7, "compile_s": 3.5}) == "compile_s 3.5  ustack_eexist 25000000"
    assert "e+" not in extra_text({"blocked_ns": 123456789012.0})


def test_middle_truncation_keeps_the_ends_that_differ() -> None:
    names = [f"demo-net-{i:04d}" for i in range(4)]
    cut = [middle(n, 10) for n in names]
    assert cut == ["demo-…0000", "demo-…0001", "demo-…0002", "demo-…0003"] and len(set(cut)) == 4
    assert middle("short", 10) == "short" and middle("abc", 1) == "…" and middle("abc", 0) == ""
    assert all(len(middle("x" * 50, w)) == w for w in range(1, 20))
    frames = ["start_thread", "isc__nm_async_run", "ns_query_start", "ns_client_log", "__vfprintf_internal"]
    fit = fit_frames(frames, 40)
    assert len(fit) <= 40 and fit.endswith("__vfprintf_internal") and fit.startswith("… › ")
    assert fit_frames(frames, 200) == " › ".join(frames)
    assert fit_frames(["a_very_long_leaf_function_name"], 12) == middle("a_very_long_leaf_function_name", 12)


def test_the_headless_report_says_the_lost_share_and_no_scientific_notation() -> None:
    from fipstop.profile.render import render_text

    r = demo_report()
    bpf = r.profile("bpf")
    lost = StackCount(("[user stack lost: hash collision]",), 13, DEMO_PID + 8, "x")
    bpf = replace(bpf, oncpu=(*bpf.oncpu, lost), extra={"blocked_ns": 123456789012.0})
    text = render_text(replace(r, profiles=(bpf, *r.profiles[1:])))
    assert f"stacks lost: {100 * 13 / 126:.1f} % of on-CPU samples, 0.0 % of off-CPU time" in text
    assert "blocked_ns 123456789012" in text and "e+" not in text
