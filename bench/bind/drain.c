/*
 * drain — the consumer of `fipstop bench bind` (issue #3, mode "fips").
 *
 *   drain SHM_DIR DOMAIN NAME [TOKEN]
 *
 * Opens DOMAIN (which must exist), registers consumer NAME, prints "ready",
 * then drains every ring with fips_consumer_read/release until SIGTERM,
 * drains what is left, and prints one JSON line:
 *
 *   {"records": N, "matched": M, "lost": L, "truncated": T, "bytes": B,
 *    "batches": K, "idle_sleeps": S, "cpu_s": C, "errors": E}
 *
 * "matched" counts records containing TOKEN (default "query: ", the text of
 * a BIND query-log line); a binary query record of the native named
 * (flag FIPSBQ_REC_FLAG) matches a TOKEN "ZONE IN A " on its fields (type A,
 * class IN, a name under ZONE), as an IPS can match it without formatting;
 * one in 64 is also formatted and matched as text ("formatted"), and the two
 * verdicts must agree ("format_mismatched" 0); one that does not validate
 * counts as "invalid", not matched.  "lost" is the sum of the records' lost counters:
 * records this consumer never saw because the ring was full.
 *
 * It is cheap on purpose: a consumer that burns CPU on a 2-core machine
 * takes it from the server being measured, and every wake-up of it preempts
 * one of named's workers.  So it drains in passes: a pass reads every ring
 * until nothing is left, then the drain naps.  The nap adapts to the fill it
 * found: a pass that read less than 1/16 of a ring from every ring doubles
 * it (up to NAP_MAX_US), more than 1/4 of some ring halves it (down to
 * NAP_MIN_US).  At named's ~30 k lines/s per worker a 1 MiB ring fills in
 * ~250 ms, so the nap settles near 10-20 ms: ~100 wake-ups a second where a
 * fixed 200 us nap after each short batch made ~3 300 (measured).
 *
 * Built by fipstop/bench/bind.py with cc -O2 together with
 * fipstop/csrc/fips.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "fips.h"
#include "fips_bindq_fmt.c" /* the native named's binary query records (fips_bindq.h) */

#define NAP_MIN_US 250L
#define NAP_MAX_US 20000L

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The token "ZONE IN A " as a binary match: the wire form of ZONE (its
 * labels, the root label last), or 0 when the token is not of that shape. */
static size_t zone_wire(const char *token, uint8_t *w, size_t cap)
{
    static const char tail[] = " IN A ";
    size_t tl = strlen(token), sl = sizeof tail - 1;
    if (tl <= sl || strcmp(token + tl - sl, tail) != 0 || tl - sl + 2 > cap) return 0;
    size_t n = 0, zl = tl - sl, start = 0;
    for (size_t i = 0; i <= zl; i++) {
        if (i == zl || token[i] == '.') {
            size_t l = i - start;
            if (l == 0 || l > 63) return 0;
            w[n++] = (uint8_t)l;
            memcpy(w + n, token + start, l);
            n += l;
            start = i + 1;
        }
    }
    w[n++] = 0;
    return n;
}

/* p: a private copy of the record (it is walked after the checks).
 * A binary query record "contains the token" when its query is type A, class
 * IN, for a name under the zone (label-aligned): what its formatted line's
 * "NAME IN A " would show for the bench's plain names, without formatting.
 * 1 or 0; -1 when the record does not validate. */
static int bindq_matches(const uint8_t *p, size_t n, const uint8_t *zw, size_t zn)
{
    struct fipsbq_head h;
    if (fips_bindq_parse(p, n, &h) < 0) return -1;
    if (h.qtype != 1 || h.qclass != 1 || h.qname_len < zn) return 0;
    const uint8_t *qn = p + FIPSBQ_HEAD_SIZE;
    size_t i = 0; /* walk to the label that starts zn bytes before the end */
    while (i < h.qname_len && h.qname_len - i > zn) i += 1u + qn[i];
    if (i >= h.qname_len) return 0;
    return h.qname_len - i == zn && memcmp(qn + i, zw, zn) == 0;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: %s SHM_DIR DOMAIN NAME [TOKEN]\n", argv[0]);
        return 2;
    }
    const char *token = argc > 4 ? argv[4] : "query: ";
    const size_t toklen = strlen(token);
    uint8_t zw[256];
    const size_t zn = zone_wire(token, zw, sizeof zw);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 0;
    fips_domain *d;
    char err[512];
    int rc = fips_domain_open_err(&d, argv[1], argv[2], &o, err, sizeof err);
    if (rc) {
        printf("{\"error\": \"open domain: %s\"}\n", err);
        return 1;
    }
    fips_consumer *c;
    rc = fips_consumer_open(&c, d, argv[3]);
    if (rc) {
        printf("{\"error\": \"open consumer %s: %s\"}\n", argv[3], fips_strerror(rc));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    uint64_t records = 0, matched = 0, lost = 0, trunc = 0, bytes = 0, batches = 0;
    uint64_t sleeps = 0, errors = 0, formatted = 0, invalid = 0, mismatched = 0;
    static char line[FIPSBQ_TEXT_MAX];
    int last_err = 0;
    fips_batch b;
    fips_record r;
    int draining = 0, empty_after_stop = 0;
    long nap_us = 1000;
    const uint64_t cap = fips_domain_header(d)->ring_capacity;
    const uint32_t nrings = fips_domain_header(d)->max_rings;
    /* ring bytes read from each ring in this pass (a batch holds at most 4096
     * records, so one ring can give several batches in a pass) */
    uint64_t *pass_bytes = calloc(nrings ? nrings : 1, sizeof *pass_bytes);
    if (!pass_bytes) {
        printf("{\"error\": \"out of memory\"}\n");
        return 1;
    }
    for (;;) {
        if (g_stop) draining = 1;
        rc = fips_consumer_read(c, &b, 4096);
        if (rc == 0) {
            empty_after_stop = 0;
            while (fips_batch_next(&b, &r)) {
                records++;
                bytes += r.len;
                if (r.flags & FIPS_REC_TRUNC) trunc++;
                if ((r.flags & FIPSBQ_REC_FLAG) && zn) {
                    /* the native named's binary record: matched on its fields (as an
                     * IPS can), and one in 64 also formatted and matched as text, which
                     * must agree */
                    /* one copy out of the ring, then parse and walk that (shared memory) */
                    static uint8_t rec[FIPSBQ_MAX];
                    int m = r.len <= sizeof rec ? (memcpy(rec, r.data, r.len), bindq_matches(rec, r.len, zw, zn)) : -1;
                    if (m < 0) {
                        invalid++;
                        continue;
                    }
                    matched += (uint64_t)m;
                    if ((records & 63) == 0) {
                        long k = fips_bindq_format(rec, r.len, line, sizeof line);
                        formatted++;
                        if (k < 0 || !memmem(line, (size_t)k, token, toklen) != !m) mismatched++;
                    }
                    continue;
                }
                if (toklen && memmem(r.data, r.len, token, toklen)) matched++;
            }
            lost += b.lost;
            batches++;
            if (b.ring < nrings) pass_bytes[b.ring] += b.end - b.start;
            int rr = fips_consumer_release(c, &b);
            if (rr < 0) { /* 1 is a release queued behind another reader thread's batch */
                errors++;
                last_err = rr;
            }
            continue;
        }
        if (rc == -FIPS_EAGAIN) {
            if (draining) {
                /* two empty passes in a row: everything committed is read */
                if (++empty_after_stop >= 2) break;
                sleep_us(1000);
                continue;
            }
            /* the pass is over: pace the next one by the fill it found */
            uint64_t most = 0;
            for (uint32_t i = 0; i < nrings; i++)
                if (pass_bytes[i] > most) most = pass_bytes[i];
            memset(pass_bytes, 0, (size_t)nrings * sizeof *pass_bytes);
            if (most > cap / 4 && nap_us > NAP_MIN_US) nap_us /= 2;
            else if (most < cap / 16 && nap_us < NAP_MAX_US) nap_us *= 2;
            if (nap_us > NAP_MAX_US) nap_us = NAP_MAX_US;
            sleep_us(nap_us);
            sleeps++;
            continue;
        }
        errors++;
        last_err = rc;
        if (rc == -FIPS_EEVICTED) break;
        sleep_us(1000);
    }
    printf("{\"records\": %llu, \"matched\": %llu, \"lost\": %llu, \"truncated\": %llu, "
           "\"bytes\": %llu, \"batches\": %llu, \"idle_sleeps\": %llu, \"cpu_s\": %.4f, "
           "\"errors\": %llu, \"last_error\": %d, \"formatted\": %llu, \"invalid\": %llu, "
           "\"format_mismatched\": %llu}\n",
           (unsigned long long)records, (unsigned long long)matched,
           (unsigned long long)lost, (unsigned long long)trunc,
           (unsigned long long)bytes, (unsigned long long)batches,
           (unsigned long long)sleeps, cpu_s(), (unsigned long long)errors, last_err,
           (unsigned long long)formatted, (unsigned long long)invalid, (unsigned long long)mismatched);
    fflush(stdout);
    free(pass_bytes);
    fips_consumer_close(c);
    fips_domain_close(d);
    return 0;
}
