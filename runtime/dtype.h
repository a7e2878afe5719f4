/* dtype.h — element types and everything known about them, in one table indexed by the enum.
 *
 * f16 and bf16 are storage types: on CPUs without native half arithmetic kernels load them,
 * compute in f32 and round to nearest even on store. The scalar conversions here are exact per
 * IEEE 754 (subnormals, inf, NaN quieted); runtime/amp/half.h has the vectorized bulk versions
 * (AVX2+F16C, AVX-512F), bit-identical to these.
 */
#ifndef MST_RUNTIME_DTYPE_H
#define MST_RUNTIME_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    MST_DTYPE_F32,
    MST_DTYPE_F64,      /* reference checks (gradient checks run in f64) */
    MST_DTYPE_F16,
    MST_DTYPE_BF16,
    MST_DTYPE_I32,
    MST_DTYPE_U8,
    MST_DTYPE_COUNT
} mst_dtype;

typedef struct {
    const char *name;
    size_t size;
    bool is_float;
    int promote_rank;   /* dtype promotion: the higher rank wins (i32 < f16 = bf16 < f32 < f64) */
} mst_dtype_traits;

extern const mst_dtype_traits mst_dtype_table[MST_DTYPE_COUNT];

static inline size_t mst_dtype_size(mst_dtype t) { return mst_dtype_table[t].size; }
static inline bool mst_dtype_is_float(mst_dtype t) { return mst_dtype_table[t].is_float; }
static inline const char *mst_dtype_name(mst_dtype t) {
    return (unsigned)t < MST_DTYPE_COUNT ? mst_dtype_table[t].name : "?";
}
static inline bool mst_dtype_is_half(mst_dtype t) { return t == MST_DTYPE_F16 || t == MST_DTYPE_BF16; }
/* Parse "f32", "bf16", ...; returns -1 when unknown. */
int mst_dtype_parse(const char *s);

/* The type two operands are computed in: f16 with bf16 gives f32, anything with f64 gives f64. */
mst_dtype mst_dtype_promote(mst_dtype a, mst_dtype b);

typedef uint16_t mst_f16;
typedef uint16_t mst_bf16;

float   mst_f16_to_f32(mst_f16 h);         /* exact; a signalling NaN comes back quiet */
mst_f16 mst_f32_to_f16(float f);        /* round to nearest even, overflow to inf, NaN kept */
float   mst_bf16_to_f32(mst_bf16 h);
mst_bf16 mst_f32_to_bf16(float f);      /* round to nearest even, NaN kept quiet */

#endif
