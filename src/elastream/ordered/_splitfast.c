/* The keyed split's per-tuple loop in C (elastream.ordered.routing, C-Stream §4.2).
 *
 * cut(items, key, table, partitions, replicas, load, seen, keys) -> (pieces, offsets, held)
 *
 * Tuple x at position j goes to partition (key group) p = stable_hash(key(x)) mod partitions
 * (Python's modulo: never negative) and to replica table[p]: appended to pieces[r], j to
 * offsets[r]. A partition whose table entry is negative is moving: its tuples go to
 * held[p] = (offsets, [tuples]) instead. Offsets are array('i') objects: no int object
 * per tuple, and they cross processes as one block of bytes. With ``load`` (a list of ints), each
 * partition's count of tuples is added to it; with ``seen`` (a dict used as an ordered
 * set) and ``keys`` (None, or one list per partition), a key not yet in ``seen`` is added to it
 * and to keys[p]. routing.cut_by_key_python is the same loop in Python, run when the
 * extension is not built; both must give the same result (tests/unit/test_split_merge.py).
 *
 * The hash is elastream.operators.keygroups.stable_hash, so that the split and the replicas'
 * export_state agree on a key's group in every process: an exact int hashes as Python's hash, an
 * exact str as the CRC-32 (IEEE, as zlib.crc32) of its UTF-8 bytes, exact bytes as their CRC-32;
 * anything else (and a str that UTF-8 cannot encode: lone surrogates) goes to the Python function.
 *
 * place(slots, offsets, outputs) -> None
 *
 * The merge's reassembly of one piece: slots[offsets[i]] = outputs[i] for every i
 * (offsets an array('i') or a list of ints; routing.place_python is the same).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320): the byte-at-a-time table, filled at import. */
static uint32_t crc_table[256];

static void fill_crc_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int bit = 0; bit < 8; bit++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(const unsigned char *data, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++)
        c = crc_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* keygroups.stable_hash, imported on first use (for keys that are not exact int, str or bytes). */
static PyObject *python_stable_hash = NULL;

static int hash_in_python(PyObject *k, long long *out)
{
    if (python_stable_hash == NULL) {
        PyObject *module = PyImport_ImportModule("elastream.operators.keygroups");
        if (module == NULL)
            return -1;
        python_stable_hash = PyObject_GetAttrString(module, "stable_hash");
        Py_DECREF(module);
        if (python_stable_hash == NULL)
            return -1;
    }
    PyObject *h = PyObject_CallOneArg(python_stable_hash, k);
    if (h == NULL)
        return -1;
    *out = PyLong_AsLongLong(h);
    Py_DECREF(h);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* stable_hash(k) (elastream.operators.keygroups): the same in every process and run. */
static int stable_hash(PyObject *k, long long *out)
{
    if (PyLong_CheckExact(k)) {
        Py_hash_t h = PyObject_Hash(k);
        *out = (long long)h;
        return (h == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyUnicode_CheckExact(k)) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(k, &n);
        if (utf8 == NULL) { /* lone surrogates: the Python function encodes with surrogatepass */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return -1;
            PyErr_Clear();
            return hash_in_python(k, out);
        }
        *out = (long long)crc32_of((const unsigned char *)utf8, n);
        return 0;
    }
    if (PyBytes_CheckExact(k)) {
        *out = (long long)crc32_of((const unsigned char *)PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k));
        return 0;
    }
    return hash_in_python(k, out);
}

static int append_new_list(PyObject *outer)
{
    PyObject *inner = PyList_New(0);
    if (inner == NULL)
        return -1;
    int rc = PyList_Append(outer, inner);
    Py_DECREF(inner);
    return rc;
}

static PyObject *new_lists(Py_ssize_t n)
{
    PyObject *outer = PyList_New(0);
    if (outer == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (append_new_list(outer) < 0) {
            Py_DECREF(outer);
            return NULL;
        }
    }
    return outer;
}

/* held[p], created as ([], []) on first use; a borrowed reference. */
static PyObject *held_group(PyObject *held, Py_ssize_t p)
{
    PyObject *pkey = PyLong_FromSsize_t(p);
    if (pkey == NULL)
        return NULL;
    PyObject *group = PyDict_GetItemWithError(held, pkey);
    if (group == NULL && !PyErr_Occurred()) {
        PyObject *offs = PyList_New(0), *xs = PyList_New(0);
        if (offs != NULL && xs != NULL) {
            group = PyTuple_Pack(2, offs, xs);
            if (group != NULL) {
                if (PyDict_SetItem(held, pkey, group) < 0) {
                    Py_CLEAR(group);
                } else {
                    Py_DECREF(group); /* the dict keeps it alive */
                }
            }
        }
        Py_XDECREF(offs);
        Py_XDECREF(xs);
    }
    Py_DECREF(pkey);
    return group;
}

static int note_new_key(PyObject *seen, PyObject *keys, Py_ssize_t p, PyObject *k)
{
    int known = PyDict_Contains(seen, k);
    if (known != 0)
        return known < 0 ? -1 : 0;
    if (PyDict_SetItem(seen, k, Py_None) < 0)
        return -1;
    return keys == Py_None ? 0 : PyList_Append(PyList_GET_ITEM(keys, p), k);
}

static int add_counts(PyObject *load, const Py_ssize_t *counts, Py_ssize_t partitions)
{
    for (Py_ssize_t p = 0; p < partitions; p++) {
        if (counts[p] == 0)
            continue;
        PyObject *old = PyList_GET_ITEM(load, p);
        PyObject *add = PyLong_FromSsize_t(counts[p]);
        if (add == NULL)
            return -1;
        PyObject *sum = PyNumber_Add(old, add);
        Py_DECREF(add);
        if (sum == NULL)
            return -1;
        PyList_SetItem(load, p, sum); /* steals sum, releases old */
    }
    return 0;
}

static int route_one(PyObject *x, Py_ssize_t j, PyObject *key, const long *table, Py_ssize_t partitions,
                     Py_ssize_t *counts, PyObject *seen, PyObject *keys, PyObject *pieces, int *dest,
                     PyObject *held)
{
    PyObject *k = PyObject_CallOneArg(key, x);
    if (k == NULL)
        return -1;
    long long h;
    if (stable_hash(k, &h) < 0) {
        Py_DECREF(k);
        return -1;
    }
    Py_ssize_t p = (Py_ssize_t)(h % (long long)partitions);
    if (p < 0)
        p += partitions;
    if (seen != Py_None && note_new_key(seen, keys, p, k) < 0) {
        Py_DECREF(k);
        return -1;
    }
    Py_DECREF(k);
    counts[p]++;
    long r = table[p];
    if (r >= 0) {
        dest[j] = (int)r;
        return PyList_Append(PyList_GET_ITEM(pieces, r), x);
    }
    dest[j] = -1;
    PyObject *group = held_group(held, p);
    if (group == NULL)
        return -1;
    PyObject *offset = PyLong_FromSsize_t(j);
    if (offset == NULL)
        return -1;
    int rc = PyList_Append(PyTuple_GET_ITEM(group, 0), offset);
    Py_DECREF(offset);
    return rc == 0 ? PyList_Append(PyTuple_GET_ITEM(group, 1), x) : rc;
}

/* array('i', data): the offsets type; ``data`` a bytes object or a list of ints. */
static PyObject *int_array(PyObject *data)
{
    static PyObject *array_type = NULL;
    if (array_type == NULL) {
        PyObject *module = PyImport_ImportModule("array");
        if (module == NULL)
            return NULL;
        array_type = PyObject_GetAttrString(module, "array");
        Py_DECREF(module);
        if (array_type == NULL)
            return NULL;
    }
    return PyObject_CallFunction(array_type, "sO", "i", data);
}

/* offsets[r]: array('i') of the positions j with dest[j] == r, for every replica r. */
static PyObject *offset_arrays(const int *dest, Py_ssize_t n, Py_ssize_t replicas)
{
    Py_ssize_t *sizes = PyMem_New(Py_ssize_t, replicas);
    int **cursors = PyMem_New(int *, replicas);
    PyObject *blocks = PyList_New(replicas), *result = NULL;
    if (sizes == NULL || cursors == NULL || blocks == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    memset(sizes, 0, sizeof(Py_ssize_t) * replicas);
    for (Py_ssize_t j = 0; j < n; j++)
        if (dest[j] >= 0)
            sizes[dest[j]]++;
    for (Py_ssize_t r = 0; r < replicas; r++) {
        PyObject *block = PyBytes_FromStringAndSize(NULL, sizes[r] * (Py_ssize_t)sizeof(int));
        if (block == NULL)
            goto done;
        PyList_SET_ITEM(blocks, r, block);
        cursors[r] = (int *)PyBytes_AS_STRING(block);
    }
    for (Py_ssize_t j = 0; j < n; j++)
        if (dest[j] >= 0)
            *cursors[dest[j]]++ = (int)j;
    result = PyList_New(replicas);
    if (result == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < replicas; r++) {
        PyObject *offsets = int_array(PyList_GET_ITEM(blocks, r));
        if (offsets == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, r, offsets);
    }
done:
    PyMem_Free(sizes);
    PyMem_Free(cursors);
    Py_XDECREF(blocks);
    return result;
}

/* held[p] = (list of offsets, tuples) -> (array('i') of offsets, tuples). */
static int held_arrays(PyObject *held)
{
    PyObject *p, *group;
    Py_ssize_t pos = 0;
    while (PyDict_Next(held, &pos, &p, &group)) {
        PyObject *offsets = int_array(PyTuple_GET_ITEM(group, 0));
        if (offsets == NULL)
            return -1;
        PyObject *fixed = PyTuple_Pack(2, offsets, PyTuple_GET_ITEM(group, 1));
        Py_DECREF(offsets);
        if (fixed == NULL || PyDict_SetItem(held, p, fixed) < 0) { /* replacing a value: no resize */
            Py_XDECREF(fixed);
            return -1;
        }
        Py_DECREF(fixed);
    }
    return 0;
}

static long *read_table(PyObject *table, Py_ssize_t partitions, Py_ssize_t replicas)
{
    if (!PyList_Check(table) || PyList_GET_SIZE(table) != partitions) {
        PyErr_SetString(PyExc_ValueError, "table must be a list with one replica per partition");
        return NULL;
    }
    long *out = PyMem_New(long, partitions);
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t p = 0; p < partitions; p++) {
        long r = PyLong_AsLong(PyList_GET_ITEM(table, p));
        if ((r == -1 && PyErr_Occurred()) || r >= replicas) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "table names a replica out of range");
            PyMem_Free(out);
            return NULL;
        }
        out[p] = r;
    }
    return out;
}

static int check_arguments(PyObject *items, Py_ssize_t partitions, Py_ssize_t replicas, PyObject *load,
                           PyObject *seen, PyObject *keys)
{
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "items must be a list");
        return -1;
    }
    if (partitions < 1 || replicas < 1) {
        PyErr_SetString(PyExc_ValueError, "partitions and replicas must be >= 1");
        return -1;
    }
    if (load != Py_None && (!PyList_Check(load) || PyList_GET_SIZE(load) != partitions)) {
        PyErr_SetString(PyExc_ValueError, "load must be None or a list with one count per partition");
        return -1;
    }
    if (seen != Py_None && (!PyDict_Check(seen) ||
                            (keys != Py_None && (!PyList_Check(keys) || PyList_GET_SIZE(keys) != partitions)))) {
        PyErr_SetString(PyExc_ValueError,
                        "seen must be None or a dict, with keys None or a list of one list per partition");
        return -1;
    }
    if (seen != Py_None && keys != Py_None) {
        for (Py_ssize_t p = 0; p < partitions; p++) {
            if (!PyList_Check(PyList_GET_ITEM(keys, p))) {
                PyErr_SetString(PyExc_TypeError, "keys must hold one list per partition");
                return -1;
            }
        }
    }
    return 0;
}

static PyObject *cut(PyObject *self, PyObject *args)
{
    PyObject *items, *key, *table_list, *load, *seen, *keys;
    Py_ssize_t partitions, replicas;
    if (!PyArg_ParseTuple(args, "OOOnnOOO:cut", &items, &key, &table_list, &partitions, &replicas, &load, &seen,
                          &keys))
        return NULL;
    if (check_arguments(items, partitions, replicas, load, seen, keys) < 0)
        return NULL;
    long *table = read_table(table_list, partitions, replicas);
    if (table == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n > INT_MAX) {
        PyMem_Free(table);
        PyErr_SetString(PyExc_OverflowError, "a batch holds more tuples than an int offset can name");
        return NULL;
    }
    Py_ssize_t *counts = PyMem_New(Py_ssize_t, partitions);
    int *dest = PyMem_New(int, n > 0 ? n : 1);
    PyObject *pieces = new_lists(replicas), *offsets = NULL, *held = PyDict_New();
    PyObject *result = NULL;
    if (counts == NULL || dest == NULL || pieces == NULL || held == NULL)
        goto done;
    memset(counts, 0, sizeof(Py_ssize_t) * partitions);
    /* items is the split's own list (popped from its port): the key function may be user code doing
     * anything, so the length is re-read at every step and x held while it runs. */
    for (Py_ssize_t j = 0; j < n && j < PyList_GET_SIZE(items); j++) {
        PyObject *x = PyList_GET_ITEM(items, j);
        Py_INCREF(x);
        int rc = route_one(x, j, key, table, partitions, counts, seen, keys, pieces, dest, held);
        Py_DECREF(x);
        if (rc < 0)
            goto done;
    }
    if (PyList_GET_SIZE(items) != n) {
        PyErr_SetString(PyExc_RuntimeError, "the batch changed size while it was cut");
        goto done;
    }
    offsets = offset_arrays(dest, n, replicas);
    if (offsets == NULL || held_arrays(held) < 0)
        goto done;
    if (load != Py_None && add_counts(load, counts, partitions) < 0)
        goto done;
    result = PyTuple_Pack(3, pieces, offsets, held);
done:
    if ((counts == NULL || dest == NULL) && !PyErr_Occurred())
        PyErr_NoMemory();
    PyMem_Free(table);
    PyMem_Free(counts);
    PyMem_Free(dest);
    Py_XDECREF(pieces);
    Py_XDECREF(offsets);
    Py_XDECREF(held);
    return result;
}

static int place_one(PyObject *slots, Py_ssize_t offset, PyObject *item)
{
    if (offset < 0 || offset >= PyList_GET_SIZE(slots)) {
        PyErr_Format(PyExc_IndexError, "offset %zd outside the batch of %zd", offset, PyList_GET_SIZE(slots));
        return -1;
    }
    Py_INCREF(item);
    PyList_SetItem(slots, offset, item); /* steals item, releases the old slot */
    return 0;
}

static PyObject *place(PyObject *self, PyObject *args)
{
    PyObject *slots, *offsets, *outputs;
    if (!PyArg_ParseTuple(args, "O!OO!:place", &PyList_Type, &slots, &offsets, &PyList_Type, &outputs))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(outputs);
    if (PyList_Check(offsets)) {
        if (PyList_GET_SIZE(offsets) != n) {
            PyErr_SetString(PyExc_ValueError, "a piece needs one offset per output");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t offset = PyLong_AsSsize_t(PyList_GET_ITEM(offsets, i));
            if ((offset == -1 && PyErr_Occurred()) || place_one(slots, offset, PyList_GET_ITEM(outputs, i)) < 0)
                return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(offsets, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    int ok = view.itemsize == (Py_ssize_t)sizeof(int) && view.format != NULL && strcmp(view.format, "i") == 0;
    if (!ok || view.len / view.itemsize != n) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, ok ? "a piece needs one offset per output" : "offsets must be array('i')");
        return NULL;
    }
    const int *at = (const int *)view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (place_one(slots, at[i], PyList_GET_ITEM(outputs, i)) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS,
     "cut(items, key, table, partitions, replicas, load, seen, keys) -> (pieces, offsets, held): "
     "the keyed split's routing of one batch (see the module comment)."},
    {"place", place, METH_VARARGS,
     "place(slots, offsets, outputs) -> None: slots[offsets[i]] = outputs[i] (the merge's reassembly)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_splitfast", "The keyed split's routing loop and the merge's reassembly in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__splitfast(void)
{
    fill_crc_table();
    return PyModule_Create(&module);
}
