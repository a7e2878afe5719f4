/* onednn_conv.c — conv2d, conv2d_grad_input and conv2d_grad_weight as oneDNN convolution
 * primitives (forward, backward data, backward weights) on the tensors' plain NCHW / OIHW
 * layouts, bias fused in the forward. Plain layouts mean no reorders per call; the price is that
 * oneDNN may pick an implementation that blocked layouts would beat, and the implementation it
 * reports is printed beside every rate (bench/bench_onednn). The backward primitives need a
 * forward descriptor of the same geometry as a hint; it is made and dropped at build time.
 * Right padding is whatever makes oneDNN's output size equal the runtime's floor division.
 */
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
    m->strides[0] = g->sh, m->strides[1] = g->sw;
    m->pad_l[0] = g->ph, m->pad_l[1] = g->pw;
    m->pad_r[0] = pr_h, m->pad_r[1] = pr_w;
    return plain(&m->src, 4, (int64_t[]){g->n, g->c, g->h, g->w}, dt, dnnl_nchw) &&
           plain(&m->wei, 4, (int64_t[]){g->k, g->c, g->r, g->s}, dt, dnnl_oihw) &&
           plain(&m->bias, 1, (int64_t[]){g->k}, dt, dnnl_a) &&
           plain(&m->dst, 4, (int64_t[]){g->n, g->k, g->p, g->q}, dt, dnnl_nchw);
}

/* The forward descriptor (the hint backward primitives need), with or without the bias. */
static bool fwd_desc(conv_mds *m, bool bias, dnnl_convolution_desc_t *d) {
    return onednn.conv_fwd_desc_init(d, dnnl_forward_training, dnnl_convolution_direct, &m->src, &m->wei,
                                     bias ? &m->bias : NULL, &m->dst, m->strides, m->pad_l, m->pad_r) == dnnl_success;
}

bool onednn_build_conv2d(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    bool bias = c->n_in == 3;
    dnnl_convolution_desc_t d;
    if (!mds_of(&g, dt, &m) || !fwd_desc(&m, bias, &d)) return false;
    return onednn_make_primitive(st, &d, NULL, p) && onednn_add_arg(st, p, DNNL_ARG_SRC, &m.src, ONEDNN_FROM_IN0) &&
           onednn_add_arg(st, p, DNNL_ARG_WEIGHTS, &m.wei, ONEDNN_FROM_IN0 + 1) &&
           (!bias || onednn_add_arg(st, p, DNNL_ARG_BIAS, &m.bias, ONEDNN_FROM_IN0 + 2)) &&
           onednn_add_arg(st, p, DNNL_ARG_DST, &m.dst, ONEDNN_FROM_OUT0);
}

/* A forward pd of the geometry, for a backward primitive's hint; NULL when oneDNN has none. */
static dnnl_primitive_desc_t hint_pd(mst_onednn *st, conv_mds *m) {
    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    if (!fwd_desc(m, false, &d) || onednn.pd_create(&pd, &d, NULL, st->engine, NULL) != dnnl_success) return NULL;
    return pd;
}

bool onednn_build_conv2d_grad_input(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    if (!mds_of(&g, dt, &m)) return false;
    dnnl_primitive_desc_t hint = hint_pd(st, &m);
    dnnl_convolution_desc_t d;
    bool ok = hint && onednn.conv_bwd_data_desc_init(&d, dnnl_convolution_direct, &m.src, &m.wei, &m.dst, m.strides, m.pad_l,
                                                     m.pad_r) == dnnl_success &&
              onednn_make_primitive(st, &d, hint, p);
    if (hint) onednn.pd_destroy(hint);
    return ok && onednn_add_arg(st, p, DNNL_ARG_DIFF_DST, &m.dst, ONEDNN_FROM_IN0) &&
           onednn_add_arg(st, p, DNNL_ARG_WEIGHTS, &m.wei, ONEDNN_FROM_IN0 + 1) &&
           onednn_add_arg(st, p, DNNL_ARG_DIFF_SRC, &m.src, ONEDNN_FROM_OUT0);
}

bool onednn_build_conv2d_grad_weight(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, onednn_prim *p) {
    geom g = geom_of(c);
    conv_mds m;
    if (!mds_of(&g, dt, &m)) return false;
    dnnl_primitive_desc_t hint = hint_pd(st, &m);
    dnnl_convolution_desc_t d;
    bool ok = hint && onednn.conv_bwd_weights_desc_init(&d, dnnl_convolution_direct, &m.src, &m.wei, NULL, &m.dst, m.strides,
                                                        m.pad_l, m.pad_r) == dnnl_success &&
              onednn_make_primitive(st, &d, hint, p);
    if (hint) onednn.pd_destroy(hint);
    return ok && onednn_add_arg(st, p, DNNL_ARG_DIFF_DST, &m.dst, ONEDNN_FROM_IN0) &&
           onednn_add_arg(st, p, DNNL_ARG_SRC, &m.src, ONEDNN_FROM_IN0 + 1) &&
           onednn_add_arg(st, p, DNNL_ARG_DIFF_WEIGHTS, &m.wei, ONEDNN_FROM_OUT0);
}
