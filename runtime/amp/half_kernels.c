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
 * The scratch is grow-only (mst_amp_scratch): after the first step of a training loop the kernel
 * allocates nothing.
 */
#include <string.h>

#include "runtime/amp/half.h"
#include "runtime/context.h"

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

static mst_kernel_fn f32_kernel(const mst_ctx *ctx, const mst_op_desc *d) {
    return ctx->force_ref && d->cpu_ref[MST_DTYPE_F32] ? d->cpu_ref[MST_DTYPE_F32] : d->cpu[MST_DTYPE_F32];
}

bool mst_half_kernel_applies(const mst_op_desc *d, mst_dtype key) {
    return mst_dtype_is_half(key) && d->cpu[MST_DTYPE_F32] != NULL;
}

mst_status mst_half_kernel(mst_ctx *ctx, const mst_op_call *c) {
    const mst_op_desc *d = mst_op_table[c->op];
    mst_kernel_fn kernel = f32_kernel(ctx, d);
    if (!kernel) return mst_op_fail(ctx, c, MST_ERR_DTYPE, "no f32 kernel to run the half kernel with");
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
        mst_half_to_f32_path(path, t->dtype, mst_tensor_data(t), (float *)p, (size_t)t->numel);
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
            mst_half_from_f32_path(path, c->out[k]->dtype, mst_tensor_f32(wide.out[k]), mst_tensor_data(c->out[k]),
                                   (size_t)c->out[k]->numel);
    for (int i = 0; i < c->n_in; i++)
        if ((d->mutates >> i & 1) && wide.in[i] != c->in[i])
            mst_half_from_f32_path(path, c->in[i]->dtype, mst_tensor_f32(wide.in[i]), mst_tensor_data(c->in[i]),
                                   (size_t)c->in[i]->numel);
    return MST_OK;
}
