/*
 * fipsipc_bench — the FIPS paper's prototype (FIPS-IPC) in `fipstop bench ring`.
 *
 * fipstop's code, built by fipstop/bench/ring/proto.py with the prototype's own ring library
 * (src/lib/fips_buf.c of github.com/schrc3b6/FIPS-IPC, MIT; not shipped) and its flags (-O3 -march=native):
 *
 *   produce --case fipsipc|fipsipc_batch --size N --duration S --conf FILE [--cpu K]
 *           One writer thread for S seconds, the same records and the same timing as ringbench's produce
 *           (64 records per timed batch; "bench ring seq=<16 hex> xxx...\n" of N bytes, formatted in a local
 *           buffer then copied into the slot): fipsipc takes and commits one slot per record
 *           (fips_get_write_buffer/fips_buf_write with one iovec), fipsipc_batch ten (the batch the
 *           prototype's own programs use).  A full ring (FIPS_BUF_ERROR_NO_SPACE) drops the record(s) and
 *           counts them, as libfips does by default (the prototype's own programs retry instead).
 *           Prints ringbench's JSON line.
 *   consume --conf FILE [--cpu K] [--backoff-us U]
 *           One reader thread: prints "ready", reads batches of 10 (else 1: fips_buf_read takes exactly as many
 *           as it asks for), returns them, busy-waits U us when it found nothing, until SIGTERM; drains; prints
 *           a JSON line.
 */
#define _GNU_SOURCE
#include <fips_buf.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define LAT_BATCH 64u
#define PROTO_BATCH 10u
#define SEQ_OFF 15u

static volatile sig_atomic_t g_stop;
static void on_stop(int s) { (void)s; g_stop = 1; }

static void die(const char *msg, int rc)
{
    printf("{\"error\": \"%s (%d)\"}\n", msg, rc);
    fflush(stdout);
    exit(3);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct cpu_use { uint64_t cpu_ns, wait_ns; long invol; };

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

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double pct(const float *v, size_t n, double p)
{
    if (!n) return -1.0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i >= n ? n - 1 : i];
}

static const char hexdig[] = "0123456789abcdef";

static inline void format_record(char *dst, uint64_t seq)
{
    char *p = dst + SEQ_OFF + 16;
    for (int i = 0; i < 8; i++) {
        p -= 2;
        p[0] = hexdig[(seq >> 4) & 15];
        p[1] = hexdig[seq & 15];
        seq >>= 8;
    }
}

int main(int argc, char **argv)
{
    const char *role = argc > 1 ? argv[1] : "", *kase = "fipsipc", *conf = NULL;
    uint32_t size = 128;
    double duration = 2.0, backoff_us = 20.0;
    int cpu = -1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--case")) kase = argv[i + 1];
        else if (!strcmp(argv[i], "--size")) size = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--duration")) duration = strtod(argv[i + 1], NULL);
        else if (!strcmp(argv[i], "--conf")) conf = argv[i + 1];
        else if (!strcmp(argv[i], "--cpu")) cpu = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--backoff-us")) backoff_us = strtod(argv[i + 1], NULL);
        else die("unknown option", i);
    }
    if (!conf) die("--conf is needed", 0);
    if (size < 32 || size > 65535) die("--size must be 32..65535", (int)size);
    int producer = !strcmp(role, "produce");
    if (!producer && strcmp(role, "consume")) die("role must be produce or consume", 0);
    int batch = producer && !strcmp(kase, "fipsipc_batch");
    if (producer && !batch && strcmp(kase, "fipsipc")) die("case must be fipsipc or fipsipc_batch", 0);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int pin_rc = pin_cpu(cpu);

    fips_buf_arg_t arg;
    memset(&arg, 0, sizeof arg);
    arg.role = producer ? FIPS_WRITER : FIPS_READER;
    int rc = fips_buf_init(&arg, conf);
    if (rc) die("fips_buf_init failed", rc);
    fips_buf_thread_arg_t t;
    memset(&t, 0, sizeof t);
    t.process_arg = &arg;
    rc = fips_buf_attach(&t);
    if (rc) die("fips_buf_attach failed", rc);

    if (!producer) {
        printf("ready\n");
        fflush(stdout);
        const struct cpu_use u0 = cpu_use(RUSAGE_SELF);
        const uint64_t w0 = mono_ns();
        uint64_t records = 0, batches = 0, bytes = 0, waits = 0;
        const uint64_t backoff_ns = (uint64_t)(backoff_us * 1000.0);
        struct iovec iov[PROTO_BATCH];
        uint64_t tag;
        uint64_t quiet_since = 0;
        for (;;) {
            int n = PROTO_BATCH;
            rc = fips_buf_read(&t, iov, n, &tag, 0);
            if (rc != FIPS_BUF_SUCCESS) {
                n = 1;
                rc = fips_buf_read(&t, iov, n, &tag, 0);
            }
            if (rc == FIPS_BUF_SUCCESS) {
                for (int i = 0; i < n; i++) bytes += iov[i].iov_len;
                records += (uint64_t)n;
                batches++;
                fips_buf_return(&t, tag);
                quiet_since = 0;
                continue;
            }
            if (g_stop) { /* drain: stop once nothing came for 50 ms */
                uint64_t now = mono_ns();
                if (!quiet_since) quiet_since = now;
                else if (now - quiet_since > 50000000ull) break;
            }
            uint64_t until = mono_ns() + backoff_ns;
            while (mono_ns() < until) __builtin_ia32_pause();
            waits++;
        }
        const struct cpu_use u1 = cpu_use(RUSAGE_SELF);
        const uint64_t w1 = mono_ns();
        printf("{\"role\": \"consume\", \"records\": %llu, \"batches\": %llu, \"bytes\": %llu, \"lost\": null, "
               "\"errors\": 0, \"evicted\": false, \"backoff_us\": %g, \"backoff_waits\": %llu, "
               "\"cpu_share\": %.4f, \"runq_wait_share\": %.4f, \"invol_csw\": %ld, \"pinned_cpu\": %d, "
               "\"pin_ok\": %s}\n",
               (unsigned long long)records, (unsigned long long)batches, (unsigned long long)bytes, backoff_us,
               (unsigned long long)waits, w1 > w0 ? (double)(u1.cpu_ns - u0.cpu_ns) / (double)(w1 - w0) : 0.0,
               wait_share(u0, u1, w1 - w0), u1.invol - u0.invol, cpu, (cpu < 0 || pin_rc == 0) ? "true" : "false");
        fflush(stdout);
        fips_buf_detach(&t);
        fips_buf_destroy(&arg, 0); /* the last one out removes the segment */
        return 0;
    }

    char *tmpl = malloc(size);
    if (!tmpl) die("out of memory", 0);
    memset(tmpl, 'x', size);
    memcpy(tmpl, "bench ring seq=", SEQ_OFF);
    memset(tmpl + SEQ_OFF, '0', 16);
    tmpl[SEQ_OFF + 16] = ' ';
    tmpl[size - 1] = '\n';
    size_t cap = (size_t)(duration * 4e6) + 1024, nlat = 0;
    float *lat = calloc(cap, sizeof *lat);
    if (!lat) die("out of memory", 0);

    uint64_t attempted = 0, accepted = 0, dropped = 0, seq = 0;
    const uint32_t per_call = batch ? PROTO_BATCH : 1u;
    const uint32_t nb = batch ? 60u : LAT_BATCH; /* records per timed batch: a multiple of the call size */
    struct iovec iov[PROTO_BATCH];
    const struct cpu_use u0 = cpu_use(RUSAGE_THREAD);
    const uint64_t t_start = mono_ns(), t_end = t_start + (uint64_t)(duration * 1e9);
    uint64_t t0 = t_start, t1 = t_start;
    for (;;) {
        for (uint32_t i = 0; i < nb; i += per_call) {
            if (fips_get_write_buffer(&t, iov, (int)per_call) != FIPS_BUF_SUCCESS) {
                dropped += per_call;
                seq += per_call;
                continue;
            }
            for (uint32_t j = 0; j < per_call; j++) {
                format_record(tmpl, seq++);
                memcpy(iov[j].iov_base, tmpl, size);
                iov[j].iov_len = size;
            }
            fips_buf_write(&t, iov, (int)per_call);
            accepted += per_call;
        }
        attempted += nb;
        t1 = mono_ns();
        if (nlat < cap) lat[nlat++] = (float)(t1 - t0) / (float)nb;
        if (t1 >= t_end) break;
        t0 = t1;
    }
    const uint64_t elapsed = t1 - t_start;
    const struct cpu_use u1 = cpu_use(RUSAGE_THREAD);
    qsort(lat, nlat, sizeof *lat, cmp_float);
    printf("{\"case\": \"%s\", \"size\": %u, \"elapsed_ns\": %llu, \"attempted\": %llu, \"accepted\": %llu, "
           "\"dropped\": %llu, \"errors\": 0, \"eagain\": 0, \"last_error\": 0, \"lat_batch\": %u, "
           "\"lat_samples\": %zu, \"ns_p50\": %.3f, \"ns_p99\": %.3f, \"ns_p999\": %.3f, \"ns_max\": %.3f, "
           "\"cpu_share\": %.4f, \"runq_wait_share\": %.4f, \"invol_csw\": %ld, \"pinned_cpu\": %d, "
           "\"pin_ok\": %s, \"proto_batch\": %u}\n",
           kase, size, (unsigned long long)elapsed, (unsigned long long)attempted, (unsigned long long)accepted,
           (unsigned long long)dropped, nb, nlat, pct(lat, nlat, 0.50), pct(lat, nlat, 0.99), pct(lat, nlat, 0.999),
           nlat ? lat[nlat - 1] : -1.0, elapsed ? (double)(u1.cpu_ns - u0.cpu_ns) / (double)elapsed : 0.0,
           wait_share(u0, u1, elapsed), u1.invol - u0.invol, cpu, (cpu < 0 || pin_rc == 0) ? "true" : "false",
           per_call);
    fflush(stdout);
    fips_buf_detach(&t);
    fips_buf_destroy(&arg, 0);
    return 0;
}
