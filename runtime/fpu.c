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

enum { k_penalty_elems = 1 << 14, k_penalty_pairs = 31 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One update-like pass y = x a + x b, two multiplies and an add per element, the same C loop the
 * optimizer's updates are (runtime/ops/optim_update.c), compiled as they are: an AVX2 clone where
 * the CPU has AVX2, the build's portable (SSE2) code otherwise. The subnormal pass's products
 * round into the subnormal range, as an update's lr x gradient does on tiny values: that is what
 * this CPU charges for. Before 2026-12-06 the pass multiplied subnormal inputs by 0.75 and 0.125,
 * exact products, and read ~1.01x on Zen 5 with AVX-512 FMA, where the SGD update ran 344 ns a
 * call with subnormal weights against 122 ns flushed (subnormal_weights, profile.op_every=1); an
 * underflowing product reads 2.8-3.3x there in mul/add code and 1.4-1.5x with FMA. */
typedef void (*pass_fn)(const float *x, float *y);
static const float k_pass_a = 0.001f, k_pass_b = 0.0001f;

#define PASS_BODY                                                                            \
    for (int i = 0; i < k_penalty_elems; i++) y[i] = x[i] * k_pass_a + x[i] * k_pass_b;

static void pass_portable(const float *x, float *y) { PASS_BODY }

#if defined(__x86_64__) || defined(__i386__)
#include "runtime/cpu_features.h"

__attribute__((target("avx2"))) static void pass_avx2(const float *x, float *y) { PASS_BODY }

static pass_fn update_pass(void) { return mst_cpu_has(MST_CPU_AVX2) ? pass_avx2 : pass_portable; }
#else
static pass_fn update_pass(void) { return pass_portable; }
#endif

const char *mst_fpu_subnormal_pass(void) { return update_pass() == pass_portable ? "portable" : "AVX2"; }

static double pass_ns(pass_fn pass, const float *x, float *y) {
    uint64_t t0 = mst_prof_now_ns();
    pass(x, y);
    return (double)(mst_prof_now_ns() - t0);
}

/* A pass's input and output in one page-aligned block, at the same offsets for the normal and the
 * subnormal pass, the output not a multiple of 4 KB past the input (loads that 4 KB-alias the
 * stores before them stall on a false dependency): with the buffers wherever malloc put them, the
 * exact-product pass this replaced read 0.86-0.99x in one process and 1.12x in the next on Zen 5,
 * and 1.01x in every call laid out like this. */
enum { k_penalty_gap = 16 * 17 };         /* floats between x and y: not a multiple of 4 KB */
static float *pass_block(void) {
    size_t bytes = sizeof(float) * (2 * k_penalty_elems + k_penalty_gap);
    return aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
}

/* Normal and subnormal passes in adjacent pairs (the order alternating), the median of the pairs'
 * ratios. Nine subnormal passes timed after nine normal ones read 0.72x in some advise runs and
 * 2.8-3.0x in others on the same CPU: this VM runs a loop at half speed for stretches of tens of
 * microseconds, longer than nine passes, so a stretch that fell on one block alone moved the
 * ratio. A pair shares its stretch. */
double mst_fpu_subnormal_penalty(void) {
    float *normal = pass_block(), *sub = pass_block();
    if (!normal || !sub) {
        free(normal);
        free(sub);
        return NAN;
    }
    float *y_normal = normal + k_penalty_elems + k_penalty_gap, *y_sub = sub + k_penalty_elems + k_penalty_gap;
    bool was = mst_fpu_flushing();
    mst_fpu_set_flush(false);
    for (int i = 0; i < k_penalty_elems; i++) {
        normal[i] = 1.0f + (float)(i % 7) / 8;
        sub[i] = 1e-35f * (1.0f + (float)(i % 7) / 8);     /* times k_pass_a or _b: below 2^-126, subnormal */
    }
    const pass_fn pass = update_pass();
    pass(normal, y_normal);     /* warm-up: pages, caches, clock */
    pass(sub, y_sub);
    double ratio[k_penalty_pairs];
    for (int r = 0; r < k_penalty_pairs; r++) {
        double tn, ts;
        if (r % 2 == 0) {
            tn = pass_ns(pass, normal, y_normal);
            ts = pass_ns(pass, sub, y_sub);
        } else {
            ts = pass_ns(pass, sub, y_sub);
            tn = pass_ns(pass, normal, y_normal);
        }
        ratio[r] = tn > 0 ? ts / tn : NAN;
    }
    volatile float sink = y_normal[k_penalty_elems - 1] + y_sub[k_penalty_elems - 1];
    (void)sink;
    mst_fpu_set_flush(was);
    free(normal);
    free(sub);
    /* sorted here: util/stats.c would pull GSL into the runtime library's link (test_install) */
    qsort(ratio, k_penalty_pairs, sizeof(double), cmp_double);
    return ratio[k_penalty_pairs / 2];
}
