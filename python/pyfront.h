/* pyfront.h — the Python frontend's internals shared by its C files: the `mstune._C` extension
 * module (Tensor type, one function per op descriptor, autograd) and the embedding host.
 *
 * One runtime context serves Python at a time. A plain `python3` gets its own (created on first
 * use, seed 0); the `mstune` program binds the trainer's context before it calls the model, so a
 * Python model's ops run in the job's context, allocator, profiler and graph tracer.
 */
#ifndef MST_PYTHON_PYFRONT_H
#define MST_PYTHON_PYFRONT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>

#include "runtime/context.h"
#include "runtime/tensor.h"

typedef struct {
    PyObject_HEAD
    mst_tensor *t;          /* one reference owned by this object */
} mst_py_tensor;

extern PyTypeObject mst_py_tensor_type;
extern PyObject *mst_py_error;          /* mstune.Error: an op or runtime error (the op's own message) */
extern PyObject *mst_py_trace_error;    /* mstune.TraceError: a host read of a tensor while graph mode traces */

/* The module's init function (single-phase); the host registers it before importing mstune. */
PyObject *mst_py_module_init(void);

/* The context ops run in: the bound one, or the module's own (created on first use). */
mst_ctx *mst_py_ctx(void);
/* The host binds its context (NULL unbinds); while bound, op outputs stay in the host's pools. */
void mst_py_bind_ctx(mst_ctx *ctx);
bool mst_py_ctx_is_bound(void);

/* A new Python object owning a reference to t (retained here); NULL + exception on failure. */
PyObject *mst_py_tensor_wrap(mst_tensor *t);
static inline bool mst_py_tensor_check(PyObject *o) { return PyObject_TypeCheck(o, &mst_py_tensor_type); }
static inline mst_tensor *mst_py_tensor_get(PyObject *o) { return ((mst_py_tensor *)o)->t; }

/* After an op: raise mstune.Error with the context's message and clear it. Returns NULL. */
PyObject *mst_py_raise_ctx(mst_ctx *ctx);
/* Raise TraceError naming the model's file:line (the innermost Python frame) and what was read. */
PyObject *mst_py_raise_trace(const char *what);

/* Called by op entry and exit points in owned mode: release pooled tensors the Python objects do
 * not need (their own references keep results alive; the tape keeps what backward needs). */
size_t mst_py_op_begin(mst_ctx *ctx);
void   mst_py_op_end(mst_ctx *ctx, size_t mark);

/* Run one op from Python: op index, positional tensors, attribute keywords. */
PyObject *mst_py_op_call(int op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* While the sampler runs: label this thread's samples with the model's Python function and
 * file:line that is calling into C (skipping the mstune package's own frames). */
void mst_py_note_frame(void);
/* Adds `ops` (a module with one function per op descriptor) to the package module m. */
int mst_py_ops_add(PyObject *m);

#endif
