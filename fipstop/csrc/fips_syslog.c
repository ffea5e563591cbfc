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
 * The path of a record takes no lock and allocates nothing: the message is
 * formatted into a per-thread buffer and logged with fips_log_trunc() into the
 * calling thread's own ring.  A message longer than the domain's max_record is
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
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fips.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static atomic_ullong shim_dropped; /* records discarded with no domain */

static pthread_once_t shim_once = PTHREAD_ONCE_INIT;
static fips_domain *shim_domain;   /* set once under shim_once */
static int shim_missing = MISSING_PASSTHROUGH;

static _Thread_local char shim_buf[SHIM_BUF];
static _Thread_local int shim_depth; /* re-entry guard (real syslog fallback) */

typedef void (*vsyslog_chk_fn)(int, int, const char *, va_list);
typedef void (*vsyslog_fn)(int, const char *, va_list);
typedef void (*openlog_fn)(const char *, int, int);
typedef void (*closelog_fn)(void);

static void shim_atfork_child(void)
{
    atomic_store_explicit(&shim_pid, (int)getpid(), memory_order_relaxed);
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
    if (fips_domain_open(&shim_domain, NULL, name, &o) != 0) shim_domain = NULL;
}

EXPORT unsigned long long fips_syslog_dropped(void)
{
    return atomic_load(&shim_dropped);
}

static void real_vsyslog(int pri, const char *fmt, va_list ap)
{
    static _Atomic(vsyslog_fn) fn;
    vsyslog_fn f = atomic_load_explicit(&fn, memory_order_acquire);
    if (!f) {
        f = (vsyslog_fn)dlsym(RTLD_NEXT, "vsyslog");
        atomic_store_explicit(&fn, f, memory_order_release);
    }
    if (f && shim_depth == 0) {
        shim_depth++;
        f(pri, fmt, ap);
        shim_depth--;
    }
}

/* Copy fmt with every %n conversion replaced by %.0s, which consumes the
 * same pointer argument and prints nothing: %n must never write memory on
 * behalf of a log message.  Returns fmt itself when it holds no %n. */
static const char *defuse_percent_n(const char *fmt, char *out, size_t outlen)
{
    const char *p = fmt;
    int has_n = 0;
    while ((p = strchr(p, '%')) != NULL) {
        p++;
        if (*p == '%') { p++; continue; }
        p += strspn(p, "0123456789$#-+ '.*Ihlqjzt");
        if (*p == 'n') { has_n = 1; break; }
        if (*p) p++;
    }
    if (!has_n) return fmt;
    size_t o = 0;
    for (p = fmt; *p && o + 8 < outlen;) {
        if (*p != '%') { out[o++] = *p++; continue; }
        const char *s = p++;
        if (*p == '%') { out[o++] = '%'; out[o++] = '%'; p++; continue; }
        size_t k = strspn(p, "0123456789$#-+ '.*Ihlqjzt");
        if (p[k] == 'n') {
            memcpy(out + o, "%.0s", 4);
            o += 4;
            p += k + 1;
            continue;
        }
        size_t n = (size_t)(p + k - s) + (p[k] ? 1 : 0);
        if (o + n + 8 >= outlen) break;
        memcpy(out + o, s, n);
        o += n;
        p = s + n;
    }
    if (*p) return NULL; /* too long to defuse: caller logs the raw format */
    out[o] = 0;
    return out;
}

static void shim_vlog(int pri, const char *fmt, va_list ap)
{
    int saved_errno = errno; /* %m reports the caller's errno */
    pthread_once(&shim_once, shim_init);
    if (pri & ~(LOG_PRIMASK | LOG_FACMASK)) pri &= LOG_PRIMASK | LOG_FACMASK;
    if (!(LOG_MASK(LOG_PRI(pri)) & atomic_load_explicit(&shim_mask, memory_order_relaxed))) {
        errno = saved_errno;
        return;
    }
    if ((pri & LOG_FACMASK) == 0) pri |= atomic_load_explicit(&shim_facility, memory_order_relaxed);
    if (!shim_domain) {
        errno = saved_errno;
        if (shim_missing == MISSING_DROP) atomic_fetch_add(&shim_dropped, 1);
        else real_vsyslog(pri, fmt, ap);
        errno = saved_errno;
        return;
    }
    const char *ident = atomic_load_explicit(&shim_ident, memory_order_relaxed);
    if (!ident) ident = program_invocation_short_name;
    int opt = atomic_load_explicit(&shim_option, memory_order_relaxed);
    char *b = shim_buf;
    int n;
    if (opt & LOG_PID)
        n = snprintf(b, SHIM_BUF, "<%d>%s[%d]: ", pri, ident,
                     atomic_load_explicit(&shim_pid, memory_order_relaxed));
    else
        n = snprintf(b, SHIM_BUF, "<%d>%s: ", pri, ident);
    if (n < 0) n = 0;
    if (n >= SHIM_BUF) n = SHIM_BUF - 1;
    char fmtbuf[FMT_BUF];
    const char *f = defuse_percent_n(fmt ? fmt : "(null)", fmtbuf, sizeof fmtbuf);
    size_t total;
    errno = saved_errno;
    if (f) {
        int m = vsnprintf(b + n, SHIM_BUF - (size_t)n, f, ap);
        total = (size_t)n + (m > 0 ? (size_t)m : 0);
    } else {
        int m = snprintf(b + n, SHIM_BUF - (size_t)n, "%s", fmt);
        total = (size_t)n + (m > 0 ? (size_t)m : 0);
    }
    /* vsnprintf reports the untruncated length: pass it on so that a
     * message longer than the buffer is flagged and counted as truncated. */
    size_t have = total < SHIM_BUF - 1 ? total : SHIM_BUF - 1;
    const struct fips_layout_header *h = fips_domain_header(shim_domain);
    if (total > have && have <= h->max_record) {
        /* longer than our buffer but the ring would take more: still cut */
        fips_log_trunc(shim_domain, b, h->max_record + 1u > have ? have : h->max_record, 0);
    } else {
        fips_log_trunc(shim_domain, b, have, 0);
    }
    if (opt & LOG_PERROR) {
        ssize_t w = write(STDERR_FILENO, b + n, have - (size_t)n);
        (void)w;
        w = write(STDERR_FILENO, "\n", 1);
        (void)w;
    }
    errno = saved_errno;
}

EXPORT void openlog(const char *ident, int option, int facility)
{
    pthread_once(&shim_once, shim_init);
    atomic_store(&shim_ident, ident);
    atomic_store(&shim_option, option);
    if (facility != 0 && (facility & ~LOG_FACMASK) == 0) atomic_store(&shim_facility, facility);
    if (!shim_domain && shim_missing == MISSING_PASSTHROUGH) {
        openlog_fn f = (openlog_fn)dlsym(RTLD_NEXT, "openlog");
        if (f) f(ident, option, facility);
    }
}

EXPORT void closelog(void)
{
    atomic_store(&shim_ident, NULL);
    if (!shim_domain && shim_missing == MISSING_PASSTHROUGH) {
        closelog_fn f = (closelog_fn)dlsym(RTLD_NEXT, "closelog");
        if (f) f();
    }
}

EXPORT int setlogmask(int mask)
{
    int old = atomic_load(&shim_mask);
    if (mask != 0) atomic_store(&shim_mask, mask);
    if (!shim_domain && shim_missing == MISSING_PASSTHROUGH) {
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
