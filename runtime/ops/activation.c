/* activation.c — relu, gelu (exact erf form), tanh, sigmoid and the gradient ops their backward
 * rules are written in.
 *
 * Each kernel is one flat loop over contiguous data that the compiler can vectorize; f32 calls
 * the float libm functions (erfcf, expf, tanhf; GELU's through runtime/ops/vmath.h, glibc's
 * vector variants), f64 the double ones. GELU is evaluated as
 * 0.5 x erfc(-x / sqrt 2), the same function as 0.5 x (1 + erf(x / sqrt 2)) without the
 * cancellation in 1 + erf for large negative x (Hendrycks & Gimpel, arXiv:1606.08415). Sigmoid
 * uses exp(-|x|) so it neither overflows nor loses the small tail: sigmoid(-1000) = 0 and
 * sigmoid(1000) = 1 exactly. ReLU keeps NaN (x <= 0 is false for NaN), so the loss scaler's
 * overflow check still sees it.
 *
 * Backward rules: relu and gelu differentiate from the input x; tanh and sigmoid from their
 * output y (c->out[0]), which is cheaper than recomputing the function.
 *
 * FLOPs per element count one per arithmetic operation or libm call in the kernel expression:
 *   relu 1 (select)            relu_grad 1 (select)
 *   gelu 4 (scale, erfc, 2 mul)  gelu_grad 10 (Phi 3, phi 4, x*phi, add, times gy)
 *   tanh 1 (tanh)              tanh_grad 3 (y*y, 1 - ., times gy)
 *   sigmoid 4 (abs, exp, add, div)  sigmoid_grad 3 (1 - y, times y, times gy)
 */
#include <math.h>

#include "runtime/amp/half.h"
#include "runtime/cpu_features.h"
#include "runtime/ops/common.h"
#include "runtime/ops/vmath.h"

/* libm by element type: float calls the f-suffixed function. */
#define ERFC(v) _Generic((v), float: erfcf, default: erfc)(v)
#define EXP(v) _Generic((v), float: expf, default: exp)(v)
#define TANH(v) _Generic((v), float: tanhf, default: tanh)(v)

#define K_SQRT1_2 0.70710678118654752440        /* 1 / sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794   /* 1 / sqrt(2 pi) */

/* One elementwise loop over the elements [begin, end) of the call `arg`. UNARY_LOOP: y[i] = EXPR
 * of x = in[0][i]. GRAD_LOOP: EXPR of the upstream gradient g = in[0][i] and x = in[1][i] (the
 * forward input or output). */
#define UNARY_LOOP(T, EXPR)                                                  \
    {                                                                        \
        const mst_op_call *c = arg;                                          \
        const T *xs = (const T *)mst_tensor_data(c->in[0]);                  \
        T *ys = (T *)mst_tensor_data(c->out[0]);                             \
        for (int64_t i = begin; i < end; i++) { T x = xs[i]; ys[i] = (EXPR); } \
    }
#define GRAD_LOOP(T, EXPR)                                                   \
    {                                                                        \
        const mst_op_call *c = arg;                                          \
        const T *gs = (const T *)mst_tensor_data(c->in[0]);                  \
        const T *xs = (const T *)mst_tensor_data(c->in[1]);                  \
        T *ys = (T *)mst_tensor_data(c->out[0]);                             \
        for (int64_t i = begin; i < end; i++) { T g = gs[i], x = xs[i]; ys[i] = (EXPR); } \
    }

/* Threads: a large tensor's elements split into contiguous ranges over the context's pool; each
 * element is computed alone, so the bits do not depend on the split. The threshold is
 * OP_MIN_SPLIT_ELEMS (ops/common.h), set by the cheapest kernel, relu; dearer kernels pass their
 * own (run_split_from). */

static mst_status run_split_from(mst_ctx *ctx, const mst_op_call *c, mst_parallel_fn chunk, int64_t min_chunk) {
    mst_parallel_for(ctx, c->out[0]->numel, min_chunk, chunk, (void *)c);
    return MST_OK;
}
static mst_status run_split(mst_ctx *ctx, const mst_op_call *c, mst_parallel_fn chunk) {
    return run_split_from(ctx, c, chunk, OP_MIN_SPLIT_ELEMS);
}

/* NAME_f64 from LOOP (UNARY_LOOP or GRAD_LOOP) and the expression. */
#define ACT_KERNELS_F64(NAME, LOOP, EXPR)                                                            \
    static void NAME##_chunk_f64(void *arg, int64_t begin, int64_t end, int worker) {                \
        typedef double T;                                                                            \
        LOOP(T, EXPR)                                                                                \
    }                                                                                                \
    static mst_status NAME##_f64(mst_ctx *ctx, const mst_op_call *c) { return run_split(ctx, c, NAME##_chunk_f64); }

/* NAME_f32, NAME_f64 and NAME_elem_f32 from LOOP and the expression. */
#define ACT_KERNELS(NAME, LOOP, EXPR)                                                                \
    ACT_KERNELS_F64(NAME, LOOP, EXPR)                                                                \
    OP_AVX2_CLONE(NAME##_chunk_f32, (void *arg, int64_t begin, int64_t end, int worker), (arg, begin, end, worker), { \
        typedef float T;                                                                             \
        (void)worker;                                                                                \
        LOOP(T, EXPR)                                                                                \
    })                                                                                               \
    static mst_status NAME##_f32(mst_ctx *ctx, const mst_op_call *c) { return run_split(ctx, c, NAME##_chunk_f32); } \
    OP_AVX2_CLONE(NAME##_elem_f32, (float *ys, const float *const xs_[], int64_t n, const mst_attrs *attrs), (ys, xs_, n, attrs), { \
        typedef float T;                                                                             \
        (void)attrs;                                                                                 \
        LOOP##_ELEM(T, EXPR)                                                                         \
    })

/* The same loops over a pre-broadcast block, for graph-mode fusion (mst_op_desc.elem_f32). */
#define UNARY_LOOP_ELEM(T, EXPR) \
    for (int64_t i = 0; i < n; i++) { T x = xs_[0][i]; ys[i] = (EXPR); }
#define GRAD_LOOP_ELEM(T, EXPR) \
    for (int64_t i = 0; i < n; i++) { T g = xs_[0][i], x = xs_[1][i]; ys[i] = (EXPR); }

/* ---- kernels ---- */

ACT_KERNELS(relu, UNARY_LOOP, x <= 0 ? (T)0 : x)
ACT_KERNELS(relu_grad, GRAD_LOOP, x > 0 ? g : (T)0)

/* ---- relu and relu_grad on f16/bf16: selects, done on the bits ----
 * Both only pick a value or zero, so on half tensors they run on the 16-bit patterns: what the
 * half-via-f32 kernel computes (widen, the f32 select, round to nearest even), which is the value
 * itself, a NaN made quiet, or +0. 32 lanes a step with AVX-512BW; the scalar loop is the
 * definition (tests/amp/test_half.c compares both with the half-via-f32 kernel; its
 * amp.test_half.noavx512 run masks AVX-512). No reference of their own: these are exact. */
typedef struct { uint16_t abs_mask, inf, quiet; } half_bits;

static half_bits half_bits_of(mst_dtype t) {
    return t == MST_DTYPE_BF16 ? (half_bits){0x7fff, 0x7f80, 0x0040} : (half_bits){0x7fff, 0x7c00, 0x0200};
}
static inline bool hb_nan(half_bits b, uint16_t v) { return (v & b.abs_mask) > b.inf; }
static inline uint16_t hb_quiet(half_bits b, uint16_t v) { return hb_nan(b, v) ? (uint16_t)(v | b.quiet) : v; }
/* v > 0 as the f32 compare decides it: positive, nonzero, not NaN */
static inline bool hb_positive(half_bits b, uint16_t v) { return (int16_t)v > 0 && !hb_nan(b, v); }

#if defined(__x86_64__)
#include <immintrin.h>
/* 32 lanes: the mask of lanes whose value is NaN, and of lanes that are > 0 */
__attribute__((target("avx512f,avx512bw"))) static inline __mmask32 hb_nan32(__m512i v, __m512i abs, __m512i inf) {
    return _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, abs), inf);
}
__attribute__((target("avx512f,avx512bw"))) static int64_t relu_half_avx512(half_bits b, const uint16_t *x, uint16_t *y,
                                                                            const uint16_t *g, int64_t n) {
    const __m512i abs = _mm512_set1_epi16((short)b.abs_mask), inf = _mm512_set1_epi16((short)b.inf);
    const __m512i quiet = _mm512_set1_epi16((short)b.quiet), zero = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i xv = _mm512_loadu_si512(x + i);
        __mmask32 xnan = hb_nan32(xv, abs, inf);
        __mmask32 pos = _mm512_cmpgt_epi16_mask(xv, zero) & ~xnan;
        __m512i v = g ? _mm512_loadu_si512(g + i) : xv;             /* relu_grad picks g, relu x */
        __mmask32 vnan = g ? hb_nan32(v, abs, inf) : xnan;
        v = _mm512_mask_blend_epi16(vnan, v, _mm512_or_si512(v, quiet));
        /* relu keeps x where x > 0 or x is NaN; relu_grad keeps g where x > 0 */
        __mmask32 keep = g ? pos : (__mmask32)(pos | xnan);
        _mm512_storeu_si512(y + i, _mm512_maskz_mov_epi16(keep, v));
    }
    return i;
}
#endif

/* relu (g NULL: y = x <= 0 ? 0 : x) or relu_grad (y = x > 0 ? g : 0) on half elements [0, n). */
static void relu_half_range(half_bits b, const uint16_t *x, uint16_t *y, const uint16_t *g, int64_t n) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (mst_cpu_has(MST_CPU_AVX512F) && mst_cpu_has(MST_CPU_AVX512BW)) i = relu_half_avx512(b, x, y, g, n);
#endif
    for (; i < n; i++) {
        bool pos = hb_positive(b, x[i]);
        if (g) y[i] = pos ? hb_quiet(b, g[i]) : 0;
        else y[i] = pos || hb_nan(b, x[i]) ? hb_quiet(b, x[i]) : 0;
    }
}

static void relu_half_chunk(void *arg, int64_t begin, int64_t end, int worker) {
    const mst_op_call *c = arg;
    half_bits b = half_bits_of(c->out[0]->dtype);
    const uint16_t *x = (const uint16_t *)mst_tensor_data(c->in[c->n_in - 1]);
    const uint16_t *g = c->n_in == 2 ? (const uint16_t *)mst_tensor_data(c->in[0]) : NULL;
    relu_half_range(b, x + begin, (uint16_t *)mst_tensor_data(c->out[0]) + begin, g ? g + begin : NULL, end - begin);
}

/* Half relu/relu_grad whose operands all have the output's half dtype; other mixes take the half kernel. */
static mst_status relu_half(mst_ctx *ctx, const mst_op_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]->dtype != c->out[0]->dtype) return mst_half_kernel(ctx, c);
    return run_split(ctx, c, relu_half_chunk);
}

/* Phi(x) = 0.5 erfc(-x / sqrt 2), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). f64: the loops above with
 * libm's double functions. f32: blocks through the vector math (runtime/ops/vmath.h: glibc's
 * libmvec where the CPU has AVX-512 or AVX2), the same expression, the kernel and the graph-mode
 * fusion through the same block functions. */
#define GELU_EXPR(T, x, erfc_) ((T)0.5 * (x) * (erfc_))
#define GELU_GRAD_EXPR(T, g, x, erfc_, exp_) ((g) * ((T)0.5 * (erfc_) + (x) * (T)K_INV_SQRT_2PI * (exp_)))
ACT_KERNELS_F64(gelu, UNARY_LOOP, GELU_EXPR(T, x, ERFC(-x * (T)K_SQRT1_2)))
ACT_KERNELS_F64(gelu_grad, GRAD_LOOP, GELU_GRAD_EXPR(T, g, x, ERFC(-x * (T)K_SQRT1_2), EXP((T)-0.5 * x * x)))

enum { k_vmath_block = 256 };

/* The blocks around the vector math are compiled for the generic target and for AVX2 (8 floats a
 * vector instead of 4), chosen by the CPU; -ffp-contract=off keeps one rounding per operation in
 * both, so they give the same bits (test_activation runs with AVX2 and AVX-512 masked too). */
static inline __attribute__((always_inline)) void gelu_block_body(const float *x, float *y, int64_t n) {
    float t[k_vmath_block];
    for (int64_t i0 = 0; i0 < n; i0 += k_vmath_block) {
        int64_t m = n - i0 < k_vmath_block ? n - i0 : k_vmath_block;
        for (int64_t i = 0; i < m; i++) t[i] = -x[i0 + i] * (float)K_SQRT1_2;
        mst_vmath_erfcf(t, t, m);
        for (int64_t i = 0; i < m; i++) y[i0 + i] = GELU_EXPR(float, x[i0 + i], t[i]);
    }
}
static inline __attribute__((always_inline)) void gelu_grad_block_body(const float *g, const float *x, float *y, int64_t n) {
    float t[k_vmath_block], u[k_vmath_block];
    for (int64_t i0 = 0; i0 < n; i0 += k_vmath_block) {
        int64_t m = n - i0 < k_vmath_block ? n - i0 : k_vmath_block;
        for (int64_t i = 0; i < m; i++) {
            float xi = x[i0 + i];
            t[i] = -xi * (float)K_SQRT1_2;
            u[i] = -0.5f * xi * xi;
        }
        mst_vmath_erfcf(t, t, m);
        mst_vmath_expf(u, u, m);
        for (int64_t i = 0; i < m; i++) y[i0 + i] = GELU_GRAD_EXPR(float, g[i0 + i], x[i0 + i], t[i], u[i]);
    }
}
static void gelu_block_f32_portable(const float *x, float *y, int64_t n) { gelu_block_body(x, y, n); }
__attribute__((target("avx2"))) static void gelu_block_f32_avx2(const float *x, float *y, int64_t n) {
    gelu_block_body(x, y, n);
}
static void gelu_grad_block_f32_portable(const float *g, const float *x, float *y, int64_t n) {
    gelu_grad_block_body(g, x, y, n);
}
__attribute__((target("avx2"))) static void gelu_grad_block_f32_avx2(const float *g, const float *x, float *y, int64_t n) {
    gelu_grad_block_body(g, x, y, n);
}

static void gelu_block_f32(const float *x, float *y, int64_t n) {
    (mst_cpu_has(MST_CPU_AVX2) ? gelu_block_f32_avx2 : gelu_block_f32_portable)(x, y, n);
}
static void gelu_grad_block_f32(const float *g, const float *x, float *y, int64_t n) {
    (mst_cpu_has(MST_CPU_AVX2) ? gelu_grad_block_f32_avx2 : gelu_grad_block_f32_portable)(g, x, y, n);
}

static void gelu_chunk_f32(void *arg, int64_t begin, int64_t end, int worker) {
    const mst_op_call *c = arg;
    gelu_block_f32(mst_tensor_f32(c->in[0]) + begin, mst_tensor_f32(c->out[0]) + begin, end - begin);
}
static void gelu_grad_chunk_f32(void *arg, int64_t begin, int64_t end, int worker) {
    const mst_op_call *c = arg;
    gelu_grad_block_f32(mst_tensor_f32(c->in[0]) + begin, mst_tensor_f32(c->in[1]) + begin, mst_tensor_f32(c->out[0]) + begin,
                        end - begin);
}
/* ~1 ns an element (bench_transformer_ops), 3x relu's: ranges of 2^15 elements are ~35 us of work */
enum { k_gelu_min_chunk = 1 << 15 };
static mst_status gelu_f32(mst_ctx *ctx, const mst_op_call *c) {
    return run_split_from(ctx, c, gelu_chunk_f32, k_gelu_min_chunk);
}
static mst_status gelu_grad_f32(mst_ctx *ctx, const mst_op_call *c) {
    return run_split_from(ctx, c, gelu_grad_chunk_f32, k_gelu_min_chunk);
}
static void gelu_elem_f32(float *ys, const float *const xs_[], int64_t n, const mst_attrs *attrs) {
    (void)attrs;
    gelu_block_f32(xs_[0], ys, n);
}
static void gelu_grad_elem_f32(float *ys, const float *const xs_[], int64_t n, const mst_attrs *attrs) {
    (void)attrs;
    gelu_grad_block_f32(xs_[0], xs_[1], ys, n);
}

/* the grad ops read the forward output y in the second input slot (named x in GRAD_BODY) */
ACT_KERNELS(tanh, UNARY_LOOP, TANH(x))
ACT_KERNELS(tanh_grad, GRAD_LOOP, g * ((T)1 - x * x))

/* e = exp(-|x|) is in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0. */
static inline float sigmoid_f32_1(float x) {
    float e = expf(-fabsf(x));
    return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double sigmoid_f64_1(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
#define SIGMOID1(v) _Generic((v), float: sigmoid_f32_1, default: sigmoid_f64_1)(v)
ACT_KERNELS(sigmoid, UNARY_LOOP, SIGMOID1(x))
ACT_KERNELS(sigmoid_grad, GRAD_LOOP, g * x * ((T)1 - x))

/* ---- backward rules ---- */

static mst_status relu_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_relu_grad(ctx, gy[0], c->in[0]);
    return ctx->status;
}

static mst_status gelu_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_gelu_grad(ctx, gy[0], c->in[0]);
    return ctx->status;
}

static mst_status tanh_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_tanh_grad(ctx, gy[0], c->out[0]);
    return ctx->status;
}

static mst_status sigmoid_backward(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]) {
    gx[0] = mst_sigmoid_grad(ctx, gy[0], c->out[0]);
    return ctx->status;
}

/* ---- descriptors ---- */

#define COST_PER_ELEMENT(NAME, K) \
    static int64_t cost_##NAME(const mst_op_call *c) { return (K) * op_cost_numel(c); }
COST_PER_ELEMENT(relu, 1)
COST_PER_ELEMENT(relu_grad, 1)
COST_PER_ELEMENT(gelu, 4)
COST_PER_ELEMENT(gelu_grad, 10)
COST_PER_ELEMENT(tanh, 1)
COST_PER_ELEMENT(tanh_grad, 3)
COST_PER_ELEMENT(sigmoid, 4)
COST_PER_ELEMENT(sigmoid_grad, 3)

/* HALF: a kernel of the op's own for f16/bf16 (NULL: the generic half kernel); FLAGS: extra
 * descriptor flags (relu and relu_grad select, so MST_OPF_HALF_EXACT). */
#define ACTIVATION_KERNELS(NAME, HALF) \
    {[MST_DTYPE_F32] = NAME##_f32, [MST_DTYPE_F64] = NAME##_f64, [MST_DTYPE_F16] = HALF, [MST_DTYPE_BF16] = HALF}
#define ACTIVATION_DESC(NAME, BACKWARD, AMP, HALF, FLAGS)                                 \
    const mst_op_desc mst_desc_##NAME = {                                                 \
        .name = #NAME, .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,                  \
        .flags = MST_OPF_ELEMENTWISE | (FLAGS), .amp_class = AMP,                                   \
        .infer = op_infer_like_input0, .kernels[MST_DEVICE_CPU] = ACTIVATION_KERNELS(NAME, HALF), \
        .backward = BACKWARD, .flops = cost_##NAME, .elem_f32 = NAME##_elem_f32,          \
    };
/* (gy, x) or (gy, y): same dtype and shape, checked by op_infer_like_input0 */
#define ACTIVATION_GRAD_DESC(NAME, HALF, FLAGS)                                           \
    const mst_op_desc mst_desc_##NAME = {                                                 \
        .name = #NAME, .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,                  \
        .flags = MST_OPF_ELEMENTWISE | MST_OPF_GRAD_OP | (FLAGS),                                   \
        .infer = op_infer_like_input0, .kernels[MST_DEVICE_CPU] = ACTIVATION_KERNELS(NAME, HALF), \
        .flops = cost_##NAME, .elem_f32 = NAME##_elem_f32,                                \
    };

ACTIVATION_DESC(relu, relu_backward, MST_AMP_CLASS_ALLOW, relu_half, MST_OPF_HALF_EXACT)
ACTIVATION_DESC(gelu, gelu_backward, MST_AMP_CLASS_HALF, NULL, 0)
ACTIVATION_DESC(tanh, tanh_backward, MST_AMP_CLASS_HALF, NULL, 0)
ACTIVATION_DESC(sigmoid, sigmoid_backward, MST_AMP_CLASS_HALF, NULL, 0)
ACTIVATION_GRAD_DESC(relu_grad, relu_half, MST_OPF_HALF_EXACT)
ACTIVATION_GRAD_DESC(gelu_grad, NULL, 0)
ACTIVATION_GRAD_DESC(tanh_grad, NULL, 0)
ACTIVATION_GRAD_DESC(sigmoid_grad, NULL, 0)

/* ---- public constructors ---- */

mst_tensor *mst_relu(mst_ctx *ctx, mst_tensor *x) { return op_call1(ctx, MST_OP_RELU, x, NULL, NULL, NULL); }
mst_tensor *mst_gelu(mst_ctx *ctx, mst_tensor *x) { return op_call1(ctx, MST_OP_GELU, x, NULL, NULL, NULL); }
mst_tensor *mst_tanh(mst_ctx *ctx, mst_tensor *x) { return op_call1(ctx, MST_OP_TANH, x, NULL, NULL, NULL); }
mst_tensor *mst_sigmoid(mst_ctx *ctx, mst_tensor *x) { return op_call1(ctx, MST_OP_SIGMOID, x, NULL, NULL, NULL); }

/* op_call1 counts inputs up to the last non-NULL one, so a NULL gy from a failed call would be
 * dropped; dispatch both explicitly so the NULL reaches the dispatcher and its error passes on. */
static mst_tensor *call_grad(mst_ctx *ctx, mst_op op, mst_tensor *gy, mst_tensor *x) {
    mst_tensor *in[2] = {gy, x};
    return mst_dispatch1(ctx, op, 2, in, NULL);
}

mst_tensor *mst_relu_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x) { return call_grad(ctx, MST_OP_RELU_GRAD, gy, x); }
mst_tensor *mst_gelu_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x) { return call_grad(ctx, MST_OP_GELU_GRAD, gy, x); }
mst_tensor *mst_tanh_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y) { return call_grad(ctx, MST_OP_TANH_GRAD, gy, y); }
mst_tensor *mst_sigmoid_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y) {
    return call_grad(ctx, MST_OP_SIGMOID_GRAD, gy, y);
}
