/* onednn_conv.c — conv2d, conv2d_grad_input and conv2d_grad_weight as oneDNN convolution
 * primitives (forward, backward data, backward weights), bias fused in the forward. The tensors
 * stay in plain NCHW / OIHW; where oneDNN has a direct kernel for its blocked layouts, the call
 * reorders into and out of them (see "Layouts" below). The implementation oneDNN reports is printed
 * beside every rate (bench/bench_onednn). The backward primitives need a
 * forward descriptor of the same geometry as a hint; it is made and dropped at build time.
 * Right padding is whatever makes oneDNN's output size equal the runtime's floor division.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/onednn_impl.h"

typedef struct {
    int64_t n, c, h, w, k, r, s, p, q, sh, sw, ph, pw;
} geom;

/* As runtime/ops/conv.c reads its calls: conv2d (x, w), grad_input (gy, w) with the input size in
 * i[4..5], grad_weight (gy, x) with the kernel size in i[4..5]; i[0..3] = stride, padding. */
static geom geom_of(const mst_op_call *c) {
    const int64_t *a = c->attrs.i;
    const mst_tensor *t0 = c->in[0], *t1 = c->in[1];
    geom g = {.sh = a[0], .sw = a[1], .ph = a[2], .pw = a[3]};
    if (c->op == MST_OP_CONV2D) {
        g.n = t0->shape[0], g.c = t0->shape[1], g.h = t0->shape[2], g.w = t0->shape[3];
        g.k = t1->shape[0], g.r = t1->shape[2], g.s = t1->shape[3];
        g.p = (g.h + 2 * g.ph - g.r) / g.sh + 1, g.q = (g.w + 2 * g.pw - g.s) / g.sw + 1;
    } else if (c->op == MST_OP_CONV2D_GRAD_INPUT) {
        g.n = t0->shape[0], g.k = t0->shape[1], g.p = t0->shape[2], g.q = t0->shape[3];
        g.c = t1->shape[1], g.r = t1->shape[2], g.s = t1->shape[3], g.h = a[4], g.w = a[5];
    } else {
        g.n = t0->shape[0], g.k = t0->shape[1], g.p = t0->shape[2], g.q = t0->shape[3];
        g.c = t1->shape[1], g.h = t1->shape[2], g.w = t1->shape[3], g.r = a[4], g.s = a[5];
    }
    return g;
}

typedef struct {
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_dims_t strides, pad_l, pad_r;
    dnnl_alg_kind_t alg;        /* direct, or Winograd (MST_ONEDNN_WINOGRAD) */
} conv_mds;

static bool plain(dnnl_memory_desc_t *m, int nd, const int64_t *dims, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_dims_t d = {0};
    for (int i = 0; i < nd; i++) {
        if (dims[i] <= 0) return false;
        d[i] = dims[i];
    }
    return onednn.md_init_by_tag(m, nd, d, dt, tag) == dnnl_success;
}

static bool mds_of(const geom *g, dnnl_data_type_t dt, conv_mds *m) {
    if (g->sh < 1 || g->sw < 1) return false;
    /* the right padding that makes oneDNN's floor((H - R + pl + pr) / s) + 1 equal P: the exact
     * one, or 0 where the exact one is negative (a stride that leaves input rows unread) */
    int64_t pr_h = (g->p - 1) * g->sh + g->r - g->h - g->ph, pr_w = (g->q - 1) * g->sw + g->s - g->w - g->pw;
    if (pr_h < 0) pr_h = 0;
    if (pr_w < 0) pr_w = 0;
    if ((g->h - g->r + g->ph + pr_h) / g->sh + 1 != g->p || (g->w - g->s + g->pw + pr_w) / g->sw + 1 != g->q) return false;
    m->alg = dnnl_convolution_direct;
    m->strides[0] = g->sh, m->strides[1] = g->sw;
    m->pad_l[0] = g->ph, m->pad_l[1] = g->pw;
    m->pad_r[0] = pr_h, m->pad_r[1] = pr_w;
    return plain(&m->src, 4, (int64_t[]){g->n, g->c, g->h, g->w}, dt, dnnl_nchw) &&
           plain(&m->wei, 4, (int64_t[]){g->k, g->c, g->r, g->s}, dt, dnnl_oihw) &&
           plain(&m->bias, 1, (int64_t[]){g->k}, dt, dnnl_a) &&
           plain(&m->dst, 4, (int64_t[]){g->n, g->k, g->p, g->q}, dt, dnnl_nchw);
}

/* The same geometry with every tensor's layout left to oneDNN (format_tag any), bias aside; with
 * f32_weights the weights (the weight gradient, for backward weights) are f32 whatever the
 * inputs' type: oneDNN's bf16 weight-gradient kernels accumulate in f32 and, asked for a bf16
 * result, ran 10-100x slower on an AVX512-BF16 CPU (bench_onednn); the reorder out rounds to bf16. */
static bool any_of(const conv_mds *plain_mds, bool f32_weights, conv_mds *m) {
    *m = *plain_mds;
    dnnl_memory_desc_t *mds[] = {&m->src, &m->wei, &m->dst};
    for (int i = 0; i < 3; i++) {
        dnnl_data_type_t dt = i == 1 && f32_weights ? dnnl_f32 : mds[i]->data_type;
        if (onednn.md_init_by_tag(mds[i], mds[i]->ndims, mds[i]->dims, dt, dnnl_format_tag_any) != dnnl_success) return false;
    }
    return true;
}

/* The forward descriptor (the hint backward primitives need), with or without the bias. */
static bool fwd_desc(conv_mds *m, bool bias, dnnl_convolution_desc_t *d) {
    return onednn.conv_fwd_desc_init(d, dnnl_forward_training, m->alg, &m->src, &m->wei,
                                     bias ? &m->bias : NULL, &m->dst, m->strides, m->pad_l, m->pad_r) == dnnl_success;
}

/* A forward pd of the geometry, for a backward primitive's hint; NULL when oneDNN has none. */
static dnnl_primitive_desc_t hint_pd(mst_onednn *st, conv_mds *m) {
    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    if (!fwd_desc(m, false, &d) || onednn.pd_create(&pd, &d, NULL, st->engine, NULL) != dnnl_success) return NULL;
    return pd;
}

/* Layouts: oneDNN's convolutions on plain NCHW run its gemm-based implementation (im2col + GEMM,
 * no faster in bf16 than in f32 on an AVX512-BF16 CPU), while blocked layouts (nChw16c,
 * OIhw16i16o, ...) get its direct JIT kernels, which use the AVX512-BF16 / AMX dot products. The
 * blocked primitive is made with every layout left to oneDNN (format_tag any); its arguments whose
 * chosen layout is not the tensor's plain one are staged (onednn_add_staged_arg): each call reorders
 * the inputs into the primitive's layouts and the outputs back, and those reorders are part of the
 * kernel's time, so the kernel choice weighs them when it measures plain against blocked. The
 * Winograd variant is the blocked one with oneDNN's Winograd algorithm (3x3 stride-1 f32 only;
 * oneDNN refuses other shapes, which then stay unsupported for that variant). */
/* One argument of a conv primitive: its execution slot, which of the geometry's tensors it is, where
 * the pd reports its chosen layout, and where its data comes from. */
enum { T_SRC, T_WEI, T_DST, T_BIAS };
typedef struct {
    int arg, tensor;
    dnnl_query_t query;
    int from;
} conv_arg;

/* make(st, mds, bias, p) initializes the op descriptor and creates p's pd and primitive. */
typedef bool (*make_fn)(mst_onednn *st, conv_mds *m, bool bias, onednn_prim *p);

static const dnnl_memory_desc_t *tensor_md(const conv_mds *m, int t) {
    return t == T_SRC ? &m->src : t == T_WEI ? &m->wei : t == T_DST ? &m->dst : &m->bias;
}

static bool make_fwd(mst_onednn *st, conv_mds *m, bool bias, onednn_prim *p) {
    dnnl_convolution_desc_t d;
    return fwd_desc(m, bias, &d) && onednn_make_primitive(st, &d, NULL, p);
}

static bool make_bwd_data(mst_onednn *st, conv_mds *m, bool bias, onednn_prim *p) {
    (void)bias;
    dnnl_primitive_desc_t hint = hint_pd(st, m);
    dnnl_convolution_desc_t d;
    bool ok = hint && onednn.conv_bwd_data_desc_init(&d, m->alg, &m->src, &m->wei, &m->dst, m->strides,
                                                     m->pad_l, m->pad_r) == dnnl_success &&
              onednn_make_primitive(st, &d, hint, p);
    if (hint) onednn.pd_destroy(hint);
    return ok;
}

static bool make_bwd_weights(mst_onednn *st, conv_mds *m, bool bias, onednn_prim *p) {
    (void)bias;
    /* the hint is a forward of the inputs' type (an f32 weight gradient has no bf16 forward twin) */
    conv_mds h = *m;
    if (h.wei.data_type != h.src.data_type &&
        onednn.md_init_by_tag(&h.wei, h.wei.ndims, h.wei.dims, h.src.data_type, dnnl_format_tag_any) != dnnl_success)
        return false;
    dnnl_primitive_desc_t hint = hint_pd(st, &h);
    dnnl_convolution_desc_t d;
    bool ok = hint && onednn.conv_bwd_weights_desc_init(&d, m->alg, &m->src, &m->wei, NULL, &m->dst,
                                                        m->strides, m->pad_l, m->pad_r) == dnnl_success &&
              onednn_make_primitive(st, &d, hint, p);
    if (hint) onednn.pd_destroy(hint);
    return ok;
}

/* A conv primitive for geometry m (the tensors' plain layouts) in the given layout. */
static bool build(mst_onednn *st, conv_mds *m, bool bias, make_fn make, int n, const conv_arg *args,
                  mst_onednn_layout layout, onednn_prim *p) {
    if (layout == MST_ONEDNN_BLOCKED || layout == MST_ONEDNN_WINOGRAD) {
        conv_mds any;
        bool f32_weights = make == make_bwd_weights;
        if (!any_of(m, f32_weights, &any)) return false;
        if (layout == MST_ONEDNN_WINOGRAD) any.alg = dnnl_convolution_winograd;
        if (!make(st, &any, bias, p)) return false;
        for (int i = 0; i < n; i++)
            if (!onednn_add_staged_arg(st, p, args[i].arg, tensor_md(m, args[i].tensor),
                                       onednn.pd_query_md(p->pd, args[i].query, args[i].tensor == T_BIAS), args[i].from))
                return false;
        return true;
    }
    if (!make(st, m, bias, p)) return false;
    for (int i = 0; i < n; i++)
        if (!onednn_add_arg(st, p, args[i].arg, tensor_md(m, args[i].tensor), args[i].from)) return false;
    return true;
}

bool onednn_build_conv2d(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                         onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    bool bias = c->n_in == 3;
    if (!mds_of(&g, dt, &m)) return false;
    static const conv_arg args[] = {{DNNL_ARG_SRC, T_SRC, dnnl_query_src_md, ONEDNN_FROM_IN0},
                                    {DNNL_ARG_WEIGHTS, T_WEI, dnnl_query_weights_md, ONEDNN_FROM_IN0 + 1},
                                    {DNNL_ARG_DST, T_DST, dnnl_query_dst_md, ONEDNN_FROM_OUT0},
                                    {DNNL_ARG_BIAS, T_BIAS, dnnl_query_weights_md, ONEDNN_FROM_IN0 + 2}};
    return build(st, &m, bias, make_fwd, bias ? 4 : 3, args, layout, p);
}

bool onednn_build_conv2d_grad_input(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                                    onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    if (!mds_of(&g, dt, &m)) return false;
    static const conv_arg args[] = {{DNNL_ARG_DIFF_DST, T_DST, dnnl_query_diff_dst_md, ONEDNN_FROM_IN0},
                                    {DNNL_ARG_WEIGHTS, T_WEI, dnnl_query_weights_md, ONEDNN_FROM_IN0 + 1},
                                    {DNNL_ARG_DIFF_SRC, T_SRC, dnnl_query_diff_src_md, ONEDNN_FROM_OUT0}};
    return build(st, &m, false, make_bwd_data, 3, args, layout, p);
}

bool onednn_build_conv2d_grad_weight(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout,
                                     onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    if (!mds_of(&g, dt, &m)) return false;
    static const conv_arg args[] = {{DNNL_ARG_DIFF_DST, T_DST, dnnl_query_diff_dst_md, ONEDNN_FROM_IN0},
                                    {DNNL_ARG_SRC, T_SRC, dnnl_query_src_md, ONEDNN_FROM_IN0 + 1},
                                    {DNNL_ARG_DIFF_WEIGHTS, T_WEI, dnnl_query_diff_weights_md, ONEDNN_FROM_OUT0}};
    return build(st, &m, false, make_bwd_weights, 3, args, layout, p);
}
