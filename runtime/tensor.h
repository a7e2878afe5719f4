/* tensor.h — n-dimensional arrays: dtype, shape (rank <= 6), contiguous strides, a device, and
 * refcounted storage from the context's caching allocator.
 *
 * Ownership: every tensor a constructor or an op returns belongs to the context's current pool
 * (mst_pool_push / mst_pool_pop, like an autorelease pool). Code that builds a model step never
 * frees intermediates: popping the pool releases them. A tensor that must outlive the pool is
 * retained (mst_tensor_retain) and later released. Parameters (mst_param_new) are not pooled:
 * their creator owns them.
 *
 *     mst_pool_push(ctx);
 *     mst_tensor *x = mst_tensor_zeros(ctx, MST_DTYPE_F32, 2, (int64_t[]){64, 784});
 *     mst_tensor *y = mst_relu(ctx, mst_linear(ctx, x, w, b));   // NULL on error, message in ctx
 *     mst_pool_pop(ctx);                                           // x, y and the rest released
 */
#ifndef MST_RUNTIME_TENSOR_H
#define MST_RUNTIME_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/alloc.h"
#include "runtime/dtype.h"
#include "runtime/status.h"

#define MST_MAX_DIMS 6

typedef struct mst_ctx mst_ctx;

typedef enum {
    MST_DEVICE_CPU,
    MST_DEVICE_CUDA,    /* planned: the CUDA backend sits behind runtime/device.h */
    MST_DEVICE_COUNT
} mst_device;

typedef struct mst_storage {
    void *data;
    size_t nbytes;
    int refcount;
    mst_mem_cat cat;
    mst_device device;
    mst_ctx *ctx;       /* whose allocator owns data */
} mst_storage;

/* How a 4-D tensor's elements lie in memory. Eager tensors are always plain (row-major NCHW);
 * graph mode keeps some intermediates of its convolution chains in oneDNN's nChw16c (sixteen
 * channels innermost: runtime/layout.h), and only the kernels that say so in their op descriptor
 * (blocked_in / blocked_out) ever see one. */
typedef enum { MST_LAYOUT_PLAIN = 0, MST_LAYOUT_NCHW16C = 1 } mst_layout;

typedef struct mst_tensor {
    mst_dtype dtype;
    uint8_t layout;                     /* mst_layout; shape and strides stay the logical NCHW ones */
    int ndim;                           /* 0 = scalar */
    int64_t shape[MST_MAX_DIMS];
    int64_t strides[MST_MAX_DIMS];      /* in elements; always contiguous (row-major) */
    int64_t numel;
    mst_storage *storage;
    size_t offset;                      /* bytes into storage */
    int refcount;
    bool requires_grad;
    bool on_tape;                       /* produced by a recorded op: interior, not a leaf */
    bool persistent;                    /* a parameter or state tensor (mst_param_new / mst_state_new):
                                           graph mode binds it by reference, never snapshots it */
    struct mst_tensor *grad;            /* accumulated gradient (leaves), or in-flight (interior) */
    mst_ctx *ctx;
    char name[40];
} mst_tensor;

/* Constructors: pooled, category MST_MEM_ACT unless the context says otherwise. */
mst_tensor *mst_tensor_new(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape);
mst_tensor *mst_tensor_new_cat(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, mst_mem_cat cat);
mst_tensor *mst_tensor_zeros(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape);
mst_tensor *mst_tensor_full(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double value);
mst_tensor *mst_tensor_from_data(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, const void *data);
mst_tensor *mst_tensor_scalar(mst_ctx *ctx, mst_dtype dtype, double value);
/* Fill with N(mean, std^2) or U[lo, hi) from the context's seeded generator. */
mst_tensor *mst_tensor_randn(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double mean, double std);
mst_tensor *mst_tensor_rand(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double lo, double hi);
/* A copy with the same shape and dtype, not on the tape. */
mst_tensor *mst_tensor_clone(mst_ctx *ctx, const mst_tensor *t);
/* A new tensor header sharing t's storage with another shape of the same numel (not on the tape). */
mst_tensor *mst_tensor_view(mst_ctx *ctx, mst_tensor *t, int ndim, const int64_t *shape);

/* Graph mode's shape-only tensor: dtype and shape but no data (storage->data is NULL). The
 * dispatcher makes these while a tracer is set; reading or writing one on the host fails loudly. */
mst_tensor *mst_tensor_meta_new(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape);
static inline bool mst_tensor_is_meta(const mst_tensor *t) { return t->storage && !t->storage->data; }

/* A model parameter: owned by the caller (not pooled), MST_MEM_PARAM, requires_grad. */
mst_tensor *mst_param_new(mst_ctx *ctx, const char *name, mst_dtype dtype, int ndim, const int64_t *shape);
/* Persistent state (running statistics, optimizer moments): owned by the caller, zero-filled. */
mst_tensor *mst_state_new(mst_ctx *ctx, const char *name, mst_dtype dtype, int ndim, const int64_t *shape, mst_mem_cat cat);

mst_tensor *mst_tensor_retain(mst_tensor *t);
void        mst_tensor_release(mst_tensor *t);     /* NULL is fine */

void mst_pool_push(mst_ctx *ctx);
void mst_pool_pop(mst_ctx *ctx);                  /* also drops tape entries recorded since the push */
/* For owners that keep their own references (the Python frontend's Tensor objects): the pool's
 * length now, and the release of every tensor pooled since that mark, leaving the tape alone
 * (its entries hold their own references, so autograd still sees them). */
size_t mst_pool_mark(const mst_ctx *ctx);
void   mst_pool_release_since(mst_ctx *ctx, size_t mark);
/* Adds a reference to t owned by the current pool (t is then safe to return to pooled code). */
mst_tensor *mst_tensor_autorelease(mst_ctx *ctx, mst_tensor *t);

static inline void *mst_tensor_data(const mst_tensor *t) { return (char *)t->storage->data + t->offset; }
static inline float *mst_tensor_f32(const mst_tensor *t) { return (float *)mst_tensor_data(t); }
static inline double *mst_tensor_f64(const mst_tensor *t) { return (double *)mst_tensor_data(t); }
static inline int32_t *mst_tensor_i32(const mst_tensor *t) { return (int32_t *)mst_tensor_data(t); }
static inline size_t mst_tensor_nbytes(const mst_tensor *t) { return (size_t)t->numel * mst_dtype_size(t->dtype); }

/* Element access in any dtype, through double: for tests, init and reference checks. */
double mst_tensor_get(const mst_tensor *t, int64_t i);
void   mst_tensor_set(mst_tensor *t, int64_t i, double v);
void   mst_tensor_fill(mst_tensor *t, double v);
/* In-place fills from the context's seeded generator (parameter init). */
void   mst_tensor_fill_randn(mst_ctx *ctx, mst_tensor *t, double mean, double std);
void   mst_tensor_fill_rand(mst_ctx *ctx, mst_tensor *t, double lo, double hi);
void   mst_tensor_set_name(mst_tensor *t, const char *name);

/* Set the shape and the contiguous strides and numel that go with it (no storage change: for
 * headers whose storage another owner sizes, such as graph mode's arena tensors). */
void   mst_tensor_set_shape(mst_tensor *t, int ndim, const int64_t *shape);

bool   mst_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
int64_t mst_shape_numel(int ndim, const int64_t *shape);
/* "(64, 3, 28, 28)" into buf; returns buf. */
char  *mst_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
char  *mst_tensor_desc(const mst_tensor *t, char *buf, size_t n);   /* "f32(64, 3, 28, 28)" */

#endif
