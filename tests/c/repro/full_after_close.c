/* After a full ring, the drop fast path only watches the consumer that held
 * the floor.  If that consumer closes (or is dead and past its grace), its
 * position never moves, and the producer keeps dropping without a refresh
 * for up to 255 more records. */
#include <stdio.h>
#include <stdlib.h>
#include "fips.h"
int main(void) {
    char dir[] = "/dev/shm/cf.XXXXXX"; if (!mkdtemp(dir)) return 2;
    fips_domain_opts o; fips_domain_opts_init(&o); o.max_rings = 1; o.ring_capacity = 4096; o.max_record = 256;
    fips_domain *d; if (fips_domain_open(&d, dir, "x", &o)) return 3;
    fips_consumer *slow, *fast; fips_consumer_open(&slow, d, "slow"); fips_consumer_open(&fast, d, "fast");
    char b[100] = {0}; while (fips_log(d, b, 100) == 0) {}
    fips_batch bt; while (fips_consumer_read(fast, &bt, 100) == 0) fips_consumer_release(fast, &bt);
    fips_consumer_close(slow);            /* nobody holds the ring any more */
    int drops = 0; while (fips_log(d, b, 100) == -FIPS_EFULL) drops++;
    printf("records dropped after the only consumer holding the ring closed: %d (want 0)\n", drops);
    return drops != 0;
}
