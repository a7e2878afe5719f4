/* vmath.c — erfcf and expf over f32 blocks through glibc's libmvec, or scalar libm (vmath.h). */
#define _GNU_SOURCE
#include "runtime/ops/vmath.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "runtime/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MST_VMATH_X86 1
#else
#define MST_VMATH_X86 0
#endif

typedef enum { VM_SCALAR, VM_AVX2, VM_AVX512 } vm_path;

#if MST_VMATH_X86
typedef __m512 (*vm16_fn)(__m512);
typedef __m256 (*vm8_fn)(__m256);
static vm16_fn erfc16, exp16;
static vm8_fn erfc8, exp8;
#endif
static vm_path path = VM_SCALAR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void resolve(void) {
#if MST_VMATH_X86
    void *lib = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);     /* kept open for the process */
    if (!lib) return;
    if (mst_cpu_has(MST_CPU_AVX512F)) {
        erfc16 = (vm16_fn)dlsym(lib, "_ZGVeN16v_erfcf");
        exp16 = (vm16_fn)dlsym(lib, "_ZGVeN16v_expf");
        if (erfc16 && exp16) { path = VM_AVX512; return; }
    }
    if (mst_cpu_has(MST_CPU_AVX2) && mst_cpu_has(MST_CPU_FMA)) {
        erfc8 = (vm8_fn)dlsym(lib, "_ZGVdN8v_erfcf");
        exp8 = (vm8_fn)dlsym(lib, "_ZGVdN8v_expf");
        if (erfc8 && exp8) { path = VM_AVX2; return; }
    }
#endif
}

static vm_path current(void) {
    pthread_once(&once, resolve);
    return path;
}

const char *mst_vmath_path(void) {
    switch (current()) {
    case VM_AVX512: return "libmvec avx512";
    case VM_AVX2: return "libmvec avx2";
    default: return "libm scalar";
    }
}

#if MST_VMATH_X86
/* Full vectors, then the tail as one masked vector. */
__attribute__((target("avx512f"))) static void run16(vm16_fn f, const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
    if (i < n) {    /* the tail under a mask, the other lanes zero */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

__attribute__((target("avx2,fma"))) static void run8(vm8_fn f, const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
    if (i < n) {    /* the tail under a mask, the other lanes zero */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));
    }
}
#endif

void mst_vmath_erfcf(const float *x, float *y, int64_t n) {
    switch (current()) {
#if MST_VMATH_X86
    case VM_AVX512: run16(erfc16, x, y, n); return;
    case VM_AVX2: run8(erfc8, x, y, n); return;
#endif
    default:
        for (int64_t i = 0; i < n; i++) y[i] = erfcf(x[i]);
    }
}

void mst_vmath_expf(const float *x, float *y, int64_t n) {
    switch (current()) {
#if MST_VMATH_X86
    case VM_AVX512: run16(exp16, x, y, n); return;
    case VM_AVX2: run8(exp8, x, y, n); return;
#endif
    default:
        for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
    }
}
