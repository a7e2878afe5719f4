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

/* One update-like pass y = x 0.75 + x 0.125 (a multiply and a fused multiply-add per element on
 * the widest vectors the CPU has, as the kernels use them; subnormal x gives subnormal products and
 * sums). The scalar multiply-add of the portable pass missed what the vector units charge: on this
 * project's Zen 5 a subnormal pass cost 1.00x normal in SSE scalar code and 1.08-1.12x with
 * AVX-512 FMA. */
typedef void (*pass_fn)(const float *x, float *y);

static void pass_portable(const float *x, float *y) {
    for (int i = 0; i < k_penalty_elems; i++) y[i] = x[i] * 0.75f + x[i] * 0.125f;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "runtime/cpu_features.h"

__attribute__((target("avx512f"))) static void pass_avx512(const float *x, float *y) {
    const __m512 a = _mm512_set1_ps(0.75f), b = _mm512_set1_ps(0.125f);
    for (int i = 0; i < k_penalty_elems; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(v, a, _mm512_mul_ps(v, b)));
    }
}

__attribute__((target("avx2,fma"))) static void pass_avx2(const float *x, float *y) {
    const __m256 a = _mm256_set1_ps(0.75f), b = _mm256_set1_ps(0.125f);
    for (int i = 0; i < k_penalty_elems; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(v, a, _mm256_mul_ps(v, b)));
    }
}

static pass_fn widest_pass(const char **name) {
    if (mst_cpu_has(MST_CPU_AVX512F)) return *name = "AVX-512 FMA", pass_avx512;
    if (mst_cpu_has(MST_CPU_AVX2) && mst_cpu_has(MST_CPU_FMA)) return *name = "AVX2 FMA", pass_avx2;
    return *name = "portable", pass_portable;
}
#else
static pass_fn widest_pass(const char **name) { return *name = "portable", pass_portable; }
#endif

const char *mst_fpu_subnormal_pass(void) {
    const char *name;
    widest_pass(&name);
    return name;
}

static double pass_ns(pass_fn pass, const float *x, float *y) {
    uint64_t t0 = mst_prof_now_ns();
    pass(x, y);
    return (double)(mst_prof_now_ns() - t0);
}

/* A pass's input and output in one page-aligned block, at the same offsets for the normal and the
 * subnormal pass, the output not a multiple of 4 KB past the input: where malloc put them decided
 * the reading before (loads 4 KB-aliasing the stores before them stall on a false dependency; the
 * same loop read 2.9-3.0x in every call of one process on Zen 5, and with separate buffers per
 * pass 0.86-0.99x in one process and 1.12x in the next, where this layout reads 1.01x). */
enum { k_penalty_gap = 16 * 17 };         /* floats between x and y: not a multiple of 4 KB */
static float *pass_block(void) {
    size_t bytes = sizeof(float) * (2 * k_penalty_elems + k_penalty_gap);
    return aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
}

/* Normal and subnormal passes in adjacent pairs (the order alternating), the median of the pairs'
 * ratios. Nine subnormal passes timed after nine normal ones read 0.72x in some advise runs and
 * 2.8-3.0x in others on a CPU with no slow path for them: this VM runs the same loop at half speed
 * for stretches of tens of microseconds, longer than nine passes, so a stretch that fell on one
 * block alone decided the ratio. A pair shares its stretch. */
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
        sub[i] = 1e-39f * (1.0f + (float)(i % 7) / 8);     /* < 2^-126: subnormal */
    }
    const char *name;
    const pass_fn pass = widest_pass(&name);
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
