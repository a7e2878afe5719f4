/* op.h — the one op table. Every op is described once, here and in its family file under
 * runtime/ops/: name, arity, attribute schema, shape/dtype inference, kernels per (device, dtype)
 * (fast and reference), FLOP and byte formulas, and a backward rule written in terms of other ops.
 * The eager dispatcher (dispatch.c) runs a call at once; graph mode will trace the same calls.
 *
 * Adding an op: a value in mst_op, a descriptor in its family file, a row in optable.c (the
 * _Static_assert there fails until you do), a public constructor in ops.h, and a gradient-check
 * case in tests/runtime/.
 */
#ifndef MST_RUNTIME_OP_H
#define MST_RUNTIME_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/status.h"
#include "runtime/tensor.h"

typedef enum {
    /* ops/elementwise.c — broadcasting binary ops, scale, and the broadcast pair */
    MST_OP_ADD, MST_OP_SUB, MST_OP_MUL, MST_OP_DIV, MST_OP_SCALE, MST_OP_SUM_TO, MST_OP_BROADCAST_TO,
    /* ops/activation.c — and the gradient ops their backward rules use */
    MST_OP_RELU, MST_OP_RELU_GRAD, MST_OP_GELU, MST_OP_GELU_GRAD,
    MST_OP_TANH, MST_OP_TANH_GRAD, MST_OP_SIGMOID, MST_OP_SIGMOID_GRAD,
    /* ops/matmul.c */
    MST_OP_MATMUL, MST_OP_LINEAR,
    /* ops/conv.c */
    MST_OP_CONV2D, MST_OP_CONV2D_GRAD_INPUT, MST_OP_CONV2D_GRAD_WEIGHT,
    /* ops/norm.c */
    MST_OP_BATCHNORM, MST_OP_BATCHNORM_GRAD, MST_OP_LAYERNORM, MST_OP_LAYERNORM_GRAD,
    /* ops/pool.c */
    MST_OP_MAXPOOL2D, MST_OP_MAXPOOL2D_GRAD, MST_OP_AVGPOOL2D, MST_OP_AVGPOOL2D_GRAD, MST_OP_GLOBAL_AVGPOOL,
    /* ops/softmax.c */
    MST_OP_SOFTMAX, MST_OP_SOFTMAX_GRAD, MST_OP_LOG_SOFTMAX, MST_OP_LOG_SOFTMAX_GRAD,
    MST_OP_CROSS_ENTROPY, MST_OP_CROSS_ENTROPY_GRAD,
    /* ops/embedding.c, ops/dropout.c */
    MST_OP_EMBEDDING, MST_OP_EMBEDDING_GRAD, MST_OP_DROPOUT,
    /* ops/shape.c */
    MST_OP_RESHAPE, MST_OP_TRANSPOSE, MST_OP_CONCAT, MST_OP_SLICE, MST_OP_SLICE_GRAD,
    /* ops/reduce.c */
    MST_OP_SUM, MST_OP_MEAN,
    /* ops/cast.c */
    MST_OP_CAST,
    /* ops/optim_update.c — in-place parameter updates, so graph mode can trace the optimizer */
    MST_OP_SGD_UPDATE, MST_OP_ADAM_UPDATE,
    /* ops/copy.c — a materialized copy that stays differentiable (gradient accumulation uses it) */
    MST_OP_COPY,
    /* ops/amp_ops.c — loss scaling and gradient clipping, all state in tensors so a step traces */
    MST_OP_AMP_UNSCALE_CHECK, MST_OP_AMP_UPDATE_SCALE, MST_OP_CLIP_COEF,
    /* ops/testing.c — a kernel of known cost, for the profiler's attribution tests */
    MST_OP_SPIN,
    /* ops/attention.c — softmax over keys under a padding mask */
    MST_OP_MASKED_SOFTMAX,
    /* ops/loss.c — regression losses (super-resolution) and their gradient ops */
    MST_OP_L1_LOSS, MST_OP_L1_LOSS_GRAD, MST_OP_MSE_LOSS, MST_OP_MSE_LOSS_GRAD,
    /* ops/collective.c — the gradient all-reduce of data parallelism (runtime/comm/dp.h) */
    MST_OP_ALLREDUCE_START, MST_OP_ALLREDUCE_WAIT,
    /* ops/shape.c — graph mode's rewrite of a sum of slice gradients that tile an axis */
    MST_OP_SLICE_GRAD_SUM,
    /* ops/norm.c — graph mode's batch norm with the max pooling that reads its output (fuse_bn_pool) */
    MST_OP_BATCHNORM_MAXPOOL,
    MST_OP_COUNT
} mst_op;

#define MST_MAX_OP_INPUTS 8
#define MST_MAX_OP_OUTPUTS 4
#define MST_MAX_ATTR_I 8
#define MST_MAX_ATTR_F 6
#define MST_TIED_OUT 8      /* mst_op_desc.blocked_tied: output k's bit */

/* Attributes: integer and float slots whose meaning each op names in its descriptor. */
typedef struct {
    int64_t i[MST_MAX_ATTR_I];
    double f[MST_MAX_ATTR_F];
} mst_attrs;

/* One op application: what the dispatcher validates, the kernel reads and the tape keeps. */
typedef struct mst_op_call {
    mst_op op;
    int n_in, n_out;
    mst_tensor *in[MST_MAX_OP_INPUTS];
    mst_tensor *out[MST_MAX_OP_OUTPUTS];
    mst_attrs attrs;
    int64_t prof_seq;       /* the profiler's forward sequence number (trace flow to its backward); 0 none */
} mst_op_call;

/* What inference says an output will be. */
typedef struct {
    mst_dtype dtype;
    int ndim;
    int64_t shape[MST_MAX_DIMS];
} mst_meta;

/* Validate the inputs and attributes and describe the outputs; on a problem, return
 * mst_op_fail(...) with a message naming the shapes and what was expected. */
typedef mst_status (*mst_infer_fn)(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]);
/* Compute c->out from c->in (or update mutated inputs in place). */
typedef mst_status (*mst_kernel_fn)(mst_ctx *ctx, const mst_op_call *c);
/* Given gradients of the outputs (gy[k] may be NULL where an output got none), produce gradients
 * of the inputs (gx[i] stays NULL where there is none) by calling other ops. */
typedef mst_status (*mst_backward_fn)(mst_ctx *ctx, const mst_op_call *c, mst_tensor *const gy[], mst_tensor *gx[]);
typedef int64_t (*mst_cost_fn)(const mst_op_call *c);
/* An elementwise op over one block of n f32 elements: y[j] from x[0][j], x[1][j]... (operands
 * already broadcast to the block), with the kernel's exact arithmetic so a fused chain of these
 * gives the unfused kernels' bits. Graph mode composes them into one loop (runtime/graph/fuse.c). */
typedef void (*mst_elem_f32_fn)(float *y, const float *const x[], int64_t n, const mst_attrs *a);

/* A parameter update in two parts, so graph mode can split the elements of all parameters evenly
 * over the pool: begin counts the step and derives the per-call scalars (false: the step is
 * skipped, nothing to do); range runs the elementwise part over elements [lo, hi) of the
 * parameter. The op's own kernel is begin + range over [0, numel), so any split gives its bits. */
typedef struct {
    int64_t t;                      /* this update's count, >= 1 */
    double s[8];                    /* the op's scalars, in double; range casts them as the kernel does */
} mst_update_scalars;
typedef bool (*mst_update_begin_fn)(const mst_op_call *c, mst_update_scalars *sc);
typedef void (*mst_update_range_fn)(const mst_op_call *c, const mst_update_scalars *sc, int64_t lo, int64_t hi);

enum {
    MST_OPF_ELEMENTWISE = 1u << 0,  /* out[i] depends on in[.][i] only (after broadcasting): fusable */
    MST_OPF_PROMOTE     = 1u << 1,  /* float inputs are cast to their promoted type first */
    MST_OPF_VIEW        = 1u << 2,  /* out[0] shares in[0]'s storage; no kernel */
    MST_OPF_RANDOM      = 1u << 3,  /* uses a seed carried in its attributes */
    MST_OPF_GRAD_OP     = 1u << 4,  /* exists for backward rules */
    MST_OPF_PARAM_UPDATE = 1u << 5, /* an optimizer's in-place update of one parameter (input 0): graph
                                       mode fuses all of them into one node (update_begin/update_range) */
    MST_OPF_RELU_EPILOGUE = 1u << 6,/* a following relu may run as its epilogue, in place on out[0] */
    MST_OPF_HALF_EXACT  = 1u << 7,  /* elementwise, and on values of one half type its result is one of
                                       them or zero (a select): the fused loop skips rounding it */
};

/* What autocast (runtime/amp/autocast.c) may do with an op; the amp level turns the class into an
 * action. Zero, the default of a descriptor that does not say, is the safe `never`. */
typedef enum {
    MST_AMP_CLASS_NEVER = 0,        /* casts, shape/view ops, grad ops, state updates */
    MST_AMP_CLASS_ALLOW,            /* MindSpore's white list: half from O1 on */
    MST_AMP_CLASS_HALF,             /* half from O2 on */
    MST_AMP_CLASS_KEEP_F32,         /* f32 at O2, half at O3: softmax, loss, reductions, layernorm */
    MST_AMP_CLASS_NORM,             /* O2: f32 parameters with half data (batchnorm); half at O3 */
} mst_amp_class;

typedef struct mst_op_desc {
    const char *name;
    int min_inputs, max_inputs;     /* max_inputs > min_inputs: optional or variadic inputs */
    int n_outputs;                  /* 0 for pure in-place updates */
    uint32_t flags;
    mst_amp_class amp_class;        /* autocast's class; MST_AMP_CLASS_NEVER when unset */
    uint32_t mutates;               /* bit i: input i is updated in place */
    uint32_t nondiff;               /* bit i: input i never receives a gradient */
    int dtype_arg;                  /* the input whose dtype selects the kernel */
    const char *attr_i[MST_MAX_ATTR_I];    /* names of the used integer slots, NULL-terminated */
    const char *attr_f[MST_MAX_ATTR_F];
    mst_infer_fn infer;
    /* The op's own kernels per (device, dtype) — the builtin provider of each backend
     * (runtime/device.h); executors reach them only through the backend's kernel lookup. */
    mst_kernel_fn kernels[MST_DEVICE_COUNT][MST_DTYPE_COUNT];   /* fast kernels */
    mst_kernel_fn ref[MST_DEVICE_COUNT][MST_DTYPE_COUNT];       /* plain reference kernels; NULL = the fast one is the reference */
    mst_backward_fn backward;                /* NULL: not differentiable */
    mst_cost_fn flops;                       /* NULL: 0 */
    mst_cost_fn bytes;                       /* NULL: bytes of all inputs and outputs */
    mst_elem_f32_fn elem_f32;                /* ELEMENTWISE ops: one f32 block, for graph-mode fusion; NULL: not fusable */
    /* PARAM_UPDATE ops: 1 + the integer attribute slot holding the parameter's index (the one slot
     * in which one optimizer's updates differ; 0: none), and the split kernel (NULL per dtype: the
     * fused node runs that dtype's updates one whole parameter at a time). */
    int param_index_attr;
    mst_update_begin_fn update_begin;
    mst_update_range_fn update_range[MST_DTYPE_COUNT];
    /* RELU_EPILOGUE ops: 1 + the integer attribute slot that, set to 1, makes the kernel apply the
     * relu in its own output loop (one pass instead of two); 0: the relu runs after the kernel. */
    int relu_in_kernel_attr;
    /* Graph mode's nChw16c chains (runtime/layout.h): bit i of blocked_in (blocked_out) = the kernel
     * mst_op_kernel binds reads input i (writes output i) in nChw16c when the tensor says so, each
     * position in its own layout (a convolution reorders whichever is plain), except the positions
     * in blocked_tied (bit i: input i, bit MST_TIED_OUT + k: output k), which take one layout
     * together (batch norm's x and y). Elementwise ops need no bits: on operands of one shape they
     * are layout-blind, and the layout pass ties them. */
    uint32_t blocked_in, blocked_out, blocked_tied;
    /* Ops the kernel choice serves (runtime/backend/kernel_choice.h): whether the builtin kernel reads
     * and writes this call's nChw16c operands itself (the direct convolution, runtime/ops/
     * conv_direct.h); then the choice runs the call as it is and the layout pass counts the
     * positions as taking the layout. NULL or false: the builtin kernel runs on plain copies. */
    bool (*builtin_takes_blocked)(const mst_op_call *c);
} mst_op_desc;

extern const mst_op_desc *const mst_op_table[MST_OP_COUNT];

const char *mst_op_name(mst_op op);
int         mst_op_parse(const char *name);             /* -1 if unknown */
int64_t     mst_op_flops(const mst_op_call *c);
int64_t     mst_op_bytes(const mst_op_call *c);

/* A call's signature as the profile stores it (kernel BEGIN events): the inputs' shapes and dtypes,
 * then the attribute slots the descriptor names: "[[64,784],[256,784],[256]]|f32,f32,f32", a conv
 * "[[64,1,28,28],[16,1,3,3]]|f32,f32|i:1,1,1,1". key hashes what the text says (with the op). */
void     mst_op_signature(const mst_op_call *c, char *buf, size_t n);
uint64_t mst_op_signature_key(const mst_op_call *c);

/* Record an op error in the context: "conv2d: input f32(64, 3, 28, 28) ...". Returns status. */
mst_status mst_op_fail(mst_ctx *ctx, const mst_op_call *c, mst_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The kernel both executors (eager dispatch, graph plans) run for an op on inputs of dtype key,
 * as the context's backend answers it (runtime/device.h). On the CPU:
 * the reference kernel under force_ref, else the fast one, else the generic half-via-f32 kernel for
 * f16/bf16 (runtime/amp/half_kernels.c); where oneDNN serves the op and dtype (and
 * runtime.kernels allows it), a kernel that picks the provider per shape
 * (runtime/backend/kernel_choice.h). NULL when there is none. */
mst_kernel_fn mst_op_kernel(const mst_ctx *ctx, mst_op op, mst_dtype key);
/* Every kernel function an executor may call — the descriptors' fast and reference kernels and the
 * providers' entry points (runtime/backend/) — into out[0..cap); returns how many. The sampler tells
 * kernel frames from dispatch frames by these addresses. */
size_t mst_op_kernel_addrs(const void **out, size_t cap);

/* The eager dispatcher: check arguments, promote dtypes, infer shapes, allocate outputs, record
 * the tape, select the kernel and launch it, all inside profiler ranges. Outputs are pooled.
 * Any NULL input means an earlier call failed: the call returns that error untouched. */
mst_status mst_dispatch(mst_ctx *ctx, mst_op op, int n_in, mst_tensor *const in[], const mst_attrs *attrs,
                        mst_tensor *out[]);

/* Convenience for single-output ops: the output, or NULL with the error in ctx. */
mst_tensor *mst_dispatch1(mst_ctx *ctx, mst_op op, int n_in, mst_tensor *const in[], const mst_attrs *attrs);

#endif
