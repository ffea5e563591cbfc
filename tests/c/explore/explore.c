/*
 * The interleaving explorer's engine: coroutines, the hooks fips.c calls in
 * its -DFIPS_EXPLORE build, and stateless dynamic partial-order reduction
 * (DPOR) with sleep sets and replay.  See explore.h for what it does and why.
 *
 *   explore [--list] [--max-executions N] [--verbose] [SCENARIO...]
 *
 * Prints, per scenario, the executions (interleavings) explored and the
 * steps; exits 1 at the first invariant violation, printing the schedule that
 * led to it, and 2 on a usage error or when a scenario hits its bounds.
 *
 * The algorithm (Flanagan & Godefroid, "Dynamic partial-order reduction for
 * model checking software", POPL 2005, with sleep sets), per execution:
 * replay the schedule prefix chosen last time, then let the default choice
 * (keep running the same party) complete the run.  At every new state, for
 * each party p and its pending access t, find the latest earlier step i of
 * another party that conflicts with t (same bytes, at least one a write) and
 * does not happen-before p (vector clocks); the order of i and t could be
 * swapped, so p (or, if p was not enabled then, every enabled party) joins
 * the backtrack set of the state before i.  Afterwards the deepest state with
 * an untried backtrack choice becomes the next prefix.  A party whose next
 * access is independent of everything run since a state where it was already
 * tried sleeps (it would only reach states already explored); an execution in
 * which every enabled party sleeps ends early.  Exploration ends when no state
 * has an untried choice: one interleaving of every class of equivalent
 * interleavings (same order of every pair of conflicting accesses) was run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "explore.h"
#include "fips_explore.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <ucontext.h>

#define MAXEV 6000              /* steps per execution */
#define STACK (256 * 1024)
#define TLS_BYTES 2048
#define GRAN 8                  /* bytes per tracked location */
#define HBITS 16

enum { K_LOAD = 1, K_STORE = 2, K_RMW = 3, K_LOCK = 4, K_UNLOCK = 5, K_SPIN = 6, K_CLOCK = 7, K_CLOCKR = 8 };

typedef struct access {
    uint8_t kind;
    int16_t line;
    uint32_t len;
    uintptr_t key;              /* canonical address (see canon) */
} access_t;

typedef struct party {
    ucontext_t ctx;             /* only to start it */
    void *sp;                   /* saved stack pointer while switched out */
    char *stack;
    int done;
    access_t next;              /* the pending access */
    pthread_mutex_t *lock;      /* for K_LOCK */
    int try_only, lock_result;
    uint64_t spin_mark;         /* foreign-write counter when it began to spin */
    uint64_t foreign;           /* writes by other parties so far */
    _Alignas(64) unsigned char tls[TLS_BYTES];
    const void *tls_reader;
} party_t;

typedef struct event {
    uint8_t party;
    access_t a;
    uint16_t vc[XP_MAXP];
} event_t;

typedef struct node {
    uint8_t enabled, backtrack, done, chosen, sleep;
    access_t pend[XP_MAXP];     /* every party's pending access at this state */
} node_t;

/* ---- state of the current execution ----------------------------------- */
static const xp_scenario *sc;
static int verbose;
static party_t P[XP_MAXP];
static int np;
static int cur = -1;            /* running party, -1: the scheduler */
static int as_party = -1;       /* xp_as() outside the schedule */
static void *sched_sp;
static event_t ev[MAXEV];
static node_t nodes[MAXEV + 1];
static int nev;                 /* steps so far in this execution */
static int tree_len;            /* states of this execution in the exploration tree */
static int replay_len;          /* steps to replay from nodes[].chosen */
static uint16_t pvc[XP_MAXP][XP_MAXP];
static _Alignas(64) unsigned char main_tls[TLS_BYTES];
static const void *main_tls_reader;
static struct { pthread_mutex_t *m; int owner; } held[64];
static int nheld;
static uint64_t clock_ns;
static unsigned long long total_steps, blocked_execs;

/* ---- coroutines: a stack switch of our own (no signal mask syscalls) ---- */
#if defined(__x86_64__)
void xp_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".globl xp_switch\n"
        ".type xp_switch,@function\n"
        "xp_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size xp_switch, .-xp_switch\n");
#define HAVE_XP_SWITCH 1
#endif

static void to_party(int k)
{
    cur = k;
#ifdef HAVE_XP_SWITCH
    xp_switch(&sched_sp, P[k].sp);
#else
    swapcontext((ucontext_t *)sched_sp, &P[k].ctx);
#endif
    cur = -1;
}

static void to_scheduler(void)
{
    party_t *p = &P[cur];
#ifdef HAVE_XP_SWITCH
    xp_switch(&p->sp, sched_sp);
#else
    swapcontext(&p->ctx, (ucontext_t *)sched_sp);
#endif
}

/* ---- reporting ------------------------------------------------------------ */
static const char *kind_name(int k)
{
    static const char *n[] = {"?", "load", "store", "rmw", "lock", "unlock", "spin", "clock+", "clock"};
    return k >= 0 && k < 9 ? n[k] : "?";
}

static void print_schedule(FILE *f)
{
    int from = (nev > 80 && !verbose) ? nev - 80 : 0;
    fprintf(f, "schedule (%d steps%s; party: access at fips.c line, -1 the harness):\n", nev,
            from ? ", the last 80; --verbose for all" : "");
    for (int i = from; i < nev; i++)
        fprintf(f, "  %4d %-12s %-6s line %d\n", i, sc->party_name[ev[i].party], kind_name(ev[i].a.kind),
                ev[i].a.line);
}

void xp_fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "explore: %s: VIOLATION: ", sc ? sc->name : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (cur >= 0) fprintf(stderr, "  (in party %s)\n", sc->party_name[cur]);
    print_schedule(stderr);
    exit(1);
}

int xp_self(void) { return cur; }

/* ---- canonical addresses: every mapping of one file is one memory ------------ */
static struct { uintptr_t base; size_t size; int file; } maps[16];
static int nmaps;
static struct { dev_t dev; ino_t ino; } files[16];
static int nfiles;

void fips_explore_mapped(const void *p, size_t n, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || nmaps == 16) return;
    int f;
    for (f = 0; f < nfiles; f++)
        if (files[f].dev == st.st_dev && files[f].ino == st.st_ino) break;
    if (f == nfiles) {
        if (nfiles == 16) return;
        files[f].dev = st.st_dev;
        files[f].ino = st.st_ino;
        nfiles++;
    }
    maps[nmaps].base = (uintptr_t)p;
    maps[nmaps].size = n;
    maps[nmaps++].file = f;
}

void fips_explore_unmapped(const void *p)
{
    for (int i = 0; i < nmaps; i++)
        if (maps[i].base == (uintptr_t)p) { maps[i] = maps[--nmaps]; return; }
}

static uintptr_t canon(const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    for (int i = 0; i < nmaps; i++)
        if (a - maps[i].base < maps[i].size)
            return ((uintptr_t)1 << 63) | ((uintptr_t)maps[i].file << 40) | (a - maps[i].base);
    return a;
}

/* ---- hooks called by fips.c ------------------------------------------------ */
static void announce(int kind, const void *ptr, size_t n, int line)
{
    if (cur < 0) return;        /* setup / finish: run straight through */
    party_t *p = &P[cur];
    p->next = (access_t){(uint8_t)kind, (int16_t)line, (uint32_t)(n ? n : 1), ptr ? canon(ptr) : 0};
    to_scheduler();
}

void fips_explore_access(const void *ptr, size_t n, int kind, int line) { announce(kind, ptr, n, line); }

void xp_access(const void *ptr, size_t n, int kind) { announce(kind, ptr, n, -1); }

static int held_index(pthread_mutex_t *m)
{
    for (int i = 0; i < nheld; i++)
        if (held[i].m == m) return i;
    return -1;
}

int fips_explore_lock(pthread_mutex_t *m, int try_only)
{
    if (cur < 0) {              /* outside the schedule: no contention */
        if (held_index(m) >= 0) {
            if (try_only) return EBUSY;
            xp_fail("lock %p taken twice outside the schedule", (void *)m);
        }
        held[nheld].m = m;
        held[nheld++].owner = -1;
        return 0;
    }
    party_t *p = &P[cur];
    p->lock = m;
    p->try_only = try_only;
    announce(K_LOCK, m, 1, __LINE__);
    return p->lock_result;       /* set by the scheduler when it ran the step */
}

int fips_explore_unlock(pthread_mutex_t *m)
{
    announce(K_UNLOCK, m, 1, __LINE__);
    int i = held_index(m);
    if (i < 0) xp_fail("unlock of a lock not held");
    held[i] = held[--nheld];
    return 0;
}

void fips_explore_spin(void)
{
    if (cur < 0) return;
    P[cur].spin_mark = P[cur].foreign;
    announce(K_SPIN, NULL, 1, __LINE__);
}

uint64_t fips_explore_clock(int which)
{
    announce(K_CLOCKR, NULL, 1, -1);
    if (which == FX_CLOCK_MONO_COARSE) return clock_ns - clock_ns % 4000000u; /* 4 ms ticks */
    return clock_ns;
}

void xp_clock_advance(uint64_t ns)
{
    announce(K_CLOCK, NULL, 1, -1);
    clock_ns += ns;
}

uint64_t xp_clock_now(void) { return clock_ns; }

void *fips_explore_tls(size_t size)
{
    if (size > TLS_BYTES) xp_fail("per-thread state of %zu bytes > %d", size, TLS_BYTES);
    int k = cur >= 0 ? cur : as_party;
    return k >= 0 ? (void *)P[k].tls : (void *)main_tls;
}

const void **fips_explore_tls_reader(void)
{
    int k = cur >= 0 ? cur : as_party;
    return k >= 0 ? &P[k].tls_reader : &main_tls_reader;
}

void xp_as(int k) { as_party = k; }

/* ---- dependence ---------------------------------------------------------------- */
static int writes(int k) { return k == K_STORE || k == K_RMW || k == K_LOCK || k == K_UNLOCK || k == K_CLOCK; }

/* Two pending accesses of different parties conflict (their order matters). */
static int dependent(const access_t *x, const access_t *y)
{
    if (x->kind == K_SPIN) return writes(y->kind);
    if (y->kind == K_SPIN) return writes(x->kind);
    int xc = x->kind == K_CLOCK || x->kind == K_CLOCKR;
    int yc = y->kind == K_CLOCK || y->kind == K_CLOCKR;
    if (xc || yc) return xc && yc && (x->kind == K_CLOCK || y->kind == K_CLOCK);
    if (x->key + x->len <= y->key || y->key + y->len <= x->key) return 0;
    return writes(x->kind) || writes(y->kind);
}

/* Per location (GRAN bytes; the clock is location 0): the last write and,
 * per party, its last read since then (event index + 1; 0 none).  Earlier
 * conflicting steps happen-before these, so these are all a new step has to
 * be ordered after, and all the DPOR search has to look at. */
typedef struct loc {
    uintptr_t key;
    uint32_t stamp;
    int w;
    int r[XP_MAXP];
} loc_t;
static loc_t locs[1u << HBITS];
static uint32_t stamp = 1;
static int last_write_of[XP_MAXP], last_spin_of[XP_MAXP]; /* per party, index + 1 */

static loc_t *loc_of(uintptr_t g)
{
    uint32_t h = (uint32_t)((g * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
    for (;;) {
        loc_t *l = &locs[h];
        if (l->stamp != stamp) {
            memset(l, 0, sizeof *l);
            l->stamp = stamp;
            l->key = g;
            return l;
        }
        if (l->key == g) return l;
        h = (h + 1) & ((1u << HBITS) - 1);
    }
}

static void join(uint16_t *vc, int e1)
{
    if (!e1) return;
    const uint16_t *o = ev[e1 - 1].vc;
    for (int q = 0; q < np; q++)
        if (o[q] > vc[q]) vc[q] = o[q];
}

#define FOR_LOCS(a, body)                                                                  \
    do {                                                                                   \
        if ((a)->kind == K_CLOCK || (a)->kind == K_CLOCKR) {                               \
            uintptr_t g = 0;                                                               \
            body;                                                                          \
        } else if ((a)->kind != K_SPIN) {                                                  \
            for (uintptr_t g = (a)->key / GRAN; g <= ((a)->key + (a)->len - 1) / GRAN; g++) \
                body;                                                                      \
        }                                                                                  \
    } while (0)

static void record_event(int k, const access_t *a)
{
    event_t *e = &ev[nev];
    e->party = (uint8_t)k;
    e->a = *a;
    uint16_t vc[XP_MAXP];
    memcpy(vc, pvc[k], sizeof vc);
    int w = writes(a->kind) || a->kind == K_CLOCK;
    if (a->kind == K_SPIN) {
        for (int q = 0; q < np; q++) if (q != k) join(vc, last_write_of[q]);
    } else {
        if (w) for (int q = 0; q < np; q++) if (q != k) join(vc, last_spin_of[q]);
        FOR_LOCS(a, {
            loc_t *l = loc_of(g);
            join(vc, l->w);
            if (w) for (int q = 0; q < np; q++) join(vc, l->r[q]);
        });
    }
    vc[k] = (uint16_t)(nev + 1);
    memcpy(e->vc, vc, sizeof vc);
    memcpy(pvc[k], vc, sizeof vc);
    if (a->kind == K_SPIN) { last_spin_of[k] = nev + 1; return; }
    if (w) last_write_of[k] = nev + 1;
    FOR_LOCS(a, {
        loc_t *l = loc_of(g);
        if (w) { l->w = nev + 1; memset(l->r, 0, sizeof l->r); }
        else l->r[k] = nev + 1;
    });
}

static int hb_party(int e1, int p) { return e1 && pvc[p][ev[e1 - 1].party] >= e1; }

/* Consider candidate step e1 (index + 1) for party p's pending access. */
#define CANDIDATE(e1)                                                               \
    do {                                                                            \
        int c_ = (e1);                                                              \
        if (c_ > best && ev[c_ - 1].party != p && !hb_party(c_, p)) best = c_;      \
    } while (0)

/* The DPOR step at the current state: backtrack points for every party's
 * pending access. */
static void analyse(void)
{
    for (int p = 0; p < np; p++) {
        if (P[p].done) continue;
        const access_t *t = &P[p].next;
        int best = 0, w = writes(t->kind);
        if (t->kind == K_SPIN) {
            for (int q = 0; q < np; q++) if (q != p) CANDIDATE(last_write_of[q]);
        } else {
            if (w) for (int q = 0; q < np; q++) if (q != p) CANDIDATE(last_spin_of[q]);
            FOR_LOCS(t, {
                loc_t *l = loc_of(g);
                CANDIDATE(l->w);
                if (w) for (int q = 0; q < np; q++) CANDIDATE(l->r[q]);
            });
        }
        if (!best) continue;
        node_t *n = &nodes[best - 1];
        if (n->enabled & (1u << p)) n->backtrack |= (uint8_t)(1u << p);
        else n->backtrack |= n->enabled;
    }
}

/* ---- scheduling -------------------------------------------------------------- */
static int enabled(int k)
{
    party_t *p = &P[k];
    if (p->done) return 0;
    if (p->next.kind == K_LOCK && !p->try_only && held_index(p->lock) >= 0) return 0;
    if (p->next.kind == K_SPIN && p->foreign == p->spin_mark) return 0;
    return 1;
}

static void party_main(void)
{
    int k = cur;
    sc->party_fn[k](k);
    P[k].done = 1;
    to_scheduler();               /* never returns: a done party is not resumed */
    abort();
}

static void start_parties(void)
{
    for (int k = 0; k < np; k++) {
        party_t *p = &P[k];
        if (!p->stack) p->stack = malloc(STACK);
        if (!p->stack) { perror("malloc"); exit(2); }
        p->done = 0;
        p->foreign = p->spin_mark = 0;
#ifdef HAVE_XP_SWITCH
        /* a fresh stack that "returns" into party_main after xp_switch pops
         * six callee-saved registers */
        uintptr_t top = ((uintptr_t)p->stack + STACK) & ~(uintptr_t)15;
        void **sp = (void **)top;
        *--sp = NULL;                       /* alignment: party_main sees rsp % 16 == 8 */
        *--sp = (void *)party_main;
        for (int i = 0; i < 6; i++) *--sp = NULL;
        p->sp = sp;
#else
        getcontext(&p->ctx);
        p->ctx.uc_stack.ss_sp = p->stack;
        p->ctx.uc_stack.ss_size = STACK;
        p->ctx.uc_link = NULL;
        makecontext(&p->ctx, party_main, 0);
        static ucontext_t sched_uc;
        sched_sp = &sched_uc;
#endif
        to_party(k); /* run it to its first access */
    }
}

static void run_step(int k)
{
    party_t *p = &P[k];
    access_t a = p->next;
    if (a.kind == K_LOCK) {
        if (held_index(p->lock) >= 0) {
            if (!p->try_only) xp_fail("scheduled a party blocked on a lock");
            p->lock_result = EBUSY;
            a.kind = K_LOAD;          /* a failed trylock only reads the lock */
        } else {
            held[nheld].m = p->lock;
            held[nheld++].owner = k;
            p->lock_result = 0;
        }
    }
    record_event(k, &a);
    if (writes(a.kind))
        for (int q = 0; q < np; q++)
            if (q != k) P[q].foreign++;
    nev++;
    total_steps++;
    to_party(k);
}

/* The sleep set of the state after running party k at state n. */
static uint8_t child_sleep(const node_t *n, int k)
{
    uint8_t cand = (uint8_t)((n->sleep | n->done) & ~(1u << k)), out = 0;
    for (int p = 0; p < np; p++)
        if ((cand >> p) & 1u && !dependent(&n->pend[p], &n->pend[k])) out |= (uint8_t)(1u << p);
    return out;
}

/* One execution: replay nodes[0..replay_len), then default choices.
 * Returns 0 if it ran to the end, 1 if it stopped early (sleep-set blocked). */
static int execute(void)
{
    nev = 0;
    nheld = 0;
    clock_ns = 1000000000ull * 1000;
    memset(pvc, 0, sizeof pvc);
    memset(last_write_of, 0, sizeof last_write_of);
    memset(last_spin_of, 0, sizeof last_spin_of);
    stamp++;
    memset(main_tls, 0, sizeof main_tls);
    main_tls_reader = NULL;
    for (int k = 0; k < np; k++) { /* a fresh thread each: setup may log as one */
        memset(P[k].tls, 0, sizeof P[k].tls);
        P[k].tls_reader = NULL;
    }
    as_party = -1;
    cur = -1;
    sc->setup();
    start_parties();
    if (replay_len == 0) nodes[0].sleep = 0;
    int last = 0, blocked = 0;
    tree_len = -1;
    for (;;) {
        uint8_t en = 0;
        int any_left = 0;
        for (int k = 0; k < np; k++) {
            if (!P[k].done) any_left = 1;
            if (enabled(k)) en |= (uint8_t)(1u << k);
        }
        if (!any_left) break;
        if (!en) {
            /* every party left spins or waits on a lock: let the spinners
             * retry once (a bounded retry loop then gives up) */
            for (int k = 0; k < np; k++)
                if (!P[k].done && P[k].next.kind == K_SPIN) {
                    P[k].spin_mark = P[k].foreign - 1;
                    en |= (uint8_t)(1u << k);
                }
            if (!en) xp_fail("deadlock: every party left waits on a lock");
        }
        if (nev >= MAXEV) {
            fprintf(stderr, "explore: %s: more than %d steps in one execution\n", sc->name, MAXEV);
            exit(2);
        }
        node_t *n = &nodes[nev];
        int k;
        if (blocked) {
            /* Sleep-set blocked: every state from here was explored already.
             * Run the parties to the end (so they close what they opened)
             * without exploring or checking. */
            k = (en & (1u << last)) ? last : __builtin_ctz(en);
            run_step(k);
            last = k;
            continue;
        }
        if (nev < replay_len) {
            k = n->chosen;
            if (!(en & (1u << k))) xp_fail("replay diverged at step %d (the run is not deterministic)", nev);
        } else {
            n->enabled = en;
            for (int p = 0; p < np; p++) n->pend[p] = P[p].next;
            analyse();
            uint8_t awake = en & (uint8_t)~n->sleep;
            if (!awake) {
                blocked = 1;
                tree_len = nev;
                continue;
            }
            k = (awake & (1u << last)) ? last : __builtin_ctz(awake);
            n->backtrack = n->done = (uint8_t)(1u << k);
            n->chosen = (uint8_t)k;
            nodes[nev + 1].sleep = child_sleep(n, k);
        }
        run_step(k);
        last = k;
        sc->check_step();
    }
    if (tree_len < 0) tree_len = nev;
    if (!blocked) sc->finish();
    sc->teardown();
    return blocked;
}

static int next_prefix(void)
{
    for (int n = tree_len - 1; n >= 0; n--) {
        node_t *x = &nodes[n];
        uint8_t todo = x->backtrack & (uint8_t)~x->done & x->enabled & (uint8_t)~x->sleep;
        if (todo) {
            int k = __builtin_ctz(todo);
            /* child_sleep reads `done` without k: the alternatives tried before */
            x->chosen = (uint8_t)k;
            nodes[n + 1].sleep = child_sleep(x, k);
            x->done |= (uint8_t)(1u << k);
            replay_len = n + 1;
            return 1;
        }
    }
    return 0;
}

/* ---- main ---------------------------------------------------------------------- */
extern const xp_scenario *const xp_scenarios[];

int main(int argc, char **argv)
{
    unsigned long long max_exec = 5000000;
    int list = 0, nsel = 0;
    const char *sel[64];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--max-executions") && i + 1 < argc) max_exec = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--list] [--max-executions N] [--verbose] [SCENARIO...]\n", argv[0]);
            return 2;
        } else if (nsel < 64) sel[nsel++] = argv[i];
    }
    int rc = 0;
    unsigned long long all_exec = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int s = 0; xp_scenarios[s]; s++) {
        sc = xp_scenarios[s];
        if (list) { printf("%-22s %s\n", sc->name, sc->what); continue; }
        if (nsel) {
            int want = 0;
            for (int i = 0; i < nsel; i++) want |= !strcmp(sel[i], sc->name);
            if (!want) continue;
        }
        np = sc->nparties;
        replay_len = 0;
        unsigned long long execs = 0;
        int maxlen = 0;
        total_steps = blocked_execs = 0;
        struct timespec s0, s1;
        clock_gettime(CLOCK_MONOTONIC, &s0);
        do {
            blocked_execs += (unsigned)execute();
            execs++;
            if (tree_len > maxlen) maxlen = tree_len;
            if (verbose && execs % 10000 == 0) fprintf(stderr, "  %s: %llu executions\n", sc->name, execs);
            if (execs >= max_exec) {
                fprintf(stderr, "explore: %s: stopped at --max-executions %llu (not exhaustive)\n", sc->name,
                        max_exec);
                rc = 2;
                break;
            }
        } while (next_prefix());
        clock_gettime(CLOCK_MONOTONIC, &s1);
        double secs = (double)(s1.tv_sec - s0.tv_sec) + (double)(s1.tv_nsec - s0.tv_nsec) / 1e9;
        printf("ok   %-20s %8llu interleavings (%llu cut short by sleep sets), up to %d steps, %.1f s: %s\n",
               sc->name, execs, blocked_execs, maxlen, secs, sc->what);
        fflush(stdout);
        all_exec += execs;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!list)
        printf("explore: %llu interleavings explored, invariants checked after every step, in %.1f s\n",
               all_exec, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return rc;
}
