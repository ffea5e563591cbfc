/* N threads contend on one mutex: each holds it for SPIN_US of busy work
 * plus SLEEP_US asleep, then does OUT_US of busy work outside it, so with
 * N threads about (N-1)/N of each one's time is spent waiting for the lock
 * while the machine stays mostly idle (a 2-CPU CI box must not turn the
 * test into run-queue contention).  Prints the pid and the mutex address
 * ("lock 0x..."), then runs for SECONDS.
 * Usage: contend [threads=4] [seconds=30] [spin_us=200] [sleep_us=1000] [out_us=20] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t the_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static long spin_us_in = 200, sleep_us_in = 1000, out_us = 20;
static volatile uint64_t sink;

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void spin_us(long us) {
    uint64_t end = now_us() + (uint64_t)us;
    while (now_us() < end)
        sink++;
}

static void *worker(void *arg) {
    (void)arg;
    while (!stop) {
        pthread_mutex_lock(&the_lock);
        spin_us(spin_us_in);
        if (sleep_us_in > 0)
            usleep((useconds_t)sleep_us_in);
        pthread_mutex_unlock(&the_lock);
        spin_us(out_us);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    int seconds = argc > 2 ? atoi(argv[2]) : 30;
    if (argc > 3) spin_us_in = atol(argv[3]);
    if (argc > 4) sleep_us_in = atol(argv[4]);
    if (argc > 5) out_us = atol(argv[5]);
    if (n < 1 || n > 256) n = 4;
    pthread_t th[256];
    for (int i = 0; i < n; i++) {
        char name[16];
        pthread_create(&th[i], NULL, worker, NULL);
        snprintf(name, sizeof name, "contend-%d", i);
        pthread_setname_np(th[i], name);
    }
    printf("pid %d lock %p threads %d\n", (int)getpid(), (void *)&the_lock, n);
    fflush(stdout);
    sleep((unsigned)seconds);
    stop = 1;
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    return 0;
}
