"""The BPF C text of :class:`fipstop.probes.bpf.BpfProfiler`.

Only tracepoints and perf software events: this kind of machine has no
kprobes, fentry or hardware PMU, and a uprobe (~13 us a hit) is far too
expensive for paths a producer runs per record.  Every handler returns at
once for other processes (``tgid != TGID``: the target's tgid is read from
the one-entry array ``target``, which user space sets and may change, so one
compiled program profiles any pid: bcc's compile takes seconds); the work is in-kernel
aggregation into hash maps that user space reads (and deletes) once per
interval.  No handler dereferences ``task_struct``: the headers bcc compiles
against may be from another kernel version (see fipstop.profile.kheaders), so
only tracepoint fields (whose layout bcc reads from tracefs), helpers and
``struct pt_regs`` (user registers: a stable ABI) are used.

Lock waits come from ``sched_switch`` too, not from the syscalls futex
tracepoints: a thread that leaves the CPU blocked inside futex(2) has the
syscall number and its arguments (the futex word, the op) in its saved user
registers.  Tracing sys_enter/exit_futex instead cost 4.8 us per call on a
contended producer making 236 k futex calls/s (most of which never block):
more than a whole CPU.  What is lost: futex calls that return without
blocking, which cost no waiting.

An off-CPU period is split at the edges of the intervals user space reads
(the ``window`` map holds the current interval's start; user space adds the
part of the periods still in progress at the end, from ``offstart``): a lock
wait of 2 s shows as its parts in the intervals it spans, never as 2 s in the
interval it ended in - which put more of a thread's time in one interval than
the interval lasted (a wait of 2.1 s in a 2 s window at load 9).

Map sizes are fixed; a full map or a stack that could not be stored is
counted in ``errors`` (indexes ``ERR_*``) and reported, never dropped silently.
"""

from __future__ import annotations

# indexes into the errors array; names are what the sample's ``extra`` reports
ERRORS: tuple[str, ...] = (
    "ustack_eexist",    # user stack hash collided with another stack (not stored)
    "ustack_enomem",    # stack map full
    "ustack_none",      # no user stack (EFAULT: unreadable); not a loss
    "kstack_eexist",
    "kstack_enomem",
    "kstack_none",      # no kernel stack (EFAULT: sampled in user mode); not a loss
    "offcpu_map_full",
    "oncpu_map_full",
    "futex_map_full",
    "wake_map_full",
    "start_map_full",   # per-thread in-flight entries (switched-out threads)
)

# prev_state as the sched_switch tracepoint reports it: 0 (TASK_RUNNING) or
# TASK_REPORT_MAX (0x100, "R+": preempted) mean the thread was still runnable
RUNNABLE_MASK = 0xFF

TEMPLATE = r"""
#include <uapi/linux/ptrace.h>
#include <uapi/linux/bpf_perf_event.h>

#define TGID target_tgid()
#define MIN_NS __MIN_NS__ULL
#define CACHE_NS __CACHE_NS__ULL
#define WAKE_SAMPLE __WAKE_SAMPLE__
#define OFF_SAMPLE __OFF_SAMPLE__

#define FUTEX_CMD(op) ((op) & ~(128 | 256))

enum { %(err_enum)s, NERR };

#define NSCAN __NSCAN__
#define SCAN_WORDS __SCAN_WORDS__
#define NRANGES __NRANGES__

/* return-address candidates found by scanning the top of the user stack */
struct scan_t {
    u64 ip[NSCAN];
};
struct key_t {
    u32 tid;
    s32 ustack;
    s32 kstack;
    u32 runnable;
    struct scan_t scan;
};
struct start_t {
    u64 ts;
    u64 uaddr;   /* futex word, when blocked in a futex wait */
    s32 ustack;
    s32 kstack;
    u32 runnable;
    u32 kind;    /* 0, or as in fkey_t */
    u64 woken;   /* when sched_waking made it runnable again (0: not yet) */
    struct scan_t scan;
};
struct fkey_t {
    u64 uaddr;
    u32 tid;
    s32 ustack;
    u32 kind;  /* 1 mutex-like wait, 2 wake, 3 condvar-like wait */
    u32 pad;
    struct scan_t scan;
};
struct fval_t {
    u64 wait_ns;
    u64 waits;
};
/* The stacks a thread had the last time it left the CPU (or woke a lock
 * waiter), and where: reused while the thread blocks again at the same
 * instruction, in the same syscall, on the same first argument (futex
 * word, fd), for up to CACHE_NS.  Walking and scanning stacks costs a few
 * us; a contended producer blocks tens of thousands of times a second. */
struct cache_t {
    u64 ts;
    u64 ip;
    u64 nr;
    u64 arg0;
    u32 runnable;
    s32 ustack;
    s32 kstack;
    u32 pad;
    struct scan_t scan;
};
/* the target's executable mappings, sorted; unused slots have lo = ~0 */
struct range_t {
    u64 lo;
    u64 hi;
};
struct words_t {
    u64 w[SCAN_WORDS];
};

/* stack map entries hold STACK_DEPTH frames (not the kernel's 127): deep
 * enough for kernel stacks and frame-pointer walks, and a third of the memory,
 * so more entries fit and fewer stacks collide (EEXIST, counted) */
struct stack_t {
    u64 ip[__STACK_DEPTH__];
};
BPF_TABLE("stacktrace", int, struct stack_t, stacks, __STACKS__);
/* user stacks: a frame-pointer walk through code built without frame
 * pointers reads garbage until the depth limit; a short limit bounds that
 * cost (the callers come from scan_stack) */
struct ustack_t {
    u64 ip[__USTACK_DEPTH__];
};
BPF_TABLE("stacktrace", int, struct ustack_t, ustacks, __USTACKS__);
BPF_HASH(offstart, u32, struct start_t, __THREADS__);
BPF_HASH(offcpu, struct key_t, u64, __KEYS__);
BPF_HASH(oncpu, struct key_t, u64, __KEYS__);
BPF_HASH(futex, struct fkey_t, struct fval_t, __KEYS__);
BPF_HASH(wakes, struct fkey_t, u64, __KEYS__);
BPF_ARRAY(errors, u64, NERR);
BPF_ARRAY(ranges, struct range_t, NRANGES);
/* LRU: entries of threads that exited age out */
BPF_TABLE("lru_hash", u32, struct cache_t, swcache, __THREADS__);
BPF_TABLE("lru_hash", u32, struct cache_t, wkcache, __THREADS__);
BPF_ARRAY(cachehits, u64, 2);  /* [0] stacks reused, [1] stacks taken */
BPF_PERCPU_ARRAY(scratch, struct words_t, 1);
/* [0]: the tgid profiled, set by user space (0: none yet; nothing matches) */
BPF_ARRAY(target, u32, 1);
/* when the interval user space reads next began (CLOCK_MONOTONIC ns, as
 * bpf_ktime_get_ns; 0: not set): an off-CPU period that began before it
 * counts from it, so no interval holds more of a thread's time than it
 * lasted (user space adds the part of the periods still in progress at its
 * end, from offstart, and moves this on) */
BPF_ARRAY(window, u64, 1);

static __always_inline u64 window_start(void) {
    int z = 0;
    u64 *w = window.lookup(&z);
    return w ? *w : 0;
}

static __always_inline u32 target_tgid(void) {
    int z = 0;
    u32 *t = target.lookup(&z);
    /* no tgid is 0xffffffff (pid_max <= 2^22): an unset target matches nobody,
     * not the idle task's tgid 0 */
    return (t && *t) ? *t : 0xffffffffu;
}

static __always_inline void err(int idx) {
    u64 *v = errors.lookup(&idx);
    if (v)
        __sync_fetch_and_add(v, 1);
}

static __always_inline s32 stack_id(void *ctx, int user) {
    int id = user ? ustacks.get_stackid(ctx, BPF_F_USER_STACK) : stacks.get_stackid(ctx, 0);
    if (id >= 0)
        return id;
    int base = user ? ERR_ustack_eexist : ERR_kstack_eexist;
    if (id == -17)  /* EEXIST */
        err(base);
    else if (id == -12)  /* ENOMEM */
        err(base + 1);
    else
        err(base + 2);
    return id;
}

/* Is a in one of the target's text mappings?  Binary search over the
 * sorted ranges (NRANGES is a power of two). */
static __always_inline int in_text(u64 a) {
    int i = 0;
#pragma unroll
    for (int step = NRANGES / 2; step > 0; step >>= 1) {
        int k = i + step;
        struct range_t *r = ranges.lookup(&k);
        if (r && r->lo <= a)
            i = k;
    }
    struct range_t *r = ranges.lookup(&i);
    return r && r->lo <= a && a < r->hi;
}

/* Code built without frame pointers (Debian's glibc, most packages) stops
 * the kernel's user stack walk after the leaf.  The words at the top of the
 * user stack that point into text are return-address candidates; user space
 * keeps those that follow a call instruction. */
static __always_inline struct pt_regs *user_regs(void) {
    return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
}

static __always_inline void scan_stack(struct pt_regs *regs, struct scan_t *out) {
    u64 sp = regs->sp;
    int z = 0;
    struct words_t *s = scratch.lookup(&z);
    if (!s || sp == 0)
        return;
    if (bpf_probe_read_user(s->w, sizeof(s->w), (void *)sp) != 0)
        return;
    int n = 0;
#pragma unroll
    for (int i = 0; i < SCAN_WORDS; i++) {
        u64 w = s->w[i];
        if (n < NSCAN && in_text(w)) {
            if (n == 0) out->ip[0] = w;
            else if (n == 1) out->ip[1] = w;
            else if (n == 2) out->ip[2] = w;
            else if (n == 3) out->ip[3] = w;
            else if (n == 4) out->ip[4] = w;
            else out->ip[5] = w;
            n++;
        }
    }
}

static __always_inline void count(int idx) {
    u64 *v = cachehits.lookup(&idx);
    if (v)
        __sync_fetch_and_add(v, 1);
}

/* Fill ustack/kstack/scan from the cache c when it matches, else take them
 * (kernel stack only when want_kernel) and refresh c.  Returns nothing: a
 * failed walk leaves a negative id, counted by stack_id. */
static __always_inline void take_stacks(void *ctx, struct pt_regs *regs, struct cache_t *c, u64 now,
                                        u32 runnable, int want_kernel, s32 *ustack, s32 *kstack,
                                        struct scan_t *scan) {
    u64 ip = regs->ip, nr = regs->orig_ax, arg0 = regs->di;
    if (c->ts && now - c->ts < CACHE_NS && c->ip == ip && c->nr == nr && c->arg0 == arg0
            && c->runnable == runnable) {
        *ustack = c->ustack;
        *kstack = c->kstack;
        __builtin_memcpy(scan, &c->scan, sizeof(*scan));
        count(0);
        return;
    }
    *ustack = stack_id(ctx, 1);
    *kstack = want_kernel ? stack_id(ctx, 0) : -14;
    scan_stack(regs, scan);
    c->ts = now;
    c->ip = ip;
    c->nr = nr;
    c->arg0 = arg0;
    c->runnable = runnable;
    c->ustack = *ustack;
    c->kstack = *kstack;
    __builtin_memcpy(&c->scan, scan, sizeof(*scan));
    count(1);
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 pt = bpf_get_current_pid_tgid();
    u32 tid = (u32)pt;
    u64 now = 0;
    long state = args->prev_state;
    /* a dying thread (EXIT_DEAD/EXIT_ZOMBIE) never comes back */
    /* 1 in OFF_SAMPLE times a thread leaves the CPU is followed (stacks, lock,
     * time away); user space scales the sums back.  The others cost only this
     * test and the lookup of `next` below: tracing every switch in full took
     * ~9 percent of a contended producer's throughput. */
    if ((pt >> 32) == TGID && tid != 0 && (state & 0x30) == 0
            && (OFF_SAMPLE == 1 || (bpf_get_prandom_u32() & (OFF_SAMPLE - 1)) == 0)) {
        /* current is still prev here: its stacks are the blocking ones */
        struct start_t s = {};
        struct pt_regs *regs = user_regs();
        now = bpf_ktime_get_ns();
        s.ts = now;
        s.runnable = (state & __RUNNABLE_MASK__) == 0;
        if (s.runnable) {
            /* preempted: waiting for a CPU wherever it was; not worth two
             * stack walks per preemption (-2: not taken) */
            s.ustack = -2;
            s.kstack = -2;
        } else {
            struct cache_t cz = {};
            struct cache_t *c = swcache.lookup_or_try_init(&tid, &cz);
            if (c) {
                take_stacks(args, regs, c, now, 0, 1, &s.ustack, &s.kstack, &s.scan);
            } else {
                s.ustack = -12;  /* shown as a lost stack */
                s.kstack = -12;
                err(ERR_start_map_full);
            }
        }
        /* blocked in futex(2): the lock (or condvar) word and the kind of
         * wait come from the syscall's saved arguments */
        if (!s.runnable && regs->orig_ax == __NR_FUTEX__) {
            int cmd = FUTEX_CMD((int)regs->si);
            /* WAIT, LOCK_PI, LOCK_PI2: what pthread mutexes (lll_lock) issue */
            if (cmd == 0 || cmd == 6 || cmd == 13)
                s.kind = 1;
            /* WAIT_BITSET, WAIT_REQUEUE_PI: condition variables, semaphores,
             * join (waiting to be told there is work: "sleep", not a lock) */
            else if (cmd == 9 || cmd == 11)
                s.kind = 3;
            s.uaddr = regs->di;
        }
        if (offstart.update(&tid, &s) != 0)
            err(ERR_start_map_full);
    }
    u32 next = args->next_pid;
    if (next == 0)
        return 0;
    struct start_t *sp = offstart.lookup(&next);
    if (sp == 0)
        return 0;
    if (now == 0)
        now = bpf_ktime_get_ns();
    /* blocked until woken; from then on it only waited for a CPU */
    u64 until = now;
    if (sp->woken >= sp->ts && sp->woken < now)
        until = sp->woken;
    /* only what lies inside the current interval: the part before it was
     * counted by user space at the interval's start (in progress then) */
    u64 ws = window_start();
    u64 from = sp->ts > ws ? sp->ts : ws;
    u64 delta = until > from ? until - from : 0;
    u64 rqfrom = until > ws ? until : ws;
    u64 rq = now > rqfrom ? now - rqfrom : 0;
    struct key_t k = {};
    k.tid = next;
    k.ustack = sp->ustack;
    k.kstack = sp->kstack;
    k.runnable = sp->runnable;
    __builtin_memcpy(&k.scan, &sp->scan, sizeof(k.scan));
    if (sp->kind) {
        struct fkey_t fk = {};
        fk.uaddr = sp->uaddr;
        fk.tid = next;
        fk.ustack = sp->ustack;
        fk.kind = sp->kind;
        __builtin_memcpy(&fk.scan, &sp->scan, sizeof(fk.scan));
        struct fval_t fz = {};
        struct fval_t *fv = futex.lookup_or_try_init(&fk, &fz);
        if (fv) {
            __sync_fetch_and_add(&fv->wait_ns, delta);
            __sync_fetch_and_add(&fv->waits, 1);
        } else {
            err(ERR_futex_map_full);
        }
    }
    offstart.delete(&next);
    u64 zero = 0;
    if (rq >= MIN_NS) {
        /* woken, waiting for a CPU: run-queue time, no stack */
        struct key_t rk = {};
        rk.tid = next;
        rk.ustack = -2;
        rk.kstack = -2;
        rk.runnable = 2;
        u64 *rv = offcpu.lookup_or_try_init(&rk, &zero);
        if (rv)
            __sync_fetch_and_add(rv, rq);
        else
            err(ERR_offcpu_map_full);
    }
    if (delta < MIN_NS)
        return 0;
    u64 *v = offcpu.lookup_or_try_init(&k, &zero);
    if (v)
        __sync_fetch_and_add(v, delta);
    else
        err(ERR_offcpu_map_full);
    return 0;
}

/* Stamps when a blocked thread of ours becomes runnable (the rest of its
 * time away is run-queue wait, not blocking).  And the thread that wakes a
 * thread of ours blocked on a lock released that lock: its stack is the
 * holder's (this runs in the waker's context). */
TRACEPOINT_PROBE(sched, sched_waking) {
    /* a contended lock is handed over tens of thousands of times a second:
     * take 1 in WAKE_SAMPLE (counts are scaled back in user space) */
    u32 woken = args->pid;
    struct start_t *sp = offstart.lookup(&woken);
    if (sp == 0)
        return 0;
    if (sp->woken == 0)
        sp->woken = bpf_ktime_get_ns();
    if (sp->kind != 1)
        return 0;
    if (bpf_get_prandom_u32() & (WAKE_SAMPLE - 1))  /* a power of two */
        return 0;
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    struct fkey_t k = {};
    k.uaddr = sp->uaddr;
    k.tid = (u32)pt;
    k.kind = 2;
    u32 tid = (u32)pt;
    s32 kstack;
    struct cache_t cz = {};
    struct cache_t *c = wkcache.lookup_or_try_init(&tid, &cz);
    if (c == 0) {
        err(ERR_start_map_full);
        return 0;
    }
    take_stacks(args, user_regs(), c, bpf_ktime_get_ns(), 0, 0, &k.ustack, &kstack, &k.scan);
    u64 zero = 0;
    u64 *v = wakes.lookup_or_try_init(&k, &zero);
    if (v)
        __sync_fetch_and_add(v, 1);
    else
        err(ERR_wake_map_full);
    return 0;
}

int on_cpu(struct bpf_perf_event_data *ctx) {
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    struct key_t k = {};
    k.tid = (u32)pt;
    k.ustack = stack_id(ctx, 1);
    k.kstack = stack_id(ctx, 0);
    scan_stack(user_regs(), &k.scan);
    u64 zero = 0;
    u64 *v = oncpu.lookup_or_try_init(&k, &zero);
    if (v)
        __sync_fetch_and_add(v, 1);
    else
        err(ERR_oncpu_map_full);
    return 0;
}

"""


NR_FUTEX = 202     # x86-64
OFF_SAMPLE = 8        # off-CPU periods followed: 1 in 8 (a power of two), sums scaled back
WAKE_SAMPLE = 2       # of the wake-ups of a followed lock wait, holder stacks from 1 in 2 (1 in 16 in all)
CACHE_NS = 10_000_000  # a thread's stacks are reused for up to 10 ms while it blocks at the same place
STACK_DEPTH = 48   # frames kept per kernel stack
USTACK_DEPTH = 12  # frames kept per user stack (frame-pointer walk)
NSCAN = 6          # return-address candidates kept per stack (scan_t; the if-chain in scan_stack)
SCAN_WORDS = 32    # user stack words scanned (256 bytes above the stack pointer)
NRANGES = 64       # text mappings of the target (a power of two)


def program_text(*, min_ns: int, stacks: int, threads: int, keys: int, off_sample: int = OFF_SAMPLE,
                 ustacks: int | None = None) -> str:
    """The C text of the profiler (the target's tgid is not in it: user space
    writes it into the ``target`` array, so one compile serves every pid);
    ``off_sample``: follow 1 in that many off-CPU periods (a power of two);
    ``stacks``/``ustacks``: entries of the kernel and user stack maps."""
    if off_sample < 1 or off_sample & (off_sample - 1):
        raise ValueError(f"off_sample must be a power of two, not {off_sample}")
    text = TEMPLATE % {"err_enum": ", ".join(f"ERR_{e}" for e in ERRORS)}
    for k, v in (("__MIN_NS__", max(0, int(min_ns))), ("__STACKS__", stacks),
                 ("__USTACKS__", stacks if ustacks is None else ustacks),
                 ("__THREADS__", threads), ("__KEYS__", keys), ("__RUNNABLE_MASK__", RUNNABLE_MASK),
                 ("__NSCAN__", NSCAN), ("__CACHE_NS__", CACHE_NS), ("__WAKE_SAMPLE__", WAKE_SAMPLE),
                 ("__OFF_SAMPLE__", off_sample), ("__NR_FUTEX__", NR_FUTEX), ("__STACK_DEPTH__", STACK_DEPTH),
                 ("__USTACK_DEPTH__", USTACK_DEPTH), ("__SCAN_WORDS__", SCAN_WORDS), ("__NRANGES__", NRANGES)):
        text = text.replace(k, str(int(v)))
    return text
