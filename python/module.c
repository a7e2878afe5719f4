/* module.c — the `mstune._C` extension module: the context Python runs ops in, tensor
 * constructors, autograd switches and the error types. The Python package around it (python/mstune/)
 * adds nn, functional and the model contract.
 *
 * The context is the module's one piece of state (one interpreter per process, single-phase init).
 * Owned mode (a plain python3): op outputs leave the context's pool at once, so a Python object is
 * their only owner besides the autograd tape, and dropping the object frees the memory. Bound mode
 * (the mstune program): the trainer's pools own everything its step creates, as for a C model.
 */
#include "python/pyfront.h"

#include <string.h>

#include "runtime/autograd.h"
#include "runtime/ops.h"

static mst_ctx *g_ctx;          /* the context ops run in */
static bool g_bound;            /* g_ctx is the host's */
PyObject *mst_py_error;
PyObject *mst_py_trace_error;

mst_ctx *mst_py_ctx(void) {
    if (!g_ctx) g_ctx = mst_ctx_new(&(mst_ctx_config){.seed = 0, .n_threads = 1});
    return g_ctx;
}

void mst_py_bind_ctx(mst_ctx *ctx) {
    g_ctx = ctx;
    g_bound = ctx != NULL;
}

bool mst_py_ctx_is_bound(void) { return g_bound; }

size_t mst_py_op_begin(mst_ctx *ctx) { return g_bound ? 0 : mst_pool_mark(ctx); }
void mst_py_op_end(mst_ctx *ctx, size_t mark) {
    if (!g_bound) mst_pool_release_since(ctx, mark);
}

PyObject *mst_py_raise_ctx(mst_ctx *ctx) {
    if (PyErr_Occurred()) return NULL;
    const char *msg = mst_ctx_status(ctx) != MST_OK ? mst_ctx_error(ctx) : "operation failed";
    PyErr_SetString(mst_py_error, msg);
    mst_ctx_clear_error(ctx);
    return NULL;
}

PyObject *mst_py_raise_trace(const char *what) {
    PyFrameObject *f = PyEval_GetFrame();        /* borrowed: the Python code that asked */
    if (!f) {
        PyErr_Format(mst_py_trace_error, "graph mode: %s reads a tensor's value on the host while the step is traced", what);
        return NULL;
    }
    PyCodeObject *code = PyFrame_GetCode(f);
    PyErr_Format(mst_py_trace_error,
                 "%U:%d: in %U: graph mode cannot trace %s: it turns a traced tensor into a Python value (the trace "
                 "records ops, not values); keep host reads out of forward and loss, or run runtime.mode eager",
                 code->co_filename, PyFrame_GetLineNumber(f), code->co_name, what);
    Py_DECREF(code);
    return NULL;
}

/* ---- constructors ---- */

static int parse_dtype(PyObject *o, mst_dtype *dt) {
    if (!o || o == Py_None) return 0;
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    int d = mst_dtype_parse(s);
    if (d < 0) {
        PyErr_Format(PyExc_ValueError, "unknown dtype '%s' (expected f32, f64, f16, bf16, i32 or u8)", s);
        return -1;
    }
    *dt = (mst_dtype)d;
    return 0;
}

static int parse_shape(PyObject *o, int *ndim, int64_t *shape) {
    if (PyLong_Check(o)) {
        *ndim = 1;
        shape[0] = PyLong_AsLongLong(o);
        return shape[0] == -1 && PyErr_Occurred() ? -1 : 0;
    }
    PyObject *seq = PySequence_Fast(o, "shape must be a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MST_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "shape has rank %zd, at most %d", n, MST_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (shape[i] == -1 && PyErr_Occurred()) { Py_DECREF(seq); return -1; }
    }
    *ndim = (int)n;
    Py_DECREF(seq);
    return 0;
}

/* Shape of nested lists (rectangular), and its values flattened into vals. */
static int nested_shape(PyObject *o, int d, int *ndim, int64_t *shape) {
    if (!PyList_Check(o) && !PyTuple_Check(o)) {
        if (*ndim < 0) *ndim = d;
        else if (*ndim != d) { PyErr_SetString(PyExc_ValueError, "tensor(): ragged nested lists"); return -1; }
        return 0;
    }
    if (d >= MST_MAX_DIMS) { PyErr_Format(PyExc_ValueError, "tensor(): more than %d nesting levels", MST_MAX_DIMS); return -1; }
    Py_ssize_t n = PySequence_Size(o);
    if (*ndim < 0 || d < *ndim) {
        if (shape[d] < 0) shape[d] = n;
        else if (shape[d] != n) { PyErr_SetString(PyExc_ValueError, "tensor(): ragged nested lists"); return -1; }
    }
    if (n == 0 && *ndim < 0) *ndim = d + 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (nested_shape(PySequence_Fast_GET_ITEM(o, i), d + 1, ndim, shape) != 0) return -1;
    return 0;
}

static int nested_fill(PyObject *o, mst_tensor *t, int64_t *idx) {
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Size(o); i++)
            if (nested_fill(PySequence_Fast_GET_ITEM(o, i), t, idx) != 0) return -1;
        return 0;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    mst_tensor_set(t, (*idx)++, v);
    return 0;
}

static PyObject *py_tensor(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"data", "dtype", "requires_grad", NULL};
    PyObject *data, *dto = NULL;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op:tensor", names, &data, &dto, &rg)) return NULL;
    mst_dtype dt = MST_DTYPE_F32;
    if (parse_dtype(dto, &dt) != 0) return NULL;
    int ndim = -1;
    int64_t shape[MST_MAX_DIMS];
    for (int d = 0; d < MST_MAX_DIMS; d++) shape[d] = -1;
    if (nested_shape(data, 0, &ndim, shape) != 0) return NULL;
    mst_ctx *ctx = mst_py_ctx();
    size_t mark = mst_py_op_begin(ctx);
    mst_tensor *t = mst_tensor_new(ctx, dt, ndim, shape);
    int64_t idx = 0;
    PyObject *r = NULL;
    if (t && nested_fill(data, t, &idx) == 0) {
        t->requires_grad = rg && mst_dtype_is_float(dt);
        r = mst_py_tensor_wrap(t);
    } else if (!t) mst_py_raise_ctx(ctx);
    mst_py_op_end(ctx, mark);
    return r;
}

/* zeros/full/randn/rand share one shape: (shape, dtype=, ...) */
typedef enum { FILL_CONST, FILL_NORMAL, FILL_UNIFORM } fill_kind;

static PyObject *make_filled(PyObject *shape_o, PyObject *dto, fill_kind kind, double a, double b, int rg) {
    mst_dtype dt = MST_DTYPE_F32;
    int ndim;
    int64_t shape[MST_MAX_DIMS];
    if (parse_dtype(dto, &dt) != 0 || parse_shape(shape_o, &ndim, shape) != 0) return NULL;
    mst_ctx *ctx = mst_py_ctx();
    size_t mark = mst_py_op_begin(ctx);
    mst_tensor *t = kind == FILL_CONST    ? mst_tensor_full(ctx, dt, ndim, shape, a)
                    : kind == FILL_NORMAL ? mst_tensor_randn(ctx, dt, ndim, shape, a, b)
                                          : mst_tensor_rand(ctx, dt, ndim, shape, a, b);
    if (t) t->requires_grad = rg && mst_dtype_is_float(dt);
    PyObject *r = mst_py_tensor_wrap(t);
    mst_py_op_end(ctx, mark);
    return r;
}

static PyObject *py_full(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"shape", "value", "dtype", "requires_grad", NULL};
    PyObject *shape, *dto = NULL;
    double v;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Od|Op:full", names, &shape, &v, &dto, &rg)) return NULL;
    return make_filled(shape, dto, FILL_CONST, v, 0, rg);
}

static PyObject *py_zeros(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"shape", "dtype", "requires_grad", NULL};
    PyObject *shape, *dto = NULL;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op:zeros", names, &shape, &dto, &rg)) return NULL;
    return make_filled(shape, dto, FILL_CONST, 0, 0, rg);
}

static PyObject *py_randn(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"shape", "mean", "std", "dtype", "requires_grad", NULL};
    PyObject *shape, *dto = NULL;
    double mean = 0, std = 1;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ddOp:randn", names, &shape, &mean, &std, &dto, &rg)) return NULL;
    return make_filled(shape, dto, FILL_NORMAL, mean, std, rg);
}

static PyObject *py_rand(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"shape", "low", "high", "dtype", "requires_grad", NULL};
    PyObject *shape, *dto = NULL;
    double lo = 0, hi = 1;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|ddOp:rand", names, &shape, &lo, &hi, &dto, &rg)) return NULL;
    return make_filled(shape, dto, FILL_UNIFORM, lo, hi, rg);
}

/* A model parameter (trained, persistent: graph mode binds it by reference) or a persistent
 * buffer (batch-norm running statistics), f32, filled U(-bound, bound) or with a constant, from
 * the context's seeded generator: the same draws, in the same order, as a C model's mst_model_param. */
static PyObject *py_param(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"shape", "name", "bound", "value", "buffer", NULL};
    PyObject *shape_o, *bound_o = Py_None, *value_o = Py_None;
    const char *name = "";
    int buffer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sOOp:param", names, &shape_o, &name, &bound_o, &value_o, &buffer)) return NULL;
    int ndim;
    int64_t shape[MST_MAX_DIMS];
    if (parse_shape(shape_o, &ndim, shape) != 0) return NULL;
    if ((bound_o == Py_None) == (value_o == Py_None))
        return PyErr_Format(PyExc_ValueError, "param('%s'): give exactly one of bound= (uniform init) and value= (constant)", name);
    mst_ctx *ctx = mst_py_ctx();
    mst_tensor *t = buffer ? mst_state_new(ctx, name, MST_DTYPE_F32, ndim, shape, MST_MEM_PARAM)
                           : mst_param_new(ctx, name, MST_DTYPE_F32, ndim, shape);
    if (!t) return mst_py_raise_ctx(ctx);
    if (bound_o != Py_None) {
        double b = PyFloat_AsDouble(bound_o);
        if (b == -1.0 && PyErr_Occurred()) { mst_tensor_release(t); return NULL; }
        mst_tensor_fill_rand(ctx, t, -b, b);
    } else {
        double v = PyFloat_AsDouble(value_o);
        if (v == -1.0 && PyErr_Occurred()) { mst_tensor_release(t); return NULL; }
        mst_tensor_fill(t, v);
    }
    PyObject *r = mst_py_tensor_wrap(t);
    mst_tensor_release(t);      /* the creator's reference moved into the object */
    return r;
}

/* ---- autograd and context ---- */

static PyObject *py_set_grad_enabled(PyObject *self, PyObject *on) {
    mst_ctx *ctx = mst_py_ctx();
    bool was = mst_grad_is_enabled(ctx);
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    mst_grad_set_enabled(ctx, v);
    return PyBool_FromLong(was);
}

static PyObject *py_is_grad_enabled(PyObject *self, PyObject *unused) { return PyBool_FromLong(mst_grad_is_enabled(mst_py_ctx())); }

static PyObject *py_next_seed(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong((long long)mst_ctx_next_seed(mst_py_ctx()));
}

static PyObject *py_manual_seed(PyObject *self, PyObject *arg) {
    unsigned long long s = PyLong_AsUnsignedLongLong(arg);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (g_bound) {
        PyErr_SetString(mst_py_error, "manual_seed: the job's train.seed seeds this run (the context belongs to the trainer)");
        return NULL;
    }
    mst_ctx *ctx = mst_py_ctx();
    ctx->seed = s;
    ctx->rng = mst_rng_make(mst_hash64(s), 0);     /* as mst_ctx_new seeds it */
    Py_RETURN_NONE;
}

static PyObject *py_set_threads(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (g_bound) {
        PyErr_SetString(mst_py_error, "set_threads: the job's runtime.threads sets this run's threads");
        return NULL;
    }
    mst_ctx_set_threads(mst_py_ctx(), (int)n);
    Py_RETURN_NONE;
}

static PyObject *py_clear_tape(PyObject *self, PyObject *unused) {
    mst_tape_clear(mst_py_ctx());
    Py_RETURN_NONE;
}

static PyObject *py_is_bound(PyObject *self, PyObject *unused) { return PyBool_FromLong(g_bound); }

static PyObject *py_tracing(PyObject *self, PyObject *unused) { return PyBool_FromLong(mst_py_ctx()->tracer != NULL); }

static PyObject *py_op_names(PyObject *self, PyObject *unused) {
    PyObject *l = PyList_New(0);
    for (int op = 0; l && op < MST_OP_COUNT; op++) {
        PyObject *s = PyUnicode_FromString(mst_op_name((mst_op)op));
        if (!s || PyList_Append(l, s) != 0) Py_CLEAR(l);
        Py_XDECREF(s);
    }
    return l;
}

static PyObject *py_dtype_index(PyObject *self, PyObject *name) {
    mst_dtype dt = MST_DTYPE_F32;
    if (parse_dtype(name, &dt) != 0) return NULL;
    return PyLong_FromLong((long)dt);
}

static PyObject *py_memory(PyObject *self, PyObject *unused) {
    const mst_alloc_stats *st = mst_ctx_mem(mst_py_ctx());
    return PyLong_FromLongLong((long long)st->in_use_total);
}

static PyMethodDef module_methods[] = {
    {"tensor", (PyCFunction)(void (*)(void))py_tensor, METH_VARARGS | METH_KEYWORDS, "tensor(data, dtype='f32', requires_grad=False) from nested lists"},
    {"full", (PyCFunction)(void (*)(void))py_full, METH_VARARGS | METH_KEYWORDS, "full(shape, value, dtype='f32')"},
    {"zeros", (PyCFunction)(void (*)(void))py_zeros, METH_VARARGS | METH_KEYWORDS, "zeros(shape, dtype='f32')"},
    {"randn", (PyCFunction)(void (*)(void))py_randn, METH_VARARGS | METH_KEYWORDS, "randn(shape, mean=0, std=1) from the context's seeded generator"},
    {"rand", (PyCFunction)(void (*)(void))py_rand, METH_VARARGS | METH_KEYWORDS, "rand(shape, low=0, high=1) from the context's seeded generator"},
    {"param", (PyCFunction)(void (*)(void))py_param, METH_VARARGS | METH_KEYWORDS, "param(shape, name, bound=|value=, buffer=False): a model parameter or buffer"},
    {"set_grad_enabled", py_set_grad_enabled, METH_O, "turn tape recording on/off; returns the previous setting"},
    {"is_grad_enabled", py_is_grad_enabled, METH_NOARGS, "whether ops record the autograd tape"},
    {"next_seed", py_next_seed, METH_NOARGS, "a fresh seed for a random op (dropout), from the context's generator"},
    {"manual_seed", py_manual_seed, METH_O, "reseed the module's own context (plain python3 only)"},
    {"set_threads", py_set_threads, METH_O, "kernel threads of the module's own context (plain python3 only)"},
    {"clear_tape", py_clear_tape, METH_NOARGS, "drop the autograd tape recorded since the last backward (a forward never backpropagated)"},
    {"is_bound", py_is_bound, METH_NOARGS, "True when running inside the mstune trainer"},
    {"is_tracing", py_tracing, METH_NOARGS, "True while graph mode traces the step"},
    {"op_names", py_op_names, METH_NOARGS, "names of every op in the runtime's table"},
    {"_dtype_index", py_dtype_index, METH_O, "the dtype's index in the runtime's enum (the cast op's `to`)"},
    {"memory_in_use", py_memory, METH_NOARGS, "bytes the context's allocator holds"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "mstune._C", "mstune's runtime: tensors, every op of the op table, autograd", -1, module_methods,
};

PyObject *mst_py_module_init(void) {
    if (PyType_Ready(&mst_py_tensor_type) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    mst_py_error = PyErr_NewExceptionWithDoc("mstune.Error", "an op or runtime error, with the op's message", PyExc_RuntimeError, NULL);
    mst_py_trace_error = PyErr_NewExceptionWithDoc("mstune.TraceError",
                                                   "graph mode met a host read of a traced tensor (file:line in the message)",
                                                   mst_py_error, NULL);
    if (!mst_py_error || !mst_py_trace_error || PyModule_AddObjectRef(m, "Error", mst_py_error) != 0 ||
        PyModule_AddObjectRef(m, "TraceError", mst_py_trace_error) != 0 ||
        PyModule_AddObjectRef(m, "Tensor", (PyObject *)&mst_py_tensor_type) != 0 || mst_py_ops_add(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

PyMODINIT_FUNC PyInit__C(void) { return mst_py_module_init(); }
