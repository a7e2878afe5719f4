/* vmath.h — libm's erfcf and expf over blocks of f32 values (internal to runtime/ops).
 *
 * Through glibc's vector math library (libmvec, glibc >= 2.35: _ZGVeN16v_erfcf and friends, the
 * variants GCC calls when it vectorises libm calls), loaded with dlopen at first use and chosen
 * by the CPU at run time: 16 lanes with AVX-512F, 8 with AVX2 + FMA, else the scalar libm
 * functions (MSTUNE_CPU_MASK honoured); on an AVX-512 CPU a function takes its 8-lane variant
 * where that gives the 16-lane variant's bits and runs faster (mst_vmath_path). libmvec's variants are accurate to 4 ulp (erfcf measured
 * within 2 ulp of libm here) and give each lane alone, so a block's values do not depend on the
 * block's length or the thread split; the three paths may differ from one another in the last
 * bits, as the CPU's GEMMs do. Every f32 kernel and graph-mode fusion of an op uses the same path,
 * so eager and graph mode stay bit-equal. GELU's exact erf form was 40% of the transformer's step
 * in scalar erfcf/expf (docs/benchmarks.md).
 *
 *     mst_vmath_erfcf(x, y, n);       // y[i] = erfcf(x[i]), i < n (x == y allowed)
 *     printf("%s\n", mst_vmath_path());
 */
#ifndef MST_RUNTIME_OPS_VMATH_H
#define MST_RUNTIME_OPS_VMATH_H

#include <stdbool.h>
#include <stdint.h>

void mst_vmath_erfcf(const float *x, float *y, int64_t n);
void mst_vmath_expf(const float *x, float *y, int64_t n);

/* "libmvec avx512", "libmvec avx2" or "libm scalar": the path these calls take on this CPU, with
 * the functions that take libmvec's AVX2 variant on an AVX-512 CPU, where that variant gives the
 * same bits faster (weighed once per process; vmath.c), and the two variants' times:
 * "libmvec avx512; erfcf on avx2 (same bits, 0.64 vs 1.04 ns a value)". */
const char *mst_vmath_path(void);

/* Tests: libmvec's variant of name ("erfcf", "expf") with 16 or 8 lanes, whatever the choice;
 * false when this CPU or library has none. */
bool mst_vmath_variant(const char *name, int lanes, const float *x, float *y, int64_t n);

#endif
