/* high_water_bytes ("max (head - floor) observed") is only updated when the
 * producer refreshes its floor, i.e. when the ring looks full: a ring that
 * fills to 54 % and never to 100 % reports a high-water mark of 0. */
#include <stdio.h>
#include <stdlib.h>
#include "fips.h"
int main(void) {
    char dir[] = "/dev/shm/hw.XXXXXX"; if (!mkdtemp(dir)) return 2;
    fips_domain_opts o; fips_domain_opts_init(&o); o.max_rings = 1; o.max_consumers = 1;
    o.ring_capacity = 8192; o.max_record = 256;
    fips_domain *d; if (fips_domain_open(&d, dir, "x", &o)) return 3;
    fips_consumer *c; if (fips_consumer_open(&c, d, "c")) return 4;
    char b[64] = {0}; for (int i = 0; i < 64; i++) fips_log(d, b, 64);   /* 64 x 88 = 5632 of 8192, unread; sampled every 64th commit */
    fips_monitor *m; char err[256]; if (fips_monitor_open(&m, dir, "x", 0, err, sizeof err)) return 5;
    fips_ring_stat rs; fips_consumer_stat cs; fips_pos_stat ps;
    fips_snapshot s = { .rings = &rs, .consumers = &cs, .pos = &ps };
    fips_monitor_snapshot(m, &s);
    printf("head %llu floor %llu -> fill %llu bytes; high_water_bytes %llu\n", (unsigned long long)rs.head,
           (unsigned long long)rs.floor, (unsigned long long)(rs.head - rs.floor), (unsigned long long)rs.high_water_bytes);
    return rs.high_water_bytes < rs.head - rs.floor;
}
