/* vmath.c — erfcf and expf over f32 blocks through glibc's libmvec, or scalar libm (vmath.h); on an
 * AVX-512 CPU each function's lane count weighed once (weigh_lanes). */
#define _GNU_SOURCE
#include "runtime/ops/vmath.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MST_VMATH_X86 1
#else
#define MST_VMATH_X86 0
#endif

typedef enum { VM_SCALAR, VM_AVX2, VM_AVX512 } vm_path;

/* One function: libm's scalar version and libmvec's symbol stems (_ZGVeN16v_<name>,
 * _ZGVdN8v_<name>), resolved into the vector entry points, and the path it takes. */
typedef struct {
    const char *name;
    float (*scalar)(float);
#if MST_VMATH_X86
    __m512 (*v16)(__m512);
    __m256 (*v8)(__m256);
#endif
    vm_path path;
    double ns16, ns8;   /* AVX-512 CPUs: both variants' time per value when they were weighed, else 0 */
} vm_fn;

enum { VM_ERFC, VM_EXP, VM_COUNT };
static vm_fn fns[VM_COUNT] = {[VM_ERFC] = {"erfcf", erfcf}, [VM_EXP] = {"expf", expf}};
static vm_path path = VM_SCALAR;       /* the widest path the CPU and the library allow */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char path_text[160];

/* Every function's variant for one path, or false (then none is used). */
#if MST_VMATH_X86
static bool resolve_path(void *lib, vm_path p) {
    for (int f = 0; f < VM_COUNT; f++) {
        char sym[64];
        snprintf(sym, sizeof(sym), p == VM_AVX512 ? "_ZGVeN16v_%s" : "_ZGVdN8v_%s", fns[f].name);
        void *addr = dlsym(lib, sym);
        if (!addr) return false;
        if (p == VM_AVX512) fns[f].v16 = (__m512(*)(__m512))addr;
        else fns[f].v8 = (__m256(*)(__m256))addr;
    }
    return true;
}

static void run16(__m512 (*f)(__m512), const float *x, float *y, int64_t n);
static void run8(__m256 (*f)(__m256), const float *x, float *y, int64_t n);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

/* The probe values the two variants are compared on: a sweep of [-20, 20] in 2^-6 steps with a
 * few bits of jitter, then every power of two from the subnormals to the top of the range of each
 * sign, +-0, +-inf and NaN. */
enum { k_probe_sweep = 2560, k_probe_n = k_probe_sweep + 4 * 256 + 8 };
static int probe_values(float *x) {
    int n = 0;
    for (int i = 0; i < k_probe_sweep; i++) x[n++] = -20.0f + (float)i / 64.0f + (float)(i % 13) * 1e-5f;
    for (int e = -149; e <= 127; e += 1)
        if (n < k_probe_n - 8) { x[n++] = ldexpf(1.0f, e); x[n++] = -ldexpf(1.0f, e); }
    x[n++] = 0.0f;
    x[n++] = -0.0f;
    x[n++] = INFINITY;
    x[n++] = -INFINITY;
    x[n++] = NAN;
    return n;
}

/* On a CPU with both paths, a function takes libmvec's AVX2 variant where it gives the AVX-512
 * variant's bits on every probe value and is faster by k_lane_margin on a block of values in
 * [-4, 4] (best of k_lane_rounds runs each, in turns; tens of microseconds, once per process):
 * glibc 2.36's AVX-512 erfcf took 1.0-1.1 ns a value on a Zen 5 against its AVX2 variant's
 * 0.63-0.70, with the same bits (docs/benchmarks.md). The choice only moves time: a variant whose
 * bits differ anywhere on the probe is never taken, so the values a run computes do not depend on
 * the timing. */
static const double k_lane_margin = 0.10;
enum { k_lane_rounds = 5, k_lane_block = 2048 };
static void weigh_lanes(vm_fn *fn) {
    static float x[k_probe_n], y16[k_probe_n], y8[k_probe_n];
    int n = probe_values(x);
    run16(fn->v16, x, y16, n);
    run8(fn->v8, x, y8, n);
    for (int i = 0; i < n; i++)
        if (memcmp(&y16[i], &y8[i], sizeof(float)) != 0 && !(isnan(y16[i]) && isnan(y8[i]))) return;
    /* timed on [-4, 4], where a network's activations mostly lie (libmvec computes lanes far out in
     * the tails with the scalar function) */
    for (int i = 0; i < k_lane_block; i++) x[i] = -4.0f + 8.0f * (float)i / k_lane_block;
    double best16 = 1e30, best8 = 1e30;
    for (int r = 0; r < k_lane_rounds; r++) {
        double t0 = now_ns();
        run16(fn->v16, x, y16, k_lane_block);
        double t1 = now_ns();
        run8(fn->v8, x, y8, k_lane_block);
        double t2 = now_ns();
        if (t1 - t0 < best16) best16 = t1 - t0;
        if (t2 - t1 < best8) best8 = t2 - t1;
    }
    fn->ns16 = best16 / k_lane_block;
    fn->ns8 = best8 / k_lane_block;
    if (best8 < best16 * (1 - k_lane_margin)) fn->path = VM_AVX2;
}
#endif

static void resolve(void) {
#if MST_VMATH_X86
    void *lib = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);     /* kept open for the process */
    if (lib) {
        bool avx2 = mst_cpu_has(MST_CPU_AVX2) && mst_cpu_has(MST_CPU_FMA) && resolve_path(lib, VM_AVX2);
        if (mst_cpu_has(MST_CPU_AVX512F) && resolve_path(lib, VM_AVX512)) path = VM_AVX512;
        else if (avx2) path = VM_AVX2;
        for (int f = 0; f < VM_COUNT; f++) {
            fns[f].path = path;
            if (path == VM_AVX512 && avx2) weigh_lanes(&fns[f]);
        }
    }
#endif
    static const char *const names[] = {[VM_SCALAR] = "libm scalar", [VM_AVX2] = "libmvec avx2", [VM_AVX512] = "libmvec avx512"};
    int len = snprintf(path_text, sizeof(path_text), "%s", names[path]);
    for (int f = 0; f < VM_COUNT; f++)
        if (fns[f].path != path && len < (int)sizeof(path_text))
            len += snprintf(path_text + len, sizeof(path_text) - (size_t)len,
                            "; %s on avx2 (same bits, %.2f vs %.2f ns a value)", fns[f].name, fns[f].ns8, fns[f].ns16);
}

static vm_path current(void) {
    pthread_once(&once, resolve);
    return path;
}

const char *mst_vmath_path(void) {
    current();
    return path_text;
}

#if MST_VMATH_X86
/* Full vectors, then the tail as one masked vector. */
__attribute__((target("avx512f"))) static void run16(__m512 (*f)(__m512), const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
    if (i < n) {    /* the tail under a mask, the other lanes zero */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

__attribute__((target("avx2,fma"))) static void run8(__m256 (*f)(__m256), const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
    if (i < n) {    /* the tail under a mask, the other lanes zero */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));
    }
}
#endif

static void apply(int which, const float *x, float *y, int64_t n) {
    const vm_fn *fn = &fns[which];
    current();
    switch (fn->path) {
#if MST_VMATH_X86
    case VM_AVX512: run16(fn->v16, x, y, n); return;
    case VM_AVX2: run8(fn->v8, x, y, n); return;
#endif
    default:
        for (int64_t i = 0; i < n; i++) y[i] = fn->scalar(x[i]);
    }
}

void mst_vmath_erfcf(const float *x, float *y, int64_t n) { apply(VM_ERFC, x, y, n); }

bool mst_vmath_variant(const char *name, int lanes, const float *x, float *y, int64_t n) {
    current();
    for (int f = 0; f < VM_COUNT; f++) {
        if (strcmp(fns[f].name, name) != 0) continue;
#if MST_VMATH_X86
        if (lanes == 16 && path == VM_AVX512) { run16(fns[f].v16, x, y, n); return true; }
        if (lanes == 8 && path != VM_SCALAR && fns[f].v8) { run8(fns[f].v8, x, y, n); return true; }
#endif
        return false;
    }
    return false;
}
void mst_vmath_expf(const float *x, float *y, int64_t n) { apply(VM_EXP, x, y, n); }
