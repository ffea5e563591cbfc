/*
 * shimcall — what one syslog(3) call costs in the fips shim against a no-op
 * syslog(3), with named's own call, alternated in one process.
 *
 *   shimcall FIPS_SHIM.so NULL_SHIM.so CALLS PAIRS WORK_KIB WARMUP
 *
 * Why: named's queries/s on this shared VM move by +-30 % between runs a few
 * seconds apart, so the bind modes cannot resolve a transport cost of a few
 * per cent.  Here both syslog(3)s are dlopen()ed into one process and timed
 * in turns of CALLS calls (pairs A/B, B/A, ...), a few milliseconds apart:
 * host noise hits both sides of a pair alike.  The call is the one Debian's
 * named makes for a query-log line (isc_log_doit -> __syslog_chk with
 * "%s%s%s%s%s%s%s%s%s%s", nine short or empty strings and the message).
 * Between two calls the loop reads WORK_KIB of other memory, as named does
 * answering a query between two log lines, so the shim's data is not all in
 * L1 as it would be in a tight loop (which would understate its cost); the
 * work is the same on both sides and cancels out of the difference.
 * WARMUP calls go first, untimed: enough to take the ring once around, so
 * that its pages are faulted in as in a server that has logged for a while
 * (the first lap's page faults cost more than the rest of a call).
 * The shim reads FIPS_DOMAIN / FIPS_SHM_DIR from the environment as under
 * `fipstop wrap`; whether a consumer drains the domain is the caller's.
 *
 * Prints one line per pair: "pair K null_ns fips_ns" (total ns for CALLS),
 * then "shim dropped D": lines the shim discarded for want of a domain
 * (fips_syslog_dropped(); ring-full drops are in the domain's counters).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <syslog.h>
#include <time.h>

typedef void (*syslog_chk_fn)(int, int, const char *, ...);

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* named's query-log line: the client, the name, the flags; the name changes
 * with every call as under dnsperf's query file. */
static char msgs[64][160];
static unsigned char *work;
static size_t work_len;
static volatile unsigned long long sink;

static void other_work(void)
{
    unsigned long long s = 0;
    for (size_t i = 0; i < work_len; i += 64) s += work[i];
    sink += s;
}

static long long timed(syslog_chk_fn f, long calls)
{
    long long t0 = now_ns();
    for (long i = 0; i < calls; i++) {
        other_work();
        f(LOG_DAEMON | LOG_INFO, 1, "%s%s%s%s%s%s%s%s%s%s", "", "", "", "", "queries", ": ", "", "",
          "info: ", msgs[i & 63]);
    }
    return now_ns() - t0;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s FIPS_SHIM.so NULL_SHIM.so CALLS PAIRS WORK_KIB WARMUP\n", argv[0]);
        return 2;
    }
    long calls = atol(argv[3]);
    int pairs = atoi(argv[4]);
    long work_kib = atol(argv[5]);
    long warmup = atol(argv[6]);
    if (calls <= 0 || pairs <= 0 || work_kib < 0 || work_kib > 65536 || warmup < 0) {
        fprintf(stderr, "%s: CALLS and PAIRS must be positive, WORK_KIB 0-65536, WARMUP >= 0\n", argv[0]);
        return 2;
    }
    work_len = (size_t)work_kib * 1024;
    work = malloc(work_len + 1);
    if (!work) return 2;
    /* written, so that it is real memory: an untouched calloc()ed block maps
     * the kernel's zero page, and 256 KiB of reads would hit 4 KiB of L1 */
    for (size_t i = 0; i <= work_len; i++) work[i] = (unsigned char)i;
    void *hf = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void *hn = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!hf || !hn) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    syslog_chk_fn fips = (syslog_chk_fn)dlsym(hf, "__syslog_chk");
    syslog_chk_fn null = (syslog_chk_fn)dlsym(hn, "__syslog_chk");
    unsigned long long (*dropped)(void) = (unsigned long long (*)(void))dlsym(hf, "fips_syslog_dropped");
    if (!fips || !null) {
        fprintf(stderr, "no __syslog_chk in %s\n", !fips ? argv[1] : argv[2]);
        return 2;
    }
    for (int i = 0; i < 64; i++)
        snprintf(msgs[i], sizeof msgs[i],
                 "client @0x7f3c1c0b8168 127.0.0.1#%d (h%d.bench.test): query: h%d.bench.test IN A +E(0)K "
                 "(127.0.0.1)", 40000 + i * 7, 1000 + i * 37, 1000 + i * 37);
    size_t keep = work_len;
    work_len = 0;
    for (long i = 0; i < warmup; i += 1000) {
        timed(fips, 1000); /* the thread's ring is created and faulted in here */
        struct timespec nap = {0, 1000000}; /* lets a consumer keep up */
        nanosleep(&nap, NULL);
    }
    work_len = keep;
    timed(null, calls);
    for (int k = 0; k < pairs; k++) {
        long long n, f;
        if (k % 2 == 0) { n = timed(null, calls); f = timed(fips, calls); }
        else { f = timed(fips, calls); n = timed(null, calls); }
        printf("pair %d %lld %lld\n", k, n, f);
    }
    printf("shim dropped %llu\n", dropped ? dropped() : 0ULL);
    return 0;
}
