/* half_kernels.c — one generic kernel that runs any op with an f32 kernel on f16/bf16 tensors.
 *
 * This CPU has no half arithmetic, so half tensors are stored half and computed in f32: half
 * inputs are widened into scratch, the op's f32 kernel runs on a copy of the call whose tensor
 * headers point at the scratch, and half outputs (and half inputs the op updates in place) are
 * rounded back to nearest even. Inputs that are already f32 or integer (batchnorm's running
 * statistics under O3, labels, indices) pass through untouched. One kernel instead of one per op
 * keeps every op's arithmetic in one place; the price is a conversion pass over each operand,
 * which bench/bench_amp_kernels measures.
 *
 * Two kinds of op skip the whole-tensor conversion passes: batch norm and its gradient on O2's mix
 * (half activations, f32 parameters) have kernels of their own in runtime/ops/norm.c that widen
 * one row at a time, and elementwise ops with a block function (mst_op_desc.elem_f32) run here in
 * cache-sized blocks spread over the pool; both give this kernel's bits.
 *
 * The scratch is grow-only (mst_amp_scratch): after the first step of a training loop the kernel
 * allocates nothing. Two kinds of op run in slices so the scratch stays small (it would otherwise
 * hold f32 copies of an op's largest operands, e.g. batch-norm backward's gy, x and gx: tens of
 * MB at batch 128, more than half precision saves): elementwise ops whose operands all have one
 * element count go in flat chunks of k_flat_chunk elements, and batch norm and its gradient go
 * in ranges of channels (every channel's statistics are independent, and the f32 kernel sums a
 * channel's elements in the same order whatever the range, so the bits are the same).
 */
#include <string.h>

#include "runtime/amp/half.h"
#include "runtime/amp/autocast.h"
#include "runtime/context.h"
#include "runtime/layout.h"

/* A stand-in header and storage for one operand, pointing at f32 scratch. */
typedef struct {
    mst_tensor t;
    mst_storage s;
} shadow;

static size_t scratch_bytes(const mst_tensor *t) { return ((size_t)t->numel * sizeof(float) + 63) & ~(size_t)63; }

static mst_tensor *shadow_make(shadow *sh, const mst_tensor *t, char *data) {
    sh->t = *t;
    sh->s = *t->storage;
    sh->s.data = data;
    sh->s.nbytes = (size_t)t->numel * sizeof(float);
    sh->t.dtype = MST_DTYPE_F32;
    sh->t.storage = &sh->s;
    sh->t.offset = 0;
    sh->t.grad = NULL;
    return &sh->t;
}

enum { k_flat_chunk = 1 << 16, k_channel_chunk_bytes = 2 << 20 };

/* A stand-in for a slice of t: f32 storage at data (scratch, or t's own f32 data at an offset). */
static mst_tensor *shadow_slice(shadow *sh, const mst_tensor *t, char *data, int ndim, const int64_t *shape) {
    shadow_make(sh, t, data);
    mst_tensor_set_shape(&sh->t, ndim, shape);
    sh->s.nbytes = (size_t)sh->t.numel * sizeof(float);
    return &sh->t;
}

static bool all_float(const mst_op_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->dtype != MST_DTYPE_F32 && !mst_dtype_is_half(c->in[i]->dtype)) return false;
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k]->dtype != MST_DTYPE_F32 && !mst_dtype_is_half(c->out[k]->dtype)) return false;
    return true;
}

/* ---- slices: a run of the f32 kernel per slice of the operands ---- */

static size_t aligned_floats(int64_t n) { return ((size_t)n * sizeof(float) + 63) & ~(size_t)63; }

/* One-dimensional operand t's elements [s0, s0 + len) as f32: widened into scratch *p (advanced),
 * or t's own data when it is f32. */
static mst_tensor *vector_operand(shadow *sh, const mst_tensor *t, int64_t s0, int64_t len, char **p, mst_half_path path,
                                  bool load) {
    if (t->dtype == MST_DTYPE_F32) return shadow_slice(sh, t, (char *)(mst_tensor_f32(t) + s0), 1, &len);
    mst_tensor *w = shadow_slice(sh, t, *p, 1, &len);
    if (load) mst_half_to_f32_path(path, t->dtype, (const char *)mst_tensor_data(t) + s0 * 2, (float *)*p, (size_t)len);
    *p += aligned_floats(len);
    return w;
}

/* The slice back into t when t is half (an f32 operand was written in place). */
static void vector_store(const mst_tensor *t, const mst_tensor *w, int64_t s0, int64_t len, mst_half_path path) {
    if (mst_dtype_is_half(t->dtype))
        mst_half_from_f32_path(path, t->dtype, mst_tensor_f32(w), (char *)mst_tensor_data(t) + s0 * 2, (size_t)len);
}

typedef mst_tensor *(*slice_operand_fn)(shadow *sh, const mst_tensor *t, int64_t s0, int64_t len, char **p,
                                        mst_half_path path, bool load);
typedef void (*slice_store_fn)(const mst_tensor *t, const mst_tensor *w, int64_t s0, int64_t len, mst_half_path path);

/* Runs the kernel on slices [s0, s0 + step) of [0, total): operands made by `operand` in a scratch
 * of `need` bytes, outputs and updated inputs put back by `store`. */
static mst_status run_sliced(mst_ctx *ctx, const mst_op_desc *d, const mst_op_call *c, mst_kernel_fn kernel, mst_half_path path,
                             int64_t total, int64_t step, size_t need, slice_operand_fn operand, slice_store_fn store) {
    char *base = mst_amp_scratch(ctx, need);
    if (!base) return ctx->status;
    for (int64_t s0 = 0; s0 < total; s0 += step) {
        int64_t len = total - s0 < step ? total - s0 : step;
        char *p = base;
        mst_op_call w = *c;
        shadow in[MST_MAX_OP_INPUTS], out[MST_MAX_OP_OUTPUTS];
        for (int i = 0; i < c->n_in; i++) w.in[i] = operand(&in[i], c->in[i], s0, len, &p, path, true);
        for (int k = 0; k < c->n_out; k++) w.out[k] = operand(&out[k], c->out[k], s0, len, &p, path, false);
        mst_status s = kernel(ctx, &w);
        if (s != MST_OK) return s;
        for (int k = 0; k < c->n_out; k++) store(c->out[k], w.out[k], s0, len, path);
        for (int i = 0; i < c->n_in; i++)
            if (d->mutates >> i & 1) store(c->in[i], w.in[i], s0, len, path);
    }
    return MST_OK;
}

/* ---- flat chunks: elementwise ops whose operands all have out[0]'s element count ---- */

static bool flat_applies(const mst_op_desc *d, const mst_op_call *c) {
    if (!(d->flags & MST_OPF_ELEMENTWISE) || c->n_out < 1 || c->out[0]->numel <= k_flat_chunk || !all_float(c)) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->numel != c->out[0]->numel) return false;     /* broadcasting: the whole-tensor path */
    for (int k = 1; k < c->n_out; k++)
        if (c->out[k]->numel != c->out[0]->numel) return false;
    return true;
}

static mst_status run_flat(mst_ctx *ctx, const mst_op_desc *d, const mst_op_call *c, mst_kernel_fn kernel, mst_half_path path) {
    size_t need = (size_t)(c->n_in + c->n_out) * aligned_floats(k_flat_chunk);
    return run_sliced(ctx, d, c, kernel, path, c->out[0]->numel, k_flat_chunk, need, vector_operand, vector_store);
}

/* ---- channel ranges: batch norm and its gradient ---- */

static bool channels_apply(const mst_op_call *c) {
    /* channel ranges are runs of plain NCHW; nChw16c operands take the whole-tensor path, whose
     * f32 stand-ins keep their layout (runtime/layout.h) */
    if ((c->op != MST_OP_BATCHNORM && c->op != MST_OP_BATCHNORM_GRAD) || !all_float(c) || mst_call_has_blocked(c)) return false;
    const mst_tensor *x = c->in[c->op == MST_OP_BATCHNORM ? 0 : 1];
    return x->ndim >= 2 && x->shape[1] > 1;
}

/* Big operands have x's shape (N, C, ...); the others are (C) vectors. */
static bool is_big(const mst_tensor *t) { return t->ndim >= 2; }

/* Move channels [c0, c0 + cc) of big operand t between t (half or f32) and the packed f32 (N, cc, S) slice at f. */
static void channel_copy(const mst_tensor *t, float *f, int64_t c0, int64_t cc, mst_half_path path, bool to_f32) {
    const int64_t n = t->shape[0], ch = t->shape[1], s = t->numel / (n * ch);
    for (int64_t b = 0; b < n; b++) {
        int64_t src = (b * ch + c0) * s, len = cc * s;        /* the channels are adjacent within one image */
        float *dst = f + b * len;
        if (t->dtype == MST_DTYPE_F32) {
            if (to_f32) memcpy(dst, mst_tensor_f32(t) + src, (size_t)len * sizeof(float));
            else memcpy(mst_tensor_f32(t) + src, dst, (size_t)len * sizeof(float));
        } else if (to_f32) {
            mst_half_to_f32_path(path, t->dtype, (const char *)mst_tensor_data(t) + src * 2, dst, (size_t)len);
        } else {
            mst_half_from_f32_path(path, t->dtype, dst, (char *)mst_tensor_data(t) + src * 2, (size_t)len);
        }
    }
}

static mst_tensor *channel_operand(shadow *sh, const mst_tensor *t, int64_t c0, int64_t cc, char **p, mst_half_path path,
                                   bool load) {
    if (!is_big(t)) return vector_operand(sh, t, c0, cc, p, path, load);
    int64_t shape[MST_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(shape));
    shape[1] = cc;
    mst_tensor *w = shadow_slice(sh, t, *p, t->ndim, shape);
    if (load) channel_copy(t, (float *)*p, c0, cc, path, true);
    *p += aligned_floats(w->numel);
    return w;
}

static void channel_store(const mst_tensor *t, const mst_tensor *w, int64_t c0, int64_t cc, mst_half_path path) {
    if (is_big(t)) channel_copy(t, mst_tensor_f32(w), c0, cc, path, false);
    else vector_store(t, w, c0, cc, path);
}

static mst_status run_channels(mst_ctx *ctx, const mst_op_desc *d, const mst_op_call *c, mst_kernel_fn kernel,
                               mst_half_path path) {
    const mst_tensor *x = c->in[c->op == MST_OP_BATCHNORM ? 0 : 1];
    const int64_t ch = x->shape[1], per_channel = x->numel / ch;
    int64_t cc = k_channel_chunk_bytes / (per_channel * (int64_t)sizeof(float));
    cc = cc < 1 ? 1 : cc > ch ? ch : cc;
    size_t need = 0;
    for (int i = 0; i < c->n_in; i++) need += aligned_floats((is_big(c->in[i]) ? per_channel : 1) * cc);
    for (int k = 0; k < c->n_out; k++) need += aligned_floats((is_big(c->out[k]) ? per_channel : 1) * cc);
    return run_sliced(ctx, d, c, kernel, path, ch, cc, need, channel_operand, channel_store);
}

/* ---- blocks: elementwise ops with a block function, widened and rounded in cache ---- */

/* An elementwise op whose block function (mst_op_desc.elem_f32, the graph fuser's) gives its f32
 * kernel's bits runs in blocks of k_elem_block elements spread over the pool: each block's half
 * operands are widened into a per-worker buffer that stays in L1, the block function computes,
 * and the block is rounded straight into the half output. No pass over memory is added, so the
 * op moves half the bytes of its f32 version. Broadcasting operands and mutated inputs take the
 * paths above. */
enum { k_elem_block = 1024, k_elem_min_chunk = 1 << 15 };

static bool blocks_apply(const mst_op_desc *d, const mst_op_call *c) {
    if (!d->elem_f32 || !(d->flags & MST_OPF_ELEMENTWISE) || c->n_out != 1 || d->mutates || !all_float(c)) return false;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->numel != c->out[0]->numel) return false;
    return c->n_in <= MST_MAX_OP_INPUTS;
}

typedef struct {
    const mst_op_desc *d;
    const mst_op_call *c;
    float *scratch;             /* per worker: (n_in + 1) x k_elem_block floats */
} blocks_job;

static void blocks_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    const blocks_job *j = arg;
    const mst_op_call *c = j->c;
    const mst_tensor *y = c->out[0];
    float *buf = j->scratch + (size_t)worker * (size_t)(c->n_in + 1) * k_elem_block;
    for (int64_t blk = begin; blk < end; blk++) {
        int64_t off = blk * k_elem_block, len = y->numel - off < k_elem_block ? y->numel - off : k_elem_block;
        const float *x[MST_MAX_OP_INPUTS];
        for (int i = 0; i < c->n_in; i++) {
            const mst_tensor *t = c->in[i];
            if (t->dtype == MST_DTYPE_F32) {
                x[i] = mst_tensor_f32(t) + off;
            } else {
                float *w = buf + (size_t)(i + 1) * k_elem_block;
                mst_half_to_f32(t->dtype, (const uint16_t *)mst_tensor_data(t) + off, w, (size_t)len);
                x[i] = w;
            }
        }
        if (y->dtype == MST_DTYPE_F32) {
            j->d->elem_f32(mst_tensor_f32(y) + off, x, len, &c->attrs);
        } else {
            j->d->elem_f32(buf, x, len, &c->attrs);
            mst_half_from_f32(y->dtype, buf, (uint16_t *)mst_tensor_data(y) + off, (size_t)len);
        }
    }
}

static mst_status run_blocks(mst_ctx *ctx, const mst_op_desc *d, const mst_op_call *c) {
    int64_t blocks = (c->out[0]->numel + k_elem_block - 1) / k_elem_block;
    int64_t min_chunk = k_elem_min_chunk / k_elem_block;
    int workers = mst_parallel_chunks_ctx(ctx, blocks, min_chunk);
    float *scratch = mst_amp_scratch(ctx, (size_t)workers * (size_t)(c->n_in + 1) * k_elem_block * sizeof(float));
    if (!scratch) return ctx->status;
    blocks_job job = {d, c, scratch};
    mst_parallel_for(ctx, blocks, min_chunk, blocks_chunk, &job);
    return MST_OK;
}

static mst_kernel_fn f32_kernel(const mst_ctx *ctx, const mst_op_desc *d) {
    return ctx->force_ref && d->ref[MST_DEVICE_CPU][MST_DTYPE_F32] ? d->ref[MST_DEVICE_CPU][MST_DTYPE_F32] : d->kernels[MST_DEVICE_CPU][MST_DTYPE_F32];
}

bool mst_half_kernel_applies(const mst_op_desc *d, mst_dtype key) {
    return mst_dtype_is_half(key) && d->kernels[MST_DEVICE_CPU][MST_DTYPE_F32] != NULL;
}

mst_status mst_half_kernel(mst_ctx *ctx, const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_kernel_fn kernel = f32_kernel(ctx, d);
    if (!kernel) return mst_op_fail(ctx, c, MST_ERR_DTYPE, "no f32 kernel to run the half kernel with");
    mst_half_path path = ctx->force_ref ? MST_HALF_PATH_SCALAR : mst_half_best_path();
    if (!ctx->force_ref && blocks_apply(d, c)) return run_blocks(ctx, d, c);
    if (flat_applies(d, c)) return run_flat(ctx, d, c, kernel, path);
    if (channels_apply(c)) return run_channels(ctx, d, c, kernel, path);
    return mst_half_run_wide(ctx, c, kernel);
}

/* Whole-tensor conversions on the kernel pool: elementwise and exact (widening) or rounded per
 * element (narrowing), so the chunks change no bit. */
typedef struct {
    mst_half_path path;
    mst_dtype half;
    const uint16_t *h;      /* widen: h -> f; narrow: f -> out */
    float *f;
    const float *from;
    uint16_t *out;
} convert_job;

enum { k_convert_min_chunk = 1 << 15 };

static void convert_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const convert_job *j = arg;
    if (j->h) mst_half_to_f32_path(j->path, j->half, j->h + begin, j->f + begin, (size_t)(end - begin));
    else mst_half_from_f32_path(j->path, j->half, j->from + begin, j->out + begin, (size_t)(end - begin));
}

static void widen_all(mst_ctx *ctx, mst_half_path path, mst_dtype half, const void *h, float *f, int64_t n) {
    convert_job j = {.path = path, .half = half, .h = h, .f = f};
    mst_parallel_for(ctx, n, k_convert_min_chunk, convert_chunk, &j);
}

static void narrow_all(mst_ctx *ctx, mst_half_path path, mst_dtype half, const float *f, void *h, int64_t n) {
    convert_job j = {.path = path, .half = half, .from = f, .out = h};
    mst_parallel_for(ctx, n, k_convert_min_chunk, convert_chunk, &j);
}

mst_status mst_half_run_wide(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn kernel) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_half_path path = ctx->force_ref ? MST_HALF_PATH_SCALAR : mst_half_best_path();
    size_t need = 0;
    for (int i = 0; i < c->n_in; i++)
        if (mst_dtype_is_half(c->in[i]->dtype)) need += scratch_bytes(c->in[i]);
    for (int k = 0; k < c->n_out; k++)
        if (mst_dtype_is_half(c->out[k]->dtype)) need += scratch_bytes(c->out[k]);
    char *p = mst_amp_scratch(ctx, need);
    if (!p) return ctx->status;

    mst_op_call wide = *c;
    shadow in[MST_MAX_OP_INPUTS], out[MST_MAX_OP_OUTPUTS];
    for (int i = 0; i < c->n_in; i++) {
        const mst_tensor *t = c->in[i];
        if (!mst_dtype_is_half(t->dtype)) continue;
        wide.in[i] = shadow_make(&in[i], t, p);
        widen_all(ctx, path, t->dtype, mst_tensor_data(t), (float *)p, t->numel);
        p += scratch_bytes(t);
    }
    for (int k = 0; k < c->n_out; k++) {
        const mst_tensor *t = c->out[k];
        if (!mst_dtype_is_half(t->dtype)) continue;
        wide.out[k] = shadow_make(&out[k], t, p);
        p += scratch_bytes(t);
    }

    mst_status s = kernel(ctx, &wide);
    if (s != MST_OK) return s;

    for (int k = 0; k < c->n_out; k++)
        if (wide.out[k] != c->out[k])
            narrow_all(ctx, path, c->out[k]->dtype, mst_tensor_f32(wide.out[k]), mst_tensor_data(c->out[k]), c->out[k]->numel);
    for (int i = 0; i < c->n_in; i++)
        if ((d->mutates >> i & 1) && wide.in[i] != c->in[i])
            narrow_all(ctx, path, c->in[i]->dtype, mst_tensor_f32(wide.in[i]), mst_tensor_data(c->in[i]), c->in[i]->numel);
    return MST_OK;
}
