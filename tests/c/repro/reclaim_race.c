/* Two threads reclaim the same dead producer's ring (ring_attach pass 2).
 * kill(pid, 0) is interposed to sleep 20 ms: that stands for the thread
 * being preempted between its pid check and its CAS, nothing more. */

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fips.h"

int kill(pid_t pid, int sig)
{
    if (sig == 0) { struct timespec ts = {0, 20000000}; nanosleep(&ts, NULL); }
    return (int)syscall(SYS_kill, pid, sig);
}

static fips_domain *d;
static pthread_barrier_t bar;
static void *attach(void *arg)
{
    int *ring = arg;
    pthread_barrier_wait(&bar);
    *ring = fips_producer_ring(d);
    pthread_barrier_wait(&bar);
    return NULL;
}

int main(void)
{
    char dir[] = "/dev/shm/rr.XXXXXX";
    if (!mkdtemp(dir)) return 2;
    fips_domain_opts o; fips_domain_opts_init(&o);
    o.max_rings = 1; o.ring_capacity = 4096; o.max_record = 256;
    if (fips_domain_open(&d, dir, "x", &o)) return 3;
    pid_t pid = fork();
    if (pid == 0) { fips_log(d, "x", 1); _exit(0); }   /* dies holding ring 0 */
    waitpid(pid, NULL, 0);
    int r1 = -1, r2 = -1; pthread_t t1, t2;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_create(&t1, NULL, attach, &r1);
    pthread_create(&t2, NULL, attach, &r2);
    pthread_join(t1, NULL); pthread_join(t2, NULL);
    printf("thread 1 -> ring %d, thread 2 -> ring %d%s\n", r1, r2,
           r1 == 0 && r2 == 0 ? "  BUG: two producers on one single-producer ring" : "");
    return r1 == 0 && r2 == 0;
}
