/* fips_monitor_tap() loads head, then floor.  When the tapping thread is
 * preempted between the two loads while the producer commits and the
 * consumer releases past that head, floor > head and the tap returns
 * -FIPS_ECORRUPT for a healthy ring (about 1 in 10^6 taps here).  The test
 * also checks that every record the tap returns is intact. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fips.h"
static fips_domain *d; static atomic_int stop; static atomic_int ring = -1;
static uint32_t sum(const uint8_t *p, uint32_t n) { uint32_t h = 2166136261u; for (uint32_t i = 0; i < n; i++) { h ^= p[i]; h *= 16777619u; } return h; }
static void *prod(void *a) { (void)a; uint8_t b[200]; uint64_t k = 0; atomic_store(&ring, fips_producer_ring(d));
    while (!atomic_load(&stop)) { uint32_t len = 8 + (uint32_t)(k * 7919 % 180); for (uint32_t i = 8; i < len; i++) b[i] = (uint8_t)(k + i);
        uint32_t s = sum(b + 8, len - 8); memcpy(b, &s, 4); memcpy(b + 4, &len, 4); fips_log(d, b, len); k++; } return NULL; }
static void *cons(void *a)
{
    fips_consumer *c = a;
    fips_batch bt;
    while (!atomic_load(&stop))
        if (fips_consumer_read(c, &bt, 4) == 0)
            fips_consumer_release(c, &bt);
    return NULL;
}
int main(int argc, char **argv) {
    char dir[] = "/dev/shm/taptorn.XXXXXX"; if (!mkdtemp(dir)) return 2;
    fips_domain_opts o; fips_domain_opts_init(&o); o.max_rings = 2; o.ring_capacity = 4096; o.max_record = 256;
    if (fips_domain_open(&d, dir, "t", &o)) return 3;
    fips_consumer *c; if (fips_consumer_open(&c, d, "c")) return 4;
    fips_monitor *m; char err[256]; if (fips_monitor_open(&m, dir, "t", 0, err, sizeof err)) return 5;
    pthread_t tp, tc; pthread_create(&tp, 0, prod, 0); pthread_create(&tc, 0, cons, c);
    while (atomic_load(&ring) < 0) usleep(1000);
    double secs = argc > 1 ? atof(argv[1]) : 10; long taps = 0, recs = 0, torn = 0, lapped_total = 0, errs = 0;
    static uint8_t buf[1 << 16]; size_t used; uint32_t lapped;
    uint64_t end = fips_mono_ns() + (uint64_t)(secs * 1e9);
    while (fips_mono_ns() < end) { /* tap as fast as possible */
        int n = fips_monitor_tap(m, (uint32_t)atomic_load(&ring), 64, buf, sizeof buf, &used, &lapped); taps++;
        if (n < 0) { if (errs++ < 5) printf("tap %ld -> %d (%s)\n", taps, n, fips_strerror(n)); continue; }
        lapped_total += lapped; size_t off = 0;
        for (int i = 0; i < n; i++) { struct fips_layout_record h; memcpy(&h, buf + off, sizeof h); uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
            const uint8_t *p = buf + off + 24; uint32_t s, l; memcpy(&s, p, 4); memcpy(&l, p + 4, 4);
            if (len < 8 || l != len || s != sum(p + 8, len - 8)) { if (torn++ < 3) printf("torn record: tap %ld record %d/%d seq %llu len %u\n", taps, i, n, (unsigned long long)h.seq, len); }
            recs++; off += 24 + ((len + 7) & ~7u); }
    }
    atomic_store(&stop, 1); pthread_join(tp, 0); pthread_join(tc, 0);
    printf("%ld taps, %ld records returned, %ld torn, %ld discarded as lapped, %ld errors\n", taps, recs, torn, lapped_total, errs);
    return torn != 0 || errs != 0;
}
