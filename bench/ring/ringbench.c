/*
 * ringbench — C harness of `fipstop bench ring` (issue #2).
 *
 * One binary, several roles, each started by fipstop/bench/ring.py, which
 * builds it on demand together with fipstop/csrc/fips.c (plain -O2):
 *
 *   produce  --case none|fips_c|fips_c_batch|file|unix_dgram|syslog
 *            --size N --duration S [--cpu K] [--shm-dir D --domain NAME]
 *            [--ring-capacity B] [--file PATH] [--sock PATH]
 *            [--syslog-mode ns|wire] [--tmp DIR]
 *            One producer thread logs records of N payload bytes for S
 *            seconds and prints one JSON line with its counts and the
 *            per-record latency percentiles.
 *   consume  --shm-dir D --domain NAME --name C [--cpu K] [--ring-capacity B]
 *            [--max-rings N] [--backoff-us U] [--min-batch M]
 *            Creates the domain, registers consumer C, prints "ready", drains
 *            with fips_consumer_read/release until SIGTERM, drains what is
 *            left, prints one JSON line.  After a read that found nothing or
 *            fewer than M records it busy-waits U us (locally, touching no
 *            shared line) so that records accumulate: polling the producer's
 *            head line back to back would slow the producer down (U=0: poll).
 *   recv     --sock PATH [--cpu K]
 *            Unix datagram receiver: binds PATH, prints "ready", recv() until
 *            SIGTERM, prints one JSON line.
 *   hold     --shm-dir D --domain NAME --threads N [--ring-capacity B]
 *            N producer threads each log one record and stay alive (N active
 *            rings) until SIGTERM / stdin EOF.  One consumer is registered.
 *   snap     --shm-dir D --domain NAME [--iters N]
 *            Times fips_monitor_snapshot() N times; prints percentiles (us).
 *   monitor  --shm-dir D --domain NAME [--hz F]
 *            Snapshots at F Hz until SIGTERM (the monitor of the A/B test).
 *
 * Latency method: the producer reads CLOCK_MONOTONIC (vDSO) once per batch of
 * --lat-batch records (64; one call for the *_batch cases) and stores
 * batch_ns / records_in_batch; p50/p99 are over those batches.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "fips.h"

#define BATCH_N 256u /* records per fips_log_batch call */

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { (void)sig; g_stop = 1; }

static void install_stop(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: blocking calls see EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Keep the compiler from dropping the formatting of the `none` case. */
#define ESCAPE(p) __asm__ __volatile__("" : : "r"(p) : "memory")

static void die(const char *fmt, ...)
{
    va_list ap;
    char msg[512];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one JSON line so the orchestrator can show the reason */
    printf("{\"error\": \"");
    for (const char *p = msg; *p; p++) {
        if (*p == '"' || *p == '\\') putchar('\\');
        putchar((unsigned char)*p >= 0x20 ? *p : ' ');
    }
    printf("\"}\n");
    fflush(stdout);
    exit(3);
}

/* CPU time, run-queue wait and involuntary context switches of the calling
 * thread (or process): how much of the wall time it ran, how long it was
 * runnable but another task had its CPU (schedstat run_delay), and how often
 * it was preempted.  A shared machine's other work shows up in the wait; a
 * thread blocked in send(2) shows up in neither. */
struct cpu_use {
    uint64_t cpu_ns;
    uint64_t wait_ns; /* run_delay; UINT64_MAX if unknown */
    long invol;
};

static struct cpu_use cpu_use(int who)
{
    struct rusage ru;
    struct cpu_use u = {0, UINT64_MAX, 0};
    if (getrusage(who, &ru) == 0) {
        u.cpu_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull +
                   (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000ull;
        u.invol = ru.ru_nivcsw;
    }
    FILE *f = fopen(who == RUSAGE_THREAD ? "/proc/thread-self/schedstat" : "/proc/self/schedstat", "r");
    if (f) {
        unsigned long long run, wait;
        if (fscanf(f, "%llu %llu", &run, &wait) == 2) u.wait_ns = wait;
        fclose(f);
    }
    return u;
}

static double wait_share(struct cpu_use a, struct cpu_use b, uint64_t wall)
{
    if (a.wait_ns == UINT64_MAX || b.wait_ns == UINT64_MAX || !wall) return -1.0;
    return (double)(b.wait_ns - a.wait_ns) / (double)wall;
}

static int pin_cpu(int cpu)
{
    if (cpu < 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* ---- options ------------------------------------------------------------ */
struct opts {
    const char *role, *kase, *shm_dir, *domain, *name, *file, *sock, *tmp;
    const char *syslog_mode;
    uint32_t size, lat_batch, threads, iters, max_rings;
    double duration, hz, backoff_us;
    uint32_t min_batch;
    uint64_t ring_capacity;
    int cpu, cpu2;
    double rate; /* produce: records/s to pace to, 0 = as fast as possible */
};

static void parse(struct opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->role = argc > 1 ? argv[1] : "";
    o->kase = "none";
    o->domain = "ringbench";
    o->name = "bench";
    o->syslog_mode = "ns";
    o->size = 128;
    o->lat_batch = 64;
    o->threads = 1024;
    o->iters = 2000;
    o->duration = 2.0;
    o->hz = 10.0;
    o->cpu = -1;
    o->cpu2 = -1;
    o->backoff_us = 5.0;
    o->min_batch = 64;
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) die("option %s needs a value", k);
        i++;
        if (!strcmp(k, "--case")) o->kase = v;
        else if (!strcmp(k, "--shm-dir")) o->shm_dir = v;
        else if (!strcmp(k, "--domain")) o->domain = v;
        else if (!strcmp(k, "--name")) o->name = v;
        else if (!strcmp(k, "--file")) o->file = v;
        else if (!strcmp(k, "--sock")) o->sock = v;
        else if (!strcmp(k, "--tmp")) o->tmp = v;
        else if (!strcmp(k, "--syslog-mode")) o->syslog_mode = v;
        else if (!strcmp(k, "--size")) o->size = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--lat-batch")) o->lat_batch = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--threads")) o->threads = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--iters")) o->iters = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--max-rings")) o->max_rings = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--duration")) o->duration = strtod(v, NULL);
        else if (!strcmp(k, "--hz")) o->hz = strtod(v, NULL);
        else if (!strcmp(k, "--backoff-us")) o->backoff_us = strtod(v, NULL);
        else if (!strcmp(k, "--min-batch")) o->min_batch = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--ring-capacity")) o->ring_capacity = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--cpu")) o->cpu = atoi(v);
        else if (!strcmp(k, "--cpu2")) o->cpu2 = atoi(v);
        else if (!strcmp(k, "--rate")) o->rate = strtod(v, NULL);
        else die("unknown option %s", k);
    }
    if (o->size < 32 || o->size > 65536) die("--size must be 32..65536");
    if (o->lat_batch < 1) o->lat_batch = 1;
}

static int open_domain(fips_domain **d, const struct opts *o, int create)
{
    fips_domain_opts dopts;
    fips_domain_opts_init(&dopts);
    if (o->ring_capacity) dopts.ring_capacity = o->ring_capacity;
    if (o->max_rings) dopts.max_rings = o->max_rings;
    dopts.create = create;
    return fips_domain_open(d, o->shm_dir, o->domain, &dopts);
}

/* ---- latency samples ---------------------------------------------------- */
struct lat {
    float *v;
    size_t n, cap;
};

static void lat_init(struct lat *l, size_t cap)
{
    l->cap = cap ? cap : 1024;
    l->n = 0;
    l->v = malloc(l->cap * sizeof *l->v);
    if (!l->v) die("out of memory");
    /* touch every page now, not inside the timed loop */
    memset(l->v, 0, l->cap * sizeof *l->v);
}

static inline void lat_add(struct lat *l, float x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap * 2;
        float *v = realloc(l->v, cap * sizeof *v);
        if (!v) return; /* keep what we have */
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double pct(const float *sorted, size_t n, double p)
{
    if (!n) return -1.0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    if (i >= n) i = n - 1;
    return sorted[i];
}

/* ---- record formatting -------------------------------------------------- */
/* The record: "bench ring seq=<16 hex digits> " then 'x' filler, '\n' last.
 * Every case formats it the same way into a local buffer first: the buffer
 * holds the template from setup, and per record the 16 hex digits of the
 * sequence number are written into it (a printf-free "%016llx"). */
#define SEQ_OFF 15u
static const char hexdig[16] = "0123456789abcdef";

static void make_template(char *t, uint32_t size)
{
    memset(t, 'x', size);
    memcpy(t, "bench ring seq=", SEQ_OFF);
    memset(t + SEQ_OFF, '0', 16);
    t[SEQ_OFF + 16] = ' ';
    t[size - 1] = '\n';
}

static char hexpair[256][2]; /* "00".."ff" */

static void init_hexpair(void)
{
    for (int i = 0; i < 256; i++) {
        hexpair[i][0] = hexdig[i >> 4];
        hexpair[i][1] = hexdig[i & 15];
    }
}

static inline void format_record(char *dst, uint64_t seq)
{
    char *p = dst + SEQ_OFF + 16;
    for (int i = 0; i < 8; i++) {
        p -= 2;
        memcpy(p, hexpair[seq & 255], 2);
        seq >>= 8;
    }
}

/* ---- syslog redirection -------------------------------------------------- */
/* Make /dev/log of this process (only) be the bench's rsyslog socket: a
 * private mount namespace with a bind mount on /dev/log, or, where /dev/log
 * does not exist, a private tmpfs on /dev holding a symlink /dev/log -> sock
 * (plus links to the few devices of the original /dev).  Returns NULL or a
 * reason. */
static const char *syslog_redirect(const char *sock, const char *tmp,
                                   char *why, size_t whylen)
{
    if (unshare(CLONE_NEWNS) != 0) {
        snprintf(why, whylen, "unshare(CLONE_NEWNS): %s", strerror(errno));
        return why;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, whylen, "mount --make-rprivate /: %s", strerror(errno));
        return why;
    }
    struct stat st;
    if (stat("/dev/log", &st) == 0) {
        if (mount(sock, "/dev/log", NULL, MS_BIND, NULL) != 0) {
            snprintf(why, whylen, "bind mount on /dev/log: %s", strerror(errno));
            return why;
        }
        return NULL;
    }
    if (!tmp) {
        snprintf(why, whylen, "/dev/log absent and no --tmp for a private /dev");
        return why;
    }
    char olddev[4096];
    snprintf(olddev, sizeof olddev, "%s/olddev", tmp);
    mkdir(olddev, 0700);
    if (mount("/dev", olddev, NULL, MS_BIND | MS_REC, NULL) != 0) {
        snprintf(why, whylen, "bind /dev: %s", strerror(errno));
        return why;
    }
    if (mount("tmpfs", "/dev", "tmpfs", 0, "mode=755") != 0) {
        snprintf(why, whylen, "tmpfs on /dev: %s", strerror(errno));
        return why;
    }
    static const char *const keep[] = {"null", "zero", "full", "random",
                                       "urandom", "tty", "shm", "pts", NULL};
    char src[4200], dst[64];
    for (int i = 0; keep[i]; i++) {
        snprintf(src, sizeof src, "%s/%s", olddev, keep[i]);
        snprintf(dst, sizeof dst, "/dev/%s", keep[i]);
        (void)symlink(src, dst);
    }
    (void)symlink("/proc/self/fd", "/dev/fd");
    if (symlink(sock, "/dev/log") != 0) {
        snprintf(why, whylen, "symlink /dev/log: %s", strerror(errno));
        return why;
    }
    return NULL;
}

/* The syslog(3) wire path without syslog(3): what glibc 2.36's
 * __vsyslog_internal does per call (time, localtime_r, strftime, header
 * snprintf, message vsnprintf, send on a connected SOCK_DGRAM socket).
 * Used only when the mount-namespace redirection is not possible. */
static int wire_fd = -1;
static pid_t wire_pid;
static int wire_connect(const char *sock)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    wire_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (wire_fd < 0) return -errno;
    if (connect(wire_fd, (struct sockaddr *)&a, sizeof a) != 0) return -errno;
    wire_pid = getpid();
    return 0;
}

static int wire_syslog(int pri, const char *fmt, ...)
{
    char buf[2048], ts[32];
    struct tm tm;
    time_t now = time(NULL);
    localtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%h %e %T", &tm);
    int l = snprintf(buf, sizeof buf, "<%d>%s %s[%d]: ", pri | LOG_USER, ts,
                     "fipsbench", (int)wire_pid);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + l, sizeof buf - (size_t)l, fmt, ap);
    va_end(ap);
    size_t n = (size_t)l + (size_t)m;
    if (n > sizeof buf - 1) n = sizeof buf - 1;
    return send(wire_fd, buf, n, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* ---- produce ------------------------------------------------------------- */
static int ring_stats(const struct opts *o, int ring, fips_ring_stat *out)
{
    fips_monitor *m;
    char err[256];
    int rc = fips_monitor_open(&m, o->shm_dir, o->domain, 0, err, sizeof err);
    if (rc) return rc;
    const struct fips_layout_header *h = fips_monitor_header(m);
    fips_snapshot s;
    memset(&s, 0, sizeof s);
    s.rings = calloc(h->max_rings, sizeof *s.rings);
    s.consumers = calloc(h->max_consumers, sizeof *s.consumers);
    s.pos = calloc((size_t)h->max_rings * h->max_consumers, sizeof *s.pos);
    rc = fips_monitor_snapshot(m, &s);
    if (!rc && ring >= 0 && (uint32_t)ring < s.n_rings) *out = s.rings[ring];
    free(s.rings);
    free(s.consumers);
    free(s.pos);
    fips_monitor_close(m);
    return rc;
}

static int do_produce(const struct opts *o)
{
    const uint32_t size = o->size;
    const char *k = o->kase;
    enum { C_NONE, C_NONE_TSC, C_FIPS, C_FIPS_BATCH, C_FILE, C_UNIX, C_SYSLOG } c;
    if (!strcmp(k, "none")) c = C_NONE;
    else if (!strcmp(k, "none_tsc")) c = C_NONE_TSC;
    else if (!strcmp(k, "fips_c")) c = C_FIPS;
    else if (!strcmp(k, "fips_c_batch")) c = C_FIPS_BATCH;
    else if (!strcmp(k, "file")) c = C_FILE;
    else if (!strcmp(k, "unix_dgram")) c = C_UNIX;
    else if (!strcmp(k, "syslog")) c = C_SYSLOG;
    else die("unknown case %s", k);

    /* setup (untimed) ------------------------------------------------------ */
    const char *syslog_how = NULL;
    char why[512] = "";
    if (c == C_SYSLOG) {
        if (!o->sock) die("syslog needs --sock");
        if (!strcmp(o->syslog_mode, "ns")) {
            /* before any thread exists: unshare(CLONE_NEWNS) needs it */
            const char *r = syslog_redirect(o->sock, o->tmp, why, sizeof why);
            if (r) die("syslog redirection: %s", r);
            openlog("fipsbench", LOG_PID | LOG_NDELAY, LOG_USER);
            syslog_how = "syslog(3) via private mount namespace, /dev/log -> bench rsyslog socket";
        } else {
            int rc = wire_connect(o->sock);
            if (rc) die("connect %s: %s", o->sock, strerror(-rc));
            syslog_how = "syslog(3) wire path emulated (glibc 2.36 sequence)";
        }
    }
    int pin_rc = pin_cpu(o->cpu);

    fips_domain *d = NULL;
    int ring = -1;
    if (c == C_FIPS || c == C_FIPS_BATCH) {
        int rc = open_domain(&d, o, 1);
        if (rc) die("fips_domain_open %s/%s: %s", fips_shm_dir(o->shm_dir),
                    o->domain, fips_strerror(rc));
        ring = fips_producer_ring(d);
        if (ring < 0) die("fips_producer_ring: %s", fips_strerror(ring));
        fips_producer_set_name(d, "ringbench");
    }
    int fd = -1;
    if (c == C_FILE) {
        if (!o->file) die("file needs --file");
        fd = open(o->file, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) die("open %s: %s", o->file, strerror(errno));
    }
    if (c == C_UNIX) {
        if (!o->sock) die("unix_dgram needs --sock");
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof a.sun_path, "%s", o->sock);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
            die("connect %s: %s", o->sock, strerror(errno));
    }

    char tmpl[65536];
    make_template(tmpl, size);
    init_hexpair();
    const uint32_t nb = (c == C_FIPS_BATCH) ? BATCH_N : o->lat_batch;
    char *bufs = aligned_alloc(64, ((size_t)nb * size + 63) & ~(size_t)63);
    if (!bufs) die("out of memory");
    for (uint32_t i = 0; i < nb; i++) memcpy(bufs + (size_t)i * size, tmpl, size);
    const void *ptrs[BATCH_N];
    uint32_t lens[BATCH_N];
    for (uint32_t i = 0; i < BATCH_N && i < nb; i++) {
        ptrs[i] = bufs + (size_t)i * size;
        lens[i] = size;
    }
    /* syslog(3) takes a C string: the record without its '\n', NUL-ended */
    char sbuf[65536 + 1];
    memcpy(sbuf, tmpl, size);
    sbuf[size - 1] = '\0';

    struct lat lat;
    lat_init(&lat, (size_t)(o->duration * 4e6) + 1024);

    uint64_t attempted = 0, accepted = 0, dropped = 0, errors = 0, eagain = 0;
    int last_err = 0;
    uint64_t seq = 0;
    const uint64_t dur_ns = (uint64_t)(o->duration * 1e9);

    const struct cpu_use u_start = cpu_use(RUSAGE_THREAD);
    const uint64_t t_start = mono_ns();
    const uint64_t t_end = t_start + dur_ns;
    uint64_t t0 = t_start, t1 = t_start;
    const double ns_per_rec = o->rate > 0 ? 1e9 / o->rate : 0.0;

    /* the timed loop ------------------------------------------------------ */
    switch (c) {
    case C_NONE:
        for (;;) {
            for (uint32_t i = 0; i < nb; i++) {
                format_record(bufs, seq++);
                ESCAPE(bufs);
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            t0 = t1;
        }
        accepted = attempted;
        break;
    case C_NONE_TSC:
        /* none + the one hardware clock read a libfips record takes (its
         * ts_ns): the floor of any ring that stamps each record, which the
         * peers (boost's queue, the prototype) do not. */
        for (;;) {
            for (uint32_t i = 0; i < nb; i++) {
                format_record(bufs, seq++);
                ESCAPE(bufs);
#if defined(__x86_64__)
                uint64_t tsc = __rdtsc();
#else
                uint64_t tsc = mono_ns();
#endif
                ESCAPE(&tsc);
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            t0 = t1;
        }
        accepted = attempted;
        break;
    case C_FIPS:
        for (;;) {
            for (uint32_t i = 0; i < nb; i++) {
                format_record(bufs, seq++);
                int rc = fips_log(d, bufs, size);
                if (__builtin_expect(rc != 0, 0)) {
                    if (rc == -FIPS_EFULL) dropped++;
                    else { errors++; last_err = rc; }
                }
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            if (ns_per_rec > 0) { /* --rate: wait for the next batch's turn */
                const uint64_t due = t_start + (uint64_t)((double)attempted * ns_per_rec);
                while ((t1 = mono_ns()) < due) cpu_relax();
            }
            t0 = t1;
        }
        accepted = attempted - dropped - errors;
        break;
    case C_FIPS_BATCH:
        for (;;) {
            for (uint32_t i = 0; i < nb; i++)
                format_record(bufs + (size_t)i * size, seq++);
            int rc = fips_log_batch(d, ptrs, lens, nb);
            if (rc >= 0) {
                accepted += (uint64_t)rc;
                dropped += nb - (uint32_t)rc;
            } else {
                errors += nb;
                last_err = rc;
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            t0 = t1;
        }
        break;
    case C_FILE:
    case C_UNIX:
        for (;;) {
            for (uint32_t i = 0; i < nb; i++) {
                format_record(bufs, seq++);
                ssize_t w = (c == C_FILE) ? write(fd, bufs, size)
                                          : send(fd, bufs, size, MSG_NOSIGNAL);
                if (__builtin_expect(w != (ssize_t)size, 0)) {
                    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) eagain++;
                    else { errors++; last_err = errno; }
                }
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            t0 = t1;
        }
        accepted = attempted - errors - eagain;
        break;
    case C_SYSLOG: {
        const int wire = wire_fd >= 0;
        for (;;) {
            for (uint32_t i = 0; i < nb; i++) {
                format_record(sbuf, seq++);
                if (wire) {
                    int rc = wire_syslog(LOG_INFO, "%s", sbuf);
                    if (rc) { errors++; last_err = -rc; }
                } else {
                    syslog(LOG_INFO, "%s", sbuf); /* void: errors invisible */
                }
            }
            attempted += nb;
            t1 = mono_ns();
            lat_add(&lat, (float)(t1 - t0) / (float)nb);
            if (t1 >= t_end) break;
            t0 = t1;
        }
        accepted = attempted - errors;
        break;
    }
    }
    const uint64_t elapsed = t1 - t_start;
    const struct cpu_use u_end = cpu_use(RUSAGE_THREAD);

    /* report (untimed) ---------------------------------------------------- */
    fips_ring_stat rs;
    memset(&rs, 0, sizeof rs);
    int have_rs = 0;
    if (d) {
        have_rs = ring_stats(o, ring, &rs) == 0;
    }
    qsort(lat.v, lat.n, sizeof *lat.v, cmp_float);
    printf("{\"case\": \"%s\", \"size\": %u, \"elapsed_ns\": %llu, "
           "\"attempted\": %llu, \"accepted\": %llu, \"dropped\": %llu, "
           "\"errors\": %llu, \"eagain\": %llu, \"last_error\": %d, "
           "\"lat_batch\": %u, \"lat_samples\": %zu, "
           "\"ns_p50\": %.3f, \"ns_p99\": %.3f, \"ns_p999\": %.3f, \"ns_max\": %.3f, "
           "\"cpu_share\": %.4f, \"runq_wait_share\": %.4f, \"invol_csw\": %ld, "
           "\"pinned_cpu\": %d, \"pin_ok\": %s",
           k, size, (unsigned long long)elapsed,
           (unsigned long long)attempted, (unsigned long long)accepted,
           (unsigned long long)dropped, (unsigned long long)errors,
           (unsigned long long)eagain, last_err, nb, lat.n,
           pct(lat.v, lat.n, 0.50), pct(lat.v, lat.n, 0.99),
           pct(lat.v, lat.n, 0.999), lat.n ? lat.v[lat.n - 1] : -1.0,
           elapsed ? (double)(u_end.cpu_ns - u_start.cpu_ns) / (double)elapsed : 0.0,
           wait_share(u_start, u_end, elapsed), u_end.invol - u_start.invol,
           o->cpu, (o->cpu < 0 || pin_rc == 0) ? "true" : "false");
    if (syslog_how) printf(", \"syslog_how\": \"%s\"", syslog_how);
    if (have_rs)
        printf(", \"ring\": {\"index\": %d, \"records_committed\": %llu, "
               "\"records_dropped\": %llu, \"bytes_dropped\": %llu, "
               "\"full_events\": %llu, \"high_water_bytes\": %llu}",
               ring, (unsigned long long)rs.records_committed,
               (unsigned long long)rs.records_dropped,
               (unsigned long long)rs.bytes_dropped,
               (unsigned long long)rs.full_events,
               (unsigned long long)rs.high_water_bytes);
    printf("}\n");
    fflush(stdout);
    if (fd >= 0) close(fd);
    if (d) {
        fips_producer_close(d);
        fips_domain_close(d);
    }
    if (c == C_SYSLOG && wire_fd < 0) closelog();
    free(bufs);
    free(lat.v);
    return 0;
}

/* ---- consume ------------------------------------------------------------- */
/* The consumer's wait when it has too little to read: a local busy-wait of
 * ns, so that records accumulate instead of polling the producer's head. */
static void idle(uint64_t ns)
{
    uint64_t until = mono_ns() + ns;
    while (mono_ns() < until) cpu_relax();
}

static int do_consume(const struct opts *o)
{
    install_stop();
    int pin_rc = pin_cpu(o->cpu);
    fips_domain *d;
    int rc = open_domain(&d, o, 1);
    if (rc) die("fips_domain_open %s/%s: %s", fips_shm_dir(o->shm_dir),
                o->domain, fips_strerror(rc));
    fips_consumer *c;
    rc = fips_consumer_open(&c, d, o->name);
    if (rc) die("fips_consumer_open %s: %s", o->name, fips_strerror(rc));
    printf("ready\n");
    fflush(stdout);
    const struct cpu_use u_start = cpu_use(RUSAGE_SELF);
    const uint64_t w_start = mono_ns();

    uint64_t records = 0, batches = 0, bytes = 0, lost = 0, empty = 0, waits = 0;
    const uint64_t backoff_ns = (uint64_t)(o->backoff_us * 1000.0);
    uint64_t errors = 0;
    int last_err = 0, evicted = 0;
    fips_batch b;
    fips_record r;
    int draining = 0;
    uint64_t drain_deadline = 0;
    /* The longest the loop went without looking at the ring: a preemption,
     * a hypervisor steal or a long batch, and its own back-off waits (20 us
     * each in the bench) with whatever was stolen inside them, since the
     * ring fills during those too.  A ring of C bytes filled at R bytes/s
     * overflows in any such gap longer than C / R, whatever the consumer's
     * speed (keepup.py reports it). */
    uint64_t max_gap_ns = 0, t_prev = mono_ns();
    for (;;) {
        {
            uint64_t t_now = mono_ns();
            if (t_now - t_prev > max_gap_ns) max_gap_ns = t_now - t_prev;
            t_prev = t_now;
        }
        if (g_stop && !draining) {
            draining = 1;
            drain_deadline = mono_ns() + 2000000000ull;
        }
        rc = fips_consumer_read(c, &b, 4096);
        if (rc == 0) {
            while (fips_batch_next(&b, &r)) {
                bytes += r.len;
                records++;
            }
            lost += b.lost;
            batches++;
            int rr = fips_consumer_release(c, &b);
            if (rr < 0) { errors++; last_err = rr; } /* 1: queued behind another reader's batch */
            if (backoff_ns && b.count < o->min_batch && !draining) {
                idle(backoff_ns);
                waits++;
            }
            continue;
        }
        if (rc == -FIPS_EAGAIN) {
            if (draining) break; /* producer gone, nothing left */
            if (backoff_ns) {
                idle(backoff_ns);
                waits++;
            } else if (++empty % 65536 == 0) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            } else {
                cpu_relax();
            }
            continue;
        }
        if (rc == -FIPS_EEVICTED) { evicted = 1; last_err = rc; break; }
        errors++;
        last_err = rc;
        if (errors > 1000) break;
        if (draining && mono_ns() > drain_deadline) break;
    }
    const struct cpu_use u_end = cpu_use(RUSAGE_SELF);
    const uint64_t w_end = mono_ns();
    printf("{\"role\": \"consume\", \"records\": %llu, \"batches\": %llu, "
           "\"bytes\": %llu, \"lost\": %llu, \"errors\": %llu, "
           "\"evicted\": %s, \"last_error\": %d, \"backoff_us\": %g, \"min_batch\": %u, "
           "\"backoff_waits\": %llu, \"cpu_share\": %.4f, \"runq_wait_share\": %.4f, \"invol_csw\": %ld, "
           "\"pinned_cpu\": %d, \"pin_ok\": %s, \"max_gap_ns\": %llu}\n",
           (unsigned long long)records, (unsigned long long)batches,
           (unsigned long long)bytes, (unsigned long long)lost,
           (unsigned long long)errors, evicted ? "true" : "false", last_err,
           o->backoff_us, o->min_batch, (unsigned long long)waits,
           w_end > w_start ? (double)(u_end.cpu_ns - u_start.cpu_ns) / (double)(w_end - w_start) : 0.0,
           wait_share(u_start, u_end, w_end - w_start), u_end.invol - u_start.invol,
           o->cpu, (o->cpu < 0 || pin_rc == 0) ? "true" : "false", (unsigned long long)max_gap_ns);
    fflush(stdout);
    fips_consumer_close(c);
    fips_domain_close(d);
    return 0;
}

/* ---- recv (unix datagram receiver) -------------------------------------- */
static int do_recv(const struct opts *o)
{
    install_stop();
    int pin_rc = pin_cpu(o->cpu);
    if (!o->sock) die("recv needs --sock");
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", o->sock);
    unlink(o->sock);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("bind %s: %s", o->sock, strerror(errno));
    printf("ready\n");
    fflush(stdout);
    static char buf[65536];
    uint64_t records = 0, bytes = 0;
    while (!g_stop) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n >= 0) { records++; bytes += (uint64_t)n; }
    }
    for (;;) { /* what is still queued */
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) break;
        records++;
        bytes += (uint64_t)n;
    }
    printf("{\"role\": \"recv\", \"records\": %llu, \"bytes\": %llu, "
           "\"pinned_cpu\": %d, \"pin_ok\": %s}\n",
           (unsigned long long)records, (unsigned long long)bytes, o->cpu,
           (o->cpu < 0 || pin_rc == 0) ? "true" : "false");
    fflush(stdout);
    close(fd);
    unlink(o->sock);
    return 0;
}

/* ---- hold: N live producer threads, one ring each ----------------------- */
struct hold_ctx {
    fips_domain *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t logged, failed;
    int release;
    int first_err;
};

static void *hold_thread(void *arg)
{
    struct hold_ctx *h = arg;
    char rec[64];
    int n = snprintf(rec, sizeof rec, "hold thread %d", (int)gettid());
    int rc = fips_log(h->d, rec, (uint32_t)n);
    pthread_mutex_lock(&h->mu);
    if (rc) {
        h->failed++;
        if (!h->first_err) h->first_err = rc;
    } else {
        h->logged++;
    }
    pthread_cond_broadcast(&h->cv);
    while (!h->release) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static int do_hold(const struct opts *o)
{
    install_stop();
    struct opts oo = *o;
    if (!oo.max_rings) oo.max_rings = o->threads;
    fips_domain *d;
    int rc = open_domain(&d, &oo, 1);
    if (rc) die("fips_domain_open: %s", fips_strerror(rc));
    fips_consumer *c;
    rc = fips_consumer_open(&c, d, "holder");
    if (rc) die("fips_consumer_open: %s", fips_strerror(rc));
    struct hold_ctx h;
    memset(&h, 0, sizeof h);
    h.d = d;
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    pthread_t *t = calloc(o->threads, sizeof *t);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 * 1024);
    uint32_t started = 0;
    for (uint32_t i = 0; i < o->threads; i++) {
        if (pthread_create(&t[i], &at, hold_thread, &h) != 0) break;
        started++;
    }
    pthread_mutex_lock(&h.mu);
    while (h.logged + h.failed < started) pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);
    printf("ready {\"threads\": %u, \"rings\": %u, \"failed\": %u, \"first_error\": \"%s\"}\n",
           started, h.logged, h.failed, h.first_err ? fips_strerror(h.first_err) : "");
    fflush(stdout);
    /* stay until SIGTERM or stdin EOF */
    char ch;
    while (!g_stop) {
        ssize_t n = read(0, &ch, 1);
        if (n == 0) break;
        if (n < 0 && errno != EINTR) break;
    }
    pthread_mutex_lock(&h.mu);
    h.release = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    for (uint32_t i = 0; i < started; i++) pthread_join(t[i], NULL);
    fips_consumer_close(c);
    fips_domain_close(d);
    return 0;
}

/* ---- snap / monitor ------------------------------------------------------ */
struct snapbuf {
    fips_monitor *m;
    fips_snapshot s;
};

static void snap_open(struct snapbuf *sb, const struct opts *o)
{
    char err[512] = "";
    int rc = fips_monitor_open(&sb->m, o->shm_dir, o->domain, 0, err, sizeof err);
    if (rc) die("fips_monitor_open: %s %s", fips_strerror(rc), err);
    const struct fips_layout_header *h = fips_monitor_header(sb->m);
    memset(&sb->s, 0, sizeof sb->s);
    sb->s.rings = calloc(h->max_rings, sizeof *sb->s.rings);
    sb->s.consumers = calloc(h->max_consumers, sizeof *sb->s.consumers);
    sb->s.pos = calloc((size_t)h->max_rings * h->max_consumers, sizeof *sb->s.pos);
    if (!sb->s.rings || !sb->s.consumers || !sb->s.pos) die("out of memory");
}

static int do_snap(const struct opts *o)
{
    int pin_rc = pin_cpu(o->cpu);
    struct snapbuf sb;
    snap_open(&sb, o);
    const struct fips_layout_header *h = fips_monitor_header(sb.m);
    struct lat lat;
    lat_init(&lat, o->iters + 16);
    int rc = 0;
    for (uint32_t i = 0; i < 20; i++) fips_monitor_snapshot(sb.m, &sb.s); /* warm */
    for (uint32_t i = 0; i < o->iters; i++) {
        uint64_t t0 = mono_ns();
        rc = fips_monitor_snapshot(sb.m, &sb.s);
        uint64_t t1 = mono_ns();
        if (rc) break;
        lat_add(&lat, (float)(t1 - t0) / 1000.0f);
    }
    if (rc) die("fips_monitor_snapshot: %s", fips_strerror(rc));
    uint32_t active = 0, cons = 0;
    for (uint32_t i = 0; i < sb.s.n_rings; i++)
        active += sb.s.rings[i].state == FIPS_RING_ACTIVE;
    for (uint32_t i = 0; i < sb.s.n_consumers; i++)
        cons += sb.s.consumers[i].state == FIPS_CONS_ACTIVE;
    qsort(lat.v, lat.n, sizeof *lat.v, cmp_float);
    printf("{\"role\": \"snap\", \"iters\": %zu, \"max_rings\": %u, "
           "\"max_consumers\": %u, \"active_rings\": %u, \"active_consumers\": %u, "
           "\"us_p50\": %.3f, \"us_p99\": %.3f, \"us_min\": %.3f, \"us_max\": %.3f, "
           "\"pinned_cpu\": %d, \"pin_ok\": %s}\n",
           lat.n, h->max_rings, h->max_consumers, active, cons,
           pct(lat.v, lat.n, 0.5), pct(lat.v, lat.n, 0.99),
           lat.n ? lat.v[0] : -1.0, lat.n ? lat.v[lat.n - 1] : -1.0, o->cpu,
           (o->cpu < 0 || pin_rc == 0) ? "true" : "false");
    fflush(stdout);
    fips_monitor_close(sb.m);
    return 0;
}

/* ---- pingpong ------------------------------------------------------------ */
/* The cost of moving one cache line between --cpu and --cpu2 and back: two
 * pinned threads take turns incrementing one counter (each waits for the
 * other's value).  Prints the per-round-trip time of each of --iters rounds
 * of 2000 round trips, their median and minimum: the regime a run was in
 * (issue 21: this machine switches between ~60 and ~500 ns). */
static _Alignas(64) _Atomic uint64_t pp_line;
static int pp_cpu;
static volatile int pp_stop;
static void *pp_peer(void *arg)
{
    (void)arg;
    pin_cpu(pp_cpu);
    uint64_t v = 1;
    while (!pp_stop) {
        while (atomic_load_explicit(&pp_line, memory_order_acquire) != v)
            if (pp_stop) return NULL;
        atomic_store_explicit(&pp_line, v + 1, memory_order_release);
        v += 2;
    }
    return NULL;
}
static int do_pingpong(const struct opts *o)
{
    int pin_rc = pin_cpu(o->cpu);
    pp_cpu = o->cpu2;
    pthread_t th;
    if (pthread_create(&th, NULL, pp_peer, NULL)) die("pthread_create");
    const uint32_t rounds = o->iters ? o->iters : 15, per = 2000;
    float *rt = calloc(rounds, sizeof *rt);
    if (!rt) die("out of memory");
    uint64_t v = 0;
    for (uint32_t r = 0; r < rounds; r++) {
        uint64_t t0 = mono_ns();
        for (uint32_t i = 0; i < per; i++) {
            atomic_store_explicit(&pp_line, v + 1, memory_order_release);
            v += 2;
            uint64_t spins = 0;
            while (atomic_load_explicit(&pp_line, memory_order_acquire) != v)
                if (++spins > 2000000000ull) die("pingpong: the peer thread stopped answering");
        }
        rt[r] = (float)(mono_ns() - t0) / (float)per;
    }
    pp_stop = 1;
    atomic_store_explicit(&pp_line, UINT64_MAX, memory_order_release);
    pthread_join(th, NULL);
    float *s = malloc(rounds * sizeof *s);
    if (!s) die("out of memory");
    memcpy(s, rt, rounds * sizeof *s);
    qsort(s, rounds, sizeof *s, cmp_float);
    printf("{\"round_trip_ns_p50\": %.1f, \"round_trip_ns_min\": %.1f, \"round_trip_ns_max\": %.1f, "
           "\"rounds\": %u, \"round_trips_per_round\": %u, \"cpu\": %d, \"cpu2\": %d, \"pin_ok\": %s, "
           "\"rounds_ns\": [", pct(s, rounds, 0.5), s[0], s[rounds - 1], rounds, per, o->cpu, o->cpu2,
           pin_rc == 0 ? "true" : "false");
    for (uint32_t r = 0; r < rounds; r++) printf("%s%.1f", r ? ", " : "", rt[r]);
    printf("]}\n");
    fflush(stdout);
    free(rt);
    free(s);
    return 0;
}

/* ---- stall --------------------------------------------------------------- */
/* The machine's own floor for keep-up (issue 21): a thread pinned to --cpu
 * that does nothing but read the clock for --duration seconds, and the gaps
 * between two of its reads.  A gap is time the CPU was taken from it (an
 * interrupt, another task, the hypervisor running another guest): any
 * consumer on that CPU loses at least as much, and a ring of C bytes filled
 * at R bytes/s overflows in a gap longer than C / R however fast the consumer
 * reads.  With --cpu2 a second thread does the same on that CPU at the same
 * time, as the producer keeps it busy during a keep-up probe: on this VM the
 * gaps of one vCPU grow ~10x while the other is busy too (0.4 ms alone,
 * 4 ms beside a spinning one), so a floor taken with it idle is no floor.
 * Prints, per CPU, the longest gap, the time lost, and how many gaps passed
 * each of STALL_EDGES. */
static const uint64_t STALL_EDGES[] = {10000, 50000, 100000, 250000, 500000, 1000000, 2000000, 5000000};
#define N_STALL_EDGES (sizeof STALL_EDGES / sizeof STALL_EDGES[0])
struct stall_res { /* one per thread, on a line of its own: no false sharing between the two */
    _Alignas(64) int cpu;
    int pin_ok;
    double duration;
    uint64_t wall, reads, max_gap, lost, over[N_STALL_EDGES];
};

static void *stall_loop(void *arg)
{
    struct stall_res *r = arg;
    r->pin_ok = r->cpu < 0 || pin_cpu(r->cpu) == 0;
    const uint64_t t_start = mono_ns(), t_end = t_start + (uint64_t)(r->duration * 1e9);
    uint64_t t_prev = t_start;
    for (;;) {
        const uint64_t t = mono_ns();
        const uint64_t gap = t - t_prev;
        t_prev = t;
        r->reads++;
        if (gap > r->max_gap) r->max_gap = gap;
        if (gap >= STALL_EDGES[0]) {
            r->lost += gap;
            for (size_t i = 0; i < N_STALL_EDGES && gap >= STALL_EDGES[i]; i++) r->over[i]++;
        }
        if (t >= t_end) break;
    }
    r->wall = t_prev - t_start;
    return NULL;
}

static void stall_print(const struct stall_res *r)
{
    printf("\"cpu\": %d, \"pin_ok\": %s, \"wall_ns\": %llu, \"reads\": %llu, \"max_gap_ns\": %llu, "
           "\"lost_ns\": %llu, \"gaps_over\": {",
           r->cpu, r->pin_ok ? "true" : "false", (unsigned long long)r->wall, (unsigned long long)r->reads,
           (unsigned long long)r->max_gap, (unsigned long long)r->lost);
    for (size_t i = 0; i < N_STALL_EDGES; i++)
        printf("%s\"%llu\": %llu", i ? ", " : "", (unsigned long long)STALL_EDGES[i],
               (unsigned long long)r->over[i]);
    printf("}");
}

static int do_stall(const struct opts *o)
{
    struct stall_res main_r = {.cpu = o->cpu, .duration = o->duration};
    struct stall_res other = {.cpu = o->cpu2, .duration = o->duration};
    pthread_t th;
    const int two = o->cpu2 >= 0;
    if (two && pthread_create(&th, NULL, stall_loop, &other)) die("pthread_create");
    stall_loop(&main_r);
    if (two) pthread_join(th, NULL);
    printf("{\"role\": \"stall\", ");
    stall_print(&main_r);
    if (two) {
        printf(", \"other\": {");
        stall_print(&other);
        printf("}");
    }
    printf("}\n");
    fflush(stdout);
    return 0;
}

static int do_monitor(const struct opts *o)
{
    install_stop();
    pin_cpu(o->cpu);
    struct snapbuf sb;
    snap_open(&sb, o);
    printf("ready\n");
    fflush(stdout);
    const uint64_t period = (uint64_t)(1e9 / (o->hz > 0 ? o->hz : 10.0));
    uint64_t next = mono_ns(), n = 0, busy = 0, errors = 0;
    while (!g_stop) {
        uint64_t t0 = mono_ns();
        if (fips_monitor_snapshot(sb.m, &sb.s)) errors++;
        busy += mono_ns() - t0;
        n++;
        next += period;
        struct timespec ts = {(time_t)(next / 1000000000ull),
                              (long)(next % 1000000000ull)};
        while (!g_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    printf("{\"role\": \"monitor\", \"snapshots\": %llu, \"busy_ns\": %llu, \"errors\": %llu}\n",
           (unsigned long long)n, (unsigned long long)busy, (unsigned long long)errors);
    fflush(stdout);
    fips_monitor_close(sb.m);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(&o, argc, argv);
    if (!strcmp(o.role, "produce")) return do_produce(&o);
    if (!strcmp(o.role, "consume")) return do_consume(&o);
    if (!strcmp(o.role, "recv")) return do_recv(&o);
    if (!strcmp(o.role, "hold")) return do_hold(&o);
    if (!strcmp(o.role, "snap")) return do_snap(&o);
    if (!strcmp(o.role, "monitor")) return do_monitor(&o);
    if (!strcmp(o.role, "pingpong")) return do_pingpong(&o);
    if (!strcmp(o.role, "stall")) return do_stall(&o);
    fprintf(stderr, "usage: ringbench produce|consume|recv|hold|snap|monitor|pingpong|stall [options]\n");
    return 2;
}
