/* One thread blocked on a mutex for as long as the test says.  The main thread
 * holds `mu` and prints "ready"; at the first line on stdin it starts the
 * waiter (named "waiter"), which prints "locking TID" and blocks in
 * pthread_mutex_lock; at the second line the main thread unlocks, the waiter
 * takes the lock, prints "got NS" (how long it waited) and the program ends.  The bpf profiler's
 * intervals cut through that one wait (tests/integration/test_bpf_contend.py). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    struct timespec a, b;
    printf("locking %d\n", (int)syscall(SYS_gettid));
    fflush(stdout);
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_mutex_lock(&mu);
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_mutex_unlock(&mu);
    /* how long it waited, as the program itself measured it */
    printf("got %lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    fflush(stdout);
    return NULL;
}

int main(void) {
    char line[64];
    pthread_t t;
    pthread_mutex_lock(&mu);
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin) || pthread_create(&t, NULL, waiter, NULL) != 0)
        return 1;
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
    return 0;
}
