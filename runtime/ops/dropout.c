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

#include "runtime/cpu_features.h"
#include "runtime/ops/common.h"
#include "runtime/rng.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
enum { k_drop_block = 64, k_drop_min_blocks = 1 << 12 };     /* ~0.5 ns an element: threads pay from ~256K */

/* Bit i of a 16-bit mask moved to bit 4 i of 64. */
static uint64_t spread4(uint64_t x) {
    x = (x | (x << 24)) & 0x000000FF000000FFull;
    x = (x | (x << 12)) & 0x000F000F000F000Full;
    x = (x | (x << 6)) & 0x0303030303030303ull;
    return (x | (x << 3)) & 0x1111111111111111ull;
}

#if defined(__x86_64__)
/* A whole f32 block with AVX-512F: the four words' keep tests as 16-lane masks, interleaved into
 * element order (element 4 j + w is counter j's word w), then mask = keep or +0 and y = x mask as
 * the scalar loop computes them. */
__attribute__((target("avx512f"))) static void dropout_block_f32_avx512(const uint32_t r[4][16], uint32_t thr, float keep,
                                                                         const float *x, float *y, float *mask) {
    const __m512i t = _mm512_set1_epi32((int)thr);
    uint64_t bits = 0;
    for (int w = 0; w < 4; w++)
        bits |= spread4(_mm512_cmpge_epu32_mask(_mm512_srli_epi32(_mm512_loadu_si512(r[w]), 8), t)) << w;
    const __m512 kv = _mm512_set1_ps(keep);
    for (int i = 0; i < 4; i++) {
        __m512 mk = _mm512_maskz_mov_ps((__mmask16)(bits >> (16 * i)), kv);
        _mm512_storeu_ps(mask + 16 * i, mk);
        _mm512_storeu_ps(y + 16 * i, _mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), mk));
    }
}
#define DROPOUT_X86 1
#else
#define DROPOUT_X86 0
#endif

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
        const bool vector = mst_cpu_has(MST_CPU_AVX512F);                               \
        uint32_t r[4][16];                                                              \
        for (int64_t blk = b0; blk < b1; blk++) {                                       \
            int64_t b = blk * k_drop_block, m = n - b < k_drop_block ? n - b : k_drop_block; \
            mst_philox16(seed, (uint64_t)b / 4, r);                                     \
            if (DROPOUT_X86 && sizeof(T) == 4 && m == k_drop_block && vector) {         \
                dropout_block_f32_avx512(r, thr, (float)keep, (const float *)(x + b),   \
                                         (float *)(y + b), (float *)(mask + b));        \
                continue;                                                               \
            }                                                                           \
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
