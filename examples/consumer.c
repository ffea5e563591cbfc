/*
 * consumer — print every record of a fips domain, as consumer NAME.
 *
 *   consumer DOMAIN NAME [SECONDS]
 *
 * Registers (or, after a crash, resumes) the consumer NAME on DOMAIN in
 * $FIPS_SHM_DIR or /dev/shm, then prints each record as
 *
 *   ring 3 seq 1042: client @0x7f... (lost 12 before)
 *
 * with control bytes, non-ASCII bytes and backslashes escaped (\xNN): log
 * records are attacker-controlled text and must never reach a terminal raw.
 * Releases each batch after printing it, heartbeats while idle, and exits
 * after SECONDS (default: never) or on SIGINT/SIGTERM, unregistering.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fips.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Printable ASCII as is; everything else (and the backslash) as \xNN. */
static void put_escaped(const unsigned char *p, uint32_t n, FILE *f)
{
    for (uint32_t i = 0; i < n; i++) {
        unsigned char ch = p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            putc(ch, f);
        else
            fprintf(f, "\\x%02x", ch);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s DOMAIN NAME [SECONDS]\n", argv[0]);
        return 2;
    }
    double seconds = 0;   /* 0: until a signal */
    if (argc > 3) {
        char *e;
        seconds = strtod(argv[3], &e);
        if (*e || seconds <= 0) {
            fprintf(stderr, "%s: bad SECONDS '%s'\n", argv[0], argv[3]);
            return 2;
        }
    }

    /* No SA_RESTART: a signal interrupts the idle sleep at once. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("sigaction");
        return 1;
    }

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;   /* the consumer may start before any producer */
    fips_domain *d = NULL;
    int rc = fips_domain_open(&d, NULL, argv[1], &o);
    if (rc) {
        fprintf(stderr, "%s: cannot open domain '%s' in %s: %s\n", argv[0], argv[1],
                fips_shm_dir(NULL), fips_strerror(rc));
        return 1;
    }
    fips_consumer *c = NULL;
    rc = fips_consumer_open(&c, d, argv[2]);
    if (rc) {
        fprintf(stderr, "%s: cannot register consumer '%s': %s\n", argv[0], argv[2],
                fips_strerror(rc));
        fips_domain_close(d);
        return 1;
    }

    double end = seconds > 0 ? now_s() + seconds : 0;
    uint64_t records = 0, lost = 0;
    int status = 0;
    while (!stop && (end == 0 || now_s() < end)) {
        fips_batch b;
        rc = fips_consumer_read(c, &b, 256);
        if (rc == -FIPS_EAGAIN) {
            /* Idle: tell producers we are alive, then nap 10 ms. */
            fips_consumer_heartbeat(c);
            struct timespec nap = { 0, 10 * 1000 * 1000 };
            nanosleep(&nap, NULL);   /* EINTR: the loop checks `stop` */
            continue;
        }
        if (rc) {
            /* -FIPS_EEVICTED: we were too slow for too long; -FIPS_ECORRUPT:
             * a ring holds garbage.  Either way, stop. */
            fprintf(stderr, "%s: read: %s\n", argv[0], fips_strerror(rc));
            status = 1;
            break;
        }
        fips_record r;
        while (fips_batch_next(&b, &r) == 1) {
            printf("ring %" PRIu32 " seq %" PRIu64 ": ", b.ring, r.seq);
            put_escaped(r.data, r.len, stdout);
            if (r.flags & FIPS_REC_TRUNC)
                fputs(" (truncated)", stdout);
            if (r.lost)
                printf(" (lost %" PRIu32 " before)", r.lost);
            putchar('\n');
            records++;
            lost += r.lost;
        }
        /* The record memory is the ring itself: release only when done. */
        rc = fips_consumer_release(c, &b);
        if (rc < 0) { /* 1: queued behind an earlier batch of another reader thread */
            fprintf(stderr, "%s: release: %s\n", argv[0], fips_strerror(rc));
            status = 1;
            break;
        }
    }
    if (fflush(stdout) != 0) {
        perror("stdout");
        status = 1;
    }
    fprintf(stderr, "%s: %s: %" PRIu64 " records, %" PRIu64 " lost\n", argv[0], argv[2],
            records, lost);
    rc = fips_consumer_close(c);   /* unregister: producers stop waiting for us */
    if (rc) {
        fprintf(stderr, "%s: consumer close: %s\n", argv[0], fips_strerror(rc));
        status = 1;
    }
    rc = fips_domain_close(d);
    if (rc) {
        fprintf(stderr, "%s: domain close: %s\n", argv[0], fips_strerror(rc));
        status = 1;
    }
    return status;
}
