/*
 * libnullsyslog.so — an LD_PRELOAD syslog(3) that does nothing, for the
 * "null_syslog" mode of `fipstop bench bind`.
 *
 * With it, named still formats every query-log line (BIND's own cost of
 * `querylog yes`: client and view lookup, isc_log's lock and vsnprintf into
 * its buffer) and hands it to syslog(3), which returns at once.  That is the
 * floor for any transport behind syslog(3): the fips shim cannot beat it, and
 * the gap between it and `querylog no` is BIND's, not the transport's.
 *
 * Built by fipstop/bench/bind.py: cc -O2 -shared -fPIC.
 */
#include <stdarg.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT void openlog(const char *ident, int option, int facility)
{
    (void)ident; (void)option; (void)facility;
}
EXPORT void closelog(void) {}
EXPORT int setlogmask(int mask)
{
    (void)mask;
    return 0xff;
}
EXPORT void syslog(int pri, const char *fmt, ...)
{
    (void)pri; (void)fmt;
}
EXPORT void vsyslog(int pri, const char *fmt, va_list ap)
{
    (void)pri; (void)fmt; (void)ap;
}
EXPORT void __syslog_chk(int pri, int flag, const char *fmt, ...)
{
    (void)pri; (void)flag; (void)fmt;
}
EXPORT void __vsyslog_chk(int pri, int flag, const char *fmt, va_list ap)
{
    (void)pri; (void)flag; (void)fmt; (void)ap;
}
