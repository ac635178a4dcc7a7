/* The shared ring's hot paths in one C call each: the producer's append, the consumer's scan, and the
 * consumer's polling window (which delivers what it finds).
 *
 * Why C: at low message rates every write and read runs "cold" (nothing of it ran in the last few
 * milliseconds), and on a VM cold code pays per distinct page of code and data it touches (TLB refills
 * through two levels of page tables): measured here, a no-op Python call after a 10 ms sleep takes
 * ~10 us and a struct.pack ~25 us. The Python write path costs ~170 us cold for a 40 KB record; the C
 * append ~13 us inside the call, 9 of them the copy.
 *
 * The algorithm and the layout are the Python ring's (elastream/ipc/ring.py, TurboStream's OSRBuffer,
 * Fig. 5): the word indices and statuses are handed over once by layout(), so ring.py stays the single
 * definition (the 32-byte header, HEADER below, is fixed by the record format). These functions cover
 * only the common cases and answer "take the general path" for the rest (wrap-around, a full ring,
 * failed records, pending left-window records): ring.py keeps the full algorithm, and every record
 * format is the same either way.
 *
 * try_write and read_ready hold the GIL throughout (the consumer's caller also holds its lock; a
 * producer's writes are serialised by the GIL, and try_write declines an id the Python path is writing
 * for); poll_read lets the GIL go while it only looks, its caller holding the consumer's lock, which
 * close() takes before unmapping. All take the mapping's base address from a live ring handle and use
 * GCC/Clang __atomic builtins: a sequentially consistent compare-and-swap is `lock cmpxchg` on x86-64,
 * the same instruction the `atomics` package issues.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>
#include <time.h>

#define MAX_PARTS 64
#define HEADER 32

static Py_ssize_t W_WPOS, W_RPOS, W_WAITERS, P_RESERVING, P_SEQ, P_RECORDS, P_PAYLOADS, P_BYTES;
static Py_ssize_t W_BYTES_READ, W_LAST_PUBLISH, W_RECORDS_READ, W_PAYLOADS_READ, W_SEQUENCE_ERRORS;
static uint64_t WRITING, READY, READ_ST, KIND_BATCH;
static int configured = 0;

static PyObject *
layout(PyObject *self, PyObject *args)
{
    unsigned long long writing, ready, read_st, kind_batch;
    if (!PyArg_ParseTuple(args, "nnnnnnnnnnnnnKKKK", &W_WPOS, &W_RPOS, &W_WAITERS, &P_RESERVING, &P_SEQ,
                          &P_RECORDS, &P_PAYLOADS, &P_BYTES, &W_BYTES_READ, &W_LAST_PUBLISH, &W_RECORDS_READ,
                          &W_PAYLOADS_READ, &W_SEQUENCE_ERRORS, &writing, &ready, &read_st, &kind_batch))
        return NULL;
    WRITING = writing; READY = ready; READ_ST = read_st; KIND_BATCH = kind_batch;
    configured = 1;
    Py_RETURN_NONE;
}

/* Arguments arrive as a plain array (METH_FASTCALL): a format-string parser is a large function that,
 * run once per record, is as cold as the rest of the interpreter at low rates. */
static int
u64_arg(PyObject *const *args, int i, unsigned long long *out)
{
    *out = PyLong_AsUnsignedLongLong(args[i]);
    return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static int
ssize_arg(PyObject *const *args, int i, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(args[i]);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
nargs_is(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, want, nargs);
    return 0;
}

static uint64_t
monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* The arguments every consumer call starts with: (base, data_off, cap, salt, scan, ...). */
static int
ring_args(PyObject *const *args, unsigned char **base, Py_ssize_t *data_off, unsigned long long *cap,
          unsigned long long *salt, unsigned long long *scan)
{
    if (ssize_arg(args, 1, data_off) || u64_arg(args, 2, cap) || u64_arg(args, 3, salt) || u64_arg(args, 4, scan))
        return -1;
    *base = (unsigned char *)PyLong_AsVoidPtr(args[0]);
    return *base == NULL && PyErr_Occurred() ? -1 : 0;
}

static void
release_all(Py_buffer *views, int n)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

/* try_write(producer_cfg, kind, target, payloads)
 * producer_cfg = (base, data_off, cap, salt, slot, producer, writing), built once per producer handle.
 * Returns the consumer's "sleeping" flag (>= 0) after publishing, -1 when the general path must run
 * (wrap, full ring, too many parts, a payload that is not a contiguous buffer, a target out of range,
 * writing[producer] set: a thread of this process is inside the general path for this producer, or the
 * last byte of `writing` set: the handle is closing), or -2 when the consumer declared the record failed
 * before it was published (the caller writes it again).
 * Holding the GIL from the closing check to publish is what serialises this producer's writes and keeps
 * the mapping alive under the call. */
static PyObject *
try_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *base_ptr;
    PyObject *cfg, *payloads, *writing;
    Py_ssize_t data_off, slot;
    unsigned long long cap, salt, target, producer_arg, kind_arg;
    if (!nargs_is(nargs, 4, "try_write"))
        return NULL;
    cfg = args[0];
    payloads = args[3];
    if (!PyTuple_CheckExact(cfg) || PyTuple_GET_SIZE(cfg) != 7) {
        PyErr_SetString(PyExc_TypeError, "try_write: the producer configuration must be a 7-tuple");
        return NULL;
    }
    PyObject *const *c = &PyTuple_GET_ITEM(cfg, 0);
    writing = c[6];
    if (ssize_arg(c, 1, &data_off) || u64_arg(c, 2, &cap) || u64_arg(c, 3, &salt) || ssize_arg(c, 4, &slot) ||
        u64_arg(c, 5, &producer_arg) || u64_arg(args, 1, &kind_arg))
        return NULL;
    target = PyLong_AsUnsignedLongLong(args[2]);
    if (target == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PyLong_FromLong(-1);             /* negative or huge: the general path raises */
    }
    if (target > 0xFFFFFFFFull)
        return PyLong_FromLong(-1);
    if (!PyByteArray_Check(writing)) {
        PyErr_SetString(PyExc_TypeError, "try_write: writing must be a bytearray");
        return NULL;
    }
    unsigned int producer = (unsigned int)producer_arg, kind = (unsigned int)kind_arg;
    Py_ssize_t flags = PyByteArray_GET_SIZE(writing);
    if ((Py_ssize_t)producer + 1 >= flags || PyByteArray_AS_STRING(writing)[producer] ||
        PyByteArray_AS_STRING(writing)[flags - 1])
        return PyLong_FromLong(-1);
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_ringfast.layout() was not called");
        return NULL;
    }
    base_ptr = PyLong_AsVoidPtr(c[0]);
    if (base_ptr == NULL && PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(payloads))
        return PyLong_FromLong(-1);

    Py_buffer views[MAX_PARTS];
    Py_ssize_t part_payload[MAX_PARTS];     /* which payload each part belongs to */
    Py_ssize_t payload_len[MAX_PARTS];
    int nparts = 0;
    Py_ssize_t npayloads = PyList_GET_SIZE(payloads);
    if (npayloads == 0 || npayloads > MAX_PARTS || (kind != KIND_BATCH && npayloads != 1))
        return PyLong_FromLong(-1);
    uint64_t length = 0;
    for (Py_ssize_t i = 0; i < npayloads; i++) {
        PyObject *p = PyList_GET_ITEM(payloads, i);
        payload_len[i] = 0;
        Py_ssize_t count = 1;
        int seq = PyList_CheckExact(p) || PyTuple_CheckExact(p);
        if (seq)
            count = PySequence_Fast_GET_SIZE(p);
        for (Py_ssize_t j = 0; j < count; j++) {
            PyObject *piece = seq ? PySequence_Fast_GET_ITEM(p, j) : p;
            if (nparts == MAX_PARTS || PyObject_GetBuffer(piece, &views[nparts], PyBUF_SIMPLE) < 0) {
                PyErr_Clear();
                release_all(views, nparts);
                return PyLong_FromLong(-1);
            }
            part_payload[nparts] = i;
            payload_len[i] += views[nparts].len;
            nparts++;
        }
        if (payload_len[i] > 0xFFFFFFFFLL) {
            release_all(views, nparts);
            return PyLong_FromLong(-1);
        }
        length += (uint64_t)payload_len[i] + (kind == KIND_BATCH ? 4 : 0);
    }
    uint64_t size = (HEADER + length + 7) & ~(uint64_t)7;
    if (size > cap / 2) {
        release_all(views, nparts);
        return PyLong_FromLong(-1);
    }

    uint64_t *q = (uint64_t *)base_ptr;
    uint64_t *s = q + slot;
    unsigned char *data = (unsigned char *)base_ptr + data_off;
    /* reserve: CAS the write cursor forward (Fig. 5e: never over unconsumed data) */
    __atomic_store_n(&s[P_RESERVING], 1, __ATOMIC_SEQ_CST);
    uint64_t w;
    for (;;) {
        w = __atomic_load_n(&q[W_WPOS], __ATOMIC_ACQUIRE);
        uint64_t tail = cap - w % cap;
        if (size > tail || w + size - __atomic_load_n(&q[W_RPOS], __ATOMIC_ACQUIRE) > cap) {
            __atomic_store_n(&s[P_RESERVING], 0, __ATOMIC_RELEASE);
            release_all(views, nparts);
            return PyLong_FromLong(-1);         /* wrap (Fig. 5d) or full: the general path decides */
        }
        if (__atomic_compare_exchange_n(&q[W_WPOS], &w, w + size, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    /* fill: header with status WRITING, then the tag (the header is valid only once it is there) */
    unsigned char *rec = data + w % cap;
    uint64_t seq = s[P_SEQ];
    uint32_t len32 = (uint32_t)length, target32 = (uint32_t)target, seq32 = (uint32_t)seq;
    uint16_t producer16 = (uint16_t)producer, kind16 = (uint16_t)kind;
    *(volatile uint64_t *)rec = WRITING;
    memcpy(rec + 8, &len32, 4);
    memcpy(rec + 12, &target32, 4);
    memcpy(rec + 16, &seq32, 4);
    memcpy(rec + 20, &producer16, 2);
    memcpy(rec + 22, &kind16, 2);
    __atomic_store_n((uint64_t *)(rec + 24), w ^ salt, __ATOMIC_RELEASE);
    __atomic_store_n(&s[P_RESERVING], 0, __ATOMIC_RELEASE);
    unsigned char *at = rec + HEADER;
    int k = 0;
    for (Py_ssize_t i = 0; i < npayloads; i++) {
        if (kind == KIND_BATCH) {              /* Fig. 5c: u32 length + bytes per payload */
            uint32_t n = (uint32_t)payload_len[i];
            memcpy(at, &n, 4);
            at += 4;
        }
        for (; k < nparts && part_payload[k] == i; k++) {
            memcpy(at, views[k].buf, (size_t)views[k].len);
            at += views[k].len;
        }
    }
    release_all(views, nparts);
    /* publish: status last, by CAS (the consumer may have declared the record failed) */
    uint64_t expected = WRITING;
    if (!__atomic_compare_exchange_n((uint64_t *)rec, &expected, READY, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return PyLong_FromLong(-2);
    q[W_LAST_PUBLISH] = monotonic_ns();     /* when it was published: the consumer's predictor learns from it */
    s[P_SEQ] = seq + 1;
    s[P_RECORDS] += 1;
    s[P_PAYLOADS] += (uint64_t)npayloads;
    s[P_BYTES] += length;
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&q[W_WAITERS], __ATOMIC_SEQ_CST) != 0);
}


/* Append (target, payload) to out: payload a bytes copy, or a slice of `view` (the segment's memoryview:
 * zero-copy, valid while the caller holds the record). */
static int
append_payload(PyObject *out, PyObject *target, PyObject *view, unsigned char *base, unsigned char *at,
               Py_ssize_t n)
{
    PyObject *payload = view == Py_None ? PyBytes_FromStringAndSize((const char *)at, n)
                                        : PySequence_GetSlice(view, at - base, at - base + n);
    if (payload == NULL)
        return -1;
    PyObject *item = PyTuple_Pack(2, target, payload);
    Py_DECREF(payload);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(out, item);
    Py_DECREF(item);
    return rc;
}

/* Per-producer order (invariant 5): the record's sequence number against the one expected next. */
static int
check_sequence(PyObject *expected, unsigned int producer, uint32_t seq, Py_ssize_t *seq_errors)
{
    PyObject *key = PyLong_FromUnsignedLong(producer);
    if (key == NULL)
        return -1;
    PyObject *want = PyDict_GetItemWithError(expected, key);
    if (want == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    if (want != NULL && PyLong_AsUnsignedLong(want) != seq)
        (*seq_errors)++;
    PyObject *next = PyLong_FromUnsignedLong((seq + 1) & 0xFFFFFFFFu);
    if (next == NULL || PyDict_SetItem(expected, key, next) < 0) {
        Py_XDECREF(next);
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(next);
    Py_DECREF(key);
    return 0;
}

/* Deliver consecutive READY records from the absolute position *scan (the right side of the consumer's
 * window, Fig. 5b, common case): append (target, payload) to `out` (bytes, or slices of `view` unless it
 * is None), mark them READ, check each producer's sequence in `expected` (a dict), and stop at anything
 * else (WRITING, FLUSH, FAILED, a missing header, the end of the lap) for ring.py's general loop.
 * Returns the records delivered (-1 on a Python error); advances *scan, counts *payloads and *seq_errors. */
static Py_ssize_t
deliver_ready(unsigned char *base, Py_ssize_t data_off, uint64_t cap, uint64_t salt, uint64_t *scan_io,
              uint64_t wpos, Py_ssize_t max_records, PyObject *out, PyObject *expected, PyObject *view,
              Py_ssize_t *seq_errors)
{
    uint64_t *q = (uint64_t *)base, scan = *scan_io, nbytes = 0;
    unsigned char *data = base + data_off;
    Py_ssize_t records = 0;
    while (scan < wpos && records < max_records) {
        uint64_t off = scan % cap;
        if (cap - off < HEADER)
            break;                                      /* implied flush: the general loop skips it */
        unsigned char *rec = data + off;
        if (__atomic_load_n((uint64_t *)(rec + 24), __ATOMIC_ACQUIRE) != (scan ^ salt))
            break;                                      /* reserved, header not written yet */
        if (__atomic_load_n((uint64_t *)rec, __ATOMIC_ACQUIRE) != READY)
            break;                                      /* WRITING / FLUSH / FAILED: the general loop */
        uint32_t length, target, seq;
        uint16_t producer, kind;
        memcpy(&length, rec + 8, 4);
        memcpy(&target, rec + 12, 4);
        memcpy(&seq, rec + 16, 4);
        memcpy(&producer, rec + 20, 2);
        memcpy(&kind, rec + 22, 2);
        PyObject *target_obj = PyLong_FromUnsignedLong(target);
        if (target_obj == NULL)
            return -1;
        unsigned char *at = rec + HEADER, *end = at + length;
        int ok = 1;
        if (kind == KIND_BATCH) {
            while (ok && at + 4 <= end) {
                uint32_t n;
                memcpy(&n, at, 4);
                at += 4;
                if (at + n > end) {
                    ok = 0;
                    break;
                }
                if (append_payload(out, target_obj, view, base, at, (Py_ssize_t)n) < 0) {
                    Py_DECREF(target_obj);
                    return -1;
                }
                at += n;
            }
        } else if (append_payload(out, target_obj, view, base, at, (Py_ssize_t)length) < 0) {
            Py_DECREF(target_obj);
            return -1;
        }
        Py_DECREF(target_obj);
        if (!ok) {
            PyErr_Format(PyExc_RuntimeError, "ring record at %llu has a malformed batch", scan);
            return -1;
        }
        __atomic_store_n((uint64_t *)rec, READ_ST, __ATOMIC_RELEASE);
        nbytes += length;
        if (check_sequence(expected, producer, seq, seq_errors) < 0)
            return -1;
        records++;
        scan += (HEADER + length + 7) & ~(uint64_t)7;
    }
    q[W_BYTES_READ] += nbytes;
    *scan_io = scan;
    return records;
}

/* read_ready(base, data_off, cap, salt, scan, wpos, max_records, out, expected_seq, view)
 * deliver_ready() for ring.py's read: returns (new scan, records delivered, sequence errors). */
static PyObject *
read_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned char *base;
    Py_ssize_t data_off, max_records;
    unsigned long long cap, salt, scan, wpos;
    if (!nargs_is(nargs, 10, "read_ready") || ring_args(args, &base, &data_off, &cap, &salt, &scan) ||
        u64_arg(args, 5, &wpos) || ssize_arg(args, 6, &max_records))
        return NULL;
    PyObject *out = args[7], *expected = args[8], *view = args[9];
    if (!PyList_CheckExact(out) || !PyDict_CheckExact(expected)) {
        PyErr_SetString(PyExc_TypeError, "read_ready: out must be a list and expected_seq a dict");
        return NULL;
    }
    uint64_t at = scan;
    Py_ssize_t seq_errors = 0;
    Py_ssize_t records = deliver_ready(base, data_off, cap, salt, &at, wpos, max_records, out,
                                       expected, view, &seq_errors);
    if (records < 0)
        return NULL;
    return Py_BuildValue("(Knn)", (unsigned long long)at, records, seq_errors);
}

/* What the poll found at the scan position. */
enum { POLL_TIMEOUT = 0, POLL_READY = 1, POLL_GENERAL = 2 };

/* Is the record at `scan` deliverable (READY), still coming (reserved / WRITING with nothing READY right
 * behind it), or something only ring.py's general loop handles (a flush, a failed record, a READY record
 * behind a WRITING one: Fig. 5b never waits behind a record still being written)? */
static int
look_at(unsigned char *data, uint64_t cap, uint64_t salt, uint64_t scan, uint64_t wpos)
{
    uint64_t off = scan % cap;
    if (cap - off < HEADER)
        return POLL_GENERAL;
    unsigned char *rec = data + off;
    if (__atomic_load_n((uint64_t *)(rec + 24), __ATOMIC_ACQUIRE) != (scan ^ salt))
        return -1;                                      /* reserved, header not written yet: still coming */
    uint64_t status = __atomic_load_n((uint64_t *)rec, __ATOMIC_ACQUIRE);
    if (status == READY)
        return POLL_READY;
    if (status != WRITING)
        return POLL_GENERAL;
    uint32_t length;
    memcpy(&length, rec + 8, 4);
    uint64_t next = scan + ((HEADER + length + 7) & ~(uint64_t)7);
    if (next < wpos && look_at(data, cap, salt, next, wpos) == POLL_READY)
        return POLL_GENERAL;
    return -1;
}

/* The nap: announce (a full barrier; a producer that publishes after it sees the flag, clears it and
 * writes a byte to the pipe), look once more, then sleep on the wake pipe until `until_ns`. Runs without
 * the GIL. Returns 1 when data was there before sleeping (*found is the look's result), else 0. */
static int
nap_on_pipe(uint64_t *q, unsigned char *data, uint64_t cap, uint64_t salt, uint64_t scan, int fd,
            uint64_t until_ns, int *found)
{
    __atomic_store_n(&q[W_WAITERS], 1, __ATOMIC_SEQ_CST);
    uint64_t wpos = __atomic_load_n(&q[W_WPOS], __ATOMIC_SEQ_CST);
    if (scan < wpos && (*found = look_at(data, cap, salt, scan, wpos)) >= 0)
        return 1;
    uint64_t now = monotonic_ns();
    if (now >= until_ns)
        return 0;
    struct pollfd pfd = {fd, POLLIN, 0};
    struct timespec wait = {(time_t)((until_ns - now) / 1000000000u), (long)((until_ns - now) % 1000000000u)};
    if (ppoll(&pfd, 1, &wait, NULL) <= 0 || !(pfd.revents & POLLIN))
        return 0;
    char drain[4096];                                   /* more bytes only end the next nap early */
    if (read(fd, drain, sizeof drain) < 0) {
        /* nothing to do: the pipe is non-blocking and another reader may have drained it */
    }
    return 0;
}

/* poll_read(base, data_off, cap, salt, scan, max_records, out, expected_seq, view, views_out, stop_ns,
 *           nap_fd, nap_until_ns)
 * A waiting consumer's nap and polling window (hybrid polling, see arrivals.py) in one call. Without
 * the GIL: when nap_fd >= 0, nap announced on the wake pipe nap_fd until CLOCK_MONOTONIC passes
 * nap_until_ns (or a producer wakes it); then, unannounced, look at the scan position until a record is
 * READY there, something needs the general path, or the clock passes stop_ns, yielding the CPU between
 * looks (it always looks once). Then, with the GIL, deliver like read_ready and count the read. Why one
 * call: the record arrives while this runs, so the code that delivers it is this call's own (warm) code
 * rather than interpreter paths that last ran a gap ago (see the top comment).
 * max_records = 0 only looks. Views (slices of `view`) are also appended to `views_out` unless it is None.
 * The caller holds the consumer's lock, which close() takes before unmapping.
 * Returns (state, new scan, records): state 0 timeout, 1 ready (records delivered, or found when
 * max_records is 0), 2 take the general path. */
static PyObject *
poll_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned char *base;
    Py_ssize_t data_off, max_records, nap_fd;
    unsigned long long cap, salt, scan, stop_ns, nap_until_ns;
    if (!nargs_is(nargs, 13, "poll_read") || ring_args(args, &base, &data_off, &cap, &salt, &scan) ||
        ssize_arg(args, 5, &max_records) || u64_arg(args, 10, &stop_ns) || ssize_arg(args, 11, &nap_fd) ||
        u64_arg(args, 12, &nap_until_ns))
        return NULL;
    PyObject *out = args[6], *expected = args[7], *view = args[8], *views_out = args[9];
    if (!PyList_CheckExact(out) || !PyDict_CheckExact(expected) || (views_out != Py_None && !PyList_CheckExact(views_out))) {
        PyErr_SetString(PyExc_TypeError, "poll_read: out and views_out must be lists, expected_seq a dict");
        return NULL;
    }
    unsigned char *data = base + data_off;
    uint64_t *q = (uint64_t *)base;
    uint64_t wpos = 0;
    int state = POLL_TIMEOUT, data_first = 0, found = -1;
    Py_BEGIN_ALLOW_THREADS
    if (nap_fd >= 0) {
        data_first = nap_on_pipe(q, data, cap, salt, scan, (int)nap_fd, nap_until_ns, &found);
        if (data_first) {
            state = found;
            wpos = __atomic_load_n(&q[W_WPOS], __ATOMIC_ACQUIRE);
        } else if (stop_ns > monotonic_ns()) {
            __atomic_store_n(&q[W_WAITERS], 0, __ATOMIC_SEQ_CST);   /* unannounced: producers skip the wake */
        }
    }
    while (!data_first) {
        wpos = __atomic_load_n(&q[W_WPOS], __ATOMIC_ACQUIRE);
        if (scan < wpos && (found = look_at(data, cap, salt, scan, wpos)) >= 0) {
            state = found;
            break;
        }
        if (monotonic_ns() >= stop_ns)
            break;
        sched_yield();                              /* a producer woken on this CPU runs at once */
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t records = 0, seq_errors = 0, first = PyList_GET_SIZE(out);
    if (state == POLL_READY && max_records > 0) {
        uint64_t at = scan;
        records = deliver_ready(base, data_off, cap, salt, &at, wpos, max_records, out, expected, view,
                                &seq_errors);
        if (records < 0)
            return NULL;
        scan = at;
        Py_ssize_t payloads = PyList_GET_SIZE(out) - first;
        for (Py_ssize_t i = first; views_out != Py_None && i < PyList_GET_SIZE(out); i++)
            if (PyList_Append(views_out, PyTuple_GET_ITEM(PyList_GET_ITEM(out, i), 1)) < 0)
                return NULL;
        q[W_RECORDS_READ] += (uint64_t)records;
        q[W_PAYLOADS_READ] += (uint64_t)payloads;
        q[W_SEQUENCE_ERRORS] += (uint64_t)seq_errors;
    }
    PyObject *result = PyTuple_New(3);             /* not Py_BuildValue: its format parser runs cold */
    if (result == NULL)
        return NULL;
    PyTuple_SET_ITEM(result, 0, PyLong_FromLong(state));
    PyTuple_SET_ITEM(result, 1, PyLong_FromUnsignedLongLong(scan));
    PyTuple_SET_ITEM(result, 2, PyLong_FromSsize_t(records));
    for (int i = 0; i < 3; i++)
        if (PyTuple_GET_ITEM(result, i) == NULL) {
            Py_DECREF(result);
            return NULL;
        }
    return result;
}

static PyMethodDef methods[] = {
    {"layout", layout, METH_VARARGS, "Hand over the ring layout (word indices, statuses) once."},
    {"try_write", (PyCFunction)(void (*)(void))try_write, METH_FASTCALL,
     "Append one record in the common case; >= 0 (consumer asleep flag) when published, -1: general path, "
     "-2: declared failed, write again."},
    {"read_ready", (PyCFunction)(void (*)(void))read_ready, METH_FASTCALL,
     "Deliver consecutive READY records from a scan position; (new scan, records, sequence errors)."},
    {"poll_read", (PyCFunction)(void (*)(void))poll_read, METH_FASTCALL,
     "Nap on the wake pipe, then poll (without the GIL) until a record is ready or a deadline, then deliver; "
     "(state, new scan, records)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ringfast",
                                    "The shared ring's hot paths in C (optional; ring.py falls back to Python).",
                                    -1, methods};

PyMODINIT_FUNC
PyInit__ringfast(void)
{
    return PyModule_Create(&module);
}
