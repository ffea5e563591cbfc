/*
 * Test hooks of libfips for the interleaving explorer (tests/c/explore).
 * Included by fips.c only when it is built with -DFIPS_EXPLORE; never part of
 * the library or of its ABI.
 *
 * In that build every access to shared state is announced first
 * (fips_explore_access), and the explorer's scheduler decides which party
 * (producer, consumer, monitor thread, all run as coroutines on one OS
 * thread) performs its next access: the scheduling points are exactly the
 * shared accesses.  Locks, retry loops, the clock and the per-thread state
 * are the explorer's too, so that a run is a function of its schedule alone.
 */
#ifndef FIPS_EXPLORE_H
#define FIPS_EXPLORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { FX_CLOCK_REALTIME = 0, FX_CLOCK_MONO = 1, FX_CLOCK_MONO_COARSE = 2 };

/* About to access n bytes at p (kind: 1 load, 2 store, 3 read-modify-write);
 * line: fips.c's source line, for traces.  May switch to another party. */
void fips_explore_access(const void *p, size_t n, int kind, int line);
/* pthread_mutex_lock / trylock (try != 0) / unlock, as scheduling points. */
int fips_explore_lock(pthread_mutex_t *m, int try_only);
int fips_explore_unlock(pthread_mutex_t *m);
/* A retry loop is about to go round again: nothing it reads can change until
 * another party writes, so the explorer runs someone else first. */
void fips_explore_spin(void);
/* A domain file was mapped at p (n bytes, from fd) / is about to be
 * unmapped: accesses through any mapping of one file are to one memory. */
void fips_explore_mapped(const void *p, size_t n, int fd);
void fips_explore_unmapped(const void *p);
/* The virtual clocks (ns). */
uint64_t fips_explore_clock(int which);
/* The calling party's own copy of the per-thread state. */
void *fips_explore_tls(size_t size);
const void **fips_explore_tls_reader(void);

#endif
