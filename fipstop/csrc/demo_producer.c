/*
 * fips-demo-producer — a DNS-server-like producer for `fipstop demo`.
 *
 *   fips-demo-producer --domain NAME [--threads N] [--attackers N]
 *       [--attack-rate R] [--legit-rate R] [--ramp S] [--attack-start S]
 *       [--duration S] [--attack-net A.B.0.0]
 *
 * Threads play named's workers: each logs, through libfips into a ring of its
 * own in domain NAME ($FIPS_SHM_DIR or /dev/shm; created if absent), what
 * BIND logs without the syslog prefix:
 *
 *   legitimate clients (192.0.2.0/24, 198.51.100.0/24), R lines/s in all:
 *     client @0x7f3a2c0012a0 192.0.2.7#40123 (www.example.com): query: www.example.com IN A +E(0)K (127.0.0.1)
 *   the attack, from N addresses (up to 65536, 198.18.0.0/15 by default),
 *   ramping linearly from 0 to R lines/s over --ramp seconds after
 *   --attack-start, each line a refused query of a random attacker:
 *     client @0x7f3a2c0012a0 198.18.3.7#5353 (example.com): query (cache) 'example.com/A/IN' denied
 *
 * Rates are totals over all threads (0 = none).  A full ring never blocks:
 * the record is dropped and counted, as named under the drop-in would.  It
 * stops after --duration seconds (0: until SIGINT/SIGTERM) and prints its
 * counters as one JSON line on stdout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fips.h"

static fips_domain *dom;
static atomic_int stop;

static struct {
    const char *domain;
    unsigned threads, attackers;
    double attack_rate, legit_rate, ramp_s, attack_start_s, duration_s;
    unsigned net_a, net_b;
} cfg = {NULL, 2, 1024, 20000, 2000, 5, 1, 0, 198, 18};

struct worker {
    pthread_t th;
    unsigned id;
    uint64_t legit, attack, dropped;
    int error;
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Attack lines due by time t (s since start) for the whole producer. */
static double attack_due(double t)
{
    t -= cfg.attack_start_s;
    if (t <= 0 || cfg.attack_rate <= 0)
        return 0;
    double r = cfg.attack_rate, ramp = cfg.ramp_s;
    if (ramp <= 0)
        return r * t;
    if (t < ramp)
        return r * t * t / (2 * ramp);
    return r * (ramp / 2 + (t - ramp));
}

static const char *const qnames[] = {
    "example.com", "www.example.com", "mail.example.com", "ns1.example.net",
    "api.example.org", "cdn.example.com", "static.example.net", "_dmarc.example.com",
};

static inline uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int emit(struct worker *w, const char *line, int len)
{
    if (len < 0)
        return 0;
    int rc = fips_log(dom, line, (uint32_t)len);
    if (rc == 0)
        return 1;
    if (rc == -FIPS_EFULL) {
        w->dropped++;
        return 1;
    }
    if (!w->error)
        w->error = rc;
    return 0;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "demo-net-%04u", w->id);
    fips_producer_set_name(dom, name);
    uint64_t x = 0x9E3779B97F4A7C15ull * (w->id + 1);
    double share = 1.0 / cfg.threads;
    double t0 = mono_s();
    char line[256];
    struct timespec nap = {0, 200 * 1000};
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        double t = mono_s() - t0;
        if (cfg.duration_s > 0 && t >= cfg.duration_s)
            break;
        uint64_t legit_due = (uint64_t)(cfg.legit_rate * t * share);
        uint64_t atk_due = (uint64_t)(attack_due(t) * share);
        int burst = 0;
        while ((w->legit < legit_due || w->attack < atk_due) && burst < 4096) {
            uint64_t r = xorshift(&x);
            int len;
            /* interleave the two streams in proportion to what is due */
            if (w->attack < atk_due && (w->legit >= legit_due || (r & 7) != 0)) {
                unsigned a = (unsigned)((r >> 16) % cfg.attackers);
                const char *q = qnames[(r >> 40) & 7];
                len = snprintf(line, sizeof line,
                               "client @0x7f%010" PRIx64 " %u.%u.%u.%u#%u (%s): query (cache) '%s/A/IN' denied",
                               (uint64_t)((r >> 4) & 0xffffffffffull), cfg.net_a, cfg.net_b + (a >> 16),
                               (a >> 8) & 255, a & 255, 1024 + (unsigned)(r >> 48) % 64511, q, q);
                if (!emit(w, line, len))
                    return NULL;
                w->attack++;
            } else {
                const char *q = qnames[(r >> 40) & 7];
                unsigned host = (unsigned)(r >> 16) & 511;
                len = snprintf(line, sizeof line,
                               "client @0x7f%010" PRIx64 " %s.%u#%u (%s): query: %s IN A +E(0)K (127.0.0.1)",
                               (uint64_t)((r >> 4) & 0xffffffffffull), host < 256 ? "192.0.2" : "198.51.100",
                               (host & 255) | 1, 1024 + (unsigned)(r >> 48) % 64511, q, q);
                if (!emit(w, line, len))
                    return NULL;
                w->legit++;
            }
            burst++;
        }
        if (burst < 4096)
            nanosleep(&nap, NULL);
    }
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop, 1);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fips-demo-producer --domain NAME [--threads N] [--attackers N] [--attack-rate R]\n"
               "       [--legit-rate R] [--ramp S] [--attack-start S] [--duration S] [--attack-net A.B.0.0]\n");
}

static int num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "fips-demo-producer: %s %s: give a number in %g..%g\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        double d = 0;
        int rc = 0;
        if (!strcmp(o, "--domain"))
            cfg.domain = v;
        else if (!strcmp(o, "--threads") && !(rc = num(o, v, 1, 256, &d)))
            cfg.threads = (unsigned)d;
        else if (!strcmp(o, "--attackers") && !(rc = num(o, v, 1, 65536, &d)))
            cfg.attackers = (unsigned)d;
        else if (!strcmp(o, "--attack-rate"))
            rc = num(o, v, 0, 1e8, &cfg.attack_rate);
        else if (!strcmp(o, "--legit-rate"))
            rc = num(o, v, 0, 1e8, &cfg.legit_rate);
        else if (!strcmp(o, "--ramp"))
            rc = num(o, v, 0, 86400, &cfg.ramp_s);
        else if (!strcmp(o, "--attack-start"))
            rc = num(o, v, 0, 86400, &cfg.attack_start_s);
        else if (!strcmp(o, "--duration"))
            rc = num(o, v, 0, 86400 * 365.0, &cfg.duration_s);
        else if (!strcmp(o, "--attack-net")) {
            unsigned a, b;
            if (sscanf(v, "%u.%u.0.0", &a, &b) != 2 || a > 255 || b > 254) {
                fprintf(stderr, "fips-demo-producer: --attack-net %s: give A.B.0.0\n", v);
                return 2;
            }
            cfg.net_a = a;
            cfg.net_b = b;
        } else if (!rc) {
            fprintf(stderr, "fips-demo-producer: unknown option %s\n", o);
            usage(stderr);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!cfg.domain) {
        usage(stderr);
        return 2;
    }
    if (cfg.attackers > 65536 / 1 && cfg.net_b + ((cfg.attackers - 1) >> 16) > 255) {
        fprintf(stderr, "fips-demo-producer: --attack-net leaves no room for %u attackers\n", cfg.attackers);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    char err[256] = "";
    int rc = fips_domain_open_err(&dom, NULL, cfg.domain, &o, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "fips-demo-producer: %s\n", err[0] ? err : fips_strerror(rc));
        return 1;
    }
    struct worker *ws = calloc(cfg.threads, sizeof *ws);
    if (!ws)
        return 1;
    double t0 = mono_s();
    unsigned started = 0;
    for (unsigned i = 0; i < cfg.threads; i++) {
        ws[i].id = i;
        if (pthread_create(&ws[i].th, NULL, work, &ws[i]) != 0)
            break;
        started++;
    }
    uint64_t legit = 0, attack = 0, dropped = 0;
    int error = 0;
    for (unsigned i = 0; i < started; i++) {
        pthread_join(ws[i].th, NULL);
        legit += ws[i].legit;
        attack += ws[i].attack;
        dropped += ws[i].dropped;
        if (ws[i].error && !error)
            error = ws[i].error;
    }
    double wall = mono_s() - t0;
    printf("{\"legit_lines\":%" PRIu64 ",\"attack_lines\":%" PRIu64 ",\"dropped\":%" PRIu64
           ",\"threads\":%u,\"attackers\":%u,\"seconds\":%.3f,\"error\":\"%s\"}\n",
           legit, attack, dropped, started, cfg.attackers, wall, error ? fips_strerror(error) : "");
    fflush(stdout);
    free(ws);
    fips_domain_close(dom);
    return error ? 1 : 0;
}
