/*
 * libfips — implementation.  See fips.h for the API and docs/ring-format.md
 * for the byte layout.
 *
 * Memory ordering
 * ===============
 * Shared fields are plain fixed-width integers in the mapped file; every
 * cross-thread access goes through the macros below (C11 atomics on the
 * field's address).  The barriers, in the style of the perf ring buffer;
 * every acquire/release/seq_cst in the code names its row and its partner.
 *
 *   producer (one thread per ring)          consumer / monitor
 *   ------------------------------          ------------------
 *   P1  store reserved (RELEASE), then       T2  fence ACQUIRE, load reserved
 *       fence RELEASE before any byte of         (ACQUIRE) and claimed_max: a
 *       the claim is written  ------------>      copy is intact if the claimed
 *   P1' fips_commit lowers reserved to the       end <= its position + cap
 *       record's end: claimed_max first,         (tap, E2; claimed_end())
 *       then reserved (RELEASE), before P3
 *   S3  a slot reclaim lowers reserved to head the same way
 *   P2  write header + payload (plain)       C2  read records in [claim, head)
 *   P3  store head (RELEASE) ------------->  C1  load head (ACQUIRE); a consumer
 *       (the only store to line 0 of the         reads from the head it loaded
 *       ring entry: layout 4)                    last until its claim reaches it
 *   P4  load released (ACQUIRE) <----------  C3  CAS released (SEQ_CST)
 *       (only when the ring looks full)          after the records were read
 *   P6  load consumer states (SEQ_CST)       J1  store state = ACTIVE (SEQ_CST)
 *   P5a store floor_next (SEQ_CST)           J2  load floor_next (SEQ_CST),
 *   P6' re-load consumer states (SEQ_CST)        move released up (RELEASE)
 *       P5a/P6' vs J1/J2 is a Dekker pair: a joiner is either ACTIVE at the
 *       re-scan (counted with its own position, F1 case b) or its J2 reads
 *       this floor_next or a later one (so it may be counted there, F1 case
 *       a).  The floor never moves backwards (F).
 *   P5b store floor (RELEASE), only after a  T1  load floor (ACQUIRE), head,
 *       re-scan found no uncounted consumer      floor again: a consistent cut
 *   P7  store ring state = CLOSED (RELEASE)  M1  load ring state (ACQUIRE)
 *       after the final counters             M2  load consumer state (ACQUIRE),
 *   E1  CAS consumer (ACTIVE, generation)        pairs with J1/E1/X1/K1/K2
 *       -> EVICTED as one 64-bit word        M3  load released (ACQUIRE)
 *       loaded before the heartbeat (G1),
 *       SEQ_CST; then P1 before any byte
 *       of the evicted span is rewritten.
 *       An operator's E1 (fips_consumer_
 *       evict) is the same CAS with the
 *       generation it saw; producers see
 *       it at P6, then P1 as above           E2  fence ACQUIRE, load own state
 *                                                and generation at release: an
 *                                                evicted holder learns that its
 *                                                batch may be torn (ETORN)
 *   S1  load ring state (ACQUIRE) before     X1  CAS ACTIVE -> CLOSED (SEQ_CST)
 *       reusing a slot: pairs with P7            seen by the next P6
 *   S2  CAS ring state / dead pid (SEQ_CST)  K0  load entry state (ACQUIRE)
 *       elects one taker                     K1  CAS generation (resume), K2
 *                                                CAS state -> JOINING (join):
 *                                                SEQ_CST, elect one owner; no
 *                                                takeover while a live handle
 *                                                may still release: elect(),
 *                                                K1a pid CAS across processes,
 *                                                K1b open-bit test-and-set
 *   H   heartbeats: relaxed both ways (a hint with a grace of seconds)
 *   D1  header `ready` = 1 (RELEASE) by the creator, before link(); every
 *       attach loads it (ACQUIRE) before trusting the header
 *   B1  SIGBUS guard: the handler maps zeros over the lost part, then stores
 *       the slot's `hit` (RELEASE); every call on the domain loads it
 *       (ACQUIRE, domain_hit / fips_log's copy of the pointer) before its
 *       first access to the mapping and reports ETRUNC once it is set
 *
 *   consumer release path (several reader threads of one consumer)
 *   R1 in-order:  CAS released start->end (SEQ_CST); load qcount (SEQ_CST)
 *   R2 out-of-order: under qlock, push; qcount++ (SEQ_CST); load released
 *      R1/R2 is a Dekker pair: either the in-order releaser sees the queued
 *      batch and drains it, or the queuer sees the advanced position and
 *      drains it itself.  In-order releases take no lock.
 *
 * The producer hot path (fips_log) performs two RELEASE stores (P1 of
 * `reserved`, P3 of `head`; plain stores on x86-64), P1's RELEASE fence (a
 * compiler barrier on x86-64), relaxed stores of its own counters, and no
 * read-modify-write.  `head` is alone on its cache line
 * (fips.h, layout 4): a commit stores to the line a reading consumer polls
 * once; the counters and `reserved` are on a line it never reads.
 * Counters have exactly one writer each: ring fields the producer thread,
 * position fields the consumer, consumer-entry lifecycle fields the CAS
 * winner of that entry.
 *
 * Checked by machine: tests/c/explore runs this file (built with
 * -DFIPS_EXPLORE) through every interleaving of its shared accesses in a set
 * of scenarios, under sequential consistency, and checks F, "no consumer is
 * handed overwritten bytes without being told", "committed = consumed +
 * counted lost", "the producer is never wedged" and the monitor's view after
 * every step; the rows above are what makes SC the right model, and
 * ThreadSanitizer checks the C11 orderings in tests/c/test_stress.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fips.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the libfips layout is little-endian; big-endian hosts are not supported"
#endif

/* ---- layout pins -------------------------------------------------------- */
#define PIN(T, f, o) _Static_assert(offsetof(struct T, f) == (o), #T "." #f)
PIN(fips_layout_header, magic, 0);
PIN(fips_layout_header, version, 8);
PIN(fips_layout_header, hdr_size, 12);
PIN(fips_layout_header, file_size, 16);
PIN(fips_layout_header, max_rings, 24);
PIN(fips_layout_header, max_consumers, 28);
PIN(fips_layout_header, ring_capacity, 32);
PIN(fips_layout_header, max_record, 40);
PIN(fips_layout_header, ready, 44);
PIN(fips_layout_header, ring_table_off, 48);
PIN(fips_layout_header, consumer_table_off, 56);
PIN(fips_layout_header, pos_table_off, 64);
PIN(fips_layout_header, data_off, 72);
PIN(fips_layout_header, created_realtime_ns, 80);
PIN(fips_layout_header, created_mono_ns, 88);
PIN(fips_layout_header, grace_ns, 96);
PIN(fips_layout_header, creator_pid, 104);
PIN(fips_layout_header, flags, 108);
PIN(fips_layout_header, name, 112);
PIN(fips_layout_header, records_no_ring, 176);
_Static_assert(sizeof(struct fips_layout_header) == FIPS_HDR_SIZE, "header size");
PIN(fips_layout_ring, head, 0);
PIN(fips_layout_ring, reserved, 64);
PIN(fips_layout_ring, claimed_max, 72);
PIN(fips_layout_ring, records_committed, 80);
PIN(fips_layout_ring, bytes_committed, 88);
PIN(fips_layout_ring, records_dropped, 96);
PIN(fips_layout_ring, bytes_dropped, 104);
PIN(fips_layout_ring, last_commit_ns, 112);
PIN(fips_layout_ring, full_events, 120);
PIN(fips_layout_ring, floor, 128);
PIN(fips_layout_ring, floor_next, 136);
PIN(fips_layout_ring, floor_seq, 144);
PIN(fips_layout_ring, high_water_bytes, 152);
PIN(fips_layout_ring, records_truncated, 160);
PIN(fips_layout_ring, evictions, 168);
PIN(fips_layout_ring, blocked_ns, 176);
PIN(fips_layout_ring, created_ns, 184);
PIN(fips_layout_ring, state, 192);
PIN(fips_layout_ring, generation, 196);
PIN(fips_layout_ring, pid, 200);
PIN(fips_layout_ring, tid, 204);
PIN(fips_layout_ring, thread_name, 208);
PIN(fips_layout_ring, pidns, 240);
PIN(fips_layout_ring, closed_ns, 248);
_Static_assert(sizeof(struct fips_layout_ring) == FIPS_RING_CTL_SIZE, "ring size");
PIN(fips_layout_consumer, state, 0);
PIN(fips_layout_consumer, generation, 4);
PIN(fips_layout_consumer, pid, 8);
PIN(fips_layout_consumer, readers, 12);
PIN(fips_layout_consumer, heartbeat_mono_ns, 16);
PIN(fips_layout_consumer, registered_ns, 24);
PIN(fips_layout_consumer, evicted_ns, 32);
PIN(fips_layout_consumer, evicted_by_ring, 40);
PIN(fips_layout_consumer, resumes, 44);
PIN(fips_layout_consumer, records_released, 48);
PIN(fips_layout_consumer, batches_released, 56);
PIN(fips_layout_consumer, name, 64);
PIN(fips_layout_consumer, pidns, 128);
_Static_assert(sizeof(struct fips_layout_consumer) == FIPS_CONSUMER_SIZE, "consumer size");
PIN(fips_layout_pos, released, 0);
PIN(fips_layout_pos, released_seq, 8);
PIN(fips_layout_pos, records_released, 16);
PIN(fips_layout_pos, lost_seen, 24);
_Static_assert(sizeof(struct fips_layout_pos) == FIPS_POS_SIZE, "pos size");
PIN(fips_layout_record, len_flags, 0);
PIN(fips_layout_record, lost, 4);
PIN(fips_layout_record, seq, 8);
PIN(fips_layout_record, ts_ns, 16);
_Static_assert(sizeof(struct fips_layout_record) == FIPS_REC_HDR_SIZE, "record size");

/* ---- atomics on mapped fields ------------------------------------------- */
/* Every access to state another thread or process can see goes through the
 * macros below.  In the interleaving explorer's build (-DFIPS_EXPLORE,
 * tests/c/explore) each one is first announced to the explorer's scheduler
 * (SYNC), which may run another party before letting it happen: the
 * scheduling points of the exploration are exactly the shared accesses.
 * STAT_LD/STAT_ST are accesses to statistics that no decision of any party
 * depends on (counters for monitors); they are not scheduling points, which
 * keeps the exploration to the protocol.  Both compile to plain C11 atomics
 * otherwise. */
#ifdef FIPS_EXPLORE
#include "fips_explore.h"
#define SYNC(p, n, k) fips_explore_access((const void *)(p), (n), (k), __LINE__)
#define LOCK(m)       fips_explore_lock((m), 0)
#define TRYLOCK(m)    fips_explore_lock((m), 1)
#define UNLOCK(m)     fips_explore_unlock(m)
#define SPIN()        fips_explore_spin()
#define EXPLORE_MAPPED(p, n, fd) fips_explore_mapped((p), (n), (fd))
#define EXPLORE_UNMAPPED(p)      fips_explore_unmapped(p)
#else
#define SYNC(p, n, k) ((void)0)
#define LOCK(m)       pthread_mutex_lock(m)
#define TRYLOCK(m)    pthread_mutex_trylock(m)
#define UNLOCK(m)     pthread_mutex_unlock(m)
#define SPIN()        ((void)0)   /* a retry loop's wait: only the explorer cares */
#define EXPLORE_MAPPED(p, n, fd) ((void)0)
#define EXPLORE_UNMAPPED(p)      ((void)0)
#endif
enum { FX_LOAD = 1, FX_STORE = 2, FX_RMW = 3 }; /* access kinds for SYNC */
#define A64(p) ((_Atomic uint64_t *)(void *)(p))
#define A32(p) ((_Atomic uint32_t *)(void *)(p))
#define LD(p, mo)       (SYNC(p, 8, FX_LOAD), atomic_load_explicit(A64(p), memory_order_##mo))
/* A store's value (and a CAS's new value) is computed before its SYNC: a
 * value that itself loads shared memory (seq_at, a LD) does so first, as in
 * the compiled code, so the explored step is the store alone. */
#define ST(p, v, mo)    ({ uint64_t v_ = (v); SYNC(p, 8, FX_STORE); \
                           atomic_store_explicit(A64(p), v_, memory_order_##mo); })
#define LD32(p, mo)     (SYNC(p, 4, FX_LOAD), atomic_load_explicit(A32(p), memory_order_##mo))
#define ST32(p, v, mo)  ({ uint32_t v_ = (v); SYNC(p, 4, FX_STORE); \
                           atomic_store_explicit(A32(p), v_, memory_order_##mo); })
#define CAS32(p, e, v)  ({ uint32_t v_ = (v); SYNC(p, 4, FX_RMW); atomic_compare_exchange_strong(A32(p), (e), v_); })
#define CAS64(p, e, v)  ({ uint64_t v_ = (v); SYNC(p, 8, FX_RMW); atomic_compare_exchange_strong(A64(p), (e), v_); })
#define STAT_LD(p)      atomic_load_explicit(A64(p), memory_order_relaxed)
#define STAT_LD32(p)    atomic_load_explicit(A32(p), memory_order_relaxed)
#define STAT_ST(p, v)   atomic_store_explicit(A64(p), (v), memory_order_relaxed)
#define STAT_ST32(p, v) atomic_store_explicit(A32(p), (v), memory_order_relaxed)
#define STAT_ADD(p, v)  atomic_fetch_add_explicit(A64(p), (v), memory_order_relaxed)

#define ALIGN8(x) (((uint64_t)(x) + 7u) & ~(uint64_t)7u)

/* How far the producer of a ring has ever claimed, for the "was this byte
 * rewritten" checks (T2 of the tap, E2 at release): `reserved`, or
 * claimed_max where `reserved` was lowered since (P1', a shrinking commit;
 * S3, a slot reclaim).  A lowering stores claimed_max first and then
 * reserved with RELEASE; every store of reserved is RELEASE (P1), so this
 * ACQUIRE load of reserved, whichever later value it reads, also sees the
 * claimed_max stored before it.  Without claimed_max a claim that rewrote
 * a batch and then shrank hid the rewrite: the holder was told its batch was
 * intact. */
static inline uint64_t claimed_end(const struct fips_layout_ring *ctl)
{
    uint64_t r = LD(&ctl->reserved, acquire); /* T2/E2: pairs with P1, P1', S3 */
    uint64_t m = LD(&ctl->claimed_max, relaxed);
    return r > m ? r : m;
}

/* The producer gives back the part of a claim beyond `to` (P1'/S3); `claimed`
 * is how far the claim went.  Only the ring's producer writes both fields. */
static inline void lower_reserved(struct fips_layout_ring *ctl, uint64_t claimed, uint64_t to)
{
    if (claimed > STAT_LD(&ctl->claimed_max)) ST(&ctl->claimed_max, claimed, relaxed);
    ST(&ctl->reserved, to, release); /* P1'/S3: RELEASE, pairs with claimed_end's ACQUIRE */
}
/* Bytes a record occupies, from its len_flags word. */
static inline uint64_t rec_stride(uint32_t lf)
{
    return FIPS_REC_HDR_SIZE + ALIGN8(lf & FIPS_REC_LEN_MASK);
}
#define HB_EVERY_NS 100000000ull  /* consumer heartbeat period */
/* Retry budgets of the loops that wait for another party to settle.  Only a
 * hostile writer exhausts them; the explorer's -DFIPS_RETRY_TINY build makes
 * them tiny so that every fallback path is explored too. */
#ifdef FIPS_RETRY_TINY
#define TRIES_REFRESH(nc) 2
#define TRIES_FLOOR 2
#define TRIES_J2 2
#else
#define TRIES_REFRESH(nc) (4 + 2 * (int)(nc))
#define TRIES_FLOOR 20000 /* with backoff(): about a second */
#define TRIES_J2 1000
#endif

/* A retry loop's wait: spin a little, then sleep 50 us a try, so that a
 * producer descheduled in the middle of a claim (reserved != head for as
 * long as it is off the CPU) does not exhaust a budget meant for hostile
 * writers within microseconds. */
static inline void backoff(int attempt)
{
    SPIN();
#ifndef FIPS_EXPLORE
    if (attempt >= 64) {
        struct timespec nap = {0, 50000};
        nanosleep(&nap, NULL);
    }
#else
    (void)attempt;
#endif
}
#define TLS_SLOTS 4               /* domains one thread may log into at once */

/* ---- errors --------------------------------------------------------------- */
const char *fips_strerror(int err)
{
    if (err < 0) err = -err;
    switch (err) {
    case 0: return "success";
    case FIPS_EFULL: return "ring full, record dropped";
    case FIPS_ETOOBIG: return "record longer than max_record";
    case FIPS_EMAGIC: return "not a fips domain (wrong magic)";
    case FIPS_EVERSION: return "unsupported layout version";
    case FIPS_ELAYOUT: return "impossible sizes or offsets in header";
    case FIPS_ETRUNC: return "file shorter than its header says";
    case FIPS_EOWNER: return "file belongs to another user";
    case FIPS_ENOTREADY: return "domain not initialised";
    case FIPS_ENORING: return "ring table full";
    case FIPS_ENOCONSUMER: return "consumer table full";
    case FIPS_EEVICTED: return "consumer was evicted";
    case FIPS_ECORRUPT: return "ring contents corrupt";
    case FIPS_EBUSY: return "consumer name held by a live process";
    case FIPS_ECLOSED: return "domain closed";
    case FIPS_EAGAIN: return "no record available";
    case FIPS_ELAPPED: return "producer lapped the reader";
    case FIPS_ETORN: return "consumer was evicted and the producer may have overwritten the batch";
    case FIPS_EREENTER: return "logged from a signal handler inside another log call: dropped, counted";
    default: return strerror(err);
    }
}

/* ---- time ----------------------------------------------------------------- */
uint64_t fips_now_ns(void)
{
#ifdef FIPS_EXPLORE
    return fips_explore_clock(FX_CLOCK_REALTIME); /* a virtual clock the explorer advances */
#endif
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Heartbeats only need milliseconds: the coarse clock costs a third. */
static uint64_t mono_coarse_ns(void)
{
#ifdef FIPS_EXPLORE
    return fips_explore_clock(FX_CLOCK_MONO_COARSE);
#endif
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

uint64_t fips_mono_ns(void)
{
#ifdef FIPS_EXPLORE
    return fips_explore_clock(FX_CLOCK_MONO);
#endif
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- the SIGBUS guard --------------------------------------------------------- */
/* Every mapping of a domain is registered here; a SIGBUS inside one (its file
 * was truncated under it) maps zero pages over the rest of it and marks it,
 * and every later call on that domain returns -FIPS_ETRUNC.  A fault
 * anywhere else goes to the handler that was installed before ours, or gets
 * the default action.  This table and the saved handler are libfips'
 * process-wide state besides the per-thread rings: a signal handler has
 * nowhere else to look.  Slots: base 0 free, 1 being filled. */
#define GUARD_SLOTS 1024
static struct guard_slot {
    _Atomic uintptr_t base;
    _Atomic size_t size;
    _Atomic int prot;
    _Atomic int hit;
} guards[GUARD_SLOTS];
static struct sigaction guard_old;
static size_t guard_page;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    if (si->si_code > 0) /* a fault (not kill/raise): si_addr is meaningful */
        for (int i = 0; i < GUARD_SLOTS; i++) {
            uintptr_t b = atomic_load_explicit(&guards[i].base, memory_order_acquire);
            size_t n = atomic_load_explicit(&guards[i].size, memory_order_relaxed);
            if (b <= 1 || a - b >= n) continue;
            uintptr_t page = a & ~(uintptr_t)(guard_page - 1);
            int prot = atomic_load_explicit(&guards[i].prot, memory_order_relaxed);
            if (mmap((void *)page, b + n - page, prot, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
                MAP_FAILED)
                break;
            /* B1: RELEASE, after the zero pages are in place; pairs with the
             * ACQUIRE load of hit in domain_hit() and fips_log(). */
            atomic_store_explicit(&guards[i].hit, 1, memory_order_release);
            return; /* the access is retried and reads zeros */
        }
    if (guard_old.sa_flags & SA_SIGINFO) {
        guard_old.sa_sigaction(sig, si, uc);
    } else if (guard_old.sa_handler == SIG_DFL || guard_old.sa_handler == SIG_IGN) {
        /* what would have happened without us: the access faults again */
        signal(sig, SIG_DFL);
        return;
    } else {
        guard_old.sa_handler(sig);
    }
    /* A chained handler that returned from a real fault (faulthandler does
     * once it has printed its traceback) would have the access retried for
     * ever: the retry gets the default action. */
    if (si->si_code > 0) signal(sig, SIG_DFL);
}

static void guard_install(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    guard_page = pg > 0 ? (size_t)pg : 4096;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &guard_old);
}

/* Another SIGBUS handler installed after ours (Python's faulthandler, a
 * runtime's crash reporter) takes every fault first and re-raises it with
 * raise(), which carries no fault address: a truncated mapping then killed the
 * process.  At each new mapping, put ours back in front, chaining to whatever
 * is there now.  Under a lock: two re-chains at once would chain us to
 * ourselves. */
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static void guard_rechain(void)
{
    pthread_mutex_lock(&guard_lock);
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == guard_handler)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = guard_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &guard_old);
    }
    pthread_mutex_unlock(&guard_lock);
}

static int guard_register(void *base, size_t size, int prot)
{
    pthread_once(&guard_once, guard_install);
    guard_rechain();
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t exp = 0;
        if (!atomic_compare_exchange_strong(&guards[i].base, &exp, 1)) continue;
        atomic_store(&guards[i].size, size);
        atomic_store(&guards[i].prot, prot);
        atomic_store(&guards[i].hit, 0);
        atomic_store_explicit(&guards[i].base, (uintptr_t)base, memory_order_release);
        return i;
    }
    return -1; /* more than GUARD_SLOTS mappings: this one is unguarded */
}

static void guard_unregister(int i)
{
    if (i < 0) return;
    atomic_store(&guards[i].size, 0);
    atomic_store_explicit(&guards[i].base, 0, memory_order_release);
}

static inline int guard_hit(int i)
{
    return i >= 0 && atomic_load_explicit(&guards[i].hit, memory_order_acquire);
}

/* What a mapping without a guard slot points at: never hit. */
static _Atomic int guard_none;

/* ---- process-local handles ------------------------------------------------ */
struct fips_domain {
    int fd;
    int writable;
    uint8_t *base;
    size_t size;
    struct fips_layout_header *hdr;   /* the live mapping */
    struct fips_layout_header hcopy;  /* the validated private copy */
    _Atomic uint64_t open_consumers;  /* entries this handle has open (bit c) */
    struct fips_layout_ring *rings;
    struct fips_layout_consumer *cons;
    struct fips_layout_pos *pos;
    uint8_t *data;
    uint32_t max_rings, max_consumers, max_record;
    uint64_t cap, mask, grace_ns;
    int block_us;
    int guard;           /* slot in the SIGBUS guard table, -1 none */
    const _Atomic int *hitp; /* &guards[guard].hit, or &guard_none: one load on the hot path */
    atomic_int refs;     /* user handle + one per open producer ring */
    atomic_int closing;
    char path[PATH_MAX];
};

struct fips_monitor {
    struct fips_domain d; /* writable == 0, mapped PROT_READ */
};

/* Whether d's mapping was truncated under us (SIGBUS guard): every call on
 * it then returns -FIPS_ETRUNC. */
static inline int domain_hit(const fips_domain *d)
{
    /* B1: ACQUIRE, pairs with the guard handler's RELEASE store of hit. */
    return atomic_load_explicit(d->hitp, memory_order_acquire);
}

/* A producer thread's view of its ring: local copies of the counters it is
 * the only writer of, so the hot path never reads shared memory except when
 * the ring looks full. */
struct tls_ring {
    fips_domain *d;
    struct fips_layout_ring *ctl;
    /* d's constants the hot path needs, copied at attach so that fips_log
     * loads them from this line instead of chasing d: */
    uint8_t *data;        /* this ring's bytes: d->data + idx * cap */
    uint64_t mask, cap;   /* d->mask, d->cap */
    const _Atomic int *hitp; /* d->hitp (the SIGBUS guard's flag) */
    uint32_t max_record;  /* d->max_record */
    uint32_t idx;
    uint64_t head;        /* == ctl->head */
    uint64_t limit;       /* lowest position a consumer still needs (refresh_floor) */
    uint64_t floor;       /* == ctl->floor, published by us only; never decreases */
    uint64_t floor_next;  /* == ctl->floor_next (>= floor); never decreases */
    uint64_t covered;     /* consumers ACTIVE at our last re-scan (P6'), bit c */
    uint64_t committed, bytes, dropped, bytes_dropped, full_events, truncated;
    uint32_t pending_lost;
    int32_t slow_c;       /* consumer that set `limit`, -1 if none */
    uint32_t full_tries;  /* drops since the last full refresh */
    uint64_t refresh_coarse_ns; /* coarse clock at the last full refresh */
    /* record timestamps from the TSC, anchored to CLOCK_REALTIME (see
     * rec_time()): tsc0/ns0 the anchor, mult ns per tick << 32 (0 while
     * uncalibrated), last the newest stamp (stamps never go backwards). */
    uint64_t tsc0, ns0, mult, last_ts;
    /* Re-entry from a signal handler: busy while a log call or a claim is in
     * progress; a call that finds it set only counts itself in `nested`
     * (records and bytes), which the interrupted call folds into the drops. */
    volatile sig_atomic_t busy;
    _Atomic uint32_t nested, nested_bytes;
};

struct tls_state {
    struct tls_ring r[TLS_SLOTS];
    volatile sig_atomic_t attaching; /* inside tls_ring_slow (re-entry guard) */
};

/* The only global state of the library: the per-thread ring pointers (and
 * the last consumer a thread read, to count reader threads), plus the key
 * whose destructor closes the rings at thread exit. */
#ifdef FIPS_EXPLORE
/* The explorer runs every party on one OS thread: it gives each party its own
 * copy of the per-thread state. */
#define fips_tls (*(struct tls_state *)fips_explore_tls(sizeof(struct tls_state)))
#define fips_tls_reader (*fips_explore_tls_reader())
#else
static _Thread_local struct tls_state fips_tls;
static _Thread_local const void *fips_tls_reader; /* last consumer this thread read */
#endif
static pthread_key_t fips_tls_key;
static pthread_once_t fips_once = PTHREAD_ONCE_INIT;

static void domain_unref(fips_domain *d);

/* A signal handler that logs while this thread closes a ring must neither
 * write into it (CLOSED, another thread may take it) nor attach a new one
 * into the slot being wiped: d goes first, under the attach guard, so the
 * handler's record is counted in records_no_ring. */
static void ring_close_now(struct tls_ring *t)
{
    sig_atomic_t was = fips_tls.attaching;
    fips_tls.attaching = 1;
    atomic_signal_fence(memory_order_seq_cst);
    fips_domain *d = t->d;
    t->d = NULL;
    atomic_signal_fence(memory_order_seq_cst);
    struct fips_layout_ring *ctl = t->ctl;
    STAT_ST(&ctl->closed_ns, fips_now_ns());
    /* P7: RELEASE, pairs with M1 (a monitor's acquire of the ring state) and
     * with S1 (a new producer's acquire before reusing the slot): the final
     * counters and closed_ns are visible to whoever sees CLOSED. */
    ST32(&ctl->state, FIPS_RING_CLOSED, release);
    memset(t, 0, sizeof(*t));
    atomic_signal_fence(memory_order_seq_cst);
    fips_tls.attaching = was;
    domain_unref(d);
}

static void tls_destructor(void *arg)
{
    (void)arg;
    for (int i = 0; i < TLS_SLOTS; i++)
        if (fips_tls.r[i].d) ring_close_now(&fips_tls.r[i]);
}

/* After fork() the child must not write into the parent's rings: forget them
 * (the parent still owns and closes them).  A signal handler that logs in the
 * child must not find them either: asynchronous signals are blocked from
 * before the fork until they are forgotten (a process group's signal can hit
 * the child before its atfork handlers ran), and each slot's d goes first,
 * under the attach guard (a synchronous one then counts itself in
 * records_no_ring instead of using a half-wiped slot): repro/signal_fork.c. */
static _Thread_local sigset_t fips_fork_mask;
static void atfork_prepare(void)
{
    sigset_t all;
    sigfillset(&all);
    /* never the synchronous ones (the SIGBUS guard among them) */
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &all, &fips_fork_mask);
}
static void atfork_parent(void)
{
    pthread_sigmask(SIG_SETMASK, &fips_fork_mask, NULL);
}
static void atfork_child(void)
{
    fips_tls.attaching = 1;
    atomic_signal_fence(memory_order_seq_cst);
    for (int i = 0; i < TLS_SLOTS; i++) fips_tls.r[i].d = NULL;
    atomic_signal_fence(memory_order_seq_cst);
    memset(fips_tls.r, 0, sizeof fips_tls.r);
    atomic_signal_fence(memory_order_seq_cst);
    fips_tls.attaching = 0;
    pthread_sigmask(SIG_SETMASK, &fips_fork_mask, NULL);
}

/* exit() runs no key destructors for the exiting thread: close its rings. */
static void atexit_close(void)
{
    tls_destructor(NULL);
}

static void once_init(void)
{
    pthread_key_create(&fips_tls_key, tls_destructor);
    atexit(atexit_close);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- layout and validation ------------------------------------------------ */
struct layout {
    uint64_t ring_table_off, consumer_table_off, pos_table_off, data_off, file_size;
};

static int compute_layout(uint32_t max_rings, uint32_t max_consumers, uint64_t cap,
                          struct layout *l)
{
    if (max_rings == 0 || max_rings > FIPS_MAX_RINGS_LIMIT) return -FIPS_ELAYOUT;
    if (max_consumers == 0 || max_consumers > FIPS_MAX_CONSUMERS_LIMIT) return -FIPS_ELAYOUT;
    if (cap < FIPS_MIN_CAPACITY || cap > FIPS_MAX_CAPACITY || (cap & (cap - 1))) return -FIPS_ELAYOUT;
    if ((uint64_t)max_rings * cap > (1ull << 40)) return -FIPS_ELAYOUT;
    l->ring_table_off = FIPS_HDR_SIZE;
    l->consumer_table_off = l->ring_table_off + (uint64_t)max_rings * FIPS_RING_CTL_SIZE;
    l->pos_table_off = l->consumer_table_off + (uint64_t)max_consumers * FIPS_CONSUMER_SIZE;
    uint64_t end = l->pos_table_off + (uint64_t)max_consumers * max_rings * FIPS_POS_SIZE;
    l->data_off = (end + 4095u) & ~4095ull;
    l->file_size = l->data_off + (uint64_t)max_rings * cap;
    return 0;
}

static int seterr(char *buf, size_t len, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int seterr(char *buf, size_t len, int code, const char *path, const char *fmt, ...)
{
    if (buf && len) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(buf, len, "%s: %s", path ? path : "(memory)", msg);
    }
    return code;
}

static int validate(const struct fips_layout_header *h, uint64_t actual_size,
                    const char *path, char *eb, size_t el)
{
    if (actual_size < FIPS_HDR_SIZE)
        return seterr(eb, el, -FIPS_ETRUNC, path, "truncated: %llu bytes, a header needs %u",
                      (unsigned long long)actual_size, FIPS_HDR_SIZE);
    if (h->magic != FIPS_MAGIC)
        return seterr(eb, el, -FIPS_EMAGIC, path, "not a fips domain (magic 0x%016llx)",
                      (unsigned long long)h->magic);
    if (h->version != FIPS_LAYOUT_VERSION)
        return seterr(eb, el, -FIPS_EVERSION, path, "layout version %u, this build reads %u",
                      h->version, FIPS_LAYOUT_VERSION);
    if (h->hdr_size != FIPS_HDR_SIZE)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "header size %u, expected %u",
                      h->hdr_size, FIPS_HDR_SIZE);
    struct layout l;
    if (compute_layout(h->max_rings, h->max_consumers, h->ring_capacity, &l))
        return seterr(eb, el, -FIPS_ELAYOUT, path,
                      "impossible sizes: max_rings %u, max_consumers %u, ring_capacity %llu",
                      h->max_rings, h->max_consumers, (unsigned long long)h->ring_capacity);
    if (h->max_record > h->ring_capacity / 4 || h->max_record > FIPS_REC_LEN_MASK)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "max_record %u too large for ring_capacity %llu",
                      h->max_record, (unsigned long long)h->ring_capacity);
    if (h->ring_table_off != l.ring_table_off || h->consumer_table_off != l.consumer_table_off ||
        h->pos_table_off != l.pos_table_off || h->data_off != l.data_off)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "table offsets do not match the sizes");
    if (h->file_size != l.file_size)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "file_size %llu, sizes imply %llu",
                      (unsigned long long)h->file_size, (unsigned long long)l.file_size);
    if (actual_size < h->file_size)
        return seterr(eb, el, -FIPS_ETRUNC, path, "truncated: %llu bytes of %llu",
                      (unsigned long long)actual_size, (unsigned long long)h->file_size);
    if (actual_size > h->file_size)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "file is %llu bytes, header says %llu",
                      (unsigned long long)actual_size, (unsigned long long)h->file_size);
    if (memchr(h->name, 0, sizeof h->name) == NULL)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "domain name not terminated");
    if (LD32(&h->ready, acquire) != 1) /* D1: pairs with the creator's release of ready */
        return seterr(eb, el, -FIPS_ENOTREADY, path, "domain not initialised (ready=%u)",
                      LD32(&h->ready, relaxed));
    return 0;
}

int fips_validate_header(const void *hdr, size_t file_size, char *eb, size_t el)
{
    struct fips_layout_header h;
    memset(&h, 0, sizeof h);
    memcpy(&h, hdr, file_size < sizeof h ? file_size : sizeof h);
    return validate(&h, file_size, NULL, eb, el);
}

static int valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= FIPS_NAME_MAX || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

const char *fips_shm_dir(const char *dir)
{
    if (dir && *dir) return dir;
    const char *e = getenv("FIPS_SHM_DIR");
    return (e && *e) ? e : "/dev/shm";
}

/* Bind from the validated private copy h, never from the mapping, which
 * another process could change after validation. */
static void domain_bind(fips_domain *d, const struct fips_layout_header *h)
{
    d->hcopy = *h;
    d->rings = (struct fips_layout_ring *)(d->base + h->ring_table_off);
    d->cons = (struct fips_layout_consumer *)(d->base + h->consumer_table_off);
    d->pos = (struct fips_layout_pos *)(d->base + h->pos_table_off);
    d->data = d->base + h->data_off;
    d->max_rings = h->max_rings;
    d->max_consumers = h->max_consumers;
    d->max_record = h->max_record;
    d->cap = h->ring_capacity;
    d->mask = h->ring_capacity - 1;
    d->grace_ns = h->grace_ns;
}

/* The text of a name read from shared memory, for a message: at most 63
 * bytes, every byte outside printable ASCII (and the backslash) as \xNN, so
 * a hostile header cannot break the one-line error or inject terminal
 * escapes. */
static void escaped_name(char *out, size_t outlen, const char *name, size_t maxlen)
{
    size_t o = 0;
    for (size_t i = 0; i < maxlen && name[i] && o + 5 < outlen; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
    }
    out[o < outlen ? o : outlen - 1] = 0;
}

/* Map an existing file after validating it; fd is consumed on failure. */
static int map_file(fips_domain *d, int fd, int writable, int any_owner, char *eb, size_t el)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return seterr(eb, el, -errno, d->path, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return seterr(eb, el, -FIPS_ELAYOUT, d->path, "not a regular file");
    if (!any_owner && st.st_uid != geteuid())
        return seterr(eb, el, -FIPS_EOWNER, d->path, "owned by uid %u, not by uid %u",
                      (unsigned)st.st_uid, (unsigned)geteuid());
    struct fips_layout_header h;
    memset(&h, 0, sizeof h);
    ssize_t n = pread(fd, &h, sizeof h, 0);
    if (n < 0) return seterr(eb, el, -errno, d->path, "%s", strerror(errno));
    int rc = validate(&h, (uint64_t)st.st_size, d->path, eb, el);
    if (rc) return rc;
    /* The name in the header is the file's: a file named fips.X that says it
     * is domain Y would show (and be exported) as Y. */
    const char *slash = strrchr(d->path, '/');
    const char *base = slash ? slash + 1 : d->path;
    if (strncmp(base, "fips.", 5) != 0 || strncmp(base + 5, h.name, sizeof h.name) != 0) {
        char shown[64 * 4 + 1];
        escaped_name(shown, sizeof shown, h.name, sizeof h.name);
        return seterr(eb, el, -FIPS_ELAYOUT, d->path, "the header names domain '%s', not this file's", shown);
    }
    int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(NULL, (size_t)h.file_size, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return seterr(eb, el, -errno, d->path, "mmap: %s", strerror(errno));
    d->base = p;
    d->size = (size_t)h.file_size;
    d->hdr = p;
    d->guard = guard_register(p, d->size, prot); /* before the first access */
    d->hitp = d->guard >= 0 ? &guards[d->guard].hit : &guard_none;
    /* The file may have changed between pread and mmap: validate the mapping. */
    rc = validate(d->hdr, (uint64_t)h.file_size, d->path, eb, el);
    if (rc == 0 && memcmp(&h, d->hdr, 176) != 0)
        rc = seterr(eb, el, -FIPS_ELAYOUT, d->path, "header changed while attaching");
    if (rc == 0 && domain_hit(d))
        rc = seterr(eb, el, -FIPS_ETRUNC, d->path, "truncated while attaching");
    if (rc) {
        guard_unregister(d->guard);
        munmap(p, d->size);
        d->base = NULL;
        return rc;
    }
    d->writable = writable;
    domain_bind(d, &h);
    EXPLORE_MAPPED(d->base, d->size, fd);
    /* Keep no descriptor we do not need: a logging process that drops its
     * privileges must not be able to truncate the domain through ours.  A
     * writable domain needs one only to back ring pages (ring_attach) where
     * the kernel cannot populate a mapping for writing (before 5.14). */
    d->fd = fd;
    if (!writable || madvise(d->base, guard_page, MADV_POPULATE_WRITE) == 0) {
        close(fd);
        d->fd = -1;
    }
    return 0;
}

void fips_domain_opts_init(fips_domain_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_rings = 256;
    o->max_consumers = 16;
    o->ring_capacity = 1u << 20;
    o->max_record = 4096;
    o->grace_ns = 5000000000ull;
    o->mode = 0640;
    o->gid = -1;
    o->create = 1;
}

static int path_of(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/fips.%s", fips_shm_dir(dir), name);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* Create the file fully initialised under a temporary name, then link() it
 * into place: nobody ever sees a half-built domain, and link() never
 * replaces an existing file (or follows a symlink planted at the name). */
static int create_file(const char *dir, const char *name, const char *path,
                       const fips_domain_opts *o)
{
    struct layout l;
    if (compute_layout(o->max_rings, o->max_consumers, o->ring_capacity, &l)) return -FIPS_ELAYOUT;
    if (o->max_record > o->ring_capacity / 4 || o->max_record > FIPS_REC_LEN_MASK) return -FIPS_ELAYOUT;
    char tmp[PATH_MAX];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int n = snprintf(tmp, sizeof tmp, "%s/.fips.%s.%d.%ld.tmp", fips_shm_dir(dir), name,
                     (int)getpid(), (long)ts.tv_nsec);
    if (n < 0 || (size_t)n >= sizeof tmp) return -ENAMETOOLONG;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, o->mode);
    if (fd < 0) return -errno;
    int rc = 0;
    if (fchmod(fd, o->mode) < 0) rc = -errno;               /* defeat the umask */
    if (!rc && o->gid >= 0 && fchown(fd, (uid_t)-1, (gid_t)o->gid) < 0) rc = -errno;
    if (!rc && ftruncate(fd, (off_t)l.file_size) < 0) rc = -errno;
    /* Back the tables now and each ring when a producer takes it
     * (ring_attach): a sparse file on a full tmpfs would SIGBUS the writer
     * at its first store instead of failing here with ENOSPC. */
    if (!rc) rc = -posix_fallocate(fd, 0, (off_t)l.data_off);
    struct fips_layout_header *h = NULL;
    if (!rc) {
        h = mmap(NULL, FIPS_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) { rc = -errno; h = NULL; }
    }
    if (!rc) {
        h->magic = FIPS_MAGIC;
        h->version = FIPS_LAYOUT_VERSION;
        h->hdr_size = FIPS_HDR_SIZE;
        h->file_size = l.file_size;
        h->max_rings = o->max_rings;
        h->max_consumers = o->max_consumers;
        h->ring_capacity = o->ring_capacity;
        h->max_record = o->max_record;
        h->ring_table_off = l.ring_table_off;
        h->consumer_table_off = l.consumer_table_off;
        h->pos_table_off = l.pos_table_off;
        h->data_off = l.data_off;
        h->created_realtime_ns = fips_now_ns();
        h->created_mono_ns = fips_mono_ns();
        h->grace_ns = o->grace_ns;
        h->creator_pid = (uint32_t)getpid();
        snprintf(h->name, sizeof h->name, "%s", name);
        ST32(&h->ready, 1, release); /* D1: pairs with validate()'s acquire of ready */
        munmap(h, FIPS_HDR_SIZE);
        if (link(tmp, path) < 0) rc = -errno; /* EEXIST: someone else won */
    }
    unlink(tmp);
    close(fd);
    return rc;
}

int fips_domain_open(fips_domain **out, const char *shm_dir, const char *name,
                     const fips_domain_opts *opts)
{
    return fips_domain_open_err(out, shm_dir, name, opts, NULL, 0);
}

int fips_domain_open_err(fips_domain **out, const char *shm_dir, const char *name,
                         const fips_domain_opts *opts, char *eb, size_t el)
{
    *out = NULL;
    fips_domain_opts def;
    if (!opts) { fips_domain_opts_init(&def); opts = &def; }
    if (!valid_name(name))
        return seterr(eb, el, -EINVAL, name ? name : "(null)",
                      "invalid domain name (want [A-Za-z0-9._-], 1-63 chars, no leading dot)");
    pthread_once(&fips_once, once_init);
    fips_domain *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->fd = -1;
    d->guard = -1;
    d->hitp = &guard_none;
    int rc = path_of(d->path, sizeof d->path, shm_dir, name);
    if (rc) { free(d); return rc; }
    int created = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        /* O_NONBLOCK: a FIFO planted at the name must not hang us. */
        int fd = open(d->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) {
            if (opts->create == 2 && !created) {
                close(fd);
                rc = seterr(eb, el, -EEXIST, d->path, "already exists");
                break;
            }
            rc = map_file(d, fd, 1, opts->any_owner, eb, el);
            if (rc) close(fd);
            break;
        }
        rc = -errno;
        if (rc == -ELOOP) { seterr(eb, el, rc, d->path, "is a symlink (refused)"); break; }
        if (rc != -ENOENT || !opts->create) {
            seterr(eb, el, rc, d->path, "%s", strerror(-rc));
            break;
        }
        if (opts->mode & 0002) {
            /* anybody could then write records an IPS bans on */
            rc = seterr(eb, el, -EPERM, d->path, "refusing to create a world-writable domain (mode %04o)",
                        opts->mode & 07777);
            break;
        }
        rc = create_file(shm_dir, name, d->path, opts);
        if (rc == -FIPS_ELAYOUT) {
            seterr(eb, el, rc, d->path, "impossible sizes requested (rings %u, consumers %u, "
                   "ring_capacity %llu, max_record %u)", opts->max_rings, opts->max_consumers,
                   (unsigned long long)opts->ring_capacity, opts->max_record);
            break;
        }
        if (rc && rc != -EEXIST) { seterr(eb, el, rc, d->path, "create: %s", fips_strerror(rc)); break; }
        created = rc == 0;
        if (rc == -EEXIST && opts->create == 2) { seterr(eb, el, rc, d->path, "already exists"); break; }
    }
    if (rc) { free(d); return rc; }
    d->block_us = opts->block_us;
    atomic_init(&d->refs, 1);
    atomic_init(&d->closing, 0);
    *out = d;
    return 0;
}

static void domain_unref(fips_domain *d)
{
    SYNC(&d->refs, sizeof d->refs, FX_RMW);
    /* ACQ_REL: the last holder unmaps after every other holder's accesses. */
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
        EXPLORE_UNMAPPED(d->base);
        guard_unregister(d->guard);
        munmap(d->base, d->size);
        if (d->fd >= 0) close(d->fd);
        free(d);
    }
}

const struct fips_layout_header *fips_domain_header(const fips_domain *d) { return &d->hcopy; }

int fips_domain_truncated(const fips_domain *d) { return domain_hit(d); }

int fips_domain_unlink(const char *shm_dir, const char *name)
{
    char p[PATH_MAX];
    if (!valid_name(name)) return -EINVAL;
    int rc = path_of(p, sizeof p, shm_dir, name);
    if (rc) return rc;
    return unlink(p) < 0 ? -errno : 0;
}

int fips_domain_close(fips_domain *d)
{
    if (!d) return -EINVAL;
    SYNC(&d->closing, sizeof d->closing, FX_RMW);
    if (atomic_exchange(&d->closing, 1)) return -FIPS_ECLOSED;
    fips_producer_close(d);
    domain_unref(d);
    return 0;
}

/* ---- producer ----------------------------------------------------------------- */
/* Inode of our pid namespace: a pid recorded by a process in another
 * namespace means nothing to kill(2) here. */
static uint64_t my_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether the process that wrote (pid, pidns) may still be running.  When we
 * cannot tell (another pid namespace), it is alive: taking over a live
 * producer's ring or consumer's entry is worse than waiting.  A zombie is
 * dead. */
static int pid_alive(uint32_t pid, uint64_t pidns)
{
    if (pid == 0) return 0;
    if (pidns != my_pidns()) return 1;
    if (kill((pid_t)pid, 0) != 0) return errno == EPERM;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* comm may contain anything */
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

/* The seq of the record at position `pos` of our own ring (floor_seq).  The
 * producer wrote every byte in [head - cap, head) itself and nobody else
 * writes them, so the header it finds there is its own: at most a tail too
 * short for a header, or a PAD, lies between pos and the record. */
static uint64_t seq_at(const struct tls_ring *t, uint64_t pos)
{
    const fips_domain *d = t->d;
    const uint8_t *base = d->data + (size_t)t->idx * d->cap;
    for (int step = 0; step < 3 && pos < t->head; step++) {
        uint64_t off = pos & d->mask, to_end = d->cap - off;
        if (to_end < FIPS_REC_HDR_SIZE) { pos += to_end; continue; }
        const struct fips_layout_record *h = (const void *)(base + off);
        SYNC(h, FIPS_REC_HDR_SIZE, FX_LOAD);
        if ((h->len_flags >> 24) & FIPS_REC_PAD) { pos += rec_stride(h->len_flags); continue; }
        return h->seq;
    }
    /* At head: the next record's seq, the count published with head (our own
     * field).  Not t->committed, which inside fips_log_batch already counts
     * records written beyond head and not yet published (a refresh can run
     * between them). */
    return STAT_LD(&t->ctl->records_committed);
}

/* Recompute ring r's floor and the producer's limit.
 *
 * Three positions, all ours alone to write, none ever decreasing:
 *  - `limit` (private, t->limit): the lowest position an ACTIVE consumer
 *    still needs; the ring is full when a record would end beyond
 *    limit + cap.  The producer writes only below limit + cap.
 *  - `floor_next` (P5a): where a joining consumer starts (its J2 reads it).
 *    floor_next >= limit, so every byte at or above it is intact.
 *  - `floor` (P5b): the oldest position a joined consumer can hold, for
 *    monitors and the tap: floor <= released of every consumer that has
 *    joined, and floor <= floor_next.  It is raised to a new value only after
 *    the re-scan that follows P5a found no consumer it had not counted.
 *
 * A consumer whose `released` is below floor_next is a joiner between J1 and
 * J2 (or hostile).  Which one it is decides how it counts:
 *  a) it was not ACTIVE at our last re-scan (not in t->covered), which came
 *     after our last store of floor_next: by the Dekker pair P5a/P6' against
 *     J1/J2 its J2 will read floor_next or a later value and move up to it,
 *     so it counts as standing there (F1).  Counting its stale position
 *     instead is what let the floor go backwards: the joiner then kept
 *     reading bytes overwritten before it joined (ECORRUPT for ever) and the
 *     producer dropped every record.
 *  b) it was ACTIVE at our last re-scan but not when we computed the value we
 *     had just stored: its J2 may have read an older floor_next, so it counts
 *     with its own position, and the floor is not raised past it (that is
 *     why floor and floor_next are two fields: a monitor never sees a joined
 *     consumer below the floor).
 *
 * With no ACTIVE consumer (A4) and none ever registered, the floor stays:
 * records wait for the first consumer (and a full ring drops, counted).  The
 * consumer holding a full ring is evicted (E1) if its heartbeat is older than
 * the grace period; once no ACTIVE consumer is left and some were here
 * (evicted or closed), what they held is let go (limit = head): an eviction
 * exists so that a dead consumer cannot stall logging, which keeping its
 * unread records would do.  A rejoin counts them as lost. */
static uint64_t refresh_floor(struct tls_ring *t, uint64_t need_end)
{
    fips_domain *d = t->d;
    struct fips_layout_ring *ctl = t->ctl;
    uint32_t r = t->idx;
    uint64_t floor = t->floor, next = t->floor_next, limit = t->limit;
    uint64_t covered = t->covered;
    int evicted = 0, settled = 0;
    for (int round = 0; round < TRIES_REFRESH(d->max_consumers); round++) {
        uint64_t seen = 0;
        int slow = -1, gone = 0;
        limit = t->head;
        for (uint32_t c = 0; c < d->max_consumers; c++) {
            /* P6: SEQ_CST, pairs with J1 (a joiner's store of ACTIVE) and
             * with E1/X1 (an eviction or close is seen at the next refresh). */
            uint32_t st = LD32(&d->cons[c].state, seq_cst);
            if (st == FIPS_CONS_EVICTED || st == FIPS_CONS_CLOSED) gone = 1;
            if (st != FIPS_CONS_ACTIVE) continue;
            struct fips_layout_pos *p = &d->pos[(size_t)c * d->max_rings + r];
            /* P4: ACQUIRE, pairs with C3/R1 (the consumer's CAS of released)
             * and J2: the consumer finished reading below `rel` before we
             * overwrite it. */
            uint64_t rel = LD(&p->released, acquire);
            if (rel > t->head) rel = t->head; /* hostile or stale: never beyond head */
            rel &= ~(uint64_t)7; /* hostile if unaligned: honour the boundary below */
            if (rel < next && !((covered >> (c & 63)) & 1u)) rel = next; /* F1, case a */
            seen |= 1ull << (c & 63);
            if (slow < 0 || rel < limit) {
                limit = rel;
                slow = (int)c;
            }
        }
        if (slow < 0) {
            /* A4: nobody reads.  If consumers were here and left (closed,
             * or evicted: a rejoin counts what it missed), waiting for them
             * would wedge the ring for good: let go.  Records wait only for
             * a first consumer (a daemon started before its IPS). */
            limit = evicted || gone ? t->head : next;
        } else if (need_end - limit > d->cap) {
            /* Evict the consumer holding a full ring if it stopped heartbeating. */
            struct fips_layout_consumer *ce = &d->cons[slow];
            /* G1: state and generation as one word (offsets 0 and 4), SEQ_CST,
             * before the heartbeat: the CAS below then evicts only the owner
             * whose heartbeat we read.  Without the generation, an entry
             * closed and taken by a new consumer in between (fresh heartbeat,
             * state ACTIVE again) was evicted in its place (ABA). */
            uint64_t sg = LD(&ce->state, seq_cst);
            if ((uint32_t)sg != FIPS_CONS_ACTIVE) continue; /* recompute: it left */
            /* Relaxed (H): a heartbeat is a hint with a grace of seconds; no
             * data is read through it. */
            uint64_t hb = LD(&ce->heartbeat_mono_ns, relaxed);
            uint64_t now = fips_mono_ns();
            if (now > hb && now - hb > d->grace_ns) {
                uint64_t exp = sg;
                /* E1: SEQ_CST CAS of (state, generation), pairs with E2 (the
                 * evicted consumer's acquire fence and state load at release)
                 * through P1's release fence before any byte of its span is
                 * rewritten. */
                if (CAS64(&ce->state, &exp, (sg & ~0xffffffffull) | FIPS_CONS_EVICTED)) {
                    STAT_ST(&ce->evicted_ns, fips_now_ns());
                    STAT_ST32(&ce->evicted_by_ring, r);
                    STAT_ST(&ctl->evictions, STAT_LD(&ctl->evictions) + 1);
                    evicted = 1;
                }
                continue; /* recompute without it */
            }
        }
        if (limit > next) {
            next = limit;
            /* P5a: SEQ_CST, pairs with J2 (a joining consumer's load of
             * floor_next) in the Dekker pair with P6'. */
            ST(&ctl->floor_next, next, seq_cst);
        }
        /* P6': SEQ_CST re-scan after the last store of floor_next (the load
         * half of the Dekker pair).  A consumer ACTIVE now that we did not
         * count may have read an older floor_next at J2 (case b): count it
         * with its own position.  One not ACTIVE now joins after this point
         * and will read this floor_next (case a). */
        uint64_t active = 0;
        for (uint32_t c = 0; c < d->max_consumers && c < 64; c++)
            if (LD32(&d->cons[c].state, seq_cst) == FIPS_CONS_ACTIVE) active |= 1ull << c;
        covered = active;
        t->slow_c = slow;
        if (active & ~seen) continue;
        if (limit > floor) {
            floor = limit;
            /* floor_seq first: a monitor that sees the new floor sees it. */
            ST(&ctl->floor_seq, seq_at(t, floor), relaxed);
            /* P5b: RELEASE, pairs with T1 (a monitor's or the tap's acquire
             * of floor). */
            ST(&ctl->floor, floor, release);
        }
        settled = 1;
        break;
    }
    if (!settled) {
        /* Consumers kept joining, closing or being evicted through every
         * round (or a hostile writer flips states): the last round may have
         * left an ACTIVE consumer uncounted.  Fall back to every ACTIVE
         * consumer's own position (F1 case b for all), no floor raised: safe
         * whatever their J2 read, only less far than the protocol allows.
         * Not above floor_next either: a consumer that goes ACTIVE after
         * this scan starts at the floor_next its J2 reads, at least `next`. */
        limit = next < t->head ? next : t->head;
        for (uint32_t c = 0; c < d->max_consumers; c++) {
            if (LD32(&d->cons[c].state, seq_cst) != FIPS_CONS_ACTIVE) continue; /* P6 */
            uint64_t rel = LD(&d->pos[(size_t)c * d->max_rings + r].released, acquire); /* P4 */
            if (rel > t->head) rel = t->head;
            rel &= ~(uint64_t)7;
            if (rel < limit) limit = rel;
        }
        covered = ~0ull;
        /* Every ACTIVE consumer is at or above limit, and one that goes
         * ACTIVE later moves up to at least `next` >= limit at its J2: limit
         * is a floor no joined consumer is below. */
        if (limit > floor) {
            floor = limit;
            ST(&ctl->floor_seq, seq_at(t, floor), relaxed);
            ST(&ctl->floor, floor, release); /* P5b: pairs with T1 */
        }
    }
    t->covered = covered;
    t->floor = floor;
    t->floor_next = next;
    uint64_t used = t->head - limit;
    if (used > d->cap) used = d->cap;
    if (used > STAT_LD(&ctl->high_water_bytes)) STAT_ST(&ctl->high_water_bytes, used);
    t->limit = limit;
    return limit;
}

static void thread_name(char *buf, size_t len)
{
    char comm[17] = {0};
    if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) comm[0] = 0;
    snprintf(buf, len, "%s", comm);
}

/* Take a ring slot for the calling thread: a never-used slot if any, else a
 * closed one every active consumer has drained, else one whose producer
 * process died and which is drained.  Not on the hot path.
 *
 * A reused slot keeps head, floor and the counters (positions and seq go on),
 * so consumer positions stay valid; only the identity and generation change. */
static int ring_attach(fips_domain *d, struct tls_ring *t)
{
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t r = 0; r < d->max_rings; r++) {
            struct fips_layout_ring *ctl = &d->rings[r];
            /* S1: ACQUIRE, pairs with P7 (the previous producer's release of
             * CLOSED) and S2 (a concurrent taker's CAS): its final head and
             * counters are visible before we continue from them. */
            uint32_t st = LD32(&ctl->state, acquire);
            uint32_t want = pass == 0 ? FIPS_RING_FREE : pass == 1 ? FIPS_RING_CLOSED : FIPS_RING_ACTIVE;
            if (st != want) continue;
            uint32_t dead_pid = LD32(&ctl->pid, relaxed); /* ordered by S1 */
            if (pass == 2 && pid_alive(dead_pid, LD(&ctl->pidns, relaxed))) continue;
            if (pass > 0) {
                /* C1: ACQUIRE, pairs with P3 of the previous producer. */
                uint64_t head = LD(&ctl->head, acquire);
                int drained = 1;
                for (uint32_t c = 0; c < d->max_consumers; c++)
                    /* M2/P4: ACQUIRE, pair with J1 and C3: a consumer that is
                     * ACTIVE and behind keeps the slot with its producer. */
                    if (LD32(&d->cons[c].state, acquire) == FIPS_CONS_ACTIVE &&
                        LD(&d->pos[(size_t)c * d->max_rings + r].released, acquire) < head)
                        drained = 0;
                if (!drained) continue;
            }
            uint32_t me = (uint32_t)getpid();
            /* Back the ring's pages before writing any (see create_file): a
             * full tmpfs fails here with ENOSPC instead of killing the
             * producer with SIGBUS at its first store. */
            if (d->fd >= 0) {
                int fa = posix_fallocate(d->fd, (off_t)(d->hcopy.data_off + (uint64_t)r * d->cap),
                                         (off_t)d->cap);
                if (fa != 0) return -fa;
            } else if (madvise(d->data + (size_t)r * d->cap, (size_t)d->cap, MADV_POPULATE_WRITE) != 0) {
                return errno == EFAULT || errno == ENOMEM ? -ENOSPC : -errno;
            }
            if (domain_hit(d)) return -FIPS_ETRUNC;
            if (pass < 2) {
                uint32_t exp = st;
                /* S2: SEQ_CST CAS elects one taker of a FREE or CLOSED slot;
                 * pairs with S1 of other takers and M1 of monitors. */
                if (!CAS32(&ctl->state, &exp, FIPS_RING_ACTIVE)) continue;
            } else {
                /* An ACTIVE slot of a dead producer: the pid CAS (S2) elects
                 * one taker (state stays ACTIVE, so it cannot be the lock). */
                uint32_t exp = dead_pid;
                if (dead_pid == me || !CAS32(&ctl->pid, &exp, me)) continue;
            }
            /* Identity: read by monitors only (relaxed, ordered for them by
             * M1 against the state store above or the next P3). */
            STAT_ST32(&ctl->generation, STAT_LD32(&ctl->generation) + 1);
            ST32(&ctl->pid, me, relaxed);
            ST(&ctl->pidns, my_pidns(), relaxed);
            STAT_ST32(&ctl->tid, (uint32_t)syscall(SYS_gettid));
            char nm[FIPS_THREAD_NAME_MAX] = {0}; /* no stack bytes into shared memory */
            thread_name(nm, sizeof nm);
            memcpy(ctl->thread_name, nm, sizeof nm);
            STAT_ST(&ctl->created_ns, fips_now_ns());
            STAT_ST(&ctl->closed_ns, 0);
            t->ctl = ctl;
            t->idx = r;
            t->data = d->data + (size_t)r * d->cap;
            t->mask = d->mask;
            t->cap = d->cap;
            t->hitp = d->hitp;
            t->max_record = d->max_record;
            t->head = LD(&ctl->head, relaxed); /* ordered by S1 */
            /* A reclaimed slot of a dead producer may hold a half-written
             * claim beyond head; reserved restarts at head, the claim stays
             * in claimed_max (S3: a holder of a batch that claim rewrote is
             * still told so, see claimed_end). */
            {
                uint64_t old = LD(&ctl->reserved, relaxed); /* ordered by S1 */
                lower_reserved(ctl, old > t->head ? old : t->head, t->head);
            }
            t->committed = LD(&ctl->records_committed, relaxed);
            t->bytes = STAT_LD(&ctl->bytes_committed);
            t->dropped = STAT_LD(&ctl->records_dropped);
            t->bytes_dropped = STAT_LD(&ctl->bytes_dropped);
            t->full_events = STAT_LD(&ctl->full_events);
            t->truncated = STAT_LD(&ctl->records_truncated);
            t->pending_lost = 0;
            t->slow_c = -1;
            t->full_tries = 0;
            t->tsc0 = t->ns0 = t->mult = t->last_ts = 0;
            t->floor = LD(&ctl->floor, relaxed);
            if (t->floor > t->head) t->floor = t->head; /* hostile: never beyond head */
            t->floor_next = LD(&ctl->floor_next, relaxed);
            if (t->floor_next < t->floor || t->floor_next > t->head) t->floor_next = t->floor;
            t->limit = t->floor;
            /* Until our first re-scan, honour every ACTIVE consumer's own
             * position (F1 case b for all): conservative, never unsafe. */
            t->covered = ~0ull;
            /* d last: a slot whose d matches is whole (tls_ring() takes it
             * with no other check, a signal handler included). */
            atomic_signal_fence(memory_order_seq_cst);
            t->d = d;
            return 0;
        }
    }
    return -FIPS_ENORING;
}

static void count_no_ring(fips_domain *d, uint32_t n);

/* n: the records the call carries, counted in records_no_ring when no ring
 * takes them (0 for the calls that log nothing: fips_producer_ring, set_name,
 * commit; repro/batch_no_ring.c). */
static struct tls_ring *tls_ring_slow(fips_domain *d, int *err, uint32_t n)
{
    SYNC(&d->closing, sizeof d->closing, FX_LOAD);
    if (atomic_load_explicit(&d->closing, memory_order_relaxed)) { *err = -FIPS_ECLOSED; return NULL; }
    if (domain_hit(d)) { *err = -FIPS_ETRUNC; return NULL; }
    for (int i = 0; i < TLS_SLOTS; i++) /* whole rings only: ring_attach sets d last */
        if (fips_tls.r[i].d == d) return &fips_tls.r[i];
    if (fips_tls.attaching) { /* a signal handler interrupted our own attach or close */
        count_no_ring(d, n);
        *err = -FIPS_EREENTER;
        return NULL;
    }
    /* The guard goes up before the free slot is chosen: a signal handler
     * that logged between a look at the slots and the guard would attach a
     * ring into the slot we then overwrite (its ring ACTIVE for ever, its
     * records in a ring nobody owns: repro/signal_attach.c).  From here on a
     * handler only counts itself in records_no_ring, so we look again. */
    fips_tls.attaching = 1;
    atomic_signal_fence(memory_order_seq_cst);
    struct tls_ring *t = NULL;
    int rc = -EMFILE; /* this thread has rings in TLS_SLOTS domains already */
    for (int i = 0; i < TLS_SLOTS && !t; i++)
        if (fips_tls.r[i].d == d) { t = &fips_tls.r[i]; rc = 0; } /* a handler attached before the guard */
    for (int i = 0; i < TLS_SLOTS && !t; i++) {
        if (fips_tls.r[i].d) continue;
        pthread_once(&fips_once, once_init);
        rc = ring_attach(d, &fips_tls.r[i]);
        if (rc == 0) {
            t = &fips_tls.r[i];
            SYNC(&d->refs, sizeof d->refs, FX_RMW);
            atomic_fetch_add(&d->refs, 1);
            pthread_setspecific(fips_tls_key, &fips_tls); /* arm the exit destructor */
        }
        break;
    }
    atomic_signal_fence(memory_order_seq_cst);
    fips_tls.attaching = 0;
    if (!t) {
        if (rc == -FIPS_ENORING || rc == -EMFILE) count_no_ring(d, n);
        *err = rc;
    }
    return t;
}

static inline struct tls_ring *tls_ring(fips_domain *d, int *err, uint32_t n)
{
    struct tls_ring *t = &fips_tls.r[0];
    if (__builtin_expect(t->d == d, 1)) return t;
    return tls_ring_slow(d, err, n);
}

/* A record with no ring to take it (ring table full, or logged from a signal
 * handler while this thread was taking its ring): counted in the header,
 * the one counter any thread may add to (this is a failure path). */
static void count_no_ring(fips_domain *d, uint32_t n)
{
    if (d->writable && n) atomic_fetch_add_explicit(A64(&d->hdr->records_no_ring), n, memory_order_relaxed);
}

static void count_drop(struct tls_ring *t, uint32_t len);

/* Re-entry guard.  A signal handler that logs while this thread is between
 * enter() and leave() of a log call would write into the middle of its
 * claim: instead the nested call only counts itself (nested_drop), and the
 * interrupted call folds the count into the ring's drops when it leaves.
 * busy and nested live in the thread's own state; the fences order them
 * against the interrupted code only (a signal runs on this thread). */
static inline int enter(struct tls_ring *t)
{
    if (__builtin_expect(t->busy, 0)) return 0;
    t->busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    return 1;
}

static int nested_drop(struct tls_ring *t, uint32_t len)
{
    atomic_fetch_add_explicit(&t->nested_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->nested, 1, memory_order_relaxed);
    return -FIPS_EREENTER;
}

/* Records a signal handler logged while we were busy were only counted in
 * `nested`: fold them into the drops, busy again while we do. */
static void __attribute__((noinline)) leave_slow(struct tls_ring *t)
{
    do {
        t->busy = 1;
        atomic_signal_fence(memory_order_seq_cst);
        uint32_t n = atomic_exchange_explicit(&t->nested, 0, memory_order_relaxed);
        uint32_t b = atomic_exchange_explicit(&t->nested_bytes, 0, memory_order_relaxed);
        for (uint32_t i = 0; i < n; i++) count_drop(t, i == 0 ? b : 0);
        atomic_signal_fence(memory_order_seq_cst);
        t->busy = 0;
        atomic_signal_fence(memory_order_seq_cst);
    } while (atomic_load_explicit(&t->nested, memory_order_relaxed) != 0);
}

static inline void leave(struct tls_ring *t)
{
    /* A handler that ran while busy was set counted itself in `nested`
     * before we clear busy; one that runs after logs on its own.  So one
     * look at `nested` after clearing busy misses nothing (fast path: a
     * store and a load). */
    atomic_signal_fence(memory_order_seq_cst);
    t->busy = 0;
    atomic_signal_fence(memory_order_seq_cst);
    /* a plain (volatile) load: only this thread and its signal handlers write it */
    if (__builtin_expect(*(volatile const uint32_t *)(const void *)&t->nested != 0, 0)) leave_slow(t);
}

static void count_drop(struct tls_ring *t, uint32_t len)
{
    t->dropped++;
    t->bytes_dropped += len;
    if (t->pending_lost != UINT32_MAX) t->pending_lost++;
    STAT_ST(&t->ctl->records_dropped, t->dropped);
    STAT_ST(&t->ctl->bytes_dropped, t->bytes_dropped);
}

/* Find room for a record of `need` bytes at the local head.  Returns the
 * record's start position (after a pad to the buffer end if it would not fit
 * contiguously) or UINT64_MAX when the ring is full (the caller counts the
 * drop).  Writes the pad header, stores `reserved` (P1). */
/* The ring looked full for a record ending at `end`: refresh the floor (and
 * wait, in blocking mode).  0 if it fits now, else UINT64_MAX (a drop).
 * Out of line: the hot path of fips_log keeps its registers. */
/* While the ring stays full, a drop costs two loads: if the consumer that
 * held the floor is still ACTIVE and has not moved far enough, the true
 * floor (a minimum that includes it) cannot have either.  The full refresh
 * (joins, closes, evictions) still runs once per tick of the coarse clock
 * (1-4 ms), and always in blocking mode.  1 (and the try counted) when the
 * record ending at `end` is still to be dropped without a refresh. */
static inline int still_full(struct tls_ring *t, uint64_t end)
{
    fips_domain *d = t->d;
    if (t->full_tries && t->slow_c >= 0 && d->block_us == 0 &&
        mono_coarse_ns() == t->refresh_coarse_ns) {
        struct fips_layout_pos *sp = &d->pos[(size_t)t->slow_c * d->max_rings + t->idx];
        /* Reading the line costs the consumer one invalidation per
         * release, not per try: the producer's copy stays shared. */
        /* P4 (ACQUIRE, pairs with C3) and a relaxed P6: only decides
         * whether to run the full refresh, which re-reads both. */
        if (end - LD(&sp->released, acquire) > d->cap &&
            LD32(&d->cons[t->slow_c].state, relaxed) == FIPS_CONS_ACTIVE) {
            t->full_tries++;
            return 1;
        }
    }
    return 0;
}

static __attribute__((noinline, cold)) uint64_t reserve_full(struct tls_ring *t, uint64_t end, int *fullev)
{
    fips_domain *d = t->d;
    if (still_full(t, end)) goto full;
    t->refresh_coarse_ns = mono_coarse_ns();
    refresh_floor(t, end);
    if (end - t->limit > d->cap && d->block_us > 0) {
        uint64_t t0 = fips_mono_ns(), deadline = t0 + (uint64_t)d->block_us * 1000u;
        struct timespec nap = {0, 20000};
        while (end - t->limit > d->cap && fips_mono_ns() < deadline) {
            SPIN();
            nanosleep(&nap, NULL);
            refresh_floor(t, end);
        }
        STAT_ST(&t->ctl->blocked_ns, STAT_LD(&t->ctl->blocked_ns) + (fips_mono_ns() - t0));
    }
    if (end - t->limit > d->cap) {
        t->full_tries++;
    full:
        if (!*fullev) {
            t->full_events++;
            STAT_ST(&t->ctl->full_events, t->full_events);
            *fullev = 1;
        }
        return UINT64_MAX;
    }
    t->full_tries = 0;
    return 0;
}

static inline __attribute__((always_inline)) uint64_t reserve(struct tls_ring *t, uint64_t head,
                                                              uint64_t need, int *fullev)
{
    uint64_t off = head & t->mask;
    uint64_t to_end = t->cap - off;
    uint64_t start = to_end < need ? head + to_end : head;
    uint64_t end = start + need;
    if (__builtin_expect(end - t->limit > t->cap, 0) && reserve_full(t, end, fullev) == UINT64_MAX)
        return UINT64_MAX;
    /* P1: store of reserved, then a RELEASE fence before any byte of
     * the claim is written: pairs with T2 (a tap's or joiner's acquire fence
     * and re-read of reserved) and E2 (an evicted consumer's check).  A
     * reader that saw a byte of this claim sees the claim in reserved. */
    ST(&t->ctl->reserved, end, release); /* RELEASE: see claimed_end (a plain store on x86-64) */
    atomic_thread_fence(memory_order_release);
    if (start != head && to_end >= FIPS_REC_HDR_SIZE) {
        struct fips_layout_record *pad = (void *)(t->data + off);
        SYNC(pad, FIPS_REC_HDR_SIZE, FX_STORE); /* P2 */
        pad->len_flags = (uint32_t)(to_end - FIPS_REC_HDR_SIZE) | (FIPS_REC_PAD << 24);
        pad->lost = 0;
        pad->seq = t->committed;
        pad->ts_ns = 0;
    }
    return start;
}

/* A record's CLOCK_REALTIME stamp.  clock_gettime costs ~30 ns here, more
 * than the rest of a 128-byte record's path, so on x86-64 with an invariant
 * TSC the stamp is the TSC scaled by a rate measured between two anchors
 * and re-anchored to the real clock every ~16 M ticks (a few ms): at most
 * microseconds off, never backwards within a ring. */
#define TSC_REANCHOR (1ull << 24)
#if defined(__x86_64__) && !defined(FIPS_EXPLORE)
/* The anchor (and the first calibration): out of line, once every few ms, so
 * that the hot path keeps its registers. */
static __attribute__((noinline, cold)) uint64_t rec_time_anchor(struct tls_ring *t, uint64_t tsc)
{
    uint64_t dt = tsc - t->tsc0;
    uint64_t now = fips_now_ns();
    if (t->tsc0 && dt >= TSC_REANCHOR && dt < (TSC_REANCHOR << 8) && now > t->ns0) {
        uint64_t m = (uint64_t)((((unsigned __int128)(now - t->ns0)) << 32) / dt);
        /* accept only a plausible rate (0.05 .. 20 GHz) */
        if (m > (1ull << 32) / 20 && m < (1ull << 32) * 20) t->mult = m;
    }
    /* Keep the first anchor until the interval is long enough to measure
     * the rate (re-anchoring on every uncalibrated call never would). */
    if (!t->tsc0 || dt >= TSC_REANCHOR) {
        t->tsc0 = tsc;
        t->ns0 = now;
    }
    if (now < t->last_ts) now = t->last_ts;
    t->last_ts = now;
    return now;
}
#endif
static inline uint64_t rec_time(struct tls_ring *t)
{
#if defined(__x86_64__) && !defined(FIPS_EXPLORE)
    uint64_t tsc = __rdtsc();
    uint64_t dt = tsc - t->tsc0;
    if (__builtin_expect(t->mult != 0 && dt < TSC_REANCHOR, 1)) {
        uint64_t ts = t->ns0 + (uint64_t)(((unsigned __int128)dt * t->mult) >> 32);
        if (ts < t->last_ts) ts = t->last_ts;
        t->last_ts = ts;
        return ts;
    }
    return rec_time_anchor(t, tsc);
#else
    (void)t;
    return fips_now_ns();
#endif
}

/* A payload into the ring.  16..64 bytes inline: two or four 16-byte moves
 * that may overlap inside the payload, 65..128 bytes two 64-byte copies
 * alike (nothing is read beyond buf + len nor written beyond the record); at
 * the sizes log lines have, the call to memcpy and the registers it clobbers
 * cost more than the copy itself.  Anything else through memcpy. */
static inline void copy_payload(uint8_t *dst, const uint8_t *src, uint32_t len)
{
    if (__builtin_expect(len - 16u <= 48u, 1)) {
        uint8_t a[16], b[16];
        memcpy(a, src, 16);
        memcpy(b, src + len - 16, 16);
        if (len > 32) {
            uint8_t c[16], e[16];
            memcpy(c, src + 16, 16);
            memcpy(e, src + len - 32, 16);
            memcpy(dst + 16, c, 16);
            memcpy(dst + len - 32, e, 16);
        }
        memcpy(dst, a, 16);
        memcpy(dst + len - 16, b, 16);
    } else if (__builtin_expect(len - 65u <= 63u, 1)) {
        /* 65..128 bytes: the first and the last 64, overlapping inside the
         * record (the same source bytes twice); fixed-size copies the
         * compiler does in registers.  The caller's buffer and the ring never
         * overlap, so no temporaries (gcc keeps 64-byte ones on the stack). */
        memcpy(dst, src, 64);
        memcpy(dst + len - 64, src + len - 64, 64);
    } else if (len) {
        memcpy(dst, src, len);
    }
}

/* Header and payload of a record at p (P2: plain stores, published by P3). */
static inline void write_at(struct tls_ring *t, uint8_t *p, const void *buf, uint32_t len,
                            uint32_t flags, uint64_t ts)
{
    struct fips_layout_record *h = (void *)p;
    SYNC(p, FIPS_REC_HDR_SIZE + (buf ? len : 0), FX_STORE); /* P2: plain, published by P3 */
    h->len_flags = len | (flags << 24);
    h->lost = t->pending_lost;
    h->seq = t->committed;
    h->ts_ns = ts;
    if (buf) copy_payload(p + FIPS_REC_HDR_SIZE, buf, len);
    t->pending_lost = 0;
    t->committed++;
    t->bytes += len;
}

static inline void write_rec(struct tls_ring *t, uint64_t start, const void *buf, uint32_t len,
                             uint32_t flags, uint64_t ts)
{
    write_at(t, t->data + (start & t->mask), buf, len, flags, ts);
}

/* High water: the fill against the slowest ACTIVE consumer now (statistics:
 * relaxed loads).  Not against `limit`, which is the position at the last
 * refresh and, on a ring that never looked full, the floor from long ago.
 * Out of line: publish() calls it every 64th commit (about two
 * instructions a record), every refresh of a full ring samples it too. */
static __attribute__((noinline)) void sample_high_water(struct tls_ring *t, uint64_t new_head)
{
    struct fips_layout_ring *ctl = t->ctl;
    fips_domain *d = t->d;
    uint64_t base = new_head;
    int any = 0;
    for (uint32_t c = 0; c < d->max_consumers; c++) {
        if (STAT_LD32(&d->cons[c].state) != FIPS_CONS_ACTIVE) continue;
        uint64_t rel = STAT_LD(&d->pos[(size_t)c * d->max_rings + t->idx].released);
        if (rel < t->limit) rel = t->limit;
        if (rel < base) base = rel;
        any = 1;
    }
    if (!any) base = t->floor; /* records are kept for the first consumer */
    uint64_t used = new_head - base;
    if (used > t->cap) used = t->cap;
    if (used > STAT_LD(&ctl->high_water_bytes)) STAT_ST(&ctl->high_water_bytes, used);
}

static inline void publish(struct tls_ring *t, uint64_t new_head, uint64_t ts)
{
    struct fips_layout_ring *ctl = t->ctl;
    if (__builtin_expect((t->committed & 63u) == 0, 0)) sample_high_water(t, new_head);
    /* records_committed: read by a joiner as the seq at an empty floor
     * (read_floor, checked against reserved); the others are statistics. */
    ST(&ctl->records_committed, t->committed, relaxed);
    STAT_ST(&ctl->bytes_committed, t->bytes);
    STAT_ST(&ctl->last_commit_ns, ts);
    t->head = new_head;
    /* P3: RELEASE, pairs with C1 (consumer/monitor acquire of head): the
     * record bytes and counters above are visible to whoever sees new_head. */
    ST(&ctl->head, new_head, release);
}

/* fips_log once the re-entry guard is set: any position, the wrap and the
 * full ring. */
static __attribute__((noinline)) int log_entered(struct tls_ring *t, const void *buf, uint32_t len)
{
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (__builtin_expect(start == UINT64_MAX, 0)) {
        count_drop(t, len);
        leave(t);
        return -FIPS_EFULL;
    }
    uint64_t ts = rec_time(t);
    write_rec(t, start, buf, len, 0, ts);
    publish(t, start + need, ts);
    leave(t);
    return 0;
}

/* fips_log for a record that wraps or meets a ring that looks full: a ring
 * that stayed full since the last look drops here, as reserve_full() would
 * (the same two loads, the same counts), without the general path's second
 * pass over the claim; anything else goes there.  Under attack this is what
 * most calls do. */
static __attribute__((noinline)) int log_full(struct tls_ring *t, const void *buf, uint32_t len)
{
    uint64_t head = t->head, need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    uint64_t to_end = t->cap - (head & t->mask);
    uint64_t end = (to_end < need ? head + to_end : head) + need; /* as reserve() places it */
    if (end - t->limit <= t->cap || !still_full(t, end)) return log_entered(t, buf, len);
    t->full_events++; /* one call, one full event */
    STAT_ST(&t->ctl->full_events, t->full_events);
    count_drop(t, len);
    leave(t);
    return -FIPS_EFULL;
}

/* fips_log's general path: every check, in the order fips.h documents, and
 * a thread's rings in other domains. */
static __attribute__((noinline, cold)) int log_general(fips_domain *d, const void *buf, uint32_t len)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 1);
    if (!t) return err;
    if (len > d->max_record) return -FIPS_ETOOBIG;
    if (domain_hit(d)) return -FIPS_ETRUNC;
    if (!enter(t)) return nested_drop(t, len);
    return log_entered(t, buf, len);
}

/* The hot path: this thread's first ring is d's, the record fits, the
 * mapping is whole, no log call is in progress on this thread, and the
 * record neither wraps nor meets a full ring.  Anything else goes to
 * log_general (before the guard is set) or log_entered (after), which do
 * the same with every case.  Only thread-local values are live here: the
 * domain's constants come from the tls_ring. */
int fips_log(fips_domain *d, const void *buf, uint32_t len)
{
    struct tls_ring *t = &fips_tls.r[0];
    /* t is opaque from here: without this gcc recomputes &fips_tls (a call
     * to __tls_get_addr in a shared library) at each use after a fence
     * instead of keeping t in a register (three calls a record, now one).
     * Not the initial-exec TLS model, which would save that one: it puts the
     * whole TLS block of the library in static TLS, and libfips_syslog.so
     * then fails to dlopen ("cannot allocate memory in static TLS block"). */
    __asm__("" : "+r"(t));
    if (__builtin_expect(t->d != d, 0) || __builtin_expect(len > t->max_record, 0) ||
        __builtin_expect(t->busy, 0) ||
        /* B1: ACQUIRE, pairs with the guard handler's RELEASE of hit */
        __builtin_expect(atomic_load_explicit(t->hitp, memory_order_acquire), 0))
        return log_general(d, buf, len);
    t->busy = 1; /* enter() */
    atomic_signal_fence(memory_order_seq_cst);
    uint64_t head = t->head;
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    uint64_t end = head + need;
    uint64_t off = head & t->mask;
    if (__builtin_expect(t->cap - off < need, 0) || __builtin_expect(end - t->limit > t->cap, 0))
        return log_full(t, buf, len); /* wraps, or the ring looks full */
#if defined(__x86_64__) && !defined(FIPS_EXPLORE)
    /* rec_time()'s fast case inline; an anchor due goes to log_entered too,
     * so that no call is left in the middle of this path (each one would
     * keep registers saved on every record). */
    uint64_t dt = __rdtsc() - t->tsc0;
    if (__builtin_expect(t->mult == 0 || dt >= TSC_REANCHOR, 0)) return log_entered(t, buf, len);
    uint64_t ts = t->ns0 + (uint64_t)(((unsigned __int128)dt * t->mult) >> 32);
    if (ts < t->last_ts) ts = t->last_ts;
    t->last_ts = ts;
#else
    uint64_t ts = rec_time(t);
#endif
    struct fips_layout_ring *ctl = t->ctl;
    /* P1, as in reserve(): pairs with T2 and E2. */
    ST(&ctl->reserved, end, release); /* RELEASE: see claimed_end (a plain store on x86-64) */
    atomic_thread_fence(memory_order_release);
    write_at(t, t->data + off, buf, len, 0, ts);
    /* publish(), with the high-water sample after P3 (a statistic: the
     * record counted in it is published a moment earlier, no harm). */
    ST(&ctl->records_committed, t->committed, relaxed); /* read_floor: see publish() */
    STAT_ST(&ctl->bytes_committed, t->bytes);
    STAT_ST(&ctl->last_commit_ns, ts);
    t->head = end;
    /* P3: RELEASE, pairs with C1 (consumer/monitor acquire of head). */
    ST(&ctl->head, end, release);
    if (__builtin_expect((t->committed & 63u) == 0, 0)) sample_high_water(t, end);
    leave(t);
    return 0;
}

int fips_log_trunc(fips_domain *d, const void *buf, size_t len, uint64_t ts)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 1);
    if (!t) return err;
    uint32_t flags = 0, l = (uint32_t)len;
    if (len > d->max_record) {
        l = d->max_record;
        flags = FIPS_REC_TRUNC;
    }
    if (domain_hit(d)) return -FIPS_ETRUNC;
    if (!enter(t)) return nested_drop(t, l);
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(l);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (start == UINT64_MAX) {
        count_drop(t, l);
        leave(t);
        return -FIPS_EFULL;
    }
    if (!ts) ts = rec_time(t);
    if (flags) {
        t->truncated++;
        STAT_ST(&t->ctl->records_truncated, t->truncated);
    }
    write_rec(t, start, buf, l, flags, ts);
    publish(t, start + need, ts);
    leave(t);
    return flags ? 1 : 0;
}

int fips_log_batch(fips_domain *d, const void *const *bufs, const uint32_t *lens, uint32_t n)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, n);
    if (!t) return err;
    if (domain_hit(d)) return -FIPS_ETRUNC;
    if (!enter(t)) {
        for (uint32_t i = 0; i < n; i++) nested_drop(t, lens[i]);
        return -FIPS_EREENTER;
    }
    uint64_t ts = rec_time(t);
    uint64_t head = t->head;
    int fullev = 0, logged = 0;
    /* The leading records that fit before the wrap and below the limit: one
     * claim for all of them, as fips_log's hot path makes for one (P1 for
     * the whole span, then the records, then one P3 in publish()), instead
     * of a reserve() each.  The rest, if any, one at a time below. */
    uint32_t i = 0;
    {
        const uint64_t room = t->cap - (head & t->mask);
        /* as fips_log's `end - limit > cap`: a limit past head leaves no room */
        const uint64_t used = head - t->limit;
        const uint64_t below = used <= t->cap ? t->cap - used : 0;
        const uint64_t span_max = room < below ? room : below;
        uint64_t span = 0;
        while (i < n && lens[i] <= d->max_record) {
            uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(lens[i]);
            if (need > span_max - span) break;
            span += need;
            i++;
        }
        if (i) {
            /* P1, as in reserve(): pairs with T2 and E2. */
            ST(&t->ctl->reserved, head + span, release); /* RELEASE: see claimed_end */
            atomic_thread_fence(memory_order_release);
            uint8_t *p = t->data + (head & t->mask);
            for (uint32_t j = 0; j < i; j++) {
                write_at(t, p, bufs[j], lens[j], 0, ts);
                p += FIPS_REC_HDR_SIZE + ALIGN8(lens[j]);
            }
            head += span;
            logged = (int)i;
        }
    }
    for (; i < n; i++) {
        uint32_t len = lens[i];
        if (len > d->max_record) { count_drop(t, len); continue; }
        uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
        /* reserve() reads t->head via refresh_floor for the fill; keep it
         * at the committed head, the local cursor is `head`. */
        uint64_t start = reserve(t, head, need, &fullev);
        if (start == UINT64_MAX) { count_drop(t, len); continue; }
        write_rec(t, start, bufs[i], len, 0, ts);
        head = start + need;
        logged++;
    }
    if (logged) publish(t, head, ts);
    leave(t);
    return logged;
}

int fips_claim(fips_domain *d, uint32_t len, fips_slot *c)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 1);
    if (!t) return err;
    if (len > d->max_record) return -FIPS_ETOOBIG;
    if (domain_hit(d)) return -FIPS_ETRUNC;
    if (!enter(t)) return nested_drop(t, len);
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (start == UINT64_MAX) {
        count_drop(t, len);
        leave(t);
        return -FIPS_EFULL;
    }
    c->data = t->data + (start & t->mask) + FIPS_REC_HDR_SIZE;
    c->len = len;
    c->ring = t->idx;
    c->pos = start;
    c->next = start + need;
    return 0;
}

void fips_commit(fips_domain *d, fips_slot *c, uint32_t len, uint32_t flags, uint64_t ts)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 0);
    if (!t || t->idx != c->ring) return;
    if (len > c->len) len = c->len;
    if (!ts) ts = rec_time(t);
    flags &= FIPS_REC_TRUNC | FIPS_REC_USER_MASK;
    /* The payload is already in place.  A record that shrank gives the rest
     * of its claim back: nothing was reserved after it, so head simply stops
     * at its real end. */
    write_rec(t, c->pos, NULL, len, flags, ts);
    if (flags & FIPS_REC_TRUNC) {
        t->truncated++;
        STAT_ST(&t->ctl->records_truncated, t->truncated);
    }
    uint64_t end = c->pos + FIPS_REC_HDR_SIZE + ALIGN8(len);
    /* A shrinking commit gives the rest of its claim back; claimed_max keeps
     * how far the claim went (the bytes the caller wrote there rewrote what a
     * lap earlier was in the ring). */
    if (end != c->next) lower_reserved(t->ctl, c->next, end); /* P1' */
    publish(t, end, ts);
    leave(t); /* entered by fips_claim */
}

int fips_producer_ring(fips_domain *d)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 0);
    return t ? (int)t->idx : err;
}

void fips_producer_close(fips_domain *d)
{
    /* The guard stays up from the close to the end of the move: between
     * them slot 0 is free, and a handler that logged to a domain with no
     * ring here would attach one into it, which the move then overwrites
     * (ACTIVE for ever: repro/signal_step.c close). */
    sig_atomic_t was0 = fips_tls.attaching;
    fips_tls.attaching = 1;
    atomic_signal_fence(memory_order_seq_cst);
    for (int i = 0; i < TLS_SLOTS; i++)
        if (fips_tls.r[i].d == d) {
            ring_close_now(&fips_tls.r[i]);
            /* keep slot 0 the fast one */
            if (i == 0) {
                for (int j = 1; j < TLS_SLOTS; j++)
                    if (fips_tls.r[j].d) {
                        /* d moves last (a handler logging to it meanwhile
                         * finds no ring and counts itself, see ring_close_now) */
                        sig_atomic_t was = fips_tls.attaching;
                        fips_tls.attaching = 1;
                        atomic_signal_fence(memory_order_seq_cst);
                        fips_domain *dj = fips_tls.r[j].d;
                        fips_tls.r[j].d = NULL;
                        atomic_signal_fence(memory_order_seq_cst);
                        fips_tls.r[0] = fips_tls.r[j];
                        memset(&fips_tls.r[j], 0, sizeof fips_tls.r[j]);
                        atomic_signal_fence(memory_order_seq_cst);
                        fips_tls.r[0].d = dj;
                        atomic_signal_fence(memory_order_seq_cst);
                        fips_tls.attaching = was;
                        break;
                    }
            }
            break;
        }
    atomic_signal_fence(memory_order_seq_cst);
    fips_tls.attaching = was0;
}

void fips_drop(fips_domain *d, uint32_t len)
{
    if (fips_tls.attaching) { count_no_ring(d, 1); return; }
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 1);
    if (!t) return; /* counted where it failed */
    if (!enter(t)) { nested_drop(t, len); return; }
    count_drop(t, len);
    leave(t);
}

void fips_producer_set_name(fips_domain *d, const char *name)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err, 0);
    if (!t) return;
    char nm[FIPS_THREAD_NAME_MAX] = {0};
    snprintf(nm, sizeof nm, "%s", name ? name : "");
    memcpy(t->ctl->thread_name, nm, sizeof nm);
}

/* ---- consumer -------------------------------------------------------------------- */
struct relq_entry { uint64_t start, end, next_seq, count, lost; };

struct cring {                    /* per-ring state of one consumer, local */
    pthread_mutex_t claim_lock;   /* serialises batch claims on this ring */
    uint64_t claim;               /* next position to hand out */
    uint64_t head_seen;           /* the ring's head at our last C1 (under claim_lock) */
    pthread_mutex_t qlock;        /* out-of-order release queue */
    atomic_uint_fast32_t qcount;
    uint32_t qlen, qcap;
    struct relq_entry *q;
};

struct fips_consumer {
    fips_domain *d;
    uint32_t idx, gen;
    struct fips_layout_consumer *e;
    struct cring *cr;
    atomic_uint rr;               /* round-robin ring cursor */
    atomic_uint scan;             /* rings [0, scan) have been used */
    _Atomic uint64_t last_hb;
};

static struct fips_layout_pos *posof(fips_domain *d, uint32_t c, uint32_t r)
{
    return &d->pos[(size_t)c * d->max_rings + r];
}

static void racy_copy(void *dst, const void *src, size_t n);

/* Where a joining consumer starts in ring r (floor_next) and the seq of the
 * record there.  Every byte at or above floor_next is intact (the producer
 * writes only below limit + cap <= floor_next + cap), so a header read
 * between two equal loads of it is the one the producer wrote there: a
 * record's or a PAD's (a PAD carries the seq of the record after it).  With
 * no record there yet, the seq is the committed count, exact while no claim
 * is in flight (reserved == head before and after it).  Retries while
 * floor_next moves or a claim is in flight; -FIPS_ECORRUPT if it never
 * settles (a hostile writer: no position read then is known to be intact, so
 * the join fails rather than start a consumer on bytes that may be rewritten). */
static int read_floor(fips_domain *d, uint32_t r, uint64_t *floor, uint64_t *seq)
{
    struct fips_layout_ring *ctl = &d->rings[r];
    const uint8_t *base = d->data + (size_t)r * d->cap;
    for (int i = 0; i < TRIES_FLOOR; i++) {
        if (i) backoff(i);
        /* J2 (J0 before J1): SEQ_CST, pairs with P5a. */
        uint64_t f1 = LD(&ctl->floor_next, seq_cst);
        uint64_t head = LD(&ctl->head, acquire); /* C1: pairs with P3 */
        if (f1 > head || head - f1 > d->cap || (f1 & 7u)) continue; /* moving, or hostile */
        uint64_t p = f1, off = p & d->mask, s;
        if (d->cap - off < FIPS_REC_HDR_SIZE) { p += d->cap - off; off = 0; }
        if (p < head) {
            struct fips_layout_record h;
            racy_copy(&h, base + off, sizeof h);
            s = h.seq;
        } else {
            /* T1: ACQUIRE, pairs with P1: no claim in flight at head. */
            if (LD(&ctl->reserved, acquire) != head) continue;
            s = LD(&ctl->records_committed, relaxed);
            /* T2: ACQUIRE fence then reserved, pairs with P1's release fence:
             * had the committed count we read been a new record's, its claim
             * would show here. */
            atomic_thread_fence(memory_order_acquire);
            if (LD(&ctl->reserved, relaxed) != head) continue;
        }
        atomic_thread_fence(memory_order_acquire); /* T2: the header copy above */
        if (LD(&ctl->floor_next, seq_cst) == f1) { *floor = f1; *seq = s; return 0; }
    }
    return -FIPS_ECORRUPT;
}

/* Elect this handle the one that takes entry i over (resume or rejoin it, or
 * reuse it for another name): no live handle may still move its positions,
 * and of several takers only one may win.  Its owner is this process (same
 * pid in the same pid namespace): K1b, a test-and-set of the entry's bit in
 * this domain handle's open set elects one (a bit already set is a live
 * handle).  Another process: it must be dead, and K1a, a CAS of the entry's
 * pid from the dead owner's to ours, elects one taker across processes.
 * Without the election two resumers both passed the check and both resumed:
 * one's release then moved the other's `released`, whose later releases were
 * queued for ever while its heartbeat stayed fresh (the producer wedged).  On
 * success the open bit is set; unelect() clears it if the takeover fails. */
static int elect(fips_domain *d, struct fips_layout_consumer *e, uint32_t i, uint32_t me)
{
    uint64_t bit = 1ull << (i & 63);
    uint32_t pid = LD32(&e->pid, relaxed); /* ordered by K0 */
    uint64_t pidns = LD(&e->pidns, relaxed);
    if (pid != me || pidns != my_pidns()) {
        if (pid_alive(pid, pidns)) return 0;
        uint32_t exp = pid;
        /* K1a: SEQ_CST CAS, elects one taker of a dead owner's entry. */
        if (!CAS32(&e->pid, &exp, me)) return 0;
        ST(&e->pidns, my_pidns(), relaxed);
    }
    /* K1b: SEQ_CST test-and-set: a live handle of ours has the bit. */
    SYNC(&d->open_consumers, sizeof d->open_consumers, FX_RMW);
    return !(atomic_fetch_or(&d->open_consumers, bit) & bit);
}

static void unelect(fips_domain *d, uint32_t i)
{
    SYNC(&d->open_consumers, sizeof d->open_consumers, FX_RMW);
    atomic_fetch_and(&d->open_consumers, ~(1ull << (i & 63)));
}

int fips_consumer_open(fips_consumer **out, fips_domain *d, const char *name)
{
    *out = NULL;
    if (!valid_name(name)) return -EINVAL;
    fips_consumer *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->cr = calloc(d->max_rings, sizeof *c->cr);
    if (!c->cr) { free(c); return -ENOMEM; }
    c->d = d;
    uint32_t me = (uint32_t)getpid();
    int found = -1, resumed = 0, rejoin = 0, rc = 0;
    /* 1. An entry of this name: ACTIVE (its process restarted: resume at its
     *    positions) or EVICTED (rejoin: continue after its positions and
     *    count what was overwritten meanwhile as lost). */
    for (uint32_t i = 0; i < d->max_consumers && found < 0; i++) {
        struct fips_layout_consumer *e = &d->cons[i];
        /* K0: ACQUIRE, pairs with J1/K1/K2 of the entry's last owner: its
         * name, pid and positions are visible. */
        uint32_t st = LD32(&e->state, acquire);
        if (st != FIPS_CONS_ACTIVE && st != FIPS_CONS_EVICTED) continue;
        SYNC(e->name, FIPS_NAME_MAX, FX_LOAD);
        if (strncmp(e->name, name, FIPS_NAME_MAX) != 0) continue;
        if (!elect(d, e, i, me)) { rc = -FIPS_EBUSY; break; }
        if (st == FIPS_CONS_ACTIVE) {
            /* K1: SEQ_CST CAS of the generation: a handle of the previous
             * owner sees the entry taken (consumer_valid, E2). */
            uint32_t g = LD32(&e->generation, relaxed);
            if (!CAS32(&e->generation, &g, g + 1)) { unelect(d, i); rc = -FIPS_EBUSY; break; }
            ST32(&e->pid, me, relaxed);
            ST(&e->pidns, my_pidns(), relaxed);
            ST(&e->heartbeat_mono_ns, fips_mono_ns(), relaxed);
            STAT_ST32(&e->resumes, STAT_LD32(&e->resumes) + 1);
            c->gen = g + 1;
            found = (int)i;
            resumed = 1;
        } else {
            uint32_t exp = FIPS_CONS_EVICTED;
            /* K2: SEQ_CST CAS elects one joiner of an entry. */
            if (CAS32(&e->state, &exp, FIPS_CONS_JOINING)) { found = (int)i; rejoin = 1; }
            else unelect(d, i);
        }
    }
    /* 2. else a free or closed slot; 3. else an evicted one whose owner is
     * gone (elect): a crashed consumer that never comes back must not
     * hold a slot forever.  (An entry left JOINING by a process killed during
     * the join loop is not reclaimed: telling a dead joiner from a slow one
     * would need the state and the pid in one CAS.) */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; !rc && i < d->max_consumers && found < 0; i++) {
            struct fips_layout_consumer *e = &d->cons[i];
            uint32_t st = LD32(&e->state, acquire); /* K0 */
            if (pass == 0 ? (st != FIPS_CONS_FREE && st != FIPS_CONS_CLOSED) : st != FIPS_CONS_EVICTED)
                continue;
            if (pass == 1 && !elect(d, e, i, me)) continue;
            uint32_t exp = st;
            if (CAS32(&e->state, &exp, FIPS_CONS_JOINING)) found = (int)i; /* K2 */
            else if (pass == 1) unelect(d, i);
        }
    if (!rc && found < 0) rc = -FIPS_ENOCONSUMER;
    if (rc) { free(c->cr); free(c); return rc; }
    c->idx = (uint32_t)found;
    c->e = &d->cons[found];
    struct fips_layout_consumer *e = c->e;
    if (!resumed) {
        /* JOINING is invisible to producers: set everything, then go ACTIVE. */
        c->gen = LD32(&e->generation, relaxed) + 1;
        ST32(&e->generation, c->gen, relaxed);
        if (!rejoin) {
            char nm[FIPS_NAME_MAX] = {0};
            snprintf(nm, sizeof nm, "%s", name);
            SYNC(e->name, FIPS_NAME_MAX, FX_STORE);
            memcpy(e->name, nm, sizeof nm);
            STAT_ST(&e->registered_ns, fips_now_ns());
            STAT_ST(&e->records_released, 0);
            STAT_ST(&e->batches_released, 0);
        }
        ST32(&e->pid, me, relaxed);
        ST(&e->pidns, my_pidns(), relaxed);
        STAT_ST32(&e->readers, 0);
        STAT_ST(&e->evicted_ns, 0);
        ST(&e->heartbeat_mono_ns, fips_mono_ns(), relaxed);
        for (uint32_t r = 0; r < d->max_rings && !rc; r++) {
            uint64_t f, s;
            if ((rc = read_floor(d, r, &f, &s)) != 0) break;
            struct fips_layout_pos *p = posof(d, c->idx, r);
            if (rejoin) {
                /* Continue where we stopped if those records are still
                 * there (at or above the floor: intact); else from the floor,
                 * counting the records overwritten meanwhile as lost.  Our
                 * own fields: no other writer while we are JOINING. */
                uint64_t old = LD(&p->released, relaxed), old_seq = LD(&p->released_seq, relaxed);
                uint64_t head = LD(&d->rings[r].head, acquire); /* C1 */
                if (old >= f && old <= head) continue;
                if (s > old_seq && old <= head) STAT_ADD(&p->lost_seen, s - old_seq);
            } else {
                STAT_ST(&p->records_released, 0);
                STAT_ST(&p->lost_seen, 0);
            }
            ST(&p->released_seq, s, relaxed);
            ST(&p->released, f, relaxed);
        }
        if (rc) {
            /* A floor that never settled (a hostile writer).  Still JOINING,
             * invisible to producers: give the entry back as it was found
             * (a rejoiner's positions moved only with their losses counted). */
            ST32(&e->state, rejoin ? FIPS_CONS_EVICTED : FIPS_CONS_CLOSED, seq_cst); /* X1 */
            unelect(d, c->idx);
            free(c->cr);
            free(c);
            return rc;
        }
        /* J1: SEQ_CST, pairs with P6/P6'; positions above are visible to a
         * producer that sees ACTIVE. */
        ST32(&e->state, FIPS_CONS_ACTIVE, seq_cst);
        /* J2: a producer that did not see us at its last re-scan may have
         * moved its floor up; move up with it.  For a new consumer those
         * records were never its own (it joins at the floor it finds here);
         * for a rejoin they are lost and counted.  Again until the floor is
         * not above us: a producer that saw us only at its re-scan (F1 case
         * b) may have stored a floor we had not read.  Once the producer
         * counts us the floor cannot pass us, so this ends, and from then on
         * floor <= released for as long as we are ACTIVE. */
        for (uint32_t r = 0; r < d->max_rings && !rc; r++) {
            struct fips_layout_pos *p = posof(d, c->idx, r);
            int moves;
            for (moves = 0; moves < TRIES_J2; moves++) {
                uint64_t f, s;
                if ((rc = read_floor(d, r, &f, &s)) != 0) break;
                if (f <= LD(&p->released, relaxed)) break;
                uint64_t old_seq = LD(&p->released_seq, relaxed);
                if (rejoin && s > old_seq) STAT_ADD(&p->lost_seen, s - old_seq);
                ST(&p->released_seq, s, relaxed);
                /* J2: RELEASE, pairs with P4. */
                ST(&p->released, f, release);
            }
            if (moves == TRIES_J2) rc = -FIPS_ECORRUPT;
        }
        if (rc) {
            /* The floor kept passing us (a hostile writer): a producer may
             * count us where we are not, so we must not read.  Leave as an
             * evicted consumer would (a rejoin by name continues exactly). */
            uint32_t exp = FIPS_CONS_ACTIVE;
            CAS32(&e->state, &exp, rejoin ? FIPS_CONS_EVICTED : FIPS_CONS_CLOSED); /* X1 */
            unelect(d, c->idx);
            free(c->cr);
            free(c);
            return rc;
        }
    }
    for (uint32_t r = 0; r < d->max_rings; r++) {
        pthread_mutex_init(&c->cr[r].claim_lock, NULL);
        pthread_mutex_init(&c->cr[r].qlock, NULL);
        c->cr[r].claim = LD(&posof(d, c->idx, r)->released, relaxed); /* our own */
    }
    atomic_init(&c->last_hb, fips_mono_ns());
    SYNC(&d->open_consumers, sizeof d->open_consumers, FX_RMW);
    atomic_fetch_or(&d->open_consumers, 1ull << (c->idx & 63));
    SYNC(&d->refs, sizeof d->refs, FX_RMW);
    atomic_fetch_add(&d->refs, 1);
    *out = c;
    return 0;
}

static void consumer_free(fips_consumer *c)
{
    SYNC(&c->d->open_consumers, sizeof c->d->open_consumers, FX_RMW);
    atomic_fetch_and(&c->d->open_consumers, ~(1ull << (c->idx & 63)));
    for (uint32_t r = 0; r < c->d->max_rings; r++) {
        pthread_mutex_destroy(&c->cr[r].claim_lock);
        pthread_mutex_destroy(&c->cr[r].qlock);
        free(c->cr[r].q);
    }
    domain_unref(c->d);
    free(c->cr);
    free(c);
}

int fips_consumer_close(fips_consumer *c)
{
    if (!c) return -EINVAL;
    uint32_t exp = FIPS_CONS_ACTIVE;
    /* X1: SEQ_CST CAS, seen by the producer's next P6.  The generation check
     * and the CAS are two steps, but nobody can take the entry over while
     * this handle is open (elect: our open bit is set), so the entry is
     * still ours. */
    if (LD32(&c->e->generation, relaxed) == c->gen)
        CAS32(&c->e->state, &exp, FIPS_CONS_CLOSED);
    consumer_free(c);
    return 0;
}

int fips_consumer_detach(fips_consumer *c)
{
    if (!c) return -EINVAL;
    consumer_free(c);
    return 0;
}

int fips_consumer_index(const fips_consumer *c) { return (int)c->idx; }

int fips_consumer_evict(fips_domain *d, uint32_t index, uint32_t generation)
{
    if (!d || index >= d->max_consumers) return -EINVAL;
    if (!d->writable) return -EACCES;
    if (domain_hit(d)) return -FIPS_ETRUNC;
    struct fips_layout_consumer *ce = &d->cons[index];
    /* G1, as a producer's eviction: state and generation as one word
     * (SEQ_CST), the generation the operator saw. */
    uint64_t sg = LD(&ce->state, seq_cst);
    if ((uint32_t)sg != FIPS_CONS_ACTIVE || (uint32_t)(sg >> 32) != generation) return -ESRCH;
    uint64_t exp = sg;
    /* E1 (an operator's): SEQ_CST CAS of (state, generation) -> EVICTED,
     * the same step as a producer's.  It pairs with P6 of each producer's
     * next refresh (SEQ_CST load: that producer sees EVICTED and stops
     * counting the consumer) and, through that producer's P1 release fence
     * before it rewrites any byte the consumer held, with E2 (the evicted
     * consumer's acquire fence and state load at release): a holder of a
     * rewritten batch is told ETORN.  Explorer scenarios operator-evict and
     * operator-evict-stale. */
    if (!CAS64(&ce->state, &exp, (sg & ~0xffffffffull) | FIPS_CONS_EVICTED)) return -ESRCH;
    STAT_ST(&ce->evicted_ns, fips_now_ns());
    STAT_ST32(&ce->evicted_by_ring, FIPS_EVICTED_BY_OPERATOR);
    return 0;
}

void fips_consumer_heartbeat(fips_consumer *c)
{
    uint64_t now = fips_mono_ns();
    /* last_hb is a hint shared by the reader threads (which one stores the
     * heartbeat does not matter): not a scheduling point. */
    atomic_store_explicit(&c->last_hb, now, memory_order_relaxed);
    ST(&c->e->heartbeat_mono_ns, now, relaxed); /* H: relaxed, see refresh_floor */
}

static inline void maybe_heartbeat(fips_consumer *c)
{
    uint64_t now = mono_coarse_ns();
    if (now - atomic_load_explicit(&c->last_hb, memory_order_relaxed) > HB_EVERY_NS) {
        atomic_store_explicit(&c->last_hb, now, memory_order_relaxed);
#ifndef FIPS_EXPLORE
        guard_rechain(); /* a handler installed since (faulthandler) must not hide truncations */
#endif
        ST(&c->e->heartbeat_mono_ns, now, relaxed); /* H */
    }
}

static int consumer_valid(fips_consumer *c)
{
    /* M2: ACQUIRE, pairs with E1 (eviction) and K1/K2 (a takeover). */
    if (LD32(&c->e->state, acquire) != FIPS_CONS_ACTIVE ||
        LD32(&c->e->generation, relaxed) != c->gen)
        return -FIPS_EEVICTED;
    return 0;
}

/* Parse records in [from, head) of ring r, up to max; every length comes
 * from shared memory and is bounds-checked. */
static int claim_batch(fips_consumer *c, uint32_t r, uint32_t max, fips_batch *b)
{
    fips_domain *d = c->d;
    struct fips_layout_ring *ctl = &d->rings[r];
    struct cring *cr = &c->cr[r];
    if (TRYLOCK(&cr->claim_lock) != 0) return -FIPS_EAGAIN;
    uint64_t from = cr->claim;
    /* The head we loaded last: the records before it are committed and
     * visible to us (that C1 happened before, in this thread or in another
     * reader thread of this consumer, ordered by claim_lock).  Only when they
     * run out is line 0 of the ring entry, which the producer writes at
     * every commit, read again: a consumer handed a part of what is there
     * (max) does not pull the line from the producer once per batch. */
    uint64_t head = cr->head_seen;
    if (head <= from) {
        head = LD(&ctl->head, acquire); /* C1: pairs with P3 */
        cr->head_seen = head;
        if (head <= from) { UNLOCK(&cr->claim_lock); return -FIPS_EAGAIN; }
    }
    /* every length and position from shared memory is bounded; an unaligned
     * position (a hostile writer's) is no record boundary */
    if (head - from > d->cap || (from & 7u)) {
        cr->head_seen = 0; /* load it again next time */
        UNLOCK(&cr->claim_lock);
        return -FIPS_ECORRUPT;
    }
    const uint8_t *base = d->data + (size_t)r * d->cap;
    uint64_t p = from;
    uint32_t n = 0;
    uint64_t first_seq = 0, next_seq = 0, lost = 0;
    int rc = 0;
    while (p < head && n < max) {
        uint64_t off = p & d->mask, to_end = d->cap - off;
        if (to_end < FIPS_REC_HDR_SIZE) { p += to_end; continue; }
        if (head - p < FIPS_REC_HDR_SIZE) { rc = -FIPS_ECORRUPT; break; }
        const struct fips_layout_record *h = (const void *)(base + off);
        SYNC(h, FIPS_REC_HDR_SIZE, FX_LOAD); /* C2: ordered by C1 */
        uint32_t lf = h->len_flags, len = lf & FIPS_REC_LEN_MASK, fl = lf >> 24;
        uint64_t stride = rec_stride(lf);
        if (fl & FIPS_REC_PAD) {
            if (stride > to_end) { rc = -FIPS_ECORRUPT; break; }
            p += stride;
            continue;
        }
        if (len > d->max_record || stride > to_end || p + stride > head) { rc = -FIPS_ECORRUPT; break; }
        if (n == 0) first_seq = h->seq;
        next_seq = h->seq + 1;
        lost += h->lost;
        n++;
        p += stride;
    }
    if (p > head) p = head;
    if (rc == -FIPS_ECORRUPT) cr->head_seen = 0; /* nothing cached past a bad record */
    if (rc == 0 && n == 0 && p == from) rc = -FIPS_EAGAIN;
    if (rc == 0 || (rc == -FIPS_ECORRUPT && n > 0)) {
        /* A trailing pad with no record is consumed too (n may be 0). */
        cr->claim = p;
        rc = 0;
    }
    UNLOCK(&cr->claim_lock);
    if (rc) return rc;
    b->ring = r;
    b->count = n;
    b->start = from;
    b->end = p;
    b->first_seq = first_seq;
    b->next_seq = n ? next_seq : 0;
    b->lost = lost;
    b->cursor = from;
    b->base = base;
    b->mask = d->mask;
    return 0;
}

static int consumer_read(fips_consumer *c, fips_batch *b, uint32_t max);

int fips_consumer_read(fips_consumer *c, fips_batch *b, uint32_t max)
{
    if (domain_hit(c->d)) return -FIPS_ETRUNC;
    int rc = consumer_read(c, b, max);
    /* truncated while we read: what we parsed were zeros */
    return domain_hit(c->d) ? -FIPS_ETRUNC : rc;
}

static int consumer_read(fips_consumer *c, fips_batch *b, uint32_t max)
{
    int rc = consumer_valid(c);
    if (rc) return rc;
    maybe_heartbeat(c);
    if (fips_tls_reader != c) { /* count reader threads (informational) */
        fips_tls_reader = c;
        atomic_fetch_add_explicit(A32(&c->e->readers), 1, memory_order_relaxed);
    }
    fips_domain *d = c->d;
    if (max == 0) max = 1;
    /* Producers take the lowest free slot, so used rings form a prefix:
     * scan only that prefix, extending it when the next slot comes alive.
     * (rr and scan are hints shared by this consumer's reader threads: any
     * value either holds is one a sequential run could have produced, so they
     * are not scheduling points.) */
    uint32_t scan = atomic_load_explicit(&c->scan, memory_order_relaxed);
    while (scan < d->max_rings && LD32(&d->rings[scan].state, acquire) != FIPS_RING_FREE) /* M1 */
        scan++;
    atomic_store_explicit(&c->scan, scan, memory_order_relaxed);
    if (scan == 0) return -FIPS_EAGAIN;
    uint32_t start = atomic_fetch_add_explicit(&c->rr, 1, memory_order_relaxed);
    int corrupt = 0;
    for (uint32_t k = 0; k < scan; k++) {
        uint32_t r = (start + k) % scan;
        if (LD32(&d->rings[r].state, acquire) == FIPS_RING_FREE) continue; /* M1 */
        rc = claim_batch(c, r, max, b);
        if (rc == 0 && b->count == 0) { /* only a pad: consume it, look again */
            fips_consumer_release(c, b);
            rc = claim_batch(c, r, max, b);
            if (rc == 0 && b->count == 0) { fips_consumer_release(c, b); rc = -FIPS_EAGAIN; }
        }
        if (rc == 0) return 0;
        if (rc == -FIPS_ECORRUPT) corrupt = 1;
    }
    if (corrupt) {
        /* Evicted while parsing: the producer may be rewriting what we
         * parsed, which is no sign of a damaged ring.  E2, as at release. */
        atomic_thread_fence(memory_order_acquire);
        return consumer_valid(c) ? -FIPS_EEVICTED : -FIPS_ECORRUPT;
    }
    return -FIPS_EAGAIN;
}

int fips_batch_next(fips_batch *b, fips_record *rec)
{
    uint64_t cap = b->mask + 1;
    while (b->cursor < b->end) {
        uint64_t off = b->cursor & b->mask, to_end = cap - off;
        if (to_end < FIPS_REC_HDR_SIZE) { b->cursor += to_end; continue; }
        const struct fips_layout_record *h = (const void *)(b->base + off);
        SYNC(h, FIPS_REC_HDR_SIZE, FX_LOAD); /* C2 */
        uint32_t lf = h->len_flags, len = lf & FIPS_REC_LEN_MASK;
        uint64_t stride = rec_stride(lf);
        /* Re-check what fips_consumer_read() checked: the header is in
         * shared memory and a hostile writer may have changed it since. */
        if (stride > to_end || b->cursor + stride > b->end) {
            b->cursor = b->end;
            return 0;
        }
        b->cursor += stride;
        if ((lf >> 24) & FIPS_REC_PAD) continue;
        rec->data = (const uint8_t *)h + FIPS_REC_HDR_SIZE;
        rec->len = len;
        rec->flags = lf >> 24;
        rec->lost = h->lost;
        rec->seq = h->seq;
        rec->ts_ns = h->ts_ns;
        return 1;
    }
    return 0;
}

/* released_seq only grows (CAS max): reader threads release out of order. */
static void advance_seq(struct fips_layout_pos *p, uint64_t next_seq)
{
    uint64_t cur = LD(&p->released_seq, relaxed);
    while (next_seq > cur) {
        SYNC(&p->released_seq, 8, FX_RMW);
        if (atomic_compare_exchange_weak_explicit(A64(&p->released_seq), &cur, next_seq,
                                                  memory_order_relaxed, memory_order_relaxed))
            break;
    }
}

static void account(fips_consumer *c, struct fips_layout_pos *p, uint64_t count,
                    uint64_t next_seq, uint64_t lost)
{
    if (count) {
        advance_seq(p, next_seq);
        STAT_ADD(&p->records_released, count);
        STAT_ADD(&c->e->records_released, count);
    }
    if (lost) STAT_ADD(&p->lost_seen, lost);
    STAT_ADD(&c->e->batches_released, 1);
}

/* Under qlock: apply queued releases that now start at the released position. */
static void drain_queue(fips_consumer *c, struct cring *cr, struct fips_layout_pos *p)
{
    for (;;) {
        uint64_t cur = LD(&p->released, seq_cst); /* R2: the Dekker load */
        uint32_t i;
        for (i = 0; i < cr->qlen; i++)
            if (cr->q[i].start == cur) break;
        if (i == cr->qlen) return;
        struct relq_entry e = cr->q[i];
        cr->q[i] = cr->q[--cr->qlen];
        SYNC(&cr->qcount, sizeof cr->qcount, FX_RMW);
        atomic_fetch_sub(&cr->qcount, 1);
        /* C3: SEQ_CST CAS, pairs with P4.  Only this holder of qlock can
         * match `cur`: an in-order releaser moves released only from the
         * start of its own batch, which is not queued. */
        if (!CAS64(&p->released, &cur, e.end)) {
            cr->q[cr->qlen++] = e; /* cannot happen: ranges are disjoint */
            SYNC(&cr->qcount, sizeof cr->qcount, FX_RMW);
            atomic_fetch_add(&cr->qcount, 1);
            return;
        }
        account(c, p, e.count, e.next_seq, e.lost);
    }
}

int fips_consumer_release(fips_consumer *c, const fips_batch *b)
{
    fips_domain *d = c->d;
    if (b->ring >= d->max_rings) return -EINVAL;
    if (domain_hit(d)) return -FIPS_ETRUNC;
    struct cring *cr = &c->cr[b->ring];
    struct fips_layout_pos *p = posof(d, c->idx, b->ring);
    /* E2: ACQUIRE fence, then our state: pairs with E1 through P1's release
     * fence (a seqlock read, as the tap's T2).  If any byte the caller read
     * from this batch was rewritten by the producer, the producer evicted us
     * (E1) before it claimed that byte (P1), and the loads below see it.
     * The positions are then no longer ours to move (an evicted entry is not
     * ACTIVE; a taken-over one has another generation). */
    atomic_thread_fence(memory_order_acquire);
    if (LD32(&c->e->state, relaxed) != FIPS_CONS_ACTIVE ||
        LD32(&c->e->generation, relaxed) != c->gen) {
        /* A byte at position q is rewritten only by a claim past q + cap, so
         * the batch is intact if the producer never reserved beyond
         * start + cap (the tap's check, T2). */
        if (claimed_end(&d->rings[b->ring]) > b->start + d->cap) return -FIPS_ETORN;
        return -FIPS_EEVICTED;
    }
    maybe_heartbeat(c);
    uint64_t exp = b->start;
    /* R1 / C3: SEQ_CST CAS — release for the producer (P4), and the Dekker
     * partner of the queue count below. */
    if (CAS64(&p->released, &exp, b->end)) {
        account(c, p, b->count, b->next_seq, b->lost);
        SYNC(&cr->qcount, sizeof cr->qcount, FX_LOAD);
        if (atomic_load(&cr->qcount) != 0) { /* R1: SEQ_CST load */
            LOCK(&cr->qlock);
            drain_queue(c, cr, p);
            UNLOCK(&cr->qlock);
        }
        return 0;
    }
    /* Out of order: queue it, then re-check (R2). */
    LOCK(&cr->qlock);
    if (cr->qlen == cr->qcap) {
        uint32_t nc = cr->qcap ? cr->qcap * 2 : 8;
        struct relq_entry *nq = realloc(cr->q, nc * sizeof *nq);
        if (!nq) { UNLOCK(&cr->qlock); return -ENOMEM; }
        cr->q = nq;
        cr->qcap = nc;
    }
    cr->q[cr->qlen++] = (struct relq_entry){b->start, b->end, b->next_seq, b->count, b->lost};
    SYNC(&cr->qcount, sizeof cr->qcount, FX_RMW);
    atomic_fetch_add(&cr->qcount, 1); /* R2: SEQ_CST */
    drain_queue(c, cr, p);
    /* Still queued behind an earlier batch another reader thread holds: 1,
     * not 0.  It takes effect when that batch is released; if the consumer
     * is evicted first it is undone with it (a rejoin counts its records
     * lost or hands them out again), so it is not yet "released". */
    int queued = 0;
    for (uint32_t i = 0; i < cr->qlen; i++)
        if (cr->q[i].start == b->start) queued = 1;
    UNLOCK(&cr->qlock);
    return queued;
}

/* ---- monitor ---------------------------------------------------------------------- */
int fips_monitor_open_path(fips_monitor **out, const char *path, int any_owner, char *eb, size_t el)
{
    *out = NULL;
    fips_monitor *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->d.fd = -1;
    m->d.guard = -1;
    m->d.hitp = &guard_none;
    snprintf(m->d.path, sizeof m->d.path, "%s", path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang us */
    if (fd < 0) {
        int e = errno;
        int rc = seterr(eb, el, -e, path, "%s", e == ELOOP ? "is a symlink (refused)" : strerror(e));
        free(m);
        return rc;
    }
    int rc = map_file(&m->d, fd, 0, any_owner, eb, el);
    if (rc) { close(fd); free(m); return rc; }
    atomic_init(&m->d.refs, 1);
    *out = m;
    return 0;
}

int fips_monitor_open(fips_monitor **out, const char *shm_dir, const char *name, int any_owner,
                      char *eb, size_t el)
{
    char p[PATH_MAX];
    if (!valid_name(name)) {
        *out = NULL;
        return seterr(eb, el, -EINVAL, name, "invalid domain name");
    }
    int rc = path_of(p, sizeof p, shm_dir, name);
    if (rc) { *out = NULL; return seterr(eb, el, rc, name, "path too long"); }
    return fips_monitor_open_path(out, p, any_owner, eb, el);
}

int fips_monitor_close(fips_monitor *m)
{
    if (!m) return -EINVAL;
    EXPLORE_UNMAPPED(m->d.base);
    guard_unregister(m->d.guard);
    munmap(m->d.base, m->d.size);
    if (m->d.fd >= 0) close(m->d.fd);
    free(m);
    return 0;
}

const struct fips_layout_header *fips_monitor_header(const fips_monitor *m) { return &m->d.hcopy; }

const void *fips_monitor_mapping(const fips_monitor *m) { return m->d.base; }

/* One ring of a snapshot: a consistent (floor, positions, head).  T1 as in
 * the tap: floor, then the positions, then head, then floor again; with the
 * floor unchanged, floor <= released <= head for every consumer that has
 * joined (positions only grow and stay at or above the floor) and
 * head - floor <= cap (the producer writes below floor + cap).  A consumer
 * between J1 and J2 (still at a position read before the floor moved) stands
 * at the floor for the producer (refresh_floor, F1) and is reported there. */
/* The seq of the record at position f of ring r (the snapshot's floor), from
 * its header (a PAD carries the seq of the record after it), or with no
 * record there yet the committed count, read while no claim is in flight at
 * head.  -1 if it cannot be read intact (the producer claimed over it, or a
 * claim is in flight).  Not the stored floor_seq: a snapshot between the
 * producer's stores of floor_seq and floor pairs the old floor with the new
 * seq, and no order of the two stores avoids that. */
static int seq_at_floor(fips_domain *d, uint32_t r, uint64_t f, uint64_t head, uint64_t *seq)
{
    const struct fips_layout_ring *ctl = &d->rings[r];
    const uint8_t *base = d->data + (size_t)r * d->cap;
    uint64_t p = f, off = p & d->mask;
    if (d->cap - off < FIPS_REC_HDR_SIZE) { p += d->cap - off; off = 0; }
    if (p < head) {
        struct fips_layout_record h;
        racy_copy(&h, base + off, sizeof h);
        atomic_thread_fence(memory_order_acquire); /* T2: pairs with P1 */
        if (claimed_end(ctl) > p + d->cap) return -1;
        *seq = h.seq;
        return 0;
    }
    /* T1: ACQUIRE, pairs with P1: no claim in flight, and head unchanged
     * (reserved >= head, so a head that moved on leaves reserved != head). */
    if (LD(&ctl->reserved, acquire) != head) return -1;
    uint64_t n = LD(&ctl->records_committed, relaxed);
    atomic_thread_fence(memory_order_acquire); /* T2: pairs with P1's fence */
    if (LD(&ctl->reserved, relaxed) != head) return -1;
    *seq = n;
    return 0;
}

static void snapshot_ring(fips_domain *d, uint32_t r, fips_snapshot *s)
{
    const struct fips_layout_ring *c = &d->rings[r];
    fips_ring_stat *o = &s->rings[r];
    for (int attempt = 0; attempt < 64; attempt++) {
        if (attempt) SPIN();
        o->floor = LD(&c->floor, acquire); /* T1: pairs with P5 */
        o->floor_seq = LD(&c->floor_seq, relaxed);
        if (s->pos)
            for (uint32_t i = 0; i < d->max_consumers; i++) {
                const struct fips_layout_pos *p = &d->pos[(size_t)i * d->max_rings + r];
                fips_pos_stat *q = &s->pos[(size_t)i * d->max_rings + r];
                q->released = LD(&p->released, acquire); /* M3: pairs with C3 and J2 */
                q->released_seq = LD(&p->released_seq, relaxed);
                q->records_released = STAT_LD(&p->records_released);
                q->lost_seen = STAT_LD(&p->lost_seen);
            }
        o->state = LD32(&c->state, acquire); /* M1: pairs with P7 and S2 */
        o->head = LD(&c->head, acquire);     /* C1: pairs with P3 */
        o->reserved = LD(&c->reserved, relaxed);
        o->records_committed = LD(&c->records_committed, relaxed);
        if (LD(&c->floor, acquire) != o->floor) continue; /* T1 */
        uint64_t fs;
        if (o->floor <= o->head && o->head - o->floor <= d->cap && !(o->floor & 7u) &&
            seq_at_floor(d, r, o->floor, o->head, &fs) == 0) {
            o->floor_seq = fs;
            break;
        }
        /* floor_seq read above stays if no attempt can read the header (a
         * producer lapping at the floor the whole time): the producer's own
         * figure, possibly of a floor one step newer */
    }
    o->index = r;
    o->bytes_committed = STAT_LD(&c->bytes_committed);
    o->records_dropped = STAT_LD(&c->records_dropped);
    o->bytes_dropped = STAT_LD(&c->bytes_dropped);
    o->full_events = STAT_LD(&c->full_events);
    o->last_commit_ns = STAT_LD(&c->last_commit_ns);
    o->high_water_bytes = STAT_LD(&c->high_water_bytes);
    o->records_truncated = STAT_LD(&c->records_truncated);
    o->evictions = STAT_LD(&c->evictions);
    o->blocked_ns = STAT_LD(&c->blocked_ns);
    o->created_ns = STAT_LD(&c->created_ns);
    o->closed_ns = STAT_LD(&c->closed_ns);
    o->generation = STAT_LD32(&c->generation);
    o->pid = LD32(&c->pid, relaxed);
    o->tid = STAT_LD32(&c->tid);
    memcpy(o->thread_name, c->thread_name, sizeof o->thread_name);
    o->thread_name[sizeof o->thread_name - 1] = 0;
    if (o->floor > o->head) o->floor = o->head; /* hostile (or a floor that kept moving) */
    if (o->head - o->floor > d->cap) o->floor = o->head - d->cap;
    if (!s->pos || !s->consumers) return;
    for (uint32_t i = 0; i < d->max_consumers; i++) {
        fips_pos_stat *q = &s->pos[(size_t)i * d->max_rings + r];
        if (s->consumers[i].state != FIPS_CONS_ACTIVE) continue;
        if (q->released < o->floor) { /* between J1 and J2 (or hostile) */
            q->released = o->floor;
            q->released_seq = o->floor_seq;
        }
        if (q->released > o->head) q->released = o->head; /* hostile only */
    }
}

int fips_monitor_snapshot(fips_monitor *m, fips_snapshot *s)
{
    fips_domain *d = &m->d;
    if (domain_hit(d)) return -FIPS_ETRUNC;
#ifndef FIPS_EXPLORE
    guard_rechain(); /* a handler installed since (faulthandler) must not hide truncations */
#endif
    s->taken_realtime_ns = fips_now_ns();
    s->taken_mono_ns = fips_mono_ns();
    s->n_rings = d->max_rings;
    s->n_consumers = d->max_consumers;
    for (uint32_t i = 0; i < d->max_consumers && s->consumers; i++) {
        const struct fips_layout_consumer *c = &d->cons[i];
        fips_consumer_stat *o = &s->consumers[i];
        o->index = i;
        /* M2: ACQUIRE, pairs with J1 (the positions of a joined consumer),
         * E1 and X1 (state changes by the producer or the consumer). */
        o->state = LD32(&c->state, acquire);
        o->generation = LD32(&c->generation, relaxed);
        o->pid = LD32(&c->pid, relaxed);
        o->readers = STAT_LD32(&c->readers);
        o->evicted_by_ring = STAT_LD32(&c->evicted_by_ring);
        o->resumes = STAT_LD32(&c->resumes);
        o->heartbeat_mono_ns = LD(&c->heartbeat_mono_ns, relaxed);
        o->registered_ns = STAT_LD(&c->registered_ns);
        o->evicted_ns = STAT_LD(&c->evicted_ns);
        o->records_released = STAT_LD(&c->records_released);
        o->batches_released = STAT_LD(&c->batches_released);
        memcpy(o->name, c->name, sizeof o->name);
        o->name[sizeof o->name - 1] = 0;
    }
    for (uint32_t r = 0; r < d->max_rings && s->rings; r++) snapshot_ring(d, r, s);
    return domain_hit(d) ? -FIPS_ETRUNC : 0; /* truncated under us: zeros were read */
}

/* The header's records_no_ring, live (fips_monitor_header() is the copy made
 * at attach, so its records_no_ring is stale).  Kept out of fips_snapshot so
 * that struct keeps its size (ABI); a monitor calls it next to
 * fips_monitor_snapshot().  Same guard as the snapshot: a domain truncated
 * before or during the read gives -FIPS_ETRUNC, never a value read from the
 * zero pages.  STAT_LD, relaxed: a statistic (any thread adds to it with a relaxed
 * fetch_add in count_no_ring; nothing is published with it, no barrier row). */
int fips_monitor_no_ring(fips_monitor *m, uint64_t *out)
{
    fips_domain *d = &m->d;
    if (domain_hit(d)) return -FIPS_ETRUNC;
#ifndef FIPS_EXPLORE
    guard_rechain(); /* as in fips_monitor_snapshot */
#endif
    uint64_t v = STAT_LD(&d->hdr->records_no_ring);
    if (domain_hit(d)) return -FIPS_ETRUNC; /* truncated under us: a zero was read */
    *out = v;
    return 0;
}

/* The copy races with the producer by design (a seqlock read): bytes it
 * copies may be overwritten meanwhile, which the `reserved` re-check after
 * the acquire fence (T2) detects.  Excluded from TSan for that reason. */
__attribute__((no_sanitize("thread")))
static void racy_copy(void *dst, const void *src, size_t n)
{
    SYNC(src, n, FX_LOAD);
    const volatile uint8_t *s = src;
    uint8_t *o = dst;
    for (size_t i = 0; i < n; i++) o[i] = s[i];
}

int fips_monitor_tap(fips_monitor *m, uint32_t ring, uint32_t max, void *buf, size_t buflen,
                     size_t *used, uint32_t *lapped)
{
    fips_domain *d = &m->d;
    *used = 0;
    *lapped = 0;
    if (ring >= d->max_rings) return -EINVAL;
    if (max == 0) return 0;
    const struct fips_layout_ring *ctl = &d->rings[ring];
    const uint8_t *base = d->data + (size_t)ring * d->cap;
    /* Walk forward from the floor (a record boundary the producer never
     * writes below) to head, keeping the offsets of the last `max` records.
     * The walk follows lengths it reads, so one torn header would send the
     * rest astray: it counts only if, after it, the producer had not
     * reserved past floor + cap (no byte at or above floor overwritten). */
    uint64_t *ring_pos = calloc(max, sizeof *ring_pos);
    if (!ring_pos) return -ENOMEM;
    uint32_t nfound = 0;
    int walked = 0, stable = 0, short_walk = 0;
    if (domain_hit(d)) { free(ring_pos); return -FIPS_ETRUNC; }
    for (int attempt = 0; attempt < 16 && !walked; attempt++) {
        uint64_t lo = 0, head = 0;
        stable = 0;
        if (attempt) SPIN();
        for (int i = 0; i < 64 && !stable; i++) {
            if (i) SPIN();
            /* T1: floor (ACQUIRE, pairs with P5b), head (C1, pairs with P3),
             * floor again: floor only grows, so an unchanged floor read
             * before head is at most head.  A floor older than head by more
             * than a lap is stale, not corrupt: the producer moved both
             * between our loads. */
            lo = LD(&ctl->floor, acquire);
            head = LD(&ctl->head, acquire);
            stable = LD(&ctl->floor, acquire) == lo && lo <= head && head - lo <= d->cap;
        }
        if (!stable || (lo & 7u)) { stable = 0; break; } /* an unaligned floor is no record boundary */
        nfound = 0;
        uint64_t p = lo;
        while (p < head) {
            uint64_t off = p & d->mask, to_end = d->cap - off;
            if (to_end < FIPS_REC_HDR_SIZE) { p += to_end; continue; }
            struct fips_layout_record h;
            racy_copy(&h, base + off, sizeof h);
            uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
            uint64_t stride = rec_stride(h.len_flags);
            if (stride > to_end || len > d->max_record) break; /* lapped or hostile */
            if (!((h.len_flags >> 24) & FIPS_REC_PAD)) {
                ring_pos[nfound % max] = p;
                nfound++;
            }
            p += stride;
        }
        /* T2: ACQUIRE fence then reserved, pairs with P1: no header the
         * walk read was rewritten if the producer never claimed past
         * lo + cap. */
        atomic_thread_fence(memory_order_acquire);
        walked = claimed_end(ctl) <= lo + d->cap;
        /* Unlapped, a healthy walk ends exactly at head (records never cross
         * it); one that stopped before is a header the format forbids. */
        short_walk = walked && p != head;
    }
    if (short_walk || domain_hit(d)) {
        free(ring_pos);
        return domain_hit(d) ? -FIPS_ETRUNC : -FIPS_ECORRUPT;
    }
    if (!stable) { free(ring_pos); return -FIPS_ECORRUPT; }
    if (!walked) { free(ring_pos); *lapped = 1; return 0; } /* producer too fast to follow */
    uint32_t n = nfound < max ? nfound : max;
    uint32_t first = nfound < max ? 0 : nfound % max;
    uint8_t *out = buf;
    size_t off_out = 0;
    uint32_t copied = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t rp = ring_pos[(first + k) % max];
        uint64_t off = rp & d->mask;
        struct fips_layout_record h;
        racy_copy(&h, base + off, sizeof h);
        uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
        if (len > d->max_record || rec_stride(h.len_flags) > d->cap - off) { (*lapped)++; continue; }
        size_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
        if (off_out + need > buflen) break;
        racy_copy(out + off_out, base + off, FIPS_REC_HDR_SIZE + len);
        /* T2: ACQUIRE fence then reserved: pairs with P1.  If the producer
         * reserved past rp + cap, this record may be torn: discard it. */
        atomic_thread_fence(memory_order_acquire);
        uint64_t r2 = claimed_end(ctl);
        if (r2 > rp + d->cap) { (*lapped)++; continue; }
        off_out += need;
        copied++;
    }
    free(ring_pos);
    *used = off_out;
    return (int)copied;
}
