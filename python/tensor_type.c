/* tensor_type.c — mstune.Tensor: a Python object over one runtime tensor (one reference).
 *
 * No NumPy: values come in from nested lists (mstune.tensor) and go out through tolist()/item().
 * Arithmetic operators are the op table's add/sub/mul/div/matmul, so `a + b` is the same
 * dispatcher call a C model makes. Host reads of a shape-only tensor (graph mode is tracing)
 * raise mstune.TraceError naming the model's file and line: a trace cannot capture a value.
 */
#include "python/pyfront.h"

#include <string.h>

#include "runtime/autograd.h"
#include "runtime/op.h"
#include "runtime/ops.h"

PyObject *mst_py_tensor_wrap(mst_tensor *t) {
    if (!t) return mst_py_raise_ctx(mst_py_ctx());
    mst_py_tensor *o = PyObject_New(mst_py_tensor, &mst_py_tensor_type);
    if (!o) return NULL;
    o->t = mst_tensor_retain(t);
    return (PyObject *)o;
}

static void tensor_dealloc(PyObject *self) {
    mst_tensor_release(((mst_py_tensor *)self)->t);
    PyObject_Free(self);
}

static PyObject *shape_tuple(const mst_tensor *t) {
    PyObject *s = PyTuple_New(t->ndim);
    if (!s) return NULL;
    for (int d = 0; d < t->ndim; d++) PyTuple_SET_ITEM(s, d, PyLong_FromLongLong(t->shape[d]));
    return s;
}

static PyObject *get_shape(PyObject *self, void *c) { return shape_tuple(mst_py_tensor_get(self)); }
static PyObject *get_dtype(PyObject *self, void *c) { return PyUnicode_FromString(mst_dtype_name(mst_py_tensor_get(self)->dtype)); }
static PyObject *get_ndim(PyObject *self, void *c) { return PyLong_FromLong(mst_py_tensor_get(self)->ndim); }
static PyObject *get_numel(PyObject *self, void *c) { return PyLong_FromLongLong(mst_py_tensor_get(self)->numel); }
static PyObject *get_name(PyObject *self, void *c) { return PyUnicode_FromString(mst_py_tensor_get(self)->name); }
static PyObject *get_is_meta(PyObject *self, void *c) { return PyBool_FromLong(mst_tensor_is_meta(mst_py_tensor_get(self))); }
static PyObject *get_requires_grad(PyObject *self, void *c) { return PyBool_FromLong(mst_py_tensor_get(self)->requires_grad); }

static int set_requires_grad(PyObject *self, PyObject *v, void *c) {
    if (!v) { PyErr_SetString(PyExc_AttributeError, "requires_grad cannot be deleted"); return -1; }
    int on = PyObject_IsTrue(v);
    if (on < 0) return -1;
    mst_tensor *t = mst_py_tensor_get(self);
    if (on && !mst_dtype_is_float(t->dtype)) {
        PyErr_Format(PyExc_TypeError, "requires_grad: only float tensors have gradients (this one is %s)", mst_dtype_name(t->dtype));
        return -1;
    }
    t->requires_grad = on;
    return 0;
}

static int set_name(PyObject *self, PyObject *v, void *c) {
    const char *s = v ? PyUnicode_AsUTF8(v) : NULL;
    if (!s) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "name must be a str"); return -1; }
    mst_tensor_set_name(mst_py_tensor_get(self), s);
    return 0;
}

static PyObject *get_grad(PyObject *self, void *c) {
    mst_tensor *g = mst_py_tensor_get(self)->grad;
    if (!g) Py_RETURN_NONE;
    return mst_py_tensor_wrap(g);
}

static int set_grad(PyObject *self, PyObject *v, void *c) {
    mst_tensor *t = mst_py_tensor_get(self);
    if (v && v != Py_None) {
        PyErr_SetString(PyExc_TypeError, "grad can only be cleared (set to None); gradients come from backward()");
        return -1;
    }
    mst_tensor_release(t->grad);
    t->grad = NULL;
    return 0;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, "dimensions as a tuple", NULL},
    {"dtype", get_dtype, NULL, "element type name: f32, f64, f16, bf16, i32, u8", NULL},
    {"ndim", get_ndim, NULL, "rank", NULL},
    {"numel", get_numel, NULL, "number of elements", NULL},
    {"name", get_name, set_name, "name (parameters: their checkpoint name)", NULL},
    {"is_meta", get_is_meta, NULL, "True for graph mode's shape-only tensors (while tracing)", NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, "whether backward() computes a gradient for it", NULL},
    {"grad", get_grad, set_grad, "accumulated gradient (leaves), or None", NULL},
    {NULL},
};

/* A host read: fails while tracing, with the model's file:line. */
static int check_host_read(PyObject *self, const char *what) {
    if (!mst_tensor_is_meta(mst_py_tensor_get(self))) return 0;
    mst_py_raise_trace(what);
    return -1;
}

static PyObject *element(const mst_tensor *t, int64_t i) {
    double v = mst_tensor_get(t, i);
    if (mst_dtype_is_float(t->dtype)) return PyFloat_FromDouble(v);
    return PyLong_FromLongLong((long long)v);
}

static PyObject *tolist_rec(const mst_tensor *t, int d, int64_t *idx) {
    if (d == t->ndim) return element(t, (*idx)++);
    PyObject *l = PyList_New(t->shape[d]);
    if (!l) return NULL;
    for (int64_t k = 0; k < t->shape[d]; k++) {
        PyObject *e = tolist_rec(t, d + 1, idx);
        if (!e) { Py_DECREF(l); return NULL; }
        PyList_SET_ITEM(l, k, e);
    }
    return l;
}

static PyObject *tensor_tolist(PyObject *self, PyObject *unused) {
    if (check_host_read(self, "tolist()") != 0) return NULL;
    int64_t idx = 0;
    return tolist_rec(mst_py_tensor_get(self), 0, &idx);
}

static PyObject *tensor_item(PyObject *self, PyObject *unused) {
    if (check_host_read(self, "item()") != 0) return NULL;
    mst_tensor *t = mst_py_tensor_get(self);
    if (t->numel != 1) {
        char b[96];
        return PyErr_Format(PyExc_ValueError, "item(): the tensor %s has %lld elements, expected 1", mst_tensor_desc(t, b, sizeof(b)),
                            (long long)t->numel);
    }
    return element(t, 0);
}

static PyObject *tensor_backward(PyObject *self, PyObject *args) {
    PyObject *seed = NULL;
    if (!PyArg_ParseTuple(args, "|O!:backward", &mst_py_tensor_type, &seed)) return NULL;
    mst_ctx *ctx = mst_py_ctx();
    mst_tensor *t = mst_py_tensor_get(self);
    size_t mark = mst_py_op_begin(ctx);
    mst_status s = seed ? mst_backward_seeded(ctx, t, mst_py_tensor_get(seed)) : mst_backward(ctx, t);
    mst_py_op_end(ctx, mark);
    if (s != MST_OK) return mst_py_raise_ctx(ctx);
    Py_RETURN_NONE;
}

static PyObject *tensor_reshape(PyObject *self, PyObject *args) {
    PyObject *seq = args;
    if (PyTuple_GET_SIZE(args) == 1 && (PyTuple_Check(PyTuple_GET_ITEM(args, 0)) || PyList_Check(PyTuple_GET_ITEM(args, 0))))
        seq = PyTuple_GET_ITEM(args, 0);
    Py_ssize_t n = PySequence_Size(seq);
    if (n < 0 || n > MST_MAX_DIMS) return PyErr_Format(PyExc_ValueError, "reshape: rank must be 0..%d", MST_MAX_DIMS);
    int64_t shape[MST_MAX_DIMS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_GetItem(seq, i);
        if (!e) return NULL;
        shape[i] = PyLong_AsLongLong(e);
        Py_DECREF(e);
        if (shape[i] == -1 && PyErr_Occurred()) return NULL;
    }
    mst_py_note_frame();
    mst_ctx *ctx = mst_py_ctx();
    size_t mark = mst_py_op_begin(ctx);
    mst_tensor *y = mst_reshape(ctx, mst_py_tensor_get(self), (int)n, shape);
    PyObject *r = mst_py_tensor_wrap(y);
    mst_py_op_end(ctx, mark);
    return r;
}

static PyObject *tensor_detach(PyObject *self, PyObject *unused) {
    if (check_host_read(self, "detach()") != 0) return NULL;
    mst_ctx *ctx = mst_py_ctx();
    size_t mark = mst_py_op_begin(ctx);
    PyObject *r = mst_py_tensor_wrap(mst_tensor_clone(ctx, mst_py_tensor_get(self)));
    mst_py_op_end(ctx, mark);
    return r;
}

static PyMethodDef tensor_methods[] = {
    {"tolist", tensor_tolist, METH_NOARGS, "values as nested Python lists"},
    {"item", tensor_item, METH_NOARGS, "the value of a one-element tensor as a Python float or int"},
    {"backward", tensor_backward, METH_VARARGS, "backpropagate from this tensor (one element, or with a seed gradient)"},
    {"reshape", tensor_reshape, METH_VARARGS, "the reshape op: t.reshape(2, -1)"},
    {"detach", tensor_detach, METH_NOARGS, "a copy off the tape (no gradient flows back)"},
    {NULL},
};

static PyObject *tensor_repr(PyObject *self) {
    char b[128];
    mst_tensor *t = mst_py_tensor_get(self);
    return PyUnicode_FromFormat("mstune.Tensor(%s%s%s)", mst_tensor_desc(t, b, sizeof(b)), t->requires_grad ? ", requires_grad" : "",
                                mst_tensor_is_meta(t) ? ", traced" : "");
}

/* ---- numbers: a Python scalar operand becomes a () tensor of the other operand's dtype ---- */

static PyObject *operand(PyObject *o, const mst_tensor *like) {
    if (mst_py_tensor_check(o)) { Py_INCREF(o); return o; }
    if (PyFloat_Check(o) || PyLong_Check(o)) {
        double v = PyFloat_AsDouble(o);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        mst_ctx *ctx = mst_py_ctx();
        size_t mark = mst_py_op_begin(ctx);
        PyObject *r = mst_py_tensor_wrap(mst_tensor_scalar(ctx, like->dtype, v));
        mst_py_op_end(ctx, mark);
        return r;
    }
    return NULL;
}

static PyObject *binary(PyObject *a, PyObject *b, mst_op op) {
    const mst_tensor *like = mst_py_tensor_check(a) ? mst_py_tensor_get(a) : mst_py_tensor_check(b) ? mst_py_tensor_get(b) : NULL;
    if (!like) Py_RETURN_NOTIMPLEMENTED;
    PyObject *x = operand(a, like);
    if (!x) { if (PyErr_Occurred()) return NULL; Py_RETURN_NOTIMPLEMENTED; }
    PyObject *y = operand(b, like);
    if (!y) { Py_DECREF(x); if (PyErr_Occurred()) return NULL; Py_RETURN_NOTIMPLEMENTED; }
    PyObject *args[2] = {x, y};
    PyObject *r = mst_py_op_call(op, args, 2, NULL);
    Py_DECREF(x);
    Py_DECREF(y);
    return r;
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return binary(a, b, MST_OP_ADD); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return binary(a, b, MST_OP_SUB); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return binary(a, b, MST_OP_MUL); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return binary(a, b, MST_OP_DIV); }
static PyObject *nb_matmul(PyObject *a, PyObject *b) {
    if (!mst_py_tensor_check(a) || !mst_py_tensor_check(b)) Py_RETURN_NOTIMPLEMENTED;
    PyObject *args[2] = {a, b};
    return mst_py_op_call(MST_OP_MATMUL, args, 2, NULL);
}
static PyObject *nb_neg(PyObject *a) {
    PyObject *kw = Py_BuildValue("(s)", "scale"), *args[2] = {a, NULL};
    if (!kw) return NULL;
    PyObject *m1 = PyFloat_FromDouble(-1.0);
    args[1] = m1;
    PyObject *r = m1 ? mst_py_op_call(MST_OP_SCALE, args, 1, kw) : NULL;
    Py_XDECREF(m1);
    Py_DECREF(kw);
    return r;
}

/* Python truth, float() and int() of a tensor read its value on the host. */
static int nb_bool(PyObject *self) {
    if (check_host_read(self, "bool(tensor)") != 0) return -1;
    mst_tensor *t = mst_py_tensor_get(self);
    if (t->numel != 1) {
        char b[96];
        PyErr_Format(PyExc_ValueError, "bool(tensor): %s has %lld elements, expected 1", mst_tensor_desc(t, b, sizeof(b)), (long long)t->numel);
        return -1;
    }
    return mst_tensor_get(t, 0) != 0;
}
static PyObject *nb_float(PyObject *self) {
    if (check_host_read(self, "float(tensor)") != 0) return NULL;
    PyObject *v = tensor_item(self, NULL);
    if (!v || PyFloat_Check(v)) return v;
    PyObject *f = PyNumber_Float(v);
    Py_DECREF(v);
    return f;
}
static PyObject *nb_int(PyObject *self) {
    if (check_host_read(self, "int(tensor)") != 0) return NULL;
    PyObject *v = tensor_item(self, NULL);
    if (!v || PyLong_Check(v)) return v;
    PyObject *i = PyNumber_Long(v);
    Py_DECREF(v);
    return i;
}

static PyNumberMethods tensor_number = {
    .nb_add = nb_add, .nb_subtract = nb_sub, .nb_multiply = nb_mul, .nb_true_divide = nb_div,
    .nb_matrix_multiply = nb_matmul, .nb_negative = nb_neg, .nb_bool = nb_bool, .nb_float = nb_float, .nb_int = nb_int,
};

static Py_ssize_t sq_len(PyObject *self) {
    mst_tensor *t = mst_py_tensor_get(self);
    if (t->ndim == 0) { PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor"); return -1; }
    return (Py_ssize_t)t->shape[0];
}
static PySequenceMethods tensor_sequence = {.sq_length = sq_len};

PyTypeObject mst_py_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mstune.Tensor",
    .tp_doc = "An n-dimensional array of the mstune runtime (create with mstune.tensor, zeros, randn, ...)",
    .tp_basicsize = sizeof(mst_py_tensor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = tensor_dealloc,
    .tp_repr = tensor_repr,
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
    .tp_as_number = &tensor_number,
    .tp_as_sequence = &tensor_sequence,
};
