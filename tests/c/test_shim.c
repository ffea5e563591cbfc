/*
 * test_shim — the syslog(3) drop-in (fipstop/csrc/fips_syslog.c) linked into
 * the test itself, so that ThreadSanitizer and AddressSanitizer/UBSan see
 * its copies into the ring (the LD_PRELOAD tests in
 * tests/unit/test_syslog_shim.py run it unsanitised, in real programs).
 *
 * Linking it in makes this program's syslog(), vsyslog(), __syslog_chk()
 * the shim's.  Every case logs, then reads the records back through a
 * consumer and compares them byte for byte with what glibc would send.
 */
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/time.h>
#include <syslog.h>

void __syslog_chk(int pri, int flag, const char *fmt, ...);
unsigned long long fips_syslog_dropped(void);

#define DOMAIN "shim"
#define MAX_RECORD 16384 /* > the general path's 8 KiB buffer: the paths differ */
#define HDR "<14>t: " /* LOG_USER | LOG_INFO, ident "t" */

static fips_domain *dom;
static fips_consumer *cons;

/* The next record, copied into out (NUL-terminated); its length, or -1. */
static long next_record(char *out, size_t cap, uint32_t *flags)
{
    fips_batch b;
    fips_record r;
    if (fips_consumer_read(cons, &b, 1) != 0) return -1;
    long n = -1;
    if (fips_batch_next(&b, &r)) {
        n = r.len;
        size_t k = r.len < cap - 1 ? r.len : cap - 1;
        memcpy(out, r.data, k);
        out[k] = 0;
        if (flags) *flags = r.flags;
    }
    fips_consumer_release(cons, &b);
    return n;
}

static void expect(const char *want, size_t want_len, uint32_t want_flags)
{
    static char got[MAX_RECORD + 16];
    uint32_t flags = 0;
    long n = next_record(got, sizeof got, &flags);
    REQUIRE(n >= 0);
    CHECK_EQ(n, want_len);
    CHECK(memcmp(got, want, want_len < (size_t)n ? want_len : (size_t)n) == 0);
    CHECK_EQ(flags, want_flags);
    if (n != (long)want_len || memcmp(got, want, want_len) != 0)
        fprintf(stderr, "  got  %ld bytes [%.*s]\n  want %zu bytes [%.*s]\n", n, n < 80 ? (int)n : 80, got,
                want_len, want_len < 80 ? (int)want_len : 80, want);
}

static void expect_str(const char *want)
{
    expect(want, strlen(want), 0);
}

/* named's query-log call: ten %s, most of them empty, one NULL. */
static void t_named_format(void)
{
    __syslog_chk(LOG_INFO, 1, "%s%s%s%s%s%s%s%s%s%s", "", "", "", "", "queries", ": ", "", NULL, "info: ",
                 "client @0x1 127.0.0.1#5300 (a.test): query: a.test IN A +E(0)");
    expect_str(HDR "queries: (null)info: client @0x1 127.0.0.1#5300 (a.test): query: a.test IN A +E(0)");
    syslog(LOG_INFO, "a=%s, b=%s!", "x", "yz");
    expect_str(HDR "a=x, b=yz!");
    syslog(LOG_INFO, "no conversion at all");
    expect_str(HDR "no conversion at all");
    syslog(LOG_INFO, "%s", "");
    expect_str(HDR);
}

/* The general path: printf conversions, %m, %%. */
static void t_general_format(void)
{
    errno = ENOENT;
    syslog(LOG_INFO, "%d %05.1f %m %% %c", -42, 3.14159, 'z');
    expect_str(HDR "-42 003.1 No such file or directory % z");
}

/* %n never writes, on either path. */
static void t_percent_n(void)
{
    int n = 12345;
    char fmt[32];
    snprintf(fmt, sizeof fmt, "abc%%n%%s");
    syslog(LOG_INFO, fmt, &n, "def");
    CHECK_EQ(n, 12345);
    expect_str(HDR "abcdef");
}

/* Longer than max_record: cut there, flagged, counted.  The fast path
 * ("%s") carries up to max_record; the general path ("%.*s") is cut by its
 * 8 KiB buffer first - which tells the two paths apart. */
static void t_truncation(void)
{
    static char big[20000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    static char want[MAX_RECORD];
    size_t hl = strlen(HDR);
    memcpy(want, HDR, hl);
    memset(want + hl, 'q', MAX_RECORD - hl);
    syslog(LOG_INFO, "%s", big);
    expect(want, MAX_RECORD, FIPS_REC_TRUNC);
    syslog(LOG_INFO, "%.*s", (int)strlen(big), big);
    expect(want, 8191, FIPS_REC_TRUNC);
    /* 10 000 bytes: whole through the fast path */
    big[10000] = 0;
    syslog(LOG_INFO, "%s", big);
    expect(want, hl + 10000, 0);
    /* exactly max_record: not cut */
    memset(big, 'q', sizeof big - 1);
    big[MAX_RECORD - hl] = 0;
    syslog(LOG_INFO, "%s", big);
    expect(want, MAX_RECORD, 0);
}

/* LOG_PID, idents around the fast path's limit, errno kept. */
static void t_ident_pid_errno(void)
{
    char want[600];
    openlog("t", LOG_PID, LOG_USER);
    syslog(LOG_INFO, "%s", "p");
    snprintf(want, sizeof want, "<14>t[%d]: p", (int)getpid());
    expect_str(want);
    static char ident[300];
    for (size_t len = 255; len <= 258; len++) { /* 256: fast path; 257: general */
        memset(ident, 'i', len);
        ident[len] = 0;
        openlog(ident, 0, LOG_USER);
        syslog(LOG_INFO, "%s", "m");
        snprintf(want, sizeof want, "<14>%s: m", ident);
        expect_str(want);
    }
    openlog("t", 0, LOG_USER);
    errno = EIO;
    syslog(LOG_INFO, "%s", "e");
    CHECK_EQ(errno, EIO);
    expect_str(HDR "e");
}

/* Control bytes and an ESC are carried as they are (escaped only when shown). */
static void t_control_bytes(void)
{
    syslog(LOG_INFO, "%s", "\x1b[31mred\x1b[0m\t\x7f\x01");
    expect_str(HDR "\x1b[31mred\x1b[0m\t\x7f\x01");
}

/* Many threads at once: each logs into a ring of its own, no lock. */
#define THREADS 4
#define PER_THREAD 3000
static void *writer(void *arg)
{
    long id = (long)arg;
    char num[32];
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(num, sizeof num, "%d", i);
        __syslog_chk(LOG_INFO, 1, "%s%s%s%s%s%s%s%s%s%s", "", "", "", "", "", "", "", "", id & 1 ? "odd " : "even ",
                     num);
    }
    return NULL;
}

static void t_threads(void)
{
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++) REQUIRE(pthread_create(&th[i], NULL, writer, (void *)i) == 0);
    long seen = 0, bad = 0;
    uint64_t deadline = t_mono_ns() + 20ull * 1000000000ull;
    int joined = 0;
    char rec[256];
    while (seen < THREADS * PER_THREAD && t_mono_ns() < deadline) {
        long n = next_record(rec, sizeof rec, NULL);
        if (n < 0) {
            if (!joined) {
                for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
                joined = 1;
            } else {
                t_sleep_us(1000);
            }
            continue;
        }
        seen++;
        if (strncmp(rec, HDR "odd ", strlen(HDR) + 4) != 0 && strncmp(rec, HDR "even ", strlen(HDR) + 5) != 0)
            bad++;
    }
    if (!joined)
        for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    CHECK_EQ(seen, THREADS * PER_THREAD);
    CHECK_EQ(bad, 0);
}

/* syslog(3) from a real timer signal's handler while the thread is inside
 * syslog(3) itself: the nested call is dropped and counted, nothing is
 * garbled, and records read + dropped (+ without a ring) = calls. */
static atomic_long g_alarms;
static void on_alarm(int sig)
{
    (void)sig;
    int e = errno;
    atomic_fetch_add(&g_alarms, 1);
    syslog(LOG_INFO, "from the handler %d", 7);
    errno = e;
}

static void t_signal_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 40}, {0, 40}};
    setitimer(ITIMER_REAL, &it, NULL);
    long calls = 0, seen = 0, bad = 0;
    char rec[256];
    uint64_t t0 = t_mono_ns();
    while (t_mono_ns() - t0 < 1000000000ull) {
        for (int i = 0; i < 32; i++, calls++) {
            if (calls & 1) syslog(LOG_INFO, "general %ld %s", calls, "path");
            else __syslog_chk(LOG_INFO, 1, "%s%s", "fast ", "path");
        }
        long n;
        while ((n = next_record(rec, sizeof rec, NULL)) >= 0) {
            seen++;
            if (strncmp(rec, HDR, strlen(HDR)) != 0) bad++;
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
    while (next_record(rec, sizeof rec, NULL) >= 0) {
        seen++;
        if (strncmp(rec, HDR, strlen(HDR)) != 0) bad++;
    }
    fips_monitor *m;
    char err[256];
    REQUIRE_RC(fips_monitor_open(&m, t_dir, DOMAIN, 0, err, sizeof err), 0);
    const struct fips_layout_header *h = fips_monitor_mapping(m);
    uint32_t nr = h->max_rings;
    fips_ring_stat *rs = calloc(nr, sizeof *rs);
    fips_consumer_stat cs[16];
    fips_pos_stat *ps = calloc((size_t)nr * h->max_consumers, sizeof *ps);
    fips_snapshot snap = {.rings = rs, .consumers = cs, .pos = ps};
    REQUIRE(rs && ps && h->max_consumers <= 16);
    CHECK_RC(fips_monitor_snapshot(m, &snap), 0);
    uint64_t dropped = h->records_no_ring;
    for (uint32_t r = 0; r < nr; r++) dropped += rs[r].records_dropped;
    long alarms = atomic_load(&g_alarms);
    printf("     %ld calls, %ld from the handler: %ld read, %llu dropped\n", calls, alarms, seen,
           (unsigned long long)dropped);
    CHECK(alarms > 100);
    CHECK_EQ(bad, 0);
    CHECK_EQ((uint64_t)seen + dropped + fips_syslog_dropped(), (uint64_t)(calls + alarms));
    free(rs);
    free(ps);
    fips_monitor_close(m);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t_mkdir("shim");
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = 1;
    o.max_record = MAX_RECORD;
    o.ring_capacity = 1u << 20;
    if (fips_domain_open(&dom, t_dir, DOMAIN, &o) != 0) DIE("cannot create the domain");
    if (fips_consumer_open(&cons, dom, "test") != 0) DIE("cannot open the consumer");
    /* read by the shim on its first call */
    setenv("FIPS_SHM_DIR", t_dir, 1);
    setenv("FIPS_DOMAIN", DOMAIN, 1);
    openlog("t", 0, LOG_USER);
    RUN(t_named_format);
    RUN(t_general_format);
    RUN(t_percent_n);
    RUN(t_truncation);
    RUN(t_ident_pid_errno);
    RUN(t_control_bytes);
    RUN(t_threads);
    RUN(t_signal_handler);
    closelog();
    fips_consumer_close(cons);
    fips_domain_close(dom);
    t_rmdir();
    return t_report("test_shim");
}
