/*
 * syslog_prog — a syslog(3) client for the tests of the LD_PRELOAD shim
 * (fipstop/lib/libfips_syslog.so), driven by tests/unit/test_syslog_shim.py.
 *
 * The tests compile it twice:
 *   cc -O2 -D_FORTIFY_SOURCE=2  -> it imports __syslog_chk / __vsyslog_chk
 *                                  (what Debian's named and libjson-c use)
 *   cc -O0 -U_FORTIFY_SOURCE    -> it imports syslog / vsyslog
 * and check the imports with `nm -D`.
 *
 *   syslog_prog SCENARIO [ARGS...]
 *
 * Scenarios (the payloads the tests expect are in the test file):
 *   plain              syslog() with printf formatting and %m (errno = ENOENT)
 *   openlog            openlog ident / LOG_PID / facility, explicit facility, closelog
 *   mask               setlogmask filtering and return values
 *   vsyslog            vsyslog() through a va_list
 *   percent_n          formats holding %n (also in writable memory, positional,
 *                      with more conversions than arguments): nothing is written
 *   control            control bytes, ESC, DEL, invalid UTF-8 and an embedded NUL
 *   long LEN           one message of LEN bytes ("%s": the shim's fast path)
 *   longfmt LEN        the same through "%.*s" (the general, vsnprintf path)
 *   threads N M        N threads, all alive at once, log M records each
 *   waves N M W        N threads in waves of W (each wave joined before the next), M records each,
 *                      a short sleep every 64: rings are closed and taken again
 *   fork               parent and child both log after fork()
 *   perror             LOG_PERROR copy to stderr
 *   many N [US]        N records "many I", optionally US microseconds apart
 *   bench N [masked]   ns per syslog() call over N calls (masked: filtered out)
 *
 * Output on stdout, one "key=value" per line: pid=, tid= (threads), child=
 * (fork), ns_per_call= (bench), and last dropped=N when the shim's
 * fips_syslog_dropped() is present (looked up with dlsym) or dropped=none.
 * Exit status 0; 3 when a self-check failed (a %n wrote, errno was not
 * preserved, a thread could not start), with the reason on stderr.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static int failed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "syslog_prog: check failed: " __VA_ARGS__);    \
            fputc('\n', stderr);                                           \
            failed = 1;                                                    \
        }                                                                  \
    } while (0)

static int my_tid(void) { return (int)syscall(SYS_gettid); }

static void print_dropped(void)
{
    unsigned long long (*fn)(void) =
        (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "fips_syslog_dropped");
    if (fn) printf("dropped=%llu\n", fn());
    else printf("dropped=none\n");
}

/* ---- scenarios -------------------------------------------------------- */

static void sc_plain(void)
{
    syslog(LOG_INFO, "hello %d %s %05.1f %x", 42, "world", 3.14159, 255u);
    errno = ENOENT;
    syslog(LOG_ERR, "open failed: %m");
    CHECK(errno == ENOENT, "errno changed by syslog: %d", errno);
    errno = EACCES;
    syslog(LOG_WARNING, "%s: %m (%d)", "again", 7);
    CHECK(errno == EACCES, "errno changed by syslog: %d", errno);
}

/* named's query-log call: only %s conversions (the shim concatenates those
 * without vsnprintf), with literal text, an empty string and a NULL. */
static void sc_concat(void)
{
    const char *volatile nil = NULL; /* hidden from -Wformat */
    syslog(LOG_INFO, "%s%s%s%s%s%s%s%s%s%s", "client ", "@0x7f00 ", "", "127.0.0.1#5353 ", "(q.example)",
           ": query: ", "q.example IN A", "", " +E(0)", " (127.0.0.1)");
    syslog(LOG_NOTICE, "lit %s mid %s end", "a", nil);
    syslog(LOG_INFO, "%s", "");
    syslog(LOG_INFO, "no conversions at all");
}

static void sc_openlog(void)
{
    openlog("myident", LOG_PID, LOG_DAEMON);
    syslog(LOG_INFO, "one");                        /* <30>myident[pid]: one */
    syslog(LOG_LOCAL3 | LOG_WARNING, "two");        /* <156>: explicit facility */
    syslog(LOG_EMERG, "three");                     /* <24> */
    openlog("second", 0, 0);                        /* facility 0 keeps LOG_DAEMON */
    syslog(LOG_DEBUG, "four");                      /* <31>second: four */
    closelog();
    syslog(LOG_NOTICE, "five");                     /* ident back to the program name */
}

static void sc_mask(void)
{
    int old = setlogmask(LOG_UPTO(LOG_WARNING));
    printf("mask0=%d\n", old);
    syslog(LOG_INFO, "filtered info");
    syslog(LOG_DEBUG, "filtered debug");
    syslog(LOG_ERR, "passes err");
    syslog(LOG_WARNING, "passes warning");
    old = setlogmask(LOG_MASK(LOG_DEBUG));
    printf("mask1=%d\n", old);
    syslog(LOG_ERR, "filtered err");
    syslog(LOG_DEBUG, "passes debug");
    old = setlogmask(0);                            /* 0: query, no change */
    printf("mask2=%d\n", old);
    syslog(LOG_DEBUG, "passes debug again");
    errno = EPERM;
    syslog(LOG_INFO, "filtered %m");
    CHECK(errno == EPERM, "errno changed by a filtered syslog: %d", errno);
}

static void my_vlog(int pri, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsyslog(pri, fmt, ap);
    va_end(ap);
}

static void sc_vsyslog(void)
{
    my_vlog(LOG_NOTICE, "v %s=%d", "answer", 42);
    errno = EINTR;
    my_vlog(LOG_ERR, "v errno: %m");
}

static void sc_percent_n(void)
{
    int n1 = 0;
    signed char n2 = 0;
    long n3 = 0;
    short n4 = 0;
    syslog(LOG_INFO, "before%nafter", &n1);
    CHECK(n1 == 0, "%%n wrote %d", n1);
    char wfmt[] = "writable %d%n end";              /* FORTIFY would abort on this */
    syslog(LOG_INFO, wfmt, 5, &n1);
    CHECK(n1 == 0, "writable %%n wrote %d", n1);
    syslog(LOG_INFO, "hh%hhn l%ln h%hn z", &n2, &n3, &n4);
    CHECK(n2 == 0 && n3 == 0 && n4 == 0, "%%hhn/%%ln/%%hn wrote %d %ld %d", n2, n3, n4);
    syslog(LOG_INFO, "pos %1$s%2$n %1$s", "x", &n1);
    CHECK(n1 == 0, "positional %%n wrote %d", n1);
    syslog(LOG_INFO, "width %5n|%-3n|", &n1, &n1);
    CHECK(n1 == 0, "%%5n wrote %d", n1);
    syslog(LOG_INFO, "star %*n|%s", 5, &n1, "ok");    /* the width argument is consumed too */
    CHECK(n1 == 0, "%%*n wrote %d", n1);
    syslog(LOG_INFO, "literal %%n %d", 3);
    /* More conversions than arguments: the caller's bug, but no write. */
    syslog(LOG_INFO, "missing%n%n%n%n%n%n%n%n args");
    /* A format too long to copy (defused) is logged as its raw text. */
    size_t big = 3000;
    char *lf = malloc(big + 16);
    if (!lf) { failed = 1; return; }
    memset(lf, 'L', big);
    strcpy(lf + big, "%n tail");
    syslog(LOG_INFO, lf, &n1);
    CHECK(n1 == 0, "long-format %%n wrote %d", n1);
    free(lf);
}

static void sc_control(void)
{
    /* ESC sequences, DEL, C0 controls, CR/LF, tab, invalid UTF-8, textual
     * markup and an embedded NUL (via %c) travel byte-exact. */
    syslog(LOG_INFO, "ctl:\x01\x1b[31mred\x1b[0m\x7f\t\r\nline2%cnul\xff\xfe[bold]b[/bold]\\x41 end", 0);
    syslog(LOG_INFO, "%c", 0);                      /* a message that is one NUL */
    syslog(LOG_INFO, "trailing newline\n");
}

static void sc_long(size_t len)
{
    char *buf = malloc(len + 1);
    if (!buf) { failed = 1; return; }
    for (size_t i = 0; i < len; i++) buf[i] = (char)('a' + i % 26);
    buf[len] = 0;
    syslog(LOG_INFO, "%s", buf);
    free(buf);
}

static void sc_longfmt(size_t len)
{
    char *buf = malloc(len + 1);
    if (!buf) { failed = 1; return; }
    for (size_t i = 0; i < len; i++) buf[i] = (char)('a' + i % 26);
    buf[len] = 0;
    syslog(LOG_INFO, "%.*s", (int)len, buf);
    free(buf);
}

struct thr_arg {
    int index, records;
    pthread_barrier_t *start, *done;
    int tid;
};

static void *thr_main(void *p)
{
    struct thr_arg *a = p;
    a->tid = my_tid();
    pthread_barrier_wait(a->start);                 /* all threads alive at once */
    for (int i = 0; i < a->records; i++)
        syslog(LOG_INFO, "thread %d msg %d tid %d", a->index, i, a->tid);
    pthread_barrier_wait(a->done);
    return NULL;
}

static void sc_threads(int n, int m)
{
    pthread_t th[256];
    struct thr_arg args[256];
    pthread_barrier_t start, done;
    if (n < 1 || n > 256) { failed = 1; return; }
    pthread_barrier_init(&start, NULL, (unsigned)n);
    pthread_barrier_init(&done, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        args[i] = (struct thr_arg){ .index = i, .records = m, .start = &start, .done = &done };
        int rc = pthread_create(&th[i], NULL, thr_main, &args[i]);
        CHECK(rc == 0, "pthread_create: %s", strerror(rc));
        if (rc) exit(3);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) printf("tid=%d\n", args[i].tid);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&done);
}

static void *wave_main(void *p)
{
    struct thr_arg *a = p;
    for (int i = 0; i < a->records; i++) {
        syslog(LOG_INFO, "wave thread %d msg %d", a->index, i);
        if (i % 64 == 63) usleep(50);
    }
    return NULL;
}

static void sc_waves(int n, int m, int w)
{
    pthread_t th[256];
    struct thr_arg args[256];
    if (n < 1 || n > 256 || w < 1) { failed = 1; return; }
    for (int i = 0; i < n; i += w) {
        int e = i + w > n ? n : i + w;
        for (int j = i; j < e; j++) {
            args[j] = (struct thr_arg){ .index = j, .records = m };
            int rc = pthread_create(&th[j], NULL, wave_main, &args[j]);
            CHECK(rc == 0, "pthread_create: %s", strerror(rc));
            if (rc) exit(3);
        }
        for (int j = i; j < e; j++) pthread_join(th[j], NULL);
    }
}

static void sc_fork(void)
{
    openlog("forky", LOG_PID, LOG_USER);
    syslog(LOG_INFO, "parent before fork");
    fflush(stdout);
    pid_t c = fork();
    if (c < 0) { failed = 1; return; }
    if (c == 0) {
        syslog(LOG_INFO, "child after fork");
        syslog(LOG_INFO, "child second");
        exit(0);
    }
    int st = 0;
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    syslog(LOG_INFO, "parent after fork");
    printf("child=%d\n", (int)c);
}

static void sc_perror(void)
{
    openlog("pe", LOG_PERROR | LOG_PID, LOG_USER);
    syslog(LOG_INFO, "to stderr %d", 7);
    syslog(LOG_INFO, "ends with newline\n");
}

static void sc_many(long n, long us)
{
    for (long i = 0; i < n; i++) {
        syslog(LOG_INFO, "many %ld", i);
        if (us > 0) usleep((useconds_t)us);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sc_bench(long n, int masked)
{
    openlog("bench", 0, LOG_USER);
    if (masked) setlogmask(LOG_UPTO(LOG_ERR));
    syslog(LOG_INFO, "warm-up");
    double t0 = now_s();
    for (long i = 0; i < n; i++)
        syslog(LOG_INFO, "bench %ld client 192.0.2.%ld#%d: query: www.example.com IN A +E(0)K (127.0.0.1)",
               i, i & 255, 53);
    double t1 = now_s();
    printf("ns_per_call=%.1f\n", (t1 - t0) * 1e9 / (double)n);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: syslog_prog SCENARIO [ARGS...]\n");
        return 2;
    }
    const char *s = argv[1];
    long a1 = argc > 2 ? strtol(argv[2], NULL, 0) : 0;
    long a2 = argc > 3 ? strtol(argv[3], NULL, 0) : 0;
    printf("pid=%d\n", (int)getpid());
    if (!strcmp(s, "plain")) sc_plain();
    else if (!strcmp(s, "openlog")) sc_openlog();
    else if (!strcmp(s, "concat")) sc_concat();
    else if (!strcmp(s, "mask")) sc_mask();
    else if (!strcmp(s, "vsyslog")) sc_vsyslog();
    else if (!strcmp(s, "percent_n")) sc_percent_n();
    else if (!strcmp(s, "control")) sc_control();
    else if (!strcmp(s, "long")) sc_long((size_t)a1);
    else if (!strcmp(s, "longfmt")) sc_longfmt((size_t)a1);
    else if (!strcmp(s, "threads")) sc_threads((int)a1, (int)a2);
    else if (!strcmp(s, "waves")) sc_waves((int)a1, (int)a2, argc > 4 ? atoi(argv[4]) : 1);
    else if (!strcmp(s, "fork")) sc_fork();
    else if (!strcmp(s, "perror")) sc_perror();
    else if (!strcmp(s, "many")) sc_many(a1, a2);
    else if (!strcmp(s, "bench")) sc_bench(a1 > 0 ? a1 : 1000000, argc > 3 && !strcmp(argv[3], "masked"));
    else {
        fprintf(stderr, "syslog_prog: unknown scenario %s\n", s);
        return 2;
    }
    print_dropped();
    return failed ? 3 : 0;
}
