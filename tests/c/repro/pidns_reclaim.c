/* A live producer's ring is taken over by a producer in another pid
 * namespace (containers sharing /dev/shm, e.g. docker --ipc=host):
 * ring_attach() pass 2 decides "producer dead" with kill(pid, 0), and a pid
 * from another namespace is ESRCH there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fips.h"
int main(int argc, char **argv) {
    fips_domain_opts o; fips_domain_opts_init(&o);
    o.max_rings = 1; o.ring_capacity = 4096; o.max_record = 256;
    fips_domain *d;
    if (argc == 3) {  /* inside the new pid namespace */
        o.create = 0;
        if (fips_domain_open(&d, argv[1], "ns", &o)) return 3;
        int r = fips_producer_ring(d);
        printf("namespaced producer (pid %d in its namespace) got ring %d\n", (int)getpid(), r);
        fips_log(d, "from-container", 14);
        return 0;
    }
    char dir[] = "/dev/shm/pidns.XXXXXX"; if (!mkdtemp(dir)) return 2;
    if (fips_domain_open(&d, dir, "ns", &o)) return 3;
    fips_consumer *c; if (fips_consumer_open(&c, d, "c")) return 4;
    printf("host producer (pid %d) got ring %d\n", (int)getpid(), fips_producer_ring(d));
    fips_log(d, "from-host-1", 11);
    fips_batch b; while (fips_consumer_read(c, &b, 100) == 0) fips_consumer_release(c, &b);  /* drained */
    fflush(stdout);
    char cmd[512]; snprintf(cmd, sizeof cmd, "unshare --pid --fork %s %s ns", argv[0], dir);
    if (system(cmd) != 0) return 5;
    fips_monitor *m; char err[256]; if (fips_monitor_open(&m, dir, "ns", 0, err, sizeof err)) return 6;
    fips_ring_stat rs; fips_consumer_stat cs[16]; fips_pos_stat ps[16];
    fips_snapshot snap = { .rings = &rs, .consumers = cs, .pos = ps };
    fips_monitor_snapshot(m, &snap);
    printf("ring 0 now: state %u pid %u (host producer %d is alive and still owns it)\n",
           rs.state, rs.pid, (int)getpid());
    fips_log(d, "from-host-2", 11);
    printf("consumer sees:\n");
    fips_record rec; int n = 0;
    while (fips_consumer_read(c, &b, 100) == 0) { while (fips_batch_next(&b, &rec)) printf("  seq %llu: %.*s\n", (unsigned long long)rec.seq, (int)rec.len, (const char *)rec.data), n++; fips_consumer_release(c, &b); }
    printf("(the namespaced producer's record \"from-container\" was overwritten by the host's)\n");
    return rs.pid != (uint32_t)getpid();
}
