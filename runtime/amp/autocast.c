/* autocast.c — the amp policy table (MindSpore's O0..O3), the dispatcher's autocast hooks and the
 * per-pass cache of parameters cast to half.
 *
 * Each op belongs to one class; the level turns the class into an action:
 *                 O0     O1           O2     O3
 *   allow         -      half (+f32)  half   half     MindSpore's white list
 *   half          -      -            half   half
 *   keep_f32      -      -            f32    half     norms, softmax, loss, reductions
 *   never         -      -            -      -        casts, shape/view ops, grad ops, state updates
 * "(+f32)": O1 casts the op's float outputs back to f32. The class is the descriptor's amp_class
 * (runtime/op.h, set in each op's family file under runtime/ops/): an op whose descriptor does not
 * set one is `never`, the safe default; grad and view ops are `never` whatever they say.
 * Reference: MindSpore's mindspore.amp.auto_mixed_precision (amp_level O0..O3).
 *
 * The cache also owns the half kernel's grow-only f32 scratch (half_kernels.c): the context
 * workspace is taken by kernels (conv's im2col) that the half kernel runs.
 */
#include "runtime/amp/autocast.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/amp/half.h"
#include "runtime/ops.h"

struct mst_amp_cache {
    struct amp_entry {
        mst_tensor *master;         /* the f32 parameter (not retained: the key) */
        mst_tensor *cast;           /* its cast copy, retained */
        bool recorded;              /* the cast was on the tape when made */
    } *entries;
    size_t len, cap;
    uint64_t n_casts;               /* parameter casts made, ever */
    void *scratch;                  /* the half kernel's f32 scratch, MST_MEM_WORKSPACE */
    size_t scratch_size;
};

static struct mst_amp_cache *cache_get(mst_ctx *ctx) {
    if (!ctx->amp_cache) {
        ctx->amp_cache = calloc(1, sizeof(*ctx->amp_cache));
        if (!ctx->amp_cache) mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: amp cache");
    }
    return ctx->amp_cache;
}

/* ---- settings and names ---- */

mst_status mst_amp_set(mst_ctx *ctx, int level, mst_dtype half) {
    if (level < 0 || level > 3)
        return mst_ctx_fail(ctx, MST_ERR_ARG, "amp: level must be 0..3 (O0..O3), got %d", level);
    if (!mst_dtype_is_half(half))
        return mst_ctx_fail(ctx, MST_ERR_DTYPE, "amp: half type must be f16 or bf16, got %s", mst_dtype_name(half));
    if (level != ctx->amp_level || half != ctx->amp_dtype) mst_amp_cache_clear(ctx);
    ctx->amp_level = level;
    ctx->amp_dtype = half;
    return MST_OK;
}

/* Turning autocast on starts a new forward pass: parameters may have been updated since the cache
 * was filled (an evaluation pass has no backward to clear it), so it starts empty. */
void mst_amp_autocast(mst_ctx *ctx, bool on) {
    if (on && !ctx->autocast) mst_amp_cache_clear(ctx);
    ctx->autocast = on;
}

static mst_amp_class class_of(mst_op op) {
    if ((unsigned)op >= MST_OP_COUNT || !mst_op_table[op]) return MST_AMP_CLASS_NEVER;
    const mst_op_desc *d = mst_op_table[op];
    if (d->flags & (MST_OPF_GRAD_OP | MST_OPF_VIEW)) return MST_AMP_CLASS_NEVER;
    return d->amp_class;
}

mst_amp_action mst_amp_policy(mst_op op, int level) {
    mst_amp_class k = class_of(op);
    switch (level) {
    case 1: return k == MST_AMP_CLASS_ALLOW ? MST_AMP_HALF : MST_AMP_NEVER;
    case 2: return k == MST_AMP_CLASS_NEVER ? MST_AMP_NEVER : k == MST_AMP_CLASS_KEEP_F32 ? MST_AMP_F32
                 : k == MST_AMP_CLASS_NORM ? MST_AMP_F32_PARAMS : MST_AMP_HALF;
    case 3: return k == MST_AMP_CLASS_NEVER ? MST_AMP_NEVER : MST_AMP_HALF;
    default: return MST_AMP_NEVER;
    }
}

bool mst_amp_casts_back(mst_op op, int level) { return level == 1 && class_of(op) == MST_AMP_CLASS_ALLOW; }

const char *mst_amp_level_name(int level) {
    static const char *const names[] = {"O0", "O1", "O2", "O3"};
    return level >= 0 && level <= 3 ? names[level] : "?";
}

int mst_amp_level_parse(const char *s) {
    if (!s) return -1;
    if (toupper((unsigned char)s[0]) == 'O') s++;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') return s[0] - '0';
    return -1;
}

const char *mst_amp_action_name(mst_amp_action a) {
    switch (a) {
    case MST_AMP_HALF: return "half";
    case MST_AMP_F32: return "f32";
    case MST_AMP_F32_PARAMS: return "f32 params";
    default: return "never";
    }
}

/* ---- the parameter cast cache ---- */

void mst_amp_cache_clear(mst_ctx *ctx) {
    struct mst_amp_cache *c = ctx->amp_cache;
    if (!c) return;
    for (size_t i = 0; i < c->len; i++) mst_tensor_release(c->entries[i].cast);
    c->len = 0;
}

void mst_amp_cache_free(mst_ctx *ctx) {
    struct mst_amp_cache *c = ctx->amp_cache;
    if (!c) return;
    mst_amp_cache_clear(ctx);
    mst_free(ctx->alloc, c->scratch);
    free(c->entries);
    free(c);
    ctx->amp_cache = NULL;
}

uint64_t mst_amp_cache_casts(const mst_ctx *ctx) { return ctx->amp_cache ? ctx->amp_cache->n_casts : 0; }

/* An entry is stale when its cast was recorded but has since left the tape (a pool pop or a
 * backward dropped it): reusing it would cut the gradient's path to the master. */
static bool entry_valid(const mst_ctx *ctx, const struct amp_entry *e) {
    if (e->recorded && !e->cast->on_tape) return false;
    if (!e->recorded && ctx->grad_enabled) return false;    /* made under no_grad, now needs a tape */
    return true;
}

/* The parameter cast to `to`, once per pass. */
static mst_tensor *cast_param(mst_ctx *ctx, mst_tensor *p, mst_dtype to) {
    struct mst_amp_cache *c = cache_get(ctx);
    if (!c) return NULL;
    struct amp_entry *slot = NULL;
    for (size_t i = 0; i < c->len; i++) {
        struct amp_entry *e = &c->entries[i];
        if (e->master != p || e->cast->dtype != to) continue;
        if (entry_valid(ctx, e)) return e->cast;
        slot = e;
        break;
    }
    /* the half copy is the parameter's (DESIGN: f32 masters with one half copy each), kept for the
     * pass: counted as parameter memory, not as an activation */
    mst_mem_cat cat_was = ctx->out_cat;
    ctx->out_cat = MST_MEM_PARAM;
    mst_tensor *h = mst_cast(ctx, p, to);
    ctx->out_cat = cat_was;
    if (!h) return NULL;
    c->n_casts++;
    if (!slot) {
        if (c->len == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 32;
            struct amp_entry *e = realloc(c->entries, cap * sizeof(*e));
            if (!e) { mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: amp cache of %zu entries", cap); return NULL; }
            c->entries = e;
            c->cap = cap;
        }
        slot = &c->entries[c->len++];
    } else {
        mst_tensor_release(slot->cast);
    }
    *slot = (struct amp_entry){.master = p, .cast = mst_tensor_retain(h), .recorded = h->on_tape};
    return h;
}

/* ---- dispatcher hooks ---- */

static bool castable(mst_dtype t) { return t == MST_DTYPE_F32 || mst_dtype_is_half(t); }

mst_status mst_amp_cast_inputs(mst_ctx *ctx, mst_op_call *c) {
    mst_amp_action a = mst_amp_policy(c->op, ctx->amp_level);
    if (a == MST_AMP_NEVER) return MST_OK;
    mst_dtype to = a == MST_AMP_HALF ? ctx->amp_dtype : MST_DTYPE_F32;
    uint32_t mutates = mst_op_table[c->op]->mutates;
    for (int i = a == MST_AMP_F32_PARAMS ? 1 : 0; i < c->n_in; i++) {
        mst_tensor *t = c->in[i];
        if (t->dtype == to || !castable(t->dtype) || (mutates >> i & 1)) continue;
        bool param = t->persistent && t->requires_grad && !t->on_tape;
        mst_tensor *h = param ? cast_param(ctx, t, to) : mst_cast(ctx, t, to);
        if (!h) return ctx->status;
        c->in[i] = h;
    }
    return MST_OK;
}

mst_status mst_amp_cast_outputs(mst_ctx *ctx, mst_op_call *c) {
    if (!mst_amp_casts_back(c->op, ctx->amp_level)) return MST_OK;
    for (int k = 0; k < c->n_out; k++) {
        if (!mst_dtype_is_half(c->out[k]->dtype)) continue;
        mst_tensor *y = mst_cast(ctx, c->out[k], MST_DTYPE_F32);
        if (!y) return ctx->status;
        c->out[k] = y;
    }
    return MST_OK;
}

/* ---- the half kernel's scratch ---- */

void *mst_amp_scratch(mst_ctx *ctx, size_t bytes) {
    struct mst_amp_cache *c = cache_get(ctx);
    if (!c) return NULL;
    if (bytes <= c->scratch_size && c->scratch) return c->scratch;
    mst_free(ctx->alloc, c->scratch);
    c->scratch = mst_alloc(ctx->alloc, bytes ? bytes : 64, MST_MEM_WORKSPACE);
    c->scratch_size = c->scratch ? bytes : 0;
    if (!c->scratch) mst_ctx_fail(ctx, MST_ERR_OOM, "out of memory: half kernel scratch of %zu bytes", bytes);
    return c->scratch;
}
