/* A signal handler that logs while its thread takes its first ring.  The
 * attach guard used to go up only after the free slot was chosen: a signal in
 * between (here: raised from pthread_once, which fips.c calls in that window,
 * the way TSan delivers a pending SIGALRM at an intercepted call) attached the
 * handler's own ring into that slot, which the interrupted attach then
 * overwrote.  The handler's ring stayed ACTIVE with nobody to close it, its
 * record in it; the thread's records went to a second ring (CI: 4 records in
 * ring 0, 344097 in ring 1).  Wanted: one ring, the handler's record counted
 * in records_no_ring, and that ring CLOSED after fips_domain_close. */

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fips.h"

static fips_domain *g_d;
static int g_armed, g_handled, g_handler_rc;

static void on_sig(int sig)
{
    (void)sig;
    g_handled++;
    g_handler_rc = fips_log(g_d, "from the handler", 16);
}

/* fips.c's calls bind to this definition (the executable's): a signal that
 * arrives at this point of the first attach, every time.  The program has one
 * thread, so the once is a flag. */
int pthread_once(pthread_once_t *o, void (*f)(void))
{
    if (g_armed) { g_armed = 0; raise(SIGUSR1); }
    if (*o == PTHREAD_ONCE_INIT) { *o = 1; f(); }
    return 0;
}

int main(void)
{
    char dir[] = "/dev/shm/sa.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.max_rings = 4;
    o.ring_capacity = 4096;
    o.max_record = 256;
    o.max_consumers = 8; /* the snapshot's arrays below */
    if (fips_domain_open(&g_d, dir, "x", &o)) return 3;
    signal(SIGUSR1, on_sig);
    g_armed = 1;
    int rc = fips_log(g_d, "from the thread", 15);
    fips_monitor *m;
    char err[256];
    if (fips_monitor_open(&m, dir, "x", 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 4; }
    fips_ring_stat rs[4];
    fips_consumer_stat cs[8];
    fips_pos_stat ps[32];
    fips_snapshot s = {.rings = rs, .consumers = cs, .pos = ps};
    if (fips_monitor_snapshot(m, &s)) return 5;
    int active = 0;
    uint64_t committed = 0;
    for (uint32_t r = 0; r < s.n_rings; r++) {
        active += rs[r].state == FIPS_RING_ACTIVE;
        committed += rs[r].records_committed;
    }
    uint64_t no_ring = ((const struct fips_layout_header *)fips_monitor_mapping(m))->records_no_ring;
    fips_domain_close(g_d);
    if (fips_monitor_snapshot(m, &s)) return 6;
    int left = 0;
    for (uint32_t r = 0; r < s.n_rings; r++) left += rs[r].state == FIPS_RING_ACTIVE;
    printf("handler ran %d time(s) (its log: %d), the thread's log: %d; rings ACTIVE: %d (want 1), "
           "committed %llu (want 1), no ring %llu (want 1), ACTIVE after close %d (want 0)\n",
           g_handled, g_handler_rc, rc, active, (unsigned long long)committed, (unsigned long long)no_ring, left);
    fips_monitor_close(m);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return !(g_handled == 1 && rc == 0 && active == 1 && committed == 1 && no_ring == 1 && left == 0);
}
