/* A domain file is sized with ftruncate() only: on a tmpfs (/dev/shm) that
 * has less free space than the file, creating the domain succeeds, and the
 * first write into a ring page that tmpfs cannot back raises SIGBUS, which
 * kills the producer -- with the syslog shim, the host program (named...).
 * Expected: fips_domain_open (or the first claim in a ring) fails with
 * -ENOSPC, e.g. by posix_fallocate()-ing the file or each ring's range.
 *
 * Needs root (a tmpfs of its own in a private mount namespace):
 *   make -C tests/c repro && unshare -m tests/c/build/repro/full_shm_sigbus
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fips.h"
int main(void) {
    char dir[] = "/tmp/fullshm.XXXXXX"; if (!mkdtemp(dir)) return 2;
    if (mount("none", dir, "tmpfs", 0, "size=256k") != 0) { perror("mount (run under unshare -m as root)"); return 2; }
    pid_t c = fork();
    if (c == 0) {
        fips_domain_opts o; fips_domain_opts_init(&o); o.create = 1; o.max_rings = 4; o.ring_capacity = 1 << 20;
        fips_domain *d; int rc = fips_domain_open(&d, dir, "x", &o);
        printf("fips_domain_open: %d (%s)\n", rc, rc ? fips_strerror(rc) : "ok"); fflush(stdout);
        if (rc) _exit(0);
        char b[1000]; memset(b, 'x', sizeof b);
        for (int i = 0; i < 2000; i++) if (fips_log(d, b, sizeof b) < 0) { printf("fips_log error at %d\n", i); _exit(0); }
        _exit(0);
    }
    int st = 0; waitpid(c, &st, 0);
    umount(dir); rmdir(dir);
    if (WIFSIGNALED(st)) { printf("producer killed by signal %d (%s) (want: an error code)\n", WTERMSIG(st), strsignal(WTERMSIG(st))); return 1; }
    printf("producer survived\n");
    return 0;
}
