/* rules.c — the diagnosis rules: each reads the stored profile (and the run's summary.json),
 * and when it triggers reports the numbers it saw, the change it proposes as job overrides, a
 * predicted speedup and a confidence. Thresholds and their sources: docs/advisor.md. */
#include "advisor/finding.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/checked.h"

/* ---- the stored job config ---- */

static const cJSON *cfg_get(const cJSON *config, const char *path) {
    const cJSON *o = config;
    char part[64];
    while (o && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof(part)) return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        o = cJSON_GetObjectItemCaseSensitive(o, part);
        path = dot ? dot + 1 : path + n;
    }
    return o;
}

const char *mst_cfg_str(const cJSON *config, const char *path, const char *fallback) {
    const cJSON *v = cfg_get(config, path);
    return cJSON_IsString(v) ? v->valuestring : fallback;
}

double mst_cfg_num(const cJSON *config, const char *path, double fallback) {
    const cJSON *v = cfg_get(config, path);
    if (cJSON_IsNumber(v)) return v->valuedouble;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? 1 : 0;
    return fallback;
}

/* ---- helpers ---- */

typedef struct {
    mst_finding *out;
    int n, cap;
} sink;

static mst_finding *add(sink *s, const char *rule, mst_goal goal) {
    if (s->n >= s->cap) return NULL;
    mst_finding *f = &s->out[s->n++];
    memset(f, 0, sizeof(*f));
    f->rule = rule;
    f->goal = goal;
    f->predicted = NAN;
    return f;
}

static void add_set(mst_finding *f, const char *fmt, const char *value) {
    if (f->n_sets < MST_FINDING_MAX_SETS) snprintf(f->sets[f->n_sets++], MST_SET_LEN, fmt, value);
}

/* Share of kernel time in ops whose name starts with one of the prefixes (GEMM-like work). */
static double gemm_share_of_kernels(const rpt_profile *p) {
    static const char *const gemm[] = {"matmul", "linear", "conv2d"};
    int64_t g = 0;
    for (int i = 0; i < p->n_ops; i++)
        for (size_t k = 0; k < sizeof(gemm) / sizeof(*gemm); k++)
            if (strncmp(p->ops[i].name, gemm[k], strlen(gemm[k])) == 0) { g += p->ops[i].total_ns; break; }
    return p->ops_total_ns > 0 ? (double)g / (double)p->ops_total_ns : 0;
}

/* ---- rules ---- */

/* Eager per-op host work: graph mode removes dispatch (bounded by 1 / (1 - share)). */
static void rule_graph_mode(const rpt_profile *p, sink *s) {
    const char *mode = mst_cfg_str(p->config, "runtime.mode", "eager");
    double d = p->bd.share[MST_CAT_DISPATCH];
    if (strcmp(mode, "eager") != 0 || d < 0.10) return;
    mst_finding *f = add(s, "graph_mode", MST_GOAL_SPEED);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "eager dispatch is %.0f%% of the step", 100 * d);
    snprintf(f->evidence, sizeof(f->evidence),
             "dispatch %.1f%%, kernel %.1f%% of the median step (%.4g ms) over %lld profiled steps; runtime.mode eager",
             100 * d, 100 * p->bd.share[MST_CAT_KERNEL], p->bd.wall_median_ns / 1e6, (long long)p->bd.steps);
    add_set(f, "runtime.mode=%s", "graph");
    snprintf(f->change, sizeof(f->change), "runtime.mode eager -> graph");
    f->predicted = 1.0 / (1.0 - d);
    f->confidence = d >= 0.25 ? 0.8 : 0.5;
    f->score = f->predicted;
}

/* Data wait on the critical path: more loader workers (bounded by cores) and a deeper prefetch. */
static void rule_loader(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    double d = p->bd.share[MST_CAT_DATA];
    if (d < 0.05) return;
    int workers = mst_f64_to_int_or(mst_cfg_num(p->config, "data.num_workers", 0), 0, 1 << 20, 0);
    int prefetch = mst_f64_to_int_or(mst_cfg_num(p->config, "data.prefetch", 2), 0, 1 << 20, 2);
    int cores = env->n_cores > 0 ? env->n_cores : 1;
    int want = workers < cores ? cores : workers;
    int want_prefetch = prefetch < 2 * want ? 2 * want : prefetch;
    if (want == workers && want_prefetch == prefetch) return;      /* nothing left to turn */
    mst_finding *f = add(s, "loader", MST_GOAL_SPEED);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "the step waits for data %.0f%% of the time (%s)", 100 * d,
             d >= 0.20 ? "high" : "moderate");
    snprintf(f->evidence, sizeof(f->evidence),
             "data %.1f%% of the median step (%.4g ms); data.num_workers %d, data.prefetch %d, %d cores", 100 * d,
             p->bd.wall_median_ns / 1e6, workers, prefetch, cores);
    char v[32];
    snprintf(v, sizeof(v), "%d", want);
    add_set(f, "data.num_workers=%s", v);
    snprintf(v, sizeof(v), "%d", want_prefetch);
    add_set(f, "data.prefetch=%s", v);
    snprintf(f->change, sizeof(f->change), "data.num_workers %d -> %d, data.prefetch %d -> %d", workers, want, prefetch,
             want_prefetch);
    f->predicted = 1.0 / (1.0 - d);
    f->confidence = d >= 0.20 ? 0.8 : 0.5;
    f->score = f->predicted;
}

/* O0 and GEMM/conv-dominated kernels: propose O2 with the half type the device handles best. On a
 * CPU without half arithmetic the only gain is halved bytes in memory-bound kernels, which the
 * prediction says; the trial decides. */
static void rule_amp_level(const rpt_profile *p, sink *s) {
    const char *level = mst_cfg_str(p->config, "amp.level", "O0");
    double k = p->bd.share[MST_CAT_KERNEL], g = gemm_share_of_kernels(p);
    if (strcmp(level, "O0") != 0 || k < 0.5 || g < 0.5) return;
    mst_finding *f = add(s, "amp_level", MST_GOAL_SPEED);
    if (!f) return;
    const char *device = mst_cfg_str(p->config, "runtime.device", "cpu");
    /* bf16 on CPUs: f32's range (no loss scaling needed) and a conversion that is a shift */
    const char *half = strcmp(device, "cuda") == 0 ? "f16" : "bf16";
    snprintf(f->title, sizeof(f->title), "kernels are %.0f%% of the step, %.0f%% of them GEMM/conv, in f32", 100 * k,
             100 * g);
    snprintf(f->evidence, sizeof(f->evidence),
             "kernel %.1f%% of the median step, matmul/linear/conv2d %.1f%% of kernel time; amp.level O0 on %s "
             "(no native half arithmetic on this CPU: half is stored, computed in f32)",
             100 * k, 100 * g, device);
    add_set(f, "amp.level=%s", "O2");
    add_set(f, "amp.dtype=%s", half);
    snprintf(f->change, sizeof(f->change), "amp.level O0 -> O2 (%s)", half);
    /* memory-bound share (everything but GEMM/conv) moves half the bytes; GEMMs gain nothing here */
    double mem_bound = k * (1 - g);
    f->predicted = strcmp(device, "cuda") == 0 ? 1.0 / (1.0 - 0.5 * k) : 1.0 / (1.0 - 0.5 * mem_bound);
    f->confidence = strcmp(device, "cuda") == 0 ? 0.6 : 0.2;
    f->score = f->predicted;
}

/* O3 runs norms and the loss in half: correct to O2 (MindSpore's recommended level). */
static void rule_amp_o3(const rpt_profile *p, sink *s) {
    if (strcmp(mst_cfg_str(p->config, "amp.level", "O0"), "O3") != 0) return;
    mst_finding *f = add(s, "amp_o3_norms", MST_GOAL_SAFETY);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "amp O3 runs batch norm, softmax and the loss in %s",
             mst_cfg_str(p->config, "amp.dtype", "f16"));
    snprintf(f->evidence, sizeof(f->evidence),
             "amp.level O3: normalization statistics and the loss are computed in half precision; O2 keeps them in f32");
    add_set(f, "amp.level=%s", "O2");
    snprintf(f->change, sizeof(f->change), "amp.level O3 -> O2");
    f->predicted = 1.0;
    f->confidence = 0.6;
    f->score = 3.0;     /* an accuracy risk outranks speed findings */
}

/* Loss-scale churn (too high an init) and underflow (too low a fixed scale). */
static void rule_loss_scale(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    const char *level = mst_cfg_str(p->config, "amp.level", "O0");
    if (strcmp(level, "O0") == 0) return;
    const char *type = mst_cfg_str(p->config, "amp.loss_scale.type", "auto");
    const char *half = mst_cfg_str(p->config, "amp.dtype", "f16");
    double steps = mst_cfg_num(env->summary, "steps", (double)p->n_steps);
    double skipped = mst_cfg_num(env->summary, "skipped_steps", 0), overflow = mst_cfg_num(env->summary, "overflow_steps", 0);
    double final_scale = mst_cfg_num(env->summary, "loss_scale_final", NAN);
    /* leading skipped steps, and whether the scale was still falling over the last quarter */
    int64_t lead = 0, first_scale_i = -1;
    for (int64_t i = 0; i < p->n_steps && p->steps[i].overflow == 1; i++) lead++;
    double q_first = NAN, q_last = NAN;
    for (int64_t i = 0; i < p->n_steps; i++) {
        if (!p->steps[i].has_scale) continue;
        if (first_scale_i < 0) first_scale_i = i;
        if (i >= p->n_steps * 3 / 4 && isnan(q_first)) q_first = p->steps[i].loss_scale;
        q_last = p->steps[i].loss_scale;
    }
    bool falling = !isnan(q_first) && q_last < q_first;
    double skip_frac = steps > 0 ? skipped / steps : 0;
    if (skip_frac > 0.05 || lead >= 10 || falling) {
        mst_finding *f = add(s, "loss_scale", MST_GOAL_SPEED);
        if (!f) return;
        double init = mst_cfg_num(p->config, "amp.loss_scale.init", 16777216);
        double target = isfinite(final_scale) && final_scale >= 1 ? final_scale : init / 1024;
        snprintf(f->title, sizeof(f->title), "%.0f of %.0f steps skipped on overflow (%.0f%%)", skipped, steps, 100 * skip_frac);
        snprintf(f->evidence, sizeof(f->evidence),
                 "loss scale init %.4g, final %.4g; %.0f overflow steps, %.0f skipped, the first %lld steps skipped%s",
                 init, final_scale, overflow, skipped, (long long)lead, falling ? ", still falling in the last quarter" : "");
        char v[32];
        snprintf(v, sizeof(v), "%.17g", target);
        add_set(f, "amp.loss_scale.init=%s", v);
        if (strcmp(type, "auto") == 0 || strcmp(type, "none") == 0) add_set(f, "amp.loss_scale.type=%s", "dynamic");
        snprintf(f->change, sizeof(f->change), "amp.loss_scale.init %.4g -> %.4g (the scale the run settled at)", init, target);
        f->predicted = skip_frac < 0.99 ? 1.0 / (1.0 - skip_frac) : 2.0;
        f->confidence = 0.7;
        f->score = f->predicted;
        return;
    }
    /* underflow: f16 with no or a low fixed scale and a loss that does not move */
    bool low_fixed = strcmp(type, "none") == 0 || (strcmp(type, "auto") == 0 && strcmp(level, "O2") != 0) ||
                     (strcmp(type, "fixed") == 0 && mst_cfg_num(p->config, "amp.loss_scale.init", 1) <= 1024);
    if (!low_fixed || strcmp(half, "f16") != 0) return;
    double l0 = NAN, l1 = NAN;
    int64_t n_loss = 0;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].has_loss) {
            if (isnan(l0)) l0 = p->steps[i].loss;
            l1 = p->steps[i].loss;
            n_loss++;
        }
    double change = isfinite(l0) && l0 != 0 ? fabs(l1 - l0) / fabs(l0) : NAN;
    if (n_loss < 10 || !(change < 0.02)) return;
    mst_finding *f = add(s, "loss_scale_underflow", MST_GOAL_ACCURACY);
    if (!f) return;
    if (strcmp(type, "fixed") == 0)
        snprintf(f->title, sizeof(f->title), "the loss does not move under %s f16 with a fixed loss scale of %.3g", level,
                 mst_cfg_num(p->config, "amp.loss_scale.init", 1));
    else
        snprintf(f->title, sizeof(f->title), "the loss does not move under %s f16 without a loss scale", level);
    snprintf(f->evidence, sizeof(f->evidence),
             "training loss %.6g -> %.6g (%.2f%% change) over %lld steps; amp %s f16, loss_scale.type %s: gradients "
             "below 6e-8 (f16's smallest subnormal) flush to zero",
             l0, l1, 100 * change, (long long)n_loss, level, type);
    add_set(f, "amp.loss_scale.type=%s", "dynamic");
    add_set(f, "amp.loss_scale.init=%s", "16777216");
    snprintf(f->change, sizeof(f->change), "amp.loss_scale.type %s -> dynamic (init 2^24)", type);
    f->predicted = 1.0;
    f->confidence = 0.7;
    f->score = 4.0;
}

/* More than one plan compiled: the last, smaller batch (or changing shapes) recompiles. */
static void rule_recompile(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    if (strcmp(mst_cfg_str(p->config, "runtime.mode", "eager"), "graph") != 0) return;
    double compiles = mst_cfg_num(env->summary, "compile_count", 0), compile_ms = mst_cfg_num(env->summary, "compile_ms", 0);
    if (compiles <= 1 || mst_cfg_num(p->config, "runtime.dynamic_batch", 0) != 0) return;
    mst_finding *f = add(s, "recompile", MST_GOAL_SPEED);
    if (!f) return;
    double wall_ms = 1000 * mst_cfg_num(env->summary, "wall_s", 0);
    snprintf(f->title, sizeof(f->title), "%.0f graph plans compiled for one job", compiles);
    snprintf(f->evidence, sizeof(f->evidence), "compile_count %.0f, compile time %.1f ms of a %.1f ms run; "
             "runtime.dynamic_batch false (a smaller last batch is a new signature)", compiles, compile_ms, wall_ms);
    add_set(f, "runtime.dynamic_batch=%s", "true");
    snprintf(f->change, sizeof(f->change), "runtime.dynamic_batch false -> true");
    double per = compile_ms / compiles;
    f->predicted = wall_ms > per * (compiles - 1) ? wall_ms / (wall_ms - per * (compiles - 1)) : 1.0;
    f->confidence = 0.5;
    f->score = f->predicted;
}

/* Findings only: memory headroom and batch size change the optimization problem, never applied. */
static void rule_memory_and_batch(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    double peak = mst_cfg_num(env->summary, "peak_memory_bytes", 0);
    int64_t batch = p->batch_size;
    double d = p->bd.share[MST_CAT_DISPATCH];
    if (peak > 0 && env->memory_bytes > 0 && peak < 0.25 * env->memory_bytes) {
        mst_finding *f = add(s, "memory_headroom", MST_GOAL_NONE);
        if (f) {
            snprintf(f->title, sizeof(f->title), "peak memory is %.2g%% of the machine's", 100 * peak / env->memory_bytes);
            snprintf(f->evidence, sizeof(f->evidence),
                     "allocator peak %.3g MB of %.1f GB physical memory at batch %lld: room for a larger batch or model, "
                     "which changes the optimization and is not applied automatically",
                     peak / 1e6, env->memory_bytes / 1e9, (long long)batch);
            snprintf(f->change, sizeof(f->change), "none (headroom for a larger data.batch_size)");
            f->score = 0.1;
        }
    }
    if (peak > 0 && batch > 0 && batch < 64 && d >= 0.10) {
        mst_finding *f = add(s, "batch_size", MST_GOAL_NONE);
        if (!f) return;
        snprintf(f->title, sizeof(f->title), "batch %lld is small: per-op overhead is %.0f%% of the step", (long long)batch,
                 100 * d);
        snprintf(f->evidence, sizeof(f->evidence),
                 "peak memory %.3g MB at batch %lld; a larger batch amortizes dispatch but changes the optimization "
                 "(learning rate, accuracy): not applied automatically", peak / 1e6, (long long)batch);
        snprintf(f->change, sizeof(f->change), "consider a larger data.batch_size (with a re-tuned learning rate)");
        f->score = 0.5;
    }
}

static int by_score(const void *a, const void *b) {
    const mst_finding *x = a, *y = b;
    return (x->score < y->score) - (x->score > y->score);
}

int mst_advisor_diagnose(const rpt_profile *p, const mst_rule_env *env, mst_finding *out, int cap) {
    sink s = {out, 0, cap};
    rule_amp_o3(p, &s);
    rule_loss_scale(p, env, &s);
    rule_graph_mode(p, &s);
    rule_loader(p, env, &s);
    rule_amp_level(p, &s);
    rule_recompile(p, env, &s);
    rule_memory_and_batch(p, env, &s);
    qsort(out, (size_t)s.n, sizeof(*out), by_score);
    return s.n;
}
