/*
 * fipstop._ipsfast — the hot path of `fipstop ips`: match records against a
 * jail's regexes, extract and parse the address, count per address, decide
 * bans.  No Python runs per record.
 *
 * Why C and PCRE2: the IPS must keep up with >= 500 k lines/s on one core; a
 * per-line Python loop manages a fraction of that.  Fail2Ban's regexes are
 * Python `re` syntax, which PCRE2 understands (named groups (?P<x>..), \d \S
 * \w, lookarounds); its JIT matches a BIND line in ~100-200 ns.  PCRE2 is
 * loaded with dlopen("libpcre2-8.so.0") so that building needs no -dev
 * package (the runtime library is on every Debian system: grep uses it);
 * when it is missing, Jail() raises ImportError with the reason.
 *
 * Threads: feed() takes what it needs from the batch with the GIL held,
 * then matches with the GIL released; the per-jail address table is guarded
 * by a mutex taken once per batch.  Several reader threads feeding the same
 * jails therefore run their matching in parallel.
 *
 * Address table: open addressing (linear probing, backward-shift deletion),
 * keys are 16-byte addresses (IPv4 as ::ffff:a.b.c.d), hashed with a per-
 * process random seed (attackers choose the keys).  It holds at most
 * max_tracked entries: an incremental sweep removes expired ones, and when
 * it is full the least recently hit of a few sampled entries is evicted
 * (counted).  Memory is bounded whatever the input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- PCRE2, by dlopen ------------------------------------------------------ */
typedef struct pcre2_code pcre2_code;
typedef struct pcre2_match_data pcre2_match_data;
#define PCRE2_ZERO_TERMINATED (~(size_t)0)
#define PCRE2_DUPNAMES 0x00000040u
#define PCRE2_JIT_COMPLETE 0x00000001u
#define PCRE2_INFO_CAPTURECOUNT 4
#define PCRE2_INFO_NAMECOUNT 17
#define PCRE2_INFO_NAMEENTRYSIZE 18
#define PCRE2_INFO_NAMETABLE 19
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
    SYM(ovector, "pcre2_get_ovector_pointer_8");
    SYM(pattern_info, "pcre2_pattern_info_8");
    SYM(error_message, "pcre2_get_error_message_8");
#undef SYM
    P.loaded = 1;
    return 0;
}

/* ---- one compiled regex ------------------------------------------------------ */
enum { G_IP4, G_IP6, G_DNS, G_CONTENT, G_KINDS };
#define MAX_GROUPS_PER_KIND 4

typedef struct {
    pcre2_code *code;
    uint32_t ncap;
    int groups[G_KINDS][MAX_GROUPS_PER_KIND]; /* capture numbers, 0 = none */
} rx;

static const char *const kind_names[G_KINDS] = {"ip4", "ip6", "dns", "content"};

static int
rx_compile(rx *r, const char *pat, Py_ssize_t len)
{
    int ec;
    size_t eo;
    memset(r, 0, sizeof *r);
    r->code = P.compile((const uint8_t *)pat, (size_t)len, PCRE2_DUPNAMES, &ec, &eo, NULL);
    if (!r->code) {
        uint8_t msg[160];
        P.error_message(ec, msg, sizeof msg);
        PyErr_Format(PyExc_ValueError, "bad regex at offset %zu: %s: %.200s", eo, msg, pat);
        return -1;
    }
    (void)P.jit_compile(r->code, PCRE2_JIT_COMPLETE); /* interpreted if JIT is refused */
    P.pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &r->ncap);
    uint32_t count = 0, esize = 0;
    const uint8_t *table = NULL;
    P.pattern_info(r->code, PCRE2_INFO_NAMECOUNT, &count);
    P.pattern_info(r->code, PCRE2_INFO_NAMEENTRYSIZE, &esize);
    P.pattern_info(r->code, PCRE2_INFO_NAMETABLE, &table);
    for (uint32_t i = 0; i < count && table; i++) {
        const uint8_t *e = table + (size_t)i * esize;
        int num = (e[0] << 8) | e[1];
        const char *name = (const char *)e + 2;
        for (int k = 0; k < G_KINDS; k++) {
            if (strcmp(name, kind_names[k]) == 0) {
                for (int j = 0; j < MAX_GROUPS_PER_KIND; j++)
                    if (r->groups[k][j] == 0) { r->groups[k][j] = num; break; }
            }
        }
    }
    return 0;
}

/* first set group of a kind: returns 1 and the span */
static int
rx_group(const rx *r, const size_t *ov, int kind, size_t *s, size_t *e)
{
    for (int j = 0; j < MAX_GROUPS_PER_KIND && r->groups[kind][j]; j++) {
        int g = r->groups[kind][j];
        if (ov[2 * g] != PCRE2_UNSET) {
            *s = ov[2 * g];
            *e = ov[2 * g + 1];
            return 1;
        }
    }
    return 0;
}

/* ---- address table ------------------------------------------------------------ */
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
static int
parse_addr(const char *s, size_t n, int v6hint, uint8_t key[16])
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return -1;
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

/* ---- the syslog header libfips_syslog.so stores: "<PRI>IDENT[PID]: MSG" ------------
 * Fail2Ban's filters are written for what a syslog daemon puts in a file,
 * "DATE HOST IDENT[PID]: MSG", with the date taken off: their prefixes expect a
 * host name before the daemon (common.conf's __prefix_line eats the first
 * token as one).  So a record that starts with <PRI> is matched as
 * "localhost IDENT[PID]: MSG"; a record without it (a native libfips
 * producer) is matched as it is. */
#define HOST_PREFIX "localhost "
#define LINEBUF 65536

static const uint8_t *
as_syslog_line(const uint8_t *d, size_t n, uint8_t *buf, size_t *out_n)
{
    *out_n = n;
    if (n < 3 || d[0] != '<') return d;
    size_t i = 1;
    while (i < n && i < 5 && d[i] >= '0' && d[i] <= '9') i++;
    if (i == 1 || i >= n || d[i] != '>') return d;
    i++;
    size_t hl = sizeof HOST_PREFIX - 1, rest = n - i;
    if (hl + rest > LINEBUF) { /* too long to copy: without the host */
        *out_n = rest;
        return d + i;
    }
    memcpy(buf, HOST_PREFIX, hl);
    memcpy(buf + hl, d + i, rest);
    *out_n = hl + rest;
    return buf;
}

/* ---- matching one line ------------------------------------------------------------- */
enum { M_NOMATCH, M_IGNORED, M_NOTIP, M_HIT };

static int
match_line(const Jail *j, pcre2_match_data *md, const uint8_t *d, size_t n, uint8_t key[16])
{
    const uint8_t *c = d;
    size_t cn = n;
    size_t hs = 0, he = 0;
    int kind = -1;
    const uint8_t *hbase = NULL;
    if (j->has_pref) {
        if (P.match(j->pref.code, d, n, 0, 0, md, NULL) < 0) return M_NOMATCH;
        size_t *ov = P.ovector(md);
        size_t s, e;
        if (rx_group(&j->pref, ov, G_CONTENT, &s, &e)) {
            c = d + s;
            cn = e - s;
        }
        for (int k = G_IP4; k <= G_DNS; k++)
            if (rx_group(&j->pref, ov, k, &hs, &he)) {
                kind = k;
                hbase = d;
                break;
            }
    }
    int hit = j->nfail == 0 && j->has_pref;
    for (int f = 0; f < j->nfail; f++) {
        if (P.match(j->fail[f].code, c, cn, 0, 0, md, NULL) >= 0) {
            hit = 1;
            if (kind < 0) {
                size_t *ov = P.ovector(md);
                for (int k = G_IP4; k <= G_DNS; k++)
                    if (rx_group(&j->fail[f], ov, k, &hs, &he)) {
                        kind = k;
                        hbase = c;
                        break;
                    }
            }
            break;
        }
    }
    if (!hit) return M_NOMATCH;
    for (int g = 0; g < j->nign; g++)
        if (P.match(j->ign[g].code, c, cn, 0, 0, md, NULL) >= 0) return M_IGNORED;
    if (kind < 0 || kind == G_DNS) return M_NOTIP; /* no DNS lookups on the hot path */
    if (parse_addr((const char *)hbase + hs, he - hs, kind == G_IP6, key) < 0) return M_NOTIP;
    if (!is_v4(key) && j->v6_prefix < 128) mask_bits(key, j->v6_prefix);
    return M_HIT;
}

/* ---- Jail type ------------------------------------------------------------------------- */
static void
rx_free(rx *r)
{
    if (r->code) P.code_free(r->code);
    r->code = NULL;
}

static void
Jail_dealloc(Jail *self)
{
    rx_free(&self->pref);
    for (int i = 0; i < self->nfail; i++) rx_free(&self->fail[i]);
    for (int i = 0; i < self->nign; i++) rx_free(&self->ign[i]);
    PyMem_Free(self->fail);
    PyMem_Free(self->ign);
    PyMem_Free(self->nets);
    free(self->tab);
    pthread_mutex_destroy(&self->mu);
    Py_XDECREF(self->name);
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
compile_list(PyObject *seq, rx **out, int *n, uint32_t *maxg)
{
    PyObject *fast = PySequence_Fast(seq, "regexes must be a sequence of str");
    if (!fast) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len ? (size_t)len : 1, sizeof(rx));
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_ssize_t sl;
        const char *s = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(fast, i), &sl);
        if (!s || rx_compile(&(*out)[i], s, sl) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        (*n)++;
        if ((*out)[i].ncap > *maxg) *maxg = (*out)[i].ncap;
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *
Jail_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"name", "failregex", "ignoreregex", "prefregex", "maxretry", "findtime_s", "bantime_s",
                         "max_tracked", "mode", "ignoreip", "skip_truncated", "v6_prefix", NULL};
    PyObject *name, *failre, *ignre = NULL, *prefre = Py_None, *nets = NULL;
    unsigned int maxretry = 5;
    double findtime = 600, bantime = 600;
    unsigned long long max_tracked = 100000;
    const char *mode = "window";
    int skip_trunc = 0, v6p = 128;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO|OOIddKsOpi", kw, &name, &failre, &ignre, &prefre,
                                     &maxretry, &findtime, &bantime, &max_tracked, &mode, &nets, &skip_trunc,
                                     &v6p))
        return NULL;
    if (pcre_load() < 0) {
        PyErr_SetString(PyExc_ImportError, P.err);
        return NULL;
    }
    if (maxretry < 1 || max_tracked < 1 || max_tracked > (1ull << 28) || findtime < 0 || bantime < 0 ||
        v6p < 1 || v6p > 128) {
        PyErr_SetString(PyExc_ValueError, "maxretry and max_tracked must be >= 1 (max_tracked <= 2^28), times >= 0, "
                                          "v6_prefix 1..128");
        return NULL;
    }
    int m;
    if (strcmp(mode, "window") == 0) m = 0;
    else if (strcmp(mode, "bucket") == 0) m = 1;
    else {
        PyErr_Format(PyExc_ValueError, "mode must be window or bucket, not %.40s", mode);
        return NULL;
    }
    Jail *self = (Jail *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    Py_INCREF(type);
    pthread_mutex_init(&self->mu, NULL);
    self->name = Py_NewRef(name);
    self->mode = m;
    self->skip_truncated = skip_trunc;
    self->v6_prefix = v6p;
    self->maxretry = maxretry;
    self->findtime_ns = (uint64_t)(findtime * 1e9);
    self->bantime_ns = (uint64_t)(bantime * 1e9);
    self->max_tracked = max_tracked;
    if (prefre != Py_None) {
        Py_ssize_t sl;
        const char *s = PyUnicode_AsUTF8AndSize(prefre, &sl);
        if (!s || rx_compile(&self->pref, s, sl) < 0) goto fail;
        self->has_pref = 1;
        self->maxgroups = self->pref.ncap;
    }
    if (compile_list(failre, &self->fail, &self->nfail, &self->maxgroups) < 0) goto fail;
    if (ignre && ignre != Py_None && compile_list(ignre, &self->ign, &self->nign, &self->maxgroups) < 0) goto fail;
    if (self->nfail == 0 && !self->has_pref) {
        PyErr_SetString(PyExc_ValueError, "a jail needs a failregex");
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
    if (getrandom(&self->seed0, 8, 0) != 8 || getrandom(&self->seed1, 8, 0) != 8) {
        self->seed0 = (uint64_t)(uintptr_t)self ^ 0x5851f42d4c957f2dull;
        self->seed1 = (uint64_t)time(NULL) * 0x2545f4914f6cdd1dull;
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
} line;

#define REC_TRUNC 0x02u

/* match lines[0..n) against one jail; returns triggers (malloc'd) */
static int
jail_run(Jail *j, const line *ls, Py_ssize_t n, trigger **out, Py_ssize_t *nout)
{
    pcre2_match_data *md = P.md_create(j->maxgroups + 1, NULL);
    if (!md) return -1;
    uint8_t *keys = malloc((size_t)(n ? n : 1) * 16);
    uint64_t *kts = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    uint8_t *lb = malloc(LINEBUF);
    trigger *tr = NULL;
    Py_ssize_t ntr = 0, cap_tr = 0;
    if (!keys || !kts || !lb) {
        free(keys);
        free(kts);
        free(lb);
        P.md_free(md);
        return -1;
    }
    uint64_t c_bytes = 0, c_match = 0, c_ign = 0, c_notip = 0, c_nomatch = 0, c_trunc = 0, c_tskip = 0, c_ignip = 0;
    Py_ssize_t nk = 0;
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
        size_t ln;
        const uint8_t *l = as_syslog_line(d, len, lb, &ln);
        int r = match_line(j, md, l, ln, keys + 16 * nk);
        switch (r) {
        case M_NOMATCH: c_nomatch++; break;
        case M_IGNORED: c_ign++; break;
        case M_NOTIP: c_notip++; break;
        default:
            c_match++;
            if (j->nnets && in_nets(j, keys + 16 * nk)) {
                c_ignip++;
                break;
            }
            kts[nk++] = ls[i].ts;
        }
    }
    P.md_free(md);
    free(lb);
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
    for (Py_ssize_t k = 0; k < nk; k++) {
        trigger t;
        if (tab_hit(j, keys + 16 * k, kts[k], &t)) {
            if (ntr == cap_tr) {
                cap_tr = cap_tr ? cap_tr * 2 : 16;
                trigger *nt = realloc(tr, (size_t)cap_tr * sizeof *tr);
                if (!nt) break; /* out of memory: the ban is lost, the table says banned */
                tr = nt;
            }
            tr[ntr++] = t;
        }
    }
    pthread_mutex_unlock(&j->mu);
    free(keys);
    free(kts);
    *out = tr;
    *nout = ntr;
    return 0;
}

static PyObject *
triggers_to_list(Jail *j, trigger *tr, Py_ssize_t n, PyObject *list)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ip = key_to_str(tr[i].key);
        if (!ip) return NULL;
        PyObject *t = Py_BuildValue("(OOKKI)", j->name, ip, (unsigned long long)tr[i].first_ns,
                                    (unsigned long long)tr[i].trigger_ns, tr[i].hits);
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
run_lines(PyObject *jails_fast, line *ls, Py_ssize_t n)
{
    Py_ssize_t nj = PySequence_Fast_GET_SIZE(jails_fast);
    PyObject *result = PyList_New(0);
    if (!result) return NULL;
    for (Py_ssize_t k = 0; k < nj; k++) {
        Jail *j = (Jail *)PySequence_Fast_GET_ITEM(jails_fast, k);
        trigger *tr = NULL;
        Py_ssize_t ntr = 0;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = jail_run(j, ls, n, &tr, &ntr);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_DECREF(result);
            return PyErr_NoMemory();
        }
        PyObject *ok = triggers_to_list(j, tr, ntr, result);
        free(tr);
        if (!ok) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}

static PyTypeObject *JailType; /* set at module init (one interpreter) */

/* feed(records, jails) -> [(jail_name, ip, first_ns, trigger_ns, hits), ...]
 * records: an iterable of objects with the buffer protocol and ts_ns/flags
 * attributes (a fipstop._fips.Batch). */
static PyObject *
ips_feed(PyObject *mod, PyObject *args)
{
    PyObject *records, *jails, *fast;
    if (!PyArg_ParseTuple(args, "OO", &records, &jails)) return NULL;
    if (check_jails(jails, JailType, &fast) < 0) return NULL;
    Py_ssize_t cap = 256, n = 0;
    line *ls = PyMem_Malloc((size_t)cap * sizeof *ls);
    Py_buffer *bufs = PyMem_Malloc((size_t)cap * sizeof *bufs);
    PyObject *it = PyObject_GetIter(records), *rec, *result = NULL;
    static PyObject *s_ts, *s_flags;
    if (!s_ts) s_ts = PyUnicode_InternFromString("ts_ns");
    if (!s_flags) s_flags = PyUnicode_InternFromString("flags");
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
        n++;
        Py_DECREF(rec);
    }
    if (PyErr_Occurred()) goto done;
    result = run_lines(fast, ls, n);
done:
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(ls);
    PyMem_Free(bufs);
    Py_XDECREF(it);
    Py_DECREF(fast);
    return result;
}

/* feed_lines(lines: list[bytes], ts_ns: int, jails, flags=0): for tests and
 * benchmarks; every line gets the same time stamp. */
static PyObject *
ips_feed_lines(PyObject *mod, PyObject *args)
{
    PyObject *lines, *jails, *fast, *lf;
    unsigned long long ts;
    unsigned int flags = 0;
    if (!PyArg_ParseTuple(args, "OKO|I", &lines, &ts, &jails, &flags)) return NULL;
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
    result = run_lines(fast, ls, n); /* lf keeps the bytes alive */
done:
    PyMem_Free(ls);
    Py_DECREF(lf);
    Py_DECREF(fast);
    return result;
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
        PyObject *t = PySequence_Fast_GET_ITEM(fast, i), *jail, *ip;
        unsigned long long first, tr;
        unsigned int hits;
        if (!PyArg_ParseTuple(t, "UUKKI", &jail, &ip, &first, &tr, &hits)) goto fail;
        PyObject *jj = PyDict_GetItemWithError(jails, jail);
        Py_ssize_t il;
        const char *ips = PyUnicode_AsUTF8AndSize(ip, &il);
        if (!jj || !PyBytes_Check(jj) || !ips) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "jail without its JSON name");
            goto fail;
        }
        int len = snprintf(buf, sizeof buf, "%.*s%.*s\",\"jail\":%.*s,\"first_ns\":%llu,\"trigger_ns\":%llu,"
                           "\"ban_ns\":%llu,\"hits\":%u%.*s", (int)prefix_len, prefix, (int)il, ips,
                           (int)PyBytes_GET_SIZE(jj), PyBytes_AS_STRING(jj), first, tr, ban_ns, hits,
                           (int)tail_len, tail);
        if (len < 0 || len >= (int)sizeof buf) {
            PyErr_SetString(PyExc_ValueError, "ban event too long");
            goto fail;
        }
        PyObject *b = PyBytes_FromStringAndSize(buf, len);
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
Jail_stats(Jail *self, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&self->mu);
    PyObject *d = Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "records", (unsigned long long)self->records, "bytes",
        (unsigned long long)self->bytes, "matched", (unsigned long long)self->matched, "ignored",
        (unsigned long long)self->ignored, "not_ip", (unsigned long long)self->not_ip, "nomatch",
        (unsigned long long)self->nomatch, "truncated", (unsigned long long)self->truncated, "truncated_skipped",
        (unsigned long long)self->truncated_skipped, "ignored_ip", (unsigned long long)self->ignored_ip,
        "tracked", (unsigned long long)self->live, "evictions", (unsigned long long)self->evictions, "expired",
        (unsigned long long)self->expired, "bans", (unsigned long long)self->bans, "hits_while_banned",
        (unsigned long long)self->hits_while_banned);
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

/* match(line) -> (result, ip or None): for tests and `fipstop ips --test` */
static PyObject *
Jail_match(Jail *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    pcre2_match_data *md = P.md_create(self->maxgroups + 1, NULL);
    uint8_t key[16];
    uint8_t *lb = malloc(LINEBUF);
    if (!lb || !md) {
        free(lb);
        if (md) P.md_free(md);
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    size_t ln;
    const uint8_t *l = as_syslog_line(b.buf, (size_t)b.len, lb, &ln);
    int r = match_line(self, md, l, ln, key);
    free(lb);
    P.md_free(md);
    PyBuffer_Release(&b);
    static const char *names[] = {"nomatch", "ignored", "not_ip", "hit"};
    if (r == M_HIT) {
        PyObject *ip = key_to_str(key);
        return Py_BuildValue("(sN)", names[r], ip);
    }
    return Py_BuildValue("(sO)", names[r], Py_None);
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

static PyMethodDef Jail_methods[] = {
    {"stats", (PyCFunction)Jail_stats, METH_NOARGS, "Counters as a dict (copied under the lock)."},
    {"expire", (PyCFunction)Jail_expire, METH_VARARGS, "expire(now_ns, slots=4096): drop expired entries."},
    {"unban", (PyCFunction)Jail_unban, METH_O, "Forget an address's state; True if it was tracked."},
    {"match", (PyCFunction)Jail_match, METH_O, "(result, ip) for one line; counts nothing."},
    {NULL}};

static PyGetSetDef Jail_getset[] = {
    {"name", (getter)Jail_get_name, NULL, NULL, NULL},
    {"capacity", (getter)Jail_get_capacity, NULL, "address table slots", NULL},
    {NULL}};

static PyType_Slot Jail_slots[] = {
    {Py_tp_new, Jail_new},
    {Py_tp_dealloc, Jail_dealloc},
    {Py_tp_methods, Jail_methods},
    {Py_tp_getset, Jail_getset},
    {Py_tp_doc, "Jail(name, failregex, ignoreregex=(), prefregex=None, maxretry=5, findtime_s=600, "
                "bantime_s=600, max_tracked=100000, mode='window', ignoreip=(), skip_truncated=False, "
                "v6_prefix=128): compiled regexes (PCRE2 syntax, Fail2Ban tags already expanded) and the "
                "per-address table."},
    {0, NULL}};

static PyType_Spec Jail_spec = {"fipstop._ipsfast.Jail", sizeof(Jail), 0, Py_TPFLAGS_DEFAULT, Jail_slots};

static PyObject *
ips_available(PyObject *mod, PyObject *Py_UNUSED(a))
{
    if (pcre_load() < 0) return Py_BuildValue("(Os)", Py_False, P.err);
    return Py_BuildValue("(Os)", Py_True, "");
}

static PyMethodDef ips_methods[] = {
    {"feed", ips_feed, METH_VARARGS, "feed(records, jails) -> [(jail, ip, first_ns, trigger_ns, hits)]"},
    {"feed_lines", ips_feed_lines, METH_VARARGS, "feed_lines(lines, ts_ns, jails, flags=0) -> triggers"},
    {"format_events", ips_format_events, METH_VARARGS,
     "format_events(triggers, kind_prefix, jail_json, ban_ns, tail) -> [bytes]"},
    {"available", ips_available, METH_NOARGS, "(ok, reason): can PCRE2 be loaded?"},
    {NULL}};

static struct PyModuleDef ips_module = {PyModuleDef_HEAD_INIT, "fipstop._ipsfast",
                                        "Hot path of fipstop ips (see ips_match.c).", -1, ips_methods};

PyMODINIT_FUNC
PyInit__ipsfast(void)
{
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
