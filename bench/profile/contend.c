/*
 * contend — a contended producer for `fipstop bench profile` and the bpf tests.
 *
 *   contend [--threads N] [--seconds S] [--hold N] [--mode fips|none]
 *           [--shm-dir DIR] [--domain NAME] [--wait]
 *
 * N threads (default 4) each loop: format a BIND-like query line (snprintf,
 * outside the lock), take one process-wide pthread mutex, log the line with
 * fips_log() (mode fips) and spin N xorshift rounds (--hold) inside, unlock.
 * More threads than CPUs make them queue on the mutex: futex waits, wakes and
 * context switches — exactly what the profilers trace, so their cost shows.
 *
 * With --wait it prints "ready PID" and starts only when a line arrives on
 * stdin (so a profiler can attach, and compile, first).  At the end it prints
 * one line: "ops N seconds S ops_per_s R dropped D cpu_s C" (C: its CPU time).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fips.h"

static fips_domain *dom;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int go, stop;
static unsigned hold = 200;

struct worker {
    pthread_t th;
    unsigned id;
    uint64_t ops, dropped;
    char pad[64];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof name, "contend-%u", w->id);
    pthread_setname_np(pthread_self(), name);
    if (dom)
        fips_producer_set_name(dom, name);
    uint64_t x = 0x9E3779B97F4A7C15ull * (w->id + 1);
    char line[256];
    while (!atomic_load_explicit(&go, memory_order_acquire))
        usleep(1000);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int len = snprintf(line, sizeof line,
                           "client @0x7f%010" PRIx64 " 127.0.%u.%u#%u (h%u.example.test): query: "
                           "h%u.example.test IN A +E(0) (127.0.0.1)",
                           (uint64_t)(x & 0xffffffffffull), (unsigned)(x >> 16) & 255,
                           (unsigned)(x >> 24) & 255, 1024 + (unsigned)(x >> 32) % 60000,
                           (unsigned)(x >> 40) % 5000, (unsigned)(x >> 40) % 5000);
        if (len < 0)
            len = 0;
        if ((size_t)len >= sizeof line)
            len = (int)sizeof line - 1;
        pthread_mutex_lock(&mu);
        if (dom && fips_log(dom, line, (uint32_t)len) != 0)
            w->dropped++;
        for (unsigned i = 0; i < hold; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        }
        pthread_mutex_unlock(&mu);
        w->ops++;
    }
    line[0] = (char)x;  /* keep the spin */
    __asm__ volatile("" : : "r"(line) : "memory");
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned nthreads = 4;
    double seconds = 5;
    const char *mode = "fips", *shm = NULL, *domain = "contend";
    int wait = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--wait")) { wait = 1; continue; }
        if (!v) { fprintf(stderr, "contend: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--threads")) nthreads = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--seconds")) seconds = strtod(v, NULL);
        else if (!strcmp(a, "--hold")) hold = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--shm-dir")) shm = v;
        else if (!strcmp(a, "--domain")) domain = v;
        else { fprintf(stderr, "contend: unknown option %s\n", a); return 2; }
        i++;
    }
    if (nthreads < 1 || nthreads > 256 || seconds <= 0) {
        fprintf(stderr, "contend: bad --threads or --seconds\n");
        return 2;
    }
    if (!strcmp(mode, "fips")) {
        fips_domain_opts o;
        fips_domain_opts_init(&o);
        o.create = 1;
        int rc = fips_domain_open(&dom, shm, domain, &o);
        if (rc) {
            fprintf(stderr, "contend: cannot open domain %s in %s: %s\n", domain, fips_shm_dir(shm),
                    fips_strerror(rc));
            return 1;
        }
    } else if (strcmp(mode, "none")) {
        fprintf(stderr, "contend: --mode fips|none\n");
        return 2;
    }
    struct worker *w = calloc(nthreads, sizeof *w);
    if (!w)
        return 1;
    for (unsigned i = 0; i < nthreads; i++) {
        w[i].id = i;
        if (pthread_create(&w[i].th, NULL, work, &w[i])) {
            perror("pthread_create");
            return 1;
        }
    }
    if (wait) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        char buf[64];
        if (!fgets(buf, sizeof buf, stdin))
            return 1;
    }
    double t0 = now_s();
    atomic_store_explicit(&go, 1, memory_order_release);
    struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
    atomic_store(&stop, 1);
    double el = now_s() - t0;
    uint64_t ops = 0, dropped = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
        dropped += w[i].dropped;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    printf("ops %" PRIu64 " seconds %.6f ops_per_s %.1f dropped %" PRIu64 " cpu_s %.3f\n", ops, el,
           (double)ops / el, dropped, cpu);
    if (dom) {
        fips_domain_close(dom);
        fips_domain_unlink(shm, domain);
    }
    return 0;
}
