/* onednn_impl.h — private to runtime/backend/onednn_*.c: the dlopen'd API table, the context's
 * primitive cache entries, and the per-family builders (one file per op family). */
#ifndef MST_RUNTIME_BACKEND_ONEDNN_IMPL_H
#define MST_RUNTIME_BACKEND_ONEDNN_IMPL_H

#include <dnnl.h>

#include "runtime/backend/onednn.h"
#include "runtime/backend/shape_key.h"
#include "runtime/context.h"

/* The C API functions the provider calls, resolved from libdnnl.so.2 at load. */
typedef struct {
    typeof(&dnnl_engine_create) engine_create;
    typeof(&dnnl_engine_destroy) engine_destroy;
    typeof(&dnnl_stream_create) stream_create;
    typeof(&dnnl_stream_wait) stream_wait;
    typeof(&dnnl_stream_destroy) stream_destroy;
    typeof(&dnnl_memory_desc_init_by_strides) md_init_by_strides;
    typeof(&dnnl_memory_desc_init_by_tag) md_init_by_tag;
    typeof(&dnnl_memory_create) memory_create;
    typeof(&dnnl_memory_set_data_handle) memory_set_data_handle;
    typeof(&dnnl_memory_destroy) memory_destroy;
    typeof(&dnnl_matmul_desc_init) matmul_desc_init;
    typeof(&dnnl_convolution_forward_desc_init) conv_fwd_desc_init;
    typeof(&dnnl_convolution_backward_data_desc_init) conv_bwd_data_desc_init;
    typeof(&dnnl_convolution_backward_weights_desc_init) conv_bwd_weights_desc_init;
    typeof(&dnnl_primitive_desc_create) pd_create;
    typeof(&dnnl_primitive_desc_destroy) pd_destroy;
    typeof(&dnnl_primitive_desc_query) pd_query;
    typeof(&dnnl_primitive_desc_query_md) pd_query_md;
    typeof(&dnnl_memory_desc_equal) md_equal;
    typeof(&dnnl_memory_desc_get_size) md_get_size;
    typeof(&dnnl_reorder_primitive_desc_create) reorder_pd_create;
    typeof(&dnnl_primitive_create) primitive_create;
    typeof(&dnnl_primitive_execute) primitive_execute;
    typeof(&dnnl_primitive_destroy) primitive_destroy;
    typeof(&dnnl_set_max_cpu_isa) set_max_cpu_isa;
    typeof(&dnnl_version) version;
    void (*omp_set_num_threads)(int);
} onednn_api;

extern onednn_api onednn;   /* filled once by mst_onednn_available(), read-only afterwards */

/* Where an execution argument's data comes from. */
enum { ONEDNN_FROM_IN0 = 0, ONEDNN_FROM_OUT0 = 8 };

enum { ONEDNN_MAX_ARGS = 4 };

/* An argument the primitive wants in another layout than the tensor's plain one (a blocked
 * format such as nChw16c): the primitive reads or writes `inner`, a buffer it owns in its layout,
 * and a reorder moves the data between it and the tensor's plain memory, before the primitive for
 * an input, after it for an output. */
typedef struct {
    dnnl_memory_t user;                     /* the tensor's plain layout; data pointer set per call */
    dnnl_primitive_t reorder;               /* user -> inner (input) or inner -> user (output) */
    void *inner_data;                       /* the inner memory's buffer (64-byte aligned) */
    bool inner_nchw16c;                     /* inner is nChw16c: a tensor already in it (runtime/layout.h)
                                               is bound directly, no reorder */
} onednn_stage;

/* One cached primitive: what a call of this shape runs. */
typedef struct {
    bool ok;                                /* false: oneDNN has no implementation for the shape */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    int n_args;
    dnnl_exec_arg_t args[ONEDNN_MAX_ARGS];  /* memories made without data; pointers set per call */
    int from[ONEDNN_MAX_ARGS];              /* ONEDNN_FROM_IN0 + i, or ONEDNN_FROM_OUT0 */
    onednn_stage stage[ONEDNN_MAX_ARGS];    /* .reorder NULL: the argument is the tensor itself */
    char impl[64];
    int team;                               /* the OpenMP team it was created for (oneDNN fixes it then) */
} onednn_prim;

/* The context's share: its engine, stream and primitives. */
typedef struct mst_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mst_shape_map prims[MST_ONEDNN_LAYOUT_COUNT];
} mst_onednn;

/* Builders fill p (args, from) from a call of their op in the given layout; false when oneDNN cannot
 * do the shape. The matmul family is plain only (builder() never asks it for blocked). */
typedef bool (*onednn_build_fn)(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                                onednn_prim *p);
bool onednn_build_matmul(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout, onednn_prim *p);
bool onednn_build_linear(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout, onednn_prim *p);
bool onednn_build_conv2d(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout, onednn_prim *p);
bool onednn_build_conv2d_grad_input(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                                    onednn_prim *p);
bool onednn_build_conv2d_grad_weight(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                                     onednn_prim *p);

/* Shared by the builders: a primitive from an op descriptor (hint: a forward pd for backward
 * ops, or NULL), and one argument's memory; false on any failure. */
bool onednn_make_primitive(mst_onednn *st, const_dnnl_op_desc_t desc, const_dnnl_primitive_desc_t hint, onednn_prim *p);
bool onednn_add_arg(mst_onednn *st, onednn_prim *p, int arg, const dnnl_memory_desc_t *md, int from);
/* Frees everything p holds (pd, primitive, memories, stages) and zeroes it; p itself stays. */
void onednn_prim_clear(onednn_prim *p);
/* As onednn_add_arg for an argument whose tensor is in `plain` while the primitive's pd chose
 * `chosen` (queried from p->pd): equal layouts add the plain argument, others a staged one. */
bool onednn_add_staged_arg(mst_onednn *st, onednn_prim *p, int arg, const dnnl_memory_desc_t *plain,
                           const dnnl_memory_desc_t *chosen, int from);

#endif
