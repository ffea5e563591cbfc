/*
 * libfips_syslog.so — an LD_PRELOAD drop-in for syslog(3) that logs into
 * FIPS rings instead of /dev/log.
 *
 * Why a shim: most servers log through syslog(3) and will never be patched.
 * Debian's named is built with FORTIFY and imports only __syslog_chk; other
 * libraries import __vsyslog_chk; both are provided.
 *
 * A record's payload is what syslog(3) would have sent to /dev/log minus the
 * timestamp, which travels in the record header:
 *
 *     <PRI>IDENT[PID]: MESSAGE          ([PID] only with LOG_PID)
 *
 * The path of a record takes no lock and allocates nothing.  A format made of
 * literal text and plain %s only (named's) is copied piece by piece straight
 * into a record claimed in the calling thread's own ring; any other format is
 * formatted into a per-thread 8 KiB buffer (cut there) and logged with
 * fips_log_trunc().  A message longer than the domain's max_record is
 * truncated, flagged (FIPS_REC_TRUNC) and counted in the ring.
 *
 * Configuration (environment, read once):
 *   FIPS_DOMAIN          domain name (default "syslog")
 *   FIPS_SHM_DIR         directory of domains (default /dev/shm)
 *   FIPS_RING_SIZE       ring capacity in bytes when the shim creates the domain
 *   FIPS_SYSLOG_MISSING  what to do when the domain cannot be opened:
 *                        "passthrough" (default): call the real syslog(3);
 *                        "drop": discard, counted in fips_syslog_dropped();
 *                        "create": create the domain, else pass through.
 *   FIPS_SYSLOG_BLOCK_US bounded blocking on a full ring (default 0: drop)
 *
 * %n never writes: a format holding it is rewritten first, also before it is
 * passed through to the real syslog(3).  openlog/closelog/setlogmask and
 * LOG_PERROR behave as glibc's (a NULL ident keeps the current one, facility
 * 0 is LOG_KERN, the stderr copy is "IDENT[PID]: MESSAGE\n"); in "drop" mode
 * the stderr copy is still written.
 *
 * A domain file removed (or replaced) while the program logs: the shim would
 * go on writing into a mapping no reader can open.  Every 64th call of a
 * thread, at most once a second for the process, it checks that the file at
 * the domain's path is still the domain it mapped (inode and creation time);
 * if not, it opens the domain there again (FIPS_SYSLOG_MISSING=create makes
 * one) or, with none, does what FIPS_SYSLOG_MISSING says.  The calls between
 * the removal and the check (at most 64 a thread, or a second) are lost in
 * the unlinked mapping; the old mapping stays mapped (another thread may be
 * inside it), so at most SHIM_MAX_REOPEN reopenings are made.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fips.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <syslog.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define SHIM_BUF 8192      /* formatted message buffer per thread */
#define FMT_BUF 2048       /* sanitised format copy (only when it holds %n) */

enum { MISSING_PASSTHROUGH, MISSING_DROP, MISSING_CREATE };

/* openlog() state is process-wide by definition; each field is an atomic so
 * that syslog() reads it without the lock glibc takes. */
static _Atomic(const char *) shim_ident;
static atomic_int shim_option;
static atomic_int shim_facility = LOG_USER;
static atomic_int shim_mask = 0xff;
static atomic_int shim_pid;
/* Records discarded that no counter of a domain holds: no domain (drop
 * mode, or a signal handler before there is one), a closed or truncated
 * domain.  Disjoint from the domain's counters, so that calls = delivered +
 * ring drops + the header's records_no_ring + this, exactly: a record libfips
 * counted itself (ring full in the ring; no ring, re-entry while attaching,
 * too many domains in the header's records_no_ring) is not counted again. */
static atomic_ullong shim_dropped;

/* A failed claim or log: count it here unless libfips counted it. */
static void shim_count_failure(int rc)
{
    if (rc == -FIPS_EFULL || rc == -FIPS_ENORING || rc == -FIPS_EREENTER || rc == -EMFILE) return;
    atomic_fetch_add_explicit(&shim_dropped, 1, memory_order_relaxed);
}

static pthread_once_t shim_once = PTHREAD_ONCE_INIT;
/* Set under shim_once, replaced by shim_recheck() when the file was removed.
 * Each call loads it once (relaxed: the domain a thread sees was fully opened
 * by the thread that stored it before the release in shim_recheck, and
 * pthread_once orders the first). */
static _Atomic(fips_domain *) shim_domain;
static int shim_missing = MISSING_PASSTHROUGH;
#define SHIM_MAX_REOPEN 16
#define SHIM_CHECK_EVERY 64 /* calls of one thread between two looks at the clock */
static fips_domain_opts shim_opts;   /* the options of the first open, for reopening */
static char shim_name[FIPS_NAME_MAX];
static char shim_path[PATH_MAX];
static atomic_int shim_checks_on;    /* 0: the path is too long or the file unreadable: no rechecks */
static dev_t shim_dev;               /* identity of the file that was mapped */
static ino_t shim_ino;
static uint64_t shim_created_ns;
static int shim_reopens;
static atomic_ullong shim_next_check_ns;
static pthread_mutex_t shim_check_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local unsigned shim_calls;

static _Thread_local char shim_buf[SHIM_BUF];
static _Thread_local int shim_depth; /* re-entry guard (real syslog fallback) */
/* Re-entry from a signal handler: a syslog() that interrupts this thread's
 * own syslog() (or its one-time init) would reuse shim_buf under it, or
 * wait for ever on the pthread_once it is inside.  It is dropped instead and
 * counted in the ring (fips_drop), or in fips_syslog_dropped() before there
 * is a domain. */
static _Thread_local volatile sig_atomic_t shim_active;

static void shim_init(void);
static void shim_remember(fips_domain *d);
static void shim_init_once(void)
{
    shim_active++;
    atomic_signal_fence(memory_order_seq_cst);
    pthread_once(&shim_once, shim_init);
    atomic_signal_fence(memory_order_seq_cst);
    shim_active--;
}

typedef void (*vsyslog_chk_fn)(int, int, const char *, va_list);
typedef void (*vsyslog_fn)(int, const char *, va_list);
typedef void (*openlog_fn)(const char *, int, int);
typedef void (*closelog_fn)(void);

static void shim_atfork_child(void)
{
    atomic_store_explicit(&shim_pid, (int)getpid(), memory_order_relaxed);
    /* another thread of the parent may have held it: the child's copy is unlocked afresh */
    pthread_mutex_init(&shim_check_lock, NULL);
}

static void shim_init(void)
{
    atomic_store(&shim_pid, (int)getpid());
    pthread_atfork(NULL, NULL, shim_atfork_child);
    const char *m = getenv("FIPS_SYSLOG_MISSING");
    if (m && strcmp(m, "drop") == 0) shim_missing = MISSING_DROP;
    else if (m && strcmp(m, "create") == 0) shim_missing = MISSING_CREATE;
    const char *name = getenv("FIPS_DOMAIN");
    if (!name || !*name) name = "syslog";
    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.create = shim_missing == MISSING_CREATE;
    const char *rs = getenv("FIPS_RING_SIZE");
    if (rs && *rs) {
        unsigned long long v = strtoull(rs, NULL, 0);
        if (v >= FIPS_MIN_CAPACITY && v <= FIPS_MAX_CAPACITY && (v & (v - 1)) == 0) o.ring_capacity = v;
    }
    const char *bu = getenv("FIPS_SYSLOG_BLOCK_US");
    if (bu && *bu) o.block_us = atoi(bu);
    /* Another user's domain is accepted only if the file's owner could
     * have been us: fips refuses foreign owners by default. */
    fips_domain *d = NULL;
    if (fips_domain_open(&d, NULL, name, &o) != 0) d = NULL;
    shim_opts = o;
    snprintf(shim_name, sizeof shim_name, "%s", name);
    int pl = snprintf(shim_path, sizeof shim_path, "%s/fips.%s", fips_shm_dir(NULL), name);
    atomic_store_explicit(&shim_checks_on, pl > 0 && (size_t)pl < sizeof shim_path, memory_order_relaxed);
    if (d) shim_remember(d);
    atomic_store_explicit(&shim_domain, d, memory_order_release);
}

/* The identity of the file at shim_path: 0 and its inode and creation time
 * (the header's created_realtime_ns: tmpfs hands a freed inode number to the
 * next file at once), -1 when there is none or it cannot be read. */
static int shim_file_id(dev_t *dev, ino_t *ino, uint64_t *created)
{
    int fd = open(shim_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    uint64_t c = 0;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
             pread(fd, &c, sizeof c, offsetof(struct fips_layout_header, created_realtime_ns)) == (ssize_t)sizeof c;
    close(fd);
    if (!ok) return -1;
    *dev = st.st_dev;
    *ino = st.st_ino;
    *created = c;
    return 0;
}

static void shim_remember(fips_domain *d)
{
    dev_t dev;
    ino_t ino;
    uint64_t c;
    if (shim_file_id(&dev, &ino, &c) != 0 || c != fips_domain_header(d)->created_realtime_ns) {
        /* cannot tell this file from another: no rechecks */
        atomic_store_explicit(&shim_checks_on, 0, memory_order_relaxed);
        return;
    }
    shim_dev = dev;
    shim_ino = ino;
    shim_created_ns = c;
}

/* Is the mapped domain still the file at its path?  If not, open the one
 * there now (or create it, FIPS_SYSLOG_MISSING=create), else go without. */
static void shim_recheck(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
    if (now < atomic_load_explicit(&shim_next_check_ns, memory_order_relaxed)) return;
    if (pthread_mutex_trylock(&shim_check_lock) != 0) return;
    atomic_store_explicit(&shim_next_check_ns, now + 1000000000ull, memory_order_relaxed);
    fips_domain *cur = atomic_load_explicit(&shim_domain, memory_order_relaxed);
    dev_t dev;
    ino_t ino;
    uint64_t c;
    int same = shim_file_id(&dev, &ino, &c) == 0 && cur && dev == shim_dev && ino == shim_ino &&
               c == shim_created_ns;
    if (!same && shim_reopens < SHIM_MAX_REOPEN) {
        fips_domain *d = NULL;
        if (fips_domain_open(&d, NULL, shim_name, &shim_opts) != 0) d = NULL;
        if (d || cur) {
            shim_reopens++;
            if (d) shim_remember(d);
            /* the old domain stays mapped: another thread may be inside it */
            atomic_store_explicit(&shim_domain, d, memory_order_release);
        }
    }
    pthread_mutex_unlock(&shim_check_lock);
}

EXPORT unsigned long long fips_syslog_dropped(void)
{
    return atomic_load(&shim_dropped);
}

typedef void (*syslog_fn)(int, const char *, ...);

/* The real syslog(3), for FIPS_SYSLOG_MISSING=passthrough (and create when
 * creating failed).  It gets the defused format, never the caller's: glibc's
 * vsyslog() would honour %n.  f == NULL (a format too long to defuse) logs
 * the raw format text. */
static void real_vlog(int pri, const char *f, const char *raw, va_list ap)
{
    static _Atomic(vsyslog_fn) vfn;
    static _Atomic(syslog_fn) fn;
    vsyslog_fn vf = atomic_load_explicit(&vfn, memory_order_acquire);
    syslog_fn sf = atomic_load_explicit(&fn, memory_order_acquire);
    if (!vf || !sf) {
        vf = (vsyslog_fn)dlsym(RTLD_NEXT, "vsyslog");
        sf = (syslog_fn)dlsym(RTLD_NEXT, "syslog");
        atomic_store_explicit(&vfn, vf, memory_order_release);
        atomic_store_explicit(&fn, sf, memory_order_release);
    }
    if (shim_depth != 0) return;
    shim_depth++;
    if (f && vf) vf(pri, f, ap);
    else if (!f && sf) sf(pri, "%s", raw);
    shim_depth--;
}

/* Whether the calls go to the real syslog(3): no domain, and not "drop". */
static int passthrough(void)
{
    return !atomic_load_explicit(&shim_domain, memory_order_acquire) && shim_missing != MISSING_DROP;
}

/* Characters that may stand between '%' and the conversion letter: flags,
 * width, precision, positional N$ and length modifiers (glibc's 'I' and 'q'
 * included).  A table, not strspn(): glibc's strspn builds a 256-byte set on
 * every call, which was a fifth of the cost of a syslog() call. */
static const unsigned char spec_char[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
    ['7'] = 1, ['8'] = 1, ['9'] = 1, ['$'] = 1, ['#'] = 1, ['-'] = 1, ['+'] = 1,
    [' '] = 1, ['\''] = 1, ['.'] = 1, ['*'] = 1, ['I'] = 1, ['h'] = 1, ['l'] = 1,
    ['L'] = 1, ['q'] = 1, ['j'] = 1, ['z'] = 1, ['t'] = 1,
};

static inline size_t spec_span(const char *p)
{
    size_t k = 0;
    while (spec_char[(unsigned char)p[k]]) k++;
    return k;
}

static inline size_t digit_span(const char *p)
{
    size_t k = 0;
    while (p[k] >= '0' && p[k] <= '9') k++;
    return k;
}

/* Copy fmt with every %n conversion replaced by conversions that consume the
 * same arguments and print nothing: %n must never write memory on behalf of
 * a log message (the caller's format may even hold more conversions than
 * arguments).  "%.0s" consumes one pointer-sized argument without reading
 * through it; a '*' width or precision of the %n consumes one more each, so
 * later conversions still get their own arguments; a positional "%N$n"
 * becomes "%N$.0s".  Returns fmt itself when it holds no %n, out when it
 * was rewritten, NULL when it is too long to rewrite (the caller then logs
 * the raw format text, with no conversion at all). */
static const char *defuse_percent_n(const char *fmt, char *out, size_t outlen)
{
    /* Most formats (named's "%s%s%s%s%s%s%s%s%s%s") hold no 'n' at all. */
    if (!strchr(fmt, 'n')) return fmt;
    const char *p = fmt;
    int has_n = 0;
    while ((p = strchr(p, '%')) != NULL) {
        p++;
        if (*p == '%') { p++; continue; }
        p += spec_span(p);
        if (*p == 'n') { has_n = 1; break; }
        if (*p) p++;
    }
    if (!has_n) return fmt;
    size_t o = 0;
    for (p = fmt; *p;) {
        if (o + 1 >= outlen) return NULL;
        if (*p != '%') { out[o++] = *p++; continue; }
        const char *s = p++;
        if (*p == '%') {
            if (o + 2 >= outlen) return NULL;
            out[o++] = '%'; out[o++] = '%'; p++;
            continue;
        }
        size_t k = spec_span(p);
        if (p[k] != 'n') {
            size_t len = (size_t)(p + k - s) + (p[k] ? 1 : 0);
            if (o + len >= outlen) return NULL;
            memcpy(out + o, s, len);
            o += len;
            p = s + len;
            continue;
        }
        /* A %n spec: one "%[N$].0s" per argument it would consume. */
        const char *q = p, *end = p + k;
        size_t digits = digit_span(q);
        int positional = digits > 0 && q[digits] == '$';
        if (positional) q += digits + 1;
        for (; q < end; q++) {
            if (*q != '*') continue;
            size_t dd = digit_span(q + 1);
            int star_pos = dd > 0 && q[1 + dd] == '$';
            size_t need = star_pos ? 5 + dd : 4;
            if (o + need >= outlen) return NULL;
            out[o++] = '%';
            if (star_pos) { memcpy(out + o, q + 1, dd + 1); o += dd + 1; q += dd + 1; }
            memcpy(out + o, ".0s", 3); o += 3;
        }
        size_t need = positional ? 5 + digits : 4;
        if (o + need >= outlen) return NULL;
        out[o++] = '%';
        if (positional) { memcpy(out + o, p, digits + 1); o += digits + 1; }
        memcpy(out + o, ".0s", 3); o += 3;
        p = end + 1;
    }
    out[o] = 0;
    return out;
}

/* Decimal digits of v (>= 0) at b; returns how many. */
static inline int put_uint(char *b, unsigned v)
{
    char t[12];
    int k = 0;
    do { t[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (int i = 0; i < k; i++) b[i] = t[k - 1 - i];
    return k;
}

/* "<PRI>IDENT[PID]: " (pid < 0: no "[PID]") at b, as snprintf would write
 * it but without a printf pass; an ident is cut to max_ident bytes (b must
 * hold max_ident + 20). */
static int put_header(char *b, int pri, const char *ident, int pid, size_t max_ident)
{
    int n = 0;
    b[n++] = '<';
    n += put_uint(b + n, (unsigned)pri);
    b[n++] = '>';
    size_t il = strnlen(ident, max_ident);
    memcpy(b + n, ident, il);
    n += (int)il;
    if (pid >= 0) {
        b[n++] = '[';
        n += put_uint(b + n, (unsigned)pid);
        b[n++] = ']';
    }
    b[n++] = ':';
    b[n++] = ' ';
    b[n] = 0;
    return n;
}

/* glibc's LOG_PERROR copy: "IDENT[PID]: MESSAGE\n" (no second newline when
 * the message ends with one), in one write. */
static void perror_copy(const char *b, size_t len)
{
    const char *tag = memchr(b, '>', len);
    size_t off = tag ? (size_t)(tag - b) + 1 : 0;
    struct iovec iov[2] = {
        { (void *)(b + off), len - off },
        { (void *)"\n", (len > off && b[len - 1] == '\n') ? 0 : 1 },
    };
    ssize_t w = writev(STDERR_FILENO, iov, 2);
    (void)w;
}

/* named logs every query line through "%s%s%s%s%s%s%s%s%s%s": a format made
 * only of literal text and plain %s conversions is concatenated with memcpy,
 * several times cheaper than vsnprintf's general machinery. */
static int only_percent_s(const char *fmt)
{
    for (const char *p = strchr(fmt, '%'); p; p = strchr(p + 2, '%'))
        if (p[1] != 's') return 0;
    return 1;
}

/* vsnprintf semantics for such a format: writes at most cap - 1 bytes and a
 * NUL, returns the untruncated length; a NULL argument prints "(null)" as
 * glibc does. */
static size_t concat_s(char *out, size_t cap, const char *fmt, va_list ap)
{
    size_t o = 0;
    for (const char *p = fmt; *p;) {
        const char *s;
        size_t len;
        if (p[0] == '%') {
            s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            len = strlen(s);
            p += 2;
        } else {
            const char *q = strchr(p, '%');
            len = q ? (size_t)(q - p) : strlen(p);
            s = p;
            p += len;
        }
        if (o + 1 < cap) {
            size_t k = len < cap - 1 - o ? len : cap - 1 - o;
            memcpy(out + o, s, k);
        }
        o += len;
    }
    if (cap) out[o < cap - 1 ? o : cap - 1] = 0;
    return o;
}

/* The fast path, for formats made of literal text and plain %s only (named's
 * query-log call): the pieces are measured, one record of exactly their
 * length is claimed and they are copied straight into the ring; no pass
 * through shim_buf, no printf machinery.  Measured with bench/bind/shimcall.c
 * in a tight loop: ~260 ns a call through shim_buf and fips_log_trunc, ~175
 * ns this way.  Such a message is also not cut at 8 KiB: it arrives whole up
 * to max_record. */
#define FAST_PIECES 32
#define FAST_IDENT 256

/* Conversions in fmt when it is literal text and plain %s only, in at most
 * FAST_PIECES pieces; -1 otherwise (the general path takes it). */
static int fast_shape(const char *fmt)
{
    int pieces = 0, convs = 0;
    for (const char *p = fmt; *p;) {
        if (p[0] == '%') {
            if (p[1] != 's') return -1;
            convs++;
            p += 2;
        } else {
            while (*p && *p != '%') p++;
        }
        if (++pieces > FAST_PIECES) return -1;
    }
    return convs;
}

/* Returns 1 when the record was handled (logged, or dropped and counted by
 * the ring when full), 0 when the general path must take it; ap is consumed
 * only in the first case. */
static int fast_log(fips_domain *dom, int pri, const char *fmt, int pid, va_list ap)
{
    const char *ident = atomic_load_explicit(&shim_ident, memory_order_relaxed);
    if (!ident) ident = program_invocation_short_name;
    size_t il = strnlen(ident, FAST_IDENT + 1);
    if (il > FAST_IDENT || fast_shape(fmt) < 0) return 0;
    char hdr[FAST_IDENT + 32];
    /* cut at FAST_IDENT again: another thread may change the ident meanwhile */
    size_t hl = (size_t)put_header(hdr, pri, ident, pid, FAST_IDENT);
    const char *ptr[FAST_PIECES];
    size_t len[FAST_PIECES];
    int n = 0;
    size_t total = hl;
    for (const char *p = fmt; *p && n < FAST_PIECES; n++) {
        if (p[0] == '%') {
            const char *a = va_arg(ap, const char *);
            if (!a) a = "(null)";
            ptr[n] = a;
            len[n] = a[0] ? strlen(a) : 0;
            p += 2;
        } else {
            const char *q = p;
            while (*q && *q != '%') q++;
            ptr[n] = p;
            len[n] = (size_t)(q - p);
            p = q;
        }
        total += len[n];
    }
    uint32_t max_record = fips_domain_header(dom)->max_record;
    uint32_t l = total > max_record ? max_record : (uint32_t)total;
    fips_slot slot;
    int rc = fips_claim(dom, l, &slot);
    if (rc != 0) {
        /* full: the ring counted the drop; no ring: the header did */
        shim_count_failure(rc);
        return 1;
    }
    char *out = slot.data;
    size_t o = hl < l ? hl : l;
    memcpy(out, hdr, o);
    for (int i = 0; i < n && o < l; i++) {
        size_t k = len[i] < l - o ? len[i] : l - o;
        memcpy(out + o, ptr[i], k);
        o += k;
    }
    fips_commit(dom, &slot, l, total > l ? FIPS_REC_TRUNC : 0, 0);
    return 1;
}

static void shim_vlog_inner(int pri, const char *fmt, va_list ap, int check);

static void shim_vlog(int pri, const char *fmt, va_list ap)
{
    if (shim_active) {
        fips_domain *d = atomic_load_explicit(&shim_domain, memory_order_acquire);
        if (d) fips_drop(d, 0);
        else atomic_fetch_add_explicit(&shim_dropped, 1, memory_order_relaxed);
        return;
    }
    shim_active = 1;
    atomic_signal_fence(memory_order_seq_cst);
    shim_vlog_inner(pri, fmt, ap, ++shim_calls % SHIM_CHECK_EVERY == 1);
    atomic_signal_fence(memory_order_seq_cst);
    shim_active = 0;
}

static void shim_vlog_inner(int pri, const char *fmt, va_list ap, int check)
{
    int saved_errno = errno; /* %m reports the caller's errno */
    shim_init_once();
    if (pri & ~(LOG_PRIMASK | LOG_FACMASK)) pri &= LOG_PRIMASK | LOG_FACMASK;
    if (!(LOG_MASK(LOG_PRI(pri)) & atomic_load_explicit(&shim_mask, memory_order_relaxed))) {
        errno = saved_errno;
        return;
    }
    if ((pri & LOG_FACMASK) == 0) pri |= atomic_load_explicit(&shim_facility, memory_order_relaxed);
    if (!fmt) fmt = "(null)";
    int opt = atomic_load_explicit(&shim_option, memory_order_relaxed);
    if (__builtin_expect(check, 0) && atomic_load_explicit(&shim_checks_on, memory_order_relaxed)) shim_recheck();
    /* ACQUIRE: pairs with the release in shim_init / shim_recheck (the domain is fully opened) */
    fips_domain *dom = atomic_load_explicit(&shim_domain, memory_order_acquire);
    if (dom && !(opt & LOG_PERROR)) {
        va_list aq;
        va_copy(aq, ap);
        int done = fast_log(dom, pri, fmt, (opt & LOG_PID)
                            ? atomic_load_explicit(&shim_pid, memory_order_relaxed) : -1, aq);
        va_end(aq);
        if (done) {
            errno = saved_errno;
            return;
        }
    }
    char fmtbuf[FMT_BUF];
    const char *f = defuse_percent_n(fmt, fmtbuf, sizeof fmtbuf);
    if (!dom) {
        if (shim_missing != MISSING_DROP) {
            errno = saved_errno;
            real_vlog(pri, f, fmt, ap);
            errno = saved_errno;
            return;
        }
        atomic_fetch_add_explicit(&shim_dropped, 1, memory_order_relaxed);
        if (!(opt & LOG_PERROR)) {
            errno = saved_errno;
            return;
        }
        /* dropped, but the stderr copy the program asked for is still made */
    }
    const char *ident = atomic_load_explicit(&shim_ident, memory_order_relaxed);
    if (!ident) ident = program_invocation_short_name;
    char *b = shim_buf;
    int n = put_header(b, pri, ident, (opt & LOG_PID)
                       ? atomic_load_explicit(&shim_pid, memory_order_relaxed) : -1, SHIM_BUF / 2);
    size_t total;
    errno = saved_errno;
    if (f && only_percent_s(f)) {
        total = (size_t)n + concat_s(b + n, SHIM_BUF - (size_t)n, f, ap);
    } else if (f) {
        int m = vsnprintf(b + n, SHIM_BUF - (size_t)n, f, ap);
        total = (size_t)n + (m > 0 ? (size_t)m : 0);
    } else {
        int m = snprintf(b + n, SHIM_BUF - (size_t)n, "%s", fmt);
        total = (size_t)n + (m > 0 ? (size_t)m : 0);
    }
    /* vsnprintf reports the untruncated length. */
    size_t have = total < SHIM_BUF - 1 ? total : SHIM_BUF - 1;
    if (dom) {
        uint32_t max_record = fips_domain_header(dom)->max_record;
        if (total > have && have <= max_record) {
            /* Longer than this buffer though the ring would take it whole:
             * the record is cut here, so flag and count it ourselves
             * (fips_log_trunc only flags what exceeds max_record). */
            fips_slot slot;
            int rc = fips_claim(dom, (uint32_t)have, &slot);
            if (rc == 0) {
                memcpy(slot.data, b, have);
                fips_commit(dom, &slot, (uint32_t)have, FIPS_REC_TRUNC, 0);
            } else {
                shim_count_failure(rc);
            }
        } else {
            int rc = fips_log_trunc(dom, b, have, 0);
            if (rc < 0) shim_count_failure(rc);
        }
    }
    if (opt & LOG_PERROR) perror_copy(b, have);
    errno = saved_errno;
}

EXPORT void openlog(const char *ident, int option, int facility)
{
    shim_init_once();
    /* As glibc: a NULL ident keeps the current one; any facility value
     * within LOG_FACMASK (LOG_KERN = 0 included) becomes the default. */
    if (ident) atomic_store(&shim_ident, ident);
    atomic_store(&shim_option, option);
    if ((facility & ~LOG_FACMASK) == 0) atomic_store(&shim_facility, facility);
    if (passthrough()) {
        openlog_fn f = (openlog_fn)dlsym(RTLD_NEXT, "openlog");
        if (f) f(ident, option, facility);
    }
}

EXPORT void closelog(void)
{
    shim_init_once();
    atomic_store(&shim_ident, NULL);
    if (passthrough()) {
        closelog_fn f = (closelog_fn)dlsym(RTLD_NEXT, "closelog");
        if (f) f();
    }
}

EXPORT int setlogmask(int mask)
{
    shim_init_once();
    int old = atomic_load(&shim_mask);
    if (mask != 0) atomic_store(&shim_mask, mask);
    if (passthrough()) {
        int (*f)(int) = (int (*)(int))dlsym(RTLD_NEXT, "setlogmask");
        if (f) f(mask);
    }
    return old;
}

EXPORT void vsyslog(int pri, const char *fmt, va_list ap)
{
    shim_vlog(pri, fmt, ap);
}

EXPORT void syslog(int pri, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    shim_vlog(pri, fmt, ap);
    va_end(ap);
}

EXPORT void __vsyslog_chk(int pri, int flag, const char *fmt, va_list ap)
{
    (void)flag;
    shim_vlog(pri, fmt, ap);
}

EXPORT void __syslog_chk(int pri, int flag, const char *fmt, ...)
{
    (void)flag;
    va_list ap;
    va_start(ap, fmt);
    shim_vlog(pri, fmt, ap);
    va_end(ap);
}
