/*
 * kill -9 scenarios with fork(): processes die without any cleanup, and the
 * survivors must neither lose committed records nor stall.
 *
 *  a) a producer process (3 threads) is SIGKILLed while two consumers in
 *     the parent read: one thread at a random point of its loop, one parked
 *     right after a commit, one parked holding a claim it never commits.
 *     Both consumers read every committed record; seq numbers and the
 *     payload's own sequence prove what was lost, exactly.
 *  b) a consumer process is SIGKILLed: once the ring fills, the producer
 *     evicts it after the grace period (evictions == 1), and the other
 *     consumer keeps getting every record.
 *  c) a consumer process is SIGKILLed and restarted under the same name:
 *     it resumes from its released position (claimed-but-unreleased records
 *     come again, nothing is lost); while the first one lives, the name is
 *     busy.
 *  d) two threads race to reclaim the ring of a dead producer process: only
 *     one may get it (a ring has a single producer).
 *  e) a process that logged forks: the child's records go to a ring of its
 *     own, and exit() closes the ring.
 *
 * The parent is single-threaded whenever it forks (a ThreadSanitizer
 * requirement); threads are started after the fork and joined before the
 * next one.  Children report through a MAP_SHARED anonymous page.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "testutil.h"

/* Fault injection for (d).  fips.c asks whether a ring's producer process
 * is alive with kill(pid, 0); this definition of kill() (it takes
 * precedence over libc's in this executable) can delay that probe, which
 * stands for the thread being preempted right after it.  The delay is 0
 * except while (d) runs; real signals are never delayed. */
static atomic_int g_pidcheck_delay_us;

int kill(pid_t pid, int sig)
{
    if (sig == 0) {
        int us = atomic_load(&g_pidcheck_delay_us);
        if (us > 0)
            t_sleep_us((uint64_t)us);
    }
    return (int)syscall(SYS_kill, pid, sig);
}

#define MAXREC 256u

/* ---- payload: producer thread id, its attempt number, checksum --------- */

static uint32_t psum(const uint8_t *p, uint32_t len)
{
    uint32_t h = t_fnv1a(T_FNV_SEED, &len, sizeof len);
    h = t_fnv1a(h, p, 4);
    return t_fnv1a(h, p + 8, len - 8);
}

static void mkpay(uint8_t *p, uint32_t len, uint32_t id, uint64_t pseq)
{
    memcpy(p, &id, 4);
    memcpy(p + 8, &pseq, 8);
    for (uint32_t i = 16; i < len; i++)
        p[i] = (uint8_t)(pseq + i);
    uint32_t s = psum(p, len);
    memcpy(p + 4, &s, 4);
}

static int chkpay(const void *data, uint32_t len, uint32_t *id, uint64_t *pseq)
{
    const uint8_t *p = data;
    if (len < 16 || len > MAXREC)
        return 0;
    uint32_t s;
    memcpy(id, p, 4);
    memcpy(&s, p + 4, 4);
    memcpy(pseq, p + 8, 8);
    if (s != psum(p, len))
        return 0;
    for (uint32_t i = 16; i < len; i++)
        if (p[i] != (uint8_t)(*pseq + i))
            return 0;
    return 1;
}

/* ---- shared page between parent and children ---------------------------- */

typedef struct {
    atomic_int ready;            /* child: set up */
    atomic_int park_request;     /* parent: stop at a known point */
    atomic_int parked[4];        /* child thread k: parked */
    atomic_int ring[4];          /* child thread k: its ring */
    atomic_ullong attempts[4];   /* child thread k: attempts started */
    atomic_ullong value[8];      /* scenario-specific results */
    atomic_int errors;
} shared_t;

static shared_t *g_sh;

static void shared_reset(void)
{
    memset(g_sh, 0, sizeof *g_sh);
}

static fips_domain *open_existing(const char *name)
{
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 0;
    fips_domain *d = NULL;
    int rc = fips_domain_open(&d, t_dir, name, &o);
    return rc == 0 ? d : NULL;
}

static fips_domain *create_domain(const char *name, uint64_t cap, uint64_t grace_ns,
                                  uint32_t max_rings)
{
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;
    o.max_rings = max_rings;
    o.max_consumers = 8;
    o.ring_capacity = cap;
    o.max_record = MAXREC;
    o.grace_ns = grace_ns;
    fips_domain *d = NULL;
    int rc = fips_domain_open(&d, t_dir, name, &o);
    if (rc)
        DIE("fips_domain_open(%s): %d (%s)", name, rc, t_errname(rc));
    return d;
}

static void reap(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR)
            DIE("waitpid: %s", strerror(errno));
}

/* Poll cond every 0.5 ms until it holds or `ms` pass; check it after. */
#define WAIT_UNTIL(cond, ms)                                                \
    for (uint64_t dl_ = t_mono_ns() + (uint64_t)(ms) * 1000000ull;          \
         !(cond) && t_mono_ns() < dl_;)                                     \
        t_sleep_us(500)

/* Monitor snapshot of a domain, arrays sized from the header. */
typedef struct {
    fips_monitor *m;
    fips_snapshot s;
    uint32_t nr, nc;
} snap_t;

static void snap_open(snap_t *sn, const char *name)
{
    memset(sn, 0, sizeof *sn);
    char err[512];
    int rc = fips_monitor_open(&sn->m, t_dir, name, 0, err, sizeof err);
    if (rc)
        DIE("monitor: %s", err);
    sn->nr = fips_monitor_header(sn->m)->max_rings;
    sn->nc = fips_monitor_header(sn->m)->max_consumers;
    sn->s.rings = calloc(sn->nr, sizeof *sn->s.rings);
    sn->s.consumers = calloc(sn->nc, sizeof *sn->s.consumers);
    sn->s.pos = calloc((size_t)sn->nr * sn->nc, sizeof *sn->s.pos);
    if (!sn->s.rings || !sn->s.consumers || !sn->s.pos)
        DIE("calloc");
}

static void snap_take(snap_t *sn)
{
    CHECK_RC(fips_monitor_snapshot(sn->m, &sn->s), 0);
}

static void snap_close(snap_t *sn)
{
    fips_monitor_close(sn->m);
    free(sn->s.rings);
    free(sn->s.consumers);
    free(sn->s.pos);
}

/* ---- a consumer reader thread that checks continuity per ring ---------- */

#define MAX_RINGS 16

typedef struct {
    uint64_t records, lost, next_seq, next_pseq, last_pseq;
    int seen;
} ringview_t;

typedef struct {
    fips_consumer *c;
    const char *name;
    ringview_t rv[MAX_RINGS];
    atomic_int stop;             /* parent: stop when idle */
    atomic_int final_seen;       /* a record with pseq flag "final" */
    uint64_t final_id;           /* producer id whose final record ends the read */
    int want_final;
    atomic_ullong total;
    int errors;
} reader_t;

#define FINAL_ID 0xF1A1u

static void *reader_main(void *arg)
{
    reader_t *rd = arg;
    for (;;) {
        fips_batch b;
        int rc = fips_consumer_read(rd->c, &b, 64);
        if (rc == -FIPS_EAGAIN) {
            if (atomic_load(&rd->stop) || (rd->want_final && atomic_load(&rd->final_seen)))
                break;
            t_sleep_us(200);
            continue;
        }
        if (rc != 0) {
            t_fail(__FILE__, __LINE__, "%s: read -> %d (%s)", rd->name, rc, t_errname(rc));
            break;
        }
        if (b.ring >= MAX_RINGS) {
            t_fail(__FILE__, __LINE__, "%s: ring %u", rd->name, b.ring);
            break;
        }
        ringview_t *v = &rd->rv[b.ring];
        fips_record r;
        while (fips_batch_next(&b, &r) == 1) {
            uint32_t id;
            uint64_t pseq;
            if (!chkpay(r.data, r.len, &id, &pseq)) {
                if (rd->errors++ < 10)
                    t_fail(__FILE__, __LINE__, "%s: ring %u seq %llu: bad payload", rd->name,
                           b.ring, (unsigned long long)r.seq);
                continue;
            }
            if (!v->seen) {
                v->seen = 1;
                v->next_seq = r.seq;          /* may start at the floor */
                v->next_pseq = pseq - r.lost;
            }
            if (r.seq != v->next_seq || pseq != v->next_pseq + r.lost) {
                if (rd->errors++ < 10)
                    t_fail(__FILE__, __LINE__,
                           "%s: ring %u: seq %llu pseq %llu lost %u, expected seq %llu pseq %llu+lost",
                           rd->name, b.ring, (unsigned long long)r.seq, (unsigned long long)pseq,
                           r.lost, (unsigned long long)v->next_seq,
                           (unsigned long long)v->next_pseq);
            }
            v->next_seq = r.seq + 1;
            v->next_pseq = pseq + 1;
            v->last_pseq = pseq;
            v->records++;
            v->lost += r.lost;
            atomic_fetch_add(&rd->total, 1);
            if (id == FINAL_ID)
                atomic_store(&rd->final_seen, 1);
        }
        rc = fips_consumer_release(rd->c, &b);
        if (rc < 0)
            t_fail(__FILE__, __LINE__, "%s: release -> %d", rd->name, rc);
    }
    return NULL;
}

/* ---- (a) producer process killed ------------------------------------------ */

enum { T_FREE = 0, T_PARK_COMMIT = 1, T_PARK_CLAIM = 2 };

struct kid_arg {
    fips_domain *d;
    int k;
};

static void *kid_producer(void *arg)
{
    struct kid_arg *a = arg;
    uint64_t rnd = 12345u + (uint64_t)a->k;
    int ring = fips_producer_ring(a->d);
    atomic_store(&g_sh->ring[a->k], ring);
    if (ring < 0) {
        atomic_fetch_add(&g_sh->errors, 1);
        return NULL;
    }
    uint8_t buf[MAXREC];
    uint64_t pseq = 0;
    for (;;) {
        uint32_t len = 16 + (uint32_t)(t_rand(&rnd) % 150);
        /* published before the attempt: a kill may land inside it */
        atomic_store(&g_sh->attempts[a->k], pseq + 1);
        mkpay(buf, len, (uint32_t)a->k, pseq);
        int rc = fips_log(a->d, buf, len);
        pseq++;
        if (rc != 0 && rc != -FIPS_EFULL)
            atomic_fetch_add(&g_sh->errors, 1);
        if (rc == 0 && atomic_load(&g_sh->park_request)) {
            if (a->k == T_PARK_COMMIT) {
                /* parked right after a commit: no drop after the last record */
                atomic_store(&g_sh->parked[a->k], 1);
                for (;;)
                    pause();
            }
            if (a->k == T_PARK_CLAIM) {
                /* right after a commit, claim and never commit; if the claim
                 * is dropped, the next record reports it and we try again */
                fips_slot s;
                atomic_store(&g_sh->attempts[a->k], pseq + 1);
                rc = fips_claim(a->d, len, &s);
                if (rc == 0) {
                    mkpay(s.data, len, (uint32_t)a->k, pseq);
                    atomic_store(&g_sh->parked[a->k], 1);
                    for (;;)
                        pause();
                }
                pseq++;
            }
        }
        if (t_rand(&rnd) % 16 == 0)
            t_sleep_us(t_rand(&rnd) % 200);
    }
    return NULL;
}

static void t_kill_producer(void)
{
    const char *name = "kill-producer";
    shared_reset();
    fips_domain *d = create_domain(name, 16384, 30000000000ull, 8);
    reader_t r1 = { .name = "reader-1" }, r2 = { .name = "reader-2" };
    REQUIRE_RC(fips_consumer_open(&r1.c, d, "one"), 0);
    REQUIRE_RC(fips_consumer_open(&r2.c, d, "two"), 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain *cd = open_existing(name);
        if (!cd)
            _exit(3);
        pthread_t th[3];
        struct kid_arg ka[3];
        for (int k = 0; k < 3; k++) {
            ka[k] = (struct kid_arg){ cd, k };
            if (pthread_create(&th[k], NULL, kid_producer, &ka[k]))
                _exit(4);
        }
        atomic_store(&g_sh->ready, 1);
        for (;;)
            pause();
    }
    pthread_t t1, t2;
    REQUIRE(pthread_create(&t1, NULL, reader_main, &r1) == 0);
    REQUIRE(pthread_create(&t2, NULL, reader_main, &r2) == 0);
    WAIT_UNTIL(atomic_load(&g_sh->ready), 5000);
    CHECK(atomic_load(&g_sh->ready));
    t_sleep_us(700000);                       /* mid-stream ... */
    atomic_store(&g_sh->park_request, 1);
    WAIT_UNTIL(atomic_load(&g_sh->parked[T_PARK_COMMIT]) &&
               atomic_load(&g_sh->parked[T_PARK_CLAIM]), 10000);
    CHECK(atomic_load(&g_sh->parked[T_PARK_COMMIT]) && atomic_load(&g_sh->parked[T_PARK_CLAIM]));
    t_sleep_us(50000);                        /* the free thread runs on */
    REQUIRE(kill(pid, SIGKILL) == 0);
    int st;
    reap(pid, &st);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK_EQ(atomic_load(&g_sh->errors), 0);

    /* The consumers go on and read everything that was committed. */
    snap_t sn;
    snap_open(&sn, name);
    snap_take(&sn);
    int rings[3];
    uint64_t committed_total = 0;
    for (int k = 0; k < 3; k++) {
        rings[k] = atomic_load(&g_sh->ring[k]);
        REQUIRE(rings[k] >= 0 && rings[k] < MAX_RINGS);
        committed_total += sn.s.rings[rings[k]].records_committed;
    }
    WAIT_UNTIL(atomic_load(&r1.total) == committed_total &&
               atomic_load(&r2.total) == committed_total, 20000);
    CHECK_EQ(atomic_load(&r1.total), committed_total);
    CHECK_EQ(atomic_load(&r2.total), committed_total);
    t_sleep_us(200000);                       /* and nothing more arrives */
    atomic_store(&r1.stop, 1);
    atomic_store(&r2.stop, 1);
    REQUIRE(pthread_join(t1, NULL) == 0);
    REQUIRE(pthread_join(t2, NULL) == 0);
    snap_take(&sn);

    for (int k = 0; k < 3; k++) {
        fips_ring_stat *rs = &sn.s.rings[rings[k]];
        CHECK_EQ(rs->state, FIPS_RING_ACTIVE);   /* nobody closed it */
        CHECK_EQ(rs->pid, (uint32_t)pid);
        CHECK(rs->records_committed > 0);
        if (k == T_PARK_CLAIM)
            CHECK(rs->reserved > rs->head);      /* the claim in flight */
        for (int j = 0; j < 2; j++) {
            reader_t *rd = j ? &r2 : &r1;
            ringview_t *v = &rd->rv[rings[k]];
            /* every committed record was read ... */
            CHECK_EQ(v->records, rs->records_committed);
            CHECK_EQ(v->next_seq, rs->records_committed);
            /* ... the payload sequence accounts for every attempt up to the
             * last committed one ... */
            CHECK_EQ(v->records + v->lost, v->last_pseq + 1);
            fips_pos_stat *ps = &sn.s.pos[(size_t)fips_consumer_index(rd->c) * sn.nr + rings[k]];
            CHECK_EQ(ps->released, rs->head);
            CHECK_EQ(ps->lost_seen, v->lost);
            if (k == T_FREE) {
                /* ... killed anywhere: drops after its last commit are
                 * counted in the ring but reported in no record. */
                CHECK(v->lost <= rs->records_dropped);
                CHECK(rs->records_committed + rs->records_dropped <=
                      atomic_load(&g_sh->attempts[k]));
                CHECK(rs->records_committed + rs->records_dropped + 1 >=
                      atomic_load(&g_sh->attempts[k]));
            } else {
                /* ... parked after a commit (or holding a claim): exact. */
                if (v->records + v->lost != rs->records_committed + rs->records_dropped)
                    t_fail(__FILE__, __LINE__,
                           "%s ring %d: consumed %llu + lost %llu != committed %llu + dropped %llu",
                           rd->name, rings[k], (unsigned long long)v->records,
                           (unsigned long long)v->lost,
                           (unsigned long long)rs->records_committed,
                           (unsigned long long)rs->records_dropped);
                atomic_fetch_add(&t_checks, 1);
            }
        }
    }
    printf("     (a) committed %llu records in 3 rings, dropped %llu; consumers read them all\n",
           (unsigned long long)committed_total,
           (unsigned long long)(sn.s.rings[rings[0]].records_dropped +
                                sn.s.rings[rings[1]].records_dropped +
                                sn.s.rings[rings[2]].records_dropped));
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(r1.c), 0);
    CHECK_RC(fips_consumer_close(r2.c), 0);
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

/* ---- (b) consumer process killed: evicted after the grace period ------- */

typedef struct {
    fips_domain *d;
    atomic_int stop;
    uint64_t attempts, committed, dropped;
    int ring;
} prod_arg;

static void *steady_producer(void *arg)
{
    prod_arg *p = arg;
    uint8_t buf[MAXREC];
    uint64_t rnd = 777;
    p->ring = fips_producer_ring(p->d);
    while (!atomic_load(&p->stop)) {
        uint32_t len = 16 + (uint32_t)(t_rand(&rnd) % 100);
        mkpay(buf, len, 1, p->attempts++);
        int rc = fips_log(p->d, buf, len);
        if (rc == 0)
            p->committed++;
        else if (rc == -FIPS_EFULL)
            p->dropped++;
        else
            t_fail(__FILE__, __LINE__, "log -> %d", rc);
        t_sleep_us(20);
    }
    /* the last record gets in, so every drop is reported */
    for (;;) {
        mkpay(buf, 16, FINAL_ID, p->attempts++);
        int rc = fips_log(p->d, buf, 16);
        if (rc == 0) {
            p->committed++;
            break;
        }
        p->dropped++;
        t_sleep_us(1000);
    }
    return NULL;
}

static void t_kill_consumer_evicted(void)
{
    const char *name = "kill-consumer";
    const uint64_t grace = 1000000000ull;     /* 1 s: reap + snapshot fit in it under TSan */
    shared_reset();
    fips_domain *d = create_domain(name, 16384, grace, 4);
    reader_t good = { .name = "good", .want_final = 1 };
    REQUIRE_RC(fips_consumer_open(&good.c, d, "good"), 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain *cd = open_existing(name);
        fips_consumer *c = NULL;
        if (!cd || fips_consumer_open(&c, cd, "victim") != 0)
            _exit(3);
        atomic_store(&g_sh->value[0], (unsigned long long)fips_consumer_index(c));
        atomic_store(&g_sh->ready, 1);
        for (;;) {   /* read and release until killed */
            fips_batch b;
            int rc = fips_consumer_read(c, &b, 16);
            if (rc == 0) {
                fips_record r;
                while (fips_batch_next(&b, &r) == 1)
                    atomic_fetch_add(&g_sh->value[1], 1);
                fips_consumer_release(c, &b);
            } else if (rc == -FIPS_EAGAIN) {
                fips_consumer_heartbeat(c);
                t_sleep_us(200);
            } else {
                _exit(5);
            }
        }
    }
    WAIT_UNTIL(atomic_load(&g_sh->ready), 5000);
    REQUIRE(atomic_load(&g_sh->ready));
    int victim = (int)atomic_load(&g_sh->value[0]);
    prod_arg pa = { .d = d };
    pthread_t tp, tr;
    REQUIRE(pthread_create(&tr, NULL, reader_main, &good) == 0);
    REQUIRE(pthread_create(&tp, NULL, steady_producer, &pa) == 0);
    WAIT_UNTIL(atomic_load(&g_sh->value[1]) > 100, 5000);  /* victim reads */
    CHECK(atomic_load(&g_sh->value[1]) > 100);
    REQUIRE(kill(pid, SIGKILL) == 0);
    uint64_t killed_at = fips_now_ns();       /* CLOCK_REALTIME, as evicted_ns */
    uint64_t killed_mono = t_mono_ns();       /* CLOCK_MONOTONIC, as heartbeats */
    int st;
    reap(pid, &st);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    snap_t sn;
    snap_open(&sn, name);
    /* Right after the kill (well within the grace period) the dead
     * consumer is still registered. */
    snap_take(&sn);
    CHECK_EQ(sn.s.consumers[victim].state, FIPS_CONS_ACTIVE);
    /* its last heartbeat: no later one can come */
    uint64_t hb = sn.s.consumers[victim].heartbeat_mono_ns;
    uint64_t hb_age = killed_mono > hb ? killed_mono - hb : 0;
    /* After it, the producer evicts it (the ring fills in milliseconds). */
    WAIT_UNTIL((snap_take(&sn), sn.s.consumers[victim].state == FIPS_CONS_EVICTED), 5000);
    CHECK_EQ(sn.s.consumers[victim].state, FIPS_CONS_EVICTED);
    t_sleep_us(300000);                       /* producer runs on, unhindered */
    atomic_store(&pa.stop, 1);
    REQUIRE(pthread_join(tp, NULL) == 0);
    REQUIRE(pthread_join(tr, NULL) == 0);
    snap_take(&sn);
    fips_ring_stat *rs = &sn.s.rings[pa.ring];
    fips_consumer_stat *vs = &sn.s.consumers[victim];
    CHECK_EQ(rs->evictions, 1);
    CHECK_EQ(vs->state, FIPS_CONS_EVICTED);
    CHECK_EQ(vs->evicted_by_ring, (uint32_t)pa.ring);
    /* not before the grace after the last heartbeat (5 ms for the two clocks' reads) */
    CHECK(vs->evicted_ns + hb_age + 5000000ull >= killed_at + grace);
    CHECK(vs->evicted_ns < killed_at + grace + 3000000000ull);
    CHECK(rs->records_dropped > 0);           /* it was full meanwhile */
    CHECK_EQ(rs->records_committed, pa.committed);
    CHECK_EQ(rs->records_dropped, pa.dropped);
    /* the surviving consumer got every record; drops are all accounted */
    ringview_t *v = &good.rv[pa.ring];
    CHECK_EQ(v->records, pa.committed);
    CHECK_EQ(v->records + v->lost, pa.attempts);
    CHECK_EQ(sn.s.consumers[fips_consumer_index(good.c)].state, FIPS_CONS_ACTIVE);
    printf("     (b) evicted %.0f ms after the kill (grace %.0f ms); %llu committed, %llu dropped\n",
           (double)(vs->evicted_ns - killed_at) / 1e6, (double)grace / 1e6,
           (unsigned long long)pa.committed, (unsigned long long)pa.dropped);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(good.c), 0);
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

/* ---- (c) consumer restarted under the same name resumes ------------------ */

static void t_kill_consumer_resume(void)
{
    const char *name = "kill-resume";
    shared_reset();
    fips_domain *d = create_domain(name, 1u << 18, 30000000000ull, 4);
    int ring = fips_producer_ring(d);
    REQUIRE(ring >= 0);
    uint8_t buf[MAXREC];
    const uint64_t first_part = 2000, second_part = 500;
    for (uint64_t k = 0; k < first_part; k++) {
        mkpay(buf, 64, 0, k);
        REQUIRE_RC(fips_log(d, buf, 64), 0);
    }
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain *cd = open_existing(name);
        fips_consumer *c = NULL;
        if (!cd || fips_consumer_open(&c, cd, "phoenix") != 0)
            _exit(3);
        uint64_t next = 0;
        /* read + release 7 batches of up to 100 */
        for (int i = 0; i < 7; i++) {
            fips_batch b;
            if (fips_consumer_read(c, &b, 100) != 0 || b.first_seq != next)
                _exit(4);
            next = b.next_seq;
            if (fips_consumer_release(c, &b) < 0)
                _exit(5);
        }
        /* claim two more batches; release the second only (out of order) */
        fips_batch b1, b2;
        if (fips_consumer_read(c, &b1, 50) != 0 || fips_consumer_read(c, &b2, 50) != 0)
            _exit(6);
        if (fips_consumer_release(c, &b2) < 0)
            _exit(7);
        atomic_store(&g_sh->value[0], next);          /* released up to here */
        atomic_store(&g_sh->value[1], b2.next_seq);   /* claimed up to here */
        atomic_store(&g_sh->ready, 1);
        for (;;)
            pause();
    }
    WAIT_UNTIL(atomic_load(&g_sh->ready), 5000);
    REQUIRE(atomic_load(&g_sh->ready));
    uint64_t released = atomic_load(&g_sh->value[0]);
    CHECK_EQ(released, 700);
    CHECK_EQ(atomic_load(&g_sh->value[1]), 800);
    /* While it lives, the name is busy. */
    fips_consumer *busy = NULL;
    CHECK_RC(fips_consumer_open(&busy, d, "phoenix"), -FIPS_EBUSY);
    REQUIRE(kill(pid, SIGKILL) == 0);
    int st;
    reap(pid, &st);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* More records while nobody reads as "phoenix". */
    for (uint64_t k = first_part; k < first_part + second_part; k++) {
        mkpay(buf, 64, 0, k);
        CHECK_RC(fips_log(d, buf, 64), 0);
    }
    /* The restarted consumer (a new process) resumes at `released`. */
    shared_reset();
    fflush(NULL);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain *cd = open_existing(name);
        fips_consumer *c = NULL;
        int rc = cd ? fips_consumer_open(&c, cd, "phoenix") : -1;
        if (rc != 0) {
            atomic_store(&g_sh->value[7], (unsigned long long)(long long)rc);
            _exit(3);
        }
        uint64_t first = UINT64_MAX, next = 0, n = 0, bad = 0;
        for (;;) {
            fips_batch b;
            rc = fips_consumer_read(c, &b, 64);
            if (rc == -FIPS_EAGAIN)
                break;
            if (rc != 0)
                _exit(4);
            fips_record r;
            while (fips_batch_next(&b, &r) == 1) {
                uint32_t id;
                uint64_t pseq;
                if (!chkpay(r.data, r.len, &id, &pseq) || pseq != r.seq)
                    bad++;
                if (first == UINT64_MAX)
                    first = r.seq;
                else if (r.seq != next)
                    bad++;
                next = r.seq + 1;
                n++;
            }
            if (fips_consumer_release(c, &b) < 0)
                _exit(5);
        }
        atomic_store(&g_sh->value[0], first);
        atomic_store(&g_sh->value[1], next);
        atomic_store(&g_sh->value[2], n);
        atomic_store(&g_sh->value[3], bad);
        if (fips_consumer_close(c) != 0)
            _exit(6);
        _exit(0);
    }
    reap(pid, &st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
        fprintf(stderr, "     restart: fips_consumer_open -> %lld\n",
                (long long)atomic_load(&g_sh->value[7]));
    CHECK_EQ(atomic_load(&g_sh->value[0]), released);     /* resumed, re-delivered */
    CHECK_EQ(atomic_load(&g_sh->value[1]), first_part + second_part);
    CHECK_EQ(atomic_load(&g_sh->value[2]), first_part + second_part - released);
    CHECK_EQ(atomic_load(&g_sh->value[3]), 0);
    snap_t sn;
    snap_open(&sn, name);
    snap_take(&sn);
    int found = 0;
    for (uint32_t i = 0; i < sn.nc; i++)
        if (strcmp(sn.s.consumers[i].name, "phoenix") == 0 &&
            sn.s.consumers[i].state != FIPS_CONS_FREE) {
            found++;
            CHECK_EQ(sn.s.consumers[i].resumes, 1);
            CHECK_EQ(sn.s.consumers[i].state, FIPS_CONS_CLOSED);
            fips_pos_stat *ps = &sn.s.pos[(size_t)i * sn.nr + (uint32_t)ring];
            CHECK_EQ(ps->released, sn.s.rings[ring].head);
            CHECK_EQ(ps->released_seq, first_part + second_part);
        }
    CHECK_EQ(found, 1);
    snap_close(&sn);
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

/* ---- (d) reclaiming a dead producer's ring: one winner only ------------- */

typedef struct {
    fips_domain *d;
    pthread_barrier_t *bar;
    int ring;
} race_arg;

static void *race_attach(void *arg)
{
    race_arg *a = arg;
    pthread_barrier_wait(a->bar);
    a->ring = fips_producer_ring(a->d);
    pthread_barrier_wait(a->bar);  /* both decided before either exits (and closes) */
    return NULL;
}

static void t_dead_ring_reclaim_race(void)
{
    /* A 5 ms pause after the liveness probe makes the window wide enough to
     * be hit on every try; without it the race is real but rarely hit. */
    atomic_store(&g_pidcheck_delay_us, 5000);
    int iterations = 20, both = 0, none = 0, one = 0;
    for (int it = 0; it < iterations; it++) {
        char name[64];
        snprintf(name, sizeof name, "reclaim-%d", it);
        fips_domain *d = create_domain(name, 4096, 30000000000ull, 1);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            fips_domain *cd = open_existing(name);
            if (!cd || fips_log(cd, "dead soon", 9) != 0)
                _exit(3);
            _exit(0);   /* no cleanup: the ring stays ACTIVE with a dead pid */
        }
        int st;
        reap(pid, &st);
        REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 2);
        race_arg a1 = { d, &bar, -1 }, a2 = { d, &bar, -1 };
        pthread_t t1, t2;
        REQUIRE(pthread_create(&t1, NULL, race_attach, &a1) == 0);
        REQUIRE(pthread_create(&t2, NULL, race_attach, &a2) == 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_barrier_destroy(&bar);
        if (a1.ring == 0 && a2.ring == 0)
            both++;
        else if (a1.ring == 0 || a2.ring == 0)
            one++;
        else
            none++;
        CHECK_RC(fips_domain_close(d), 0);
        CHECK_RC(fips_domain_unlink(t_dir, name), 0);
        if (both)
            break;
    }
    atomic_store(&g_pidcheck_delay_us, 0);
    if (both)
        t_fail(__FILE__, __LINE__,
               "two threads both attached the single ring of a dead producer "
               "(two writers on a single-producer ring) after %d tries", one + none + both);
    atomic_fetch_add(&t_checks, 1);
    CHECK_EQ(none, 0);     /* the dead process's drained ring is reclaimed */
}

/* ---- (f) an evicted consumer's slot is free for anyone ------------------ */

static void t_evicted_slot_reusable(void)
{
    const char *name = "evicted-slot";
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;
    o.max_rings = 2;
    o.max_consumers = 2;                  /* keeper + one more */
    o.ring_capacity = 4096;
    o.max_record = MAXREC;
    o.grace_ns = 200000000ull;
    fips_domain *d = NULL;
    REQUIRE_RC(fips_domain_open(&d, t_dir, name, &o), 0);
    fips_consumer *keeper = NULL;
    REQUIRE_RC(fips_consumer_open(&keeper, d, "keeper"), 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain *cd = open_existing(name);
        fips_consumer *c = NULL;
        if (!cd || fips_consumer_open(&c, cd, "crashed") != 0)
            _exit(3);
        _exit(0);      /* dies registered: ACTIVE with a dead pid */
    }
    int st;
    reap(pid, &st);
    REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* Fill the ring (the dead consumer holds it), wait out the grace
     * period, and log until the producer evicts the dead one. */
    uint8_t buf[100] = { 0 };
    while (fips_log(d, buf, 100) == 0)
        ;
    t_sleep_us(300000);
    int rc = -1;
    for (int i = 0; i < 1000 && rc != 0; i++) {
        fips_consumer_heartbeat(keeper);   /* the keeper is alive */
        fips_batch b;
        while (fips_consumer_read(keeper, &b, 100) == 0)
            fips_consumer_release(keeper, &b);
        rc = fips_log(d, buf, 100);
    }
    CHECK_RC(rc, 0);
    snap_t sn;
    snap_open(&sn, name);
    snap_take(&sn);
    int evicted = -1;
    for (uint32_t i = 0; i < sn.nc; i++)
        if (strcmp(sn.s.consumers[i].name, "crashed") == 0)
            evicted = (int)i;
    REQUIRE(evicted >= 0);
    CHECK_EQ(sn.s.consumers[evicted].state, FIPS_CONS_EVICTED);
    /* A new consumer, under another name, gets the evicted entry's slot. */
    fips_consumer *newcomer = NULL;
    rc = fips_consumer_open(&newcomer, d, "newcomer");
    CHECK_RC(rc, 0);
    if (rc == 0) {
        CHECK_EQ(fips_consumer_index(newcomer), (unsigned)evicted);
        CHECK_RC(fips_consumer_close(newcomer), 0);
    }
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(keeper), 0);
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

/* ---- (e) fork after logging --------------------------------------------- */

static void t_fork_after_log(void)
{
    const char *name = "fork-after-log";
    fips_domain *d = create_domain(name, 1u << 16, 30000000000ull, 4);
    reader_t rd = { .name = "forkreader" };
    REQUIRE_RC(fips_consumer_open(&rd.c, d, "r"), 0);
    uint8_t buf[MAXREC];
    mkpay(buf, 32, 0, 0);
    REQUIRE_RC(fips_log(d, buf, 32), 0);     /* the parent's ring exists */
    int pring = fips_producer_ring(d);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* Same handle, inherited: must not write into the parent's ring. */
        for (uint64_t k = 0; k < 300; k++) {
            mkpay(buf, 40, 1, k);
            if (fips_log(d, buf, 40) != 0)
                _exit(3);
        }
        exit(0);   /* exit() (not _exit) closes the calling thread's rings */
    }
    for (uint64_t k = 1; k < 300; k++) {
        mkpay(buf, 32, 0, k);
        CHECK_RC(fips_log(d, buf, 32), 0);
    }
    int st;
    reap(pid, &st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    atomic_store(&rd.stop, 1);
    reader_main(&rd);      /* drain in this thread */
    snap_t sn;
    snap_open(&sn, name);
    snap_take(&sn);
    int cring = -1;
    for (uint32_t r = 0; r < sn.nr; r++)
        if (sn.s.rings[r].pid == (uint32_t)pid)
            cring = (int)r;
    CHECK(cring >= 0 && cring != pring);
    CHECK_EQ(sn.s.rings[pring].records_committed, 300);
    CHECK_EQ(sn.s.rings[pring].pid, (uint32_t)getpid());
    CHECK_EQ(rd.rv[pring].records, 300);
    if (cring >= 0) {
        CHECK_EQ(sn.s.rings[cring].records_committed, 300);
        CHECK_EQ(sn.s.rings[cring].state, FIPS_RING_CLOSED);
        CHECK_EQ(rd.rv[cring].records, 300);
    }
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(rd.c), 0);
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED)
        DIE("mmap: %s", strerror(errno));
    t_mkdir("kill");
    RUN(t_kill_producer);
    RUN(t_kill_consumer_evicted);
    RUN(t_kill_consumer_resume);
    RUN(t_dead_ring_reclaim_race);
    RUN(t_evicted_slot_reusable);
    RUN(t_fork_after_log);
    t_rmdir();
    return t_report("test_kill");
}
