/* A signal handler that logs in a child just forked, before or while libfips
 * forgets the parent's rings (atfork_child), at each instruction of it
 * (x86-64: the trap flag, as in signal_step.c).  Wanted: the child never
 * writes into the parent's ring (ring 0 keeps the parent's 1 record), and
 * its record is committed in a ring of its own or counted in records_no_ring.
 * K = 0: the signal arrives before libfips's atfork handler runs (a process
 * group's SIGWINCH/SIGINT can).  The handler fires only where an asynchronous
 * signal can arrive (SIGUSR1 not blocked in the interrupted context), at the
 * first such instruction at or after K. */
#include <pthread.h>
#include <signal.h>
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
static char g_dir[] = "/dev/shm/sf.XXXXXX";
static fips_domain *g_d;
static volatile long g_step, g_fire_at = -1;
static volatile int g_rc = 999;

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
    (void)sig; (void)si;
    ucontext_t *uc = ucv;
    if (++g_step == g_fire_at && sigismember(&uc->uc_sigmask, SIGUSR1)) {
        g_fire_at++; /* no asynchronous signal can arrive here: the next instruction where one can */
        return;
    }
    if (g_step == g_fire_at) {
        g_rc = fips_log(g_d, "child", 5);
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100ll;
    }
}
static void on_usr1(int sig) { (void)sig; g_rc = fips_log(g_d, "child", 5); }
static void child_first(void) /* registered before libfips's atfork_child */
{
    if (g_fire_at == 0) { raise(SIGUSR1); return; } /* a signal before libfips's handler ran */
    g_step = 0;
    __asm__ volatile("pushfq; orq $0x100,(%%rsp); popfq" ::: "memory", "cc");
}
static void child_last(void) { __asm__ volatile("pushfq; andq $~0x100,(%%rsp); popfq" ::: "memory", "cc"); }

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!mkdtemp(g_dir)) return 2;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    signal(SIGUSR1, on_usr1);
    int fails = 0;
    long n = 400; /* enough for glibc's handler loop and the memset */
    for (long k = 0; k <= n; k++) {
        pid_t p0 = fork(); /* a fresh parent per run */
        if (p0 == 0) {
            pthread_atfork(NULL, NULL, child_first);
            fips_domain_opts o;
            fips_domain_opts_init(&o);
            o.max_rings = 4; o.ring_capacity = 4096; o.max_record = 256; o.max_consumers = 4;
            char name[32];
            snprintf(name, sizeof name, "k%ld", k);
            if (fips_domain_open(&g_d, g_dir, name, &o)) _exit(3);
            fips_log(g_d, "parent", 6); /* ring 0; libfips registers its atfork handler now */
            pthread_atfork(NULL, NULL, child_last);
            g_fire_at = k;
            pid_t c = fork();
            if (c == 0) {
                int rc = g_rc; /* (a pending SIGUSR1 ran once libfips restored the mask) */
                g_fire_at = -1;
                fips_domain_close(g_d);
                _exit(rc == 999 ? 7 : 0); /* 7: past the end, the handler never ran */
            }
            int st;
            waitpid(c, &st, 0);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 7) _exit(7);
            fips_monitor *m;
            char err[256];
            if (fips_monitor_open(&m, g_dir, name, 0, err, sizeof err)) _exit(4);
            fips_ring_stat rs[4];
            fips_consumer_stat cs[4];
            fips_pos_stat ps[16];
            fips_snapshot s = {.rings = rs, .consumers = cs, .pos = ps};
            if (fips_monitor_snapshot(m, &s)) _exit(5);
            uint64_t others = 0, no_ring = 0;
            for (uint32_t r = 1; r < s.n_rings; r++) others += rs[r].records_committed + rs[r].records_dropped;
            fips_monitor_no_ring(m, &no_ring);
            int bad = rs[0].records_committed != 1 || others + no_ring != 1 || !WIFEXITED(st);
            if (bad)
                printf("K=%ld: child %s %d; parent's ring 0: %llu record(s) (want 1: the parent's); child's: %llu in "
                       "rings 1.., %llu no ring (want 1 in all)\n", k,
                       WIFEXITED(st) ? "exited" : "killed by signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), (unsigned long long)rs[0].records_committed,
                       (unsigned long long)others, (unsigned long long)no_ring);
            _exit(bad);
        }
        int st;
        waitpid(p0, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 7) { n = k - 1; break; }
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fails++;
    }
    printf("%d of %ld instruction(s) fail\n", fails, n + 1);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) {}
    return fails != 0;
}
#endif
