"""The pure parts of the bpf profiler: stack-id decoding, aggregation into
StackCount/LockWait, lock regions, folded output, the program text.  No bcc,
no root."""

from __future__ import annotations

import re

import pytest

from fipstop.probes.bpf_decode import (
    PREEMPTED_FRAME,
    WOKEN_FRAME,
    FutexRow,
    OffRow,
    WakeRow,
    build_locks,
    build_stacks,
    clean_user_frames,
    combine_user,
    looks_like_call,
    lost_frame,
    merge_frames,
    region_of,
    text_ranges,
)
from fipstop.probes.bpf_program import ERRORS, OFF_SAMPLE, program_text
from fipstop.probes.stacks import folded_lines

# stack id -> frames, leaf first (as BPF_STACK_TRACE.walk gives them)
USER = {1: ("__GI___lll_lock_wait", "log_line", "worker", "start_thread"), 2: ("send", "__vsyslog_internal")}
KERNEL = {7: ("__schedule", "schedule", "futex_wait", "do_syscall_64")}


def resolve(stack_id: int, user: bool) -> tuple[str, ...]:
    return (USER if user else KERNEL)[stack_id]


def names(tid: int) -> str:
    return {10: "worker-a", 11: "worker-b"}.get(tid, "")


def test_merge_is_root_first_with_kernel_suffix() -> None:
    assert merge_frames(["leaf", "main"], ["__schedule", "entry"]) == (
        "main", "leaf", "entry_[k]", "__schedule_[k]")
    assert merge_frames([], ["x_[k]"]) == ("x_[k]",)


def test_negative_stack_ids_are_visible_not_silent() -> None:
    assert "hash collision" in lost_frame(-17, True)
    assert "map full" in lost_frame(-12, False)
    assert lost_frame(-14, True) == "[no user stack]"
    assert lost_frame(-14, False) is None  # user-mode sample: no kernel part
    assert lost_frame(-2, True) is None and lost_frame(-2, False) is None  # not taken (preempted)
    assert "error 22" in lost_frame(-22, True)


def test_clean_user_frames_cuts_garbage_and_repeats() -> None:
    assert clean_user_frames(["leaf", "leaf", "caller", "0x5618", "0x5618"]) == (
        "leaf", "caller", "[truncated: no frame pointer]")
    assert clean_user_frames(["0xdead"]) == ("0xdead",)


def test_build_stacks_aggregates_by_thread_and_frames() -> None:
    rows = [
        OffRow(10, 1, 7, False, 300),
        OffRow(10, 1, 7, False, 200),   # same key again (another read): merged
        OffRow(11, 1, 7, True, 50),     # preempted: run-queue wait stands apart
        OffRow(11, -17, -14, False, 5),
        OffRow(11, -2, -2, 2, 20),      # woken, waiting for a CPU: no stack
        OffRow(12, 2, -14, False, 0),   # zero: dropped
    ]
    out = build_stacks(rows, resolve, names)
    assert [s.value for s in out] == [500, 50, 20, 5]
    top = out[0]
    assert top.tid == 10 and top.thread == "worker-a"
    assert top.frames == ("start_thread", "worker", "log_line", "__GI___lll_lock_wait",
                          "do_syscall_64_[k]", "futex_wait_[k]", "schedule_[k]", "__schedule_[k]")
    assert out[1].frames[-1] == PREEMPTED_FRAME
    assert out[2].frames == (WOKEN_FRAME,)
    assert out[3].frames == ("[user stack lost: hash collision]",)
    folded = folded_lines(out)
    assert "worker-a-10;start_thread;worker;log_line;__GI___lll_lock_wait;do_syscall_64_[k];" \
           "futex_wait_[k];schedule_[k];__schedule_[k] 500" in folded


def test_build_locks_groups_by_address_with_waiters_and_holders() -> None:
    fx = [
        FutexRow(0x1000, 10, 1, 4_000, 3),
        FutexRow(0x1000, 11, 1, 6_000, 2),
        FutexRow(0x2000, 10, 2, 500, 1),
        FutexRow(0x4000, 10, 2, 9_000_000, 1, condvar=True),  # a condvar: not a lock
    ]
    wk = [WakeRow(0x1000, 11, 2, 4), WakeRow(0x3000, 10, 2, 1)]  # wake without waits: not a lock row
    maps = "1000-2000 rw-p 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6\n2000-3000 rw-p 0 0:0 0 [heap]\n"
    locks = build_locks(fx, wk, resolve, names, lambda a: region_of(a, maps))
    assert [lk.address for lk in locks] == [0x1000, 0x2000]
    top = locks[0]
    assert (top.wait_ns, top.waits, top.waiter_tids) == (10_000, 5, (10, 11))
    assert top.region == "libc.so.6 data"
    assert [s.value for s in top.stacks] == [6_000, 4_000]
    assert top.stacks[0].frames == ("start_thread", "worker", "log_line", "__GI___lll_lock_wait")
    assert len(top.holder_stacks) == 1 and top.holder_stacks[0].value == 4
    assert top.holder_stacks[0].frames == ("__vsyslog_internal", "send")
    assert locks[1].region == "[heap]" and locks[1].holder_stacks == ()


def test_region_of() -> None:
    maps = (
        "55d0-55e0 r-xp 0 08:01 1 /usr/sbin/named\n"
        "55e0-55f0 r--p 0 08:01 1 /usr/sbin/named\n"
        "7f00-7f10 rw-p 0 0:0 0 \n"
        "7ff0-7fff rw-p 0 0:0 0 [stack]\n"
        "garbage line\n"
    )
    assert region_of(0x55D8, maps) == "named text"
    assert region_of(0x55E8, maps) == "named rodata"
    assert region_of(0x7F08, maps) == "anon"
    assert region_of(0x7FF8, maps) == "[stack]"
    assert region_of(0x1, maps) == ""


def test_program_text_reads_the_target_from_a_map_and_bakes_in_the_limits() -> None:
    text = program_text(min_ns=1000, stacks=1024, threads=512, keys=2048)
    # the target is a map entry (one compile serves any pid), and an unset one matches nobody, not tgid 0
    assert "#define TGID target_tgid()" in text and "BPF_ARRAY(target, u32, 1);" in text
    assert "(t && *t) ? *t : 0xffffffffu" in text
    assert "#define MIN_NS 1000ULL" in text
    assert "BPF_TABLE(\"stacktrace\", int, struct stack_t, stacks, 1024)" in text
    assert "BPF_HASH(offcpu, struct key_t, u64, 2048)" in text
    for e in ERRORS:
        assert f"ERR_{e}" in text
    assert not re.search(r"__[A-Z_]+__", text)  # every placeholder filled in
    # only tracepoints and a perf event handler: no kprobes, no uprobes, and
    # no per-syscall tracepoints (a contended producer makes ~10^5 futex calls/s)
    assert "kprobe" not in text.lower() and "uprobe" not in text.lower()
    assert "TRACEPOINT_PROBE(sched, sched_switch)" in text and "TRACEPOINT_PROBE(sched, sched_waking)" in text
    assert "syscalls" not in text
    assert f"#define OFF_SAMPLE {OFF_SAMPLE}\n" in text
    assert "#define OFF_SAMPLE 1\n" in program_text(min_ns=0, stacks=1, threads=1, keys=1, off_sample=1)
    sized = program_text(min_ns=0, stacks=1024, ustacks=65536, threads=1, keys=1)
    assert "struct ustack_t, ustacks, 65536)" in sized and "struct stack_t, stacks, 1024)" in sized
    for bad in (0, 3, -2):
        with pytest.raises(ValueError, match="power of two"):
            program_text(min_ns=0, stacks=1, threads=1, keys=1, off_sample=bad)


def test_looks_like_call() -> None:
    assert looks_like_call(bytes.fromhex("2408e87e9cffff"))        # e8 rel32
    assert looks_like_call(bytes.fromhex("909090909090ffd0"))      # call *%rax
    assert looks_like_call(bytes.fromhex("9090909090ff5008"))      # call *0x8(%rax)
    assert looks_like_call(bytes.fromhex("90ff9088000000"))        # call *0x88(%rax)
    assert not looks_like_call(bytes.fromhex("00000000000000"))
    assert not looks_like_call(bytes.fromhex("909090909090ffe0"))  # jmp *%rax
    assert not looks_like_call(b"")


def test_combine_user_uses_scans_only_when_the_fp_walk_failed() -> None:
    fp_bad = ("__GI___lll_lock_wait", "[truncated: no frame pointer]")
    assert combine_user(fp_bad, ("pthread_mutex_lock", "work", "work")) == (
        "__GI___lll_lock_wait", "pthread_mutex_lock", "work")
    assert combine_user(fp_bad, ()) == fp_bad
    fp_good = ("leaf", "mid", "main")
    assert combine_user(fp_good, ("stale",)) == fp_good
    assert combine_user(("send",), ("__vsyslog_internal",)) == ("send", "__vsyslog_internal")


def test_scanned_frames_reach_the_stacks() -> None:
    rows = [OffRow(10, 1, 7, False, 100, scan=(0x10, 0x20))]
    out = build_stacks(rows, lambda i, u: ("leaf", "[truncated: no frame pointer]") if u else KERNEL[i], names,
                       resolve_scan=lambda addrs: tuple(f"f{a:x}" for a in addrs))
    assert out[0].frames[:3] == ("f20", "f10", "leaf")
    fx = [FutexRow(0x1000, 10, 1, 5, 1, scan=(0x30,))]
    locks = build_locks(fx, [], lambda i, u: ("wait",), names, resolve_scan=lambda a: ("caller",))
    assert locks[0].stacks[0].frames == ("caller", "wait")


def test_text_ranges_sorted_merged_limited() -> None:
    maps = (
        "7f00-7f10 r-xp 0 08:01 1 /lib/libc.so.6\n"
        "7f10-7f20 r-xp 0 08:01 1 /lib/libc.so.6\n"   # adjacent: merged
        "5500-5510 r-xp 0 08:01 2 /usr/sbin/named\n"
        "5510-5520 rw-p 0 0:0 0 [heap]\n"
        "ffffffffff600000-ffffffffff601000 --xp 0 0:0 0 [vsyscall]\n"
        "6000-6001 r-xp 0 0:0 0 [vdso]\n"
    )
    ranges, dropped = text_ranges(maps, 64)
    assert ranges == [(0x5500, 0x5510), (0x6000, 0x6001), (0x7F00, 0x7F20)] and dropped == 0
    ranges, dropped = text_ranges(maps, 2)
    assert ranges == [(0x5500, 0x5510), (0x7F00, 0x7F20)] and dropped == 1
