/* common.h — helpers shared by the op family files (private to runtime/ops/).
 *
 * Inference helpers that fill mst_meta and report shape errors through mst_op_fail, a
 * broadcasting iterator, and FLOAT_KERNELS for writing one kernel body for f32 and f64.
 */
#ifndef MST_RUNTIME_OPS_COMMON_H
#define MST_RUNTIME_OPS_COMMON_H

#include <string.h>

#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/op.h"
#include "runtime/ops.h"

static inline mst_meta meta_make(mst_dtype dtype, int ndim, const int64_t *shape) {
    mst_meta m;
    memset(&m, 0, sizeof(m));
    m.dtype = dtype;
    m.ndim = ndim;
    for (int d = 0; d < ndim; d++) m.shape[d] = shape[d];
    return m;
}
static inline mst_meta meta_like(const mst_tensor *t) { return meta_make(t->dtype, t->ndim, t->shape); }

/* Streaming stores. A kernel whose worker writes more than twice its core's L2 (mst_cpu_l2_bytes)
 * in one pass cannot keep those lines in its cache for the reader anyway; with ordinary stores
 * every line is first read for ownership — from memory, or from the core that held it last,
 * which on the 2-vCPU VM cost 3-4x a local line (bench/thread_costs) — and then written back.
 * Non-temporal stores write whole lines without that read. The apply writing the batch-norm
 * gradient's 6.4 MB output on the cnn's stem went 490-497 -> 257-260 us, the whole op 1073-1081
 * -> 812-877 (docs/benchmarks.md). */
bool op_output_streams(int64_t bytes_per_worker);
/* dst[0, n) = src[0, n): AVX-512 non-temporal stores where dst is 64-byte aligned and n a multiple
 * of 16 (otherwise memcpy), then a store fence, so the values are ordered before whatever the
 * thread stores next (the end of its parallel region). */
void op_store_streaming_f32(float *dst, const float *src, int64_t n);

/* Error unless input i is a float tensor (f32, f64, f16, bf16). */
mst_status op_require_float(mst_ctx *ctx, const mst_op_call *c, int i);
/* Error unless inputs i and j have the same dtype. */
mst_status op_require_same_dtype(mst_ctx *ctx, const mst_op_call *c, int i, int j);
/* Error unless input i has rank ndim. */
mst_status op_require_ndim(mst_ctx *ctx, const mst_op_call *c, int i, int ndim);
/* Error unless inputs i and j have the same shape. */
mst_status op_require_same_shape(mst_ctx *ctx, const mst_op_call *c, int i, int j);
/* Normalize an axis (negative counts from the end); -1 when out of range. */
int op_axis(int axis, int ndim);

/* Inference for ops whose single output looks like input 0 (unary elementwise, grad ops). */
mst_status op_infer_like_input0(mst_ctx *ctx, const mst_op_call *c, mst_meta out[]);
/* Elements of out[0]: the FLOP count of one-op-per-element kernels. */
int64_t op_cost_numel(const mst_op_call *c);

/* gx reduced to x's shape (undoing broadcasting); x itself when the shapes already match. */
static inline mst_tensor *op_grad_like(mst_ctx *ctx, mst_tensor *g, const mst_tensor *x) {
    return mst_sum_to(ctx, g, x->ndim, x->shape);
}

/* Call a single-output op with up to three inputs; trailing NULLs are absent optional inputs
 * (a linear layer without bias). Ops whose inputs are all required use mst_dispatch1 directly
 * with an explicit count, so a NULL argument is reported as such. */
static inline mst_tensor *op_call1(mst_ctx *ctx, mst_op op, mst_tensor *a, mst_tensor *b, mst_tensor *c3,
                                   const mst_attrs *attrs) {
    mst_tensor *in[3] = {a, b, c3};
    int n = c3 ? 3 : b ? 2 : 1;
    return mst_dispatch1(ctx, op, n, in, attrs);
}

/* Threads: the fewest elements a chunk of an elementwise-rate kernel (one that reads and writes a
 * few bytes an element: relu, add, a permute's copy, a column sum) gets from mst_parallel_for. relu's
 * 2^17 elements take about 50 us on one core, worth a region; below that, the common case, the
 * op stays on the calling thread. Dearer kernels pass thresholds of their own. */
enum { OP_MIN_SPLIT_ELEMS = 1 << 17 };

/* One step of an odometer over the first `dims` of a loop nest, the last fastest: idx[] advances
 * with carries and *off by stride[] (permute's input offsets, reduce's output offsets). */
static inline void op_odometer_next(int dims, const int64_t *size, const int64_t *stride, int64_t *idx, int64_t *off) {
    for (int k = dims - 1; k >= 0; k--) {
        *off += stride[k];
        if (++idx[k] < size[k]) return;
        *off -= stride[k] * size[k];
        idx[k] = 0;
    }
}

/* Broadcasting: operand strides aligned to the output's dims, 0 where an operand is broadcast. */
typedef struct {
    int ndim;
    int64_t shape[MST_MAX_DIMS];
    int64_t stride[3][MST_MAX_DIMS];
    int n;
} op_bcast;

/* Broadcast shape of a and b into out; false when they are incompatible. */
bool op_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
void op_bcast_init(op_bcast *it, int ndim, const int64_t *shape, int n, const mst_tensor *const ts[]);
/* Offsets (in elements) of each operand at the start of row `row` (rows = all dims but the last). */
static inline void op_bcast_row(const op_bcast *it, int64_t row, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = it->ndim - 2; d >= 0; d--) {
        int64_t i = row % it->shape[d];
        row /= it->shape[d];
        for (int k = 0; k < it->n; k++) off[k] += i * it->stride[k][d];
    }
}

/* Define NAME_f32 and NAME_f64 from one body that uses the element type T. Usage:
 *   #define RELU_BODY(T) { const T *x = ...; ... return MST_OK; }
 *   FLOAT_KERNELS(relu, RELU_BODY)          // relu_f32, relu_f64
 */
#define FLOAT_KERNELS(NAME, BODY)                                                        \
    static mst_status NAME##_f32(mst_ctx *ctx, const mst_op_call *c) { typedef float T; BODY(T) } \
    static mst_status NAME##_f64(mst_ctx *ctx, const mst_op_call *c) { typedef double T; BODY(T) }

#define FLOAT_KERNEL_TABLE(NAME) { [MST_DTYPE_F32] = NAME##_f32, [MST_DTYPE_F64] = NAME##_f64 }

/* A void function whose body is a plain loop, compiled twice: for the generic x86-64 build (SSE2,
 * four floats a vector) and for AVX2, the AVX2 one called when the CPU has it (MSTUNE_CPU_MASK
 * honoured). With -ffp-contract=off (CMakeLists.txt) neither fuses a multiply into an add, so both
 * give the bits of the expression evaluated one element at a time.
 *   OP_AVX2_CLONE(add_elem_f32, (float *y, const float *const x[], int64_t n, const mst_attrs *a), (y, x, n, a), { body })
 */
#if defined(__x86_64__)
#define OP_AVX2_CLONE(NAME, PARAMS, ARGS, ...)                                                     \
    static void NAME##_portable PARAMS __VA_ARGS__                                                 \
    __attribute__((target("avx2"))) static void NAME##_avx2 PARAMS __VA_ARGS__                    \
    static void NAME PARAMS { (mst_cpu_has(MST_CPU_AVX2) ? NAME##_avx2 : NAME##_portable) ARGS; }
#else
#define OP_AVX2_CLONE(NAME, PARAMS, ARGS, ...) static void NAME PARAMS __VA_ARGS__
#endif

/* The same for a parallel region's chunk function (runtime/threadpool.h) whose body uses T and
 * names its range B..E:
 *   #define CONV2D_CHUNK_BODY { const T *x = ...; for (int64_t n = begin; n < end; n++) ... }
 *   FLOAT_CHUNKS(conv2d_chunk, CONV2D_CHUNK_BODY, begin, end)    // conv2d_chunk_f32, _f64
 *   mst_parallel_for(ctx, n, min, FLOAT_CHUNK(conv2d_chunk, T), &job);   // inside a FLOAT_KERNELS body */
#define FLOAT_CHUNKS(NAME, BODY, B, E)                                                                        \
    static void NAME##_f32(void *arg, int64_t B, int64_t E, int worker) { typedef float T; (void)worker; BODY }  \
    static void NAME##_f64(void *arg, int64_t B, int64_t E, int worker) { typedef double T; (void)worker; BODY }
#define FLOAT_CHUNK(NAME, T) _Generic((T)0, float: NAME##_f32, double: NAME##_f64)
/* The same with the f32 chunk an AVX2 clone (OP_AVX2_CLONE below): the elementwise kernels. */
#define FLOAT_CHUNKS_AVX2(NAME, BODY, B, E)                                                                   \
    OP_AVX2_CLONE(NAME##_f32, (void *arg, int64_t B, int64_t E, int worker), (arg, B, E, worker),            \
                  { typedef float T; (void)worker; BODY })                                                   \
    static void NAME##_f64(void *arg, int64_t B, int64_t E, int worker) { typedef double T; (void)worker; BODY }

/* One kernel for every dtype (ops that only move bytes). */
#define ALL_DTYPES(F) {[MST_DTYPE_F32] = F, [MST_DTYPE_F64] = F, [MST_DTYPE_F16] = F, [MST_DTYPE_BF16] = F, \
                       [MST_DTYPE_I32] = F, [MST_DTYPE_U8] = F}

#endif
