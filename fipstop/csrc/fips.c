/*
 * libfips — implementation.  See fips.h for the API and docs/ring-format.md
 * for the byte layout.
 *
 * Memory ordering
 * ===============
 * Shared fields are plain fixed-width integers in the mapped file; every
 * cross-thread access goes through the A_* macros below (C11 atomics on the
 * field's address).  The barriers, in the style of the perf ring buffer:
 *
 *   producer                              consumer / monitor
 *   --------                              ------------------
 *   P1 store reserved (relaxed)           C1 load head (ACQUIRE)  pairs with P3
 *      fence RELEASE        ----------->  T2 fence ACQUIRE, load reserved
 *                                            (tap lap check, pairs with P1)
 *   P2 write header + payload (plain)     C2 read records in [claim, head)
 *   P3 store head (RELEASE) ----------->  C1
 *   P4 load released (ACQUIRE) <--------  C3 CAS released (SEQ_CST ⊇ RELEASE)
 *      (only when the ring looks full)       after the records were read
 *   P5 store floor (SEQ_CST)              J1 store state=ACTIVE (SEQ_CST)
 *   P6 load consumer state (SEQ_CST)      J2 load floor (SEQ_CST)
 *      P5/P6 vs J1/J2 is a Dekker pair: a joining consumer is either seen by
 *      the producer or sees the producer's new floor (and moves up to it).
 *   P7 store ring state=CLOSED (RELEASE)  M1 load ring state (ACQUIRE)
 *      after the final counters              before reading counters
 *
 *   consumer release path (several reader threads of one consumer)
 *   R1 in-order:  CAS released start->end (SEQ_CST); load qcount (SEQ_CST)
 *   R2 out-of-order: under qlock, push; qcount++ (SEQ_CST); load released
 *      R1/R2 is a Dekker pair: either the in-order releaser sees the queued
 *      batch and drains it, or the queuer sees the advanced position and
 *      drains it itself.  In-order releases take no lock.
 *
 * The producer hot path (fips_log) performs one RELEASE store (P3), relaxed
 * stores of its own counters and of `reserved`, and no read-modify-write.
 * Counters have exactly one writer each: ring fields the producer thread,
 * position fields the consumer, consumer-entry lifecycle fields the CAS
 * winner of that entry.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fips.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libfips layout v1 is little-endian; big-endian hosts are not supported"
#endif

/* ---- layout pins -------------------------------------------------------- */
#define PIN(T, f, o) _Static_assert(offsetof(struct T, f) == (o), #T "." #f)
PIN(fips_layout_header, magic, 0);
PIN(fips_layout_header, version, 8);
PIN(fips_layout_header, hdr_size, 12);
PIN(fips_layout_header, file_size, 16);
PIN(fips_layout_header, max_rings, 24);
PIN(fips_layout_header, max_consumers, 28);
PIN(fips_layout_header, ring_capacity, 32);
PIN(fips_layout_header, max_record, 40);
PIN(fips_layout_header, ready, 44);
PIN(fips_layout_header, ring_table_off, 48);
PIN(fips_layout_header, consumer_table_off, 56);
PIN(fips_layout_header, pos_table_off, 64);
PIN(fips_layout_header, data_off, 72);
PIN(fips_layout_header, created_realtime_ns, 80);
PIN(fips_layout_header, created_mono_ns, 88);
PIN(fips_layout_header, grace_ns, 96);
PIN(fips_layout_header, creator_pid, 104);
PIN(fips_layout_header, flags, 108);
PIN(fips_layout_header, name, 112);
_Static_assert(sizeof(struct fips_layout_header) == FIPS_HDR_SIZE, "header size");
PIN(fips_layout_ring, head, 0);
PIN(fips_layout_ring, reserved, 8);
PIN(fips_layout_ring, records_committed, 16);
PIN(fips_layout_ring, bytes_committed, 24);
PIN(fips_layout_ring, records_dropped, 32);
PIN(fips_layout_ring, bytes_dropped, 40);
PIN(fips_layout_ring, last_commit_ns, 48);
PIN(fips_layout_ring, full_events, 56);
PIN(fips_layout_ring, floor, 64);
PIN(fips_layout_ring, high_water_bytes, 72);
PIN(fips_layout_ring, records_truncated, 80);
PIN(fips_layout_ring, evictions, 88);
PIN(fips_layout_ring, blocked_ns, 96);
PIN(fips_layout_ring, created_ns, 104);
PIN(fips_layout_ring, closed_ns, 112);
PIN(fips_layout_ring, floor_seq, 120);
PIN(fips_layout_ring, state, 128);
PIN(fips_layout_ring, generation, 132);
PIN(fips_layout_ring, pid, 136);
PIN(fips_layout_ring, tid, 140);
PIN(fips_layout_ring, thread_name, 144);
PIN(fips_layout_ring, pidns, 176);
_Static_assert(sizeof(struct fips_layout_ring) == FIPS_RING_CTL_SIZE, "ring size");
PIN(fips_layout_consumer, state, 0);
PIN(fips_layout_consumer, generation, 4);
PIN(fips_layout_consumer, pid, 8);
PIN(fips_layout_consumer, readers, 12);
PIN(fips_layout_consumer, heartbeat_mono_ns, 16);
PIN(fips_layout_consumer, registered_ns, 24);
PIN(fips_layout_consumer, evicted_ns, 32);
PIN(fips_layout_consumer, evicted_by_ring, 40);
PIN(fips_layout_consumer, resumes, 44);
PIN(fips_layout_consumer, records_released, 48);
PIN(fips_layout_consumer, batches_released, 56);
PIN(fips_layout_consumer, name, 64);
PIN(fips_layout_consumer, pidns, 128);
_Static_assert(sizeof(struct fips_layout_consumer) == FIPS_CONSUMER_SIZE, "consumer size");
PIN(fips_layout_pos, released, 0);
PIN(fips_layout_pos, released_seq, 8);
PIN(fips_layout_pos, records_released, 16);
PIN(fips_layout_pos, lost_seen, 24);
_Static_assert(sizeof(struct fips_layout_pos) == FIPS_POS_SIZE, "pos size");
PIN(fips_layout_record, len_flags, 0);
PIN(fips_layout_record, lost, 4);
PIN(fips_layout_record, seq, 8);
PIN(fips_layout_record, ts_ns, 16);
_Static_assert(sizeof(struct fips_layout_record) == FIPS_REC_HDR_SIZE, "record size");

/* ---- atomics on mapped fields ------------------------------------------- */
#define A64(p) ((_Atomic uint64_t *)(void *)(p))
#define A32(p) ((_Atomic uint32_t *)(void *)(p))
#define LD(p, mo)       atomic_load_explicit(A64(p), memory_order_##mo)
#define ST(p, v, mo)    atomic_store_explicit(A64(p), (v), memory_order_##mo)
#define LD32(p, mo)     atomic_load_explicit(A32(p), memory_order_##mo)
#define ST32(p, v, mo)  atomic_store_explicit(A32(p), (v), memory_order_##mo)

#define ALIGN8(x) (((uint64_t)(x) + 7u) & ~(uint64_t)7u)
/* Bytes a record occupies, from its len_flags word. */
static inline uint64_t rec_stride(uint32_t lf)
{
    return FIPS_REC_HDR_SIZE + ALIGN8(lf & FIPS_REC_LEN_MASK);
}
#define HB_EVERY_NS 100000000ull  /* consumer heartbeat period */
#define TLS_SLOTS 4               /* domains one thread may log into at once */

/* ---- errors --------------------------------------------------------------- */
const char *fips_strerror(int err)
{
    if (err < 0) err = -err;
    switch (err) {
    case 0: return "success";
    case FIPS_EFULL: return "ring full, record dropped";
    case FIPS_ETOOBIG: return "record longer than max_record";
    case FIPS_EMAGIC: return "not a fips domain (wrong magic)";
    case FIPS_EVERSION: return "unsupported layout version";
    case FIPS_ELAYOUT: return "impossible sizes or offsets in header";
    case FIPS_ETRUNC: return "file shorter than its header says";
    case FIPS_EOWNER: return "file belongs to another user";
    case FIPS_ENOTREADY: return "domain not initialised";
    case FIPS_ENORING: return "ring table full";
    case FIPS_ENOCONSUMER: return "consumer table full";
    case FIPS_EEVICTED: return "consumer was evicted";
    case FIPS_ECORRUPT: return "ring contents corrupt";
    case FIPS_EBUSY: return "consumer name held by a live process";
    case FIPS_ECLOSED: return "domain closed";
    case FIPS_EAGAIN: return "no record available";
    case FIPS_ELAPPED: return "producer lapped the reader";
    default: return strerror(err);
    }
}

/* ---- time ----------------------------------------------------------------- */
uint64_t fips_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Heartbeats only need milliseconds: the coarse clock costs a third. */
static uint64_t mono_coarse_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

uint64_t fips_mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- process-local handles ------------------------------------------------ */
struct fips_domain {
    int fd;
    int writable;
    uint8_t *base;
    size_t size;
    struct fips_layout_header *hdr;   /* the live mapping */
    struct fips_layout_header hcopy;  /* the validated private copy */
    _Atomic uint64_t open_consumers;  /* entries this handle has open (bit c) */
    struct fips_layout_ring *rings;
    struct fips_layout_consumer *cons;
    struct fips_layout_pos *pos;
    uint8_t *data;
    uint32_t max_rings, max_consumers, max_record;
    uint64_t cap, mask, grace_ns;
    int block_us;
    atomic_int refs;     /* user handle + one per open producer ring */
    atomic_int closing;
    char path[PATH_MAX];
};

struct fips_monitor {
    struct fips_domain d; /* writable == 0, mapped PROT_READ */
};

/* A producer thread's view of its ring: local copies of the counters it is
 * the only writer of, so the hot path never reads shared memory except when
 * the ring looks full. */
struct tls_ring {
    fips_domain *d;
    struct fips_layout_ring *ctl;
    uint32_t idx;
    uint64_t head;        /* == ctl->head */
    uint64_t limit;       /* floor known at last refresh (<= real floor) */
    uint64_t committed, bytes, dropped, bytes_dropped, full_events, truncated;
    uint32_t pending_lost;
    int32_t slow_c;       /* consumer that set `limit`, -1 if none */
    uint32_t full_tries;  /* drops since the last full refresh */
    uint64_t refresh_coarse_ns; /* coarse clock at the last full refresh */
    /* record timestamps from the TSC, anchored to CLOCK_REALTIME (see
     * rec_time()): tsc0/ns0 the anchor, mult ns per tick << 32 (0 while
     * uncalibrated), last the newest stamp (stamps never go backwards). */
    uint64_t tsc0, ns0, mult, last_ts;
};

struct tls_state {
    struct tls_ring r[TLS_SLOTS];
};

/* The only global state of the library: the per-thread ring pointers (and
 * the last consumer a thread read, to count reader threads), plus the key
 * whose destructor closes the rings at thread exit. */
static _Thread_local struct tls_state fips_tls;
static _Thread_local const void *fips_tls_reader; /* last consumer this thread read */
static pthread_key_t fips_tls_key;
static pthread_once_t fips_once = PTHREAD_ONCE_INIT;

static void domain_unref(fips_domain *d);

static void ring_close_now(struct tls_ring *t)
{
    struct fips_layout_ring *ctl = t->ctl;
    ST(&ctl->closed_ns, fips_now_ns(), relaxed);
    /* P7: pairs with M1 (monitor/consumer acquire of state). */
    ST32(&ctl->state, FIPS_RING_CLOSED, release);
    fips_domain *d = t->d;
    memset(t, 0, sizeof(*t));
    domain_unref(d);
}

static void tls_destructor(void *arg)
{
    (void)arg;
    for (int i = 0; i < TLS_SLOTS; i++)
        if (fips_tls.r[i].d) ring_close_now(&fips_tls.r[i]);
}

/* After fork() the child must not write into the parent's rings: forget them
 * (the parent still owns and closes them). */
static void atfork_child(void)
{
    memset(&fips_tls, 0, sizeof(fips_tls));
}

/* exit() runs no key destructors for the exiting thread: close its rings. */
static void atexit_close(void)
{
    tls_destructor(NULL);
}

static void once_init(void)
{
    pthread_key_create(&fips_tls_key, tls_destructor);
    atexit(atexit_close);
    pthread_atfork(NULL, NULL, atfork_child);
}

/* ---- layout and validation ------------------------------------------------ */
struct layout {
    uint64_t ring_table_off, consumer_table_off, pos_table_off, data_off, file_size;
};

static int compute_layout(uint32_t max_rings, uint32_t max_consumers, uint64_t cap,
                          struct layout *l)
{
    if (max_rings == 0 || max_rings > FIPS_MAX_RINGS_LIMIT) return -FIPS_ELAYOUT;
    if (max_consumers == 0 || max_consumers > FIPS_MAX_CONSUMERS_LIMIT) return -FIPS_ELAYOUT;
    if (cap < FIPS_MIN_CAPACITY || cap > FIPS_MAX_CAPACITY || (cap & (cap - 1))) return -FIPS_ELAYOUT;
    if ((uint64_t)max_rings * cap > (1ull << 40)) return -FIPS_ELAYOUT;
    l->ring_table_off = FIPS_HDR_SIZE;
    l->consumer_table_off = l->ring_table_off + (uint64_t)max_rings * FIPS_RING_CTL_SIZE;
    l->pos_table_off = l->consumer_table_off + (uint64_t)max_consumers * FIPS_CONSUMER_SIZE;
    uint64_t end = l->pos_table_off + (uint64_t)max_consumers * max_rings * FIPS_POS_SIZE;
    l->data_off = (end + 4095u) & ~4095ull;
    l->file_size = l->data_off + (uint64_t)max_rings * cap;
    return 0;
}

static int seterr(char *buf, size_t len, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int seterr(char *buf, size_t len, int code, const char *path, const char *fmt, ...)
{
    if (buf && len) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(buf, len, "%s: %s", path ? path : "(memory)", msg);
    }
    return code;
}

static int validate(const struct fips_layout_header *h, uint64_t actual_size,
                    const char *path, char *eb, size_t el)
{
    if (actual_size < FIPS_HDR_SIZE)
        return seterr(eb, el, -FIPS_ETRUNC, path, "truncated: %llu bytes, a header needs %u",
                      (unsigned long long)actual_size, FIPS_HDR_SIZE);
    if (h->magic != FIPS_MAGIC)
        return seterr(eb, el, -FIPS_EMAGIC, path, "not a fips domain (magic 0x%016llx)",
                      (unsigned long long)h->magic);
    if (h->version != FIPS_LAYOUT_VERSION)
        return seterr(eb, el, -FIPS_EVERSION, path, "layout version %u, this build reads %u",
                      h->version, FIPS_LAYOUT_VERSION);
    if (h->hdr_size != FIPS_HDR_SIZE)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "header size %u, expected %u",
                      h->hdr_size, FIPS_HDR_SIZE);
    struct layout l;
    if (compute_layout(h->max_rings, h->max_consumers, h->ring_capacity, &l))
        return seterr(eb, el, -FIPS_ELAYOUT, path,
                      "impossible sizes: max_rings %u, max_consumers %u, ring_capacity %llu",
                      h->max_rings, h->max_consumers, (unsigned long long)h->ring_capacity);
    if (h->max_record > h->ring_capacity / 4 || h->max_record > FIPS_REC_LEN_MASK)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "max_record %u too large for ring_capacity %llu",
                      h->max_record, (unsigned long long)h->ring_capacity);
    if (h->ring_table_off != l.ring_table_off || h->consumer_table_off != l.consumer_table_off ||
        h->pos_table_off != l.pos_table_off || h->data_off != l.data_off)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "table offsets do not match the sizes");
    if (h->file_size != l.file_size)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "file_size %llu, sizes imply %llu",
                      (unsigned long long)h->file_size, (unsigned long long)l.file_size);
    if (actual_size < h->file_size)
        return seterr(eb, el, -FIPS_ETRUNC, path, "truncated: %llu bytes of %llu",
                      (unsigned long long)actual_size, (unsigned long long)h->file_size);
    if (actual_size > h->file_size)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "file is %llu bytes, header says %llu",
                      (unsigned long long)actual_size, (unsigned long long)h->file_size);
    if (memchr(h->name, 0, sizeof h->name) == NULL)
        return seterr(eb, el, -FIPS_ELAYOUT, path, "domain name not terminated");
    if (LD32(&h->ready, acquire) != 1) /* pairs with the creator's release of ready */
        return seterr(eb, el, -FIPS_ENOTREADY, path, "domain not initialised (ready=%u)",
                      LD32(&h->ready, relaxed));
    return 0;
}

int fips_validate_header(const void *hdr, size_t file_size, char *eb, size_t el)
{
    struct fips_layout_header h;
    memset(&h, 0, sizeof h);
    memcpy(&h, hdr, file_size < sizeof h ? file_size : sizeof h);
    return validate(&h, file_size, NULL, eb, el);
}

static int valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= FIPS_NAME_MAX || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

const char *fips_shm_dir(const char *dir)
{
    if (dir && *dir) return dir;
    const char *e = getenv("FIPS_SHM_DIR");
    return (e && *e) ? e : "/dev/shm";
}

/* Bind from the validated private copy h, never from the mapping, which
 * another process could change after validation. */
static void domain_bind(fips_domain *d, const struct fips_layout_header *h)
{
    d->hcopy = *h;
    d->rings = (struct fips_layout_ring *)(d->base + h->ring_table_off);
    d->cons = (struct fips_layout_consumer *)(d->base + h->consumer_table_off);
    d->pos = (struct fips_layout_pos *)(d->base + h->pos_table_off);
    d->data = d->base + h->data_off;
    d->max_rings = h->max_rings;
    d->max_consumers = h->max_consumers;
    d->max_record = h->max_record;
    d->cap = h->ring_capacity;
    d->mask = h->ring_capacity - 1;
    d->grace_ns = h->grace_ns;
}

/* Map an existing file after validating it; fd is consumed on failure. */
static int map_file(fips_domain *d, int fd, int writable, int any_owner, char *eb, size_t el)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return seterr(eb, el, -errno, d->path, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return seterr(eb, el, -FIPS_ELAYOUT, d->path, "not a regular file");
    if (!any_owner && st.st_uid != geteuid())
        return seterr(eb, el, -FIPS_EOWNER, d->path, "owned by uid %u, not by uid %u",
                      (unsigned)st.st_uid, (unsigned)geteuid());
    struct fips_layout_header h;
    memset(&h, 0, sizeof h);
    ssize_t n = pread(fd, &h, sizeof h, 0);
    if (n < 0) return seterr(eb, el, -errno, d->path, "%s", strerror(errno));
    int rc = validate(&h, (uint64_t)st.st_size, d->path, eb, el);
    if (rc) return rc;
    void *p = mmap(NULL, (size_t)h.file_size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return seterr(eb, el, -errno, d->path, "mmap: %s", strerror(errno));
    d->base = p;
    d->size = (size_t)h.file_size;
    d->hdr = p;
    /* The file may have changed between pread and mmap: validate the mapping. */
    rc = validate(d->hdr, (uint64_t)h.file_size, d->path, eb, el);
    if (rc == 0 && memcmp(&h, d->hdr, 176) != 0)
        rc = seterr(eb, el, -FIPS_ELAYOUT, d->path, "header changed while attaching");
    if (rc) {
        munmap(p, d->size);
        d->base = NULL;
        return rc;
    }
    d->fd = fd;
    d->writable = writable;
    domain_bind(d, &h);
    return 0;
}

void fips_domain_opts_init(fips_domain_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_rings = 256;
    o->max_consumers = 16;
    o->ring_capacity = 1u << 20;
    o->max_record = 4096;
    o->grace_ns = 5000000000ull;
    o->mode = 0640;
    o->gid = -1;
    o->create = 1;
}

static int path_of(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/fips.%s", fips_shm_dir(dir), name);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* Create the file fully initialised under a temporary name, then link() it
 * into place: nobody ever sees a half-built domain, and link() never
 * replaces an existing file (or follows a symlink planted at the name). */
static int create_file(const char *dir, const char *name, const char *path,
                       const fips_domain_opts *o)
{
    struct layout l;
    if (compute_layout(o->max_rings, o->max_consumers, o->ring_capacity, &l)) return -FIPS_ELAYOUT;
    if (o->max_record > o->ring_capacity / 4 || o->max_record > FIPS_REC_LEN_MASK) return -FIPS_ELAYOUT;
    char tmp[PATH_MAX];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int n = snprintf(tmp, sizeof tmp, "%s/.fips.%s.%d.%ld.tmp", fips_shm_dir(dir), name,
                     (int)getpid(), (long)ts.tv_nsec);
    if (n < 0 || (size_t)n >= sizeof tmp) return -ENAMETOOLONG;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, o->mode);
    if (fd < 0) return -errno;
    int rc = 0;
    if (fchmod(fd, o->mode) < 0) rc = -errno;               /* defeat the umask */
    if (!rc && o->gid >= 0 && fchown(fd, (uid_t)-1, (gid_t)o->gid) < 0) rc = -errno;
    if (!rc && ftruncate(fd, (off_t)l.file_size) < 0) rc = -errno;
    /* Back the tables now and each ring when a producer takes it
     * (ring_attach): a sparse file on a full tmpfs would SIGBUS the writer
     * at its first store instead of failing here with ENOSPC. */
    if (!rc) rc = -posix_fallocate(fd, 0, (off_t)l.data_off);
    struct fips_layout_header *h = NULL;
    if (!rc) {
        h = mmap(NULL, FIPS_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) { rc = -errno; h = NULL; }
    }
    if (!rc) {
        h->magic = FIPS_MAGIC;
        h->version = FIPS_LAYOUT_VERSION;
        h->hdr_size = FIPS_HDR_SIZE;
        h->file_size = l.file_size;
        h->max_rings = o->max_rings;
        h->max_consumers = o->max_consumers;
        h->ring_capacity = o->ring_capacity;
        h->max_record = o->max_record;
        h->ring_table_off = l.ring_table_off;
        h->consumer_table_off = l.consumer_table_off;
        h->pos_table_off = l.pos_table_off;
        h->data_off = l.data_off;
        h->created_realtime_ns = fips_now_ns();
        h->created_mono_ns = fips_mono_ns();
        h->grace_ns = o->grace_ns;
        h->creator_pid = (uint32_t)getpid();
        snprintf(h->name, sizeof h->name, "%s", name);
        ST32(&h->ready, 1, release); /* pairs with validate()'s acquire of ready */
        munmap(h, FIPS_HDR_SIZE);
        if (link(tmp, path) < 0) rc = -errno; /* EEXIST: someone else won */
    }
    unlink(tmp);
    close(fd);
    return rc;
}

int fips_domain_open(fips_domain **out, const char *shm_dir, const char *name,
                     const fips_domain_opts *opts)
{
    return fips_domain_open_err(out, shm_dir, name, opts, NULL, 0);
}

int fips_domain_open_err(fips_domain **out, const char *shm_dir, const char *name,
                         const fips_domain_opts *opts, char *eb, size_t el)
{
    *out = NULL;
    fips_domain_opts def;
    if (!opts) { fips_domain_opts_init(&def); opts = &def; }
    if (!valid_name(name))
        return seterr(eb, el, -EINVAL, name ? name : "(null)",
                      "invalid domain name (want [A-Za-z0-9._-], 1-63 chars, no leading dot)");
    pthread_once(&fips_once, once_init);
    fips_domain *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->fd = -1;
    int rc = path_of(d->path, sizeof d->path, shm_dir, name);
    if (rc) { free(d); return rc; }
    int created = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        /* O_NONBLOCK: a FIFO planted at the name must not hang us. */
        int fd = open(d->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) {
            if (opts->create == 2 && !created) {
                close(fd);
                rc = seterr(eb, el, -EEXIST, d->path, "already exists");
                break;
            }
            rc = map_file(d, fd, 1, opts->any_owner, eb, el);
            if (rc) close(fd);
            break;
        }
        rc = -errno;
        if (rc == -ELOOP) { seterr(eb, el, rc, d->path, "is a symlink (refused)"); break; }
        if (rc != -ENOENT || !opts->create) {
            seterr(eb, el, rc, d->path, "%s", strerror(-rc));
            break;
        }
        rc = create_file(shm_dir, name, d->path, opts);
        if (rc == -FIPS_ELAYOUT) {
            seterr(eb, el, rc, d->path, "impossible sizes requested (rings %u, consumers %u, "
                   "ring_capacity %llu, max_record %u)", opts->max_rings, opts->max_consumers,
                   (unsigned long long)opts->ring_capacity, opts->max_record);
            break;
        }
        if (rc && rc != -EEXIST) { seterr(eb, el, rc, d->path, "create: %s", fips_strerror(rc)); break; }
        created = rc == 0;
        if (rc == -EEXIST && opts->create == 2) { seterr(eb, el, rc, d->path, "already exists"); break; }
    }
    if (rc) { free(d); return rc; }
    d->block_us = opts->block_us;
    atomic_init(&d->refs, 1);
    atomic_init(&d->closing, 0);
    *out = d;
    return 0;
}

static void domain_unref(fips_domain *d)
{
    if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
        munmap(d->base, d->size);
        close(d->fd);
        free(d);
    }
}

const struct fips_layout_header *fips_domain_header(const fips_domain *d) { return &d->hcopy; }

int fips_domain_unlink(const char *shm_dir, const char *name)
{
    char p[PATH_MAX];
    if (!valid_name(name)) return -EINVAL;
    int rc = path_of(p, sizeof p, shm_dir, name);
    if (rc) return rc;
    return unlink(p) < 0 ? -errno : 0;
}

int fips_domain_close(fips_domain *d)
{
    if (!d) return -EINVAL;
    if (atomic_exchange(&d->closing, 1)) return -FIPS_ECLOSED;
    fips_producer_close(d);
    domain_unref(d);
    return 0;
}

/* ---- producer ----------------------------------------------------------------- */
/* Inode of our pid namespace: a pid recorded by a process in another
 * namespace means nothing to kill(2) here. */
static uint64_t my_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether the process that wrote (pid, pidns) may still be running.  When we
 * cannot tell (another pid namespace), it is alive: taking over a live
 * producer's ring or consumer's entry is worse than waiting.  A zombie is
 * dead. */
static int pid_alive(uint32_t pid, uint64_t pidns)
{
    if (pid == 0) return 0;
    if (pidns != my_pidns()) return 1;
    if (kill((pid_t)pid, 0) != 0) return errno == EPERM;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* comm may contain anything */
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

/* Oldest position any active consumer still needs in ring r, or the current
 * floor when no consumer is registered (records are kept for the first
 * consumer to come).  Evicts a consumer whose heartbeat is older than the
 * grace period when it is the one holding the ring full. */
static uint64_t refresh_floor(struct tls_ring *t, uint64_t need_end)
{
    fips_domain *d = t->d;
    struct fips_layout_ring *ctl = t->ctl;
    uint32_t r = t->idx;
    uint64_t floor = 0, floor_seq = 0;
    for (int round = 0; round < 4 + (int)d->max_consumers; round++) {
        uint64_t seen_mask = 0;
        int any = 0, slow = -1;
        floor = t->head;
        floor_seq = t->committed;
        for (uint32_t c = 0; c < d->max_consumers; c++) {
            /* P6: SEQ_CST, pairs with J1 (the consumer's store of ACTIVE). */
            if (LD32(&d->cons[c].state, seq_cst) != FIPS_CONS_ACTIVE) continue;
            struct fips_layout_pos *p = &d->pos[(size_t)c * d->max_rings + r];
            /* P4: ACQUIRE, pairs with C3 (consumer's CAS of released): the
             * consumer finished reading below `rel` before we overwrite it. */
            uint64_t rel = LD(&p->released, acquire);
            if (rel > t->head) rel = t->head; /* hostile or stale: never trust beyond head */
            if (c < 64) seen_mask |= 1ull << c;
            if (!any || rel < floor) {
                floor = rel;
                floor_seq = LD(&p->released_seq, relaxed);
                slow = (int)c;
            }
            any = 1;
        }
        if (!any) {
            floor = LD(&ctl->floor, relaxed);
            floor_seq = LD(&ctl->floor_seq, relaxed);
        }
        /* Evict the consumer holding a full ring if it stopped heartbeating. */
        if (any && need_end - floor > d->cap && slow >= 0) {
            struct fips_layout_consumer *ce = &d->cons[slow];
            uint64_t hb = LD(&ce->heartbeat_mono_ns, relaxed);
            uint64_t now = fips_mono_ns();
            if (now > hb && now - hb > d->grace_ns) {
                uint32_t exp = FIPS_CONS_ACTIVE;
                if (atomic_compare_exchange_strong(A32(&ce->state), &exp, FIPS_CONS_EVICTED)) {
                    ST(&ce->evicted_ns, fips_now_ns(), relaxed);
                    ST32(&ce->evicted_by_ring, r, relaxed);
                    ST(&ctl->evictions, LD(&ctl->evictions, relaxed) + 1, relaxed);
                }
                continue; /* recompute without it */
            }
        }
        t->slow_c = any ? slow : -1;
        ST(&ctl->floor_seq, floor_seq, relaxed);
        /* P5: SEQ_CST, pairs with J2 (a joining consumer's load of floor). */
        ST(&ctl->floor, floor, seq_cst);
        /* Re-scan: a consumer that became ACTIVE meanwhile must be honoured. */
        uint64_t again = 0;
        for (uint32_t c = 0; c < d->max_consumers && c < 64; c++)
            if (LD32(&d->cons[c].state, seq_cst) == FIPS_CONS_ACTIVE) again |= 1ull << c;
        if ((again & ~seen_mask) == 0) break;
    }
    uint64_t used = t->head - floor;
    if (used > LD(&ctl->high_water_bytes, relaxed)) ST(&ctl->high_water_bytes, used, relaxed);
    t->limit = floor;
    return floor;
}

static void thread_name(char *buf, size_t len)
{
    char comm[17] = {0};
    if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) comm[0] = 0;
    snprintf(buf, len, "%s", comm);
}

/* Take a ring slot for the calling thread: a never-used slot if any, else a
 * closed one every active consumer has drained, else one whose producer
 * process died and which is drained.  Not on the hot path. */
static int ring_attach(fips_domain *d, struct tls_ring *t)
{
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t r = 0; r < d->max_rings; r++) {
            struct fips_layout_ring *ctl = &d->rings[r];
            uint32_t st = LD32(&ctl->state, acquire);
            uint32_t want = pass == 0 ? FIPS_RING_FREE : pass == 1 ? FIPS_RING_CLOSED : FIPS_RING_ACTIVE;
            if (st != want) continue;
            uint32_t dead_pid = LD32(&ctl->pid, relaxed);
            if (pass == 2 && pid_alive(dead_pid, LD(&ctl->pidns, relaxed))) continue;
            if (pass > 0) {
                uint64_t head = LD(&ctl->head, acquire);
                int drained = 1;
                for (uint32_t c = 0; c < d->max_consumers; c++)
                    if (LD32(&d->cons[c].state, acquire) == FIPS_CONS_ACTIVE &&
                        LD(&d->pos[(size_t)c * d->max_rings + r].released, acquire) < head)
                        drained = 0;
                if (!drained) continue;
            }
            uint32_t me = (uint32_t)getpid();
            /* Back the ring's pages before writing any (see create_file). */
            int fa = posix_fallocate(d->fd, (off_t)(d->hcopy.data_off + (uint64_t)r * d->cap),
                                     (off_t)d->cap);
            if (fa != 0) return -fa;
            if (pass < 2) {
                uint32_t exp = st;
                if (!atomic_compare_exchange_strong(A32(&ctl->state), &exp, FIPS_RING_ACTIVE)) continue;
            } else {
                /* An ACTIVE slot of a dead producer: the pid CAS elects one
                 * taker (state stays ACTIVE, so it cannot be the lock). */
                uint32_t exp = dead_pid;
                if (dead_pid == me ||
                    !atomic_compare_exchange_strong(A32(&ctl->pid), &exp, me)) continue;
            }
            ST32(&ctl->generation, LD32(&ctl->generation, relaxed) + 1, relaxed);
            ST32(&ctl->pid, me, relaxed);
            ST(&ctl->pidns, my_pidns(), relaxed);
            ST32(&ctl->tid, (uint32_t)syscall(SYS_gettid), relaxed);
            char nm[FIPS_THREAD_NAME_MAX] = {0}; /* no stack bytes into shared memory */
            thread_name(nm, sizeof nm);
            memcpy(ctl->thread_name, nm, sizeof nm);
            ST(&ctl->created_ns, fips_now_ns(), relaxed);
            ST(&ctl->closed_ns, 0, relaxed);
            t->d = d;
            t->ctl = ctl;
            t->idx = r;
            t->head = LD(&ctl->head, relaxed);
            /* A reclaimed slot of a dead producer may hold a half-written
             * claim beyond head; reserved restarts at head. */
            ST(&ctl->reserved, t->head, relaxed);
            t->committed = LD(&ctl->records_committed, relaxed);
            t->bytes = LD(&ctl->bytes_committed, relaxed);
            t->dropped = LD(&ctl->records_dropped, relaxed);
            t->bytes_dropped = LD(&ctl->bytes_dropped, relaxed);
            t->full_events = LD(&ctl->full_events, relaxed);
            t->truncated = LD(&ctl->records_truncated, relaxed);
            t->pending_lost = 0;
            t->slow_c = -1;
            t->full_tries = 0;
            t->tsc0 = t->ns0 = t->mult = t->last_ts = 0;
            t->limit = LD(&ctl->floor, relaxed);
            if (t->limit > t->head) t->limit = t->head;
            return 0;
        }
    }
    return -FIPS_ENORING;
}

static struct tls_ring *tls_ring_slow(fips_domain *d, int *err)
{
    if (atomic_load_explicit(&d->closing, memory_order_relaxed)) { *err = -FIPS_ECLOSED; return NULL; }
    for (int i = 0; i < TLS_SLOTS; i++)
        if (fips_tls.r[i].d == d) return &fips_tls.r[i];
    for (int i = 0; i < TLS_SLOTS; i++) {
        struct tls_ring *t = &fips_tls.r[i];
        if (t->d) continue;
        pthread_once(&fips_once, once_init);
        int rc = ring_attach(d, t);
        if (rc) { *err = rc; return NULL; }
        atomic_fetch_add(&d->refs, 1);
        pthread_setspecific(fips_tls_key, &fips_tls); /* arm the exit destructor */
        return t;
    }
    *err = -EMFILE; /* this thread has rings in TLS_SLOTS domains already */
    return NULL;
}

static inline struct tls_ring *tls_ring(fips_domain *d, int *err)
{
    struct tls_ring *t = &fips_tls.r[0];
    if (__builtin_expect(t->d == d, 1)) return t;
    return tls_ring_slow(d, err);
}

static void count_drop(struct tls_ring *t, uint32_t len)
{
    t->dropped++;
    t->bytes_dropped += len;
    if (t->pending_lost != UINT32_MAX) t->pending_lost++;
    ST(&t->ctl->records_dropped, t->dropped, relaxed);
    ST(&t->ctl->bytes_dropped, t->bytes_dropped, relaxed);
}

/* Find room for a record of `need` bytes at the local head.  Returns the
 * record's start position (after a pad to the buffer end if it would not fit
 * contiguously) or UINT64_MAX when the ring is full (the caller counts the
 * drop).  Writes the pad header, stores `reserved` (P1). */
static inline __attribute__((always_inline)) uint64_t reserve(struct tls_ring *t, uint64_t head,
                                                              uint64_t need, int *fullev)
{
    fips_domain *d = t->d;
    uint64_t off = head & d->mask;
    uint64_t to_end = d->cap - off;
    uint64_t start = to_end < need ? head + to_end : head;
    uint64_t end = start + need;
    if (__builtin_expect(end - t->limit > d->cap, 0)) {
        /* While the ring stays full, a drop costs two loads: if the consumer
         * that held the floor is still ACTIVE and has not moved far enough,
         * the true floor (a minimum that includes it) cannot have either.
         * The full refresh (joins, closes, evictions) still runs once per
         * tick of the coarse clock (1-4 ms), and always in blocking mode. */
        if (t->full_tries && t->slow_c < 0 && d->block_us == 0 &&
            mono_coarse_ns() == t->refresh_coarse_ns) {
            /* No consumer at the last refresh: records wait for the first
             * one, and a consumer joining now starts at the floor anyway. */
            t->full_tries++;
            goto full;
        }
        if (t->full_tries && t->slow_c >= 0 && d->block_us == 0 &&
            mono_coarse_ns() == t->refresh_coarse_ns) {
            struct fips_layout_pos *sp = &d->pos[(size_t)t->slow_c * d->max_rings + t->idx];
            /* Reading the line costs the consumer one invalidation per
             * release, not per try: the producer's copy stays shared. */
            if (end - LD(&sp->released, acquire) > d->cap && /* P4 */
                LD32(&d->cons[t->slow_c].state, relaxed) == FIPS_CONS_ACTIVE) {
                t->full_tries++;
                goto full;
            }
        }
        t->refresh_coarse_ns = mono_coarse_ns();
        refresh_floor(t, end);
        if (end - t->limit > d->cap && d->block_us > 0) {
            uint64_t t0 = fips_mono_ns(), deadline = t0 + (uint64_t)d->block_us * 1000u;
            struct timespec nap = {0, 20000};
            while (end - t->limit > d->cap && fips_mono_ns() < deadline) {
                nanosleep(&nap, NULL);
                refresh_floor(t, end);
            }
            ST(&t->ctl->blocked_ns,
               LD(&t->ctl->blocked_ns, relaxed) + (fips_mono_ns() - t0), relaxed);
        }
        if (end - t->limit > d->cap) {
            t->full_tries++;
        full:
            if (!*fullev) {
                t->full_events++;
                ST(&t->ctl->full_events, t->full_events, relaxed);
                *fullev = 1;
            }
            return UINT64_MAX;
        }
        t->full_tries = 0;
    }
    ST(&t->ctl->reserved, end, relaxed);               /* P1 */
    atomic_thread_fence(memory_order_release);           /* P1: tap lap check */
    if (start != head && to_end >= FIPS_REC_HDR_SIZE) {
        struct fips_layout_record *pad = (void *)(d->data + (size_t)t->idx * d->cap + off);
        pad->len_flags = (uint32_t)(to_end - FIPS_REC_HDR_SIZE) | (FIPS_REC_PAD << 24);
        pad->lost = 0;
        pad->seq = t->committed;
        pad->ts_ns = 0;
    }
    return start;
}

/* A record's CLOCK_REALTIME stamp.  clock_gettime costs ~30 ns here, more
 * than the rest of a 128-byte record's path, so on x86-64 with an invariant
 * TSC the stamp is the TSC scaled by a rate measured between two anchors
 * and re-anchored to the real clock every ~16 M ticks (a few ms): at most
 * microseconds off, never backwards within a ring. */
#define TSC_REANCHOR (1ull << 24)
static inline uint64_t rec_time(struct tls_ring *t)
{
#if defined(__x86_64__)
    uint64_t tsc = __rdtsc();
    uint64_t dt = tsc - t->tsc0;
    if (__builtin_expect(t->mult != 0 && dt < TSC_REANCHOR, 1)) {
        uint64_t ts = t->ns0 + (uint64_t)(((unsigned __int128)dt * t->mult) >> 32);
        if (ts < t->last_ts) ts = t->last_ts;
        t->last_ts = ts;
        return ts;
    }
    uint64_t now = fips_now_ns();
    if (t->tsc0 && dt >= TSC_REANCHOR && dt < (TSC_REANCHOR << 8) && now > t->ns0) {
        uint64_t m = (uint64_t)((((unsigned __int128)(now - t->ns0)) << 32) / dt);
        /* accept only a plausible rate (0.05 .. 20 GHz) */
        if (m > (1ull << 32) / 20 && m < (1ull << 32) * 20) t->mult = m;
    }
    /* Keep the first anchor until the interval is long enough to measure
     * the rate (re-anchoring on every uncalibrated call never would). */
    if (!t->tsc0 || dt >= TSC_REANCHOR) {
        t->tsc0 = tsc;
        t->ns0 = now;
    }
    if (now < t->last_ts) now = t->last_ts;
    t->last_ts = now;
    return now;
#else
    (void)t;
    return fips_now_ns();
#endif
}

static inline void write_rec(struct tls_ring *t, uint64_t start, const void *buf, uint32_t len,
                             uint32_t flags, uint64_t ts)
{
    fips_domain *d = t->d;
    uint8_t *p = d->data + (size_t)t->idx * d->cap + (start & d->mask);
    struct fips_layout_record *h = (void *)p;
    h->len_flags = len | (flags << 24);
    h->lost = t->pending_lost;
    h->seq = t->committed;
    h->ts_ns = ts;
    if (buf && len) memcpy(p + FIPS_REC_HDR_SIZE, buf, len);
    t->pending_lost = 0;
    t->committed++;
    t->bytes += len;
}

static inline void publish(struct tls_ring *t, uint64_t new_head, uint64_t ts)
{
    struct fips_layout_ring *ctl = t->ctl;
    /* High water: every 64th commit, measure the fill against the slowest
     * consumer's position (a relaxed load of its line, amortised). */
    if (__builtin_expect((t->committed & 63u) == 0, 0)) {
        fips_domain *d = t->d;
        uint64_t base = t->limit;
        if (t->slow_c >= 0) {
            uint64_t rel = LD(&d->pos[(size_t)t->slow_c * d->max_rings + t->idx].released, relaxed);
            if (rel > base && rel <= new_head) base = rel;
        }
        uint64_t used = new_head - base;
        if (used > d->cap) used = d->cap;
        if (used > LD(&ctl->high_water_bytes, relaxed)) ST(&ctl->high_water_bytes, used, relaxed);
    }
    ST(&ctl->records_committed, t->committed, relaxed);
    ST(&ctl->bytes_committed, t->bytes, relaxed);
    ST(&ctl->last_commit_ns, ts, relaxed);
    t->head = new_head;
    /* P3: RELEASE, pairs with C1 (consumer/monitor acquire of head): the
     * record bytes and counters above are visible to whoever sees new_head. */
    ST(&ctl->head, new_head, release);
}

int fips_log(fips_domain *d, const void *buf, uint32_t len)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (__builtin_expect(!t, 0)) return err;
    if (__builtin_expect(len > d->max_record, 0)) return -FIPS_ETOOBIG;
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (__builtin_expect(start == UINT64_MAX, 0)) {
        count_drop(t, len);
        return -FIPS_EFULL;
    }
    uint64_t ts = rec_time(t);
    write_rec(t, start, buf, len, 0, ts);
    publish(t, start + need, ts);
    return 0;
}

int fips_log_trunc(fips_domain *d, const void *buf, size_t len, uint64_t ts)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (!t) return err;
    uint32_t flags = 0, l = (uint32_t)len;
    if (len > d->max_record) {
        l = d->max_record;
        flags = FIPS_REC_TRUNC;
    }
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(l);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (start == UINT64_MAX) {
        count_drop(t, l);
        return -FIPS_EFULL;
    }
    if (!ts) ts = rec_time(t);
    if (flags) {
        t->truncated++;
        ST(&t->ctl->records_truncated, t->truncated, relaxed);
    }
    write_rec(t, start, buf, l, flags, ts);
    publish(t, start + need, ts);
    return flags ? 1 : 0;
}

int fips_log_batch(fips_domain *d, const void *const *bufs, const uint32_t *lens, uint32_t n)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (!t) return err;
    uint64_t ts = rec_time(t);
    uint64_t head = t->head;
    int fullev = 0, logged = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = lens[i];
        if (len > d->max_record) { count_drop(t, len); continue; }
        uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
        /* reserve() reads t->head via refresh_floor for the fill; keep it
         * at the committed head, the local cursor is `head`. */
        uint64_t start = reserve(t, head, need, &fullev);
        if (start == UINT64_MAX) { count_drop(t, len); continue; }
        write_rec(t, start, bufs[i], len, 0, ts);
        head = start + need;
        logged++;
    }
    if (logged) publish(t, head, ts);
    return logged;
}

int fips_claim(fips_domain *d, uint32_t len, fips_slot *c)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (!t) return err;
    if (len > d->max_record) return -FIPS_ETOOBIG;
    uint64_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
    int fullev = 0;
    uint64_t start = reserve(t, t->head, need, &fullev);
    if (start == UINT64_MAX) {
        count_drop(t, len);
        return -FIPS_EFULL;
    }
    c->data = d->data + (size_t)t->idx * d->cap + (start & d->mask) + FIPS_REC_HDR_SIZE;
    c->len = len;
    c->ring = t->idx;
    c->pos = start;
    c->next = start + need;
    return 0;
}

void fips_commit(fips_domain *d, fips_slot *c, uint32_t len, uint32_t flags, uint64_t ts)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (!t || t->idx != c->ring) return;
    if (len > c->len) len = c->len;
    if (!ts) ts = rec_time(t);
    flags &= FIPS_REC_TRUNC | FIPS_REC_USER_MASK;
    /* The payload is already in place.  A record that shrank gives the rest
     * of its claim back: nothing was reserved after it, so head simply stops
     * at its real end. */
    write_rec(t, c->pos, NULL, len, flags, ts);
    if (flags & FIPS_REC_TRUNC) {
        t->truncated++;
        ST(&t->ctl->records_truncated, t->truncated, relaxed);
    }
    uint64_t end = c->pos + FIPS_REC_HDR_SIZE + ALIGN8(len);
    /* Lowering reserved is safe for the tap: the claim never reached below
     * the floor it was checked against, which a tap never reads under. */
    if (end != c->next) ST(&t->ctl->reserved, end, relaxed);
    publish(t, end, ts);
}

int fips_producer_ring(fips_domain *d)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    return t ? (int)t->idx : err;
}

void fips_producer_close(fips_domain *d)
{
    for (int i = 0; i < TLS_SLOTS; i++)
        if (fips_tls.r[i].d == d) {
            ring_close_now(&fips_tls.r[i]);
            /* keep slot 0 the fast one */
            if (i == 0) {
                for (int j = 1; j < TLS_SLOTS; j++)
                    if (fips_tls.r[j].d) {
                        fips_tls.r[0] = fips_tls.r[j];
                        memset(&fips_tls.r[j], 0, sizeof fips_tls.r[j]);
                        break;
                    }
            }
            return;
        }
}

void fips_producer_set_name(fips_domain *d, const char *name)
{
    int err = 0;
    struct tls_ring *t = tls_ring(d, &err);
    if (!t) return;
    char nm[FIPS_THREAD_NAME_MAX] = {0};
    snprintf(nm, sizeof nm, "%s", name ? name : "");
    memcpy(t->ctl->thread_name, nm, sizeof nm);
}

/* ---- consumer -------------------------------------------------------------------- */
struct relq_entry { uint64_t start, end, next_seq, count, lost; };

struct cring {                    /* per-ring state of one consumer, local */
    pthread_mutex_t claim_lock;   /* serialises batch claims on this ring */
    uint64_t claim;               /* next position to hand out */
    pthread_mutex_t qlock;        /* out-of-order release queue */
    atomic_uint_fast32_t qcount;
    uint32_t qlen, qcap;
    struct relq_entry *q;
};

struct fips_consumer {
    fips_domain *d;
    uint32_t idx, gen;
    struct fips_layout_consumer *e;
    struct cring *cr;
    atomic_uint rr;               /* round-robin ring cursor */
    atomic_uint scan;             /* rings [0, scan) have been used */
    _Atomic uint64_t last_hb;
};

static struct fips_layout_pos *posof(fips_domain *d, uint32_t c, uint32_t r)
{
    return &d->pos[(size_t)c * d->max_rings + r];
}

static void racy_copy(void *dst, const void *src, size_t n);

/* A ring's floor and the seq of the record at it, for a joining consumer.
 * floor_seq (from the producer) can lag; the record header at the floor is
 * exact: the producer never overwrites at or above the floor it published,
 * so a header read between two equal floor loads is intact. */
static void read_floor(fips_domain *d, uint32_t r, uint64_t *floor, uint64_t *seq)
{
    struct fips_layout_ring *ctl = &d->rings[r];
    const uint8_t *base = d->data + (size_t)r * d->cap;
    for (int i = 0; i < 100; i++) {
        uint64_t f1 = LD(&ctl->floor, seq_cst); /* J2 */
        uint64_t s = LD(&ctl->floor_seq, relaxed);
        uint64_t head = LD(&ctl->head, acquire); /* C1 */
        if (f1 > head || head - f1 > d->cap) continue; /* moving, or hostile */
        uint64_t p = f1, off = p & d->mask;
        if (d->cap - off < FIPS_REC_HDR_SIZE) { p += d->cap - off; off = 0; }
        if (p < head) {
            struct fips_layout_record h;
            racy_copy(&h, base + off, sizeof h);
            s = h.seq;
        } else {
            s = LD(&ctl->records_committed, relaxed);
        }
        atomic_thread_fence(memory_order_acquire);
        if (LD(&ctl->floor, seq_cst) == f1) { *floor = f1; *seq = s; return; }
    }
    *floor = LD(&ctl->floor, seq_cst);
    *seq = LD(&ctl->floor_seq, relaxed);
}

int fips_consumer_open(fips_consumer **out, fips_domain *d, const char *name)
{
    *out = NULL;
    if (!valid_name(name)) return -EINVAL;
    fips_consumer *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->cr = calloc(d->max_rings, sizeof *c->cr);
    if (!c->cr) { free(c); return -ENOMEM; }
    c->d = d;
    uint32_t me = (uint32_t)getpid();
    int found = -1, resumed = 0, rc = 0;
    /* 1. resume an entry of this name whose process is gone (or is us). */
    for (uint32_t i = 0; i < d->max_consumers && found < 0; i++) {
        struct fips_layout_consumer *e = &d->cons[i];
        uint32_t st = LD32(&e->state, acquire);
        if (st != FIPS_CONS_ACTIVE && st != FIPS_CONS_EVICTED) continue;
        if (strncmp(e->name, name, FIPS_NAME_MAX) != 0) continue;
        if (st == FIPS_CONS_ACTIVE) {
            uint32_t pid = LD32(&e->pid, relaxed);
            if (pid != me && pid_alive(pid, LD(&e->pidns, relaxed))) { rc = -FIPS_EBUSY; break; }
            /* Our own process may resume an entry it detached, not one a
             * live handle of this domain still reads through. */
            if (pid == me && (atomic_load(&d->open_consumers) >> (i & 63)) & 1u) {
                rc = -FIPS_EBUSY;
                break;
            }
            /* take the entry over: the generation CAS elects one resumer */
            uint32_t g = LD32(&e->generation, relaxed);
            if (!atomic_compare_exchange_strong(A32(&e->generation), &g, g + 1)) { rc = -FIPS_EBUSY; break; }
            ST32(&e->pid, me, relaxed);
            ST(&e->pidns, my_pidns(), relaxed);
            ST(&e->heartbeat_mono_ns, fips_mono_ns(), relaxed);
            ST32(&e->resumes, LD32(&e->resumes, relaxed) + 1, relaxed);
            c->gen = g + 1;
            found = (int)i;
            resumed = 1;
        } else {
            uint32_t exp = FIPS_CONS_EVICTED;
            if (atomic_compare_exchange_strong(A32(&e->state), &exp, FIPS_CONS_JOINING)) found = (int)i;
        }
    }
    /* 2. else a free or closed slot; 3. else an evicted one (its owner
     * would have to register again anyway): a crashed consumer that never
     * comes back must not hold a slot forever.  (An entry left JOINING by a
     * process killed during the join loop is not reclaimed: telling a dead
     * joiner from a slow one would need the state and the pid in one CAS.) */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; !rc && i < d->max_consumers && found < 0; i++) {
            struct fips_layout_consumer *e = &d->cons[i];
            uint32_t st = LD32(&e->state, acquire);
            if (pass == 0 ? (st != FIPS_CONS_FREE && st != FIPS_CONS_CLOSED) : st != FIPS_CONS_EVICTED)
                continue;
            uint32_t exp = st;
            if (atomic_compare_exchange_strong(A32(&e->state), &exp, FIPS_CONS_JOINING)) found = (int)i;
        }
    if (!rc && found < 0) rc = -FIPS_ENOCONSUMER;
    if (rc) { free(c->cr); free(c); return rc; }
    c->idx = (uint32_t)found;
    c->e = &d->cons[found];
    struct fips_layout_consumer *e = c->e;
    if (!resumed) {
        /* JOINING is invisible to producers: set everything, then go ACTIVE. */
        c->gen = LD32(&e->generation, relaxed) + 1;
        ST32(&e->generation, c->gen, relaxed);
        char nm[FIPS_NAME_MAX] = {0};
        snprintf(nm, sizeof nm, "%s", name);
        memcpy(e->name, nm, sizeof nm);
        ST32(&e->pid, me, relaxed);
        ST(&e->pidns, my_pidns(), relaxed);
        ST32(&e->readers, 0, relaxed);
        ST(&e->registered_ns, fips_now_ns(), relaxed);
        ST(&e->evicted_ns, 0, relaxed);
        ST(&e->heartbeat_mono_ns, fips_mono_ns(), relaxed);
        ST(&e->records_released, 0, relaxed);
        ST(&e->batches_released, 0, relaxed);
        for (uint32_t r = 0; r < d->max_rings; r++) {
            uint64_t f, s;
            read_floor(d, r, &f, &s);
            struct fips_layout_pos *p = posof(d, c->idx, r);
            ST(&p->released_seq, s, relaxed);
            ST(&p->records_released, 0, relaxed);
            ST(&p->lost_seen, 0, relaxed);
            ST(&p->released, f, relaxed);
        }
        /* J1: SEQ_CST, pairs with P6; positions above are visible to a
         * producer that sees ACTIVE. */
        ST32(&e->state, FIPS_CONS_ACTIVE, seq_cst);
        /* J2: a producer that did not see us may have moved its floor up;
         * move up with it (those records are gone for us). */
        for (uint32_t r = 0; r < d->max_rings; r++) {
            uint64_t f, s;
            read_floor(d, r, &f, &s);
            struct fips_layout_pos *p = posof(d, c->idx, r);
            if (f > LD(&p->released, relaxed)) {
                ST(&p->released_seq, s, relaxed);
                ST(&p->released, f, release);
            }
        }
    }
    for (uint32_t r = 0; r < d->max_rings; r++) {
        pthread_mutex_init(&c->cr[r].claim_lock, NULL);
        pthread_mutex_init(&c->cr[r].qlock, NULL);
        c->cr[r].claim = LD(&posof(d, c->idx, r)->released, acquire);
    }
    atomic_init(&c->last_hb, fips_mono_ns());
    atomic_fetch_or(&d->open_consumers, 1ull << (c->idx & 63));
    atomic_fetch_add(&d->refs, 1);
    *out = c;
    return 0;
}

static void consumer_free(fips_consumer *c)
{
    atomic_fetch_and(&c->d->open_consumers, ~(1ull << (c->idx & 63)));
    for (uint32_t r = 0; r < c->d->max_rings; r++) {
        pthread_mutex_destroy(&c->cr[r].claim_lock);
        pthread_mutex_destroy(&c->cr[r].qlock);
        free(c->cr[r].q);
    }
    domain_unref(c->d);
    free(c->cr);
    free(c);
}

int fips_consumer_close(fips_consumer *c)
{
    if (!c) return -EINVAL;
    uint32_t exp = FIPS_CONS_ACTIVE;
    if (LD32(&c->e->generation, relaxed) == c->gen)
        atomic_compare_exchange_strong(A32(&c->e->state), &exp, FIPS_CONS_CLOSED);
    consumer_free(c);
    return 0;
}

int fips_consumer_detach(fips_consumer *c)
{
    if (!c) return -EINVAL;
    consumer_free(c);
    return 0;
}

int fips_consumer_index(const fips_consumer *c) { return (int)c->idx; }

void fips_consumer_heartbeat(fips_consumer *c)
{
    uint64_t now = fips_mono_ns();
    atomic_store_explicit(&c->last_hb, now, memory_order_relaxed);
    ST(&c->e->heartbeat_mono_ns, now, relaxed);
}

static inline void maybe_heartbeat(fips_consumer *c)
{
    uint64_t now = mono_coarse_ns();
    if (now - atomic_load_explicit(&c->last_hb, memory_order_relaxed) > HB_EVERY_NS) {
        atomic_store_explicit(&c->last_hb, now, memory_order_relaxed);
        ST(&c->e->heartbeat_mono_ns, now, relaxed);
    }
}

static int consumer_valid(fips_consumer *c)
{
    if (LD32(&c->e->state, acquire) != FIPS_CONS_ACTIVE ||
        LD32(&c->e->generation, relaxed) != c->gen)
        return -FIPS_EEVICTED;
    return 0;
}

/* Parse records in [from, head) of ring r, up to max; every length comes
 * from shared memory and is bounds-checked. */
static int claim_batch(fips_consumer *c, uint32_t r, uint32_t max, fips_batch *b)
{
    fips_domain *d = c->d;
    struct fips_layout_ring *ctl = &d->rings[r];
    struct cring *cr = &c->cr[r];
    if (pthread_mutex_trylock(&cr->claim_lock) != 0) return -FIPS_EAGAIN;
    uint64_t from = cr->claim;
    uint64_t head = LD(&ctl->head, acquire); /* C1: pairs with P3 */
    if (head <= from) { pthread_mutex_unlock(&cr->claim_lock); return -FIPS_EAGAIN; }
    if (head - from > d->cap) { pthread_mutex_unlock(&cr->claim_lock); return -FIPS_ECORRUPT; }
    const uint8_t *base = d->data + (size_t)r * d->cap;
    uint64_t p = from;
    uint32_t n = 0;
    uint64_t first_seq = 0, next_seq = 0, lost = 0;
    int rc = 0;
    while (p < head && n < max) {
        uint64_t off = p & d->mask, to_end = d->cap - off;
        if (to_end < FIPS_REC_HDR_SIZE) { p += to_end; continue; }
        if (head - p < FIPS_REC_HDR_SIZE) { rc = -FIPS_ECORRUPT; break; }
        const struct fips_layout_record *h = (const void *)(base + off);
        uint32_t lf = h->len_flags, len = lf & FIPS_REC_LEN_MASK, fl = lf >> 24;
        uint64_t stride = rec_stride(lf);
        if (fl & FIPS_REC_PAD) {
            if (stride > to_end) { rc = -FIPS_ECORRUPT; break; }
            p += stride;
            continue;
        }
        if (len > d->max_record || stride > to_end || p + stride > head) { rc = -FIPS_ECORRUPT; break; }
        if (n == 0) first_seq = h->seq;
        next_seq = h->seq + 1;
        lost += h->lost;
        n++;
        p += stride;
    }
    if (p > head) p = head;
    if (rc == 0 && n == 0 && p == from) rc = -FIPS_EAGAIN;
    if (rc == 0 || (rc == -FIPS_ECORRUPT && n > 0)) {
        /* A trailing pad with no record is consumed too (n may be 0). */
        cr->claim = p;
        rc = 0;
    }
    pthread_mutex_unlock(&cr->claim_lock);
    if (rc) return rc;
    b->ring = r;
    b->count = n;
    b->start = from;
    b->end = p;
    b->first_seq = first_seq;
    b->next_seq = n ? next_seq : 0;
    b->lost = lost;
    b->cursor = from;
    b->base = base;
    b->mask = d->mask;
    return 0;
}

int fips_consumer_read(fips_consumer *c, fips_batch *b, uint32_t max)
{
    int rc = consumer_valid(c);
    if (rc) return rc;
    maybe_heartbeat(c);
    if (fips_tls_reader != c) { /* count reader threads (informational) */
        fips_tls_reader = c;
        atomic_fetch_add_explicit(A32(&c->e->readers), 1, memory_order_relaxed);
    }
    fips_domain *d = c->d;
    if (max == 0) max = 1;
    /* Producers take the lowest free slot, so used rings form a prefix:
     * scan only that prefix, extending it when the next slot comes alive. */
    uint32_t scan = atomic_load_explicit(&c->scan, memory_order_relaxed);
    while (scan < d->max_rings && LD32(&d->rings[scan].state, acquire) != FIPS_RING_FREE)
        scan++;
    atomic_store_explicit(&c->scan, scan, memory_order_relaxed);
    if (scan == 0) return -FIPS_EAGAIN;
    uint32_t start = atomic_fetch_add_explicit(&c->rr, 1, memory_order_relaxed);
    int corrupt = 0;
    for (uint32_t k = 0; k < scan; k++) {
        uint32_t r = (start + k) % scan;
        if (LD32(&d->rings[r].state, acquire) == FIPS_RING_FREE) continue; /* M1 */
        rc = claim_batch(c, r, max, b);
        if (rc == 0 && b->count == 0) { /* only a pad: consume it, look again */
            fips_consumer_release(c, b);
            rc = claim_batch(c, r, max, b);
            if (rc == 0 && b->count == 0) { fips_consumer_release(c, b); rc = -FIPS_EAGAIN; }
        }
        if (rc == 0) return 0;
        if (rc == -FIPS_ECORRUPT) corrupt = 1;
    }
    return corrupt ? -FIPS_ECORRUPT : -FIPS_EAGAIN;
}

int fips_batch_next(fips_batch *b, fips_record *rec)
{
    uint64_t cap = b->mask + 1;
    while (b->cursor < b->end) {
        uint64_t off = b->cursor & b->mask, to_end = cap - off;
        if (to_end < FIPS_REC_HDR_SIZE) { b->cursor += to_end; continue; }
        const struct fips_layout_record *h = (const void *)(b->base + off);
        uint32_t lf = h->len_flags, len = lf & FIPS_REC_LEN_MASK;
        uint64_t stride = rec_stride(lf);
        /* Re-check what fips_consumer_read() checked: the header is in
         * shared memory and a hostile writer may have changed it since. */
        if (stride > to_end || b->cursor + stride > b->end) {
            b->cursor = b->end;
            return 0;
        }
        b->cursor += stride;
        if ((lf >> 24) & FIPS_REC_PAD) continue;
        rec->data = (const uint8_t *)h + FIPS_REC_HDR_SIZE;
        rec->len = len;
        rec->flags = lf >> 24;
        rec->lost = h->lost;
        rec->seq = h->seq;
        rec->ts_ns = h->ts_ns;
        return 1;
    }
    return 0;
}

static void advance_seq(struct fips_layout_pos *p, uint64_t next_seq)
{
    uint64_t cur = LD(&p->released_seq, relaxed);
    while (next_seq > cur &&
           !atomic_compare_exchange_weak_explicit(A64(&p->released_seq), &cur, next_seq,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static void account(fips_consumer *c, struct fips_layout_pos *p, uint64_t count,
                    uint64_t next_seq, uint64_t lost)
{
    if (count) {
        advance_seq(p, next_seq);
        atomic_fetch_add_explicit(A64(&p->records_released), count, memory_order_relaxed);
        atomic_fetch_add_explicit(A64(&c->e->records_released), count, memory_order_relaxed);
    }
    if (lost) atomic_fetch_add_explicit(A64(&p->lost_seen), lost, memory_order_relaxed);
    atomic_fetch_add_explicit(A64(&c->e->batches_released), 1, memory_order_relaxed);
}

/* Under qlock: apply queued releases that now start at the released position. */
static void drain_queue(fips_consumer *c, struct cring *cr, struct fips_layout_pos *p)
{
    for (;;) {
        uint64_t cur = LD(&p->released, seq_cst);
        uint32_t i;
        for (i = 0; i < cr->qlen; i++)
            if (cr->q[i].start == cur) break;
        if (i == cr->qlen) return;
        struct relq_entry e = cr->q[i];
        cr->q[i] = cr->q[--cr->qlen];
        atomic_fetch_sub(&cr->qcount, 1);
        /* C3: pairs with P4.  Only this holder of qlock can match `cur`. */
        if (!atomic_compare_exchange_strong(A64(&p->released), &cur, e.end)) {
            cr->q[cr->qlen++] = e; /* cannot happen: ranges are disjoint */
            atomic_fetch_add(&cr->qcount, 1);
            return;
        }
        account(c, p, e.count, e.next_seq, e.lost);
    }
}

int fips_consumer_release(fips_consumer *c, const fips_batch *b)
{
    fips_domain *d = c->d;
    if (b->ring >= d->max_rings) return -EINVAL;
    struct cring *cr = &c->cr[b->ring];
    struct fips_layout_pos *p = posof(d, c->idx, b->ring);
    /* A handle whose entry was evicted or taken over must not move the
     * positions of whoever holds the entry now. */
    if (LD32(&c->e->generation, relaxed) != c->gen) return -FIPS_EEVICTED;
    maybe_heartbeat(c);
    uint64_t exp = b->start;
    /* R1 / C3: SEQ_CST CAS — release for the producer (P4), and the Dekker
     * partner of the queue count below. */
    if (atomic_compare_exchange_strong(A64(&p->released), &exp, b->end)) {
        account(c, p, b->count, b->next_seq, b->lost);
        if (atomic_load(&cr->qcount) != 0) { /* R1: SEQ_CST load */
            pthread_mutex_lock(&cr->qlock);
            drain_queue(c, cr, p);
            pthread_mutex_unlock(&cr->qlock);
        }
        return 0;
    }
    /* Out of order: queue it, then re-check (R2). */
    pthread_mutex_lock(&cr->qlock);
    if (cr->qlen == cr->qcap) {
        uint32_t nc = cr->qcap ? cr->qcap * 2 : 8;
        struct relq_entry *nq = realloc(cr->q, nc * sizeof *nq);
        if (!nq) { pthread_mutex_unlock(&cr->qlock); return -ENOMEM; }
        cr->q = nq;
        cr->qcap = nc;
    }
    cr->q[cr->qlen++] = (struct relq_entry){b->start, b->end, b->next_seq, b->count, b->lost};
    atomic_fetch_add(&cr->qcount, 1); /* R2: SEQ_CST */
    drain_queue(c, cr, p);
    pthread_mutex_unlock(&cr->qlock);
    return 0;
}

/* ---- monitor ---------------------------------------------------------------------- */
int fips_monitor_open_path(fips_monitor **out, const char *path, int any_owner, char *eb, size_t el)
{
    *out = NULL;
    fips_monitor *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    snprintf(m->d.path, sizeof m->d.path, "%s", path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not hang us */
    if (fd < 0) {
        int e = errno;
        int rc = seterr(eb, el, -e, path, "%s", e == ELOOP ? "is a symlink (refused)" : strerror(e));
        free(m);
        return rc;
    }
    int rc = map_file(&m->d, fd, 0, any_owner, eb, el);
    if (rc) { close(fd); free(m); return rc; }
    atomic_init(&m->d.refs, 1);
    *out = m;
    return 0;
}

int fips_monitor_open(fips_monitor **out, const char *shm_dir, const char *name, int any_owner,
                      char *eb, size_t el)
{
    char p[PATH_MAX];
    if (!valid_name(name)) {
        *out = NULL;
        return seterr(eb, el, -EINVAL, name, "invalid domain name");
    }
    int rc = path_of(p, sizeof p, shm_dir, name);
    if (rc) { *out = NULL; return seterr(eb, el, rc, name, "path too long"); }
    return fips_monitor_open_path(out, p, any_owner, eb, el);
}

int fips_monitor_close(fips_monitor *m)
{
    if (!m) return -EINVAL;
    munmap(m->d.base, m->d.size);
    close(m->d.fd);
    free(m);
    return 0;
}

const struct fips_layout_header *fips_monitor_header(const fips_monitor *m) { return &m->d.hcopy; }

const void *fips_monitor_mapping(const fips_monitor *m) { return m->d.base; }

int fips_monitor_snapshot(fips_monitor *m, fips_snapshot *s)
{
    fips_domain *d = &m->d;
    s->taken_realtime_ns = fips_now_ns();
    s->taken_mono_ns = fips_mono_ns();
    s->n_rings = d->max_rings;
    s->n_consumers = d->max_consumers;
    for (uint32_t r = 0; r < d->max_rings && s->rings; r++) {
        const struct fips_layout_ring *c = &d->rings[r];
        fips_ring_stat *o = &s->rings[r];
        o->index = r;
        o->state = LD32(&c->state, acquire); /* M1: pairs with P7 */
        o->head = LD(&c->head, acquire);     /* C1: pairs with P3 */
        o->reserved = LD(&c->reserved, relaxed);
        o->records_committed = LD(&c->records_committed, relaxed);
        o->bytes_committed = LD(&c->bytes_committed, relaxed);
        o->records_dropped = LD(&c->records_dropped, relaxed);
        o->bytes_dropped = LD(&c->bytes_dropped, relaxed);
        o->full_events = LD(&c->full_events, relaxed);
        o->last_commit_ns = LD(&c->last_commit_ns, relaxed);
        o->floor = LD(&c->floor, relaxed);
        o->floor_seq = LD(&c->floor_seq, relaxed);
        o->high_water_bytes = LD(&c->high_water_bytes, relaxed);
        o->records_truncated = LD(&c->records_truncated, relaxed);
        o->evictions = LD(&c->evictions, relaxed);
        o->blocked_ns = LD(&c->blocked_ns, relaxed);
        o->created_ns = LD(&c->created_ns, relaxed);
        o->closed_ns = LD(&c->closed_ns, relaxed);
        o->generation = LD32(&c->generation, relaxed);
        o->pid = LD32(&c->pid, relaxed);
        o->tid = LD32(&c->tid, relaxed);
        memcpy(o->thread_name, c->thread_name, sizeof o->thread_name);
        o->thread_name[sizeof o->thread_name - 1] = 0;
    }
    for (uint32_t i = 0; i < d->max_consumers && s->consumers; i++) {
        const struct fips_layout_consumer *c = &d->cons[i];
        fips_consumer_stat *o = &s->consumers[i];
        o->index = i;
        o->state = LD32(&c->state, acquire);
        o->generation = LD32(&c->generation, relaxed);
        o->pid = LD32(&c->pid, relaxed);
        o->readers = LD32(&c->readers, relaxed);
        o->evicted_by_ring = LD32(&c->evicted_by_ring, relaxed);
        o->resumes = LD32(&c->resumes, relaxed);
        o->heartbeat_mono_ns = LD(&c->heartbeat_mono_ns, relaxed);
        o->registered_ns = LD(&c->registered_ns, relaxed);
        o->evicted_ns = LD(&c->evicted_ns, relaxed);
        o->records_released = LD(&c->records_released, relaxed);
        o->batches_released = LD(&c->batches_released, relaxed);
        memcpy(o->name, c->name, sizeof o->name);
        o->name[sizeof o->name - 1] = 0;
    }
    if (s->pos) {
        size_t n = (size_t)d->max_consumers * d->max_rings;
        for (size_t k = 0; k < n; k++) {
            const struct fips_layout_pos *p = &d->pos[k];
            s->pos[k].released = LD(&p->released, acquire);
            s->pos[k].released_seq = LD(&p->released_seq, relaxed);
            s->pos[k].records_released = LD(&p->records_released, relaxed);
            s->pos[k].lost_seen = LD(&p->lost_seen, relaxed);
        }
    }
    return 0;
}

/* The copy races with the producer by design (a seqlock read): bytes it
 * copies may be overwritten meanwhile, which the `reserved` re-check after
 * the acquire fence detects.  Excluded from TSan for that reason. */
__attribute__((no_sanitize("thread")))
static void racy_copy(void *dst, const void *src, size_t n)
{
    const volatile uint8_t *s = src;
    uint8_t *o = dst;
    for (size_t i = 0; i < n; i++) o[i] = s[i];
}

int fips_monitor_tap(fips_monitor *m, uint32_t ring, uint32_t max, void *buf, size_t buflen,
                     size_t *used, uint32_t *lapped)
{
    fips_domain *d = &m->d;
    *used = 0;
    *lapped = 0;
    if (ring >= d->max_rings) return -EINVAL;
    if (max == 0) return 0;
    const struct fips_layout_ring *ctl = &d->rings[ring];
    const uint8_t *base = d->data + (size_t)ring * d->cap;
    /* Walk forward from the floor (a record boundary the producer never
     * writes below) to head, keeping the offsets of the last `max` records.
     * The walk follows lengths it reads, so one torn header would send the
     * rest astray: it counts only if, after it, the producer had not
     * reserved past floor + cap (no byte at or above floor overwritten). */
    uint64_t *ring_pos = calloc(max, sizeof *ring_pos);
    if (!ring_pos) return -ENOMEM;
    uint32_t nfound = 0;
    int walked = 0, stable = 0;
    for (int attempt = 0; attempt < 16 && !walked; attempt++) {
        uint64_t lo = 0, head = 0;
        stable = 0;
        for (int i = 0; i < 64 && !stable; i++) {
            /* A floor older than head by more than a lap is stale, not
             * corrupt: the producer moved both between our loads. */
            lo = LD(&ctl->floor, acquire);
            head = LD(&ctl->head, acquire); /* C1 */
            stable = LD(&ctl->floor, acquire) == lo && lo <= head && head - lo <= d->cap;
        }
        if (!stable) break;
        nfound = 0;
        uint64_t p = lo;
        while (p < head) {
            uint64_t off = p & d->mask, to_end = d->cap - off;
            if (to_end < FIPS_REC_HDR_SIZE) { p += to_end; continue; }
            struct fips_layout_record h;
            racy_copy(&h, base + off, sizeof h);
            uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
            uint64_t stride = rec_stride(h.len_flags);
            if (stride > to_end || len > d->max_record) break; /* lapped or hostile */
            if (!((h.len_flags >> 24) & FIPS_REC_PAD)) {
                ring_pos[nfound % max] = p;
                nfound++;
            }
            p += stride;
        }
        atomic_thread_fence(memory_order_acquire); /* T2 */
        walked = LD(&ctl->reserved, relaxed) <= lo + d->cap;
    }
    if (!stable) { free(ring_pos); return -FIPS_ECORRUPT; }
    if (!walked) { free(ring_pos); *lapped = 1; return 0; } /* producer too fast to follow */
    uint32_t n = nfound < max ? nfound : max;
    uint32_t first = nfound < max ? 0 : nfound % max;
    uint8_t *out = buf;
    size_t off_out = 0;
    uint32_t copied = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t rp = ring_pos[(first + k) % max];
        uint64_t off = rp & d->mask;
        struct fips_layout_record h;
        racy_copy(&h, base + off, sizeof h);
        uint32_t len = h.len_flags & FIPS_REC_LEN_MASK;
        if (len > d->max_record || rec_stride(h.len_flags) > d->cap - off) { (*lapped)++; continue; }
        size_t need = FIPS_REC_HDR_SIZE + ALIGN8(len);
        if (off_out + need > buflen) break;
        racy_copy(out + off_out, base + off, FIPS_REC_HDR_SIZE + len);
        /* T2: ACQUIRE fence then reserved: pairs with P1.  If the producer
         * reserved past rp + cap, this record may be torn: discard it. */
        atomic_thread_fence(memory_order_acquire);
        uint64_t r2 = LD(&ctl->reserved, relaxed);
        if (r2 > rp + d->cap) { (*lapped)++; continue; }
        off_out += need;
        copied++;
    }
    free(ring_pos);
    *used = off_out;
    return (int)copied;
}
