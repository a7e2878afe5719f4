/* dtype.c — the dtype table and exact scalar half/bfloat16 conversions.
 *
 * These are the reference for runtime/amp/half.c's vectorized bulk conversions, which must give
 * the same bits: NaNs come out quiet in both directions for f16 (a signalling NaN's conversion
 * sets the quiet bit, as IEEE 754 and F16C's vcvtph2ps/vcvtps2ph do); bf16 -> f32 is a plain
 * widening that keeps every bit. */
#include "runtime/dtype.h"

#include <string.h>

const mst_dtype_traits mst_dtype_table[MST_DTYPE_COUNT] = {
    [MST_DTYPE_F32]  = {"f32", 4, true, 3},
    [MST_DTYPE_F64]  = {"f64", 8, true, 4},
    [MST_DTYPE_F16]  = {"f16", 2, true, 2},
    [MST_DTYPE_BF16] = {"bf16", 2, true, 2},
    [MST_DTYPE_I32]  = {"i32", 4, false, 1},
    [MST_DTYPE_U8]   = {"u8", 1, false, 0},
};
_Static_assert(MST_DTYPE_COUNT == 6, "a new dtype needs a row in mst_dtype_table");

int mst_dtype_parse(const char *s) {
    for (int t = 0; t < MST_DTYPE_COUNT; t++)
        if (strcmp(s, mst_dtype_table[t].name) == 0) return t;
    return -1;
}

mst_dtype mst_dtype_promote(mst_dtype a, mst_dtype b) {
    if (a == b) return a;
    /* the two 16-bit floats have no common 16-bit type */
    if ((a == MST_DTYPE_F16 && b == MST_DTYPE_BF16) || (a == MST_DTYPE_BF16 && b == MST_DTYPE_F16))
        return MST_DTYPE_F32;
    mst_dtype hi = mst_dtype_table[a].promote_rank >= mst_dtype_table[b].promote_rank ? a : b;
    return hi;
}

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float mst_f16_to_f32(mst_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) {                                /* inf, or NaN: payload kept, made quiet */
        if (man == 0) return bits_f32(sign | 0x7f800000u);
        return bits_f32(sign | 0x7fc00000u | (man << 13));   /* as IEEE 754 and vcvtph2ps do */
    }
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);          /* signed zero */
        /* subnormal: value = man * 2^-24, exact in f32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

mst_f16 mst_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t exp = (x >> 23) & 0xff;
    uint32_t man = x & 0x7fffff;
    if (exp == 0xff) {                                /* inf or NaN (keep it a NaN) */
        if (man == 0) return sign | 0x7c00;
        return sign | 0x7e00 | (uint16_t)(man >> 13);
    }
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00;              /* overflow -> inf */
    if (e <= 0) {                                     /* f16 subnormal or zero */
        if (e < -10) return sign;                     /* below half the smallest subnormal */
        man |= 0x800000;                              /* implicit bit */
        int shift = 14 - e;                           /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return sign | (uint16_t)half;                 /* a carry into bit 10 gives the smallest normal */
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;   /* carry may reach inf: correct */
    return sign | (uint16_t)half;
}

float mst_bf16_to_f32(mst_bf16 h) { return bits_f32((uint32_t)h << 16); }

mst_bf16 mst_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return (mst_bf16)((x >> 16) | 0x0040);        /* quiet NaN, never rounds to inf */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fffu + lsb;
    return (mst_bf16)(x >> 16);
}
