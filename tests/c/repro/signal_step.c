/* A signal handler that logs at EVERY instruction of a thread's ring
 * bookkeeping, one instruction per run (x86-64 only).
 *
 * The thread sets the trap flag (EFLAGS.TF) around the operation under test,
 * so the kernel raises SIGTRAP after each of its instructions; the SIGTRAP
 * handler counts them and at instruction K (run K, in a child process of its
 * own) calls fips_log on a domain, as any signal handler could, then clears
 * TF in the interrupted context.  After the operation every domain is closed
 * and checked through a monitor:
 *   - no ring is left ACTIVE (a ring attached by the handler into a slot that
 *     the interrupted code then overwrote or wiped is never closed: leaked);
 *   - committed + dropped + records_no_ring == records logged, per domain
 *     (every call ends committed, dropped or counted).
 *
 *   signal_step close   fips_producer_close(d1) with rings in d1 (slot 0) and
 *                       d2 (slot 1): the close and the move of slot 1 to 0;
 *                       the handler logs to d3, a domain with no ring yet
 *   signal_step attach  the thread's first fips_log(d1); the handler logs to d1
 *
 * Exit 0 if every K passes. */

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include "fips.h"

#if !defined(__x86_64__)
int main(void) { puts("x86-64 only: skipped"); return 0; }
#else

#define NDOM 3
static char g_dir[] = "/dev/shm/ss.XXXXXX";
static const char *g_names[NDOM] = {"d1", "d2", "d3"};
static fips_domain *g_d[NDOM];
static long g_logged[NDOM];
static volatile long g_step, g_fire_at;
static volatile int g_fire_dom, g_handler_rc = 999;

static __attribute__((noinline)) void tf_on(void) { __asm__ volatile("pushfq; orq $0x100,(%%rsp); popfq" ::: "memory", "cc"); }
static __attribute__((noinline)) void tf_off(void) { __asm__ volatile("pushfq; andq $~0x100,(%%rsp); popfq" ::: "memory", "cc"); }

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
    (void)sig; (void)si;
    ucontext_t *uc = ucv;
    g_step++;
    if (g_step == g_fire_at) {
        g_logged[g_fire_dom]++;
        g_handler_rc = fips_log(g_d[g_fire_dom], "from the handler", 16);
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100ll; /* one signal per run */
    }
}

static void open_all(void)
{
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.max_rings = 4;
    o.ring_capacity = 4096;
    o.max_record = 256;
    o.max_consumers = 4;
    for (int i = 0; i < NDOM; i++)
        if (fips_domain_open(&g_d[i], g_dir, g_names[i], &o)) { fprintf(stderr, "open %s\n", g_names[i]); exit(3); }
}

/* 0 if every domain is whole: nothing ACTIVE, every record accounted for */
static int check_all(long k, int verbose)
{
    int bad = 0;
    for (int i = 0; i < NDOM; i++) fips_domain_close(g_d[i]);
    for (int i = 0; i < NDOM; i++) {
        fips_monitor *m;
        char err[256];
        if (fips_monitor_open(&m, g_dir, g_names[i], 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        fips_ring_stat rs[4];
        fips_consumer_stat cs[4];
        fips_pos_stat ps[16];
        fips_snapshot s = {.rings = rs, .consumers = cs, .pos = ps};
        if (fips_monitor_snapshot(m, &s)) return 1;
        int active = 0;
        uint64_t sum = 0, no_ring = 0;
        for (uint32_t r = 0; r < s.n_rings; r++) {
            active += rs[r].state == FIPS_RING_ACTIVE;
            sum += rs[r].records_committed + rs[r].records_dropped;
        }
        fips_monitor_no_ring(m, &no_ring);
        sum += no_ring;
        if (active || sum != (uint64_t)g_logged[i]) {
            bad = 1;
            if (verbose)
                printf("K=%ld (handler's log: %d): domain %s: %d ring(s) ACTIVE after close (want 0), "
                       "committed+dropped+no_ring %llu, logged %ld\n",
                       k, g_handler_rc, g_names[i], active, (unsigned long long)sum, g_logged[i]);
        }
        fips_monitor_close(m);
    }
    return bad;
}

static int mode_close;

/* one run: the handler fires at instruction k (0: never); returns the steps */
static long run(long k)
{
    open_all();
    if (mode_close) {
        g_logged[0]++; fips_log(g_d[0], "one", 3);  /* slot 0 */
        g_logged[1]++; fips_log(g_d[1], "two", 3);  /* slot 1 */
        g_fire_dom = 2;
    } else {
        g_fire_dom = 0;
    }
    g_step = 0;
    g_fire_at = k;
    tf_on();
    if (mode_close) fips_producer_close(g_d[0]);
    else { g_logged[0]++; fips_log(g_d[0], "from the thread", 15); }
    tf_off();
    return g_step;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    mode_close = argc > 1 && strcmp(argv[1], "close") == 0;
    if (!mkdtemp(g_dir)) return 2;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    /* count the instructions once (in a child: the run changes the domains) */
    int fd[2];
    if (pipe(fd)) return 2;
    pid_t p = fork();
    if (p == 0) {
        long n = run(0);
        if (write(fd[1], &n, sizeof n) != sizeof n) _exit(1);
        _exit(check_all(0, 1));
    }
    long n = 0;
    int st;
    if (read(fd[0], &n, sizeof n) != sizeof n) return 2;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) { puts("the run without a signal fails"); return 1; }
    printf("%s: %ld instructions stepped\n", mode_close ? "fips_producer_close" : "first fips_log", n);
    int fails = 0;
    for (long k = 1; k <= n + 1; k++) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf %s/*", g_dir);
        if (system(cmd)) {}
        p = fork();
        if (p == 0) {
            run(k);
            _exit(check_all(k, fails < 5));
        }
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            if (!WIFEXITED(st) && fails < 5) printf("K=%ld: killed by signal %d\n", k, WTERMSIG(st));
            fails++;
        }
    }
    printf("%d of %ld instruction(s) fail\n", fails, n + 1);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) {}
    return fails != 0;
}
#endif
