/* A QP's EV draws in native code: shuffle and picks (src/openmrc/transport/paths.py).
 *
 * The same functions as paths._shuffle and paths._picks (the readable reference and
 * the pure-Python fallback), taking the same words of the same generator and making
 * the same choices from them: a QP's EVs are drawn when it is connected, 256
 * uplinks shuffled per plane, and the Python loop over each batch's words was most
 * of a QP's set-up.  Here the loop runs in C, taking the generator's words exactly
 * as random.Random.shuffle and sample would (never one more):
 *
 * - when getrandbits is CPython's own (the bound method of a _random.Random whose
 *   object has the layout below, checked when this module is imported), the words
 *   come straight from its Mersenne Twister state, one at a time, as its
 *   getrandbits(32 * m) makes them (word k of such a call is the k-th
 *   genrand_uint32 after it starts): the generator's code, copied below, advancing
 *   its own state, so the stream goes on from where a Python draw would leave it;
 * - otherwise (another generator, another layout) from getrandbits(32 * m), one
 *   call per batch of the words the draws still need at least, read from its bytes.
 *
 * paths.py checks at import that these draw as its Python functions and as the
 * stdlib do (and uses them only then); tests/transport/test_draws.py checks both
 * ways here against the stdlib.  Nothing is trusted: sizes outside what the Python
 * functions handle raise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- CPython's generator (Modules/_randommodule.c, MT19937) ------------------- */

#define MT_N 624
#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfU
#define MT_UPPER_MASK 0x80000000U
#define MT_LOWER_MASK 0x7fffffffU

/* _random.Random's object: its index into the state and the state. */
typedef struct {
    PyObject_HEAD
    int index;
    uint32_t state[MT_N];
} RandomObject;

/* _random.Random.getrandbits's C function, when the layout above is _random.Random's
 * (its size agrees); NULL: always through getrandbits. */
static PyCFunction mt_getrandbits = NULL;

/* The generator behind getrandbits when it is CPython's own getrandbits bound to a
 * _random.Random of the layout above, else NULL. */
static RandomObject *
mt_of(PyObject *getrandbits)
{
    if (mt_getrandbits == NULL || !PyCFunction_Check(getrandbits) ||
        PyCFunction_GET_FUNCTION(getrandbits) != mt_getrandbits)
        return NULL;
    return (RandomObject *)PyCFunction_GET_SELF(getrandbits);
}

/* The generator's next 32-bit word: genrand_uint32 of Modules/_randommodule.c. */
static inline uint32_t
mt_next(RandomObject *self)
{
    static const uint32_t mag01[2] = {0x0U, MT_MATRIX_A};
    uint32_t y, *mt = self->state;
    if (self->index >= MT_N) { /* the next N words at one time */
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & MT_UPPER_MASK) | (mt[kk + 1] & MT_LOWER_MASK);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & MT_UPPER_MASK) | (mt[kk + 1] & MT_LOWER_MASK);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (mt[MT_N - 1] & MT_UPPER_MASK) | (mt[0] & MT_LOWER_MASK);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        self->index = 0;
    }
    y = mt[self->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* ---- the draws ---------------------------------------------------------------- */

/* n.bit_length() for n >= 0 */
static inline int
bit_length(Py_ssize_t n)
{
#if defined(__GNUC__) || defined(__clang__)
    return n ? (int)(8 * sizeof(unsigned long long)) - __builtin_clzll((unsigned long long)n) : 0;
#else
    int b = 0;
    while (n) {
        b++;
        n >>= 1;
    }
    return b;
#endif
}

/* getrandbits(32 * m) as its 4 * m little-endian bytes (word k: bytes 4k .. 4k+3),
 * in a new bytes object; NULL with an exception set on failure. */
static PyObject *
batch(PyObject *getrandbits, Py_ssize_t m)
{
    PyObject *nbits, *word, *raw;
    nbits = PyLong_FromSsize_t(32 * m);
    if (nbits == NULL)
        return NULL;
    word = PyObject_CallOneArg(getrandbits, nbits);
    Py_DECREF(nbits);
    if (word == NULL)
        return NULL;
    if (!PyLong_Check(word)) {
        PyErr_SetString(PyExc_TypeError, "getrandbits: must return an int");
        Py_DECREF(word);
        return NULL;
    }
    raw = PyObject_CallMethod(word, "to_bytes", "ns", 4 * m, "little");
    Py_DECREF(word);
    if (raw != NULL && (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) != 4 * m)) {
        PyErr_SetString(PyExc_TypeError, "getrandbits: int.to_bytes gave no bytes");
        Py_CLEAR(raw);
    }
    return raw;
}

/* shuffle(getrandbits, x): paths._shuffle, Fisher-Yates of the list x in place. */
static PyObject *
native_shuffle(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *getrandbits, *x;
    RandomObject *mt;
    Py_ssize_t size, i;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "shuffle: takes getrandbits and a list");
        return NULL;
    }
    getrandbits = args[0];
    x = args[1];
    if (!PyList_CheckExact(x)) {
        PyErr_SetString(PyExc_TypeError, "shuffle: x must be a list");
        return NULL;
    }
    size = PyList_GET_SIZE(x);
    if (size >= (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "shuffle: at most 65535 items");
        return NULL;
    }
    mt = mt_of(getrandbits);
    if (mt != NULL) { /* one word at a time: j, the top bits of the next, until j < n */
        PyObject **items = ((PyListObject *)x)->ob_item;
        for (i = size - 1; i > 0; i--) {
            Py_ssize_t j, n = i + 1;
            int down = 32 - bit_length(n);
            PyObject *tmp;
            do
                j = (Py_ssize_t)(mt_next(mt) >> down);
            while (j >= n);
            tmp = items[i];
            items[i] = items[j];
            items[j] = tmp;
        }
        Py_RETURN_NONE;
    }
    i = size - 1;
    while (i > 0) {
        Py_ssize_t n = i + 1, low, t, end = 4 * i;
        int bits = bit_length(n), down = 16 - bits;
        const unsigned char *r;
        PyObject **items;
        PyObject *raw = batch(getrandbits, i);
        if (raw == NULL)
            return NULL;
        if (PyList_GET_SIZE(x) != size) { /* getrandbits changed the list */
            Py_DECREF(raw);
            PyErr_SetString(PyExc_RuntimeError, "shuffle: the list changed size");
            return NULL;
        }
        r = (const unsigned char *)PyBytes_AS_STRING(raw);
        items = ((PyListObject *)x)->ob_item;
        low = (Py_ssize_t)1 << (bits - 1); /* the least n of this bit length */
        for (t = 3; t < end; t += 4) {     /* t: a word's top byte */
            Py_ssize_t j = (Py_ssize_t)((((unsigned)r[t] << 8) | r[t - 1]) >> down);
            if (j < n) {
                PyObject *tmp;
                n--;
                tmp = items[n];
                items[n] = items[j];
                items[j] = tmp;
                if (n < low) {
                    down++;
                    low >>= 1;
                }
            }
        }
        Py_DECREF(raw);
        i = n - 1;
    }
    Py_RETURN_NONE;
}

/* picks(getrandbits, nsp, need): paths._picks, the indices below nsp (1 .. 2 ** 16)
 * of the generator's next words that give one, until there are need of them. */
static PyObject *
native_picks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *getrandbits, *out;
    RandomObject *mt;
    Py_ssize_t nsp, need, got = 0;
    int down;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "picks: takes getrandbits, nsp and need");
        return NULL;
    }
    getrandbits = args[0];
    nsp = PyLong_AsSsize_t(args[1]);
    if (nsp == -1 && PyErr_Occurred())
        return NULL;
    need = PyLong_AsSsize_t(args[2]);
    if (need == -1 && PyErr_Occurred())
        return NULL;
    if (nsp < 1 || nsp > (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "picks: nsp must be 1 .. 65536");
        return NULL;
    }
    if (need < 0)
        need = 0;
    down = 24 - bit_length(nsp);
    out = PyList_New(need);
    if (out == NULL)
        return NULL;
    mt = mt_of(getrandbits);
    if (mt != NULL) { /* one word at a time: its top bits, kept when below nsp */
        while (got < need) {
            long j = (long)((mt_next(mt) >> 8) >> down);
            if (j < nsp) {
                PyObject *v = PyLong_FromLong(j);
                if (v == NULL) {
                    Py_DECREF(out);
                    return NULL;
                }
                PyList_SET_ITEM(out, got, v);
                got++;
            }
        }
        return out;
    }
    while (got < need) {
        Py_ssize_t m = need - got, t, end = 4 * m;
        const unsigned char *r;
        PyObject *raw = batch(getrandbits, m);
        if (raw == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        r = (const unsigned char *)PyBytes_AS_STRING(raw);
        for (t = 3; t < end; t += 4) { /* t: a word's top byte */
            long j = (long)((((unsigned long)r[t] << 16) | ((unsigned long)r[t - 1] << 8) |
                             r[t - 2]) >>
                            down);
            if (j < nsp) {
                PyObject *v = PyLong_FromLong(j);
                if (v == NULL) {
                    Py_DECREF(raw);
                    Py_DECREF(out);
                    return NULL;
                }
                PyList_SET_ITEM(out, got, v);
                got++;
            }
        }
        Py_DECREF(raw);
    }
    return out;
}

/* A Python int in 0 .. limit - 1 as a C value; -1 with an exception set if not. */
static long
small_index(PyObject *o, long limit, const char *what)
{
    long v = PyLong_Check(o) ? PyLong_AsLong(o) : -1;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= limit) {
        PyErr_Format(PyExc_ValueError, "draw_planes: %s %R is outside 0..%ld", what, o, limit - 1);
        return -1;
    }
    return v;
}

/* The n uplinks at up shuffled in place, one word at a time, as random.Random.shuffle
 * does: from the last down, j the top bits of the next word, until j is at most i. */
static void
shuffle_uplinks(RandomObject *mt, long *up, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = n - 1; i > 0; i--) {
        Py_ssize_t j;
        long tmp;
        int sh = 32 - bit_length(i + 1);
        do
            j = (Py_ssize_t)(mt_next(mt) >> sh);
        while (j > i);
        tmp = up[i];
        up[i] = up[j];
        up[j] = tmp;
    }
}

/* A plane's spare indices, at their slots (round r of uplink c: r * nup + c): uplink
 * after uplink, rounds (+ 1 for the first extra) picks each, random.sample's set
 * loop: the next word's top bits (down: 24 - the bits of nsp) below nsp and not
 * taken by this uplink yet (seen: a bit per index, all clear; NULL: one pick an
 * uplink at most, nothing to check), left clear again. */
static void
pick_spares(RandomObject *mt, long *spv, Py_ssize_t nup, Py_ssize_t rounds, Py_ssize_t extra,
            long nsp, int down, uint64_t *seen)
{
    Py_ssize_t c, r;
    if (seen == NULL) { /* at most one pick an uplink: the first n words that give one */
        Py_ssize_t n = rounds * nup + extra;
        for (r = 0; r < n;) {
            long j = (long)((mt_next(mt) >> 8) >> down);
            if (j < nsp)
                spv[r++] = j;
        }
        return;
    }
    for (c = 0; c < nup; c++) {
        Py_ssize_t k = rounds + (c < extra);
        for (r = 0; r < k; r++) {
            long j;
            for (;;) {
                j = (long)((mt_next(mt) >> 8) >> down);
                if (j < nsp && !(seen[j >> 6] >> (j & 63) & 1))
                    break;
            }
            seen[j >> 6] |= (uint64_t)1 << (j & 63);
            spv[r * nup + c] = j;
        }
        for (r = 0; r < k; r++) /* forget this uplink's picks for the next one */
            seen[spv[r * nup + c] >> 6] = 0;
    }
}

/* random.sample's set size for k picks (Lib/random.py): it samples through a set
 * (each pick a fresh index, drawn again while already chosen) when the population
 * is larger than this, else from a pool.  4 ** ceil(log(3k, 4)) is the least power
 * of 4 at least 3k (3k is never one itself, so the float log cannot round it). */
static Py_ssize_t
sample_setsize(Py_ssize_t k)
{
    Py_ssize_t setsize = 21, p = 1;
    if (k > 5) {
        while (p < 3 * k)
            p *= 4;
        setsize += p;
    }
    return setsize;
}

/* draw_planes(getrandbits, planes, uplinks, spares, n, seeds): a PathSet's generated
 * EVs when its spares are sampled through a set (more than random.sample's set size
 * for the most EVs an uplink gets, ceil(n / len(uplinks))): for each plane in
 * order, paths._draw_plane_stdlib's draws (the uplinks shuffled; then uplink after
 * uplink in that order, rounds or rounds + 1 spare indices each, every one from the
 * next words' top bits below len(spares), drawn again while the uplink has it
 * already: random.sample's set-based loop) and then the plane's backup seed,
 * getrandbits(64), written to seeds[plane] (a writable buffer of 64-bit words); the
 * uplinks' EVs interleaved round after round as paths._interleave does, and the
 * planes interleaved likewise, as the bytes of an array('I').  None (nothing drawn)
 * when getrandbits is not CPython's own: the caller draws in Python then. */
static PyObject *
native_draw_planes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *up_fast = NULL, *pl_fast = NULL, *sp_fast = NULL, *out = NULL;
    RandomObject *mt;
    Py_buffer seeds;
    Py_ssize_t nplanes, nup, nsp, n, p, i, c, r, rounds = 0, extra = 0, kmax = 0;
    long *up = NULL, sp_start = 0, sp_step = 1;
    long *spv = NULL;      /* the plane's spare indices, by slot */
    uint64_t *seen = NULL; /* kmax > 1: the spare indices the uplink has, a bit each */
    uint32_t *evs;
    int down;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "draw_planes: takes getrandbits, planes, uplinks, spares, n and seeds");
        return NULL;
    }
    mt = mt_of(args[0]);
    if (mt == NULL)
        Py_RETURN_NONE;
    n = PyLong_AsSsize_t(args[4]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[5], &seeds, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (seeds.itemsize != 8 || seeds.format == NULL || strcmp(seeds.format, "Q") != 0) {
        PyErr_SetString(PyExc_TypeError, "draw_planes: seeds must be an array('Q')");
        goto done;
    }
    pl_fast = PySequence_Fast(args[1], "draw_planes: planes must be a sequence");
    up_fast = PySequence_Fast(args[2], "draw_planes: uplinks must be a sequence");
    if (pl_fast == NULL || up_fast == NULL)
        goto done;
    nplanes = PySequence_Fast_GET_SIZE(pl_fast);
    nup = PySequence_Fast_GET_SIZE(up_fast);
    if (PyRange_Check(args[3])) { /* the usual whole field: no list of 65,536 ints */
        PyObject *a = PyObject_GetAttrString(args[3], "start");
        PyObject *b = a ? PyObject_GetAttrString(args[3], "step") : NULL;
        sp_start = a ? PyLong_AsLong(a) : -1;
        sp_step = b ? PyLong_AsLong(b) : -1;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (PyErr_Occurred())
            goto done;
        nsp = PyObject_Length(args[3]);
    }
    else {
        sp_fast = PySequence_Fast(args[3], "draw_planes: spares must be a sequence");
        if (sp_fast == NULL)
            goto done;
        nsp = PySequence_Fast_GET_SIZE(sp_fast);
    }
    if (nsp < 0)
        goto done;
    if (nup > 0 && n >= 0) {
        rounds = n / nup;
        extra = n % nup;
        kmax = rounds + (extra > 0);
    }
    /* (more than 3 x kmax spares: an uplink's picks always find a free one; kmax is
     * bounded first so that the set size cannot overflow) */
    if (n < 0 || nup < 1 || nup >= (1 << 16) || nsp > (1 << 16) || kmax > (1 << 16) ||
        nsp <= sample_setsize(kmax) || nplanes > 16 || (Py_ssize_t)seeds.len < 8 * 16) {
        PyErr_SetString(PyExc_ValueError,
                        "draw_planes: needs 0 < len(uplinks) < 65536, len(spares) <= 65536 and "
                        "above random.sample's set size for ceil(n / len(uplinks)) picks, "
                        "at most 16 planes and 16 seeds");
        goto done;
    }
    up = PyMem_Malloc(sizeof(long) * 2 * nup); /* the uplinks, then each plane's order */
    spv = PyMem_Malloc(sizeof(long) * (n ? n : 1));
    if (kmax > 1)
        seen = PyMem_Calloc((size_t)(nsp + 63) / 64, sizeof(uint64_t));
    if (up == NULL || spv == NULL || (kmax > 1 && seen == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < nup; i++) {
        up[nup + i] = small_index(PySequence_Fast_GET_ITEM(up_fast, i), 1L << 12, "uplink");
        if (up[nup + i] < 0)
            goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(uint32_t) * n * nplanes);
    if (out == NULL)
        goto done;
    evs = (uint32_t *)PyBytes_AS_STRING(out);
    down = 24 - bit_length(nsp);
    for (p = 0; p < nplanes; p++) {
        long plane = small_index(PySequence_Fast_GET_ITEM(pl_fast, p), 16, "plane");
        uint64_t w0, w1;
        if (plane < 0)
            goto fail;
        memcpy(up, up + nup, sizeof(long) * nup); /* order = list(uplinks) */
        shuffle_uplinks(mt, up, nup); /* the uplinks in a random order */
        pick_spares(mt, spv, nup, rounds, extra, (long)nsp, down, seen);
        for (r = 0, c = 0; r < n; r++, c = c + 1 < nup ? c + 1 : 0) { /* slot r, column c */
            long spare;
            uint64_t ev;
            if (sp_fast == NULL)
                spare = sp_start + sp_step * spv[r];
            else {
                spare = PyLong_AsLong(PySequence_Fast_GET_ITEM(sp_fast, spv[r]));
                if (spare == -1 && PyErr_Occurred())
                    goto fail;
            }
            if (spare < 0 || spare >= (1L << 16)) {
                PyErr_Format(PyExc_ValueError, "draw_planes: spare %ld is outside 0..65535", spare);
                goto fail;
            }
            ev = (uint64_t)plane | ((uint64_t)up[c] << 4) | ((uint64_t)spare << 16);
            evs[r * nplanes + p] = (uint32_t)ev; /* plane p, its slot r */
        }
        /* the plane's backup seed: getrandbits(64), its first word least significant */
        w0 = mt_next(mt);
        w1 = mt_next(mt);
        ((uint64_t *)seeds.buf)[plane] = w0 | (w1 << 32);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(up);
    PyMem_Free(spv);
    PyMem_Free(seen);
    Py_XDECREF(pl_fast);
    Py_XDECREF(up_fast);
    Py_XDECREF(sp_fast);
    PyBuffer_Release(&seeds);
    return out;
}

static PyMethodDef draws_functions[] = {
    {"shuffle", (PyCFunction)(void (*)(void))native_shuffle, METH_FASTCALL,
     "shuffle(getrandbits, x): x shuffled in place as random.Random.shuffle would"},
    {"picks", (PyCFunction)(void (*)(void))native_picks, METH_FASTCALL,
     "picks(getrandbits, nsp, need): indices below nsp from the next words' top bits"},
    {"draw_planes", (PyCFunction)(void (*)(void))native_draw_planes, METH_FASTCALL,
     "draw_planes(getrandbits, planes, uplinks, spares, n, seeds): a PathSet's EVs, as "
     "array('I') bytes (None: getrandbits is not CPython's)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef draws_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "openmrc.transport._draws",
    .m_doc = "Native EV draws (see openmrc.transport.paths: _shuffle and _picks).",
    .m_size = -1,
    .m_methods = draws_functions,
};

/* mt_getrandbits: _random.Random.getrandbits's C function when _random.Random's
 * objects are the size of RandomObject (the layout this file reads), else NULL. */
static int
find_mt(void)
{
    PyObject *mod, *cls, *descr;
    mod = PyImport_ImportModule("_random");
    if (mod == NULL) {
        PyErr_Clear(); /* no _random: always through getrandbits */
        return 0;
    }
    cls = PyObject_GetAttrString(mod, "Random");
    Py_DECREF(mod);
    if (cls == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyType_Check(cls) && ((PyTypeObject *)cls)->tp_basicsize == sizeof(RandomObject) &&
        ((PyTypeObject *)cls)->tp_itemsize == 0) {
        descr = PyObject_GetAttrString(cls, "getrandbits");
        if (descr == NULL)
            PyErr_Clear();
        else {
            if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
                mt_getrandbits = ((PyMethodDescrObject *)descr)->d_method->ml_meth;
            }
            Py_DECREF(descr);
        }
    }
    Py_DECREF(cls);
    return mt_getrandbits != NULL;
}

PyMODINIT_FUNC
PyInit__draws(void)
{
    PyObject *m = PyModule_Create(&draws_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "DIRECT", find_mt()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
