/* fpu.c — flush-to-zero / denormals-are-zero per thread (MXCSR on x86, FPCR on AArch64), and what
 * subnormal arithmetic costs on this CPU. */
#include "runtime/fpu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "profiler/events.h"
#include "runtime/context.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
enum { MXCSR_DAZ = 1u << 6, MXCSR_FTZ = 1u << 15 };

bool mst_fpu_set_flush(bool flush) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(flush ? csr | MXCSR_DAZ | MXCSR_FTZ : csr & ~(unsigned)(MXCSR_DAZ | MXCSR_FTZ));
    return true;
}

bool mst_fpu_flushing(void) { return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ); }

#elif defined(__aarch64__)
#include <stdint.h>
enum { FPCR_FZ = 1u << 24 };

static uint64_t fpcr_get(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}

bool mst_fpu_set_flush(bool flush) {
    uint64_t v = fpcr_get();
    v = flush ? v | FPCR_FZ : v & ~(uint64_t)FPCR_FZ;
    __asm__ volatile("msr fpcr, %0" : : "r"(v));
    return true;
}

bool mst_fpu_flushing(void) { return (fpcr_get() & FPCR_FZ) != 0; }

#else
bool mst_fpu_set_flush(bool flush) { return !flush; }
bool mst_fpu_flushing(void) { return false; }
#endif

void mst_fpu_apply(const mst_ctx *ctx) { mst_fpu_set_flush(ctx && ctx->flush_denormals); }

/* ---- the subnormal penalty ---- */

enum { k_penalty_elems = 1 << 14, k_penalty_reps = 9 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ns of one pass y = x 0.75 + x 0.125 over the array (an update's multiplies and adds;
 * subnormal x gives subnormal products and sums). */
static double pass_ns(const float *x, float *y, volatile float *sink) {
    double t[k_penalty_reps];
    for (int r = 0; r < k_penalty_reps; r++) {
        uint64_t t0 = mst_prof_now_ns();
        for (int i = 0; i < k_penalty_elems; i++) y[i] = x[i] * 0.75f + x[i] * 0.125f;
        t[r] = (double)(mst_prof_now_ns() - t0);
        *sink += y[r];
    }
    /* sorted here: util/stats.c would pull GSL into the runtime library's link (test_install) */
    qsort(t, k_penalty_reps, sizeof(double), cmp_double);
    return t[k_penalty_reps / 2];
}

double mst_fpu_subnormal_penalty(void) {
    float *x = malloc(sizeof(float) * k_penalty_elems), *y = malloc(sizeof(float) * k_penalty_elems);
    if (!x || !y) {
        free(x);
        free(y);
        return NAN;
    }
    volatile float sink = 0;
    bool was = mst_fpu_flushing();
    mst_fpu_set_flush(false);
    for (int i = 0; i < k_penalty_elems; i++) x[i] = 1.0f + (float)(i % 7) / 8;
    pass_ns(x, y, &sink);       /* warm-up: pages, caches, clock */
    double normal = pass_ns(x, y, &sink);
    for (int i = 0; i < k_penalty_elems; i++) x[i] = 1e-39f * (1.0f + (float)(i % 7) / 8);     /* < 2^-126: subnormal */
    double sub = pass_ns(x, y, &sink);
    mst_fpu_set_flush(was);
    free(x);
    free(y);
    return normal > 0 ? sub / normal : NAN;
}
