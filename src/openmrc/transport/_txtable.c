/* The requester's per-transmission records in native code: TxTable and EvOrder;
 * and a QP's EV ids, EvIds (src/openmrc/transport/paths.py).
 *
 * The same classes as src/openmrc/transport/txtable.py and paths.py (the readable
 * reference and the pure-Python fallback), with the same methods and the same
 * results; see those modules for what they are for.  Compiled code (mypyc) reaches an
 * array.array item only through CPython's generic item protocol, boxing the index
 * and the value and parsing arguments on every write; here each method is one
 * METH_FASTCALL call that does all its reads and writes on plain C arrays.
 *
 * Nothing is trusted: a PSN or an EV that does not fit (any Python int may come
 * from the network) is treated as absent where the Python class treats it so, and
 * otherwise raises, never reads out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define IN_FLIGHT 1ULL
#define TRIM_BATCH 32
#define GROW_BATCH 16

/* ---- argument helpers ------------------------------------------------------- */

/* A non-negative exact int of up to 2 digits (PSNs, EVs, send times, flags, slots and
 * ids: nearly every int these functions take) read from its digits into *v: 1, or 0
 * for any other object (taken by the caller's general path).  CPython 3.11's layout. */
static inline int
small_uint(PyObject *o, uint64_t *v)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyLong_CheckExact(o) && (size_t)Py_SIZE(o) <= 2) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        Py_ssize_t n = Py_SIZE(o);
        *v = n == 1 ? (uint64_t)d[0] : n == 2 ? ((uint64_t)d[1] << PyLong_SHIFT) | d[0] : 0;
        return 1;
    }
#endif
    (void)o;
    (void)v;
    return 0;
}

/* small_uint for a slot or an id (an exact int of at most one digit, as each is). */
static inline int
small_index(PyObject *o, Py_ssize_t *v)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyLong_CheckExact(o) && (size_t)Py_SIZE(o) <= 1) {
        *v = Py_SIZE(o) ? (Py_ssize_t)((PyLongObject *)o)->ob_digit[0] : 0;
        return 1;
    }
#endif
    (void)o;
    (void)v;
    return 0;
}

/* A Python int as a signed 64-bit value; *ok = 0 when it is not an int or does not
 * fit (no exception left set). */
static inline int64_t
as_i64(PyObject *o, int *ok)
{
    int overflow = 0;
    long long v;
    uint64_t small;
    if (small_uint(o, &small)) {
        *ok = 1;
        return (int64_t)small;
    }
    if (!PyLong_Check(o)) {
        *ok = 0;
        return 0;
    }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    *ok = 1;
    return (int64_t)v;
}

/* A Python int as an unsigned 64-bit value, raising as array('Q') would. */
static inline int
as_u64(PyObject *o, uint64_t *out)
{
    unsigned long long v;
    int overflow = 0;
    long long sv;
    if (small_uint(o, out))
        return 0;
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "an integer is required");
        return -1;
    }
    /* Below 2**63 (every send time and flag word here) the signed conversion reads the
     * digits directly; PyLong_AsUnsignedLongLong goes through _PyLong_AsByteArray for
     * any int past one digit (2**30), several times the instructions per call. */
    sv = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow && sv >= 0) {
        *out = (uint64_t)sv;
        return 0;
    }
    if (sv == -1 && PyErr_Occurred())
        return -1;
    v = PyLong_AsUnsignedLongLong(o); /* negative or past 2**63: its own result or error */
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name,
                     want, nargs);
        return -1;
    }
    return 0;
}

/* ---- TxTable ---------------------------------------------------------------- */

#define DUP_RISK 16ULL
#define ORDERED 256ULL

static PyTypeObject EvOrderType;
/* Drop (psn, sent) from ev's chain when it is the first pair there; 1 when dropped. */
static int eo_pop_first(PyObject *order, uint32_t ev, uint64_t psn, uint64_t sent);
static int eo_append(PyObject *order, uint32_t ev, uint64_t psn, uint64_t sent);

/* Blocks of records that must not straddle a cache line (32-byte records, two per
 * line): PyMem gives 16-byte alignment, so each block is allocated 63 bytes larger
 * and its records start at the first 64-byte boundary. */
typedef struct {
    void *raw;   /* what PyMem_Malloc gave (NULL when none) */
    void *items; /* the first 64-byte boundary in it */
} Block;

/* Move ``b`` to a fresh block of ``bytes`` (> 0) keeping its first ``keep`` bytes:
 * 0, or -1 (no exception set) when memory runs out, ``b`` unchanged. */
static int
block_realloc(Block *b, size_t bytes, size_t keep)
{
    void *raw, *items;
    if (bytes > PY_SSIZE_T_MAX - 63)
        return -1;
    raw = PyMem_Malloc(bytes + 63);
    if (raw == NULL)
        return -1;
    items = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    if (keep > bytes)
        keep = bytes;
    if (keep)
        memcpy(items, b->items, keep);
    PyMem_Free(b->raw);
    b->raw = raw;
    b->items = items;
    return 0;
}

static void
block_free(Block *b)
{
    PyMem_Free(b->raw);
    b->raw = b->items = NULL;
}

/* One PSN's record: what a send or an ACK of it reads and writes, in one half of a
 * cache line. */
typedef struct {
    PyObject *op;  /* the message, NULL when empty */
    uint64_t meta; /* ev | flags << 32 */
    uint64_t sent; /* send time */
    /* in flight: the slot of the PSN sent before / after it, as a distance from this
     * slot (unchanged when the table is cut), 0 at an end; a distance is below the
     * slots allocated, at most TX_MAX_SLOTS */
    int32_t prev, next;
} TxRecord;

_Static_assert(sizeof(TxRecord) == 32, "two records to a 64-byte line");

/* The most slots a table holds (a window of PSNs up to this wide): every distance
 * between two slots fits a record's int32 links. */
#define TX_MAX_SLOTS ((Py_ssize_t)INT32_MAX)

typedef struct {
    PyObject_HEAD
    int64_t base;  /* the PSN of slot 0 */
    Py_ssize_t lo; /* the first slot that may be occupied */
    Py_ssize_t end; /* one past the newest PSN's slot */
    Py_ssize_t count; /* records held */
    Py_ssize_t cap; /* slots allocated (those from end on are empty and zero) */
    int64_t head, tail; /* oldest and newest PSN in flight, -1 when none */
    Block recs; /* per slot: its TxRecord */
    uint32_t *retries; /* per slot: timeouts (apart: read only when some slot has any) */
    /* slots given a first timeout (count_retry from 0) and not yet dropped: at least
     * the occupied slots with retries; while 0, no slot's retries are read */
    Py_ssize_t retried;
} TxTableObject;

#define TX_RECS(self) ((TxRecord *)(self)->recs.items)

static void
tx_free_arrays(TxTableObject *self)
{
    Py_ssize_t i;
    TxRecord *r = TX_RECS(self);
    if (r) {
        for (i = 0; i < self->cap; i++)
            Py_CLEAR(r[i].op);
    }
    block_free(&self->recs);
    PyMem_Free(self->retries);
    self->retries = NULL;
    self->retried = 0;
    self->cap = 0;
}

static void
tx_reset(TxTableObject *self)
{
    tx_free_arrays(self);
    self->count = 0;
    self->lo = 0;
    self->end = 0;
    self->head = -1;
    self->tail = -1;
}

/* Reallocate the records and retries to ``cap`` slots (>= end, <= TX_MAX_SLOTS),
 * zeroing new slots.  On failure nothing is smaller than it was (a shrink that fails
 * keeps the bigger block). */
static int
tx_resize(TxTableObject *self, Py_ssize_t cap)
{
    Py_ssize_t old = self->cap;
    void *p;
    if (cap < old) {
        Py_ssize_t i;
        for (i = cap; i < old; i++)
            Py_CLEAR(TX_RECS(self)[i].op);
    }
    if (block_realloc(&self->recs, (size_t)cap * sizeof(TxRecord),
                      (size_t)old * sizeof(TxRecord)) == 0) {
        if (cap > old)
            memset(TX_RECS(self) + old, 0, (size_t)(cap - old) * sizeof(TxRecord));
    }
    else if (cap > old) {
        PyErr_NoMemory();
        return -1;
    }
    p = PyMem_Realloc(self->retries, (size_t)cap * sizeof(uint32_t));
    if (p != NULL) {
        self->retries = (uint32_t *)p;
        if (cap > old)
            memset(self->retries + old, 0, (size_t)(cap - old) * sizeof(uint32_t));
    }
    else if (cap > old) {
        /* (the records' block is bigger than cap: harmless, the next resize copies cap) */
        PyErr_NoMemory();
        return -1;
    }
    self->cap = cap;
    return 0;
}

static PyObject *
TxTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    TxTableObject *self = (TxTableObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->head = -1;
    self->tail = -1;
    return (PyObject *)self;
}

static int
TxTable_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "TxTable() takes no arguments");
        return -1;
    }
    return 0;
}

static int
TxTable_traverse(TxTableObject *self, visitproc visit, void *arg)
{
    Py_ssize_t i;
    for (i = self->lo; i < self->end; i++)
        Py_VISIT(TX_RECS(self)[i].op);
    return 0;
}

static int
TxTable_tp_clear(TxTableObject *self)
{
    tx_reset(self);
    return 0;
}

static void
TxTable_dealloc(TxTableObject *self)
{
    PyObject_GC_UnTrack(self);
    tx_reset(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
TxTable_len(TxTableObject *self)
{
    return self->count;
}

/* The slot of ``psn`` when it is in [0, cap), else -1. */
static inline Py_ssize_t
tx_slot(TxTableObject *self, PyObject *psn_obj)
{
    int ok;
    int64_t psn = as_i64(psn_obj, &ok);
    int64_t i;
    if (!ok || psn < INT64_MIN / 2 || psn > INT64_MAX / 2)
        return -1;
    i = psn - self->base;
    return (i >= 0 && i < self->cap) ? (Py_ssize_t)i : -1;
}

/* The slot of an outstanding ``psn`` (the caller's promise), raising otherwise. */
static inline Py_ssize_t
tx_slot_checked(TxTableObject *self, PyObject *psn_obj)
{
    Py_ssize_t i = tx_slot(self, psn_obj);
    if (i < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_IndexError, "TxTable: PSN out of the window");
    return i;
}

static int
TxTable_contains(TxTableObject *self, PyObject *psn)
{
    Py_ssize_t i = tx_slot(self, psn);
    return i >= 0 && TX_RECS(self)[i].op != NULL;
}

static PyObject *
TxTable_op(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (check_nargs("op", nargs, 1) < 0)
        return NULL;
    i = tx_slot(self, args[0]);
    if (i >= 0 && TX_RECS(self)[i].op != NULL)
        return Py_NewRef(TX_RECS(self)[i].op);
    Py_RETURN_NONE;
}

static PyObject *
TxTable_lowest(TxTableObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(self->count ? self->base + self->lo : -1);
}

#define TX_FIELD_GETTER(name, expr)                                                      \
    static PyObject *TxTable_##name(TxTableObject *self, PyObject *const *args,          \
                                    Py_ssize_t nargs)                                    \
    {                                                                                    \
        Py_ssize_t i;                                                                    \
        if (check_nargs(#name, nargs, 1) < 0)                                            \
            return NULL;                                                                 \
        i = tx_slot_checked(self, args[0]);                                              \
        if (i < 0)                                                                       \
            return NULL;                                                                 \
        return expr;                                                                     \
    }

TX_FIELD_GETTER(ev, PyLong_FromUnsignedLong((unsigned long)(TX_RECS(self)[i].meta & 0xFFFFFFFFULL)))
TX_FIELD_GETTER(sent, PyLong_FromUnsignedLongLong(TX_RECS(self)[i].sent))
TX_FIELD_GETTER(flags, PyLong_FromUnsignedLongLong(TX_RECS(self)[i].meta >> 32))
TX_FIELD_GETTER(ev_flags, PyLong_FromUnsignedLongLong(TX_RECS(self)[i].meta))
TX_FIELD_GETTER(retries, PyLong_FromUnsignedLong(self->retries[i]))

/* Flag bits as the Python class takes them: ``bits << 32`` must fit 64 bits. */
static int
tx_bits(PyObject *o, uint64_t *out)
{
    uint64_t bits;
    if (as_u64(o, &bits) < 0)
        return -1;
    if (bits >> 32) {
        PyErr_SetString(PyExc_OverflowError, "TxTable: flag bits out of range");
        return -1;
    }
    *out = bits;
    return 0;
}

/* Settle slot i against its EV's order (see txtable.TxTable.settle) and give the tuple
 * (op, word, sent) when op is not NULL, else (word, sent). */
static PyObject *
tx_settle_slot(TxTableObject *self, Py_ssize_t i, PyObject *order, PyObject *op)
{
    uint64_t word = TX_RECS(self)[i].meta, sent = TX_RECS(self)[i].sent;
    Py_ssize_t k = op != NULL;
    PyObject *w, *t, *out;
    if (((word >> 32) & (IN_FLIGHT | DUP_RISK)) == IN_FLIGHT &&
        eo_pop_first(order, (uint32_t)(word & 0xFFFFFFFFULL), (uint64_t)(self->base + i), sent))
        word |= ORDERED << 32;
    w = PyLong_FromUnsignedLongLong(word);
    if (w == NULL)
        return NULL;
    t = PyLong_FromUnsignedLongLong(sent);
    if (t == NULL) {
        Py_DECREF(w);
        return NULL;
    }
    out = PyTuple_New(2 + k);
    if (out == NULL) {
        Py_DECREF(w);
        Py_DECREF(t);
        return NULL;
    }
    if (op != NULL) {
        Py_INCREF(op);
        PyTuple_SET_ITEM(out, 0, op);
    }
    PyTuple_SET_ITEM(out, k, w);
    PyTuple_SET_ITEM(out, k + 1, t);
    return out;
}

static PyObject *
TxTable_settle(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (check_nargs("settle", nargs, 2) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return NULL;
    if (Py_TYPE(args[1]) != &EvOrderType) {
        PyErr_SetString(PyExc_TypeError, "TxTable.settle: order must be a native EvOrder");
        return NULL;
    }
    return tx_settle_slot(self, i, args[1], NULL);
}

/* op and settle in one call: None when psn is not outstanding, else (op, word, sent)
 * as settle gives them (see txtable.TxTable.take). */
static PyObject *
TxTable_take(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (check_nargs("take", nargs, 2) < 0)
        return NULL;
    if (Py_TYPE(args[1]) != &EvOrderType) {
        PyErr_SetString(PyExc_TypeError, "TxTable.take: order must be a native EvOrder");
        return NULL;
    }
    i = tx_slot(self, args[0]);
    if (i < 0 || TX_RECS(self)[i].op == NULL)
        Py_RETURN_NONE;
    return tx_settle_slot(self, i, args[1], TX_RECS(self)[i].op);
}

static PyObject *
TxTable_set_bits(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t bits;
    if (check_nargs("set_bits", nargs, 2) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0 || tx_bits(args[1], &bits) < 0)
        return NULL;
    TX_RECS(self)[i].meta |= bits << 32;
    Py_RETURN_NONE;
}

static PyObject *
TxTable_clear_bits(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t bits;
    if (check_nargs("clear_bits", nargs, 2) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0 || tx_bits(args[1], &bits) < 0)
        return NULL;
    TX_RECS(self)[i].meta &= ~(bits << 32);
    Py_RETURN_NONE;
}

static PyObject *
TxTable_count_retry(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (check_nargs("count_retry", nargs, 1) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return NULL;
    if (self->retries[i] == UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "TxTable: retries out of range");
        return NULL;
    }
    if (self->retries[i]++ == 0)
        self->retried += 1;
    Py_RETURN_NONE;
}

/* The body of add: record psn_obj (of message op), sent for the first time; its slot,
 * or -1 with the error set (then nothing changed). */
static Py_ssize_t
tx_add_record(TxTableObject *self, PyObject *psn_obj, PyObject *op)
{
    int ok;
    int64_t psn, i;
    psn = as_i64(psn_obj, &ok);
    if (!ok || psn < 0 || psn > INT64_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "TxTable: PSN out of range");
        return -1;
    }
    if (op == Py_None) {
        PyErr_SetString(PyExc_TypeError, "TxTable: a record needs its message");
        return -1;
    }
    if (!self->count) {
        self->base = psn;
        self->lo = 0;
        self->end = 0;
    }
    i = psn - self->base;
    if (i < self->end) {
        PyErr_Format(PyExc_ValueError, "TxTable: PSN %lld is not past the newest",
                     (long long)psn);
        return -1;
    }
    if (i >= self->cap) {
        /* grow by at least a batch, and geometrically (a copy per batch would be
         * quadratic in a wide window) */
        Py_ssize_t cap = (Py_ssize_t)i + GROW_BATCH;
        Py_ssize_t more = self->cap + (self->cap >> 3) + GROW_BATCH;
        if (i > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        if (i >= TX_MAX_SLOTS - GROW_BATCH) {
            /* (a record links its neighbours in flight by int32 distances: 2**31 slots
             * would be 64 GiB of records) */
            PyErr_SetString(PyExc_MemoryError, "TxTable: a window of 2**31 PSNs or more");
            return -1;
        }
        if (more > cap)
            cap = more;
        if (cap > TX_MAX_SLOTS)
            cap = TX_MAX_SLOTS;
        if (tx_resize(self, cap) < 0)
            return -1;
    }
    Py_INCREF(op);
    Py_XSETREF(TX_RECS(self)[i].op, op);
    self->end = (Py_ssize_t)i + 1;
    self->count += 1;
    return (Py_ssize_t)i;
}

static PyObject *
TxTable_add(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("add", nargs, 2) < 0)
        return NULL;
    if (tx_add_record(self, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void
tx_unlink(TxTableObject *self, Py_ssize_t i)
{
    TxRecord *r = TX_RECS(self);
    int32_t prev = r[i].prev, nxt = r[i].next;
    /* (the neighbours link each other: slot i + nxt is nxt - prev from slot i + prev,
     * a distance between two slots) */
    if (prev == 0)
        self->head = nxt ? self->base + i + nxt : -1;
    else
        r[i + prev].next = nxt ? (int32_t)((int64_t)nxt - prev) : 0;
    if (nxt == 0)
        self->tail = prev ? self->base + i + prev : -1;
    else
        r[i + nxt].prev = prev ? (int32_t)((int64_t)prev - nxt) : 0;
}

/* Empty slot i (outstanding, already out of the in-flight list): the body of remove. */
static void
tx_drop(TxTableObject *self, Py_ssize_t i)
{
    Py_ssize_t lo;
    TxRecord *r = TX_RECS(self);
    PyObject *op = r[i].op;
    r[i].op = NULL;
    if (self->retried && self->retries[i])
        self->retried -= 1;
    self->count -= 1;
    if (!self->count) {
        tx_reset(self);
        Py_DECREF(op);
        return;
    }
    if (i == self->lo) {
        lo = i + 1;
        while (r[lo].op == NULL) /* a slot past the front is occupied */
            lo++;
        if (lo >= TRIM_BATCH) {
            /* (the slots cut are empty; the links are distances: unchanged) */
            Py_ssize_t keep = self->cap - lo;
            memmove(r, r + lo, (size_t)keep * sizeof(TxRecord));
            memset(r + keep, 0, (size_t)lo * sizeof(TxRecord));
            memmove(self->retries, self->retries + lo, (size_t)keep * sizeof(uint32_t));
            memset(self->retries + keep, 0, (size_t)lo * sizeof(uint32_t));
            self->base += lo;
            self->end -= lo;
            lo = 0;
            /* give memory back when the window shrank a lot */
            if (self->cap > 64 && self->end + GROW_BATCH < self->cap / 4)
                (void)tx_resize(self, self->end + GROW_BATCH); /* a shrink does not fail */
        }
        self->lo = lo;
    }
    Py_DECREF(op);
}

static PyObject *
TxTable_remove(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    int in_flight;
    if (check_nargs("remove", nargs, 2) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return NULL;
    if (TX_RECS(self)[i].op == NULL) {
        PyErr_SetString(PyExc_KeyError, "TxTable: PSN not outstanding");
        return NULL;
    }
    if ((in_flight = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    if (in_flight)
        tx_unlink(self, i);
    tx_drop(self, i);
    Py_RETURN_NONE;
}

/* ---- ack: an ACK's plain PSNs in one call ----------------------------------- */

#define ACK_REQ 2ULL
/* OOW | RESENT | DUP_RISK | NAMED: a PSN with one of these is left to the requester
 * (see txtable.QUICK_STOP). */
#define QUICK_STOP (4ULL | 8ULL | 16ULL | 64ULL)
/* The bound on the PSNs ack takes (so that base + 63 cannot overflow). */
#define ACK_LIMIT (INT64_C(1) << 62)

/* The run ack builds (see txtable.TxTable.ack). */
typedef struct {
    PyObject *op; /* the run's message (a reference), NULL before its first PSN */
    int64_t n, last, reqs;
    uint64_t last_sent, min_sent;
} AckRun;

/* Take ``psn`` into run r: 0 when it is not outstanding (nothing to do), 1 when it was
 * acknowledged into the run, 2 when the run stops before it (another message's, or a
 * PSN the requester must take itself). */
static int
tx_ack_quick(TxTableObject *self, int64_t psn, PyObject *order, AckRun *r)
{
    int64_t i = psn - self->base;
    PyObject *op;
    TxRecord *rec;
    uint64_t word, flags, sent;
    if (i < 0 || i >= self->cap || (op = (rec = TX_RECS(self) + i)->op) == NULL)
        return 0;
    if (r->op != NULL && op != r->op)
        return 2;
    word = rec->meta;
    flags = word >> 32;
    sent = rec->sent;
    if ((flags & (IN_FLIGHT | QUICK_STOP)) != IN_FLIGHT ||
        !eo_pop_first(order, (uint32_t)(word & 0xFFFFFFFFULL), (uint64_t)psn, sent))
        return 2;
    if (r->op == NULL) {
        Py_INCREF(op);
        r->op = op;
        r->min_sent = sent;
    }
    else if (sent < r->min_sent)
        r->min_sent = sent;
    r->n += 1;
    r->last = psn;
    r->last_sent = sent;
    if (flags & ACK_REQ)
        r->reqs += 1;
    tx_unlink(self, (Py_ssize_t)i);
    tx_drop(self, (Py_ssize_t)i);
    return 1;
}

/* The tuple ack returns; steals r->op.  Its large ints are the allocations of the
 * call: the send times share one object when they are equal. */
static PyObject *
tx_ack_result(AckRun *r, int64_t resume)
{
    PyObject *out, *v[6];
    int k;
    if (r->op == NULL) {
        Py_INCREF(Py_None); /* no run: (None, 0, 0, 0, 0, 0, resume) */
        r->op = Py_None;
    }
    v[0] = PyLong_FromLongLong(r->n);
    v[1] = PyLong_FromLongLong(r->last);
    /* (the signed conversion below 2**63: the unsigned one is several times slower) */
    v[2] = r->last_sent >> 63 ? PyLong_FromUnsignedLongLong(r->last_sent)
                              : PyLong_FromLongLong((int64_t)r->last_sent);
    if (r->min_sent == r->last_sent) {
        v[3] = v[2];
        Py_XINCREF(v[3]);
    }
    else
        v[3] = r->min_sent >> 63 ? PyLong_FromUnsignedLongLong(r->min_sent)
                                 : PyLong_FromLongLong((int64_t)r->min_sent);
    v[4] = PyLong_FromLongLong(r->reqs);
    v[5] = PyLong_FromLongLong(resume);
    out = PyTuple_New(7);
    for (k = 0; k < 6; k++) {
        if (v[k] == NULL || out == NULL) {
            for (k = 0; k < 6; k++)
                Py_XDECREF(v[k]);
            Py_XDECREF(out);
            Py_DECREF(r->op);
            return NULL;
        }
    }
    PyTuple_SET_ITEM(out, 0, r->op);
    for (k = 0; k < 6; k++)
        PyTuple_SET_ITEM(out, k + 1, v[k]);
    return out;
}

/* ack(stop, base, bits, limit, order): see txtable.TxTable.ack. */
static PyObject *
TxTable_ack(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t stop, base, limit, psn, resume = -1;
    uint64_t bits;
    int ok1, ok2, ok3;
    AckRun r = {NULL, 0, 0, 0, 0, 0};
    PyObject *order;
    if (check_nargs("ack", nargs, 5) < 0)
        return NULL;
    stop = as_i64(args[0], &ok1);
    base = as_i64(args[1], &ok2);
    limit = as_i64(args[3], &ok3);
    /* (a PSN from the network may be anything the wire holds, negative too: one
     * below the table is not outstanding, as in the Python class; the bounds keep
     * base + 63 and psn - self->base from overflowing) */
    if (!ok1 || !ok2 || !ok3 || base <= -ACK_LIMIT || base >= ACK_LIMIT ||
        stop <= -ACK_LIMIT || stop >= ACK_LIMIT || limit <= -ACK_LIMIT || limit >= ACK_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "TxTable.ack: PSN out of (-2**62, 2**62)");
        return NULL;
    }
    if (!PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "TxTable.ack: bits must be an int");
        return NULL;
    }
    bits = PyLong_AsUnsignedLongLongMask(args[2]); /* its low 64 bits, as bits & MASK64 */
    if (bits == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    order = args[4];
    if (Py_TYPE(order) != &EvOrderType) {
        PyErr_SetString(PyExc_TypeError, "TxTable.ack: order must be a native EvOrder");
        return NULL;
    }
    /* the cumulative part: every PSN under the lowest outstanding one is acknowledged */
    for (psn = self->base + self->lo; psn < stop && self->count; psn++) {
        if (tx_ack_quick(self, psn, order, &r) == 2)
            return tx_ack_result(&r, psn);
    }
    /* the selective part */
    while (bits && self->count) {
        psn = base + __builtin_ctzll(bits);
        if (psn >= limit)
            break;
        if (tx_ack_quick(self, psn, order, &r) == 2) {
            resume = psn;
            break;
        }
        bits &= bits - 1;
    }
    return tx_ack_result(&r, resume);
}

static PyObject *
TxTable_clear(TxTableObject *self, PyObject *unused)
{
    tx_reset(self);
    Py_RETURN_NONE;
}

/* The arguments launch and send share (psn, ev, sent, flags), checked: the slot, or -1
 * with the error set. */
static Py_ssize_t
tx_launch_args(TxTableObject *self, PyObject *const *args, uint64_t *ev, uint64_t *sent,
               uint64_t *flags)
{
    Py_ssize_t i;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return -1;
    if (as_u64(args[1], ev) < 0 || as_u64(args[2], sent) < 0 || tx_bits(args[3], flags) < 0)
        return -1;
    if (*ev >> 32) {
        /* the Python class would store ev | flags << 32, mixing the two; an EV is 32 bits */
        PyErr_SetString(PyExc_OverflowError, "TxTable: EV out of range");
        return -1;
    }
    return i;
}

/* Slot i in flight on ev since sent, with flags, appended to the in-flight list. */
static void
tx_launch_slot(TxTableObject *self, Py_ssize_t i, uint64_t ev, uint64_t sent, uint64_t flags)
{
    int64_t tail = self->tail;
    TxRecord *r = TX_RECS(self);
    r[i].meta = ev | (flags | IN_FLIGHT) << 32;
    r[i].sent = sent;
    r[i].next = 0;
    if (tail < 0) {
        r[i].prev = 0;
        self->head = self->base + i;
    }
    else {
        /* (two slots of the table: their distance fits, see TX_MAX_SLOTS) */
        Py_ssize_t t = (Py_ssize_t)(tail - self->base);
        r[i].prev = (int32_t)(t - i);
        r[t].next = (int32_t)(i - t);
    }
    self->tail = self->base + i;
}

static PyObject *
TxTable_launch(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t ev, sent, flags;
    if (check_nargs("launch", nargs, 4) < 0)
        return NULL;
    if ((i = tx_launch_args(self, args, &ev, &sent, &flags)) < 0)
        return NULL;
    tx_launch_slot(self, i, ev, sent, flags);
    Py_RETURN_NONE;
}

/* launch, and the transmission appended to order (EvOrder.append) in the same call:
 * the two records every transmission makes (see txtable.TxTable.send). */
static PyObject *
TxTable_send(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t ev, sent, flags;
    if (check_nargs("send", nargs, 5) < 0)
        return NULL;
    if ((i = tx_launch_args(self, args, &ev, &sent, &flags)) < 0)
        return NULL;
    if (Py_TYPE(args[4]) != &EvOrderType) {
        PyErr_SetString(PyExc_TypeError, "TxTable.send: order must be a native EvOrder");
        return NULL;
    }
    /* the order first: when its memory runs out, nothing has changed */
    if (eo_append(args[4], (uint32_t)ev, (uint64_t)(self->base + i), sent) < 0)
        return NULL;
    tx_launch_slot(self, i, ev, sent, flags);
    Py_RETURN_NONE;
}

/* add(psn, op) and send(psn, ev, sent, flags, order) in one call: the records a new
 * PSN's first transmission makes (see txtable.TxTable.add_send). */
static PyObject *
TxTable_add_send(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t ev, sent, flags;
    if (check_nargs("add_send", nargs, 6) < 0)
        return NULL;
    /* every argument checked before anything changes */
    if (as_u64(args[2], &ev) < 0 || as_u64(args[3], &sent) < 0 || tx_bits(args[4], &flags) < 0)
        return NULL;
    if (ev >> 32) {
        PyErr_SetString(PyExc_OverflowError, "TxTable: EV out of range");
        return NULL;
    }
    if (Py_TYPE(args[5]) != &EvOrderType) {
        PyErr_SetString(PyExc_TypeError, "TxTable.add_send: order must be a native EvOrder");
        return NULL;
    }
    if ((i = tx_add_record(self, args[0], args[1])) < 0)
        return NULL;
    if (eo_append(args[5], (uint32_t)ev, (uint64_t)(self->base + i), sent) < 0)
        return NULL;
    tx_launch_slot(self, i, ev, sent, flags);
    Py_RETURN_NONE;
}

static PyObject *
TxTable_land(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    uint64_t m;
    if (check_nargs("land", nargs, 1) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return NULL;
    m = TX_RECS(self)[i].meta;
    tx_unlink(self, i);
    TX_RECS(self)[i].meta = m & ~(IN_FLIGHT << 32);
    return PyLong_FromUnsignedLongLong(m >> 32);
}

static PyObject *
TxTable_flying(TxTableObject *self, PyObject *unused)
{
    return PyBool_FromLong(self->head >= 0);
}

static PyObject *
TxTable_oldest(TxTableObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(self->head);
}

static PyObject *
TxTable_after(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (check_nargs("after", nargs, 1) < 0)
        return NULL;
    if ((i = tx_slot_checked(self, args[0])) < 0)
        return NULL;
    return PyLong_FromLongLong(TX_RECS(self)[i].next ? self->base + i + TX_RECS(self)[i].next
                                                     : -1);
}

/* rto_at(timeout, linear, cap): when the oldest transmission in flight times out (its
 * send time plus its timeout after its retries), -1 when none is in flight; as
 * TxTable.rto_at computes it.  ``linear`` may be any int (one beyond 64 bits gives
 * what Python's arithmetic gives); ``timeout`` and ``cap`` are in [0, 2**63). */
static PyObject *
TxTable_rto_at(TxTableObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t timeout, cap, linear, rto;
    int overflow = 0, ok1, ok2;
    Py_ssize_t i;
    uint64_t sent;
    int64_t retries;
    if (check_nargs("rto_at", nargs, 3) < 0)
        return NULL;
    if (!PyLong_Check(args[0]) || !PyLong_Check(args[1]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "TxTable.rto_at: the arguments are ints");
        return NULL;
    }
    timeout = as_i64(args[0], &ok1);
    cap = as_i64(args[2], &ok2);
    if (!ok1 || !ok2 || timeout < 0 || cap < 0) {
        PyErr_SetString(PyExc_ValueError, "TxTable.rto_at: timeout and cap are in [0, 2**63)");
        return NULL;
    }
    if (self->head < 0)
        return PyLong_FromLong(-1);
    i = (Py_ssize_t)(self->head - self->base);
    /* (while no slot has had a timeout, the retries array is not read) */
    retries = self->retried ? (int64_t)self->retries[i] : 0;
    linear = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (linear == -1 && PyErr_Occurred())
        return NULL;
    if (overflow > 0 || (!overflow && retries < linear)) {
        rto = timeout; /* fewer retries than the linear ones */
    }
    else {
        /* extra = retries - linear >= 0 (huge when linear is below -2**63) */
        int64_t extra = (overflow < 0 || linear < -(INT64_MAX / 2))
                            ? INT64_MAX
                            : retries - linear;
        int sh = extra >= 29 ? 30 : (int)extra + 1;
        rto = timeout > (INT64_MAX >> sh) ? cap : timeout << sh;
        if (rto > cap)
            rto = cap;
    }
    sent = TX_RECS(self)[i].sent;
    if (sent > UINT64_MAX - (uint64_t)rto) {
        PyObject *a = PyLong_FromUnsignedLongLong(sent), *b, *sum;
        if (a == NULL)
            return NULL;
        b = PyLong_FromLongLong(rto);
        if (b == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        sum = PyNumber_Add(a, b);
        Py_DECREF(a);
        Py_DECREF(b);
        return sum;
    }
    return PyLong_FromUnsignedLongLong(sent + (uint64_t)rto);
}

static PyObject *
TxTable_sizeof(TxTableObject *self, PyObject *unused)
{
    size_t per = sizeof(TxRecord) + sizeof(uint32_t);
    return PyLong_FromSize_t(Py_TYPE(self)->tp_basicsize + (size_t)self->cap * per +
                             (self->recs.raw ? 63 : 0));
}

static PyMethodDef TxTable_methods[] = {
    {"__sizeof__", (PyCFunction)TxTable_sizeof, METH_NOARGS, "Bytes held, arrays included."},
    {"op", (PyCFunction)(void (*)(void))TxTable_op, METH_FASTCALL,
     "The message psn belongs to, or None when it is not outstanding."},
    {"lowest", (PyCFunction)TxTable_lowest, METH_NOARGS,
     "A PSN no outstanding PSN is below (-1 when none is outstanding)."},
    {"ev", (PyCFunction)(void (*)(void))TxTable_ev, METH_FASTCALL,
     "The EV of psn's last transmission."},
    {"sent", (PyCFunction)(void (*)(void))TxTable_sent, METH_FASTCALL,
     "The send time of psn's last transmission."},
    {"flags", (PyCFunction)(void (*)(void))TxTable_flags, METH_FASTCALL, "psn's flag bits."},
    {"ev_flags", (PyCFunction)(void (*)(void))TxTable_ev_flags, METH_FASTCALL,
     "psn's EV and flag bits in one read: ev | flags << 32."},
    {"settle", (PyCFunction)(void (*)(void))TxTable_settle, METH_FASTCALL,
     "psn's ev | flags << 32 and send time as it is acknowledged; drops its pair from "
     "order when it is the oldest on its EV (ORDERED then set in the flags returned)."},
    {"take", (PyCFunction)(void (*)(void))TxTable_take, METH_FASTCALL,
     "op(psn) and settle(psn, order) in one call: None when psn is not outstanding, "
     "else (op, ev | flags << 32, send time)."},
    {"ack", (PyCFunction)(void (*)(void))TxTable_ack, METH_FASTCALL,
     "Acknowledge, in order, the plain outstanding PSNs below stop, then those base + k "
     "(bits' set bits k) below limit, of one message, up to the first other: "
     "(op, n, last, last_sent, min_sent, ack_reqs, resume)."},
    {"set_bits", (PyCFunction)(void (*)(void))TxTable_set_bits, METH_FASTCALL,
     "Set flag bits of psn."},
    {"clear_bits", (PyCFunction)(void (*)(void))TxTable_clear_bits, METH_FASTCALL,
     "Clear flag bits of psn."},
    {"retries", (PyCFunction)(void (*)(void))TxTable_retries, METH_FASTCALL,
     "The local ACK timeouts psn has had."},
    {"count_retry", (PyCFunction)(void (*)(void))TxTable_count_retry, METH_FASTCALL,
     "psn timed out once more."},
    {"add", (PyCFunction)(void (*)(void))TxTable_add, METH_FASTCALL,
     "Record psn (of message op), sent for the first time; PSNs come in order."},
    {"remove", (PyCFunction)(void (*)(void))TxTable_remove, METH_FASTCALL,
     "Forget outstanding psn (acknowledged); in_flight: it is in flight."},
    {"clear", (PyCFunction)TxTable_clear, METH_NOARGS, "Forget every record."},
    {"launch", (PyCFunction)(void (*)(void))TxTable_launch, METH_FASTCALL,
     "psn (not in flight) is sent now on ev at sent: set its fields, last in flight."},
    {"send", (PyCFunction)(void (*)(void))TxTable_send, METH_FASTCALL,
     "launch(psn, ev, sent, flags), and the transmission appended to order (a native "
     "EvOrder) in the same call."},
    {"add_send", (PyCFunction)(void (*)(void))TxTable_add_send, METH_FASTCALL,
     "add(psn, op) and send(psn, ev, sent, flags, order) in one call: a new PSN's first "
     "transmission."},
    {"land", (PyCFunction)(void (*)(void))TxTable_land, METH_FASTCALL,
     "Take psn (in flight) out of flight; return its flags from before."},
    {"flying", (PyCFunction)TxTable_flying, METH_NOARGS, "True when some PSN is in flight."},
    {"oldest", (PyCFunction)TxTable_oldest, METH_NOARGS,
     "The PSN sent longest ago of those in flight, -1 when none is."},
    {"after", (PyCFunction)(void (*)(void))TxTable_after, METH_FASTCALL,
     "The PSN sent after psn among those in flight, -1 after the newest."},
    {"rto_at", (PyCFunction)(void (*)(void))TxTable_rto_at, METH_FASTCALL,
     "When the oldest transmission in flight times out (send time + its timeout after its "
     "retries: timeout, doubling after linear of them, at most cap), -1 when none is."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods TxTable_as_sequence = {
    .sq_length = (lenfunc)TxTable_len,
    .sq_contains = (objobjproc)TxTable_contains,
};

static PyTypeObject TxTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.transport._txtable.TxTable",
    .tp_doc = PyDoc_STR("The sender's records of the PSNs sent and not yet acknowledged "
                        "(native; see openmrc.transport.txtable.TxTable)."),
    .tp_basicsize = sizeof(TxTableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = TxTable_new,
    .tp_init = TxTable_init,
    .tp_dealloc = (destructor)TxTable_dealloc,
    .tp_traverse = (traverseproc)TxTable_traverse,
    .tp_clear = (inquiry)TxTable_tp_clear,
    .tp_methods = TxTable_methods,
    .tp_as_sequence = &TxTable_as_sequence,
};

/* ---- EvOrder ---------------------------------------------------------------- */

/* A slot of the table: its EV and its chain's first and last entry; first is -2 when
 * the slot is free, -1 when the chain is empty (16 bytes: four to a line). */
typedef struct {
    uint32_t key;
    int32_t head, tail;
    int32_t unused_;
} EoSlot;

/* An entry of the pool: a PSN, its send time and the next entry (-1 at the end);
 * 32 bytes in a 64-byte aligned block, so one entry is one line. */
typedef struct {
    uint64_t psn, sent;
    int32_t next;
    int32_t unused_[3];
} EoEntry;

_Static_assert(sizeof(EoSlot) == 16, "four slots to a 64-byte line");
_Static_assert(sizeof(EoEntry) == 32, "two entries to a 64-byte line");

typedef struct {
    PyObject_HEAD
    EoSlot *table;
    Py_ssize_t mask, used;
    Block pool; /* EoEntry items */
    Py_ssize_t npool, pool_cap;
    int32_t free_;
} EvOrderObject;

#define EO_POOL(self) ((EoEntry *)(self)->pool.items)

static inline Py_ssize_t
eo_find(EvOrderObject *self, uint32_t ev)
{
    Py_ssize_t mask = self->mask;
    Py_ssize_t h = (Py_ssize_t)((ev ^ (ev >> 16) ^ (ev >> 7)) & (uint32_t)mask);
    for (;;) {
        if (self->table[h].key == ev || self->table[h].head == -2)
            return h;
        h = (h + 1) & mask;
    }
}

static int
eo_alloc_table(EvOrderObject *self, Py_ssize_t size)
{
    Py_ssize_t j;
    EoSlot *table = PyMem_Malloc((size_t)size * sizeof(EoSlot));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (j = 0; j < size; j++) {
        table[j].key = 0;
        table[j].head = -2;
        table[j].tail = -1;
        table[j].unused_ = 0;
    }
    self->table = table;
    self->mask = size - 1;
    return 0;
}

static PyObject *
EvOrder_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    EvOrderObject *self = (EvOrderObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->free_ = -1;
    if (eo_alloc_table(self, 16) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
EvOrder_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "EvOrder() takes no arguments");
        return -1;
    }
    return 0;
}

static void
EvOrder_dealloc(EvOrderObject *self)
{
    PyMem_Free(self->table);
    block_free(&self->pool);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Double the table and put every EV's slot back. */
static int
eo_grow(EvOrderObject *self)
{
    EoSlot *old_table = self->table;
    Py_ssize_t old = self->mask + 1, j;
    if (old > (1 << 29)) {
        PyErr_NoMemory();
        return -1;
    }
    if (eo_alloc_table(self, 2 * old) < 0)
        return -1;
    for (j = 0; j < old; j++) {
        if (old_table[j].head != -2)
            self->table[eo_find(self, old_table[j].key)] = old_table[j];
    }
    PyMem_Free(old_table);
    return 0;
}

/* An EV argument: *ok = 0 when it is no 32-bit value (an EV from the network may be
 * any integer: it has no pair). */
static inline uint32_t
eo_ev(PyObject *o, int *ok)
{
    int64_t v = as_i64(o, ok);
    if (*ok && (v < 0 || v > (int64_t)0xFFFFFFFF))
        *ok = 0;
    return (uint32_t)v;
}

/* The chain's first entry of ``ev`` and its slot (*slot), or -1 when it has no pair. */
static inline int32_t
eo_first(EvOrderObject *self, PyObject *ev_obj, Py_ssize_t *slot)
{
    int ok;
    uint32_t ev = eo_ev(ev_obj, &ok);
    Py_ssize_t h;
    if (!ok)
        return -1;
    h = eo_find(self, ev);
    *slot = h;
    return self->table[h].head < 0 ? -1 : self->table[h].head;
}

/* A (PSN, send time) argument pair; *ok = 0 when either does not fit 64 bits
 * unsigned (then it matches no pair). */
static inline void
eo_pair(PyObject *p, PyObject *s, uint64_t *psn, uint64_t *sent, int *ok)
{
    unsigned long long v;
    *ok = 0;
    if (!PyLong_Check(p) || !PyLong_Check(s))
        return;
    v = PyLong_AsUnsignedLongLong(p);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return;
    }
    *psn = v;
    v = PyLong_AsUnsignedLongLong(s);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return;
    }
    *sent = v;
    *ok = 1;
}

static inline void
eo_release(EvOrderObject *self, int32_t e)
{
    EO_POOL(self)[e].next = self->free_;
    self->free_ = e;
}

/* Append (psn, sent) last in ev's chain: 0, or -1 with MemoryError set (then nothing
 * changed).  The body of EvOrder.append, also called by TxTable.send. */
static int
eo_append(PyObject *order, uint32_t ev, uint64_t psn, uint64_t sent)
{
    EvOrderObject *self = (EvOrderObject *)order;
    Py_ssize_t h;
    int32_t first, e;
    /* the entry first (nothing changes when memory runs out) */
    if (self->free_ < 0 && self->npool == self->pool_cap) {
        Py_ssize_t cap = self->pool_cap + (self->pool_cap >> 3) + 16;
        if (cap > INT32_MAX - 2 ||
            block_realloc(&self->pool, (size_t)cap * sizeof(EoEntry),
                          (size_t)self->npool * sizeof(EoEntry)) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        self->pool_cap = cap;
    }
    h = eo_find(self, ev);
    first = self->table[h].head;
    if (first == -2) {
        self->table[h].key = ev;
        self->table[h].head = -1;
        self->used += 1;
        if (4 * self->used > 3 * (self->mask + 1)) {
            if (eo_grow(self) < 0)
                return -1;
            h = eo_find(self, ev);
        }
        first = -1;
    }
    e = self->free_;
    if (e >= 0)
        self->free_ = EO_POOL(self)[e].next;
    else
        e = (int32_t)self->npool++;
    EO_POOL(self)[e].psn = psn;
    EO_POOL(self)[e].sent = sent;
    EO_POOL(self)[e].next = -1;
    if (first < 0)
        self->table[h].head = e;
    else
        EO_POOL(self)[self->table[h].tail].next = e;
    self->table[h].tail = e;
    return 0;
}

static PyObject *
EvOrder_append(EvOrderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int ok;
    uint32_t ev;
    uint64_t psn, sent;
    if (check_nargs("append", nargs, 3) < 0)
        return NULL;
    ev = eo_ev(args[0], &ok);
    if (!ok) {
        PyErr_SetString(PyExc_OverflowError, "EvOrder: EV out of range");
        return NULL;
    }
    if (as_u64(args[1], &psn) < 0 || as_u64(args[2], &sent) < 0)
        return NULL;
    if (eo_append((PyObject *)self, ev, psn, sent) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
eo_pop_first(PyObject *order, uint32_t ev, uint64_t psn, uint64_t sent)
{
    EvOrderObject *self = (EvOrderObject *)order;
    Py_ssize_t h = eo_find(self, ev);
    int32_t e = self->table[h].head;
    if (e < 0 || EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent)
        return 0;
    self->table[h].head = EO_POOL(self)[e].next;
    eo_release(self, e);
    return 1;
}

static PyObject *
EvOrder_pop_first(EvOrderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t h = 0;
    int32_t e;
    uint64_t psn, sent;
    int ok;
    if (check_nargs("pop_first", nargs, 3) < 0)
        return NULL;
    e = eo_first(self, args[0], &h);
    if (e < 0)
        Py_RETURN_FALSE;
    eo_pair(args[1], args[2], &psn, &sent, &ok);
    if (!ok || EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent)
        Py_RETURN_FALSE;
    self->table[h].head = EO_POOL(self)[e].next;
    eo_release(self, e);
    Py_RETURN_TRUE;
}

static PyObject *
EvOrder_take_through(EvOrderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t h = 0, n = 0, k = 0;
    int32_t first, e;
    uint64_t psn, sent;
    int ok;
    PyObject *before;
    if (check_nargs("take_through", nargs, 3) < 0)
        return NULL;
    first = eo_first(self, args[0], &h);
    if (first < 0)
        Py_RETURN_NONE;
    eo_pair(args[1], args[2], &psn, &sent, &ok);
    if (!ok)
        Py_RETURN_NONE;
    e = first;
    while (e >= 0 && (EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent)) {
        e = EO_POOL(self)[e].next;
        n++;
    }
    if (e < 0)
        Py_RETURN_NONE;
    before = PyList_New(2 * n);
    if (before == NULL)
        return NULL;
    e = first;
    while (EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent) {
        PyObject *a = PyLong_FromUnsignedLongLong(EO_POOL(self)[e].psn);
        PyObject *b = a ? PyLong_FromUnsignedLongLong(EO_POOL(self)[e].sent) : NULL;
        if (b == NULL) {
            Py_XDECREF(a);
            Py_DECREF(before);
            return NULL; /* nothing dropped yet */
        }
        PyList_SET_ITEM(before, k, a);
        PyList_SET_ITEM(before, k + 1, b);
        k += 2;
        e = EO_POOL(self)[e].next;
    }
    /* all built: now drop them */
    e = first;
    while (EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent) {
        int32_t following = EO_POOL(self)[e].next;
        eo_release(self, e);
        e = following;
    }
    self->table[h].head = EO_POOL(self)[e].next;
    eo_release(self, e);
    return before;
}

static PyObject *
EvOrder_remove(EvOrderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t h = 0;
    int32_t e, prev = -1;
    uint64_t psn, sent;
    int ok;
    if (check_nargs("remove", nargs, 3) < 0)
        return NULL;
    e = eo_first(self, args[0], &h);
    if (e < 0)
        Py_RETURN_NONE;
    eo_pair(args[1], args[2], &psn, &sent, &ok);
    if (!ok)
        Py_RETURN_NONE;
    while (e >= 0 && (EO_POOL(self)[e].psn != psn || EO_POOL(self)[e].sent != sent)) {
        prev = e;
        e = EO_POOL(self)[e].next;
    }
    if (e < 0)
        Py_RETURN_NONE;
    if (prev < 0)
        self->table[h].head = EO_POOL(self)[e].next;
    else {
        EO_POOL(self)[prev].next = EO_POOL(self)[e].next;
        if (EO_POOL(self)[e].next == -1)
            self->table[h].tail = prev;
    }
    eo_release(self, e);
    Py_RETURN_NONE;
}

static PyObject *
EvOrder_pairs(EvOrderObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t h = 0;
    int32_t e;
    PyObject *out;
    if (check_nargs("pairs", nargs, 1) < 0)
        return NULL;
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    e = eo_first(self, args[0], &h);
    while (e >= 0) {
        PyObject *t = Py_BuildValue("(KK)", (unsigned long long)EO_POOL(self)[e].psn,
                                    (unsigned long long)EO_POOL(self)[e].sent);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
        e = EO_POOL(self)[e].next;
    }
    return out;
}

static PyObject *
EvOrder_sizeof(EvOrderObject *self, PyObject *unused)
{
    size_t table = (size_t)(self->mask + 1) * sizeof(EoSlot);
    size_t pool = (size_t)self->pool_cap * sizeof(EoEntry) + (self->pool.raw ? 63 : 0);
    return PyLong_FromSize_t(Py_TYPE(self)->tp_basicsize + table + pool);
}

static PyMethodDef EvOrder_methods[] = {
    {"__sizeof__", (PyCFunction)EvOrder_sizeof, METH_NOARGS, "Bytes held, arrays included."},
    {"append", (PyCFunction)(void (*)(void))EvOrder_append, METH_FASTCALL,
     "A transmission of psn went out on ev at sent: last in its chain."},
    {"pop_first", (PyCFunction)(void (*)(void))EvOrder_pop_first, METH_FASTCALL,
     "When psn, sent is the oldest pair on ev, drop it and return True."},
    {"take_through", (PyCFunction)(void (*)(void))EvOrder_take_through, METH_FASTCALL,
     "Drop the pairs of ev up to the first psn, sent and return those before it as flat "
     "pairs (a list); None when ev has no such pair."},
    {"remove", (PyCFunction)(void (*)(void))EvOrder_remove, METH_FASTCALL,
     "Drop the first pair psn, sent of ev, if it has one."},
    {"pairs", (PyCFunction)(void (*)(void))EvOrder_pairs, METH_FASTCALL,
     "The pairs of ev in send order (for tests and inspection)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EvOrderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.transport._txtable.EvOrder",
    .tp_doc = PyDoc_STR("Per EV, the transmissions sent on it and not yet resolved "
                        "(native; see openmrc.transport.txtable.EvOrder)."),
    .tp_basicsize = sizeof(EvOrderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = EvOrder_new,
    .tp_init = EvOrder_init,
    .tp_dealloc = (destructor)EvOrder_dealloc,
    .tp_methods = EvOrder_methods,
};

/* ---- EvIds ------------------------------------------------------------------ */

/* A QP's EV -> id map (openmrc.transport.paths.EvIds): the EV of each id in order,
 * and an open-addressing table of ids (-1 free), at most half full.  Looked up per
 * ACK (an EV from the network: any integer, absent when it is not 32 bits). */
typedef struct {
    PyObject_HEAD
    uint32_t *keys;   /* the EV of each id */
    int32_t *tab;     /* slots: an id, -1 when free */
    Py_ssize_t nkeys, keys_cap, mask, used;
} EvIdsObject;

/* The slot of ``ev``, or the free slot where it would go (the Python class's hash). */
static inline Py_ssize_t
ei_find(const EvIdsObject *self, uint32_t ev)
{
    Py_ssize_t mask = self->mask;
    Py_ssize_t h = (Py_ssize_t)((ev ^ (ev >> 16) ^ (ev >> 7)) & (uint32_t)mask);
    for (;;) {
        int32_t j = self->tab[h];
        if (j < 0 || self->keys[j] == ev)
            return h;
        h = (h + 1) & mask;
    }
}

/* A table of ``size`` free slots, the old one freed; -1 with MemoryError. */
static int
ei_alloc_table(EvIdsObject *self, Py_ssize_t size)
{
    Py_ssize_t j;
    int32_t *tab = PyMem_Malloc((size_t)size * sizeof(int32_t));
    if (tab == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (j = 0; j < size; j++)
        tab[j] = -1;
    PyMem_Free(self->tab);
    self->tab = tab;
    self->mask = size - 1;
    self->used = 0;
    return 0;
}

/* Double the table and put every EV back, the later id of an EV last. */
static int
ei_grow(EvIdsObject *self)
{
    Py_ssize_t i;
    if (self->mask >= (1 << 29)) {
        PyErr_NoMemory();
        return -1;
    }
    if (ei_alloc_table(self, 2 * (self->mask + 1)) < 0)
        return -1;
    for (i = 0; i < self->nkeys; i++) {
        Py_ssize_t h = ei_find(self, self->keys[i]);
        if (self->tab[h] < 0)
            self->used++;
        self->tab[h] = (int32_t)i;
    }
    return 0;
}

/* ids[ev] = i: ``i`` must be the next id, ``ev`` an unsigned 32-bit value (raising as
 * the Python class's array('I') would); nothing changes when either is refused. */
static int
ei_set(EvIdsObject *self, PyObject *ev_obj, PyObject *i_obj)
{
    int ok;
    int64_t i, ev;
    Py_ssize_t h;
    if (i_obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "EvIds: ids cannot be deleted");
        return -1;
    }
    i = as_i64(i_obj, &ok);
    if (!ok || i != self->nkeys) {
        PyErr_Format(PyExc_ValueError, "EvIds: ids come in order, %zd next, not %R",
                     self->nkeys, i_obj);
        return -1;
    }
    if (!PyLong_Check(ev_obj)) {
        PyErr_SetString(PyExc_TypeError, "an integer is required");
        return -1;
    }
    ev = as_i64(ev_obj, &ok);
    if (!ok || ev < 0 || ev > (int64_t)0xFFFFFFFF) {
        PyErr_SetString(PyExc_OverflowError, "EvIds: an EV is an unsigned 32-bit value");
        return -1;
    }
    if (self->nkeys >= (1 << 30)) {
        PyErr_NoMemory();
        return -1;
    }
    if (self->nkeys == self->keys_cap) {
        Py_ssize_t cap = self->keys_cap ? 2 * self->keys_cap : 16;
        uint32_t *keys = PyMem_Realloc(self->keys, (size_t)cap * sizeof(uint32_t));
        if (keys == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->keys = keys;
        self->keys_cap = cap;
    }
    h = ei_find(self, (uint32_t)ev);
    if (self->tab[h] < 0 && 2 * (self->used + 1) > self->mask + 1) {
        /* a new EV fills the table past half: double it first (the Python class
         * doubles right after; either way every EV goes back in id order, this one
         * last), so that a failed growth changes nothing */
        if (ei_grow(self) < 0)
            return -1;
        h = ei_find(self, (uint32_t)ev);
    }
    self->keys[self->nkeys++] = (uint32_t)ev;
    if (self->tab[h] < 0)
        self->used++;
    self->tab[h] = (int32_t)i;
    return 0;
}

static PyObject *
EvIds_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    EvIdsObject *self = (EvIdsObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (ei_alloc_table(self, 16) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Put every EV in the (empty) table, in id order. */
static void
ei_put_all(EvIdsObject *self)
{
    Py_ssize_t i;
    for (i = 0; i < self->nkeys; i++) {
        Py_ssize_t h = ei_find(self, self->keys[i]);
        if (self->tab[h] < 0)
            self->used++;
        self->tab[h] = (int32_t)i;
    }
}

/* Fill an empty table from the ``n`` EVs at ``evs`` (a buffer of C unsigned ints)
 * without a Python int per EV: the keys array and the table are sized once and the
 * ids written in order.  The result is the one ``n`` item assignments give (the
 * same key capacity, table size and slots: with linear probing and no deletion the
 * slots depend only on the order of first appearance, and growth puts every EV
 * back in id order), so ``__sizeof__``, ``get`` and later growth do not depend on
 * the path taken.  -1 with MemoryError (more than 2**29 EVs: a table of 2**30 slots is
 * the most item assignments make). */
static int
ei_fill(EvIdsObject *self, const uint32_t *evs, Py_ssize_t n)
{
    Py_ssize_t cap = 16, size = 16;
    uint32_t *keys;
    if (n == 0)
        return 0;
    if (n > (1 << 29)) {
        PyErr_NoMemory();
        return -1;
    }
    while (cap < n)
        cap *= 2;
    keys = PyMem_Malloc((size_t)cap * sizeof(uint32_t));
    if (keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(keys, evs, (size_t)n * sizeof(uint32_t));
    /* at most half full were every EV distinct */
    while (2 * n > size)
        size *= 2;
    if (size != self->mask + 1 && ei_alloc_table(self, size) < 0) {
        PyMem_Free(keys);
        return -1;
    }
    PyMem_Free(self->keys);
    self->keys = keys;
    self->keys_cap = cap;
    self->nkeys = n;
    ei_put_all(self);
    if (size > 16 && 2 * self->used <= size / 2) {
        /* repeated EVs: the smallest table holding the distinct ones at most half
         * full, as the item assignments would have left it (a failure leaves the
         * larger table, whole) */
        while (size > 16 && 2 * self->used <= size / 2)
            size /= 2;
        if (ei_alloc_table(self, size) < 0)
            return -1;
        ei_put_all(self);
    }
    return 0;
}

/* EvIds(evs): id i for the i-th EV of ``evs`` (a later id of an EV replaces it).  An
 * ``array('I')`` (any buffer of C unsigned ints, what a PathSet's ``_evs`` is) is
 * read directly (ei_fill); any other sequence item by item. */
static int
EvIds_init(EvIdsObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *evs, *seq;
    Py_ssize_t n, i;
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "EvIds() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_UnpackTuple(args, "EvIds", 1, 1, &evs))
        return -1;
    if (self->nkeys) {
        PyErr_SetString(PyExc_TypeError, "EvIds: already filled");
        return -1;
    }
    if (PyObject_CheckBuffer(evs)) {
        Py_buffer view;
        if (PyObject_GetBuffer(evs, &view, PyBUF_FORMAT) == 0) {
            if (view.itemsize == 4 && view.format != NULL && strcmp(view.format, "I") == 0) {
                int rc = ei_fill(self, (const uint32_t *)view.buf, view.len / 4);
                PyBuffer_Release(&view);
                return rc;
            }
            PyBuffer_Release(&view);
        }
        else
            PyErr_Clear(); /* not a plain buffer: read it as a sequence */
    }
    seq = PySequence_Fast(evs, "EvIds() takes a sequence of EVs");
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {
        PyObject *id = PyLong_FromSsize_t(i);
        int rc;
        if (id == NULL) {
            Py_DECREF(seq);
            return -1;
        }
        rc = ei_set(self, PySequence_Fast_GET_ITEM(seq, i), id);
        Py_DECREF(id);
        if (rc < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static void
EvIds_dealloc(EvIdsObject *self)
{
    PyMem_Free(self->keys);
    PyMem_Free(self->tab);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
EvIds_get(EvIdsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int ok;
    int64_t ev;
    int32_t j;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "get() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "get(): an EV is an integer");
        return NULL;
    }
    ev = as_i64(args[0], &ok);
    j = -1;
    if (ok && ev >= 0 && ev <= (int64_t)0xFFFFFFFF)
        j = self->tab[ei_find(self, (uint32_t)ev)];
    if (j >= 0)
        return PyLong_FromLong((long)j);
    if (nargs == 2) {
        Py_INCREF(args[1]);
        return args[1];
    }
    return PyLong_FromLong(-1);
}

static PyObject *
EvIds_sizeof(EvIdsObject *self, PyObject *unused)
{
    size_t arrays = (size_t)self->keys_cap * sizeof(uint32_t) +
                    (size_t)(self->mask + 1) * sizeof(int32_t);
    return PyLong_FromSize_t(Py_TYPE(self)->tp_basicsize + arrays);
}

static PyMethodDef EvIds_methods[] = {
    {"__sizeof__", (PyCFunction)EvIds_sizeof, METH_NOARGS, "Bytes held, arrays included."},
    {"get", (PyCFunction)(void (*)(void))EvIds_get, METH_FASTCALL,
     "The id of ev, or default (-1) when it has none."},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods EvIds_as_mapping = {
    .mp_ass_subscript = (objobjargproc)ei_set,
};

static PyTypeObject EvIdsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.transport._txtable.EvIds",
    .tp_doc = PyDoc_STR("A QP's EV -> id map (native; see openmrc.transport.paths.EvIds)."),
    .tp_basicsize = sizeof(EvIdsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = EvIds_new,
    .tp_init = (initproc)EvIds_init,
    .tp_dealloc = (destructor)EvIds_dealloc,
    .tp_methods = EvIds_methods,
    .tp_as_mapping = &EvIds_as_mapping,
};

/* ---- a PathSet's GOOD EVs of a plane ------------------------------------------- */

/* good_evs(evs, st, slots, plane, bad): [evs[i] for i in slots if evs[i] & 15 == plane
 * and st[i] < bad], as openmrc.transport.paths.PathSet.good_evs computes it, with
 * ``evs`` an array('I'), ``st`` a bytearray and ``slots`` a list of ids.  Compiled
 * Python reads each array item through the generic item protocol; here the arrays are
 * read through the buffer protocol.  An id outside either array raises IndexError, as
 * the Python comprehension would (ids are the QP's own, never from the network). */
static PyObject *
native_good_evs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *slots, *out = NULL;
    const uint32_t *evs;
    const unsigned char *st;
    Py_ssize_t nevs, nst, n, k;
    long plane, bad;
    if (check_nargs("good_evs", nargs, 5) < 0)
        return NULL;
    if (!PyByteArray_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "good_evs(): st is a bytearray, slots a list");
        return NULL;
    }
    plane = PyLong_AsLong(args[3]);
    if (plane == -1 && PyErr_Occurred())
        return NULL;
    bad = PyLong_AsLong(args[4]);
    if (bad == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_FORMAT) < 0)
        return NULL;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "I") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "good_evs(): evs is an array('I')");
        return NULL;
    }
    evs = (const uint32_t *)view.buf;
    nevs = view.len / 4;
    st = (const unsigned char *)PyByteArray_AS_STRING(args[1]);
    nst = PyByteArray_GET_SIZE(args[1]);
    slots = args[2];
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    n = PyList_GET_SIZE(slots);
    for (k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(slots, k));
        uint32_t ev;
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= nevs) {
            PyErr_SetString(PyExc_IndexError, "array index out of range");
            goto fail;
        }
        ev = evs[i];
        if ((long)(ev & 15) != plane)
            continue;
        if (i >= nst) {
            PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
            goto fail;
        }
        if ((long)st[i] < bad) {
            PyObject *o = PyLong_FromUnsignedLong(ev);
            if (o == NULL || PyList_Append(out, o) < 0) {
                Py_XDECREF(o);
                goto fail;
            }
            Py_DECREF(o);
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&view);
    return out;
}

/* The arguments (evs, st, slots, plane, bad) that good_after and good_pick share with
 * good_evs, checked the same way; the EV array's buffer is held in *view (released by
 * the caller) when this returns 0. */
static int
good_open(const char *name, PyObject *const *args, Py_buffer *view, long *plane, long *bad)
{
    if (!PyByteArray_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_Format(PyExc_TypeError, "%s(): st is a bytearray, slots a list", name);
        return -1;
    }
    *plane = PyLong_AsLong(args[3]);
    if (*plane == -1 && PyErr_Occurred())
        return -1;
    *bad = PyLong_AsLong(args[4]);
    if (*bad == -1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(args[0], view, PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 4 || view->format == NULL || strcmp(view->format, "I") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s(): evs is an array('I')", name);
        return -1;
    }
    return 0;
}

/* A slot's id (an int item of the slots list) as PyLong_AsSsize_t gives it: an exact
 * int of at most one digit read in place (CPython 3.11's layout), as every id is; any
 * other item goes through PyLong_AsSsize_t (its result or its error). */
static inline Py_ssize_t
slot_id(PyObject *o)
{
    Py_ssize_t small;
    if (small_index(o, &small))
        return small;
    return PyLong_AsSsize_t(o);
}

/* With good = good_evs(evs, st, slots, plane, bad): len(good) in one pass, or, when
 * stop >= 0, stop + 1 once *ev is good[stop] (-1 with IndexError or TypeError set, as
 * good_evs raises them). */
static Py_ssize_t
good_count(const Py_buffer *view, PyObject *st_obj, PyObject *slots, long plane, long bad,
           Py_ssize_t stop, uint32_t *ev)
{
    const uint32_t *evs = (const uint32_t *)view->buf;
    Py_ssize_t nevs = view->len / 4;
    const unsigned char *st = (const unsigned char *)PyByteArray_AS_STRING(st_obj);
    Py_ssize_t nst = PyByteArray_GET_SIZE(st_obj);
    Py_ssize_t n = PyList_GET_SIZE(slots), k, count = 0;
    for (k = 0; k < n; k++) {
        Py_ssize_t i = slot_id(PyList_GET_ITEM(slots, k));
        if (i == -1 && PyErr_Occurred())
            return -1;
        if (i < 0 || i >= nevs) {
            PyErr_SetString(PyExc_IndexError, "array index out of range");
            return -1;
        }
        if ((long)(evs[i] & 15) != plane)
            continue;
        if (i >= nst) {
            PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
            return -1;
        }
        if ((long)st[i] < bad) {
            if (count == stop) {
                *ev = evs[i];
                return count + 1;
            }
            count++;
        }
    }
    return count;
}

/* good_after(evs, st, slots, plane, bad, ev): the item of good = good_evs(evs, st,
 * slots, plane, bad) after the first that equals ev (the first item after the last),
 * good[0] when none equals ev, -1 when good is empty, as
 * openmrc.transport.paths.good_after computes it: one pass, no list made. */
static PyObject *
native_good_after(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long plane, bad, first = -1;
    long long want;
    Py_ssize_t k, n, nevs, nst;
    const uint32_t *evs;
    const unsigned char *st;
    uint32_t ev;
    int found = 0, overflow = 0;
    if (check_nargs("good_after", nargs, 6) < 0)
        return NULL;
    /* (an EV is past one digit, 2**30: PyLong_AsLongLong would take it through
     * _PyLong_AsByteArray; this reads the digits, with the same errors) */
    want = PyLong_AsLongLongAndOverflow(args[5], &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C long long");
        return NULL;
    }
    if (want == -1 && PyErr_Occurred())
        return NULL;
    if (good_open("good_after", args, &view, &plane, &bad) < 0)
        return NULL;
    evs = (const uint32_t *)view.buf;
    nevs = view.len / 4;
    st = (const unsigned char *)PyByteArray_AS_STRING(args[1]);
    nst = PyByteArray_GET_SIZE(args[1]);
    n = PyList_GET_SIZE(args[2]);
    for (k = 0; k < n; k++) {
        Py_ssize_t i = slot_id(PyList_GET_ITEM(args[2], k));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= nevs) {
            PyErr_SetString(PyExc_IndexError, "array index out of range");
            goto fail;
        }
        if ((long)(evs[i] & 15) != plane)
            continue;
        if (i >= nst) {
            PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
            goto fail;
        }
        if ((long)st[i] >= bad)
            continue;
        ev = evs[i];
        if (found) {
            PyBuffer_Release(&view);
            return PyLong_FromUnsignedLong(ev);
        }
        if (first < 0)
            first = (long)ev;
        if ((long long)ev == want)
            found = 1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(first);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* good_pick(evs, st, slots, plane, bad, k): with good = good_evs(evs, st, slots,
 * plane, bad) and n = len(good), (n << 32) | good[k % n], or 0 when n is 0, as
 * openmrc.transport.paths.good_pick computes it (k >= 0): no list made. */
static PyObject *
native_good_pick(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long plane, bad;
    Py_ssize_t want, n;
    uint32_t ev = 0;
    if (check_nargs("good_pick", nargs, 6) < 0)
        return NULL;
    want = PyLong_AsSsize_t(args[5]);
    if (want == -1 && PyErr_Occurred())
        return NULL;
    if (want < 0) {
        PyErr_SetString(PyExc_ValueError, "good_pick(): k is negative");
        return NULL;
    }
    if (good_open("good_pick", args, &view, &plane, &bad) < 0)
        return NULL;
    n = good_count(&view, args[1], args[2], plane, bad, -1, &ev);
    if (n > 0)
        good_count(&view, args[1], args[2], plane, bad, want % n, &ev); /* (no error now) */
    PyBuffer_Release(&view);
    if (n < 0)
        return NULL;
    if (n == 0)
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong((unsigned long long)n << 32 | ev);
}

/* ---- a PathSet's rotation: the EV for the next packet --------------------------- */

/* An index into a sequence of n items as Python reads it: a negative one counts from
 * the end; -1 (IndexError set) when outside. */
static inline Py_ssize_t
seq_index(Py_ssize_t k, Py_ssize_t n, const char *what)
{
    if (k < 0)
        k += n;
    if (k < 0 || k >= n) {
        PyErr_Format(PyExc_IndexError, "%s index out of range", what);
        return -1;
    }
    return k;
}

/* A list item or argument used as an index: a Python int as Py_ssize_t; -1 with
 * TypeError set for a non-int, IndexError for one too large (as a subscript would). */
static inline Py_ssize_t
as_index(PyObject *o, int *err)
{
    Py_ssize_t v;
    *err = 0;
    Py_ssize_t small;
    if (small_index(o, &small))
        return small;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "indices must be integers, not %.100s",
                     Py_TYPE(o)->tp_name);
        *err = 1;
        return -1;
    }
    v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_IndexError, "cannot fit 'int' into an index-sized integer");
        *err = 1;
    }
    return v;
}

/* rotate(slots, st, evs, i): one step of a PathSet's plain rotation (no plane passed
 * over, no plane weighed), as openmrc.transport.paths.rotate computes it: from slot
 * i on, the first id whose state (st) is GOOD (0) gives the EV (evs); a SKIP (1)
 * passed over becomes GOOD.  Returns (the next slot << 32) | the EV (Python's value of
 * that expression, also for a negative slot); when no slot is GOOD, the EV in slot i
 * and the slot after it.  ``slots`` is a list of ids, ``st``
 * a bytearray, ``evs`` an array('I').  Ids are the QP's own (never from the network);
 * one outside its array raises IndexError as the Python lookups would, a negative
 * one counts from the end as they do.  One call per data packet sent: compiled
 * Python read each state and EV through CPython's generic item protocol. */
static PyObject *
native_rotate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *slots, *out = NULL;
    const uint32_t *evs;
    unsigned char *st;
    Py_ssize_t nevs, nst, n, i, step;
    int err;
    if (check_nargs("rotate", nargs, 4) < 0)
        return NULL;
    if (!PyList_Check(args[0]) || !PyByteArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "rotate(): slots is a list, st a bytearray");
        return NULL;
    }
    i = as_index(args[3], &err);
    if (err)
        return NULL;
    slots = args[0];
    n = PyList_GET_SIZE(slots);
    if (n > 0x7FFFFFFF) {
        PyErr_SetString(PyExc_OverflowError, "rotate(): more than 2**31 slots");
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &view, PyBUF_FORMAT) < 0)
        return NULL;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "I") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "rotate(): evs is an array('I')");
        return NULL;
    }
    evs = (const uint32_t *)view.buf;
    nevs = view.len / 4;
    st = (unsigned char *)PyByteArray_AS_STRING(args[1]);
    nst = PyByteArray_GET_SIZE(args[1]);
    for (step = 0; step < n; step++) {
        Py_ssize_t k, s;
        if (seq_index(i, n, "list") < 0)
            goto done;
        k = as_index(PyList_GET_ITEM(slots, i < 0 ? i + n : i), &err);
        if (err)
            goto done;
        i += 1;
        if (i == n)
            i = 0;
        s = seq_index(k, nst, "bytearray");
        if (s < 0)
            goto done;
        if (st[s] == 0) {
            Py_ssize_t e = seq_index(k, nevs, "array");
            if (e < 0)
                goto done;
            out = PyLong_FromLongLong((long long)i * 4294967296LL + (long long)evs[e]);
            goto done;
        }
        if (st[s] == 1)
            st[s] = 0;
    }
    /* nothing GOOD: the EV in slot i anyway, and the slot after it next */
    {
        Py_ssize_t j, at, k, e;
        at = seq_index(i, n, "list");
        if (at < 0)
            goto done;
        j = i + 1 < n ? i + 1 : 0; /* -n <= i < n here: no overflow */
        k = as_index(PyList_GET_ITEM(slots, at), &err);
        if (err)
            goto done;
        e = seq_index(k, nevs, "array");
        if (e < 0)
            goto done;
        out = PyLong_FromLongLong((long long)j * 4294967296LL + (long long)evs[e]);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* rotate_busy(slots, st, evs, pcur, i, skip): one step of a PathSet's rotation while
 * some planes are passed over (``skip``: a bitmask of busy or down planes) and no plane
 * is weighed, as openmrc.transport.paths.rotate_busy computes it: from slot i on, the
 * first id whose state is GOOD (0) and whose EV's plane is not in ``skip`` picks the
 * plane, and the EV sent is that plane's next GOOD one in its own rotation (``pcur``,
 * an array('I'): PathSet._plane_index's per-plane offsets, cursors and slot
 * positions; the plane's cursor moves on); a SKIP (1) passed over becomes GOOD.
 * Returns (the next slot << 32) | the EV (Python's value of that expression, also
 * for a negative slot), or None when no slot qualified (the slot index is then back
 * where it started).  ``i`` is the rotation's index (a negative one counts from the
 * end, as a list index does); ids and positions are the QP's own (never from the
 * network): one outside its array raises IndexError.  One call per data packet sent while a port
 * is busy (a multi-port NIC: nearly every packet), where compiled Python read each
 * state, EV and position through CPython's generic item protocol. */
static PyObject *
native_rotate_busy(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, pview;
    PyObject *slots, *out = NULL;
    const uint32_t *evs;
    uint32_t *pcur;
    unsigned char *st;
    Py_ssize_t nevs, nst, npcur, n, i, step;
    unsigned long long skip;
    int err;
    if (check_nargs("rotate_busy", nargs, 6) < 0)
        return NULL;
    if (!PyList_Check(args[0]) || !PyByteArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "rotate_busy(): slots is a list, st a bytearray");
        return NULL;
    }
    i = as_index(args[4], &err);
    if (err)
        return NULL;
    skip = PyLong_AsUnsignedLongLongMask(args[5]);
    if (skip == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    slots = args[0];
    n = PyList_GET_SIZE(slots);
    if (n > 0x7FFFFFFF) {
        PyErr_SetString(PyExc_OverflowError, "rotate_busy(): more than 2**31 slots");
        return NULL;
    }
    if (n > 0 && (i < -n || i >= n)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &view, PyBUF_FORMAT) < 0)
        return NULL;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "I") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "rotate_busy(): evs is an array('I')");
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &pview, PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pview.itemsize != 4 || pview.format == NULL || strcmp(pview.format, "I") != 0) {
        PyErr_SetString(PyExc_TypeError, "rotate_busy(): pcur is an array('I')");
        goto done;
    }
    evs = (const uint32_t *)view.buf;
    nevs = view.len / 4;
    pcur = (uint32_t *)pview.buf;
    npcur = pview.len / 4;
    st = (unsigned char *)PyByteArray_AS_STRING(args[1]);
    nst = PyByteArray_GET_SIZE(args[1]);
    if (npcur < 33) {
        PyErr_SetString(PyExc_IndexError, "array index out of range");
        goto done;
    }
    for (step = 0; step < n; step++) {
        Py_ssize_t k, s, e;
        uint32_t ev, plane, lo, m, c, t;
        k = as_index(PyList_GET_ITEM(slots, i < 0 ? i + n : i), &err);
        if (err)
            goto done;
        i += 1;
        if (i == n)
            i = 0;
        s = seq_index(k, nst, "bytearray");
        if (s < 0)
            goto done;
        if (st[s] == 1) {
            st[s] = 0;
            continue;
        }
        if (st[s] != 0)
            continue;
        e = seq_index(k, nevs, "array");
        if (e < 0)
            goto done;
        ev = evs[e];
        plane = ev & 15;
        if ((skip >> plane) & 1)
            continue;
        /* the plane's next GOOD EV in its own rotation */
        lo = pcur[plane];
        m = pcur[plane + 1] - lo;
        c = pcur[17 + plane];
        for (t = 0; t < m; t++) {
            Py_ssize_t at = (Py_ssize_t)lo + 33 + c, pos, kk, ss;
            if (at >= npcur) {
                PyErr_SetString(PyExc_IndexError, "array index out of range");
                goto done;
            }
            pos = seq_index((Py_ssize_t)pcur[at], n, "list");
            if (pos < 0)
                goto done;
            kk = as_index(PyList_GET_ITEM(slots, pos), &err);
            if (err)
                goto done;
            c += 1;
            if (c == m)
                c = 0;
            ss = seq_index(kk, nst, "bytearray");
            if (ss < 0)
                goto done;
            if (st[ss] == 0) {
                Py_ssize_t ee = seq_index(kk, nevs, "array");
                if (ee < 0)
                    goto done;
                pcur[17 + plane] = c;
                ev = evs[ee];
                break;
            }
        }
        out = PyLong_FromLongLong((long long)i * 4294967296LL + (long long)ev);
        goto done;
    }
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&pview);
    PyBuffer_Release(&view);
    return out;
}

/* ecn_clean(ids, rate, run, inslot, ev, keep): an ACK without an ECN echo for ``ev``
 * (see paths.ecn_clean): an EV with a positive rate has it decayed by ``keep`` and its
 * run of marks reset, and the change of the rate (<= 0) is returned; an EV in a slot
 * with no rate yet (< 0) gets 0.0 and 1.0 is returned; else 0.0, nothing written. */
static PyObject *
native_ecn_clean(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    EvIdsObject *ids;
    Py_buffer rv, nv;
    int64_t ev;
    int ok;
    int32_t j;
    double keep, r, nw;
    if (check_nargs("ecn_clean", nargs, 6) < 0)
        return NULL;
    if (Py_TYPE(args[0]) != &EvIdsType) {
        PyErr_SetString(PyExc_TypeError, "ecn_clean: ids must be a native EvIds");
        return NULL;
    }
    if (!PyLong_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "ecn_clean: an EV is an integer");
        return NULL;
    }
    keep = PyFloat_AsDouble(args[5]);
    if (keep == -1.0 && PyErr_Occurred())
        return NULL;
    ids = (EvIdsObject *)args[0];
    ev = as_i64(args[4], &ok);
    if (!ok || ev < 0 || ev > (int64_t)0xFFFFFFFF)
        return PyFloat_FromDouble(0.0);
    j = ids->tab[ei_find(ids, (uint32_t)ev)];
    if (j < 0)
        return PyFloat_FromDouble(0.0);
    if (PyObject_GetBuffer(args[1], &rv, PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    if (rv.format == NULL || strcmp(rv.format, "d") != 0 || rv.itemsize != 8) {
        PyBuffer_Release(&rv);
        PyErr_SetString(PyExc_TypeError, "ecn_clean: rate must be an array('d')");
        return NULL;
    }
    if ((Py_ssize_t)j >= rv.len / 8) {
        PyBuffer_Release(&rv);
        PyErr_SetString(PyExc_IndexError, "ecn_clean: rate is shorter than the ids");
        return NULL;
    }
    r = ((double *)rv.buf)[j];
    if (r <= 0.0) {
        double out = 0.0;
        if (r < 0.0) { /* no rate yet: an EV in a slot starts at 0 */
            if (!PyByteArray_Check(args[3])) {
                PyBuffer_Release(&rv);
                PyErr_SetString(PyExc_TypeError, "ecn_clean: inslot must be a bytearray");
                return NULL;
            }
            if ((Py_ssize_t)j >= PyByteArray_GET_SIZE(args[3])) {
                PyBuffer_Release(&rv);
                PyErr_SetString(PyExc_IndexError, "ecn_clean: inslot is shorter than the ids");
                return NULL;
            }
            if (PyByteArray_AS_STRING(args[3])[j]) {
                ((double *)rv.buf)[j] = 0.0;
                out = 1.0;
            }
        }
        PyBuffer_Release(&rv);
        return PyFloat_FromDouble(out);
    }
    if (PyObject_GetBuffer(args[2], &nv, PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    if (nv.format == NULL || strcmp(nv.format, "H") != 0 || nv.itemsize != 2 ||
        (Py_ssize_t)j >= nv.len / 2) {
        PyBuffer_Release(&nv);
        PyBuffer_Release(&rv);
        PyErr_SetString(PyExc_TypeError, "ecn_clean: run must be an array('H') as long as rate");
        return NULL;
    }
    ((uint16_t *)nv.buf)[j] = 0;
    PyBuffer_Release(&nv);
    nw = r * keep;
    ((double *)rv.buf)[j] = nw;
    PyBuffer_Release(&rv);
    return PyFloat_FromDouble(nw - r);
}

static PyMethodDef txtable_functions[] = {
    {"good_evs", (PyCFunction)(void (*)(void))native_good_evs, METH_FASTCALL,
     "[evs[i] for i in slots if evs[i] & 15 == plane and st[i] < bad]"},
    {"good_after", (PyCFunction)(void (*)(void))native_good_after, METH_FASTCALL,
     "The GOOD EV of a plane after ev in rotation order (see paths.good_after)"},
    {"good_pick", (PyCFunction)(void (*)(void))native_good_pick, METH_FASTCALL,
     "(count << 32) | the k-th GOOD EV of a plane, mod the count (see paths.good_pick)"},
    {"rotate", (PyCFunction)(void (*)(void))native_rotate, METH_FASTCALL,
     "(next slot << 32) | EV: one step of a PathSet's plain rotation"},
    {"rotate_busy", (PyCFunction)(void (*)(void))native_rotate_busy, METH_FASTCALL,
     "(next slot << 32) | EV, or None: one step of a PathSet's rotation past busy planes"},
    {"ecn_clean", (PyCFunction)(void (*)(void))native_ecn_clean, METH_FASTCALL,
     "An ACK without ECN for ev: its rate decayed, its run reset (see paths.ecn_clean)"},
    {NULL, NULL, 0, NULL},
};

/* ---- module ----------------------------------------------------------------- */

static struct PyModuleDef txtable_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "openmrc.transport._txtable",
    .m_doc = "Native TxTable and EvOrder (see openmrc.transport.txtable) and EvIds "
             "(openmrc.transport.paths).",
    .m_size = -1,
    .m_methods = txtable_functions,
};

PyMODINIT_FUNC
PyInit__txtable(void)
{
    PyObject *m;
    if (PyType_Ready(&TxTableType) < 0 || PyType_Ready(&EvOrderType) < 0 ||
        PyType_Ready(&EvIdsType) < 0)
        return NULL;
    m = PyModule_Create(&txtable_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&TxTableType);
    if (PyModule_AddObject(m, "TxTable", (PyObject *)&TxTableType) < 0) {
        Py_DECREF(&TxTableType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EvOrderType);
    if (PyModule_AddObject(m, "EvOrder", (PyObject *)&EvOrderType) < 0) {
        Py_DECREF(&EvOrderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&EvIdsType);
    if (PyModule_AddObject(m, "EvIds", (PyObject *)&EvIdsType) < 0) {
        Py_DECREF(&EvIdsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
