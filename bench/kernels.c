/* kernels.c — GEMM-bound kernels against the raw OpenBLAS sgemm rate of the GEMMs they issue.
 *
 * For each op of the Fashion-MNIST MLP (linear layers and the matmuls of their backward) and of
 * the small ResNet-style CNN (conv2d forward, grad_input, grad_weight), this times
 *   1. cblas_sgemm alone on exactly the GEMM shape(s) the op issues (same transposes, same
 *      beta), times the number of calls the op makes, and
 *   2. the op itself through the eager dispatcher (f32, output allocation and pool included),
 * in the same run, and reports op GFLOP/s / sgemm GFLOP/s: the share of the BLAS rate that
 * survives im2col, col2im, bias and dispatch. The conv ops group several small images into one
 * GEMM; the per-image GEMM's rate is printed beside them so the grouping's effect is visible.
 * Each figure is the median of repeats after warm-up (CLOCK_MONOTONIC); a repeat runs the call
 * enough times to last a few milliseconds, and the ratio pairs the sgemm's and the op's repeat i.
 * Threads: every core unless MST_BENCH_THREADS says otherwise; the raw sgemm runs on OpenBLAS's
 * own pool at that many threads (the rate a BLAS-threaded op could reach), the ops on the
 * runtime's pool with OpenBLAS single-threaded, as training runs them. OpenBLAS's workers spin
 * for about 0.1 s after each call (measured here: a full core each), so a row times all its sgemm
 * repeats first and the op's only once they have gone to sleep — interleaving the two had the op
 * share its cores with a spinning pool, which no training run does. The GEMM shapes are those of
 * the whole batch on one pool; the runtime's ops issue the same GEMMs split between their
 * threads' images.
 */
#include "bench/kernels.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/timing.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"

static const double k_min_batch_s = 0.004;    /* a timed repeat lasts at least this long */

typedef void (*bench_fn)(void *arg);

/* A call to time: warmed up, and run `inner` times per timed repeat so a repeat lasts at least
 * k_min_batch_s. */
typedef struct {
    bench_fn fn;
    void *arg;
    int inner;
} timed_call;

static timed_call timed_init(bench_fn fn, void *arg) {
    fn(arg);
    fn(arg);
    double t0 = bench_now_ms() * 1e-3;
    fn(arg);
    double one = bench_now_ms() * 1e-3 - t0;
    int inner = one >= k_min_batch_s ? 1 : (int)(k_min_batch_s / (one > 1e-7 ? one : 1e-7)) + 1;
    return (timed_call){fn, arg, inner};
}

/* Seconds per call, one repeat. */
static double timed_run(const timed_call *t) {
    double t0 = bench_now_ms() * 1e-3;
    for (int i = 0; i < t->inner; i++) t->fn(t->arg);
    return (bench_now_ms() * 1e-3 - t0) / t->inner;
}

/* ---- raw sgemm ---- */

typedef struct {
    bool ta, tb;
    int m, n, k;
    float beta;
    int calls;          /* how many times the op issues this shape per call */
} gemm_shape;

typedef struct {
    gemm_shape s;
    float *a, *b, *c;
} sgemm_arg;

static void run_sgemm(void *p) {
    const sgemm_arg *g = p;
    const gemm_shape *s = &g->s;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k,
                1.0f, g->a, s->ta ? s->m : s->k, g->b, s->tb ? s->k : s->n, s->beta, g->c, s->n);
}

static float *random_floats(size_t n, unsigned *seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)rand_r(seed) / (float)RAND_MAX - 0.5f;
    return p;
}

/* The GEMMs an op issues, each shape timed alone on its own random operands. */
#define MAX_SHAPES 2
typedef struct {
    int n;
    int threads;        /* OpenBLAS's pool for the raw sgemm; back to 1 for the ops after */
    sgemm_arg arg[MAX_SHAPES];
    timed_call call[MAX_SHAPES];
} gemm_set;

static void gemm_set_init(gemm_set *g, const gemm_shape *shapes, int n_shapes, int threads) {
    unsigned seed = 7;
    g->n = 0;
    g->threads = threads;
    openblas_set_num_threads(threads);
    for (int i = 0; i < n_shapes && g->n < MAX_SHAPES; i++) {
        const gemm_shape *s = &shapes[i];
        if (s->calls == 0) continue;
        sgemm_arg *a = &g->arg[g->n];
        *a = (sgemm_arg){*s, random_floats((size_t)s->m * s->k, &seed), random_floats((size_t)s->k * s->n, &seed),
                         random_floats((size_t)s->m * s->n, &seed)};
        g->call[g->n] = timed_init(run_sgemm, a);
        g->n++;
    }
    openblas_set_num_threads(1);
}

/* Seconds for all the calls the op makes, one repeat. */
static double gemm_set_run(const gemm_set *g) {
    double t = 0;
    openblas_set_num_threads(g->threads);
    for (int i = 0; i < g->n; i++) t += g->arg[i].s.calls * timed_run(&g->call[i]);
    openblas_set_num_threads(1);
    return t;
}

static double gemm_set_flops(const gemm_set *g) {
    double f = 0;
    for (int i = 0; i < g->n; i++) f += 2.0 * g->arg[i].s.calls * g->arg[i].s.m * g->arg[i].s.n * g->arg[i].s.k;
    return f;
}

static void gemm_set_free(gemm_set *g) {
    for (int i = 0; i < g->n; i++) {
        free(g->arg[i].a);
        free(g->arg[i].b);
        free(g->arg[i].c);
    }
}

/* ---- ops through the dispatcher ---- */

typedef enum { OP_LINEAR, OP_MATMUL, OP_CONV, OP_CONV_GRAD_INPUT, OP_CONV_GRAD_WEIGHT } op_kind;

typedef struct {
    mst_ctx *ctx;
    op_kind kind;
    mst_tensor *t[3];
    int i[6];           /* matmul: trans flags; conv: stride, pad, then (in_h, in_w) or (k_h, k_w) */
} op_arg;

static void run_op(void *p) {
    const op_arg *o = p;
    mst_ctx *ctx = o->ctx;
    const int *i = o->i;
    mst_pool_push(ctx);
    mst_tensor *y = NULL;
    switch (o->kind) {
    case OP_LINEAR: y = mst_linear(ctx, o->t[0], o->t[1], o->t[2]); break;
    case OP_MATMUL: y = mst_matmul_t(ctx, o->t[0], o->t[1], i[0], i[1]); break;
    case OP_CONV: y = mst_conv2d(ctx, o->t[0], o->t[1], o->t[2], i[0], i[1], i[2], i[3]); break;
    case OP_CONV_GRAD_INPUT: y = mst_conv2d_grad_input(ctx, o->t[0], o->t[1], i[4], i[5], i[0], i[1], i[2], i[3]); break;
    case OP_CONV_GRAD_WEIGHT: y = mst_conv2d_grad_weight(ctx, o->t[0], o->t[1], i[4], i[5], i[0], i[1], i[2], i[3]); break;
    }
    if (!y) {
        fprintf(stderr, "bench_kernels: %s\n", mst_ctx_error(ctx));
        exit(1);
    }
    mst_pool_pop(ctx);
}

static mst_tensor *randn(mst_ctx *ctx, int ndim, const int64_t *shape) {
    mst_tensor *t = mst_tensor_randn(ctx, MST_DTYPE_F32, ndim, shape, 0, 0.5);
    if (!t) {
        fprintf(stderr, "bench_kernels: %s\n", mst_ctx_error(ctx));
        exit(1);
    }
    return t;
}

/* ---- one table row ---- */

static void print_header(FILE *out) {
    fprintf(out, "%-38s %-40s %8s %8s %8s %8s\n", "op", "GEMM issued (M x N x K, trans, calls)", "sgemm GF", "op ms",
            "op GF/s", "op/sgemm");
}

static void shapes_str(const gemm_shape *s, int n, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < len; i++) {
        if (s[i].calls == 0) continue;
        k += (size_t)snprintf(buf + k, len - k, "%s%dx%dx%d %c%c x%d", k ? " + " : "", s[i].m, s[i].n, s[i].k,
                              s[i].ta ? 'T' : 'N', s[i].tb ? 'T' : 'N', s[i].calls);
    }
}

/* Seconds OpenBLAS's workers keep spinning after a multi-threaded call (2^28 cycles, its default
 * THREAD_TIMEOUT), with a margin. */
static const double k_blas_spin_s = 0.2;

/* Lets OpenBLAS's spinning workers go to sleep before the runtime's pool is timed. */
static void blas_settle(int threads) {
    if (threads <= 1) return;
    struct timespec ts = {0, (long)(k_blas_spin_s * 1e9)};
    nanosleep(&ts, NULL);
}

/* Times the op's GEMMs, then (once OpenBLAS's pool is asleep) the op; prints a row; returns the
 * median of the per-repeat op/sgemm ratios. */
static double bench_row(FILE *out, const char *name, op_arg *op, double op_flops, const gemm_shape *shapes, int n_shapes,
                        int repeats) {
    gemm_set g;
    gemm_set_init(&g, shapes, n_shapes, op->ctx->n_threads);
    double t_gemm[BENCH_MAX_REPEATS], t_op[BENCH_MAX_REPEATS], ratio[BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats; r++) t_gemm[r] = gemm_set_run(&g);
    blas_settle(g.threads);
    timed_call oc = timed_init(run_op, op);
    for (int r = 0; r < repeats; r++) {
        t_op[r] = timed_run(&oc);
        ratio[r] = t_gemm[r] / t_op[r];
    }
    double gf_gemm = gemm_set_flops(&g) / bench_median(t_gemm, repeats) * 1e-9;
    double t = bench_median(t_op, repeats), rmed = bench_median(ratio, repeats);
    char buf[96];
    shapes_str(shapes, n_shapes, buf, sizeof(buf));
    fprintf(out, "%-38s %-40s %8.1f %8.3f %8.1f %8.2f\n", name, buf, gf_gemm, t * 1e3, op_flops / t * 1e-9, rmed);
    gemm_set_free(&g);
    return rmed;
}

/* The rate one GEMM per image would run at (the conv ops group small images). */
static void print_per_image(FILE *out, const gemm_shape *shape, double flops, int threads, int repeats) {
    gemm_set g;
    gemm_set_init(&g, shape, 1, threads);
    double t[BENCH_MAX_REPEATS];
    for (int r = 0; r < repeats; r++) t[r] = gemm_set_run(&g);
    char buf[96];
    shapes_str(shape, 1, buf, sizeof(buf));
    fprintf(out, "%-38s %-40s %8.1f\n", "    (sgemm, one GEMM per image)", buf, flops / bench_median(t, repeats) * 1e-9);
    gemm_set_free(&g);
}

/* ---- the MLP: linear forward and the two matmuls of its backward ---- */

static void bench_mlp(FILE *out, mst_ctx *ctx, int repeats) {
    static const int layers[][2] = {{784, 256}, {256, 128}, {128, 10}};
    const int m = 64;
    for (int l = 0; l < 3; l++) {
        int in = layers[l][0], outf = layers[l][1];
        mst_tensor *x = randn(ctx, 2, (int64_t[]){m, in}), *w = randn(ctx, 2, (int64_t[]){outf, in});
        mst_tensor *b = randn(ctx, 1, (int64_t[]){outf}), *gy = randn(ctx, 2, (int64_t[]){m, outf});
        double flops = 2.0 * m * in * outf;
        char name[64];
        snprintf(name, sizeof(name), "linear %dx%d->%d (+bias)", m, in, outf);
        op_arg fwd = {ctx, OP_LINEAR, {x, w, b}};
        bench_row(out, name, &fwd, flops, (gemm_shape[]){{false, true, m, outf, in, 1.0f, 1}}, 1, repeats);
        snprintf(name, sizeof(name), "  matmul gy w (grad x)");
        op_arg gx = {ctx, OP_MATMUL, {gy, w}, {0, 0}};
        bench_row(out, name, &gx, flops, (gemm_shape[]){{false, false, m, in, outf, 0.0f, 1}}, 1, repeats);
        snprintf(name, sizeof(name), "  matmul_t gy^T x (grad w)");
        op_arg gw = {ctx, OP_MATMUL, {gy, x}, {1, 0}};
        bench_row(out, name, &gw, flops, (gemm_shape[]){{true, false, outf, in, m, 0.0f, 1}}, 1, repeats);
    }
}

/* ---- the CNN's convolutions ---- */

typedef struct {
    const char *name;
    int n, c, h, w, k, r, s, stride, pad;
} conv_layer;

/* Images per GEMM: mirrors group_size() in runtime/ops/conv.c (keep the two in step). */
static int conv_group(const conv_layer *L, int pq) {
    const int group_cols = 1024;
    const size_t group_bytes = (size_t)16 << 20;
    int nb = group_cols / pq;
    if (nb > L->n) nb = L->n;
    size_t per_image = (size_t)(L->c * L->r * L->s + L->k + 1) * (size_t)pq * sizeof(float);
    while (nb > 1 && (size_t)nb * per_image > group_bytes) nb--;
    return nb < 1 ? 1 : nb;
}

/* The GEMMs of one op over the batch: full groups of nb images and one partial group. which:
 * 0 forward (K x cols x CRS), 1 grad_input (CRS x cols x K, w^T), 2 grad_weight (K x CRS x cols,
 * col^T, beta 1), 3 forward with bias (conv.c folds the bias into the GEMM as one more row of
 * ones: K x cols x CRS+1). nb = 1 gives the per-image GEMMs. */
static void conv_gemms(const conv_layer *L, int p, int q, int which, int nb, gemm_shape out[2]) {
    int crs = L->c * L->r * L->s, groups[2] = {L->n / nb, L->n % nb ? 1 : 0};
    int cols[2] = {nb * p * q, (L->n % nb) * p * q};
    for (int i = 0; i < 2; i++) {
        if (which == 0 || which == 3)
            out[i] = (gemm_shape){false, false, L->k, cols[i], crs + (which == 3), 0.0f, groups[i]};
        else if (which == 1) out[i] = (gemm_shape){true, false, crs, cols[i], L->k, 0.0f, groups[i]};
        else out[i] = (gemm_shape){false, true, L->k, crs, cols[i], 1.0f, groups[i]};
    }
}

/* Forward (which 0 or 3), grad_input and grad_weight of one layer; returns the forward's op/sgemm. */
static double bench_conv_layer(FILE *out, mst_ctx *ctx, const conv_layer *L, const int *whichs, int n_which, int repeats) {
    static const char *const kinds[] = {"fwd", "grad_input", "grad_weight", "fwd + bias"};
    int p = (L->h + 2 * L->pad - L->r) / L->stride + 1, q = (L->w + 2 * L->pad - L->s) / L->stride + 1;
    int st = L->stride, pd = L->pad;
    mst_tensor *x = randn(ctx, 4, (int64_t[]){L->n, L->c, L->h, L->w});
    mst_tensor *w = randn(ctx, 4, (int64_t[]){L->k, L->c, L->r, L->s});
    mst_tensor *b = randn(ctx, 1, (int64_t[]){L->k});
    mst_tensor *gy = randn(ctx, 4, (int64_t[]){L->n, L->k, p, q});
    double flops = 2.0 * L->n * L->k * p * q * L->c * L->r * L->s, fwd_ratio = 0;
    int nb = conv_group(L, p * q);
    for (int j = 0; j < n_which; j++) {
        int which = whichs[j];
        op_arg op = {ctx, OP_CONV, {x, w, which == 3 ? b : NULL}, {st, st, pd, pd, 0, 0}};
        if (which == 1) op = (op_arg){ctx, OP_CONV_GRAD_INPUT, {gy, w}, {st, st, pd, pd, L->h, L->w}};
        if (which == 2) op = (op_arg){ctx, OP_CONV_GRAD_WEIGHT, {gy, x}, {st, st, pd, pd, L->r, L->s}};
        char name[64];
        snprintf(name, sizeof(name), "%s %s", j == 0 ? L->name : " ", kinds[which]);
        gemm_shape shapes[2];
        conv_gemms(L, p, q, which, nb, shapes);
        double ratio = bench_row(out, name, &op, flops, shapes, 2, repeats);
        if (which == 0 || which == 3) fwd_ratio = ratio;
        if (nb > 1) {
            conv_gemms(L, p, q, which, 1, shapes);
            print_per_image(out, shapes, flops, ctx->n_threads, repeats);
        }
    }
    return fwd_ratio;
}

/* The CNN workload (workloads/cnn.c, width 32, two blocks) at batch 64: its convolutions have no
 * bias (BatchNorm follows), so the forward is timed without one; the stem is timed with a bias too. */
static void bench_cnn(FILE *out, mst_ctx *ctx, int repeats) {
    static const conv_layer layers[] = {
        /* stem at 28x28, then max pool; block 1 at 14x14; block 2 at 7x7 */
        {"stem 1->32 3x3 p1 28x28", 64, 1, 28, 28, 32, 3, 3, 1, 1},
        {"block1 32->32 3x3 p1 14x14", 64, 32, 14, 14, 32, 3, 3, 1, 1},
        {"block2a 32->64 3x3 s2 p1 14x14", 64, 32, 14, 14, 64, 3, 3, 2, 1},
        {"block2b 64->64 3x3 p1 7x7", 64, 64, 7, 7, 64, 3, 3, 1, 1},
        {"proj 32->64 1x1 s2 14x14", 64, 32, 14, 14, 64, 1, 1, 2, 0},
    };
    static const int all[] = {0, 1, 2}, with_bias[] = {3};
    double worst = 1e9;
    for (size_t l = 0; l < sizeof(layers) / sizeof(layers[0]); l++) {
        double r = bench_conv_layer(out, ctx, &layers[l], all, 3, repeats);
        if (r < worst) worst = r;
    }
    double r = bench_conv_layer(out, ctx, &layers[0], with_bias, 1, repeats);
    if (r < worst) worst = r;
    fprintf(out, "conv2d forward: lowest op/sgemm %.2f (target >= 0.60)\n", worst);
}

void bench_kernels(FILE *out, int quick) {
    const char *env = getenv("MST_BENCH_THREADS");      /* default: every core, as training runs */
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 3, .n_threads = env ? atoi(env) : 0});
    if (!ctx) {
        fprintf(stderr, "bench_kernels: cannot create a context\n");
        exit(1);
    }
    int repeats = quick ? 3 : 7;
    mst_grad_set_enabled(ctx, false);
    fprintf(out, "== GEMM-bound kernels vs raw OpenBLAS sgemm (f32, %d threads, median of %d after warm-up) ==\n",
            ctx->n_threads, repeats);
    fprintf(out, "sgemm GF = raw cblas_sgemm GFLOP/s (OpenBLAS at %d threads) on the op's GEMMs; op = the op through the "
                 "dispatcher\n", ctx->n_threads);
    print_header(out);
    mst_pool_push(ctx);
    bench_mlp(out, ctx, repeats);
    bench_cnn(out, ctx, repeats);
    mst_pool_pop(ctx);
    fprintf(out, "\n");
    mst_ctx_free(ctx);
}
