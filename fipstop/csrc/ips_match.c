/*
 * fipstop._ipsfast — the hot path of `fipstop ips`: match records against a
 * jail's Fail2Ban filter, extract and parse the address, count per address,
 * decide bans.  No Python runs per record.
 *
 * Why C and PCRE2: the IPS must keep up with ~1 M lines/s on one core; a
 * per-line Python loop manages a fraction of that.  PCRE2's JIT matches a
 * BIND line in ~100-200 ns.  Fail2Ban's regexes are Python `re` syntax; they
 * arrive here already translated into PCRE2 syntax with Python's meaning
 * (fipstop/ips/pcre.py), each in two builds: one for pure-ASCII lines
 * (no UTF: the fast path) and one with PCRE2_UTF|PCRE2_UCP for lines with a
 * byte >= 0x80 (Unicode \w, \d, \b and case folding, as Python has them).
 * Invalid UTF-8 is replaced by U+FFFD first, as Fail2Ban's decoder does, so
 * an attacker's stray byte cannot make a line unmatchable.  PCRE2 is loaded
 * with dlopen("libpcre2-8.so.0") so that building needs no -dev package.
 *
 * What happens to one record, in Fail2Ban's order (filter.py processLine +
 * findFailure, with checkAllRegex off as in a running Fail2Ban):
 *   1. a libfips_syslog.so record "<PRI>IDENT[PID]: MSG" becomes
 *      "localhost IDENT[PID]: MSG" (what a syslog daemon writes, minus the
 *      date); "<PRI>1 ..." (RFC 5424) and "<PRI>Mmm dd ..." (a forwarded
 *      line with its date) keep their text;
 *   2. the date is searched with the filter's date templates (Fail2Ban's
 *      template choice: the last template first, line-anchored templates
 *      win, else the match nearest the line start) and cut out; records of
 *      libfips_syslog.so carry no date and skip this;
 *   3. maxlines > 1: the line joins the source's buffer (a source is a
 *      ring, or the caller's source id), the last maxlines lines are matched
 *      together ("l1\nl2\n...\n") and matched lines leave the buffer;
 *   4. prefregex (its <F-CONTENT> becomes what failregexes see), each
 *      failregex until one matches, ignoreregex on the matched lines;
 *   5. <F-MLFID> sessions: the groups merge into the session of that id
 *      (Fail2Ban's _mergeFailure: <F-NOFAIL>, <F-MLFGAINED>, <F-MLFFORGET>,
 *      pending failures waiting for an address, several users);
 *   6. the host: ip4, ip6, else a DNS name (never resolved: counted as
 *      such), else <F-ID>.
 *
 * Memory is bounded whatever an attacker writes: the address table holds
 * max_tracked entries (expired ones swept, the least recently hit of a few
 * sampled evicted and counted), <F-MLFID> sessions at most max_sessions
 * (each a fixed ~1.4 KiB; the oldest of a sample evicted), multi-line buffers
 * at most MAX_SOURCES sources of at most maxlines lines and SRC_MAX_BYTES (a line keeps at most
 * SRC_MAX_BYTES / maxlines of its bytes in the buffer).
 *
 * Threads: feed() takes what it needs from the batch with the GIL held,
 * then matches with the GIL released; the per-jail address table is guarded
 * by a mutex taken once per batch.  Stateless jails match batches of several
 * reader threads in parallel.  A jail with state (maxlines > 1 or
 * <F-MLFID>) takes its state lock for the batch and processes the batches
 * of one ring in sequence order (a reader waits, at most 50 ms, for the
 * batch before its own): a session's lines must be seen in order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "fips_bindq_fmt.c" /* BIND's native query records: formatted before matching (ips_feed) */
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- PCRE2, by dlopen ------------------------------------------------------ */
typedef struct pcre2_code pcre2_code;
typedef struct pcre2_match_data pcre2_match_data;
#define PCRE2_UTF 0x00080000u
#define PCRE2_UCP 0x00020000u
#define PCRE2_NO_UTF_CHECK 0x40000000u
#define PCRE2_JIT_COMPLETE 0x00000001u
#define PCRE2_INFO_CAPTURECOUNT 4
#define PCRE2_UNSET (~(size_t)0)

static struct {
    int loaded;
    char err[200];
    pcre2_code *(*compile)(const uint8_t *, size_t, uint32_t, int *, size_t *, void *);
    int (*jit_compile)(pcre2_code *, uint32_t);
    void (*code_free)(pcre2_code *);
    pcre2_match_data *(*md_create)(uint32_t, void *);
    void (*md_free)(pcre2_match_data *);
    int (*match)(const pcre2_code *, const uint8_t *, size_t, size_t, uint32_t, pcre2_match_data *, void *);
    int (*jit_match)(const pcre2_code *, const uint8_t *, size_t, size_t, uint32_t, pcre2_match_data *, void *);
    int jit_all;  /* every pattern compiled so far got JIT code: match through pcre2_jit_match */
    size_t *(*ovector)(pcre2_match_data *);
    int (*pattern_info)(const pcre2_code *, uint32_t, void *);
    int (*error_message)(int, uint8_t *, size_t);
} P;

static int
pcre_load(void)
{
    if (P.loaded) return P.loaded > 0 ? 0 : -1;
    void *h = dlopen("libpcre2-8.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(P.err, sizeof P.err, "cannot load libpcre2-8.so.0 (Debian: libpcre2-8-0): %s", dlerror());
        P.loaded = -1;
        return -1;
    }
#define SYM(f, n) do { *(void **)&P.f = dlsym(h, n); if (!P.f) { \
        snprintf(P.err, sizeof P.err, "libpcre2-8.so.0 lacks %s", n); P.loaded = -1; return -1; } } while (0)
    SYM(compile, "pcre2_compile_8");
    SYM(jit_compile, "pcre2_jit_compile_8");
    SYM(code_free, "pcre2_code_free_8");
    SYM(md_create, "pcre2_match_data_create_8");
    SYM(md_free, "pcre2_match_data_free_8");
    SYM(match, "pcre2_match_8");
    SYM(jit_match, "pcre2_jit_match_8");
    SYM(ovector, "pcre2_get_ovector_pointer_8");
    SYM(pattern_info, "pcre2_pattern_info_8");
    SYM(error_message, "pcre2_get_error_message_8");
#undef SYM
    P.jit_all = 1;
    P.loaded = 1;
    return 0;
}

/* pcre2_jit_match skips pcre2_match's checks and dispatch (~100 instructions a call, a third of
 * what a record costs besides the regex itself); the subjects are valid UTF-8 already (repaired). */
static inline int
pmatch(const pcre2_code *c, const uint8_t *s, size_t n, uint32_t opts, pcre2_match_data *md)
{
    if (P.jit_all) return P.jit_match(c, s, n, 0, 0, md, NULL);
    return P.match(c, s, n, 0, opts, md, NULL);
}

/* ---- limits -------------------------------------------------------------------- */
#define MAX_NAMES 64          /* named groups per jail */
#define MAX_ALTS 8
#define MAX_SKIPL 8
#define MAX_DATA 8            /* data values (user, ...) carried per hit / ban event */
#define DATA_VAL_MAX 64       /* bytes of one carried data value */
#define MAX_USERS 8           /* distinct users remembered per session (only "more than one" matters) */
#define SESS_ARENA 1024       /* bytes of group values per session */
#define SESS_VAL_MAX 255
#define MAX_SOURCES 1024      /* multi-line sources per jail */
#define SRC_MAX_BYTES 65536   /* bytes of buffered lines per source */
#define MAX_MAXLINES 1000
#define LINE_MAX_BYTES (1u << 20) /* a longer record is matched on its first 1 MiB */
#define ORDER_WAIT_NS 50000000ull
#define MAX_REQ 4             /* prefilter literals of one regex */
#define MAX_REQ_LEN 64        /* bytes of one (a longer one is cut: a prefix is required as well) */

/* ---- one compiled regex ------------------------------------------------------ */
typedef struct {
    pcre2_code *code[2]; /* [0] ASCII lines, [1] UTF lines */
    uint32_t ncap;
    int16_t *gname;      /* [ncap + 1]: name id of each group, -1 unnamed */
    uint8_t has[MAX_NAMES];
    int nalt;
    int16_t alt[MAX_ALTS][2];
    int nskip;
    uint16_t skipg[MAX_SKIPL]; /* capture numbers of skiplines0, skiplines1, ... */
    int nreq;                  /* literals one of which every match contains (0: no prefilter) */
    uint8_t reqn[MAX_REQ];
    uint8_t req[MAX_REQ][MAX_REQ_LEN];
} rx;

/* The prefilter (fipstop/ips/prefilter.py): a subject holding none of the regex's required
 * literals cannot match, and memmem finds that out in one scan where PCRE2 would try every split
 * of a '.+' first (named-refused on a query line: ~5300 instructions). */
__attribute__((noinline)) static int
rx_scan(const rx *r, const uint8_t *s, size_t n)
{
    for (int k = 0; k < r->nreq; k++)
        if (memmem(s, n, r->req[k], r->reqn[k])) return 1;
    return 0;
}

/* out of line: inlined, the scan cost process_line ~18 instructions a line on regexes without one */
static inline int
rx_may_match(const rx *r, const uint8_t *s, size_t n)
{
    return __builtin_expect(!r->nreq, 1) || rx_scan(r, s, n);
}

static int
compile_one(pcre2_code **out, const char *pat, Py_ssize_t len, uint32_t opts)
{
    int ec;
    size_t eo;
    *out = P.compile((const uint8_t *)pat, (size_t)len, opts, &ec, &eo, NULL);
    if (!*out) {
        uint8_t msg[160];
        P.error_message(ec, msg, sizeof msg);
        PyErr_Format(PyExc_ValueError, "PCRE2 refuses the regex at offset %zu: %s: %.200s", eo, msg, pat);
        return -1;
    }
    if (P.jit_compile(*out, PCRE2_JIT_COMPLETE) != 0) P.jit_all = 0; /* interpreted if JIT is refused */
    return 0;
}

static void
rx_free(rx *r)
{
    for (int k = 0; k < 2; k++) {
        if (r->code[k]) P.code_free(r->code[k]);
        r->code[k] = NULL;
    }
    PyMem_Free(r->gname);
    r->gname = NULL;
}

/* spec: (ascii, utf, names: tuple[int], alts: tuple[(int, int)][, required: tuple[bytes]]) */
static int
rx_compile(rx *r, PyObject *spec, int nnames, const int *skip_ids)
{
    memset(r, 0, sizeof *r);
    PyObject *asc, *utf, *names, *alts, *req = NULL;
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "a regex is (ascii, utf, group name ids, alt pairs)");
        return -1;
    }
    if (!PyArg_ParseTuple(spec, "UUO!O!|O!", &asc, &utf, &PyTuple_Type, &names, &PyTuple_Type, &alts,
                          &PyTuple_Type, &req))
        return -1;
    if (req) {
        Py_ssize_t nr = PyTuple_GET_SIZE(req);
        if (nr > MAX_REQ) nr = 0; /* more alternatives than a prefilter takes: none (always correct) */
        for (Py_ssize_t k = 0; k < nr; k++) {
            char *b;
            Py_ssize_t bl;
            if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(req, k), &b, &bl) < 0) return -1;
            if (bl < 1) { /* an empty literal is in every subject: no prefilter */
                r->nreq = 0;
                break;
            }
            if (bl > MAX_REQ_LEN) bl = MAX_REQ_LEN;
            memcpy(r->req[k], b, (size_t)bl);
            r->reqn[k] = (uint8_t)bl;
            r->nreq = (int)k + 1;
        }
    }
    Py_ssize_t la, lu;
    const char *sa = PyUnicode_AsUTF8AndSize(asc, &la), *su = PyUnicode_AsUTF8AndSize(utf, &lu);
    if (!sa || !su) return -1;
    if (compile_one(&r->code[0], sa, la, 0) < 0) return -1;
    if (compile_one(&r->code[1], su, lu, PCRE2_UTF | PCRE2_UCP) < 0) return -1;
    uint32_t c0 = 0, c1 = 0;
    P.pattern_info(r->code[0], PCRE2_INFO_CAPTURECOUNT, &c0);
    P.pattern_info(r->code[1], PCRE2_INFO_CAPTURECOUNT, &c1);
    if (c0 != c1 || (Py_ssize_t)c0 + 1 != PyTuple_GET_SIZE(names)) {
        PyErr_SetString(PyExc_ValueError, "regex builds disagree on their groups");
        return -1;
    }
    r->ncap = c0;
    r->gname = PyMem_Malloc((c0 + 1) * sizeof *r->gname);
    if (!r->gname) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t g = 0; g <= c0; g++) {
        long id = PyLong_AsLong(PyTuple_GET_ITEM(names, g));
        if (id == -1 && PyErr_Occurred()) return -1;
        if (id < -1 || id >= nnames) {
            PyErr_SetString(PyExc_ValueError, "group name id out of range");
            return -1;
        }
        r->gname[g] = (int16_t)id;
        if (id >= 0) r->has[id] = 1;
    }
    /* skiplines groups in their numeric order (skiplines0, 1, ...) */
    for (int k = 0; k < MAX_SKIPL && skip_ids[k] >= 0; k++)
        for (uint32_t g = 1; g <= c0; g++)
            if (r->gname[g] == skip_ids[k]) r->skipg[r->nskip++] = (uint16_t)g;
    Py_ssize_t na = PyTuple_GET_SIZE(alts);
    if (na > MAX_ALTS) {
        PyErr_SetString(PyExc_ValueError, "too many alt_ groups");
        return -1;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        int a, b;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(alts, i), "ii", &a, &b)) return -1;
        if (a < 0 || a >= nnames || b < 0 || b >= nnames) {
            PyErr_SetString(PyExc_ValueError, "alt group id out of range");
            return -1;
        }
        r->alt[r->nalt][0] = (int16_t)a;
        r->alt[r->nalt][1] = (int16_t)b;
        r->nalt++;
    }
    return 0;
}

/* ---- group values ------------------------------------------------------------------ */
typedef struct {
    const uint8_t *p;
    uint32_t n;
    uint8_t set;
} val;

static inline int
truthy(const val *v)
{
    return v->set && v->n > 0;
}

/* The groups of a match over v[], as Fail2Ban's fail.update(groupdict): every name of the regex
 * replaces what v had (an unset group as None), after the regex's own alt_ merges (alt_user fills
 * an empty user).  Python allows each name once per regex. */
static void
rx_groups(const rx *r, const size_t *ov, int rc, const uint8_t *subj, val *v)
{
    for (uint32_t g = 1; g <= r->ncap; g++) {
        int id = r->gname[g];
        if (id < 0) continue;
        if ((int)g < rc && ov[2 * g] != PCRE2_UNSET) {
            v[id].p = subj + ov[2 * g];
            v[id].n = (uint32_t)(ov[2 * g + 1] - ov[2 * g]);
            v[id].set = 1;
        } else {
            v[id].set = 0;
        }
    }
    for (int a = 0; a < r->nalt; a++) {
        int si = r->alt[a][0], di = r->alt[a][1];
        const val *src = &v[si];
        int dst_truthy = r->has[di] && truthy(&v[di]); /* only the regex's own value counts */
        if (truthy(src) && !dst_truthy) v[di] = *src;
    }
}

/* ---- roles of group names ------------------------------------------------------------ */
enum { R_IP4, R_IP6, R_DNS, R_CIDR, R_FID, R_CONTENT, R_MLFID, R_NOFAIL, R_GAINED, R_FORGET, R_USER, R_NROLES };
static const char *const role_names[R_NROLES] = {"ip4",   "ip6",     "dns",       "cidr",      "fid", "content",
                                                 "mlfid", "nofail",  "mlfgained", "mlfforget", "user"};

/* ---- date templates ---------------------------------------------------------------- */
typedef struct {
    pcre2_code *code[2];
    int anchored;        /* LINE_BEGIN or LINE_END: the first match wins */
    uint32_t hits;       /* relaxed atomics: a hint shared by reader threads */
    int32_t distance;
} dtempl;

/* ---- address table ------------------------------------------------------------------ */
typedef struct {
    uint8_t key[16];
    uint64_t first_ns;     /* first hit counted toward the current ban decision */
    uint64_t last_ns;
    uint64_t until_ns;     /* banned until (record time), 0 = not banned */
    double level;          /* hits (window) or bucket level */
    uint32_t used;
    uint32_t pad;
} entry;

typedef struct {
    uint8_t net[16];
    int bits;
} cidr;

/* ---- <F-MLFID> sessions --------------------------------------------------------------- */
typedef struct {
    uint64_t h0, h1;       /* keyed hash of the mlfid (both 0: free) */
    uint64_t created_ns;
    uint64_t touched;      /* jail-wide counter at the last use (eviction picks the oldest) */
    uint8_t pending;       /* a failure matched before the session knew an address */
    uint8_t nusers;
    uint16_t arena_used;
    uint64_t users[MAX_USERS];
    uint16_t off[MAX_NAMES], len[MAX_NAMES];
    uint8_t set[MAX_NAMES];
    uint8_t arena[SESS_ARENA];
} session;

/* ---- multi-line sources ----------------------------------------------------------------- */
typedef struct {
    uint8_t *p;
    uint32_t n, cap;
} bline;

typedef struct {
    uint64_t id;           /* ring index (feed) or the caller's source id */
    uint64_t next_seq;     /* seq after the last batch processed (0: none yet) */
    uint64_t touched;
    int used;
    int nlines;            /* buffered lines, oldest first */
    size_t bytes;
    bline *lines;          /* [maxlines] */
} source;

typedef struct {
    PyObject_HEAD
    PyObject *name;
    rx pref;
    int has_pref;
    rx *fail;
    int nfail;
    rx *ign;
    int nign;
    uint32_t maxgroups;
    int nnames;
    PyObject *names;        /* tuple of str */
    int role[R_NROLES];
    int skip_ids[MAX_SKIPL + 1];
    int data_ids[MAX_DATA];
    int ndata;
    /* dates */
    dtempl *dates;
    int ndates;
    pcre2_code *dany[2];    /* the union of the templates: one search says "no date here" */
    int32_t last_tmpl, last_dist, last_end;
    /* multi-line and sessions */
    int maxlines;
    int stateful;
    pthread_mutex_t smu;
    pthread_cond_t scv;
    source *srcs;
    int nsrcs;
    uint64_t src_clock;
    session *sess;
    uint64_t sess_cap, sess_mask, sess_live, max_sessions, sess_clock, sess_cursor;
    uint64_t session_ns;
    uint64_t sk0, sk1;
    /* counting */
    cidr *nets;
    int nnets;
    int mode;              /* 0 window, 1 bucket */
    int skip_truncated;
    int v6_prefix;
    uint32_t maxretry;
    uint64_t findtime_ns, bantime_ns;
    /* table */
    pthread_mutex_t mu;
    entry *tab;
    uint64_t cap, mask, live, max_tracked, cursor;
    uint64_t seed0, seed1;
    /* counters (under mu) */
    uint64_t records, bytes, matched, ignored, not_ip, nomatch, truncated, truncated_skipped;
    uint64_t evictions, expired, bans, hits_while_banned, ignored_ip;
    uint64_t dns, nofail, pending, dated, pref_hits, sess_evicted, src_evicted, order_waits;
    uint64_t *fail_hits, *ign_hits;
} Jail;

static inline uint64_t
rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t
hash_key(const Jail *j, const uint8_t *k)
{
    uint64_t a = rd64(k) ^ j->seed0, b = rd64(k + 8) ^ j->seed1;
    __uint128_t m = (__uint128_t)a * (b ^ 0x9e3779b97f4a7c15ull);
    uint64_t h = (uint64_t)m ^ (uint64_t)(m >> 64);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

/* SipHash-1-3: session ids and user names are attacker text hashed into a table */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); v2 += v3; v3 = ROTL(v3, 16); \
        v3 ^= v2; v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; \
        v2 = ROTL(v2, 32); } while (0)

static uint64_t
siphash13(uint64_t k0, uint64_t k1, const uint8_t *p, size_t n)
{
    uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
    uint64_t b = ((uint64_t)n) << 56;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t m = rd64(p + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t k = 0; i + k < n; k++) b |= ((uint64_t)p[i + k]) << (8 * k);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static void
tab_remove_at(Jail *j, uint64_t i)
{
    /* backward-shift deletion keeps linear probing chains intact */
    uint64_t hole = i;
    j->tab[hole].used = 0;
    j->live--;
    uint64_t k = (hole + 1) & j->mask;
    while (j->tab[k].used) {
        uint64_t home = hash_key(j, j->tab[k].key) & j->mask;
        /* can entry k move to hole? yes if home is not in (hole, k] cyclically */
        int move = (hole <= k) ? (home <= hole || home > k) : (home <= hole && home > k);
        if (move) {
            j->tab[hole] = j->tab[k];
            j->tab[k].used = 0;
            hole = k;
        }
        k = (k + 1) & j->mask;
    }
}

static inline int
expired(const Jail *j, const entry *e, uint64_t now)
{
    if (e->until_ns) return now >= e->until_ns;
    return now > e->last_ns && now - e->last_ns > j->findtime_ns;
}

/* look at a few slots after the cursor, drop the expired ones */
static void
tab_sweep(Jail *j, uint64_t now, int n)
{
    for (int s = 0; s < n; s++) {
        uint64_t i = j->cursor & j->mask;
        if (j->tab[i].used && expired(j, &j->tab[i], now)) {
            tab_remove_at(j, i); /* something may have shifted into i: look again */
            j->expired++;
        } else {
            j->cursor++;
        }
    }
}

static void
tab_evict_one(Jail *j)
{
    /* least recently hit non-banned entry among the next 16 live ones */
    uint64_t best = UINT64_MAX, best_t = UINT64_MAX, any = UINT64_MAX;
    int seen = 0;
    for (uint64_t s = 0; s < j->cap && seen < 16; s++) {
        uint64_t i = (j->cursor + s) & j->mask;
        if (!j->tab[i].used) continue;
        seen++;
        if (any == UINT64_MAX) any = i;
        if (!j->tab[i].until_ns && j->tab[i].last_ns < best_t) {
            best_t = j->tab[i].last_ns;
            best = i;
        }
    }
    if (best == UINT64_MAX) best = any;
    if (best == UINT64_MAX) return;
    j->cursor = best + 1;
    tab_remove_at(j, best);
    j->evictions++;
}

typedef struct {
    uint8_t key[16];
    uint64_t first_ns, trigger_ns;
    uint32_t hits;
    int32_t data;          /* index of the hit's data in the batch's data arena, -1 none */
} trigger;

/* count one hit; returns 1 when it triggers a ban (filled into *t) */
static int
tab_hit(Jail *j, const uint8_t *key, uint64_t ts, trigger *t)
{
    tab_sweep(j, ts, 2);
    uint64_t i = hash_key(j, key) & j->mask;
    while (j->tab[i].used && memcmp(j->tab[i].key, key, 16) != 0) i = (i + 1) & j->mask;
    entry *e = &j->tab[i];
    if (e->used && expired(j, e, ts)) {
        tab_remove_at(j, i);
        j->expired++;
        return tab_hit(j, key, ts, t);
    }
    if (!e->used) {
        if (j->live >= j->max_tracked) {
            tab_evict_one(j);
            return tab_hit(j, key, ts, t); /* the chain may have moved */
        }
        memset(e, 0, sizeof *e);
        memcpy(e->key, key, 16);
        e->used = 1;
        e->first_ns = ts;
        e->last_ns = ts;
        j->live++;
    }
    if (e->until_ns) { /* already banned */
        j->hits_while_banned++;
        e->last_ns = ts > e->last_ns ? ts : e->last_ns;
        return 0;
    }
    if (j->mode == 0) {
        if (e->level > 0 && ts > e->first_ns && ts - e->first_ns > j->findtime_ns) {
            e->level = 0; /* Fail2Ban: the window restarts at this hit */
        }
        if (e->level == 0) e->first_ns = ts;
        e->level += 1;
    } else {
        double leak = j->findtime_ns ? (double)j->maxretry / (double)j->findtime_ns : 1e300;
        double dt = ts > e->last_ns ? (double)(ts - e->last_ns) : 0.0;
        e->level -= dt * leak;
        if (e->level <= 0) {
            e->level = 0;
            e->first_ns = ts;
        }
        e->level += 1;
    }
    e->last_ns = ts > e->last_ns ? ts : e->last_ns;
    if (e->level + 1e-9 >= (double)j->maxretry) {
        memcpy(t->key, key, 16);
        t->first_ns = e->first_ns;
        t->trigger_ns = ts;
        t->hits = (uint32_t)(e->level + 0.5);
        e->level = 0;
        e->until_ns = ts + (j->bantime_ns ? j->bantime_ns : 1);
        j->bans++;
        return 1;
    }
    return 0;
}

/* ---- address parsing ------------------------------------------------------------ */
/* Dotted-quad IPv4 as glibc's inet_pton(AF_INET) reads it (1-3 digits an octet, <= 255, no
 * leading zero, nothing else), without its per-call overhead: most hits are IPv4.  Returns 0 and
 * fills v4, or -1 (then inet_pton decides, for the rest of the cases). */
static inline int
fast_ipv4(const char *s, size_t n, uint8_t v4[4])
{
    size_t i = 0;
    for (int k = 0; k < 4; k++) {
        if (i >= n || s[i] < '0' || s[i] > '9') return -1;
        unsigned v = (unsigned)(s[i++] - '0');
        int digits = 1;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (v == 0 || ++digits > 3) return -1; /* a leading zero, or 4 digits */
            v = v * 10 + (unsigned)(s[i++] - '0');
        }
        if (v > 255) return -1;
        v4[k] = (uint8_t)v;
        if (k < 3) {
            if (i >= n || s[i] != '.') return -1;
            i++;
        }
    }
    return i == n ? 0 : -1;
}

static int
parse_addr(const char *s, size_t n, int v6hint, uint8_t key[16])
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return -1;
    if (!v6hint && fast_ipv4(s, n, key + 12) == 0) {
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        return 0;
    }
    memcpy(buf, s, n);
    buf[n] = 0;
    char *p = buf;
    if (*p == '[' && buf[n - 1] == ']') { /* [v6] */
        p++;
        buf[n - 1] = 0;
    }
    uint8_t v4[4];
    if (!v6hint && inet_pton(AF_INET, p, v4) == 1) {
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, v4, 4);
        return 0;
    }
    char *pct = strchr(p, '%'); /* zone id: fe80::1%eth0 */
    if (pct) *pct = 0;
    if (inet_pton(AF_INET6, p, key) == 1) return 0;
    if (inet_pton(AF_INET, p, v4) == 1) {
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, v4, 4);
        return 0;
    }
    return -1;
}

static int
is_v4(const uint8_t *k)
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(k, pre, 12) == 0;
}

static void
mask_bits(uint8_t *k, int bits)
{
    for (int i = 0; i < 16; i++) {
        int b = bits - 8 * i;
        if (b >= 8) continue;
        k[i] &= b <= 0 ? 0 : (uint8_t)(0xff << (8 - b));
    }
}

static int
in_nets(const Jail *j, const uint8_t *k)
{
    for (int i = 0; i < j->nnets; i++) {
        uint8_t m[16];
        memcpy(m, k, 16);
        mask_bits(m, j->nets[i].bits);
        if (memcmp(m, j->nets[i].net, 16) == 0) return 1;
    }
    return 0;
}

static PyObject *
key_to_str(const uint8_t *k)
{
    char out[INET6_ADDRSTRLEN];
    if (is_v4(k))
        inet_ntop(AF_INET, k + 12, out, sizeof out);
    else
        inet_ntop(AF_INET6, k, out, sizeof out);
    return PyUnicode_FromString(out);
}

/* ---- per-call work buffers ------------------------------------------------------------ */
typedef struct {
    uint8_t *p;
    size_t cap;
} buf_t;

static int
buf_need(buf_t *b, size_t n)
{
    if (n <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 4096;
    while (c < n) c *= 2;
    uint8_t *np = realloc(b->p, c);
    if (!np) return -1;
    b->p = np;
    b->cap = c;
    return 0;
}

typedef struct {
    pcre2_match_data *md;
    buf_t line;      /* the record as matched: header rewritten, date cut out, '\n' appended */
    buf_t utf;       /* a repaired copy when the record is not valid UTF-8 */
    buf_t join;      /* multi-line: the buffered lines joined */
    buf_t content;   /* <F-CONTENT> + '\n' */
    buf_t ignbuf;    /* multi-line: the matched lines, for ignoreregex */
    buf_t dline;     /* check(): the line the date detector saw */
} work;

static void
work_free(work *w)
{
    if (w->md) P.md_free(w->md);
    free(w->line.p);
    free(w->utf.p);
    free(w->join.p);
    free(w->content.p);
    free(w->ignbuf.p);
    free(w->dline.p);
    memset(w, 0, sizeof *w);
}

/* ---- UTF-8: validity and repair as Python's decode(errors='replace') ------------------ */
static size_t
utf8_valid_prefix(const uint8_t *s, size_t n, size_t i, int *bad_len)
{
    /* returns the length of a valid sequence at i (>= 1), or 0 with *bad_len = the
     * maximal invalid subpart to replace with one U+FFFD */
    uint8_t c = s[i];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else { *bad_len = 1; return 0; }
    for (int k = 1; k <= need; k++) {
        if (i + k >= n) { *bad_len = k; return 0; }
        uint8_t d = s[i + k];
        if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) { *bad_len = k; return 0; }
    }
    return (size_t)need + 1;
}

/* Which build of the regexes a line needs: 0 the ASCII one (the fast path: PCRE2's own \s and \S
 * equal Python's on such a line), 1 the exact UTF one: a byte >= 0x80, or one of \x1c-\x1f (in
 * Python's \s, not in PCRE2's).  Bit 2 is set when a byte >= 0x80 is there (UTF-8 to check).
 * Every record is scanned: 32 bytes a step, the control-byte test by SWAR. */
static inline uint64_t
fs_bytes(uint64_t w)
{
    uint64_t x = (w & 0xfcfcfcfcfcfcfcfcull) ^ 0x1c1c1c1c1c1c1c1cull; /* 0 where a byte is 0x1c..0x1f */
    return (x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull;
}

static int
line_kind_exact(const uint8_t *s, size_t n)
{
    int high = 0, fs = 0;
    for (size_t i = 0; i < n; i++) {
        high |= s[i] >> 7;
        fs |= (s[i] & 0xfc) == 0x1c;
    }
    return high ? 3 : fs ? 1 : 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* the same test 32 bytes a step, where the CPU has AVX2 (chosen once, at module init) */
__attribute__((target("avx2"))) static int
line_kind_avx2(const uint8_t *s, size_t n)
{
    if (n >= 32) {
        const __m256i sp = _mm256_set1_epi8(0x20);
        __m256i acc = _mm256_setzero_si256();
        size_t i = 0;
        for (; i + 32 <= n; i += 32)
            acc = _mm256_or_si256(acc, _mm256_cmpgt_epi8(sp, _mm256_loadu_si256((const __m256i *)(s + i))));
        if (i < n)
            acc = _mm256_or_si256(acc, _mm256_cmpgt_epi8(sp, _mm256_loadu_si256((const __m256i *)(s + n - 32))));
        if (!_mm256_movemask_epi8(acc)) return 0;
    }
    return line_kind_exact(s, n);
}
static int use_avx2;
#endif

static inline int
line_kind(const uint8_t *s, size_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (use_avx2) return line_kind_avx2(s, n);
#endif
#ifdef __SSE2__
    /* one signed compare finds both kinds of byte (>= 0x80 is negative) and the other control
     * bytes too (a tab): only a line with one of those is looked at byte by byte */
    if (n >= 16) {
        const __m128i sp = _mm_set1_epi8(0x20);
        __m128i acc = _mm_setzero_si128();
        size_t i = 0;
        for (; i + 16 <= n; i += 16)
            acc = _mm_or_si128(acc, _mm_cmplt_epi8(_mm_loadu_si128((const __m128i *)(s + i)), sp));
        if (i < n) acc = _mm_or_si128(acc, _mm_cmplt_epi8(_mm_loadu_si128((const __m128i *)(s + n - 16)), sp));
        if (!_mm_movemask_epi8(acc)) return 0;
    }
#else
    size_t i = 0;
    uint64_t h0 = 0, f0 = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t a = rd64(s + i);
        h0 |= a;
        f0 |= fs_bytes(a);
    }
    if (!((h0 & 0x8080808080808080ull) | f0) && i == n) return 0;
#endif
    return line_kind_exact(s, n);
}

/* repair into out (3 bytes per replaced byte at worst); returns 1 if it was invalid */
static int
utf8_repair(const uint8_t *s, size_t n, buf_t *out, size_t *out_n)
{
    size_t i = 0;
    int bad;
    while (i < n) {
        size_t k = utf8_valid_prefix(s, n, i, &bad);
        if (!k) break;
        i += k;
    }
    if (i == n) return 0;
    if (buf_need(out, n * 3 + 8) < 0) return -1;
    memcpy(out->p, s, i);
    size_t o = i;
    while (i < n) {
        size_t k = utf8_valid_prefix(s, n, i, &bad);
        if (k) {
            memcpy(out->p + o, s + i, k);
            o += k;
            i += k;
        } else {
            out->p[o++] = 0xEF;
            out->p[o++] = 0xBF;
            out->p[o++] = 0xBD;
            i += (size_t)bad;
        }
    }
    *out_n = o;
    return 1;
}

/* ---- date detection (Fail2Ban's DateDetector.matchTime, without re-ordering) ------------ */
typedef struct {
    int tmpl;
    size_t g0, s, e;
} datehit;

static int
dt_search(const dtempl *t, int utf, const uint8_t *l, size_t n, pcre2_match_data *md, datehit *h)
{
    int rc = pmatch(t->code[utf], l, n, utf ? PCRE2_NO_UTF_CHECK : 0, md);
    if (rc < 0) return 0;
    size_t *ov = P.ovector(md);
    h->g0 = ov[0];
    if (rc > 1 && ov[2] != PCRE2_UNSET) {
        h->s = ov[2];
        h->e = ov[3];
    } else {
        h->s = h->e = ov[1];
    }
    return 1;
}

static int
detect_date(Jail *j, int utf, const uint8_t *l, size_t n, pcre2_match_data *md, datehit *out)
{
    int nt = j->ndates;
    int last = __atomic_load_n(&j->last_tmpl, __ATOMIC_RELAXED);
    int32_t last_dist = __atomic_load_n(&j->last_dist, __ATOMIC_RELAXED);
    int32_t last_end = __atomic_load_n(&j->last_end, __ATOMIC_RELAXED);
    datehit h, found = {-1, 0, 0, 0};
    size_t found_d = SIZE_MAX;
    int got = -1, skip = -1;
    if (last >= 0 && last < nt) {
        skip = last;
        if (dt_search(&j->dates[last], utf, l, n, md, &h)) {
            size_t end0 = P.ovector(md)[1];
            if (nt == 1 || j->dates[last].anchored ||
                ((int32_t)h.g0 == last_dist && (int32_t)end0 == last_end)) {
                got = last;
            } else {
                found = h;
                found.tmpl = last;
                found_d = h.g0;
            }
        }
    }
    /* the last template first (a dated source keeps its format), then the union of all: a
     * line it does not match has no date, and the templates are not searched one by one */
    if (got < 0 && found.tmpl < 0 && j->dany[utf] &&
        pmatch(j->dany[utf], l, n, utf ? PCRE2_NO_UTF_CHECK : 0, md) < 0)
        return 0;
    if (got < 0) {
        for (int i = 0; i < nt; i++) {
            if (i == skip) continue;
            dtempl *t = &j->dates[i];
            if (!dt_search(t, utf, l, n, md, &h)) continue;
            if (i + 1 >= nt || t->anchored) { got = i; break; }
            uint32_t th = __atomic_load_n(&t->hits, __ATOMIC_RELAXED);
            if (h.g0 == 0 && th && !__atomic_load_n(&j->dates[i + 1].hits, __ATOMIC_RELAXED)) { got = i; break; }
            int32_t td = __atomic_load_n(&t->distance, __ATOMIC_RELAXED);
            if ((int64_t)h.g0 > (int64_t)td || (int64_t)h.g0 > (int64_t)last_dist) {
                if (h.g0 < found_d) {
                    found = h;
                    found.tmpl = i;
                    found_d = h.g0;
                }
                continue;
            }
            got = i;
            break;
        }
        if (got < 0 && found.tmpl >= 0) {
            h = found;
            got = found.tmpl;
            /* the end of the whole match is needed below: search it again */
            dt_search(&j->dates[got], utf, l, n, md, &h);
        }
    }
    if (got < 0) return 0;
    h.tmpl = got;
    size_t end = P.ovector(md)[1];
    dtempl *t = &j->dates[got];
    uint32_t th = __atomic_load_n(&t->hits, __ATOMIC_RELAXED);
    __atomic_store_n(&t->hits, th + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&t->distance, (int32_t)h.g0, __ATOMIC_RELAXED);
    __atomic_store_n(&j->last_dist, (int32_t)h.g0, __ATOMIC_RELAXED);
    __atomic_store_n(&j->last_end, (int32_t)end, __ATOMIC_RELAXED);
    __atomic_store_n(&j->last_tmpl, got, __ATOMIC_RELAXED);
    *out = h;
    return 1;
}

/* ---- sessions ----------------------------------------------------------------------------- */
static session *
sess_find(Jail *j, uint64_t h0, uint64_t h1, uint64_t now)
{
    if (!j->sess) return NULL;
    uint64_t i = h0 & j->sess_mask;
    while (j->sess[i].h0 || j->sess[i].h1) {
        session *s = &j->sess[i];
        if (s->h0 == h0 && s->h1 == h1) {
            if (now && j->session_ns && now > s->created_ns && now - s->created_ns > j->session_ns) return NULL;
            return s;
        }
        i = (i + 1) & j->sess_mask;
    }
    return NULL;
}

static void
sess_remove(Jail *j, session *s)
{
    uint64_t hole = (uint64_t)(s - j->sess);
    j->sess[hole].h0 = j->sess[hole].h1 = 0;
    j->sess_live--;
    uint64_t k = (hole + 1) & j->sess_mask;
    while (j->sess[k].h0 || j->sess[k].h1) {
        uint64_t home = j->sess[k].h0 & j->sess_mask;
        int move = (hole <= k) ? (home <= hole || home > k) : (home <= hole && home > k);
        if (move) {
            j->sess[hole] = j->sess[k];
            j->sess[k].h0 = j->sess[k].h1 = 0;
            hole = k;
        }
        k = (k + 1) & j->sess_mask;
    }
}

static void
sess_evict(Jail *j, uint64_t now)
{
    /* expired ones first, else the least recently used among 16 sampled */
    session *best = NULL;
    int seen = 0;
    for (uint64_t s = 0; s < j->sess_cap && seen < 16; s++) {
        session *e = &j->sess[(j->sess_cursor + s) & j->sess_mask];
        if (!e->h0 && !e->h1) continue;
        seen++;
        if (now && j->session_ns && now > e->created_ns && now - e->created_ns > j->session_ns) {
            best = e;
            break;
        }
        if (!best || e->touched < best->touched) best = e;
    }
    if (!best) return;
    j->sess_cursor = (uint64_t)(best - j->sess) + 1;
    sess_remove(j, best);
    j->sess_evicted++;
}

static session *
sess_new(Jail *j, uint64_t h0, uint64_t h1, uint64_t now)
{
    /* an expired entry with this id may still sit in the table */
    for (uint64_t i = h0 & j->sess_mask; j->sess[i].h0 || j->sess[i].h1; i = (i + 1) & j->sess_mask)
        if (j->sess[i].h0 == h0 && j->sess[i].h1 == h1) {
            sess_remove(j, &j->sess[i]);
            break;
        }
    while (j->sess_live >= j->max_sessions) sess_evict(j, now);
    uint64_t i = h0 & j->sess_mask;
    while (j->sess[i].h0 || j->sess[i].h1) i = (i + 1) & j->sess_mask;
    session *s = &j->sess[i];
    memset(s, 0, sizeof *s);
    s->h0 = h0;
    s->h1 = h1 ? h1 : 1; /* (0, 0) means free */
    s->created_ns = now;
    j->sess_live++;
    return s;
}

/* overwrite the session's values with the set ones of v (Fail2Ban: mlfidGroups.update) */
static void
sess_update(Jail *j, session *s, const val *v)
{
    uint8_t tmp[SESS_ARENA];
    uint16_t off[MAX_NAMES], len[MAX_NAMES];
    uint8_t set[MAX_NAMES];
    size_t used = 0;
    for (int id = 0; id < j->nnames; id++) {
        const uint8_t *p;
        size_t n;
        if (v[id].set) {
            p = v[id].p;
            n = v[id].n;
        } else if (s->set[id]) {
            p = s->arena + s->off[id];
            n = s->len[id];
        } else {
            set[id] = 0;
            continue;
        }
        if (n > SESS_VAL_MAX) n = SESS_VAL_MAX;
        if (used + n > SESS_ARENA) {
            set[id] = 0;
            continue;
        }
        memcpy(tmp + used, p, n);
        off[id] = (uint16_t)used;
        len[id] = (uint16_t)n;
        set[id] = 1;
        used += n;
    }
    memcpy(s->arena, tmp, used);
    memcpy(s->off, off, sizeof off);
    memcpy(s->len, len, sizeof len);
    memcpy(s->set, set, sizeof set);
    s->arena_used = (uint16_t)used;
}

static void
sess_values(const Jail *j, const session *s, val *v)
{
    for (int id = 0; id < j->nnames; id++) {
        v[id].set = s->set[id];
        if (s->set[id]) {
            v[id].p = s->arena + s->off[id];
            v[id].n = s->len[id];
        }
    }
}

static void
sess_add_user(Jail *j, session *s, const val *u)
{
    if (!truthy(u)) return;
    uint64_t h = siphash13(j->sk0 ^ 0x75736572ull, j->sk1, u->p, u->n);
    for (int i = 0; i < s->nusers; i++)
        if (s->users[i] == h) return;
    if (s->nusers < MAX_USERS) s->users[s->nusers++] = h;
}

/* ---- multi-line sources -------------------------------------------------------------------- */
static source *
src_get(Jail *j, uint64_t id)
{
    for (int i = 0; i < j->nsrcs; i++)
        if (j->srcs[i].used && j->srcs[i].id == id) {
            j->srcs[i].touched = ++j->src_clock;
            return &j->srcs[i];
        }
    source *s = NULL;
    if (j->nsrcs < MAX_SOURCES) {
        source *ns = realloc(j->srcs, (size_t)(j->nsrcs + 1) * sizeof *ns);
        if (!ns) return NULL;
        j->srcs = ns;
        s = &j->srcs[j->nsrcs++];
        memset(s, 0, sizeof *s);
    } else { /* the least recently used source gives its place */
        s = &j->srcs[0];
        for (int i = 1; i < j->nsrcs; i++)
            if (j->srcs[i].touched < s->touched) s = &j->srcs[i];
        for (int k = 0; k < s->nlines; k++) s->lines[k].n = 0;
        s->nlines = 0;
        s->bytes = 0;
        s->next_seq = 0;
        j->src_evicted++;
    }
    if (!s->lines && j->maxlines > 1) {
        s->lines = calloc((size_t)j->maxlines, sizeof *s->lines);
        if (!s->lines) return NULL;
    }
    s->used = 1;
    s->id = id;
    s->touched = ++j->src_clock;
    return s;
}

static int
bline_set(bline *b, const uint8_t *p, size_t n)
{
    if (n > b->cap) {
        size_t c = n < 256 ? 256 : n;
        uint8_t *np = realloc(b->p, c);
        if (!np) return -1;
        b->p = np;
        b->cap = (uint32_t)c;
    }
    if (n) memmove(b->p, p, n); /* an empty line may have no buffer yet */
    b->n = (uint32_t)n;
    return 0;
}

static void
src_drop_front(source *s, int k)
{
    if (k <= 0) return;
    if (k > s->nlines) k = s->nlines;
    for (int i = 0; i < k; i++) s->bytes -= s->lines[i].n;
    /* rotate the first k buffers to the end (their memory is reused) */
    bline tmp[MAX_MAXLINES];
    memcpy(tmp, s->lines, (size_t)k * sizeof *tmp);
    memmove(s->lines, s->lines + k, (size_t)(s->nlines - k) * sizeof *s->lines);
    memcpy(s->lines + (s->nlines - k), tmp, (size_t)k * sizeof *tmp);
    s->nlines -= k;
}

static int
src_push(Jail *j, source *s, const uint8_t *p, size_t n)
{
    /* each line gets its share of the source's bytes: maxlines long lines still fit together */
    size_t share = SRC_MAX_BYTES / (size_t)j->maxlines;
    if (share < 1024) share = 1024;
    if (n > share) n = share;
    if (s->nlines == j->maxlines) src_drop_front(s, 1);
    while (s->nlines && s->bytes + n > SRC_MAX_BYTES) src_drop_front(s, 1);
    if (bline_set(&s->lines[s->nlines], p, n) < 0) return -1;
    s->nlines++;
    s->bytes += n;
    return 0;
}

/* keep only the lines whose flag is set (in order) */
static void
src_keep(source *s, const uint8_t *keep)
{
    int o = 0;
    for (int i = 0; i < s->nlines; i++) {
        if (keep[i]) {
            if (o != i) {
                bline t = s->lines[o];
                s->lines[o] = s->lines[i];
                s->lines[i] = t;
            }
            o++;
        } else {
            s->bytes -= s->lines[i].n;
        }
    }
    s->nlines = o;
}

static int
join_lines(const bline *ls, int nl, const uint8_t *keep, buf_t *out, size_t *out_n)
{
    size_t n = 0;
    for (int i = 0; i < nl; i++)
        if (!keep || keep[i]) n += ls[i].n + 1;
    if (buf_need(out, n + 1) < 0) return -1;
    size_t o = 0;
    for (int i = 0; i < nl; i++) {
        if (keep && !keep[i]) continue;
        if (ls[i].n) memcpy(out->p + o, ls[i].p, ls[i].n);
        o += ls[i].n;
        out->p[o++] = '\n';
    }
    *out_n = o;
    return 0;
}

/* Fail2Ban's Regex.search line accounting: which buffered lines the match at
 * [ms, me) of subj (the joined buffer) spans, minus the <SKIPLINES> lines. */
static void
matched_lines(const rx *r, const size_t *ov, int rc, const uint8_t *subj, size_t sn, const source *s,
              uint8_t *matched)
{
    int nl = s->nlines;
    memset(matched, 0, (size_t)nl);
    if (nl <= 1) {
        if (nl == 1) matched[0] = 1;
        return;
    }
    size_t ms = ov[0], me = ov[1];
    size_t ls = 0; /* start of the line holding ms: after the last '\n' in [0, ms] */
    for (size_t i = ms + 1 > sn ? sn : ms + 1; i > 0; i--)
        if (subj[i - 1] == '\n') {
            ls = i;
            break;
        }
    size_t le = sn; /* after the first '\n' at or after me - 1 */
    for (size_t i = me ? me - 1 : 0; i < sn; i++)
        if (subj[i] == '\n') {
            le = i + 1;
            break;
        }
    int lc1 = 0, lc2 = 0;
    for (size_t i = 0; i < le; i++)
        if (subj[i] == '\n') {
            if (i < ls) lc1++;
            lc2++;
        }
    if (lc2 > nl) lc2 = nl;
    for (int i = lc1; i < lc2; i++) matched[i] = 1;
    /* skipped lines (the <SKIPLINES> groups, split into lines) leave the match */
    int from = lc1;
    for (int k = 0; k < r->nskip; k++) {
        int g = r->skipg[k];
        if (g >= rc || ov[2 * g] == PCRE2_UNSET) continue;
        const uint8_t *p = subj + ov[2 * g], *end = subj + ov[2 * g + 1];
        while (p < end) {
            const uint8_t *q = memchr(p, '\n', (size_t)(end - p));
            size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
            for (int i = from; i < lc2; i++)
                if (matched[i] && s->lines[i].n == n && memcmp(s->lines[i].p, p, n) == 0) {
                    matched[i] = 0;
                    from = i;
                    break;
                }
            p += n + (q ? 1 : 0);
        }
    }
}

/* ---- matching one line ------------------------------------------------------------------- */
enum { M_NOMATCH, M_IGNORED, M_NOTIP, M_HIT, M_DNS, M_NOFAIL, M_PENDING, M_NKINDS };
static const char *const result_names[M_NKINDS] = {"nomatch", "ignored", "not_ip", "hit", "dns", "nofail",
                                                   "pending"};

typedef struct {
    int res;
    int regex;              /* failregex that matched, -1 */
    int ign;                /* ignoreregex that matched, -1 */
    int pref;               /* prefregex matched */
    int host_id;            /* name id the host came from, -1 */
    uint8_t key[16];
    val v[MAX_NAMES];
    int dated;
    datehit date;
    const uint8_t *dline;   /* the line the date detector saw (check only) */
    size_t dline_n;
} fres;

#define HOST_PREFIX "localhost "

/* "<PRI>" header of a record: 0 none, else its length; *kind: 1 libfips_syslog.so ("IDENT[PID]: "),
 * 2 RFC 5424 ("1 TIMESTAMP ...": matched whole), 3 a forwarded RFC 3164 line with its date */
static const char *const months = "JanFebMarAprMayJunJulAugSepOctNovDec";

static size_t
pri_header(const uint8_t *d, size_t n, int *kind)
{
    *kind = 0;
    if (n < 3 || d[0] != '<') return 0;
    /* "<" 1-4 digits ">" */
    size_t i = 1;
    unsigned c = (unsigned)d[1] - '0';
    if (c > 9) return 0;
    for (i = 2; i < n && i < 5 && (unsigned)d[i] - '0' <= 9; i++)
        ;
    if (i >= n || d[i] != '>') return 0;
    i++;
    const uint8_t *r = d + i;
    size_t rn = n - i;
    if (rn >= 2 && r[0] >= '1' && r[0] <= '9' && r[1] == ' ') *kind = 2;
    else if (rn >= 5 && r[3] == ' ' && (r[4] == ' ' || (r[4] >= '0' && r[4] <= '9'))) {
        *kind = 1;
        for (int m = 0; m < 12; m++)
            if (memcmp(r, months + 3 * m, 3) == 0) *kind = 3;
    } else if (rn >= 5 && r[0] >= '0' && r[0] <= '9' && r[4] == '-') *kind = 3;
    else *kind = 1;
    return i;
}

/* Fail2Ban's _mergeFailure (fail is v; returns M_NOFAIL, M_PENDING or -1 = go on with v) */
static int
merge_session(Jail *j, const val *mlfid, val *v, uint64_t ts, int *pending_out, session **sess_out)
{
    uint64_t h0 = siphash13(j->sk0, j->sk1, mlfid->p, mlfid->n);
    uint64_t h1 = siphash13(j->sk1, j->sk0 ^ 0x5bd1e995ull, mlfid->p, mlfid->n);
    session *s = sess_find(j, h0, h1, ts);
    int ri = j->role[R_NOFAIL], rg = j->role[R_GAINED], rf = j->role[R_FORGET], ru = j->role[R_USER];
    int gained = rg >= 0 && truthy(&v[rg]);
    int nofail = gained || (ri >= 0 && truthy(&v[ri]));
    int forget = rf >= 0 && truthy(&v[rf]);
    if (rf >= 0) v[rf].set = 0; /* popped: never stored */
    int users = 0, pending = 0;
    *sess_out = NULL;
    if (s) {
        s->touched = ++j->sess_clock;
        if (ru >= 0) sess_add_user(j, s, &v[ru]);
        users = s->nusers;
        if (gained) s->pending = 0; /* a successful login resets pending failures */
        sess_update(j, s, v);
        sess_values(j, s, v);
        pending = s->pending;
        s->pending = 0;
        if (forget) {
            /* the values stay in v for this line; copy them out of the session first */
            static __thread uint8_t keep[SESS_ARENA];
            memcpy(keep, s->arena, s->arena_used);
            for (int id = 0; id < j->nnames; id++)
                if (v[id].set) v[id].p = keep + (v[id].p - s->arena);
            sess_remove(j, s);
            s = NULL;
        }
    } else if (!forget) {
        s = sess_new(j, h0, h1, ts);
        s->touched = ++j->sess_clock;
        if (ru >= 0) sess_add_user(j, s, &v[ru]);
        users = s->nusers;
        sess_update(j, s, v);
        sess_values(j, s, v);
    }
    *sess_out = s;
    *pending_out = pending;
    if (pending || users > 1) nofail = 0;
    return nofail ? M_NOFAIL : -1;
}

static int
ign_search(const Jail *j, int utf, const uint8_t *subj, size_t sn, pcre2_match_data *md)
{
    uint32_t mo = utf ? PCRE2_NO_UTF_CHECK : 0;
    for (int g = 0; g < j->nign; g++)
        if (rx_may_match(&j->ign[g], subj, sn) && pmatch(j->ign[g].code[utf], subj, sn, mo, md) >= 0) return g;
    return -1;
}

/* One line through the whole filter.  rec: the record's bytes; src: multi-line / session source id;
 * ts: the record's time (session expiry).  Fills *o; returns -1 only when out of memory. */
static int
process_line(Jail *j, work *w, const uint8_t *rec, size_t n, uint64_t src_id, uint64_t ts, int keep_dline,
             int nodate, fres *o)
{
    o->res = M_NOMATCH;
    o->regex = o->ign = o->host_id = -1;
    o->pref = 0;
    o->dated = 0;
    o->dline = NULL;
    if (n > LINE_MAX_BYTES) n = LINE_MAX_BYTES;
    int kind;
    size_t hl = pri_header(rec, n, &kind);
    int detect = j->ndates > 0 && kind != 1 && !nodate;
    const uint8_t *body = rec + hl;
    size_t bn = n - hl;
    if (kind == 2) { /* RFC 5424: the header belongs to the line (lt_rfc5424 expects it) */
        body = rec;
        bn = n;
    }
    size_t pre = kind == 1 ? sizeof HOST_PREFIX - 1 : 0;
    if (buf_need(&w->line, pre + bn + 2) < 0) return -1;
    uint8_t *L = w->line.p;
    if (pre) memcpy(L, HOST_PREFIX, sizeof HOST_PREFIX - 1); /* a constant size: inlined */
    memcpy(L + pre, body, bn);
    size_t ln = pre + bn;
    int lk = line_kind(L, ln), utf = lk & 1;
    if (lk & 2) {
        size_t rn;
        int bad = utf8_repair(L, ln, &w->utf, &rn);
        if (bad < 0) return -1;
        if (bad) { /* the repaired copy becomes the line */
            if (buf_need(&w->line, rn + 2) < 0) return -1;
            L = w->line.p;
            memcpy(L, w->utf.p, rn);
            ln = rn;
        }
    }
    if (keep_dline) {
        if (buf_need(&w->dline, ln + 1) < 0) return -1;
        memcpy(w->dline.p, L, ln);
        o->dline = w->dline.p;
        o->dline_n = ln;
    }
    if (detect && detect_date(j, utf, L, ln, w->md, &o->date)) {
        o->dated = 1;
        if (o->date.e > o->date.s) {
            memmove(L + o->date.s, L + o->date.e, ln - o->date.e);
            ln -= o->date.e - o->date.s;
        }
    }
    L[ln] = '\n';
    const uint8_t *subj = L;
    size_t sn = ln + 1;
    source *src = NULL;
    if (j->maxlines > 1) {
        src = src_get(j, src_id);
        if (!src || src_push(j, src, L, ln) < 0) return -1;
        if (join_lines(src->lines, src->nlines, NULL, &w->join, &sn) < 0) return -1;
        subj = w->join.p;
    }
    uint32_t mo = utf ? PCRE2_NO_UTF_CHECK : 0;
    pcre2_match_data *md = w->md;
    /* Fail2Ban checks ignoreregex first when there are far fewer of them than failregexes */
    if (j->nign && j->nign < j->nfail - 2) {
        int g = ign_search(j, utf, subj, sn, md);
        if (g >= 0) {
            o->res = M_IGNORED;
            o->ign = g;
            return 0;
        }
    }
    val pre_v[MAX_NAMES];
    int npre = 0;
    if (j->has_pref) {
        if (!rx_may_match(&j->pref, subj, sn)) return 0;
        int rc = pmatch(j->pref.code[utf], subj, sn, mo, md);
        if (rc < 0) return 0;
        o->pref = 1;
        memset(pre_v, 0, sizeof(val) * (size_t)j->nnames);
        rx_groups(&j->pref, P.ovector(md), rc, subj, pre_v);
        npre = 1;
        int rc_ = j->role[R_CONTENT];
        if (rc_ >= 0 && truthy(&pre_v[rc_])) {
            if (buf_need(&w->content, pre_v[rc_].n + 1) < 0) return -1;
            memcpy(w->content.p, pre_v[rc_].p, pre_v[rc_].n);
            w->content.p[pre_v[rc_].n] = '\n';
            sn = pre_v[rc_].n + 1;
            subj = w->content.p;
            if (src) { /* Fail2Ban: the line buffer becomes [content] */
                for (int k = 0; k < src->nlines; k++) src->bytes -= src->lines[k].n;
                src->nlines = 0;
                if (src_push(j, src, w->content.p, sn - 1) < 0) return -1;
            }
        }
        if (rc_ >= 0) pre_v[rc_].set = 0;
    }
    for (int f = 0; f < j->nfail; f++) {
        const rx *r = &j->fail[f];
        int rc = rx_may_match(r, subj, sn) ? pmatch(r->code[utf], subj, sn, mo, md) : -1;
        if (rc < 0) continue;
        size_t *ov = P.ovector(md);
        val *v = o->v;
        if (npre) memcpy(v, pre_v, sizeof(val) * (size_t)j->nnames);
        else memset(v, 0, sizeof(val) * (size_t)j->nnames);
        rx_groups(r, ov, rc, subj, v);
        o->regex = f;
        uint8_t matched[MAX_MAXLINES];
        if (src) matched_lines(r, ov, rc, subj, sn, src, matched);
        if (j->nign) {
            const uint8_t *is = subj;
            size_t isn = sn;
            if (src) {
                if (join_lines(src->lines, src->nlines, matched, &w->ignbuf, &isn) < 0) return -1;
                is = w->ignbuf.p;
            }
            /* ignoreregex may overwrite the match data: the values point into subj, not ov */
            int g = ign_search(j, utf, is, isn, md);
            if (g >= 0) {
                if (src) {
                    uint8_t keep[MAX_MAXLINES];
                    for (int i = 0; i < src->nlines; i++) keep[i] = !matched[i];
                    src_keep(src, keep);
                }
                o->res = M_IGNORED;
                o->ign = g;
                return 0;
            }
        }
        if (src) { /* matched lines leave the buffer */
            uint8_t keep[MAX_MAXLINES];
            for (int i = 0; i < src->nlines; i++) keep[i] = !matched[i];
            /* the values may point into the joined buffer (w->join): it stays intact */
            src_keep(src, keep);
        }
        session *sess = NULL;
        int rm = j->role[R_MLFID];
        if (rm >= 0 && v[rm].set) {
            int pending;
            int mres = merge_session(j, &v[rm], v, ts, &pending, &sess);
            if (mres == M_NOFAIL) {
                o->res = M_NOFAIL;
                return 0;
            }
        } else if (j->role[R_NOFAIL] >= 0 && truthy(&v[j->role[R_NOFAIL]])) {
            /* <F-NOFAIL> without a session: not a failure.  (Fail2Ban 1.0 itself counts these when
             * running and skips them in fail2ban-regex and its tests; the tag says "no failure".) */
            o->res = M_NOFAIL;
            return 0;
        }
        /* the host: ip4, ip6, dns, else the failure id */
        int r4 = j->role[R_IP4], r6 = j->role[R_IP6], rd = j->role[R_DNS], rfid = j->role[R_FID];
        int hid = -1, v6 = 0;
        if (r4 >= 0 && v[r4].set) hid = r4;
        else if (r6 >= 0 && v[r6].set) { hid = r6; v6 = 1; }
        else if (rd >= 0 && v[rd].set) {
            o->host_id = rd;
            o->res = M_DNS; /* never resolved: resolution is an attacker-controlled lookup */
            return 0;
        } else if (rfid >= 0 && v[rfid].set) hid = rfid;
        if (hid < 0) {
            if (rm >= 0 && v[rm].set) {
                if (sess) sess->pending = 1; /* the session's address comes later */
                o->res = M_PENDING;
            } else {
                o->res = M_NOMATCH;
            }
            return 0;
        }
        o->host_id = hid;
        if (parse_addr((const char *)v[hid].p, v[hid].n, v6, o->key) < 0) {
            o->res = M_NOTIP;
            return 0;
        }
        if (!is_v4(o->key) && j->v6_prefix < 128) mask_bits(o->key, j->v6_prefix);
        o->res = M_HIT;
        return 0;
    }
    return 0;
}

/* ---- Jail type ------------------------------------------------------------------------- */
static void
Jail_dealloc(Jail *self)
{
    rx_free(&self->pref);
    for (int i = 0; i < self->nfail; i++) rx_free(&self->fail[i]);
    for (int i = 0; i < self->nign; i++) rx_free(&self->ign[i]);
    for (int i = 0; i < self->ndates; i++)
        for (int k = 0; k < 2; k++)
            if (self->dates[i].code[k]) P.code_free(self->dates[i].code[k]);
    for (int k = 0; k < 2; k++)
        if (self->dany[k]) P.code_free(self->dany[k]);
    for (int i = 0; i < self->nsrcs; i++) {
        for (int k = 0; self->srcs[i].lines && k < self->maxlines; k++) free(self->srcs[i].lines[k].p);
        free(self->srcs[i].lines);
    }
    free(self->srcs);
    free(self->sess);
    PyMem_Free(self->dates);
    PyMem_Free(self->fail);
    PyMem_Free(self->ign);
    PyMem_Free(self->nets);
    PyMem_Free(self->fail_hits);
    PyMem_Free(self->ign_hits);
    free(self->tab);
    pthread_mutex_destroy(&self->mu);
    pthread_mutex_destroy(&self->smu);
    pthread_cond_destroy(&self->scv);
    Py_XDECREF(self->name);
    Py_XDECREF(self->names);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
compile_list(Jail *j, PyObject *seq, rx **out, int *n)
{
    PyObject *fast = PySequence_Fast(seq, "regexes must be a sequence of (ascii, utf, names, alts)");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len ? (size_t)len : 1, sizeof(rx));
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (rx_compile(&(*out)[i], PySequence_Fast_GET_ITEM(fast, i), j->nnames, j->skip_ids) < 0) {
            rx_free(&(*out)[i]);
            Py_DECREF(fast);
            return -1;
        }
        (*n)++;
        if ((*out)[i].ncap > j->maxgroups) j->maxgroups = (*out)[i].ncap;
    }
    Py_DECREF(fast);
    return 0;
}

static int
compile_dates(Jail *j, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "dates must be a sequence of (ascii, utf, anchored)");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    j->dates = PyMem_Calloc(len ? (size_t)len : 1, sizeof(dtempl));
    if (!j->dates) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *a, *u;
        int anchored;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "UUp", &a, &u, &anchored)) goto fail;
        Py_ssize_t la, lu;
        const char *sa = PyUnicode_AsUTF8AndSize(a, &la), *su = PyUnicode_AsUTF8AndSize(u, &lu);
        if (!sa || !su) goto fail;
        dtempl *t = &j->dates[j->ndates];
        if (compile_one(&t->code[0], sa, la, 0) < 0) goto fail;
        if (compile_one(&t->code[1], su, lu, PCRE2_UTF | PCRE2_UCP) < 0) {
            P.code_free(t->code[0]);
            t->code[0] = NULL;
            goto fail;
        }
        uint32_t c = 0;
        P.pattern_info(t->code[0], PCRE2_INFO_CAPTURECOUNT, &c);
        if (c > j->maxgroups) j->maxgroups = c;
        t->anchored = anchored;
        t->distance = 0x7fffffff;
        j->ndates++;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    return -1;
}

static PyObject *
Jail_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"name", "failregex", "ignoreregex", "prefregex", "maxretry", "findtime_s", "bantime_s",
                         "max_tracked", "mode", "ignoreip", "skip_truncated", "v6_prefix", "names", "dates",
                         "maxlines", "max_sessions", "session_s", "date_any", "data", NULL};
    PyObject *name, *failre, *ignre = NULL, *prefre = Py_None, *nets = NULL, *names = NULL, *dates = NULL;
    PyObject *date_any = Py_None, *data = Py_None;
    unsigned int maxretry = 5;
    double findtime = 600, bantime = 600, session_s = 300;
    unsigned long long max_tracked = 100000, max_sessions = 4096;
    const char *mode = "window";
    int skip_trunc = 0, v6p = 128, maxlines = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO|OOIddKsOpiO!OiKdOO", kw, &name, &failre, &ignre, &prefre,
                                     &maxretry, &findtime, &bantime, &max_tracked, &mode, &nets, &skip_trunc,
                                     &v6p, &PyTuple_Type, &names, &dates, &maxlines, &max_sessions, &session_s,
                                     &date_any, &data))
        return NULL;
    if (pcre_load() < 0) {
        PyErr_SetString(PyExc_ImportError, P.err);
        return NULL;
    }
    if (maxretry < 1 || max_tracked < 1 || max_tracked > (1ull << 28) || findtime < 0 || bantime < 0 ||
        v6p < 1 || v6p > 128 || maxlines < 1 || maxlines > MAX_MAXLINES || max_sessions < 1 ||
        max_sessions > (1ull << 24) || session_s < 0) {
        PyErr_SetString(PyExc_ValueError, "maxretry and max_tracked must be >= 1 (max_tracked <= 2^28), times >= 0, "
                                          "v6_prefix 1..128, maxlines 1..1000, max_sessions 1..2^24");
        return NULL;
    }
    int m;
    if (strcmp(mode, "window") == 0) m = 0;
    else if (strcmp(mode, "bucket") == 0) m = 1;
    else {
        PyErr_Format(PyExc_ValueError, "mode must be window or bucket, not %.40s", mode);
        return NULL;
    }
    Py_ssize_t nn = names ? PyTuple_GET_SIZE(names) : 0;
    if (nn > MAX_NAMES) {
        PyErr_Format(PyExc_ValueError, "a filter may have at most %d named groups, this one has %zd", MAX_NAMES, nn);
        return NULL;
    }
    Jail *self = (Jail *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    Py_INCREF(type);
    pthread_mutex_init(&self->mu, NULL);
    pthread_mutex_init(&self->smu, NULL);
    pthread_cond_init(&self->scv, NULL);
    self->name = Py_NewRef(name);
    self->names = names ? Py_NewRef(names) : PyTuple_New(0);
    self->nnames = (int)nn;
    self->mode = m;
    self->skip_truncated = skip_trunc;
    self->v6_prefix = v6p;
    self->maxretry = maxretry;
    self->findtime_ns = (uint64_t)(findtime * 1e9);
    self->bantime_ns = (uint64_t)(bantime * 1e9);
    self->max_tracked = max_tracked;
    self->maxlines = maxlines;
    self->max_sessions = max_sessions;
    self->session_ns = (uint64_t)(session_s * 1e9);
    self->last_tmpl = -1;
    self->last_dist = 1; /* Fail2Ban's initial "last position" */
    self->last_end = 0x7fffffff;
    for (int r = 0; r < R_NROLES; r++) self->role[r] = -1;
    int nskip = 0;
    for (int i = 0; i < MAX_SKIPL + 1; i++) self->skip_ids[i] = -1;
    for (Py_ssize_t i = 0; i < nn; i++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
        if (!s) goto fail;
        int role = -1;
        for (int r = 0; r < R_NROLES; r++)
            if (strcmp(s, role_names[r]) == 0) role = r;
        if (role >= 0) self->role[role] = (int)i;
        if (strncmp(s, "skiplines", 9) == 0) {
            int k = atoi(s + 9);
            if (k >= 0 && k < MAX_SKIPL) self->skip_ids[k] = (int)i;
            nskip++;
        } else if (data == Py_None && (role < 0 || role == R_USER || role == R_FID) && self->ndata < MAX_DATA) {
            self->data_ids[self->ndata++] = (int)i; /* carried in ban events: user, port, ... */
        }
    }
    if (data != Py_None) { /* the caller says which groups are data (the <F-...> captures) */
        PyObject *fast = PySequence_Fast(data, "data must be a sequence of name ids");
        if (!fast) goto fail;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && self->ndata < MAX_DATA; i++) {
            long id = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
            if ((id == -1 && PyErr_Occurred()) || id < 0 || id >= nn) {
                Py_DECREF(fast);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "data name id out of range");
                goto fail;
            }
            self->data_ids[self->ndata++] = (int)id;
        }
        Py_DECREF(fast);
    }
    if (prefre != Py_None) {
        if (rx_compile(&self->pref, prefre, self->nnames, self->skip_ids) < 0) goto fail;
        self->has_pref = 1;
        self->maxgroups = self->pref.ncap;
    }
    if (compile_list(self, failre, &self->fail, &self->nfail) < 0) goto fail;
    if (ignre && ignre != Py_None && compile_list(self, ignre, &self->ign, &self->nign) < 0) goto fail;
    if (self->nfail == 0) {
        PyErr_SetString(PyExc_ValueError, "a jail needs a failregex");
        goto fail;
    }
    if (dates && dates != Py_None && compile_dates(self, dates) < 0) goto fail;
    if (date_any != Py_None && self->ndates) {
        const char *a, *u;
        Py_ssize_t la, lu;
        if (!PyArg_ParseTuple(date_any, "s#s#", &a, &la, &u, &lu)) goto fail;
        if (compile_one(&self->dany[0], a, la, 0) < 0 || compile_one(&self->dany[1], u, lu, PCRE2_UTF | PCRE2_UCP) < 0)
            goto fail;
        uint32_t c = 0;
        P.pattern_info(self->dany[0], PCRE2_INFO_CAPTURECOUNT, &c);
        if (c > self->maxgroups) self->maxgroups = c;
    }
    self->fail_hits = PyMem_Calloc((size_t)self->nfail, sizeof(uint64_t));
    self->ign_hits = PyMem_Calloc((size_t)(self->nign ? self->nign : 1), sizeof(uint64_t));
    if (!self->fail_hits || !self->ign_hits) {
        PyErr_NoMemory();
        goto fail;
    }
    if (nets && nets != Py_None) {
        PyObject *fast = PySequence_Fast(nets, "ignoreip must be a sequence of (bytes16, bits)");
        if (!fast) goto fail;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
        self->nets = PyMem_Calloc(len ? (size_t)len : 1, sizeof(cidr));
        for (Py_ssize_t i = 0; i < len; i++) {
            const char *b;
            Py_ssize_t bl;
            int bits;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "y#i", &b, &bl, &bits) || bl != 16 ||
                bits < 0 || bits > 128) {
                Py_DECREF(fast);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "ignoreip entry: (16 bytes, 0..128)");
                goto fail;
            }
            memcpy(self->nets[i].net, b, 16);
            self->nets[i].bits = bits;
            mask_bits(self->nets[i].net, bits);
            self->nnets++;
        }
        Py_DECREF(fast);
    }
    uint64_t cap = 64;
    while (cap < max_tracked + max_tracked / 2 + 1) cap <<= 1;
    self->tab = calloc(cap, sizeof(entry));
    if (!self->tab) {
        PyErr_NoMemory();
        goto fail;
    }
    self->cap = cap;
    self->mask = cap - 1;
    if (getrandom(&self->seed0, 8, 0) != 8 || getrandom(&self->seed1, 8, 0) != 8 ||
        getrandom(&self->sk0, 8, 0) != 8 || getrandom(&self->sk1, 8, 0) != 8) {
        self->seed0 = (uint64_t)(uintptr_t)self ^ 0x5851f42d4c957f2dull;
        self->seed1 = (uint64_t)time(NULL) * 0x2545f4914f6cdd1dull;
        self->sk0 = self->seed0 * 0x9e3779b97f4a7c15ull;
        self->sk1 = self->seed1 ^ 0xda942042e4dd58b5ull;
    }
    self->stateful = self->maxlines > 1 || self->role[R_MLFID] >= 0;
    if (self->role[R_MLFID] >= 0) {
        uint64_t sc = 64;
        while (sc < 2 * max_sessions) sc <<= 1;
        self->sess = calloc(sc, sizeof(session));
        if (!self->sess) {
            PyErr_NoMemory();
            goto fail;
        }
        self->sess_cap = sc;
        self->sess_mask = sc - 1;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

typedef struct {
    const uint8_t *data;
    size_t len;
    uint64_t ts;
    uint32_t flags;
    size_t ts_text; /* ips_feed: where a binary query record's formatted line is in bq_text */
} line;

#define REC_TRUNC 0x02u

/* the data values of a hit, copied out of the line (they go into the ban event) */
typedef struct {
    uint8_t n;
    uint8_t id[MAX_DATA];
    uint8_t len[MAX_DATA];
    uint8_t p[MAX_DATA][DATA_VAL_MAX];
} hitdata;

static void
copy_data(const Jail *j, const fres *o, hitdata *d)
{
    d->n = 0;
    for (int k = 0; k < j->ndata; k++) {
        const val *v = &o->v[j->data_ids[k]];
        if (!v->set) continue;
        size_t n = v->n > DATA_VAL_MAX ? DATA_VAL_MAX : v->n;
        d->id[d->n] = (uint8_t)j->data_ids[k];
        d->len[d->n] = (uint8_t)n;
        memcpy(d->p[d->n], v->p, n);
        d->n++;
    }
}

static int
work_init(Jail *j, work *w)
{
    memset(w, 0, sizeof *w);
    w->md = P.md_create(j->maxgroups + 1, NULL);
    return w->md ? 0 : -1;
}

/* A reader thread's work buffers, kept from batch to batch (each batch allocating and freeing its
 * own showed in the time of a jail that matches nothing).  Bounded by the longest record seen. */
static __thread work tw;
static __thread uint32_t tw_groups;

static work *
thread_work(Jail *j)
{
    if (!tw.md || tw_groups < j->maxgroups + 1) {
        if (tw.md) P.md_free(tw.md);
        tw_groups = j->maxgroups + 1 > 32 ? j->maxgroups + 1 : 32;
        tw.md = P.md_create(tw_groups, NULL);
        if (!tw.md) return NULL;
    }
    return &tw;
}

/* stateful jails: wait until the batch before this one (same source) is done */
static void
order_wait(Jail *j, uint64_t src_id, uint64_t first_seq)
{
    if (!first_seq) return;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    uint64_t t = (uint64_t)dl.tv_sec * 1000000000ull + (uint64_t)dl.tv_nsec + ORDER_WAIT_NS;
    dl.tv_sec = (time_t)(t / 1000000000ull);
    dl.tv_nsec = (long)(t % 1000000000ull);
    for (;;) {
        source *s = NULL;
        for (int i = 0; i < j->nsrcs; i++)
            if (j->srcs[i].used && j->srcs[i].id == src_id) s = &j->srcs[i];
        if (!s || !s->next_seq || s->next_seq >= first_seq) return;
        j->order_waits++;
        if (pthread_cond_timedwait(&j->scv, &j->smu, &dl) == ETIMEDOUT) return;
    }
}

/* match lines[0..n) (one source) against one jail; returns triggers (malloc'd) and their data */
static int
jail_run(Jail *j, const line *ls, Py_ssize_t n, uint64_t src_id, uint64_t first_seq, uint64_t next_seq,
         trigger **out, Py_ssize_t *nout, hitdata **data_out)
{
    work *wp = thread_work(j);
    if (!wp) return -1;
    uint8_t *keys = malloc((size_t)(n ? n : 1) * 16);
    uint64_t *kts = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    hitdata *hd = NULL;
    Py_ssize_t hd_cap = 0;
    uint64_t *fh = calloc((size_t)j->nfail + (size_t)j->nign + 1, sizeof(uint64_t));
    trigger *tr = NULL;
    Py_ssize_t ntr = 0, cap_tr = 0;
    if (!keys || !kts || !fh) {
        free(keys);
        free(kts);
        free(hd);
        free(fh);
        return -1;
    }
    uint64_t c_bytes = 0, c_match = 0, c_ign = 0, c_notip = 0, c_nomatch = 0, c_trunc = 0, c_tskip = 0, c_ignip = 0;
    uint64_t c_dns = 0, c_nofail = 0, c_pend = 0, c_dated = 0, c_pref = 0;
    Py_ssize_t nk = 0;
    int oom = 0;
    fres o;
    if (j->stateful) {
        pthread_mutex_lock(&j->smu);
        order_wait(j, src_id, first_seq);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *d = ls[i].data;
        size_t len = ls[i].len;
        c_bytes += len;
        if (ls[i].flags & REC_TRUNC) {
            c_trunc++;
            if (j->skip_truncated) {
                c_tskip++;
                continue;
            }
        }
        if (process_line(j, wp, d, len, src_id, ls[i].ts, 0, 0, &o) < 0) {
            oom = 1;
            break;
        }
        c_dated += o.dated;
        c_pref += o.pref;
        switch (o.res) {
        case M_NOMATCH: c_nomatch++; break;
        case M_IGNORED:
            c_ign++;
            fh[j->nfail + o.ign]++;
            break;
        case M_DNS: c_dns++; c_notip++; fh[o.regex]++; break;
        case M_NOTIP: c_notip++; fh[o.regex]++; break;
        case M_NOFAIL: c_nofail++; fh[o.regex]++; break;
        case M_PENDING: c_pend++; fh[o.regex]++; break;
        default:
            c_match++;
            fh[o.regex]++;
            if (oom) break;
            if (j->nnets && in_nets(j, o.key)) {
                c_ignip++;
                break;
            }
            memcpy(keys + 16 * nk, o.key, 16);
            if (j->ndata) {
                if (nk >= hd_cap) {
                    Py_ssize_t nc = hd_cap ? 2 * hd_cap : 64;
                    hitdata *nh = realloc(hd, (size_t)nc * sizeof *nh);
                    if (!nh) {
                        oom = 1;
                        break;
                    }
                    hd = nh;
                    hd_cap = nc;
                }
                copy_data(j, &o, &hd[nk]);
            }
            kts[nk++] = ls[i].ts;
        }
        if (oom) break;
    }
    if (j->stateful) {
        if (j->maxlines > 1 || j->role[R_MLFID] >= 0) {
            source *s = src_get(j, src_id);
            if (s && next_seq) s->next_seq = next_seq;
        }
        pthread_cond_broadcast(&j->scv);
        pthread_mutex_unlock(&j->smu);
    }
    pthread_mutex_lock(&j->mu);
    j->records += (uint64_t)n;
    j->bytes += c_bytes;
    j->matched += c_match;
    j->ignored += c_ign;
    j->not_ip += c_notip;
    j->nomatch += c_nomatch;
    j->truncated += c_trunc;
    j->truncated_skipped += c_tskip;
    j->ignored_ip += c_ignip;
    j->dns += c_dns;
    j->nofail += c_nofail;
    j->pending += c_pend;
    j->dated += c_dated;
    j->pref_hits += c_pref;
    for (int f = 0; f < j->nfail; f++) j->fail_hits[f] += fh[f];
    for (int g = 0; g < j->nign; g++) j->ign_hits[g] += fh[j->nfail + g];
    for (Py_ssize_t k = 0; k < nk; k++) {
        trigger t;
        if (tab_hit(j, keys + 16 * k, kts[k], &t)) {
            if (ntr == cap_tr) {
                cap_tr = cap_tr ? cap_tr * 2 : 16;
                trigger *nt = realloc(tr, (size_t)cap_tr * sizeof *tr);
                if (!nt) break; /* out of memory: the ban is lost, the table says banned */
                tr = nt;
            }
            t.data = hd ? (int32_t)k : -1;
            tr[ntr++] = t;
        }
    }
    pthread_mutex_unlock(&j->mu);
    free(keys);
    free(kts);
    free(fh);
    if (oom) {
        free(tr);
        free(hd);
        return -1;
    }
    *out = tr;
    *nout = ntr;
    *data_out = hd;
    return 0;
}

/* (name, value) pairs of a hit's data as a tuple, or None */
static PyObject *
data_tuple(Jail *j, const hitdata *d)
{
    if (!d || !d->n) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(d->n);
    if (!t) return NULL;
    for (int k = 0; k < d->n; k++) {
        PyObject *v = PyUnicode_DecodeUTF8((const char *)d->p[k], d->len[k], "replace");
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(j->names, d->id[k]), v);
        Py_DECREF(v);
        if (!pair) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, pair);
    }
    return t;
}

static PyObject *
triggers_to_list(Jail *j, trigger *tr, Py_ssize_t n, const hitdata *hd, PyObject *list)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ip = key_to_str(tr[i].key);
        if (!ip) return NULL;
        PyObject *data = data_tuple(j, tr[i].data >= 0 && hd ? &hd[tr[i].data] : NULL);
        if (!data) {
            Py_DECREF(ip);
            return NULL;
        }
        PyObject *t = Py_BuildValue("(OOKKIN)", j->name, ip, (unsigned long long)tr[i].first_ns,
                                    (unsigned long long)tr[i].trigger_ns, tr[i].hits, data);
        Py_DECREF(ip);
        if (!t || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            return NULL;
        }
        Py_DECREF(t);
    }
    return list;
}

static int
check_jails(PyObject *jails, PyTypeObject *jt, PyObject **fast)
{
    *fast = PySequence_Fast(jails, "jails must be a sequence of Jail");
    if (!*fast) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(*fast); i++)
        if (!PyObject_TypeCheck(PySequence_Fast_GET_ITEM(*fast, i), jt)) {
            Py_DECREF(*fast);
            PyErr_SetString(PyExc_TypeError, "jails must be a sequence of Jail");
            return -1;
        }
    return 0;
}

static PyObject *
run_lines(PyObject *jails_fast, line *ls, Py_ssize_t n, uint64_t src_id, uint64_t first_seq, uint64_t next_seq)
{
    Py_ssize_t nj = PySequence_Fast_GET_SIZE(jails_fast);
    PyObject *result = PyList_New(0);
    if (!result) return NULL;
    for (Py_ssize_t k = 0; k < nj; k++) {
        Jail *j = (Jail *)PySequence_Fast_GET_ITEM(jails_fast, k);
        trigger *tr = NULL;
        hitdata *hd = NULL;
        Py_ssize_t ntr = 0;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = jail_run(j, ls, n, src_id, first_seq, next_seq, &tr, &ntr, &hd);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_DECREF(result);
            return PyErr_NoMemory();
        }
        PyObject *ok = triggers_to_list(j, tr, ntr, hd, result);
        free(tr);
        free(hd);
        if (!ok) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}

static PyTypeObject *JailType; /* set at module init (one interpreter) */

/* The lines of a batch's binary query records (fips_bindq.h), formatted by
 * ips_feed before matching: per reader thread (run_lines drops the GIL while
 * the jails read them), kept from batch to batch, as tw above. */
static __thread char *bq_text;
static __thread size_t bq_text_cap;

static uint64_t
attr_u64(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    uint64_t x = 0;
    if (v) {
        x = PyLong_AsUnsignedLongLong(v);
        Py_DECREF(v);
    }
    PyErr_Clear();
    return x;
}

/* feed(records, jails) -> [(jail_name, ip, first_ns, trigger_ns, hits, data), ...]
 * records: an iterable of objects with the buffer protocol and ts_ns/flags
 * attributes (a fipstop._fips.Batch, whose ring/first_seq/next_seq say the
 * source and order to stateful jails). */
static PyObject *
ips_feed(PyObject *mod, PyObject *args)
{
    PyObject *records, *jails, *fast;
    if (!PyArg_ParseTuple(args, "OO", &records, &jails)) return NULL;
    if (check_jails(jails, JailType, &fast) < 0) return NULL;
    Py_ssize_t cap = 256, n = 0;
    size_t text_used = 0;
    line *ls = PyMem_Malloc((size_t)cap * sizeof *ls);
    Py_buffer *bufs = PyMem_Malloc((size_t)cap * sizeof *bufs);
    static PyObject *s_ts, *s_flags, *s_ring, *s_first, *s_next;
    if (!s_ts) {
        s_ts = PyUnicode_InternFromString("ts_ns");
        s_flags = PyUnicode_InternFromString("flags");
        s_ring = PyUnicode_InternFromString("ring");
        s_first = PyUnicode_InternFromString("first_seq");
        s_next = PyUnicode_InternFromString("next_seq");
    }
    uint64_t src_id = attr_u64(records, s_ring), first_seq = attr_u64(records, s_first);
    uint64_t next_seq = attr_u64(records, s_next);
    PyObject *it = PyObject_GetIter(records), *rec, *result = NULL;
    if (!it || !ls || !bufs) goto done;
    while ((rec = PyIter_Next(it)) != NULL) {
        if (n == cap) {
            cap *= 2;
            line *nl = PyMem_Realloc(ls, (size_t)cap * sizeof *ls);
            if (nl) ls = nl;
            Py_buffer *nb = PyMem_Realloc(bufs, (size_t)cap * sizeof *bufs);
            if (nb) bufs = nb;
            if (!nl || !nb) {
                Py_DECREF(rec);
                PyErr_NoMemory();
                goto done;
            }
        }
        if (PyObject_GetBuffer(rec, &bufs[n], PyBUF_SIMPLE) < 0) {
            Py_DECREF(rec);
            goto done;
        }
        uint64_t ts = 0;
        uint32_t flags = 0;
        PyObject *o = PyObject_GetAttr(rec, s_ts);
        if (o) {
            ts = PyLong_AsUnsignedLongLong(o);
            Py_DECREF(o);
        }
        PyErr_Clear(); /* plain bytes: no ts_ns, no flags */
        o = PyObject_GetAttr(rec, s_flags);
        if (o) {
            flags = (uint32_t)PyLong_AsUnsignedLong(o);
            Py_DECREF(o);
        }
        PyErr_Clear();
        ls[n].data = bufs[n].buf;
        ls[n].len = (size_t)bufs[n].len;
        ls[n].ts = ts;
        ls[n].flags = flags;
        if (flags & FIPSBQ_REC_FLAG) { /* a patched named's binary query record: match its line */
            if (bq_text_cap - text_used < FIPSBQ_TEXT_MAX) {
                size_t nc = bq_text_cap ? 2 * bq_text_cap : 64 * FIPSBQ_TEXT_MAX;
                char *nt = realloc(bq_text, nc);
                if (!nt) {
                    n++;
                    Py_DECREF(rec);
                    PyErr_NoMemory();
                    goto done;
                }
                bq_text = nt;
                bq_text_cap = nc;
            }
            long k = fips_bindq_format(ls[n].data, ls[n].len, bq_text + text_used, FIPSBQ_TEXT_MAX);
            if (k >= 0) { /* else left as it is: raw bytes, matching nothing a filter expects */
                ls[n].len = (size_t)k;
                ls[n].data = NULL; /* pointed into bq_text below, once it stops moving */
                ls[n].ts_text = text_used;
                text_used += (size_t)k;
            }
        }
        n++;
        Py_DECREF(rec);
    }
    /* bq_text may have moved while it grew: point the formatted lines at it now */
    for (Py_ssize_t i = 0; text_used && i < n; i++)
        if (!ls[i].data) ls[i].data = (const uint8_t *)bq_text + ls[i].ts_text;
    if (PyErr_Occurred()) goto done;
    result = run_lines(fast, ls, n, src_id, first_seq, next_seq);
done:
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(ls);
    PyMem_Free(bufs);
    Py_XDECREF(it);
    Py_DECREF(fast);
    return result;
}

/* feed_lines(lines: list[bytes], ts_ns: int, jails, flags=0, source=0): for tests and
 * benchmarks; every line gets the same time stamp. */
static PyObject *
ips_feed_lines(PyObject *mod, PyObject *args)
{
    PyObject *lines, *jails, *fast, *lf;
    unsigned long long ts, src = 0;
    unsigned int flags = 0;
    if (!PyArg_ParseTuple(args, "OKO|IK", &lines, &ts, &jails, &flags, &src)) return NULL;
    if (check_jails(jails, JailType, &fast) < 0) return NULL;
    lf = PySequence_Fast(lines, "lines must be a sequence of bytes");
    if (!lf) {
        Py_DECREF(fast);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(lf);
    line *ls = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ls);
    PyObject *result = NULL;
    if (!ls) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(lf, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "lines must be bytes");
            goto done;
        }
        ls[i].data = (const uint8_t *)PyBytes_AS_STRING(b);
        ls[i].len = (size_t)PyBytes_GET_SIZE(b);
        ls[i].ts = ts;
        ls[i].flags = flags;
    }
    result = run_lines(fast, ls, n, src, 0, 0); /* lf keeps the bytes alive */
done:
    PyMem_Free(ls);
    Py_DECREF(lf);
    Py_DECREF(fast);
    return result;
}

/* JSON string body of a Python str as json.dumps(ensure_ascii=True) writes it */
static int
json_str(PyObject *s, char *out, size_t cap, size_t *pos)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    size_t o = *pos;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(s, i);
        char tmp[16];
        int k;
        if (c == '"') k = snprintf(tmp, sizeof tmp, "\\\"");
        else if (c == '\\') k = snprintf(tmp, sizeof tmp, "\\\\");
        else if (c == '\n') k = snprintf(tmp, sizeof tmp, "\\n");
        else if (c == '\r') k = snprintf(tmp, sizeof tmp, "\\r");
        else if (c == '\t') k = snprintf(tmp, sizeof tmp, "\\t");
        else if (c == '\b') k = snprintf(tmp, sizeof tmp, "\\b");
        else if (c == '\f') k = snprintf(tmp, sizeof tmp, "\\f");
        else if (c < 0x20 || (c >= 0x7f && c < 0x10000)) k = snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)c);
        else if (c >= 0x10000) {
            Py_UCS4 v = c - 0x10000;
            k = snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (unsigned)(v >> 10), 0xdc00 + (unsigned)(v & 0x3ff));
        } else {
            tmp[0] = (char)c;
            tmp[1] = 0;
            k = 1;
        }
        if (o + (size_t)k + 1 >= cap) return -1;
        memcpy(out + o, tmp, (size_t)k);
        o += (size_t)k;
    }
    *pos = o;
    return 0;
}

/* ',"data":{"user":"root",...}' for a trigger's data (None or empty: nothing): each value cut to
 * DATA_CHARS characters; an item ("name":"value") is kept while the items so far, each counted with
 * one separator, stay within DATA_ITEMS_MAX bytes (a ban event stays under MAX_EVENT_BYTES).
 * fipstop.bans.encode applies the same rule. */
#define DATA_ITEMS_MAX 384
#define DATA_CHARS 64

static int
data_json(PyObject *data, char *out, size_t cap, size_t *pos)
{
    if (data == Py_None || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) == 0) return 0;
    char items[DATA_ITEMS_MAX + 8];
    size_t used = 0, budget = 0;
    int nitems = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(data); i++) {
        PyObject *pair = PyTuple_GET_ITEM(data, i), *k, *v;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) continue;
        k = PyTuple_GET_ITEM(pair, 0);
        v = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) continue;
        PyObject *vc = PyUnicode_GET_LENGTH(v) > DATA_CHARS ? PyUnicode_Substring(v, 0, DATA_CHARS) : Py_NewRef(v);
        if (!vc) return -1;
        char one[1024];
        size_t q = 0;
        int bad = 0;
        one[q++] = '"';
        bad |= json_str(k, one, sizeof one - 8, &q);
        if (!bad) {
            memcpy(one + q, "\":\"", 3);
            q += 3;
            bad |= json_str(vc, one, sizeof one - 8, &q);
            one[q++] = '"';
        }
        Py_DECREF(vc);
        if (bad || budget + q + 1 > DATA_ITEMS_MAX) continue;
        if (nitems) items[used++] = ',';
        memcpy(items + used, one, q);
        used += q;
        budget += q + 1;
        nitems++;
    }
    if (!nitems) return 0;
    const char *head = ",\"data\":{";
    size_t hl = strlen(head), il = used;
    if (*pos + hl + il + 2 >= cap) return -1;
    memcpy(out + *pos, head, hl);
    memcpy(out + *pos + hl, items, il);
    out[*pos + hl + il] = '}';
    *pos += hl + il + 1;
    return 0;
}

/* format_events(triggers, kind_prefix, jail_json, ban_ns, tail) -> [bytes]:
 * one ban-event record per trigger, the bytes fipstop.bans.encode() makes
 * (fipstop/ips/run.py builds the constant parts with json.dumps; the test
 * compares both).  A burst of 2^16 bans must not spend its time in Python. */
static PyObject *
ips_format_events(PyObject *mod, PyObject *args)
{
    PyObject *trig, *jails;
    const char *prefix, *tail;
    Py_ssize_t prefix_len, tail_len;
    unsigned long long ban_ns;
    if (!PyArg_ParseTuple(args, "Oy#O!Ky#", &trig, &prefix, &prefix_len, &PyDict_Type, &jails, &ban_ns, &tail,
                          &tail_len))
        return NULL;
    PyObject *fast = PySequence_Fast(trig, "triggers must be a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyList_New(n);
    char buf[8192]; /* every string field is cut to 200 characters, \uXXXX-escaped at worst: < 5 KiB */
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(fast, i), *jail, *ip, *data = Py_None;
        unsigned long long first, tr;
        unsigned int hits;
        if (!PyArg_ParseTuple(t, "UUKKI|O", &jail, &ip, &first, &tr, &hits, &data)) goto fail;
        PyObject *jj = PyDict_GetItemWithError(jails, jail);
        Py_ssize_t il;
        const char *ips = PyUnicode_AsUTF8AndSize(ip, &il);
        if (!jj || !PyBytes_Check(jj) || !ips) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "jail without its JSON name");
            goto fail;
        }
        int len = snprintf(buf, sizeof buf, "%.*s%.*s\",\"jail\":%.*s,\"first_ns\":%llu,\"trigger_ns\":%llu,"
                           "\"ban_ns\":%llu,\"hits\":%u", (int)prefix_len, prefix, (int)il, ips,
                           (int)PyBytes_GET_SIZE(jj), PyBytes_AS_STRING(jj), first, tr, ban_ns, hits);
        if (len < 0 || len >= (int)sizeof buf) {
            PyErr_SetString(PyExc_ValueError, "ban event too long");
            goto fail;
        }
        size_t pos = (size_t)len;
        if (data_json(data, buf, sizeof buf, &pos) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "ban event data too long");
            goto fail;
        }
        if (pos + (size_t)tail_len >= sizeof buf) {
            PyErr_SetString(PyExc_ValueError, "ban event too long");
            goto fail;
        }
        memcpy(buf + pos, tail, (size_t)tail_len);
        pos += (size_t)tail_len;
        PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)pos);
        if (!b) goto fail;
        PyList_SET_ITEM(out, i, b);
    }
    Py_DECREF(fast);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(fast);
    return NULL;
}

static PyObject *
u64_list(const uint64_t *a, int n)
{
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(a[i]));
    return l;
}

static PyObject *
Jail_stats(Jail *self, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&self->mu);
    PyObject *d = Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsNsNsKsKsKsKsK}", "records", (unsigned long long)self->records,
        "bytes", (unsigned long long)self->bytes, "matched", (unsigned long long)self->matched, "ignored",
        (unsigned long long)self->ignored, "not_ip", (unsigned long long)self->not_ip, "nomatch",
        (unsigned long long)self->nomatch, "truncated", (unsigned long long)self->truncated, "truncated_skipped",
        (unsigned long long)self->truncated_skipped, "ignored_ip", (unsigned long long)self->ignored_ip,
        "tracked", (unsigned long long)self->live, "evictions", (unsigned long long)self->evictions, "expired",
        (unsigned long long)self->expired, "bans", (unsigned long long)self->bans, "hits_while_banned",
        (unsigned long long)self->hits_while_banned, "dns", (unsigned long long)self->dns, "nofail",
        (unsigned long long)self->nofail, "pending", (unsigned long long)self->pending, "dated",
        (unsigned long long)self->dated, "prefregex_hits", (unsigned long long)self->pref_hits,
        "failregex_hits", u64_list(self->fail_hits, self->nfail), "ignoreregex_hits",
        u64_list(self->ign_hits, self->nign), "sessions", (unsigned long long)self->sess_live,
        "sessions_evicted", (unsigned long long)self->sess_evicted, "sources", (unsigned long long)self->nsrcs,
        "sources_evicted", (unsigned long long)self->src_evicted, "order_waits",
        (unsigned long long)self->order_waits);
    pthread_mutex_unlock(&self->mu);
    return d;
}

/* expire(now_ns, max_slots): sweep part of the table (an idle jail still
 * frees its memory) */
static PyObject *
Jail_expire(Jail *self, PyObject *args)
{
    unsigned long long now;
    unsigned int n = 4096;
    if (!PyArg_ParseTuple(args, "K|I", &now, &n)) return NULL;
    pthread_mutex_lock(&self->mu);
    tab_sweep(self, now, (int)n);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* unban(ip): forget the ban in the table (the next hits count again) */
static PyObject *
Jail_unban(Jail *self, PyObject *arg)
{
    Py_ssize_t sl;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &sl);
    if (!s) return NULL;
    uint8_t key[16];
    if (parse_addr(s, (size_t)sl, 0, key) < 0) {
        PyErr_Format(PyExc_ValueError, "not an IP address: %.60s", s);
        return NULL;
    }
    int found = 0;
    pthread_mutex_lock(&self->mu);
    uint64_t i = hash_key(self, key) & self->mask;
    while (self->tab[i].used) {
        if (memcmp(self->tab[i].key, key, 16) == 0) {
            tab_remove_at(self, i);
            found = 1;
            break;
        }
        i = (i + 1) & self->mask;
    }
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(found);
}

static int
one_line(Jail *self, Py_buffer *b, uint64_t src, uint64_t ts, int keep_dline, int nodate, work *w, fres *o)
{
    if (work_init(self, w) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    int rc;
    if (self->stateful) pthread_mutex_lock(&self->smu);
    rc = process_line(self, w, b->buf, (size_t)b->len, src, ts, keep_dline, nodate, o);
    if (self->stateful) pthread_mutex_unlock(&self->smu);
    if (rc < 0) {
        work_free(w);
        PyErr_NoMemory();
    }
    return rc;
}

/* match(line) -> (result, ip or None): "hit", "nomatch", "ignored" or "not_ip" (any host that is not
 * an IP address, a DNS name included); counts nothing (the session and multi-line state do advance). */
static PyObject *
Jail_match(Jail *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    work w;
    fres o;
    int rc = one_line(self, &b, 0, 0, 0, 0, &w, &o);
    PyBuffer_Release(&b);
    if (rc < 0) return NULL;
    work_free(&w);
    int r = o.res;
    if (r == M_DNS) r = M_NOTIP;
    if (r == M_NOFAIL || r == M_PENDING) r = M_NOMATCH;
    if (r == M_HIT) return Py_BuildValue("(sN)", result_names[r], key_to_str(o.key));
    return Py_BuildValue("(sO)", result_names[r], Py_None);
}

/* check(line, source=0, ts_ns=0, nodate=False) -> dict: everything about one line (for --check and
 * tests; nodate: the line's time is known, as a journal entry's, and no date is searched):
 *   result   hit | nomatch | ignored | not_ip | dns | nofail | pending
 *   ip       the canonical address (hit), host: the host text as matched (hit, not_ip, dns)
 *   regex    the failregex that matched (index) or None; ignore: the ignoreregex; prefregex: bool
 *   groups   {name: value} of the set groups (after <F-MLFID> merging)
 *   date     None or (template, start of its match, start, end of the date) in bytes of `line`
 *            (the line as the date detector saw it: the record header rewritten, UTF-8 repaired)
 * Counts nothing; the session and multi-line state of the source advance, as for a record. */
static PyObject *
Jail_check(Jail *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"line", "source", "ts_ns", "nodate", NULL};
    Py_buffer b;
    unsigned long long src = 0, ts = 0;
    int nodate = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|KKp", kw, &b, &src, &ts, &nodate)) return NULL;
    work w;
    fres o;
    int rc = one_line(self, &b, src, ts, 1, nodate, &w, &o);
    PyBuffer_Release(&b);
    if (rc < 0) return NULL;
    PyObject *groups = PyDict_New(), *d = NULL;
    if (!groups) goto out;
    if (o.regex >= 0 && o.res != M_IGNORED)
        for (int id = 0; id < self->nnames; id++) {
            if (!o.v[id].set) continue;
            PyObject *v = PyUnicode_DecodeUTF8((const char *)o.v[id].p, o.v[id].n, "replace");
            if (!v || PyDict_SetItem(groups, PyTuple_GET_ITEM(self->names, id), v) < 0) {
                Py_XDECREF(v);
                goto out;
            }
            Py_DECREF(v);
        }
    d = PyDict_New();
    if (!d) goto out;
    PyObject *items[][2] = {
        {PyUnicode_FromString("result"), PyUnicode_FromString(result_names[o.res])},
        {PyUnicode_FromString("ip"), o.res == M_HIT ? key_to_str(o.key) : Py_NewRef(Py_None)},
        {PyUnicode_FromString("host"),
         o.host_id >= 0 && o.v[o.host_id].set
             ? PyUnicode_DecodeUTF8((const char *)o.v[o.host_id].p, o.v[o.host_id].n, "replace")
             : Py_NewRef(Py_None)},
        {PyUnicode_FromString("regex"),
         o.regex >= 0 && o.res != M_IGNORED ? PyLong_FromLong(o.regex) : Py_NewRef(Py_None)},
        {PyUnicode_FromString("ignore"), o.ign >= 0 ? PyLong_FromLong(o.ign) : Py_NewRef(Py_None)},
        {PyUnicode_FromString("groups"), Py_NewRef(groups)},
        {PyUnicode_FromString("date"),
         o.dated ? Py_BuildValue("(innn)", o.date.tmpl, (Py_ssize_t)o.date.g0, (Py_ssize_t)o.date.s,
                                 (Py_ssize_t)o.date.e)
                 : Py_NewRef(Py_None)},
        {PyUnicode_FromString("line"),
         o.dline ? PyBytes_FromStringAndSize((const char *)o.dline, (Py_ssize_t)o.dline_n) : Py_NewRef(Py_None)},
        {PyUnicode_FromString("prefregex"), PyBool_FromLong(o.pref)},
    };
    int bad = 0;
    for (size_t k = 0; k < sizeof items / sizeof items[0]; k++) {
        if (!items[k][0] || !items[k][1] || PyDict_SetItem(d, items[k][0], items[k][1]) < 0) bad = 1;
        Py_XDECREF(items[k][0]);
        Py_XDECREF(items[k][1]);
    }
    if (bad) Py_CLEAR(d);
out:
    Py_XDECREF(groups);
    work_free(&w);
    return d;
}

static PyObject *
Jail_get_name(Jail *self, void *c)
{
    return Py_NewRef(self->name);
}

static PyObject *
Jail_get_capacity(Jail *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->cap);
}

static PyObject *
Jail_get_stateful(Jail *self, void *c)
{
    return PyBool_FromLong(self->stateful);
}

static PyMethodDef Jail_methods[] = {
    {"stats", (PyCFunction)Jail_stats, METH_NOARGS, "Counters as a dict (copied under the lock)."},
    {"expire", (PyCFunction)Jail_expire, METH_VARARGS, "expire(now_ns, slots=4096): drop expired entries."},
    {"unban", (PyCFunction)Jail_unban, METH_O, "Forget an address's state; True if it was tracked."},
    {"match", (PyCFunction)Jail_match, METH_O, "(result, ip) for one line; counts nothing."},
    {"check", (PyCFunction)(void (*)(void))Jail_check, METH_VARARGS | METH_KEYWORDS,
     "check(line, source=0, ts_ns=0, nodate=False) -> dict: result, host, regex, groups, date of a line."},
    {NULL}};

static PyGetSetDef Jail_getset[] = {
    {"name", (getter)Jail_get_name, NULL, NULL, NULL},
    {"capacity", (getter)Jail_get_capacity, NULL, "address table slots", NULL},
    {"stateful", (getter)Jail_get_stateful, NULL, "maxlines > 1 or <F-MLFID> sessions", NULL},
    {NULL}};

static PyType_Slot Jail_slots[] = {
    {Py_tp_new, Jail_new},
    {Py_tp_dealloc, Jail_dealloc},
    {Py_tp_methods, Jail_methods},
    {Py_tp_getset, Jail_getset},
    {Py_tp_doc, "Jail(name, failregex, ignoreregex=(), prefregex=None, maxretry=5, findtime_s=600, "
                "bantime_s=600, max_tracked=100000, mode='window', ignoreip=(), skip_truncated=False, "
                "v6_prefix=128, names=(), dates=(), maxlines=1, max_sessions=4096, session_s=300): a "
                "regex is (ascii, utf, group name ids, alt pairs) as fipstop/ips/jails.py builds it; dates "
                "are (ascii, utf, anchored) templates."},
    {0, NULL}};

static PyType_Spec Jail_spec = {"fipstop._ipsfast.Jail", sizeof(Jail), 0, Py_TPFLAGS_DEFAULT, Jail_slots};

static PyObject *
ips_available(PyObject *mod, PyObject *Py_UNUSED(a))
{
    if (pcre_load() < 0) return Py_BuildValue("(Os)", Py_False, P.err);
    return Py_BuildValue("(Os)", Py_True, "");
}

/* search(ascii, utf, subject) -> None or [(start, end) or None per group], byte offsets: one
 * translated regex on one subject, for the translation's tests */
static PyObject *
ips_search(PyObject *mod, PyObject *args)
{
    const char *a, *u;
    Py_ssize_t la, lu;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "s#s#y*", &a, &la, &u, &lu, &b)) return NULL;
    if (pcre_load() < 0) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ImportError, P.err);
        return NULL;
    }
    int utf = line_kind(b.buf, (size_t)b.len) & 1;
    pcre2_code *c = NULL;
    PyObject *res = NULL;
    if (compile_one(&c, utf ? u : a, utf ? lu : la, utf ? PCRE2_UTF | PCRE2_UCP : 0) < 0) goto out;
    uint32_t ncap = 0;
    P.pattern_info(c, PCRE2_INFO_CAPTURECOUNT, &ncap);
    pcre2_match_data *md = P.md_create(ncap + 1, NULL);
    if (!md) {
        PyErr_NoMemory();
        goto out;
    }
    int rc = pmatch(c, b.buf, (size_t)b.len, 0, md);
    if (rc < 0) {
        res = Py_NewRef(Py_None);
    } else {
        size_t *ov = P.ovector(md);
        res = PyList_New(ncap + 1);
        for (uint32_t g = 0; res && g <= ncap; g++) {
            PyObject *item = (int)g < rc && ov[2 * g] != PCRE2_UNSET
                                 ? Py_BuildValue("(nn)", (Py_ssize_t)ov[2 * g], (Py_ssize_t)ov[2 * g + 1])
                                 : Py_NewRef(Py_None);
            PyList_SET_ITEM(res, g, item);
        }
    }
    P.md_free(md);
out:
    if (c) P.code_free(c);
    PyBuffer_Release(&b);
    return res;
}

static PyMethodDef ips_methods[] = {
    {"feed", ips_feed, METH_VARARGS, "feed(records, jails) -> [(jail, ip, first_ns, trigger_ns, hits, data)]"},
    {"feed_lines", ips_feed_lines, METH_VARARGS, "feed_lines(lines, ts_ns, jails, flags=0, source=0) -> triggers"},
    {"format_events", ips_format_events, METH_VARARGS,
     "format_events(triggers, kind_prefix, jail_json, ban_ns, tail) -> [bytes]"},
    {"available", ips_available, METH_NOARGS, "(ok, reason): can PCRE2 be loaded?"},
    {"search", ips_search, METH_VARARGS, "search(ascii, utf, subject) -> group spans or None"},
    {NULL}};

static struct PyModuleDef ips_module = {PyModuleDef_HEAD_INIT, "fipstop._ipsfast",
                                        "Hot path of fipstop ips (see ips_match.c).", -1, ips_methods};

PyMODINIT_FUNC
PyInit__ipsfast(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2");
#endif
    PyObject *m = PyModule_Create(&ips_module);
    if (!m) return NULL;
    JailType = (PyTypeObject *)PyType_FromSpec(&Jail_spec);
    if (!JailType || PyModule_AddObjectRef(m, "Jail", (PyObject *)JailType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "REC_TRUNC", REC_TRUNC);
    return m;
}
