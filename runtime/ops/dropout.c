/* dropout.c — inverted dropout: y = x * mask, mask[k] = 0 with probability p, else 1 / (1 - p).
 *
 * The mask is a pure function of (seed, k): element k keeps when the uniform draw from
 * Philox4x32-10 keyed by the seed, counter k / 4, word k % 4, is >= p (Salmon et al., SC'11;
 * PyTorch's CUDA dropout also draws from Philox). So the same seed gives the same mask whatever
 * thread, block size or call order computes it, and graph mode can recompute it. The seed is
 * drawn from the context by the public constructor and travels in the attributes (i[0], all 64
 * bits), so a run is reproducible and the gradient check can repeat a mask by rewinding the
 * context's generator. The mask is kept as a second output of x's dtype, which costs a tensor of
 * memory but makes the backward a plain multiply; uniforms have 24 bits, so p is resolved to
 * 2^-24.
 *
 * FLOPs: 2 per element (the keep test and the multiply); the Philox integer rounds are not
 * floating-point work and are not counted.
 */
#include <math.h>

#include "runtime/ops/common.h"
#include "runtime/rng.h"

static bool p_in_range(double p) { return p >= 0 && p < 1; }     /* false for NaN */

static mst_status infer_dropout(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]) {
    mst_status s = op_require_float(ctx, c, 0);
    if (s != MST_OK) return s;
    if (!p_in_range(c->attrs.f[0]))
        return mst_op_fail(ctx, c, MST_ERR_ARG, "p is %g, expected 0 <= p < 1", c->attrs.f[0]);
    out[0] = out[1] = meta_like(c->in[0]);
    return MST_OK;
}

/* Element k keeps iff its draw's top 24 bits u satisfy u / 2^24 >= p, i.e. u >= ceil(p 2^24)
 * (exact: p 2^24 is exact in double, u is an integer). */
static uint32_t keep_threshold(double p) { return (uint32_t)ceil(p * 16777216.0); }

/* Threads: blocks of k_drop_block elements (a multiple of 4: whole Philox counters) split over the
 * context's pool; each element's mask depends on (seed, k) only, so the bits do not depend on the
 * split. A block draws sixteen counters at once (mst_philox16: AVX-512 where the CPU has it);
 * drawing one counter at a time, serially, made dropout ~20% of the transformer's step. */
enum { k_drop_block = 64, k_drop_min_blocks = 1 << 10 };

#define DROPOUT_CHUNK_BODY                                                              \
    {                                                                                   \
        const mst_op_call *c = arg;                                                     \
        const T *x = (const T *)mst_tensor_data(c->in[0]);                              \
        T *y = (T *)mst_tensor_data(c->out[0]);                                         \
        T *mask = (T *)mst_tensor_data(c->out[1]);                                      \
        int64_t n = c->in[0]->numel;                                                    \
        double p = c->attrs.f[0];                                                       \
        uint64_t seed = (uint64_t)c->attrs.i[0];                                        \
        uint32_t thr = keep_threshold(p);                                               \
        T keep = (T)(1.0 / (1.0 - p));                                                  \
        uint32_t r[4][16];                                                              \
        for (int64_t blk = b0; blk < b1; blk++) {                                       \
            int64_t b = blk * k_drop_block, m = n - b < k_drop_block ? n - b : k_drop_block; \
            mst_philox16(seed, (uint64_t)b / 4, r);                                     \
            for (int64_t j = 0; j < m; j++) {                                           \
                T mk = (r[j & 3][j >> 2] >> 8) >= thr ? keep : (T)0;                    \
                mask[b + j] = mk;                                                       \
                y[b + j] = x[b + j] * mk;                                               \
            }                                                                           \
        }                                                                               \
    }
FLOAT_CHUNKS(dropout_chunk, DROPOUT_CHUNK_BODY, b0, b1)

#define DROPOUT_BODY(T)                                                                 \
    {                                                                                   \
        int64_t blocks = (c->in[0]->numel + k_drop_block - 1) / k_drop_block;           \
        mst_parallel_for(ctx, blocks, k_drop_min_blocks, FLOAT_CHUNK(dropout_chunk, T), (void *)c); \
        return MST_OK;                                                                  \
    }
FLOAT_KERNELS(dropout, DROPOUT_BODY)

/* The mask gets no gradient: it does not depend on x. */
static mst_status dropout_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    if (gy[0]) gx[0] = mst_mul(ctx, gy[0], c->out[1]);
    return ctx->status;
}

static int64_t cost_dropout(const mst_op_call *c) { return 2 * c->in[0]->numel; }

/* Not flagged elementwise: out[k] depends on x[k] and also on k itself (through the seed), which
 * an elementwise fuser that sees values only cannot reproduce. */
const mst_op_desc mst_desc_dropout = {
    .name = "dropout", .min_inputs = 1, .max_inputs = 1, .n_outputs = 2,
    .amp_class = MST_AMP_CLASS_HALF,
    .flags = MST_OPF_RANDOM,
    .attr_i = {"seed"}, .attr_f = {"p"},
    .infer = infer_dropout, .kernels[MST_DEVICE_CPU] = FLOAT_KERNEL_TABLE(dropout),
    .backward = dropout_backward, .flops = cost_dropout,
};

/* p is validated even when the call is the identity, so a bad setting fails at once rather than
 * only in training. A seed is drawn only when a mask is made. */
mst_tensor *mst_dropout(mst_ctx *ctx, mst_tensor *x, double p, bool training) {
    if (!p_in_range(p)) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "dropout: p is %g, expected 0 <= p < 1", p);
        return NULL;
    }
    if (!x) return mst_dispatch1(ctx, MST_OP_DROPOUT, 1, (mst_tensor *[]){x}, NULL);  /* passes the earlier error on */
    if (!training || p == 0) return x;
    mst_attrs a = {{0}};
    a.i[0] = (int64_t)mst_ctx_next_seed(ctx);
    a.f[0] = p;
    mst_tensor *out[MST_MAX_OP_OUTPUTS] = {0};
    mst_dispatch(ctx, MST_OP_DROPOUT, 1, (mst_tensor *[]){x}, &a, out);
    return out[0];
}
