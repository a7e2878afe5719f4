/* owner_split_mlp.c — what the best partition of the mlp's training step over two threads could
 * gain on this machine, outside the runtime: the 784-256-128-10 MLP's forward, backward and SGD
 * momentum update at batch B, each layer's weight rows owned by one thread for the whole step
 * ("owner computes": its slice of the forward product, of the weight gradient, of the update, and
 * a partial input gradient summed after a barrier), so no weight or gradient crosses cores and a
 * step synchronises only at layer boundaries (a spin barrier, ~0.3 us here). Every product is one
 * single-threaded SGEMM call: oneDNN's (dnnl_sgemm, dlopen'ed as the runtime does) or OpenBLAS's
 * when oneDNN is missing. It answers whether issue 13's "mlp batch 16: graph >= 1.3x eager" can be
 * met on one thread budget by partitioning alone: one thread's step against two threads', the
 * configurations alternated round by round, medians of each round's median step.
 * With "layouts" as the fourth argument it answers the other half of that question, on one thread:
 * what the weights' layout and the update's fusion could give a plan that owns them across steps —
 * the step with each weight stored as oneDNN's matmul reads it fastest, (in, out) instead of the
 * runtime's (out, in) (the forward product then reads it without a transpose; the weight gradient is
 * computed as x^T dy in the same (in, out) layout), and that plus the momentum folded into the
 * weight-gradient product (v = mu v + x^T dy as the product's beta, no gradient buffer; then
 * w -= lr v), against the step as the runtime lays it out. After the table it counts the first
 * layer's momentum elements whose bits the fold changes (graph mode keeps eager's bits).
 *
 *     build/bench_owner_split_mlp [rounds=5] [steps=2000] [batches=16,64,256] [layouts]
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench/timing.h"

enum { LAYERS = 3, MAX_THREADS = 2 };
static const int k_dims[LAYERS + 1] = {784, 256, 128, 10};

typedef int (*sgemm_fn)(char ta, char tb, long m, long n, long k, float alpha, const float *a, long lda, const float *b,
                        long ldb, float beta, float *c, long ldc);
static sgemm_fn g_dnnl_sgemm;

/* C (m, n) = alpha op(A) op(B) + beta C, row-major, on the calling thread. */
static void gemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                 int ldc) {
    if (m <= 0 || n <= 0) return;
    if (g_dnnl_sgemm) {
        g_dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta,
                c, ldc);
}

/* Where the weights lie (one thread only for the last two). */
typedef enum { LAYOUT_OUT_IN, LAYOUT_IN_OUT, LAYOUT_IN_OUT_MOMENTUM_IN_GEMM, LAYOUT_COUNT } weight_layout;

typedef struct {
    int batch, threads;
    weight_layout layout;
    float *w[LAYERS], *b[LAYERS], *dw[LAYERS], *db[LAYERS], *mw[LAYERS], *mb[LAYERS];
    float *act[LAYERS + 1], *dact[LAYERS + 1], *part[MAX_THREADS][LAYERS + 1];
    int *label;
    atomic_int bar_count, bar_gen;
    double *step_ms;
    int steps;
} mlp;

static void barrier(mlp *m) {
    if (m->threads == 1) return;
    int gen = atomic_load(&m->bar_gen);
    if (atomic_fetch_add(&m->bar_count, 1) == m->threads - 1) {
        atomic_store(&m->bar_count, 0);
        atomic_fetch_add(&m->bar_gen, 1);
    } else {
        while (atomic_load(&m->bar_gen) == gen) __builtin_ia32_pause();
    }
}

static void slice(int n, int t, int threads, int *lo, int *hi) { *lo = n * t / threads, *hi = n * (t + 1) / threads; }

static const float k_lr = 0.01f, k_mu = 0.9f;

/* The bias gradient of layer l's outputs [lo, hi): column sums of dact[l+1]. */
static void bias_grad(mlp *m, int l, int lo, int hi) {
    const int B = m->batch, N = k_dims[l + 1];
    for (int j = lo; j < hi; j++) {
        float s = 0;
        for (int i = 0; i < B; i++) s += m->dact[l + 1][(size_t)i * N + j];
        m->db[l][j] = s;
    }
}

/* SGD with momentum over [from, to): v = mu v + g, w -= lr v; g NULL when v already holds mu v + g
 * (the momentum folded into the gradient product). Two loops, not a test inside one: each is
 * vectorised like the runtime's update. */
static void sgd_momentum(float *w, float *v, const float *g, size_t from, size_t to) {
    if (!g)
        for (size_t x = from; x < to; x++) w[x] -= k_lr * v[x];
    else
        for (size_t x = from; x < to; x++) {
            v[x] = k_mu * v[x] + g[x];
            w[x] -= k_lr * v[x];
        }
}

/* One training step, thread t's part. */
static void step(mlp *m, int t) {
    const int B = m->batch, T = m->threads;
    for (int l = 0; l < LAYERS; l++) {      /* act[l+1][:, lo:hi] = relu(act[l] w[lo:hi]^T + b[lo:hi]) */
        int K = k_dims[l], N = k_dims[l + 1], lo, hi;
        slice(N, t, T, &lo, &hi);
        for (int i = 0; i < B; i++) memcpy(m->act[l + 1] + (size_t)i * N + lo, m->b[l] + lo, sizeof(float) * (size_t)(hi - lo));
        if (m->layout == LAYOUT_OUT_IN)
            gemm(false, true, B, hi - lo, K, m->act[l], K, m->w[l] + (size_t)lo * K, K, 1.0f, m->act[l + 1] + lo, N);
        else        /* w (K, N): read as it lies */
            gemm(false, false, B, N, K, m->act[l], K, m->w[l], N, 1.0f, m->act[l + 1], N);
        if (l < LAYERS - 1)
            for (int i = 0; i < B; i++)
                for (int j = lo; j < hi; j++) {
                    float *v = m->act[l + 1] + (size_t)i * N + j;
                    *v = *v > 0 ? *v : 0;
                }
        barrier(m);
    }
    if (t == 0) {       /* softmax cross-entropy gradient (B x 10: thread 0's alone) */
        const int N = k_dims[LAYERS];
        for (int i = 0; i < B; i++) {
            const float *z = m->act[LAYERS] + (size_t)i * N;
            float *g = m->dact[LAYERS] + (size_t)i * N, mx = z[0], sum = 0;
            for (int j = 1; j < N; j++) mx = z[j] > mx ? z[j] : mx;
            for (int j = 0; j < N; j++) sum += g[j] = expf(z[j] - mx);
            for (int j = 0; j < N; j++) g[j] = (g[j] / sum - (j == m->label[i])) / (float)B;
        }
    }
    barrier(m);
    for (int l = LAYERS - 1; l >= 0 && m->layout != LAYOUT_OUT_IN; l--) {      /* w (K, N), one thread */
        int K = k_dims[l], N = k_dims[l + 1];
        const bool fused = m->layout == LAYOUT_IN_OUT_MOMENTUM_IN_GEMM;
        /* the weight gradient x^T dy (K, N): into dw, or straight into the momentum (beta = mu) */
        gemm(true, false, K, N, B, m->act[l], K, m->dact[l + 1], N, fused ? k_mu : 0.0f, fused ? m->mw[l] : m->dw[l], N);
        bias_grad(m, l, 0, N);
        if (l > 0) {        /* dy w^T, before w is updated, then ReLU's gradient */
            gemm(false, true, B, K, N, m->dact[l + 1], N, m->w[l], N, 0.0f, m->dact[l], K);
            for (int x = 0; x < B * K; x++) m->dact[l][x] = m->act[l][x] > 0 ? m->dact[l][x] : 0;
        }
        sgd_momentum(m->w[l], m->mw[l], fused ? NULL : m->dw[l], 0, (size_t)K * N);
        sgd_momentum(m->b[l], m->mb[l], m->db[l], 0, (size_t)N);
    }
    for (int l = LAYERS - 1; l >= 0 && m->layout == LAYOUT_OUT_IN; l--) {
        int K = k_dims[l], N = k_dims[l + 1], lo, hi;
        slice(N, t, T, &lo, &hi);
        /* own rows: dw[lo:hi] = dact[l+1][:, lo:hi]^T act[l], db, then the momentum update */
        gemm(true, false, hi - lo, K, B, m->dact[l + 1] + lo, N, m->act[l], K, 0.0f, m->dw[l] + (size_t)lo * K, K);
        bias_grad(m, l, lo, hi);
        if (l > 0)      /* the input gradient from these rows, before they are updated */
            gemm(false, false, B, K, hi - lo, m->dact[l + 1] + lo, N, m->w[l] + (size_t)lo * K, K, 0.0f,
                 T == 1 ? m->dact[l] : m->part[t][l], K);
        sgd_momentum(m->w[l], m->mw[l], m->dw[l], (size_t)lo * K, (size_t)hi * K);
        sgd_momentum(m->b[l], m->mb[l], m->db[l], (size_t)lo, (size_t)hi);
        if (l == 0) break;
        barrier(m);
        int c0, c1;
        slice(B * K, t, T, &c0, &c1);
        for (int x = c0; x < c1; x++) {     /* sum the partial input gradients, then ReLU's gradient */
            float s = T == 1 ? m->dact[l][x] : 0;
            for (int u = 0; T > 1 && u < T; u++) s += m->part[u][l][x];
            m->dact[l][x] = m->act[l][x] > 0 ? s : 0;
        }
        barrier(m);
    }
    barrier(m);
}

typedef struct {
    mlp *m;
    int t;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    for (int s = 0; s < a->m->steps; s++) {
        double t0 = bench_now_ms();
        step(a->m, a->t);
        if (a->t == 0) a->m->step_ms[s] = bench_now_ms() - t0;
    }
    return NULL;
}

static float *floats(size_t n, float scale, unsigned *seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = scale * ((float)rand_r(seed) / (float)RAND_MAX - 0.5f);
    return p;
}

/* The median step (ms) of `steps` steps after a quarter as many untimed. */
static double run(int batch, int threads, weight_layout layout, int steps) {
    mlp m = {.batch = batch, .threads = threads, .layout = layout, .steps = steps + steps / 4};
    unsigned seed = 7;
    for (int l = 0; l < LAYERS; l++) {
        size_t n = (size_t)k_dims[l + 1] * (size_t)k_dims[l];
        m.w[l] = floats(n, 0.1f, &seed), m.b[l] = floats((size_t)k_dims[l + 1], 0, &seed);
        m.dw[l] = floats(n, 0, &seed), m.db[l] = floats((size_t)k_dims[l + 1], 0, &seed);
        m.mw[l] = floats(n, 0, &seed), m.mb[l] = floats((size_t)k_dims[l + 1], 0, &seed);
    }
    for (int l = 0; l <= LAYERS; l++) {
        size_t n = (size_t)batch * (size_t)k_dims[l];
        m.act[l] = floats(n, 1, &seed), m.dact[l] = floats(n, 0, &seed);
        for (int t = 0; t < MAX_THREADS; t++) m.part[t][l] = floats(n, 0, &seed);
    }
    m.label = malloc(sizeof(int) * (size_t)batch);
    m.step_ms = malloc(sizeof(double) * (size_t)m.steps);
    if (!m.label || !m.step_ms) abort();
    for (int i = 0; i < batch; i++) m.label[i] = i % k_dims[LAYERS];
    pthread_t th[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    for (int t = 0; t < threads; t++) args[t] = (worker_arg){&m, t};
    for (int t = 1; t < threads; t++) pthread_create(&th[t], NULL, worker, &args[t]);
    worker(&args[0]);
    for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
    double med = bench_median(m.step_ms + steps / 4, steps);
    for (int l = 0; l < LAYERS; l++) free(m.w[l]), free(m.b[l]), free(m.dw[l]), free(m.db[l]), free(m.mw[l]), free(m.mb[l]);
    for (int l = 0; l <= LAYERS; l++) {
        free(m.act[l]), free(m.dact[l]);
        for (int t = 0; t < MAX_THREADS; t++) free(m.part[t][l]);
    }
    free(m.label);
    free(m.step_ms);
    return med;
}

/* Whether folding the momentum into the weight-gradient product keeps the update's bits: the first
 * layer's v = mu v + x^T dy at this batch, once as the runtime computes it (the product into a
 * gradient, then the update's fl(fl(mu v) + g), -ffp-contract=off as the build) and once as the
 * product's beta. Returns how many of the weight's elements differ in bits. */
static long momentum_fold_bits(int batch) {
    const int K = k_dims[0], N = k_dims[1];
    unsigned seed = 12345;
    float *x = floats((size_t)batch * K, 1.0f, &seed), *dy = floats((size_t)batch * N, 1.0f, &seed);
    const size_t kn = (size_t)K * N;
    float *v = floats(kn, 1.0f, &seed), *vf = floats(kn, 0.0f, &seed), *g = floats(kn, 0.0f, &seed);
    memcpy(vf, v, sizeof(float) * kn);
    gemm(true, false, K, N, batch, x, K, dy, N, 0.0f, g, N);
    for (size_t i = 0; i < kn; i++) v[i] = k_mu * v[i] + g[i];
    gemm(true, false, K, N, batch, x, K, dy, N, k_mu, vf, N);
    long differ = 0;
    for (size_t i = 0; i < kn; i++) differ += memcmp(&v[i], &vf[i], sizeof(float)) != 0;
    free(x), free(dy), free(g), free(v), free(vf);
    return differ;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5, steps = argc > 2 ? atoi(argv[2]) : 2000;
    const char *batches = argc > 3 ? argv[3] : "16,64,256";
    if (rounds < 1 || rounds > BENCH_MAX_REPEATS || steps < 8) {
        fprintf(stderr, "usage: %s [rounds 1-%d] [steps >= 8] [batches=16,64,256] [layouts]\n", argv[0], BENCH_MAX_REPEATS);
        return 2;
    }
    setenv("OMP_NUM_THREADS", "1", 1);      /* each product on its caller's thread alone */
    openblas_set_num_threads(1);
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&g_dnnl_sgemm = dlsym(h, "dnnl_sgemm");
    const bool layouts = argc > 4 && strcmp(argv[4], "layouts") == 0;
    printf("%s mlp 784-256-128-10 step, GEMM: %s; %d rounds of %d steps; median of the rounds' median step\n\n",
           layouts ? "one-thread" : "owner-split", g_dnnl_sgemm ? "oneDNN dnnl_sgemm (single-threaded)" : "OpenBLAS cblas_sgemm (single-threaded)",
           rounds, steps);
    if (layouts)
        printf("| batch | w (out, in) ms | w (in, out) ms | w (in, out), momentum in the gradient product ms | (out, in) / (in, out) | (out, in) / fused |\n"
               "|---|---|---|---|---|---|\n");
    else
        printf("| batch | 1 thread ms | 2 threads (owner split) ms | 1 / 2 threads (median of rounds) |\n|---|---|---|---|\n");
    char list[128];
    long fold_differ[64];
    int fold_batch[64], n_fold = 0;
    snprintf(list, sizeof(list), "%s", batches);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n_fold < 64; tok = strtok_r(NULL, ",", &save)) {
        int batch = atoi(tok);
        if (batch < 1) continue;
        if (layouts) {
            double ms[LAYOUT_COUNT][BENCH_MAX_REPEATS], r1[BENCH_MAX_REPEATS], r2[BENCH_MAX_REPEATS];
            for (int r = 0; r < rounds; r++) {
                for (int l = 0; l < LAYOUT_COUNT; l++) ms[l][r] = run(batch, 1, (weight_layout)l, steps);
                r1[r] = ms[LAYOUT_OUT_IN][r] / ms[LAYOUT_IN_OUT][r];
                r2[r] = ms[LAYOUT_OUT_IN][r] / ms[LAYOUT_IN_OUT_MOMENTUM_IN_GEMM][r];
            }
            printf("| %d | %.4f | %.4f | %.4f | %.2fx | %.2fx |\n", batch, bench_median(ms[0], rounds), bench_median(ms[1], rounds),
                   bench_median(ms[2], rounds), bench_median(r1, rounds), bench_median(r2, rounds));
            fold_differ[n_fold] = momentum_fold_bits(batch);
            fold_batch[n_fold++] = batch;
            fflush(stdout);
            continue;
        }
        double one[BENCH_MAX_REPEATS], two[BENCH_MAX_REPEATS], ratio[BENCH_MAX_REPEATS];
        for (int r = 0; r < rounds; r++) {
            one[r] = run(batch, 1, LAYOUT_OUT_IN, steps);
            two[r] = run(batch, 2, LAYOUT_OUT_IN, steps);
            ratio[r] = one[r] / two[r];
        }
        printf("| %d | %.4f | %.4f | %.2fx |\n", batch, bench_median(one, rounds), bench_median(two, rounds), bench_median(ratio, rounds));
        fflush(stdout);
    }
    /* the fold's bits: eager's update is the product then fl(fl(mu v) + g); graph mode must match it */
    for (int i = 0; i < n_fold; i++)
        printf("%sbatch %d: the momentum as the product's beta differs in bits from the product then the update in %ld of %d "
               "elements of the first layer's momentum\n",
               i == 0 ? "\n" : "", fold_batch[i], fold_differ[i], k_dims[0] * k_dims[1]);
    return 0;
}
