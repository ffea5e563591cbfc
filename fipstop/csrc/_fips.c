/*
 * fipstop._fips — CPython binding of libfips (fips.h).
 *
 * Multi-phase initialisation (PEP 489), all types are heap types created with
 * PyType_FromModuleAndSpec and kept in the module state; there is no global
 * PyObject*.  Every type is final (no Py_TPFLAGS_BASETYPE), so
 * PyType_GetModuleState(Py_TYPE(self)) always finds the state.
 *
 * Objects and what they keep alive:
 *
 *   Record ──> Batch ──> Consumer ──> Domain        Producer ──> Domain
 *   BatchIter ──> Batch                             Monitor (alone)
 *
 * Zero-copy payloads.  A Record exports its payload (a span of the shared
 * ring) through the buffer protocol; Record.data is memoryview(record).
 * Every exported buffer "pins" the Domain: Domain.close() with pinned
 * buffers closes the consumers and the calling thread's ring at once but
 * defers unmapping until the last buffer is released, so a stale memoryview
 * can show overwritten data but can never touch an unmapped page.  After the
 * batch is released the producer may overwrite the bytes a view shows: do
 * not use record views after Consumer.release(batch).  A released batch
 * refuses further iteration and new views.
 *
 * The GIL is held everywhere except around calls that can sleep: opening and
 * unlinking files, and logging in a domain opened with block_us > 0 (the
 * domain is pinned for the duration so close() cannot unmap under it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "fips.h"
#include "fips_bindq_fmt.c" /* BIND's native query records: format_bind_query() */

/* ------------------------------------------------------------------------ */
/* module state                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject *FipsError;
    PyTypeObject *DomainType;
    PyTypeObject *ProducerType;
    PyTypeObject *ConsumerType;
    PyTypeObject *BatchType;
    PyTypeObject *BatchIterType;
    PyTypeObject *RecordType;
    PyTypeObject *MonitorType;
    PyTypeObject *HeaderType;
} fips_state;

static inline fips_state *
state_of_type(PyTypeObject *tp)
{
    return (fips_state *)PyType_GetModuleState(tp);
}

static inline fips_state *
state_of(PyObject *self)
{
    return state_of_type(Py_TYPE(self));
}

/* Raise FipsError(message) with .code = |rc|.  msg NULL: fips_strerror(rc).
 * prefix (may be NULL) is prepended as "prefix: ". */
static PyObject *
raise_fips(fips_state *st, int rc, const char *prefix, const char *msg)
{
    int code = rc < 0 ? -rc : rc;
    if (msg == NULL || msg[0] == '\0')
        msg = fips_strerror(code);
    PyObject *text;
    if (prefix != NULL && prefix[0] != '\0') {
        size_t lp = strlen(prefix), lm = strlen(msg);
        char *buf = PyMem_Malloc(lp + lm + 3);
        if (buf == NULL)
            return PyErr_NoMemory();
        memcpy(buf, prefix, lp);
        memcpy(buf + lp, ": ", 2);
        memcpy(buf + lp + 2, msg, lm + 1);
        text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)(lp + lm + 2), "backslashreplace");
        PyMem_Free(buf);
    }
    else {
        text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "backslashreplace");
    }
    if (text == NULL)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(st->FipsError, text);
    Py_DECREF(text);
    if (exc == NULL)
        return NULL;
    PyObject *c = PyLong_FromLong(code);
    if (c == NULL || PyObject_SetAttrString(exc, "code", c) < 0) {
        Py_XDECREF(c);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(c);
    PyErr_SetObject(st->FipsError, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *
raise_closed(fips_state *st, const char *what)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%s is closed", what);
    return raise_fips(st, -FIPS_ECLOSED, NULL, msg);
}

/* Decode a fixed-size, possibly unterminated char field from shared memory. */
static PyObject *
decode_field(const char *p, size_t max)
{
    size_t n = strnlen(p, max);
    return PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "backslashreplace");
}

/* Optional path argument: None -> NULL, else PyUnicode_FSConverter bytes. */
static int
opt_path(PyObject *o, PyObject **out)
{
    *out = NULL;
    if (o == NULL || o == Py_None)
        return 1;
    if (!PyUnicode_FSConverter(o, out))
        return 0;
    return 1;
}

static inline const char *
path_str(PyObject *bytes)
{
    return bytes ? PyBytes_AS_STRING(bytes) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Header (structseq)                                                        */
/* ------------------------------------------------------------------------ */

static PyStructSequence_Field header_fields[] = {
    {"name", "domain name"},
    {"version", "layout version"},
    {"hdr_size", "header size in bytes"},
    {"file_size", "total bytes of the domain file"},
    {"max_rings", "ring table entries"},
    {"max_consumers", "consumer table entries"},
    {"ring_capacity", "data bytes per ring (power of two)"},
    {"max_record", "max payload bytes per record"},
    {"ready", "1 once the creator finished initialising"},
    {"ring_table_off", "offset of the ring table"},
    {"consumer_table_off", "offset of the consumer table"},
    {"pos_table_off", "offset of the position table"},
    {"data_off", "offset of the ring data"},
    {"created_realtime_ns", "creation time, CLOCK_REALTIME ns"},
    {"created_mono_ns", "creation time, CLOCK_MONOTONIC ns"},
    {"grace_ns", "consumer eviction grace in ns"},
    {"creator_pid", "pid of the creating process"},
    {"flags", "reserved flags"},
    {NULL, NULL},
};

static PyStructSequence_Desc header_desc = {
    "fipstop._fips.Header",
    "Header of a FIPS domain (a copy; sizes in bytes, times in ns).",
    header_fields,
    18,
};

static PyObject *
header_new(fips_state *st, const struct fips_layout_header *src)
{
    struct fips_layout_header h;
    /* one copy, so the fields come from one moment */
    memcpy(&h, src, offsetof(struct fips_layout_header, pad));
    PyObject *t = PyStructSequence_New(st->HeaderType);
    if (t == NULL)
        return NULL;
    PyObject *v[18];
    v[0] = decode_field(h.name, sizeof h.name);
    v[1] = PyLong_FromUnsignedLong(h.version);
    v[2] = PyLong_FromUnsignedLong(h.hdr_size);
    v[3] = PyLong_FromUnsignedLongLong(h.file_size);
    v[4] = PyLong_FromUnsignedLong(h.max_rings);
    v[5] = PyLong_FromUnsignedLong(h.max_consumers);
    v[6] = PyLong_FromUnsignedLongLong(h.ring_capacity);
    v[7] = PyLong_FromUnsignedLong(h.max_record);
    v[8] = PyLong_FromUnsignedLong(h.ready);
    v[9] = PyLong_FromUnsignedLongLong(h.ring_table_off);
    v[10] = PyLong_FromUnsignedLongLong(h.consumer_table_off);
    v[11] = PyLong_FromUnsignedLongLong(h.pos_table_off);
    v[12] = PyLong_FromUnsignedLongLong(h.data_off);
    v[13] = PyLong_FromUnsignedLongLong(h.created_realtime_ns);
    v[14] = PyLong_FromUnsignedLongLong(h.created_mono_ns);
    v[15] = PyLong_FromUnsignedLongLong(h.grace_ns);
    v[16] = PyLong_FromUnsignedLong(h.creator_pid);
    v[17] = PyLong_FromUnsignedLong(h.flags);
    int bad = 0;
    for (int i = 0; i < 18; i++) {
        if (v[i] == NULL)
            bad = 1;
    }
    if (bad) {
        for (int i = 0; i < 18; i++)
            Py_XDECREF(v[i]);
        Py_DECREF(t);
        return NULL;
    }
    for (int i = 0; i < 18; i++)
        PyStructSequence_SET_ITEM(t, i, v[i]); /* steals */
    return t;
}

/* ------------------------------------------------------------------------ */
/* Domain                                                                    */
/* ------------------------------------------------------------------------ */

struct ConsumerObject;

typedef struct {
    PyObject_HEAD
    fips_domain *d;         /* NULL once really closed */
    Py_ssize_t pins;        /* exported record buffers + blocking log calls */
    int closing;            /* close() was called */
    int block_us;
    uint32_t max_record;
    struct ConsumerObject *consumers; /* borrowed, intrusive list */
    PyObject *weakreflist;
} DomainObject;

typedef struct ConsumerObject {
    PyObject_HEAD
    DomainObject *dom;
    fips_consumer *c;       /* NULL once closed/detached */
    struct ConsumerObject *next, *prev;
    PyObject *name;
} ConsumerObject;

static inline int
domain_live(DomainObject *dom)
{
    return dom->d != NULL && !dom->closing;
}

static void consumer_unlink_list(ConsumerObject *c);

static void
domain_finish_close(DomainObject *dom)
{
    if (dom->d != NULL && dom->pins == 0) {
        fips_domain *d = dom->d;
        dom->d = NULL;
        fips_domain_close(d);
    }
}

static void
domain_do_close(DomainObject *dom)
{
    if (dom->d == NULL)
        return;
    if (!dom->closing) {
        dom->closing = 1;
        while (dom->consumers != NULL) {
            ConsumerObject *c = dom->consumers;
            consumer_unlink_list(c);
            if (c->c != NULL) {
                fips_consumer *fc = c->c;
                c->c = NULL;
                fips_consumer_close(fc);
            }
        }
        if (dom->pins > 0)
            fips_producer_close(dom->d); /* the rest waits for the pins */
    }
    domain_finish_close(dom);
}

static inline void
domain_pin(DomainObject *dom)
{
    dom->pins++;
}

static inline void
domain_unpin(DomainObject *dom)
{
    if (--dom->pins == 0 && dom->closing)
        domain_finish_close(dom);
}

/* Raise with libfips's one-line reason (it names the file). */
static PyObject *
domain_open_error(fips_state *st, int rc, const char *dir, const char *name, const char *reason)
{
    if (reason[0] != '\0')
        return raise_fips(st, rc, NULL, reason);
    char where[PATH_MAX + 96];
    const char *sd = fips_shm_dir(dir);
    snprintf(where, sizeof where, "%s/fips.%s", sd ? sd : "?", name);
    return raise_fips(st, rc, where, NULL);
}

static PyObject *
Domain_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "shm_dir", "create", "max_rings",
                             "max_consumers", "ring_capacity", "max_record",
                             "grace_s", "mode", "gid", "block_us", "any_owner",
                             NULL};
    fips_state *st = state_of_type(type);
    const char *name;
    PyObject *dir_o = Py_None, *dir_b = NULL;
    int create = 1, mode = 0640, block_us = 0, any_owner = 0;
    long long max_rings = 256, max_consumers = 16, ring_capacity = 1 << 20,
              max_record = 4096, gid = -1;
    double grace_s = 5.0;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|O$iLLLLdiLip", kwlist,
                                     &name, &dir_o, &create, &max_rings,
                                     &max_consumers, &ring_capacity,
                                     &max_record, &grace_s, &mode, &gid,
                                     &block_us, &any_owner))
        return NULL;
    if (create < 0 || create > 2) {
        PyErr_SetString(PyExc_ValueError, "create must be False, True or 2 (must create)");
        return NULL;
    }
    if (max_rings <= 0 || max_rings > UINT32_MAX || max_consumers <= 0 ||
        max_consumers > UINT32_MAX || max_record <= 0 || max_record > UINT32_MAX ||
        ring_capacity <= 0) {
        PyErr_SetString(PyExc_ValueError,
                        "max_rings, max_consumers, ring_capacity and max_record must be positive 32-bit values");
        return NULL;
    }
    if (!(grace_s >= 0.0) || !isfinite(grace_s) || grace_s > 9.0e9) {
        PyErr_SetString(PyExc_ValueError, "grace_s must be a finite number >= 0");
        return NULL;
    }
    if (mode < 0 || mode > 07777) {
        PyErr_SetString(PyExc_ValueError, "mode must be a permission mode (0..0o7777)");
        return NULL;
    }
    if (gid < -1 || gid > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "gid must be -1 or a group id");
        return NULL;
    }
    if (block_us < 0) {
        PyErr_SetString(PyExc_ValueError, "block_us must be >= 0");
        return NULL;
    }
    if (!opt_path(dir_o, &dir_b))
        return NULL;

    fips_domain_opts o;
    fips_domain_opts_init(&o);
    o.max_rings = (uint32_t)max_rings;
    o.max_consumers = (uint32_t)max_consumers;
    o.ring_capacity = (uint64_t)ring_capacity;
    o.max_record = (uint32_t)max_record;
    o.grace_ns = (uint64_t)(grace_s * 1e9);
    o.mode = (uint32_t)mode;
    o.gid = gid;
    o.block_us = block_us;
    o.create = create;
    o.any_owner = any_owner;

    fips_domain *d = NULL;
    int rc;
    char reason[512];
    reason[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    rc = fips_domain_open_err(&d, path_str(dir_b), name, &o, reason, sizeof reason);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyObject *r = domain_open_error(st, rc, path_str(dir_b), name, reason);
        Py_XDECREF(dir_b);
        return r;
    }
    Py_XDECREF(dir_b);

    DomainObject *self = (DomainObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        fips_domain_close(d);
        return NULL;
    }
    self->d = d;
    self->pins = 0;
    self->closing = 0;
    self->block_us = block_us;
    self->max_record = fips_domain_header(d)->max_record;
    self->consumers = NULL;
    self->weakreflist = NULL;
    return (PyObject *)self;
}

static int
Domain_traverse(DomainObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void
Domain_dealloc(DomainObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* consumers hold a reference to us, so none can be left; pins come with
     * references too. */
    self->pins = 0;
    domain_do_close(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
Domain_close(DomainObject *self, PyObject *Py_UNUSED(ignored))
{
    domain_do_close(self);
    Py_RETURN_NONE;
}

static PyObject *
Domain_enter(DomainObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!domain_live(self))
        return raise_closed(state_of((PyObject *)self), "Domain");
    return Py_NewRef(self);
}

static PyObject *
Domain_exit(DomainObject *self, PyObject *Py_UNUSED(args))
{
    domain_do_close(self);
    Py_RETURN_NONE;
}

static PyObject *
Domain_unlink(PyTypeObject *cls, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "shm_dir", NULL};
    const char *name;
    PyObject *dir_o = Py_None, *dir_b = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|O", kwlist, &name, &dir_o))
        return NULL;
    if (!opt_path(dir_o, &dir_b))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fips_domain_unlink(path_str(dir_b), name);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        char where[PATH_MAX + 96];
        const char *dir = fips_shm_dir(path_str(dir_b));
        snprintf(where, sizeof where, "%s/fips.%s", dir ? dir : "?", name);
        Py_XDECREF(dir_b);
        return raise_fips(state_of_type(cls), rc, where, NULL);
    }
    Py_XDECREF(dir_b);
    Py_RETURN_NONE;
}

/* Domain.evict_consumer(index, generation): an operator's eviction (see
 * fips_consumer_evict); the dashboard's evict action on a consumer row. */
static PyObject *
Domain_evict_consumer(DomainObject *self, PyObject *args)
{
    fips_state *st = state_of((PyObject *)self);
    unsigned long long index, generation;
    if (!PyArg_ParseTuple(args, "KK", &index, &generation))
        return NULL;
    if (!domain_live(self))
        return raise_closed(st, "Domain");
    if (index > UINT32_MAX || generation > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "index and generation must be 32-bit values");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fips_consumer_evict(self->d, (uint32_t)index, (uint32_t)generation);
    Py_END_ALLOW_THREADS
    if (rc == -ESRCH)
        return raise_fips(st, rc, NULL, "that consumer is no longer registered with that generation "
                                        "(it left, was evicted or was replaced)");
    if (rc == -EINVAL)
        return raise_fips(st, rc, NULL, "no consumer entry with that index");
    if (rc < 0)
        return raise_fips(st, rc, "evict", NULL);
    Py_RETURN_NONE;
}

static PyObject *
Domain_get_header(DomainObject *self, void *Py_UNUSED(closure))
{
    fips_state *st = state_of((PyObject *)self);
    if (self->d == NULL)
        return raise_closed(st, "Domain");
    return header_new(st, fips_domain_header(self->d));
}

static PyObject *
Domain_get_closed(DomainObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(!domain_live(self));
}

#define DOMAIN_HDR_GETTER(field, conv)                                        \
    static PyObject *Domain_get_##field(DomainObject *self, void *c)          \
    {                                                                         \
        (void)c;                                                              \
        if (self->d == NULL)                                                  \
            return raise_closed(state_of((PyObject *)self), "Domain");        \
        return conv(fips_domain_header(self->d)->field);                      \
    }
DOMAIN_HDR_GETTER(max_rings, PyLong_FromUnsignedLong)
DOMAIN_HDR_GETTER(max_consumers, PyLong_FromUnsignedLong)
DOMAIN_HDR_GETTER(ring_capacity, PyLong_FromUnsignedLongLong)
DOMAIN_HDR_GETTER(max_record, PyLong_FromUnsignedLong)

static PyObject *
Domain_get_name(DomainObject *self, void *Py_UNUSED(closure))
{
    if (self->d == NULL)
        return raise_closed(state_of((PyObject *)self), "Domain");
    const struct fips_layout_header *h = fips_domain_header(self->d);
    return decode_field(h->name, sizeof h->name);
}

static PyObject *
Domain_repr(DomainObject *self)
{
    if (self->d == NULL)
        return PyUnicode_FromString("<fipstop._fips.Domain closed>");
    const struct fips_layout_header *h = fips_domain_header(self->d);
    PyObject *name = decode_field(h->name, sizeof h->name);
    if (name == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<fipstop._fips.Domain %R%s>", name,
                                       self->closing ? " closing" : "");
    Py_DECREF(name);
    return r;
}

static PyMethodDef Domain_methods[] = {
    {"close", (PyCFunction)Domain_close, METH_NOARGS,
     "Close consumers opened on this domain, this thread's ring, and unmap\n"
     "(deferred while record views are alive). Idempotent."},
    {"__enter__", (PyCFunction)Domain_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Domain_exit, METH_VARARGS, NULL},
    {"evict_consumer", (PyCFunction)Domain_evict_consumer, METH_VARARGS,
     "evict_consumer(index, generation)\n--\n\nEvict consumer `index` if it is still ACTIVE with `generation`\n"
     "(an operator's decision; see fips_consumer_evict). Raises FipsError\n"
     "(code ESRCH) if it left or was replaced meanwhile."},
    {"unlink", (PyCFunction)(void (*)(void))Domain_unlink,
     METH_CLASS | METH_VARARGS | METH_KEYWORDS,
     "unlink(name, shm_dir=None)\n--\n\nRemove the domain file (mappings stay valid)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Domain_getset[] = {
    {"header", (getter)Domain_get_header, NULL, "Header (a copy).", NULL},
    {"name", (getter)Domain_get_name, NULL, "Domain name.", NULL},
    {"max_rings", (getter)Domain_get_max_rings, NULL, NULL, NULL},
    {"max_consumers", (getter)Domain_get_max_consumers, NULL, NULL, NULL},
    {"ring_capacity", (getter)Domain_get_ring_capacity, NULL, NULL, NULL},
    {"max_record", (getter)Domain_get_max_record, NULL, NULL, NULL},
    {"closed", (getter)Domain_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Domain_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(DomainObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Domain_slots[] = {
    {Py_tp_doc,
     "Domain(name, shm_dir=None, *, create=True, max_rings=256, max_consumers=16,\n"
     "       ring_capacity=1<<20, max_record=4096, grace_s=5.0, mode=0o640,\n"
     "       gid=-1, block_us=0, any_owner=False)\n--\n\n"
     "A FIPS domain opened for producing and consuming (read-write mapping).\n"
     "create: False = must exist, True = create if absent, 2 = must create."},
    {Py_tp_new, Domain_new},
    {Py_tp_dealloc, Domain_dealloc},
    {Py_tp_traverse, Domain_traverse},
    {Py_tp_methods, Domain_methods},
    {Py_tp_getset, Domain_getset},
    {Py_tp_members, Domain_members},
    {Py_tp_repr, Domain_repr},
    {0, NULL},
};

static PyType_Spec Domain_spec = {
    "fipstop._fips.Domain", sizeof(DomainObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Domain_slots,
};

/* ------------------------------------------------------------------------ */
/* Producer                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    DomainObject *dom;
    int closed;
} ProducerObject;

static PyObject *
Producer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"domain", NULL};
    fips_state *st = state_of_type(type);
    PyObject *dom;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, st->DomainType, &dom))
        return NULL;
    if (!domain_live((DomainObject *)dom))
        return raise_closed(st, "Domain");
    ProducerObject *self = (ProducerObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->dom = (DomainObject *)Py_NewRef(dom);
    self->closed = 0;
    return (PyObject *)self;
}

static int
Producer_traverse(ProducerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->dom);
    return 0;
}

static int
Producer_clear(ProducerObject *self)
{
    Py_CLEAR(self->dom);
    return 0;
}

static void
Producer_dealloc(ProducerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Producer_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static inline int
producer_check(ProducerObject *self)
{
    if (self->closed || self->dom == NULL || !domain_live(self->dom)) {
        raise_closed(state_of((PyObject *)self), self->closed ? "Producer" : "Domain");
        return -1;
    }
    return 0;
}

static PyObject *
too_big(ProducerObject *self, Py_ssize_t len)
{
    char msg[128];
    snprintf(msg, sizeof msg, "record of %zd bytes exceeds max_record %u", len,
             (unsigned)self->dom->max_record);
    return raise_fips(state_of((PyObject *)self), -FIPS_ETOOBIG, NULL, msg);
}

/* Errors of the calling thread's ring, with the libfips limits spelled out. */
static PyObject *
producer_error(ProducerObject *self, int rc)
{
    fips_state *st = state_of((PyObject *)self);
    if (rc == -EMFILE)
        return raise_fips(st, rc, NULL,
                          "this thread already has rings in the maximum number of domains "
                          "(libfips keeps 4 per thread; close a Producer or its Domain from this thread)");
    if (rc == -FIPS_ENORING)
        return raise_fips(st, rc, NULL, "ring table full: no free ring slot for this thread (max_rings)");
    if (rc == -ENOSPC)
        return raise_fips(st, rc, NULL, "no space left in the shm dir to back a new ring");
    return raise_fips(st, rc, NULL, NULL);
}

static PyObject *
Producer_log(ProducerObject *self, PyObject *data)
{
    if (producer_check(self) < 0)
        return NULL;
    const char *buf;
    Py_ssize_t len;
    Py_buffer view;
    int have_view = 0;
    if (PyBytes_Check(data)) {
        buf = PyBytes_AS_STRING(data);
        len = PyBytes_GET_SIZE(data);
    }
    else if (PyUnicode_Check(data)) {
        buf = PyUnicode_AsUTF8AndSize(data, &len);
        if (buf == NULL)
            return NULL;
    }
    else {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Format(PyExc_TypeError, "log() expects bytes, str or a bytes-like object, not %.100s",
                         Py_TYPE(data)->tp_name);
            return NULL;
        }
        have_view = 1;
        buf = view.buf;
        len = view.len;
    }
    if ((uint64_t)len > self->dom->max_record) {
        if (have_view)
            PyBuffer_Release(&view);
        return too_big(self, len);
    }
    int rc;
    DomainObject *dom = self->dom;
    if (dom->block_us > 0) {
        domain_pin(dom);
        Py_BEGIN_ALLOW_THREADS
        rc = fips_log(dom->d, buf, (uint32_t)len);
        Py_END_ALLOW_THREADS
        domain_unpin(dom);
    }
    else {
        rc = fips_log(dom->d, buf, (uint32_t)len);
    }
    if (have_view)
        PyBuffer_Release(&view);
    if (rc == 0)
        Py_RETURN_TRUE;
    if (rc == -FIPS_EFULL)
        Py_RETURN_FALSE;
    if (rc == -FIPS_ETOOBIG)
        return too_big(self, len);
    return producer_error(self, rc);
}

#define BATCH_STACK 64

static PyObject *
Producer_log_batch(ProducerObject *self, PyObject *arg)
{
    if (producer_check(self) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(arg, "log_batch() expects a sequence of bytes or str");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        return PyLong_FromLong(0);
    }
    if ((size_t)n > (size_t)INT32_MAX) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "log_batch(): too many records");
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const void *ptr_stack[BATCH_STACK];
    uint32_t len_stack[BATCH_STACK];
    const void **ptrs = ptr_stack;
    uint32_t *lens = len_stack;
    Py_buffer *views = NULL;
    Py_ssize_t nviews = 0;
    PyObject *result = NULL;
    uint32_t maxrec = self->dom->max_record;

    if (n > BATCH_STACK) {
        ptrs = PyMem_Malloc((size_t)n * sizeof *ptrs);
        lens = PyMem_Malloc((size_t)n * sizeof *lens);
        if (ptrs == NULL || lens == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* No Python code runs in this loop (bytes/str/C buffers only) and the
     * GIL is held, so the sequence cannot change under us. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        const char *p;
        Py_ssize_t l;
        if (PyBytes_Check(it)) {
            p = PyBytes_AS_STRING(it);
            l = PyBytes_GET_SIZE(it);
        }
        else if (PyUnicode_Check(it)) {
            p = PyUnicode_AsUTF8AndSize(it, &l);
            if (p == NULL)
                goto done;
        }
        else {
            if (views == NULL) {
                views = PyMem_Calloc((size_t)n, sizeof *views);
                if (views == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
            }
            if (PyObject_GetBuffer(it, &views[nviews], PyBUF_SIMPLE) < 0) {
                PyErr_Format(PyExc_TypeError,
                             "log_batch(): item %zd is %.100s, not bytes, str or bytes-like",
                             i, Py_TYPE(it)->tp_name);
                goto done;
            }
            p = views[nviews].buf;
            l = views[nviews].len;
            nviews++;
        }
        if ((uint64_t)l > maxrec) {
            char msg[160];
            snprintf(msg, sizeof msg, "log_batch(): item %zd of %zd bytes exceeds max_record %u",
                     i, l, (unsigned)maxrec);
            raise_fips(state_of((PyObject *)self), -FIPS_ETOOBIG, NULL, msg);
            goto done;
        }
        ptrs[i] = p;
        lens[i] = (uint32_t)l;
    }
    {
        DomainObject *dom = self->dom;
        int rc;
        if (dom->block_us > 0) {
            domain_pin(dom);
            Py_BEGIN_ALLOW_THREADS
            rc = fips_log_batch(dom->d, ptrs, lens, (uint32_t)n);
            Py_END_ALLOW_THREADS
            domain_unpin(dom);
        }
        else {
            rc = fips_log_batch(dom->d, ptrs, lens, (uint32_t)n);
        }
        if (rc < 0)
            producer_error(self, rc);
        else
            result = PyLong_FromLong(rc);
    }
done:
    for (Py_ssize_t i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    if (ptrs != ptr_stack)
        PyMem_Free(ptrs);
    if (lens != len_stack)
        PyMem_Free(lens);
    Py_DECREF(seq);
    return result;
}

static PyObject *
Producer_get_ring(ProducerObject *self, void *Py_UNUSED(closure))
{
    if (producer_check(self) < 0)
        return NULL;
    int rc = fips_producer_ring(self->dom->d);
    if (rc < 0)
        return producer_error(self, rc);
    return PyLong_FromLong(rc);
}

static PyObject *
Producer_set_name(ProducerObject *self, PyObject *arg)
{
    if (producer_check(self) < 0)
        return NULL;
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "set_name() expects a str");
        return NULL;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &len);
    if (s == NULL)
        return NULL;
    if ((Py_ssize_t)strlen(s) != len) {
        PyErr_SetString(PyExc_ValueError, "set_name(): embedded NUL character");
        return NULL;
    }
    fips_producer_set_name(self->dom->d, s);
    Py_RETURN_NONE;
}

static PyObject *
Producer_close(ProducerObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->closed) {
        self->closed = 1;
        if (self->dom != NULL && domain_live(self->dom))
            fips_producer_close(self->dom->d);
    }
    Py_RETURN_NONE;
}

static PyObject *
Producer_enter(ProducerObject *self, PyObject *Py_UNUSED(ignored))
{
    if (producer_check(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *
Producer_exit(ProducerObject *self, PyObject *Py_UNUSED(args))
{
    return Producer_close(self, NULL);
}

static PyObject *
Producer_get_domain(ProducerObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->dom ? (PyObject *)self->dom : Py_None);
}

static PyObject *
Producer_get_closed(ProducerObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->closed || self->dom == NULL || !domain_live(self->dom));
}

static PyMethodDef Producer_methods[] = {
    {"log", (PyCFunction)Producer_log, METH_O,
     "log(data)\n--\n\nLog one record (bytes, str as UTF-8, or bytes-like) into the calling\n"
     "thread's ring. Returns False if it was dropped (ring full; counted).\n"
     "Raises FipsError (code ETOOBIG) if longer than max_record."},
    {"log_batch", (PyCFunction)Producer_log_batch, METH_O,
     "log_batch(records)\n--\n\nLog a sequence of records with one commit. Returns how many were\n"
     "logged; the rest were dropped and counted."},
    {"set_name", (PyCFunction)Producer_set_name, METH_O,
     "set_name(name)\n--\n\nName shown for the calling thread's ring."},
    {"close", (PyCFunction)Producer_close, METH_NOARGS,
     "Close the calling thread's ring; the producer refuses further use."},
    {"__enter__", (PyCFunction)Producer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Producer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Producer_getset[] = {
    {"ring", (getter)Producer_get_ring, NULL,
     "The calling thread's ring index (created if needed).", NULL},
    {"domain", (getter)Producer_get_domain, NULL, NULL, NULL},
    {"closed", (getter)Producer_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Producer_slots[] = {
    {Py_tp_doc,
     "Producer(domain)\n--\n\n"
     "Logs into the calling thread's own ring of domain (libfips keys rings by\n"
     "thread), so one Producer may be shared by several threads."},
    {Py_tp_new, Producer_new},
    {Py_tp_dealloc, Producer_dealloc},
    {Py_tp_traverse, Producer_traverse},
    {Py_tp_clear, Producer_clear},
    {Py_tp_methods, Producer_methods},
    {Py_tp_getset, Producer_getset},
    {0, NULL},
};

static PyType_Spec Producer_spec = {
    "fipstop._fips.Producer", sizeof(ProducerObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Producer_slots,
};

/* ------------------------------------------------------------------------ */
/* Consumer, Batch, BatchIter, Record                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    ConsumerObject *cons;
    DomainObject *dom;      /* = cons->dom, held directly for the buffers */
    fips_batch b;
    int released;
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *batch;
    fips_batch it;          /* private copy: iterating twice works */
} BatchIterObject;

typedef struct {
    PyObject_HEAD
    BatchObject *batch;
    const uint8_t *data;
    uint32_t len, flags, lost;
    uint64_t seq, ts_ns;
} RecordObject;

static void
consumer_unlink_list(ConsumerObject *c)
{
    DomainObject *dom = c->dom;
    if (dom == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (dom->consumers == c)
        dom->consumers = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

static PyObject *
Consumer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"domain", "name", NULL};
    fips_state *st = state_of_type(type);
    PyObject *dom_o;
    PyObject *name_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!U", kwlist, st->DomainType,
                                     &dom_o, &name_o))
        return NULL;
    DomainObject *dom = (DomainObject *)dom_o;
    if (!domain_live(dom))
        return raise_closed(st, "Domain");
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(name_o, &len);
    if (name == NULL)
        return NULL;
    if ((Py_ssize_t)strlen(name) != len) {
        PyErr_SetString(PyExc_ValueError, "consumer name contains a NUL character");
        return NULL;
    }
    fips_consumer *fc = NULL;
    int rc = fips_consumer_open(&fc, dom->d, name);
    if (rc < 0) {
        char where[FIPS_NAME_MAX + 32];
        snprintf(where, sizeof where, "consumer %.*s", (int)FIPS_NAME_MAX, name);
        return raise_fips(st, rc, where, NULL);
    }
    ConsumerObject *self = (ConsumerObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        fips_consumer_close(fc);
        return NULL;
    }
    self->dom = (DomainObject *)Py_NewRef(dom);
    self->c = fc;
    self->name = Py_NewRef(name_o);
    self->prev = NULL;
    self->next = dom->consumers;
    if (dom->consumers != NULL)
        dom->consumers->prev = self;
    dom->consumers = self;
    return (PyObject *)self;
}

static int
Consumer_traverse(ConsumerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->dom);
    Py_VISIT(self->name);
    return 0;
}

static void
consumer_end(ConsumerObject *self, int detach)
{
    if (self->c == NULL)
        return;
    fips_consumer *fc = self->c;
    self->c = NULL;
    consumer_unlink_list(self);
    if (self->dom != NULL && self->dom->d != NULL) {
        if (detach)
            fips_consumer_detach(fc);
        else
            fips_consumer_close(fc);
    }
}

static int
Consumer_clear(ConsumerObject *self)
{
    consumer_end(self, 0);
    Py_CLEAR(self->dom);
    Py_CLEAR(self->name);
    return 0;
}

static void
Consumer_dealloc(ConsumerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Consumer_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static inline int
consumer_check(ConsumerObject *self)
{
    if (self->c == NULL || self->dom == NULL || !domain_live(self->dom)) {
        raise_closed(state_of((PyObject *)self), "Consumer");
        return -1;
    }
    return 0;
}

static PyObject *
Consumer_read(ConsumerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max", NULL};
    Py_ssize_t max = 256;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n", kwlist, &max))
        return NULL;
    if (max < 1 || max > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "read(): max must be >= 1");
        return NULL;
    }
    if (consumer_check(self) < 0)
        return NULL;
    fips_state *st = state_of((PyObject *)self);
    fips_batch b;
    int rc = fips_consumer_read(self->c, &b, (uint32_t)max);
    if (rc == -FIPS_EAGAIN)
        Py_RETURN_NONE;
    if (rc < 0)
        return raise_fips(st, rc, NULL, NULL);
    BatchObject *batch = PyObject_New(BatchObject, st->BatchType);
    if (batch == NULL) {
        /* keep the consumer moving: give the batch back */
        fips_consumer_release(self->c, &b);
        return NULL;
    }
    batch->cons = (ConsumerObject *)Py_NewRef(self);
    batch->dom = (DomainObject *)Py_NewRef(self->dom);
    batch->b = b;
    batch->released = 0;
    return (PyObject *)batch;
}

static int
batch_release(BatchObject *batch, fips_state *st)
{
    ConsumerObject *cons = batch->cons;
    if (batch->released) {
        PyErr_SetString(PyExc_ValueError, "batch already released");
        return -1;
    }
    if (cons->c == NULL || cons->dom == NULL || !domain_live(cons->dom)) {
        raise_closed(st, "Consumer");
        return -1;
    }
    int rc = fips_consumer_release(cons->c, &batch->b);
    batch->released = 1;
    if (rc < 0) {
        raise_fips(st, rc, NULL, NULL);
        return -1;
    }
    return 0;
}

static PyObject *
Consumer_release(ConsumerObject *self, PyObject *arg)
{
    fips_state *st = state_of((PyObject *)self);
    if (!Py_IS_TYPE(arg, st->BatchType)) {
        PyErr_Format(PyExc_TypeError, "release() expects a Batch, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    BatchObject *batch = (BatchObject *)arg;
    if (batch->cons != self) {
        PyErr_SetString(PyExc_ValueError, "batch was read by another consumer");
        return NULL;
    }
    if (batch_release(batch, st) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Consumer_heartbeat(ConsumerObject *self, PyObject *Py_UNUSED(ignored))
{
    if (consumer_check(self) < 0)
        return NULL;
    fips_consumer_heartbeat(self->c);
    Py_RETURN_NONE;
}

static PyObject *
Consumer_close(ConsumerObject *self, PyObject *Py_UNUSED(ignored))
{
    consumer_end(self, 0);
    Py_RETURN_NONE;
}

static PyObject *
Consumer_detach(ConsumerObject *self, PyObject *Py_UNUSED(ignored))
{
    consumer_end(self, 1);
    Py_RETURN_NONE;
}

static PyObject *
Consumer_enter(ConsumerObject *self, PyObject *Py_UNUSED(ignored))
{
    if (consumer_check(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *
Consumer_exit(ConsumerObject *self, PyObject *Py_UNUSED(args))
{
    consumer_end(self, 0);
    Py_RETURN_NONE;
}

static PyObject *
Consumer_get_index(ConsumerObject *self, void *Py_UNUSED(closure))
{
    if (consumer_check(self) < 0)
        return NULL;
    return PyLong_FromLong(fips_consumer_index(self->c));
}

static PyObject *
Consumer_get_closed(ConsumerObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->c == NULL || self->dom == NULL || !domain_live(self->dom));
}

static PyMethodDef Consumer_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Consumer_read, METH_VARARGS | METH_KEYWORDS,
     "read(max=256)\n--\n\nClaim a batch of up to max records from the next ring with data;\n"
     "None if there is nothing to read."},
    {"release", (PyCFunction)Consumer_release, METH_O,
     "release(batch)\n--\n\nRelease a batch (in or out of order). Its record views must not be\n"
     "used afterwards: the producer may overwrite them.  Raises FipsError(code=EEVICTED) if this\n"
     "consumer was evicted while it held the batch (the records were intact; open the consumer\n"
     "again to rejoin), FipsError(code=ETORN) if the producer may have overwritten the batch\n"
     "meanwhile: discard what was parsed from it.  Check before acting on the records."},
    {"heartbeat", (PyCFunction)Consumer_heartbeat, METH_NOARGS, NULL},
    {"close", (PyCFunction)Consumer_close, METH_NOARGS, "Unregister (state CLOSED)."},
    {"detach", (PyCFunction)Consumer_detach, METH_NOARGS,
     "Detach without unregistering, as a crash would; the name can resume."},
    {"__enter__", (PyCFunction)Consumer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Consumer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Consumer_getset[] = {
    {"index", (getter)Consumer_get_index, NULL, "Consumer table slot.", NULL},
    {"closed", (getter)Consumer_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Consumer_members[] = {
    {"name", T_OBJECT, offsetof(ConsumerObject, name), READONLY, NULL},
    {"domain", T_OBJECT, offsetof(ConsumerObject, dom), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Consumer_slots[] = {
    {Py_tp_doc,
     "Consumer(domain, name)\n--\n\n"
     "Register (or resume) the consumer `name`; it sees every record.\n"
     "Closing the domain closes its consumers."},
    {Py_tp_new, Consumer_new},
    {Py_tp_dealloc, Consumer_dealloc},
    {Py_tp_traverse, Consumer_traverse},
    {Py_tp_clear, Consumer_clear},
    {Py_tp_methods, Consumer_methods},
    {Py_tp_getset, Consumer_getset},
    {Py_tp_members, Consumer_members},
    {0, NULL},
};

static PyType_Spec Consumer_spec = {
    "fipstop._fips.Consumer", sizeof(ConsumerObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Consumer_slots,
};

/* ---- Batch ---- */

/* fips_batch_next() re-reads each record header from shared memory after
 * fips_consumer_read() validated it; a hostile producer can change the length
 * in between.  Never hand out a payload that leaves this ring's buffer. */
static int
record_in_bounds(const BatchObject *batch, const fips_batch *it, const fips_record *r)
{
    uint64_t cap = it->mask + 1;
    const uint8_t *p = r->data;
    if (p < it->base)
        return 0;
    uint64_t off = (uint64_t)(p - it->base);
    return r->len <= batch->dom->max_record && off <= cap && r->len <= cap - off;
}

static PyObject *
raise_corrupt(PyObject *self)
{
    return raise_fips(state_of(self), -FIPS_ECORRUPT, NULL,
                      "ring contents corrupt: record length changed after the batch was claimed");
}

static void
Batch_dealloc(BatchObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    /* An unreleased batch that goes away is released, so one forgotten batch
     * (an exception while processing) cannot stall the consumer, and with it
     * every producer, for good. */
    if (!self->released && self->cons != NULL && self->cons->c != NULL &&
        self->cons->dom != NULL && domain_live(self->cons->dom)) {
        self->released = 1;
        fips_consumer_release(self->cons->c, &self->b);
    }
    Py_CLEAR(self->cons);
    Py_CLEAR(self->dom);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static inline int
batch_check_iterable(BatchObject *self)
{
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "batch was released: its records are gone");
        return -1;
    }
    DomainObject *dom = self->dom;
    if (dom == NULL || dom->d == NULL) {
        raise_closed(state_of((PyObject *)self), "Domain");
        return -1;
    }
    return 0;
}

static PyObject *
Batch_iter(BatchObject *self)
{
    if (batch_check_iterable(self) < 0)
        return NULL;
    fips_state *st = state_of((PyObject *)self);
    BatchIterObject *it = PyObject_New(BatchIterObject, st->BatchIterType);
    if (it == NULL)
        return NULL;
    it->batch = (BatchObject *)Py_NewRef(self);
    it->it = self->b;
    return (PyObject *)it;
}

static PyObject *
Batch_payloads(BatchObject *self, PyObject *Py_UNUSED(ignored))
{
    if (batch_check_iterable(self) < 0)
        return NULL;
    PyObject *list = PyList_New(self->b.count);
    if (list == NULL)
        return NULL;
    fips_batch it = self->b;
    fips_record r;
    uint32_t i = 0;
    while (i < self->b.count && fips_batch_next(&it, &r)) {
        if (!record_in_bounds(self, &it, &r)) {
            Py_DECREF(list);
            return raise_corrupt((PyObject *)self);
        }
        PyObject *b = PyBytes_FromStringAndSize(r.data, r.len);
        if (b == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, b);
        i++;
    }
    if (i < self->b.count) {
        /* fewer records than announced: shrink (never leave NULL slots) */
        if (PyList_SetSlice(list, i, self->b.count, NULL) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyObject *
Batch_release(BatchObject *self, PyObject *Py_UNUSED(ignored))
{
    if (batch_release(self, state_of((PyObject *)self)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Batch_enter(BatchObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(self);
}

static PyObject *
Batch_exit(BatchObject *self, PyObject *Py_UNUSED(args))
{
    if (!self->released) {
        ConsumerObject *c = self->cons;
        if (c->c == NULL || c->dom == NULL || !domain_live(c->dom)) {
            self->released = 1; /* nothing left to release into */
            Py_RETURN_NONE;
        }
        if (batch_release(self, state_of((PyObject *)self)) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static Py_ssize_t
Batch_len(BatchObject *self)
{
    return (Py_ssize_t)self->b.count;
}

static PyObject *
Batch_repr(BatchObject *self)
{
    return PyUnicode_FromFormat("<fipstop._fips.Batch ring=%u count=%u seq=%llu..%llu lost=%llu%s>",
                                (unsigned)self->b.ring, (unsigned)self->b.count,
                                (unsigned long long)self->b.first_seq,
                                (unsigned long long)self->b.next_seq,
                                (unsigned long long)self->b.lost,
                                self->released ? " released" : "");
}

static PyObject *
Batch_get_released(BatchObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->released);
}

static PyMethodDef Batch_methods[] = {
    {"payloads", (PyCFunction)Batch_payloads, METH_NOARGS,
     "Copies of every payload, as a list of bytes."},
    {"release", (PyCFunction)Batch_release, METH_NOARGS,
     "Same as consumer.release(batch), with its EEVICTED / ETORN errors."},
    {"__enter__", (PyCFunction)Batch_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Batch_exit, METH_VARARGS,
     "Release the batch unless already released."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Batch_members[] = {
    {"ring", T_UINT, offsetof(BatchObject, b) + offsetof(fips_batch, ring), READONLY, NULL},
    {"count", T_UINT, offsetof(BatchObject, b) + offsetof(fips_batch, count), READONLY, NULL},
    {"first_seq", T_ULONGLONG, offsetof(BatchObject, b) + offsetof(fips_batch, first_seq), READONLY, NULL},
    {"next_seq", T_ULONGLONG, offsetof(BatchObject, b) + offsetof(fips_batch, next_seq), READONLY, NULL},
    {"lost", T_ULONGLONG, offsetof(BatchObject, b) + offsetof(fips_batch, lost), READONLY,
     "records dropped just before records of this batch (sum of rec.lost)"},
    {"consumer", T_OBJECT, offsetof(BatchObject, cons), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Batch_getset[] = {
    {"released", (getter)Batch_get_released, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Batch_slots[] = {
    {Py_tp_doc,
     "Records claimed by Consumer.read().  Iterating yields Record objects\n"
     "whose payloads are zero-copy views of the shared ring, valid until the\n"
     "batch is released.  A batch dropped without release is released."},
    {Py_tp_dealloc, Batch_dealloc},
    {Py_tp_iter, Batch_iter},
    {Py_tp_methods, Batch_methods},
    {Py_tp_members, Batch_members},
    {Py_tp_getset, Batch_getset},
    {Py_tp_repr, Batch_repr},
    {Py_sq_length, Batch_len},
    {0, NULL},
};

static PyType_Spec Batch_spec = {
    "fipstop._fips.Batch", sizeof(BatchObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, Batch_slots,
};

/* ---- BatchIter ---- */

static void
BatchIter_dealloc(BatchIterObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->batch);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *
BatchIter_next(BatchIterObject *self)
{
    if (self->batch == NULL)
        return NULL;
    if (batch_check_iterable(self->batch) < 0)
        return NULL;
    fips_record r;
    if (!fips_batch_next(&self->it, &r)) {
        Py_CLEAR(self->batch);
        return NULL; /* StopIteration */
    }
    if (!record_in_bounds(self->batch, &self->it, &r)) {
        self->it.cursor = self->it.end;
        return raise_corrupt((PyObject *)self);
    }
    fips_state *st = state_of((PyObject *)self);
    RecordObject *rec = PyObject_New(RecordObject, st->RecordType);
    if (rec == NULL)
        return NULL;
    rec->batch = (BatchObject *)Py_NewRef(self->batch);
    rec->data = r.data;
    rec->len = r.len;
    rec->flags = r.flags;
    rec->lost = r.lost;
    rec->seq = r.seq;
    rec->ts_ns = r.ts_ns;
    return (PyObject *)rec;
}

static PyType_Slot BatchIter_slots[] = {
    {Py_tp_dealloc, BatchIter_dealloc},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, BatchIter_next},
    {0, NULL},
};

static PyType_Spec BatchIter_spec = {
    "fipstop._fips.BatchIterator", sizeof(BatchIterObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, BatchIter_slots,
};

/* ---- Record ---- */

static void
Record_dealloc(RecordObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->batch);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static int
Record_getbuffer(RecordObject *self, Py_buffer *view, int flags)
{
    BatchObject *batch = self->batch;
    if (batch->released) {
        PyErr_SetString(PyExc_BufferError, "record's batch was released: its payload is gone");
        view->obj = NULL;
        return -1;
    }
    DomainObject *dom = batch->dom;
    if (dom == NULL || dom->d == NULL) {
        PyErr_SetString(PyExc_BufferError, "record's domain is closed");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->data,
                          (Py_ssize_t)self->len, 1, flags) < 0)
        return -1;
    domain_pin(dom);
    return 0;
}

static void
Record_releasebuffer(RecordObject *self, Py_buffer *Py_UNUSED(view))
{
    domain_unpin(self->batch->dom);
}

static PyObject *
Record_get_data(RecordObject *self, void *Py_UNUSED(closure))
{
    return PyMemoryView_FromObject((PyObject *)self);
}

static PyObject *
Record_get_truncated(RecordObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong((self->flags & FIPS_REC_TRUNC) != 0);
}

static PyObject *
Record_bytes(RecordObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->batch->released) {
        PyErr_SetString(PyExc_ValueError, "record's batch was released: its payload is gone");
        return NULL;
    }
    if (self->batch->dom == NULL || self->batch->dom->d == NULL)
        return raise_closed(state_of((PyObject *)self), "Domain");
    return PyBytes_FromStringAndSize((const char *)self->data, self->len);
}

static PyObject *
Record_repr(RecordObject *self)
{
    return PyUnicode_FromFormat("<fipstop._fips.Record seq=%llu len=%u flags=%u lost=%u>",
                                (unsigned long long)self->seq, (unsigned)self->len,
                                (unsigned)self->flags, (unsigned)self->lost);
}

static PyMethodDef Record_methods[] = {
    {"__bytes__", (PyCFunction)Record_bytes, METH_NOARGS, "A copy of the payload."},
    {"tobytes", (PyCFunction)Record_bytes, METH_NOARGS, "A copy of the payload."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Record_members[] = {
    {"seq", T_ULONGLONG, offsetof(RecordObject, seq), READONLY, "index of the record in its ring"},
    {"ts_ns", T_ULONGLONG, offsetof(RecordObject, ts_ns), READONLY, "CLOCK_REALTIME ns"},
    {"flags", T_UINT, offsetof(RecordObject, flags), READONLY, "FIPS_REC_* flags"},
    {"lost", T_UINT, offsetof(RecordObject, lost), READONLY,
     "records dropped just before this one"},
    {"len", T_UINT, offsetof(RecordObject, len), READONLY, "payload length in bytes"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Record_getset[] = {
    {"data", (getter)Record_get_data, NULL,
     "Zero-copy read-only memoryview of the payload in the shared ring.", NULL},
    {"truncated", (getter)Record_get_truncated, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Record_slots[] = {
    {Py_tp_doc,
     "One record of a Batch: seq, ts_ns, flags, lost, len and data (a zero-copy\n"
     "memoryview; the record also supports the buffer protocol, so bytes(rec)\n"
     "copies the payload).  Views are valid until the batch is released."},
    {Py_tp_dealloc, Record_dealloc},
    {Py_tp_methods, Record_methods},
    {Py_tp_members, Record_members},
    {Py_tp_getset, Record_getset},
    {Py_tp_repr, Record_repr},
    {Py_bf_getbuffer, Record_getbuffer},
    {Py_bf_releasebuffer, Record_releasebuffer},
    {0, NULL},
};

static PyType_Spec Record_spec = {
    "fipstop._fips.Record", sizeof(RecordObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, Record_slots,
};

/* ------------------------------------------------------------------------ */
/* Monitor                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    fips_monitor *m;
    PyObject *path;   /* str, for messages */
    /* Table sizes as libfips validated them at attach.  fips_monitor_header()
     * points into the (shared, writable by its owner) mapping, so sizes read
     * there later could disagree with what fips_monitor_snapshot() writes;
     * these come from a snapshot with no output arrays instead. */
    uint32_t nr, nc;
} MonitorObject;

static PyObject *
Monitor_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "shm_dir", "path", "any_owner", NULL};
    fips_state *st = state_of_type(type);
    const char *name = NULL;
    PyObject *dir_o = Py_None, *path_o = Py_None;
    PyObject *dir_b = NULL, *path_b = NULL;
    int any_owner = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|zOO$p", kwlist, &name, &dir_o,
                                     &path_o, &any_owner))
        return NULL;
    if ((name == NULL) == (path_o == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "Monitor() needs exactly one of name and path");
        return NULL;
    }
    if (!opt_path(dir_o, &dir_b) || !opt_path(path_o, &path_b)) {
        Py_XDECREF(dir_b);
        return NULL;
    }
    char err[512];
    err[0] = '\0';
    fips_monitor *m = NULL;
    int rc;
    char where[PATH_MAX + 96];
    if (path_b != NULL) {
        snprintf(where, sizeof where, "%s", PyBytes_AS_STRING(path_b));
        Py_BEGIN_ALLOW_THREADS
        rc = fips_monitor_open_path(&m, PyBytes_AS_STRING(path_b), any_owner, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    else {
        const char *dir = fips_shm_dir(path_str(dir_b));
        snprintf(where, sizeof where, "%s/fips.%s", dir ? dir : "?", name);
        Py_BEGIN_ALLOW_THREADS
        rc = fips_monitor_open(&m, path_str(dir_b), name, any_owner, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(dir_b);
    Py_XDECREF(path_b);
    if (rc < 0) {
        err[sizeof err - 1] = '\0';
        if (err[0] != '\0')
            return raise_fips(st, rc, NULL, err);
        return raise_fips(st, rc, where, NULL);
    }
    MonitorObject *self = (MonitorObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        fips_monitor_close(m);
        return NULL;
    }
    self->m = m;
    {
        fips_snapshot probe;
        memset(&probe, 0, sizeof probe); /* NULL arrays: sizes only */
        fips_monitor_snapshot(m, &probe);
        self->nr = probe.n_rings;
        self->nc = probe.n_consumers;
    }
    self->path = PyUnicode_DecodeFSDefault(where);
    if (self->path == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
Monitor_traverse(MonitorObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static void
Monitor_dealloc(MonitorObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->m != NULL) {
        fips_monitor_close(self->m);
        self->m = NULL;
    }
    Py_CLEAR(self->path);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static inline int
monitor_check(MonitorObject *self)
{
    if (self->m == NULL) {
        raise_closed(state_of((PyObject *)self), "Monitor");
        return -1;
    }
    return 0;
}

static PyObject *
Monitor_close(MonitorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->m != NULL) {
        fips_monitor *m = self->m;
        self->m = NULL;
        fips_monitor_close(m);
    }
    Py_RETURN_NONE;
}

static PyObject *
Monitor_enter(MonitorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (monitor_check(self) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *
Monitor_exit(MonitorObject *self, PyObject *Py_UNUSED(args))
{
    return Monitor_close(self, NULL);
}

static PyObject *
Monitor_snapshot(MonitorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (monitor_check(self) < 0)
        return NULL;
    fips_state *st = state_of((PyObject *)self);
    uint32_t nr = self->nr, nc = self->nc; /* validated at attach */
    PyObject *rings = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nr * (Py_ssize_t)sizeof(fips_ring_stat));
    PyObject *cons = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nc * (Py_ssize_t)sizeof(fips_consumer_stat));
    PyObject *pos = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nc * (Py_ssize_t)nr * (Py_ssize_t)sizeof(fips_pos_stat));
    if (rings == NULL || cons == NULL || pos == NULL)
        goto fail;
    fips_snapshot s;
    memset(&s, 0, sizeof s);
    s.n_rings = nr;
    s.n_consumers = nc;
    s.rings = (fips_ring_stat *)PyBytes_AS_STRING(rings);
    s.consumers = (fips_consumer_stat *)PyBytes_AS_STRING(cons);
    s.pos = (fips_pos_stat *)PyBytes_AS_STRING(pos);
    int rc = fips_monitor_snapshot(self->m, &s);
    if (rc < 0) {
        raise_fips(st, rc, NULL, NULL);
        goto fail;
    }
    if (s.n_rings != nr || s.n_consumers != nc) {
        raise_fips(st, -FIPS_ELAYOUT, NULL, "snapshot: table sizes changed");
        goto fail;
    }
    return Py_BuildValue("(KKNNN)", (unsigned long long)s.taken_realtime_ns,
                         (unsigned long long)s.taken_mono_ns, rings, cons, pos);
fail:
    Py_XDECREF(rings);
    Py_XDECREF(cons);
    Py_XDECREF(pos);
    return NULL;
}

/* records_no_ring read now, not Monitor.header's copy from attach: the
 * records dropped because the ring table was full (fips_monitor_no_ring). */
static PyObject *
Monitor_no_ring(MonitorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (monitor_check(self) < 0)
        return NULL;
    uint64_t v = 0;
    int rc = fips_monitor_no_ring(self->m, &v);
    if (rc < 0)
        return raise_fips(state_of((PyObject *)self), rc, NULL, NULL);
    return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

static PyObject *
Monitor_tap(MonitorObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ring", "max", NULL};
    Py_ssize_t ring, max = 16;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|n", kwlist, &ring, &max))
        return NULL;
    if (monitor_check(self) < 0)
        return NULL;
    fips_state *st = state_of((PyObject *)self);
    const struct fips_layout_header *h = fips_monitor_header(self->m);
    if (ring < 0 || (uint64_t)ring >= self->nr) {
        PyErr_Format(PyExc_IndexError, "ring %zd out of range (max_rings %u)", ring,
                     (unsigned)self->nr);
        return NULL;
    }
    if (max < 1 || max > 65536) {
        PyErr_SetString(PyExc_ValueError, "tap(): max must be in 1..65536");
        return NULL;
    }
    /* max_record comes from the mapping (could be changed by the file's
     * owner); only the buffer size depends on it and the library never
     * writes past buflen. */
    uint64_t per = FIPS_REC_HDR_SIZE + (((uint64_t)(h->max_record & FIPS_REC_LEN_MASK) + FIPS_REC_ALIGN - 1) & ~(uint64_t)(FIPS_REC_ALIGN - 1));
    uint64_t buflen = per * (uint64_t)max;
    if (buflen > ((uint64_t)1 << 31)) {
        PyErr_SetString(PyExc_ValueError, "tap(): max * max_record too large");
        return NULL;
    }
    uint8_t *buf = PyMem_Malloc((size_t)buflen);
    if (buf == NULL)
        return PyErr_NoMemory();
    size_t used = 0;
    uint32_t lapped = 0;
    int n = fips_monitor_tap(self->m, (uint32_t)ring, (uint32_t)max, buf, (size_t)buflen,
                             &used, &lapped);
    if (n < 0) {
        PyMem_Free(buf);
        return raise_fips(st, n, NULL, NULL);
    }
    if (used > buflen)
        used = (size_t)buflen;
    PyObject *list = PyList_New(0);
    if (list == NULL) {
        PyMem_Free(buf);
        return NULL;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        struct fips_layout_record rh;
        if (used - off < FIPS_REC_HDR_SIZE)
            break;
        memcpy(&rh, buf + off, sizeof rh);
        uint32_t len = rh.len_flags & FIPS_REC_LEN_MASK;
        uint32_t flags = rh.len_flags >> 24;
        if ((uint64_t)len > used - off - FIPS_REC_HDR_SIZE)
            break;
        PyObject *item = Py_BuildValue("(KKIIy#)", (unsigned long long)rh.seq,
                                       (unsigned long long)rh.ts_ns, (unsigned)flags,
                                       (unsigned)rh.lost,
                                       (const char *)buf + off + FIPS_REC_HDR_SIZE,
                                       (Py_ssize_t)len);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            PyMem_Free(buf);
            return NULL;
        }
        Py_DECREF(item);
        off += (FIPS_REC_HDR_SIZE + (size_t)len + FIPS_REC_ALIGN - 1) & ~(size_t)(FIPS_REC_ALIGN - 1);
        if (off > used)
            break;
    }
    PyMem_Free(buf);
    return Py_BuildValue("(NI)", list, (unsigned)lapped);
}

static PyObject *
Monitor_get_header(MonitorObject *self, void *Py_UNUSED(closure))
{
    if (monitor_check(self) < 0)
        return NULL;
    return header_new(state_of((PyObject *)self), fips_monitor_header(self->m));
}

#define MONITOR_HDR_GETTER(field, conv)                                       \
    static PyObject *Monitor_get_##field(MonitorObject *self, void *c)        \
    {                                                                         \
        (void)c;                                                              \
        if (monitor_check(self) < 0)                                          \
            return NULL;                                                      \
        return conv(fips_monitor_header(self->m)->field);                     \
    }
MONITOR_HDR_GETTER(max_rings, PyLong_FromUnsignedLong)
MONITOR_HDR_GETTER(max_consumers, PyLong_FromUnsignedLong)
MONITOR_HDR_GETTER(ring_capacity, PyLong_FromUnsignedLongLong)
MONITOR_HDR_GETTER(max_record, PyLong_FromUnsignedLong)

static PyObject *
Monitor_get_name(MonitorObject *self, void *Py_UNUSED(closure))
{
    if (monitor_check(self) < 0)
        return NULL;
    const struct fips_layout_header *h = fips_monitor_header(self->m);
    return decode_field(h->name, sizeof h->name);
}

static PyObject *
Monitor_get_closed(MonitorObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->m == NULL);
}

static PyObject *
Monitor_mapping_address(MonitorObject *self, PyObject *Py_UNUSED(ignored))
{
    if (monitor_check(self) < 0)
        return NULL;
    return PyLong_FromVoidPtr((void *)fips_monitor_mapping(self->m));
}

static PyObject *
Monitor_repr(MonitorObject *self)
{
    if (self->m == NULL)
        return PyUnicode_FromString("<fipstop._fips.Monitor closed>");
    return PyUnicode_FromFormat("<fipstop._fips.Monitor %R>", self->path);
}

static PyMethodDef Monitor_methods[] = {
    {"snapshot", (PyCFunction)Monitor_snapshot, METH_NOARGS,
     "snapshot()\n--\n\n(taken_realtime_ns, taken_mono_ns, rings, consumers, pos): the three\n"
     "last are bytes holding arrays of fips_ring_stat[max_rings],\n"
     "fips_consumer_stat[max_consumers] and fips_pos_stat[max_consumers][max_rings];\n"
     "see RING_STAT_FIELDS etc. (fipstop.ring wraps them as numpy arrays)."},
    {"no_ring", (PyCFunction)Monitor_no_ring, METH_NOARGS,
     "no_ring()\n--\n\nThe header's records_no_ring now: records dropped because the ring\n"
     "table was full (Monitor.header is a copy taken at attach)."},
    {"tap", (PyCFunction)(void (*)(void))Monitor_tap, METH_VARARGS | METH_KEYWORDS,
     "tap(ring, max=16)\n--\n\n(records, lapped): copies of up to max newest records of ring,\n"
     "oldest first, as (seq, ts_ns, flags, lost, bytes); lapped counts records the\n"
     "producer overwrote while they were being copied."},
    {"close", (PyCFunction)Monitor_close, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)Monitor_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Monitor_exit, METH_VARARGS, NULL},
    {"_mapping_address", (PyCFunction)Monitor_mapping_address, METH_NOARGS,
     "Address of the read-only mapping (tests only)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Monitor_getset[] = {
    {"header", (getter)Monitor_get_header, NULL, "Header (a copy).", NULL},
    {"name", (getter)Monitor_get_name, NULL, NULL, NULL},
    {"max_rings", (getter)Monitor_get_max_rings, NULL, NULL, NULL},
    {"max_consumers", (getter)Monitor_get_max_consumers, NULL, NULL, NULL},
    {"ring_capacity", (getter)Monitor_get_ring_capacity, NULL, NULL, NULL},
    {"max_record", (getter)Monitor_get_max_record, NULL, NULL, NULL},
    {"closed", (getter)Monitor_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Monitor_members[] = {
    {"path", T_OBJECT, offsetof(MonitorObject, path), READONLY, "the domain file"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Monitor_slots[] = {
    {Py_tp_doc,
     "Monitor(name=None, shm_dir=None, path=None, *, any_owner=False)\n--\n\n"
     "Read-only (PROT_READ) attach to a domain; never registers or writes.\n"
     "An invalid file raises FipsError with a one-line reason naming it."},
    {Py_tp_new, Monitor_new},
    {Py_tp_dealloc, Monitor_dealloc},
    {Py_tp_traverse, Monitor_traverse},
    {Py_tp_methods, Monitor_methods},
    {Py_tp_getset, Monitor_getset},
    {Py_tp_members, Monitor_members},
    {Py_tp_repr, Monitor_repr},
    {0, NULL},
};

static PyType_Spec Monitor_spec = {
    "fipstop._fips.Monitor", sizeof(MonitorObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Monitor_slots,
};

/* ------------------------------------------------------------------------ */
/* module functions                                                          */
/* ------------------------------------------------------------------------ */

static PyObject *
mod_shm_dir(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dir", NULL};
    PyObject *dir_o = Py_None, *dir_b = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &dir_o))
        return NULL;
    if (!opt_path(dir_o, &dir_b))
        return NULL;
    const char *d = fips_shm_dir(path_str(dir_b));
    PyObject *r = PyUnicode_DecodeFSDefault(d ? d : "/dev/shm");
    Py_XDECREF(dir_b);
    return r;
}

static PyObject *
mod_strerror(PyObject *Py_UNUSED(module), PyObject *arg)
{
    int overflow = 0;
    long code = PyLong_AsLongAndOverflow(arg, &overflow);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || code > INT32_MAX || code < -INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "error code out of range");
        return NULL;
    }
    const char *s = fips_strerror((int)code);
    return PyUnicode_DecodeUTF8(s ? s : "unknown error", (Py_ssize_t)strlen(s ? s : "unknown error"),
                                "backslashreplace");
}

static PyObject *
mod_now_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(fips_now_ns());
}

static PyObject *
mod_mono_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(fips_mono_ns());
}

static PyObject *
mod_validate_header(PyObject *module, PyObject *args)
{
    Py_buffer view;
    unsigned long long file_size;
    if (!PyArg_ParseTuple(args, "y*K", &view, &file_size))
        return NULL;
    fips_state *st = PyModule_GetState(module);
    /* The library reads the first FIPS_HDR_SIZE bytes: give it at least that
     * many, zero-padded, whatever the caller passed. */
    const void *p = view.buf;
    uint8_t *copy = NULL;
    if ((size_t)view.len < FIPS_HDR_SIZE) {
        copy = PyMem_Calloc(1, FIPS_HDR_SIZE);
        if (copy == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        memcpy(copy, view.buf, (size_t)view.len);
        p = copy;
    }
    char err[512];
    err[0] = '\0';
    int rc = fips_validate_header(p, (size_t)file_size, err, sizeof err);
    PyMem_Free(copy);
    PyBuffer_Release(&view);
    if (rc < 0) {
        err[sizeof err - 1] = '\0';
        return raise_fips(st, rc, NULL, err);
    }
    Py_RETURN_NONE;
}

/* format_bind_query(data) -> bytes | None: the line of a binary query record
 * (fips_bindq.h, records flagged REC_BIND_QUERY), or None when data is not a
 * valid one.  The GIL is kept: a line is a few hundred bytes. */
static PyObject *
mod_format_bind_query(PyObject *mod, PyObject *arg)
{
    (void)mod;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    char out[FIPSBQ_TEXT_MAX];
    long n = fips_bindq_format(view.buf, (size_t)view.len, out, sizeof out);
    PyBuffer_Release(&view);
    if (n < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

static PyMethodDef module_methods[] = {
    {"format_bind_query", (PyCFunction)mod_format_bind_query, METH_O,
     "format_bind_query(data)\n--\n\nThe query line BIND would have logged for a binary query record of\n"
     "a named built with contrib/bind/fips-native.patch (a record whose flags\n"
     "have REC_BIND_QUERY), or None when data is not a valid one."},
    {"shm_dir", (PyCFunction)(void (*)(void))mod_shm_dir, METH_VARARGS | METH_KEYWORDS,
     "shm_dir(dir=None)\n--\n\nDirectory holding domains: dir, else $FIPS_SHM_DIR, else /dev/shm."},
    {"strerror", (PyCFunction)mod_strerror, METH_O,
     "strerror(code)\n--\n\nName of a libfips error code (positive or negative)."},
    {"now_ns", (PyCFunction)mod_now_ns, METH_NOARGS, "CLOCK_REALTIME in ns."},
    {"mono_ns", (PyCFunction)mod_mono_ns, METH_NOARGS, "CLOCK_MONOTONIC in ns."},
    {"validate_header", (PyCFunction)mod_validate_header, METH_VARARGS,
     "validate_header(data, file_size)\n--\n\nValidate a domain header image as the library does\n"
     "on attach; raises FipsError with the reason."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------ */
/* struct field tables: ring.py builds numpy dtypes from these               */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    size_t off;
    size_t size;
    char kind; /* 'u' little-endian unsigned, 'S' fixed bytes */
} field_spec;

#define MEMBER_SIZE(T, f) sizeof(((T *)0)->f)
#define FU(T, f) {#f, offsetof(T, f), MEMBER_SIZE(T, f), 'u'}
#define FS(T, f) {#f, offsetof(T, f), MEMBER_SIZE(T, f), 'S'}

static const field_spec ring_stat_fields[] = {
    FU(fips_ring_stat, index), FU(fips_ring_stat, state),
    FU(fips_ring_stat, generation), FU(fips_ring_stat, pid),
    FU(fips_ring_stat, tid), FS(fips_ring_stat, thread_name),
    FU(fips_ring_stat, head), FU(fips_ring_stat, reserved),
    FU(fips_ring_stat, floor), FU(fips_ring_stat, floor_seq),
    FU(fips_ring_stat, records_committed), FU(fips_ring_stat, bytes_committed),
    FU(fips_ring_stat, records_dropped), FU(fips_ring_stat, bytes_dropped),
    FU(fips_ring_stat, full_events), FU(fips_ring_stat, high_water_bytes),
    FU(fips_ring_stat, records_truncated), FU(fips_ring_stat, evictions),
    FU(fips_ring_stat, blocked_ns), FU(fips_ring_stat, last_commit_ns),
    FU(fips_ring_stat, created_ns), FU(fips_ring_stat, closed_ns),
    {NULL, 0, 0, 0},
};

static const field_spec consumer_stat_fields[] = {
    FU(fips_consumer_stat, index), FU(fips_consumer_stat, state),
    FU(fips_consumer_stat, generation), FU(fips_consumer_stat, pid),
    FU(fips_consumer_stat, readers), FU(fips_consumer_stat, evicted_by_ring),
    FU(fips_consumer_stat, resumes), FS(fips_consumer_stat, name),
    FU(fips_consumer_stat, heartbeat_mono_ns), FU(fips_consumer_stat, registered_ns),
    FU(fips_consumer_stat, evicted_ns), FU(fips_consumer_stat, records_released),
    FU(fips_consumer_stat, batches_released),
    {NULL, 0, 0, 0},
};

static const field_spec pos_stat_fields[] = {
    FU(fips_pos_stat, released), FU(fips_pos_stat, released_seq),
    FU(fips_pos_stat, records_released), FU(fips_pos_stat, lost_seen),
    {NULL, 0, 0, 0},
};

/* Build [(name, offset, dtype_str), ...] and check the table covers the
 * struct: sorted, no overlap, gaps only for alignment, ends at sizeof. */
static PyObject *
fields_list(const field_spec *f, size_t struct_size, const char *what)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    size_t end = 0;
    for (; f->name != NULL; f++) {
        size_t align = f->kind == 'u' ? f->size : 1;
        if (f->off < end || f->off - end >= (align ? align : 1) ||
            (f->kind == 'u' && f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8)) {
            PyErr_Format(PyExc_SystemError, "%s field table does not match the struct at %s",
                         what, f->name);
            Py_DECREF(list);
            return NULL;
        }
        end = f->off + f->size;
        char fmt[16];
        if (f->kind == 'u')
            snprintf(fmt, sizeof fmt, "<u%zu", f->size);
        else
            snprintf(fmt, sizeof fmt, "S%zu", f->size);
        PyObject *item = Py_BuildValue("(sns)", f->name, (Py_ssize_t)f->off, fmt);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    if (end > struct_size || struct_size - end >= 8) {
        PyErr_Format(PyExc_SystemError, "%s field table does not cover the struct", what);
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

/* ------------------------------------------------------------------------ */
/* module init                                                               */
/* ------------------------------------------------------------------------ */

static int
add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot)
{
    PyObject *t = PyType_FromModuleAndSpec(m, spec, NULL);
    if (t == NULL)
        return -1;
    *slot = (PyTypeObject *)t;
    return PyModule_AddType(m, (PyTypeObject *)t);
}

static int
add_fields(PyObject *m, const char *name, const char *size_name,
           const field_spec *f, size_t size)
{
    PyObject *l = fields_list(f, size, name);
    if (l == NULL)
        return -1;
    if (PyModule_AddObject(m, name, l) < 0) {
        Py_DECREF(l);
        return -1;
    }
    return PyModule_AddIntConstant(m, size_name, (long)size);
}

static int
fips_exec(PyObject *m)
{
    fips_state *st = PyModule_GetState(m);

    st->FipsError = PyErr_NewExceptionWithDoc(
        "fipstop._fips.FipsError",
        "A libfips error.  str(e) is a one-line reason (naming the file where\n"
        "there is one); e.code is the positive error code (FIPS_E* or errno).",
        PyExc_Exception, NULL);
    if (st->FipsError == NULL)
        return -1;
    {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL)
            return -1;
        int r = PyObject_SetAttrString(st->FipsError, "code", zero);
        Py_DECREF(zero);
        if (r < 0)
            return -1;
    }
    if (PyModule_AddObjectRef(m, "FipsError", st->FipsError) < 0)
        return -1;

    if (add_type(m, &Domain_spec, &st->DomainType) < 0 ||
        add_type(m, &Producer_spec, &st->ProducerType) < 0 ||
        add_type(m, &Consumer_spec, &st->ConsumerType) < 0 ||
        add_type(m, &Batch_spec, &st->BatchType) < 0 ||
        add_type(m, &BatchIter_spec, &st->BatchIterType) < 0 ||
        add_type(m, &Record_spec, &st->RecordType) < 0 ||
        add_type(m, &Monitor_spec, &st->MonitorType) < 0)
        return -1;

    st->HeaderType = PyStructSequence_NewType(&header_desc);
    if (st->HeaderType == NULL)
        return -1;
    if (PyModule_AddObjectRef(m, "Header", (PyObject *)st->HeaderType) < 0)
        return -1;

    struct { const char *name; long value; } consts[] = {
        {"VERSION_MAJOR", FIPS_VERSION_MAJOR}, {"VERSION_MINOR", FIPS_VERSION_MINOR},
        {"EFULL", FIPS_EFULL}, {"ETOOBIG", FIPS_ETOOBIG}, {"EMAGIC", FIPS_EMAGIC},
        {"EVERSION", FIPS_EVERSION}, {"ELAYOUT", FIPS_ELAYOUT}, {"ETRUNC", FIPS_ETRUNC},
        {"EOWNER", FIPS_EOWNER}, {"ENOTREADY", FIPS_ENOTREADY}, {"ENORING", FIPS_ENORING},
        {"ENOCONSUMER", FIPS_ENOCONSUMER}, {"EEVICTED", FIPS_EEVICTED},
        {"ECORRUPT", FIPS_ECORRUPT}, {"EBUSY", FIPS_EBUSY}, {"ECLOSED", FIPS_ECLOSED},
        {"EAGAIN", FIPS_EAGAIN}, {"ELAPPED", FIPS_ELAPPED}, {"ETORN", FIPS_ETORN}, {"EREENTER", FIPS_EREENTER},
        {"LAYOUT_VERSION", FIPS_LAYOUT_VERSION}, {"HDR_SIZE", FIPS_HDR_SIZE},
        {"RING_CTL_SIZE", FIPS_RING_CTL_SIZE}, {"CONSUMER_SIZE", FIPS_CONSUMER_SIZE},
        {"POS_SIZE", FIPS_POS_SIZE}, {"REC_HDR_SIZE", FIPS_REC_HDR_SIZE},
        {"REC_ALIGN", FIPS_REC_ALIGN}, {"NAME_MAX", FIPS_NAME_MAX},
        {"THREAD_NAME_MAX", FIPS_THREAD_NAME_MAX},
        {"MAX_RINGS_LIMIT", FIPS_MAX_RINGS_LIMIT},
        {"MAX_CONSUMERS_LIMIT", FIPS_MAX_CONSUMERS_LIMIT},
        {"MIN_CAPACITY", FIPS_MIN_CAPACITY}, {"MAX_CAPACITY", FIPS_MAX_CAPACITY},
        {"RING_FREE", FIPS_RING_FREE}, {"RING_ACTIVE", FIPS_RING_ACTIVE},
        {"RING_CLOSED", FIPS_RING_CLOSED},
        {"CONS_FREE", FIPS_CONS_FREE}, {"CONS_JOINING", FIPS_CONS_JOINING},
        {"CONS_ACTIVE", FIPS_CONS_ACTIVE}, {"CONS_EVICTED", FIPS_CONS_EVICTED},
        {"CONS_CLOSED", FIPS_CONS_CLOSED},
        {"EVICTED_BY_OPERATOR", FIPS_EVICTED_BY_OPERATOR},
        {"REC_PAD", FIPS_REC_PAD}, {"REC_TRUNC", FIPS_REC_TRUNC},
        {"REC_BIND_QUERY", FIPSBQ_REC_FLAG},
#ifdef FIPS_REC_USER_MASK
        {"REC_USER_MASK", FIPS_REC_USER_MASK},
#endif
        {"REC_LEN_MASK", FIPS_REC_LEN_MASK},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0)
            return -1;
    }
    {
        PyObject *magic = PyLong_FromUnsignedLongLong(FIPS_MAGIC);
        if (magic == NULL)
            return -1;
        if (PyModule_AddObject(m, "MAGIC", magic) < 0) {
            Py_DECREF(magic);
            return -1;
        }
    }
    if (add_fields(m, "RING_STAT_FIELDS", "RING_STAT_SIZE", ring_stat_fields,
                   sizeof(fips_ring_stat)) < 0 ||
        add_fields(m, "CONSUMER_STAT_FIELDS", "CONSUMER_STAT_SIZE", consumer_stat_fields,
                   sizeof(fips_consumer_stat)) < 0 ||
        add_fields(m, "POS_STAT_FIELDS", "POS_STAT_SIZE", pos_stat_fields,
                   sizeof(fips_pos_stat)) < 0)
        return -1;
    return 0;
}

static int
fips_traverse(PyObject *m, visitproc visit, void *arg)
{
    fips_state *st = PyModule_GetState(m);
    if (st == NULL)
        return 0;
    Py_VISIT(st->FipsError);
    Py_VISIT(st->DomainType);
    Py_VISIT(st->ProducerType);
    Py_VISIT(st->ConsumerType);
    Py_VISIT(st->BatchType);
    Py_VISIT(st->BatchIterType);
    Py_VISIT(st->RecordType);
    Py_VISIT(st->MonitorType);
    Py_VISIT(st->HeaderType);
    return 0;
}

static int
fips_clear(PyObject *m)
{
    fips_state *st = PyModule_GetState(m);
    if (st == NULL)
        return 0;
    Py_CLEAR(st->FipsError);
    Py_CLEAR(st->DomainType);
    Py_CLEAR(st->ProducerType);
    Py_CLEAR(st->ConsumerType);
    Py_CLEAR(st->BatchType);
    Py_CLEAR(st->BatchIterType);
    Py_CLEAR(st->RecordType);
    Py_CLEAR(st->MonitorType);
    Py_CLEAR(st->HeaderType);
    return 0;
}

static void
fips_free(void *m)
{
    fips_clear((PyObject *)m);
}

static PyModuleDef_Slot fips_slots[] = {
    {Py_mod_exec, fips_exec},
    {0, NULL},
};

static struct PyModuleDef fips_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fipstop._fips",
    .m_doc = "Binding of libfips: per-thread lock-free logging rings in shared memory.",
    .m_size = sizeof(fips_state),
    .m_methods = module_methods,
    .m_slots = fips_slots,
    .m_traverse = fips_traverse,
    .m_clear = fips_clear,
    .m_free = fips_free,
};

PyMODINIT_FUNC
PyInit__fips(void)
{
    return PyModuleDef_Init(&fips_module);
}
