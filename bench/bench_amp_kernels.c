/* bench_amp_kernels.c — what mixed precision costs per kernel on this CPU, and what conversions run at.
 *
 * 1. Per-kernel time of linear, conv2d, relu, relu_grad, batchnorm and its gradient, max pooling and
 *    its gradient (through the eager dispatcher) in f32, f16 and bf16, batch norm with O2's f32
 *    parameters; small shapes, then the cnn's at batch 64 (bench/torch_compare's cnn:64 row). Without half
 *    arithmetic half values are computed in f32: GEMM and conv on oneDNN's bf16 kernels where
 *    the CPU has them, batch norm and elementwise ops widening cache-sized pieces
 *    (runtime/ops/norm.c, runtime/amp/half_kernels.c), so the columns show what that costs or saves.
 * 2. Conversion throughput (GB/s, bytes read + written) of f32 <-> f16/bf16 for the scalar,
 *    AVX2+F16C and AVX-512F paths.
 * 3. OpenBLAS's cblas_sbgemm, looked up at run time (Debian's 0.3.21 declares it but does not export
 *    it): when present, timed against convert-to-f32 + sgemm on the same shape.
 * 4. Batch norm and its gradient on nChw16c tensors, as graph mode's blocked chains run them
 *    (runtime/layout.h), f32 and bf16 with f32 parameters, on the cnn's batch-64 shapes.
 * Every figure is the median of repeats in one run; a repeat lasts at least a few milliseconds.
 * Threads: MST_BENCH_THREADS (default 1), for the kernels' pool and OpenBLAS alike;
 * MST_BENCH_ONLY=text keeps the kernel rows whose name contains it; MST_BENCH_SECTIONS=digits runs those
 * sections only (default all).
 *
 *     ./build/bench_amp_kernels > amp.md
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/timing.h"
#include "runtime/amp/half.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/layout.h"
#include "runtime/op.h"
#include "runtime/ops.h"

enum { k_repeats = 15 };
static const double k_min_repeat_s = 0.004;

/* ---- kernels ---- */

typedef enum { K_LINEAR, K_CONV, K_RELU, K_BN, K_RELU_GRAD, K_BN_GRAD, K_MAXPOOL, K_MAXPOOL_GRAD } kernel_kind;

typedef struct {
    const char *name;
    kernel_kind kind;
    int n_in;
    int ndim[5];
    int64_t shape[5][4];
} kernel_case;

/* The first six: small shapes, one of each kind; then the cnn's (workloads/cnn.c, width 32) at
 * batch 64, the shapes of bench/torch_compare's cnn:64 row. */
static const kernel_case kcases[] = {
    {"linear 128x784 -> 256", K_LINEAR, 3, {2, 2, 1}, {{128, 784}, {256, 784}, {256}}},
    {"conv2d 32x16x14x14, 16x3x3", K_CONV, 2, {4, 4}, {{32, 16, 14, 14}, {16, 16, 3, 3}}},
    {"relu 32x16x28x28", K_RELU, 1, {4}, {{32, 16, 28, 28}}},
    {"batchnorm 32x16x28x28 (train; O2: f32 params)", K_BN, 5, {4, 1, 1, 1, 1}, {{32, 16, 28, 28}, {16}, {16}, {16}, {16}}},
    {"relu_grad 32x16x28x28", K_RELU_GRAD, 2, {4, 4}, {{32, 16, 28, 28}, {32, 16, 28, 28}}},
    {"batchnorm_grad 32x16x28x28 (O2: f32 params)", K_BN_GRAD, 5, {4, 4, 1, 1, 1}, {{32, 16, 28, 28}, {32, 16, 28, 28}, {16}, {16}, {16}}},
    {"cnn b64: batchnorm 64x32x28x28", K_BN, 5, {4, 1, 1, 1, 1}, {{64, 32, 28, 28}, {32}, {32}, {32}, {32}}},
    {"cnn b64: batchnorm 64x32x14x14", K_BN, 5, {4, 1, 1, 1, 1}, {{64, 32, 14, 14}, {32}, {32}, {32}, {32}}},
    {"cnn b64: batchnorm 64x64x7x7", K_BN, 5, {4, 1, 1, 1, 1}, {{64, 64, 7, 7}, {64}, {64}, {64}, {64}}},
    {"cnn b64: batchnorm_grad 64x32x28x28", K_BN_GRAD, 5, {4, 4, 1, 1, 1}, {{64, 32, 28, 28}, {64, 32, 28, 28}, {32}, {32}, {32}}},
    {"cnn b64: batchnorm_grad 64x32x14x14", K_BN_GRAD, 5, {4, 4, 1, 1, 1}, {{64, 32, 14, 14}, {64, 32, 14, 14}, {32}, {32}, {32}}},
    {"cnn b64: batchnorm_grad 64x64x7x7", K_BN_GRAD, 5, {4, 4, 1, 1, 1}, {{64, 64, 7, 7}, {64, 64, 7, 7}, {64}, {64}, {64}}},
    {"cnn b64: maxpool2d 2x2 64x32x28x28", K_MAXPOOL, 1, {4}, {{64, 32, 28, 28}}},
    {"cnn b64: maxpool2d_grad 64x32x14x14 -> 28x28", K_MAXPOOL_GRAD, 2, {4, 4}, {{64, 32, 14, 14}, {64, 32, 14, 14}}},
    {"cnn b64: relu_grad 64x32x28x28", K_RELU_GRAD, 2, {4, 4}, {{64, 32, 28, 28}, {64, 32, 28, 28}}},
};

static mst_tensor *run_kernel(mst_ctx *ctx, const kernel_case *k, mst_tensor *const in[]) {
    switch (k->kind) {
    case K_LINEAR: return mst_linear(ctx, in[0], in[1], in[2]);
    case K_CONV: return mst_conv2d(ctx, in[0], in[1], NULL, 1, 1, 1, 1);
    case K_RELU: return mst_relu(ctx, in[0]);
    case K_BN: return mst_batchnorm(ctx, in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
    case K_RELU_GRAD: return mst_relu_grad(ctx, in[0], in[1]);
    case K_MAXPOOL: return mst_maxpool2d(ctx, in[0], 2, 2, 2, 2, 0, 0);
    case K_MAXPOOL_GRAD: return mst_maxpool2d_grad(ctx, in[0], in[1], (int)k->shape[0][2] * 2, (int)k->shape[0][3] * 2);
    case K_BN_GRAD: {
        mst_tensor *out[3] = {0};
        return mst_batchnorm_grad(ctx, in[0], in[1], in[2], in[3], in[4], true, out) == MST_OK ? out[0] : NULL;
    }
    }
    return NULL;
}

/* The indices of 2x2 stride-2 windows over (H, W) = (2P, 2Q) planes: a pseudo-random element of
 * each window, as a max pool of random data picks. */
static mst_tensor *pool_indices(mst_ctx *ctx, const int64_t shape[4]) {
    mst_tensor *t = mst_tensor_new(ctx, MST_DTYPE_I32, 4, shape);
    int32_t *ip = mst_tensor_i32(t);
    int64_t P = shape[2], Q = shape[3], W = 2 * Q;
    uint32_t r = 12345;
    for (int64_t pl = 0; pl < shape[0] * shape[1]; pl++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t q = 0; q < Q; q++) {
                r = r * 1664525u + 1013904223u;
                ip[(pl * P + p) * Q + q] = (int32_t)((2 * p + (r >> 31)) * W + 2 * q + ((r >> 30) & 1));
            }
    return t;
}

/* Median seconds per call of run(ctx, arg) (false: an error, which ends the program), after a
 * warm-up that sizes a repeat to at least k_min_repeat_s. */
static double median_call_s(mst_ctx *ctx, bool (*run)(mst_ctx *, void *), void *arg) {
    int calls = 1;
    for (;;) {      /* warm up and size a repeat */
        double t0 = bench_now_ms() * 1e-3;
        for (int c = 0; c < calls; c++)
            if (!run(ctx, arg)) { fprintf(stderr, "error: %s\n", mst_ctx_error(ctx)); exit(2); }
        if (bench_now_ms() * 1e-3 - t0 >= k_min_repeat_s) break;
        calls *= 2;
    }
    double v[k_repeats];
    for (int r = 0; r < k_repeats; r++) {
        double t0 = bench_now_ms() * 1e-3;
        for (int c = 0; c < calls; c++) run(ctx, arg);
        v[r] = (bench_now_ms() * 1e-3 - t0) / calls;
    }
    return bench_median(v, k_repeats);
}

typedef struct {
    const kernel_case *k;
    mst_tensor *const *in;
} kernel_run;

/* One eager call of the case, its outputs released with the pool frame. */
static bool run_kernel_once(mst_ctx *ctx, void *arg) {
    const kernel_run *r = arg;
    mst_pool_push(ctx);
    bool ok = run_kernel(ctx, r->k, r->in) != NULL;
    mst_pool_pop(ctx);
    return ok;
}

/* Median seconds per call of kernel case `which` in dtype dt (running statistics stay f32). */
static double time_kernel(mst_ctx *ctx, int which, mst_dtype dt) {
    const kernel_case *k = &kcases[which];
    mst_tensor *in[5];
    for (int i = 0; i < k->n_in; i++) {
        if (k->kind == K_MAXPOOL_GRAD && i == 1) {
            in[i] = mst_tensor_retain(pool_indices(ctx, k->shape[i]));
            continue;
        }
        /* batch norm's vectors stay f32 as amp O2 keeps them (gamma, beta, statistics) */
        bool vec = (k->kind == K_BN || k->kind == K_BN_GRAD) && k->ndim[i] == 1, stats = vec && i >= 3;
        mst_tensor *t = mst_tensor_randn(ctx, MST_DTYPE_F32, k->ndim[i], k->shape[i], stats ? 1 : 0, stats ? 0.1 : 1);
        if (k->kind == K_BN_GRAD && i == 4) t = mst_tensor_full(ctx, MST_DTYPE_F32, 1, k->shape[i], 1.0);   /* invstd */
        in[i] = mst_tensor_retain(vec ? t : mst_cast(ctx, t, dt));
    }
    double t = median_call_s(ctx, run_kernel_once, &(kernel_run){k, in});
    for (int i = 0; i < k->n_in; i++) mst_tensor_release(in[i]);
    return t;
}

static void bench_kernels(mst_ctx *ctx) {
    printf("## Kernels (eager dispatch, median of %d repeats)\n\n", k_repeats);
    printf("| kernel | f32 (us) | f16 (us) | bf16 (us) | f16 / f32 | bf16 / f32 |\n|---|---:|---:|---:|---:|---:|\n");
    mst_grad_set_enabled(ctx, false);
    const char *only = getenv("MST_BENCH_ONLY");
    for (int i = 0; i < (int)(sizeof(kcases) / sizeof(kcases[0])); i++) {
        if (only && !strstr(kcases[i].name, only)) continue;
        double f32 = time_kernel(ctx, i, MST_DTYPE_F32), f16 = time_kernel(ctx, i, MST_DTYPE_F16);
        double bf16 = time_kernel(ctx, i, MST_DTYPE_BF16);
        printf("| %s | %.1f | %.1f | %.1f | %.2f | %.2f |\n", kcases[i].name, 1e6 * f32, 1e6 * f16, 1e6 * bf16, f16 / f32,
               bf16 / f32);
    }
    printf("\n");
}

/* ---- conversions ---- */

static double time_conversion(mst_half_path p, mst_dtype half, bool narrow, const float *f, uint16_t *h, float *out,
                              size_t n) {
    double v[k_repeats];
    int calls = 1;
    for (;;) {
        double t0 = bench_now_ms() * 1e-3;
        for (int c = 0; c < calls; c++) {
            if (narrow) mst_half_from_f32_path(p, half, f, h, n);
            else mst_half_to_f32_path(p, half, h, out, n);
        }
        if (bench_now_ms() * 1e-3 - t0 >= k_min_repeat_s) break;
        calls *= 2;
    }
    for (int r = 0; r < k_repeats; r++) {
        double t0 = bench_now_ms() * 1e-3;
        for (int c = 0; c < calls; c++) {
            if (narrow) mst_half_from_f32_path(p, half, f, h, n);
            else mst_half_to_f32_path(p, half, h, out, n);
        }
        v[r] = (bench_now_ms() * 1e-3 - t0) / calls;
    }
    return (double)n * 6 / bench_median(v, k_repeats) * 1e-9;   /* 4 bytes f32 + 2 bytes half per element */
}

static void bench_conversions(void) {
    size_t n = (size_t)1 << 22;     /* 16 MiB of f32: past the caches */
    float *f = malloc(n * 4), *out = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    if (!f || !out || !h) abort();
    for (size_t i = 0; i < n; i++) f[i] = (float)((double)(i % 9973) * 0.37 - 1800.0);
    mst_half_from_f32_path(MST_HALF_PATH_SCALAR, MST_DTYPE_F16, f, h, n);
    printf("## Conversions (%zu elements, GB/s of bytes read + written, median of %d repeats)\n\n", n, k_repeats);
    printf("| path | f32 -> f16 | f16 -> f32 | f32 -> bf16 | bf16 -> f32 |\n|---|---:|---:|---:|---:|\n");
    for (int p = 0; p < MST_HALF_PATH_COUNT; p++) {
        if (!mst_half_path_available((mst_half_path)p)) {
            printf("| %s | n/a | n/a | n/a | n/a |\n", mst_half_path_name((mst_half_path)p));
            continue;
        }
        double r[4];
        for (int k = 0; k < 4; k++)
            r[k] = time_conversion((mst_half_path)p, k < 2 ? MST_DTYPE_F16 : MST_DTYPE_BF16, k % 2 == 0, f, h, out, n);
        printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", mst_half_path_name((mst_half_path)p), r[0], r[1], r[2], r[3]);
    }
    printf("\n");
    free(f);
    free(out);
    free(h);
}

/* ---- bf16 GEMM ---- */

typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                          const uint16_t *, blasint, const uint16_t *, blasint, float, float *, blasint);

static double median_gemm(sbgemm_fn sb, const uint16_t *ah, const uint16_t *bh, float *a, float *b, float *c, int m) {
    double v[k_repeats];
    for (int r = -2; r < k_repeats; r++) {
        double t0 = bench_now_ms() * 1e-3;
        if (sb) {
            sb(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f, ah, m, bh, m, 0.0f, c, m);
        } else {
            mst_half_to_f32(MST_DTYPE_BF16, ah, a, (size_t)m * m);
            mst_half_to_f32(MST_DTYPE_BF16, bh, b, (size_t)m * m);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f, a, m, b, m, 0.0f, c, m);
        }
        if (r >= 0) v[r] = bench_now_ms() * 1e-3 - t0;
    }
    return bench_median(v, k_repeats);
}

static void bench_sbgemm(void) {
    sbgemm_fn sb = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    printf("## bf16 GEMM\n\n");
    int m = 512;
    size_t n = (size_t)m * m;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    uint16_t *ah = malloc(n * 2), *bh = malloc(n * 2);
    if (!a || !b || !c || !ah || !bh) abort();
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)((double)(i % 101) / 101.0 - 0.5);
    mst_half_from_f32(MST_DTYPE_BF16, a, ah, n);
    mst_half_from_f32(MST_DTYPE_BF16, b, bh, n);
    double conv = median_gemm(NULL, ah, bh, a, b, c, m);
    double flop = 2.0 * m * m * m;
    printf("| %dx%dx%d | time (ms) | GFLOP/s |\n|---|---:|---:|\n", m, m, m);
    printf("| bf16 -> f32 + cblas_sgemm | %.3f | %.1f |\n", 1e3 * conv, flop / conv * 1e-9);
    if (sb) {
        double t = median_gemm(sb, ah, bh, a, b, c, m);
        printf("| cblas_sbgemm | %.3f | %.1f |\n", 1e3 * t, flop / t * 1e-9);
        printf("\ncblas_sbgemm is exported by the loaded OpenBLAS: %s.\n\n",
               t < conv ? "faster than convert + sgemm" : "not faster than convert + sgemm");
    } else {
        printf("\ncblas_sbgemm: not exported by the loaded OpenBLAS (declared in cblas.h, absent from the library);"
               " bf16 matmuls convert to f32 and call sgemm.\n\n");
    }
    free(a);
    free(b);
    free(c);
    free(ah);
    free(bh);
}

/* ---- batch norm in nChw16c ---- */

/* A tensor of shape (n, c, h, w) in dt, N(mean, sd) values; blocked: in nChw16c. */
static mst_tensor *bn_operand(mst_ctx *ctx, mst_dtype dt, const int64_t shape[4], bool blocked) {
    mst_tensor *f = mst_tensor_randn(ctx, MST_DTYPE_F32, 4, shape, 0.3, 1);
    mst_tensor *t = mst_tensor_new(ctx, dt, 4, shape);
    if (!f || !t) { fprintf(stderr, "error: %s\n", mst_ctx_error(ctx)); exit(2); }
    if (dt == MST_DTYPE_F32) memcpy(mst_tensor_data(t), mst_tensor_data(f), mst_tensor_nbytes(f));
    else mst_half_from_f32(dt, mst_tensor_f32(f), mst_tensor_data(t), (size_t)f->numel);
    if (blocked) {
        mst_tensor *b = mst_tensor_new(ctx, dt, 4, shape);
        mst_nchw16c_from_plain(NULL, mst_tensor_data(t), mst_tensor_data(b), shape[0], shape[1], shape[2] * shape[3],
                               mst_dtype_size(dt));
        b->layout = MST_LAYOUT_NCHW16C;
        t = b;
    }
    return mst_tensor_retain(t);
}

typedef struct {
    mst_kernel_fn kernel;
    const mst_op_call *c;
} call_run;

static bool run_call_once(mst_ctx *ctx, void *arg) {
    const call_run *r = arg;
    return r->kernel(ctx, r->c) == MST_OK;
}

/* Median seconds per call of batchnorm (grad false: training, relu fused as the cnn's first of a
 * pair) or batchnorm_grad on (n, c, h, w) in dt, every 4-D operand in nChw16c. */
static double time_bn_blocked(mst_ctx *ctx, const int64_t shape[4], mst_dtype dt, bool grad) {
    const int64_t ch[1] = {shape[1]};
    mst_op_call c = {.op = grad ? MST_OP_BATCHNORM_GRAD : MST_OP_BATCHNORM, .n_in = 5, .n_out = 3};
    c.in[0] = bn_operand(ctx, dt, shape, true);
    c.in[1] = mst_tensor_retain(grad ? bn_operand(ctx, dt, shape, true) : mst_tensor_full(ctx, MST_DTYPE_F32, 1, ch, 1.1));
    for (int i = 2; i < 5; i++)
        c.in[i] = mst_tensor_retain(mst_tensor_full(ctx, MST_DTYPE_F32, 1, ch, grad && i == 4 ? 1.0 : i == 2 ? 0.1 : 0.2));
    if (grad) c.attrs = (mst_attrs){.i = {1}};
    else c.attrs = (mst_attrs){.i = {1, 1}, .f = {0.1, 1e-5}};
    c.out[0] = bn_operand(ctx, dt, shape, true);
    for (int k = 1; k < 3; k++) c.out[k] = mst_tensor_retain(mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, ch));
    double t = median_call_s(ctx, run_call_once, &(call_run){mst_op_kernel(ctx, c.op, dt), &c});
    for (int i = 0; i < 5; i++) mst_tensor_release(c.in[i]);
    for (int k = 0; k < 3; k++) mst_tensor_release(c.out[k]);
    return t;
}

static void bench_bn_blocked(mst_ctx *ctx) {
    static const int64_t shapes[3][4] = {{64, 32, 28, 28}, {64, 32, 14, 14}, {64, 64, 7, 7}};
    printf("## Batch norm in nChw16c (graph mode's layout; median of %d repeats)\n\n", k_repeats);
    printf("| kernel | f32 (us) | bf16 (us) | f32 GB/s |\n|---|---:|---:|---:|\n");
    mst_pool_push(ctx);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 3; i++) {
            const int64_t *s = shapes[i];
            double f32 = time_bn_blocked(ctx, s, MST_DTYPE_F32, g), bf16 = time_bn_blocked(ctx, s, MST_DTYPE_BF16, g);
            /* the bytes a kernel must move: x read and y written (forward); gy, x read, gx written */
            double bytes = (double)(s[0] * s[1] * s[2] * s[3]) * 4 * (g ? 3 : 2);
            printf("| %s %lldx%lldx%lldx%lld | %.1f | %.1f | %.1f |\n", g ? "batchnorm_grad" : "batchnorm+relu", (long long)s[0],
                   (long long)s[1], (long long)s[2], (long long)s[3], 1e6 * f32, 1e6 * bf16, bytes / f32 / 1e9);
        }
    mst_pool_pop(ctx);
    printf("\n");
}

int main(void) {
    const char *env = getenv("MST_BENCH_THREADS");
    int threads = env ? atoi(env) : 1;
    if (threads < 1) threads = 1;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    if (!ctx) return 2;
    openblas_set_num_threads(threads);
    printf("# mstune amp kernels (threads %d, conversion path %s)\n\n", threads, mst_half_path_name(mst_half_best_path()));
    const char *sections = getenv("MST_BENCH_SECTIONS");    /* e.g. "4": only the nChw16c batch norms */
    if (!sections || strchr(sections, '1')) bench_kernels(ctx);
    if (!sections || strchr(sections, '2')) bench_conversions();
    if (!sections || strchr(sections, '3')) bench_sbgemm();
    if (!sections || strchr(sections, '4')) bench_bn_blocked(ctx);
    mst_ctx_free(ctx);
    return 0;
}
