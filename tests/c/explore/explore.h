/*
 * The interleaving explorer: a deterministic scheduler that runs libfips'
 * real code (fips.c built with -DFIPS_EXPLORE) as several parties --
 * producer threads, consumer reader threads, a monitor, a clock -- and
 * drives them through every interleaving of their accesses to shared state,
 * up to the bound a scenario sets (its parties and their operations).
 *
 * Each party is a coroutine on the one OS thread.  fips.c announces every
 * access to shared state before making it (fips_explore_access); the
 * scheduler then decides which party makes its next access.  Interleavings
 * that differ only in the order of independent accesses (different
 * addresses, or two loads) are equivalent -- they reach the same states --
 * and dynamic partial-order reduction (Flanagan & Godefroid, POPL 2005)
 * explores one interleaving of each class: every order of every pair of
 * conflicting accesses is tried.  The memory model is sequential
 * consistency; the orderings that make SC the right model on real hardware
 * are the barrier table's (fips.c), which ThreadSanitizer checks.
 *
 * A scenario sets up a domain, lists its parties and checks invariants after
 * every step and at the end of every execution (explore_scenarios.c).
 */
#ifndef EXPLORE_H
#define EXPLORE_H

#include <stddef.h>
#include <stdint.h>

#define XP_MAXP 6 /* parties per scenario */

typedef struct xp_scenario {
    const char *name;
    const char *what;                 /* one line: what it checks */
    int nparties;
    const char *party_name[XP_MAXP];
    void (*party_fn[XP_MAXP])(int self);
    void (*setup)(void);              /* before the parties, sequential */
    void (*check_step)(void);         /* after every step */
    void (*finish)(void);             /* after the parties: drain, final checks */
    void (*teardown)(void);           /* release everything of the execution */
} xp_scenario;

/* For scenario code. */
void xp_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
int xp_self(void);                    /* running party, -1 outside parties */
/* The harness's own accesses to shared memory (e.g. reading a payload): a
 * scheduling point like fips.c's.  kind: 1 load, 2 store. */
void xp_access(const void *p, size_t n, int kind);
/* Run fips calls as if on party k's thread (its per-thread ring), outside
 * the schedule (setup/finish only); k = -1 restores the main thread. */
void xp_as(int k);
/* The virtual clocks. */
void xp_clock_advance(uint64_t ns);  /* a scheduling point when in a party */
uint64_t xp_clock_now(void);

#endif
