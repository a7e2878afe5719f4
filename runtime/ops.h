/* ops.h — the public op constructors model code calls. Each builds the attributes for one op
 * and goes through the dispatcher, so it runs eagerly now and can be traced by graph mode later.
 * Every function returns a pooled tensor, or NULL with the error in the context; a NULL argument
 * from an earlier failure passes through, so a chain of calls can be checked once at the end.
 *
 * Shapes use PyTorch's conventions: images NCHW, linear weights (out, in), conv weights
 * (C_out, C_in, KH, KW).
 */
#ifndef MST_RUNTIME_OPS_H
#define MST_RUNTIME_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"

/* ---- elementwise with NumPy broadcasting and dtype promotion (ops/elementwise.c) ---- */
mst_tensor *mst_add(mst_ctx *ctx, mst_tensor *a, mst_tensor *b);
mst_tensor *mst_sub(mst_ctx *ctx, mst_tensor *a, mst_tensor *b);
mst_tensor *mst_mul(mst_ctx *ctx, mst_tensor *a, mst_tensor *b);
mst_tensor *mst_div(mst_ctx *ctx, mst_tensor *a, mst_tensor *b);
mst_tensor *mst_scale(mst_ctx *ctx, mst_tensor *x, double s);
/* Sum x down to `shape` (the reverse of broadcasting); broadcast x up to `shape`. */
mst_tensor *mst_sum_to(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape);
mst_tensor *mst_broadcast_to(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape);

/* ---- activations (ops/activation.c) ---- */
mst_tensor *mst_relu(mst_ctx *ctx, mst_tensor *x);
mst_tensor *mst_gelu(mst_ctx *ctx, mst_tensor *x);          /* exact, 0.5 x (1 + erf(x / sqrt 2)) */
mst_tensor *mst_tanh(mst_ctx *ctx, mst_tensor *x);
mst_tensor *mst_sigmoid(mst_ctx *ctx, mst_tensor *x);

/* ---- matrix products (ops/matmul.c), OpenBLAS sgemm/dgemm ---- */
/* a (M, K) @ b (K, N); batched a (B, M, K) @ b (B, K, N) or b (K, N). trans_* use a^T / b^T. */
mst_tensor *mst_matmul(mst_ctx *ctx, mst_tensor *a, mst_tensor *b);
mst_tensor *mst_matmul_t(mst_ctx *ctx, mst_tensor *a, mst_tensor *b, bool trans_a, bool trans_b);
/* x (..., in) @ w (out, in)^T + bias (out); bias may be NULL. */
mst_tensor *mst_linear(mst_ctx *ctx, mst_tensor *x, mst_tensor *w, mst_tensor *bias);

/* ---- convolution (ops/conv.c), im2col + GEMM ---- */
/* x (N, C, H, W), w (K, C, R, S), bias (K) or NULL -> (N, K, P, Q). */
mst_tensor *mst_conv2d(mst_ctx *ctx, mst_tensor *x, mst_tensor *w, mst_tensor *bias,
                       int stride_h, int stride_w, int pad_h, int pad_w);

/* ---- normalization (ops/norm.c) ---- */
/* x (N, C) or (N, C, H, W); gamma, beta, running_mean, running_var (C). Training normalizes with
 * batch statistics and updates the running ones in place (running = (1-m) running + m batch,
 * unbiased variance); evaluation uses the running statistics. */
mst_tensor *mst_batchnorm(mst_ctx *ctx, mst_tensor *x, mst_tensor *gamma, mst_tensor *beta,
                          mst_tensor *running_mean, mst_tensor *running_var,
                          bool training, double momentum, double eps);
/* Normalizes over the last dimension; gamma, beta have that dimension's size. */
mst_tensor *mst_layernorm(mst_ctx *ctx, mst_tensor *x, mst_tensor *gamma, mst_tensor *beta, double eps);

/* ---- pooling (ops/pool.c) ---- */
mst_tensor *mst_maxpool2d(mst_ctx *ctx, mst_tensor *x, int k_h, int k_w, int stride_h, int stride_w, int pad_h, int pad_w);
/* Padding counts toward the divisor (count_include_pad = true). */
mst_tensor *mst_avgpool2d(mst_ctx *ctx, mst_tensor *x, int k_h, int k_w, int stride_h, int stride_w, int pad_h, int pad_w);
mst_tensor *mst_global_avgpool(mst_ctx *ctx, mst_tensor *x);   /* (N, C, H, W) -> (N, C) */

/* ---- softmax family and loss (ops/softmax.c) ---- */
mst_tensor *mst_softmax(mst_ctx *ctx, mst_tensor *x, int axis);       /* axis < 0 counts from the end */
mst_tensor *mst_log_softmax(mst_ctx *ctx, mst_tensor *x, int axis);
/* logits (N, C), labels i32 (N) in [0, C) -> mean loss, shape (). */
mst_tensor *mst_cross_entropy(mst_ctx *ctx, mst_tensor *logits, mst_tensor *labels);

/* ---- attention (ops/attention.c) ---- */
/* Softmax over the last axis of scores (B, ..., Lk) where keep (B, Lk) i32 is non-zero; masked
 * keys get probability 0 (a row with no key left is all zeros). Token ids with 0 = padding serve
 * as keep directly. */
mst_tensor *mst_masked_softmax(mst_ctx *ctx, mst_tensor *scores, mst_tensor *keep);

/* ---- regression losses and pixel shuffle (ops/loss.c) ---- */
/* pred and target of one shape -> mean |pred - target| / mean (pred - target)^2, shape (). */
mst_tensor *mst_l1_loss(mst_ctx *ctx, mst_tensor *pred, mst_tensor *target);
mst_tensor *mst_mse_loss(mst_ctx *ctx, mst_tensor *pred, mst_tensor *target);
/* Sub-pixel upsampling (Shi et al., 2016): (N, C r^2, H, W) -> (N, C, H r, W r), as
 * torch.nn.functional.pixel_shuffle; composed of reshape and permute. */
mst_tensor *mst_pixel_shuffle(mst_ctx *ctx, mst_tensor *x, int r);

/* ---- embedding and dropout (ops/embedding.c, ops/dropout.c) ---- */
/* indices i32 (any shape) in [0, V), weight (V, D) -> (indices..., D). */
mst_tensor *mst_embedding(mst_ctx *ctx, mst_tensor *indices, mst_tensor *weight);
/* Inverted dropout: zeroes with probability p and scales by 1/(1-p); the mask derives from a
 * seed drawn from the context, so a run is reproducible. Identity when !training or p == 0. */
mst_tensor *mst_dropout(mst_ctx *ctx, mst_tensor *x, double p, bool training);

/* ---- shape (ops/shape.c) ---- */
mst_tensor *mst_reshape(mst_ctx *ctx, mst_tensor *x, int ndim, const int64_t *shape);   /* one -1 allowed */
mst_tensor *mst_permute(mst_ctx *ctx, mst_tensor *x, const int *perm);                 /* perm has x->ndim entries */
mst_tensor *mst_transpose(mst_ctx *ctx, mst_tensor *x, int dim0, int dim1);
mst_tensor *mst_concat(mst_ctx *ctx, int n, mst_tensor *const xs[], int axis);
mst_tensor *mst_slice(mst_ctx *ctx, mst_tensor *x, int axis, int64_t start, int64_t length);

/* ---- reductions (ops/reduce.c): axes is a bit mask (bit d = reduce dim d), 0 = all ---- */
mst_tensor *mst_sum(mst_ctx *ctx, mst_tensor *x, uint32_t axes, bool keepdim);
mst_tensor *mst_mean(mst_ctx *ctx, mst_tensor *x, uint32_t axes, bool keepdim);

/* ---- casts between all float types (ops/cast.c) ---- */
mst_tensor *mst_cast(mst_ctx *ctx, mst_tensor *x, mst_dtype to);

/* ---- in-place parameter updates (ops/optim_update.c); runtime/optim.h drives them ----
 * Per-step values are tensors so a traced step replays: lr f64 (), steps f64 (n_params) (this
 * parameter's update count at steps[index], incremented by the update), found_inf f32 () (non-zero:
 * the update is skipped, count included). */
/* PyTorch's SGD: g += wd p; buf = momentum buf + (1 - dampening) g (buf = g on the parameter's
 * first update); g = nesterov ? g + momentum buf : buf; p -= lr g. momentum_buf may be NULL when
 * momentum == 0. */
mst_status mst_sgd_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *lr, mst_tensor *steps,
                          mst_tensor *found_inf, mst_tensor *momentum_buf, int index, double momentum, double dampening,
                          double weight_decay, bool nesterov);
/* Adam (decoupled = false: weight decay added to the gradient) or AdamW (decoupled = true:
 * p -= lr wd p), with bias correction from the parameter's update count. */
mst_status mst_adam_update(mst_ctx *ctx, mst_tensor *param, mst_tensor *grad, mst_tensor *lr, mst_tensor *steps,
                           mst_tensor *found_inf, mst_tensor *m, mst_tensor *v, int index, double beta1, double beta2,
                           double eps, double weight_decay, bool decoupled);

/* ---- copy (ops/copy.c) ---- */
/* y = x in new storage; on the tape, the gradient passes through. */
mst_tensor *mst_copy(mst_ctx *ctx, mst_tensor *x);

/* ---- loss scaling and clipping (ops/amp_ops.c); runtime/amp/loss_scale.h and runtime/step.h drive them ---- */
/* In place: grad *= 1 / scale, and found_inf = 1 when an element of the result is inf/NaN
 * (reset: found_inf = 0 first). scale and found_inf are f32 (). */
mst_status mst_amp_unscale_check(mst_ctx *ctx, mst_tensor *grad, mst_tensor *scale, mst_tensor *found_inf, bool reset);
/* In place on scale and good_steps (both () of one float dtype), reading found_inf f32 (): on
 * overflow scale = max(scale / factor, floor), good_steps = 0; else good_steps += 1 and after
 * `window` clean steps scale *= factor (unless that overflows), good_steps = 0. */
mst_status mst_amp_update_scale(mst_ctx *ctx, mst_tensor *scale, mst_tensor *good_steps, mst_tensor *found_inf,
                                double factor, int64_t window, double floor);
/* From the sum of squares of all gradients (): norm = sqrt(sum), coef = min(1, max_norm / (norm + 1e-6)). */
mst_status mst_clip_coef(mst_ctx *ctx, mst_tensor *sum_sq, double max_norm, mst_tensor **coef, mst_tensor **norm);

/* ---- gradient all-reduce (ops/collective.c); runtime/comm/dp.h drives them ---- */
/* Pack g[0..n) (one float dtype) into bucket `slot` and start its all-reduce over the context's
 * communicator; then wait for it and write the sum times scale back into g, in place. */
mst_status mst_allreduce_start(mst_ctx *ctx, int n, mst_tensor *const g[], int slot);
mst_status mst_allreduce_wait(mst_ctx *ctx, int n, mst_tensor *const g[], int slot, double scale);

/* ---- testing knob (ops/testing.c) ---- */
/* A copy of x whose kernel busy-waits `ns` nanoseconds first: an op of known kernel cost, so tests
 * can check that the profiler attributes it to `kernel`. Its gradient passes through. */
mst_tensor *mst_spin(mst_ctx *ctx, mst_tensor *x, int64_t ns);

/* ---- gradient ops: what backward rules are written in (public so graph mode can trace them) ---- */
mst_tensor *mst_relu_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x);
mst_tensor *mst_gelu_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x);
mst_tensor *mst_tanh_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y);        /* gy (1 - y^2) */
mst_tensor *mst_sigmoid_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y);     /* gy y (1 - y) */
mst_tensor *mst_conv2d_grad_input(mst_ctx *ctx, mst_tensor *gy, mst_tensor *w, int in_h, int in_w,
                                  int stride_h, int stride_w, int pad_h, int pad_w);
mst_tensor *mst_conv2d_grad_weight(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, int k_h, int k_w,
                                   int stride_h, int stride_w, int pad_h, int pad_w);
/* -> gx, ggamma, gbeta. save_mean and save_invstd are the forward's extra outputs. */
mst_status mst_batchnorm_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, mst_tensor *gamma,
                              mst_tensor *save_mean, mst_tensor *save_invstd, bool training, mst_tensor *out[3]);
mst_status mst_layernorm_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *x, mst_tensor *gamma,
                              mst_tensor *mean, mst_tensor *rstd, mst_tensor *out[3]);
mst_tensor *mst_maxpool2d_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *indices, int in_h, int in_w);
mst_tensor *mst_avgpool2d_grad(mst_ctx *ctx, mst_tensor *gy, int in_h, int in_w, int k_h, int k_w,
                               int stride_h, int stride_w, int pad_h, int pad_w);
mst_tensor *mst_softmax_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y, int axis);
mst_tensor *mst_log_softmax_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *y, int axis);
/* gy (), probs (N, C) (the forward's second output), labels (N) -> glogits (N, C). */
mst_tensor *mst_cross_entropy_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *probs, mst_tensor *labels);
mst_tensor *mst_embedding_grad(mst_ctx *ctx, mst_tensor *gy, mst_tensor *indices, int64_t num_embeddings);
/* Zeros of length full_length on `axis` with gy placed at [start, start + gy's length). */
mst_tensor *mst_slice_grad(mst_ctx *ctx, mst_tensor *gy, int axis, int64_t start, int64_t full_length);

#endif
