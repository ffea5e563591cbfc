/*
 * Tiny test helpers shared by the C tests (header-only, C11).
 *
 * CHECK*() never abort: they print file:line and the failed expression and
 * count the failure, so one run reports every broken invariant.  The counter
 * is atomic because the stress and kill tests check from many threads.
 */
#ifndef FIPS_TESTUTIL_H
#define FIPS_TESTUTIL_H

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fips.h"

static atomic_int t_failures;   /* failed checks, all threads */
static atomic_long t_checks;    /* checks run, all threads */

static void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void t_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fprintf per failure so lines from several threads do not interleave. */
    fprintf(stderr, "%s:%d: FAIL: %s\n", file, line, msg);
    atomic_fetch_add(&t_failures, 1);
}

#define CHECK(cond)                                                        \
    do {                                                                   \
        atomic_fetch_add_explicit(&t_checks, 1, memory_order_relaxed);     \
        if (!(cond))                                                       \
            t_fail(__FILE__, __LINE__, "%s", #cond);                       \
    } while (0)

/* Compare as unsigned 64-bit and print both values on failure. */
#define CHECK_EQ(a, b)                                                     \
    do {                                                                   \
        unsigned long long va_ = (unsigned long long)(a);                  \
        unsigned long long vb_ = (unsigned long long)(b);                  \
        atomic_fetch_add_explicit(&t_checks, 1, memory_order_relaxed);     \
        if (va_ != vb_)                                                    \
            t_fail(__FILE__, __LINE__, "%s == %s  (%llu != %llu)", #a, #b, \
                   va_, vb_);                                              \
    } while (0)

/* An API return code: print fips_strerror() of both sides on mismatch. */
#define CHECK_RC(expr, want)                                               \
    do {                                                                   \
        int got_ = (int)(expr);                                            \
        int want_ = (int)(want);                                           \
        atomic_fetch_add_explicit(&t_checks, 1, memory_order_relaxed);     \
        if (got_ != want_)                                                 \
            t_fail(__FILE__, __LINE__, "%s -> %d (%s), want %d (%s)",      \
                   #expr, got_, t_errname(got_), want_, t_errname(want_)); \
    } while (0)

/* Checks that must hold for the rest of the test to make sense: stop the
 * current test function (which must return void) if they fail. */
#define REQUIRE(cond)                                                      \
    do {                                                                   \
        atomic_fetch_add_explicit(&t_checks, 1, memory_order_relaxed);     \
        if (!(cond)) {                                                     \
            t_fail(__FILE__, __LINE__, "required: %s", #cond);             \
            return;                                                        \
        }                                                                  \
    } while (0)

#define REQUIRE_RC(expr, want)                                             \
    do {                                                                   \
        int got_ = (int)(expr);                                            \
        int want_ = (int)(want);                                           \
        atomic_fetch_add_explicit(&t_checks, 1, memory_order_relaxed);     \
        if (got_ != want_) {                                               \
            t_fail(__FILE__, __LINE__, "required: %s -> %d (%s), want %d", \
                   #expr, got_, t_errname(got_), want_);                   \
            return;                                                        \
        }                                                                  \
    } while (0)

/* fips_strerror for fips codes, strerror for plain negative errno values. */
static inline const char *t_errname(int rc)
{
    if (rc == 0)
        return "ok";
    int e = rc < 0 ? -rc : rc;
    if (e >= FIPS_EFULL && e < FIPS_EFULL + 100)
        return fips_strerror(rc);
    return strerror(e);
}

/* Print a fatal setup error (not an API behaviour under test) and exit. */
#define DIE(...)                                                           \
    do {                                                                   \
        fprintf(stderr, "%s:%d: fatal: ", __FILE__, __LINE__);             \
        fprintf(stderr, __VA_ARGS__);                                      \
        fputc('\n', stderr);                                               \
        exit(2);                                                           \
    } while (0)

static inline uint64_t t_mono_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        DIE("clock_gettime: %s", strerror(errno));
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void t_sleep_us(uint64_t us)
{
    struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L };
    /* Restart on EINTR so a signal (e.g. SIGCHLD) does not shorten a wait
     * that a grace-period test depends on. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* xorshift64*: a per-thread PRNG, no shared state, reproducible by seed. */
static inline uint64_t t_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* FNV-1a, 32 bit. */
static inline uint32_t t_fnv1a(uint32_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}
#define T_FNV_SEED 2166136261u

/* A private directory for domain files: on tmpfs when possible, because the
 * domain is mmap'ed and written at high rates. */
static char t_dir[256];

static inline const char *t_mkdir(const char *tag)
{
    const char *bases[] = { getenv("FIPS_TEST_DIR"), "/dev/shm", getenv("TMPDIR"), "/tmp" };
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        if (!bases[i] || !*bases[i])
            continue;
        int n = snprintf(t_dir, sizeof t_dir, "%s/fipstest-%s.XXXXXX", bases[i], tag);
        if (n < 0 || (size_t)n >= sizeof t_dir)
            continue;
        if (mkdtemp(t_dir))
            return t_dir;
    }
    DIE("mkdtemp failed everywhere: %s", strerror(errno));
}

static int t_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "warning: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* Remove the test directory and everything in it (depth first, no symlink
 * following: a test plants symlinks there on purpose). */
static inline void t_rmdir(void)
{
    if (t_dir[0] && nftw(t_dir, t_rm_cb, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "warning: cannot clean %s: %s\n", t_dir, strerror(errno));
}

/* Run one test function and print ok/FAIL with its name. */
static int t_cases_passed, t_cases_failed;
#define RUN(fn)                                                            \
    do {                                                                   \
        int before_ = atomic_load(&t_failures);                            \
        uint64_t t0_ = t_mono_ns();                                        \
        fn();                                                              \
        double ms_ = (double)(t_mono_ns() - t0_) / 1e6;                    \
        if (atomic_load(&t_failures) == before_) {                         \
            t_cases_passed++;                                              \
            printf("ok   %-34s %8.1f ms\n", #fn, ms_);                     \
        } else {                                                           \
            t_cases_failed++;                                              \
            printf("FAIL %-34s %8.1f ms\n", #fn, ms_);                     \
        }                                                                  \
        fflush(stdout);                                                    \
    } while (0)

/* Final line of each test program, and its exit status. */
static inline int t_report(const char *prog)
{
    if (t_cases_passed + t_cases_failed)
        printf("%s: %d cases passed, %d failed (%d failed checks of %ld)\n", prog,
               t_cases_passed, t_cases_failed, atomic_load(&t_failures),
               atomic_load(&t_checks));
    else
        printf("%s: %s (%d failed checks of %ld)\n", prog,
               atomic_load(&t_failures) ? "FAILED" : "passed", atomic_load(&t_failures),
               atomic_load(&t_checks));
    return atomic_load(&t_failures) ? 1 : 0;
}

#endif
