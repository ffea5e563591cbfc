/*
 * Stress test of the ring: 8 producer threads x 3 consumers for
 * $STRESS_SECONDS (default 10) on small (64 KiB) rings, so wrap-around and
 * drops happen all the time.
 *
 *   consumer A: one reader thread, as fast as it can;
 *   consumer B: one reader thread that sleeps now and then, so it lags and
 *               makes the producers drop;
 *   consumer C: four reader threads that hold each batch a random short
 *               time, so their releases arrive out of order.
 *   consumer D: one reader that keeps leaving (close or detach) and coming
 *               back (fresh registration or resume), checked per session;
 *   monitor:    snapshots and taps all the time through its read-only
 *               mapping; every tapped record must be intact.
 *
 * Producers use fips_log, fips_claim/fips_commit (shrinking) and
 * fips_log_batch.  Each payload carries the producer id, the producer's own
 * attempt number (pseq, counting drops too), its length (16..200 bytes) and
 * an FNV-1a checksum.  Every consumer verifies every record, and per ring:
 *   - seq strictly consecutive (seq counts committed records only);
 *   - pseq == previous pseq + 1 + rec.lost (drops exactly explained);
 *   - at the end: records seen + lost seen == attempts of that producer,
 *     records seen == its committed count, lost == its dropped count;
 * and the monitor snapshot agrees with what the producers counted.
 * A producer's last record is retried until it is committed, so every drop
 * is reported in some record's `lost`.
 */
#include <pthread.h>
#include <sched.h>

#include "testutil.h"

#define NPROD      8
#define C_READERS  4
#define CAP        (64u * 1024u)
#define MAX_RECORD 256u
#define MIN_LEN    16u
#define MAX_LEN    200u
#define FINAL_BIT  0x80000000u
#define TAP_MAX    16u

static fips_domain *g_dom;
static const char *g_name = "stress";
static atomic_int g_stop;          /* producers: stop the main phase */
static atomic_int g_may_exit;      /* producers: main has taken its snapshot */
static atomic_int g_consumers_done;/* monitor: stop */

/* ---- payload -------------------------------------------------------------- */

static uint32_t payload_sum(const uint8_t *p, uint32_t len)
{
    uint32_t h = t_fnv1a(T_FNV_SEED, &len, sizeof len);
    h = t_fnv1a(h, p, 4);
    return t_fnv1a(h, p + 8, len - 8);
}

static void make_payload(uint8_t *p, uint32_t len, uint32_t id, uint64_t pseq, int final)
{
    uint32_t w = id | (final ? FINAL_BIT : 0);
    memcpy(p, &w, 4);
    memcpy(p + 8, &pseq, 8);
    for (uint32_t i = 16; i < len; i++)
        p[i] = (uint8_t)(pseq * 7u + i);
    uint32_t s = payload_sum(p, len);
    memcpy(p + 4, &s, 4);
}

typedef struct {
    uint32_t id;
    int final;
    uint64_t pseq;
} pay_t;

/* Check a payload; returns 0 and fills out, or a short reason. */
static const char *check_payload(const void *data, uint32_t len, pay_t *out)
{
    const uint8_t *p = data;
    if (len < MIN_LEN || len > MAX_LEN)
        return "length out of range";
    uint32_t w, s;
    memcpy(&w, p, 4);
    memcpy(&s, p + 4, 4);
    memcpy(&out->pseq, p + 8, 8);
    if (s != payload_sum(p, len))
        return "checksum mismatch";
    out->id = w & ~FINAL_BIT;
    out->final = (w & FINAL_BIT) != 0;
    if (out->id >= NPROD)
        return "bad producer id";
    for (uint32_t i = 16; i < len; i++)
        if (p[i] != (uint8_t)(out->pseq * 7u + i))
            return "filler mismatch";
    return NULL;
}

/* ---- producers ------------------------------------------------------------- */

typedef struct {
    uint32_t id;
    atomic_int ring;                 /* published before the first record */
    uint64_t attempts, committed, dropped;
    uint64_t bytes_total;    /* payload bytes of every attempt (committed + dropped) */
    uint64_t n_log, n_claim, n_batch, n_batch_calls;
    int error;
    atomic_int done;                 /* release: the counters above are final */
    pthread_t th;
} prod_t;

static prod_t g_prod[NPROD];

static void count_rc(prod_t *p, int rc, uint32_t len)
{
    p->bytes_total += len;
    if (rc == 0) {
        p->committed++;
    } else if (rc == -FIPS_EFULL) {
        p->dropped++;
    } else {
        fprintf(stderr, "producer %u: unexpected rc %d (%s)\n", p->id, rc, t_errname(rc));
        p->error = rc;
    }
}

static void *producer(void *arg)
{
    prod_t *p = arg;
    uint64_t rnd = 0x9E3779B97F4A7C15ull * (p->id + 1);
    char tname[32];
    snprintf(tname, sizeof tname, "stress-p%u", p->id);
    int ring = fips_producer_ring(g_dom);
    if (ring < 0) {
        p->error = ring;
        fprintf(stderr, "producer %u: fips_producer_ring -> %d\n", p->id, ring);
        return NULL;
    }
    fips_producer_set_name(g_dom, tname);
    atomic_store(&p->ring, ring);
    uint8_t bufs[8][MAX_LEN];
    uint64_t iter = 0;
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed) && !p->error) {
        uint64_t r = t_rand(&rnd) % 100;
        if (r < 70) {
            uint32_t len = MIN_LEN + (uint32_t)(t_rand(&rnd) % (MAX_LEN - MIN_LEN + 1));
            make_payload(bufs[0], len, p->id, p->attempts, 0);
            p->attempts++;
            p->n_log++;
            count_rc(p, fips_log(g_dom, bufs[0], len), len);
        } else if (r < 85) {
            /* claim more than needed, write, commit shorter */
            uint32_t claim_len = MIN_LEN + (uint32_t)(t_rand(&rnd) % (MAX_LEN - MIN_LEN + 1));
            uint32_t len = MIN_LEN + (uint32_t)(t_rand(&rnd) % (claim_len - MIN_LEN + 1));
            fips_slot s;
            int rc = fips_claim(g_dom, claim_len, &s);
            p->attempts++;
            p->n_claim++;
            if (rc == 0) {
                if (s.len != claim_len || (int)s.ring != ring) {
                    fprintf(stderr, "producer %u: claim len %u ring %u\n", p->id, s.len, s.ring);
                    p->error = -1;
                }
                make_payload(s.data, len, p->id, p->attempts - 1, 0);
                fips_commit(g_dom, &s, len, 0, 0);
                count_rc(p, 0, len);
            } else {
                count_rc(p, rc, claim_len);
            }
        } else {
            uint32_t n = 1 + (uint32_t)(t_rand(&rnd) % 8);
            const void *ptrs[8];
            uint32_t lens[8];
            uint64_t first = p->attempts;
            for (uint32_t i = 0; i < n; i++) {
                lens[i] = MIN_LEN + (uint32_t)(t_rand(&rnd) % (MAX_LEN - MIN_LEN + 1));
                make_payload(bufs[i], lens[i], p->id, first + i, 0);
                ptrs[i] = bufs[i];
            }
            p->attempts += n;
            p->n_batch += n;
            p->n_batch_calls++;
            int k = fips_log_batch(g_dom, ptrs, lens, n);
            if (k < 0 || (uint32_t)k > n) {
                fprintf(stderr, "producer %u: fips_log_batch -> %d\n", p->id, k);
                p->error = k < 0 ? k : -1;
            } else {
                /* Which ones got in is not known here; the consumers check
                 * each record, and the totals must add up. */
                p->committed += (uint64_t)k;
                p->dropped += n - (uint64_t)k;
                for (uint32_t i = 0; i < n; i++)
                    p->bytes_total += lens[i];
            }
        }
        /* Vary the pressure: short pauses let the consumers catch up, so the
         * rings go through full / not full many times. */
        if ((++iter & 63) == 0 && t_rand(&rnd) % 2 == 0)
            t_sleep_us(50 + t_rand(&rnd) % 500);
    }
    /* The final record is retried until it gets in: every drop before it is
     * then reported in its `lost`.  Each retry is an attempt of its own. */
    for (;;) {
        uint8_t fin[MIN_LEN];
        make_payload(fin, MIN_LEN, p->id, p->attempts, 1);
        p->attempts++;
        int rc = fips_log(g_dom, fin, MIN_LEN);
        count_rc(p, rc, MIN_LEN);
        if (rc != -FIPS_EFULL)
            break;
        t_sleep_us(200);
    }
    atomic_store_explicit(&p->done, 1, memory_order_release);
    /* Keep the ring open until main has compared the counters. */
    while (!atomic_load(&g_may_exit))
        t_sleep_us(1000);
    return NULL;   /* thread exit closes the ring */
}

/* ---- consumers ------------------------------------------------------------- */

/* What a consumer saw of one ring. */
typedef struct {
    uint64_t next_seq, next_pseq;     /* single-reader consumers */
    uint64_t records, lost, bytes;
    int producer;                     /* -1 until the first record */
    int final_seen;
    /* multi-reader consumer: one summary per batch, checked at the end */
    pthread_mutex_t mu;
    struct bsum { uint64_t first_seq, next_seq, pseq_before, pseq_after, count, lost; int final; } *b;
    size_t nb, capb;
} rview_t;

typedef struct {
    const char *name;
    fips_consumer *c;
    int readers;
    int lag;                          /* sleeps now and then */
    int hold;                         /* holds batches: out-of-order releases */
    uint32_t nrings;
    rview_t *rv;
    atomic_int finals;
    atomic_long records, batches, empty_batches;
    atomic_int errors;
} cons_t;

static cons_t g_cons[3];

static void rv_add_summary(rview_t *v, const struct bsum *s)
{
    pthread_mutex_lock(&v->mu);
    if (v->nb == v->capb) {
        v->capb = v->capb ? v->capb * 2 : 1024;
        v->b = realloc(v->b, v->capb * sizeof *v->b);
        if (!v->b)
            DIE("realloc");
    }
    v->b[v->nb++] = *s;
    pthread_mutex_unlock(&v->mu);
}

#define CFAIL(cs, ...)                                                      \
    do {                                                                    \
        if (atomic_fetch_add(&(cs)->errors, 1) < 20)                        \
            t_fail(__FILE__, __LINE__, __VA_ARGS__);                        \
        else                                                                \
            atomic_fetch_add(&t_failures, 1);                               \
    } while (0)

/* Verify one batch; single-reader consumers check continuity inline,
 * multi-reader ones record a summary. */
static void consume_batch(cons_t *cs, fips_batch *b)
{
    if (b->ring >= cs->nrings) {
        CFAIL(cs, "%s: batch ring %u out of range", cs->name, b->ring);
        return;
    }
    rview_t *v = &cs->rv[b->ring];
    fips_record r;
    struct bsum s = { 0 };
    uint64_t n = 0, lost = 0, prev_seq = 0, prev_pseq = 0;
    while (fips_batch_next(b, &r) == 1) {
        pay_t pay;
        const char *why = check_payload(r.data, r.len, &pay);
        if (why) {
            CFAIL(cs, "%s: ring %u seq %llu len %u: %s", cs->name, b->ring,
                  (unsigned long long)r.seq, r.len, why);
            n++;
            continue;
        }
        int pring = atomic_load(&g_prod[pay.id].ring);
        if ((uint32_t)pring != b->ring)
            CFAIL(cs, "%s: record of producer %u (ring %d) found in ring %u", cs->name,
                  pay.id, pring, b->ring);
        if (r.flags != 0)
            CFAIL(cs, "%s: ring %u seq %llu flags 0x%x", cs->name, b->ring,
                  (unsigned long long)r.seq, r.flags);
        if (n == 0) {
            s.first_seq = r.seq;
            s.pseq_before = pay.pseq - r.lost;
            if (r.seq != b->first_seq)
                CFAIL(cs, "%s: batch first_seq %llu, first record %llu", cs->name,
                      (unsigned long long)b->first_seq, (unsigned long long)r.seq);
        } else {
            if (r.seq != prev_seq + 1)
                CFAIL(cs, "%s: ring %u seq %llu after %llu inside a batch", cs->name, b->ring,
                      (unsigned long long)r.seq, (unsigned long long)prev_seq);
            if (pay.pseq != prev_pseq + 1 + r.lost)
                CFAIL(cs, "%s: ring %u seq %llu: pseq %llu after %llu with lost %u",
                      cs->name, b->ring, (unsigned long long)r.seq,
                      (unsigned long long)pay.pseq, (unsigned long long)prev_pseq, r.lost);
        }
        if (!cs->hold) {    /* single reader: check against the previous batch too */
            if (v->producer < 0)
                v->producer = (int)pay.id;
            if (v->final_seen)
                CFAIL(cs, "%s: ring %u: record after the final one", cs->name, b->ring);
            if (r.seq != v->next_seq)
                CFAIL(cs, "%s: ring %u: seq %llu, expected %llu", cs->name, b->ring,
                      (unsigned long long)r.seq, (unsigned long long)v->next_seq);
            if (pay.pseq != v->next_pseq + r.lost)
                CFAIL(cs, "%s: ring %u seq %llu: pseq %llu, expected %llu + lost %u",
                      cs->name, b->ring, (unsigned long long)r.seq,
                      (unsigned long long)pay.pseq, (unsigned long long)v->next_pseq, r.lost);
            v->next_seq = r.seq + 1;
            v->next_pseq = pay.pseq + 1;
            v->records++;
            v->lost += r.lost;
            v->bytes += r.len;
        }
        if (pay.final) {
            s.final = 1;
            if (!cs->hold)
                v->final_seen = 1;
            atomic_fetch_add(&cs->finals, 1);
        }
        prev_seq = r.seq;
        prev_pseq = pay.pseq;
        lost += r.lost;
        n++;
    }
    if (n != b->count)
        CFAIL(cs, "%s: batch count %u, iterated %llu", cs->name, b->count, (unsigned long long)n);
    if (lost != b->lost)
        CFAIL(cs, "%s: batch lost %llu, records say %llu", cs->name,
              (unsigned long long)b->lost, (unsigned long long)lost);
    if (n && prev_seq + 1 != b->next_seq)
        CFAIL(cs, "%s: batch next_seq %llu, last record %llu", cs->name,
              (unsigned long long)b->next_seq, (unsigned long long)prev_seq);
    atomic_fetch_add(&cs->records, (long)n);
    atomic_fetch_add(&cs->batches, 1);
    if (n == 0) {
        atomic_fetch_add(&cs->empty_batches, 1);
        return;
    }
    if (cs->hold) {
        s.next_seq = prev_seq + 1;
        s.pseq_after = prev_pseq + 1;
        s.count = n;
        s.lost = lost;
        rv_add_summary(v, &s);
    }
}

typedef struct {
    cons_t *cs;
    int idx;
} reader_arg;

static void *reader(void *arg)
{
    reader_arg *ra = arg;
    cons_t *cs = ra->cs;
    uint64_t rnd = 0xC0FFEEull + (uint64_t)ra->idx * 7919u + (uint64_t)(cs - g_cons) * 104729u;
    uint64_t idle_since = 0;
    for (;;) {
        fips_batch b;
        uint32_t max = cs->hold ? 1 + (uint32_t)(t_rand(&rnd) % 64) : 256;
        int rc = fips_consumer_read(cs->c, &b, max);
        if (rc == -FIPS_EAGAIN) {
            if (atomic_load(&cs->finals) >= NPROD)
                break;      /* every ring's last record has been claimed */
            uint64_t now = t_mono_ns();
            if (!idle_since)
                idle_since = now;
            else if (now - idle_since > 60000000000ull) {
                CFAIL(cs, "%s: no data for 60 s and only %d of %d final records",
                      cs->name, atomic_load(&cs->finals), NPROD);
                break;
            }
            t_sleep_us(50);
            continue;
        }
        idle_since = 0;
        if (rc != 0) {
            CFAIL(cs, "%s: fips_consumer_read -> %d (%s)", cs->name, rc, t_errname(rc));
            break;
        }
        consume_batch(cs, &b);
        if (cs->hold) {
            /* Hold the batch a random short time so that the four readers
             * release out of order. */
            uint64_t h = t_rand(&rnd) % 8;
            if (h < 3)
                ;                       /* release at once */
            else if (h < 6)
                sched_yield();
            else
                t_sleep_us(5 + t_rand(&rnd) % 100);
        }
        rc = fips_consumer_release(cs->c, &b);
        if (rc < 0)
            CFAIL(cs, "%s: fips_consumer_release -> %d", cs->name, rc);
        if (cs->lag && t_rand(&rnd) % 64 == 0)
            t_sleep_us(1000 + t_rand(&rnd) % 20000);   /* lag: 1-21 ms */
    }
    return NULL;
}

static int cmp_bsum(const void *a, const void *b)
{
    const struct bsum *x = a, *y = b;
    return x->first_seq < y->first_seq ? -1 : x->first_seq > y->first_seq;
}

/* Multi-reader consumer: the batch summaries of a ring must tile its
 * sequence exactly. */
static void finish_multi(cons_t *cs, uint32_t ring)
{
    rview_t *v = &cs->rv[ring];
    qsort(v->b, v->nb, sizeof *v->b, cmp_bsum);
    uint64_t next_seq = 0, next_pseq = 0;
    for (size_t i = 0; i < v->nb; i++) {
        struct bsum *s = &v->b[i];
        if (s->first_seq != next_seq || s->pseq_before != next_pseq) {
            CFAIL(cs, "%s: ring %u: batch at seq %llu (pseq before %llu) follows seq %llu "
                      "(pseq %llu): gap or overlap", cs->name, ring,
                  (unsigned long long)s->first_seq, (unsigned long long)s->pseq_before,
                  (unsigned long long)next_seq, (unsigned long long)next_pseq);
        }
        if (s->final && i + 1 != v->nb)
            CFAIL(cs, "%s: ring %u: final record is not the last", cs->name, ring);
        next_seq = s->next_seq;
        next_pseq = s->pseq_after;
        v->records += s->count;
        v->lost += s->lost;
    }
    v->next_seq = next_seq;
    v->next_pseq = next_pseq;
}

/* ---- consumer D: joins, leaves and resumes all the time ------------------ */

/* One reader that, every few hundred batches, either closes its consumer
 * and registers again (a fresh start at each ring's floor) or detaches and
 * opens again (a resume: each ring continues exactly after the last record
 * it released).  Within a session every ring's stream is checked like A's. */
typedef struct {
    long sessions, resumes, records, errors;
} churn_stats;

static churn_stats g_churn;

static void *churn(void *arg)
{
    (void)arg;
    uint64_t rnd = 0xD15EA5Eull;
    struct { int seen; uint64_t next_seq, next_pseq; } st[16];
    memset(st, 0, sizeof st);
    fips_consumer *c = NULL;
    int resume = 0;
#define DFAIL(...)                                                  \
    do {                                                            \
        if (g_churn.errors++ < 10)                                  \
            t_fail(__FILE__, __LINE__, __VA_ARGS__);                \
        else                                                        \
            atomic_fetch_add(&t_failures, 1);                       \
    } while (0)
    while (!atomic_load(&g_stop)) {
        if (!c) {
            int rc = fips_consumer_open(&c, g_dom, "D-churn");
            if (rc) {
                DFAIL("D: fips_consumer_open -> %d (%s)", rc, t_errname(rc));
                break;
            }
            g_churn.sessions++;
            if (resume)
                g_churn.resumes++;
            else
                memset(st, 0, sizeof st);    /* fresh: starts at the floors */
        }
        int batches = 1 + (int)(t_rand(&rnd) % 300);
        for (int i = 0; i < batches && !atomic_load(&g_stop); i++) {
            fips_batch b;
            int rc = fips_consumer_read(c, &b, 1 + (uint32_t)(t_rand(&rnd) % 128));
            if (rc == -FIPS_EAGAIN) {
                t_sleep_us(100);
                continue;
            }
            if (rc) {
                DFAIL("D: read -> %d (%s)", rc, t_errname(rc));
                break;
            }
            fips_record r;
            while (b.ring < 16 && fips_batch_next(&b, &r) == 1) {
                pay_t pay;
                const char *why = check_payload(r.data, r.len, &pay);
                if (why) {
                    DFAIL("D: ring %u seq %llu: %s", b.ring, (unsigned long long)r.seq, why);
                    continue;
                }
                if ((uint32_t)atomic_load(&g_prod[pay.id].ring) != b.ring)
                    DFAIL("D: producer %u's record in ring %u", pay.id, b.ring);
                if (st[b.ring].seen && (r.seq != st[b.ring].next_seq ||
                                        pay.pseq != st[b.ring].next_pseq + r.lost))
                    DFAIL("D (%s): ring %u seq %llu pseq %llu lost %u, expected seq %llu "
                          "pseq %llu", resume ? "resumed" : "fresh", b.ring,
                          (unsigned long long)r.seq, (unsigned long long)pay.pseq, r.lost,
                          (unsigned long long)st[b.ring].next_seq,
                          (unsigned long long)st[b.ring].next_pseq);
                st[b.ring].seen = 1;
                st[b.ring].next_seq = r.seq + 1;
                st[b.ring].next_pseq = pay.pseq + 1;
                g_churn.records++;
            }
            rc = fips_consumer_release(c, &b);
            if (rc < 0)
                DFAIL("D: release -> %d", rc);
        }
        resume = (int)(t_rand(&rnd) % 2);
        int rc = resume ? fips_consumer_detach(c) : fips_consumer_close(c);
        if (rc)
            DFAIL("D: %s -> %d", resume ? "detach" : "close", rc);
        c = NULL;
        if (t_rand(&rnd) % 4 == 0)
            t_sleep_us(t_rand(&rnd) % 5000);   /* away for a while */
    }
    if (c)
        fips_consumer_close(c);
    else if (resume) {       /* unregister the detached entry */
        if (fips_consumer_open(&c, g_dom, "D-churn") == 0)
            fips_consumer_close(c);
        else
            DFAIL("D: final re-open failed");
    }
#undef DFAIL
    return NULL;
}

/* ---- monitor ---------------------------------------------------------------- */

typedef struct {
    long snapshots, taps, tapped, lapped, tap_errors;
    int errors;
} mon_stats;

static mon_stats g_mon;

static void *monitor(void *arg)
{
    (void)arg;
    fips_monitor *m = NULL;
    char err[512];
    int rc = fips_monitor_open(&m, t_dir, g_name, 0, err, sizeof err);
    if (rc) {
        t_fail(__FILE__, __LINE__, "monitor open: %s", err);
        return NULL;
    }
    uint32_t nr = fips_monitor_header(m)->max_rings, nc = fips_monitor_header(m)->max_consumers;
    fips_snapshot s = { 0 };
    s.rings = calloc(nr, sizeof *s.rings);
    s.consumers = calloc(nc, sizeof *s.consumers);
    s.pos = calloc((size_t)nr * nc, sizeof *s.pos);
    fips_ring_stat *prev = calloc(nr, sizeof *prev);
    size_t buflen = TAP_MAX * (FIPS_REC_HDR_SIZE + MAX_RECORD);
    uint8_t *buf = malloc(buflen);
    if (!s.rings || !s.consumers || !s.pos || !prev || !buf)
        DIE("alloc");
    while (!atomic_load(&g_consumers_done)) {
        if (fips_monitor_snapshot(m, &s) != 0) {
            t_fail(__FILE__, __LINE__, "snapshot failed");
            break;
        }
        g_mon.snapshots++;
        for (uint32_t r = 0; r < nr; r++) {
            fips_ring_stat *x = &s.rings[r], *p = &prev[r];
            if (x->state == FIPS_RING_FREE)
                continue;
            /* counters never go back; the fill never exceeds the capacity */
            if (x->head < p->head || x->records_committed < p->records_committed ||
                x->records_dropped < p->records_dropped || x->floor < p->floor) {
                if (g_mon.errors++ < 10)
                    t_fail(__FILE__, __LINE__, "ring %u: a counter went back", r);
            }
            if (x->reserved < x->head && g_mon.errors++ < 10)
                t_fail(__FILE__, __LINE__, "ring %u: reserved %llu < head %llu", r,
                       (unsigned long long)x->reserved, (unsigned long long)x->head);
            if (x->floor <= x->head && x->head - x->floor > CAP && g_mon.errors++ < 10)
                t_fail(__FILE__, __LINE__, "ring %u: head - floor = %llu > capacity", r,
                       (unsigned long long)(x->head - x->floor));
            *p = *x;

            size_t used = 0;
            uint32_t lapped = 0;
            int n = fips_monitor_tap(m, r, TAP_MAX, buf, buflen, &used, &lapped);
            g_mon.taps++;
            if (n < 0) {
                if (g_mon.tap_errors++ < 5)
                    t_fail(__FILE__, __LINE__, "tap ring %u -> %d (%s) on a healthy ring", r,
                           n, t_errname(n));
                continue;
            }
            g_mon.tapped += n;
            g_mon.lapped += lapped;
            size_t off = 0;
            uint64_t last_seq = 0;
            for (int i = 0; i < n; i++) {
                struct fips_layout_record h;
                if (off + sizeof h > used) {
                    t_fail(__FILE__, __LINE__, "tap: record %d beyond used %zu", i, used);
                    break;
                }
                memcpy(&h, buf + off, sizeof h);
                uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
                pay_t pay;
                const char *why = off + FIPS_REC_HDR_SIZE + len <= used
                    ? check_payload(buf + off + FIPS_REC_HDR_SIZE, len, &pay) : "beyond used";
                if (why) {
                    if (g_mon.errors++ < 10)
                        t_fail(__FILE__, __LINE__,
                               "tap ring %u record %d/%d (seq %llu len %u): %s (torn copy?)", r,
                               i, n, (unsigned long long)h.seq, len, why);
                } else if ((uint32_t)atomic_load(&g_prod[pay.id].ring) != r) {
                    if (g_mon.errors++ < 10)
                        t_fail(__FILE__, __LINE__, "tap ring %u: record of producer %u", r, pay.id);
                }
                if (i > 0 && h.seq <= last_seq && g_mon.errors++ < 10)
                    t_fail(__FILE__, __LINE__, "tap ring %u: seq %llu after %llu", r,
                           (unsigned long long)h.seq, (unsigned long long)last_seq);
                last_seq = h.seq;
                off += FIPS_REC_HDR_SIZE + ((len + 7u) & ~7u);
            }
        }
        t_sleep_us(2000);
    }
    free(buf);
    free(prev);
    free(s.rings);
    free(s.consumers);
    free(s.pos);
    fips_monitor_close(m);
    return NULL;
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    double seconds = 10;
    const char *env = getenv("STRESS_SECONDS");
    if (env && *env) {
        seconds = atof(env);
        if (seconds <= 0)
            DIE("bad STRESS_SECONDS=%s", env);
    }
    t_mkdir("stress");

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;
    o.max_rings = 16;
    o.max_consumers = 8;
    o.ring_capacity = CAP;
    o.max_record = MAX_RECORD;
    o.grace_ns = 30000000000ull;   /* nobody must be evicted here */
    int rc = fips_domain_open(&g_dom, t_dir, g_name, &o);
    if (rc)
        DIE("fips_domain_open: %d (%s)", rc, t_errname(rc));

    const char *names[3] = { "A-fast", "B-lagging", "C-ooo" };
    for (int i = 0; i < 3; i++) {
        cons_t *cs = &g_cons[i];
        cs->name = names[i];
        cs->readers = i == 2 ? C_READERS : 1;
        cs->lag = i == 1;
        cs->hold = i == 2;
        cs->nrings = o.max_rings;
        cs->rv = calloc(o.max_rings, sizeof *cs->rv);
        if (!cs->rv)
            DIE("calloc");
        for (uint32_t r = 0; r < o.max_rings; r++) {
            cs->rv[r].producer = -1;
            pthread_mutex_init(&cs->rv[r].mu, NULL);
        }
        rc = fips_consumer_open(&cs->c, g_dom, cs->name);
        if (rc)
            DIE("fips_consumer_open(%s): %d (%s)", cs->name, rc, t_errname(rc));
    }

    pthread_t readers[1 + 1 + C_READERS], mon;
    reader_arg ra[1 + 1 + C_READERS];
    int nreaders = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < g_cons[i].readers; k++) {
            ra[nreaders] = (reader_arg){ &g_cons[i], k };
            if (pthread_create(&readers[nreaders], NULL, reader, &ra[nreaders]))
                DIE("pthread_create");
            nreaders++;
        }
    if (pthread_create(&mon, NULL, monitor, NULL))
        DIE("pthread_create");
    pthread_t churner;
    if (pthread_create(&churner, NULL, churn, NULL))
        DIE("pthread_create");
    uint64_t t0 = t_mono_ns();
    for (uint32_t i = 0; i < NPROD; i++) {
        g_prod[i].id = i;
        atomic_init(&g_prod[i].ring, -1);
        if (pthread_create(&g_prod[i].th, NULL, producer, &g_prod[i]))
            DIE("pthread_create");
    }
    printf("test_stress: %d producers x 3 consumers (1, 1 lagging, %d out-of-order readers), "
           "%u KiB rings, %.0f s\n", NPROD, C_READERS, CAP / 1024, seconds);

    t_sleep_us((uint64_t)(seconds * 1e6));
    atomic_store(&g_stop, 1);
    uint64_t t_stop = t_mono_ns();
    if (pthread_join(churner, NULL))
        DIE("pthread_join");

    /* Consumers end once they have seen every producer's final record. */
    for (int i = 0; i < nreaders; i++)
        if (pthread_join(readers[i], NULL))
            DIE("pthread_join");
    uint64_t t_drained = t_mono_ns();
    atomic_store(&g_consumers_done, 1);
    if (pthread_join(mon, NULL))
        DIE("pthread_join");
    /* The producers' counters are final once they say so (acquire). */
    for (uint32_t i = 0; i < NPROD; i++)
        while (!atomic_load_explicit(&g_prod[i].done, memory_order_acquire))
            t_sleep_us(1000);

    /* Snapshot with the rings still open, then let the producers exit. */
    fips_monitor *m = NULL;
    char err[512];
    rc = fips_monitor_open(&m, t_dir, g_name, 0, err, sizeof err);
    if (rc)
        DIE("monitor: %s", err);
    fips_snapshot s = { 0 };
    s.rings = calloc(o.max_rings, sizeof *s.rings);
    s.consumers = calloc(o.max_consumers, sizeof *s.consumers);
    s.pos = calloc((size_t)o.max_rings * o.max_consumers, sizeof *s.pos);
    if (!s.rings || !s.consumers || !s.pos)
        DIE("calloc");
    CHECK_RC(fips_monitor_snapshot(m, &s), 0);

    uint64_t tot_att = 0, tot_com = 0, tot_drop = 0, tot_log = 0, tot_claim = 0, tot_batch = 0;
    for (uint32_t i = 0; i < NPROD; i++) {
        prod_t *p = &g_prod[i];
        CHECK_EQ(p->error, 0);
        int ring = atomic_load(&p->ring);
        if (ring < 0)
            continue;
        tot_att += p->attempts;
        tot_com += p->committed;
        tot_drop += p->dropped;
        tot_log += p->n_log;
        tot_claim += p->n_claim;
        tot_batch += p->n_batch;
        CHECK_EQ(p->committed + p->dropped, p->attempts);
        fips_ring_stat *rs = &s.rings[ring];
        /* the monitor agrees with the producer's own counts */
        CHECK_EQ(rs->state, FIPS_RING_ACTIVE);
        CHECK_EQ(rs->records_committed, p->committed);
        CHECK_EQ(rs->records_dropped, p->dropped);
        /* bytes: committed ones as the consumers saw them; a dropped claim
         * counts its claimed length */
        CHECK_EQ(rs->bytes_committed, g_cons[0].rv[ring].bytes);
        CHECK_EQ(rs->bytes_committed, g_cons[1].rv[ring].bytes);
        CHECK_EQ(rs->bytes_committed + rs->bytes_dropped, p->bytes_total);
        CHECK(rs->full_events <= p->dropped);
        CHECK(rs->high_water_bytes <= CAP);
        CHECK_EQ(rs->reserved, rs->head);
        CHECK(rs->head - rs->floor <= CAP);
        CHECK_EQ(rs->evictions, 0);
        CHECK(strncmp(rs->thread_name, "stress-p", 8) == 0);
        for (int k = 0; k < 3; k++) {
            cons_t *cs = &g_cons[k];
            rview_t *v = &cs->rv[ring];
            if (cs->hold)
                finish_multi(cs, (uint32_t)ring);
            /* seen + lost == attempted, exactly */
            if (v->records + v->lost != p->attempts || v->records != p->committed ||
                v->lost != p->dropped)
                t_fail(__FILE__, __LINE__,
                       "%s ring %d (producer %u): seen %llu + lost %llu != attempts %llu "
                       "(committed %llu, dropped %llu)", cs->name, ring, i,
                       (unsigned long long)v->records, (unsigned long long)v->lost,
                       (unsigned long long)p->attempts, (unsigned long long)p->committed,
                       (unsigned long long)p->dropped);
            atomic_fetch_add(&t_checks, 1);
            CHECK_EQ(v->next_seq, p->committed);
            CHECK_EQ(v->next_pseq, p->attempts);
            int ci = fips_consumer_index(cs->c);
            fips_pos_stat *ps = &s.pos[(size_t)ci * o.max_rings + (uint32_t)ring];
            CHECK_EQ(ps->records_released, v->records);
            CHECK_EQ(ps->lost_seen, v->lost);
            CHECK_EQ(ps->released, rs->head);
            CHECK_EQ(ps->released_seq, p->committed);
        }
    }
    for (int k = 0; k < 3; k++) {
        cons_t *cs = &g_cons[k];
        int ci = fips_consumer_index(cs->c);
        CHECK_EQ(s.consumers[ci].state, FIPS_CONS_ACTIVE);
        CHECK_EQ(s.consumers[ci].records_released, (uint64_t)atomic_load(&cs->records));
        CHECK_EQ(s.consumers[ci].batches_released, (uint64_t)atomic_load(&cs->batches));
        CHECK_EQ(s.consumers[ci].readers, (uint32_t)cs->readers);
        CHECK_EQ((uint64_t)atomic_load(&cs->records), tot_com);
    }

    atomic_store(&g_may_exit, 1);
    for (uint32_t i = 0; i < NPROD; i++)
        if (pthread_join(g_prod[i].th, NULL))
            DIE("pthread_join");
    /* Thread exit closed every ring; the counters stay. */
    CHECK_RC(fips_monitor_snapshot(m, &s), 0);
    for (uint32_t i = 0; i < NPROD; i++) {
        int ring = atomic_load(&g_prod[i].ring);
        if (ring < 0)
            continue;
        CHECK_EQ(s.rings[ring].state, FIPS_RING_CLOSED);
        CHECK(s.rings[ring].closed_ns != 0);
        CHECK_EQ(s.rings[ring].records_committed, g_prod[i].committed);
    }

    double run_s = (double)(t_stop - t0) / 1e9;
    printf("test_stress: %.1f s: %llu attempts (%llu log, %llu claim, %llu batched), "
           "%llu committed (%.0f rec/s), %llu dropped (%.1f%%); drain %.2f s\n",
           run_s, (unsigned long long)tot_att, (unsigned long long)tot_log,
           (unsigned long long)tot_claim, (unsigned long long)tot_batch,
           (unsigned long long)tot_com, (double)tot_com / run_s, (unsigned long long)tot_drop,
           tot_att ? 100.0 * (double)tot_drop / (double)tot_att : 0.0,
           (double)(t_drained - t_stop) / 1e9);
    for (int k = 0; k < 3; k++)
        printf("test_stress: consumer %-10s %ld records in %ld batches (%ld empty)\n",
               g_cons[k].name, atomic_load(&g_cons[k].records), atomic_load(&g_cons[k].batches),
               atomic_load(&g_cons[k].empty_batches));
    printf("test_stress: consumer D-churn    %ld records in %ld sessions (%ld resumed)\n",
           g_churn.records, g_churn.sessions, g_churn.resumes);
    printf("test_stress: monitor %ld snapshots, %ld taps, %ld records tapped, %ld lapped, "
           "%ld tap errors\n", g_mon.snapshots, g_mon.taps, g_mon.tapped, g_mon.lapped,
           g_mon.tap_errors);
    CHECK(tot_drop > 0);        /* the test must really exercise drops */
    CHECK(tot_com > 10000);

    for (int k = 0; k < 3; k++) {
        CHECK_RC(fips_consumer_close(g_cons[k].c), 0);
        for (uint32_t r = 0; r < g_cons[k].nrings; r++) {
            pthread_mutex_destroy(&g_cons[k].rv[r].mu);
            free(g_cons[k].rv[r].b);
        }
        free(g_cons[k].rv);
    }
    fips_monitor_close(m);
    free(s.rings);
    free(s.consumers);
    free(s.pos);
    CHECK_RC(fips_domain_close(g_dom), 0);
    CHECK_RC(fips_domain_unlink(t_dir, g_name), 0);
    t_rmdir();
    return t_report("test_stress");
}
