/* rng.c — Philox4x32-10 and the streams built on it. */
#include "runtime/rng.h"

#include <math.h>

#include "runtime/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

mst_philox_out mst_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    mst_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

#if defined(__x86_64__)
/* 16 lanes of 32 x 32 -> 64-bit products: the low and high words. */
__attribute__((target("avx512f"))) static inline void mulhilo16(__m512i a, __m512i m, __m512i *lo, __m512i *hi) {
    *lo = _mm512_mullo_epi32(a, m);
    __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);          /* high words of lanes 0, 2, ... */
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);           /* high words in lanes 1, 3, ... */
    *hi = _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, odd);
}

/* mst_philox's rounds on 16 counters side by side (counter_hi 0; c1 0 below 2^32). */
__attribute__((target("avx512f"))) static void philox16_avx512(uint64_t key, uint32_t counter_lo, uint32_t out[4][16]) {
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int32_t)counter_lo),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i c1 = _mm512_setzero_si512(), c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int32_t)0xD2511F53u), m1 = _mm512_set1_epi32((int32_t)0xCD9E8D57u);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i lo0, hi0, lo1, hi1;
        mulhilo16(c0, m0, &lo0, &hi0);
        mulhilo16(c2, m1, &lo1, &hi1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int32_t)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int32_t)k1));
        c1 = lo1;
        c3 = lo0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    _mm512_storeu_si512(out[0], c0);
    _mm512_storeu_si512(out[1], c1);
    _mm512_storeu_si512(out[2], c2);
    _mm512_storeu_si512(out[3], c3);
}
#endif

void mst_philox16(uint64_t key, uint64_t counter_lo, uint32_t out[4][16]) {
#if defined(__x86_64__)
    if (counter_lo + 15 < (1ull << 32) && mst_cpu_has(MST_CPU_AVX512F)) {
        philox16_avx512(key, (uint32_t)counter_lo, out);
        return;
    }
#endif
    for (int j = 0; j < 16; j++) {
        mst_philox_out o = mst_philox(key, 0, counter_lo + (uint64_t)j);
        for (int w = 0; w < 4; w++) out[w][j] = o.v[w];
    }
}

uint64_t mst_rng_u64(mst_rng *r) {
    mst_philox_out o = mst_philox(r->key, r->stream, r->counter++);
    return ((uint64_t)o.v[0] << 32) | o.v[1];
}

double mst_rng_uniform(mst_rng *r) { return mst_u64_to_unit(mst_rng_u64(r)); }

double mst_rng_normal(mst_rng *r) {
    double u1 = mst_rng_uniform(r), u2 = mst_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t mst_hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
