/* calibration.c — see calibration.h. Each profiled kernel call is rebuilt from its signature
 * (shapes, dtypes, attribute slots) on seeded U[0.1, 1.1) data (positive, so variances and logs
 * stay finite), then timed: one untimed run of each variant (warms caches, lets the kernel choice
 * of runtime/backend/ settle the provider), then the best of alternating f32 / half runs (at least
 * 5 rounds and 20 ms, at most 40 rounds or 0.5 s), so load from other processes hits both alike. The half variant gives the call what O2 would: forward ops per the amp policy (all float
 * inputs half; batch norm only its activation), gradient ops as their forward op (named by the
 * prefix before "_grad"; batch norm's gradient keeps its per-channel inputs f32).
 *
 * Trade-off: isolated, cache-warm kernels, not a training step — no graph fusion, no memory
 * traffic between ops, no allocator effects. That is why the advisor's trial, not this prediction,
 * decides; the calibration only says what the kernels themselves gain or lose on this machine.
 */
#define _GNU_SOURCE
#include "advisor/calibration.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/events.h"
#include "runtime/amp/autocast.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/context.h"
#include "runtime/cpu_features.h"
#include "runtime/dtype.h"
#include "runtime/op.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "util/fsutil.h"

#ifndef MSTUNE_GIT_REV
#define MSTUNE_GIT_REV "unknown"
#endif
static const char k_build[] = "0.1.0+" MSTUNE_GIT_REV;

/* ---- the signature text (runtime/op.h mst_op_signature) ---- */

typedef struct {
    int n_in;
    int ndim[MST_MAX_OP_INPUTS];
    int64_t shape[MST_MAX_OP_INPUTS][MST_MAX_DIMS];
    mst_dtype dtype[MST_MAX_OP_INPUTS];
    mst_attrs attrs;
} parsed_sig;

/* 0, or -1 with why. */
static int parse_sig(const char *sig, parsed_sig *ps, char *why, size_t n) {
    memset(ps, 0, sizeof(*ps));
    const char *bar = strchr(sig, '|');
    if (!bar) return snprintf(why, n, "signature without dtypes"), -1;
    cJSON *dims = cJSON_ParseWithLength(sig, (size_t)(bar - sig));
    int rc = -1;
    if (!cJSON_IsArray(dims) || cJSON_GetArraySize(dims) > MST_MAX_OP_INPUTS) {
        snprintf(why, n, "signature shapes do not parse");
        goto out;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, dims) {
        if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > MST_MAX_DIMS) { snprintf(why, n, "signature shape not a list of <= 6 dims"); goto out; }
        int k = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, t) {
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > (double)(1ll << 40)) { snprintf(why, n, "bad dim"); goto out; }
            ps->shape[ps->n_in][k++] = (int64_t)d->valuedouble;
        }
        ps->ndim[ps->n_in++] = k;
    }
    const char *p = bar + 1;
    for (int i = 0; i < ps->n_in; i++) {
        size_t len = strcspn(p, ",|");
        char name[16];
        if (len == 0 || len >= sizeof(name)) { snprintf(why, n, "signature dtypes do not parse"); goto out; }
        memcpy(name, p, len);
        name[len] = '\0';
        int dt = mst_dtype_parse(name);
        if (dt < 0) { snprintf(why, n, "unknown dtype '%s'", name); goto out; }
        ps->dtype[i] = (mst_dtype)dt;
        p += len + (p[len] == ',');
    }
    while (*p == '|') {
        p++;
        bool ints = strncmp(p, "i:", 2) == 0, flts = strncmp(p, "f:", 2) == 0;
        if (!ints && !flts) { snprintf(why, n, "unknown signature field"); goto out; }
        p += 2;
        for (int j = 0; *p && *p != '|'; j++) {
            char *end;
            if (ints && j < MST_MAX_ATTR_I) ps->attrs.i[j] = strtoll(p, &end, 10);
            else if (flts && j < MST_MAX_ATTR_F) ps->attrs.f[j] = strtod(p, &end);
            else { snprintf(why, n, "too many attributes"); goto out; }
            if (end == p) { snprintf(why, n, "attribute does not parse"); goto out; }
            p = end + (*end == ',');
        }
    }
    rc = 0;
out:
    cJSON_Delete(dims);
    return rc;
}

/* ---- what O2 does to a call ---- */

/* The forward op whose amp action an op's half-ness follows: itself, or for a gradient op the op
 * named by its name's prefix before "_grad" (conv2d_grad_input -> conv2d). */
static mst_op o2_owner(mst_op op, bool *is_grad) {
    const mst_op_desc *d = mst_op_table[op];
    *is_grad = (d->flags & MST_OPF_GRAD_OP) != 0;
    if (!*is_grad) return op;
    const char *g = strstr(d->name, "_grad");
    char fwd[48];
    if (!g || (size_t)(g - d->name) >= sizeof(fwd)) return MST_OP_COUNT;
    snprintf(fwd, sizeof(fwd), "%.*s", (int)(g - d->name), d->name);
    int f = mst_op_parse(fwd);
    return f < 0 ? MST_OP_COUNT : (mst_op)f;
}

/* Bit i: input i is half under O2. -1: O2 leaves the call in f32 (or never touches it). */
static int o2_half_mask(mst_op op, const parsed_sig *ps) {
    bool grad;
    mst_op owner = o2_owner(op, &grad);
    if (owner == MST_OP_COUNT) return -1;
    mst_amp_action a = mst_amp_policy(owner, 2);
    if (a != MST_AMP_HALF && a != MST_AMP_F32_PARAMS) return -1;
    int64_t numel[MST_MAX_OP_INPUTS], big = 0;
    for (int i = 0; i < ps->n_in; i++) {
        numel[i] = 1;
        for (int j = 0; j < ps->ndim[i]; j++) numel[i] *= ps->shape[i][j];
        if (mst_dtype_is_float(ps->dtype[i]) && numel[i] > big) big = numel[i];
    }
    int mask = 0;
    for (int i = 0; i < ps->n_in; i++) {
        if (!mst_dtype_is_float(ps->dtype[i]) || (mst_op_table[op]->mutates >> i & 1u)) continue;
        bool half = a == MST_AMP_HALF || (grad ? numel[i] == big : i == 0);   /* batch norm: the activation-sized inputs */
        if (half) mask |= 1 << i;
    }
    return mask ? mask : -1;
}

/* ---- timing one call ---- */

static double now_ns(void) { return (double)mst_prof_now_ns(); }

/* One variant of a call, built in the caller's pool: inputs (half where mask says), outputs, kernel. */
typedef struct {
    mst_op_call c;
    mst_kernel_fn kernel;
} prepared;

static int prepare(mst_ctx *ctx, mst_op op, const parsed_sig *ps, int mask, mst_dtype half, prepared *pr, char *why, size_t n) {
    const mst_op_desc *d = mst_op_table[op];
    mst_meta meta[MST_MAX_OP_OUTPUTS];
    memset(pr, 0, sizeof(*pr));
    pr->c = (mst_op_call){.op = op, .n_in = ps->n_in, .n_out = d->n_outputs, .attrs = ps->attrs};
    /* an op with no outputs computes only when it mutates an input (amp_unscale_check) */
    if ((d->n_outputs < 1 && !d->mutates) || d->n_outputs > MST_MAX_OP_OUTPUTS || (d->flags & MST_OPF_VIEW) || !d->infer)
        return snprintf(why, n, "not a computing op"), -1;
    if (ps->n_in < d->min_inputs || ps->n_in > d->max_inputs)
        return snprintf(why, n, "%d inputs, the op takes %d..%d", ps->n_in, d->min_inputs, d->max_inputs), -1;
    for (int i = 0; i < ps->n_in; i++) {
        mst_tensor *t = mst_tensor_new(ctx, ps->dtype[i], ps->ndim[i], ps->shape[i]);
        if (!t) goto fail;
        if (mst_dtype_is_float(ps->dtype[i])) mst_tensor_fill_rand(ctx, t, 0.1, 1.1);
        else mst_tensor_fill(t, 0);
        if (mask >= 0 && (mask >> i & 1) && !(t = mst_cast(ctx, t, half))) goto fail;
        pr->c.in[i] = t;
    }
    if (d->infer(ctx, &pr->c, meta) != MST_OK) goto fail;
    for (int k = 0; k < pr->c.n_out; k++)
        if (!(pr->c.out[k] = mst_tensor_new(ctx, meta[k].dtype, meta[k].ndim, meta[k].shape))) goto fail;
    mst_dtype key = pr->c.n_in > 0 ? pr->c.in[d->dtype_arg]->dtype : pr->c.out[0]->dtype;
    if (!(pr->kernel = mst_op_kernel(ctx, pr->c.op, key))) return snprintf(why, n, "no kernel for %s", mst_dtype_name(key)), -1;
    if (pr->kernel(ctx, &pr->c) != MST_OK) goto fail;      /* warm-up, and the provider choice */
    return 0;
fail:
    snprintf(why, n, "%s", mst_ctx_error(ctx)[0] ? mst_ctx_error(ctx) : "could not be rebuilt");
    mst_ctx_clear_error(ctx);
    return -1;
}

/* The best time per call of op in f32 (t[0]) and, when mask >= 0, with the half inputs O2 gives it
 * (t[1]). The variants alternate run by run, so load from other processes falls on both alike; at
 * least 5 rounds and 20 ms, at most 40 rounds or 0.5 s. 0, or -1 with why. */
static int time_pair(mst_ctx *ctx, mst_op op, const parsed_sig *ps, int mask, mst_dtype half, double t[2], char *why, size_t n) {
    prepared v[2];
    int nv = mask >= 0 ? 2 : 1, rc = -1;
    mst_pool_push(ctx);     /* every tensor made here is the pool's: popped at the end */
    if (prepare(ctx, op, ps, -1, half, &v[0], why, n) != 0 || (nv == 2 && prepare(ctx, op, ps, mask, half, &v[1], why, n) != 0))
        goto out;
    t[0] = t[1] = INFINITY;
    double total = 0;
    for (int r = 0; r < 40 && (r < 5 || total < 2e7) && total < 5e8; r++)
        for (int k = 0; k < nv; k++) {
            double t0 = now_ns();
            if (v[k].kernel(ctx, &v[k].c) != MST_OK) {
                snprintf(why, n, "%s", mst_ctx_error(ctx));
                mst_ctx_clear_error(ctx);
                goto out;
            }
            double dt = now_ns() - t0;
            total += dt;
            if (dt < t[k]) t[k] = dt;
        }
    rc = 0;
out:
    mst_pool_pop(ctx);
    return rc;
}

/* ---- the cache file ---- */

typedef struct {
    char path[512];
    char key[800];      /* "amp1\tmachine\tbuild\tkernels\tthreads\thalf" */
} cache;

static void cache_open(cache *k, const mst_amp_calib_opts *o) {
    const char *env = o->cache_path ? o->cache_path : getenv("MSTUNE_AMP_CALIBRATION");
    k->path[0] = '\0';
    if (env) {
        if (*env && strcmp(env, "off") != 0) snprintf(k->path, sizeof(k->path), "%s", env);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        char dir[400] = "", err[256];
        if (xdg && *xdg) snprintf(dir, sizeof(dir), "%s/mstune", xdg);
        else if (home && *home) snprintf(dir, sizeof(dir), "%s/.cache/mstune", home);
        if (*dir && mst_mkdirs(dir, err, sizeof(err)) == 0) snprintf(k->path, sizeof(k->path), "%s/amp-calibration.tsv", dir);
    }
    char machine[320];
    mst_cpu_machine_id(machine, sizeof(machine));
    snprintf(k->key, sizeof(k->key), "amp1\t%s\t%s\t%s\t%d\t%s", machine, k_build, o->kernels, o->n_threads, o->half);
}

/* The cached (f32, half) times of (op, sig), in ns; false when the file has no valid line for it. */
static bool cache_find(const cache *k, const char *op, const char *sig, double *f32_ns, double *half_ns) {
    FILE *f = *k->path ? fopen(k->path, "r") : NULL;
    if (!f) return false;
    size_t klen = strlen(k->key);
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        if (strncmp(line, k->key, klen) != 0 || line[klen] != '\t') continue;
        char *save = NULL, *field[4];
        int n = 0;
        for (char *t = strtok_r(line + klen + 1, "\t\n", &save); t && n < 4; t = strtok_r(NULL, "\t\n", &save)) field[n++] = t;
        if (n < 4 || strcmp(field[0], op) != 0 || strcmp(field[1], sig) != 0) continue;
        char *e1, *e2;
        double a = strtod(field[2], &e1), b = strtod(field[3], &e2);
        if (*e1 || *e2 || !(a >= 0) || !(b >= 0) || !isfinite(a) || !isfinite(b)) continue;   /* corrupt: ignored */
        *f32_ns = a * 1e3;
        *half_ns = b * 1e3;
        found = true;
    }
    fclose(f);
    return found;
}

static void cache_append(const cache *k, const char *op, const char *sig, double f32_ns, double half_ns) {
    if (!*k->path) return;
    char line[2048];
    int n = snprintf(line, sizeof(line), "%s\t%s\t%s\t%.3f\t%.3f\n", k->key, op, sig, f32_ns / 1e3, half_ns / 1e3);
    if (n <= 0 || n >= (int)sizeof(line)) return;
    int fd = open(k->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);     /* one write: concurrent writers never interleave lines */
    (void)w;
    close(fd);
}

/* ---- the calibration ---- */

static int64_t param_elems(const rpt_profile *p) {
    const char *want = mst_mem_cat_name(MST_MEM_PARAM);
    for (int i = 0; i < p->n_peaks; i++)
        if (p->peak_cat[i] && strcmp(p->peak_cat[i], want) == 0) return p->peak_bytes[i] / 4;
    return 0;
}

int mst_amp_calibrate(rpt_profile *p, const mst_amp_calib_opts *o, mst_amp_calib *out, char *err, size_t errn) {
    memset(out, 0, sizeof(*out));
    int half_i = mst_dtype_parse(o->half);
    if (half_i < 0 || !mst_dtype_is_half((mst_dtype)half_i)) {
        snprintf(err, errn, "amp calibration: '%s' is not a half dtype (f16 or bf16)", o->half);
        return -1;
    }
    int mode = mst_kernels_mode_parse(o->kernels ? o->kernels : "auto");
    if (mode < 0) {
        snprintf(err, errn, "amp calibration: unknown runtime.kernels '%s'", o->kernels);
        return -1;
    }
    mst_amp_calib_opts opts = *o;
    opts.kernels = mst_kernels_mode_name((mst_kernels_mode)mode);
    mst_dtype half = (mst_dtype)half_i;
    snprintf(out->half, sizeof(out->half), "%s", o->half);
    if (rpt_profile_load_sigs(p, err, errn) != 0) return -1;
    cache k;
    cache_open(&k, &opts);
    snprintf(out->path, sizeof(out->path), "%s", k.path);
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 12345, .n_threads = o->n_threads});
    if (!ctx) {
        snprintf(err, errn, "amp calibration: cannot make a runtime context (out of memory)");
        return -1;
    }
    mst_ctx_set_kernels(ctx, (mst_kernels_mode)mode);
    ctx->grad_enabled = false;
    double budget = (o->budget_s > 0 ? o->budget_s : 5) * 1e9, t0 = now_ns();
    /* the rows: the profile's ops, most kernel time first, up to 8 signatures each */
    for (int i = 0; i < p->n_ops && out->n < MST_AMP_CALIB_MAX; i++) {
        int taken = 0;
        for (int s = 0; s < p->n_sigs && out->n < MST_AMP_CALIB_MAX && taken < 8; s++) {
            const rpt_op_sig *g = &p->sigs[s];
            if (strcmp(g->name, p->ops[i].name) != 0) continue;
            taken++;
            mst_amp_calib_row *r = &out->rows[out->n++];
            snprintf(r->name, sizeof(r->name), "%s", g->name);
            snprintf(r->sig, sizeof(r->sig), "%s", g->sig);
            r->calls = g->calls;
            if (g->op < 0 || g->op >= MST_OP_COUNT || !mst_op_table[g->op]) {
                snprintf(r->note, sizeof(r->note), "op %d unknown to this build", g->op);
                continue;
            }
            mst_op op = (mst_op)g->op;
            snprintf(r->op, sizeof(r->op), "%s", mst_op_name(op));
            parsed_sig ps;
            if (parse_sig(g->sig, &ps, r->note, sizeof(r->note)) != 0) continue;
            int mask = o2_half_mask(op, &ps);
            if (mask < 0) {
                r->f32_at_o2 = true;
                snprintf(r->note, sizeof(r->note), "f32 at O2");
                continue;
            }
            if (cache_find(&k, r->op, r->sig, &r->f32_ns, &r->half_ns)) {
                r->measured = r->cached = true;
                out->n_cached++;
                continue;
            }
            if (now_ns() - t0 > budget) {
                snprintf(r->note, sizeof(r->note), "not measured: the %.0f s calibration budget was spent", budget / 1e9);
                continue;
            }
            double t[2];
            if (time_pair(ctx, op, &ps, mask, half, t, r->note, sizeof(r->note)) == 0 && t[0] > 0 && t[1] > 0) {
                double a = t[0], b = t[1];
                r->f32_ns = a;
                r->half_ns = b;
                r->measured = true;
                r->note[0] = '\0';
                out->n_measured++;
                cache_append(&k, r->op, r->sig, a, b);
            }
        }
    }
    /* O2's casts per step: every parameter to half once (autocast's cache), and its gradient back
     * to f32 for the master (the cast's backward) */
    out->param_elems = o->param_elems > 0 ? o->param_elems : param_elems(p);
    for (int dir = 0; dir < 2 && out->param_elems > 0; dir++) {
        mst_dtype from = dir == 0 ? MST_DTYPE_F32 : half, to = dir == 0 ? half : MST_DTYPE_F32;
        parsed_sig ps = {.n_in = 1, .ndim = {1}, .dtype = {from}};
        ps.shape[0][0] = out->param_elems;
        ps.attrs.i[0] = to;
        char sig[96], why[128];
        snprintf(sig, sizeof(sig), "[[%lld]]|%s|i:%d", (long long)out->param_elems, mst_dtype_name(from), (int)to);
        double a, b;
        if (cache_find(&k, "cast", sig, &a, &b)) {
            out->cast_ns += b;
            out->cast_cached = true;
            continue;
        }
        double tt[2];
        if (time_pair(ctx, MST_OP_CAST, &ps, -1, half, tt, why, sizeof(why)) == 0 && tt[0] > 0) {
            out->cast_ns += tt[0];
            cache_append(&k, "cast", sig, tt[0], tt[0]);
        }
    }
    /* O2's dynamic loss scaler (amp.loss_scale.type auto is dynamic at O2): amp_unscale_check over
     * every f32 gradient per step, timed as one tensor of all the parameters' elements */
    if (out->param_elems > 0) {
        parsed_sig ps = {.n_in = 3, .ndim = {1, 0, 0}, .dtype = {MST_DTYPE_F32, MST_DTYPE_F32, MST_DTYPE_F32}};
        ps.shape[0][0] = out->param_elems;
        ps.attrs.i[0] = 1;
        char sig[96], why[128];
        snprintf(sig, sizeof(sig), "[[%lld],[],[]]|f32,f32,f32|i:1", (long long)out->param_elems);
        double a, b, tt[2];
        if (cache_find(&k, "amp_unscale_check", sig, &a, &b)) {
            out->unscale_ns = a;
            out->unscale_cached = true;
        } else if (time_pair(ctx, MST_OP_AMP_UNSCALE_CHECK, &ps, -1, half, tt, why, sizeof(why)) == 0 && tt[0] > 0) {
            out->unscale_ns = tt[0];
            cache_append(&k, "amp_unscale_check", sig, tt[0], tt[0]);
        }
    }
    out->seconds = (now_ns() - t0) / 1e9;
    mst_ctx_free(ctx);
    return 0;
}

double mst_amp_calib_ratio(const mst_amp_calib *c, const char *name, int *n_rows) {
    double f = 0, h = 0;
    int n = 0;
    bool f32 = false;
    for (int i = 0; i < c->n; i++) {
        const mst_amp_calib_row *r = &c->rows[i];
        if (strcmp(r->name, name) != 0) continue;
        if (r->f32_at_o2) f32 = true;
        if (!r->measured || !(r->f32_ns > 0)) continue;
        f += (double)r->calls * r->f32_ns;
        h += (double)r->calls * r->half_ns;
        n++;
    }
    if (n_rows) *n_rows = n;
    if (n > 0) return h / f;
    return f32 ? 1.0 : NAN;
}
