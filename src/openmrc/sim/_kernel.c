/*
 * openmrc.sim._kernel: the simulator's fabric hot path in C.
 *
 * Native versions of the event loop (Simulator), the egress port (EgressPort),
 * the SRv6 uSID switch (Switch) and the host end of a host link (HostEnd).
 * They behave exactly as the pure-Python classes in engine.py, port.py and
 * switch.py (which stay the fallback): every event takes its key from the
 * running entity's counter at the same point as there (engine.py explains the
 * key: time, then scheduling entity << KEY_SHIFT | its counter), runs for the
 * same target entity, and each port's random generator (made on its first
 * draw by Simulator.rng_for) is called at the same points, so a run gives the
 * same result bit for bit.
 *
 * Events are C structs ordered by (time, key): those of the current time slot in
 * a 4-ary heap kept as two arrays (the keys, which the heap compares, and the
 * rest), those of the next slots in a wheel of unsorted buckets, those further
 * ahead in a second heap ("the event store").  An event is
 * either a Python call (callable + args tuple), a packet arriving at the far
 * end of a port, or a port's "transmitter free".  Arrivals at a native Switch
 * or HostEnd, and the switch's enqueue onto a native port, involve no Python
 * call; a Python callable is called only where Python code is the target.
 *
 * Python subclasses in engine.py / port.py / switch.py add the cold methods
 * (reporting, repr) and the garbage-collector handling of Simulator.run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* 128-bit arithmetic where the compiler has it (gcc, clang on 64-bit targets);
 * otherwise (MSVC, 32-bit) portable fallbacks.  OPENMRC_NO_INT128 forces the
 * fallbacks (the tests build the extension that way too). */
#if defined(__SIZEOF_INT128__) && !defined(OPENMRC_NO_INT128)
#define HAVE_INT128 1
#endif

/* ------------------------------------------------------------------------ */
/* module state (one interpreter: plain statics)                             */

static PyObject *DataPacketType = NULL; /* openmrc.wire.packets.DataPacket */
static PyObject *RandomClass = NULL;    /* random.Random */
static PyObject *PyLong_Shift = NULL;   /* ACTIVE_SHIFT (80) */
static PyObject *PyLong_Block = NULL;   /* BLOCK */
static PyObject *PyLong_Carrier = NULL; /* CARRIER_MASK */
static PyObject *PyLong_16 = NULL;
static PyObject *PyLong_FFFF = NULL;
static PyObject *S_size, *S_trimmed, *S_ecn, *S_trim, *S_route, *S_random, *S_epoch,
    *S_lost_in_flight, *S_enqueue, *S_rng_for;

#define BLOCK_PREFIX 0xFCBB0000ULL
#define ACTIVE_SHIFT 80
/* a route is handled as two 64-bit halves; the block sits in the high half */
#define BLOCK_HI ((uint64_t)BLOCK_PREFIX << 32) /* BLOCK = BLOCK_PREFIX << 96 */
#define CARRIER_HI 0xFFFFFFFFULL                /* CARRIER_MASK = 2**96 - 1 */

/* EV_CALL: a(*b), b an args tuple; EV_CALL1: a(b), one argument and no tuple
 * (Simulator.post); EV_ARRIVE: b arrives at the far end of port a, sent in the
 * port's epoch kept in the event; EV_ARRIVE_BIG: the same with b = (packet,
 * epoch) for an epoch too large to keep in the event; EV_TXFREE: port a's
 * transmitter is free */
enum { EV_CALL = 0, EV_ARRIVE = 1, EV_TXFREE = 2, EV_CALL1 = 3, EV_ARRIVE_BIG = 4 };
enum { RX_PY = 0, RX_SWITCH = 1, RX_HOST = 2 };

/* An event is 40 bytes: its key (entity << KEY_SHIFT | that entity's counter:
 * unique, so (t, key) orders every event), and meta, which packs the target
 * entity (high 32 bits), an arrival's epoch and the kind. */
#define SK_KIND_BITS 3
#define SK_EPOCH_BITS 17
#define EPOCH_SMALL ((int64_t)1 << SK_EPOCH_BITS)
#define KEY_SHIFT 40                                      /* engine.KEY_SHIFT */
#define COUNTER_LIMIT ((int64_t)1 << KEY_SHIFT)           /* events one entity schedules */
#define ENTITY_LIMIT ((int64_t)1 << (64 - KEY_SHIFT - 1)) /* entities (keys stay < 2**63) */

#define T_BIAS 0x8000000000000000ULL
typedef struct {
    uint64_t key;  /* entity << KEY_SHIFT | counter */
    uint64_t tk;   /* the time, biased (t ^ T_BIAS) so that it orders as unsigned */
    uint64_t meta; /* target << 32 | epoch << SK_KIND_BITS | kind */
    PyObject *a; /* EV_CALL, EV_CALL1: callable; else the port */
    PyObject *b; /* EV_CALL: args tuple; EV_CALL1: the argument; EV_ARRIVE: the packet;
                    EV_ARRIVE_BIG: (packet, epoch); EV_TXFREE: NULL */
} Event;

/* In the heap an event is split in two arrays at the same index: its order (key,
 * time: 16 bytes, so the four children of a node share one 64-byte cache line,
 * which the pop compares) and the rest (moved along, read once when popped). */
typedef struct {
    uint64_t key, tk; /* as in Event */
} HKey;
typedef struct {
    uint64_t meta;
    PyObject *a, *b;
} HPay;

static inline int64_t ev_time(const Event *e)
{
    return (int64_t)(e->tk ^ T_BIAS);
}

static inline int ev_kind(const Event *e)
{
    return (int)(e->meta & ((1u << SK_KIND_BITS) - 1));
}

static inline int64_t ev_key(const Event *e)
{
    return (int64_t)e->key;
}

static inline int64_t ev_target(const Event *e)
{
    return (int64_t)(e->meta >> 32);
}

static inline int64_t ev_epoch(const Event *e)
{
    return (int64_t)((e->meta >> SK_KIND_BITS) & (uint64_t)(EPOCH_SMALL - 1));
}

/* A 4-ary heap of events. */
typedef struct {
    HKey *hk;     /* the events' order, hk[0] the smallest; aligned so that the
                     children 4i+1 .. 4i+4 of node i start a cache line */
    HPay *hp;     /* the rest of each event, at the same index */
    void *hk_mem; /* what hk was allocated as */
    Py_ssize_t n, cap;
} Heap;

/* Events of a slot of the wheel in a chain of chunks (from one pool, so that the
 * wheel holds about as much memory as it holds events, however they are spread
 * over the slots). */
#define CHUNK_EVENTS 15
typedef struct Chunk {
    struct Chunk *next;
    Py_ssize_t len;
    Event ev[CHUNK_EVENTS];
} Chunk;

/* A slot of the wheel: its events in the order they came (unsorted). */
typedef struct {
    Chunk *head, *tail; /* NULL when empty */
    Py_ssize_t len;
} Bucket;

/* Where the pending events wait (see "the event store"). */
typedef struct {
    Event *run;      /* the current slot's events as loaded, sorted: run[ri .. rn) */
    Event *run_tmp;  /* the radix sort's other buffer (runcap events each) */
    Py_ssize_t ri, rn, runcap;
    Heap h;          /* events put into the current slot (or an earlier) after it was
                        loaded, and far's events due: popped from with run */
    Heap far;        /* events WHEEL_SLOTS slots or more ahead when scheduled */
    Bucket *wheel;   /* WHEEL_SLOTS buckets (NULL until the first is needed) */
    uint64_t *wbits; /* bit i: bucket i holds events (WHEEL_SLOTS bits) */
    Chunk *spare;    /* chunks not in use */
    Py_ssize_t wn;   /* events in the wheel's buckets */
    uint64_t wcur;   /* the current slot (time >> WHEEL_SHIFT, biased) */
} EvStore;

/* An entity's row: its next counter, and the address of the object it last had
 * registered in the simulator's table (0: none), which sim_target compares
 * before hashing: the common post is a host's own callback from an event of that
 * host, and this row was just read for the key (sim_next_key), so the answer is
 * in the cache, where the table's slot at 8,192 hosts usually is not.  Invariant:
 * owner is 0 or an address the table maps to this entity (ent_set keeps it). */
typedef struct {
    int64_t next;
    uintptr_t owner;
} EntRow;

typedef struct {
    PyObject_HEAD
    int64_t now;
    int64_t events_run;
    EvStore q; /* the pending events */
    PyObject *rng;  /* for code outside the fabric (the ports have their own) */
    PyObject *seed; /* what rng_for seeds the ports' generators from */
    PyObject *cancelled; /* set of keys (ints) */
    int64_t cur;         /* the running event's entity (GLOBAL, 0, between runs) */
    EntRow *ents;        /* each entity's next counter and owner (nent of capent) */
    Py_ssize_t nent, capent;
    /* registered objects (by address, as id() in Python) -> entity: open addressing */
    uintptr_t *ekeys; /* 0: empty */
    int32_t *evals;
    Py_ssize_t ecap, ecount; /* ecap a power of two or 0 */
    PyObject *place;         /* None or place(callback, args) -> entity or None */
    /* a rank of a partitioned run (openmrc.sim.partition): which entities it holds
     * (NULL: all), where events for the others go, and what run_window reports */
    uint8_t *owned;
    Py_ssize_t nowned;
    PyObject *outbox; /* list of (rank-less) (target, t, key, port, epoch, packet) */
    struct Exchange *xc; /* NULL, or the packets for other ranks written as bytes */
    int64_t cur_key, sub, global_events, last_t, sent;
    /* now, when run(until_ps=...) left it past int64 (as Python does); then
     * now == INT64_MAX and nothing new can be scheduled (it is all in the past) */
    PyObject *now_big;
    char stopped;
    /* each entity's hint row (set_hints): PF_HINTS cache-line addresses, 0 after the
     * last; rows for entities 0 .. nhint - 1 (NULL, 0: none set) */
    uintptr_t *hints;
    Py_ssize_t nhint;
} SimObject;

/* A queued packet and the wire bytes (size + framing) it was queued with: the
 * transmitter takes those off the queue's count when it sends it, without
 * reading pkt.size again (PyEgressPort keeps the same number beside it). */
typedef struct {
    PyObject *pkt;
    int64_t wb;
} Slot;

typedef struct {
    Slot *buf; /* cap (a power of two) slots, len of them in use from head on */
    Py_ssize_t head, len, cap;
} Ring;

typedef struct {
    PyObject_HEAD
    /* Laid out for the cache: an arrival reads the port it came over (the header,
     * is_port's type, sim, rx_kind, rx_target and epoch) from
     * these first bytes; a port a packet leaves by reads the block after them; the
     * names, links and counters nobody reads per packet come last.  At thousands of
     * hosts each port's lines are usually out of the cache, so fewer of them is
     * fewer misses. */
    SimObject *sim;
    PyObject *rx_target;
    int64_t epoch;
    int rx_kind;
    int32_t ent1; /* its entity + 1 (0: none; kept here, not in the simulator's table) */
    char up, has_txev, impaired, trim, lasthop, ecn, silent;
    /* the transmitter and its queues */
    int64_t busy_until, framing, num, den, delay, data_bytes, prio_bytes, data_limit,
        prio_limit, kmin, kmax, max_queue_bytes, tx_pkts, tx_bytes, txev_t, txev_key;
    Ring data, prio;
    /* read off the per-packet path */
    PyObject *name, *peer, *link, *rx, *rng_random;
    int64_t rate_bps;
    double loss;
    int64_t trims, ecn_marks, drops_full, drops_header, drops_down, lost, lost_silent;
    int32_t xid1; /* its number in a partitioned run's exchange + 1 (0: none) */
} PortObject;

typedef struct {
    int32_t *keys; /* -1: empty */
    PyObject **vals;
    Py_ssize_t cap; /* power of two or 0 */
} UsidTable;

typedef struct {
    PyObject_HEAD
    /* what a packet's arrival reads, in the object's first line (see PortObject) */
    int32_t ent1; /* its entity + 1 (0: none) */
    char forwarding;
    int64_t match;
    PyObject *ports, *table;
    UsidTable lut;
    int64_t forwarded, bad_route, discarded;
    PyObject *info, *name, *tier, *plane, *index, *usid, *state;
} SwitchObject;

typedef struct {
    PyObject_HEAD
    int32_t ent1; /* its entity + 1 (0: none); first: a sending port reads it */
    SimObject *sim;
    PyObject *on_receive, *plane;
    int64_t received, undelivered;
    PyObject *host;
} HostEndObject;

static PyTypeObject SimType, PortType, SwitchType, HostEndType;

/* o is a native port (or of a subclass).  The fabric's ports are instances of
 * port.py's EgressPort, a direct Python subclass: its tp_base is checked before
 * the general (MRO) test. */
static inline int is_port(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    return tp == &PortType || tp->tp_base == &PortType || PyType_IsSubtype(tp, &PortType);
}

/* ------------------------------------------------------------------------ */
/* the heap                                                                 */

/* (time, key) order: whether (xtk, xkey) comes before (ytk, ykey); 1 or 0,
 * without branches where the compiler has 128-bit integers (keys are never
 * negative): the heap picks the smallest of four children by index arithmetic
 * on this, which no misprediction can stall.  The one comparison of the
 * kernel: the heap's keys (hk_less) and the run's (store_top_is_run). */
static inline int order_less(uint64_t xtk, uint64_t xkey, uint64_t ytk, uint64_t ykey)
{
#ifdef HAVE_INT128
    unsigned __int128 kx = ((unsigned __int128)xtk << 64) | xkey;
    unsigned __int128 ky = ((unsigned __int128)ytk << 64) | ykey;
    return kx < ky;
#else
    return xtk < ytk || (xtk == ytk && xkey < ykey);
#endif
}

/* A hint to load the cache line at p (no effect on results; nothing without GCC
 * or Clang builtins); PREFETCH_L2 into the second level only (prefetcht1). */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
/* For a function whose only effect is prefetches: GCC counts a prefetch as no
 * side effect, so a call to such a function that it did not inline early is
 * dropped as dead code (with it every prefetch in it).  Forced inline, the
 * prefetches stay in the caller. */
#define PF_INLINE static inline __attribute__((always_inline))
#else
#define PREFETCH(p) ((void)(p))
#define PREFETCH_L2(p) ((void)(p))
#define PF_INLINE static inline
#endif

static inline int hk_less(const HKey *x, const HKey *y)
{
    return order_less(x->tk, x->key, y->tk, y->key);
}

/* The key of the next event the running entity schedules (the one place keys
 * are made, as PySimulator.push does); -1 past COUNTER_LIMIT (OverflowError). */
static inline int64_t sim_next_key(SimObject *s)
{
    int64_t c = s->ents[s->cur].next++;
    if (c >= COUNTER_LIMIT) {
        s->ents[s->cur].next--;
        PyErr_SetString(PyExc_OverflowError,
                        "more than 2**40 events scheduled by one entity (the kernel's limit)");
        return -1;
    }
    return s->cur << KEY_SHIFT | c;
}

/* Where a native port, switch or host end keeps its entity (a fabric has
 * millions of them: a table entry each would be 24 bytes more per object), or NULL. */
static inline int32_t *ent_slot(PyObject *o)
{
    if (is_port(o))
        return &((PortObject *)o)->ent1;
    if (PyObject_TypeCheck(o, &SwitchType))
        return &((SwitchObject *)o)->ent1;
    if (PyObject_TypeCheck(o, &HostEndType))
        return &((HostEndObject *)o)->ent1;
    return NULL;
}

/* The entity the address table holds for address k, or -1. */
static inline int64_t ent_table_get(SimObject *s, uintptr_t k)
{
    if (s->ecap == 0)
        return -1;
    size_t mask = (size_t)s->ecap - 1;
    size_t i = (size_t)(((uint64_t)k >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    for (;;) {
        uintptr_t e = s->ekeys[i];
        if (e == k)
            return s->evals[i];
        if (e == 0)
            return -1;
        i = (i + 1) & mask;
    }
}

/* The entity registered for object o (by address, or in the native object), or -1. */
static inline int64_t ent_lookup(SimObject *s, PyObject *o)
{
    if (o == NULL)
        return -1;
    int32_t *slot = ent_slot(o);
    if (slot != NULL)
        return (int64_t)*slot - 1;
    return ent_table_get(s, (uintptr_t)o);
}

/* Map k to v in the table (keys, vals, cap); the entity k had, or -1 (a new key). */
static int32_t ent_insert(uintptr_t *keys, int32_t *vals, Py_ssize_t cap, uintptr_t k, int32_t v)
{
    size_t mask = (size_t)cap - 1;
    size_t i = (size_t)(((uint64_t)k >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    while (keys[i] != 0 && keys[i] != k)
        i = (i + 1) & mask;
    int32_t old = keys[i] == 0 ? -1 : vals[i];
    keys[i] = k;
    vals[i] = v;
    return old;
}

/* Register o (by address) for entity e; -1 on no memory.  The table is filled to
 * three quarters at most: it is read on posts only when the entity's owner is not
 * the callback's object (see EntRow), so its size counts more than its probes. */
static int ent_set(SimObject *s, PyObject *o, int32_t e)
{
    int32_t *slot = ent_slot(o);
    if (slot != NULL) {
        *slot = e + 1;
        /* A table entry at this address is a freed object's (ids are reused): its
         * entity's owner must not name the address, or a post bound to o from that
         * entity would run for it instead of e. */
        int64_t old = ent_table_get(s, (uintptr_t)o);
        if (old >= 0 && s->ents[old].owner == (uintptr_t)o)
            s->ents[old].owner = 0;
        return 0;
    }
    if (4 * (s->ecount + 1) > 3 * s->ecap) {
        Py_ssize_t cap = s->ecap ? s->ecap * 2 : 1024;
        uintptr_t *keys = PyMem_Calloc((size_t)cap, sizeof(uintptr_t));
        int32_t *vals = PyMem_Calloc((size_t)cap, sizeof(int32_t));
        if (keys == NULL || vals == NULL) {
            PyMem_Free(keys);
            PyMem_Free(vals);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < s->ecap; i++)
            if (s->ekeys[i])
                ent_insert(keys, vals, cap, s->ekeys[i], s->evals[i]);
        PyMem_Free(s->ekeys);
        PyMem_Free(s->evals);
        s->ekeys = keys;
        s->evals = vals;
        s->ecap = cap;
    }
    int32_t old = ent_insert(s->ekeys, s->evals, s->ecap, (uintptr_t)o, e);
    if (old < 0)
        s->ecount++;
    else if (old != e && s->ents[old].owner == (uintptr_t)o)
        s->ents[old].owner = 0; /* o is no longer old's */
    s->ents[e].owner = (uintptr_t)o;
    return 0;
}

/* The object a callable is bound to (a method's self, a built-in's), else NULL:
 * what getattr(callback, "__self__", None) gives in PySimulator.target. */
static inline PyObject *callable_self(PyObject *fn)
{
    if (PyMethod_Check(fn))
        return PyMethod_GET_SELF(fn);
    if (PyCFunction_Check(fn))
        return PyCFunction_GET_SELF(fn);
    return NULL;
}

/* The entity an event of fn(*args) runs for (PySimulator.target): the one
 * registered for its object, else place(fn, args), else the scheduler.  args
 * is a tuple, or NULL with arg1 the only argument (post).  -1 on error. */
static int64_t sim_target(SimObject *s, PyObject *fn, PyObject *args, PyObject *arg1)
{
    PyObject *self = callable_self(fn);
    if (self != NULL && (uintptr_t)self == s->ents[s->cur].owner)
        return s->cur; /* the running entity's own object (EntRow) */
    int64_t e = ent_lookup(s, self);
    if (e >= 0)
        return e;
    if (s->place == NULL || s->place == Py_None)
        return s->cur;
    PyObject *t = args;
    if (t == NULL) {
        t = PyTuple_Pack(1, arg1);
        if (t == NULL)
            return -1;
    }
    else
        Py_INCREF(t);
    PyObject *r = PyObject_CallFunctionObjArgs(s->place, fn, t, NULL);
    Py_DECREF(t);
    if (r == NULL)
        return -1;
    if (r == Py_None) {
        Py_DECREF(r);
        return s->cur;
    }
    long long v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= s->nent) {
        PyErr_Format(PyExc_ValueError, "place: no entity %lld", v);
        return -1;
    }
    return v;
}

/* A port event (arrival, transmitter free) runs for the entity of the receiver or
 * of the port, else for the scheduler: it never asks place (an experiment
 * registers every port and receiver). */

/* ------------------------------------------------------------------------ */
/* The exchange of a partitioned run: packets for other ranks as bytes       */
/*
 * A rank's packets for another rank are written, as they are put on a link to
 * it, into that rank's buffer, and rebuilt by the receiving rank (arrive_wire):
 * pickling each packet object cost more than simulating it.  A record is
 * (time, key, epoch: int64 each; the receiving entity, the port number, the
 * record's length in bytes: int32 each; the packet's class: one byte; then each
 * of the class's fields, tagged), in the machine's byte order (the ranks of one
 * run are one build on one kind of machine).  The receiving rank reads the
 * entity from the record rather than from the port, and the length lets it look
 * some records ahead, so that the port (a cache miss each, at thousands of hosts)
 * is fetched while earlier records are read.  What the exchange cannot write (a
 * class or a field value it does not know, a port with no number) goes to the
 * outbox as an object, as before.
 *
 * A compiled packet class (mypyc) keeps an int field as a tagged word: a value v
 * that fits in 62 bits as v << 1, a bigger one as a pointer to an int object with
 * the low bit set.  Each such field's place in the object is found once
 * (w_find_slot: set through the class's own descriptor, looked for, and checked
 * both ways), and the exchange then reads and writes the word itself rather than
 * making an int object on each side; any other value goes the generic way.
 *
 * A compiled packet written for another rank that nothing else holds is not freed:
 * its object fields are released (while the writing left them in the cache) and the
 * rank keeps it to fill with a packet another rank sends (xc_keep, w_reserve), so a
 * crossing packet costs no allocation and no freeing, and the object to fill is known
 * records ahead and asked for early.  Every field is written again, so a kept packet
 * is the same as a new one.
 */
#define W_HEAD 37
enum { W_NONE = 0, W_FALSE = 1, W_TRUE = 2, W_I64 = 3, W_BIG = 4, W_BYTES = 5, W_ENUM = 6 };

typedef struct {
    char *data;
    size_t len, cap;
} WBuf;

typedef struct {
    PyTypeObject *tp;  /* strong */
    Py_ssize_t nf;
    PyObject **names;  /* strong: the field names */
    PyObject **descr;  /* strong: each field's getset or member descriptor, or NULL */
    Py_ssize_t *slot;  /* each field's tagged-int word's offset in an instance, or -1 */
    Py_ssize_t *oslot; /* each field's object pointer's offset in an instance, or -1 */
    PyObject **last;   /* strong: the int object last read for each field (or NULL), */
    int64_t *last_v;   /* and its value: a repeated value (a packet size) shares it */
    /* packets of the class written for another rank that nothing else held, kept
     * (strong; their object fields cleared) to be the packets other ranks send
     * (xc_keep, arrive_wire): no allocation or freeing per crossing packet, and the
     * one to fill is known some records ahead, so it is asked for early */
    PyObject **keep;
    Py_ssize_t nkeep, capkeep;
    int keepable; /* instances hold nothing but their fields (compiled, no dict or weakrefs) */
} WClass;

typedef struct Exchange {
    int nranks;
    int32_t *rank_of; /* each entity's rank */
    uint8_t *rank8;   /* the same as bytes (fewer cache lines), with fewer than 256 ranks */
    Py_ssize_t nrank_of;
    int ncls;
    WClass *cls;
    int nenum;
    PyTypeObject **enum_tp;   /* strong */
    PyObject **enum_members;  /* strong: dict value -> member */
    PyObject *(*enum_small)[256]; /* each enum's members of values 0-255 (borrowed), or NULL */
    WBuf *buf;                /* one per rank */
    int64_t first;            /* the least time written since the last take */
    int any;                  /* anything written since the last take */
} Exchange;

static void xc_free(Exchange *x)
{
    if (x == NULL)
        return;
    for (int i = 0; i < x->ncls; i++) {
        WClass *c = &x->cls[i];
        for (Py_ssize_t f = 0; f < c->nf; f++) {
            Py_XDECREF(c->names[f]);
            Py_XDECREF(c->descr[f]);
        }
        PyMem_Free(c->names);
        PyMem_Free(c->descr);
        PyMem_Free(c->slot);
        PyMem_Free(c->oslot);
        if (c->last != NULL)
            for (Py_ssize_t f = 0; f < c->nf; f++)
                Py_XDECREF(c->last[f]);
        PyMem_Free(c->last);
        PyMem_Free(c->last_v);
        for (Py_ssize_t k = 0; k < c->nkeep; k++)
            Py_DECREF(c->keep[k]);
        PyMem_Free(c->keep);
        Py_XDECREF(c->tp);
    }
    PyMem_Free(x->cls);
    for (int i = 0; i < x->nenum; i++) {
        Py_XDECREF(x->enum_tp[i]);
        Py_XDECREF(x->enum_members[i]);
    }
    PyMem_Free(x->enum_tp);
    PyMem_Free(x->enum_members);
    PyMem_Free(x->enum_small);
    if (x->buf != NULL)
        for (int r = 0; r < x->nranks; r++)
            PyMem_Free(x->buf[r].data);
    PyMem_Free(x->buf);
    PyMem_Free(x->rank_of);
    PyMem_Free(x->rank8);
    PyMem_Free(x);
}

static int wb_reserve(WBuf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *d = PyMem_Realloc(b->data, cap);
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int wb_put(WBuf *b, const void *src, size_t n)
{
    if (wb_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int wb_byte(WBuf *b, uint8_t v)
{
    return wb_put(b, &v, 1);
}

static inline int wb_i64(WBuf *b, uint8_t tag, int64_t v)
{
    if (wb_reserve(b, 9) < 0)
        return -1;
    b->data[b->len] = (char)tag;
    memcpy(b->data + b->len + 1, &v, 8);
    b->len += 9;
    return 0;
}

/* A field's value through its descriptor (the generic lookup otherwise). */
static PyObject *w_get(PyObject *o, PyObject *d, PyObject *name)
{
    if (d != NULL) {
        if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
            PyGetSetDef *gs = ((PyGetSetDescrObject *)d)->d_getset;
            if (gs->get != NULL)
                return gs->get(o, gs->closure);
        } else if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            return PyMember_GetOne((const char *)o, ((PyMemberDescrObject *)d)->d_member);
        }
    }
    return PyObject_GetAttr(o, name);
}

static int w_set(PyObject *o, PyObject *d, PyObject *name, PyObject *v)
{
    if (d != NULL) {
        if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
            PyGetSetDef *gs = ((PyGetSetDescrObject *)d)->d_getset;
            if (gs->set != NULL)
                return gs->set(o, v, gs->closure);
        } else if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            return PyMember_SetOne((char *)o, ((PyMemberDescrObject *)d)->d_member, v);
        }
    }
    return PyObject_SetAttr(o, name, v);
}

/* Write one value: 0 written, 1 a value the exchange does not know, -1 error. */
static int w_value(Exchange *x, WBuf *b, PyObject *v)
{
    if (v == Py_None)
        return wb_byte(b, W_NONE);
    if (v == Py_False)
        return wb_byte(b, W_FALSE);
    if (v == Py_True)
        return wb_byte(b, W_TRUE);
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow) {
            if (i == -1 && PyErr_Occurred())
                return -1;
            return wb_i64(b, W_I64, (int64_t)i);
        }
        /* a route (128 bits), a wide SACK bitmap: signed little-endian bytes */
        size_t bits = _PyLong_NumBits(v);
        if (bits == (size_t)-1 && PyErr_Occurred())
            return -1;
        size_t n = bits / 8 + 1;
        if (n > 0xFFFF)
            return 1;
        uint16_t n16 = (uint16_t)n;
        if (wb_byte(b, W_BIG) < 0 || wb_put(b, &n16, 2) < 0 || wb_reserve(b, n) < 0)
            return -1;
#if PY_VERSION_HEX >= 0x030D0000
        if (_PyLong_AsByteArray((PyLongObject *)v, (unsigned char *)b->data + b->len, n, 1, 1,
                                1) < 0)
#else
        if (_PyLong_AsByteArray((PyLongObject *)v, (unsigned char *)b->data + b->len, n, 1, 1) <
            0)
#endif
            return -1;
        b->len += n;
        return 0;
    }
    if (PyBytes_CheckExact(v) || PyMemoryView_Check(v)) {
        /* a payload (a memoryview arrives as bytes, as pickling it made it) */
        Py_buffer view;
        if (PyObject_GetBuffer(v, &view, PyBUF_CONTIG_RO) < 0) {
            PyErr_Clear();
            return 1;
        }
        int r = 1;
        if ((uint64_t)view.len <= 0xFFFFFFFFULL) {
            uint32_t n32 = (uint32_t)view.len;
            r = (wb_byte(b, W_BYTES) < 0 || wb_put(b, &n32, 4) < 0 ||
                 wb_put(b, view.buf, (size_t)view.len) < 0)
                    ? -1
                    : 0;
        }
        PyBuffer_Release(&view);
        return r;
    }
    if (PyLong_Check(v)) {
        for (int i = 0; i < x->nenum; i++)
            if (Py_TYPE(v) == x->enum_tp[i]) {
                int overflow = 0;
                long long val = PyLong_AsLongLongAndOverflow(v, &overflow);
                if (overflow)
                    return 1;
                if (val == -1 && PyErr_Occurred())
                    return -1;
                return (wb_byte(b, W_ENUM) < 0 || wb_byte(b, (uint8_t)i) < 0 ||
                        wb_put(b, &val, 8) < 0)
                           ? -1
                           : 0;
            }
    }
    return 1;
}

/* Write a packet for another rank: 0 written, 1 not for the exchange (the
 * outbox takes it), -1 error. */
static int xc_write(Exchange *x, int64_t target, int64_t t, int64_t key, PyObject *port,
                    int64_t epoch, PyObject *pkt, int *cls_out)
{
    if (target < 0 || target >= x->nrank_of || !is_port(port))
        return 1;
    int32_t xid1 = ((PortObject *)port)->xid1;
    int32_t rank = x->rank8 != NULL ? (int32_t)x->rank8[target] : x->rank_of[target];
    if (xid1 <= 0 || rank < 0 || rank >= x->nranks)
        return 1;
    WClass *c = NULL;
    int ci = 0;
    for (; ci < x->ncls; ci++)
        if (Py_TYPE(pkt) == x->cls[ci].tp) {
            c = &x->cls[ci];
            break;
        }
    if (c == NULL)
        return 1;
    if (target > INT32_MAX)
        return 1;
    /* the packet's lines, then the objects its fields point to, asked for at once
     * (each a miss at thousands of hosts) rather than one after the other */
    for (Py_ssize_t off = 64; off < c->tp->tp_basicsize && off < 256; off += 64)
        PREFETCH((const char *)pkt + off);
    for (Py_ssize_t f = 0; f < c->nf; f++)
        if (c->oslot[f] >= 0) {
            PyObject *v;
            memcpy(&v, (const char *)pkt + c->oslot[f], sizeof v);
            if (v != NULL)
                PREFETCH(v);
        }
    WBuf *b = &x->buf[rank];
    size_t start = b->len;
    int32_t port_no = xid1 - 1, target32 = (int32_t)target;
    if (wb_reserve(b, W_HEAD) < 0)
        return -1;
    memcpy(b->data + b->len, &t, 8);
    memcpy(b->data + b->len + 8, &key, 8);
    memcpy(b->data + b->len + 16, &epoch, 8);
    memcpy(b->data + b->len + 24, &target32, 4);
    memcpy(b->data + b->len + 28, &port_no, 4);
    b->data[b->len + 36] = (char)ci; /* (the length, at 32, once the fields are written) */
    b->len += W_HEAD;
    for (Py_ssize_t f = 0; f < c->nf; f++) {
        if (c->slot[f] >= 0) {
            intptr_t w;
            memcpy(&w, (const char *)pkt + c->slot[f], sizeof w);
            if ((w & 1) == 0) { /* a short int, kept as v << 1 */
                if (wb_i64(b, W_I64, (int64_t)(w >> 1)) < 0) {
                    b->len = start;
                    return -1;
                }
                continue;
            }
        }
        if (c->oslot[f] >= 0) {
            PyObject *v; /* borrowed: w_value runs no Python code */
            memcpy(&v, (const char *)pkt + c->oslot[f], sizeof v);
            int r = v != NULL ? w_value(x, b, v) : 1; /* (NULL: unset) */
            if (r != 0) {
                b->len = start;
                return r;
            }
            continue;
        }
        PyObject *v = w_get(pkt, c->descr[f], c->names[f]);
        if (v == NULL) { /* (an unset field) */
            PyErr_Clear();
            b->len = start;
            return 1;
        }
        int r = w_value(x, b, v);
        Py_DECREF(v);
        if (r != 0) {
            b->len = start;
            return r;
        }
    }
    if (b->len - start > INT32_MAX) {
        b->len = start;
        return 1;
    }
    int32_t reclen = (int32_t)(b->len - start);
    memcpy(b->data + start + 32, &reclen, 4);
    if (!x->any || t < x->first)
        x->first = t;
    x->any = 1;
    *cls_out = ci;
    return 0;
}

/* Most packets a class keeps for reuse (xc_keep). */
#define XC_KEEP 65536

/* Keep pkt, of class ci and just written (xc_write), to be a packet another rank
 * sends (arrive_wire), when nothing but the caller holds it: its object fields
 * are released now, while the writing left them in the cache.  1: kept (the
 * caller's reference with it), 0: not. */
static int xc_keep(Exchange *x, int ci, PyObject *pkt)
{
    WClass *c = &x->cls[ci];
    if (!c->keepable || Py_REFCNT(pkt) != 1) /* (xc_write matched its exact type) */
        return 0;
    if (c->nkeep == c->capkeep) {
        if (c->capkeep >= XC_KEEP)
            return 0;
        Py_ssize_t cap = c->capkeep ? 2 * c->capkeep : 1024;
        PyObject **k = PyMem_Realloc(c->keep, (size_t)cap * sizeof(PyObject *));
        if (k == NULL)
            return 0; /* (freed as usual instead) */
        c->keep = k;
        c->capkeep = cap;
    }
    for (Py_ssize_t f = 0; f < c->nf; f++)
        if (c->oslot[f] >= 0) {
            PyObject *v, *none = NULL;
            memcpy(&v, (char *)pkt + c->oslot[f], sizeof v);
            memcpy((char *)pkt + c->oslot[f], &none, sizeof none); /* (unset) */
            Py_XDECREF(v);
        }
    c->keep[c->nkeep++] = pkt;
    return 1;
}

/* An event for an entity another rank holds (a partitioned run): a packet's
 * arrival goes to the outbox, a global action's event is dropped (that rank
 * schedules its own), anything else is an error.  Steals a and b. */
static int sim_route_out(SimObject *s, int64_t t, int64_t key, int kind, int64_t target,
                         PyObject *a, PyObject *b, int64_t epoch)
{
    int r = 0;
    if (s->cur <= 1) /* GLOBAL or SAMPLER: every rank runs it for its own entities */
        goto done;
    if (kind != EV_ARRIVE || s->outbox == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "partitioned run: entity %lld scheduled an event for entity %lld of "
                     "another rank (only packets cross ranks)",
                     (long long)s->cur, (long long)target);
        r = -1;
        goto done;
    }
    if (s->xc != NULL) {
        int ci = 0;
        int w = xc_write(s->xc, target, t, key, a, epoch, b, &ci);
        if (w <= 0) {
            if (w == 0) {
                s->sent++;
                if (xc_keep(s->xc, ci, b))
                    b = NULL; /* (kept, to be a packet another rank sends) */
            }
            r = w;
            goto done;
        }
    }
    PyObject *item = Py_BuildValue("(LLLOLO)", (long long)target, (long long)t, (long long)key,
                                   a, (long long)epoch, b);
    if (item == NULL) {
        r = -1;
        goto done;
    }
    r = PyList_Append(s->outbox, item);
    Py_DECREF(item);
    if (r == 0)
        s->sent++;
done:
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* ------------------------------------------------------------------------ */
/* the event store                                                          */
/*
 * Time is cut into slots of 2**WHEEL_SHIFT ps.  An event 1 .. WHEEL_SLOTS - 1
 * slots ahead of the current one is appended to its slot's bucket of a wheel,
 * unsorted; one further ahead goes to a heap, far.  When the current slot's
 * events are all taken, the current slot moves on to the next one with events:
 * its bucket is copied out and sorted (a radix sort by the bytes in which its
 * events differ) into the run, which pops then read in order, and the events of
 * far now due go into a small heap, h, as does any event scheduled into the
 * current slot meanwhile (rare: the fabric's delays are longer than a slot); a
 * pop takes the smaller of the run's next and h's root.  Every event in the run
 * or h is in an earlier slot than every one in the wheel or far, so that is the
 * smallest of all, and events come out in the same (time, key) order as from
 * one heap; only the cost changes.
 *
 * The slot's width is not what sizes the run.  The fabric's events bunch at the
 * same instants (equal link delays and serialization times on a synchronous
 * start): in perm-8192's first 30 us 4.36 M events fall on 2,945 distinct
 * times, one or two per loaded slot, so a narrower slot would hold the same
 * events.  Sorting them once where a heap sifted each pop costs less, and it
 * lets the loop see the next events in order, so their objects are asked for a
 * few events ahead (see "prefetching the next events").  Most events of a large fabric
 * are scheduled less than a microsecond ahead (arrivals, transmitters, pumps):
 * they are appended to a bucket (one cache line touched) and later popped from
 * a heap of one slot's events, which stays in the cache where one heap of all
 * pending events (tens of thousands at 8,192 hosts) would not.
 */
#define WHEEL_SHIFT 11   /* a slot: 2,048 ps */
#define WHEEL_SLOTS 4096 /* the wheel's reach: 8.4 us (a power of two) */

static inline uint64_t tk_slot(uint64_t tk)
{
    return tk >> WHEEL_SHIFT;
}

/* A buffer's next capacity for need entries: doubled from cur (1024 at first). */
static inline Py_ssize_t grown_cap(Py_ssize_t cur, Py_ssize_t need)
{
    Py_ssize_t want = cur ? cur : 1024;
    while (want < need)
        want *= 2;
    return want;
}

/* Room for cap events in heap q; -1 on no memory (error set, heap unchanged). */
static int heap_reserve(Heap *q, Py_ssize_t cap)
{
    if (cap <= q->cap)
        return 0;
    Py_ssize_t want = grown_cap(q->cap, cap);
    /* 64 bytes of slack to align, 3 entries before hk[0]: then the children of
     * node i, 4i+1 .. 4i+4, are at 64 (i + 1) bytes from the aligned start */
    void *mem = PyMem_Malloc((size_t)(want + 3) * sizeof(HKey) + 64);
    HPay *hp = PyMem_Realloc(q->hp, (size_t)want * sizeof(HPay));
    if (mem == NULL || hp == NULL) {
        PyMem_Free(mem);
        if (hp != NULL)
            q->hp = hp;
        PyErr_NoMemory();
        return -1;
    }
    q->hp = hp;
    HKey *hk = (HKey *)(((uintptr_t)mem + 63) & ~(uintptr_t)63) + 3;
    if (q->n)
        memcpy(hk, q->hk, (size_t)q->n * sizeof(HKey));
    PyMem_Free(q->hk_mem);
    q->hk_mem = mem;
    q->hk = hk;
    q->cap = want;
    return 0;
}

/* Put (k, pay) into heap q at the hole i or above it: the hole rises while k
 * comes before its parent's key (the sift-up of both heap_put and heap_fill_root). */
static inline void heap_sift_up(Heap *q, Py_ssize_t i, HKey k, HPay pay)
{
    HKey *hk = q->hk;
    HPay *hp = q->hp;
    while (i > 0) {
        Py_ssize_t p = (i - 1) >> 2;
        if (!hk_less(&k, &hk[p]))
            break;
        hk[i] = hk[p];
        hp[i] = hp[p];
        i = p;
    }
    hk[i] = k;
    hp[i] = pay;
}

/* Put ev into heap q, which has room for it (references move there). */
static void heap_put(Heap *q, const Event *evp)
{
    HKey k = {evp->key, evp->tk};
    HPay pay = {evp->meta, evp->a, evp->b};
    heap_sift_up(q, q->n++, k, pay);
}

/* Put ev into heap q (references move there); -1 (released, error set) on no memory. */
static int heap_insert_q(Heap *q, const Event *evp)
{
    if (q->n == q->cap && heap_reserve(q, q->n + 1) < 0) {
        Py_XDECREF(evp->a);
        Py_XDECREF(evp->b);
        return -1;
    }
    heap_put(q, evp);
    return 0;
}

/* Event i of heap q, whole (references borrowed). */
static inline Event heap_get(const Heap *q, Py_ssize_t i)
{
    Event e = {q->hk[i].key, q->hk[i].tk, q->hp[i].meta, q->hp[i].a, q->hp[i].b};
    return e;
}

/* Fill the root of heap q (its event taken out) with (lk, lp), q->n unchanged.
 * Bottom-up: the hole left at the root goes down along the smallest children to
 * a leaf, then the event to place rises from there (usually a level or none):
 * fewer comparisons than the classic sift-down.  The heap is 4-ary (children of
 * i: 4i+1 .. 4i+4): half the levels of a binary heap.  Keys (time, key) are
 * unique, so the order in which events come out does not depend on the layout. */
static void heap_fill_root(Heap *q, HKey lk, HPay lp)
{
    HKey *hk = q->hk;
    HPay *hp = q->hp;
    Py_ssize_t n = q->n;
    Py_ssize_t i = 0, c;
    while ((c = 4 * i + 1) < n) {
        Py_ssize_t m = c;
        /* the next level is one of the four children's child lines, which are
         * adjacent (4c+1 .. 4c+16: four cache lines): ask for all four while these
         * children are compared, so that a deep heap (one that no longer fits in
         * the cache) waits for memory once per pop, not once per level */
        if (4 * c + 1 < n) {
            const char *g = (const char *)&hk[4 * c + 1];
            PREFETCH(g);
            PREFETCH(g + 64);
            PREFETCH(g + 128);
            PREFETCH(g + 192);
        }
        if (c + 4 <= n) { /* all four children */
            Py_ssize_t m2 = c + 2 + hk_less(&hk[c + 3], &hk[c + 2]);
            m = c + hk_less(&hk[c + 1], &hk[c]);
            m += (m2 - m) * hk_less(&hk[m2], &hk[m]);
        }
        else {
            for (Py_ssize_t j = c + 1; j < n; j++)
                if (hk_less(&hk[j], &hk[m]))
                    m = j;
        }
        hk[i] = hk[m];
        hp[i] = hp[m];
        i = m;
    }
    heap_sift_up(q, i, lk, lp);
}

/* Take the root of heap q (not empty) out into *out (references move). */
static void heap_take_root(Heap *q, Event *out)
{
    *out = heap_get(q, 0);
    Py_ssize_t n = --q->n;
    if (n > 0)
        heap_fill_root(q, q->hk[n], q->hp[n]);
}

static void heap_free(Heap *q)
{
    PyMem_Free(q->hk_mem);
    PyMem_Free(q->hp);
    q->hk_mem = NULL;
    q->hk = NULL;
    q->hp = NULL;
    q->n = q->cap = 0;
}

/* Room for n events in the run's two buffers, which hold no events now (the run
 * is loaded only when empty); -1 on no memory (error set, nothing changed). */
static int run_reserve(EvStore *st, Py_ssize_t n)
{
    if (n <= st->runcap)
        return 0;
    Py_ssize_t want = grown_cap(st->runcap, n);
    Event *a = PyMem_Malloc((size_t)want * sizeof(Event));
    Event *b = PyMem_Malloc((size_t)want * sizeof(Event));
    if (a == NULL || b == NULL) {
        PyMem_Free(a);
        PyMem_Free(b);
        PyErr_NoMemory();
        return -1;
    }
    PyMem_Free(st->run);
    PyMem_Free(st->run_tmp);
    st->run = a;
    st->run_tmp = b;
    st->runcap = want;
    return 0;
}

/* Byte d of an event's order: 0 .. 7 of its key, 8 .. 15 of its time. */
static inline unsigned ev_byte(const Event *e, int d)
{
    return (unsigned)((d < 8 ? e->key >> (8 * d) : e->tk >> (8 * (d - 8))) & 0xFF);
}

/* ev[0 .. n) in (time, key) order, by insertion */
static void insertion_sort_events(Event *ev, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        Event x = ev[i];
        Py_ssize_t j = i;
        for (; j > 0 && order_less(x.tk, x.key, ev[j - 1].tk, ev[j - 1].key); j--)
            ev[j] = ev[j - 1];
        ev[j] = x;
    }
}

/* Up to this many events a slot is sorted by insertion, up to SORT_MERGE_MAX by
 * merging (runs of SORT_RUN sorted by insertion, then merged in passes), beyond
 * by radix: a radix pass clears and sums 256 counters per byte that differs, a
 * fixed cost that a slot of a few dozen events does not repay. */
#define SORT_INSERTION_MAX 24
#define SORT_RUN 16
#define SORT_MERGE_MAX 256

static Event *merge_sort_events(Event *ev, Event *tmp, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i += SORT_RUN)
        insertion_sort_events(ev + i, n - i < SORT_RUN ? n - i : SORT_RUN);
    Event *src = ev, *dst = tmp;
    for (Py_ssize_t w = SORT_RUN; w < n; w *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * w) {
            Py_ssize_t mid = lo + w < n ? lo + w : n;
            Py_ssize_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            Py_ssize_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (order_less(src[j].tk, src[j].key, src[i].tk, src[i].key))
                    dst[k++] = src[j++];
                else
                    dst[k++] = src[i++];
            }
            if (i < mid)
                memcpy(&dst[k], &src[i], (size_t)(mid - i) * sizeof(Event));
            else if (j < hi)
                memcpy(&dst[k], &src[j], (size_t)(hi - j) * sizeof(Event));
        }
        Event *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* ev[0 .. n) strictly in (time, key) order? */
static int events_in_order(const Event *ev, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++)
        if (!order_less(ev[i - 1].tk, ev[i - 1].key, ev[i].tk, ev[i].key))
            return 0;
    return 1;
}

/* Stable counting-sort passes over the given bytes (ev_byte's numbering: 0 .. 7 of
 * the key, 8 .. 15 of the time), least significant first, from ev with tmp as the
 * other buffer; returns the buffer that holds the result. */
static Event *radix_passes(Event *ev, Event *tmp, Py_ssize_t n, const int *digits, int nd)
{
    uint32_t count[16][256];
    memset(count, 0, (size_t)nd * sizeof(count[0]));
    for (Py_ssize_t i = 0; i < n; i++)
        for (int j = 0; j < nd; j++)
            count[j][ev_byte(&ev[i], digits[j])]++;
    Event *src = ev, *dst = tmp;
    for (int j = 0; j < nd; j++) {
        uint32_t *c = count[j], sum = 0;
        for (int v = 0; v < 256; v++) {
            uint32_t k = c[v];
            c[v] = sum;
            sum += k;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            dst[c[ev_byte(&src[i], digits[j])]++] = src[i];
        Event *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* The bytes in which a slot's events differ, in ev_byte's numbering and least
 * significant first, into digits: the key's from byte first on (kdiff: the bits that
 * differ), then the time's (tdiff); how many. */
static int differing_bytes(uint64_t kdiff, uint64_t tdiff, int first, int *digits)
{
    int nd = 0;
    for (int d = first; d < 8; d++)
        if ((kdiff >> (8 * d)) & 0xFF)
            digits[nd++] = d;
    for (int d = 0; d < 8; d++)
        if ((tdiff >> (8 * d)) & 0xFF)
            digits[nd++] = 8 + d;
    return nd;
}

/* The bytes of a key below KEY_SHIFT: the scheduling entity's counter. */
#define COUNTER_BYTES (KEY_SHIFT / 8)
#if KEY_SHIFT % 8
#error "the counter must take whole bytes of the key"
#endif

/* Sort ev[0 .. n) by (time, key) (unique), tmp room for n: an insertion sort for
 * a few events, a merge sort for a few dozen, else a radix sort, least
 * significant byte first, over only the bytes in which the events differ (each
 * pass a stable counting sort; a slot's events share most bytes of their time
 * and of their key's entity).  Returns the buffer that holds the result, ev or
 * tmp.  The keys are unique, so every method gives the same order.
 *
 * A slot's bucket holds each entity's events in the order it scheduled them, so
 * in its counter's order (a key's low KEY_SHIFT bits), and the passes are stable:
 * the radix sort first skips the counter's bytes (two or three passes of a big
 * fabric's slot, a thousand events or more from as many entities), sorting by time
 * and entity alone, and checks the result; a bucket filled otherwise (events with
 * keys given, as a rank's arrivals are, added out of their counters' order) is
 * then sorted again over every byte that differs. */
static Event *sort_events(Event *ev, Event *tmp, Py_ssize_t n)
{
    if (n <= SORT_INSERTION_MAX) {
        insertion_sort_events(ev, n);
        return ev;
    }
    if (n <= SORT_MERGE_MAX)
        return merge_sort_events(ev, tmp, n);
    uint64_t kor = 0, kand = ~(uint64_t)0, tor = 0, tand = ~(uint64_t)0;
    for (Py_ssize_t i = 0; i < n; i++) {
        kor |= ev[i].key;
        kand &= ev[i].key;
        tor |= ev[i].tk;
        tand &= ev[i].tk;
    }
    int digits[16];
    int nd = differing_bytes(kor ^ kand, tor ^ tand, COUNTER_BYTES, digits);
    Event *sorted = radix_passes(ev, tmp, n, digits, nd);
    if (events_in_order(sorted, n))
        return sorted;
    nd = differing_bytes(kor ^ kand, tor ^ tand, 0, digits);
    return radix_passes(sorted, sorted == ev ? tmp : ev, n, digits, nd);
}

/* Room for one more event in bucket b: a spare chunk when its last is full;
 * -1 on no memory (error set, nothing changed). */
static int bucket_reserve1(EvStore *st, const Bucket *b)
{
    if ((b->tail != NULL && b->tail->len < CHUNK_EVENTS) || st->spare != NULL)
        return 0;
    Chunk *c = PyMem_Malloc(sizeof(Chunk));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->next = NULL;
    st->spare = c;
    return 0;
}

/* The wheel's buckets and bitmap, made on first use; -1 on no memory (error set). */
static int wheel_alloc(EvStore *st)
{
    if (st->wheel != NULL)
        return 0;
    Bucket *w = PyMem_Calloc(WHEEL_SLOTS, sizeof(Bucket));
    uint64_t *bits = PyMem_Calloc(WHEEL_SLOTS / 64, sizeof(uint64_t));
    if (w == NULL || bits == NULL) {
        PyMem_Free(w);
        PyMem_Free(bits);
        PyErr_NoMemory();
        return -1;
    }
    st->wheel = w;
    st->wbits = bits;
    return 0;
}

/* Append ev to the bucket of its slot sl (room made: bucket_reserve1). */
static inline void wheel_put(EvStore *st, uint64_t sl, const Event *evp)
{
    Py_ssize_t i = (Py_ssize_t)(sl & (WHEEL_SLOTS - 1));
    Bucket *b = &st->wheel[i];
    Chunk *c = b->tail;
    if (c == NULL || c->len == CHUNK_EVENTS) {
        Chunk *n = st->spare;
        st->spare = n->next;
        n->next = NULL;
        n->len = 0;
        if (c == NULL) {
            b->head = n;
            st->wbits[i >> 6] |= (uint64_t)1 << (i & 63);
        }
        else
            c->next = n;
        b->tail = c = n;
    }
    c->ev[c->len++] = *evp;
    b->len++;
    st->wn++;
}

/* The index of the lowest set bit of x (x not 0). */
static inline int ctz64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(x);
#else
    int n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* The first slot after the current one whose bucket holds events (the wheel not
 * empty): the bitmap read from that slot's bit on, round the wheel. */
static uint64_t wheel_next_slot(const EvStore *st)
{
    uint64_t start = st->wcur + 1;
    Py_ssize_t i = (Py_ssize_t)(start & (WHEEL_SLOTS - 1));
    Py_ssize_t w = i >> 6;
    uint64_t bits = st->wbits[w] >> (i & 63);
    if (bits)
        return start + (uint64_t)ctz64(bits);
    uint64_t d = (uint64_t)(64 - (i & 63));
    for (Py_ssize_t k = 1; k <= WHEEL_SLOTS / 64; k++) {
        bits = st->wbits[(w + k) & (WHEEL_SLOTS / 64 - 1)];
        if (bits)
            return start + d + (uint64_t)ctz64(bits);
        d += 64;
    }
    return start; /* (not reached: the wheel holds events) */
}

/* Where an event of slot sl goes: 0 h, 1 far, 2 the wheel. */
static inline int store_part(const EvStore *st, uint64_t sl)
{
    if (sl <= st->wcur)
        return 0;
    return sl - st->wcur < WHEEL_SLOTS ? 2 : 1;
}

/* Put ev into the store (references move there); -1 (released, error set) on no memory. */
static int store_insert(EvStore *st, const Event *evp)
{
    uint64_t sl = tk_slot(evp->tk);
    int part = store_part(st, sl);
    if (part == 0)
        return heap_insert_q(&st->h, evp);
    if (part == 2) {
        if (wheel_alloc(st) < 0 || bucket_reserve1(st, &st->wheel[sl & (WHEEL_SLOTS - 1)]) < 0) {
            Py_XDECREF(evp->a);
            Py_XDECREF(evp->b);
            return -1;
        }
        wheel_put(st, sl, evp);
        return 0;
    }
    return heap_insert_q(&st->far, evp);
}

/* Make the run or h hold the smallest pending event, if there is one: when both
 * are empty, move the current slot on to the next one with events, its bucket
 * sorted into the run and the events of far now due into h.  1: the run or h is
 * not empty; 0: nothing is pending; -1 on no memory (error
 * set; nothing lost: the events not yet moved stay where they were). */
static int store_settle(EvStore *st)
{
    while (st->ri == st->rn && st->h.n == 0) {
        /* the next slot with events: the wheel's first, or far's if earlier */
        uint64_t next = UINT64_MAX;
        if (st->wn)
            next = wheel_next_slot(st);
        if (st->far.n) {
            uint64_t fs = tk_slot(st->far.hk[0].tk);
            if (fs < next)
                next = fs;
        }
        else if (next == UINT64_MAX)
            return 0;
        /* (next is at most the wheel's first slot with events: any bucket it
         * lands on holds that slot's events) */
        Py_ssize_t bi = (Py_ssize_t)(next & (WHEEL_SLOTS - 1));
        if (st->wn && (st->wbits[bi >> 6] >> (bi & 63) & 1)) {
            Bucket *b = &st->wheel[bi];
            if (run_reserve(st, b->len) < 0)
                return -1;
            Py_ssize_t k = 0;
            for (Chunk *c = b->head; c != NULL; c = c->next) {
                memcpy(&st->run[k], c->ev, (size_t)c->len * sizeof(Event));
                k += c->len;
            }
            Event *sorted = sort_events(st->run, st->run_tmp, k);
            if (sorted != st->run) {
                st->run_tmp = st->run;
                st->run = sorted;
            }
            st->ri = 0;
            st->rn = k;
            b->tail->next = st->spare; /* the chunks go back to the spares */
            st->spare = b->head;
            st->wn -= b->len;
            b->head = b->tail = NULL;
            b->len = 0;
            st->wbits[bi >> 6] &= ~((uint64_t)1 << (bi & 63));
        }
        st->wcur = next;
        while (st->far.n && tk_slot(st->far.hk[0].tk) <= st->wcur) {
            if (st->h.n == st->h.cap && heap_reserve(&st->h, st->h.n + 1) < 0)
                return -1;
            Event e;
            heap_take_root(&st->far, &e);
            heap_put(&st->h, &e);
        }
    }
    return 1;
}

/* All pending events of the store, one by one: it->part 0 (the run), 1 (h),
 * 2 (far), 3 and 4 (the wheel, bucket it->b); 0 once there are no more. */
typedef struct {
    int part;
    Py_ssize_t b, i;
    const Chunk *c; /* in the wheel: the chunk of bucket b it->i is in */
} StoreIter;

static int store_next(const EvStore *st, StoreIter *it, Event *out)
{
    for (;;) {
        if (it->part == 0) {
            if (st->ri + it->i < st->rn) {
                *out = st->run[st->ri + it->i++];
                return 1;
            }
            it->part = 1;
            it->i = 0;
            continue;
        }
        if (it->part == 1 || it->part == 2) {
            const Heap *q = it->part == 1 ? &st->h : &st->far;
            if (it->i < q->n) {
                *out = heap_get(q, it->i++);
                return 1;
            }
            it->part++;
            it->i = 0;
            it->b = 0;
            continue;
        }
        if (st->wheel == NULL)
            return 0;
        if (it->part == 3) { /* the first look at the wheel */
            it->part = 4;
            it->b = 0;
            it->c = st->wheel[0].head;
            it->i = 0;
        }
        while (it->c == NULL || it->i >= it->c->len) {
            if (it->c != NULL && it->c->next != NULL) {
                it->c = it->c->next;
                it->i = 0;
                continue;
            }
            if (++it->b >= WHEEL_SLOTS)
                return 0;
            it->c = st->wheel[it->b].head;
            it->i = 0;
        }
        *out = it->c->ev[it->i++];
        return 1;
    }
}

/* Events pending in the store. */
static inline Py_ssize_t store_count(const EvStore *st)
{
    return (st->rn - st->ri) + st->h.n + st->far.n + st->wn;
}

/* Whether the smallest pending event (the store settled) is the run's next
 * rather than h's root. */
static inline int store_top_is_run(const EvStore *st)
{
    if (st->ri == st->rn)
        return 0;
    if (st->h.n == 0)
        return 1;
    const Event *r = &st->run[st->ri];
    return order_less(r->tk, r->key, st->h.hk[0].tk, st->h.hk[0].key);
}

/* The smallest pending event's order (the store settled): its biased time and key. */
static inline HKey store_top(const EvStore *st)
{
    if (store_top_is_run(st)) {
        HKey k = {st->run[st->ri].key, st->run[st->ri].tk};
        return k;
    }
    return st->h.hk[0];
}

/* Free the store's memory (the events' references not released: the caller
 * took them over, see heap_clear_all). */
static void store_free(EvStore *st)
{
    PyMem_Free(st->run);
    PyMem_Free(st->run_tmp);
    st->run = st->run_tmp = NULL;
    st->ri = st->rn = st->runcap = 0;
    heap_free(&st->h);
    heap_free(&st->far);
    if (st->wheel != NULL) {
        for (Py_ssize_t i = 0; i < WHEEL_SLOTS; i++)
            for (Chunk *c = st->wheel[i].head, *n; c != NULL; c = n) {
                n = c->next;
                PyMem_Free(c);
            }
        PyMem_Free(st->wheel);
    }
    for (Chunk *c = st->spare, *n; c != NULL; c = n) {
        n = c->next;
        PyMem_Free(c);
    }
    st->spare = NULL;
    PyMem_Free(st->wbits);
    st->wheel = NULL;
    st->wbits = NULL;
    st->wn = 0;
    st->wcur = 0;
}

/* Put ev among the pending events (its references move there); -1 (released) on no memory. */
static int heap_insert(SimObject *s, const Event *evp)
{
    return store_insert(&s->q, evp);
}


/* Push with a key the caller took (sim_next_key) beforehand; steals the
 * references a and b. Returns -1 (refs released) on no memory. */
static int heap_push_key(SimObject *s, int64_t t, int64_t key, int kind, int64_t target,
                         PyObject *a, PyObject *b, int64_t epoch)
{
    if (key < 0) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return -1;
    }
    if (s->owned != NULL && target < s->nowned && !s->owned[target])
        return sim_route_out(s, t, key, kind, target, a, b, epoch);
    if (kind == EV_ARRIVE && (epoch < 0 || epoch >= EPOCH_SMALL)) {
        /* (before the heap is looked at: allocating can run Python code) */
        PyObject *eo = PyLong_FromLongLong(epoch);
        PyObject *pair = eo != NULL ? PyTuple_Pack(2, b, eo) : NULL;
        Py_XDECREF(eo);
        Py_XDECREF(b);
        if (pair == NULL) {
            Py_XDECREF(a);
            return -1;
        }
        b = pair;
        kind = EV_ARRIVE_BIG;
        epoch = 0;
    }
    Event ev = {(uint64_t)key, (uint64_t)t ^ T_BIAS,
                (uint64_t)target << 32 | (uint64_t)epoch << SK_KIND_BITS | (uint64_t)kind, a, b};
    return heap_insert(s, &ev);
}

/* Push, taking the running entity's next key (no Python code runs in between). */
static inline int heap_push(SimObject *s, int64_t t, int kind, int64_t target, PyObject *a,
                            PyObject *b, int64_t epoch)
{
    return heap_push_key(s, t, sim_next_key(s), kind, target, a, b, epoch);
}

/* Pop the smallest event into *out (references move to the caller); the store
 * settled first (store_settle returned 1): the run's next or h's root.
 *
 * A port's arrivals go into the store like every other event.  (They once waited
 * in a FIFO per port with only the earliest in one heap of all pending events,
 * which kept that heap small; with the wheel an event scheduled ahead costs an
 * append to its slot's bucket and a place in a sorted run, so the FIFO only added
 * a miss on its ring at every pop.) */
static inline void heap_pop(SimObject *s, Event *out)
{
    EvStore *st = &s->q;
    if (store_top_is_run(st))
        *out = st->run[st->ri++];
    else
        heap_take_root(&st->h, out);
}


/* Whether the popped event ``ev`` was cancelled (its key in ``s->cancelled``): 1 and
 * its references released, 0 if not, -1 on error (ev untouched). Both run loops
 * call it only while something is cancelled. */
static int discard_cancelled(SimObject *s, Event *ev)
{
    PyObject *k = PyLong_FromLongLong(ev_key(ev));
    if (k == NULL)
        return -1;
    int c = PySet_Discard(s->cancelled, k);
    Py_DECREF(k);
    if (c > 0) {
        Py_XDECREF(ev->a);
        Py_XDECREF(ev->b);
    }
    return c;
}

static int sim_cancel_key(SimObject *s, int64_t key)
{
    PyObject *k = PyLong_FromLongLong(key);
    if (k == NULL)
        return -1;
    int r = PySet_Add(s->cancelled, k);
    Py_DECREF(k);
    return r;
}

/* An int (or __index__, or a float with an integral value: Python code may pass
 * 1e3 ps) as int64; TypeError for a fraction, OverflowError past 64 bits. */
static int as_i64_slow(PyObject *o, int64_t *out)
{
    if (PyLong_CheckExact(o)) { /* the common case: a plain int */
#if PY_VERSION_HEX < 0x030C0000
        /* 3.11: an int of at most two digits (|o| < 2**60; sizes, times up to
         * 13 days in ps) read from its digits, as PyLong_AsLongLong would */
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0:
            *out = 0;
            return 0;
        case 1:
            *out = (int64_t)d[0];
            return 0;
        case -1:
            *out = -(int64_t)d[0];
            return 0;
        case 2:
            *out = (int64_t)(((uint64_t)d[1] << PyLong_SHIFT) | d[0]);
            return 0;
        case -2:
            *out = -(int64_t)(((uint64_t)d[1] << PyLong_SHIFT) | d[0]);
            return 0;
        default:
            break;
        }
#endif
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            PyErr_Format(PyExc_OverflowError,
                         "%R does not fit in 64 bits (the native kernel's limit)", o);
            return -1;
        }
        if (v == -1 && PyErr_Occurred())
            return -1;
        *out = v;
        return 0;
    }
    if (PyFloat_Check(o)) {
        double d = PyFloat_AS_DOUBLE(o);
        if (d == d && !(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
            PyErr_Format(PyExc_OverflowError,
                         "%R does not fit in 64 bits (the native kernel's limit)", o);
            return -1;
        }
        int64_t v = d == d ? (int64_t)d : 0;
        if ((double)v != d) { /* a fraction, or nan */
            PyErr_Format(PyExc_TypeError,
                         "%R is not a whole number (the native kernel counts whole picoseconds "
                         "and bytes)",
                         o);
            return -1;
        }
        *out = v;
        return 0;
    }
    PyObject *i = PyLong_Check(o) ? (Py_INCREF(o), o) : PyNumber_Index(o);
    if (i == NULL)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%R does not fit in 64 bits (the native kernel's limit)",
                     o);
        return -1;
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* as_i64: the time or size o as an int64 (as_i64_slow), its commonest cases (an
 * exact int from -(2**30 - 1) to 2**60 - 1: times to 13 days in ps, sizes, -1) inline
 * in the callers, several per event. */
static inline int as_i64(PyObject *o, int64_t *out)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyLong_CheckExact(o) && (size_t)(Py_SIZE(o) + 1) <= 3) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        Py_ssize_t n = Py_SIZE(o);
        *out = n == 1    ? (int64_t)d[0]
               : n == 2  ? (int64_t)(((uint64_t)d[1] << PyLong_SHIFT) | d[0])
               : n == -1 ? -(int64_t)d[0]
                         : 0;
        return 0;
    }
#endif
    return as_i64_slow(o, out);
}

/* a + b into *out; 1 (and *out untouched) when it does not fit in int64 */
static inline int add_i64(int64_t a, int64_t b, int64_t *out)
{
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_add_overflow(a, b, out);
#else
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 1;
    *out = a + b;
    return 0;
#endif
}

/* Times and byte counts are int64 natively (Python ints are unbounded). */
static int overflow_err(const char *what)
{
    PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits (the native kernel's limit)",
                 what);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* 128-bit routes <-> Python ints, as two 64-bit halves                     */
/* (3.13 added public calls for this and changed _PyLong_AsByteArray; 3.12
 * changed the int layout, so Py_SIZE() no longer gives an int's sign)       */

static int long_is_negative(PyObject *v) /* v an exact int */
{
#if PY_VERSION_HEX >= 0x030E0000
    return PyLong_IsNegative(v) == 1;
#else
    return _PyLong_Sign(v) < 0;
#endif
}

static inline uint64_t load_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static inline void store_le64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

/* 1: v (an exact int) is in [0, 2**128), its low and high 64 bits in *lo, *hi;
 * 0: it is not; -1: error */
static int long_to_u128(PyObject *v, uint64_t *lo, uint64_t *hi)
{
    if (long_is_negative(v))
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    unsigned char buf[16];
    Py_ssize_t need = PyLong_AsNativeBytes(v, buf, 16,
                                           Py_ASNATIVEBYTES_LITTLE_ENDIAN |
                                               Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
                                               Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (need < 0)
        return -1;
    if (need > 16)
        return 0;
    *lo = load_le64(buf);
    *hi = load_le64(buf + 8);
    return 1;
#elif PY_VERSION_HEX < 0x030C0000
    /* 3.11: read the digits (Py_SIZE is the digit count of a non-negative int);
     * _PyLong_AsByteArray goes byte by byte and was ~4 % of a run */
    Py_ssize_t n = Py_SIZE(v);
    const digit *d = ((PyLongObject *)v)->ob_digit;
    uint64_t l = 0, h = 0;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (h >> (64 - PyLong_SHIFT))
            return 0; /* 2**128 or more */
        h = (h << PyLong_SHIFT) | (l >> (64 - PyLong_SHIFT));
        l = (l << PyLong_SHIFT) | (uint64_t)d[i];
    }
    *lo = l;
    *hi = h;
    return 1;
#else
    unsigned char buf[16];
    if (_PyLong_AsByteArray((PyLongObject *)v, buf, 16, 1, 0) == 0) {
        *lo = load_le64(buf);
        *hi = load_le64(buf + 8);
        return 1;
    }
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
#endif
}

/* The int hi * 2**64 + lo (a new reference). */
static PyObject *long_from_u128(uint64_t lo, uint64_t hi)
{
#if PY_VERSION_HEX < 0x030C0000
    /* 3.11: write the digits (see long_to_u128) */
    if (hi == 0)
        return PyLong_FromUnsignedLongLong(lo); /* small ints stay the cached ones */
    Py_ssize_t n = 0;
    uint64_t tl = lo, th = hi;
    while (tl | th) {
        tl = (tl >> PyLong_SHIFT) | (th << (64 - PyLong_SHIFT));
        th >>= PyLong_SHIFT;
        n++;
    }
    PyLongObject *r = _PyLong_New(n);
    if (r == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        r->ob_digit[i] = (digit)(lo & PyLong_MASK);
        lo = (lo >> PyLong_SHIFT) | (hi << (64 - PyLong_SHIFT));
        hi >>= PyLong_SHIFT;
    }
    return (PyObject *)r;
#else
    unsigned char buf[16];
    store_le64(buf, lo);
    store_le64(buf + 8, hi);
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromUnsignedNativeBytes(buf, 16, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
#else
    return _PyLong_FromByteArray(buf, 16, 1, 0);
#endif
#endif
}

/* Overwrite v, an exact non-negative int, with hi * 2**64 + lo when it has as
 * many digits as that value needs (1); 0: not done, make a new int.  Only for
 * an int nobody else can see: the caller holds it and one other reference,
 * which is where it writes the value back (ints are immutable to Python code,
 * so this must never reach an int anything else refers to).  3.11's layout
 * only; later versions always take the new int. */
static inline int long_store_u128(PyObject *v, uint64_t lo, uint64_t hi)
{
#if PY_VERSION_HEX < 0x030C0000
    if (hi == 0)
        return 0;
    Py_ssize_t n = (128 - __builtin_clzll(hi) + PyLong_SHIFT - 1) / PyLong_SHIFT;
    if (Py_SIZE(v) != n)
        return 0;
    digit *d = ((PyLongObject *)v)->ob_digit;
    for (Py_ssize_t i = 0; i < n; i++) {
        d[i] = (digit)(lo & PyLong_MASK);
        lo = (lo >> PyLong_SHIFT) | (hi << (64 - PyLong_SHIFT));
        hi >>= PyLong_SHIFT;
    }
    return 1;
#else
    (void)v;
    (void)lo;
    (void)hi;
    return 0;
#endif
}

/* ------------------------------------------------------------------------ */
/* ring buffer of packets, each with the wire bytes counted at enqueue       */

static int ring_push(Ring *r, PyObject *o, int64_t wb)
{
    if (r->len == r->cap) {
        Py_ssize_t cap = r->cap ? r->cap * 2 : 16; /* a power of two */
        Slot *buf = PyMem_Malloc((size_t)cap * sizeof(Slot));
        if (buf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < r->len; i++)
            buf[i] = r->buf[(r->head + i) & (r->cap - 1)];
        PyMem_Free(r->buf);
        r->buf = buf;
        r->cap = cap;
        r->head = 0;
    }
    Py_INCREF(o);
    Slot *e = &r->buf[(r->head + r->len) & (r->cap - 1)];
    e->pkt = o;
    e->wb = wb;
    r->len++;
    return 0;
}

/* Pop the oldest (a new reference for the caller) and its wire bytes. */
static PyObject *ring_pop(Ring *r, int64_t *wb)
{
    Slot *e = &r->buf[r->head];
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
    *wb = e->wb;
    return e->pkt;
}

static void ring_clear(Ring *r)
{
    int64_t wb;
    while (r->len) {
        PyObject *o = ring_pop(r, &wb);
        Py_DECREF(o);
    }
}

/* the i-th oldest queued packet (borrowed) */
static inline PyObject *ring_at(Ring *r, Py_ssize_t i)
{
    return r->buf[(r->head + i) & (r->cap - 1)].pkt;
}

static PyObject *ring_list(Ring *r)
{
    PyObject *l = PyList_New(r->len);
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < r->len; i++) {
        PyObject *o = ring_at(r, i);
        Py_INCREF(o);
        PyList_SET_ITEM(l, i, o);
    }
    return l;
}

/* ------------------------------------------------------------------------ */
/* Attribute access to pkt.size / pkt.route without the generic lookup        */
/*
 * The packet classes are compiled (mypyc) or have __slots__: their fields are
 * getset or member descriptors found on the type, which take precedence over
 * an instance __dict__.  For a type with the generic getattr/setattr, the
 * descriptor is looked up once and its getter/setter called directly; the
 * entry is keyed on the type and its version tag (which CPython changes when
 * the type or a base is modified), so a changed class is looked up again.
 * Anything else (another kind of descriptor, a custom __getattribute__ or
 * __setattr__, a type without a valid version tag) takes PyObject_GetAttr /
 * PyObject_SetAttr as before.  A few entries per attribute: a port carries
 * data, ACK and NACK packets alternately.
 */
#define ATTR_WAYS 4
typedef struct {
    PyTypeObject *tp; /* strong reference, or NULL */
    unsigned int version;
    PyGetSetDef *gs; /* NULL: generic path for this type */
} AttrEntry;
typedef struct {
    AttrEntry e[ATTR_WAYS];
    int next; /* round-robin replacement */
} AttrCache;
static AttrCache cache_size, cache_route, cache_trimmed;

/* A miss of attr_descr: look the descriptor up and remember it. */
static PyGetSetDef *attr_descr_miss(AttrCache *c, PyTypeObject *tp, PyObject *name)
{
    PyGetSetDef *gs = NULL;
    if (tp->tp_getattro == PyObject_GenericGetAttr &&
        tp->tp_setattro == PyObject_GenericSetAttr) {
        PyObject *d = _PyType_Lookup(tp, name); /* borrowed; gives tp a version tag */
        if (d != NULL && Py_IS_TYPE(d, &PyGetSetDescr_Type))
            gs = ((PyGetSetDescrObject *)d)->d_getset;
    }
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return NULL; /* cannot tell when it changes: generic path, uncached */
    AttrEntry *e = NULL;
    for (int i = 0; i < ATTR_WAYS; i++)
        if (c->e[i].tp == tp)
            e = &c->e[i];
    if (e == NULL) {
        e = &c->e[c->next];
        c->next = (c->next + 1) % ATTR_WAYS;
        Py_INCREF(tp);
        Py_XSETREF(e->tp, tp);
    }
    e->version = tp->tp_version_tag;
    e->gs = gs;
    return gs;
}

/* (inlined: the hit is a few compares; the miss is a call) */
static inline PyGetSetDef *attr_descr(AttrCache *c, PyObject *o, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(o);
    for (int i = 0; i < ATTR_WAYS; i++) {
        AttrEntry *e = &c->e[i];
        if (e->tp == tp) {
            if ((tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && e->version == tp->tp_version_tag)
                return e->gs;
            break;
        }
    }
    return attr_descr_miss(c, tp, name);
}

static inline PyObject *get_attr_cached(AttrCache *c, PyObject *o, PyObject *name)
{
    PyGetSetDef *gs = attr_descr(c, o, name);
    if (gs != NULL && gs->get != NULL)
        return gs->get(o, gs->closure);
    return PyObject_GetAttr(o, name);
}

static int set_attr_cached(AttrCache *c, PyObject *o, PyObject *name, PyObject *v)
{
    PyGetSetDef *gs = attr_descr(c, o, name);
    if (gs != NULL && gs->set != NULL)
        return gs->set(o, v, gs->closure);
    return PyObject_SetAttr(o, name, v);
}

/* ------------------------------------------------------------------------ */
/* EgressPort: hot path                                                      */

static int get_size(PyObject *pkt, int64_t *out)
{
    PyObject *v = get_attr_cached(&cache_size, pkt, S_size);
    if (v == NULL)
        return -1;
    int r = as_i64(v, out);
    Py_DECREF(v);
    return r;
}

/* pkt.size + framing */
static int get_wire_bytes(PortObject *p, PyObject *pkt, int64_t *out)
{
    int64_t size;
    if (get_size(pkt, &size) < 0)
        return -1;
    if (add_i64(size, p->framing, out))
        return overflow_err("pkt.size + framing");
    return 0;
}

#ifndef HAVE_INT128
/* ser_ps when nbytes * num does not fit in 64 bits: Python ints (rare, slow) */
static int ser_ps_big(PortObject *p, int64_t nbytes, int64_t *out)
{
    PyObject *n = PyLong_FromLongLong(nbytes), *num = PyLong_FromLongLong(p->num),
             *den = PyLong_FromLongLong(p->den), *x = NULL, *q = NULL, *r = NULL;
    int rc = -1;
    if (n && num && den && (x = PyNumber_Multiply(n, num)) != NULL &&
        (q = PyNumber_Negative(x)) != NULL) {
        Py_SETREF(q, PyNumber_FloorDivide(q, den));
        if (q != NULL && (r = PyNumber_Negative(q)) != NULL) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(r, &overflow);
            if (overflow)
                overflow_err("serialization time");
            else if (!(v == -1 && PyErr_Occurred())) {
                *out = v;
                rc = 0;
            }
        }
    }
    Py_XDECREF(n);
    Py_XDECREF(num);
    Py_XDECREF(den);
    Py_XDECREF(x);
    Py_XDECREF(q);
    Py_XDECREF(r);
    return rc;
}
#endif

/* ceil(nbytes * num / den), as -(-nbytes * num // den) in Python; -1 on overflow */
static inline int ser_ps(PortObject *p, int64_t nbytes, int64_t *out)
{
#ifdef HAVE_INT128
    int64_t x64;
    if (!__builtin_mul_overflow(nbytes, p->num, &x64)) {
        /* the product fits (always, for sane sizes and rates): a 64-bit division,
         * not the library's 128-bit one */
        int64_t q64 = x64 / p->den;
        if (x64 % p->den != 0 && x64 > 0)
            q64 += 1;
        *out = q64;
        return 0;
    }
    __int128 x = (__int128)nbytes * p->num;
    __int128 q = x / p->den;
    if (x % p->den != 0 && x > 0)
        q += 1; /* (truncation towards zero is already the ceiling for x < 0) */
    if (q > INT64_MAX || q < INT64_MIN)
        return overflow_err("serialization time");
    *out = (int64_t)q;
    return 0;
#else
    int64_t lim = INT64_MAX / p->num; /* num >= 1 */
    if (nbytes > lim || nbytes < -lim)
        return ser_ps_big(p, nbytes, out);
    int64_t x = nbytes * p->num;
    int64_t q = x / p->den;
    if (x % p->den != 0 && x > 0)
        q += 1;
    *out = q;
    return 0;
#endif
}

/* The next draw of the port's own generator (made by sim.rng_for(name) on the
 * first draw, as PyEgressPort does) into *x; -1 on error. */
static int port_draw(PortObject *p, double *x)
{
    if (p->rng_random == NULL) {
        PyObject *rng = PyObject_CallMethodOneArg((PyObject *)p->sim, S_rng_for, p->name);
        if (rng == NULL)
            return -1;
        p->rng_random = PyObject_GetAttr(rng, S_random);
        Py_DECREF(rng);
        if (p->rng_random == NULL)
            return -1;
    }
    PyObject *r = PyObject_CallNoArgs(p->rng_random);
    if (r == NULL)
        return -1;
    *x = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (*x == -1.0 && PyErr_Occurred())
        return -1;
    return 0;
}

/* 1: lost by the wire, 0: not, -1: error */
static int port_impair(PortObject *p)
{
    if (p->silent) {
        p->lost_silent++;
        return 1;
    }
    if (p->loss != 0.0) {
        double x;
        if (port_draw(p, &x) < 0)
            return -1;
        if (x < p->loss) {
            p->lost++;
            return 1;
        }
    }
    return 0;
}

/* Serialize pkt from now and schedule its arrival. 1 sent, 0 lost, -1 error.
 * Steals the reference to pkt (the arrival event takes it; released when the packet
 * is lost or on error): the transmitter hands on the reference its queue held
 * without touching the packet, whose line has usually left the cache since it was
 * queued (the arrival's prefetch fetches it in time). */
static int port_put_on_wire(PortObject *p, PyObject *pkt, int64_t wb, int64_t now)
{
    int64_t ser, end, arrive;
    if (ser_ps(p, wb, &ser) < 0)
        goto fail;
    if (add_i64(now, ser, &end) || add_i64(end, p->delay, &arrive)) {
        overflow_err("arrival time");
        goto fail;
    }
    p->busy_until = end;
    p->tx_pkts++;
    p->tx_bytes += wb;
    if (p->impaired) {
        int r = port_impair(p);
        if (r) {
            Py_DECREF(pkt);
            return r < 0 ? -1 : 0;
        }
    }
    SimObject *s = p->sim;
    int64_t key = sim_next_key(s);
    int64_t target;
    if (p->rx_kind == RX_SWITCH)
        target = (int64_t)((SwitchObject *)p->rx_target)->ent1 - 1;
    else if (p->rx_kind == RX_HOST)
        target = (int64_t)((HostEndObject *)p->rx_target)->ent1 - 1;
    else
        target = ent_lookup(s, callable_self(p->rx));
    if (target < 0)
        target = s->cur;
    Py_INCREF(p);
    int64_t epoch = p->epoch;
    if (key >= 0 && epoch >= 0 && epoch < EPOCH_SMALL &&
        (s->owned == NULL || target >= s->nowned || s->owned[target])) {
        Event ev = {(uint64_t)key, (uint64_t)arrive ^ T_BIAS,
                    (uint64_t)target << 32 | (uint64_t)epoch << SK_KIND_BITS | EV_ARRIVE,
                    (PyObject *)p, pkt};
        return heap_insert(s, &ev) < 0 ? -1 : 1;
    }
    if (heap_push_key(s, arrive, key, EV_ARRIVE, target, (PyObject *)p, pkt, epoch) < 0)
        return -1;
    return 1;
fail:
    Py_DECREF(pkt);
    return -1;
}

static int port_arm(PortObject *p)
{
    int64_t now = p->sim->now;
    int64_t at = p->busy_until > now ? p->busy_until : now;
    int64_t key = sim_next_key(p->sim);
    if (key < 0)
        return -1;
    p->txev_t = at;
    p->txev_key = key;
    p->has_txev = 1;
    Py_INCREF(p);
    return heap_push_key(p->sim, at, key, EV_TXFREE, p->ent1 ? p->ent1 - 1 : p->sim->cur,
                         (PyObject *)p, NULL, 0);
}

static int port_enqueue(PortObject *p, PyObject *pkt)
{
    if (!p->up) {
        p->drops_down++;
        return 0;
    }
    int64_t now = p->sim->now;
    int64_t wb;
    if (get_wire_bytes(p, pkt, &wb) < 0)
        return -1;
    if (!p->has_txev && p->busy_until <= now) {
        Py_INCREF(pkt); /* (put_on_wire takes a reference: the caller keeps its own) */
        return port_put_on_wire(p, pkt, wb, now) < 0 ? -1 : 0;
    }
    int isdata = PyObject_IsInstance(pkt, DataPacketType);
    if (isdata < 0)
        return -1;
    if (isdata) {
        PyObject *tr = get_attr_cached(&cache_trimmed, pkt, S_trimmed);
        if (tr == NULL)
            return -1;
        int trimmed = PyObject_IsTrue(tr);
        Py_DECREF(tr);
        if (trimmed < 0)
            return -1;
        if (!trimmed) {
            int64_t q = p->data_bytes, nq;
            /* a sum beyond int64 is beyond any limit too, as in Python */
            if (!add_i64(q, wb, &nq) && nq <= p->data_limit) {
                if (p->ecn && q > p->kmin) {
                    int64_t kmax = p->kmax;
                    int mark = q >= kmax;
                    if (!mark) {
                        double x;
                        if (port_draw(p, &x) < 0)
                            return -1;
                        mark = x * (double)(kmax - p->kmin) < (double)(q - p->kmin);
                    }
                    if (mark) {
                        if (PyObject_SetAttr(pkt, S_ecn, Py_True) < 0)
                            return -1;
                        p->ecn_marks++;
                    }
                }
                if (add_i64(nq, p->prio_bytes, &q))
                    return overflow_err("queued bytes");
                if (ring_push(&p->data, pkt, wb) < 0)
                    return -1;
                p->data_bytes = nq;
                if (q > p->max_queue_bytes)
                    p->max_queue_bytes = q;
                if (!p->has_txev)
                    return port_arm(p);
                return 0;
            }
            if (!p->trim) {
                p->drops_full++;
                return 0;
            }
            PyObject *r =
                PyObject_CallMethodOneArg(pkt, S_trim, p->lasthop ? Py_True : Py_False);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
            p->trims++;
            if (get_wire_bytes(p, pkt, &wb) < 0)
                return -1;
        }
    }
    int64_t pb, tot;
    if (add_i64(p->prio_bytes, wb, &pb) || pb > p->prio_limit) {
        p->drops_header++;
        return 0;
    }
    if (add_i64(pb, p->data_bytes, &tot))
        return overflow_err("queued bytes");
    if (ring_push(&p->prio, pkt, wb) < 0)
        return -1;
    p->prio_bytes = pb;
    if (tot > p->max_queue_bytes)
        p->max_queue_bytes = tot;
    if (!p->has_txev)
        return port_arm(p);
    return 0;
}

static int port_tx_free(PortObject *p)
{
    PyObject *pkt;
    int64_t wb;
    /* this event is out of the heap now: a set_up(False) from Python code run
     * below (pkt.size, the loss draw) must not cancel it (Python's cancel sees
     * it is no longer in the heap and does nothing) */
    p->has_txev = 0;
    if (p->prio.len) {
        pkt = ring_pop(&p->prio, &wb);
        p->prio_bytes -= wb;
    }
    else if (p->data.len) {
        pkt = ring_pop(&p->data, &wb);
        p->data_bytes -= wb;
    }
    else {
        p->has_txev = 0;
        return 0;
    }
    /* (the queue's reference goes on to the arrival) */
    if (port_put_on_wire(p, pkt, wb, p->sim->now) < 0)
        return -1;
    if (p->prio.len || p->data.len) {
        int64_t key = sim_next_key(p->sim);
        if (key < 0)
            return -1;
        p->txev_t = p->busy_until;
        p->txev_key = key;
        p->has_txev = 1;
        Py_INCREF(p);
        return heap_push_key(p->sim, p->busy_until, key, EV_TXFREE,
                             p->ent1 ? p->ent1 - 1 : p->sim->cur, (PyObject *)p, NULL, 0);
    }
    p->has_txev = 0;
    return 0;
}

/* when everything queued now will have left; -1 on overflow */
static int port_drain_time(PortObject *p, int64_t *out)
{
    int64_t now = p->sim->now;
    int64_t start = p->busy_until > now ? p->busy_until : now;
    int64_t q = p->data_bytes + p->prio_bytes; /* both bounded by enqueue's checks */
    int64_t ser = 0;
    if (q && ser_ps(p, q, &ser) < 0)
        return -1;
    if (add_i64(start, ser, out))
        return overflow_err("drain time");
    return 0;
}

static PyObject *drain_time_obj(PortObject *p)
{
    int64_t t;
    if (port_drain_time(p, &t) < 0)
        return NULL;
    return PyLong_FromLongLong(t);
}

/* ------------------------------------------------------------------------ */
/* Switch and HostEnd: hot path                                              */

static PyObject *lut_get(UsidTable *t, int32_t key)
{
    if (t->cap == 0)
        return NULL;
    Py_ssize_t m = t->cap - 1;
    Py_ssize_t i = ((uint32_t)key * 2654435761u) & m;
    for (;;) {
        int32_t k = t->keys[i];
        if (k == key)
            return t->vals[i];
        if (k < 0)
            return NULL;
        i = (i + 1) & m;
    }
}

static void lut_free(UsidTable *t)
{
    if (t->cap) {
        for (Py_ssize_t i = 0; i < t->cap; i++)
            if (t->keys[i] >= 0)
                Py_DECREF(t->vals[i]);
        PyMem_Free(t->keys);
        PyMem_Free(t->vals);
    }
    t->keys = NULL;
    t->vals = NULL;
    t->cap = 0;
}

/* via.epoch of any port; -1 on error with *err set */
static int epoch_matches(PyObject *via, int64_t epoch, PyObject *epoch_obj)
{
    if (is_port(via))
        return ((PortObject *)via)->epoch == epoch;
    PyObject *e = PyObject_GetAttr(via, S_epoch);
    if (e == NULL)
        return -1;
    int r;
    if (epoch_obj != NULL) {
        r = PyObject_RichCompareBool(epoch_obj, e, Py_EQ);
    }
    else {
        PyObject *eo = PyLong_FromLongLong(epoch);
        if (eo == NULL) {
            Py_DECREF(e);
            return -1;
        }
        r = PyObject_RichCompareBool(eo, e, Py_EQ);
        Py_DECREF(eo);
    }
    Py_DECREF(e);
    return r;
}

static int lost_in_flight(PyObject *via, PyObject *pkt)
{
    if (is_port(via)) {
        ((PortObject *)via)->drops_down++;
        return 0;
    }
    PyObject *r = PyObject_CallMethodOneArg(via, S_lost_in_flight, pkt);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int enqueue_any(PyObject *out, PyObject *pkt)
{
    if (is_port(out))
        return port_enqueue((PortObject *)out, pkt);
    PyObject *r = PyObject_CallMethodOneArg(out, S_enqueue, pkt);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The Python expression path of Switch.receive for a route that is not a
 * plain non-negative int below 2**128: 0 done (counted), 1 forward to *out
 * (a new reference: the table entry is taken before any Python code can run). */
static int switch_route_generic(SwitchObject *sw, PyObject *pkt, PyObject *addr, PyObject **out)
{
    PyObject *top = PyNumber_Rshift(addr, PyLong_Shift);
    if (top == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            sw->bad_route++;
            return 0;
        }
        return -1;
    }
    PyObject *m = PyLong_FromLongLong(sw->match);
    if (m == NULL) {
        Py_DECREF(top);
        return -1;
    }
    int ne = PyObject_RichCompareBool(top, m, Py_NE);
    Py_DECREF(top);
    Py_DECREF(m);
    if (ne < 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            sw->bad_route++;
            return 0;
        }
        return -1;
    }
    if (ne) {
        sw->bad_route++;
        return 0;
    }
    PyObject *x = PyNumber_Lshift(addr, PyLong_16);
    if (x == NULL)
        return -1;
    PyObject *y = PyNumber_And(x, PyLong_Carrier);
    Py_DECREF(x);
    if (y == NULL)
        return -1;
    PyObject *na = PyNumber_Or(PyLong_Block, y);
    Py_DECREF(y);
    if (na == NULL)
        return -1;
    if (PyObject_SetAttr(pkt, S_route, na) < 0) {
        Py_DECREF(na);
        return -1;
    }
    PyObject *k1 = PyNumber_Rshift(na, PyLong_Shift);
    Py_DECREF(na);
    if (k1 == NULL)
        return -1;
    PyObject *k = PyNumber_And(k1, PyLong_FFFF);
    Py_DECREF(k1);
    if (k == NULL)
        return -1;
    PyObject *o = PyDict_GetItemWithError(sw->table, k);
    Py_XINCREF(o);
    Py_DECREF(k);
    if (o == NULL) {
        if (PyErr_Occurred())
            return -1;
        sw->bad_route++;
        return 0;
    }
    *out = o;
    return 1;
}

/* Where a packet type keeps its route, for the prefetches of a switch arrival's
 * chain of loads (packet, route, the switch's table, the out port; see
 * "prefetching the next events"): the offset in the object of the pointer the
 * type's route getter returns, found in the first packet of the type a switch
 * reads its route from (0: not one pointer slot, no prefetch).  A few types: a
 * port carries data, ACK and NACK packets alternately.  What the offset gives is
 * only ever prefetched or read for a prefetch, never used otherwise.  Those reads
 * are loads, not hints: the packet is alive (its event holds it), its type is held
 * here, and the slot is the one found holding the route's reference (an object or
 * NULL), so they read live objects; the one case not excluded is an unboxed field
 * whose value equalled the route's address in the first packet of its type. */
#define ROUTE_WAYS 4
typedef struct {
    PyTypeObject *tp; /* strong reference, or NULL */
    Py_ssize_t off;
} RouteSlot;
static RouteSlot route_slots[ROUTE_WAYS];
static int route_slot_next;

/* Learn where pkt's type keeps its route (addr, just read through the getter). */
static inline void route_slot_learn(PyObject *pkt, PyObject *addr)
{
    PyTypeObject *tp = Py_TYPE(pkt);
    for (int i = 0; i < ROUTE_WAYS; i++)
        if (route_slots[i].tp == tp)
            return;
    Py_ssize_t off = 0;
    int found = 0;
    for (Py_ssize_t o = (Py_ssize_t)sizeof(PyObject);
         o + (Py_ssize_t)sizeof(PyObject *) <= tp->tp_basicsize; o += (Py_ssize_t)sizeof(PyObject *))
        if (*(PyObject **)((char *)pkt + o) == addr) {
            off = o;
            found++;
        }
    RouteSlot *r = &route_slots[route_slot_next];
    route_slot_next = (route_slot_next + 1) % ROUTE_WAYS;
    Py_INCREF(tp);
    Py_XSETREF(r->tp, tp);
    r->off = found == 1 ? off : 0; /* two slots holding it: which is the route is unknown */
}

static int switch_receive_impl(SwitchObject *sw, PyObject *pkt, PyObject *via, int64_t epoch,
                               PyObject *epoch_obj)
{
    int ok = epoch_matches(via, epoch, epoch_obj);
    if (ok < 0)
        return -1;
    if (!ok)
        return lost_in_flight(via, pkt);
    if (!sw->forwarding) {
        sw->discarded++;
        return 0;
    }
    PyObject *addr = get_attr_cached(&cache_route, pkt, S_route);
    if (addr == NULL)
        return -1;
    PyObject *out = NULL;
    uint64_t lo = 0, hi = 0;
    int fast = 0;
    if (PyLong_CheckExact(addr)) {
        route_slot_learn(pkt, addr);
        /* negative or >= 2**128: the generic path says bad route */
        fast = long_to_u128(addr, &lo, &hi);
        if (fast < 0) {
            Py_DECREF(addr);
            return -1;
        }
    }
    if (fast) {
        if ((int64_t)(hi >> (ACTIVE_SHIFT - 64)) != sw->match) { /* addr >> 80 */
            Py_DECREF(addr);
            sw->bad_route++;
            return 0;
        }
        /* BLOCK | ((addr << 16) & CARRIER_MASK) */
        hi = BLOCK_HI | (((hi << 16) | (lo >> 48)) & CARRIER_HI);
        lo <<= 16;
        /* The packet's route is mostly an int only the packet refers to (its
         * host made it for this packet): then the shifted address is written
         * into it in place, with no new int and no old one freed.  A route
         * held anywhere else (a route cache, a caller) has more references
         * and gets a new int, as does the pure-Python switch every time. */
        if (Py_REFCNT(addr) == 2 && long_store_u128(addr, lo, hi)) {
            Py_DECREF(addr);
        }
        else {
            Py_DECREF(addr);
            PyObject *no = long_from_u128(lo, hi);
            if (no == NULL)
                return -1;
            int r = set_attr_cached(&cache_route, pkt, S_route, no);
            Py_DECREF(no);
            if (r < 0)
                return -1;
        }
        out = lut_get(&sw->lut, (int32_t)((hi >> (ACTIVE_SHIFT - 64)) & 0xFFFF));
        if (out == NULL) {
            sw->bad_route++;
            return 0;
        }
        Py_INCREF(out);
    }
    else {
        int r = switch_route_generic(sw, pkt, addr, &out);
        Py_DECREF(addr);
        if (r <= 0)
            return r;
    }
    sw->forwarded++;
    int r = enqueue_any(out, pkt);
    Py_DECREF(out);
    return r;
}

static int host_receive_impl(HostEndObject *h, PyObject *pkt, PyObject *via, int64_t epoch,
                             PyObject *epoch_obj)
{
    int ok = epoch_matches(via, epoch, epoch_obj);
    if (ok < 0)
        return -1;
    if (!ok)
        return lost_in_flight(via, pkt);
    PyObject *cb = h->on_receive;
    if (cb == Py_None) {
        h->undelivered++;
        return 0;
    }
    h->received++;
    PyObject *now = PyLong_FromLongLong(h->sim->now);
    if (now == NULL)
        return -1;
    PyObject *plane = h->plane;
    Py_INCREF(cb);
    Py_INCREF(plane);
    /* a slot before the arguments lets a bound method put self there */
    PyObject *args[4] = {NULL, pkt, plane, now};
    PyObject *r = PyObject_Vectorcall(cb, args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(cb);
    Py_DECREF(plane);
    Py_DECREF(now);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* event dispatch                                                            */

static int not_ready(const char *what)
{
    PyErr_Format(PyExc_RuntimeError, "%s: not initialised", what);
    return -1;
}

static int dispatch(Event *ev)
{
    int kind = ev_kind(ev);
    if (kind == EV_CALL1) {
        /* a slot before the argument lets a bound method put self there */
        PyObject *args[2] = {NULL, ev->b};
        PyObject *r = PyObject_Vectorcall(ev->a, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    if (kind == EV_CALL) {
        PyObject *r = PyObject_Call(ev->a, ev->b, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    PortObject *p = (PortObject *)ev->a;
    if (p->sim == NULL)
        return not_ready("EgressPort");
    if (kind == EV_TXFREE)
        return port_tx_free(p);
    /* EV_ARRIVE(_BIG): the target may have been created with __new__ and never
     * initialised (or cleared by the collector): check before going native */
    PyObject *pkt = ev->b;
    int64_t epoch = ev_epoch(ev);
    if (kind == EV_ARRIVE_BIG) {
        pkt = PyTuple_GET_ITEM(ev->b, 0);
        if (as_i64(PyTuple_GET_ITEM(ev->b, 1), &epoch) < 0)
            return -1;
    }
    switch (p->rx_kind) {
    case RX_SWITCH: {
        SwitchObject *sw = (SwitchObject *)p->rx_target;
        if (sw->ports == NULL || sw->table == NULL)
            return not_ready("Switch");
        Py_INCREF(sw); /* Python code it runs may re-initialise the port */
        int r = switch_receive_impl(sw, pkt, (PyObject *)p, epoch, NULL);
        Py_DECREF(sw);
        return r;
    }
    case RX_HOST: {
        HostEndObject *h = (HostEndObject *)p->rx_target;
        if (h->sim == NULL || h->on_receive == NULL || h->plane == NULL)
            return not_ready("HostEnd");
        Py_INCREF(h);
        int r = host_receive_impl(h, pkt, (PyObject *)p, epoch, NULL);
        Py_DECREF(h);
        return r;
    }
    default: {
        PyObject *e = PyLong_FromLongLong(epoch);
        if (e == NULL)
            return -1;
        PyObject *rx = p->rx;
        Py_INCREF(rx);
        PyObject *args[4] = {NULL, pkt, (PyObject *)p, e};
        PyObject *r = PyObject_Vectorcall(rx, args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(rx);
        Py_DECREF(e);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    }
}

/* ------------------------------------------------------------------------ */
/* prefetching the next events                                               */
/*
 * At thousands of hosts the objects an event reads (the port it came over, the
 * packet, the switch or host end it reaches) are
 * rarely in the cache, and each is found through the one before it, so their
 * misses come one after another.  The next events are usually the run's next
 * ones, in order (the event store): the loop asks for the port and packet of the
 * event PF_AHEAD on before it dispatches this one (stage 1), and for what hangs
 * off the port of the event PF_DEPS_AHEAD on (the receiver, the transmit
 * queue's head) once this event is done (stage 2: that port's
 * lines are there by then), so the misses of a few events overlap; the next
 * event itself (the run's or h's) is asked for as well.  A prefetch changes no
 * state and cannot fault: at worst (an earlier event scheduled meanwhile) it
 * fetches a line for nothing.  Only objects the store holds a reference to are
 * read.
 */

#ifndef PF_AHEAD
#define PF_AHEAD 8 /* stage 1 reaches this many events into the run ahead */
#endif
#ifndef PF_DEPS_AHEAD
#define PF_DEPS_AHEAD 4 /* stage 2 this many (fewer: stage 1's lines are in by then) */
#endif

/* Stage 1 for one event: the lines of its port (or callable) and packet. */
PF_INLINE void prefetch_lines(uint64_t meta, const char *a, const void *b)
{
    PREFETCH(a);
    if ((meta & ((1u << SK_KIND_BITS) - 1)) != EV_CALL &&
        (meta & ((1u << SK_KIND_BITS) - 1)) != EV_CALL1)
        PREFETCH(a + 64); /* a port: its transmitter's fields go on in its second line */
    if (b != NULL) {
        PREFETCH(b);
        /* an arrival's packet: its header and size, then its route's slot (a data
         * packet's second line, where route_of and the switch chain read) */
        if ((meta & ((1u << SK_KIND_BITS) - 1)) == EV_ARRIVE)
            PREFETCH((const char *)b + 64);
    }
}

PF_INLINE const PyObject *route_of(const PyObject *pkt);

/* Stage 2 for one event: what it reaches through its port, and an arrival's
 * packet's last line (stage 1 asked for its first, so its type is known by now):
 * a data packet's flags (trimmed, read by the port it is queued on) sit at its
 * end.  At a host, the packet's route too: the host drops it (the packet freed, or
 * given a new route), which writes the int's reference count. */
PF_INLINE void prefetch_deps(const SimObject *s, uint64_t meta, const PortObject *p,
                             const PyObject *b)
{
    int kind = (int)(meta & ((1u << SK_KIND_BITS) - 1));
    if (kind == EV_CALL || kind == EV_CALL1)
        return;
    if (kind == EV_ARRIVE && b != NULL) {
        PREFETCH((const char *)b + Py_TYPE(b)->tp_basicsize - 1);
        if (p->rx_kind == RX_HOST) {
            const PyObject *r = route_of(b);
            if (r != NULL)
                PREFETCH(r);
        }
    }
    if (kind == EV_TXFREE) {
        const Ring *r = p->prio.len ? &p->prio : &p->data;
        if (r->len)
            PREFETCH(&r->buf[r->head]);
        if (p->rx_target != NULL) /* the arrival it schedules reads the receiver's entity */
            PREFETCH(p->rx_target);
        return;
    }
    if (p->rx_target != NULL) { /* a switch's or host end's arrival fields: two lines */
        PREFETCH(p->rx_target);
        PREFETCH((const char *)p->rx_target + 64);
    }
}

/* An entity's hint row (set_hints): the lines the Python code run for it reads
 * (a host's NIC, its transport context, its QPs and their parts), each found from
 * the one before it, so that without a hint their misses come one after another.
 * A port's transmit-free event runs no such code: it gets none.  The row is asked
 * for PF_HINT_ROW events ahead, its lines PF_AHEAD ahead (stage 1), into the second
 * level of cache (PREFETCH_L2): a row is dozens of lines, and asked for into the
 * first level they wait for its few miss buffers, the loop with them. */
#ifndef PF_HINTS
#define PF_HINTS 96 /* lines per entity (a row: twelve cache lines) */
#endif
#ifndef PF_OBJ_LINES
#define PF_OBJ_LINES 5 /* lines of one object at most (its first) */
#endif
#ifndef PF_HINT_ROW
#define PF_HINT_ROW (PF_AHEAD + 2)
#endif

PF_INLINE const uintptr_t *hint_row(const SimObject *s, uint64_t meta)
{
    uint64_t t = meta >> 32;
    if (t >= (uint64_t)s->nhint || (meta & ((1u << SK_KIND_BITS) - 1)) == EV_TXFREE)
        return NULL;
    return s->hints + t * PF_HINTS;
}

/* The row of an event's hints. */
PF_INLINE void prefetch_hint_row(const SimObject *s, uint64_t meta)
{
    const uintptr_t *row = hint_row(s, meta);
    if (row != NULL)
        for (int i = 0; i < PF_HINTS; i += 8)
            PREFETCH_L2(row + i);
}

/* The lines in an event's hint row. */
PF_INLINE void prefetch_hints(const SimObject *s, uint64_t meta)
{
    const uintptr_t *row = hint_row(s, meta);
    if (row == NULL)
        return;
    for (int i = 0; i < PF_HINTS && row[i]; i++)
        PREFETCH_L2((const void *)row[i]);
}

/* Stage 1, after an event is popped: the next event's lines (the run's next or
 * h's root, whichever comes first), and those of the run's event PF_AHEAD on
 * with its hints; the hint row of the run's event PF_HINT_ROW on. */
PF_INLINE void prefetch_next(const SimObject *s)
{
    const EvStore *st = &s->q;
    if (st->ri + PF_AHEAD < st->rn) {
        const Event *e = &st->run[st->ri + PF_AHEAD];
        prefetch_lines(e->meta, (const char *)e->a, e->b);
        prefetch_hints(s, e->meta);
    }
    if (st->ri + PF_HINT_ROW < st->rn)
        prefetch_hint_row(s, st->run[st->ri + PF_HINT_ROW].meta);
    if (st->h.n != 0) {
        const HPay *np = &st->h.hp[0];
        prefetch_lines(np->meta, (const char *)np->a, np->b);
    }
    if (st->ri < st->rn) {
        const Event *e = &st->run[st->ri];
        prefetch_lines(e->meta, (const char *)e->a, e->b);
    }
}

/* A switch arrival's chain: its packet's route (an int), the switch's table
 * entry the route's active uSID picks, the out port that entry holds, the slot
 * in that port's queue.  Each is found from the one before, so stage 2 takes one
 * step of each arrival's chain an event, two events apart: the route of the run's
 * event CH_ROUTE on (its packet and port asked for by stage 1 two events before),
 * the table entry of the event CH_TABLE on, the out port of the event CH_OUT on,
 * and the queue slot and far end of the next event.  At 8,192 hosts a fabric
 * event takes about as long as a miss: one event apart, each step waited for the
 * line the step before had asked for (sim_growth.py --fabric-only). */
#ifndef CH_ROUTE
#define CH_ROUTE (PF_AHEAD - 2)
#endif
#ifndef CH_TABLE
#define CH_TABLE (CH_ROUTE - 2)
#endif
#ifndef CH_OUT
#define CH_OUT (CH_TABLE - 2)
#endif
#if CH_OUT < 1 || CH_TABLE <= CH_OUT || CH_ROUTE <= CH_TABLE || PF_AHEAD <= CH_ROUTE
#error "the chain's steps must come after stage 1 and before the queue slot (event 0)"
#endif

/* The switch an arrival event reaches, or NULL (its port's line is in). */
PF_INLINE const SwitchObject *arrival_switch(const Event *e)
{
    if ((e->meta & ((1u << SK_KIND_BITS) - 1)) != EV_ARRIVE)
        return NULL;
    const PortObject *p = (const PortObject *)e->a;
    return p->rx_kind == RX_SWITCH ? (const SwitchObject *)p->rx_target : NULL;
}

/* pkt's route where its type keeps it (route_slot_learn), or NULL */
PF_INLINE const PyObject *route_of(const PyObject *pkt)
{
    const PyTypeObject *tp = Py_TYPE(pkt);
    for (int i = 0; i < ROUTE_WAYS; i++)
        if (route_slots[i].tp == tp)
            return route_slots[i].off ? *(PyObject *const *)((const char *)pkt + route_slots[i].off)
                                      : NULL;
    return NULL;
}

/* The table slot where sw's look-up of route r starts, its key in *key; -1 when
 * r is not an int of three digits or more (only 3.11's int layout is read). */
PF_INLINE Py_ssize_t route_lut_slot(const SwitchObject *sw, const PyObject *r, int32_t *key)
{
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    if (r == NULL || !PyLong_CheckExact(r) || sw->lut.cap == 0 || Py_SIZE(r) < 3)
        return -1;
    /* the active uSID after the shift switch_receive_impl makes: bits 64..79 */
    *key = (int32_t)((((const PyLongObject *)r)->ob_digit[2] >> 4) & 0xFFFF);
    return (Py_ssize_t)(((uint32_t)*key * 2654435761u) & (uint32_t)(sw->lut.cap - 1));
#else
    (void)sw, (void)r, (void)key;
    return -1;
#endif
}

/* The out port sw's table gives route r (its lines in), or NULL. */
PF_INLINE const PortObject *route_out_port(const SwitchObject *sw, const PyObject *r)
{
    int32_t key;
    Py_ssize_t i = route_lut_slot(sw, r, &key);
    if (i < 0)
        return NULL;
    for (int n = 0; n < 4; n++) { /* as lut_get probes, a few steps at most */
        int32_t k = sw->lut.keys[i];
        if (k == key)
            return is_port(sw->lut.vals[i]) ? (const PortObject *)sw->lut.vals[i] : NULL;
        if (k < 0)
            return NULL;
        i = (i + 1) & (sw->lut.cap - 1);
    }
    return NULL;
}

/* A step of each chain: a switch arrival's (above), and a host arrival's callable. */
PF_INLINE void prefetch_chains(const EvStore *st)
{
    const SwitchObject *sw;
    if (st->ri + CH_ROUTE < st->rn && (sw = arrival_switch(&st->run[st->ri + CH_ROUTE])) != NULL) {
        PREFETCH(sw);
        PREFETCH((const char *)sw + 64);
        const PyObject *r = route_of(st->run[st->ri + CH_ROUTE].b);
        if (r != NULL)
            PREFETCH(r);
    }
    int32_t key;
    Py_ssize_t i;
    if (st->ri + CH_TABLE < st->rn && (sw = arrival_switch(&st->run[st->ri + CH_TABLE])) != NULL &&
        (i = route_lut_slot(sw, route_of(st->run[st->ri + CH_TABLE].b), &key)) >= 0) {
        PREFETCH(&sw->lut.keys[i]);
        PREFETCH(&sw->lut.vals[i]);
    }
    if (st->ri + CH_OUT < st->rn && (sw = arrival_switch(&st->run[st->ri + CH_OUT])) != NULL &&
        (i = route_lut_slot(sw, route_of(st->run[st->ri + CH_OUT].b), &key)) >= 0) {
        for (int n = 0; n < 4; n++) { /* as lut_get probes, a few steps at most */
            int32_t k = sw->lut.keys[i];
            if (k == key) {
                PREFETCH(sw->lut.vals[i]);
                PREFETCH((const char *)sw->lut.vals[i] + 64);
                break;
            }
            if (k < 0)
                break;
            i = (i + 1) & (sw->lut.cap - 1);
        }
    }
    /* a host arrival of the event after next: the callable its host end calls (its
     * reference count is the first thing written; the host end's line came with
     * stage 2) */
    if (st->ri + 1 < st->rn && ev_kind(&st->run[st->ri + 1]) == EV_ARRIVE) {
        const PortObject *p = (const PortObject *)st->run[st->ri + 1].a;
        if (p->rx_kind == RX_HOST && p->rx_target != NULL)
            PREFETCH(((const HostEndObject *)p->rx_target)->on_receive);
    }
    const PortObject *out;
    if (st->ri < st->rn && (sw = arrival_switch(&st->run[st->ri])) != NULL &&
        (out = route_out_port(sw, route_of(st->run[st->ri].b))) != NULL) {
        /* the slot the packet will take in the out port's queue, and the far end
         * its transmission reads */
        const Ring *r = &out->data;
        if (r->cap)
            PREFETCH(&r->buf[(r->head + r->len) & (r->cap - 1)]);
        if (out->rx_target != NULL)
            PREFETCH(out->rx_target);
    }
}

/* Stage 2, before the next event is popped: what it reaches through its port,
 * and what the run's event PF_DEPS_AHEAD on does (their lines asked for by stage
 * 1 before); a step of the arrivals' chains (prefetch_chains). */
PF_INLINE void prefetch_next_deps(const SimObject *s)
{
    const EvStore *st = &s->q;
    prefetch_chains(st);
    if (st->ri + PF_DEPS_AHEAD < st->rn) {
        const Event *e = &st->run[st->ri + PF_DEPS_AHEAD];
        prefetch_deps(s, e->meta, (const PortObject *)e->a, e->b);
    }
    if (store_top_is_run(st)) {
        const Event *e = &st->run[st->ri];
        prefetch_deps(s, e->meta, (const PortObject *)e->a, e->b);
    }
    else if (st->h.n != 0)
        prefetch_deps(s, st->h.hp[0].meta, (const PortObject *)st->h.hp[0].a, st->h.hp[0].b);
}

/* ------------------------------------------------------------------------ */
/* Simulator type                                                           */

static PyObject *Sim_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    SimObject *s = (SimObject *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->cancelled = PySet_New(NULL);
    if (s->cancelled == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    s->rng = Py_None;
    Py_INCREF(Py_None);
    s->seed = Py_None;
    Py_INCREF(Py_None);
    s->ents = PyMem_Calloc(2, sizeof(EntRow));
    if (s->ents == NULL) {
        Py_DECREF(s);
        PyErr_NoMemory();
        return NULL;
    }
    s->nent = s->capent = 2;
    return (PyObject *)s;
}

static void heap_clear_all(SimObject *s);

static int Sim_init(SimObject *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"seed", NULL};
    PyObject *seed = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Simulator", kwlist, &seed))
        return -1;
    PyObject *one = NULL;
    if (seed == NULL) {
        one = PyLong_FromLong(1);
        if (one == NULL)
            return -1;
        seed = one;
    }
    PyObject *rng = PyObject_CallOneArg(RandomClass, seed);
    if (rng == NULL) {
        Py_XDECREF(one);
        return -1;
    }
    /* a fresh simulator, as PySimulator.__init__ makes (also when called again) */
    PyObject *cancelled = PySet_New(NULL);
    EntRow *ents = PyMem_Calloc(2, sizeof(EntRow));
    if (cancelled == NULL || ents == NULL) {
        Py_XDECREF(one);
        Py_DECREF(rng);
        Py_XDECREF(cancelled);
        PyMem_Free(ents);
        if (ents == NULL)
            PyErr_NoMemory();
        return -1;
    }
    Py_INCREF(seed);
    Py_SETREF(s->seed, seed);
    Py_XDECREF(one);
    s->now = 0;
    s->events_run = 0;
    s->stopped = 0;
    s->cur = 0;
    PyMem_Free(s->ents);
    s->ents = ents;
    s->nent = s->capent = 2;
    PyMem_Free(s->ekeys);
    PyMem_Free(s->evals);
    s->ekeys = NULL;
    s->evals = NULL;
    s->ecap = s->ecount = 0;
    Py_CLEAR(s->place);
    PyMem_Free(s->owned);
    s->owned = NULL;
    s->nowned = 0;
    PyMem_Free(s->hints);
    s->hints = NULL;
    s->nhint = 0;
    Py_CLEAR(s->outbox);
    xc_free(s->xc);
    s->xc = NULL;
    s->cur_key = -1;
    s->sub = s->global_events = s->last_t = s->sent = 0;
    Py_CLEAR(s->now_big);
    Py_SETREF(s->rng, rng);
    Py_SETREF(s->cancelled, cancelled);
    heap_clear_all(s); /* last: releasing the events can run Python code */
    return 0;
}

static void heap_clear_all(SimObject *s)
{
    /* take the events out of the simulator first (releasing them can run Python
     * code, which must find it empty) */
    EvStore old = s->q;
    memset(&s->q, 0, sizeof(EvStore));
    StoreIter it = {0, 0, 0};
    Event e;
    while (store_next(&old, &it, &e)) {
        Py_XDECREF(e.a);
        Py_XDECREF(e.b);
    }
    store_free(&old);
}

static int Sim_traverse(SimObject *s, visitproc visit, void *arg)
{
    StoreIter it = {0, 0, 0};
    Event e;
    while (store_next(&s->q, &it, &e)) {
        Py_VISIT(e.a);
        Py_VISIT(e.b);
    }
    Py_VISIT(s->rng);
    Py_VISIT(s->seed);
    Py_VISIT(s->place);
    Py_VISIT(s->outbox);
    Py_VISIT(s->cancelled);
    for (int i = 0; s->xc != NULL && i < s->xc->ncls; i++)
        for (Py_ssize_t k = 0; k < s->xc->cls[i].nkeep; k++)
            Py_VISIT(s->xc->cls[i].keep[k]);
    return 0;
}

static int Sim_clear(SimObject *s)
{
    heap_clear_all(s);
    Py_CLEAR(s->rng);
    Py_CLEAR(s->seed);
    Py_CLEAR(s->place);
    Py_CLEAR(s->outbox);
    Py_CLEAR(s->cancelled);
    Py_CLEAR(s->now_big);
    xc_free(s->xc);
    s->xc = NULL;
    return 0;
}

static void Sim_dealloc(SimObject *s)
{
    PyTypeObject *tp = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    Sim_clear(s);
    PyMem_Free(s->ents);
    PyMem_Free(s->ekeys);
    PyMem_Free(s->evals);
    PyMem_Free(s->owned);
    PyMem_Free(s->hints);
    tp->tp_free((PyObject *)s);
}

static PyObject *make_handle(int64_t t, int64_t key, PyObject *fn, PyObject *args)
{
    PyObject *pt = PyLong_FromLongLong(t);
    PyObject *ps = PyLong_FromLongLong(key);
    if (pt == NULL || ps == NULL) {
        Py_XDECREF(pt);
        Py_XDECREF(ps);
        return NULL;
    }
    PyObject *h = PyTuple_New(4);
    if (h == NULL) {
        Py_DECREF(pt);
        Py_DECREF(ps);
        return NULL;
    }
    Py_INCREF(fn);
    Py_INCREF(args);
    PyTuple_SET_ITEM(h, 0, pt);
    PyTuple_SET_ITEM(h, 1, ps);
    PyTuple_SET_ITEM(h, 2, fn);
    PyTuple_SET_ITEM(h, 3, args);
    return h;
}

static PyObject *tuple_from(PyObject *const *items, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    return t;
}

static PyObject *sim_push_call(SimObject *s, int64_t t, PyObject *fn, PyObject *cargs)
{
    /* take the key before anything allocates: a collection there can run a
     * __del__ that schedules (and so takes a key) too */
    int64_t key = sim_next_key(s);
    if (key < 0)
        return NULL;
    int64_t target = sim_target(s, fn, cargs, NULL);
    if (target < 0)
        return NULL;
    PyObject *h = make_handle(t, key, fn, cargs);
    if (h == NULL)
        return NULL;
    Py_INCREF(fn);
    Py_INCREF(cargs);
    if (heap_push_key(s, t, key, EV_CALL, target, fn, cargs, 0) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    return h;
}

static PyObject *Sim_schedule(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "schedule(at_ps, callback, *args)");
        return NULL;
    }
    int64_t at;
    if (as_i64(args[0], &at) < 0)
        return NULL;
    if (s->now_big) {
        PyErr_Format(PyExc_ValueError, "schedule: time %lld ps is in the past (now %S ps)",
                     (long long)at, s->now_big);
        return NULL;
    }
    if (at < s->now) {
        PyErr_Format(PyExc_ValueError, "schedule: time %lld ps is in the past (now %lld ps)",
                     (long long)at, (long long)s->now);
        return NULL;
    }
    PyObject *cargs = tuple_from(args + 2, nargs - 2);
    if (cargs == NULL)
        return NULL;
    PyObject *h = sim_push_call(s, at, args[1], cargs);
    Py_DECREF(cargs);
    return h;
}

static PyObject *Sim_after(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "after(delay_ps, callback, *args)");
        return NULL;
    }
    int64_t d;
    if (as_i64(args[0], &d) < 0)
        return NULL;
    if (d < 0) {
        PyErr_Format(PyExc_ValueError, "after: negative delay %lld ps", (long long)d);
        return NULL;
    }
    PyObject *cargs = tuple_from(args + 2, nargs - 2);
    if (cargs == NULL)
        return NULL;
    int64_t at;
    if (s->now_big || add_i64(s->now, d, &at)) {
        Py_DECREF(cargs);
        overflow_err("after: now + delay");
        return NULL;
    }
    PyObject *h = sim_push_call(s, at, args[1], cargs);
    Py_DECREF(cargs);
    return h;
}

static PyObject *Sim_push(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "push(at_ps, callback, args_tuple)");
        return NULL;
    }
    int64_t at;
    if (as_i64(args[0], &at) < 0)
        return NULL;
    return sim_push_call(s, at, args[1], args[2]);
}

/* post(at_ps, callback, arg): callback(arg) at at_ps, as schedule() checks it, but
 * no handle and no args tuple are made (the NIC's pump and timer: one per data
 * packet or more, never cancelled).  It takes its sequence number at the same
 * point schedule() would, so the event order is the same. */
/* The heap entry post() makes: callback(arg) at at (checked not in the past). */
static int sim_post_at(SimObject *s, int64_t at, PyObject *callback, PyObject *arg)
{
    if (s->now_big) {
        PyErr_Format(PyExc_ValueError, "post: time %lld ps is in the past (now %S ps)",
                     (long long)at, s->now_big);
        return -1;
    }
    if (at < s->now) {
        PyErr_Format(PyExc_ValueError, "post: time %lld ps is in the past (now %lld ps)",
                     (long long)at, (long long)s->now);
        return -1;
    }
    int64_t key = sim_next_key(s);
    if (key < 0)
        return -1;
    int64_t target = sim_target(s, callback, NULL, arg);
    if (target < 0)
        return -1;
    Py_INCREF(callback);
    Py_INCREF(arg);
    return heap_push_key(s, at, key, EV_CALL1, target, callback, arg, 0);
}

static PyObject *Sim_post(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "post(at_ps, callback, arg)");
        return NULL;
    }
    int64_t at;
    if (as_i64(args[0], &at) < 0)
        return NULL;
    if (sim_post_at(s, at, args[1], args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* push_as(entity, at_ps, callback): callback() at at_ps, keyed as if entity ran */
static PyObject *Sim_push_as(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "push_as(entity, at_ps, callback)");
        return NULL;
    }
    int64_t e, at;
    if (as_i64(args[0], &e) < 0 || as_i64(args[1], &at) < 0)
        return NULL;
    if (e < 0 || e >= s->nent) {
        PyErr_Format(PyExc_ValueError, "push_as: no entity %lld", (long long)e);
        return NULL;
    }
    if (s->now_big || at < s->now) {
        PyErr_Format(PyExc_ValueError, "push_as: time %lld ps is in the past (now %lld ps)",
                     (long long)at, (long long)s->now);
        return NULL;
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    int64_t saved = s->cur;
    s->cur = e;
    PyObject *h = sim_push_call(s, at, args[2], empty);
    s->cur = saved;
    Py_DECREF(empty);
    if (h == NULL)
        return NULL;
    Py_DECREF(h);
    Py_RETURN_NONE;
}

/* add_entity(objects): a new entity; events of callbacks bound to objects run for it */
static PyObject *Sim_add_entity(SimObject *s, PyObject *objects)
{
    if (s->nent >= ENTITY_LIMIT) {
        PyErr_SetString(PyExc_OverflowError, "add_entity: too many entities");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(objects, "add_entity: objects must be a sequence");
    if (seq == NULL)
        return NULL;
    if (s->nent == s->capent) {
        Py_ssize_t cap = s->capent * 2;
        EntRow *c = PyMem_Realloc(s->ents, (size_t)cap * sizeof(EntRow));
        if (c == NULL) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        s->ents = c;
        s->capent = cap;
    }
    int64_t e = s->nent;
    s->ents[e].next = 0;
    s->ents[e].owner = 0; /* (before ent_set, which may set it) */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
        if (ent_set(s, PySequence_Fast_GET_ITEM(seq, i), (int32_t)e) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    Py_DECREF(seq);
    s->nent++;
    return PyLong_FromLongLong(e);
}

/* set_entity(obj, entity): events of callbacks bound to obj run for entity */
static PyObject *Sim_set_entity(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_entity(obj, entity)");
        return NULL;
    }
    int64_t e;
    if (as_i64(args[1], &e) < 0)
        return NULL;
    if (e < 0 || e >= s->nent) {
        PyErr_Format(PyExc_ValueError, "set_entity: no entity %lld", (long long)e);
        return NULL;
    }
    if (ent_set(s, args[0], (int32_t)e) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A line for a hint row: added unless the row holds it (row[0 .. *k)); 0 when full. */
static int hint_add(uintptr_t *row, int *k, uintptr_t line)
{
    for (int i = 0; i < *k; i++)
        if (row[i] == line)
            return 1;
    if (*k == PF_HINTS)
        return 0;
    row[(*k)++] = line;
    return 1;
}

/* set_hints(entity, objects): the cache lines the simulator asks for a few events
 * before one of entity's events: each object's first PF_OBJ_LINES lines (fewer when
 * the object is shorter), then a list's first line of items and a dict's first line
 * of keys (what a look-up in it reads next), each line once, at most PF_HINTS in all
 * (the rest ignored).  The row holds
 * addresses only, no references: a hint to an object since freed fetches a line for
 * nothing (a prefetch cannot fault), so the owner sets the row again when the
 * objects change.  An empty sequence clears the row.  Returns the lines kept. */
static PyObject *Sim_set_hints(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_hints(entity, objects)");
        return NULL;
    }
    int64_t e;
    if (as_i64(args[0], &e) < 0)
        return NULL;
    if (e < 0 || e >= s->nent) {
        PyErr_Format(PyExc_ValueError, "set_hints: no entity %lld", (long long)e);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "set_hints: objects must be a sequence");
    if (seq == NULL)
        return NULL;
    if (e >= s->nhint) {
        Py_ssize_t n = s->nhint ? s->nhint : 64;
        while (n <= e)
            n *= 2;
        uintptr_t *h = PyMem_Realloc(s->hints, (size_t)n * PF_HINTS * sizeof(uintptr_t));
        if (h == NULL) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        memset(h + s->nhint * PF_HINTS, 0, (size_t)(n - s->nhint) * PF_HINTS * sizeof(uintptr_t));
        s->hints = h;
        s->nhint = n;
    }
    uintptr_t *row = s->hints + e * PF_HINTS;
    int k = 0, room = 1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && room; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        uintptr_t a = (uintptr_t)o & ~(uintptr_t)63;
        uintptr_t end = (uintptr_t)o + (uintptr_t)Py_TYPE(o)->tp_basicsize;
        for (int j = 0; j < PF_OBJ_LINES && room && a < end; j++, a += 64)
            room = hint_add(row, &k, a);
        if (room && PyList_CheckExact(o) && PyList_GET_SIZE(o) > 0)
            room = hint_add(row, &k, (uintptr_t)((PyListObject *)o)->ob_item & ~(uintptr_t)63);
        else if (room && PyDict_CheckExact(o))
            room = hint_add(row, &k, (uintptr_t)((PyDictObject *)o)->ma_keys & ~(uintptr_t)63);
    }
    Py_DECREF(seq);
    for (int j = k; j < PF_HINTS; j++)
        row[j] = 0;
    return PyLong_FromLong(k);
}

/* hints_of(entity): the line addresses of entity's hint row (a list, maybe empty) */
static PyObject *Sim_hints_of(SimObject *s, PyObject *arg)
{
    int64_t e;
    if (as_i64(arg, &e) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || e < 0 || e >= s->nhint)
        return out;
    const uintptr_t *row = s->hints + e * PF_HINTS;
    for (int i = 0; i < PF_HINTS && row[i]; i++) {
        PyObject *v = PyLong_FromSize_t((size_t)row[i]);
        if (v == NULL || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

static PyObject *Sim_entities(SimObject *s, PyObject *unused)
{
    return PyLong_FromSsize_t(s->nent);
}

/* set_owned(flags): bytes, one per entity, non-zero where this rank holds it; and
 * from now on events for the others go to the outbox (a partitioned run) */
static PyObject *Sim_set_owned(SimObject *s, PyObject *flags)
{
    Py_buffer view;
    if (PyObject_GetBuffer(flags, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t *o = PyMem_Malloc(view.len ? (size_t)view.len : 1);
    if (o == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memcpy(o, view.buf, (size_t)view.len);
    PyMem_Free(s->owned);
    s->owned = o;
    s->nowned = view.len;
    PyBuffer_Release(&view);
    if (s->outbox == NULL && (s->outbox = PyList_New(0)) == NULL)
        return NULL;
    Py_RETURN_NONE;
}

/* take_outbox(): the (target, t, key, port, epoch, packet) sent since the last call */
static PyObject *Sim_take_outbox(SimObject *s, PyObject *unused)
{
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    PyObject *out = s->outbox;
    s->outbox = fresh;
    if (out == NULL)
        return PyList_New(0);
    return out;
}

/* arrive(at_ps, key, port, epoch, packet): a packet another rank put on port, with its key */
static PyObject *Sim_arrive(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !is_port(args[2])) {
        PyErr_SetString(PyExc_TypeError, "arrive(at_ps, key, port, epoch, packet)");
        return NULL;
    }
    int64_t at, key, epoch;
    if (as_i64(args[0], &at) < 0 || as_i64(args[1], &key) < 0 || as_i64(args[3], &epoch) < 0)
        return NULL;
    PortObject *p = (PortObject *)args[2];
    int64_t target;
    if (p->rx_kind == RX_SWITCH)
        target = (int64_t)((SwitchObject *)p->rx_target)->ent1 - 1;
    else if (p->rx_kind == RX_HOST)
        target = (int64_t)((HostEndObject *)p->rx_target)->ent1 - 1;
    else
        target = ent_lookup(s, callable_self(p->rx));
    if (target < 0) {
        PyErr_SetString(PyExc_ValueError, "arrive: the port's receiver has no entity");
        return NULL;
    }
    Py_INCREF(args[2]);
    Py_INCREF(args[4]);
    if (heap_push_key(s, at, key, EV_ARRIVE, target, args[2], args[4], epoch) < 0)
        return NULL;
    Py_RETURN_NONE;
}


/* An int value set through field f's setter, as an int object; -1 (error clear) if
 * the setter refuses it. */
static int w_try_set(WClass *c, Py_ssize_t f, PyObject *o, long long v)
{
    PyObject *n = PyLong_FromLongLong(v);
    if (n == NULL)
        return -1;
    int r = w_set(o, c->descr[f], c->names[f], n);
    Py_DECREF(n);
    return r;
}

/* The offset in an instance of c's class of the word that keeps field f as a mypyc
 * tagged int (a short int v as v << 1), or -1: a fresh instance has f set through
 * its own descriptor, the one word holding the value is looked for, and then
 * checked both ways (a value written there is what the getter reads; one the
 * setter writes is found there).  No error is left set. */
static Py_ssize_t w_find_slot(WClass *c, Py_ssize_t f, PyObject *empty)
{
    static const long long marks[3] = {0x2B3C4D5E6F71LL, -0x123456789ALL, 0x3FFFFFFFFFFFFFFLL};
    PyObject *d = c->descr[f];
    if (d == NULL || !Py_IS_TYPE(d, &PyGetSetDescr_Type) || c->tp->tp_itemsize != 0 ||
        c->tp->tp_new == NULL)
        return -1;
    Py_ssize_t size = c->tp->tp_basicsize, found = -1;
    PyObject *o = c->tp->tp_new(c->tp, empty, NULL), *got = NULL;
    if (o == NULL || Py_TYPE(o) != c->tp || w_try_set(c, f, o, marks[0]) < 0)
        goto done;
    for (Py_ssize_t off = (Py_ssize_t)sizeof(PyObject); off + (Py_ssize_t)sizeof(intptr_t) <= size;
         off += (Py_ssize_t)sizeof(intptr_t)) {
        intptr_t w;
        memcpy(&w, (const char *)o + off, sizeof w);
        if (w == (intptr_t)(marks[0] * 2)) {
            if (found >= 0) { /* twice: not one field's word */
                found = -1;
                goto done;
            }
            found = off;
        }
    }
    if (found < 0)
        goto done;
    intptr_t w = (intptr_t)(marks[1] * 2);
    memcpy((char *)o + found, &w, sizeof w);
    got = w_get(o, d, c->names[f]);
    long long back = got != NULL && PyLong_CheckExact(got) ? PyLong_AsLongLong(got) : 0;
    if (back != marks[1] || w_try_set(c, f, o, marks[2]) < 0) {
        found = -1;
        goto done;
    }
    memcpy(&w, (const char *)o + found, sizeof w);
    if (w != (intptr_t)(marks[2] * 2))
        found = -1;
done:
    Py_XDECREF(got);
    Py_XDECREF(o);
    PyErr_Clear();
    return found;
}

/* The offset in an instance of c's class of the pointer that keeps field f as an
 * object (an int kept as an object, a route, a payload), or -1: a fresh instance has
 * f set through its descriptor to an object of its own (a big int, else bytes), the
 * one word holding its address is looked for, and the getter must return that very
 * object.  The sending rank then reads the field without a call or a reference.  No
 * error is left set. */
static Py_ssize_t w_find_oslot(WClass *c, Py_ssize_t f, PyObject *empty)
{
    PyObject *d = c->descr[f];
    if (d == NULL || !Py_IS_TYPE(d, &PyGetSetDescr_Type) || c->tp->tp_itemsize != 0 ||
        c->tp->tp_new == NULL)
        return -1;
    Py_ssize_t size = c->tp->tp_basicsize, found = -1;
    PyObject *o = c->tp->tp_new(c->tp, empty, NULL), *val = NULL, *got = NULL;
    if (o == NULL || Py_TYPE(o) != c->tp)
        goto done;
    val = PyLong_FromString("123456789012345678901234567891", NULL, 10);
    if (val == NULL || w_set(o, d, c->names[f], val) < 0) {
        PyErr_Clear();
        Py_CLEAR(val);
        val = PyBytes_FromString("openmrc exchange probe");
        if (val == NULL || w_set(o, d, c->names[f], val) < 0)
            goto done;
    }
    for (Py_ssize_t off = (Py_ssize_t)sizeof(PyObject); off + (Py_ssize_t)sizeof(void *) <= size;
         off += (Py_ssize_t)sizeof(void *)) {
        PyObject *w;
        memcpy(&w, (const char *)o + off, sizeof w);
        if (w == val) {
            if (found >= 0) {
                found = -1;
                goto done;
            }
            found = off;
        }
    }
    if (found >= 0) {
        got = w_get(o, d, c->names[f]);
        if (got != val)
            found = -1;
    }
done:
    Py_XDECREF(got);
    Py_XDECREF(o);
    Py_XDECREF(val);
    PyErr_Clear();
    return found;
}

/* set_exchange(rank_of, nranks, classes, fields, enums): from now on packets for
 * other ranks are written as bytes (take_wire, arrive_wire).  rank_of: each
 * entity's rank (a buffer of int32); classes: the packet classes written, each
 * with its field names in fields; enums: (enum class, {value: member}) for the
 * fields that hold enum members.  Ports are numbered by their xid1. */
static PyObject *Sim_set_exchange(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "set_exchange(rank_of, nranks, classes, fields, enums)");
        return NULL;
    }
    long nranks = PyLong_AsLong(args[1]);
    if (nranks == -1 && PyErr_Occurred())
        return NULL;
    if (nranks < 1 || nranks > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "set_exchange: nranks out of range");
        return NULL;
    }
    PyObject *classes = PySequence_Fast(args[2], "set_exchange: classes must be a sequence");
    PyObject *fields = classes ? PySequence_Fast(args[3], "set_exchange: fields") : NULL;
    PyObject *enums = fields ? PySequence_Fast(args[4], "set_exchange: enums") : NULL;
    Exchange *x = PyMem_Calloc(1, sizeof(Exchange));
    Py_buffer view = {0};
    int have_view = 0;
    if (enums == NULL || x == NULL)
        goto fail;
    if (PySequence_Fast_GET_SIZE(classes) != PySequence_Fast_GET_SIZE(fields) ||
        PySequence_Fast_GET_SIZE(classes) > 255 || PySequence_Fast_GET_SIZE(enums) > 255) {
        PyErr_SetString(PyExc_ValueError, "set_exchange: one field list per class, at most 255");
        goto fail;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_FORMAT) < 0)
        goto fail;
    have_view = 1;
    if (view.itemsize != 4 || view.format == NULL || (strcmp(view.format, "i") != 0 &&
                                                      strcmp(view.format, "=i") != 0)) {
        PyErr_SetString(PyExc_TypeError, "set_exchange: rank_of must be an array('i')");
        goto fail;
    }
    x->nranks = (int)nranks;
    x->nrank_of = view.len / 4;
    x->rank_of = PyMem_Malloc(view.len ? (size_t)view.len : 1);
    x->buf = PyMem_Calloc((size_t)nranks, sizeof(WBuf));
    x->ncls = (int)PySequence_Fast_GET_SIZE(classes);
    x->cls = PyMem_Calloc(x->ncls ? (size_t)x->ncls : 1, sizeof(WClass));
    x->nenum = (int)PySequence_Fast_GET_SIZE(enums);
    x->enum_tp = PyMem_Calloc(x->nenum ? (size_t)x->nenum : 1, sizeof(PyTypeObject *));
    x->enum_members = PyMem_Calloc(x->nenum ? (size_t)x->nenum : 1, sizeof(PyObject *));
    x->enum_small = PyMem_Calloc(x->nenum ? (size_t)x->nenum : 1, sizeof(*x->enum_small));
    if (x->rank_of == NULL || x->buf == NULL || x->cls == NULL || x->enum_tp == NULL ||
        x->enum_members == NULL || x->enum_small == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(x->rank_of, view.buf, (size_t)view.len);
    if (nranks < 256) {
        x->rank8 = PyMem_Malloc(x->nrank_of ? (size_t)x->nrank_of : 1);
        if (x->rank8 == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < x->nrank_of; i++) /* (-1: no rank; 255 is not one) */
            x->rank8[i] = x->rank_of[i] >= 0 && x->rank_of[i] < 256 ? (uint8_t)x->rank_of[i] : 255;
    }
    for (int i = 0; i < x->ncls; i++) {
        PyObject *tp = PySequence_Fast_GET_ITEM(classes, i);
        if (!PyType_Check(tp)) {
            PyErr_SetString(PyExc_TypeError, "set_exchange: classes must be types");
            goto fail;
        }
        WClass *c = &x->cls[i];
        Py_INCREF(tp);
        c->tp = (PyTypeObject *)tp;
        PyObject *names = PySequence_Fast(PySequence_Fast_GET_ITEM(fields, i),
                                          "set_exchange: fields must be sequences of names");
        if (names == NULL)
            goto fail;
        c->nf = PySequence_Fast_GET_SIZE(names);
        c->names = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(PyObject *));
        c->descr = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(PyObject *));
        c->slot = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(Py_ssize_t));
        c->oslot = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(Py_ssize_t));
        c->last = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(PyObject *));
        c->last_v = PyMem_Calloc(c->nf ? (size_t)c->nf : 1, sizeof(int64_t));
        if (c->names == NULL || c->descr == NULL || c->slot == NULL || c->oslot == NULL ||
            c->last == NULL || c->last_v == NULL) {
            Py_DECREF(names);
            PyErr_NoMemory();
            goto fail;
        }
        int generic = c->tp->tp_getattro == PyObject_GenericGetAttr &&
                      c->tp->tp_setattro == PyObject_GenericSetAttr;
        for (Py_ssize_t f = 0; f < c->nf; f++) {
            PyObject *name = PySequence_Fast_GET_ITEM(names, f);
            if (!PyUnicode_Check(name)) {
                Py_DECREF(names);
                PyErr_SetString(PyExc_TypeError, "set_exchange: field names must be str");
                goto fail;
            }
            Py_INCREF(name);
            c->names[f] = name;
            PyObject *d = generic ? _PyType_Lookup(c->tp, name) : NULL; /* borrowed */
            if (d != NULL && (Py_IS_TYPE(d, &PyGetSetDescr_Type) ||
                              Py_IS_TYPE(d, &PyMemberDescr_Type))) {
                Py_INCREF(d);
                c->descr[f] = d;
            }
        }
        Py_DECREF(names);
        PyObject *empty = PyTuple_New(0);
        if (empty == NULL)
            goto fail;
        for (Py_ssize_t f = 0; f < c->nf; f++)
        {
            c->slot[f] = w_find_slot(c, f, empty);
            c->oslot[f] = c->slot[f] < 0 ? w_find_oslot(c, f, empty) : -1;
            if (c->oslot[f] >= 0)
                c->keepable = 1;
        }
        Py_DECREF(empty);
        if (c->tp->tp_dictoffset != 0 || c->tp->tp_weaklistoffset != 0 || c->tp->tp_del != NULL ||
            c->tp->tp_finalize != NULL)
            c->keepable = 0;
    }
    for (int i = 0; i < x->nenum; i++) {
        PyObject *tp, *members;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(enums, i), "O!O!:set_exchange",
                              &PyType_Type, &tp, &PyDict_Type, &members))
            goto fail;
        Py_INCREF(tp);
        x->enum_tp[i] = (PyTypeObject *)tp;
        Py_INCREF(members);
        x->enum_members[i] = members;
        PyObject *k, *m;
        Py_ssize_t pos = 0;
        while (PyDict_Next(members, &pos, &k, &m)) {
            int overflow = 0;
            long long val = PyLong_Check(k) ? PyLong_AsLongLongAndOverflow(k, &overflow) : -1;
            if (val == -1 && PyErr_Occurred())
                goto fail;
            if (!overflow && val >= 0 && val < 256)
                x->enum_small[i][val] = m;
        }
    }
    PyBuffer_Release(&view);
    Py_DECREF(classes);
    Py_DECREF(fields);
    Py_DECREF(enums);
    xc_free(s->xc);
    s->xc = x;
    Py_RETURN_NONE;
fail:
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(classes);
    Py_XDECREF(fields);
    Py_XDECREF(enums);
    xc_free(x);
    return NULL;
}

/* The simulator's exchange, or NULL with an error naming the method (what) when
 * set_exchange was not called. */
static Exchange *xc_of(SimObject *s, const char *what)
{
    if (s->xc == NULL)
        PyErr_Format(PyExc_ValueError, "%s: no exchange (set_exchange)", what);
    return s->xc;
}

/* take_wire(): ([bytes for each rank], the least time written or None), and
 * the buffers start again empty */
static PyObject *Sim_take_wire(SimObject *s, PyObject *unused)
{
    Exchange *x = xc_of(s, "take_wire");
    if (x == NULL)
        return NULL;
    PyObject *bufs = PyList_New(x->nranks);
    if (bufs == NULL)
        return NULL;
    for (int r = 0; r < x->nranks; r++) {
        PyObject *b = PyBytes_FromStringAndSize(x->buf[r].data, (Py_ssize_t)x->buf[r].len);
        if (b == NULL) {
            Py_DECREF(bufs);
            return NULL;
        }
        PyList_SET_ITEM(bufs, r, b);
    }
    PyObject *first = x->any ? PyLong_FromLongLong(x->first) : Py_NewRef(Py_None);
    if (first == NULL) {
        Py_DECREF(bufs);
        return NULL;
    }
    for (int r = 0; r < x->nranks; r++) {
        /* keep a buffer's memory unless it grew far past what a window needs */
        if (x->buf[r].cap > ((size_t)1 << 26)) {
            PyMem_Free(x->buf[r].data);
            x->buf[r].data = NULL;
            x->buf[r].cap = 0;
        }
        x->buf[r].len = 0;
    }
    x->any = 0;
    return Py_BuildValue("(NN)", bufs, first);
}

/* A tuple of the names of c's fields whose offset in offs is set. */
static PyObject *w_names_with(WClass *c, const Py_ssize_t *offs)
{
    PyObject *names = PyList_New(0);
    for (Py_ssize_t f = 0; names != NULL && f < c->nf; f++)
        if (offs[f] >= 0 && PyList_Append(names, c->names[f]) < 0)
            Py_CLEAR(names);
    PyObject *tup = names != NULL ? PyList_AsTuple(names) : NULL;
    Py_XDECREF(names);
    return tup;
}

/* exchange_kept(): {class name: packets kept to be filled by arrive_wire (xc_keep)}
 * for the classes that keep them */
static PyObject *Sim_exchange_kept(SimObject *s, PyObject *unused)
{
    Exchange *x = xc_of(s, "exchange_kept");
    if (x == NULL)
        return NULL;
    PyObject *out = PyDict_New();
    for (int i = 0; out != NULL && i < x->ncls; i++) {
        WClass *c = &x->cls[i];
        PyObject *n = c->keepable ? PyLong_FromSsize_t(c->nkeep) : NULL;
        if (c->keepable && (n == NULL || PyDict_SetItemString(out, c->tp->tp_name, n) < 0))
            Py_CLEAR(out);
        Py_XDECREF(n);
    }
    return out;
}

/* exchange_slots(): {class name: (the fields moved as tagged int words, the fields
 * the sending rank reads as object pointers)}, as set_exchange found them (empty
 * where the classes are not compiled) */
static PyObject *Sim_exchange_slots(SimObject *s, PyObject *unused)
{
    Exchange *x = xc_of(s, "exchange_slots");
    if (x == NULL)
        return NULL;
    PyObject *out = PyDict_New();
    for (int i = 0; out != NULL && i < x->ncls; i++) {
        WClass *c = &x->cls[i];
        PyObject *words = w_names_with(c, c->slot);
        PyObject *objs = words != NULL ? w_names_with(c, c->oslot) : NULL;
        PyObject *pair = objs != NULL ? PyTuple_Pack(2, words, objs) : NULL;
        Py_XDECREF(words);
        Py_XDECREF(objs);
        if (pair == NULL || PyDict_SetItemString(out, c->tp->tp_name, pair) < 0)
            Py_CLEAR(out);
        Py_XDECREF(pair);
    }
    return out;
}

/* Read one value written by w_value; a new reference, or NULL (error set). */
static PyObject *w_read(Exchange *x, const char **pp, const char *end)
{
    const char *p = *pp;
    if (p >= end)
        goto short_;
    uint8_t tag = (uint8_t)*p++;
    PyObject *v = NULL;
    switch (tag) {
    case W_NONE:
        v = Py_NewRef(Py_None);
        break;
    case W_FALSE:
        v = Py_NewRef(Py_False);
        break;
    case W_TRUE:
        v = Py_NewRef(Py_True);
        break;
    case W_I64: {
        int64_t i;
        if (end - p < 8)
            goto short_;
        memcpy(&i, p, 8);
        p += 8;
        v = PyLong_FromLongLong(i);
        break;
    }
    case W_BIG: {
        uint16_t n;
        if (end - p < 2)
            goto short_;
        memcpy(&n, p, 2);
        p += 2;
        if (end - p < n)
            goto short_;
        v = _PyLong_FromByteArray((const unsigned char *)p, n, 1, 1);
        p += n;
        break;
    }
    case W_BYTES: {
        uint32_t n;
        if (end - p < 4)
            goto short_;
        memcpy(&n, p, 4);
        p += 4;
        if ((uint64_t)(end - p) < n)
            goto short_;
        v = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
        p += n;
        break;
    }
    case W_ENUM: {
        if (end - p < 9)
            goto short_;
        uint8_t i = (uint8_t)*p;
        int64_t val;
        memcpy(&val, p + 1, 8);
        p += 9;
        if (i >= x->nenum) {
            PyErr_SetString(PyExc_ValueError, "arrive_wire: unknown enum");
            return NULL;
        }
        if (val >= 0 && val < 256 && x->enum_small[i][val] != NULL) {
            v = Py_NewRef(x->enum_small[i][val]);
            break;
        }
        PyObject *k = PyLong_FromLongLong(val);
        if (k == NULL)
            return NULL;
        v = PyDict_GetItemWithError(x->enum_members[i], k); /* borrowed */
        Py_DECREF(k);
        if (v == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "arrive_wire: unknown enum value");
            return NULL;
        }
        Py_INCREF(v);
        break;
    }
    default:
        PyErr_Format(PyExc_ValueError, "arrive_wire: unknown tag %d", (int)tag);
        return NULL;
    }
    *pp = p;
    return v;
short_:
    PyErr_SetString(PyExc_ValueError, "arrive_wire: a record is cut short");
    return NULL;
}

/* The port of the record at p (records checked up to there): ports[its number], or
 * NULL for a number out of range. */
static inline PyObject **w_port_item(PyObject *ports, const char *p)
{
    int32_t port_no;
    memcpy(&port_no, p + 28, 4);
    if (port_no < 0 || port_no >= PyList_GET_SIZE(ports))
        return NULL;
    return &((PyListObject *)ports)->ob_item[port_no];
}

/* The start of the record after the one at p, or NULL if the one at p is not whole. */
static inline const char *w_next_record(const char *p, const char *end)
{
    int32_t len;
    if (end - p < W_HEAD)
        return NULL;
    memcpy(&len, p + 32, 4);
    if (len < W_HEAD || (int64_t)len > end - p)
        return NULL;
    return p + len;
}

/* How many records ahead arrive_wire asks for a record's port (W_AHEAD) and, half
 * way, for the port object itself and the kept packet it will fill. */
#define W_AHEAD 16

/* A kept packet (xc_keep) for the record at p (whole), its lines asked for; NULL:
 * none kept of its class (or not a class). */
static inline PyObject *w_reserve(Exchange *x, const char *p)
{
    uint8_t ci = (uint8_t)p[36];
    if (ci >= x->ncls || x->cls[ci].nkeep == 0)
        return NULL;
    WClass *c = &x->cls[ci];
    PyObject *pkt = c->keep[--c->nkeep];
    for (Py_ssize_t off = 0; off < c->tp->tp_basicsize && off < 256; off += 64)
        PREFETCH((const char *)pkt + off);
    return pkt;
}

/* arrive_wire(data, ports): the packets another rank wrote (take_wire), each
 * arriving at the far end of ports[port number] with its key; how many */
static PyObject *Sim_arrive_wire(SimObject *s, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "arrive_wire(data, ports: list)");
        return NULL;
    }
    Exchange *x = xc_of(s, "arrive_wire");
    if (x == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *ports = args[1];
    const char *p = view.buf, *end = p + view.len;
    /* two look-ahead cursors: far (W_AHEAD records on) has its port's list item
     * fetched, near (half as far) the port object; each stops at a record not whole,
     * which the main cursor then reports */
    /* near also takes the kept packet (xc_keep) each record will fill, into
     * ring[record number % W_AHEAD], and asks for its lines */
    const char *far = p, *near = p;
    PyObject *ring[W_AHEAD] = {NULL};
    long long count = 0, reserved = 0;
    for (int k = 0; k < W_AHEAD && far != NULL && far < end; k++) {
        if (k < W_AHEAD / 2 && near != NULL && near < end) {
            const char *nx = w_next_record(near, end);
            if (nx != NULL)
                ring[reserved++ % W_AHEAD] = w_reserve(x, near);
            near = nx;
        }
        far = w_next_record(far, end);
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        goto fail;
    while (p < end) {
        if (far != NULL && far < end) {
            const char *nx = w_next_record(far, end);
            PyObject **item = nx != NULL ? w_port_item(ports, far) : NULL;
            if (item != NULL)
                PREFETCH(item);
            far = nx;
        }
        if (near != NULL && near < end) {
            const char *nx = w_next_record(near, end);
            PyObject **item = nx != NULL ? w_port_item(ports, near) : NULL;
            if (item != NULL)
                PREFETCH(*item);
            if (nx != NULL)
                ring[reserved++ % W_AHEAD] = w_reserve(x, near);
            near = nx;
        }
        const char *next = w_next_record(p, end);
        if (next == NULL) {
            PyErr_SetString(PyExc_ValueError, "arrive_wire: a record is cut short");
            goto fail;
        }
        int64_t t, key, epoch;
        int32_t target;
        memcpy(&t, p, 8);
        memcpy(&key, p + 8, 8);
        memcpy(&epoch, p + 16, 8);
        memcpy(&target, p + 24, 4);
        uint8_t ci = (uint8_t)p[36];
        PyObject **item = w_port_item(ports, p);
        if (ci >= x->ncls || item == NULL) {
            PyErr_SetString(PyExc_ValueError, "arrive_wire: unknown class or port");
            goto fail;
        }
        if (target < 0 || target >= s->nent || s->owned == NULL || target >= s->nowned ||
            !s->owned[target]) {
            PyErr_SetString(PyExc_ValueError, "arrive_wire: a packet for an entity not of this rank");
            goto fail;
        }
        PyObject *port = *item;
        if (!is_port(port)) {
            PyErr_SetString(PyExc_TypeError, "arrive_wire: ports must be native ports");
            goto fail;
        }
        p += W_HEAD;
        WClass *c = &x->cls[ci];
        PyObject *pkt = ring[count % W_AHEAD]; /* (a kept packet of class ci, or none) */
        ring[count % W_AHEAD] = NULL;
        if (pkt == NULL && (pkt = c->tp->tp_new(c->tp, empty, NULL)) == NULL)
            goto fail;
        for (Py_ssize_t f = 0; f < c->nf; f++) {
            Py_ssize_t off = c->slot[f];
            if (off >= 0 && next - p >= 9 && (uint8_t)*p == W_I64) {
                int64_t i;
                memcpy(&i, p + 1, 8);
                intptr_t old;
                memcpy(&old, (char *)pkt + off, sizeof old);
                /* a short int (62 bits) into a word holding none or a short int */
                if (i >= -((int64_t)1 << 62) && i < ((int64_t)1 << 62) &&
                    (old == 1 || (old & 1) == 0)) {
                    intptr_t w = (intptr_t)(i * 2);
                    memcpy((char *)pkt + off, &w, sizeof w);
                    p += 9;
                    continue;
                }
            }
            PyObject *v;
            if (next - p >= 9 && (uint8_t)*p == W_I64) {
                /* an int kept as an object (a packet's size): the last one read for
                 * this field again while its value repeats */
                int64_t i;
                memcpy(&i, p + 1, 8);
                if (c->last[f] == NULL || c->last_v[f] != i) {
                    PyObject *n = PyLong_FromLongLong(i);
                    if (n == NULL) {
                        Py_DECREF(pkt);
                        goto fail;
                    }
                    Py_XSETREF(c->last[f], n);
                    c->last_v[f] = i;
                }
                v = Py_NewRef(c->last[f]);
                p += 9;
            }
            else
                v = w_read(x, &p, next);
            if (v == NULL || w_set(pkt, c->descr[f], c->names[f], v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(pkt);
                goto fail;
            }
            Py_DECREF(v);
        }
        if (p != next) {
            Py_DECREF(pkt);
            PyErr_SetString(PyExc_ValueError, "arrive_wire: a record's length does not match");
            goto fail;
        }
        Py_INCREF(port);
        if (heap_push_key(s, t, key, EV_ARRIVE, target, port, pkt, epoch) < 0)
            goto fail;
        count++;
    }
    Py_DECREF(empty);
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(count);
fail:
    for (int k = 0; k < W_AHEAD; k++)
        Py_XDECREF(ring[k]);
    Py_XDECREF(empty);
    PyBuffer_Release(&view);
    return NULL;
}

/* next_time(): the time of the next event (None: none) */
static PyObject *Sim_next_time(SimObject *s, PyObject *unused)
{
    int r = store_settle(&s->q);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((int64_t)(store_top(&s->q).tk ^ T_BIAS));
}

/* entity_of(obj): the entity registered for obj, or None */
static PyObject *Sim_entity_of(SimObject *s, PyObject *obj)
{
    int64_t e = ent_lookup(s, obj);
    if (e < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(e);
}

/* rng_for(name): the port's generator, random.Random(f"{seed}:{name}") (engine.port_rng) */
static PyObject *Sim_rng_for(SimObject *s, PyObject *name)
{
    PyObject *text = PyUnicode_FromFormat("%S:%S", s->seed, name);
    if (text == NULL)
        return NULL;
    PyObject *rng = PyObject_CallOneArg(RandomClass, text);
    Py_DECREF(text);
    return rng;
}

static PyObject *Sim_cancel(SimObject *s, PyObject *ev)
{
    if (!PyTuple_Check(ev) || PyTuple_GET_SIZE(ev) < 2) {
        PyErr_SetString(PyExc_TypeError, "cancel: expected an event handle from schedule()");
        return NULL;
    }
    int64_t t, key;
    if (as_i64(PyTuple_GET_ITEM(ev, 0), &t) < 0 || as_i64(PyTuple_GET_ITEM(ev, 1), &key) < 0)
        return NULL;
    int pending = !s->now_big && t > s->now;
    if (!pending && !s->now_big && t == s->now) {
        StoreIter it = {0, 0, 0};
        Event e;
        while (store_next(&s->q, &it, &e))
            if ((int64_t)e.key == key) {
                pending = 1;
                break;
            }
    }
    if (pending && sim_cancel_key(s, key) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sim_stop(SimObject *s, PyObject *unused)
{
    s->stopped = 1;
    Py_RETURN_NONE;
}

static PyObject *Sim_pending(SimObject *s, PyObject *unused)
{
    return PyLong_FromSsize_t(store_count(&s->q));
}

static PyObject *Sim_pending_callbacks(SimObject *s, PyObject *unused)
{
    PyObject *l = PyList_New(0);
    if (l == NULL)
        return NULL;
    StoreIter it = {0, 0, 0};
    Event ei;
    while (store_next(&s->q, &it, &ei)) {
        Event *e = &ei;
        int kind = ev_kind(e);
        if (kind != EV_CALL && kind != EV_CALL1)
            continue;
        PyObject *k = PyLong_FromLongLong(ev_key(e));
        if (k == NULL)
            goto fail;
        int c = PySet_Contains(s->cancelled, k);
        Py_DECREF(k);
        if (c < 0)
            goto fail;
        if (c)
            continue;
        PyObject *h;
        if (kind == EV_CALL1) {
            PyObject *t1 = PyTuple_Pack(1, e->b);
            if (t1 == NULL)
                goto fail;
            h = make_handle(ev_time(e), ev_key(e), e->a, t1);
            Py_DECREF(t1);
        }
        else
            h = make_handle(ev_time(e), ev_key(e), e->a, e->b);
        if (h == NULL)
            goto fail;
        int r = PyList_Append(l, h);
        Py_DECREF(h);
        if (r < 0)
            goto fail;
    }
    return l;
fail:
    Py_DECREF(l);
    return NULL;
}

/* run() checks for signals (Ctrl-C) every this many events */
#define SIGNAL_CHECK_EVENTS 4096

static PyObject *Sim_run(SimObject *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"until_ps", NULL};
    PyObject *until = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:run", kwlist, &until))
        return NULL;
    int64_t limit = INT64_MAX;
    PyObject *until_big = NULL; /* an until_ps past int64: no limit, then now = it */
    if (until != Py_None) {
        if (PyFloat_Check(until)) {
            if (as_i64(until, &limit) < 0) /* whole ps only */
                return NULL;
        }
        else {
            PyObject *i = PyNumber_Index(until);
            if (i == NULL)
                return NULL;
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
            if (v == -1 && !overflow && PyErr_Occurred()) {
                Py_DECREF(i);
                return NULL;
            }
            limit = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : v;
            if (overflow > 0)
                until_big = i;
            else
                Py_DECREF(i);
        }
    }

    int64_t n = 0;
    int tick = 0;
    s->stopped = 0;
    Event ev;
    for (;;) {
        int more = store_settle(&s->q);
        if (more < 0)
            goto fail;
        if (!more || (int64_t)(store_top(&s->q).tk ^ T_BIAS) > limit)
            break;
        prefetch_next_deps(s);
        /* a run of native events never enters the interpreter's loop, which is
         * where signal handlers run: let Ctrl-C (KeyboardInterrupt) through */
        if (++tick == SIGNAL_CHECK_EVENTS) {
            tick = 0;
            if (PyErr_CheckSignals() < 0)
                goto fail;
            continue; /* (a handler may have changed the pending events) */
        }
        heap_pop(s, &ev);
        if (PySet_GET_SIZE(s->cancelled)) {
            int c = discard_cancelled(s, &ev);
            if (c < 0)
                goto fail_ev;
            if (c)
                continue;
        }
        s->now = ev_time(&ev);
        if (s->now_big) /* an event push()ed (unchecked) while now was past int64 */
            Py_CLEAR(s->now_big);
        n++;
        s->cur = ev_target(&ev);
        prefetch_next(s);
        int r = dispatch(&ev);
        Py_XDECREF(ev.a);
        Py_XDECREF(ev.b);
        if (r < 0)
            goto fail;
        if (s->stopped) {
            Py_XDECREF(until_big);
            s->events_run += n;
            s->cur = 0;
            return PyLong_FromLongLong(n);
        }
    }
    if (until_big != NULL) {
        int gt = s->now_big ? PyObject_RichCompareBool(until_big, s->now_big, Py_GT) : 1;
        if (gt < 0)
            goto fail;
        if (gt) {
            s->now = INT64_MAX;
            Py_XSETREF(s->now_big, until_big);
            until_big = NULL;
        }
    }
    else if (until != Py_None && limit > s->now && !s->now_big)
        s->now = limit;
    Py_XDECREF(until_big);
    s->events_run += n;
    s->cur = 0;
    return PyLong_FromLongLong(n);
fail_ev:
    Py_XDECREF(ev.a);
    Py_XDECREF(ev.b);
fail:
    Py_XDECREF(until_big);
    s->events_run += n;
    s->cur = 0;
    return NULL;
}

/* run_window(end_ps, stop_at=None, honor_stop=True): a partitioned rank's window:
 * events before end_ps (or up to the (time, key) stop_at, inclusive); returns the
 * (time, key) of the event that called stop() when honor_stop, else None
 * (PartitionedSimulator.run_window) */
static PyObject *Sim_run_window(SimObject *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"end_ps", "stop_at", "honor_stop", NULL};
    PyObject *end_o, *stop_o = Py_None;
    int honor = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op:run_window", kwlist, &end_o, &stop_o,
                                     &honor))
        return NULL;
    int64_t end, stop_t = 0, stop_k = 0;
    if (as_i64(end_o, &end) < 0)
        return NULL;
    int has_stop = stop_o != Py_None;
    if (has_stop) {
        if (!PyTuple_Check(stop_o) || PyTuple_GET_SIZE(stop_o) != 2) {
            PyErr_SetString(PyExc_TypeError, "run_window: stop_at must be (time, key)");
            return NULL;
        }
        if (as_i64(PyTuple_GET_ITEM(stop_o, 0), &stop_t) < 0 ||
            as_i64(PyTuple_GET_ITEM(stop_o, 1), &stop_k) < 0)
            return NULL;
    }
    int64_t n = 0, g = 0;
    int tick = 0;
    PyObject *result = Py_None;
    Py_INCREF(result);
    s->stopped = 0;
    Event ev;
    for (;;) {
        int more = store_settle(&s->q);
        if (more < 0)
            goto fail;
        if (!more)
            break;
        HKey top = store_top(&s->q);
        int64_t t0 = (int64_t)(top.tk ^ T_BIAS);
        if (!has_stop) {
            if (t0 >= end)
                break;
        }
        else if (t0 > stop_t || (t0 == stop_t && (int64_t)top.key > stop_k))
            break;
        prefetch_next_deps(s);
        if (++tick == SIGNAL_CHECK_EVENTS) {
            tick = 0;
            if (PyErr_CheckSignals() < 0)
                goto fail;
            continue; /* (a handler may have changed the pending events) */
        }
        heap_pop(s, &ev);
        if (PySet_GET_SIZE(s->cancelled)) {
            int c = discard_cancelled(s, &ev);
            if (c < 0)
                goto fail_ev;
            if (c)
                continue;
        }
        s->now = ev_time(&ev);
        Py_CLEAR(s->now_big);
        s->cur = ev_target(&ev);
        s->cur_key = ev_key(&ev);
        s->sub = 0;
        n++;
        if (s->cur <= 1)
            g++;
        prefetch_next(s);
        int r = dispatch(&ev);
        Py_XDECREF(ev.a);
        Py_XDECREF(ev.b);
        if (r < 0)
            goto fail;
        s->last_t = s->now;
        if (s->stopped) {
            s->stopped = 0;
            if (honor) {
                Py_SETREF(result, Py_BuildValue("(LL)", (long long)s->now,
                                                (long long)s->cur_key));
                if (result == NULL)
                    goto fail;
                break;
            }
        }
    }
    s->cur = 0;
    s->events_run += n;
    s->global_events += g;
    return result;
fail_ev:
    Py_XDECREF(ev.a);
    Py_XDECREF(ev.b);
fail:
    Py_XDECREF(result);
    s->cur = 0;
    s->events_run += n;
    s->global_events += g;
    return NULL;
}

static PyObject *Sim_get_now(SimObject *s, void *c)
{
    if (s->now_big) {
        Py_INCREF(s->now_big);
        return s->now_big;
    }
    return PyLong_FromLongLong(s->now);
}

static int Sim_set_now(SimObject *s, PyObject *v, void *c)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete now");
        return -1;
    }
    int64_t now;
    if (as_i64(v, &now) < 0)
        return -1;
    s->now = now;
    Py_CLEAR(s->now_big);
    return 0;
}

static PyObject *Sim_get_cancelled(SimObject *s, void *c)
{
    Py_INCREF(s->cancelled);
    return s->cancelled;
}

static PyObject *Sim_get_rng(SimObject *s, void *c)
{
    Py_INCREF(s->rng);
    return s->rng;
}

/* Set an object attribute of the simulator (``name`` for the error on a delete). */
static int set_object(PyObject **slot, PyObject *v, const char *name)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    Py_INCREF(v);
    Py_SETREF(*slot, v);
    return 0;
}

static int Sim_set_rng(SimObject *s, PyObject *v, void *c)
{
    return set_object(&s->rng, v, "rng");
}

static PyObject *Sim_get_seed(SimObject *s, void *c)
{
    Py_INCREF(s->seed);
    return s->seed;
}

static int Sim_set_seed(SimObject *s, PyObject *v, void *c)
{
    return set_object(&s->seed, v, "seed");
}

static PyObject *Sim_get_cur(SimObject *s, void *c)
{
    return PyLong_FromLongLong(s->cur);
}

static int Sim_set_cur(SimObject *s, PyObject *v, void *c)
{
    int64_t e;
    if (v == NULL || as_i64(v, &e) < 0) {
        if (v == NULL)
            PyErr_SetString(PyExc_AttributeError, "cannot delete cur");
        return -1;
    }
    if (e < 0 || e >= s->nent) {
        PyErr_Format(PyExc_ValueError, "cur: no entity %lld", (long long)e);
        return -1;
    }
    s->cur = e;
    return 0;
}

static PyObject *Sim_get_place(SimObject *s, void *c)
{
    PyObject *v = s->place ? s->place : Py_None;
    Py_INCREF(v);
    return v;
}

static int Sim_set_place(SimObject *s, PyObject *v, void *c)
{
    Py_XINCREF(v);
    Py_XSETREF(s->place, v);
    return 0;
}

static PyMethodDef Sim_methods[] = {
    {"schedule", (PyCFunction)(void (*)(void))Sim_schedule, METH_FASTCALL,
     "schedule(at_ps, callback, *args): run callback(*args) at at_ps; returns a handle"},
    {"after", (PyCFunction)(void (*)(void))Sim_after, METH_FASTCALL,
     "after(delay_ps, callback, *args): run callback(*args) delay_ps after now"},
    {"post", (PyCFunction)(void (*)(void))Sim_post, METH_FASTCALL,
     "post(at_ps, callback, arg): run callback(arg) at at_ps; no handle (returns None)"},
    {"push", (PyCFunction)(void (*)(void))Sim_push, METH_FASTCALL,
     "push(at_ps, callback, args): schedule without checks (the ports' hot path)"},
    {"push_as", (PyCFunction)(void (*)(void))Sim_push_as, METH_FASTCALL,
     "push_as(entity, at_ps, callback): schedule callback() keyed as if entity ran"},
    {"add_entity", (PyCFunction)Sim_add_entity, METH_O,
     "add_entity(objects): a new entity, for callbacks bound to objects; its number"},
    {"set_entity", (PyCFunction)(void (*)(void))Sim_set_entity, METH_FASTCALL,
     "set_entity(obj, entity): callbacks bound to obj run for entity"},
    {"entities", (PyCFunction)Sim_entities, METH_NOARGS, "how many entities there are"},
    {"set_hints", (PyCFunction)(void (*)(void))Sim_set_hints, METH_FASTCALL,
     "set_hints(entity, objects): lines to prefetch before entity's events; how many"},
    {"hints_of", (PyCFunction)Sim_hints_of, METH_O,
     "hints_of(entity): the line addresses set_hints keeps for entity"},
    {"rng_for", (PyCFunction)Sim_rng_for, METH_O, "rng_for(name): a port's own generator"},
    {"entity_of", (PyCFunction)Sim_entity_of, METH_O,
     "entity_of(obj): the entity registered for obj, or None"},
    {"set_owned", (PyCFunction)Sim_set_owned, METH_O,
     "set_owned(flags): which entities this rank holds (a partitioned run)"},
    {"take_outbox", (PyCFunction)Sim_take_outbox, METH_NOARGS,
     "the (target, t, key, port, epoch, packet) for other ranks since the last call"},
    {"arrive", (PyCFunction)(void (*)(void))Sim_arrive, METH_FASTCALL,
     "arrive(at_ps, key, port, epoch, packet): a packet from another rank"},
    {"set_exchange", (PyCFunction)(void (*)(void))Sim_set_exchange, METH_FASTCALL,
     "set_exchange(rank_of, nranks, classes, fields, enums): packets for other ranks as bytes"},
    {"take_wire", (PyCFunction)Sim_take_wire, METH_NOARGS,
     "([bytes for each rank], least time or None) written since the last call"},
    {"exchange_slots", (PyCFunction)Sim_exchange_slots, METH_NOARGS,
     "{class name: (fields moved as tagged int words, fields read as object pointers)}"},
    {"exchange_kept", (PyCFunction)Sim_exchange_kept, METH_NOARGS,
     "{class name: packets written for other ranks kept to be filled by arrive_wire}"},
    {"arrive_wire", (PyCFunction)(void (*)(void))Sim_arrive_wire, METH_FASTCALL,
     "arrive_wire(data, ports): the packets another rank wrote; how many"},
    {"next_time", (PyCFunction)Sim_next_time, METH_NOARGS, "the next event's time, or None"},
    {"run_window", (PyCFunction)(void (*)(void))Sim_run_window, METH_VARARGS | METH_KEYWORDS,
     "run_window(end_ps, stop_at=None, honor_stop=True): a partitioned rank's window"},
    {"cancel", (PyCFunction)Sim_cancel, METH_O, "cancel(handle): disarm a scheduled event"},
    {"stop", (PyCFunction)Sim_stop, METH_NOARGS, "make run() return after the current event"},
    {"pending", (PyCFunction)Sim_pending, METH_NOARGS,
     "number of entries in the heap (cancelled ones included)"},
    {"pending_callbacks", (PyCFunction)Sim_pending_callbacks, METH_NOARGS,
     "the scheduled Python calls not yet run or cancelled, as (t, key, fn, args)"},
    {"run", (PyCFunction)(void (*)(void))Sim_run, METH_VARARGS | METH_KEYWORDS,
     "run(until_ps=None): run events in order; returns the number run"},
    {NULL}};

static PyMemberDef Sim_members[] = {
    {"events_run", T_LONGLONG, offsetof(SimObject, events_run), 0, "events run so far"},
    {"cur_key", T_LONGLONG, offsetof(SimObject, cur_key), READONLY,
     "the running event's key (run_window)"},
    {"sub", T_LONGLONG, offsetof(SimObject, sub), 0,
     "host reactions so far to the running event (a partitioned capture's order)"},
    {"global_events", T_LONGLONG, offsetof(SimObject, global_events), 0,
     "events of GLOBAL and SAMPLER run by run_window"},
    {"last_t", T_LONGLONG, offsetof(SimObject, last_t), 0, "the last event's time (run_window)"},
    {"sent", T_LONGLONG, offsetof(SimObject, sent), 0, "packets put in the outbox"},
    {NULL}};

static PyGetSetDef Sim_getset[] = {
    {"now", (getter)Sim_get_now, (setter)Sim_set_now, "simulated time, ps", NULL},
    {"cancelled", (getter)Sim_get_cancelled, NULL, "keys of cancelled events still queued",
     NULL},
    {"rng", (getter)Sim_get_rng, (setter)Sim_set_rng, "a generator for code outside the fabric",
     NULL},
    {"seed", (getter)Sim_get_seed, (setter)Sim_set_seed,
     "the seed of the ports' generators (and of rng, made from it at construction)", NULL},
    {"cur", (getter)Sim_get_cur, (setter)Sim_set_cur,
     "the running event's entity (0 between runs)", NULL},
    {"place", (getter)Sim_get_place, (setter)Sim_set_place,
     "None or place(callback, args) -> the entity of a callback no object registers", NULL},
    {NULL}};

static PyTypeObject SimType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.sim._kernel.Simulator",
    .tp_basicsize = sizeof(SimObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native discrete-event loop (see openmrc.sim.engine).",
    .tp_new = Sim_new,
    .tp_init = (initproc)Sim_init,
    .tp_dealloc = (destructor)Sim_dealloc,
    .tp_traverse = (traverseproc)Sim_traverse,
    .tp_clear = (inquiry)Sim_clear,
    .tp_methods = Sim_methods,
    .tp_members = Sim_members,
    .tp_getset = Sim_getset,
};

/* ------------------------------------------------------------------------ */
/* EgressPort type                                                          */

static PyCFunction switch_receive_fn, host_receive_fn;

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int Port_init(PortObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"sim",    "name",  "rate_bps", "delay_ps", "rx",      "data_limit",
                             "prio_limit", "trim", "lasthop", "ecn",    "kmin",    "kmax",
                             "framing", "peer", NULL};
    PyObject *sim, *name, *rate_o, *delay_o, *rx, *dl_o, *pl_o;
    PyObject *kmin_o = NULL, *kmax_o = NULL, *fr_o = NULL, *peer = NULL;
    int trim = 1, lasthop = 0, ecn = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|$OOpppOOOO:EgressPort", kwlist, &sim,
                                     &name, &rate_o, &delay_o, &rx, &dl_o, &pl_o, &trim,
                                     &lasthop, &ecn, &kmin_o, &kmax_o, &fr_o, &peer))
        return -1;
    if (dl_o == NULL || pl_o == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "EgressPort: the keyword arguments data_limit and prio_limit are required");
        return -1;
    }
    if (!PyObject_TypeCheck(sim, &SimType)) {
        PyErr_SetString(PyExc_TypeError, "EgressPort: sim must be the native Simulator");
        return -1;
    }
    int64_t rate, delay, kmin = 0, kmax = 0, framing = 38;
    if (as_i64(rate_o, &rate) < 0 || as_i64(delay_o, &delay) < 0)
        return -1;
    if (rate <= 0) {
        PyErr_Format(PyExc_ValueError, "EgressPort %S: rate must be positive, got %S", name,
                     rate_o);
        return -1;
    }
    if (delay < 0) {
        PyErr_Format(PyExc_ValueError, "EgressPort %S: delay must not be negative, got %S", name,
                     delay_o);
        return -1;
    }
    int64_t data_limit, prio_limit;
    if (as_i64(dl_o, &data_limit) < 0 || as_i64(pl_o, &prio_limit) < 0)
        return -1;
    if ((kmin_o && as_i64(kmin_o, &kmin) < 0) || (kmax_o && as_i64(kmax_o, &kmax) < 0) ||
        (fr_o && as_i64(fr_o, &framing) < 0))
        return -1;
    /* everything that can fail is done: from here on the port is (re)written */
    if (peer == NULL)
        peer = PyUnicode_FromString("");
    else
        Py_INCREF(peer);
    if (peer == NULL)
        return -1;
    p->data_limit = data_limit;
    p->prio_limit = prio_limit;
    Py_CLEAR(p->rng_random); /* made on the first draw (port_draw) */
    Py_INCREF(sim);
    Py_XSETREF(p->sim, (SimObject *)sim);
    Py_INCREF(name);
    Py_XSETREF(p->name, name);
    Py_XSETREF(p->peer, peer);
    Py_INCREF(Py_None);
    Py_XSETREF(p->link, Py_None);
    Py_INCREF(rx);
    Py_XSETREF(p->rx, rx);
    p->rx_kind = RX_PY;
    Py_CLEAR(p->rx_target);
    if (PyCFunction_Check(rx)) {
        PyObject *self = PyCFunction_GET_SELF(rx);
        PyCFunction f = PyCFunction_GET_FUNCTION(rx);
        if (self && f == switch_receive_fn && PyObject_TypeCheck(self, &SwitchType))
            p->rx_kind = RX_SWITCH;
        else if (self && f == host_receive_fn && PyObject_TypeCheck(self, &HostEndType))
            p->rx_kind = RX_HOST;
        if (p->rx_kind != RX_PY) {
            Py_INCREF(self);
            p->rx_target = self;
        }
    }
    p->rate_bps = rate;
    int64_t g = gcd64(8000000000000LL, rate);
    p->num = 8000000000000LL / g;
    p->den = rate / g;
    p->delay = delay;
    p->framing = framing;
    p->trim = (char)trim;
    p->lasthop = (char)lasthop;
    p->ecn = (char)ecn;
    p->kmin = kmin;
    p->kmax = kmax > kmin ? kmax : kmin;
    ring_clear(&p->data);
    ring_clear(&p->prio);
    p->data_bytes = p->prio_bytes = p->busy_until = 0;
    p->has_txev = 0;
    p->up = 1;
    p->epoch = 0;
    p->silent = 0;
    p->loss = 0.0;
    p->impaired = 0;
    p->tx_pkts = p->tx_bytes = p->trims = p->ecn_marks = p->drops_full = p->drops_header = 0;
    p->drops_down = p->lost = p->lost_silent = p->max_queue_bytes = 0;
    return 0;
}

static int Port_traverse(PortObject *p, visitproc visit, void *arg)
{
    Py_VISIT(p->sim);
    Py_VISIT(p->name);
    Py_VISIT(p->peer);
    Py_VISIT(p->link);
    Py_VISIT(p->rx);
    Py_VISIT(p->rx_target);
    Py_VISIT(p->rng_random);
    for (Py_ssize_t i = 0; i < p->data.len; i++)
        Py_VISIT(ring_at(&p->data, i));
    for (Py_ssize_t i = 0; i < p->prio.len; i++)
        Py_VISIT(ring_at(&p->prio, i));
    return 0;
}

static int Port_clear(PortObject *p)
{
    Py_CLEAR(p->sim);
    Py_CLEAR(p->name);
    Py_CLEAR(p->peer);
    Py_CLEAR(p->link);
    Py_CLEAR(p->rx);
    p->rx_kind = RX_PY;
    Py_CLEAR(p->rx_target);
    Py_CLEAR(p->rng_random);
    ring_clear(&p->data);
    ring_clear(&p->prio);
    p->has_txev = 0;
    return 0;
}

static void Port_dealloc(PortObject *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    Port_clear(p);
    PyMem_Free(p->data.buf);
    PyMem_Free(p->prio.buf);
    tp->tp_free((PyObject *)p);
}

#define PORT_READY(p)                                                                   \
    if ((p)->sim == NULL) {                                                             \
        PyErr_SetString(PyExc_RuntimeError, "EgressPort: not initialised");             \
        return NULL;                                                                    \
    }

static PyObject *Port_enqueue(PortObject *p, PyObject *pkt)
{
    PORT_READY(p);
    if (port_enqueue(p, pkt) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Port_send(PortObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"pkt", "now", NULL};
    PyObject *pkt, *now = Py_None;
    PORT_READY(p);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:send", kwlist, &pkt, &now))
        return NULL;
    if (now != Py_None) {
        int64_t n;
        if (as_i64(now, &n) < 0)
            return NULL;
        if (n != p->sim->now) {
            PyErr_Format(PyExc_ValueError, "%S.send: now=%S but the simulator is at %lld",
                         p->name, now, (long long)p->sim->now);
            return NULL;
        }
    }
    if (port_enqueue(p, pkt) < 0)
        return NULL;
    return drain_time_obj(p);
}

static PyObject *Port_drain_time(PortObject *p, PyObject *unused)
{
    PORT_READY(p);
    return drain_time_obj(p);
}

static PyObject *Port_serialization_ps(PortObject *p, PyObject *arg)
{
    PORT_READY(p);
    int64_t nb;
    if (as_i64(arg, &nb) < 0)
        return NULL;
    int64_t t;
    if (ser_ps(p, nb, &t) < 0)
        return NULL;
    return PyLong_FromLongLong(t);
}

static PyObject *Port_wire_bytes(PortObject *p, PyObject *pkt)
{
    PORT_READY(p);
    int64_t wb;
    if (get_wire_bytes(p, pkt, &wb) < 0)
        return NULL;
    return PyLong_FromLongLong(wb);
}

static PyObject *Port_queued_bytes(PortObject *p, PyObject *unused)
{
    PORT_READY(p);
    return PyLong_FromLongLong(p->data_bytes + p->prio_bytes);
}

static PyObject *Port_lost_in_flight(PortObject *p, PyObject *pkt)
{
    PORT_READY(p);
    p->drops_down++;
    Py_RETURN_NONE;
}

static PyObject *Port_set_up(PortObject *p, PyObject *arg)
{
    PORT_READY(p);
    int up = PyObject_IsTrue(arg);
    if (up < 0)
        return NULL;
    if (up == p->up)
        Py_RETURN_NONE;
    p->up = (char)up;
    if (up)
        Py_RETURN_NONE;
    p->epoch++;
    p->drops_down += p->data.len + p->prio.len;
    ring_clear(&p->data);
    ring_clear(&p->prio);
    p->data_bytes = 0;
    p->prio_bytes = 0;
    if (p->has_txev) {
        /* the pending transmitter-free event is in the heap: cancel it */
        if (sim_cancel_key(p->sim, p->txev_key) < 0)
            return NULL;
        p->has_txev = 0;
    }
    p->busy_until = p->sim->now;
    Py_RETURN_NONE;
}

/* report_queued(data_bytes, prio_bytes): after a partitioned run, the bytes another
 * rank reported queued at this port (rank 0 merges them; nothing runs afterwards,
 * and the port's own queues are empty: its events ran on that rank) */
static PyObject *Port_report_queued(PortObject *p, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t d, q;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "report_queued(data_bytes, prio_bytes)");
        return NULL;
    }
    if (as_i64(args[0], &d) < 0 || as_i64(args[1], &q) < 0)
        return NULL;
    if (p->data.len || p->prio.len) {
        PyErr_SetString(PyExc_ValueError, "report_queued: the port has packets queued");
        return NULL;
    }
    p->data_bytes = d;
    p->prio_bytes = q;
    Py_RETURN_NONE;
}

static PyObject *Port_set_impairment(PortObject *p, PyObject *args, PyObject *kw)
{
    PORT_READY(p);
    static char *kwlist[] = {"silent", "loss", NULL};
    PyObject *silent = Py_None, *loss = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:set_impairment", kwlist, &silent, &loss))
        return NULL;
    if (silent != Py_None) {
        int s = PyObject_IsTrue(silent);
        if (s < 0)
            return NULL;
        p->silent = (char)s;
    }
    if (loss != Py_None) {
        double x = PyFloat_AsDouble(loss);
        if (x == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(0.0 <= x && x <= 1.0)) {
            PyErr_Format(PyExc_ValueError, "%S: loss probability must be in [0, 1], got %S",
                         p->name, loss);
            return NULL;
        }
        p->loss = x;
    }
    p->impaired = p->silent || p->loss > 0.0;
    Py_RETURN_NONE;
}

static PyObject *Port_get_txev(PortObject *p, void *c)
{
    if (!p->has_txev)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)p->txev_t, (long long)p->txev_key);
}

static PyObject *Port_get_data(PortObject *p, void *c)
{
    return ring_list(&p->data);
}

static PyObject *Port_get_prio(PortObject *p, void *c)
{
    return ring_list(&p->prio);
}

static PyObject *Port_get_up(PortObject *p, void *c)
{
    return PyBool_FromLong(p->up);
}

static PyObject *Port_get_silent(PortObject *p, void *c)
{
    return PyBool_FromLong(p->silent);
}

static PyObject *Port_get_impaired(PortObject *p, void *c)
{
    return PyBool_FromLong(p->impaired);
}

static PyObject *Port_get_loss(PortObject *p, void *c)
{
    return PyFloat_FromDouble(p->loss);
}

static PyMethodDef Port_methods[] = {
    {"enqueue", (PyCFunction)Port_enqueue, METH_O,
     "accept pkt at sim.now: transmit, queue, mark, trim or drop it"},
    {"send", (PyCFunction)(void (*)(void))Port_send, METH_VARARGS | METH_KEYWORDS,
     "send(pkt, now=None): enqueue, return drain_time()"},
    {"drain_time", (PyCFunction)Port_drain_time, METH_NOARGS,
     "when everything queued now will have left"},
    {"serialization_ps", (PyCFunction)Port_serialization_ps, METH_O,
     "time to put nbytes wire bytes on this link, rounded up"},
    {"wire_bytes", (PyCFunction)Port_wire_bytes, METH_O, "pkt.size + framing"},
    {"queued_bytes", (PyCFunction)Port_queued_bytes, METH_NOARGS, "bytes waiting"},
    {"lost_in_flight", (PyCFunction)Port_lost_in_flight, METH_O,
     "the far end reports a packet sent before the link went down"},
    {"set_up", (PyCFunction)Port_set_up, METH_O, "bring this direction up or down now"},
    {"set_impairment", (PyCFunction)(void (*)(void))Port_set_impairment,
     METH_VARARGS | METH_KEYWORDS, "set_impairment(silent=None, loss=None)"},
    {"report_queued", (PyCFunction)(void (*)(void))Port_report_queued, METH_FASTCALL,
     "report_queued(data_bytes, prio_bytes): another rank's queued bytes (a merge)"},
    {NULL}};

#define PM(nm, field, flags) {nm, T_LONGLONG, offsetof(PortObject, field), flags, NULL}
static PyMemberDef Port_members[] = {
    {"sim", T_OBJECT, offsetof(PortObject, sim), READONLY, NULL},
    {"name", T_OBJECT, offsetof(PortObject, name), READONLY, NULL},
    {"peer", T_OBJECT, offsetof(PortObject, peer), READONLY, NULL},
    {"link", T_OBJECT, offsetof(PortObject, link), 0, NULL},
    {"rx", T_OBJECT, offsetof(PortObject, rx), READONLY, NULL},
    PM("rate_bps", rate_bps, READONLY),
    PM("delay", delay, READONLY),
    PM("framing", framing, READONLY),
    PM("data_limit", data_limit, 0),
    PM("prio_limit", prio_limit, 0),
    PM("kmin", kmin, READONLY),
    PM("kmax", kmax, READONLY),
    {"trim", T_BOOL, offsetof(PortObject, trim), READONLY, NULL},
    {"lasthop", T_BOOL, offsetof(PortObject, lasthop), READONLY, NULL},
    {"ecn", T_BOOL, offsetof(PortObject, ecn), READONLY, NULL},
    PM("data_bytes", data_bytes, READONLY),
    PM("prio_bytes", prio_bytes, READONLY),
    PM("busy_until", busy_until, READONLY),
    PM("epoch", epoch, READONLY),
    PM("tx_pkts", tx_pkts, 0),
    PM("tx_bytes", tx_bytes, 0),
    PM("trims", trims, 0),
    PM("ecn_marks", ecn_marks, 0),
    PM("drops_full", drops_full, 0),
    PM("drops_header", drops_header, 0),
    PM("drops_down", drops_down, 0),
    PM("lost", lost, 0),
    PM("lost_silent", lost_silent, 0),
    PM("max_queue_bytes", max_queue_bytes, 0),
    PM("_num", num, READONLY),
    PM("_den", den, READONLY),
    {"xid1", T_INT, offsetof(PortObject, xid1), 0,
     "its number among the ports of a partitioned run's exchange, plus one (0: none)"},
    {NULL}};

static PyGetSetDef Port_getset[] = {
    {"txev", (getter)Port_get_txev, NULL,
     "None, or (time, seq) of the pending transmitter-free event", NULL},
    {"data", (getter)Port_get_data, NULL, "the data queue (a copy, oldest first)", NULL},
    {"prio", (getter)Port_get_prio, NULL, "the header queue (a copy, oldest first)", NULL},
    {"up", (getter)Port_get_up, NULL, "carrier (use set_up to change)", NULL},
    {"silent", (getter)Port_get_silent, NULL, "silently losing everything", NULL},
    {"impaired", (getter)Port_get_impaired, NULL, "silent or lossy", NULL},
    {"loss", (getter)Port_get_loss, NULL, "random loss probability", NULL},
    {NULL}};

static PyTypeObject PortType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.sim._kernel.EgressPort",
    .tp_basicsize = sizeof(PortObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native egress port (see openmrc.sim.port).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Port_init,
    .tp_dealloc = (destructor)Port_dealloc,
    .tp_traverse = (traverseproc)Port_traverse,
    .tp_clear = (inquiry)Port_clear,
    .tp_methods = Port_methods,
    .tp_members = Port_members,
    .tp_getset = Port_getset,
};

/* ------------------------------------------------------------------------ */
/* Switch type                                                              */

static int Switch_init(SwitchObject *sw, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"info", "nports", NULL};
    PyObject *info;
    Py_ssize_t nports;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On:Switch", kwlist, &info, &nports))
        return -1;
    if (nports < 0) {
        PyErr_SetString(PyExc_ValueError, "Switch: nports must not be negative");
        return -1;
    }
    PyObject *name = PyObject_GetAttrString(info, "name");
    PyObject *tier = PyObject_GetAttrString(info, "tier");
    PyObject *plane = PyObject_GetAttrString(info, "plane");
    PyObject *index = PyObject_GetAttrString(info, "index");
    PyObject *usid = PyObject_GetAttrString(info, "usid");
    PyObject *ports = PyList_New(nports);
    PyObject *table = PyDict_New();
    PyObject *state = PyUnicode_InternFromString("up");
    int64_t u = 0;
    if (!name || !tier || !plane || !index || !usid || !ports || !table || !state ||
        as_i64(usid, &u) < 0) {
        Py_XDECREF(name);
        Py_XDECREF(tier);
        Py_XDECREF(plane);
        Py_XDECREF(index);
        Py_XDECREF(usid);
        Py_XDECREF(ports);
        Py_XDECREF(table);
        Py_XDECREF(state);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nports; i++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(ports, i, Py_None);
    }
    Py_INCREF(info);
    Py_XSETREF(sw->info, info);
    Py_XSETREF(sw->name, name);
    Py_XSETREF(sw->tier, tier);
    Py_XSETREF(sw->plane, plane);
    Py_XSETREF(sw->index, index);
    Py_XSETREF(sw->usid, usid);
    Py_XSETREF(sw->ports, ports);
    Py_XSETREF(sw->table, table);
    Py_XSETREF(sw->state, state);
    lut_free(&sw->lut);
    sw->match = (int64_t)((BLOCK_PREFIX << 16) | (uint64_t)u);
    sw->forwarding = 1;
    sw->forwarded = sw->bad_route = sw->discarded = 0;
    return 0;
}

static int Switch_traverse(SwitchObject *sw, visitproc visit, void *arg)
{
    Py_VISIT(sw->info);
    Py_VISIT(sw->name);
    Py_VISIT(sw->tier);
    Py_VISIT(sw->plane);
    Py_VISIT(sw->index);
    Py_VISIT(sw->usid);
    Py_VISIT(sw->ports);
    Py_VISIT(sw->table);
    Py_VISIT(sw->state);
    for (Py_ssize_t i = 0; i < sw->lut.cap; i++)
        if (sw->lut.keys[i] >= 0)
            Py_VISIT(sw->lut.vals[i]);
    return 0;
}

static int Switch_clear(SwitchObject *sw)
{
    Py_CLEAR(sw->info);
    Py_CLEAR(sw->name);
    Py_CLEAR(sw->tier);
    Py_CLEAR(sw->plane);
    Py_CLEAR(sw->index);
    Py_CLEAR(sw->usid);
    Py_CLEAR(sw->ports);
    Py_CLEAR(sw->table);
    Py_CLEAR(sw->state);
    lut_free(&sw->lut);
    return 0;
}

static void Switch_dealloc(SwitchObject *sw)
{
    PyTypeObject *tp = Py_TYPE(sw);
    PyObject_GC_UnTrack(sw);
    Switch_clear(sw);
    tp->tp_free((PyObject *)sw);
}

static PyObject *Switch_install(SwitchObject *sw, PyObject *table)
{
    if (sw->ports == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Switch: not initialised");
        return NULL;
    }
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "install: table must be a dict (uSID -> port number)");
        return NULL;
    }
    PyObject *newt = PyDict_New();
    if (newt == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(table, &pos, &k, &v)) {
        PyObject *port = PyObject_GetItem(sw->ports, v);
        if (port == NULL) {
            Py_DECREF(newt);
            return NULL;
        }
        if (port == Py_None) {
            Py_DECREF(port);
            Py_DECREF(newt);
            PyErr_Format(PyExc_ValueError, "%S: table points at port %S, which is not wired",
                         sw->name, v);
            return NULL;
        }
        int r = PyDict_SetItem(newt, k, port);
        Py_DECREF(port);
        if (r < 0) {
            Py_DECREF(newt);
            return NULL;
        }
    }
    /* the native lookup: uSIDs are 16 bits; other keys can never match */
    Py_ssize_t n = PyDict_GET_SIZE(newt), cap = 8;
    while (cap < 2 * n + 2)
        cap <<= 1;
    UsidTable lut;
    lut.cap = cap;
    lut.keys = PyMem_Malloc((size_t)cap * sizeof(int32_t));
    lut.vals = PyMem_Calloc((size_t)cap, sizeof(PyObject *));
    if (lut.keys == NULL || lut.vals == NULL) {
        PyMem_Free(lut.keys);
        PyMem_Free(lut.vals);
        Py_DECREF(newt);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < cap; i++)
        lut.keys[i] = -1;
    pos = 0;
    while (PyDict_Next(newt, &pos, &k, &v)) {
        if (!PyLong_Check(k))
            continue;
        int overflow = 0;
        long long key = PyLong_AsLongLongAndOverflow(k, &overflow);
        if (key == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue;
        }
        if (overflow || key < 0 || key > 0xFFFF)
            continue;
        Py_ssize_t i = ((uint32_t)key * 2654435761u) & (cap - 1);
        while (lut.keys[i] >= 0 && lut.keys[i] != (int32_t)key)
            i = (i + 1) & (cap - 1);
        if (lut.keys[i] < 0) {
            lut.keys[i] = (int32_t)key;
            Py_INCREF(v);
            lut.vals[i] = v;
        }
        else {
            Py_INCREF(v);
            Py_SETREF(lut.vals[i], v);
        }
    }
    lut_free(&sw->lut);
    sw->lut = lut;
    Py_SETREF(sw->table, newt);
    Py_RETURN_NONE;
}

/* The epoch argument of receive(pkt, via, epoch): an int that fits int64 sets *epoch
 * and *obj = NULL; anything else (a non-int or a huge int) sets *obj = o, to be
 * compared as a Python object.  -1 with an exception on error. */
static int epoch_arg(PyObject *o, int64_t *epoch, PyObject **obj)
{
    int overflow = 0;
    *epoch = 0;
    *obj = NULL;
    if (PyLong_Check(o)) {
        *epoch = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (*epoch == -1 && PyErr_Occurred())
            return -1;
    }
    else
        overflow = 1;
    if (overflow)
        *obj = o;
    return 0;
}

static PyObject *Switch_receive(SwitchObject *sw, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "receive(pkt, via, epoch)");
        return NULL;
    }
    if (sw->ports == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Switch: not initialised");
        return NULL;
    }
    int64_t epoch;
    PyObject *epoch_obj;
    if (epoch_arg(args[2], &epoch, &epoch_obj) < 0)
        return NULL;
    if (switch_receive_impl(sw, args[0], args[1], epoch, epoch_obj) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Switch_get_table(SwitchObject *sw, void *c)
{
    if (sw->table == NULL)
        Py_RETURN_NONE;
    return PyDict_Copy(sw->table);
}

static PyMethodDef Switch_methods[] = {
    {"install", (PyCFunction)Switch_install, METH_O,
     "install the static table (uSID -> port number) once all ports exist"},
    {"receive", (PyCFunction)(void (*)(void))Switch_receive, METH_FASTCALL,
     "receive(pkt, via, epoch): match, shift, look up, enqueue"},
    {NULL}};

#define SM(nm, field, type, flags) {nm, type, offsetof(SwitchObject, field), flags, NULL}
static PyMemberDef Switch_members[] = {
    SM("info", info, T_OBJECT, READONLY),
    SM("name", name, T_OBJECT, READONLY),
    SM("tier", tier, T_OBJECT, READONLY),
    SM("plane", plane, T_OBJECT, READONLY),
    SM("index", index, T_OBJECT, READONLY),
    SM("usid", usid, T_OBJECT, READONLY),
    SM("ports", ports, T_OBJECT, READONLY),
    SM("state", state, T_OBJECT_EX, 0),
    SM("match", match, T_LONGLONG, READONLY),
    SM("forwarding", forwarding, T_BOOL, 0),
    SM("forwarded", forwarded, T_LONGLONG, 0),
    SM("bad_route", bad_route, T_LONGLONG, 0),
    SM("discarded", discarded, T_LONGLONG, 0),
    {NULL}};

static PyGetSetDef Switch_getset[] = {
    {"table", (getter)Switch_get_table, NULL, "uSID -> egress port (a copy)", NULL},
    {NULL}};

static PyTypeObject SwitchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.sim._kernel.Switch",
    .tp_basicsize = sizeof(SwitchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native SRv6 uSID switch (see openmrc.sim.switch).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Switch_init,
    .tp_dealloc = (destructor)Switch_dealloc,
    .tp_traverse = (traverseproc)Switch_traverse,
    .tp_clear = (inquiry)Switch_clear,
    .tp_methods = Switch_methods,
    .tp_members = Switch_members,
    .tp_getset = Switch_getset,
};

/* ------------------------------------------------------------------------ */
/* HostEnd type                                                             */

static int HostEnd_init(HostEndObject *h, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"sim", "host", "plane", NULL};
    PyObject *sim, *host, *plane;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:HostEnd", kwlist, &sim, &host, &plane))
        return -1;
    if (!PyObject_TypeCheck(sim, &SimType)) {
        PyErr_SetString(PyExc_TypeError, "HostEnd: sim must be the native Simulator");
        return -1;
    }
    Py_INCREF(sim);
    Py_XSETREF(h->sim, (SimObject *)sim);
    Py_INCREF(host);
    Py_XSETREF(h->host, host);
    Py_INCREF(plane);
    Py_XSETREF(h->plane, plane);
    Py_INCREF(Py_None);
    Py_XSETREF(h->on_receive, Py_None);
    h->received = h->undelivered = 0;
    return 0;
}

static int HostEnd_traverse(HostEndObject *h, visitproc visit, void *arg)
{
    Py_VISIT(h->sim);
    Py_VISIT(h->host);
    Py_VISIT(h->plane);
    Py_VISIT(h->on_receive);
    return 0;
}

static int HostEnd_clear(HostEndObject *h)
{
    Py_CLEAR(h->sim);
    Py_CLEAR(h->host);
    Py_CLEAR(h->plane);
    Py_CLEAR(h->on_receive);
    return 0;
}

static void HostEnd_dealloc(HostEndObject *h)
{
    PyTypeObject *tp = Py_TYPE(h);
    PyObject_GC_UnTrack(h);
    HostEnd_clear(h);
    tp->tp_free((PyObject *)h);
}

static PyObject *HostEnd_receive(HostEndObject *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "receive(pkt, via, epoch)");
        return NULL;
    }
    if (h->sim == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "HostEnd: not initialised");
        return NULL;
    }
    int64_t epoch;
    PyObject *epoch_obj;
    if (epoch_arg(args[2], &epoch, &epoch_obj) < 0)
        return NULL;
    if (host_receive_impl(h, args[0], args[1], epoch, epoch_obj) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *HostEnd_get_on_receive(HostEndObject *h, void *c)
{
    Py_INCREF(h->on_receive ? h->on_receive : Py_None);
    return h->on_receive ? h->on_receive : Py_None;
}

static int HostEnd_set_on_receive(HostEndObject *h, PyObject *v, void *c)
{
    if (v == NULL)
        v = Py_None;
    if (v != Py_None && !PyCallable_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "HostEnd.on_receive: must be callable or None");
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(h->on_receive, v);
    return 0;
}

static PyMethodDef HostEnd_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))HostEnd_receive, METH_FASTCALL,
     "receive(pkt, via, epoch): hand the packet to the host"},
    {NULL}};

static PyMemberDef HostEnd_members[] = {
    {"sim", T_OBJECT, offsetof(HostEndObject, sim), READONLY, NULL},
    {"host", T_OBJECT, offsetof(HostEndObject, host), READONLY, NULL},
    {"plane", T_OBJECT, offsetof(HostEndObject, plane), READONLY, NULL},
    {"received", T_LONGLONG, offsetof(HostEndObject, received), 0, NULL},
    {"undelivered", T_LONGLONG, offsetof(HostEndObject, undelivered), 0, NULL},
    {NULL}};

static PyGetSetDef HostEnd_getset[] = {
    {"on_receive", (getter)HostEnd_get_on_receive, (setter)HostEnd_set_on_receive,
     "on_receive(pkt, plane, now), or None", NULL},
    {NULL}};

static PyTypeObject HostEndType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openmrc.sim._kernel.HostEnd",
    .tp_basicsize = sizeof(HostEndObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native host end of a host link (see openmrc.sim.switch).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)HostEnd_init,
    .tp_dealloc = (destructor)HostEnd_dealloc,
    .tp_traverse = (traverseproc)HostEnd_traverse,
    .tp_clear = (inquiry)HostEnd_clear,
    .tp_methods = HostEnd_methods,
    .tp_members = HostEnd_members,
    .tp_getset = HostEnd_getset,
};

/* ------------------------------------------------------------------------ */
/* NIC helpers over a host's ports (sim/port.py: busy_mask, soonest_drain)    */

static int generic_int_attr(PyObject *o, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(o, name);
    return *out == NULL ? -1 : 0;
}

/* Whether o's class still has a native type's own method, so that the kernel may do
 * that method's work itself (a subclass that replaces it is called by name).  The last
 * subclass found to keep it is remembered (a strong reference), valid while its
 * version tag (which CPython changes when the class or a base is modified) is the one
 * it had then. */
typedef struct {
    PyTypeObject *base; /* the native type */
    const char *name;   /* the method */
    PyObject *attr;     /* its name, interned at import */
    PyObject *native;   /* the native type's own (borrowed: a static type) */
    PyTypeObject *tp;   /* the last subclass found to keep it */
    unsigned int version;
} NativeMethod;

static NativeMethod m_drain_time = {&PortType, "drain_time", NULL, NULL, NULL, 0};
static NativeMethod m_post = {&SimType, "post", NULL, NULL, NULL, 0};
static NativeMethod m_enqueue = {&PortType, "enqueue", NULL, NULL, NULL, 0};

static inline int keeps_native(PyObject *o, NativeMethod *m)
{
    PyTypeObject *tp = Py_TYPE(o);
    if (tp == m->base)
        return 1;
    if (tp == m->tp && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
        tp->tp_version_tag == m->version)
        return 1;
    if (!PyType_IsSubtype(tp, m->base) || _PyType_Lookup(tp, m->attr) != m->native)
        return 0;
    if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) { /* _PyType_Lookup gives it one */
        Py_INCREF(tp);
        Py_XSETREF(m->tp, tp);
        m->version = tp->tp_version_tag;
    }
    return 1;
}

/* At import: m's name interned (unless given) and the native type's own method. */
static int native_method_init(NativeMethod *m)
{
    if (m->attr == NULL && (m->attr = PyUnicode_InternFromString(m->name)) == NULL)
        return -1;
    m->native = _PyType_Lookup(m->base, m->attr);
    if (m->native == NULL) {
        PyErr_Format(PyExc_ImportError, "openmrc.sim._kernel: %s has no %s", m->base->tp_name,
                     m->name);
        return -1;
    }
    return 0;
}

/* Whether port o (a Python port) is busy: not up, serializing or with a queue. */
static int py_port_busy(PyObject *o, PyObject *nowo)
{
    static const char *names[] = {"up", "busy_until", "data_bytes", "prio_bytes"};
    for (int k = 0; k < 4; k++) {
        PyObject *v;
        if (generic_int_attr(o, names[k], &v) < 0)
            return -1;
        int r = k == 0 ? PyObject_Not(v)
                : k == 1 ? PyObject_RichCompareBool(v, nowo, Py_GT)
                         : PyObject_IsTrue(v);
        Py_DECREF(v);
        if (r != 0)
            return r;
    }
    return 0;
}

/* port_totals(ports): (the COUNTERS of port.py summed over ports, max_queue_bytes the
 * max; the indices of the ports that are down, have sent, dropped or lost something
 * or hold a queue).  Native ports only (TypeError otherwise: metrics.py then reads
 * them in Python).  A million ports in milliseconds, for a fabric's snapshot. */
static PyObject *k_port_totals(PyObject *mod, PyObject *ports)
{
    PyObject *seq = PySequence_Fast(ports, "port_totals: ports must be a sequence");
    if (seq == NULL)
        return NULL;
    int64_t t[10] = {0};
    PyObject *active = PyList_New(0), *res = NULL;
    if (active == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!is_port(o)) {
            PyErr_SetString(PyExc_TypeError, "port_totals: not a native port");
            goto done;
        }
        PortObject *p = (PortObject *)o;
        t[0] += p->tx_pkts;
        t[1] += p->tx_bytes;
        t[2] += p->trims;
        t[3] += p->ecn_marks;
        t[4] += p->drops_full;
        t[5] += p->drops_header;
        t[6] += p->drops_down;
        t[7] += p->lost;
        t[8] += p->lost_silent;
        if (p->max_queue_bytes > t[9])
            t[9] = p->max_queue_bytes;
        if (!p->up || p->tx_pkts || p->drops_full || p->drops_header || p->drops_down ||
            p->lost || p->lost_silent || p->data_bytes || p->prio_bytes) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (k == NULL || PyList_Append(active, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
        }
    }
    res = Py_BuildValue("(LLLLLLLLLL)O", (long long)t[0], (long long)t[1], (long long)t[2],
                        (long long)t[3], (long long)t[4], (long long)t[5], (long long)t[6],
                        (long long)t[7], (long long)t[8], (long long)t[9], active);
done:
    Py_DECREF(seq);
    Py_XDECREF(active);
    return res;
}

/* busy_mask(ports, now): bit p set when port p is down, serializing or has a queue */
static PyObject *k_busy_mask(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "busy_mask(ports, now)");
        return NULL;
    }
    int64_t now;
    if (as_i64(args[1], &now) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "busy_mask: ports must be a sequence");
    if (seq == NULL)
        return NULL;
    uint64_t busy = 0;
    PyObject *high = NULL; /* bits 64 and up (more than 64 ports), a Python int */
    PyObject *nowo = NULL, *res = NULL;
    /* a list may change under a Python port's attribute reads: re-read its size */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        int b;
        if (is_port(o)) {
            PortObject *p = (PortObject *)o;
            b = !p->up || p->busy_until > now || p->data_bytes || p->prio_bytes;
        }
        else {
            if (nowo == NULL && (nowo = PyLong_FromLongLong(now)) == NULL)
                goto done;
            Py_INCREF(o); /* held: its attributes run Python code */
            b = py_port_busy(o, nowo);
            Py_DECREF(o);
            if (b < 0)
                goto done;
        }
        if (!b)
            continue;
        if (i < 64) {
            busy |= (uint64_t)1 << i;
            continue;
        }
        PyObject *one = PyLong_FromLong(1), *sh = PyLong_FromSsize_t(i), *bit = NULL;
        if (one && sh)
            bit = PyNumber_Lshift(one, sh);
        Py_XDECREF(one);
        Py_XDECREF(sh);
        if (bit == NULL)
            goto done;
        if (high == NULL)
            high = bit;
        else {
            Py_SETREF(high, PyNumber_Or(high, bit));
            Py_DECREF(bit);
            if (high == NULL)
                goto done;
        }
    }
    res = PyLong_FromUnsignedLongLong(busy);
    if (res != NULL && high != NULL)
        Py_SETREF(res, PyNumber_Or(res, high));
done:
    Py_DECREF(seq);
    Py_XDECREF(nowo);
    Py_XDECREF(high);
    return res;
}

/* The earliest drain_time() after now of a port of ports that is up: 1 and *out set,
 * 0 when there is none, -1 on an error (soonest_drain and post_drain). */
static inline int soonest_drain_of(PyObject *ports, int64_t now, int64_t *out)
{
    PyObject *seq = PySequence_Fast(ports, "soonest_drain: ports must be a sequence");
    if (seq == NULL)
        return -1;
    int found = 0;
    int64_t soonest = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        int64_t t;
        if (keeps_native(o, &m_drain_time)) {
            PortObject *p = (PortObject *)o;
            if (!p->up)
                continue;
            if (p->sim == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "EgressPort: not initialised");
                goto fail;
            }
            if (port_drain_time(p, &t) < 0)
                goto fail;
        }
        else {
            Py_INCREF(o); /* held: the calls below run Python code */
            PyObject *v = PyObject_GetAttrString(o, "up");
            int up = v == NULL ? -1 : PyObject_IsTrue(v);
            Py_XDECREF(v);
            if (up <= 0) {
                Py_DECREF(o);
                if (up < 0)
                    goto fail;
                continue;
            }
            v = PyObject_CallMethodNoArgs(o, m_drain_time.attr);
            Py_DECREF(o);
            if (v == NULL)
                goto fail;
            int r = as_i64(v, &t);
            Py_DECREF(v);
            if (r < 0)
                goto fail;
        }
        if (t > now && (!found || t < soonest)) {
            soonest = t;
            found = 1;
        }
    }
    Py_DECREF(seq);
    *out = soonest;
    return found;
fail:
    Py_DECREF(seq);
    return -1;
}

/* soonest_drain(ports, now): the earliest drain_time() after now of a port that is up, or None */
static PyObject *k_soonest_drain(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "soonest_drain(ports, now)");
        return NULL;
    }
    int64_t now, t;
    if (as_i64(args[1], &now) < 0)
        return NULL;
    int found = soonest_drain_of(args[0], now, &t);
    if (found < 0)
        return NULL;
    if (!found)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(t);
}

/* post_drain(sim, ports, now, armed, callback): the NIC's pump armed in one call, as
 * pyport.py_post_drain: t = soonest_drain(ports, now); when there is one and no pump
 * is armed (armed < 0) or t is before armed, sim.post(t, callback, t) and t is
 * returned, else None (nothing posted). */
static PyObject *k_post_drain(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "post_drain(sim, ports, now, armed, callback)");
        return NULL;
    }
    int64_t now, armed, t;
    if (as_i64(args[2], &now) < 0 || as_i64(args[3], &armed) < 0)
        return NULL;
    int found = soonest_drain_of(args[1], now, &t);
    if (found < 0)
        return NULL;
    if (!found || (armed >= 0 && t >= armed))
        Py_RETURN_NONE;
    PyObject *to = PyLong_FromLongLong(t);
    if (to == NULL)
        return NULL;
    PyObject *sim = args[0];
    int r;
    if (keeps_native(sim, &m_post))
        r = sim_post_at((SimObject *)sim, t, args[4], to);
    else {
        PyObject *v = PyObject_CallMethodObjArgs(sim, m_post.attr, to, args[4], to, NULL);
        r = v == NULL ? -1 : 0;
        Py_XDECREF(v);
    }
    if (r < 0) {
        Py_DECREF(to);
        return NULL;
    }
    return to;
}

/* send_post(port, pkt, sim, ports, now, armed, callback): port.enqueue(pkt), then
 * post_drain(sim, ports, now, armed, callback), its result returned (as
 * pyport.py_send_post): the NIC's last free port given a packet and its pump armed
 * in one call. */
static PyObject *k_send_post(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "send_post(port, pkt, sim, ports, now, armed, callback)");
        return NULL;
    }
    PyObject *port = args[0];
    if (keeps_native(port, &m_enqueue)) {
        PortObject *p = (PortObject *)port;
        if (p->sim == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "EgressPort: not initialised");
            return NULL;
        }
        if (port_enqueue(p, args[1]) < 0)
            return NULL;
    }
    else {
        PyObject *r = PyObject_CallMethodOneArg(port, S_enqueue, args[1]);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return k_post_drain(mod, args + 2, 5);
}

static PyObject *k_huge_arenas(PyObject *mod, PyObject *unused);
static PyObject *k_in_huge_arena(PyObject *mod, PyObject *obj);

/* route_slot(type): where the switch arrivals' prefetches read a packet type's
 * route (route_slot_learn): its offset in the object, 0 when it is not one
 * pointer slot, None when no switch has read a route of the type (or it was
 * forgotten for others since). */
static PyObject *k_route_slot(PyObject *mod, PyObject *tp)
{
    for (int i = 0; i < ROUTE_WAYS; i++)
        if (route_slots[i].tp != NULL && (PyObject *)route_slots[i].tp == tp)
            return PyLong_FromSsize_t(route_slots[i].off);
    Py_RETURN_NONE;
}

static PyMethodDef kernel_functions[] = {
    {"port_totals", (PyCFunction)k_port_totals, METH_O,
     "port_totals(ports): (counters summed, max queue the max), indices of active ports"},
    {"busy_mask", (PyCFunction)(void (*)(void))k_busy_mask, METH_FASTCALL,
     "busy_mask(ports, now): bit p set when port p is down, serializing or has a queue"},
    {"soonest_drain", (PyCFunction)(void (*)(void))k_soonest_drain, METH_FASTCALL,
     "soonest_drain(ports, now): earliest drain_time() > now of a port that is up, or None"},
    {"send_post", (PyCFunction)(void (*)(void))k_send_post, METH_FASTCALL,
     "send_post(port, pkt, sim, ports, now, armed, callback): port.enqueue(pkt), then\n"
     "post_drain(sim, ports, now, armed, callback)"},
    {"post_drain", (PyCFunction)(void (*)(void))k_post_drain, METH_FASTCALL,
     "post_drain(sim, ports, now, armed, callback): post callback(t) at t, the soonest drain,\n"
     "when no pump is armed (armed < 0) or t is before armed; t posted, or None"},
    {"huge_arenas", (PyCFunction)k_huge_arenas, METH_NOARGS,
     "huge_arenas(): the huge-page arenas' figures (installed, arena_bytes, regions, live, "
     "reused, fallback)"},
    {"in_huge_arena", (PyCFunction)k_in_huge_arena, METH_O,
     "in_huge_arena(obj): whether obj's memory lies in a huge-page arena"},
    {"route_slot", (PyCFunction)k_route_slot, METH_O,
     "route_slot(type): offset of the type's route the switch prefetches read; 0 none; "
     "None not seen"},
    {NULL}};

/* ------------------------------------------------------------------------ */
/* module                                                                   */

static PyObject *import_attr(const char *mod, const char *name)
{
    PyObject *m = PyImport_ImportModule(mod);
    if (m == NULL)
        return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

/* The topology's uSID constants must be the ones compiled in. */
static int check_const(const char *name, PyObject *expect)
{
    PyObject *v = import_attr("openmrc.topology", name);
    if (v == NULL)
        return -1;
    int eq = PyObject_RichCompareBool(v, expect, Py_EQ);
    Py_DECREF(v);
    if (eq < 0)
        return -1;
    if (!eq) {
        PyErr_Format(PyExc_ImportError, "openmrc.sim._kernel: topology.%s differs from the "
                                        "value compiled in; rebuild the extension",
                     name);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* huge-page arenas                                                          */
/*
 * At thousands of hosts the objects one event touches (ports, switches, packets,
 * the hosts' transport state) lie scattered over hundreds of megabytes, and on
 * 4 KiB pages nearly every one of them also misses the TLB (a page walk, longer
 * under a hypervisor).  Python's small-object allocator takes its memory in
 * arenas of 1 MiB from the operating system; this module gives it arenas carved
 * out of regions of HA_REGION bytes, 2 MiB aligned and marked MADV_HUGEPAGE, so
 * that with transparent huge pages ("always" or "madvise") a 2 MiB page covers
 * hundreds of objects.  Addresses change, nothing else: no result depends on
 * them.  Arenas Python gives back are kept for reuse (the region's huge pages
 * are not split), so the process's memory does not shrink below its peak by
 * them; arenas of another size, and any made before this was installed, go to
 * the allocator that was in place.  Linux only; OPENMRC_HUGE_ARENAS=0 turns it
 * off (set before openmrc.sim is imported).  If mmap fails the previous
 * allocator is asked instead.
 */
#define HA_ALIGN ((size_t)2 << 20)
#define HA_REGION ((size_t)32 << 20)
static PyObjectArenaAllocator ha_prev; /* the allocator in place before */
static int ha_on;                      /* installed */
static char *ha_cur, *ha_end;          /* the rest of the region being carved */
static char **ha_regions;              /* the regions' starts (each HA_REGION bytes) */
static Py_ssize_t ha_nregions, ha_capregions;
static void *ha_free;                  /* arenas given back: a list through their first word */
static size_t ha_size;                 /* the arena size served (the first one asked for) */
static Py_ssize_t ha_live, ha_reused, ha_fallback;

static int ha_owns(const void *p)
{
    for (Py_ssize_t i = 0; i < ha_nregions; i++)
        if ((const char *)p >= ha_regions[i] && (const char *)p < ha_regions[i] + HA_REGION)
            return 1;
    return 0;
}

#if defined(__linux__) && defined(MADV_HUGEPAGE)
/* A new region, 2 MiB aligned and marked for huge pages; 0 on failure (nothing kept). */
static int ha_grow(void)
{
    if (ha_nregions == ha_capregions) {
        Py_ssize_t cap = ha_capregions ? 2 * ha_capregions : 16;
        char **r = realloc(ha_regions, (size_t)cap * sizeof(char *));
        if (r == NULL)
            return 0;
        ha_regions = r;
        ha_capregions = cap;
    }
    size_t len = HA_REGION + HA_ALIGN;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    char *a = (char *)(((uintptr_t)m + HA_ALIGN - 1) & ~(uintptr_t)(HA_ALIGN - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (a + HA_REGION < m + len)
        munmap(a + HA_REGION, (size_t)(m + len - (a + HA_REGION)));
    (void)madvise(a, HA_REGION, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
    ha_regions[ha_nregions++] = a;
    ha_cur = a;
    ha_end = a + HA_REGION;
    return 1;
}
#endif

static void *ha_alloc(void *ctx, size_t size)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (ha_size == 0 && size >= 4096 && size <= HA_ALIGN && HA_REGION % size == 0)
        ha_size = size;
    if (size == ha_size && size != 0) {
        void *p = ha_free;
        if (p != NULL) {
            ha_free = *(void **)p;
            ha_live++;
            ha_reused++;
            return p;
        }
        if ((ha_cur != NULL && size <= (size_t)(ha_end - ha_cur)) || ha_grow()) {
            p = ha_cur;
            ha_cur += size;
            ha_live++;
            return p;
        }
    }
#endif
    ha_fallback++;
    return ha_prev.alloc(ha_prev.ctx, size);
}

static void ha_release(void *ctx, void *p, size_t size)
{
    if (p != NULL && size == ha_size && ha_owns(p)) {
        *(void **)p = ha_free;
        ha_free = p;
        ha_live--;
        return;
    }
    ha_prev.free(ha_prev.ctx, p, size);
}

/* Install the huge-page arenas (once, unless OPENMRC_HUGE_ARENAS=0 or not Linux). */
static void ha_install(void)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const char *env = getenv("OPENMRC_HUGE_ARENAS");
    if (ha_on || (env != NULL && strcmp(env, "0") == 0))
        return;
    PyObject_GetArenaAllocator(&ha_prev);
    PyObjectArenaAllocator mine = {NULL, ha_alloc, ha_release};
    PyObject_SetArenaAllocator(&mine);
    ha_on = 1;
#endif
}

/* huge_arenas() -> dict: whether the arenas are installed, regions, arenas in use
 * and reused from the ones given back, and arenas passed to the previous allocator */
static PyObject *k_huge_arenas(PyObject *mod, PyObject *unused)
{
    return Py_BuildValue("{s:O,s:n,s:n,s:n,s:n,s:n}", "installed", ha_on ? Py_True : Py_False,
                         "arena_bytes", (Py_ssize_t)ha_size, "regions", ha_nregions, "live",
                         ha_live, "reused", ha_reused, "fallback", ha_fallback);
}

/* owns_huge_arena(obj) -> bool: whether obj's memory is in a huge-page region */
static PyObject *k_in_huge_arena(PyObject *mod, PyObject *obj)
{
    return PyBool_FromLong(ha_owns(obj));
}

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "openmrc.sim._kernel",
    "The simulator's fabric hot path in C (see openmrc.sim.engine).", -1, kernel_functions};

PyMODINIT_FUNC PyInit__kernel(void)
{
    if (PyType_Ready(&SimType) < 0 || PyType_Ready(&PortType) < 0 ||
        PyType_Ready(&SwitchType) < 0 || PyType_Ready(&HostEndType) < 0)
        return NULL;
    switch_receive_fn = (PyCFunction)(void (*)(void))Switch_receive;
    if (native_method_init(&m_drain_time) < 0 || native_method_init(&m_post) < 0)
        return NULL;
    host_receive_fn = (PyCFunction)(void (*)(void))HostEnd_receive;
#define INTERN(var, s)                                                                  \
    if ((var = PyUnicode_InternFromString(s)) == NULL)                                  \
        return NULL;
    INTERN(S_size, "size");
    INTERN(S_trimmed, "trimmed");
    INTERN(S_ecn, "ecn");
    INTERN(S_trim, "trim");
    INTERN(S_route, "route");
    INTERN(S_random, "random");
    INTERN(S_rng_for, "rng_for");
    INTERN(S_epoch, "epoch");
    INTERN(S_lost_in_flight, "lost_in_flight");
    INTERN(S_enqueue, "enqueue");
    m_enqueue.attr = S_enqueue;
    if (native_method_init(&m_enqueue) < 0)
        return NULL;
    PyLong_Shift = PyLong_FromLong(ACTIVE_SHIFT);
    PyLong_16 = PyLong_FromLong(16);
    PyLong_FFFF = PyLong_FromLong(0xFFFF);
    if (!PyLong_Shift || !PyLong_16 || !PyLong_FFFF)
        return NULL;
    PyLong_Block = long_from_u128(0, BLOCK_HI);
    PyLong_Carrier = long_from_u128(~(uint64_t)0, CARRIER_HI);
    if (!PyLong_Block || !PyLong_Carrier)
        return NULL;
    if (check_const("ACTIVE_SHIFT", PyLong_Shift) < 0 || check_const("BLOCK", PyLong_Block) < 0 ||
        check_const("CARRIER_MASK", PyLong_Carrier) < 0)
        return NULL;
    {
        PyObject *bp = PyLong_FromUnsignedLongLong(BLOCK_PREFIX);
        if (bp == NULL || check_const("BLOCK_PREFIX", bp) < 0) {
            Py_XDECREF(bp);
            return NULL;
        }
        Py_DECREF(bp);
    }
    DataPacketType = import_attr("openmrc.wire.packets", "DataPacket");
    if (DataPacketType == NULL)
        return NULL;
    RandomClass = import_attr("random", "Random");
    if (RandomClass == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&kernel_module);
    if (m == NULL)
        return NULL;
    /* AddObjectRef takes its own reference (AddObject leaked ours on failure) */
    if (PyModule_AddObjectRef(m, "Simulator", (PyObject *)&SimType) < 0 ||
        PyModule_AddObjectRef(m, "EgressPort", (PyObject *)&PortType) < 0 ||
        PyModule_AddObjectRef(m, "Switch", (PyObject *)&SwitchType) < 0 ||
        PyModule_AddObjectRef(m, "HostEnd", (PyObject *)&HostEndType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    ha_install();
    return m;
}
