/* vmath.c — erfcf and expf over f32 blocks through glibc's libmvec, or scalar libm (vmath.h). */
#define _GNU_SOURCE
#include "runtime/ops/vmath.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MST_VMATH_X86 1
#else
#define MST_VMATH_X86 0
#endif

typedef enum { VM_SCALAR, VM_AVX2, VM_AVX512 } vm_path;

/* One function: libm's scalar version and libmvec's symbol stems (_ZGVeN16v_<name>,
 * _ZGVdN8v_<name>), resolved into the vector entry points. */
typedef struct {
    const char *name;
    float (*scalar)(float);
#if MST_VMATH_X86
    __m512 (*v16)(__m512);
    __m256 (*v8)(__m256);
#endif
} vm_fn;

enum { VM_ERFC, VM_EXP, VM_COUNT };
static vm_fn fns[VM_COUNT] = {[VM_ERFC] = {"erfcf", erfcf}, [VM_EXP] = {"expf", expf}};
static vm_path path = VM_SCALAR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

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
#endif

static void resolve(void) {
#if MST_VMATH_X86
    void *lib = dlopen("libmvec.so.1", RTLD_NOW | RTLD_LOCAL);     /* kept open for the process */
    if (!lib) return;
    if (mst_cpu_has(MST_CPU_AVX512F) && resolve_path(lib, VM_AVX512)) path = VM_AVX512;
    else if (mst_cpu_has(MST_CPU_AVX2) && mst_cpu_has(MST_CPU_FMA) && resolve_path(lib, VM_AVX2)) path = VM_AVX2;
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
    switch (current()) {
#if MST_VMATH_X86
    case VM_AVX512: run16(fn->v16, x, y, n); return;
    case VM_AVX2: run8(fn->v8, x, y, n); return;
#endif
    default:
        for (int64_t i = 0; i < n; i++) y[i] = fn->scalar(x[i]);
    }
}

void mst_vmath_erfcf(const float *x, float *y, int64_t n) { apply(VM_ERFC, x, y, n); }
void mst_vmath_expf(const float *x, float *y, int64_t n) { apply(VM_EXP, x, y, n); }
