/* test_fpu.c — runtime.flush_denormals: a context made with flush_denormals sets FTZ/DAZ on the
 * creating thread and on every kernel-pool worker (a subnormal product computed inside a parallel
 * region becomes zero, whichever thread runs the chunk); without it, gradual underflow is kept
 * (the same product stays subnormal), and freeing the flushing context's pool and making a
 * non-flushing one clears the mode again. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/fpu.h"
#include "runtime/threadpool.h"

typedef struct {
    pthread_t main;
    atomic_int chunks, flushed, zero_products, on_worker;
} seen;

static volatile float g_tiny = 1e-39f;      /* subnormal in f32 (FLT_MIN is 1.18e-38) */

static void probe(void *arg, int64_t begin, int64_t end, int worker) {
    (void)begin, (void)end, (void)worker;
    seen *s = arg;
    volatile float half = g_tiny * 0.5f;     /* DAZ reads g_tiny as 0; FTZ flushes a subnormal result */
    atomic_fetch_add(&s->chunks, 1);
    if (mst_fpu_flushing()) atomic_fetch_add(&s->flushed, 1);
    if (half == 0.0f) atomic_fetch_add(&s->zero_products, 1);
    if (!pthread_equal(pthread_self(), s->main)) atomic_fetch_add(&s->on_worker, 1);
    /* a chunk that takes a while (0.2 ms), so the caller cannot take every chunk before a worker wakes */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000L);
}

static void run_regions(mst_ctx *ctx, seen *s) {
    s->main = pthread_self();
    atomic_init(&s->chunks, 0);
    atomic_init(&s->flushed, 0);
    atomic_init(&s->zero_products, 0);
    atomic_init(&s->on_worker, 0);
    /* regions until a worker ran a chunk (the caller may take them all in a short region) */
    for (int i = 0; i < 200 && atomic_load(&s->on_worker) == 0; i++) mst_parallel_for(ctx, 3, 1, probe, s);
}

static void test_flush_on_every_pool_thread(void **state) {
    (void)state;
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 3, .flush_denormals = true});
    assert_non_null(ctx);
    assert_true(mst_fpu_flushing());
    seen s;
    run_regions(ctx, &s);
    assert_true(atomic_load(&s.on_worker) > 0);
    assert_int_equal(atomic_load(&s.flushed), atomic_load(&s.chunks));
    assert_int_equal(atomic_load(&s.zero_products), atomic_load(&s.chunks));
    mst_ctx_free(ctx);
#else
    skip();
#endif
}

static void test_gradual_underflow_by_default(void **state) {
    (void)state;
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 3});
    assert_non_null(ctx);
    assert_false(mst_fpu_flushing());
    seen s;
    run_regions(ctx, &s);
    assert_true(atomic_load(&s.on_worker) > 0);
    assert_int_equal(atomic_load(&s.flushed), 0);
    assert_int_equal(atomic_load(&s.zero_products), 0);
    volatile float half = g_tiny * 0.5f;
    assert_true(half > 0 && fpclassify(half) == FP_SUBNORMAL);
    mst_ctx_free(ctx);
}

/* The penalty measurement: a finite ratio (timing decides nothing here: ~1 on a CPU without a
 * subnormal slow path, tens with microcode assists), and the thread's mode restored either way. */
static void test_subnormal_penalty_restores_the_mode(void **state) {
    (void)state;
    for (int flush = 0; flush < 2; flush++) {
        mst_fpu_set_flush(flush);
        bool before = mst_fpu_flushing();
        double p = mst_fpu_subnormal_penalty();
        assert_true(isfinite(p) && p > 0);
        assert_int_equal(mst_fpu_flushing(), before);
    }
    mst_fpu_set_flush(false);
}

/* The pass it times is the one the optimizer's updates take (AVX2 where the CPU has it), and a
 * hidden feature (MSTUNE_CPU_MASK: ctest runs this file again with avx512f and with avx512f,avx2
 * hidden) moves it. */
static void test_subnormal_pass_follows_the_cpu(void **state) {
    (void)state;
    const char *pass = mst_fpu_subnormal_pass();
    const char *mask = getenv("MSTUNE_CPU_MASK");
    fprintf(stderr, "subnormal pass: %s (mask %s), penalty %.3f\n", pass, mask ? mask : "none", mst_fpu_subnormal_penalty());
#if defined(__x86_64__) || defined(__i386__)
    if (mst_cpu_has(MST_CPU_AVX2)) assert_string_equal(pass, "AVX2");
    else assert_string_equal(pass, "portable");
    if (mask && strstr(mask, "avx2")) assert_string_equal(pass, "portable");
#else
    assert_string_equal(pass, "portable");
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_on_every_pool_thread),
        cmocka_unit_test(test_gradual_underflow_by_default),
        cmocka_unit_test(test_subnormal_penalty_restores_the_mode),
        cmocka_unit_test(test_subnormal_pass_follows_the_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
