/*
 * The explorer's scenarios and the invariants checked in every interleaving.
 *
 * Each scenario is one small world: a domain with one or two rings of 4096
 * bytes (four 1000-byte records fill one), two or three consumers, a producer
 * thread or two, a monitor, a clock that can jump past the eviction grace.
 * The parties' operations are listed in each scenario; the explorer runs
 * every interleaving of their accesses (up to equivalence, see explore.h).
 *
 * Ground truth is the harness's own: every payload names its ring and seq and
 * is a function of them, so a consumer or the tap can tell an intact record
 * from an overwritten one; the producer counts what it committed and what it
 * was told was dropped.
 *
 * After every step (check_step):
 *   F   a ring's floor never decreases; head, committed and dropped never
 *       decrease; floor <= head, head - floor <= cap, head <= reserved <=
 *       floor + cap (no byte at or above the floor is ever rewritten).
 *   C   for every consumer that has joined and is ACTIVE: its position never
 *       decreases, floor <= released <= head, and reserved <= released + cap
 *       (the producer never claims bytes a consumer has not released).
 * In every operation:
 *   D   a consumer is never handed overwritten bytes without being told: a
 *       record that does not match the truth makes its release return
 *       -FIPS_ETORN; a read never says ECORRUPT on these healthy rings.
 *   M   a monitor's snapshot keeps floor <= released <= head and
 *       head - floor <= cap, and positions and counters never go backwards
 *       between its snapshots; every record its tap returns is intact.
 * At the end of every execution (finish):
 *   W   the producer is never wedged: after every open consumer has drained
 *       and the clock has passed the grace (dead ones are evicted), a record
 *       is accepted.
 *   A   per consumer still ACTIVE: every committed record since it joined was
 *       delivered exactly once or counted lost (records committed =
 *       consumed + counted lost), and the producer's counters equal what it
 *       was told (committed + dropped = attempts).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "explore.h"
#include "fips.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#define CAP 4096u
#define MAXREC 1000u
#define MAXC 3
#define MAXR 2
#define MAXSEQ 256
#define GRACE_NS 1000000000ull

typedef struct cons {
    const char *name;
    fips_consumer *h;
    int joined;                     /* open() returned and the entry is ours */
    uint32_t gen;
    int idx;
    uint64_t start_seq[MAXR];
    uint64_t last_rel[MAXR];
    unsigned char got[MAXR][MAXSEQ];/* seq delivered (released with success) */
    uint64_t ndeliv[MAXR];
    uint64_t lost_told[MAXR];       /* sum of batch.lost over released batches */
    int evicted;                    /* told EEVICTED / ETORN */
    /* releases that returned 1 (queued behind another reader's batch): they
     * count as delivered only once `released` has passed their start */
    struct prov { uint32_t ring; uint64_t start, lost; int n; uint64_t seqs[16]; } prov[8];
    int nprov;
} cons_t;

static struct world {
    char dir[64];
    fips_domain *d;
    fips_monitor *view;             /* the harness's own read-only view */
    const uint8_t *base;
    struct fips_layout_header h;
    int rings;
    cons_t c[MAXC];
    int ncons;
    fips_monitor *mon;              /* the monitor party's */
    uint64_t truth[MAXR];           /* records committed per ring */
    uint64_t drops[MAXR];           /* EFULL returns per ring */
    uint64_t prev_floor[MAXR], prev_head[MAXR], prev_comm[MAXR], prev_drop[MAXR];
    int producer_party;             /* whose thread logs in finish() */
    /* the monitor party's previous snapshot */
    int have_prev;
    fips_ring_stat mr[MAXR];
    fips_consumer_stat mc[MAXC];
    fips_pos_stat mp[MAXC * MAXR];
} W;

/* ---- truth ----------------------------------------------------------------- */
/* Record lengths: 1000 bytes (four fill a ring), every third 400 bytes when
 * the scenario wants pads at the end of the buffer (with_pads 1), or every
 * fourth from the first (with_pads 2: 400, 1000, 1000, 1000, 400, ...). */
static int with_pads = 1;
static uint32_t rec_len(uint64_t seq)
{
    if (with_pads == 3) return 400; /* every record 400 bytes */
    if (with_pads == 2) return seq % 4 == 0 ? 400 : MAXREC;
    return with_pads && seq % 3 == 2 ? 400 : MAXREC;
}
/* Where seq k lies (in scenarios without shrinking claims), for the check
 * that a snapshot's floor_seq is the seq of the record at its floor. */
static int check_fseq;
static uint64_t seq_pos(uint64_t k)
{
    uint64_t pos = 0;
    for (uint64_t s = 0;; s++) {
        uint64_t need = FIPS_REC_HDR_SIZE + ((rec_len(s) + 7u) & ~7u), to_end = CAP - (pos % CAP);
        if (to_end < need) pos += to_end;
        if (s == k) return pos;
        pos += need;
    }
}
/* the seq a reader must find at position f (the first record at or after it) */
static uint64_t seq_at_pos(uint64_t f, uint64_t committed)
{
    for (uint64_t s = 0; s < committed; s++) if (seq_pos(s) >= f) return s;
    return committed;
}

static void payload(uint8_t *buf, uint32_t ring, uint64_t seq)
{
    uint32_t len = rec_len(seq);
    memcpy(buf, &seq, 8);
    memcpy(buf + 8, &ring, 4);
    for (uint32_t j = 12; j < len; j++) buf[j] = (uint8_t)(seq * 131 + ring * 17 + j);
}

/* Whether a record as read matches what the producer committed at seq. */
static int intact(uint32_t ring, uint64_t seq, const uint8_t *data, uint32_t len)
{
    static uint8_t want[MAXREC];
    if (ring >= MAXR || seq >= W.truth[ring] || len != rec_len(seq)) return 0;
    payload(want, ring, seq);
    return memcmp(want, data, len) == 0;
}

/* ---- views of shared memory (the harness reads; never a scheduling point) -- */
static const struct fips_layout_ring *ring_at(int r)
{
    return (const void *)(W.base + W.h.ring_table_off + (size_t)r * FIPS_RING_CTL_SIZE);
}
static const struct fips_layout_consumer *cons_at(int c)
{
    return (const void *)(W.base + W.h.consumer_table_off + (size_t)c * FIPS_CONSUMER_SIZE);
}
static const struct fips_layout_pos *pos_at(int c, int r)
{
    return (const void *)(W.base + W.h.pos_table_off + ((size_t)c * W.h.max_rings + r) * FIPS_POS_SIZE);
}

static int cons_live(const cons_t *k)
{
    if (!k->h || !k->joined) return 0;
    const struct fips_layout_consumer *e = cons_at(k->idx);
    return e->state == FIPS_CONS_ACTIVE && e->generation == k->gen;
}

/* ---- parties' operations ------------------------------------------------------ */
/* In the -DFIPS_RETRY_TINY build a join may give up (ECORRUPT: the floor did
 * not settle within two tries), a legitimate outcome there, never otherwise. */
#ifdef FIPS_RETRY_TINY
#define JOIN_GAVE_UP(rc) ((rc) == -FIPS_ECORRUPT)
#else
#define JOIN_GAVE_UP(rc) 0
#endif
/* Log one record from the calling thread; returns fips_log's result. */
static int op_log(void)
{
    static uint8_t buf[MAXREC];
    int r = fips_producer_ring(W.d);
    if (r < 0) return r; /* ENORING: no slot yet */
    uint64_t seq = W.truth[r];
    payload(buf, (uint32_t)r, seq);
    int rc = fips_log(W.d, buf, rec_len(seq));
    if (rc == 0) W.truth[r]++;
    else if (rc == -FIPS_EFULL) W.drops[r]++;
    else xp_fail("fips_log -> %d (%s)", rc, fips_strerror(rc));
    return rc;
}

/* Log one record through fips_claim/fips_commit, as the syslog shim does: the
 * claim is for max_record bytes, the caller writes all of them (the shim
 * formats into the claim), and the commit shrinks it to the record's length. */
static int op_claim_log(void)
{
    static uint8_t buf[MAXREC];
    int r = fips_producer_ring(W.d);
    if (r < 0) return r;
    uint64_t seq = W.truth[r];
    fips_slot slot;
    int rc = fips_claim(W.d, MAXREC, &slot);
    if (rc == -FIPS_EFULL) { W.drops[r]++; return rc; }
    if (rc) xp_fail("fips_claim -> %d (%s)", rc, fips_strerror(rc));
    memset(buf, 0xEE, sizeof buf); /* scribble over the whole claim, then the record */
    payload(buf, (uint32_t)r, seq);
    xp_access(slot.data, MAXREC, 2);
    memcpy(slot.data, buf, MAXREC);
    fips_commit(W.d, &slot, rec_len(seq), 0, 0);
    W.truth[r]++;
    return 0;
}

static void mark_joined(cons_t *k, int fresh)
{
    k->joined = 1;
    k->idx = fips_consumer_index(k->h);
    k->gen = cons_at(k->idx)->generation;
    k->evicted = 0;
    for (int r = 0; r < W.rings; r++) {
        const struct fips_layout_pos *p = pos_at(k->idx, r);
        if (fresh) k->start_seq[r] = p->released_seq;
        k->last_rel[r] = p->released;
    }
}

/* Open consumer k by name: a new registration, a resume or a rejoin. */
static int op_open(int k)
{
    cons_t *c = &W.c[k];
    if (c->h) xp_fail("op_open on an open handle");
    int fresh = !c->joined;
    int rc = fips_consumer_open(&c->h, W.d, c->name);
    if (rc) { c->h = NULL; return rc; }
    mark_joined(c, fresh);
    return 0;
}

static void op_close(int k)
{
    cons_t *c = &W.c[k];
    if (!c->h) return;
    fips_consumer_close(c->h);
    c->h = NULL;
    /* A close that lost the race to an eviction (a producer's or an
     * operator's) leaves the entry EVICTED: the next open by name is then a
     * rejoin, which counts what the consumer missed since its last release. */
    const struct fips_layout_consumer *e = cons_at(c->idx);
    if (!(e->state == FIPS_CONS_EVICTED && e->generation == c->gen)) c->joined = 0;
}

static void op_detach(int k) /* a crash: the entry stays */
{
    cons_t *c = &W.c[k];
    if (!c->h) return;
    fips_consumer_detach(c->h);
    c->h = NULL;
}

/* Read one batch (up to max records) and release it, checking D.  Returns
 * 1 if a batch was released, 0 if there was none, or a negative code. */
static int check_release(cons_t *c, fips_batch *bp);
static int op_read(int k, uint32_t max)
{
    cons_t *c = &W.c[k];
    if (!c->h) return 0;
    fips_batch b;
    int rc = fips_consumer_read(c->h, &b, max);
    if (rc == -FIPS_EAGAIN) return 0;
    if (rc == -FIPS_EEVICTED) { c->evicted = 1; return rc; }
    if (rc == -FIPS_ECORRUPT) xp_fail("consumer %s: read says the ring is corrupt", c->name);
    if (rc) xp_fail("consumer %s: read -> %d", c->name, rc);
    return check_release(c, &b);
}

/* Mark seqs delivered to consumer c (once each). */
static void deliver(cons_t *c, uint32_t ring, const uint64_t *seqs, int n, uint64_t lost)
{
    for (int i = 0; i < n; i++) {
        if (seqs[i] >= MAXSEQ) xp_fail("seq %llu out of range", (unsigned long long)seqs[i]);
        if (c->got[ring][seqs[i]])
            xp_fail("consumer %s: ring %u seq %llu delivered twice", c->name, ring, (unsigned long long)seqs[i]);
        c->got[ring][seqs[i]] = 1;
        c->ndeliv[ring]++;
    }
    c->lost_told[ring] += lost;
}

/* Queued releases take effect when `released` passes their start, or never
 * (the consumer was evicted first): decide each (the positions are the
 * consumer's own until it rejoins, so this is final). */
static void resolve_prov(cons_t *c)
{
    for (int i = 0; i < c->nprov; i++) {
        struct prov *q = &c->prov[i];
        if (c->joined && pos_at(c->idx, (int)q->ring)->released > q->start) deliver(c, q->ring, q->seqs, q->n, q->lost);
    }
    c->nprov = 0;
}

/* Walk a batch read by consumer c, release it and check D; returns 1 if it
 * was released or queued, or the negative release code. */
static int check_release(cons_t *c, fips_batch *bp)
{
    fips_batch b = *bp;
    static uint8_t copy[MAXREC];
    uint64_t seqs[16];
    int n = 0, bad = 0;
    fips_record rec;
    while (fips_batch_next(&b, &rec)) {
        uint32_t len = rec.len > MAXREC ? MAXREC : rec.len;
        xp_access(rec.data, len, 1);
        memcpy(copy, rec.data, len);
        if (!intact(b.ring, rec.seq, copy, rec.len)) bad++;
        if (n < 16) seqs[n] = rec.seq;
        n++;
    }
    int rr = fips_consumer_release(c->h, &b);
    if (rr == -FIPS_ETORN) { c->evicted = 1; return rr; }  /* told: discarded */
    if (bad)
        xp_fail("consumer %s: %d of %d records of a batch were overwritten, and release said %d (%s)",
                c->name, bad, n, rr, fips_strerror(rr));
    if (rr == -FIPS_EEVICTED) { c->evicted = 1; return rr; }
    if (rr != 0 && rr != 1) xp_fail("consumer %s: release -> %d", c->name, rr);
    if (n > 16) xp_fail("batch larger than asked");
    if (rr == 0) {
        deliver(c, b.ring, seqs, n, b.lost);
    } else {
        if (c->nprov == 8) xp_fail("too many queued releases");
        struct prov *q = &c->prov[c->nprov++];
        q->ring = b.ring;
        q->start = b.start;
        q->lost = b.lost;
        q->n = n;
        memcpy(q->seqs, seqs, sizeof seqs);
    }
    return 1;
}

/* An evicted consumer does what an application should: close, open again. */
static void op_rejoin_if_evicted(int k)
{
    cons_t *c = &W.c[k];
    if (!c->evicted || !c->h) return;
    resolve_prov(c);
    fips_consumer_close(c->h);
    c->h = NULL;
    int rc = op_open(k);
    if (rc && !JOIN_GAVE_UP(rc)) xp_fail("consumer %s: rejoin -> %d (%s)", c->name, rc, fips_strerror(rc));
}

static void check_snapshot(const fips_snapshot *s)
{
    for (int r = 0; r < W.rings; r++) {
        const fips_ring_stat *x = &s->rings[r];
        if (x->state == FIPS_RING_FREE) continue;
        if (x->floor > x->head || x->head - x->floor > CAP)
            xp_fail("M: snapshot ring %d floor %llu head %llu", r, (unsigned long long)x->floor,
                    (unsigned long long)x->head);
        if (check_fseq && x->floor_seq != seq_at_pos(x->floor, x->records_committed))
            xp_fail("M: snapshot ring %d floor %llu floor_seq %llu, the record there is seq %llu", r,
                    (unsigned long long)x->floor, (unsigned long long)x->floor_seq,
                    (unsigned long long)seq_at_pos(x->floor, x->records_committed));
        for (int c = 0; c < W.ncons; c++) {
            const fips_pos_stat *p = &s->pos[(size_t)c * W.h.max_rings + r];
            if (s->consumers[c].state != FIPS_CONS_ACTIVE) continue;
            if (p->released < x->floor || p->released > x->head)
                xp_fail("M: snapshot consumer %d ring %d released %llu outside floor..head %llu..%llu", c, r,
                        (unsigned long long)p->released, (unsigned long long)x->floor,
                        (unsigned long long)x->head);
            if (W.have_prev && W.mc[c].state == FIPS_CONS_ACTIVE &&
                W.mc[c].generation == s->consumers[c].generation &&
                p->released < W.mp[(size_t)c * W.h.max_rings + r].released)
                xp_fail("M: snapshot consumer %d ring %d position went back", c, r);
        }
        if (W.have_prev && W.mr[r].state != FIPS_RING_FREE &&
            (x->head < W.mr[r].head || x->floor < W.mr[r].floor ||
             x->records_committed < W.mr[r].records_committed || x->records_dropped < W.mr[r].records_dropped))
            xp_fail("M: snapshot ring %d: a position or counter went back", r);
    }
}

static void op_snapshot(void)
{
    fips_ring_stat rs[MAXR];
    fips_consumer_stat cs[MAXC];
    fips_pos_stat ps[MAXC * MAXR];
    fips_snapshot s = {.rings = rs, .consumers = cs, .pos = ps};
    if (W.h.max_rings > MAXR || W.h.max_consumers > MAXC) xp_fail("world too large");
    fips_monitor_snapshot(W.mon, &s);
    check_snapshot(&s);
    memcpy(W.mr, rs, sizeof rs);
    memcpy(W.mc, cs, sizeof cs);
    memcpy(W.mp, ps, sizeof ps);
    W.have_prev = 1;
}

static void op_tap(int ring)
{
    static uint8_t buf[8 * (FIPS_REC_HDR_SIZE + MAXREC + 8)];
    size_t used = 0;
    uint32_t lapped = 0;
    int n = fips_monitor_tap(W.mon, (uint32_t)ring, 8, buf, sizeof buf, &used, &lapped);
    if (n < 0) xp_fail("M: tap -> %d (%s) on a healthy ring", n, fips_strerror(n));
    size_t off = 0;
    uint64_t last = 0;
    for (int i = 0; i < n; i++) {
        struct fips_layout_record h;
        memcpy(&h, buf + off, sizeof h);
        uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
        if (!intact((uint32_t)ring, h.seq, buf + off + FIPS_REC_HDR_SIZE, len))
            xp_fail("M: tap returned an overwritten record (seq %llu)", (unsigned long long)h.seq);
        if (i && h.seq <= last) xp_fail("M: tap records out of order");
        last = h.seq;
        off += FIPS_REC_HDR_SIZE + ((len + 7u) & ~7u);
    }
}

/* ---- setup, checks, finish, teardown (shared by every scenario) ---------------- */
/* The domain file and its handles live across the executions of a scenario:
 * each execution starts from the file zeroed behind its header (as created),
 * every consumer and ring of the last one closed, so the domain handle is as
 * new.  (Creating the file for every execution cost most of the run time.) */
static struct {
    int rings, ncons;
    uint8_t *rw;        /* the harness's writable mapping, for the reset */
    size_t size;
} made;

static void world_setup(int rings, int ncons, const char *const names[], int registered)
{
    if (!W.dir[0]) {
        const char *base = getenv("FIPS_TEST_DIR");
        snprintf(W.dir, sizeof W.dir, "%s/explore.XXXXXX", base && *base ? base : "/dev/shm");
        if (!mkdtemp(W.dir)) { perror("mkdtemp"); exit(2); }
    }
    if (W.d && (made.rings != rings || made.ncons != ncons)) {
        fips_domain_close(W.d);
        fips_monitor_close(W.view);
        fips_monitor_close(W.mon);
        munmap(made.rw, made.size);
        fips_domain_unlink(W.dir, "x");
        W.d = NULL;
    }
    if (!W.d) {
        fips_domain_opts o;
        fips_domain_opts_init(&o);
        o.max_rings = (uint32_t)rings;
        o.max_consumers = (uint32_t)ncons;
        o.ring_capacity = CAP;
        o.max_record = MAXREC;
        o.grace_ns = GRACE_NS;
        o.create = 2;
        char err[256];
        if (fips_domain_open_err(&W.d, W.dir, "x", &o, err, sizeof err) ||
            fips_monitor_open(&W.view, W.dir, "x", 0, err, sizeof err) ||
            fips_monitor_open(&W.mon, W.dir, "x", 0, err, sizeof err)) {
            fprintf(stderr, "explore: %s\n", err);
            exit(2);
        }
        W.base = fips_monitor_mapping(W.view);
        W.h = *fips_monitor_header(W.view);
        char path[128];
        snprintf(path, sizeof path, "%s/fips.x", W.dir);
        int fd = open(path, O_RDWR);
        made.size = (size_t)W.h.file_size;
        made.rw = fd >= 0 ? mmap(NULL, made.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0) close(fd);
        if (made.rw == MAP_FAILED) { perror("mmap"); exit(2); }
        made.rings = rings;
        made.ncons = ncons;
    }
    memset(made.rw + FIPS_HDR_SIZE, 0, made.size - FIPS_HDR_SIZE);
    /* everything but the handles starts afresh */
    memset(W.c, 0, sizeof W.c);
    memset(W.truth, 0, sizeof W.truth);
    memset(W.drops, 0, sizeof W.drops);
    memset(W.prev_floor, 0, sizeof W.prev_floor);
    memset(W.prev_head, 0, sizeof W.prev_head);
    memset(W.prev_comm, 0, sizeof W.prev_comm);
    memset(W.prev_drop, 0, sizeof W.prev_drop);
    W.have_prev = 0;
    check_fseq = 0;
    W.rings = rings;
    W.ncons = ncons;
    for (int k = 0; k < ncons; k++) W.c[k].name = names[k];
    for (int k = 0; k < registered; k++)
        if (op_open(k)) { fprintf(stderr, "explore: setup: open %s failed\n", names[k]); exit(2); }
}

/* Fill ring 0 from party k's thread until it is full (prefill records). */
static void prefill(int party, int records)
{
    xp_as(party);
    for (int i = 0; i < records; i++) op_log();
    xp_as(-1);
}

static void check_step(void)
{
    for (int r = 0; r < W.rings; r++) {
        const struct fips_layout_ring *g = ring_at(r);
        if (g->state == FIPS_RING_FREE) continue;
        uint64_t floor = g->floor, head = g->head, res = g->reserved;
        if (floor < W.prev_floor[r]) xp_fail("F: ring %d floor went back %llu -> %llu", r,
                                             (unsigned long long)W.prev_floor[r], (unsigned long long)floor);
        if (head < W.prev_head[r] || g->records_committed < W.prev_comm[r] || g->records_dropped < W.prev_drop[r])
            xp_fail("F: ring %d head or a counter went back", r);
        if (floor > head || head - floor > CAP || res < head || res > floor + CAP)
            xp_fail("F: ring %d floor %llu head %llu reserved %llu", r, (unsigned long long)floor,
                    (unsigned long long)head, (unsigned long long)res);
        W.prev_floor[r] = floor;
        W.prev_head[r] = head;
        W.prev_comm[r] = g->records_committed;
        W.prev_drop[r] = g->records_dropped;
        for (int k = 0; k < W.ncons; k++) {
            cons_t *c = &W.c[k];
            if (!cons_live(c)) continue;
            uint64_t rel = pos_at(c->idx, r)->released;
            if (rel < c->last_rel[r]) xp_fail("C: consumer %s ring %d position went back", c->name, r);
            if (rel < floor || rel > head)
                xp_fail("C: consumer %s ring %d released %llu outside floor..head %llu..%llu", c->name, r,
                        (unsigned long long)rel, (unsigned long long)floor, (unsigned long long)head);
            if (res > rel + CAP)
                xp_fail("C: ring %d: producer claimed up to %llu over consumer %s's unreleased bytes at %llu",
                        r, (unsigned long long)res, c->name, (unsigned long long)rel);
            c->last_rel[r] = rel;
        }
    }
}

static void drain(int k)
{
    for (int i = 0; i < 200; i++) {
        int rc = op_read(k, 16);
        if (rc == 0 || rc == -FIPS_EEVICTED || rc == -FIPS_ETORN) return;
    }
    xp_fail("consumer %s does not drain", W.c[k].name);
}

static void finish(void)
{
    /* W: drain, let the grace pass (a dead consumer is evicted), log once. */
    for (int k = 0; k < W.ncons; k++) drain(k);
    xp_clock_advance(GRACE_NS + 10000000ull);
    for (int k = 0; k < W.ncons; k++) drain(k);
    xp_as(W.producer_party);
    int rc = op_log();
    xp_as(-1);
    if (rc) xp_fail("W: the producer is wedged: with every consumer drained or evicted, fips_log -> %d (%s)",
                    rc, fips_strerror(rc));
    for (int k = 0; k < W.ncons; k++) drain(k);
    check_step();
    for (int k = 0; k < W.ncons; k++) resolve_prov(&W.c[k]);
    /* A: accounting. */
    for (int r = 0; r < W.rings; r++) {
        const struct fips_layout_ring *g = ring_at(r);
        if (g->state == FIPS_RING_FREE) continue;
        if (g->records_committed != W.truth[r] || g->records_dropped != W.drops[r])
            xp_fail("A: ring %d counts %llu committed / %llu dropped, the producer was told %llu / %llu", r,
                    (unsigned long long)g->records_committed, (unsigned long long)g->records_dropped,
                    (unsigned long long)W.truth[r], (unsigned long long)W.drops[r]);
        for (int k = 0; k < W.ncons; k++) {
            cons_t *c = &W.c[k];
            if (!cons_live(c)) continue;
            const struct fips_layout_pos *p = pos_at(c->idx, r);
            uint64_t gap = p->lost_seen - c->lost_told[r];
            for (uint64_t s = 0; s < W.truth[r] && s < MAXSEQ; s++)
                if (c->got[r][s] && s < c->start_seq[r])
                    xp_fail("A: consumer %s got seq %llu from before it joined", c->name, (unsigned long long)s);
            if (c->ndeliv[r] + gap != W.truth[r] - c->start_seq[r])
                xp_fail("A: consumer %s ring %d: %llu committed since it joined (seq %llu), %llu delivered + "
                        "%llu counted lost", c->name, r, (unsigned long long)(W.truth[r] - c->start_seq[r]),
                        (unsigned long long)c->start_seq[r], (unsigned long long)c->ndeliv[r],
                        (unsigned long long)gap);
        }
    }
}

static void teardown(void)
{
    for (int k = 0; k < W.ncons; k++)
        if (W.c[k].h) fips_consumer_detach(W.c[k].h);
    for (int k = 0; k < XP_MAXP; k++) {
        xp_as(k);
        fips_producer_close(W.d);
    }
    xp_as(-1);
    fips_producer_close(W.d);
}

/* ==== the scenarios ==================================================================== */
static const char *const AB[] = {"A", "B", "C"};

/* 1. A consumer joins while the ring is full (the first race): B registers
 * while A drains and the producer keeps logging. */
static void s1_setup(void)
{
    with_pads = 0; /* four records fill the ring: the fifth after A drains needs a refresh */
    world_setup(1, 2, AB, 1);
    prefill(0, 4);
    W.producer_party = 0;
}
static void s1_prod(int self) { (void)self; for (int i = 0; i < 5; i++) op_log(); }
static void s1_a(int self) { (void)self; op_read(0, 4); }
static void s1_b(int self)
{
    (void)self;
    int rc = op_open(1);
    if (rc && !JOIN_GAVE_UP(rc)) xp_fail("open B -> %d (%s)", rc, fips_strerror(rc));
    op_read(1, 4);
}
static const xp_scenario S1 = {
    "join-while-full", "a consumer joins while the ring is full (J1/J2 vs P5/P6)",
    3, {"producer", "A", "B"}, {s1_prod, s1_a, s1_b}, s1_setup, check_step, finish, teardown};

/* 2. A consumer holds a batch past the grace and is evicted; the producer
 * overwrites what it holds (the second race). */
static void s2_setup(void) { with_pads = 1; world_setup(1, 2, AB, 2); prefill(0, 4); W.producer_party = 0; }
static void s2_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void s2_a(int self) { (void)self; op_read(0, 4); }
static void s2_b(int self) { (void)self; op_read(1, 4); }
static void s2_clock(int self) { (void)self; xp_clock_advance(GRACE_NS + 10000000ull); }
static const xp_scenario S2 = {
    "evict-holding-batch", "a consumer is evicted holding a batch the producer then rewrites (E1/E2)",
    4, {"producer", "A", "B", "clock"}, {s2_prod, s2_a, s2_b, s2_clock}, s2_setup, check_step, finish, teardown};

/* 3. Two reader threads of one consumer claim and release out of order. */
static void s3_setup(void) { with_pads = 1; world_setup(1, 1, AB, 1); prefill(0, 2); W.producer_party = 0; }
static void s3_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void s3_r(int self) { (void)self; for (int i = 0; i < 2; i++) op_read(0, 1); }
static const xp_scenario S3 = {
    "two-readers", "one consumer, two reader threads, releases in and out of order (R1/R2)",
    3, {"producer", "A-reader1", "A-reader2"}, {s3_prod, s3_r, s3_r}, s3_setup, check_step, finish, teardown};

/* 4. A consumer crashes holding a batch and its restart resumes by name. */
static void s4_setup(void) { with_pads = 1; world_setup(1, 2, AB, 2); prefill(0, 3); W.producer_party = 0; }
static void s4_prod(int self) { (void)self; for (int i = 0; i < 3; i++) op_log(); }
static void s4_a(int self)
{
    (void)self;
    fips_batch b;
    if (fips_consumer_read(W.c[0].h, &b, 2) == 0) { /* read, never released */ }
    op_detach(0);
    if (op_open(0)) xp_fail("resume A failed");
    op_read(0, 4);
}
static void s4_b(int self) { (void)self; for (int i = 0; i < 2; i++) op_read(1, 2); }
static const xp_scenario S4 = {
    "crash-resume", "a consumer dies holding a batch and resumes by name (K1)",
    3, {"producer", "A", "B"}, {s4_prod, s4_a, s4_b}, s4_setup, check_step, finish, teardown};

/* 5. A producer thread exits; a new one takes its slot once it is drained. */
static void s5_setup(void) { with_pads = 1; world_setup(1, 1, AB, 1); prefill(0, 2); W.producer_party = 1; }
static void s5_p1(int self) { (void)self; op_log(); fips_producer_close(W.d); }
static void s5_p2(int self)
{
    (void)self;
    for (int i = 0; i < 2; i++) if (op_log() == 0) break;
}
static void s5_a(int self) { (void)self; op_read(0, 4); }
static void s5_mon(int self) { (void)self; op_snapshot(); }
static const xp_scenario S5 = {
    "slot-reuse", "a producer thread exits and a new one reuses the drained slot (P7/S1/S2)",
    4, {"producer1", "producer2", "A", "monitor"}, {s5_p1, s5_p2, s5_a, s5_mon}, s5_setup, check_step, finish,
    teardown};

/* 6. An evicted consumer rejoins by name: nothing twice, every gap counted.
 * (Its eviction leaves no ACTIVE consumer: the ring lets go of what it held.) */
static void s6_setup(void) { with_pads = 1; world_setup(1, 1, AB, 1); prefill(0, 4); W.producer_party = 0; }
static void s6_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void s6_a(int self)
{
    (void)self;
    op_read(0, 2);
    op_rejoin_if_evicted(0);
    op_read(0, 4);
}
static const xp_scenario S6 = {
    "evict-rejoin", "an evicted consumer rejoins by name: no duplicate, every lost record counted",
    3, {"producer", "A", "clock"}, {s6_prod, s6_a, s2_clock}, s6_setup, check_step, finish, teardown};

/* 7. A monitor snapshots and taps while the producer laps a fast consumer. */
static void s7_setup(void) { with_pads = 1; world_setup(1, 1, AB, 1); prefill(0, 3); W.producer_party = 0; }
static void s7_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void s7_a(int self) { (void)self; op_read(0, 2); }
static void s7_mon(int self) { (void)self; op_snapshot(); op_tap(0); op_snapshot(); }
static const xp_scenario S7 = {
    "monitor-tap", "a monitor's snapshot and tap while the producer laps (T1/T2, M1-M3)",
    3, {"producer", "A", "monitor"}, {s7_prod, s7_a, s7_mon}, s7_setup, check_step, finish, teardown};

/* 8. The consumer holding a full ring closes while the producer drops. */
static void s8_setup(void) { with_pads = 1; world_setup(1, 2, AB, 2); prefill(0, 4); W.producer_party = 0; }
static void s8_prod(int self) { (void)self; for (int i = 0; i < 3; i++) op_log(); }
static void s8_a(int self) { (void)self; op_close(0); }
static void s8_b(int self) { (void)self; for (int i = 0; i < 2; i++) op_read(1, 4); }
static const xp_scenario S8 = {
    "close-while-full", "the consumer holding a full ring closes (X1 vs P6)",
    3, {"producer", "A", "B"}, {s8_prod, s8_a, s8_b}, s8_setup, check_step, finish, teardown};

/* 9. While an evicted consumer is still releasing, a third consumer wants a
 * slot and the only candidate is the evicted one's (K2 vs a stale release). */
static void s9_c(int self)
{
    (void)self;
    int rc = op_open(2);
    if (rc == 0) op_read(2, 4);
    else if (rc != -FIPS_ENOCONSUMER && !JOIN_GAVE_UP(rc)) xp_fail("open C -> %d (%s)", rc, fips_strerror(rc));
}
static void s9_setup3(void) { with_pads = 1; world_setup(1, 2, AB, 2); W.ncons = 3; W.c[2].name = "C"; prefill(0, 4); W.producer_party = 0; }
static const xp_scenario S9 = {
    "takeover-vs-release", "a new consumer wants the slot of an evicted one that is still releasing (K2)",
    5, {"producer", "A", "B", "clock", "C"}, {s2_prod, s2_a, s2_b, s2_clock, s9_c}, s9_setup3, check_step, finish,
    teardown};

/* 10. A consumer is evicted holding a batch that a claim then rewrites and a
 * shrinking commit gives back (fips_claim/fips_commit, the shim's path): the
 * release must still say ETORN.  B released the 400-byte seq 0 and holds
 * [416, 3464); the claim for seq 4 (1000 bytes after a pad, [4096, 5112))
 * rewrites [0, 1016) and its commit lowers `reserved` to 4512 = 416 + cap. */
static void s10_setup(void)
{
    with_pads = 2;
    world_setup(1, 1, AB, 1);
    prefill(0, 4);
    xp_as(1);
    if (op_read(0, 1) != 1) { fprintf(stderr, "explore: shrink-commit: setup read failed\n"); exit(2); }
    xp_as(-1);
    W.producer_party = 0;
}
static void s10_prod(int self) { (void)self; op_claim_log(); }
static void s10_a(int self) { (void)self; op_read(0, 3); }
static void s10_mon(int self) { (void)self; op_tap(0); }
static const xp_scenario S10 = {
    "shrink-commit", "a shrinking commit after a claim that rewrote an evicted holder's batch (E2, P1', T2)",
    4, {"producer", "A", "clock", "monitor"}, {s10_prod, s10_a, s2_clock, s10_mon}, s10_setup, check_step, finish,
    teardown};

/* ==== scenarios from the review of issue 14's fixes ============================== */
static void clk_jump(int self) { (void)self; xp_clock_advance(GRACE_NS + 10000000ull); }

/* R1. fips_commit lowers `reserved` (P1') after the claim's bytes were written:
 * an evicted holder's E2 check no longer sees the rewrite.  All records 400 B;
 * A released seq0 (at 416) and reads seq1..; the producer claims 1000 B
 * (pad to 4096, claim up to 5112 > 416 + cap: A is evicted), fills the slot,
 * commits 400 B: reserved = 4512 = 416 + cap. */
static void r1_setup(void)
{
    with_pads = 3;
    world_setup(1, 1, AB, 1);
    prefill(0, 9);                      /* head 3744 */
    xp_as(-1);
    fips_batch b;                       /* A: seq0 read and released */
    if (fips_consumer_read(W.c[0].h, &b, 1) || fips_consumer_release(W.c[0].h, &b)) { fprintf(stderr, "r1 setup\n"); exit(2); }
    W.c[0].ndeliv[0] = 1; W.c[0].got[0][0] = 1;
    W.producer_party = 0;
}
static void r1_prod(int self)
{
    (void)self;
    static uint8_t buf[MAXREC];
    fips_slot s;
    int rc = fips_claim(W.d, 1000, &s);
    if (rc == -FIPS_EFULL) { W.drops[0]++; return; }
    if (rc) xp_fail("claim -> %d", rc);
    xp_access(s.data, 1000, 2);          /* the application fills its whole claim */
    memset(s.data, 0xEE, 1000);
    payload(buf, 0, W.truth[0]);
    memcpy(s.data, buf, 400);
    fips_commit(W.d, &s, 400, 0, 0);     /* ... and commits less */
    W.truth[0]++;
}
static void r1_a(int self) { (void)self; op_read(0, 4); }
static const xp_scenario R1 = {
    "shrink-commit-400", "all records 400 B: a shrinking commit after a rewrite still gives ETORN (E2, P1')",
    3, {"producer", "A", "clock"}, {r1_prod, r1_a, clk_jump}, r1_setup, check_step, finish, teardown};

/* R2. fips_log_batch: refresh_floor inside a batch runs seq_at() with
 * t->head (published) while t->committed already counts the batch's
 * unpublished records: floor_seq is wrong.  Sequential; a snapshot at the end. */
static void r2_setup(void)
{
    with_pads = 0;
    world_setup(1, 1, AB, 1);
    prefill(0, 3);                      /* head 3048, the producer's limit still 0 */
    drain(0);                           /* A released 3048 */
    check_fseq = 1;
    W.producer_party = 0;
}
/* A batch of two MAXREC records into ring 0, counted in the truth; returns
 * how many were logged. */
static int op_batch2(void)
{
    static uint8_t b0[MAXREC], b1[MAXREC];
    const void *bufs[2] = {b0, b1};
    uint32_t lens[2] = {MAXREC, MAXREC};
    payload(b0, 0, W.truth[0]);
    payload(b1, 0, W.truth[0] + 1);
    int n = fips_log_batch(W.d, bufs, lens, 2);
    if (n < 0) xp_fail("batch -> %d", n);
    W.truth[0] += (uint64_t)n;
    W.drops[0] += 2u - (uint64_t)n;
    return n;
}
static void r2_prod(int self) { (void)self; op_batch2(); }
static void r2_finish(void)
{
    /* the stored field itself (other readers of the layout use it), checked
     * here where no party is between the producer's two stores */
    const struct fips_layout_ring *g = ring_at(0);
    if (g->floor_seq != seq_at_pos(g->floor, g->records_committed))
        xp_fail("M: ring 0 floor %llu, stored floor_seq %llu, the record there is seq %llu",
                (unsigned long long)g->floor, (unsigned long long)g->floor_seq,
                (unsigned long long)seq_at_pos(g->floor, g->records_committed));
    op_snapshot();
    finish();
}
static const xp_scenario R2 = {
    "batch-floor-seq", "a floor refresh inside fips_log_batch stores the seq of a published record (seq_at)",
    1, {"producer"}, {r2_prod}, r2_setup, check_step, r2_finish, teardown};

/* R9. fips_log_batch's span: the leading records that fit before the wrap
 * and below the limit are one claim (P1 over the span, P3 once), the rest
 * one at a time.  The first batch is both: one record in the span (it ends
 * the buffer), the next starts a lap and refreshes the floor; the second
 * batch is a span of two.  A consumer reads and a monitor snapshots and taps
 * the records while they are written. */
static void r9_setup(void)
{
    with_pads = 0;
    world_setup(1, 1, AB, 1);
    prefill(0, 3); /* head a record before the buffer end, the producer's limit still 0 */
    drain(0);
    W.producer_party = 0;
}
static void r9_batch(void)
{
    if (op_batch2() == 1)
        xp_fail("batch -> 1: the second record fits whenever the first did (no party frees bytes between)");
}
static void r9_prod(int self) { (void)self; r9_batch(); r9_batch(); }
static void r9_a(int self) { (void)self; op_read(0, 4); }
static void r9_mon(int self) { (void)self; op_tap(0); op_snapshot(); }
static const xp_scenario R9 = {
    "batch-span", "fips_log_batch claims the records that fit in one span (P1, P3) while read and tapped",
    3, {"producer", "A", "monitor"}, {r9_prod, r9_a, r9_mon}, r9_setup, check_step, finish, teardown};

/* R3. monitor-tap with the floor_seq check: floor_seq is stored before floor,
 * and a snapshot that reads floor twice unchanged pairs the old floor with
 * the new floor_seq. */
static void r3_setup(void) { s7_setup(); check_fseq = 1; }
static void r3_mon(int self) { (void)self; op_snapshot(); op_snapshot(); }
static const xp_scenario R3 = {
    "snapshot-floor-seq", "a snapshot's floor_seq is the seq of the record at its floor (T1)",
    3, {"producer", "A", "monitor"}, {s7_prod, s7_a, r3_mon}, r3_setup, check_step, finish, teardown};

/* R4. E1 ABA: the producer loads A's state and stale heartbeat, A closes, B
 * (another name) takes the entry (one slot) with a fresh heartbeat, and the
 * producer's CAS ACTIVE -> EVICTED evicts B. */
static void r4_setup(void)
{
    with_pads = 0;
    world_setup(1, 1, AB, 1);
    W.ncons = 2; W.c[1].name = "B";
    prefill(0, 4);
    xp_clock_advance(GRACE_NS + 10000000ull); /* A's heartbeat is stale */
    W.producer_party = 0;
}
static void r4_prod(int self) { (void)self; op_log(); }
static void r4_a(int self) { (void)self; op_close(0); }
static void r4_b(int self) { (void)self; if (op_open(1) == 0) op_read(1, 4); }
static void r4_finish(void)
{
    const struct fips_layout_consumer *e = cons_at(0);
    if (W.c[1].joined && e->state == FIPS_CONS_EVICTED && e->generation == W.c[1].gen)
        xp_fail("E1: B evicted although its heartbeat is %llu ns old (grace %llu)",
                (unsigned long long)(xp_clock_now() - e->heartbeat_mono_ns), (unsigned long long)GRACE_NS);
    if (!W.c[1].joined) return; /* B found no slot: the ring waits (see last-close-full) */
    finish();
}
static const xp_scenario R4 = {
    "evict-aba", "the producer never evicts an entry's next owner in place of a stale one (E1/G1)",
    3, {"producer", "A", "B"}, {r4_prod, r4_a, r4_b}, r4_setup, check_step, r4_finish, teardown};

/* R5. An out-of-order release is queued and returns 0; the consumer is then
 * evicted and rejoins: the queued (delivered) batch is counted lost too. */
static void r5_setup(void) { with_pads = 1; world_setup(1, 1, AB, 1); prefill(0, 4); W.producer_party = 0; }
static void r5_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void r5_a(int self)
{
    (void)self;
    cons_t *c = &W.c[0];
    fips_batch b1, b2;
    if (fips_consumer_read(c->h, &b1, 1)) return;
    if (fips_consumer_read(c->h, &b2, 1)) return;
    check_release(c, &b2); /* out of order: queued (1), or told of the eviction */
    check_release(c, &b1);
    op_rejoin_if_evicted(0);
    op_read(0, 4);
}
static const xp_scenario R5 = {
    "queued-release-evicted", "a release queued behind an earlier batch, then an eviction: counted once (R2, A)",
    3, {"producer", "A", "clock"}, {r5_prod, r5_a, clk_jump}, r5_setup, check_step, finish, teardown};

/* R6. Two resumers of one name (the entry ACTIVE, its handle gone): K1's
 * generation CAS is meant to elect one. */
static const char *const AA[] = {"A", "A", "C"};
static void r6_setup(void)
{
    with_pads = 1;
    world_setup(1, 2, AA, 1);
    prefill(0, 3);
    op_detach(0);                        /* entry ACTIVE, no handle open */
    W.producer_party = 0;
}
static int r6_ok[2];
static void r6_x(int self) { (void)self; r6_ok[0] = op_open(0) == 0; if (r6_ok[0]) op_read(0, 2); }
static void r6_y(int self) { (void)self; r6_ok[1] = op_open(1) == 0; if (r6_ok[1]) op_read(1, 2); }
static void r6_finish(void)
{
    if (r6_ok[0] && r6_ok[1]) xp_fail("K1: both resumers of consumer A succeeded (entry %d, %d)", W.c[0].idx, W.c[1].idx);
    finish();
}
static void r6_teardown(void) { r6_ok[0] = r6_ok[1] = 0; teardown(); }
static const xp_scenario R6 = {
    "double-resume", "two resumers of one name: exactly one wins (K1a/K1b)",
    3, {"producer", "X", "Y"}, {s7_prod, r6_x, r6_y}, r6_setup, check_step, r6_finish, r6_teardown};

static void r7_setup(void)
{
    with_pads = 3;
    world_setup(1, 1, AB, 1);
    prefill(0, 9);                      /* head 3816 */
    if (op_read(0, 2) != 1) { fprintf(stderr, "r7 setup\n"); exit(2); }
    prefill(0, 1);                      /* seq9 at 4096: a refresh raises the floor to 848 */
    W.producer_party = 0;
}
static void r7_mon(int self) { (void)self; op_tap(0); }
static const xp_scenario R7 = {
    "shrink-commit-tap", "the tap never returns a record a shrinking commit rewrote (T2)",
    3, {"producer", "monitor", "clock"}, {r1_prod, r7_mon, clk_jump}, r7_setup, check_step, finish, teardown};

static void r8_setup(void) { with_pads = 0; world_setup(1, 1, AB, 1); prefill(0, 4); W.producer_party = 0; }
static const xp_scenario R8 = {
    "last-close-full", "the last consumer closes while the ring is full: logging goes on (A4)",
    2, {"producer", "A"}, {r4_prod, r4_a}, r8_setup, check_step, finish, teardown};

/* Layout 4: a consumer reads head from its own copy until the records before
 * it run out (claim_batch).  A takes one record a read, so its second and
 * third reads come from the copy, while it is evicted and the producer
 * rewrites what the copy still covers: each read is still intact or told
 * (EEVICTED / ETORN, D), and the records after the copy are delivered once
 * the copy is used up (A).  two-readers covers the copy shared by two reader
 * threads (under claim_lock). */
static void c1_setup(void) { with_pads = 1; world_setup(1, 2, AB, 2); prefill(0, 3); W.producer_party = 0; }
static void c1_prod(int self) { (void)self; for (int i = 0; i < 2; i++) op_log(); }
static void c1_a(int self) { (void)self; for (int i = 0; i < 3; i++) op_read(0, 1); }
static void c1_b(int self) { (void)self; op_read(1, 4); }
static const xp_scenario C1 = {
    "cached-head", "a consumer reads from its copy of head while evicted and overwritten (C1 cached)",
    4, {"producer", "A", "B", "clock"}, {c1_prod, c1_a, c1_b, s2_clock}, c1_setup, check_step, finish, teardown};

/* An operator evicts a consumer (fips_consumer_evict, the dashboard's evict
 * action) that heartbeats but holds a full ring, while it reads and the
 * producer waits to rewrite what it holds: the same E1 as a producer's, by a
 * party that rewrites nothing itself.  No clock party: no producer evicts, so
 * every eviction here is the operator's.  D: a batch rewritten after the
 * eviction is told ETORN; W: logging goes on; A: the rejoin counts the gap. */
static uint32_t op_idx, op_gen;
static int op_rc = 1;
static void op_evict(int self)
{
    (void)self;
    op_rc = fips_consumer_evict(W.d, op_idx, op_gen);
    if (op_rc != 0 && op_rc != -ESRCH) xp_fail("fips_consumer_evict -> %d (%s)", op_rc, fips_strerror(op_rc));
}
static void o1_setup(void)
{
    with_pads = 1;
    world_setup(1, 2, AB, 2);
    prefill(0, 4); /* full: the producer needs A's and B's bytes */
    W.producer_party = 0;
    op_idx = (uint32_t)W.c[0].idx;
    op_gen = W.c[0].gen;
}
static void o1_a(int self)
{
    (void)self;
    op_read(0, 2);
    op_rejoin_if_evicted(0);
    op_read(0, 4);
}
static void o1_finish(void)
{
    if (op_rc != 0) xp_fail("the operator's eviction of A (ACTIVE, generation %u) -> %d", op_gen, op_rc);
    finish();
}
static void o_teardown(void) { op_rc = 1; teardown(); }
static const xp_scenario O1 = {
    "operator-evict", "an operator evicts a reading consumer that holds a full ring (E1 by a third party, E2)",
    4, {"producer", "A", "B", "operator"}, {s2_prod, o1_a, s2_b, op_evict}, o1_setup, check_step, o1_finish,
    o_teardown};

/* The consumer the operator saw closes and a new one takes the entry (a
 * restart) before the operator's eviction lands: the new one is not evicted
 * in its place (the generation), and the eviction says ESRCH instead. */
static void o2_a(int self)
{
    (void)self;
    op_close(0);
    int rc = op_open(0);
    if (rc && !JOIN_GAVE_UP(rc)) xp_fail("reopen A -> %d (%s)", rc, fips_strerror(rc));
    op_read(0, 4);
}
static void o2_finish(void)
{
    const cons_t *a = &W.c[0];
    if (a->h && a->joined && a->gen != op_gen && !cons_live(a))
        xp_fail("A's new registration (generation %u) was evicted by an eviction meant for generation %u (rc %d)",
                a->gen, op_gen, op_rc);
    if (op_rc == 1) xp_fail("the operator never ran");
    finish();
}
static void o2_prod(int self) { (void)self; op_log(); }
static const xp_scenario O2 = {
    "operator-evict-stale", "an operator's eviction meets a consumer restarted in the same entry (generation)",
    4, {"producer", "A", "B", "operator"}, {o2_prod, o2_a, s2_b, op_evict}, o1_setup, check_step, o2_finish,
    o_teardown};

const xp_scenario *const xp_scenarios[] = {&S1, &S2, &S3, &S4, &S5, &S6, &S7, &S8, &S9, &S10,
                                           &R1, &R2, &R3, &R4, &R5, &R6, &R7, &R8, &R9, &C1, &O1, &O2, NULL};
