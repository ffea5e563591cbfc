/* fips_domain_open(create=2, "must create") on a fresh name creates the file
 * and then fails with -EEXIST: the retry loop opens the file it has just
 * created and treats it as pre-existing. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "fips.h"
int main(void) {
    char dir[] = "/dev/shm/c2.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    fips_domain_opts o; fips_domain_opts_init(&o);
    o.create = 2; o.max_rings = 2; o.ring_capacity = 4096; o.max_record = 256;
    fips_domain *d = NULL;
    int rc = fips_domain_open(&d, dir, "fresh", &o);
    char p[256]; snprintf(p, sizeof p, "%s/fips.fresh", dir);
    printf("create=2 on a fresh name -> %d (%s); file exists afterwards: %s\n", rc, fips_strerror(rc), access(p, F_OK) == 0 ? "yes" : "no");
    return rc == 0 ? 0 : 1;
}
