/* bench_transformer_ops.c — the transformer's non-GEMM kernels on langid_transformer's shapes.
 *
 * GELU and its gradient (the feed-forward's (64, 24, 128) activations), dropout (p = 0.1) on the
 * attention probabilities (64, 4, 24, 24) and on the residual stream (64, 24, 32), and the masked
 * softmax of the attention scores (64, 4, 24, 24) with a padding mask (sample b's last b % 12 keys
 * absent), the attention's two head permutes (rows of 8 floats), and layer norm and its gradient
 * on the residual stream (64, 24, 32), all f32 through the eager dispatcher; median microseconds
 * per call of 15 repeats, each at least a few milliseconds long. Where the op has a reference
 * kernel of its own (mst_ctx_set_force_ref), the reference is timed too, its repeats taking turns
 * with the fast kernel's, and the row gives the ratio. The first line names the vector math path the f32 GELU and
 * softmax take on this CPU (runtime/ops/vmath.h). Threads: MST_BENCH_THREADS (default 1).
 * MST_BENCH_ONLY=text keeps the rows whose name contains it.
 *
 *     ./build/bench_transformer_ops
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/timing.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/op.h"
#include "runtime/cpu_features.h"
#include "runtime/ops.h"
#include "runtime/ops/vmath.h"

enum { k_repeats = 15 };
static const double k_min_repeat_ms = 4;

typedef enum { K_GELU, K_GELU_GRAD, K_DROPOUT, K_MASKED_SOFTMAX, K_PERMUTE_QKV, K_PERMUTE_HEADS, K_LAYERNORM, K_LAYERNORM_GRAD } kind;

typedef struct {
    const char *name;
    kind k;
    int ndim;
    int64_t shape[5];
} op_case;

static const op_case cases[] = {
    {"gelu (64, 24, 128)", K_GELU, 3, {64, 24, 128}},
    {"gelu_grad (64, 24, 128)", K_GELU_GRAD, 3, {64, 24, 128}},
    {"dropout 0.1 (64, 4, 24, 24)", K_DROPOUT, 4, {64, 4, 24, 24}},
    {"dropout 0.1 (64, 24, 32)", K_DROPOUT, 3, {64, 24, 32}},
    {"masked_softmax (64, 4, 24, 24)", K_MASKED_SOFTMAX, 4, {64, 4, 24, 24}},
    {"permute qkv (64, 24, 3, 4, 8) -> (3, 64, 4, 24, 8)", K_PERMUTE_QKV, 5, {64, 24, 3, 4, 8}},
    {"permute heads (64, 4, 24, 8) -> (64, 24, 4, 8)", K_PERMUTE_HEADS, 4, {64, 4, 24, 8}},
    {"layernorm (64, 24, 32)", K_LAYERNORM, 3, {64, 24, 32}},
    {"layernorm_grad (64, 24, 32)", K_LAYERNORM_GRAD, 3, {64, 24, 32}},
};

static const mst_op k_op_of[] = {[K_GELU] = MST_OP_GELU, [K_GELU_GRAD] = MST_OP_GELU_GRAD, [K_DROPOUT] = MST_OP_DROPOUT,
                                 [K_MASKED_SOFTMAX] = MST_OP_MASKED_SOFTMAX, [K_PERMUTE_QKV] = MST_OP_TRANSPOSE,
                                 [K_PERMUTE_HEADS] = MST_OP_TRANSPOSE, [K_LAYERNORM] = MST_OP_LAYERNORM,
                                 [K_LAYERNORM_GRAD] = MST_OP_LAYERNORM_GRAD};

/* layer norm's parameters and saved statistics (d_model 32), made once */
static mst_tensor *ln_gamma, *ln_beta, *ln_mean, *ln_rstd;

static mst_tensor *run(mst_ctx *ctx, kind k, mst_tensor *x, mst_tensor *aux) {
    switch (k) {
    case K_LAYERNORM: return mst_layernorm(ctx, x, ln_gamma, ln_beta, 1e-5);
    case K_LAYERNORM_GRAD: {
        mst_tensor *g[3];
        return mst_layernorm_grad(ctx, aux, x, ln_gamma, ln_mean, ln_rstd, g) == MST_OK ? g[0] : NULL;
    }
    case K_GELU: return mst_gelu(ctx, x);
    case K_GELU_GRAD: return mst_gelu_grad(ctx, aux, x);
    case K_DROPOUT: return mst_dropout(ctx, x, 0.1, true);
    case K_PERMUTE_QKV: return mst_permute(ctx, x, (int[]){2, 0, 3, 1, 4});
    case K_PERMUTE_HEADS: return mst_permute(ctx, x, (int[]){0, 2, 1, 3});
    default: return mst_masked_softmax(ctx, x, aux);
    }
}

/* Median ms per call of the fast kernel (out[0]) and, when with_ref, of the reference (out[1]), their
 * repeats taking turns. */
static void time_case(mst_ctx *ctx, const op_case *c, bool with_ref, double out[2]) {
    mst_tensor *x = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, c->ndim, c->shape, 0, 2));
    mst_tensor *aux = NULL;
    if (c->k == K_GELU_GRAD || c->k == K_LAYERNORM_GRAD)
        aux = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, c->ndim, c->shape, 0, 1));
    if (c->k == K_MASKED_SOFTMAX) {
        int64_t b = c->shape[0], lk = c->shape[c->ndim - 1];
        aux = mst_tensor_retain(mst_tensor_new(ctx, MST_DTYPE_I32, 2, (int64_t[]){b, lk}));
        for (int64_t i = 0; i < b; i++)
            for (int64_t k = 0; k < lk; k++) mst_tensor_i32(aux)[i * lk + k] = k < lk - i % 12 ? 1 : 0;
    }
    int calls = 1;
    for (;;) {      /* warm up and size a repeat */
        double t0 = bench_now_ms();
        for (int i = 0; i < calls; i++) {
            mst_pool_push(ctx);
            if (!run(ctx, c->k, x, aux)) { fprintf(stderr, "error: %s\n", mst_ctx_error(ctx)); exit(2); }
            mst_pool_pop(ctx);
        }
        if (bench_now_ms() - t0 >= k_min_repeat_ms) break;
        calls *= 2;
    }
    double v[2][k_repeats];
    for (int r = 0; r < k_repeats; r++)
        for (int ref = 0; ref <= (with_ref ? 1 : 0); ref++) {
            mst_ctx_set_force_ref(ctx, ref);
            double t0 = bench_now_ms();
            for (int i = 0; i < calls; i++) {
                mst_pool_push(ctx);
                run(ctx, c->k, x, aux);
                mst_pool_pop(ctx);
            }
            v[ref][r] = (bench_now_ms() - t0) / calls;
        }
    mst_ctx_set_force_ref(ctx, false);
    mst_tensor_release(x);
    if (aux) mst_tensor_release(aux);
    out[0] = bench_median(v[0], k_repeats);
    out[1] = with_ref ? bench_median(v[1], k_repeats) : 0;
}

int main(void) {
    const char *env = getenv("MST_BENCH_THREADS"), *only = getenv("MST_BENCH_ONLY");
    int threads = env ? atoi(env) : 1;
    if (threads < 1) threads = 1;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 7, .n_threads = threads});
    if (!ctx) return 2;
    mst_grad_set_enabled(ctx, false);
    printf("# mstune transformer ops: %s; threads %d; vector math %s\n\n", mst_cpu_info_get()->model, threads,
           mst_vmath_path());
    const int64_t d_model = 32;
    ln_gamma = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &d_model, 1, 0.2));
    ln_beta = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 1, &d_model, 0, 0.2));
    ln_mean = mst_tensor_retain(mst_tensor_randn(ctx, MST_DTYPE_F32, 2, (int64_t[]){64, 24}, 0, 1));
    ln_rstd = mst_tensor_retain(mst_tensor_full(ctx, MST_DTYPE_F32, 2, (int64_t[]){64, 24}, 0.5));
    printf("| op | us per call | reference kernel us | fast vs reference |\n|---|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (only && !strstr(cases[i].name, only)) continue;
        bool with_ref = mst_op_table[k_op_of[cases[i].k]]->ref[MST_DEVICE_CPU][MST_DTYPE_F32] != NULL;
        double t[2];
        time_case(ctx, &cases[i], with_ref, t);
        if (with_ref) printf("| %s | %.1f | %.1f | %.2fx |\n", cases[i].name, 1e3 * t[0], 1e3 * t[1], t[1] / t[0]);
        else printf("| %s | %.1f | - | - |\n", cases[i].name, 1e3 * t[0]);
        fflush(stdout);
    }
    mst_ctx_free(ctx);
    return 0;
}
