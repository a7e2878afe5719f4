/* transformer.c — a transformer encoder text classifier (Vaswani et al., 2017; pre-norm blocks
 * as in GPT-2 and most encoders since), for character-level language identification.
 *
 *   input:   ids (N, L) i32, [CLS] first, 0 = padding (runtime/data/source.h)
 *   embed:   token (V, D) + learned position (L, D), dropout
 *   block:   h += dropout(W_o attention(LN(h)))       multi-head self-attention, keys masked by ids
 *            h += dropout(W_2 GELU(W_1 LN(h)))         MLP, ff = 4 D unless set
 *   head:    LN of the [CLS] position, linear(classes)
 * Attention per head: softmax(q k^T / sqrt(D / H)) v, with padded keys at probability 0
 * (ops/attention.c's masked softmax takes the ids as its mask), dropout on the probabilities.
 * q, k, v come from one (3D, D) projection, reshaped (N, L, 3, H, dh) and permuted to
 * (3, N, H, L, dh), so each head's product is one batch of mst_matmul's batched GEMM.
 * Init: linear U(+-1/sqrt(fan_in)) as PyTorch's nn.Linear (times model.init_gain), embeddings
 * U(+-0.02 sqrt 3) (std 0.02, BERT's), layer norms gamma 1, beta 0. */
#include <math.h>
#include <stdlib.h>

#include "runtime/ops.h"
#include "workloads/zoo.h"

#define LN_EPS 1e-5
#define MAX_LAYERS 24

typedef struct {
    mst_tensor *w, *b;
} lin;

typedef struct {
    mst_tensor *ln1_g, *ln1_b, *ln2_g, *ln2_b;
    lin qkv, out, fc1, fc2;
} layer;

typedef struct {
    int d, heads, layers, len;
    double dropout;
    mst_tensor *tok, *pos, *lnf_g, *lnf_b;
    layer l[MAX_LAYERS];
    lin head;
} transformer;

static mst_tensor *attention(mst_ctx *ctx, const transformer *p, const layer *l, mst_tensor *x, mst_tensor *ids,
                             bool training) {
    const int64_t n = x->shape[0], len = x->shape[1], d = p->d, h = p->heads, dh = d / h;
    mst_tensor *qkv = mst_linear(ctx, x, l->qkv.w, l->qkv.b);                          /* (N, L, 3D) */
    qkv = mst_reshape(ctx, qkv, 5, (int64_t[]){n, len, 3, h, dh});
    qkv = mst_permute(ctx, qkv, (int[]){2, 0, 3, 1, 4});                               /* (3, N, H, L, dh) */
    mst_tensor *q = mst_reshape(ctx, mst_slice(ctx, qkv, 0, 0, 1), 3, (int64_t[]){n * h, len, dh});
    mst_tensor *k = mst_reshape(ctx, mst_slice(ctx, qkv, 0, 1, 1), 3, (int64_t[]){n * h, len, dh});
    mst_tensor *v = mst_reshape(ctx, mst_slice(ctx, qkv, 0, 2, 1), 3, (int64_t[]){n * h, len, dh});
    mst_tensor *s = mst_scale(ctx, mst_matmul_t(ctx, q, k, false, true), 1.0 / sqrt((double)dh));   /* (N H, L, L) */
    mst_tensor *a = mst_masked_softmax(ctx, mst_reshape(ctx, s, 4, (int64_t[]){n, h, len, len}), ids);
    a = mst_dropout(ctx, a, p->dropout, training);
    mst_tensor *o = mst_matmul(ctx, mst_reshape(ctx, a, 3, (int64_t[]){n * h, len, len}), v);      /* (N H, L, dh) */
    o = mst_permute(ctx, mst_reshape(ctx, o, 4, (int64_t[]){n, h, len, dh}), (int[]){0, 2, 1, 3});  /* (N, L, H, dh) */
    return mst_linear(ctx, mst_reshape(ctx, o, 3, (int64_t[]){n, len, d}), l->out.w, l->out.b);
}

static mst_tensor *transformer_forward(mst_model *m, mst_ctx *ctx, mst_tensor *ids, bool training) {
    const transformer *p = m->impl;
    if (!ids) return NULL;
    if (ids->dtype != MST_DTYPE_I32 || ids->ndim != 2 || ids->shape[1] != p->len) {
        char t[96];
        mst_ctx_fail(ctx, MST_ERR_SHAPE, "transformer: input %s, expected i32 token ids (N, %d)", mst_tensor_desc(ids, t, sizeof(t)),
                     p->len);
        return NULL;
    }
    const int64_t n = ids->shape[0];
    mst_tensor *h = mst_add(ctx, mst_embedding(ctx, ids, p->tok), p->pos);           /* (N, L, D) */
    h = mst_dropout(ctx, h, p->dropout, training);
    for (int i = 0; i < p->layers; i++) {
        const layer *l = &p->l[i];
        mst_tensor *a = attention(ctx, p, l, mst_layernorm(ctx, h, l->ln1_g, l->ln1_b, LN_EPS), ids, training);
        h = mst_add(ctx, h, mst_dropout(ctx, a, p->dropout, training));
        mst_tensor *f = mst_linear(ctx, mst_layernorm(ctx, h, l->ln2_g, l->ln2_b, LN_EPS), l->fc1.w, l->fc1.b);
        f = mst_linear(ctx, mst_gelu(ctx, f), l->fc2.w, l->fc2.b);
        h = mst_add(ctx, h, mst_dropout(ctx, f, p->dropout, training));
    }
    mst_tensor *cls = mst_reshape(ctx, mst_slice(ctx, h, 1, 0, 1), 2, (int64_t[]){n, p->d});       /* (N, D) */
    cls = mst_layernorm(ctx, cls, p->lnf_g, p->lnf_b, LN_EPS);
    return mst_linear(ctx, cls, p->head.w, p->head.b);
}

static void lin_init(mst_model *m, mst_ctx *ctx, lin *l, const char *name, int in, int out, double gain) {
    char n[48];
    double bound = gain / sqrt((double)in);
    snprintf(n, sizeof(n), "%s.weight", name);
    l->w = mst_model_param(m, ctx, n, 2, (int64_t[]){out, in}, bound);
    snprintf(n, sizeof(n), "%s.bias", name);
    l->b = mst_model_param(m, ctx, n, 1, (int64_t[]){out}, bound);
}

static void ln_init(mst_model *m, mst_ctx *ctx, mst_tensor **g, mst_tensor **b, const char *name, int d) {
    char n[48];
    snprintf(n, sizeof(n), "%s.weight", name);
    *g = mst_model_param_const(m, ctx, n, 1, (int64_t[]){d}, 1.0);
    snprintf(n, sizeof(n), "%s.bias", name);
    *b = mst_model_param_const(m, ctx, n, 1, (int64_t[]){d}, 0.0);
}

mst_model *mst_transformer_new(mst_ctx *ctx, const mst_model_spec *spec) {
    mst_model *m = calloc(1, sizeof(*m));
    transformer *p = calloc(1, sizeof(*p));
    if (!m || !p) {
        free(m);
        free(p);
        mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory building transformer");
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "transformer");
    m->impl = p;
    m->forward = transformer_forward;
    const int d = spec->d_model, ff = spec->ff > 0 ? spec->ff : 4 * spec->d_model;
    const double gain = spec->init_gain > 0 ? spec->init_gain : 1.0, emb = 0.02 * sqrt(3.0);
    p->d = d;
    p->heads = spec->heads;
    p->layers = spec->layers;
    p->len = spec->in_w;
    p->dropout = spec->dropout;
    p->tok = mst_model_param(m, ctx, "embed.token", 2, (int64_t[]){spec->vocab, d}, emb);
    p->pos = mst_model_param(m, ctx, "embed.position", 2, (int64_t[]){p->len, d}, emb);
    for (int i = 0; i < p->layers; i++) {
        layer *l = &p->l[i];
        char n[32];
        snprintf(n, sizeof(n), "block%d.ln1", i + 1);
        ln_init(m, ctx, &l->ln1_g, &l->ln1_b, n, d);
        snprintf(n, sizeof(n), "block%d.attn.qkv", i + 1);
        lin_init(m, ctx, &l->qkv, n, d, 3 * d, gain);
        snprintf(n, sizeof(n), "block%d.attn.out", i + 1);
        lin_init(m, ctx, &l->out, n, d, d, gain);
        snprintf(n, sizeof(n), "block%d.ln2", i + 1);
        ln_init(m, ctx, &l->ln2_g, &l->ln2_b, n, d);
        snprintf(n, sizeof(n), "block%d.mlp.fc1", i + 1);
        lin_init(m, ctx, &l->fc1, n, d, ff, gain);
        snprintf(n, sizeof(n), "block%d.mlp.fc2", i + 1);
        lin_init(m, ctx, &l->fc2, n, ff, d, gain);
    }
    ln_init(m, ctx, &p->lnf_g, &p->lnf_b, "ln_final", d);
    lin_init(m, ctx, &p->head, "head", d, spec->classes, gain);
    if (!p->head.b) {
        mst_model_free(m);
        return NULL;
    }
    return m;
}

/* Sizes the zoo checks before building (zoo.c). */
int mst_transformer_check(const mst_model_spec *spec, char *err, size_t errn) {
    if (!spec->tokens || spec->vocab < 4) {
        snprintf(err, errn, "model transformer: needs token ids as input (data.dataset: langid), got images (%d, %d, %d)",
                 spec->in_c, spec->in_h, spec->in_w);
        return -1;
    }
    if (spec->d_model < 1 || spec->heads < 1 || spec->d_model % spec->heads != 0) {
        snprintf(err, errn, "model transformer: model.d_model (%d) must be a positive multiple of model.heads (%d)", spec->d_model,
                 spec->heads);
        return -1;
    }
    if (spec->layers < 1 || spec->layers > MAX_LAYERS) {
        snprintf(err, errn, "model transformer: model.layers = %d, expected 1..%d", spec->layers, MAX_LAYERS);
        return -1;
    }
    if (spec->dropout < 0 || spec->dropout >= 1) {
        snprintf(err, errn, "model transformer: model.dropout must be in [0, 1)");
        return -1;
    }
    return 0;
}
