/*
 * Unit tests of the libfips C API (fips.h), one function per behaviour.
 *
 * Every test makes its own domain (fresh name) in a private directory, so
 * tests are independent and a failure names exactly one behaviour.  The
 * main thread produces into its own ring; tests that need several rings or
 * a thread exit start threads.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "testutil.h"

/* ---- helpers -------------------------------------------------------------- */

static int g_name_counter;

/* A fresh domain name per call: tests never see each other's files.  The
 * result lives in one of 16 rotating buffers (a test uses a handful). */
static const char *fresh_name(const char *tag)
{
    static char bufs[16][FIPS_NAME_MAX];
    char *buf = bufs[g_name_counter % 16];
    snprintf(buf, FIPS_NAME_MAX, "%s-%d", tag, ++g_name_counter);
    return buf;
}

/* Open (must create) a domain with the given sizes; 0 keeps the default. */
static fips_domain *dom_open(const char *name, uint64_t cap, uint32_t max_record,
                             uint64_t grace_ns, uint32_t max_rings)
{
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;   /* names are fresh; create=2 itself is tested in t_open_create */
    o.max_rings = max_rings ? max_rings : 8;  /* small files: tests make many */
    o.max_consumers = 8;
    o.ring_capacity = cap ? cap : 4096;
    o.max_record = max_record ? max_record : 1000;
    if (grace_ns)
        o.grace_ns = grace_ns;
    fips_domain *d = NULL;
    int rc = fips_domain_open(&d, t_dir, name, &o);
    if (rc != 0) {
        t_fail(__FILE__, __LINE__, "fips_domain_open(%s) -> %d (%s)", name, rc, t_errname(rc));
        return NULL;
    }
    return d;
}

static void dom_close(fips_domain *d, const char *name)
{
    CHECK_RC(fips_domain_close(d), 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
}

static fips_consumer *cons_open(fips_domain *d, const char *name)
{
    fips_consumer *c = NULL;
    int rc = fips_consumer_open(&c, d, name);
    if (rc != 0) {
        t_fail(__FILE__, __LINE__, "fips_consumer_open(%s) -> %d (%s)", name, rc, t_errname(rc));
        return NULL;
    }
    return c;
}

/* Deterministic payload bytes for record `k`, so any record can be checked
 * without keeping a copy of what was logged. */
static void fill(uint8_t *buf, uint32_t len, uint64_t k)
{
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(k * 131u + i * 7u + 1u);
}

static int matches(const void *data, uint32_t len, uint64_t k)
{
    const uint8_t *b = data;
    for (uint32_t i = 0; i < len; i++)
        if (b[i] != (uint8_t)(k * 131u + i * 7u + 1u))
            return 0;
    return 1;
}

/* A read-only monitor with snapshot arrays sized from its header. */
typedef struct {
    fips_monitor *m;
    fips_snapshot s;
    uint32_t nr, nc;
} snap_t;

static int snap_open(snap_t *sn, const char *name)
{
    memset(sn, 0, sizeof *sn);
    char err[512] = "";
    int rc = fips_monitor_open(&sn->m, t_dir, name, 0, err, sizeof err);
    if (rc != 0) {
        t_fail(__FILE__, __LINE__, "fips_monitor_open(%s) -> %d: %s", name, rc, err);
        return rc;
    }
    const struct fips_layout_header *h = fips_monitor_header(sn->m);
    sn->nr = h->max_rings;
    sn->nc = h->max_consumers;
    sn->s.rings = calloc(sn->nr, sizeof *sn->s.rings);
    sn->s.consumers = calloc(sn->nc, sizeof *sn->s.consumers);
    sn->s.pos = calloc((size_t)sn->nr * sn->nc, sizeof *sn->s.pos);
    if (!sn->s.rings || !sn->s.consumers || !sn->s.pos)
        DIE("calloc");
    return 0;
}

static int snap_take(snap_t *sn)
{
    int rc = fips_monitor_snapshot(sn->m, &sn->s);
    CHECK_RC(rc, 0);
    CHECK_EQ(sn->s.n_rings, sn->nr);
    CHECK_EQ(sn->s.n_consumers, sn->nc);
    return rc;
}

static void snap_close(snap_t *sn)
{
    if (sn->m)
        CHECK_RC(fips_monitor_close(sn->m), 0);
    free(sn->s.rings);
    free(sn->s.consumers);
    free(sn->s.pos);
    memset(sn, 0, sizeof *sn);
}

#define RING(sn, r) (&(sn)->s.rings[(r)])
#define CONS(sn, c) (&(sn)->s.consumers[(c)])
#define POS(sn, c, r) (&(sn)->s.pos[(size_t)(c) * (sn)->nr + (r)])

/* Records collected by drain(): enough of each to check order and content. */
typedef struct {
    uint32_t ring, len, flags, lost, ok;
    uint64_t seq, ts;
} got_t;

typedef struct {
    got_t *v;
    size_t n, cap;
} gotv_t;

static void gotv_push(gotv_t *g, const fips_record *r, uint32_t ring, int ok)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        g->v = realloc(g->v, g->cap * sizeof *g->v);
        if (!g->v)
            DIE("realloc");
    }
    g->v[g->n++] = (got_t){ ring, r->len, r->flags, r->lost, (uint32_t)ok, r->seq, r->ts_ns };
}

/* Read and release until -FIPS_EAGAIN.  Checks every batch's summary fields
 * against its records, and each payload against fill(seq + seed). */
static int drain(fips_consumer *c, uint32_t max, gotv_t *g, uint64_t seed)
{
    for (;;) {
        fips_batch b;
        int rc = fips_consumer_read(c, &b, max);
        if (rc == -FIPS_EAGAIN)
            return 0;
        if (rc != 0)
            return rc;
        fips_record r;
        uint32_t n = 0;
        uint64_t lost = 0, first = 0, last = 0;
        while (fips_batch_next(&b, &r) == 1) {
            if (n == 0)
                first = r.seq;
            last = r.seq;
            lost += r.lost;
            n++;
            CHECK((r.flags & FIPS_REC_PAD) == 0); /* pads are never handed out */
            if (g)
                gotv_push(g, &r, b.ring, matches(r.data, r.len, r.seq + seed));
        }
        CHECK(n <= max);
        CHECK_EQ(n, b.count);
        CHECK_EQ(lost, b.lost);
        if (n) {
            CHECK_EQ(first, b.first_seq);
            CHECK_EQ(last + 1, b.next_seq);
        }
        CHECK_RC(fips_consumer_release(c, &b), 0);
    }
}

/* Thread helper: run fn(arg) on a new thread and join it. */
static void run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, fn, arg);
    if (rc)
        DIE("pthread_create: %s", strerror(rc));
    rc = pthread_join(t, NULL);
    if (rc)
        DIE("pthread_join: %s", strerror(rc));
}

/* ---- tests ------------------------------------------------------------------ */

static void t_open_create(void)
{
    /* fips_shm_dir: argument, then $FIPS_SHM_DIR, then /dev/shm. */
    CHECK(strcmp(fips_shm_dir("/x/y"), "/x/y") == 0);
    const char *old = getenv("FIPS_SHM_DIR");
    char *saved = old ? strdup(old) : NULL;
    REQUIRE(setenv("FIPS_SHM_DIR", t_dir, 1) == 0);
    CHECK(strcmp(fips_shm_dir(NULL), t_dir) == 0);
    REQUIRE(unsetenv("FIPS_SHM_DIR") == 0);
    CHECK(strcmp(fips_shm_dir(NULL), "/dev/shm") == 0);
    REQUIRE(setenv("FIPS_SHM_DIR", t_dir, 1) == 0);

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    CHECK_EQ(o.max_rings, 256);
    CHECK_EQ(o.max_consumers, 16);
    CHECK_EQ(o.ring_capacity, 1u << 20);
    CHECK_EQ(o.max_record, 4096);
    CHECK_EQ(o.grace_ns, 5000000000ull);
    CHECK_EQ(o.mode, 0640);
    CHECK(o.gid == -1);
    CHECK_EQ(o.block_us, 0);

    /* Open via $FIPS_SHM_DIR (shm_dir NULL), small sizes. */
    const char *name = fresh_name("hdr");
    o.max_rings = 4;
    o.ring_capacity = 8192;
    o.max_record = 512;
    o.create = 2;   /* must create: succeeds on a fresh name */
    fips_domain *d = NULL;
    int rc2 = fips_domain_open(&d, NULL, name, &o);
    CHECK_RC(rc2, 0);
    if (rc2 != 0) {   /* go on with the rest of the test */
        o.create = 0;
        REQUIRE_RC(fips_domain_open(&d, NULL, name, &o), 0);
        o.create = 2;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/fips.%s", t_dir, name);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_EQ(st.st_mode & 07777, 0640); /* default mode, whatever the umask */
    CHECK_EQ(st.st_uid, geteuid());

    const struct fips_layout_header *h = fips_domain_header(d);
    CHECK_EQ(h->magic, FIPS_MAGIC);
    CHECK_EQ(h->version, FIPS_LAYOUT_VERSION);
    CHECK_EQ(h->hdr_size, FIPS_HDR_SIZE);
    CHECK_EQ(h->file_size, (uint64_t)st.st_size);
    CHECK_EQ(h->max_rings, 4);
    CHECK_EQ(h->max_consumers, 16);
    CHECK_EQ(h->ring_capacity, 8192);
    CHECK_EQ(h->max_record, 512);
    CHECK_EQ(h->ready, 1);
    CHECK_EQ(h->creator_pid, (uint32_t)getpid());
    CHECK_EQ(h->grace_ns, 5000000000ull);
    CHECK(strcmp(h->name, name) == 0);
    CHECK(h->data_off % 4096 == 0);           /* data is page aligned */
    CHECK(h->ring_table_off >= FIPS_HDR_SIZE);
    CHECK(h->data_off + 4ull * 8192 <= h->file_size);
    uint64_t now = fips_now_ns();
    CHECK(h->created_realtime_ns <= now && now - h->created_realtime_ns < 60000000000ull);

    /* create=2 on an existing domain fails; create=0 opens it. */
    fips_domain *d2 = NULL;
    CHECK_RC(fips_domain_open(&d2, t_dir, name, &o), -EEXIST);
    CHECK(d2 == NULL);
    o.create = 0;
    REQUIRE_RC(fips_domain_open(&d2, t_dir, name, &o), 0);
    CHECK_EQ(fips_domain_header(d2)->file_size, h->file_size);
    CHECK_RC(fips_domain_close(d2), 0);

    /* create=0 on a missing domain: -ENOENT, nothing created. */
    const char *missing = fresh_name("missing");
    CHECK_RC(fips_domain_open(&d2, t_dir, missing, &o), -ENOENT);
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/fips.%s", t_dir, missing);
    CHECK(access(mpath, F_OK) != 0);

    /* An explicit mode is honoured despite the umask. */
    const char *n600 = fresh_name("mode");
    o.create = 1;
    o.mode = 0600;
    mode_t um = umask(0077);
    REQUIRE_RC(fips_domain_open(&d2, t_dir, n600, &o), 0);
    umask(um);
    snprintf(mpath, sizeof mpath, "%s/fips.%s", t_dir, n600);
    REQUIRE(stat(mpath, &st) == 0);
    CHECK_EQ(st.st_mode & 07777, 0600);
    dom_close(d2, n600);

    /* Impossible sizes are refused at creation. */
    fips_domain_opts_init(&o);
    o.create = 2;
    o.ring_capacity = 5000; /* not a power of two */
    CHECK(fips_domain_open(&d2, t_dir, fresh_name("bad"), &o) < 0);
    o.ring_capacity = 2048; /* below FIPS_MIN_CAPACITY */
    CHECK(fips_domain_open(&d2, t_dir, fresh_name("bad"), &o) < 0);
    fips_domain_opts_init(&o);
    o.create = 2;
    o.max_rings = 0;
    CHECK(fips_domain_open(&d2, t_dir, fresh_name("bad"), &o) < 0);

    /* Names cannot escape the directory or be hidden/overlong. */
    fips_domain_opts_init(&o);
    o.max_rings = 2;
    o.ring_capacity = 4096;
    o.max_record = 256;
    const char *bad_names[] = { "", "../evil", "a/b", ".hidden", "x\n",
        "0123456789012345678901234567890123456789012345678901234567890123456789" };
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        d2 = NULL;
        int rc = fips_domain_open(&d2, t_dir, bad_names[i], &o);
        CHECK(rc < 0);
        if (rc == 0)
            fips_domain_close(d2);
    }
    char evil[512];
    snprintf(evil, sizeof evil, "%s/../fips.evil", t_dir);
    CHECK(access(evil, F_OK) != 0);

    /* Unlink removes the file; the mapping stays usable. */
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
    CHECK(access(path, F_OK) != 0);
    CHECK_RC(fips_domain_unlink(t_dir, name), -ENOENT);
    CHECK_RC(fips_log(d, "after unlink", 12), 0);
    CHECK_RC(fips_domain_close(d), 0);

    if (saved) {
        setenv("FIPS_SHM_DIR", saved, 1);
        free(saved);
    } else {
        unsetenv("FIPS_SHM_DIR");
    }
}

static void t_roundtrip(void)
{
    const char *name = fresh_name("rt");
    fips_domain *d = dom_open(name, 8192, 512, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "reader");
    REQUIRE(c);
    int ring = fips_producer_ring(d);
    REQUIRE(ring >= 0);
    CHECK_EQ(fips_producer_ring(d), (unsigned)ring); /* stable per thread */

    uint64_t t0 = fips_now_ns();
    uint8_t buf[512];
    for (uint64_t k = 0; k < 20; k++) {
        uint32_t len = (uint32_t)(k * 17 % 300);
        fill(buf, len, k);
        CHECK_RC(fips_log(d, buf, len), 0);
    }
    /* claim/commit, with a shrinking commit and an explicit timestamp */
    fips_slot cl;
    REQUIRE_RC(fips_claim(d, 200, &cl), 0);
    CHECK_EQ(cl.ring, (unsigned)ring);
    CHECK_EQ(cl.len, 200);
    CHECK(cl.data != NULL);
    fill(cl.data, 37, 20);
    fips_commit(d, &cl, 37, 0x30u /* user flags */, 123456789ull);
    /* fips_log_trunc with an explicit timestamp, not truncated */
    fill(buf, 5, 21);
    int rc = fips_log_trunc(d, buf, 5, 987654321ull);
    CHECK(rc == 0);
    uint64_t t1 = fips_now_ns();

    gotv_t g = { 0 };
    CHECK_RC(drain(c, 7, &g, 0), 0);
    REQUIRE(g.n == 22);
    for (size_t i = 0; i < g.n; i++) {
        got_t *r = &g.v[i];
        CHECK_EQ(r->ring, (unsigned)ring);
        CHECK_EQ(r->seq, i);      /* consecutive from 0 */
        CHECK_EQ(r->lost, 0);
        CHECK(r->ok);
        if (i < 20) {
            CHECK_EQ(r->len, i * 17 % 300);
            CHECK_EQ(r->flags, 0);
            CHECK(r->ts >= t0 && r->ts <= t1); /* ts taken at commit */
        }
    }
    CHECK_EQ(g.v[20].len, 37);
    CHECK_EQ(g.v[20].flags, 0x30u); /* user bits survive, slack bits hidden */
    CHECK_EQ(g.v[20].ts, 123456789ull);
    CHECK_EQ(g.v[21].len, 5);
    CHECK_EQ(g.v[21].ts, 987654321ull);
    free(g.v);

    /* nothing left */
    fips_batch b;
    CHECK_RC(fips_consumer_read(c, &b, 10), -FIPS_EAGAIN);

    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    fips_ring_stat *rs = RING(&sn, ring);
    CHECK_EQ(rs->state, FIPS_RING_ACTIVE);
    CHECK_EQ(rs->records_committed, 22);
    CHECK_EQ(rs->records_dropped, 0);
    CHECK_EQ(rs->pid, (uint32_t)getpid());
    CHECK(rs->tid != 0);
    CHECK(rs->created_ns >= t0 - 1000000000ull);
    CHECK_EQ(rs->closed_ns, 0);
    CHECK(rs->reserved == rs->head);
    int ci = fips_consumer_index(c);
    REQUIRE(ci >= 0 && (uint32_t)ci < sn.nc);
    fips_pos_stat *ps = POS(&sn, ci, ring);
    CHECK_EQ(ps->released, rs->head);
    CHECK_EQ(ps->released_seq, 22);
    CHECK_EQ(ps->records_released, 22);
    CHECK_EQ(ps->lost_seen, 0);
    CHECK_EQ(CONS(&sn, ci)->records_released, 22);
    CHECK_EQ(CONS(&sn, ci)->state, FIPS_CONS_ACTIVE);
    CHECK_EQ(CONS(&sn, ci)->pid, (uint32_t)getpid());
    CHECK(strcmp(CONS(&sn, ci)->name, "reader") == 0);
    snap_close(&sn);

    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

static void t_zero_len_and_max(void)
{
    const char *name = fresh_name("len");
    fips_domain *d = dom_open(name, 8192, 256, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    uint8_t buf[600];
    CHECK_RC(fips_log(d, buf, 0), 0);                 /* zero-length record */
    fill(buf, 256, 1);
    CHECK_RC(fips_log(d, buf, 256), 0);               /* exactly max_record */
    CHECK_RC(fips_log(d, buf, 257), -FIPS_ETOOBIG);   /* one more: refused */
    fips_slot cl;
    CHECK_RC(fips_claim(d, 257, &cl), -FIPS_ETOOBIG);
    CHECK_RC(fips_claim(d, 0, &cl), 0);               /* zero-length claim */
    fips_commit(d, &cl, 0, 0, 0);
    /* fips_log_trunc: cut to max_record and flagged */
    fill(buf, 600, 3);
    int rc = fips_log_trunc(d, buf, 600, 0);
    CHECK(rc == 0 || rc == 1);

    gotv_t g = { 0 };
    CHECK_RC(drain(c, 100, &g, 0), 0);
    REQUIRE(g.n == 4);
    CHECK_EQ(g.v[0].len, 0);
    CHECK_EQ(g.v[0].flags, 0);
    CHECK_EQ(g.v[1].len, 256);
    CHECK(g.v[1].ok);
    CHECK_EQ(g.v[2].len, 0);
    CHECK_EQ(g.v[3].len, 256);
    CHECK_EQ(g.v[3].flags & FIPS_REC_TRUNC, FIPS_REC_TRUNC);
    CHECK(g.v[3].ok);   /* fill(.., seq 3) == the first 256 bytes logged */
    free(g.v);

    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    CHECK_EQ(RING(&sn, ring)->records_truncated, 1);
    CHECK_EQ(RING(&sn, ring)->records_committed, 4);
    CHECK_EQ(RING(&sn, ring)->bytes_committed, 512);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 0);   /* ETOOBIG is not a drop */
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* Many laps of a 4 KiB ring with odd record sizes: pads at the end of the
 * buffer, records split never, content always intact. */
/* fips_log copies 16..64-byte payloads inline with overlapping 16-byte moves
 * and 65..128-byte ones with two overlapping 64-byte copies (copy_payload),
 * everything else through memcpy: every length from 0 to
 * max_record arrives intact, from a buffer of exactly that size (ASan sees a
 * read past its end), and no byte past the record's stride is written (a
 * byte past the claim may belong to a record of the previous lap that a slow
 * consumer is still reading).  The ring never wraps here, so every byte past
 * head is still the zero the file was created with. */
static void t_every_length(void)
{
    const char *name = fresh_name("lens");
    fips_domain *d = dom_open(name, 65536, 256, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    int ring = fips_producer_ring(d);
    REQUIRE(ring >= 0);
    char path[512];
    snprintf(path, sizeof path, "%s/fips.%s", t_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct stat st;
    REQUIRE(fstat(fd, &st) == 0);
    const uint8_t *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(map != MAP_FAILED);
    const struct fips_layout_header *h = (const void *)map;
    const uint8_t *data = map + h->data_off + (uint64_t)ring * h->ring_capacity;
    uint64_t pos = 0;
    for (uint32_t len = 0; len <= 256; len++) {
        uint8_t *buf = malloc(len ? len : 1);
        REQUIRE(buf);
        fill(buf, len, len); /* record `len` has seq `len` */
        CHECK_RC(fips_log(d, buf, len), 0);
        free(buf);
        const struct fips_layout_record *r = (const void *)(data + pos);
        CHECK_EQ(r->len_flags & FIPS_REC_LEN_MASK, len);
        CHECK_EQ(r->seq, len);
        CHECK(matches(data + pos + FIPS_REC_HDR_SIZE, len, len));
        pos += FIPS_REC_HDR_SIZE + ((len + 7u) & ~7u);
        int clean = 1;
        for (uint64_t i = pos; i < pos + 128 && i < h->ring_capacity; i++) clean &= data[i] == 0;
        if (!clean) t_fail(__FILE__, __LINE__, "a record of %u bytes wrote past its end", len);
    }
    REQUIRE(pos + 128 < h->ring_capacity); /* the ring did not wrap */
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 1000, &g, 0), 0);
    REQUIRE(g.n == 257);
    for (uint32_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].len, i);
        CHECK(g.v[i].ok);
    }
    free(g.v);
    munmap((void *)map, (size_t)st.st_size);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

static void t_wraparound(void)
{
    const char *name = fresh_name("wrap");
    fips_domain *d = dom_open(name, 4096, 1000, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    uint8_t buf[1000];
    uint64_t logged = 0, bytes = 0, seen = 0;
    uint64_t rnd = 42;
    gotv_t g = { 0 };
    while (bytes < 80ull * 4096) {
        uint32_t k = 1 + (uint32_t)(t_rand(&rnd) % 2);  /* 1-2 records per round */
        for (uint32_t i = 0; i < k; i++) {
            uint32_t len = (uint32_t)(t_rand(&rnd) % 1000) | 1u; /* odd, 1..999 */
            fill(buf, len, logged);
            int rc;
            if (logged % 3 == 0) {
                fips_slot cl;
                rc = fips_claim(d, len, &cl);
                if (rc == 0) {
                    memcpy(cl.data, buf, len);
                    fips_commit(d, &cl, len, 0, 0);
                }
            } else {
                rc = fips_log(d, buf, len);
            }
            CHECK_RC(rc, 0);
            if (rc)
                goto out;
            logged++;
            bytes += FIPS_REC_HDR_SIZE + len;
        }
        g.n = 0;
        CHECK_RC(drain(c, (uint32_t)(1 + t_rand(&rnd) % 3), &g, 0), 0);
        for (size_t i = 0; i < g.n; i++) {
            CHECK_EQ(g.v[i].seq, seen);
            CHECK(g.v[i].ok);
            CHECK_EQ(g.v[i].lost, 0);
            seen++;
        }
        if (seen != logged) {
            CHECK_EQ(seen, logged);
            goto out;
        }
    }
out:
    free(g.v);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    fips_ring_stat *rs = RING(&sn, ring);
    CHECK_EQ(rs->records_committed, logged);
    CHECK_EQ(rs->records_dropped, 0);
    CHECK(rs->head > 60ull * 4096);          /* really many laps */
    CHECK(rs->high_water_bytes <= 4096);
    CHECK_EQ(POS(&sn, fips_consumer_index(c), ring)->released, rs->head);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* A full ring drops (never overwrites), counts, and reports the loss in the
 * next record that gets through. */
static void t_drop_on_full(void)
{
    const char *name = fresh_name("full");
    fips_domain *d = dom_open(name, 4096, 1000, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    uint8_t buf[100];
    uint64_t ok = 0;
    int rc;
    for (;;) {
        fill(buf, 100, ok);
        rc = fips_log(d, buf, 100);
        if (rc != 0)
            break;
        ok++;
        REQUIRE(ok < 1000);
    }
    CHECK_RC(rc, -FIPS_EFULL);
    CHECK(ok >= 4096 / 128 - 1 && ok <= 4096 / 128);
    /* 5 more drops: log, claim, batch(2), trunc */
    CHECK_RC(fips_log(d, buf, 100), -FIPS_EFULL);
    fips_slot cl;
    CHECK_RC(fips_claim(d, 100, &cl), -FIPS_EFULL);
    const void *bufs[2] = { buf, buf };
    uint32_t lens[2] = { 100, 100 };
    CHECK_RC(fips_log_batch(d, bufs, lens, 2), 0);
    CHECK_RC(fips_log_trunc(d, buf, 100, 0), -FIPS_EFULL);
    /* total dropped: 1 + 1 + 1 + 2 + 1 = 6 records, 600 bytes; 5 calls */

    int ring = fips_producer_ring(d);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    fips_ring_stat *rs = RING(&sn, ring);
    CHECK_EQ(rs->records_committed, ok);
    CHECK_EQ(rs->records_dropped, 6);
    CHECK_EQ(rs->bytes_dropped, 600);
    CHECK_EQ(rs->full_events, 5); /* one per call that met the full ring */
    CHECK(rs->high_water_bytes > 4096 - 128 && rs->high_water_bytes <= 4096);
    CHECK(rs->head - rs->floor <= 4096);

    /* Nothing was overwritten: the consumer gets all `ok` records intact. */
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 1000, &g, 0), 0);
    CHECK_EQ(g.n, ok);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].seq, i);
        CHECK(g.v[i].ok);
        CHECK_EQ(g.v[i].lost, 0);
    }
    /* The next record carries lost = 6. */
    fill(buf, 100, ok);
    CHECK_RC(fips_log(d, buf, 100), 0);
    g.n = 0;
    CHECK_RC(drain(c, 1000, &g, 0), 0);
    REQUIRE(g.n == 1);
    CHECK_EQ(g.v[0].lost, 6);
    CHECK_EQ(g.v[0].seq, ok); /* seq counts committed records only */
    CHECK(g.v[0].ok);
    free(g.v);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, fips_consumer_index(c), ring)->lost_seen, 6);
    CHECK_EQ(POS(&sn, fips_consumer_index(c), ring)->records_released, ok + 1);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 6);
    CHECK_EQ(RING(&sn, ring)->records_committed, ok + 1);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* fips_log_batch over many laps: the records that fit before the wrap go in
 * one span, the rest one at a time (the pad at the end of the buffer, the
 * floor refresh); every record arrives once, in order, intact, with its seq,
 * whatever the batch's split.  Lengths vary so the span ends everywhere. */
static void t_batch_laps(void)
{
    const char *name = fresh_name("blaps");
    fips_domain *d = dom_open(name, 4096, 300, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    static uint8_t store[7][300];
    const void *bufs[7];
    uint32_t lens[7];
    uint64_t seq = 0, total = 0;
    gotv_t g = { 0 };
    for (int b = 0; b < 400; b++) {
        for (int i = 0; i < 7; i++) {
            lens[i] = (uint32_t)((b * 7 + i) * 37 % 301);
            fill(store[i], lens[i], seq + (uint64_t)i);
            bufs[i] = store[i];
        }
        CHECK_RC(fips_log_batch(d, bufs, lens, 7), 7); /* 7 x at most 328 bytes: always fits a drained ring */
        seq += 7;
        for (int i = 0; i < 7; i++) total += 24u + ((lens[i] + 7u) & ~7u);
        CHECK_RC(drain(c, 1000, &g, 0), 0);
    }
    CHECK(total > 20 * 4096); /* many laps */
    REQUIRE(g.n == seq);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].seq, i);
        CHECK_EQ(g.v[i].len, (uint32_t)(i * 37 % 301));
        CHECK(g.v[i].ok);
        CHECK_EQ(g.v[i].lost, 0);
    }
    free(g.v);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* A record too long for the domain inside a batch ends the span: it is
 * dropped and counted, the records around it are logged, and the one after
 * it says one record was lost. */
static void t_batch_oversize(void)
{
    const char *name = fresh_name("boversize");
    fips_domain *d = dom_open(name, 4096, 200, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    static uint8_t store[3][300];
    fill(store[0], 50, 0);
    fill(store[2], 50, 1);
    const void *bufs[3] = { store[0], store[1], store[2] };
    uint32_t lens[3] = { 50, 201, 50 };
    CHECK_RC(fips_log_batch(d, bufs, lens, 3), 2);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    CHECK_EQ(RING(&sn, ring)->records_committed, 2);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 1);
    CHECK_EQ(RING(&sn, ring)->bytes_dropped, 201);
    snap_close(&sn);
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 100, &g, 0), 0);
    REQUIRE(g.n == 2);
    CHECK_EQ(g.v[0].seq, 0);
    CHECK_EQ(g.v[0].lost, 0);
    CHECK(g.v[0].ok);
    CHECK_EQ(g.v[1].seq, 1);
    CHECK_EQ(g.v[1].lost, 1);
    CHECK(g.v[1].ok);
    free(g.v);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

static void t_batch_log(void)
{
    const char *name = fresh_name("batch");
    fips_domain *d = dom_open(name, 4096, 1000, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "r");
    REQUIRE(c);
    uint8_t store[10][200];
    const void *bufs[10];
    uint32_t lens[10];
    for (int i = 0; i < 10; i++) {
        lens[i] = (uint32_t)(i * 13);
        fill(store[i], 200, (uint64_t)i);
        bufs[i] = store[i];
    }
    CHECK_RC(fips_log_batch(d, bufs, lens, 10), 10);
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 100, &g, 0), 0);
    REQUIRE(g.n == 10);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(g.v[i].seq, i);
        CHECK_EQ(g.v[i].len, lens[i]);
        CHECK(g.v[i].ok);
    }
    /* A batch into a nearly full ring: what fits is logged, the rest is
     * dropped, counted, and reported as lost in the next record. */
    uint8_t big[900];
    fill(big, 900, 0);
    int k = 0;
    while (fips_log(d, big, 900) == 0)   /* fill; the failing call drops 1 */
        k++;
    g.n = 0;
    CHECK_RC(drain(c, 100, &g, 0), 0);   /* the consumer frees everything */
    CHECK_EQ(g.n, (size_t)k);
    for (int i = 0; i < 10; i++)
        lens[i] = 190;
    /* 3 x (24 + 904) = 2784 used, 1312 left: room for about 6 x 216. */
    for (int i = 0; i < 3; i++)
        CHECK_RC(fips_log(d, big, 900), 0);
    int n = fips_log_batch(d, bufs, lens, 10);
    CHECK(n > 0 && n < 10);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 1 + (uint64_t)(10 - n));
    CHECK_EQ(RING(&sn, ring)->bytes_dropped, 900 + 190ull * (uint64_t)(10 - n));
    CHECK_EQ(RING(&sn, ring)->full_events, 2);  /* one per call */
    g.n = 0;
    CHECK_RC(drain(c, 100, &g, 0), 0);
    REQUIRE(g.n == 3 + (size_t)n);
    CHECK_EQ(g.v[0].lost, 1);
    /* The records of a batch are consecutive and carry no loss among them. */
    for (size_t i = 3; i < g.n; i++) {
        CHECK_EQ(g.v[i].len, 190);
        CHECK_EQ(g.v[i].lost, 0);
        CHECK_EQ(g.v[i].seq, g.v[i - 1].seq + 1);
    }
    /* The next record reports the batch's dropped tail. */
    CHECK_RC(fips_log(d, big, 10), 0);
    g.n = 0;
    CHECK_RC(drain(c, 100, &g, 0), 0);
    REQUIRE(g.n == 1);
    CHECK_EQ(g.v[0].lost, (uint64_t)(10 - n));
    free(g.v);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

static void t_two_consumers(void)
{
    const char *name = fresh_name("two");
    fips_domain *d = dom_open(name, 8192, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *a = cons_open(d, "a"), *b = cons_open(d, "b");
    REQUIRE(a && b);
    CHECK(fips_consumer_index(a) != fips_consumer_index(b));
    uint8_t buf[64];
    for (uint64_t k = 0; k < 64; k++) {
        fill(buf, 64, k);
        CHECK_RC(fips_log(d, buf, 64), 0);
    }
    gotv_t ga = { 0 }, gb = { 0 };
    CHECK_RC(drain(a, 3, &ga, 0), 0);
    CHECK_EQ(ga.n, 64);
    /* b has not read: its position is independent of a's */
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    CHECK_EQ(POS(&sn, fips_consumer_index(a), ring)->records_released, 64);
    CHECK_EQ(POS(&sn, fips_consumer_index(b), ring)->records_released, 0);
    CHECK_EQ(POS(&sn, fips_consumer_index(b), ring)->released, 0);
    /* b holds all 64 records (64 x 88 bytes): the ring's high-water mark,
     * sampled every 64th commit, must have seen that fill although the
     * ring never got full. */
    CHECK_EQ(RING(&sn, ring)->head - RING(&sn, ring)->floor, 64 * 88);
    CHECK(RING(&sn, ring)->high_water_bytes >= 64 * 88);
    CHECK_RC(drain(b, 64, &gb, 0), 0);
    CHECK_EQ(gb.n, 64);
    for (size_t i = 0; i < 64 && i < ga.n && i < gb.n; i++) {
        CHECK_EQ(ga.v[i].seq, i);
        CHECK_EQ(gb.v[i].seq, i);
        CHECK(ga.v[i].ok && gb.v[i].ok);
    }
    /* A consumer name is unique: a second open of "a" from this process
     * takes the entry over (resume), it does not create a second one. */
    free(ga.v);
    free(gb.v);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(a), 0);
    CHECK_RC(fips_consumer_close(b), 0);
    dom_close(d, name);
}

/* A consumer that joins late starts at the ring's floor. */
/* An operator evicts a consumer that heartbeats but never reads, holding a
 * full ring (fips_consumer_evict, the dashboard's evict action): only the
 * generation it saw, once; producers stop waiting for it; the consumer is
 * told at its next read and its rejoin by name counts what it missed. */
static void t_operator_evict(void)
{
    const char *name = fresh_name("opevict");
    fips_domain *d = dom_open(name, 4096, 100, 3600ull * 1000000000ull, 0); /* grace 1 h: no producer evicts */
    REQUIRE(d);
    fips_consumer *stuck = cons_open(d, "stuck");
    REQUIRE(stuck);
    uint8_t buf[100];
    uint64_t k = 0;
    for (;; k++) {
        fill(buf, 100, k);
        if (fips_log(d, buf, 100) != 0) break;
    }
    uint64_t kept = k;
    fips_consumer_heartbeat(stuck);
    fill(buf, 100, k);
    CHECK_RC(fips_log(d, buf, 100), -FIPS_EFULL); /* held by a live consumer */
    snap_t sn;
    REQUIRE_RC(snap_open(&sn, name), 0);
    snap_take(&sn);
    uint32_t idx = (uint32_t)fips_consumer_index(stuck);
    uint32_t gen = sn.s.consumers[idx].generation;
    CHECK_RC(fips_consumer_evict(d, sn.nc, gen), -EINVAL);
    CHECK_RC(fips_consumer_evict(d, idx, gen + 1), -ESRCH); /* not the one we saw */
    CHECK_EQ(sn.s.consumers[idx].state, FIPS_CONS_ACTIVE);
    CHECK_RC(fips_consumer_evict(d, idx, gen), 0);
    CHECK_RC(fips_consumer_evict(d, idx, gen), -ESRCH); /* once */
    snap_take(&sn);
    CHECK_EQ(sn.s.consumers[idx].state, FIPS_CONS_EVICTED);
    CHECK_EQ(sn.s.consumers[idx].evicted_by_ring, FIPS_EVICTED_BY_OPERATOR);
    CHECK(sn.s.consumers[idx].evicted_ns > 0);
    /* nobody ACTIVE is left and one was here: the ring lets go (A4) */
    fill(buf, 100, k);
    CHECK_RC(fips_log(d, buf, 100), 0);
    k++;
    fips_batch b;
    CHECK_RC(fips_consumer_read(stuck, &b, 16), -FIPS_EEVICTED);
    CHECK_RC(fips_consumer_close(stuck), 0);
    for (uint64_t j = 0; j < kept; j++) { /* overwrite what it held */
        fill(buf, 100, k);
        if (fips_log(d, buf, 100) == 0) k++;
    }
    fips_consumer *again = cons_open(d, "stuck"); /* rejoin by name */
    REQUIRE(again);
    gotv_t g = {0};
    CHECK_RC(drain(again, 1000, &g, 0), 0);
    uint64_t told = 0; /* lost reported in the batches (also in lost_seen) */
    for (uint32_t i = 0; i < g.n; i++) told += g.v[i].lost;
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    REQUIRE(ring >= 0);
    uint64_t lost = POS(&sn, fips_consumer_index(again), ring)->lost_seen;
    /* every record since it first joined: read or counted lost (the rejoin's gap) */
    CHECK_EQ(g.n + lost - told, k);
    CHECK(lost >= kept);
    free(g.v);
    CHECK_RC(fips_consumer_close(again), 0);
    snap_close(&sn);
    dom_close(d, name);
}

static void t_late_join(void)
{
    const char *name = fresh_name("late");
    fips_domain *d = dom_open(name, 4096, 1000, 0, 0);
    REQUIRE(d);
    int ring = fips_producer_ring(d);
    REQUIRE(ring >= 0);
    uint8_t buf[100];
    /* No consumer yet: records are kept for the first consumer (floor 0). */
    for (uint64_t k = 0; k < 10; k++) {
        fill(buf, 100, k);
        CHECK_RC(fips_log(d, buf, 100), 0);
    }
    fips_consumer *a = cons_open(d, "a");
    REQUIRE(a);
    gotv_t g = { 0 };
    CHECK_RC(drain(a, 4, &g, 0), 0);
    CHECK_EQ(g.n, 10);
    if (g.n)
        CHECK_EQ(g.v[0].seq, 0);
    /* Fill, drain, and fill again so the producer moves its floor. */
    uint64_t k = 10;
    for (int lap = 0; lap < 3; lap++) {
        for (;;) {
            fill(buf, 100, k);
            if (fips_log(d, buf, 100) != 0)
                break;
            k++;
        }
        g.n = 0;
        CHECK_RC(drain(a, 1000, &g, 0), 0);
    }
    for (int i = 0; i < 5; i++, k++) {
        fill(buf, 100, k);
        CHECK_RC(fips_log(d, buf, 100), 0);
    }
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    fips_ring_stat rs = *RING(&sn, ring);
    CHECK(rs.floor > 0);
    CHECK(rs.floor_seq > 10);
    CHECK(rs.floor_seq < k);
    /* b joins now: it starts at the floor and sees floor_seq .. k-1. */
    fips_consumer *b = cons_open(d, "b");
    REQUIRE(b);
    snap_take(&sn);
    fips_pos_stat *pb = POS(&sn, fips_consumer_index(b), ring);
    CHECK_EQ(pb->released, rs.floor);
    CHECK_EQ(pb->released_seq, rs.floor_seq);
    g.n = 0;
    CHECK_RC(drain(b, 7, &g, 0), 0);
    CHECK_EQ(g.n, k - rs.floor_seq);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].seq, rs.floor_seq + i);
        CHECK(g.v[i].ok);
    }
    free(g.v);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(a), 0);
    CHECK_RC(fips_consumer_close(b), 0);
    dom_close(d, name);
}

/* Releases out of order: the released position waits for the oldest batch. */
static void t_out_of_order_release(void)
{
    const char *name = fresh_name("ooo");
    fips_domain *d = dom_open(name, 8192, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    int ring = fips_producer_ring(d);
    uint8_t buf[40];
    for (uint64_t k = 0; k < 12; k++) {
        fill(buf, 40, k);
        CHECK_RC(fips_log(d, buf, 40), 0);
    }
    fips_batch b1, b2, b3, b4;
    REQUIRE_RC(fips_consumer_read(c, &b1, 2), 0);
    REQUIRE_RC(fips_consumer_read(c, &b2, 3), 0);
    REQUIRE_RC(fips_consumer_read(c, &b3, 5), 0);
    REQUIRE_RC(fips_consumer_read(c, &b4, 100), 0);
    CHECK_EQ(b1.count, 2);
    CHECK_EQ(b2.count, 3);
    CHECK_EQ(b3.count, 5);
    CHECK_EQ(b4.count, 2);
    CHECK_EQ(b1.first_seq, 0);
    CHECK_EQ(b2.first_seq, 2);
    CHECK_EQ(b3.first_seq, 5);
    CHECK_EQ(b4.first_seq, 10);
    CHECK_EQ(b1.end, b2.start);
    CHECK_EQ(b2.end, b3.start);
    CHECK_EQ(b3.end, b4.start);
    fips_batch none;
    CHECK_RC(fips_consumer_read(c, &none, 10), -FIPS_EAGAIN);

    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    int ci = fips_consumer_index(c);
    /* release 2 before 1: nothing moves, and the release says so (queued) */
    CHECK_RC(fips_consumer_release(c, &b2), 1);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, ci, ring)->released, b1.start);
    CHECK_EQ(POS(&sn, ci, ring)->released_seq, 0);
    CHECK_EQ(POS(&sn, ci, ring)->records_released, 0);
    /* release 4: still nothing */
    CHECK_RC(fips_consumer_release(c, &b4), 1);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, ci, ring)->released, b1.start);
    /* release 1: jumps past 1 and 2 (3 still held) */
    CHECK_RC(fips_consumer_release(c, &b1), 0);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, ci, ring)->released, b2.end);
    CHECK_EQ(POS(&sn, ci, ring)->released_seq, 5);
    CHECK_EQ(POS(&sn, ci, ring)->records_released, 5);
    /* release 3: jumps past 3 and 4 */
    CHECK_RC(fips_consumer_release(c, &b3), 0);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, ci, ring)->released, b4.end);
    CHECK_EQ(POS(&sn, ci, ring)->released_seq, 12);
    CHECK_EQ(POS(&sn, ci, ring)->records_released, 12);
    CHECK_EQ(POS(&sn, ci, ring)->released, RING(&sn, ring)->head);
    CHECK_EQ(CONS(&sn, ci)->batches_released, 4);
    CHECK_EQ(CONS(&sn, ci)->records_released, 12);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* A closed consumer no longer holds space; the other consumer still does. */
static void t_consumer_close_frees(void)
{
    const char *name = fresh_name("cclose");
    fips_domain *d = dom_open(name, 4096, 1000, 0, 0);
    REQUIRE(d);
    fips_consumer *slow = cons_open(d, "slow"), *fast = cons_open(d, "fast");
    REQUIRE(slow && fast);
    uint8_t buf[100];
    int n = 0;
    while (fips_log(d, buf, 100) == 0)
        n++;
    CHECK(n > 10);
    CHECK_RC(drain(fast, 1000, NULL, 0), 0);
    CHECK_RC(fips_log(d, buf, 100), -FIPS_EFULL);     /* slow holds it */
    int si = fips_consumer_index(slow);
    CHECK_RC(fips_consumer_close(slow), 0);
    CHECK_RC(fips_log(d, buf, 100), 0);               /* space reused */
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    CHECK_EQ(CONS(&sn, si)->state, FIPS_CONS_CLOSED);
    CHECK_EQ(RING(&sn, fips_producer_ring(d))->evictions, 0);
    snap_close(&sn);
    /* The closed slot is reused by the next registration. */
    fips_consumer *again = cons_open(d, "again");
    REQUIRE(again);
    CHECK_EQ(fips_consumer_index(again), (unsigned)si);
    CHECK_RC(fips_consumer_close(again), 0);
    CHECK_RC(fips_consumer_close(fast), 0);
    dom_close(d, name);
}

/* Detach (as a crash would) and open again under the same name: resume
 * from the released position; claimed-but-unreleased records come again. */
static void t_resume(void)
{
    const char *name = fresh_name("resume");
    fips_domain *d = dom_open(name, 8192, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "phoenix");
    REQUIRE(c);
    int ci = fips_consumer_index(c);
    uint8_t buf[40];
    for (uint64_t k = 0; k < 10; k++) {
        fill(buf, 40, k);
        CHECK_RC(fips_log(d, buf, 40), 0);
    }
    fips_batch b1, b2;
    REQUIRE_RC(fips_consumer_read(c, &b1, 4), 0);
    CHECK_RC(fips_consumer_release(c, &b1), 0);
    REQUIRE_RC(fips_consumer_read(c, &b2, 3), 0);  /* claimed, not released */
    CHECK_EQ(b2.first_seq, 4);

    /* Another live process cannot take the name (fork: a different pid). */
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fips_domain_opts o;
        fips_domain_opts_init(&o);
        o.create = 0;
        fips_domain *cd = NULL;
        int rc = fips_domain_open(&cd, t_dir, name, &o);
        if (rc)
            _exit(10);
        fips_consumer *cc = NULL;
        rc = fips_consumer_open(&cc, cd, "phoenix");
        _exit(rc == -FIPS_EBUSY ? 0 : 11);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    uint32_t gen0 = CONS(&sn, ci)->generation;
    CHECK_EQ(CONS(&sn, ci)->resumes, 0);

    CHECK_RC(fips_consumer_detach(c), 0);
    snap_take(&sn);
    CHECK_EQ(CONS(&sn, ci)->state, FIPS_CONS_ACTIVE); /* detach unregisters nothing */

    fips_consumer *c2 = cons_open(d, "phoenix");
    REQUIRE(c2);
    CHECK_EQ(fips_consumer_index(c2), (unsigned)ci);
    snap_take(&sn);
    CHECK_EQ(CONS(&sn, ci)->resumes, 1);
    CHECK(CONS(&sn, ci)->generation != gen0);
    gotv_t g = { 0 };
    CHECK_RC(drain(c2, 100, &g, 0), 0);
    CHECK_EQ(g.n, 6);               /* 4..9: nothing lost, 4..6 again */
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].seq, 4 + i);
        CHECK(g.v[i].ok);
    }
    free(g.v);
    snap_take(&sn);
    CHECK_EQ(POS(&sn, ci, fips_producer_ring(d))->records_released, 10);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c2), 0);
    dom_close(d, name);
}

/* A consumer that stops heartbeating is evicted once it holds a full ring
 * past the grace period; one that heartbeats is not. */
static void t_eviction(void)
{
    const char *name = fresh_name("evict");
    fips_domain *d = dom_open(name, 4096, 1000, 200000000ull /* 200 ms */, 0);
    REQUIRE(d);
    fips_consumer *dead = cons_open(d, "dead"), *live = cons_open(d, "live");
    REQUIRE(dead && live);
    int ring = fips_producer_ring(d);
    uint8_t buf[100];
    while (fips_log(d, buf, 100) == 0)
        ;
    CHECK_RC(drain(live, 1000, NULL, 0), 0);
    /* Within the grace period: a drop, no eviction. */
    CHECK_RC(fips_log(d, buf, 100), -FIPS_EFULL);
    t_sleep_us(300000);
    /* "dead" still heartbeats: keep it alive and check that it survives. */
    fips_consumer_heartbeat(dead);
    fips_consumer_heartbeat(live);
    CHECK_RC(fips_log(d, buf, 100), -FIPS_EFULL);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, ring)->evictions, 0);
    CHECK_EQ(CONS(&sn, fips_consumer_index(dead))->state, FIPS_CONS_ACTIVE);
    /* Now it stops; "live" keeps heartbeating. */
    t_sleep_us(150000);
    fips_consumer_heartbeat(live);
    t_sleep_us(150000);
    fips_consumer_heartbeat(live);
    uint64_t before = fips_now_ns();
    CHECK_RC(fips_log(d, buf, 100), 0);   /* evicts "dead", then fits */
    snap_take(&sn);
    int di = fips_consumer_index(dead);
    CHECK_EQ(RING(&sn, ring)->evictions, 1);
    CHECK_EQ(CONS(&sn, di)->state, FIPS_CONS_EVICTED);
    CHECK_EQ(CONS(&sn, di)->evicted_by_ring, (unsigned)ring);
    CHECK(CONS(&sn, di)->evicted_ns >= before);
    CHECK_EQ(CONS(&sn, fips_consumer_index(live))->state, FIPS_CONS_ACTIVE);
    fips_batch b;
    CHECK_RC(fips_consumer_read(dead, &b, 10), -FIPS_EEVICTED);
    /* "live" still gets every record: the 1 new one, lost = 3 drops. */
    gotv_t g = { 0 };
    CHECK_RC(drain(live, 100, &g, 0), 0);
    CHECK_EQ(g.n, 1);
    if (g.n)
        CHECK_EQ(g.v[0].lost, 3);
    free(g.v);
    /* The evicted name can register again (fresh, at the floor). */
    CHECK_RC(fips_consumer_detach(dead), 0);
    fips_consumer *back = cons_open(d, "dead");
    REQUIRE(back);
    snap_take(&sn);
    CHECK_EQ(CONS(&sn, fips_consumer_index(back))->state, FIPS_CONS_ACTIVE);
    CHECK_RC(drain(back, 100, NULL, 0), 0);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(back), 0);
    CHECK_RC(fips_consumer_close(live), 0);
    dom_close(d, name);
}

struct thr_arg {
    fips_domain *d;
    const char *tname;
    int nrec;
    int ring;
    int rc;
    pid_t tid;
};

static void *thr_log(void *p)
{
    struct thr_arg *a = p;
    a->tid = gettid();
    a->ring = fips_producer_ring(a->d);
    if (a->ring < 0) {
        a->rc = a->ring;
        return NULL;
    }
    if (a->tname)
        fips_producer_set_name(a->d, a->tname);
    uint8_t buf[64];
    for (int i = 0; i < a->nrec; i++) {
        fill(buf, 64, (uint64_t)i);
        int rc = fips_log(a->d, buf, 64);
        if (rc) {
            a->rc = rc;
            return NULL;
        }
    }
    a->rc = 0;
    return NULL;   /* thread exit closes the ring */
}

static void t_thread_exit_closes(void)
{
    const char *name = fresh_name("texit");
    fips_domain *d = dom_open(name, 4096, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    struct thr_arg a = { d, "worker-1", 3, -1, -1, 0 };
    uint64_t t0 = fips_now_ns();
    run_thread(thr_log, &a);
    CHECK_RC(a.rc, 0);
    REQUIRE(a.ring >= 0);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    fips_ring_stat *rs = RING(&sn, a.ring);
    CHECK_EQ(rs->state, FIPS_RING_CLOSED);
    CHECK(rs->closed_ns >= t0 && rs->closed_ns >= rs->created_ns);
    CHECK_EQ(rs->pid, (uint32_t)getpid());
    CHECK_EQ(rs->tid, (uint32_t)a.tid);
    CHECK(strcmp(rs->thread_name, "worker-1") == 0);
    CHECK_EQ(rs->records_committed, 3);
    CHECK(rs->last_commit_ns >= t0);
    /* A closed ring is still read to its end. */
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 100, &g, 0), 0);
    CHECK_EQ(g.n, 3);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].ring, (unsigned)a.ring);
        CHECK(g.v[i].ok);
    }
    free(g.v);

    /* fips_producer_close() closes the calling thread's ring now; the next
     * record opens a ring again. */
    int mine = fips_producer_ring(d);
    REQUIRE(mine >= 0);
    CHECK_RC(fips_log(d, "x", 1), 0);
    fips_producer_close(d);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, mine)->state, FIPS_RING_CLOSED);
    CHECK_RC(fips_log(d, "y", 1), 0);
    int again = fips_producer_ring(d);
    REQUIRE(again >= 0);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, again)->state, FIPS_RING_ACTIVE);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* With one ring slot: a closed ring is reused only once every consumer has
 * drained it; the generation then bumps and seq continues. */
static void t_slot_reuse(void)
{
    const char *name = fresh_name("reuse");
    fips_domain *d = dom_open(name, 4096, 500, 0, 1);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    struct thr_arg a = { d, "first", 5, -1, -1, 0 };
    run_thread(thr_log, &a);
    CHECK_RC(a.rc, 0);
    CHECK_EQ(a.ring, 0);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    uint32_t gen0 = RING(&sn, 0)->generation;
    CHECK_EQ(RING(&sn, 0)->state, FIPS_RING_CLOSED);
    /* Not drained yet: no slot for a new producer. */
    struct thr_arg b = { d, "second", 3, -1, -1, 0 };
    run_thread(thr_log, &b);
    CHECK_RC(b.rc, -FIPS_ENORING);
    /* Drain, then the slot is reused. */
    gotv_t g = { 0 };
    CHECK_RC(drain(c, 100, &g, 0), 0);
    CHECK_EQ(g.n, 5);
    for (size_t i = 0; i < g.n; i++)
        CHECK(g.v[i].ok);
    struct thr_arg e = { d, "third", 3, -1, -1, 0 };
    run_thread(thr_log, &e);
    CHECK_RC(e.rc, 0);
    CHECK_EQ(e.ring, 0);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, 0)->generation, gen0 + 1);
    CHECK(strcmp(RING(&sn, 0)->thread_name, "third") == 0);
    CHECK_EQ(RING(&sn, 0)->tid, (uint32_t)e.tid);
    g.n = 0;
    /* the thread filled its records with k = 0, 1, 2; their seq is 5, 6, 7 */
    CHECK_RC(drain(c, 100, &g, (uint64_t)-5), 0);
    CHECK_EQ(g.n, 3);
    for (size_t i = 0; i < g.n; i++) {
        CHECK_EQ(g.v[i].seq, 5 + i);     /* seq continues across generations */
        CHECK(g.v[i].ok);
    }
    free(g.v);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* The snapshot reports exactly the counters the producers and consumers
 * know they caused. */
static void *thr_log_drop(void *p)
{
    struct thr_arg *a = p;
    a->ring = fips_producer_ring(a->d);
    uint8_t buf[200];
    int ok = 0, dropped = 0;
    for (int i = 0; i < a->nrec; i++) {
        int rc = fips_log(a->d, buf, 200);
        if (rc == 0)
            ok++;
        else if (rc == -FIPS_EFULL)
            dropped++;
        else {
            a->rc = rc;
            return NULL;
        }
    }
    a->rc = ok * 10000 + dropped;   /* packed: both fit */
    return NULL;
}

static void t_monitor_snapshot(void)
{
    const char *name = fresh_name("snap");
    fips_domain *d = dom_open(name, 4096, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *c1 = cons_open(d, "one"), *c2 = cons_open(d, "two");
    REQUIRE(c1 && c2);
    struct thr_arg a = { d, NULL, 40, -1, -1, 0 };   /* 40 x 224 > 4096: drops */
    run_thread(thr_log_drop, &a);
    REQUIRE(a.rc >= 0);
    int ok = a.rc / 10000, dropped = a.rc % 10000;
    CHECK_EQ(ok + dropped, 40);
    CHECK(dropped > 0);
    CHECK_RC(drain(c1, 4, NULL, 0), 0);
    CHECK_RC(drain(c2, 100, NULL, 0), 0);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    CHECK(sn.s.taken_realtime_ns > 0 && sn.s.taken_mono_ns > 0);
    fips_ring_stat *rs = RING(&sn, a.ring);
    CHECK_EQ(rs->index, (unsigned)a.ring);
    CHECK_EQ(rs->records_committed, ok);
    CHECK_EQ(rs->bytes_committed, 200ull * ok);
    CHECK_EQ(rs->records_dropped, dropped);
    CHECK_EQ(rs->bytes_dropped, 200ull * dropped);
    CHECK_EQ(rs->full_events, dropped);
    CHECK_EQ(rs->state, FIPS_RING_CLOSED);
    for (int k = 0; k < 2; k++) {
        fips_consumer *c = k ? c2 : c1;
        int ci = fips_consumer_index(c);
        CHECK_EQ(CONS(&sn, ci)->index, (unsigned)ci);
        CHECK_EQ(CONS(&sn, ci)->state, FIPS_CONS_ACTIVE);
        CHECK_EQ(CONS(&sn, ci)->records_released, ok);
        CHECK_EQ(POS(&sn, ci, a.ring)->records_released, ok);
        CHECK_EQ(POS(&sn, ci, a.ring)->released, rs->head);
        CHECK_EQ(POS(&sn, ci, a.ring)->released_seq, ok);
        CHECK(CONS(&sn, ci)->registered_ns > 0);
        CHECK(CONS(&sn, ci)->heartbeat_mono_ns > 0);
    }
    CHECK(strcmp(CONS(&sn, fips_consumer_index(c1))->name, "one") == 0);
    CHECK(CONS(&sn, fips_consumer_index(c1))->batches_released >= (uint64_t)(ok + 3) / 4);
    /* Unused slots are reported FREE. */
    for (uint32_t r = 0; r < sn.nr; r++)
        if (r != (uint32_t)a.ring)
            CHECK_EQ(RING(&sn, r)->state, FIPS_RING_FREE);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c1), 0);
    CHECK_RC(fips_consumer_close(c2), 0);
    dom_close(d, name);
}

/* Tap copies the newest records, laid out header + payload, 8-aligned. */
static void t_tap(void)
{
    const char *name = fresh_name("tap");
    fips_domain *d = dom_open(name, 4096, 500, 0, 0);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    int ring = fips_producer_ring(d);
    uint8_t buf[100];
    /* Many laps, so the newest records sit anywhere in the buffer. */
    uint64_t k;
    for (k = 0; k < 500; k++) {
        uint32_t len = (uint32_t)(k % 61 + 1);
        fill(buf, len, k);
        CHECK_RC(fips_log(d, buf, len), 0);
        if (k % 8 == 7)
            CHECK_RC(drain(c, 100, NULL, 0), 0);
    }
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    uint8_t out[4096];
    size_t used = 0;
    uint32_t lapped = 99;
    int n = fips_monitor_tap(sn.m, (uint32_t)ring, 5, out, sizeof out, &used, &lapped);
    CHECK_EQ(n, 5);
    CHECK_EQ(lapped, 0);
    size_t off = 0;
    for (int i = 0; i < n && off + FIPS_REC_HDR_SIZE <= used; i++) {
        struct fips_layout_record h;
        memcpy(&h, out + off, sizeof h);
        uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
        uint64_t want = k - 5 + (uint64_t)i;     /* oldest first */
        CHECK_EQ(h.seq, want);
        CHECK_EQ(len, want % 61 + 1);
        CHECK(matches(out + off + FIPS_REC_HDR_SIZE, len, want));
        CHECK(((h.len_flags >> 24) & FIPS_REC_PAD) == 0);
        off += FIPS_REC_HDR_SIZE + ((len + 7u) & ~7u);
    }
    CHECK_EQ(off, used);
    /* A buffer too small for all: fewer records, never an overflow. */
    n = fips_monitor_tap(sn.m, (uint32_t)ring, 5, out, 40, &used, &lapped);
    CHECK(n >= 0 && n <= 1);
    CHECK(used <= 40);
    /* More than there are since the floor: all of them. */
    n = fips_monitor_tap(sn.m, (uint32_t)ring, 100000, out, sizeof out, &used, &lapped);
    CHECK(n > 5);
    /* Bad ring index, FREE ring. */
    CHECK(fips_monitor_tap(sn.m, sn.nr, 5, out, sizeof out, &used, &lapped) < 0);
    uint32_t freering = ring == 0 ? 1 : 0;
    n = fips_monitor_tap(sn.m, freering, 5, out, sizeof out, &used, &lapped);
    CHECK_EQ(n, 0);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* Bounded blocking mode: a full ring waits up to block_us for space. */
struct drain_later {
    fips_consumer *c;
    uint64_t delay_us;
    int rc;
};

static void *thr_drain_later(void *p)
{
    struct drain_later *a = p;
    t_sleep_us(a->delay_us);
    a->rc = drain(a->c, 1000, NULL, 0);
    return NULL;
}

static void t_block_mode(void)
{
    const char *name = fresh_name("block");
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;
    o.max_rings = 2;
    o.ring_capacity = 4096;
    o.max_record = 500;
    o.block_us = 400000;                   /* 400 ms: the drain below has 380 ms to start, even under TSan */
    fips_domain *d = NULL;
    REQUIRE_RC(fips_domain_open(&d, t_dir, name, &o), 0);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    uint8_t buf[100] = { 0 };
    int n = 0;
    uint64_t t0 = t_mono_ns();
    while (fips_log(d, buf, 100) == 0)
        n++;
    uint64_t waited = t_mono_ns() - t0;
    CHECK_EQ(n, 32);
    CHECK(waited >= 395000000ull);         /* the failing call blocked first */
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    int ring = fips_producer_ring(d);
    CHECK(RING(&sn, ring)->blocked_ns >= 395000000ull);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 1);
    /* Space appears 20 ms into the wait: the record gets in, no drop.  This
     * is also the first call after a drop. */
    struct drain_later dl = { c, 20000, -1 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, thr_drain_later, &dl) == 0);
    t0 = t_mono_ns();
    int rc = fips_log(d, buf, 100);
    waited = t_mono_ns() - t0;
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECK_RC(rc, 0);
    CHECK_RC(dl.rc, 0);
    CHECK(waited < 1000000000ull);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, ring)->records_dropped, 1);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* ---- monitor attach: every validation error, with a one-line message --- */

static uint8_t *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        DIE("open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0)
        DIE("fstat: %s", strerror(errno));
    uint8_t *b = malloc((size_t)st.st_size);
    if (!b)
        DIE("malloc");
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n <= 0)
            DIE("read %s: %s", path, n ? strerror(errno) : "short");
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return b;
}

static void spit(const char *path, const void *b, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        DIE("open %s: %s", path, strerror(errno));
    size_t put = 0;
    while (put < len) {
        ssize_t n = write(fd, (const uint8_t *)b + put, len - put);
        if (n <= 0)
            DIE("write %s: %s", path, strerror(errno));
        put += (size_t)n;
    }
    if (close(fd) != 0)
        DIE("close %s: %s", path, strerror(errno));
}

/* Attach to `path`, expect `want`, and check the message names the file on
 * one line. */
static void expect_attach(const char *path, int any_owner, int want, int line)
{
    fips_monitor *m = NULL;
    char err[512];
    memset(err, 0, sizeof err);
    int rc = fips_monitor_open_path(&m, path, any_owner, err, sizeof err);
    atomic_fetch_add(&t_checks, 1);
    if (rc != want) {
        t_fail(__FILE__, line, "attach %s -> %d (%s), want %d (%s); msg: %s", path, rc,
               t_errname(rc), want, t_errname(want), err);
        if (rc == 0)
            fips_monitor_close(m);
        return;
    }
    if (rc == 0) {
        CHECK(m != NULL);
        fips_monitor_close(m);
        return;
    }
    CHECK(m == NULL);
    if (!strstr(err, path) || strchr(err, '\n') || strlen(err) < strlen(path) + 3)
        t_fail(__FILE__, line, "message must name the file on one line: \"%s\"", err);
}

static void t_monitor_attach_errors(void)
{
    const char *name = fresh_name("valid");
    fips_domain *d = dom_open(name, 4096, 500, 0, 2);
    REQUIRE(d);
    CHECK_RC(fips_log(d, "hello", 5), 0);
    char good[512];
    snprintf(good, sizeof good, "%s/fips.%s", t_dir, name);
    size_t len;
    uint8_t *img = slurp(good, &len);
    CHECK_EQ(fips_validate_header(img, len, NULL, 0), 0);
    expect_attach(good, 0, 0, __LINE__);

    char p[512];
    struct fips_layout_header *h;
    uint8_t *cp = malloc(len);
    REQUIRE(cp);
#define VARIANT(tag, mutate, want)                                        \
    do {                                                                  \
        memcpy(cp, img, len);                                             \
        h = (struct fips_layout_header *)cp;                              \
        size_t vlen = len;                                                \
        mutate;                                                           \
        snprintf(p, sizeof p, "%s/fips.%s-%s", t_dir, name, tag);         \
        spit(p, cp, vlen);                                                \
        expect_attach(p, 0, want, __LINE__);                              \
        char eb_[256] = "";                                               \
        int vr_ = fips_validate_header(cp, vlen, eb_, sizeof eb_);        \
        if (vr_ != (want))                                                \
            t_fail(__FILE__, __LINE__, "validate(%s) -> %d want %d: %s",  \
                   tag, vr_, want, eb_);                                  \
        atomic_fetch_add(&t_checks, 1);                                   \
    } while (0)

    (void)h;
    VARIANT("short", vlen = 100, -FIPS_ETRUNC);
    VARIANT("empty", vlen = 0, -FIPS_ETRUNC);
    VARIANT("trunc", vlen = len - 4096, -FIPS_ETRUNC);
    VARIANT("magic", h->magic ^= 1, -FIPS_EMAGIC);
    VARIANT("version", h->version = FIPS_LAYOUT_VERSION + 1, -FIPS_EVERSION);
    VARIANT("hdrsize", h->hdr_size = 100, -FIPS_ELAYOUT);
    VARIANT("cap", h->ring_capacity = 4095, -FIPS_ELAYOUT);
    VARIANT("rings0", h->max_rings = 0, -FIPS_ELAYOUT);
    VARIANT("ringsbig", h->max_rings = 1000, -FIPS_ELAYOUT);
    VARIANT("cons0", h->max_consumers = 0, -FIPS_ELAYOUT);
    VARIANT("maxrec", h->max_record = 4000, -FIPS_ELAYOUT);
    VARIANT("dataoff", h->data_off += 8, -FIPS_ELAYOUT);
    VARIANT("ringoff", h->ring_table_off = 0, -FIPS_ELAYOUT);
    VARIANT("filesize", h->file_size += 4096, -FIPS_ELAYOUT);
    VARIANT("ready", h->ready = 0, -FIPS_ENOTREADY);
    VARIANT("name", memset(h->name, 'x', sizeof h->name), -FIPS_ELAYOUT);
#undef VARIANT

    /* A file whose header names another domain (fips.X that says it is Y). */
    snprintf(p, sizeof p, "%s/fips.%s-impostor", t_dir, name);
    spit(p, img, len);
    expect_attach(p, 0, -FIPS_ELAYOUT, __LINE__);

    /* Another owner: refused unless any_owner.  (The copy's header carries
     * its own file's name.) */
    snprintf(p, sizeof p, "%s/fips.%s-owner", t_dir, name);
    memcpy(cp, img, len);
    h = (struct fips_layout_header *)cp;
    memset(h->name, 0, sizeof h->name);
    snprintf(h->name, sizeof h->name, "%s-owner", name);
    spit(p, cp, len);
    REQUIRE(chown(p, 65534, 65534) == 0);
    expect_attach(p, 0, -FIPS_EOWNER, __LINE__);
    expect_attach(p, 1, 0, __LINE__);
    /* fips_domain_open refuses it too. */
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 0;
    fips_domain *d2 = NULL;
    char oname[128];
    snprintf(oname, sizeof oname, "%s-owner", name);
    CHECK_RC(fips_domain_open(&d2, t_dir, oname, &o), -FIPS_EOWNER);

    /* Missing file. */
    snprintf(p, sizeof p, "%s/fips.nonexistent", t_dir);
    expect_attach(p, 0, -ENOENT, __LINE__);

    /* A symlink is refused by the monitor ... */
    snprintf(p, sizeof p, "%s/fips.%s-link", t_dir, name);
    REQUIRE(symlink(good, p) == 0);
    expect_attach(p, 0, -ELOOP, __LINE__);
    /* ... and by open: an existing symlink is not followed ... */
    snprintf(oname, sizeof oname, "%s-link", name);
    CHECK(fips_domain_open(&d2, t_dir, oname, &o) < 0);
    /* ... and creation never writes through a planted (dangling) one. */
    char target[512];
    snprintf(target, sizeof target, "%s/planted-target", t_dir);
    snprintf(p, sizeof p, "%s/fips.planted", t_dir);
    REQUIRE(symlink(target, p) == 0);
    o.create = 1;
    o.max_rings = 2;
    o.ring_capacity = 4096;
    o.max_record = 256;
    int rc = fips_domain_open(&d2, t_dir, "planted", &o);
    CHECK(rc < 0);
    if (rc == 0)
        fips_domain_close(d2);
    CHECK(access(target, F_OK) != 0);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISLNK(st.st_mode));

    /* A directory or a FIFO at the name: an error, and never a hang (a
     * FIFO opened O_RDONLY without O_NONBLOCK blocks for a writer). */
    snprintf(p, sizeof p, "%s/fips.%s-dir", t_dir, name);
    REQUIRE(mkdir(p, 0700) == 0);
    expect_attach(p, 0, -FIPS_ELAYOUT, __LINE__);
    snprintf(p, sizeof p, "%s/fips.%s-fifo", t_dir, name);
    REQUIRE(mkfifo(p, 0600) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(3);
        fips_monitor *m = NULL;
        char err[256];
        int r = fips_monitor_open_path(&m, p, 0, err, sizeof err);
        _exit(r < 0 ? 0 : 1);
    }
    int ws;
    REQUIRE(waitpid(pid, &ws, 0) == pid);
    if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0))
        t_fail(__FILE__, __LINE__, "monitor attach to a FIFO %s (status 0x%x%s)", p, ws,
               WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM ? ": hung in open()" : "");
    atomic_fetch_add(&t_checks, 1);

    free(cp);
    free(img);
    dom_close(d, name);
}

/* A monitor's mapping is read-only: a write through it faults (in a child,
 * which must die of SIGSEGV). */
static void t_monitor_readonly(void)
{
    const char *name = fresh_name("ro");
    fips_domain *d = dom_open(name, 4096, 500, 0, 2);
    REQUIRE(d);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* Default SIGSEGV action even under ASan, which installs its own. */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        fips_monitor *m = NULL;
        char err[256];
        if (fips_monitor_open(&m, t_dir, name, 0, err, sizeof err) != 0)
            _exit(3);
        /* fips_monitor_header() is a private copy; the mapping itself is
         * what must be read-only. */
        const struct fips_layout_header *h = fips_monitor_mapping(m);
        if (h->magic != FIPS_MAGIC || fips_monitor_header(m)->magic != FIPS_MAGIC)
            _exit(4);
        ((volatile struct fips_layout_header *)h)->flags = 1; /* must fault */
        _exit(5);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st));
    if (WIFSIGNALED(st))
        CHECK_EQ(WTERMSIG(st), SIGSEGV);
    else
        t_fail(__FILE__, __LINE__, "child exited %d", WEXITSTATUS(st));
    CHECK_EQ(fips_domain_header(d)->flags, 0);
    dom_close(d, name);
}

/* Hostile ring contents: a consumer and a tap report ECORRUPT, never read
 * out of bounds. */
static void t_corrupt_record(void)
{
    const char *name = fresh_name("corrupt");
    fips_domain *d = dom_open(name, 4096, 500, 0, 2);
    REQUIRE(d);
    fips_consumer *c = cons_open(d, "c");
    REQUIRE(c);
    int ring = fips_producer_ring(d);
    CHECK_RC(fips_log(d, "good", 4), 0);
    CHECK_RC(fips_log(d, "evil", 4), 0);
    /* Overwrite the second record's length through a separate mapping, as
     * another process with write access could. */
    char path[512];
    snprintf(path, sizeof path, "%s/fips.%s", t_dir, name);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const struct fips_layout_header *h = fips_domain_header(d);
    off_t at = (off_t)(h->data_off + (uint64_t)ring * h->ring_capacity + 24 + 8);
    uint32_t evil = 0x00fffff0u;
    REQUIRE(pwrite(fd, &evil, 4, at) == 4);
    close(fd);
    fips_batch b;
    int rc = fips_consumer_read(c, &b, 10);
    /* the intact prefix may come first */
    if (rc == 0) {
        CHECK_EQ(b.count, 1);
        fips_record r;
        CHECK_EQ(fips_batch_next(&b, &r), 1);
        CHECK_EQ(r.len, 4);
        CHECK_EQ(fips_batch_next(&b, &r), 0);
        CHECK_RC(fips_consumer_release(c, &b), 0);
        rc = fips_consumer_read(c, &b, 10);
    }
    CHECK_RC(rc, -FIPS_ECORRUPT);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    uint8_t out[4096];
    size_t used;
    uint32_t lapped;
    int n = fips_monitor_tap(sn.m, (uint32_t)ring, 10, out, sizeof out, &used, &lapped);
    CHECK(n == -FIPS_ECORRUPT || (n >= 0 && n <= 1));
    CHECK(used <= sizeof out);
    snap_close(&sn);
    CHECK_RC(fips_consumer_close(c), 0);
    dom_close(d, name);
}

/* Closing the domain handle while another thread still owns a ring in it:
 * that thread's exit must not touch freed memory. */
struct late_arg {
    fips_domain *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage;
    int rc;
};

static void *thr_late_exit(void *p)
{
    struct late_arg *a = p;
    a->rc = fips_log(a->d, "late", 4);
    pthread_mutex_lock(&a->mu);
    a->stage = 1;
    pthread_cond_broadcast(&a->cv);
    while (a->stage != 2)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    return NULL;   /* ring closes here, after the handle was closed */
}

static void t_close_before_thread_exit(void)
{
    const char *name = fresh_name("lateexit");
    fips_domain *d = dom_open(name, 4096, 500, 0, 2);
    REQUIRE(d);
    struct late_arg a = { .d = d };
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, thr_late_exit, &a) == 0);
    pthread_mutex_lock(&a.mu);
    while (a.stage != 1)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);
    CHECK_RC(a.rc, 0);
    CHECK_RC(fips_domain_close(d), 0);
    pthread_mutex_lock(&a.mu);
    a.stage = 2;
    pthread_cond_broadcast(&a.cv);
    pthread_mutex_unlock(&a.mu);
    REQUIRE(pthread_join(t, NULL) == 0);
    snap_t sn;
    REQUIRE(snap_open(&sn, name) == 0);
    snap_take(&sn);
    CHECK_EQ(RING(&sn, 0)->state, FIPS_RING_CLOSED);
    CHECK_EQ(RING(&sn, 0)->records_committed, 1);
    snap_close(&sn);
    CHECK_RC(fips_domain_unlink(t_dir, name), 0);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_mkdir("basic");
    RUN(t_open_create);
    RUN(t_roundtrip);
    RUN(t_zero_len_and_max);
    RUN(t_every_length);
    RUN(t_wraparound);
    RUN(t_drop_on_full);
    RUN(t_batch_log);
    RUN(t_batch_laps);
    RUN(t_batch_oversize);
    RUN(t_two_consumers);
    RUN(t_late_join);
    RUN(t_operator_evict);
    RUN(t_out_of_order_release);
    RUN(t_consumer_close_frees);
    RUN(t_resume);
    RUN(t_eviction);
    RUN(t_block_mode);
    RUN(t_thread_exit_closes);
    RUN(t_slot_reuse);
    RUN(t_monitor_snapshot);
    RUN(t_tap);
    RUN(t_monitor_attach_errors);
    RUN(t_monitor_readonly);
    RUN(t_corrupt_record);
    RUN(t_close_before_thread_exit);
    t_rmdir();
    return t_report("test_basic");
}
