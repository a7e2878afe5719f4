/* ops_binding.c — mstune.ops: one Python function per op descriptor, made from the op table at
 * import (never a hand-written list: a new op in runtime/ is a new function here).
 *
 *     mstune.ops.conv2d(x, w, b, stride_h=1, stride_w=1, pad_h=1, pad_w=1)
 *
 * Positional arguments are the op's input tensors (None for an omitted trailing optional input);
 * keywords are the descriptor's attribute names (attr_i as int, attr_f as float), unset ones 0.
 * An op with several outputs returns a tuple; an in-place update returns None. Each call goes
 * straight to mst_dispatch: the interpreter's work plus this binding is the Python-side share of
 * the profiler's `dispatch` category.
 */
#include "python/pyfront.h"

#include <frameobject.h>

#include <string.h>

#include "profiler/sampler.h"
#include "runtime/op.h"

/* ---- the sampler's view of Python: "py:forward (mlp.py:20)" for the model line that called the op ---- */

static PyObject *g_labels;          /* (code, line) -> bytes: interned labels, kept for the process */
static PyObject *g_pkg_prefix;      /* the mstune package's folder: its frames (nn, functional) are skipped */

static void note_python_frame(void);

static int internal_frame(PyCodeObject *code) {
    if (!g_pkg_prefix) {
        PyObject *m = PyImport_ImportModule("mstune");
        PyObject *f = m ? PyObject_GetAttrString(m, "__file__") : NULL;
        PyObject *os = f ? PyImport_ImportModule("os.path") : NULL;
        PyObject *d = os ? PyObject_CallMethod(os, "dirname", "O", f) : NULL;
        g_pkg_prefix = d ? d : PyUnicode_FromString("\x01");
        Py_XDECREF(m);
        Py_XDECREF(f);
        Py_XDECREF(os);
        PyErr_Clear();
    }
    return PyUnicode_Tailmatch(code->co_filename, g_pkg_prefix, 0, PY_SSIZE_T_MAX, -1) == 1;
}

void mst_py_note_frame(void) {
    if (mst_sampler_running()) note_python_frame();
}

static void note_python_frame(void) {
    PyFrameObject *f = PyEval_GetFrame();           /* borrowed */
    if (!f) return;
    Py_INCREF(f);
    PyCodeObject *code = PyFrame_GetCode(f);
    while (internal_frame(code)) {                  /* the model's own line, not nn.py's */
        PyFrameObject *back = PyFrame_GetBack(f);
        if (!back) break;
        Py_DECREF(code);
        Py_DECREF(f);
        f = back;
        code = PyFrame_GetCode(f);
    }
    int line = PyFrame_GetLineNumber(f);
    if (!g_labels) g_labels = PyDict_New();
    PyObject *key = g_labels ? Py_BuildValue("(Oi)", (PyObject *)code, line) : NULL;
    PyObject *label = key ? PyDict_GetItemWithError(g_labels, key) : NULL;      /* borrowed */
    if (key && !label && !PyErr_Occurred()) {
        PyObject *base = PyUnicode_FromString("");
        Py_ssize_t slash = PyUnicode_FindChar(code->co_filename, '/', 0, PY_SSIZE_T_MAX, -1);
        PyObject *file = slash >= 0 ? PyUnicode_Substring(code->co_filename, slash + 1, PY_SSIZE_T_MAX) : Py_NewRef(code->co_filename);
        PyObject *s = file ? PyUnicode_FromFormat("py:%U (%U:%d)", code->co_qualname, file, line) : NULL;
        label = s ? PyUnicode_AsUTF8String(s) : NULL;
        if (label && PyDict_SetItem(g_labels, key, label) == 0) Py_DECREF(label);      /* the dict keeps it */
        else Py_CLEAR(label);
        Py_XDECREF(s);
        Py_XDECREF(file);
        Py_XDECREF(base);
    }
    if (label) mst_sampler_set_label(PyBytes_AS_STRING(label));
    PyErr_Clear();
    Py_XDECREF(key);
    Py_DECREF(code);
    Py_DECREF(f);
}

/* Finds kw among the descriptor's attribute names: slot index, *is_float set; -1 if none. */
static int attr_slot(const mst_op_desc *d, PyObject *kw, bool *is_float) {
    Py_ssize_t len;
    const char *k = PyUnicode_AsUTF8AndSize(kw, &len);
    if (!k) return -1;
    for (int i = 0; i < MST_MAX_ATTR_I && d->attr_i[i]; i++)
        if (strcmp(d->attr_i[i], k) == 0) { *is_float = false; return i; }
    for (int i = 0; i < MST_MAX_ATTR_F && d->attr_f[i]; i++)
        if (strcmp(d->attr_f[i], k) == 0) { *is_float = true; return i; }
    return -1;
}

static PyObject *unknown_attr(const mst_op_desc *d, PyObject *kw) {
    char names[256] = "";
    size_t n = 0;
    for (int i = 0; i < MST_MAX_ATTR_I && d->attr_i[i] && n < sizeof(names); i++)
        n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "", d->attr_i[i]);
    for (int i = 0; i < MST_MAX_ATTR_F && d->attr_f[i] && n < sizeof(names); i++)
        n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "", d->attr_f[i]);
    return PyErr_Format(PyExc_TypeError, "%s: unknown attribute '%U' (it takes: %s)", d->name, kw, n ? names : "none");
}

PyObject *mst_py_op_call(int op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    const mst_op_desc *d = mst_op_table[op];
    mst_py_note_frame();
    mst_tensor *in[MST_MAX_OP_INPUTS];
    Py_ssize_t n_in = nargs;
    while (n_in > 0 && args[n_in - 1] == Py_None) n_in--;        /* omitted trailing optional inputs */
    if (n_in > MST_MAX_OP_INPUTS)
        return PyErr_Format(PyExc_TypeError, "%s: takes %d..%d input tensors, got %zd", d->name, d->min_inputs, d->max_inputs, n_in);
    for (Py_ssize_t i = 0; i < n_in; i++) {
        if (!mst_py_tensor_check(args[i]))
            return PyErr_Format(PyExc_TypeError, "%s: input %zd must be an mstune.Tensor, got %s", d->name, i, Py_TYPE(args[i])->tp_name);
        in[i] = mst_py_tensor_get(args[i]);
    }
    mst_attrs a;
    memset(&a, 0, sizeof(a));
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k), *v = args[nargs + k];
        bool is_float;
        int slot = attr_slot(d, kw, &is_float);
        if (slot < 0) return PyErr_Occurred() ? NULL : unknown_attr(d, kw);
        if (is_float) {
            double f = PyFloat_AsDouble(v);
            if (f == -1.0 && PyErr_Occurred()) return NULL;
            a.f[slot] = f;
        } else {
            int64_t i = PyObject_IsInstance(v, (PyObject *)&PyBool_Type) ? (v == Py_True) : PyLong_AsLongLong(v);
            if (i == -1 && PyErr_Occurred()) return NULL;
            a.i[slot] = i;
        }
    }
    mst_ctx *ctx = mst_py_ctx();
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    size_t mark = mst_py_op_begin(ctx);
    mst_status s = mst_dispatch(ctx, (mst_op)op, (int)n_in, in, &a, out);
    PyObject *r;
    if (s != MST_OK) r = mst_py_raise_ctx(ctx);
    else if (d->n_outputs == 0) r = Py_NewRef(Py_None);
    else if (d->n_outputs == 1) r = mst_py_tensor_wrap(out[0]);
    else {
        r = PyTuple_New(d->n_outputs);
        for (int k = 0; r && k < d->n_outputs; k++) {
            PyObject *o = mst_py_tensor_wrap(out[k]);
            if (!o) Py_CLEAR(r);
            else PyTuple_SET_ITEM(r, k, o);
        }
    }
    mst_py_op_end(ctx, mark);
    return r;
}

/* The op index rides in the function's self as a PyLong. */
static PyObject *op_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return mst_py_op_call((int)PyLong_AsLong(self), args, nargs, kwnames);
}

static PyMethodDef k_op_defs[MST_OP_COUNT + 1];
static char k_op_docs[MST_OP_COUNT][256];

static void op_doc(const mst_op_desc *d, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s(", d->name);
    for (int i = 0; i < d->max_inputs && i < 3 && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%sx%d", i ? ", " : "", i);
    if (d->max_inputs > 3 && k < n) k += (size_t)snprintf(buf + k, n - k, ", ...");
    for (int i = 0; i < MST_MAX_ATTR_I && d->attr_i[i] && k < n; i++) k += (size_t)snprintf(buf + k, n - k, ", %s=0", d->attr_i[i]);
    for (int i = 0; i < MST_MAX_ATTR_F && d->attr_f[i] && k < n; i++) k += (size_t)snprintf(buf + k, n - k, ", %s=0.0", d->attr_f[i]);
    if (k < n) snprintf(buf + k, n - k, ") -- the %s op of the runtime's table: %d..%d inputs, %d outputs", d->name, d->min_inputs,
                        d->max_inputs, d->n_outputs);
}

int mst_py_ops_add(PyObject *m) {
    PyObject *ops = PyModule_New("mstune._C.ops");
    if (!ops) return -1;
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d) continue;
        op_doc(d, k_op_docs[op], sizeof(k_op_docs[op]));
        k_op_defs[op] = (PyMethodDef){d->name, (PyCFunction)(void (*)(void))op_entry, METH_FASTCALL | METH_KEYWORDS, k_op_docs[op]};
        PyObject *idx = PyLong_FromLong(op);
        PyObject *f = idx ? PyCFunction_NewEx(&k_op_defs[op], idx, NULL) : NULL;
        Py_XDECREF(idx);
        if (!f || PyModule_AddObject(ops, d->name, f) != 0) {
            Py_XDECREF(f);
            Py_DECREF(ops);
            return -1;
        }
    }
    if (PyModule_AddObject(m, "ops", ops) != 0) {
        Py_DECREF(ops);
        return -1;
    }
    return 0;
}
