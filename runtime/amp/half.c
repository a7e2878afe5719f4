/* half.c — bulk f16/bf16 <-> f32 conversions: scalar, AVX2+F16C, AVX-512F and AVX512-BF16 paths, bit-identical.
 *
 * The vector paths are compiled with per-function target attributes, so the rest of the build
 * stays generic x86-64 and the path is picked at run time (runtime/cpu_features.h, which also
 * honours MSTUNE_CPU_MASK; __builtin_cpu_supports did not build with clang). Tails shorter
 * than a vector go through the scalar conversions of runtime/dtype.c (AVX2, scalar paths) or
 * through one zero-padded vector block (AVX-512 paths: the half batch-norm and pooling kernels
 * convert rows of 49 or 196 values, where a scalar tail cost as much as the row), and the vector
 * code reproduces the scalar conversions bit for bit (tests/amp/test_half.c checks every f16 pattern and a dense f32 sweep):
 *   f16 -> f32  vcvtph2ps: exact; a signalling NaN comes back quiet (dtype.c does the same).
 *   f32 -> f16  vcvtps2ph with round-to-nearest-even: subnormals, overflow to inf, NaN quieted.
 *   bf16 -> f32 a 16-bit shift.
 *   f32 -> bf16 integer rounding (x + 0x7fff + lsb) >> 16 with NaNs quieted instead of rounded;
 *               not vcvtneps2bf16, which flushes subnormals to zero. The AVX-512 path uses the
 *               AVX2 code here: 512-bit versions (vpmovdw, and packus + permute) measured slower
 *               (36 vs 53 GB/s, bench_amp_kernels), so AVX-512 is used where it helps only. Where
 *               the CPU has AVX512-BF16, vcvtneps2bf16 rounds 16 lanes in one instruction (0.097
 *               -> 0.061 ns per element on 1024-element blocks in L1, Zen 5): its path falls back to the integer rounding for a
 *               block holding a subnormal, which the instruction would flush to zero.
 */
#include "runtime/amp/half.h"
#include "runtime/cpu_features.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MST_HALF_X86 1
#else
#define MST_HALF_X86 0
#endif

static const char *const path_names[MST_HALF_PATH_COUNT] = {"scalar", "avx2", "avx512", "avx512_bf16"};
_Static_assert(MST_HALF_PATH_COUNT == 4, "a new conversion path needs a name");

const char *mst_half_path_name(mst_half_path p) {
    return (unsigned)p < MST_HALF_PATH_COUNT ? path_names[p] : "?";
}


bool mst_half_path_available(mst_half_path p) {
    switch (p) {
    case MST_HALF_PATH_SCALAR: return true;
#if MST_HALF_X86
    case MST_HALF_PATH_AVX2: return mst_cpu_has(MST_CPU_AVX2) && mst_cpu_has(MST_CPU_F16C);
    case MST_HALF_PATH_AVX512:    /* f32 -> bf16 runs the AVX2 code, so it needs AVX2 too */
        return mst_cpu_has(MST_CPU_AVX512F) && mst_cpu_has(MST_CPU_AVX2);
    case MST_HALF_PATH_AVX512_BF16:     /* the f16 conversions are the AVX-512F path's */
        return mst_cpu_has(MST_CPU_AVX512F) && mst_cpu_has(MST_CPU_AVX512BW) && mst_cpu_has(MST_CPU_AVX512VL) &&
               mst_cpu_has(MST_CPU_AVX512_BF16) && mst_cpu_has(MST_CPU_AVX2);
#endif
    default: return false;
    }
}

mst_half_path mst_half_best_path(void) {
    static int best = -1;       /* the CPU does not change; MSTUNE_CPU_MASK is read once at detection */
    if (best >= 0) return (mst_half_path)best;
    mst_half_path p = MST_HALF_PATH_SCALAR;
    for (int k = MST_HALF_PATH_COUNT - 1; k > MST_HALF_PATH_SCALAR; k--)
        if (mst_half_path_available((mst_half_path)k)) { p = (mst_half_path)k; break; }
    __atomic_store_n(&best, (int)p, __ATOMIC_RELAXED);
    return p;
}

/* ---- scalar ---- */

static void f16_to_f32_scalar(const mst_f16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mst_f16_to_f32(src[i]);
}
static void f32_to_f16_scalar(const float *src, mst_f16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mst_f32_to_f16(src[i]);
}
static void bf16_to_f32_scalar(const mst_bf16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mst_bf16_to_f32(src[i]);
}
static void f32_to_bf16_scalar(const float *src, mst_bf16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mst_f32_to_bf16(src[i]);
}

#if MST_HALF_X86
/* ---- AVX2 + F16C: 8 lanes (16 per iteration for bf16 so one pack fills a register) ---- */

__attribute__((target("avx2,f16c"))) static void f16_to_f32_avx2(const mst_f16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    f16_to_f32_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void f32_to_f16_avx2(const float *src, mst_f16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    f32_to_f16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const mst_bf16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    bf16_to_f32_scalar(src + i, dst + i, n - i);
}

/* Eight f32 bit patterns rounded to bf16, each in the low half of its 32-bit lane. */
__attribute__((target("avx2"))) static inline __m256i round_bf16_avx2(__m256i x) {
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, mst_bf16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = round_bf16_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i b = round_bf16_avx2(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* values are <= 0xffff, so the saturating pack is exact; it interleaves 128-bit halves */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    f32_to_bf16_scalar(src + i, dst + i, n - i);
}

/* ---- AVX-512F: 16 lanes ---- */

/* The last n - i < 16 elements through FN itself as one zero-padded block of 16 (zeros convert to
 * zeros, and are not subnormal): a call per short row stays one vector. */
#define PADDED_TAIL(FN, SRC_T, DST_T, src, dst, i, n)                       \
    if ((i) < (n)) {                                                        \
        SRC_T pad_[16] = {0};                                               \
        DST_T out_[16];                                                     \
        memcpy(pad_, (src) + (i), ((n) - (i)) * sizeof(SRC_T));             \
        FN(pad_, out_, 16);                                                 \
        memcpy((dst) + (i), out_, ((n) - (i)) * sizeof(DST_T));             \
    }

__attribute__((target("avx512f"))) static void f16_to_f32_avx512(const mst_f16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    PADDED_TAIL(f16_to_f32_avx512, mst_f16, float, src, dst, i, n)
}

__attribute__((target("avx512f"))) static void f32_to_f16_avx512(const float *src, mst_f16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    PADDED_TAIL(f32_to_f16_avx512, float, mst_f16, src, dst, i, n)
}

__attribute__((target("avx512f"))) static void bf16_to_f32_avx512(const mst_bf16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    PADDED_TAIL(bf16_to_f32_avx512, mst_bf16, float, src, dst, i, n)
}

/* ---- AVX512-BF16: vcvtneps2bf16 rounds to nearest even and quiets NaNs as the integer code does,
 * but reads subnormal inputs as zero; a block holding any goes through the integer rounding
 * instead (only subnormals have a zero exponent field and a nonzero fraction). ---- */

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2"))) static void f32_to_bf16_avx512bf16(const float *src,
                                                                                                   mst_bf16 *dst, size_t n) {
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000), frac_mask = _mm512_set1_epi32(0x007fffff);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(src + i);
        __mmask16 subnormal = _mm512_testn_epi32_mask(x, exp_mask) & _mm512_test_epi32_mask(x, frac_mask);
        if (__builtin_expect(subnormal != 0, 0)) {
            f32_to_bf16_avx2(src + i, dst + i, 16);
            continue;
        }
        __m256bh b = _mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)b);
    }
    PADDED_TAIL(f32_to_bf16_avx512bf16, float, mst_bf16, src, dst, i, n)
}

#endif

void mst_half_to_f32_path(mst_half_path p, mst_dtype half, const void *src, float *dst, size_t n) {
    if (p != mst_half_best_path() && !mst_half_path_available(p)) p = MST_HALF_PATH_SCALAR;   /* best: cached */
    bool f16 = half == MST_DTYPE_F16;
    switch (p) {
#if MST_HALF_X86
    case MST_HALF_PATH_AVX512:
    case MST_HALF_PATH_AVX512_BF16:
        if (f16) f16_to_f32_avx512(src, dst, n); else bf16_to_f32_avx512(src, dst, n);
        return;
    case MST_HALF_PATH_AVX2:
        if (f16) f16_to_f32_avx2(src, dst, n); else bf16_to_f32_avx2(src, dst, n);
        return;
#endif
    default:
        if (f16) f16_to_f32_scalar(src, dst, n); else bf16_to_f32_scalar(src, dst, n);
        return;
    }
}

void mst_half_from_f32_path(mst_half_path p, mst_dtype half, const float *src, void *dst, size_t n) {
    if (p != mst_half_best_path() && !mst_half_path_available(p)) p = MST_HALF_PATH_SCALAR;   /* best: cached */
    bool f16 = half == MST_DTYPE_F16;
    switch (p) {
#if MST_HALF_X86
    case MST_HALF_PATH_AVX512:
        if (f16) f32_to_f16_avx512(src, dst, n); else f32_to_bf16_avx2(src, dst, n);   /* see the top */
        return;
    case MST_HALF_PATH_AVX512_BF16:
        if (f16) f32_to_f16_avx512(src, dst, n); else f32_to_bf16_avx512bf16(src, dst, n);
        return;
    case MST_HALF_PATH_AVX2:
        if (f16) f32_to_f16_avx2(src, dst, n); else f32_to_bf16_avx2(src, dst, n);
        return;
#endif
    default:
        if (f16) f32_to_f16_scalar(src, dst, n); else f32_to_bf16_scalar(src, dst, n);
        return;
    }
}
