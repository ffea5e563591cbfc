/*
 * test_bindq — the consumer's formatter of BIND's binary query records
 * (fipstop/csrc/fips_bindq_fmt.c) on hostile input, in the plain, TSan and
 * ASan/UBSan builds.
 *
 * A record is shared memory another process wrote: every input here is copied
 * into a heap block of exactly its size and formatted into a heap block of
 * exactly FIPSBQ_TEXT_MAX bytes, so AddressSanitizer stops the test at the
 * first byte read past the record or written past the line.  Inputs: the
 * largest record the format allows (three 255-byte names of escaped bytes, a
 * 255-byte view, a 64-byte ident, IPv6 addresses with the largest scope ids,
 * every flag), which must fit FIPSBQ_TEXT_MAX; every cut of it; and random
 * byte changes of it and of a small record.
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <limits.h>

#include "fips_bindq_fmt.c"

static size_t put_name(uint8_t *w, uint8_t fill)
{
    size_t n = 0;
    for (int l = 0; l < 4; l++) { /* 63+63+63+61 content bytes: 255 in wire format */
        uint8_t len = l < 3 ? 63 : 61;
        w[n++] = len;
        memset(w + n, fill, len);
        n += len;
    }
    w[n++] = 0;
    return n;
}

static size_t biggest(uint8_t *b)
{
    struct fipsbq_head h;
    memset(&h, 0, sizeof h);
    h.magic[0] = 'F', h.magic[1] = 'Q', h.magic[2] = 'B', h.version = FIPSBQ_VERSION;
    h.pri = 191;
    h.ident_len = FIPSBQ_IDENT_MAX;
    h.qflags = FIPSBQ_KNOWN & ~FIPSBQ_COOKIE_WANT;
    h.pid = INT_MAX;
    h.qtype = 65535, h.qclass = 65535, h.edns_version = 32767, h.peer_port = 65535;
    h.peer_family = 6, h.dest_family = 6, h.ecs_family = 6;
    h.ecs_source = 255, h.ecs_scope = 255;
    h.peer_zone = UINT32_MAX, h.dest_zone = UINT32_MAX;
    h.client = UINT64_MAX;
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", h.peer_addr);
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", h.dest_addr);
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", h.ecs_addr);
    size_t n = FIPSBQ_HEAD_SIZE;
    n += (h.qname_len = (uint8_t)put_name(b + n, 0xff), h.qname_len);
    n += (h.origq_len = (uint8_t)put_name(b + n, '.'), h.origq_len);
    n += (h.signer_len = (uint8_t)put_name(b + n, 0x01), h.signer_len);
    h.view_len = 255;
    memset(b + n, 'v', 255);
    n += 255;
    memset(b + n, 'i', FIPSBQ_IDENT_MAX);
    n += FIPSBQ_IDENT_MAX;
    memcpy(b, &h, sizeof h);
    return n;
}

/* format p[0..n) from exact-size heap copies; the length, or -1 */
static long fmt_exact(const uint8_t *p, size_t n)
{
    uint8_t *in = malloc(n ? n : 1);
    char *out = malloc(FIPSBQ_TEXT_MAX);
    if (!in || !out) abort();
    memcpy(in, p, n);
    long k = fips_bindq_format(in, n, out, FIPSBQ_TEXT_MAX);
    if (k >= 0) {
        CHECK(k < (long)FIPSBQ_TEXT_MAX);
        CHECK(out[0] == '<');
        CHECK(memchr(out, 0, (size_t)k) == NULL);
    }
    free(in);
    free(out);
    return k;
}

/* A writer that keeps changing a record's name length bytes while the
 * formatter reads it (what a hostile or lapping producer can do to a record in
 * shared memory): the formatter must copy once and never read or write out of
 * bounds, whatever it sees.  Not under TSan: the race is the point (the ring's
 * own protocol rules it out for a well-behaved producer). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BINDQ_UNDER_TSAN 1 /* clang's spelling of GCC's __SANITIZE_THREAD__ */
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define BINDQ_UNDER_TSAN 1
#endif
#if !defined(BINDQ_UNDER_TSAN)
#include <pthread.h>
static uint8_t *volatile shared_rec;
static size_t flip_at[4];
static uint8_t flip_orig[4];
static int nflip;
static atomic_int writer_stop;

static void *flipper(void *arg)
{
    (void)arg;
    uint8_t *r = shared_rec;
    for (unsigned i = 0; !atomic_load_explicit(&writer_stop, memory_order_relaxed); i++)
        for (int k = 0; k < nflip; k++) r[flip_at[k]] = ((i >> k) & 1) ? 255 : flip_orig[k];
    return NULL;
}

/* rec[0..n) in an exact-size heap block, formatted over and over while a
 * thread flips the label lengths at the given offsets between their true
 * value and 255 */
static void race_test(const char *what, const uint8_t *rec, size_t n, const size_t *at, int k)
{
    shared_rec = malloc(n);
    if (!shared_rec) abort();
    memcpy(shared_rec, rec, n);
    memcpy(flip_at, at, (size_t)k * sizeof *at);
    for (int j = 0; j < k; j++) flip_orig[j] = rec[at[j]]; /* the true length, put back every other turn */
    nflip = k;
    atomic_store(&writer_stop, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, flipper, NULL) == 0);
    char *out = malloc(FIPSBQ_TEXT_MAX);
    long ok = 0, bad = 0;
    /* 300 000 turns, more if the writer has not yet been scheduled (a loaded host) */
    for (long i = 0; i < 300000 || ((ok == 0 || bad == 0) && i < 30000000); i++) {
        long r = fips_bindq_format(shared_rec, n, out, FIPSBQ_TEXT_MAX);
        if (r >= 0) ok++; else bad++;
        CHECK(r < (long)FIPSBQ_TEXT_MAX);
    }
    atomic_store(&writer_stop, 1);
    pthread_join(t, NULL);
    printf("%s, a writer flipping length bytes: %ld formatted, %ld refused\n", what, ok, bad);
    CHECK(ok > 0 && bad > 0); /* both states were seen: the race really ran through the formatter */
    free(out);
    free(shared_rec);
}
#endif

int main(void)
{
    static uint8_t big[FIPSBQ_MAX];
    size_t n = biggest(big);
    CHECK(n == FIPSBQ_MAX);
    long k = fmt_exact(big, n);
    CHECK(k > 3000);
    printf("the largest record: %zu bytes -> a %ld-character line (room: %u)\n", n, k, FIPSBQ_TEXT_MAX);
    for (size_t cut = 0; cut < n; cut++) CHECK(fmt_exact(big, cut) < 0);

    /* a small valid record: the plain query line */
    static uint8_t small[FIPSBQ_MAX];
    struct fipsbq_head h;
    memset(&h, 0, sizeof h);
    h.magic[0] = 'F', h.magic[1] = 'Q', h.magic[2] = 'B', h.version = FIPSBQ_VERSION;
    h.pri = 30, h.ident_len = 5, h.qflags = FIPSBQ_RD | FIPSBQ_PEER_VALID, h.pid = 7, h.qtype = 1, h.qclass = 1;
    h.peer_family = 4, h.dest_family = 4, h.client = 0x1234;
    static const uint8_t qn[] = "\x02h1\x07" "example\x04test";
    h.qname_len = sizeof qn; /* with its final NUL: the root label */
    memcpy(small, &h, sizeof h);
    memcpy(small + FIPSBQ_HEAD_SIZE, qn, sizeof qn);
    memcpy(small + FIPSBQ_HEAD_SIZE + sizeof qn, "named", 5);
    size_t sn = FIPSBQ_HEAD_SIZE + sizeof qn + 5;
    CHECK(fmt_exact(small, sn) > 0);

    uint64_t seed = 0x9e3779b97f4a7c15ull;
    long valid = 0, refused = 0;
    static uint8_t m[FIPSBQ_MAX];
    for (int i = 0; i < 200000; i++) {
        const uint8_t *src = (i & 1) ? big : small;
        size_t len = (i & 1) ? n : sn;
        memcpy(m, src, len);
        int changes = 1 + (int)(seed % 4);
        for (int c = 0; c < changes; c++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            m[(seed >> 33) % len] = (uint8_t)(seed >> 13);
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t l = (seed >> 40) % 8 == 0 ? (size_t)((seed >> 20) % (len + 1)) : len; /* sometimes cut too */
        if (fmt_exact(m, l) >= 0) valid++; else refused++;
    }
    printf("200000 changed records: %ld formatted, %ld refused\n", valid, refused);
    CHECK(valid > 0 && refused > 0);
#if !defined(BINDQ_UNDER_TSAN)
    {
        /* the largest record: the last label of each name (the line overflows if they are believed) */
        const size_t q = FIPSBQ_HEAD_SIZE, at[4] = {q, q + 192, q + 255 + 192, q + 510 + 192};
        race_test("the largest record", big, n, at, 4);
        /* a record that ends with its one name of 0xff bytes: the last label reaches past the end */
        uint8_t tail[FIPSBQ_HEAD_SIZE + 255];
        memcpy(tail, big, FIPSBQ_HEAD_SIZE);
        struct fipsbq_head th;
        memcpy(&th, tail, sizeof th);
        th.qflags &= (uint16_t)~(FIPSBQ_ORIGQ | FIPSBQ_SIGNED);
        th.origq_len = th.signer_len = th.view_len = th.ident_len = 0;
        th.qname_len = (uint8_t)put_name(tail + FIPSBQ_HEAD_SIZE, 0xff);
        memcpy(tail, &th, sizeof th);
        CHECK(fmt_exact(tail, sizeof tail) > 0);
        const size_t at2[1] = {q + 192};
        race_test("a record ending with its name", tail, sizeof tail, at2, 1);
    }
#endif
    return t_report("test_bindq");
}
