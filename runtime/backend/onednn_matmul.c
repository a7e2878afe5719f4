/* onednn_matmul.c — matmul and linear as oneDNN matmul primitives on the tensors' own row-major
 * layouts: transposes become strides (never copies), a batched product is one 3-D primitive
 * (a shared operand is a batch dimension of 1, which oneDNN broadcasts), and linear is src (M, K)
 * times the weight seen as (K, N) through strides, with the bias (1, N) fused into the primitive.
 * Linear's gradients are matmuls (runtime/ops/matmul.c), so they come here too.
 */
#include "runtime/backend/onednn_impl.h"

static bool md(dnnl_memory_desc_t *m, int nd, const int64_t *dims, const int64_t *strides, dnnl_data_type_t dt) {
    dnnl_dims_t d = {0}, s = {0};
    for (int i = 0; i < nd; i++) {
        if (dims[i] <= 0) return false;     /* empty products stay on the builtin path */
        d[i] = dims[i], s[i] = strides[i];
    }
    return onednn.md_init_by_strides(m, nd, d, dt, s) == dnnl_success;
}

bool onednn_build_matmul(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout, onednn_prim *p) {
    (void)layout;
    const mst_tensor *a = c->in[0], *b = c->in[1];
    bool ta = c->attrs.i[0] != 0, tb = c->attrs.i[1] != 0;
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
    bool a3 = a->ndim == 3, b3 = b->ndim == 3;
    int64_t batch = a3 ? a->shape[0] : b3 ? b->shape[0] : 1;
    dnnl_memory_desc_t src, wei, dst;
    bool ok;
    if (!b3 && (!a3 || !ta)) {  /* 2-D, or (B, M, K) @ (K, N): one (B*M, K) product */
        int64_t rows = a3 ? batch * m : m;
        ok = md(&src, 2, (int64_t[]){rows, k}, ta ? (int64_t[]){1, ac} : (int64_t[]){ac, 1}, dt) &&
             md(&wei, 2, (int64_t[]){k, n}, tb ? (int64_t[]){1, bc} : (int64_t[]){bc, 1}, dt) &&
             md(&dst, 2, (int64_t[]){rows, n}, (int64_t[]){n, 1}, dt);
    } else {
        ok = md(&src, 3, (int64_t[]){a3 ? batch : 1, m, k}, ta ? (int64_t[]){ar * ac, 1, ac} : (int64_t[]){ar * ac, ac, 1}, dt) &&
             md(&wei, 3, (int64_t[]){b3 ? batch : 1, k, n}, tb ? (int64_t[]){br * bc, 1, bc} : (int64_t[]){br * bc, bc, 1}, dt) &&
             md(&dst, 3, (int64_t[]){batch, m, n}, (int64_t[]){m * n, n, 1}, dt);
    }
    dnnl_matmul_desc_t desc;
    if (!ok || onednn.matmul_desc_init(&desc, &src, &wei, NULL, &dst) != dnnl_success) return false;
    return onednn_make_primitive(st, &desc, NULL, p) && onednn_add_arg(st, p, DNNL_ARG_SRC, &src, ONEDNN_FROM_IN0) &&
           onednn_add_arg(st, p, DNNL_ARG_WEIGHTS, &wei, ONEDNN_FROM_IN0 + 1) &&
           onednn_add_arg(st, p, DNNL_ARG_DST, &dst, ONEDNN_FROM_OUT0);
}

bool onednn_build_linear(mst_onednn *st, const mst_op_call *c, dnnl_data_type_t dt, mst_onednn_layout layout, onednn_prim *p) {
    (void)layout;
    const mst_tensor *x = c->in[0], *w = c->in[1];
    int64_t rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    int64_t n = w->shape[0], k = w->shape[1];
    dnnl_memory_desc_t src, wei, bias, dst;
    bool has_bias = c->n_in == 3;
    bool ok = md(&src, 2, (int64_t[]){rows, k}, (int64_t[]){k, 1}, dt) &&
              md(&wei, 2, (int64_t[]){k, n}, (int64_t[]){1, k}, dt) &&   /* w (N, K) read as w^T */
              md(&dst, 2, (int64_t[]){rows, n}, (int64_t[]){n, 1}, dt) &&
              (!has_bias || md(&bias, 2, (int64_t[]){1, n}, (int64_t[]){n, 1}, dt));
    dnnl_matmul_desc_t desc;
    if (!ok || onednn.matmul_desc_init(&desc, &src, &wei, has_bias ? &bias : NULL, &dst) != dnnl_success) return false;
    return onednn_make_primitive(st, &desc, NULL, p) && onednn_add_arg(st, p, DNNL_ARG_SRC, &src, ONEDNN_FROM_IN0) &&
           onednn_add_arg(st, p, DNNL_ARG_WEIGHTS, &wei, ONEDNN_FROM_IN0 + 1) &&
           (!has_bias || onednn_add_arg(st, p, DNNL_ARG_BIAS, &bias, ONEDNN_FROM_IN0 + 2)) &&
           onednn_add_arg(st, p, DNNL_ARG_DST, &dst, ONEDNN_FROM_OUT0);
}
