/* thread_costs.c — what this machine charges for the things the runtime's threading decisions
 * weigh: a SIGPROF block-and-restore pair around a call (pthread_sigmask x2), a clock read, reading
 * 800 KiB (the mlp's first weight) that the other core has just written against one this core
 * wrote, and the mlp's batch-16 first linear (16x784 -> 256) per provider at 1 and 2 threads,
 * called back to back. Medians of REPEATS blocks after a warm-up block. Timing only.
 *
 *     build/thread_costs [repeats=7]
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/timing.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/cpu_pin.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

enum { k_max_repeats = 31, k_floats = 800 * 1024 / 4 };

static double sigmask_pair_ns(int n) {
    sigset_t prof, old;
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    const double t0 = bench_now_ms();
    for (int i = 0; i < n; i++) {
        pthread_sigmask(SIG_BLOCK, &prof, &old);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return (bench_now_ms() - t0) * 1e6 / n;
}

static double clock_ns(int n) {
    volatile double sink = 0;
    const double t0 = bench_now_ms();
    for (int i = 0; i < n; i++) sink += bench_now_ms();
    (void)sink;
    return (bench_now_ms() - t0) * 1e6 / n;
}

/* ---- 800 KiB written by the other core, then read here ---- */

static float *g_buf;
static atomic_int g_turn;       /* 1: the other core writes; 0: done */
static volatile float g_sink;

static void write_buf(int v) {
    for (int i = 0; i < k_floats; i++) g_buf[i] = (float)(i + v);
}

static double read_buf_us(void) {
    const double t0 = bench_now_ms();
    float acc = 0;
    for (int i = 0; i < k_floats; i += 16) acc += g_buf[i];
    g_sink = acc;
    return (bench_now_ms() - t0) * 1e3;
}

static void *writer(void *p) {
    const int rounds = *(const int *)p;
    mst_cpu_pin_self(1);
    for (int r = 0; r < rounds; r++) {
        while (atomic_load(&g_turn) != 1) {}
        write_buf(r);
        atomic_store(&g_turn, 0);
    }
    return NULL;
}

/* Median over rounds of reading the buffer after the other core wrote it (*cross) and after this
 * core wrote it (*local): this thread on the process's first CPU, the writer on its second
 * (runtime/cpu_pin.h; MSTUNE_PIN_THREADS=0 leaves both free, and the figures mean less). */
static void cross_core(int rounds, double *cross, double *local) {
    double c[64], l[64];
    mst_cpu_pin_self(0);
    pthread_t th;
    pthread_create(&th, NULL, writer, &rounds);
    for (int r = 0; r < rounds; r++) {
        atomic_store(&g_turn, 1);
        while (atomic_load(&g_turn) != 0) {}
        c[r] = read_buf_us();
        write_buf(r);
        l[r] = read_buf_us();
    }
    pthread_join(th, NULL);
    *cross = bench_median(c, rounds);
    *local = bench_median(l, rounds);
    mst_cpu_unpin_self();
}

/* ---- the linear ---- */

static double linear_us(int threads, mst_kernels_mode mode, int calls) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = threads});
    if (!ctx) return -1;
    mst_ctx_set_kernels(ctx, mode);
    const int64_t sx[2] = {16, 784}, sw[2] = {256, 784}, sb[1] = {256};
    mst_tensor *x = mst_tensor_new(ctx, MST_DTYPE_F32, 2, sx), *w = mst_tensor_new(ctx, MST_DTYPE_F32, 2, sw),
               *b = mst_tensor_new(ctx, MST_DTYPE_F32, 1, sb);
    float *px = mst_tensor_data(x), *pw = mst_tensor_data(w), *pb = mst_tensor_data(b);
    for (int64_t i = 0; i < 16 * 784; i++) px[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < 256 * 784; i++) pw[i] = (float)(i % 5) * 0.01f;
    memset(pb, 0, 256 * sizeof(float));
    double t[BENCH_MAX_REPEATS];
    for (int r = -1; r < calls; r++) {     /* one untimed call builds the primitive */
        mst_pool_push(ctx);     /* the output is the scope's, released at its pop */
        const double t0 = bench_now_ms();
        const mst_tensor *y = mst_linear(ctx, x, w, b);
        if (r >= 0) t[r] = (bench_now_ms() - t0) * 1e3;
        mst_pool_pop(ctx);
        if (!y) break;
    }
    mst_ctx_free(ctx);
    return bench_median(t, calls);
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 7;
    if (repeats < 1 || repeats > k_max_repeats) {
        fprintf(stderr, "thread_costs: repeats must be in [1, %d]\n", k_max_repeats);
        return 2;
    }
    char feats[256];
    mst_cpu_features_str(feats, sizeof(feats), " ");
    printf("# %s; features: %s; %ld CPUs; %d repeats\n", mst_cpu_info_get()->model, feats, sysconf(_SC_NPROCESSORS_ONLN), repeats);
    double a[k_max_repeats], b[k_max_repeats], c[k_max_repeats];
    sigmask_pair_ns(20000), clock_ns(20000);
    for (int r = 0; r < repeats; r++) a[r] = sigmask_pair_ns(50000), b[r] = clock_ns(200000);
    printf("| what | median |\n|---|---|\n");
    printf("| pthread_sigmask block + restore pair | %.0f ns |\n", bench_median(a, repeats));
    printf("| clock_gettime(CLOCK_MONOTONIC) | %.0f ns |\n", bench_median(b, repeats));
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2 && (g_buf = aligned_alloc(64, k_floats * sizeof(float)))) {
        write_buf(0);
        for (int r = 0; r < repeats; r++) cross_core(50, &a[r], &b[r]);
        printf("| read 800 KiB the other core just wrote | %.1f us |\n", bench_median(a, repeats));
        printf("| read 800 KiB this core just wrote | %.1f us |\n", bench_median(b, repeats));
        free(g_buf);
    }
    static const struct { const char *name; mst_kernels_mode mode; } prov[] = {{"builtin", MST_KERNELS_BUILTIN}, {"onednn", MST_KERNELS_ONEDNN}};
    for (int p = 0; p < 2; p++)
        for (int th = 1; th <= 2; th++) {
            for (int r = 0; r < repeats; r++) c[r] = linear_us(th, prov[p].mode, 40);
            printf("| linear 16x784 -> 256, %s, %d thread%s, back to back | %.1f us |\n", prov[p].name, th, th > 1 ? "s" : "",
                   bench_median(c, repeats));
        }
    return 0;
}
