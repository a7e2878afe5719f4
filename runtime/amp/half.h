/* half.h — bulk f16/bf16 <-> f32 conversions and the generic half-via-f32 kernel.
 *
 * Conversions come in three paths chosen at run time: AVX-512F (16 lanes; vcvtph2ps/vcvtps2ph and
 * integer rounding for bf16), AVX2+F16C (8 lanes) and portable scalar (runtime/dtype.c's exact
 * IEEE conversions). Every path gives the same bits for every input: round to nearest even,
 * subnormals kept, overflow to inf, NaNs quieted with their sign and the payload bits that fit.
 * (AVX512-BF16's vcvtneps2bf16 flushes subnormals to zero, so its path redoes those lanes by the
 * integer rounding.)
 * Tests and force_ref runs name a path explicitly; everything else takes mst_half_best_path().
 *
 *     mst_half_to_f32(MST_DTYPE_F16, h, f, n);                         // fastest path
 *     mst_half_from_f32_path(MST_HALF_PATH_SCALAR, MST_DTYPE_BF16, f, b, n);   // forced scalar
 *
 * The half kernel (half_kernels.c) runs any op that has an f32 kernel on f16/bf16 tensors: half
 * inputs are widened into f32 scratch, the f32 kernel runs on a call whose headers point at the
 * scratch, and float outputs (and mutated half inputs) are rounded back to nearest even. This is
 * what "stored half, computed in f32" means on a CPU without half arithmetic.
 */
#ifndef MST_RUNTIME_AMP_HALF_H
#define MST_RUNTIME_AMP_HALF_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/dtype.h"
#include "runtime/op.h"

typedef enum {
    MST_HALF_PATH_SCALAR,
    MST_HALF_PATH_AVX2,     /* AVX2 + F16C */
    MST_HALF_PATH_AVX512,   /* AVX-512F (f32 -> bf16 stays on AVX2, faster here) */
    MST_HALF_PATH_AVX512_BF16,  /* AVX-512F + AVX512-BF16: f32 -> bf16 by vcvtneps2bf16, subnormal lanes fixed up */
    MST_HALF_PATH_COUNT
} mst_half_path;

bool          mst_half_path_available(mst_half_path p);   /* this CPU can run it */
mst_half_path mst_half_best_path(void);                   /* the widest available */
const char   *mst_half_path_name(mst_half_path p);        /* "scalar", "avx2", "avx512", "avx512_bf16" */

/* true for MST_DTYPE_F16 and MST_DTYPE_BF16 */

/* Convert n elements; half is MST_DTYPE_F16 or MST_DTYPE_BF16. An unavailable path falls back to
 * the scalar one. */
void mst_half_to_f32_path(mst_half_path p, mst_dtype half, const void *src, float *dst, size_t n);
void mst_half_from_f32_path(mst_half_path p, mst_dtype half, const float *src, void *dst, size_t n);
static inline void mst_half_to_f32(mst_dtype half, const void *src, float *dst, size_t n) {
    mst_half_to_f32_path(mst_half_best_path(), half, src, dst, n);
}
static inline void mst_half_from_f32(mst_dtype half, const float *src, void *dst, size_t n) {
    mst_half_from_f32_path(mst_half_best_path(), half, src, dst, n);
}

/* The generic half kernel: runs the op's f32 kernel (its reference one under force_ref) on f16/bf16
 * inputs. The dispatcher selects it when an op has no kernel for a half dtype but has an f32 one. */
mst_status mst_half_kernel(mst_ctx *ctx, const mst_op_call *c);
/* The half call c run by the f32 kernel `kernel` on f32 copies of its f16/bf16 operands (widened
 * exactly; layouts kept), its half outputs (and mutated inputs) rounded back to nearest even:
 * mst_half_kernel's whole-tensor path, with the kernel given (the oneDNN f32 provider of half
 * convolutions, runtime/backend/kernel_choice.h). */
mst_status mst_half_run_wide(mst_ctx *ctx, const mst_op_call *c, mst_kernel_fn kernel);
/* Whether mst_half_kernel can run op d on kernel dtype key. */
bool mst_half_kernel_applies(const mst_op_desc *d, mst_dtype key);
/* The half kernel's grow-only f32 scratch (kept in ctx->amp_cache, counted as MST_MEM_WORKSPACE);
 * NULL with an error in the context when it cannot grow. Separate from mst_ctx_workspace, which
 * the f32 kernels it runs use themselves. */
void *mst_amp_scratch(mst_ctx *ctx, size_t bytes);

#endif
