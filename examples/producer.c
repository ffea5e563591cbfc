/*
 * producer — log BIND-style query lines into a fips domain.
 *
 *   producer DOMAIN [SECONDS] [THREADS]
 *
 * Opens (creating if needed) DOMAIN in $FIPS_SHM_DIR or /dev/shm and, from
 * THREADS threads (default 2), logs lines like named's query log
 *
 *   client @0x7f3a5c0012a0 127.0.0.1#53012 (example.com): query: example.com IN A +E(0) (127.0.0.1)
 *
 * for SECONDS seconds (default 5), then prints how many were logged and how
 * many were dropped because a consumer was behind.  Each thread gets a ring
 * of its own on its first record; the ring closes when the thread exits.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fips.h"

static fips_domain *dom;
static double seconds = 5;

struct worker {
    pthread_t th;
    unsigned id;
    uint64_t logged, dropped;
    int error;                 /* first unexpected error, 0 if none */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *const qnames[] = {
    "example.com", "www.example.com", "mail.example.com", "ns1.example.net",
    "api.example.org", "cdn.example.com", "xn--bcher-kva.example", "_dmarc.example.com",
};
static const char *const qtypes[] = { "A", "AAAA", "MX", "TXT", "NS", "SOA" };

static void *work(void *arg)
{
    struct worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "producer-%u", w->id);
    /* Name this thread's ring in the monitor (creates the ring now). */
    fips_producer_set_name(dom, name);

    uint64_t x = 0x9E3779B97F4A7C15ull * (w->id + 1);   /* xorshift state */
    double end = now_s() + seconds;
    uint64_t n = 0;
    char line[256];
    while ((n & 1023) != 0 || now_s() < end) {          /* clock every 1024 */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *q = qnames[x % (sizeof qnames / sizeof qnames[0])];
        const char *t = qtypes[(x >> 8) % (sizeof qtypes / sizeof qtypes[0])];
        int len = snprintf(line, sizeof line,
                           "client @0x7f%010" PRIx64 " 127.%u.%u.%u#%u (%s): query: %s IN %s +E(0) "
                           "(127.0.0.1)",
                           (uint64_t)((x >> 4) & 0xffffffffffull), (unsigned)(x >> 16) & 255,
                           (unsigned)(x >> 24) & 255, ((unsigned)(x >> 32) & 255) | 1,
                           1024 + (unsigned)(x >> 40) % 64511, q, q, t);
        if (len < 0)
            len = 0;
        if ((size_t)len >= sizeof line)
            len = (int)sizeof line - 1;
        /* Never blocks: a full ring drops the record and counts it. */
        int rc = fips_log(dom, line, (uint32_t)len);
        if (rc == 0) {
            w->logged++;
        } else if (rc == -FIPS_EFULL) {
            w->dropped++;
        } else {
            w->error = rc;   /* e.g. -FIPS_ENORING: no ring slot for us */
            break;
        }
        n++;
    }
    return NULL;   /* thread exit closes this thread's ring */
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s DOMAIN [SECONDS] [THREADS]\n", argv[0]);
        return 2;
    }
    unsigned nthreads = 2;
    if (argc > 2) {
        char *e;
        seconds = strtod(argv[2], &e);
        if (*e || seconds <= 0) {
            fprintf(stderr, "%s: bad SECONDS '%s'\n", argv[0], argv[2]);
            return 2;
        }
    }
    if (argc > 3) {
        char *e;
        unsigned long v = strtoul(argv[3], &e, 10);
        if (*e || v == 0 || v > 1024) {
            fprintf(stderr, "%s: bad THREADS '%s' (1..1024)\n", argv[0], argv[3]);
            return 2;
        }
        nthreads = (unsigned)v;
    }

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;                           /* create the domain if absent */
    int rc = fips_domain_open(&dom, NULL, argv[1], &o);
    if (rc) {
        fprintf(stderr, "%s: cannot open domain '%s' in %s: %s\n", argv[0], argv[1],
                fips_shm_dir(NULL), fips_strerror(rc));
        return 1;
    }

    struct worker *w = calloc(nthreads, sizeof *w);
    if (!w) {
        perror("calloc");
        return 1;
    }
    unsigned started = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        w[i].id = i;
        int e = pthread_create(&w[i].th, NULL, work, &w[i]);
        if (e) {
            fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(e));
            break;
        }
        started++;
    }
    uint64_t logged = 0, dropped = 0;
    int status = started == nthreads ? 0 : 1;
    for (unsigned i = 0; i < started; i++) {
        int e = pthread_join(w[i].th, NULL);
        if (e) {
            fprintf(stderr, "%s: pthread_join: %s\n", argv[0], strerror(e));
            status = 1;
            continue;
        }
        logged += w[i].logged;
        dropped += w[i].dropped;
        if (w[i].error) {
            fprintf(stderr, "%s: thread %u stopped: %s\n", argv[0], i, fips_strerror(w[i].error));
            status = 1;
        }
    }
    printf("%s: %u threads, %.1f s: logged %" PRIu64 ", dropped %" PRIu64 "\n", argv[1],
           started, seconds, logged, dropped);
    free(w);
    rc = fips_domain_close(dom);
    if (rc) {
        fprintf(stderr, "%s: fips_domain_close: %s\n", argv[0], fips_strerror(rc));
        status = 1;
    }
    return status;
}
