/* descs.h — the op descriptors each family file under runtime/ops/ defines; optable.c
 * gathers them into mst_op_table. */
#ifndef MST_RUNTIME_OPS_DESCS_H
#define MST_RUNTIME_OPS_DESCS_H

#include "runtime/op.h"

#define MST_DESC extern const mst_op_desc

/* ops/elementwise.c */
MST_DESC mst_desc_add;
MST_DESC mst_desc_sub;
MST_DESC mst_desc_mul;
MST_DESC mst_desc_div;
MST_DESC mst_desc_scale;
MST_DESC mst_desc_sum_to;
MST_DESC mst_desc_broadcast_to;

/* ops/activation.c */
MST_DESC mst_desc_relu;
MST_DESC mst_desc_relu_grad;
MST_DESC mst_desc_gelu;
MST_DESC mst_desc_gelu_grad;
MST_DESC mst_desc_tanh;
MST_DESC mst_desc_tanh_grad;
MST_DESC mst_desc_sigmoid;
MST_DESC mst_desc_sigmoid_grad;

/* ops/matmul.c */
MST_DESC mst_desc_matmul;
MST_DESC mst_desc_linear;

/* ops/conv.c */
MST_DESC mst_desc_conv2d;
MST_DESC mst_desc_conv2d_grad_input;
MST_DESC mst_desc_conv2d_grad_weight;

/* ops/norm.c */
MST_DESC mst_desc_batchnorm;
MST_DESC mst_desc_batchnorm_grad;
MST_DESC mst_desc_batchnorm_maxpool;
MST_DESC mst_desc_layernorm;
MST_DESC mst_desc_layernorm_grad;

/* ops/pool.c */
MST_DESC mst_desc_maxpool2d;
MST_DESC mst_desc_maxpool2d_grad;
MST_DESC mst_desc_avgpool2d;
MST_DESC mst_desc_avgpool2d_grad;
MST_DESC mst_desc_global_avgpool;

/* ops/softmax.c */
MST_DESC mst_desc_softmax;
MST_DESC mst_desc_softmax_grad;
MST_DESC mst_desc_log_softmax;
MST_DESC mst_desc_log_softmax_grad;
MST_DESC mst_desc_cross_entropy;
MST_DESC mst_desc_cross_entropy_grad;

/* ops/embedding.c */
MST_DESC mst_desc_embedding;
MST_DESC mst_desc_embedding_grad;

/* ops/dropout.c */
MST_DESC mst_desc_dropout;

/* ops/shape.c */
MST_DESC mst_desc_reshape;
MST_DESC mst_desc_transpose;
MST_DESC mst_desc_concat;
MST_DESC mst_desc_slice;
MST_DESC mst_desc_slice_grad;
MST_DESC mst_desc_slice_grad_sum;

/* ops/reduce.c */
MST_DESC mst_desc_sum;
MST_DESC mst_desc_mean;

/* ops/cast.c */
MST_DESC mst_desc_cast;

/* ops/optim_update.c */
MST_DESC mst_desc_sgd_update;
MST_DESC mst_desc_adam_update;

/* ops/copy.c */
MST_DESC mst_desc_copy;

/* ops/amp_ops.c */
MST_DESC mst_desc_amp_unscale_check;
MST_DESC mst_desc_amp_update_scale;
MST_DESC mst_desc_clip_coef;

/* ops/testing.c */
MST_DESC mst_desc_spin;

/* ops/attention.c */
MST_DESC mst_desc_masked_softmax;

/* ops/loss.c */
MST_DESC mst_desc_l1_loss;
MST_DESC mst_desc_l1_loss_grad;
MST_DESC mst_desc_mse_loss;
MST_DESC mst_desc_mse_loss_grad;

/* ops/collective.c */
MST_DESC mst_desc_allreduce_start;
MST_DESC mst_desc_allreduce_wait;

#undef MST_DESC

#endif
