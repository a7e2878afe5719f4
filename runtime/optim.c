/* optim.c — SGD, Adam and AdamW over a parameter list (see optim.h for the semantics).
 *
 * State is created at construction rather than lazily on the first step as PyTorch does: the
 * memory shows up in the allocator's optimizer category before training starts (what the
 * profiler and advisor want to see) and the state list a checkpoint iterates never changes
 * shape. The cost is state for parameters that never get a gradient.
 */
#include "runtime/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops.h"

typedef struct {
    mst_tensor *t;
    char name[64];          /* param name (<= 39 chars) + ".momentum_buffer" fits */
} state_entry;

struct mst_optim {
    mst_ctx *ctx;
    mst_optim_config cfg;
    int n_params;
    mst_tensor **params;    /* retained */
    state_entry *state;     /* per-parameter slots in parameter order, then "step" */
    int n_state;
    int slots;              /* per-parameter state tensors: 0, 1 (SGD momentum) or 2 (Adam) */
    mst_tensor *step;       /* f64 (n_params) update counts; the last state entry when slots > 0 */
    mst_tensor *lr;         /* f64 (): the learning rate the update ops read; set each step */
    mst_tensor *no_inf;     /* f32 () zero: the overflow flag when the caller has none */
    int64_t steps;
};

static const char *const k_kind_names[MST_OPTIM_KIND_COUNT] = {"sgd", "adam", "adamw"};

const char *mst_optim_kind_name(mst_optim_kind kind) {
    return (unsigned)kind < MST_OPTIM_KIND_COUNT ? k_kind_names[kind] : "?";
}

int mst_optim_kind_parse(const char *name) {
    for (int k = 0; k < MST_OPTIM_KIND_COUNT; k++)
        if (name && strcmp(name, k_kind_names[k]) == 0) return k;
    return -1;
}

mst_optim_config mst_optim_defaults(mst_optim_kind kind) {
    mst_optim_config c = {.kind = kind, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    if (kind == MST_OPTIM_ADAMW) c.weight_decay = 0.01;
    return c;
}

/* The field and its range in every message, so a job file's mistake is found at once. */
static mst_status validate_config(mst_ctx *ctx, const mst_optim_config *c) {
    if ((unsigned)c->kind >= MST_OPTIM_KIND_COUNT)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: kind %d is not one of sgd, adam, adamw", (int)c->kind);
    const char *k = k_kind_names[c->kind];
    if (!(c->lr >= 0 && isfinite(c->lr)))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim %s: lr must be finite and >= 0, got %g", k, c->lr);
    if (!(c->weight_decay >= 0 && isfinite(c->weight_decay)))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim %s: weight_decay must be finite and >= 0, got %g", k, c->weight_decay);
    if (c->kind == MST_OPTIM_SGD) {
        if (!(c->momentum >= 0 && isfinite(c->momentum)))
            return mst_ctx_fail(ctx, MST_ERR_ARG, "optim sgd: momentum must be finite and >= 0, got %g", c->momentum);
        if (!(c->dampening >= 0 && c->dampening <= 1))
            return mst_ctx_fail(ctx, MST_ERR_ARG, "optim sgd: dampening must be in [0, 1], got %g", c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return mst_ctx_fail(ctx, MST_ERR_ARG,
                                "optim sgd: nesterov needs momentum > 0 and dampening == 0, got momentum %g, dampening %g",
                                c->momentum, c->dampening);
        return MST_OK;
    }
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim %s: beta1 must be in [0, 1), got %g", k, c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim %s: beta2 must be in [0, 1), got %g", k, c->beta2);
    if (!(c->eps > 0 && isfinite(c->eps)))
        return mst_ctx_fail(ctx, MST_ERR_ARG, "optim %s: eps must be finite and > 0, got %g", k, c->eps);
    return MST_OK;
}

static mst_status validate_params(mst_ctx *ctx, mst_tensor *const params[], int n) {
    if (n < 0) return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: parameter count must be >= 0, got %d", n);
    if (n > 0 && !params) return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: parameter list is NULL");
    for (int i = 0; i < n; i++) {
        const mst_tensor *p = params[i];
        if (!p) return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: parameter %d is NULL", i);
        if (p->ctx != ctx) return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: parameter %d belongs to another context", i);
        if (!mst_dtype_is_float(p->dtype)) {
            char t[96];
            return mst_ctx_fail(ctx, MST_ERR_DTYPE, "optim: parameter %d (%s) must be a float tensor, got %s", i, p->name,
                                mst_tensor_desc(p, t, sizeof(t)));
        }
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return mst_ctx_fail(ctx, MST_ERR_ARG, "optim: parameter %d (%s) appears twice (also at %d)", i, p->name, j);
    }
    return MST_OK;
}

static mst_status add_state(mst_optim *o, int i, const char *suffix) {
    mst_tensor *p = o->params[i];
    state_entry *e = &o->state[o->n_state];
    if (p->name[0]) snprintf(e->name, sizeof(e->name), "%s.%s", p->name, suffix);
    else snprintf(e->name, sizeof(e->name), "param%d.%s", i, suffix);
    e->t = mst_state_new(o->ctx, e->name, p->dtype, p->ndim, p->shape, MST_MEM_OPTIM);
    if (!e->t) return o->ctx->status;
    o->n_state++;
    return MST_OK;
}

mst_optim *mst_optim_new(mst_ctx *ctx, const mst_optim_config *cfg, mst_tensor *const params[], int n) {
    if (!cfg) { mst_ctx_fail(ctx, MST_ERR_ARG, "optim: config is NULL"); return NULL; }
    if (validate_config(ctx, cfg) != MST_OK || validate_params(ctx, params, n) != MST_OK) return NULL;

    mst_optim *o = calloc(1, sizeof(*o));
    if (!o) goto oom;
    o->ctx = ctx;
    o->cfg = *cfg;
    o->slots = cfg->kind == MST_OPTIM_SGD ? (cfg->momentum > 0 ? 1 : 0) : 2;
    o->params = calloc(n > 0 ? (size_t)n : 1, sizeof(*o->params));
    o->state = calloc((size_t)n * o->slots + 1, sizeof(*o->state));
    if (!o->params || !o->state) goto oom;
    for (int i = 0; i < n; i++) o->params[i] = mst_tensor_retain(params[i]);
    o->n_params = n;

    for (int i = 0; i < n; i++) {
        mst_status s = cfg->kind == MST_OPTIM_SGD ? (o->slots ? add_state(o, i, "momentum_buffer") : MST_OK)
                                                   : add_state(o, i, "exp_avg");
        if (s == MST_OK && cfg->kind != MST_OPTIM_SGD) s = add_state(o, i, "exp_avg_sq");
        if (s != MST_OK) goto fail;
    }
    /* The update ops read the per-parameter counts even where no state is checkpointed (plain
     * SGD), so the counts always exist; they are a state entry only when something uses them. */
    o->step = mst_state_new(ctx, "step", MST_DTYPE_F64, 1, (int64_t[]){n > 0 ? n : 1}, MST_MEM_OPTIM);
    if (!o->step) goto fail;
    if (o->slots > 0 && n > 0) {
        state_entry *e = &o->state[o->n_state++];
        snprintf(e->name, sizeof(e->name), "step");
        e->t = o->step;
    }
    o->lr = mst_state_new(ctx, "lr", MST_DTYPE_F64, 0, NULL, MST_MEM_OPTIM);
    o->no_inf = mst_state_new(ctx, "found_inf.zero", MST_DTYPE_F32, 0, NULL, MST_MEM_OPTIM);
    if (!o->lr || !o->no_inf) goto fail;
    mst_tensor_f64(o->lr)[0] = cfg->lr;
    return o;

oom:
    mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory creating the %s optimizer", mst_optim_kind_name(cfg->kind));
fail:
    mst_optim_free(o);
    return NULL;
}

void mst_optim_free(mst_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->n_state; i++)
        if (o->state[i].t != o->step) mst_tensor_release(o->state[i].t);
    mst_tensor_release(o->step);
    mst_tensor_release(o->lr);
    mst_tensor_release(o->no_inf);
    for (int i = 0; i < o->n_params; i++) mst_tensor_release(o->params[i]);
    free(o->state);
    free(o->params);
    free(o);
}

/* All gradients are checked before any parameter moves. */
static mst_status check_grads(const mst_optim *o) {
    for (int i = 0; i < o->n_params; i++) {
        const mst_tensor *p = o->params[i], *g = p->grad;
        if (!g) continue;
        if (g->dtype != p->dtype || !mst_shape_equal(g->ndim, g->shape, p->ndim, p->shape)) {
            char a[96], b[96];
            return mst_ctx_fail(o->ctx, g->dtype != p->dtype ? MST_ERR_DTYPE : MST_ERR_SHAPE, "optim step: gradient %s does not match parameter %d (%s) %s",
                                mst_tensor_desc(g, a, sizeof(a)), i, p->name, mst_tensor_desc(p, b, sizeof(b)));
        }
    }
    return MST_OK;
}

mst_status mst_optim_set_lr(mst_optim *o, double lr) {
    if (!(lr >= 0 && isfinite(lr)))
        return mst_ctx_fail(o->ctx, MST_ERR_ARG, "optim step: lr must be finite and >= 0, got %g", lr);
    mst_tensor_f64(o->lr)[0] = lr;
    return MST_OK;
}

mst_tensor *mst_optim_lr(const mst_optim *o) { return o->lr; }

mst_status mst_optim_apply(mst_optim *o, mst_tensor *found_inf) {
    mst_ctx *ctx = o->ctx;
    mst_status s = check_grads(o);
    if (s != MST_OK) return s;
    const mst_optim_config *c = &o->cfg;
    mst_tensor *flag = found_inf ? found_inf : o->no_inf;
    for (int i = 0; i < o->n_params; i++) {
        mst_tensor *p = o->params[i];
        if (!p->grad) continue;
        switch (c->kind) {
        case MST_OPTIM_SGD:
            s = mst_sgd_update(ctx, p, p->grad, o->lr, o->step, flag, o->slots ? o->state[i].t : NULL, i, c->momentum,
                               c->dampening, c->weight_decay, c->nesterov);
            break;
        case MST_OPTIM_ADAM:
        case MST_OPTIM_ADAMW:
            s = mst_adam_update(ctx, p, p->grad, o->lr, o->step, flag, o->state[2 * i].t, o->state[2 * i + 1].t, i,
                                c->beta1, c->beta2, c->eps, c->weight_decay, c->kind == MST_OPTIM_ADAMW);
            break;
        default:
            MST_ASSERT(!"optimizer kind validated at construction");
        }
        if (s != MST_OK) return s;
    }
    return MST_OK;
}

void mst_optim_count_step(mst_optim *o) { o->steps++; }

mst_status mst_optim_step(mst_optim *o, double lr) {
    mst_status s = mst_optim_set_lr(o, lr);
    if (s == MST_OK) s = mst_optim_apply(o, NULL);
    if (s == MST_OK) mst_optim_count_step(o);
    return s;
}

int64_t mst_optim_steps(const mst_optim *o) { return o->steps; }
mst_status mst_optim_set_steps(mst_optim *o, int64_t steps) {
    if (steps < 0) return mst_ctx_fail(o->ctx, MST_ERR_ARG, "optim: step count must be >= 0, got %lld", (long long)steps);
    o->steps = steps;
    return MST_OK;
}
const mst_optim_config *mst_optim_get_config(const mst_optim *o) { return &o->cfg; }
int mst_optim_param_count(const mst_optim *o) { return o->n_params; }

mst_tensor *mst_optim_param_at(const mst_optim *o, int i) {
    return i >= 0 && i < o->n_params ? o->params[i] : NULL;
}

int mst_optim_state_count(const mst_optim *o) { return o->n_state; }

mst_tensor *mst_optim_state_at(const mst_optim *o, int i, const char **name) {
    if (i < 0 || i >= o->n_state) {
        if (name) *name = NULL;
        return NULL;
    }
    if (name) *name = o->state[i].name;
    return o->state[i].t;
}
