/* tensor.c — tensor headers, refcounted storage and the autorelease pools.
 *
 * Headers and storage records are recycled through per-context free lists and data comes from
 * the caching allocator, so creating a tensor in steady state calls no malloc: this is on the
 * eager dispatcher's hot path.
 */
#include "runtime/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/graph/trace.h"
#include "util/checked.h"

static mst_tensor *header_new(mst_ctx *ctx) {
    mst_tensor *t = ctx->free_tensors;
    if (t) ctx->free_tensors = t->grad;
    else if (!(t = malloc(sizeof(*t)))) return NULL;
    memset(t, 0, sizeof(*t));
    t->ctx = ctx;
    t->refcount = 1;
    return t;
}

static void header_recycle(mst_ctx *ctx, mst_tensor *t) {
    t->grad = ctx->free_tensors;
    ctx->free_tensors = t;
}

static mst_storage *storage_new(mst_ctx *ctx, size_t nbytes, mst_mem_cat cat) {
    mst_storage *s = ctx->free_storages;
    if (s) ctx->free_storages = s->data;
    else if (!(s = malloc(sizeof(*s)))) return NULL;
    s->data = ctx->backend->alloc(ctx, nbytes, cat);
    if (!s->data) {
        s->data = ctx->free_storages;
        ctx->free_storages = s;
        return NULL;
    }
    s->nbytes = nbytes;
    s->refcount = 1;
    s->cat = cat;
    s->device = ctx->backend->kind;
    s->ctx = ctx;
    return s;
}

static void storage_release(mst_storage *s) {
    if (--s->refcount > 0) return;
    mst_ctx *ctx = s->ctx;
    if (s->data) mst_backend_get(s->device)->free(ctx, s->data);    /* meta storage (graph tracing) has none */
    s->data = ctx->free_storages;
    ctx->free_storages = s;
}

void mst_tensor_set_shape(mst_tensor *t, int ndim, const int64_t *shape) {
    t->ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = stride;
        stride *= shape[d];
    }
    t->numel = stride;
}

static void pool_add(mst_ctx *ctx, mst_tensor *t) {
    if (ctx->pool_len == ctx->pool_cap) {
        size_t cap = ctx->pool_cap ? ctx->pool_cap * 2 : 1024;
        mst_tensor **p = realloc(ctx->pool, cap * sizeof(*p));
        MST_ASSERT(p);      /* the pool array is tiny next to tensor data */
        ctx->pool = p;
        ctx->pool_cap = cap;
    }
    ctx->pool[ctx->pool_len++] = t;
}

static mst_status check_shape(mst_ctx *ctx, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > MST_MAX_DIMS)
        return mst_ctx_fail(ctx, MST_ERR_SHAPE, "tensor rank %d is outside 0..%d", ndim, MST_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return mst_ctx_fail(ctx, MST_ERR_SHAPE, "tensor dimension %d is negative (%lld)", d, (long long)shape[d]);
    /* the element count and its bytes (8 per element at most) must fit: no signed overflow later */
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (!mst_i64_mul(n, shape[d], &n) || n > INT64_MAX / 8) {
            char buf[160];
            return mst_ctx_fail(ctx, MST_ERR_SHAPE, "tensor shape %s has too many elements to address",
                                mst_shape_str(ndim, shape, buf, sizeof(buf)));
        }
    return MST_OK;
}

/* A tensor with fresh storage, not yet pooled. */
static mst_tensor *tensor_alloc(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, mst_mem_cat cat) {
    if ((unsigned)dtype >= MST_DTYPE_COUNT) {
        mst_ctx_fail(ctx, MST_ERR_DTYPE, "unknown dtype %d", (int)dtype);
        return NULL;
    }
    if (check_shape(ctx, ndim, shape) != MST_OK) return NULL;
    mst_tensor *t = header_new(ctx);
    if (!t) goto oom;
    t->dtype = dtype;
    mst_tensor_set_shape(t, ndim, shape);
    t->storage = storage_new(ctx, mst_tensor_nbytes(t), cat);
    if (!t->storage) { header_recycle(ctx, t); goto oom; }
    return t;
oom:;
    char buf[96];
    mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory allocating %s %s tensor (%s)", mst_dtype_name(dtype),
                 mst_shape_str(ndim, shape, buf, sizeof(buf)), mst_mem_cat_name(cat));
    return NULL;
}

mst_tensor *mst_tensor_new_cat(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, mst_mem_cat cat) {
    mst_tensor *t = tensor_alloc(ctx, dtype, ndim, shape, cat);
    if (t) pool_add(ctx, t);
    return t;
}

mst_tensor *mst_tensor_meta_new(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape) {
    if ((unsigned)dtype >= MST_DTYPE_COUNT) {
        mst_ctx_fail(ctx, MST_ERR_DTYPE, "unknown dtype %d", (int)dtype);
        return NULL;
    }
    if (check_shape(ctx, ndim, shape) != MST_OK) return NULL;
    mst_tensor *t = header_new(ctx);
    mst_storage *s = ctx->free_storages;
    if (s) ctx->free_storages = s->data;
    else s = malloc(sizeof(*s));
    if (!t || !s) {
        if (t) header_recycle(ctx, t);
        free(s);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: meta tensor header");
        return NULL;
    }
    t->dtype = dtype;
    mst_tensor_set_shape(t, ndim, shape);
    *s = (mst_storage){.data = NULL, .nbytes = mst_tensor_nbytes(t), .refcount = 1, .cat = ctx->out_cat,
                       .device = ctx->backend->kind, .ctx = ctx};
    t->storage = s;
    pool_add(ctx, t);
    return t;
}

mst_tensor *mst_tensor_new(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape) {
    return mst_tensor_new_cat(ctx, dtype, ndim, shape, ctx->out_cat);
}

mst_tensor *mst_tensor_zeros(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape) {
    mst_tensor *t = mst_tensor_new(ctx, dtype, ndim, shape);
    if (t) memset(mst_tensor_data(t), 0, mst_tensor_nbytes(t));
    return t;
}

mst_tensor *mst_tensor_full(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double value) {
    mst_tensor *t = mst_tensor_new(ctx, dtype, ndim, shape);
    if (t) mst_tensor_fill(t, value);
    return t;
}

mst_tensor *mst_tensor_scalar(mst_ctx *ctx, mst_dtype dtype, double value) {
    return mst_tensor_full(ctx, dtype, 0, NULL, value);
}

mst_tensor *mst_tensor_from_data(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    mst_tensor *t = mst_tensor_new(ctx, dtype, ndim, shape);
    if (t) memcpy(mst_tensor_data(t), data, mst_tensor_nbytes(t));
    return t;
}

void mst_tensor_fill_randn(mst_ctx *ctx, mst_tensor *t, double mean, double std) {
    for (int64_t i = 0; i < t->numel; i++) mst_tensor_set(t, i, mean + std * mst_rng_normal(&ctx->rng));
}

void mst_tensor_fill_rand(mst_ctx *ctx, mst_tensor *t, double lo, double hi) {
    for (int64_t i = 0; i < t->numel; i++) mst_tensor_set(t, i, lo + (hi - lo) * mst_rng_uniform(&ctx->rng));
}

mst_tensor *mst_tensor_randn(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double mean, double std) {
    mst_tensor *t = mst_tensor_new(ctx, dtype, ndim, shape);
    if (t) mst_tensor_fill_randn(ctx, t, mean, std);
    return t;
}

mst_tensor *mst_tensor_rand(mst_ctx *ctx, mst_dtype dtype, int ndim, const int64_t *shape, double lo, double hi) {
    mst_tensor *t = mst_tensor_new(ctx, dtype, ndim, shape);
    if (t) mst_tensor_fill_rand(ctx, t, lo, hi);
    return t;
}

/* A value read or written on the host while graph mode traces: the step is not traceable. */
#define META_GUARD(t) \
    MST_ASSERT(!mst_tensor_is_meta(t) && "a tensor value was read or written on the host while tracing (graph mode); keep host reads out of the traced step")

mst_tensor *mst_tensor_clone(mst_ctx *ctx, const mst_tensor *src) {
    META_GUARD(src);
    mst_tensor *t = mst_tensor_new(ctx, src->dtype, src->ndim, src->shape);
    if (t) memcpy(mst_tensor_data(t), mst_tensor_data(src), mst_tensor_nbytes(t));
    return t;
}

mst_tensor *mst_tensor_view(mst_ctx *ctx, mst_tensor *src, int ndim, const int64_t *shape) {
    if (check_shape(ctx, ndim, shape) != MST_OK) return NULL;
    if (mst_shape_numel(ndim, shape) != src->numel) {
        char a[96], b[96];
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "view: cannot view %s as %s (element counts differ)",
                     mst_tensor_desc(src, a, sizeof(a)), mst_shape_str(ndim, shape, b, sizeof(b)));
        return NULL;
    }
    mst_tensor *t = header_new(ctx);
    if (!t) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: tensor header"); return NULL; }
    t->dtype = src->dtype;
    mst_tensor_set_shape(t, ndim, shape);
    t->storage = src->storage;
    t->storage->refcount++;
    t->offset = src->offset;
    pool_add(ctx, t);
    return t;
}

static mst_tensor *persistent_new(mst_ctx *ctx, const char *name, mst_dtype dtype, int ndim, const int64_t *shape,
                                  mst_mem_cat cat) {
    mst_tensor *t = tensor_alloc(ctx, dtype, ndim, shape, cat);
    if (!t) return NULL;
    memset(mst_tensor_data(t), 0, mst_tensor_nbytes(t));
    mst_tensor_set_name(t, name);
    t->persistent = true;
    return t;
}

mst_tensor *mst_param_new(mst_ctx *ctx, const char *name, mst_dtype dtype, int ndim, const int64_t *shape) {
    mst_tensor *t = persistent_new(ctx, name, dtype, ndim, shape, MST_MEM_PARAM);
    if (t) t->requires_grad = true;
    return t;
}

mst_tensor *mst_state_new(mst_ctx *ctx, const char *name, mst_dtype dtype, int ndim, const int64_t *shape, mst_mem_cat cat) {
    return persistent_new(ctx, name, dtype, ndim, shape, cat);
}

mst_tensor *mst_tensor_retain(mst_tensor *t) {
    if (t) t->refcount++;
    return t;
}

void mst_tensor_release(mst_tensor *t) {
    if (!t || --t->refcount > 0) return;
    MST_ASSERT(t->refcount == 0);
    if (t->ctx->tracer) mst_trace_forget(t->ctx->tracer, t);    /* its address may be reused */
    mst_tensor_release(t->grad);
    storage_release(t->storage);
    header_recycle(t->ctx, t);
}

void mst_pool_push(mst_ctx *ctx) {
    if (ctx->pool_depth == ctx->pool_marks_cap) {
        int cap = ctx->pool_marks_cap ? ctx->pool_marks_cap * 2 : 16;
        size_t *pm = realloc(ctx->pool_marks, cap * sizeof(*pm));
        MST_ASSERT(pm);
        ctx->pool_marks = pm;
        size_t *tm = realloc(ctx->tape_marks, cap * sizeof(*tm));
        MST_ASSERT(tm);
        ctx->tape_marks = tm;
        ctx->pool_marks_cap = cap;
    }
    ctx->pool_marks[ctx->pool_depth] = ctx->pool_len;
    ctx->tape_marks[ctx->pool_depth] = ctx->tape_len;
    ctx->pool_depth++;
}

void mst_pool_pop(mst_ctx *ctx) {
    MST_ASSERT(ctx->pool_depth > 0);
    ctx->pool_depth--;
    mst_tape_truncate(ctx, ctx->tape_marks[ctx->pool_depth]);
    size_t mark = ctx->pool_marks[ctx->pool_depth];
    while (ctx->pool_len > mark) mst_tensor_release(ctx->pool[--ctx->pool_len]);
}

size_t mst_pool_mark(const mst_ctx *ctx) { return ctx->pool_len; }

void mst_pool_release_since(mst_ctx *ctx, size_t mark) {
    MST_ASSERT(mark <= ctx->pool_len);
    MST_ASSERT(ctx->pool_depth == 0 || mark >= ctx->pool_marks[ctx->pool_depth - 1]);
    while (ctx->pool_len > mark) mst_tensor_release(ctx->pool[--ctx->pool_len]);
}

mst_tensor *mst_tensor_autorelease(mst_ctx *ctx, mst_tensor *t) {
    if (t) pool_add(ctx, mst_tensor_retain(t));
    return t;
}

double mst_tensor_get(const mst_tensor *t, int64_t i) {
    META_GUARD(t);
    const void *p = mst_tensor_data(t);
    switch (t->dtype) {
    case MST_DTYPE_F32: return ((const float *)p)[i];
    case MST_DTYPE_F64: return ((const double *)p)[i];
    case MST_DTYPE_F16: return mst_f16_to_f32(((const mst_f16 *)p)[i]);
    case MST_DTYPE_BF16: return mst_bf16_to_f32(((const mst_bf16 *)p)[i]);
    case MST_DTYPE_I32: return ((const int32_t *)p)[i];
    case MST_DTYPE_U8: return ((const uint8_t *)p)[i];
    default: MST_ASSERT(0 && "unknown dtype");
    }
    return 0;
}

void mst_tensor_set(mst_tensor *t, int64_t i, double v) {
    META_GUARD(t);
    void *p = mst_tensor_data(t);
    switch (t->dtype) {
    case MST_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case MST_DTYPE_F64: ((double *)p)[i] = v; break;
    case MST_DTYPE_F16: ((mst_f16 *)p)[i] = mst_f32_to_f16((float)v); break;
    case MST_DTYPE_BF16: ((mst_bf16 *)p)[i] = mst_f32_to_bf16((float)v); break;
    /* float to int truncates toward zero and saturates; NaN becomes 0 (never undefined behaviour) */
    case MST_DTYPE_I32: ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
    case MST_DTYPE_U8: ((uint8_t *)p)[i] = v != v ? 0 : v >= 255.0 ? 255 : v <= 0.0 ? 0 : (uint8_t)v; break;
    default: MST_ASSERT(0 && "unknown dtype");
    }
}

void mst_tensor_fill(mst_tensor *t, double v) {
    META_GUARD(t);
    if (t->dtype == MST_DTYPE_F32) {
        float *p = mst_tensor_f32(t), f = (float)v;
        for (int64_t i = 0; i < t->numel; i++) p[i] = f;
        return;
    }
    for (int64_t i = 0; i < t->numel; i++) mst_tensor_set(t, i, v);
}

void mst_tensor_set_name(mst_tensor *t, const char *name) {
    if (!name) { t->name[0] = '\0'; return; }
    snprintf(t->name, sizeof(t->name), "%s", name);
}

bool mst_shape_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d]) return false;
    return true;
}

int64_t mst_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

char *mst_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

char *mst_tensor_desc(const mst_tensor *t, char *buf, size_t n) {
    if (!t) { snprintf(buf, n, "(null)"); return buf; }
    char s[80];
    snprintf(buf, n, "%s%s", mst_dtype_name(t->dtype), mst_shape_str(t->ndim, t->shape, s, sizeof(s)));
    return buf;
}
