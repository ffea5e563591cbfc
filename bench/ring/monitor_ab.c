/*
 * monitor_ab — what a monitor costs a producer, isolated from consumer noise.
 *
 * The ring bench's monitor A/B runs a producer against a draining consumer,
 * whose scheduling swings the producer's rate by tens of percent between
 * runs: a 1 % effect drowns.  Here each timed run logs into a ring that holds
 * the whole run and was emptied before it (no concurrent consumer, no drop),
 * so the rate depends only on the producer and on what a monitor does to its
 * cache lines.  Runs with
 * and without a monitor process (fips_monitor_snapshot at HZ, on the other
 * CPU) alternate in pairs AB/BA/...; each pair gives with/without.
 *
 * usage: monitor_ab DIR RECORDS HZ PAIRS   (HZ 0 = snapshot back to back)
 *        monitor_ab DIR RECORDS 0 PAIRS stop
 * prints one line per pair: "pair K without_ns with_ns" (ns for REPS x RECORDS)
 *
 * "stop": the monitor is a process of the caller's (`fipstop bench ui` runs
 * the whole dashboard) that cannot be started per run, so it is started once
 * and paused instead.  monitor_ab prints "ready" once the domain "mab"
 * exists, reads the monitor's pid from stdin, and runs "without" with that
 * process stopped (SIGSTOP; timing starts once /proc says it is stopped) and
 * "with" with it running (SIGCONT; timing starts at once).  A poll that fell
 * due while the app was stopped runs as it resumes, inside the timed "with"
 * run, so its polls bunch into those runs.  However monitor_ab ends (a
 * failure, a signal, its parent's death) the monitor is continued first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fips.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD 128
#define REPS 10 /* timed fills per run, the ring emptied (untimed) between them */

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s); /* best effort */
}

static void monitor_loop(const char *dir, double hz)
{
    pin(1);
    fips_monitor *m;
    char eb[256];
    if (fips_monitor_open(&m, dir, "mab", 0, eb, sizeof eb) != 0) _exit(3);
    const struct fips_layout_header *h = fips_monitor_header(m);
    fips_snapshot s = {0};
    s.rings = calloc(h->max_rings, sizeof *s.rings);
    s.consumers = calloc(h->max_consumers, sizeof *s.consumers);
    s.pos = calloc((size_t)h->max_rings * h->max_consumers, sizeof *s.pos);
    struct timespec nap = {0, hz > 0 ? (long)(1e9 / hz) : 0};
    for (;;) {
        fips_monitor_snapshot(m, &s);
        if (hz > 0) nanosleep(&nap, NULL);
    }
}

/* One domain for every run: its ring is faulted in once, and between runs a
 * consumer (in this process, untimed) releases everything, so each timed run
 * writes into warm, empty memory and never meets a full ring. */
static fips_domain *dom;
static fips_consumer *drain;
static pid_t stop_pid = -1; /* "stop" mode: the caller's monitor process */

/* Never leave the caller's monitor stopped behind us. */
static void continue_monitor(void)
{
    if (stop_pid > 0) kill(stop_pid, SIGCONT);
}

static void on_fatal_signal(int sig)
{
    continue_monitor();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Whether /proc says pid is stopped ('T'), polled up to 20 ms. */
static void wait_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        if (!f) return;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'T') return;
        usleep(100);
    }
}

static void setup(const char *dir)
{
    fips_domain_unlink(dir, "mab");
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.max_rings = 64;
    o.ring_capacity = 1u << 26; /* 64 MiB */
    o.create = 2;
    if (fips_domain_open(&dom, dir, "mab", &o) != 0) { fprintf(stderr, "open failed\n"); exit(2); }
    if (fips_consumer_open(&drain, dom, "drain") != 0) { fprintf(stderr, "consumer failed\n"); exit(2); }
}

static void drain_all(void)
{
    fips_batch b;
    while (fips_consumer_read(drain, &b, 1u << 16) == 0) fips_consumer_release(drain, &b);
}

static long long run(const char *dir, long records, int with_monitor, double hz)
{
    char buf[RECORD];
    memset(buf, 'x', sizeof buf);
    drain_all();
    pid_t mon = -1;
    if (stop_pid > 0) {
        if (kill(stop_pid, with_monitor ? SIGCONT : SIGSTOP) != 0) {
            fprintf(stderr, "monitor pid %d: %s\n", (int)stop_pid, strerror(errno));
            exit(2);
        }
        if (!with_monitor) wait_stopped(stop_pid);
    } else {
        /* Both halves of a pair fork a child on CPU 1 and wait 20 ms before
         * timing; only in "with" does the child snapshot.  A fork write-protects
         * this process's private pages (its next writes fault them back) and
         * the wait lets CPU 0 idle: done in one half only, either would be
         * counted as the monitor's cost. */
        mon = fork();
        if (mon == 0) {
            if (with_monitor) monitor_loop(dir, hz);
            pin(1);
            for (;;) pause();
        }
        usleep(20000);
    }
    long long total = 0;
    for (int rep = 0; rep < REPS; rep++) { /* ~REPS x 15 ms per run */
        if (rep) drain_all();
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < records; i++)
            if (fips_log(dom, buf, sizeof buf) != 0) { fprintf(stderr, "dropped: ring too small\n"); exit(2); }
        clock_gettime(CLOCK_MONOTONIC, &b);
        total += (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
    }
    if (mon > 0) { kill(mon, SIGKILL); waitpid(mon, NULL, 0); }
    return total;
}

int main(int argc, char **argv)
{
    if (argc != 5 && !(argc == 6 && strcmp(argv[5], "stop") == 0)) {
        fprintf(stderr, "usage: %s DIR RECORDS HZ PAIRS [stop]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long records = atol(argv[2]);
    double hz = atof(argv[3]);
    int pairs = atoi(argv[4]);
    if (records <= 0 || (unsigned long long)records * (24 + RECORD) > (1ull << 26) - 4096 || pairs <= 0) {
        fprintf(stderr, "%s: RECORDS must fit one 64 MiB ring\n", argv[0]);
        return 2;
    }
    pin(0);
    setup(dir);
    if (argc == 6) {
        printf("ready\n");
        fflush(stdout);
        int pid = 0;
        if (scanf("%d", &pid) != 1 || pid <= 1) { fprintf(stderr, "stop: no monitor pid on stdin\n"); return 2; }
        stop_pid = (pid_t)pid;
        atexit(continue_monitor);
        int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_fatal_signal);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the bench that started us died: continue it, exit */
    }
    for (int w = 0; w < 3; w++) run(dir, records, 0, hz); /* fault the ring in, warm up */
    for (int k = 0; k < pairs; k++) {
        long long without, with;
        if (k % 2 == 0) { without = run(dir, records, 0, hz); with = run(dir, records, 1, hz); }
        else { with = run(dir, records, 1, hz); without = run(dir, records, 0, hz); }
        printf("pair %d %lld %lld\n", k, without, with);
        fflush(stdout);
    }
    if (stop_pid > 0) kill(stop_pid, SIGCONT);
    fips_consumer_close(drain);
    fips_domain_close(dom);
    fips_domain_unlink(dir, "mab");
    return 0;
}
