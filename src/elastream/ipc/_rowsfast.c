/* Lists of flat numeric tuples as one block of 8-byte values, for the rings' codec (elastream/ipc/codec.py).
 *
 * Why: pickle spends ~130 ns writing and ~150 ns reading each (int, int) tuple of a list (opcodes, the
 * memo), while the values themselves are 16 bytes. A keyed split sends every tuple of another process's
 * partitions through a ring and its replica sends every output back, so a two-process `bench keyed` run
 * pickled 200,000 tuples each way. Here writing a row is a type check and a store per field, and reading
 * it is the tuple and its numbers: nothing else.
 *
 * Which lists: an exact list whose items are all exact tuples of one arity (1..MAX_ARITY), each column
 * holding only exact ints that fit in 64 bits or only exact floats, as the first row sets it. Anything
 * else (a bool, a bigger int, a str, a tuple subclass, a ragged row) answers None and the caller pickles
 * the list as before, so what comes out is always equal to what went in, types included.
 *
 * Layout (native byte order: the rings join processes of one machine): u32 rows, u8 arity, 3 bytes zero,
 * MAX_ARITY column codes ('q' or 'd', zero-padded), then rows x arity 8-byte values, row after row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_ARITY 16
#define HEADER (8 + MAX_ARITY)
#define CODE_INT 'q'
#define CODE_FLOAT 'd'

/* The column codes of a row, or 0 when it is not a flat numeric tuple. */
static int
row_codes(PyObject *row, char *codes, Py_ssize_t *arity)
{
    if (!PyTuple_CheckExact(row))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(row);
    if (n < 1 || n > MAX_ARITY)
        return 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *v = PyTuple_GET_ITEM(row, j);
        if (PyLong_CheckExact(v))
            codes[j] = CODE_INT;
        else if (PyFloat_CheckExact(v))
            codes[j] = CODE_FLOAT;
        else
            return 0;
    }
    *arity = n;
    return 1;
}

/* Store one row's values at out; 0 when the row does not fit the columns. */
static int
store_row(PyObject *row, const char *codes, Py_ssize_t arity, char *out)
{
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != arity)
        return 0;
    for (Py_ssize_t j = 0; j < arity; j++) {
        PyObject *v = PyTuple_GET_ITEM(row, j);
        if (codes[j] == CODE_INT) {
            if (!PyLong_CheckExact(v))
                return 0;
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow)
                return 0;
            memcpy(out + 8 * j, &x, 8);
        } else {
            if (!PyFloat_CheckExact(v))
                return 0;
            double d = PyFloat_AS_DOUBLE(v);
            memcpy(out + 8 * j, &d, 8);
        }
    }
    return 1;
}

/* The packed bytes of `items` (an exact list of at least `min_rows` rows), or None. */
static PyObject *
pack_list(PyObject *items, Py_ssize_t min_rows)
{
    Py_ssize_t rows = PyList_GET_SIZE(items);
    char codes[MAX_ARITY] = {0};
    Py_ssize_t arity = 0;
    if (rows < min_rows || rows > UINT32_MAX || !row_codes(PyList_GET_ITEM(items, 0), codes, &arity))
        Py_RETURN_NONE;
    PyObject *packed = PyBytes_FromStringAndSize(NULL, HEADER + rows * arity * 8);
    if (packed == NULL)
        return NULL;
    char *base = PyBytes_AS_STRING(packed);
    uint32_t count = (uint32_t)rows;
    memset(base, 0, HEADER);
    memcpy(base, &count, 4);
    base[4] = (char)arity;
    memcpy(base + 8, codes, (size_t)arity);
    char *out = base + HEADER;
    for (Py_ssize_t i = 0; i < rows; i++, out += 8 * arity) {
        if (!store_row(PyList_GET_ITEM(items, i), codes, arity, out)) {
            Py_DECREF(packed);
            Py_RETURN_NONE;
        }
    }
    return packed;
}

/* Check the argument count against `usage` and read the minimum rows (args[1], at least 1). */
static int
parse_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected, const char *usage, Py_ssize_t *min_rows)
{
    if (nargs != expected) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *min_rows = PyLong_AsSsize_t(args[1]);
    if (*min_rows == -1 && PyErr_Occurred())
        return -1;
    if (*min_rows < 1)
        *min_rows = 1;
    return 0;
}

static PyObject *
pack_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t min_rows;
    if (parse_args(args, nargs, 2, "pack_rows(items, min_rows)", &min_rows) < 0)
        return NULL;
    if (!PyList_CheckExact(args[0]))
        Py_RETURN_NONE;
    return pack_list(args[0], min_rows);
}

/* A copy of tuple `msg` whose list fields of flat rows are wrap(packed bytes); NULL with no error when
 * no field packs (the message stays as it is). */
static PyObject *
pack_message(PyObject *msg, Py_ssize_t min_rows, PyObject *wrap)
{
    Py_ssize_t n = PyTuple_GET_SIZE(msg);
    PyObject *copy = NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *field = PyTuple_GET_ITEM(msg, j);
        if (!PyList_CheckExact(field) || PyList_GET_SIZE(field) < min_rows)
            continue;
        PyObject *packed = pack_list(field, min_rows);
        if (packed == NULL)
            goto fail;
        if (packed == Py_None) {
            Py_DECREF(packed);
            continue;
        }
        PyObject *wrapped = PyObject_CallOneArg(wrap, packed);
        Py_DECREF(packed);
        if (wrapped == NULL)
            goto fail;
        if (copy == NULL) {  /* a new tuple: a whole-range slice of a tuple is the tuple itself */
            copy = PyTuple_New(n);
            if (copy == NULL) {
                Py_DECREF(wrapped);
                goto fail;
            }
            for (Py_ssize_t k = 0; k < n; k++) {
                PyObject *item = PyTuple_GET_ITEM(msg, k);
                Py_INCREF(item);
                PyTuple_SET_ITEM(copy, k, item);
            }
        }
        PyObject *old = PyTuple_GET_ITEM(copy, j);
        PyTuple_SET_ITEM(copy, j, wrapped);
        Py_DECREF(old);
    }
    return copy;
fail:
    Py_XDECREF(copy);
    return NULL;
}

/* Whether some tuple of `messages` has a list field that may pack (long enough, a flat numeric first
 * row): most batches have none, and they are left without copying. Calls no Python code. */
static int
any_candidate(PyObject *messages, Py_ssize_t min_rows)
{
    char codes[MAX_ARITY];
    Py_ssize_t arity;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        if (!PyTuple_CheckExact(msg))
            continue;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(msg); j++) {
            PyObject *field = PyTuple_GET_ITEM(msg, j);
            if (PyList_CheckExact(field) && PyList_GET_SIZE(field) >= min_rows
                    && row_codes(PyList_GET_ITEM(field, 0), codes, &arity))
                return 1;
        }
    }
    return 0;
}

static PyObject *
pack_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t min_rows;
    if (parse_args(args, nargs, 3, "pack_fields(messages, min_rows, wrap)", &min_rows) < 0)
        return NULL;
    PyObject *messages = args[0], *wrap = args[2];
    if (!PyList_CheckExact(messages) || !any_candidate(messages, min_rows))
        Py_RETURN_NONE;
    /* Work on a copy of our own: wrap() runs Python code, during which another thread could change the
     * caller's list; the copy holds every message and becomes the result. */
    PyObject *result = PyList_GetSlice(messages, 0, PyList_GET_SIZE(messages));
    if (result == NULL)
        return NULL;
    int changed = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(result); i++) {
        PyObject *msg = PyList_GET_ITEM(result, i);
        if (!PyTuple_CheckExact(msg))
            continue;
        PyObject *packed = pack_message(msg, min_rows, wrap);
        if (packed == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        PyList_SET_ITEM(result, i, packed);
        Py_DECREF(msg);
        changed = 1;
    }
    if (changed)
        return result;
    Py_DECREF(result);
    Py_RETURN_NONE;
fail:
    Py_DECREF(result);
    return NULL;
}

static PyObject *
unpack_rows(PyObject *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    const char *base = (const char *)view.buf;
    uint32_t rows;
    Py_ssize_t arity;
    if (view.len < HEADER)
        goto bad;
    memcpy(&rows, base, 4);
    arity = (unsigned char)base[4];
    if (arity < 1 || arity > MAX_ARITY || view.len != HEADER + (Py_ssize_t)rows * arity * 8)
        goto bad;
    const char *codes = base + 8;
    for (Py_ssize_t j = 0; j < arity; j++)
        if (codes[j] != CODE_INT && codes[j] != CODE_FLOAT)
            goto bad;
    result = PyList_New(rows);
    if (result == NULL)
        goto done;
    const char *in = base + HEADER;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)rows; i++) {
        PyObject *row = PyTuple_New(arity);
        if (row == NULL)
            goto fail;
        PyList_SET_ITEM(result, i, row);
        for (Py_ssize_t j = 0; j < arity; j++, in += 8) {
            PyObject *v;
            if (codes[j] == CODE_INT) {
                long long x;
                memcpy(&x, in, 8);
                v = PyLong_FromLongLong(x);
            } else {
                double d;
                memcpy(&d, in, 8);
                v = PyFloat_FromDouble(d);
            }
            if (v == NULL)
                goto fail;
            PyTuple_SET_ITEM(row, j, v);
        }
    }
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "not a block of packed rows");
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"pack_rows", (PyCFunction)(void (*)(void))pack_rows, METH_FASTCALL,
     "pack_rows(items, min_rows): the packed bytes of a list of flat numeric tuples, or None."},
    {"pack_fields", (PyCFunction)(void (*)(void))pack_fields, METH_FASTCALL,
     "pack_fields(messages, min_rows, wrap): a copy of the list whose tuples' list fields of flat numeric "
     "rows are wrap(packed bytes), or None when nothing packs."},
    {"unpack_rows", unpack_rows, METH_O, "unpack_rows(buffer): the list of tuples of a packed block."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rowsfast",
                                    "Flat numeric rows packed for the rings (optional; codec.py pickles them "
                                    "without it).", -1, methods};

PyMODINIT_FUNC
PyInit__rowsfast(void)
{
    return PyModule_Create(&module);
}
