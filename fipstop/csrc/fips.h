/*
 * libfips — per-thread lock-free logging rings in shared memory.
 *
 * A *domain* is one file, <shm_dir>/fips.<name>, holding a header, a ring
 * table, a consumer table, a position table and the ring data.  Every
 * producer thread logs into a single-producer ring of its own, created on the
 * thread's first record and closed when the thread exits.  Any number of named
 * consumers read every record at their own pace; a record that does not fit
 * because the slowest consumer is behind is dropped and counted, never
 * silently overwritten.  Monitors map the file read-only and never write.
 *
 * The exact byte layout is in docs/ring-format.md and mirrored here by the
 * fips_layout_* structs, each offset pinned with _Static_assert in fips.c.
 *
 * Errors are negative errno-style codes; fips_strerror() names them.
 * Pure C11 + POSIX threads; no Python.h.
 */
#ifndef FIPS_H
#define FIPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FIPS_VERSION_MAJOR 1
#define FIPS_VERSION_MINOR 0

/* ---- errors: returned negated, e.g. -FIPS_EFULL ------------------------ */
enum {
    FIPS_OK = 0,
    FIPS_EFULL = 1000,    /* record dropped: ring full (counted) */
    FIPS_ETOOBIG,         /* record longer than the domain's max_record */
    FIPS_EMAGIC,          /* file is not a fips domain (wrong magic) */
    FIPS_EVERSION,        /* unsupported layout version */
    FIPS_ELAYOUT,         /* sizes/offsets impossible or inconsistent */
    FIPS_ETRUNC,          /* file shorter than its header says */
    FIPS_EOWNER,          /* file belongs to another user */
    FIPS_ENOTREADY,       /* domain still being initialised by its creator */
    FIPS_ENORING,         /* ring table full: no slot for a new producer */
    FIPS_ENOCONSUMER,     /* consumer table full */
    FIPS_EEVICTED,        /* this consumer was evicted (too slow / dead) */
    FIPS_ECORRUPT,        /* ring contents violate the format (hostile?) */
    FIPS_EBUSY,           /* consumer name held by a live process */
    FIPS_ECLOSED,         /* domain handle already closed */
    FIPS_EAGAIN,          /* nothing to read right now */
    FIPS_ELAPPED,         /* tap: producer overwrote what was being copied */
    FIPS_ETORN,           /* release: evicted, and the batch may have been
                             overwritten: discard what was read from it */
    FIPS_EREENTER,        /* logged from a signal handler that interrupted a
                             log call of the same thread: dropped, counted */
};
const char *fips_strerror(int err); /* accepts negative or positive codes */

/* ---- constants of layout version 2 ------------------------------------ */
#define FIPS_MAGIC            0x314d4f4453504946ULL /* "FIPSDOM1" LE */
#define FIPS_LAYOUT_VERSION   4u
#define FIPS_HDR_SIZE         4096u
#define FIPS_RING_CTL_SIZE    256u
#define FIPS_CONSUMER_SIZE    256u
#define FIPS_POS_SIZE         32u
#define FIPS_REC_HDR_SIZE     24u
#define FIPS_REC_ALIGN        8u
#define FIPS_NAME_MAX         64u   /* domain/consumer names incl. NUL */
#define FIPS_THREAD_NAME_MAX  32u
#define FIPS_MAX_RINGS_LIMIT  65536u
#define FIPS_MAX_CONSUMERS_LIMIT 64u
#define FIPS_MIN_CAPACITY     4096u
#define FIPS_MAX_CAPACITY     (1u << 30)

/* ring slot states (ctl.state) */
enum { FIPS_RING_FREE = 0, FIPS_RING_ACTIVE = 1, FIPS_RING_CLOSED = 2 };
/* consumer slot states (consumer.state) */
enum { FIPS_CONS_FREE = 0, FIPS_CONS_JOINING = 1, FIPS_CONS_ACTIVE = 2,
       FIPS_CONS_EVICTED = 3, FIPS_CONS_CLOSED = 4 };
/* record flags (high byte of rec.len_flags) */
#define FIPS_REC_PAD    0x01u  /* filler to the end of the buffer; skip */
#define FIPS_REC_TRUNC  0x02u  /* payload was truncated to max_record */
#define FIPS_REC_USER_MASK 0xf0u /* bits 4-7: free for the application */
#define FIPS_REC_LEN_MASK 0x00ffffffu

/* ---- layout (little-endian, fixed width; see docs/ring-format.md) ------ */
struct fips_layout_header {          /* at offset 0, FIPS_HDR_SIZE bytes */
    uint64_t magic;                  /* 0   FIPS_MAGIC */
    uint32_t version;                /* 8   FIPS_LAYOUT_VERSION */
    uint32_t hdr_size;               /* 12  FIPS_HDR_SIZE */
    uint64_t file_size;              /* 16  total bytes of the file */
    uint32_t max_rings;              /* 24 */
    uint32_t max_consumers;          /* 28 */
    uint64_t ring_capacity;          /* 32  data bytes per ring, power of 2 */
    uint32_t max_record;             /* 40  max payload bytes per record */
    uint32_t ready;                  /* 44  1 once initialised (release) */
    uint64_t ring_table_off;         /* 48 */
    uint64_t consumer_table_off;     /* 56 */
    uint64_t pos_table_off;          /* 64 */
    uint64_t data_off;               /* 72 */
    uint64_t created_realtime_ns;    /* 80 */
    uint64_t created_mono_ns;        /* 88 */
    uint64_t grace_ns;               /* 96  consumer eviction grace */
    uint32_t creator_pid;            /* 104 */
    uint32_t flags;                  /* 108 reserved, 0 */
    char     name[FIPS_NAME_MAX];    /* 112 NUL-terminated; equals the file's NAME */
    uint64_t records_no_ring;        /* 176 records dropped because the ring table
                                        was full (atomic add: any thread) */
    uint8_t  pad[FIPS_HDR_SIZE - 184];
};

struct fips_layout_ring {            /* ring table entry, 256 bytes */
    /* line 0: published.  The only line of the entry that a reading
     * consumer polls and the producer writes per record: head.  (A reader
     * also loads `state`, line 3, which changes only at a slot handoff.)
     * (Layout 3 kept the commit counters here: every commit then wrote the
     * line a polling consumer had just read, several times.) */
    uint64_t head;                   /* 0   committed end position (bytes) */
    uint8_t  pad0[64 - 8];
    /* line 1: producer hot, single writer = producer thread; read by
     * monitors, taps, joiners and evicted consumers, not by a reading one */
    uint64_t reserved;               /* 64  claimed end position (>= head) */
    uint64_t claimed_max;            /* 72  highest claim end before `reserved` was last lowered */
    uint64_t records_committed;      /* 80 */
    uint64_t bytes_committed;        /* 88  payload bytes */
    uint64_t records_dropped;        /* 96 */
    uint64_t bytes_dropped;          /* 104 */
    uint64_t last_commit_ns;         /* 112 CLOCK_REALTIME */
    uint64_t full_events;            /* 120 times a record met a full ring */
    /* line 2: producer cold (slow path; high_water_bytes also at every
     * 64th commit when it grew), single writer = producer thread */
    uint64_t floor;                  /* 128 oldest position still kept */
    uint64_t floor_next;             /* 136 where a joining consumer starts (>= floor) */
    uint64_t floor_seq;              /* 144 seq of the record at floor */
    uint64_t high_water_bytes;       /* 152 max (head - floor) observed */
    uint64_t records_truncated;      /* 160 */
    uint64_t evictions;              /* 168 consumers this producer evicted */
    uint64_t blocked_ns;             /* 176 time spent waiting (block mode) */
    uint64_t created_ns;             /* 184 CLOCK_REALTIME of this generation */
    /* line 3: identity; state/generation change by CAS (slot allocation) */
    uint32_t state;                  /* 192 FIPS_RING_* */
    uint32_t generation;             /* 196 bumped each time the slot is reused */
    uint32_t pid;                    /* 200 */
    uint32_t tid;                    /* 204 */
    char     thread_name[FIPS_THREAD_NAME_MAX]; /* 208 */
    uint64_t pidns;                  /* 240 inode of the producer's pid namespace */
    uint64_t closed_ns;              /* 248 CLOCK_REALTIME, 0 while open */
};

struct fips_layout_consumer {        /* consumer table entry, 256 bytes */
    uint32_t state;                  /* 0   FIPS_CONS_*; CAS */
    uint32_t generation;             /* 4   bumped on every (re)registration */
    uint32_t pid;                    /* 8 */
    uint32_t readers;                /* 12  reader threads seen */
    uint64_t heartbeat_mono_ns;      /* 16  CLOCK_MONOTONIC */
    uint64_t registered_ns;          /* 24  CLOCK_REALTIME */
    uint64_t evicted_ns;             /* 32  CLOCK_REALTIME, 0 if never */
    uint32_t evicted_by_ring;        /* 40  ring whose producer evicted it */
    uint32_t resumes;                /* 44  times resumed after a restart */
    uint64_t records_released;       /* 48  all rings */
    uint64_t batches_released;       /* 56 */
    char     name[FIPS_NAME_MAX];    /* 64 */
    uint64_t pidns;                  /* 128 inode of the consumer's pid namespace */
    uint8_t  pad[256 - 136];
};

struct fips_layout_pos {             /* position of (consumer, ring), 32 B */
    uint64_t released;               /* 0  position released up to (bytes) */
    uint64_t released_seq;           /* 8  seq of the next record to release */
    uint64_t records_released;       /* 16 */
    uint64_t lost_seen;              /* 24 drops this consumer saw (rec.lost) */
};

struct fips_layout_record {          /* record header, 24 bytes, 8-aligned */
    uint32_t len_flags;              /* 0  low 24 bits length, high 8 flags;
                                        stride = 24 + align8(len) */
    uint32_t lost;                   /* 4  records dropped just before this one */
    uint64_t seq;                    /* 8  committed index within the ring */
    uint64_t ts_ns;                  /* 16 CLOCK_REALTIME */
};

/* ---- domain ------------------------------------------------------------ */
typedef struct fips_domain fips_domain;

typedef struct fips_domain_opts {
    uint32_t max_rings;          /* default 256 */
    uint32_t max_consumers;      /* default 16 */
    uint64_t ring_capacity;      /* bytes, power of two; default 1 MiB */
    uint32_t max_record;         /* default 4096 */
    uint64_t grace_ns;           /* eviction grace; default 5 s */
    uint32_t mode;               /* file mode; default 0640 */
    int64_t  gid;                /* -1: keep; else fchown group */
    int      block_us;           /* >0: bounded blocking on full (µs); 0: drop */
    int      create;             /* 1: create if absent; 2: must create (EXCL) */
    int      any_owner;          /* accept a file owned by another uid */
} fips_domain_opts;

void fips_domain_opts_init(fips_domain_opts *o);

/* Directory holding domains: dir if non-NULL, else $FIPS_SHM_DIR, else /dev/shm. */
const char *fips_shm_dir(const char *dir);

/* Open (or create) a domain for producing/consuming: read-write mapping. */
int fips_domain_open(fips_domain **out, const char *shm_dir, const char *name,
                     const fips_domain_opts *opts);
/* Same, writing a one-line reason naming the file into errbuf on error. */
int fips_domain_open_err(fips_domain **out, const char *shm_dir, const char *name,
                         const fips_domain_opts *opts, char *errbuf, size_t errlen);
/* Closes the calling thread's ring in this domain and drops the handle;
 * other threads' rings close when those threads exit. */
int fips_domain_close(fips_domain *d);
/* Remove the domain file (mapped users keep their mapping). */
int fips_domain_unlink(const char *shm_dir, const char *name);
/* The validated private copy of the header (never the live mapping, which
 * the file's owner could change under us). */
const struct fips_layout_header *fips_domain_header(const fips_domain *d);

/* Truncation.  A domain file that shrinks under a mapping would kill every
 * process touching the lost pages with SIGBUS -- the IPS and the monitors
 * included, whoever truncated it.  libfips installs a SIGBUS handler (once,
 * chaining to the previous one for faults elsewhere) that maps zero pages
 * over the lost part of any of its mappings; from then on every call on that
 * domain returns -FIPS_ETRUNC, and reads of it see zeros instead of crashing.
 * Writable descriptors are not kept after mapping (where the kernel can
 * allocate ring pages without one, MADV_POPULATE_WRITE): a process that logs
 * cannot ftruncate the domain through libfips' descriptor after it drops its
 * privileges. */
int fips_domain_truncated(const fips_domain *d);

/* ---- producer: one ring per thread, created on first use ---------------- */
typedef struct fips_slot {
    void     *data;      /* where to write up to `len` bytes */
    uint32_t  len;
    uint32_t  ring;      /* ring index */
    uint64_t  pos;       /* private */
    uint64_t  next;      /* private */
} fips_slot;

/* Claim space for a record of len bytes in the calling thread's ring.
 * Returns 0 and fills c, or -FIPS_EFULL (dropped and counted), -FIPS_ETOOBIG,
 * -FIPS_ENORING.  Must be followed by fips_commit() on the same thread. */
int fips_claim(fips_domain *d, uint32_t len, fips_slot *c);
/* Publish a claimed record; len may shrink (the rest of the claim is given
 * back).  flags: FIPS_REC_TRUNC and/or FIPS_REC_USER_MASK bits.  ts_ns 0 = now. */
void fips_commit(fips_domain *d, fips_slot *c, uint32_t len, uint32_t flags,
                 uint64_t ts_ns);
/* claim + memcpy + commit.  Returns 0, -FIPS_EFULL, -FIPS_ETOOBIG, ... */
int fips_log(fips_domain *d, const void *buf, uint32_t len);
/* Like fips_log, but a too-long record is truncated, flagged and counted:
 * returns 1 when it truncated, 0 when logged whole, or a negative error. */
int fips_log_trunc(fips_domain *d, const void *buf, size_t len, uint64_t ts_ns);
/* Log n records with one commit (one release store).  Returns the number
 * logged (the rest were dropped and counted) or a negative error. */
int fips_log_batch(fips_domain *d, const void *const *bufs, const uint32_t *lens,
                   uint32_t n);
/* The calling thread's ring index in d (creating it), or negative error. */
int fips_producer_ring(fips_domain *d);
/* Close the calling thread's ring now (it is also closed at thread exit). */
void fips_producer_close(fips_domain *d);
/* Count one record of len bytes as dropped in the calling thread's ring
 * without logging it (e.g. a syslog(3) call from a signal handler that
 * interrupted another).  Safe to call from a signal handler that interrupted
 * a fips_log*() / fips_claim() of the same thread: a record logged from
 * inside one of those calls is dropped and counted this way too, instead of
 * corrupting the ring. */
void fips_drop(fips_domain *d, uint32_t len);
/* Set the name shown for the calling thread's ring (default: comm). */
void fips_producer_set_name(fips_domain *d, const char *name);

/* ---- consumer ------------------------------------------------------------ */
typedef struct fips_consumer fips_consumer;

typedef struct fips_batch {
    uint32_t ring;
    uint32_t count;        /* records in the batch (pads not counted) */
    uint64_t start;        /* private: positions in the ring */
    uint64_t end;
    uint64_t first_seq;
    uint64_t next_seq;     /* seq after the last record */
    uint64_t lost;         /* sum of rec.lost within the batch */
    uint64_t cursor;       /* private: iteration position */
    const uint8_t *base;   /* private */
    uint64_t mask;         /* private */
} fips_batch;

typedef struct fips_record {
    const void *data;      /* zero-copy into the ring; valid until release */
    uint32_t len;
    uint32_t flags;
    uint32_t lost;
    uint64_t seq;
    uint64_t ts_ns;
} fips_record;

/* Register (or resume) the consumer `name`.  If an ACTIVE entry with that
 * name belongs to a live process other than ours: -FIPS_EBUSY.  If it belongs
 * to a dead process (restart), resume from its released positions.  A new
 * consumer starts at every ring's floor (the oldest record still kept). */
int fips_consumer_open(fips_consumer **out, fips_domain *d, const char *name);
/* Unregister (state CLOSED): producers stop waiting for this consumer. */
int fips_consumer_close(fips_consumer *c);
/* Detach without unregistering, as a crash would (for resume tests). */
int fips_consumer_detach(fips_consumer *c);
/* Claim a batch of 1..max records from the next ring that has data.
 * Thread-safe: several reader threads may call it on one consumer.
 * Returns 0, -FIPS_EAGAIN (nothing), -FIPS_EEVICTED, -FIPS_ECORRUPT. */
int fips_consumer_read(fips_consumer *c, fips_batch *b, uint32_t max);
/* Iterate a batch: returns 1 and fills r, or 0 at the end. */
int fips_batch_next(fips_batch *b, fips_record *r);
/* Release a batch.  In order: one CAS, no lock.  Out of order: queued.
 * Returns 0 (released), 1 (queued: another reader thread of this consumer
 * still holds an earlier batch of the ring; this one takes effect when that
 * one is released, and is undone with it if the consumer is evicted first:
 * a rejoin then counts its records lost or hands them out again), or, if
 * this consumer was evicted while it held the batch
 * (a dead or stalled consumer is evicted so that it cannot stall logging):
 *   -FIPS_EEVICTED  the batch's records were intact until now; the position
 *                   is no longer ours to move.  Open the consumer again by
 *                   name to rejoin (records overwritten meanwhile are counted
 *                   in lost_seen).
 *   -FIPS_ETORN     the producer may have overwritten the batch while it was
 *                   read: treat every record of it as garbage, then rejoin.
 * Check the result before acting on the records. */
int fips_consumer_release(fips_consumer *c, const fips_batch *b);
/* Evict consumer `index` of generation `generation` now, as a producer does
 * once the heartbeat of the consumer holding a full ring is older than the
 * grace: an operator's decision for a consumer that is stuck but still
 * heartbeats.  Producers stop waiting for it at their next refresh; the
 * consumer's next read says -FIPS_EEVICTED, its release of a batch it held
 * -FIPS_EEVICTED or -FIPS_ETORN, and a rejoin by name counts what it missed.
 * `generation` is the one the caller saw (fips_consumer_stat): an entry that
 * left and was taken by a new consumer meanwhile is not evicted in its place.
 * Needs a domain opened for writing (create 0 attaches without creating).
 * Returns 0, -ESRCH (that consumer is no longer ACTIVE with that generation),
 * -EINVAL (no such index), -EACCES (domain not writable), -FIPS_ETRUNC. */
int fips_consumer_evict(fips_domain *d, uint32_t index, uint32_t generation);
/* evicted_by_ring of a consumer evicted by fips_consumer_evict (no ring did) */
#define FIPS_EVICTED_BY_OPERATOR UINT32_MAX
/* Update the heartbeat (read/release do it too, at most every 100 ms). */
void fips_consumer_heartbeat(fips_consumer *c);
int fips_consumer_index(const fips_consumer *c);

/* ---- monitor: read-only (PROT_READ) attach ------------------------------ */
typedef struct fips_monitor fips_monitor;

typedef struct fips_ring_stat {
    uint32_t index, state, generation, pid, tid;
    char     thread_name[FIPS_THREAD_NAME_MAX];
    uint64_t head, reserved, floor, floor_seq;
    uint64_t records_committed, bytes_committed;
    uint64_t records_dropped, bytes_dropped, full_events;
    uint64_t high_water_bytes, records_truncated, evictions, blocked_ns;
    uint64_t last_commit_ns, created_ns, closed_ns;
} fips_ring_stat;

typedef struct fips_consumer_stat {
    uint32_t index, state, generation, pid, readers, evicted_by_ring, resumes;
    char     name[FIPS_NAME_MAX];
    uint64_t heartbeat_mono_ns, registered_ns, evicted_ns;
    uint64_t records_released, batches_released;
} fips_consumer_stat;

typedef struct fips_pos_stat {
    uint64_t released, released_seq, records_released, lost_seen;
} fips_pos_stat;

typedef struct fips_snapshot {
    uint64_t taken_realtime_ns, taken_mono_ns;
    uint32_t n_rings;       /* = max_rings: every slot, FREE ones too */
    uint32_t n_consumers;   /* = max_consumers */
    fips_ring_stat *rings;          /* caller-provided, max_rings entries */
    fips_consumer_stat *consumers;  /* caller-provided, max_consumers */
    fips_pos_stat *pos;             /* caller-provided, consumers*rings, [c][r] */
} fips_snapshot;

/* Attach read-only.  Validates magic, version, sizes, offsets and owner.
 * On error, if errbuf is given, writes a one-line reason naming the file. */
int fips_monitor_open(fips_monitor **out, const char *shm_dir, const char *name,
                      int any_owner, char *errbuf, size_t errlen);
/* Same, on a path. */
int fips_monitor_open_path(fips_monitor **out, const char *path, int any_owner,
                           char *errbuf, size_t errlen);
int fips_monitor_close(fips_monitor *m);
/* The validated private copy of the header. */
const struct fips_layout_header *fips_monitor_header(const fips_monitor *m);
/* Start of the read-only mapping (tests prove writes through it fault). */
const void *fips_monitor_mapping(const fips_monitor *m);
/* Every position and counter of the domain in one call. */
int fips_monitor_snapshot(fips_monitor *m, fips_snapshot *s);
/* The header's records_no_ring now (records dropped with no ring to take
 * them), into *out: 0, or -FIPS_ETRUNC if the domain was truncated. */
int fips_monitor_no_ring(fips_monitor *m, uint64_t *out);
/* Copy up to max newest records of ring (oldest first) into buf (records
 * laid out as fips_layout_record + payload, 8-aligned).  Records the
 * producer lapped while copying are discarded; *lapped counts them.
 * Returns the number of records copied or a negative error. */
int fips_monitor_tap(fips_monitor *m, uint32_t ring, uint32_t max, void *buf,
                     size_t buflen, size_t *used, uint32_t *lapped);

/* Validate a whole file image in memory (used by the fuzz tests). */
int fips_validate_header(const void *hdr, size_t file_size, char *errbuf,
                         size_t errlen);

/* Time helpers (CLOCK_REALTIME / CLOCK_MONOTONIC in ns). */
uint64_t fips_now_ns(void);
uint64_t fips_mono_ns(void);

#ifdef __cplusplus
}
#endif
#endif
