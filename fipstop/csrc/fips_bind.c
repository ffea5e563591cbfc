/*
 * libfips_bind.so — BIND 9's query log into FIPS rings, taken at
 * ns_client_log (`fipstop wrap --bind -- named ...`).
 *
 * Why here and not at syslog(3): with `querylog yes` most of what a query
 * line costs is paid inside libns before any transport sees it.  log_query()
 * formats the name, class and type and calls ns_client_log(), whose
 * ns_client_logv() vsnprintf's the message, formats the query name a second
 * time and the client address, and calls isc_log_write(), which takes the
 * log context's lock and formats the whole line a third time before
 * syslog(3).  Debian's libns calls its own ns_client_log / ns_client_logv
 * through its PLT (R_X86_64_JUMP_SLOT relocations, `readelf -rW`), so a
 * preload's definitions win.  For the `queries` category at info with the
 * query-line format (log_query's, the only caller of that shape) this file
 * builds the very line BIND would write — `client @PTR PEER (QNAME): query:
 * ...`, cut where ns_client_logv (4095 bytes of message) and isc_log (8191
 * bytes of line) cut it — with one claim in the calling thread's ring and
 * one copy of each piece: no vsnprintf, the query name not formatted again
 * (log_query's own text is reused: at that point query.origqname is
 * query.qname), no lock, no syslog(3).  The record is what the syslog
 * drop-in would have stored for a `syslog daemon; severity info;` channel:
 * `<30>named[PID]: ` and the line, so `fipstop tail`, `fipstop ips` and the
 * dashboard see the same bytes either way.
 *
 * Everything else falls through to BIND: other categories, other levels and
 * formats (e.g. the queries category's debug messages, which BIND filters by
 * channel severity), and every line when this file cannot vouch for the
 * layout.  It includes the syslog drop-in (fips_syslog.c: same domain, same
 * openlog state, same re-entry guard), so whatever BIND sends to a syslog
 * channel still lands in the rings.
 *
 * Falling back: at load time it looks up the real ns_client_log /
 * ns_client_logv and the few libns/libisc symbols it uses, and checks that
 * the libns that defines them is the file whose headers it was built with
 * (FIPS_BIND_LIBNS, e.g. libns-9.18.49-1~deb12u3-Debian.so: the struct
 * offsets come from those headers, fips_bind_layout.c).  If any of that
 * fails it prints one line on stderr saying why, and every query line takes
 * BIND's own path into the syslog drop-in.
 *
 * Configuration (environment, read once), besides the drop-in's:
 *   FIPS_BIND_FACILITY  syslog facility of the query lines' <PRI> (default
 *                       daemon, BIND's default_syslog channel)
 *   FIPS_BIND_VERIFY    1: also pass every line taken here on to BIND (for
 *                       tests: the ring then holds BIND's copy next to ours)
 *
 * Built twice (setup.py): libfips_bind.so exports ns_client_log and
 * ns_client_logv (the string path above, for stock named, and the binary hook
 * below when the named is patched); libfips_bindq.so (FIPS_BIND_NATIVE_ONLY)
 * exports neither, so in a patched named libns's own debug-level
 * ns_client_log calls stay direct and untouched by the preload (callgrind
 * counts both builds the same within a few instructions a query: 19 402 and
 * 19 408 in bench/results/bind-callgrind-20261203T183351Z / T190505Z; the
 * point is leaving libns alone, not speed).  `fipstop wrap --bind` picks
 * libfips_bindq.so when named's libns defines ns_fips_query_hook.
 *
 * Semantics that differ from BIND's own path: the queries category's info
 * lines go to the rings whatever channel named.conf gives the category (a
 * `category queries { null; };` with `querylog yes` still logs them here),
 * without print-time/print-category prefixes, and not to any other channel
 * of the category.
 */
#include "fips_syslog.c"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "fips_bind_layout.h"
#include "fips_bindq.h"

#ifndef FIPS_BIND_LIBNS
#define FIPS_BIND_LIBNS ""
#endif

/* log_query()'s format in lib/ns/query.c (9.18): twelve plain %s. */
#define QUERY_FMT "query: %s %s %s %s%s%s%s%s%s%s (%s)%s"
#define QUERY_ARGS 12
#define MSG_MAX 4095u   /* ns_client_logv: vsnprintf into msgbuf[4096] */
#define LINE_MAX_ 8191u /* isc_log: vsnprintf into buffer[LOG_BUFFER_SIZE = 8 KiB] */
#define PEER_BUF 128    /* >= ISC_SOCKADDR_FORMATSIZE (checked at load) */
#define NAME_BUF 1100   /* >= DNS_NAME_FORMATSIZE (checked at load) */
#define PIECES 40

typedef void (*logv_fn)(void *client, void *category, void *module, int level, const char *fmt, va_list ap);
typedef bool (*wouldlog_fn)(void *lctx, int level);
typedef void (*format_fn)(const void *obj, char *buf, unsigned int size);

static logv_fn real_logv;
static wouldlog_fn real_wouldlog;
static void **real_ns_lctx;
static format_fn real_name_format;     /* dns_name_format */
static format_fn real_sockaddr_format; /* isc_sockaddr_format */
static const void *queries_category;   /* &ns_categories[3], named "queries" */
static int bind_fast;                  /* 1: the queries category is taken here */
static int bind_verify;
static int bind_facility = LOG_DAEMON;
/* The format pointer log_query passes (a literal in libns): once seen, a
 * pointer compare.  Relaxed: the pointer is only compared, never read
 * through for data another thread published. */
static _Atomic(const char *) query_fmt_seen;
static atomic_ullong bind_lines; /* lines taken here (fips_bind_lines()) */
typedef int (*bq_hook_t)(const void *rec, unsigned int len);
static int bind_native; /* 1: the patched named's binary records are taken (ns_fips_query_hook) */

static _Thread_local char bind_signer[NAME_BUF];
static _Thread_local char bind_qname[NAME_BUF];

static const struct { const char *name; int code; } facilities[] = {
    {"kern", LOG_KERN}, {"user", LOG_USER}, {"mail", LOG_MAIL}, {"daemon", LOG_DAEMON},
    {"auth", LOG_AUTH}, {"syslog", LOG_SYSLOG}, {"lpr", LOG_LPR}, {"news", LOG_NEWS},
    {"uucp", LOG_UUCP}, {"cron", LOG_CRON}, {"authpriv", LOG_AUTHPRIV}, {"ftp", LOG_FTP},
    {"local0", LOG_LOCAL0}, {"local1", LOG_LOCAL1}, {"local2", LOG_LOCAL2}, {"local3", LOG_LOCAL3},
    {"local4", LOG_LOCAL4}, {"local5", LOG_LOCAL5}, {"local6", LOG_LOCAL6}, {"local7", LOG_LOCAL7},
};

EXPORT unsigned long long fips_bind_lines(void)
{
    return atomic_load_explicit(&bind_lines, memory_order_relaxed);
}

/* 1 when the preload takes the queries category at ns_client_log, 2 when it
 * takes a patched named's binary records (ns_fips_query_hook), 0 when BIND's
 * own path logs them (into the syslog drop-in); for a test or a probe. */
EXPORT int fips_bind_active(void)
{
    return bind_native ? 2 : bind_fast;
}

static void bind_say(const char *why, const char *detail)
{
    fprintf(stderr, "fipstop wrap --bind: %s: %s%s%s: query lines take BIND's own path into the syslog drop-in\n",
            program_invocation_short_name, why, detail ? " " : "", detail ? detail : "");
}

static atomic_ullong bind_refused; /* binary records left to BIND: too long for the ring's max_record */

/* A binary query record of the patched named (fips_bindq.h) into the calling
 * thread's ring: BIND filled the fixed part and the names; the syslog header's
 * pieces (PRI, ident, pid) are this process's openlog state, as the drop-in
 * would print them.  Returns 1 when taken (logged, or dropped and counted), 0
 * when BIND must log the line itself. */
static int bind_native_write(const uint8_t *rec, unsigned int len)
{
    shim_init_once();
    if (!shim_domain || len < FIPSBQ_HEAD_SIZE) return 0;
    int opt = atomic_load_explicit(&shim_option, memory_order_relaxed);
    if ((opt & LOG_PERROR) || !(LOG_MASK(LOG_INFO) & atomic_load_explicit(&shim_mask, memory_order_relaxed)))
        return 0;
    const char *ident = atomic_load_explicit(&shim_ident, memory_order_relaxed);
    if (!ident) ident = program_invocation_short_name;
    size_t il = strnlen(ident, FIPSBQ_IDENT_MAX + 1);
    if (il > FIPSBQ_IDENT_MAX) return 0;
    uint32_t total = len + (uint32_t)il;
    if (total > fips_domain_header(shim_domain)->max_record) {
        atomic_fetch_add_explicit(&bind_refused, 1, memory_order_relaxed);
        return 0; /* BIND's line, cut and flagged as the drop-in cuts it */
    }
    fips_slot slot;
    int rc = fips_claim(shim_domain, total, &slot);
    if (rc != 0) {
        if (rc != -FIPS_EFULL) atomic_fetch_add_explicit(&shim_dropped, 1, memory_order_relaxed);
        return 1;
    }
    uint8_t *out = slot.data;
    memcpy(out, rec, len);
    uint8_t pri = (uint8_t)(bind_facility | LOG_INFO);
    uint8_t ilen = (uint8_t)il;
    int32_t pid = (opt & LOG_PID) ? (int32_t)atomic_load_explicit(&shim_pid, memory_order_relaxed) : -1;
    memcpy(out + offsetof(struct fipsbq_head, pri), &pri, 1);
    memcpy(out + offsetof(struct fipsbq_head, ident_len), &ilen, 1);
    memcpy(out + offsetof(struct fipsbq_head, pid), &pid, sizeof pid);
    memcpy(out + len, ident, il);
    fips_commit(shim_domain, &slot, total, FIPSBQ_REC_FLAG, 0);
    atomic_fetch_add_explicit(&bind_lines, 1, memory_order_relaxed);
    return 1;
}

static int bind_native_record(const void *rec, unsigned int len)
{
    if (shim_active) return 0; /* a signal handler inside a log call of this thread: BIND's path */
    shim_active = 1;
    atomic_signal_fence(memory_order_seq_cst);
    int done = bind_native_write(rec, len);
    atomic_signal_fence(memory_order_seq_cst);
    shim_active = 0;
    return done && !bind_verify;
}

/* binary records left to BIND's own line because they exceed max_record */
EXPORT unsigned long long fips_bind_native_refused(void)
{
    return atomic_load_explicit(&bind_refused, memory_order_relaxed);
}

__attribute__((constructor)) static void bind_init(void)
{
    const struct fipsbind_layout *L = &fipsbind_layout;
    const char *v = getenv("FIPS_BIND_VERIFY");
    bind_verify = v && strcmp(v, "1") == 0;
    const char *fac = getenv("FIPS_BIND_FACILITY");
    if (fac && *fac) {
        int found = 0;
        for (size_t i = 0; i < sizeof facilities / sizeof facilities[0]; i++)
            if (strcmp(fac, facilities[i].name) == 0) {
                bind_facility = facilities[i].code;
                found = 1;
            }
        if (!found) fprintf(stderr, "fipstop wrap --bind: unknown FIPS_BIND_FACILITY %.40s: using daemon\n", fac);
    }
    real_logv = (logv_fn)dlsym(RTLD_NEXT, "ns_client_logv");
    void *real_log = dlsym(RTLD_NEXT, "ns_client_log");
    /* A named built with contrib/bind/fips-native.patch hands its query lines
     * over in binary before formatting anything: take them there, and leave
     * ns_client_log to BIND (this file's headers are not that libns's). */
    bq_hook_t *hook = (bq_hook_t *)dlsym(RTLD_DEFAULT, "ns_fips_query_hook");
#ifdef FIPS_BIND_NATIVE_ONLY
    if (!hook) {
        bind_say("no ns_fips_query_hook in this process", "(not a named built with contrib/bind/fips-native.patch)");
        return;
    }
#endif
    if (hook) {
        /* ns_client_log stays interposed (this file defines it): keep its
         * isc_log_wouldlog test, or every debug-level call of libns would be
         * formatted in full (measured: +22 k instructions a query) */
        real_wouldlog = (wouldlog_fn)dlsym(RTLD_DEFAULT, "isc_log_wouldlog");
        real_ns_lctx = (void **)dlsym(RTLD_DEFAULT, "ns_lctx");
        *hook = bind_native_record;
        bind_native = 1;
        return;
    }
    if (!real_logv || !real_log) {
        bind_say("no ns_client_log/ns_client_logv in this process", "(not BIND 9's libns)");
        return;
    }
    /* ns_client_log's own test before ns_client_logv: needed on every path */
    real_wouldlog = (wouldlog_fn)dlsym(RTLD_DEFAULT, "isc_log_wouldlog");
    real_ns_lctx = (void **)dlsym(RTLD_DEFAULT, "ns_lctx");
    Dl_info info;
    const char *file = dladdr((void *)real_logv, &info) && info.dli_fname ? info.dli_fname : "";
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (!FIPS_BIND_LIBNS[0] || strcmp(base, FIPS_BIND_LIBNS) != 0) {
        char detail[512];
        snprintf(detail, sizeof detail, "%.200s, this preload was built with the headers of %.200s",
                 base[0] ? base : "(unknown file)", FIPS_BIND_LIBNS[0] ? FIPS_BIND_LIBNS : "(none)");
        bind_say("libns is", detail);
        return;
    }
    real_name_format = (format_fn)dlsym(RTLD_DEFAULT, "dns_name_format");
    real_sockaddr_format = (format_fn)dlsym(RTLD_DEFAULT, "isc_sockaddr_format");
    const char *cats = (const char *)dlsym(RTLD_DEFAULT, "ns_categories");
    if (!real_wouldlog || !real_ns_lctx || !real_name_format || !real_sockaddr_format || !cats) {
        bind_say("missing one of", "isc_log_wouldlog, ns_lctx, dns_name_format, isc_sockaddr_format, ns_categories");
        return;
    }
    const char *q = cats + 3 * L->category_size; /* NS_LOGCATEGORY_QUERIES */
    const char *qname;
    memcpy(&qname, q + L->category_name, sizeof qname);
    if (!qname || strcmp(qname, "queries") != 0) {
        bind_say("ns_categories[3] is not", "\"queries\"");
        return;
    }
    if (L->sockaddr_formatsize > PEER_BUF || L->name_formatsize > NAME_BUF) {
        bind_say("BIND's format sizes exceed", "this preload's buffers");
        return;
    }
    queries_category = q;
    bind_fast = 1;
}

/* glibc's "%p" of a non-NULL pointer: 0x and lowercase hex. */
static size_t put_ptr(char *b, const void *p)
{
    uintptr_t v = (uintptr_t)p;
    char t[2 * sizeof v];
    size_t k = 0;
    do { t[k++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    b[0] = '0';
    b[1] = 'x';
    for (size_t i = 0; i < k; i++) b[2 + i] = t[k - 1 - i];
    return 2 + k;
}

/* isc_sockaddr_format of an AF_INET address (inet_ntop, '#', the port),
 * or BIND's own formatter for any other family; "(no-peer)" as
 * ns_client_logv writes it when there is no peer address. */
static size_t put_peer(char *b, const char *client)
{
    const struct fipsbind_layout *L = &fipsbind_layout;
    bool valid;
    memcpy(&valid, client + L->client_peeraddr_valid, sizeof valid);
    if (!valid) {
        memcpy(b, "(no-peer)", 10);
        return 9;
    }
    const char *sa = client + L->client_peeraddr;
    sa_family_t fam;
    memcpy(&fam, sa + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam != AF_INET) {
        real_sockaddr_format(sa, b, PEER_BUF);
        return strnlen(b, PEER_BUF - 1);
    }
    struct sockaddr_in sin;
    memcpy(&sin, sa, sizeof sin);
    const unsigned char *a = (const unsigned char *)&sin.sin_addr;
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        n += (size_t)put_uint(b + n, a[i]);
        b[n++] = i < 3 ? '.' : '#';
    }
    n += (size_t)put_uint(b + n, ntohs(sin.sin_port));
    b[n] = 0;
    return n;
}

/* Cut pieces [from, to) to at most max bytes in all, as a vsnprintf into a
 * buffer of max + 1 would; returns their length after the cut. */
static size_t cut_pieces(size_t *len, int from, int to, size_t max)
{
    size_t sum = 0;
    for (int i = from; i < to; i++) {
        if (sum + len[i] > max) len[i] = max - sum;
        sum += len[i];
    }
    return sum;
}

/* The query line of ns_client_logv(client, queries, ..., QUERY_FMT, ap) into
 * the calling thread's ring.  Returns 1 when handled (logged, or dropped and
 * counted), 0 when BIND's own path must take it. */
static int bind_query_line(const char *client, va_list ap)
{
    const struct fipsbind_layout *L = &fipsbind_layout;
    shim_init_once();
    if (!shim_domain) return 0; /* the drop-in decides: passthrough, drop or create */
    int opt = atomic_load_explicit(&shim_option, memory_order_relaxed);
    if ((opt & LOG_PERROR) || !(LOG_MASK(LOG_INFO) & atomic_load_explicit(&shim_mask, memory_order_relaxed)))
        return 0;
    const char *ident = atomic_load_explicit(&shim_ident, memory_order_relaxed);
    if (!ident) ident = program_invocation_short_name;
    if (strnlen(ident, FAST_IDENT + 1) > FAST_IDENT) return 0;

    const char *arg[QUERY_ARGS];
    for (int i = 0; i < QUERY_ARGS; i++) {
        arg[i] = va_arg(ap, const char *);
        if (!arg[i]) arg[i] = "(null)";
    }
    char hdr[FAST_IDENT + 32];
    size_t hl = (size_t)put_header(hdr, bind_facility | LOG_INFO, ident,
                                   (opt & LOG_PID) ? atomic_load_explicit(&shim_pid, memory_order_relaxed) : -1,
                                   FAST_IDENT);
    char ptr[2 + 2 * sizeof(void *) + 1];
    size_t ptrl = put_ptr(ptr, client);
    char peer[PEER_BUF];
    size_t peerl = put_peer(peer, client);

    const char *sep1 = "", *signer = "", *sep2 = "", *qname = "", *sep3 = "", *sep4 = "", *view = "";
    void *signer_name, *origq, *qn, *v;
    memcpy(&signer_name, client + L->client_signer, sizeof signer_name);
    if (signer_name) {
        real_name_format(signer_name, bind_signer, (unsigned)L->name_formatsize);
        sep1 = "/key ";
        signer = bind_signer;
    }
    memcpy(&origq, client + L->client_origqname, sizeof origq);
    memcpy(&qn, client + L->client_qname, sizeof qn);
    void *q = origq ? origq : qn;
    if (q) {
        sep2 = " (";
        sep3 = ")";
        if (q == qn) {
            qname = arg[0]; /* log_query formatted query.qname into the same size of buffer */
        } else {
            real_name_format(q, bind_qname, (unsigned)L->name_formatsize);
            qname = bind_qname;
        }
    }
    memcpy(&v, client + L->client_view, sizeof v);
    if (v) {
        const char *vn;
        memcpy(&vn, (const char *)v + L->view_name, sizeof vn);
        if (vn && strcmp(vn, "_bind") != 0 && strcmp(vn, "_default") != 0) {
            sep4 = ": view ";
            view = vn;
        }
    }

    /* "client @%p %s%s%s%s%s%s%s%s: %s" and, as its last %s, QUERY_FMT */
    const char *p[PIECES];
    size_t len[PIECES];
    int n = 0;
#define PIECE(s, l) (p[n] = (s), len[n] = (l), n++)
#define STR(s) PIECE((s), strlen(s))
    PIECE("client @", 8);
    PIECE(ptr, ptrl);
    PIECE(" ", 1);
    PIECE(peer, peerl);
    STR(sep1);
    STR(signer);
    STR(sep2);
    STR(qname);
    STR(sep3);
    STR(sep4);
    STR(view);
    PIECE(": ", 2);
    int msg0 = n;
    PIECE("query: ", 7);
    STR(arg[0]);
    PIECE(" ", 1);
    STR(arg[1]);
    PIECE(" ", 1);
    STR(arg[2]);
    PIECE(" ", 1);
    for (int i = 3; i <= 9; i++) STR(arg[i]);
    PIECE(" (", 2);
    STR(arg[10]);
    PIECE(")", 1);
    STR(arg[11]);
#undef STR
#undef PIECE
    cut_pieces(len, msg0, n, MSG_MAX);
    size_t total = hl + cut_pieces(len, 0, n, LINE_MAX_);

    uint32_t max_record = fips_domain_header(shim_domain)->max_record;
    uint32_t l = total > max_record ? max_record : (uint32_t)total;
    fips_slot slot;
    int rc = fips_claim(shim_domain, l, &slot);
    if (rc != 0) {
        /* full: the ring counted the drop; no ring to be had: the drop-in's counter */
        if (rc != -FIPS_EFULL) atomic_fetch_add_explicit(&shim_dropped, 1, memory_order_relaxed);
        return 1;
    }
    char *out = slot.data;
    size_t o = hl < l ? hl : l;
    memcpy(out, hdr, o);
    for (int i = 0; i < n && o < l; i++) {
        size_t k = len[i] < l - o ? len[i] : l - o;
        memcpy(out + o, p[i], k);
        o += k;
    }
    fips_commit(shim_domain, &slot, l, total > l ? FIPS_REC_TRUNC : 0, 0);
    atomic_fetch_add_explicit(&bind_lines, 1, memory_order_relaxed);
    return 1;
}

static inline int is_query_fmt(const char *fmt)
{
    const char *seen = atomic_load_explicit(&query_fmt_seen, memory_order_relaxed);
    if (fmt == seen) return 1;
    if (!fmt || strcmp(fmt, QUERY_FMT) != 0) return 0;
    atomic_store_explicit(&query_fmt_seen, fmt, memory_order_relaxed);
    return 1;
}

static void bind_logv(void *client, void *category, void *module, int level, const char *fmt, va_list ap,
                      int check_wouldlog)
{
    if (bind_fast && category == queries_category && level == fipsbind_layout.log_info && client &&
        !shim_active && is_query_fmt(fmt)) {
        va_list aq;
        va_copy(aq, ap);
        shim_active = 1;
        atomic_signal_fence(memory_order_seq_cst);
        int done = bind_query_line(client, aq);
        atomic_signal_fence(memory_order_seq_cst);
        shim_active = 0;
        va_end(aq);
        if (done && !bind_verify) return;
    }
    if (!real_logv) return; /* no libns behind us: nothing could have logged this */
    /* ns_client_log's own test, before it calls ns_client_logv */
    if (check_wouldlog && real_wouldlog && real_ns_lctx && !real_wouldlog(*real_ns_lctx, level)) return;
    real_logv(client, category, module, level, fmt, ap);
}

EXPORT void ns_client_logv(void *client, void *category, void *module, int level, const char *fmt, va_list ap)
{
    bind_logv(client, category, module, level, fmt, ap, 0);
}

EXPORT void ns_client_log(void *client, void *category, void *module, int level, const char *fmt, ...)
{
    /* ns_client_log's own first test, before anything else: libns calls this
     * ~6 times a query at debug levels no channel takes, and each must cost
     * what BIND's own early return costs (log_query tested the same before it
     * calls here, so no query line is lost to it) */
    if (real_wouldlog && real_ns_lctx && !real_wouldlog(*real_ns_lctx, level)) return;
    va_list ap;
    va_start(ap, fmt);
    bind_logv(client, category, module, level, fmt, ap, 0);
    va_end(ap);
}
