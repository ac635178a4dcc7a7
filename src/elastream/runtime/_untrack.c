/* Untrack tuples of atomic values from the cycle collector (elastream.runtime.gc_tuning).
 *
 * untrack_atomic(items: list) -> int
 *
 * A tuple whose items are all atomic (no GC type: int, float, str, bytes, None, ...)
 * or tuples already untracked can never be part of a reference cycle: it is immutable.
 * CPython's collector untracks such tuples itself, but only when a collection walks
 * them; a sink that keeps every result (Collect) would have each of them walked once
 * by a young collection first. This does the same test (_PyTuple_MaybeUntrack's) when
 * the tuples are handed over, while they are still in the cache. Tuples nested up to
 * MAX_DEPTH deep are untracked first where they qualify. Returns how many tuples it
 * untracked; anything that is not a tuple is left alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_DEPTH 3

static Py_ssize_t maybe_untrack(PyObject *tuple, int depth)
{
    /* The number of tuples untracked now (0: it already was), or -1 when ``tuple`` must stay tracked. */
    if (!PyObject_GC_IsTracked(tuple))
        return 0;
    Py_ssize_t untracked = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyObject_IS_GC(item))
            continue;
        if (!PyTuple_CheckExact(item) || depth >= MAX_DEPTH)
            return -1;
        Py_ssize_t nested = maybe_untrack(item, depth + 1);
        if (nested < 0)
            return -1;
        untracked += nested;
    }
    PyObject_GC_UnTrack(tuple);
    return 1 + untracked;
}

static PyObject *untrack_atomic(PyObject *self, PyObject *items)
{
    if (!PyList_Check(items)) {
        PyErr_Format(PyExc_TypeError, "untrack_atomic expects a list, not %.100s", Py_TYPE(items)->tp_name);
        return NULL;
    }
    Py_ssize_t count = 0;
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyTuple_CheckExact(item)) {
            Py_ssize_t done = maybe_untrack(item, 1);
            if (done > 0)
                count += done;
        }
    }
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"untrack_atomic", untrack_atomic, METH_O,
     "untrack_atomic(items: list) -> int: untrack the tuples of atomic values in items from the cycle "
     "collector (see the module comment); the count untracked."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_untrack",
                                    "Untrack tuples of atomic values from the cycle collector.", -1, methods};

PyMODINIT_FUNC PyInit__untrack(void)
{
    return PyModule_Create(&module);
}
