/* underflow.h — partial gradient underflow under mixed precision, measured directly.
 *
 * A loss scale far too low lets many gradient elements flush to zero in half precision while the
 * loss still falls (it does not stop moving until nearly all of them do), so watching the loss
 * misses it. This measures it on the job's own numbers: at a sampled step, the same batch with the
 * same weights and the same loss scale goes through two eager forward + backward passes,
 *   half: the job's autocast (its amp level and half type) — what training computes;
 *   ref:  autocast off (O0, every op in f32) — the f32 reference gradient;
 * and every parameter's (scaled, not yet unscaled) gradient is compared element by element:
 *   ref_nonzero    the elements the f32 reference gives a nonzero, finite value;
 *   half_zero      of those, the elements the half-precision backward left at exactly zero: the
 *                  underflow the job suffers, wherever in the backward chain it happened;
 *   cast_zero      of those, the elements that rounding the reference itself to the half type
 *                  turns into zero (|g| <= half the smallest subnormal: 2^-25 in f16): the part a
 *                  final cast alone explains;
 *   cast_subnormal of those, the elements that land in the half type's subnormal range
 *                  (0 < |g| < 2^-14 in f16): kept, with fewer significant bits.
 * The fraction that matters is half_zero / ref_nonzero. The probe saves and restores everything a
 * forward in training mode touches (batch-norm running statistics, the context's random
 * generator), leaves no gradient behind and changes neither the weights nor the optimizer: the
 * trained bits are the same with or without it. It runs eagerly in graph mode too (the plan's
 * own gradients are internal to it; eager and graph mode run the same ops under the same autocast
 * policy).
 *
 *     mst_underflow_counts c = {0};
 *     mst_underflow_probe(ctx, model, scaler, 1, x, y, &c);   // ctx->amp_level > 0
 *     double lost = mst_underflow_fraction(&c);               // half_zero / ref_nonzero
 */
#ifndef MST_RUNTIME_AMP_UNDERFLOW_H
#define MST_RUNTIME_AMP_UNDERFLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/amp/loss_scale.h"
#include "runtime/model.h"

typedef struct {
    int64_t elements;           /* gradient elements compared (all parameters) */
    int64_t ref_nonzero;        /* nonzero, finite in the f32 reference */
    int64_t half_zero;          /* ... and exactly zero after the half-precision backward */
    int64_t cast_zero;          /* ... and zero when the reference is rounded to the half type */
    int64_t cast_subnormal;     /* ... and subnormal in the half type after that rounding */
} mst_underflow_counts;

/* Adds n elements' comparison to c: ref the f32 reference gradient, half the gradient the
 * half-precision backward produced (f32 storage), half_type MST_DTYPE_F16 or MST_DTYPE_BF16. */
void mst_underflow_count(mst_dtype half_type, const float *ref, const float *half, size_t n, mst_underflow_counts *c);

/* half_zero / ref_nonzero, or 0 when nothing was nonzero. */
double mst_underflow_fraction(const mst_underflow_counts *c);

/* The two passes described above on micro-batches x[k], y[k] (k < accumulate), the loss times the
 * scaler's current scale (1 without a scaler); adds the counts to c. ctx->amp_level must be > 0
 * (MST_ERR_ARG otherwise). Recoverable errors (out of memory) return a status with the message
 * in ctx; the model's state is restored either way. */
mst_status mst_underflow_probe(mst_ctx *ctx, mst_model *model, const mst_loss_scaler *scaler, int accumulate,
                               mst_tensor *const x[], mst_tensor *const y[], mst_underflow_counts *c);

/* Whether a due probe runs (the trainer's schedule, runtime/trainer.h): the first two always;
 * later ones only while the probes but the first (a cold start) plus the next, estimated as the
 * last, take at most `budget` of the training loop's time so far without the probes; budget >= 1
 * runs every due probe. Times in ns; done is the number of probes run so far. */
bool mst_underflow_within_budget(int64_t done, double first_ns, double last_ns, double probes_ns, double loop_ns,
                                 double budget);

#endif
