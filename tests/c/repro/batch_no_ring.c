/* Was a bug, fixed: tls_ring() takes the number of records a call carries.
 * records_no_ring counts records (fips.h: "records dropped because the ring
 * table was full"), but a call with no ring counts itself once, whatever it
 * carried: fips_log_batch of 5 records with no ring to take them counts 1
 * (4 records lost without a count), and fips_producer_ring / set_name, which
 * log nothing, count 1 each.  The same from a signal handler during the
 * thread's first attach (EREENTER).  Wanted: +5, then +0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "fips.h"

static fips_domain *g_d;
static uint64_t no_ring(fips_monitor *m) { uint64_t n = 0; fips_monitor_no_ring(m, &n); return n; }
static int g_batch_rc, g_ring_rc;

static void *other(void *arg)
{
    fips_monitor *m = arg;
    const void *bufs[5] = {"a", "b", "c", "d", "e"};
    uint32_t lens[5] = {1, 1, 1, 1, 1};
    uint64_t n0 = no_ring(m);
    g_batch_rc = fips_log_batch(g_d, bufs, lens, 5); /* the table is full */
    uint64_t n1 = no_ring(m);
    g_ring_rc = fips_producer_ring(g_d);
    fips_producer_set_name(g_d, "x");
    uint64_t n2 = no_ring(m);
    printf("fips_log_batch of 5 with no ring: %d, records_no_ring +%llu (want +5); "
           "fips_producer_ring (%d) + set_name: +%llu (want +0)\n",
           g_batch_rc, (unsigned long long)(n1 - n0), g_ring_rc, (unsigned long long)(n2 - n1));
    return (void *)(intptr_t)!(n1 - n0 == 5 && n2 == n1);
}

int main(void)
{
    char dir[] = "/dev/shm/bn.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.max_rings = 1;
    o.ring_capacity = 4096;
    o.max_record = 256;
    o.max_consumers = 4;
    if (fips_domain_open(&g_d, dir, "x", &o)) return 3;
    if (fips_log(g_d, "mine", 4)) return 4; /* the only ring */
    fips_monitor *m;
    char err[256];
    if (fips_monitor_open(&m, dir, "x", 0, err, sizeof err)) return 5;
    pthread_t t;
    void *bad;
    pthread_create(&t, NULL, other, m);
    pthread_join(t, &bad);
    fips_monitor_close(m);
    fips_domain_close(g_d);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return bad != NULL;
}
