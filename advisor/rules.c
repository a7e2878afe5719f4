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

/* An op's typical time in the run: p50 x calls (robust to one inflated call, unlike the total). */
static double op_typical_ns(const rpt_op *o) { return o->p50_ns > 0 ? o->p50_ns * (double)o->calls : (double)o->total_ns; }

static bool is_gemm(const char *name) {
    static const char *const gemm[] = {"matmul", "linear", "conv2d"};
    for (size_t k = 0; k < sizeof(gemm) / sizeof(*gemm); k++)
        if (strncmp(name, gemm[k], strlen(gemm[k])) == 0) return true;
    return false;
}

/* Share of kernel time (p50 x calls per op) in GEMM-like ops (matmul, linear, conv2d). */
static double gemm_share_of_kernels(const rpt_profile *p) {
    double g = 0, all = 0;
    for (int i = 0; i < p->n_ops; i++) {
        double t = op_typical_ns(&p->ops[i]);
        all += t;
        if (is_gemm(p->ops[i].name)) g += t;
    }
    return all > 0 ? g / all : 0;
}

/* A category's share of the step, robustly: the median over the profiled steps of each step's
 * own share (category / wall). One preempted step changes a run-wide sum (38 ms of a 47 ms run
 * cut a 26% dispatch share to 5%), it cannot move this median. Falls back to the run-wide share
 * when no step rows were read. */
static double step_share(const rpt_profile *p, mst_prof_cat c) {
    double *v = malloc(sizeof(double) * (size_t)(p->n_steps > 0 ? p->n_steps : 1));
    int64_t n = 0;
    for (int64_t i = 0; v && i < p->n_steps; i++)
        if (p->steps[i].used && p->steps[i].wall_ms > 0) v[n++] = p->steps[i].cat_ms[c] / p->steps[i].wall_ms;
    double r = n > 0 ? rpt_median(v, n) : p->bd.share[c];
    free(v);
    return r;
}

/* Eager dispatch's share of the step net of the recorder's own time in it, robustly (the median
 * over the profiled steps, as step_share). The diagnosis profile records every op: a dispatch
 * range around a kernel range, four records an op, each costing record_ns and its preparation
 * (the dispatcher's signature, FLOP count: prep_ns_per_record) inside the step. A record's cost
 * falls on both sides of its clock read, so each time segment it bounds gets half of it: an op's
 * two dispatch segments (before and after its kernel) get two records' worth, its kernel one, the
 * step around it one — half of a step's records (n_events) land in dispatch, and the preparation,
 * done in the dispatcher, all of it. On the dispatch-bound scenario (a ~10 us step, 100 records at
 * 23 ns) the recorded share was 31.9% (1/(1-d) = 1.47x), net 21.3% (1.27x); its trials measured
 * 1.29-1.30x on the training loop, and 1.40-1.44x on the same step over a 10x longer run
 * (one_slow_step), where graph mode's compile weighs less and the host work it skips outside
 * dispatch shows (docs/advisor.md). *recorded (when not NULL) gets the share as recorded; the net
 * share equals it where the profile did not record its records' cost. */
static double dispatch_share_net(const rpt_profile *p, double *recorded) {
    const double as_recorded = step_share(p, MST_CAT_DISPATCH);
    if (recorded) *recorded = as_recorded;
    const double r = p->record_ns, prep = p->prep_ns_per_record;
    if (!(r >= 0) || !(prep >= 0) || r + prep == 0) return as_recorded;
    double *v = malloc(sizeof(double) * (size_t)(p->n_steps > 0 ? p->n_steps : 1));
    int64_t n = 0;
    for (int64_t i = 0; v && i < p->n_steps; i++) {
        const rpt_step *s = &p->steps[i];
        if (!s->used || !(s->wall_ms > 0)) continue;
        const double ev = (double)s->n_events;
        const double in_dispatch = (ev / 2 * r + ev * prep) / 1e6, in_step = ev * (r + prep) / 1e6;   /* ms */
        const double wall = s->wall_ms - in_step, dispatch = s->cat_ms[MST_CAT_DISPATCH] - in_dispatch;
        v[n++] = wall > 0 ? fmax(dispatch, 0) / wall : 0;
    }
    double share = n > 0 ? rpt_median(v, n) : as_recorded;
    free(v);
    return share;
}

/* What removing `share` of every step's time gains on the quantity the verdict judges (class 2:
 * the training loop's time per applied update, compiles and slow steps included): the loop's
 * time (the diagnosis run's train_loop_s) against it less share x the median step x its steps.
 * The step bound 1/(1 - share) where the run did not record its loop. On the recompile scenario
 * the loader's step bound was 2.9-3.0x (data 65% of a 0.09 ms median step) and its trials measured
 * 1.06-1.07x: the 17 ms loop also held 5 ms of compiles and the kernel choice's first calls. */
static double loop_gain(const rpt_profile *p, const mst_rule_env *env, double share) {
    double loop_ms = 1000 * mst_cfg_num(env->summary, "train_loop_s", 0), steps = mst_cfg_num(env->summary, "steps", 0);
    double saved = share * (p->bd.wall_median_ns / 1e6) * steps;
    if (!(loop_ms > 0) || !(saved > 0) || saved >= loop_ms) return 1.0 / (1.0 - share);
    return loop_ms / (loop_ms - saved);
}

/* The share of the step the loader's workers can take off it when they share the machine's cores
 * with the kernels: the loader's work (data share x step, on one thread when synchronous) must
 * still run somewhere. The new step is at least the compute part (`compute`, as a share of today's
 * step, on `compute_threads`), the loader's work spread over `loader_par` threads, and all the CPU
 * work (the loader's plus the compute part on each of its threads, an upper bound: a pool waiting
 * for work may spin) spread over the cores. Sharing the cores: compute 1 - data on today's threads,
 * the loader over its workers. On loader_starved (data 63% of a 1.3 ms step, 2 threads, 2 cores)
 * hiding the wait entirely would give 2.7x on the step and 2.4x on the loop, and its trials
 * measured 1.09-1.33x on the loop. With the compute on one thread (rule_loader): compute counted
 * pessimistically as (1 - data) x today's threads, as if it had scaled perfectly over them, the
 * loader over the other cores. */
static double loader_share_saved(double data_share, double compute, int loader_par, int compute_threads, int cores) {
    double step = fmax(compute, data_share / (loader_par > 0 ? loader_par : 1));
    step = fmax(step, (data_share + compute * compute_threads) / (cores > 0 ? cores : 1));
    return step < 1.0 ? 1.0 - step : 0.0;
}

/* The loader's workers that keep pace with the compute, at most the cores. With no workers the
 * data share d is the loader's own work on a batch (the main thread did it), so one worker makes
 * a batch every d (as a share of the step) while the step takes one every c = 1 - d; with w
 * workers already the loader bounds the step, so its work on a batch is about w steps. A worker
 * short by less than a quarter of the pace is not added, since a worker beyond the cores the
 * compute leaves shares them with it. On subnormal_weights (data 49-51% of a 0.05 ms step,
 * 2 cores; bench/train_variants.sh, three runs of 12 rounds, docs/benchmarks.md) one worker
 * trained 1.19-1.28x as fast as the synchronous loader, two 1.13-1.21x, and two with the compute
 * on one thread (what the rule asked for at a 50% share) 1.02-1.14x; loader_starved (data 62%:
 * 1.6 workers' pace) needs its two (1.61x against one worker's 1.37x, both beside one compute
 * thread). */
static int loader_workers_needed(double d, int workers, int cores, double *pace_out) {
    const double c = 1.0 - d;
    const double work = workers > 0 ? (double)workers : d;
    const double pace = c > 0 ? work / c : (double)cores;
    *pace_out = pace;
    double need = ceil(pace - 0.25);
    if (!(need >= 1)) need = 1;
    return need < cores ? (int)need : cores;
}

/* The smallest predicted gain worth a trial: what K-vs-K runs resolve (the baseline's spread). */
static double resolvable(const mst_rule_env *env) { return env->resolvable_speedup > 1 ? env->resolvable_speedup : 1.10; }

/* Median wall time of the used steps in [from, to) of the used-step sequence (ms); NAN if none. */
static double used_median_of(const rpt_profile *p, int64_t from, int64_t to, int category) {
    double *v = malloc(sizeof(double) * (size_t)(p->n_steps > 0 ? p->n_steps : 1));
    int64_t n = 0, k = 0;
    for (int64_t i = 0; v && i < p->n_steps; i++) {
        if (!p->steps[i].used) continue;
        if (k >= from && k < to) v[n++] = category < 0 ? p->steps[i].wall_ms : p->steps[i].cat_ms[category];
        k++;
    }
    double r = n > 0 ? rpt_median(v, n) : NAN;
    free(v);
    return r;
}

static double used_median_ms(const rpt_profile *p, int64_t from, int64_t to) { return used_median_of(p, from, to, -1); }

/* The first and last recorded training loss of the profiled steps; returns how many there were. */
static int64_t loss_ends(const rpt_profile *p, double *first, double *last) {
    int64_t n = 0;
    *first = *last = NAN;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].has_loss) {
            if (n++ == 0) *first = p->steps[i].loss;
            *last = p->steps[i].loss;
        }
    return n;
}

/* ---- rules ---- */

/* Eager per-op host work: graph mode removes dispatch (bounded by 1 / (1 - share)). */
static void rule_graph_mode(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    const char *mode = mst_cfg_str(p->config, "runtime.mode", "eager");
    double recorded;
    const double d = dispatch_share_net(p, &recorded);
    /* 10% (a bound of 1.11x) always qualifies; below it, whenever the bound exceeds what the runs resolve */
    if (strcmp(mode, "eager") != 0 || !(d > 0) || (d < 0.10 && 1.0 / (1.0 - d) < resolvable(env))) return;
    mst_finding *f = add(s, "graph_mode", MST_GOAL_SPEED);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "eager dispatch is %.0f%% of the step", 100 * d);
    snprintf(f->evidence, sizeof(f->evidence),
             "dispatch %.1f%% of the step net of the recorder's own time in it (%.1f%% as recorded: half of each "
             "step's records at %.0f ns and all their preparation at %.0f ns a record fall in dispatch), kernel %.1f%% "
             "as recorded (medians over %lld profiled steps of each step's share; median step %.4g ms); runtime.mode "
             "eager; removing that dispatch gives 1/(1-d) = %.3fx (graph mode also skips host work outside dispatch, "
             "the autograd engine's walk and the optimizer's loop, and adds its compiles: neither is counted; the "
             "trials resolve %.3fx)",
             100 * d, 100 * recorded, p->record_ns >= 0 ? p->record_ns : 0,
             p->prep_ns_per_record >= 0 ? p->prep_ns_per_record : 0,
             100 * step_share(p, MST_CAT_KERNEL), (long long)p->bd.steps, p->bd.wall_median_ns / 1e6, 1.0 / (1.0 - d),
             resolvable(env));
    add_set(f, "runtime.mode=%s", "graph");
    snprintf(f->change, sizeof(f->change), "runtime.mode eager -> graph");
    f->predicted = 1.0 / (1.0 - d);
    f->confidence = d >= 0.25 ? 0.8 : 0.5;
    f->score = f->predicted;
}

/* Data wait on the critical path: more loader workers (bounded by cores) and a deeper prefetch. */
static void rule_loader(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    double d = step_share(p, MST_CAT_DATA);
    if (d < 0.05 && !(d > 0 && 1.0 / (1.0 - d) >= resolvable(env))) return;
    int workers = mst_f64_to_int_or(mst_cfg_num(p->config, "data.num_workers", 0), 0, 1 << 20, 0);
    int prefetch = mst_f64_to_int_or(mst_cfg_num(p->config, "data.prefetch", 2), 0, 1 << 20, 2);
    int cores = env->n_cores > 0 ? env->n_cores : 1;
    double pace = 0;
    int want = loader_workers_needed(d, workers, cores, &pace);
    if (want < workers) want = workers;
    int want_prefetch = prefetch < 2 * want ? 2 * want : prefetch;
    if (want == workers && want_prefetch == prefetch) return;      /* nothing left to turn */
    int budget = mst_f64_to_int_or(mst_cfg_num(p->config, "runtime.threads", 0), 0, 1 << 20, 0);
    int threads = budget > 0 && budget < cores ? budget : cores;
    /* the step's own trial may have kept the calling thread alone (summary.json step_threads,
     * runtime/graph/step_threads.h): the compute then runs on one thread whatever the budget says */
    const int ran_on = mst_f64_to_int_or(mst_cfg_num(env->summary, "step_threads", 0), 0, 1 << 20, 0);
    if (ran_on >= 1 && ran_on < threads) threads = ran_on;
    /* Workers beside a compute team of several threads on the same cores: a worker that preempts one
     * team thread stalls the whole region. On loader_starved (data 62% of the step, 2 cores, 5 runs
     * each alternated, docs/benchmarks.md) 2 workers beside 2 compute threads trained 1.13-1.36x as
     * fast as the synchronous loader, beside 1 compute thread 1.95x. Where the loader's work is at
     * least the compute part and needs two workers or more, a second compute core has nothing to
     * win while the loader needs it: the change then also puts the compute on one thread. One
     * worker keeps the compute's threads (subnormal_weights: 1.19-1.28x with them, 1.21-1.34x on
     * one thread, the same within the rounds' spread). */
    const bool one_compute = threads > 1 && want >= 2 && want + threads > cores && d >= 1.0 - d;
    double saved = one_compute ? loader_share_saved(d, (1.0 - d) * threads, cores - 1, 1, cores)
                               : loader_share_saved(d, 1.0 - d, want, threads, cores);
    double gain = loop_gain(p, env, saved);
    /* a high share (>= 20%) always gets its trial, as dispatch >= 10% does graph mode's: the
     * resolvable gain comes from three baseline runs, and one slow run among them (1.80 ms per update
     * against 1.34-1.41 on loader_starved) lifted it to 1.40x, over a 1.39x prediction; below, a
     * trial only where the prediction reaches what the trials resolve, else a finding */
    bool worth = d >= 0.20 || gain >= resolvable(env);
    mst_finding *f = add(s, "loader", worth ? MST_GOAL_SPEED : MST_GOAL_NONE);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "the step waits for data %.0f%% of the time (%s)", 100 * d,
             d >= 0.20 ? "high" : "moderate");
    const char *noun_s = want == 1 ? "" : "s", *verb_s = want == 1 ? "s" : "";     /* "1 worker keeps", "2 workers keep" */
    snprintf(f->evidence, sizeof(f->evidence),
             "data %.1f%% of the step (median over steps of each step's share; median step %.4g ms); data.num_workers %d, "
             "data.prefetch %d, %d cores; the loader's work on a batch is %.2fx the compute part, so %d worker%s keep%s "
             "pace; hiding the wait entirely would bound the gain at %.3fx on the step, but the worker%s share%s the cores "
             "with %d compute thread%s%s: the step's CPU work leaves %.3fx on the step, %.3fx on the training "
             "loop (%.4g ms, compiles included; the trials resolve %.3fx)%s", 100 * d, p->bd.wall_median_ns / 1e6, workers,
             prefetch, cores, pace, want, noun_s, verb_s, 1.0 / (1.0 - d), noun_s, verb_s, one_compute ? 1 : threads,
             one_compute || threads == 1 ? "" : "s",
             one_compute ? " (the loader's work is at least the compute part: the compute goes on one thread, its time counted "
                           "as if it had scaled perfectly over its threads, so that a worker never stalls a parallel region)"
                         : "",
             1.0 / (1.0 - saved), gain, 1000 * mst_cfg_num(env->summary, "train_loop_s", 0), resolvable(env),
             worth ? "" : ": not worth a trial");
    char v[32];
    snprintf(v, sizeof(v), "%d", want);
    add_set(f, "data.num_workers=%s", v);
    snprintf(v, sizeof(v), "%d", want_prefetch);
    add_set(f, "data.prefetch=%s", v);
    snprintf(f->change, sizeof(f->change), "data.num_workers %d -> %d, data.prefetch %d -> %d", workers, want, prefetch,
             want_prefetch);
    if (one_compute) {
        add_set(f, "runtime.threads=%s", "1");
        size_t used = strlen(f->change);
        snprintf(f->change + used, sizeof(f->change) - used, ", runtime.threads %d%s -> 1", budget,
                 budget > 0 ? "" : " (every core)");
    }
    f->predicted = gain;
    f->confidence = d >= 0.20 ? 0.8 : 0.5;
    f->score = f->predicted;
}

/* The half-precision CPU features the run recorded (summary.json "cpu": {"model", "features"}),
 * as text: only detected facts, never a fixed claim about the hardware. */
static void cpu_half_facts(const cJSON *summary, char *out, size_t n) {
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(summary, "cpu");
    const cJSON *feats = cJSON_GetObjectItemCaseSensitive(cpu, "features");
    if (!cJSON_IsArray(feats)) {
        snprintf(out, n, "CPU features not recorded");
        return;
    }
    static const char *const half[] = {"f16c", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "avx_vnni"};
    size_t len = 0;
    const char *model = mst_cfg_str(cpu, "model", "");
    len += (size_t)snprintf(out + len, n - len, "CPU %s: half-precision features", model[0] ? model : "(model not recorded)");
    int found = 0;
    for (size_t k = 0; k < sizeof(half) / sizeof(*half) && len < n; k++) {
        const cJSON *f;
        cJSON_ArrayForEach(f, feats)
            if (cJSON_IsString(f) && strcmp(f->valuestring, half[k]) == 0) {
                len += (size_t)snprintf(out + len, n - len, "%s%s", found++ ? ", " : " ", half[k]);
                break;
            }
    }
    if (!found && len < n) snprintf(out + len, n - len, " none detected (%d features recorded)", cJSON_GetArraySize(feats));
}

/* The AMP prediction from the calibration: each op's kernel time (p50 x calls) scaled by its
 * calibrated half/f32 ratio (1 where none was measured), plus the parameter casts and the loss
 * scaler's unscale pass O2 adds per step,
 * over the kernel time as it is; the rest of the step (dispatch, data, ...) stays as it is. Writes
 * the cited ratios (largest share of kernel time first) into cite. Returns the predicted speedup of
 * the step; *uncal gets the share of kernel time with no calibrated ratio. */
double mst_amp_predict(const rpt_profile *p, const mst_amp_calib *cal, double kernel_share, double *uncal, char *cite,
                       size_t n) {
    double t = 0, t2 = 0, none = 0;
    size_t len = 0;
    if (n) cite[0] = '\0';
    for (int i = 0; i < p->n_ops; i++) {
        double ti = op_typical_ns(&p->ops[i]);
        double r = mst_amp_calib_ratio(cal, p->ops[i].name, NULL);
        t += ti;
        if (isnan(r)) {
            none += ti;
            r = 1;
        }
        t2 += ti * r;
    }
    /* cite the ops in time order (p->ops is largest first), measured ones with their ratio */
    for (int i = 0, shown = 0; i < p->n_ops && len + 48 < n && shown < 8; i++) {
        int rows = 0;
        double r = mst_amp_calib_ratio(cal, p->ops[i].name, &rows);
        if (rows == 0) continue;
        len += (size_t)snprintf(cite + len, n - len, "%s%s %.2fx", shown++ ? ", " : "", p->ops[i].name, r);
    }
    int64_t steps = p->n_steps > 0 ? p->n_steps : p->bd.steps;
    if (cal->cast_ns > 0 && steps > 0) t2 += cal->cast_ns * (double)steps;
    /* the scaler unscales unless the job turned loss scaling off (auto is dynamic at O2) */
    if (cal->unscale_ns > 0 && steps > 0 && strcmp(mst_cfg_str(p->config, "amp.loss_scale.type", "auto"), "none") != 0)
        t2 += cal->unscale_ns * (double)steps;
    *uncal = t > 0 ? none / t : 1;
    if (!(t > 0)) return 1.0;
    double k = kernel_share > 0 && kernel_share <= 1 ? kernel_share : 1;
    return 1.0 / ((1 - k) + k * t2 / t);
}

/* O0 and GEMM/conv-dominated kernels: propose O2 with the half type the device handles best. The
 * prediction comes from the per-op rates calibrated on this machine (advisor/calibration.h); the
 * proposal stands whatever it predicts and the trial decides (docs/advisor.md says why). */
static void rule_amp_level(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    const char *level = mst_cfg_str(p->config, "amp.level", "O0");
    double k = step_share(p, MST_CAT_KERNEL), g = gemm_share_of_kernels(p);
    if (strcmp(level, "O0") != 0 || k < 0.5 || g < 0.5) return;
    mst_finding *f = add(s, "amp_level", MST_GOAL_SPEED);
    if (!f) return;
    const char *device = mst_cfg_str(p->config, "runtime.device", "cpu");
    /* bf16 on CPUs: f32's range (no loss scaling needed) and a conversion that is a shift */
    const char *half = strcmp(device, "cuda") == 0 ? "f16" : "bf16";
    /* the GEMMs' measured rate: FLOPs over p50 x calls */
    double flops = 0, ns = 0;
    for (int i = 0; i < p->n_ops; i++)
        if (is_gemm(p->ops[i].name) && p->ops[i].flops > 0) {
            flops += (double)p->ops[i].flops;
            ns += (double)p->ops[i].total_ns;
        }
    char facts[256];
    cpu_half_facts(env->summary, facts, sizeof(facts));
    snprintf(f->title, sizeof(f->title), "kernels are %.0f%% of the step, %.0f%% of them GEMM/conv, in f32", 100 * k,
             100 * g);
    int len = snprintf(f->evidence, sizeof(f->evidence),
                       "kernel %.1f%% of the step, matmul/linear/conv2d %.1f%% of kernel time (p50 x calls); their f32 rate %.3g "
                       "GFLOP/s; %s; ",
                       100 * k, 100 * g, ns > 0 ? flops / ns : 0, facts);
    add_set(f, "amp.level=%s", "O2");
    add_set(f, "amp.dtype=%s", half);
    snprintf(f->change, sizeof(f->change), "amp.level O0 -> O2 (%s)", half);
    const mst_amp_calib *cal = env->amp_calib;
    size_t left = len > 0 && (size_t)len < sizeof(f->evidence) ? sizeof(f->evidence) - (size_t)len : 0;
    if (!cal || (cal->n_measured + cal->n_cached) == 0) {
        if (left)
            snprintf(f->evidence + len, left, "no per-op calibration on this machine%s: no prediction, the trial measures",
                     cal ? " (no kernel call of the profile could be timed: profiler level below ops?)" : "");
        f->predicted = NAN;
        f->confidence = 0.2;
        f->score = 1.0;
        return;
    }
    char cite[400], src[640];
    double uncal;
    f->predicted = mst_amp_predict(p, cal, k, &uncal, cite, sizeof(cite));
    if (cal->n_measured > 0)
        snprintf(src, sizeof(src), "%d signatures measured now in %.1f s, %d from %s", cal->n_measured, cal->seconds, cal->n_cached,
                 cal->path[0] ? cal->path : "(no cache file)");
    else
        snprintf(src, sizeof(src), "%d signatures from %s", cal->n_cached, cal->path);
    if (left)
        snprintf(f->evidence + len, left,
                 "calibrated %s/f32 kernel time: %s; O2's parameter and gradient casts %.3g ms/step, its loss scaler's "
                 "unscale pass %.3g ms/step; %.0f%% of kernel time uncalibrated (x1); predicted %.3fx (%.200s)",
                 half, cite, cal->cast_ns / 1e6, cal->unscale_ns / 1e6, 100 * uncal, f->predicted, src);
    /* how far to trust it: isolated kernels, no fusion or memory effects; less when much is uncalibrated */
    f->confidence = uncal < 0.2 ? (f->predicted >= resolvable(env) ? 0.6 : 0.4) : 0.2;
    f->score = f->predicted;
}

/* O3 runs norms and the loss in half: correct to O2 (MindSpore's recommended level). */
static void rule_amp_o3(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    (void)env;
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
    /* the scale history: skips after the leading run (churn that persists), and the period of
     * the shrink cycles after it */
    int64_t later = 0, last_shrink = -1, n_periods = 0;
    double period_sum = 0;
    for (int64_t i = lead; i < p->n_steps; i++) {
        if (p->steps[i].overflow != 1) continue;
        later++;
        if (last_shrink >= 0) { period_sum += (double)(i - last_shrink); n_periods++; }
        last_shrink = i;
    }
    double later_frac = p->n_steps > lead ? (double)later / (double)(p->n_steps - lead) : 0;
    double window = mst_cfg_num(p->config, "amp.loss_scale.window", 2000);
    double factor = mst_cfg_num(p->config, "amp.loss_scale.factor", 2);
    if (skip_frac > 0.05 || lead >= 10 || falling) {
        mst_finding *f = add(s, "loss_scale", MST_GOAL_SPEED);
        if (!f) return;
        f->count = MST_COUNT_SKIPPED_STEPS;
        double init = mst_cfg_num(p->config, "amp.loss_scale.init", 16777216);
        double target = isfinite(final_scale) && final_scale >= 1 ? final_scale : init / 1024;
        bool dynamic = strcmp(type, "dynamic") == 0 || (strcmp(type, "auto") == 0 && strcmp(level, "O0") != 0);
        /* which knob: churn that persists after the start is the window (grows too soon) or the
         * factor (each grow overshoots); a long leading run alone is the initial scale */
        const char *knob = "init";
        if (dynamic && later_frac > 0.05 && window < 2000) knob = "window";
        else if (dynamic && later_frac > 0.05 && factor > 2) knob = "factor";
        snprintf(f->title, sizeof(f->title), "%.0f of %.0f steps skipped on overflow (%.0f%%): the %s is the cause", skipped, steps,
                 100 * skip_frac, strcmp(knob, "init") == 0 ? "initial scale" : strcmp(knob, "window") == 0 ? "growth window" : "growth factor");
        snprintf(f->evidence, sizeof(f->evidence),
                 "scale history: init %.4g, final %.4g; %.0f overflow steps, %.0f skipped; the first %lld steps skipped, then %lld "
                 "more skips (%.1f%% of the later steps); window %.0f, factor %.3g%s",
                 init, final_scale, overflow, skipped, (long long)lead, (long long)later, 100 * later_frac,
                 window, factor, falling ? "; still falling in the last quarter" : "");
        if (n_periods > 0) {
            size_t len = strlen(f->evidence);
            snprintf(f->evidence + len, sizeof(f->evidence) - len, "; mean period of the shrink cycles %.1f steps", period_sum / (double)n_periods);
        }
        char v[32];
        if (strcmp(knob, "window") == 0) {
            add_set(f, "amp.loss_scale.window=%s", "2000");
            f->keeps_step = true;
            snprintf(f->change, sizeof(f->change), "amp.loss_scale.window %.0f -> 2000 (MindSpore's and PyTorch's default)", window);
            f->predicted = later_frac < 0.99 ? 1.0 / (1.0 - later_frac) : 2.0;
        } else if (strcmp(knob, "factor") == 0) {
            add_set(f, "amp.loss_scale.factor=%s", "2");
            f->keeps_step = true;
            snprintf(f->change, sizeof(f->change), "amp.loss_scale.factor %.3g -> 2", factor);
            f->predicted = later_frac < 0.99 ? 1.0 / (1.0 - later_frac) : 2.0;
        } else {
            snprintf(v, sizeof(v), "%.17g", target);
            add_set(f, "amp.loss_scale.init=%s", v);
            if (strcmp(type, "auto") == 0 || strcmp(type, "none") == 0) add_set(f, "amp.loss_scale.type=%s", "dynamic");
            else f->keeps_step = true;      /* only the init changes; a new type could add the unscale and overflow checks */
            snprintf(f->change, sizeof(f->change), "amp.loss_scale.init %.4g -> %.4g (the scale the run settled at)", init, target);
            double lead_frac = steps > 0 ? (double)lead / steps : 0;
            f->predicted = lead_frac < 0.99 ? 1.0 / (1.0 - lead_frac) : 2.0;
        }
        f->confidence = 0.7;
        f->score = f->predicted;
        return;
    }
    /* underflow: f16 with no or a low fixed scale and a loss that does not move */
    bool low_fixed = strcmp(type, "none") == 0 || (strcmp(type, "auto") == 0 && strcmp(level, "O2") != 0) ||
                     (strcmp(type, "fixed") == 0 && mst_cfg_num(p->config, "amp.loss_scale.init", 1) <= 1024);
    if (!low_fixed || strcmp(half, "f16") != 0) return;
    double l0, l1;
    int64_t n_loss = loss_ends(p, &l0, &l1);
    double change = isfinite(l0) && l0 != 0 ? fabs(l1 - l0) / fabs(l0) : NAN;
    if (n_loss < 10 || !(change < 0.02)) return;
    mst_finding *f = add(s, "loss_scale_underflow", MST_GOAL_ACCURACY);
    if (!f) return;
    if (strcmp(type, "fixed") == 0)
        snprintf(f->title, sizeof(f->title), "the loss does not move under %s f16 with a fixed loss scale of %.3g", level,
                 mst_cfg_num(p->config, "amp.loss_scale.init", 1));
    else
        snprintf(f->title, sizeof(f->title), "the loss does not move under %s f16 without a loss scale", level);
    /* the underflow probe's measurement, when the run made one (summary.json grad_underflow) */
    double lost = mst_cfg_num(env->summary, "grad_underflow.fraction", NAN);
    char measured[200] = "";
    if (isfinite(lost))
        snprintf(measured, sizeof(measured), "; measured: %.2f%% of the gradient elements the f32 reference makes nonzero are "
                 "zero in f16 (%.0f sampled steps)", 100 * lost, mst_cfg_num(env->summary, "grad_underflow.sampled_steps", 0));
    snprintf(f->evidence, sizeof(f->evidence),
             "training loss %.6g -> %.6g (%.2f%% change) over %lld steps; amp %s f16, loss_scale.type %s: gradients "
             "below 6e-8 (f16's smallest subnormal) flush to zero%s",
             l0, l1, 100 * change, (long long)n_loss, level, type, measured);
    add_set(f, "amp.loss_scale.type=%s", "dynamic");
    add_set(f, "amp.loss_scale.init=%s", "16777216");
    snprintf(f->change, sizeof(f->change), "amp.loss_scale.type %s -> dynamic (init 2^24)", type);
    f->predicted = 1.0;
    f->confidence = 0.7;
    f->score = 4.0;
}

/* Partial underflow, measured (runtime/amp/underflow.h): at least 1% of the gradient elements
 * that the f32 reference backward makes nonzero are zero after the job's half-precision backward,
 * pooled over the probe's sampled steps, while the loss may still fall. Proposes dynamic scaling
 * from 2^24 (a fixed or no scale) or a higher initial scale (dynamic below 2^24); judged as an
 * accuracy fix. Runs after rule_loss_scale and stays quiet when that one already blamed the
 * scale (churn, or a loss that does not move): one finding per cause. */
#define UNDERFLOW_MATERIAL 0.01
static void rule_grad_underflow(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    double lost = mst_cfg_num(env->summary, "grad_underflow.fraction", NAN);
    if (!(lost >= UNDERFLOW_MATERIAL)) return;
    for (int i = 0; i < s->n; i++)
        if (strncmp(s->out[i].rule, "loss_scale", 10) == 0) return;
    double l0, l1;
    int64_t n_loss = loss_ends(p, &l0, &l1);
    const char *level = mst_cfg_str(p->config, "amp.level", "O0");
    const char *type = mst_cfg_str(p->config, "amp.loss_scale.type", "auto");
    const char *half = mst_cfg_str(env->summary, "grad_underflow.half", mst_cfg_str(p->config, "amp.dtype", "f16"));
    bool dynamic = strcmp(type, "dynamic") == 0 || (strcmp(type, "auto") == 0 && strcmp(level, "O2") == 0);
    double init = mst_cfg_num(p->config, "amp.loss_scale.init", 16777216);
    double final_scale = mst_cfg_num(env->summary, "loss_scale_final", NAN);
    bool fixable = !dynamic || init < 16777216;
    mst_finding *f = add(s, "grad_underflow", fixable ? MST_GOAL_ACCURACY : MST_GOAL_NONE);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "%.1f%% of the gradient elements flush to zero in %s (%s loss scale %.4g)", 100 * lost,
             half, dynamic ? "dynamic" : strcmp(type, "fixed") == 0 ? "fixed" : "no", dynamic || strcmp(type, "fixed") == 0 ? init : 1.0);
    snprintf(f->evidence, sizeof(f->evidence),
             "underflow probe on %.0f sampled steps (every %.0f): of %.0f gradient elements the f32 reference backward makes "
             "nonzero, %.0f (%.2f%%) are zero after the %s %s backward (largest sample %.2f%%, last %.2f%%); rounding the reference "
             "alone to %s zeroes %.2f%%; loss scale %s, init %.4g, final %.4g; training loss %.4g -> %.4g over %lld steps",
             mst_cfg_num(env->summary, "grad_underflow.sampled_steps", 0), mst_cfg_num(env->summary, "grad_underflow.every", 0),
             mst_cfg_num(env->summary, "grad_underflow.ref_nonzero", 0), mst_cfg_num(env->summary, "grad_underflow.half_zero", 0),
             100 * lost, level, half, 100 * mst_cfg_num(env->summary, "grad_underflow.fraction_max", lost),
             100 * mst_cfg_num(env->summary, "grad_underflow.fraction_last", lost), half,
             100 * mst_cfg_num(env->summary, "grad_underflow.cast_zero_fraction", 0), type, init, final_scale, l0, l1,
             (long long)n_loss);
    if (!dynamic) {
        add_set(f, "amp.loss_scale.type=%s", "dynamic");
        add_set(f, "amp.loss_scale.init=%s", "16777216");
        snprintf(f->change, sizeof(f->change), "amp.loss_scale.type %s -> dynamic (init 2^24)", type);
    } else if (init < 16777216) {
        add_set(f, "amp.loss_scale.init=%s", "16777216");
        f->keeps_step = true;
        snprintf(f->change, sizeof(f->change), "amp.loss_scale.init %.4g -> 2^24 (MindSpore's and PyTorch's default)", init);
    } else {
        snprintf(f->change, sizeof(f->change), "none (dynamic from %.4g already; the scale fell to %.4g on overflows)", init,
                 final_scale);
    }
    f->predicted = 1.0;
    f->confidence = 0.6;
    f->score = fixable ? 4.0 : 1.0;
}

/* More than one plan compiled: the last, smaller batch (or changing shapes) recompiles. */
static void rule_recompile(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    if (strcmp(mst_cfg_str(p->config, "runtime.mode", "eager"), "graph") != 0) return;
    double compiles = mst_cfg_num(env->summary, "compile_count", 0), compile_ms = mst_cfg_num(env->summary, "compile_ms", 0);
    if (compiles <= 1 || mst_cfg_num(p->config, "runtime.dynamic_batch", 0) != 0) return;
    mst_finding *f = add(s, "recompile", MST_GOAL_SPEED);
    if (!f) return;
    f->count = MST_COUNT_COMPILES;
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

/* Subnormal floats: a slow path on many CPUs (microcode assists), invisible in FLOP counts. Two
 * signals: the share of subnormal parameter values the run ended with (summary.json, counted),
 * and step time growing steadily across the run at unchanged shapes (the median of each quarter
 * of the profiled steps above the one before, the last >= 1.3x the first). Proposes
 * runtime.flush_denormals (FTZ/DAZ): it changes the numerics, so the trial checks accuracy.
 * Counted subnormals without a rise are weighed by what subnormal arithmetic costs on this CPU
 * (env->subnormal_penalty P, measured): with a share f of the values subnormal the kernels run
 * 1 + f (P - 1) times their flushed time, so flushing saves k (1 - 1 / (1 + f (P - 1))) of the
 * step (k its kernel share; f taken from the parameters or the last gradients, whichever holds
 * more) and the prediction is 1 over what is left; below what the trials resolve it stays a
 * finding (no trial). On this project's Zen 5 the penalty measures 1.5x (the update's AVX2 loop with
 * underflowing products; runtime/fpu.h), and the subnormal_weights scenario's prediction is ~1.02x
 * where its FTZ trials measured 1.02-1.05x per applied update: f counts the values already
 * subnormal, not the tiny normal ones whose products underflow in the update, so the prediction
 * is not an upper bound. */
static void rule_denormals(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    if (mst_cfg_num(p->config, "runtime.flush_denormals", 0) != 0) return;
    double frac = mst_cfg_num(env->summary, "subnormal_fraction.params", 0);
    double frac_grads = mst_cfg_num(env->summary, "subnormal_fraction.grads", 0);
    int64_t n = 0;
    for (int64_t i = 0; i < p->n_steps; i++) n += p->steps[i].used;
    double q[4] = {NAN, NAN, NAN, NAN}, kq[4] = {NAN, NAN, NAN, NAN};
    bool rising = n >= 20;
    for (int k = 0; k < 4 && n >= 20; k++) {
        q[k] = used_median_ms(p, n * k / 4, n * (k + 1) / 4);
        kq[k] = used_median_of(p, n * k / 4, n * (k + 1) / 4, MST_CAT_KERNEL);
        if (k > 0 && !(q[k] > q[k - 1])) rising = false;
    }
    double growth = rising ? q[3] / q[0] : NAN;
    /* the kernels slow (their GFLOP/s collapse at the step's unchanged FLOPs) and carry most of
     * the step's growth: a rise in dispatch, data or other time is not arithmetic on subnormals */
    bool kernels_slow = rising && kq[0] > 0 && kq[3] / kq[0] >= 1.3 && kq[3] - kq[0] >= 0.5 * (q[3] - q[0]);
    bool slowing = rising && growth >= 1.3 && kernels_slow;
    if (!(frac >= 1e-3) && !slowing) return;
    /* counted only: the most flushing can save on this CPU */
    double penalty = env->subnormal_penalty, k = step_share(p, MST_CAT_KERNEL);
    bool weighed = !slowing && penalty > 0 && isfinite(penalty);
    double share = fmin(1, fmax(frac, frac_grads)), bound = NAN;
    if (weighed) {
        double slow = 1 + share * (penalty > 1 ? penalty - 1 : 0);
        bound = 1 / (1 - (k > 0 && k <= 1 ? k : 1) * (1 - 1 / slow));
    }
    bool worth = !weighed || bound >= resolvable(env);
    mst_finding *f = add(s, "denormals", worth ? MST_GOAL_SPEED : MST_GOAL_NONE);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "%s",
             slowing ? "step time grows across the run at unchanged shapes: subnormal floats"
             : worth ? "the parameters hold subnormal floats"
                     : "the parameters hold subnormal floats, which cost little on this CPU");
    char cost[512] = " (no steady rise: the cost on this CPU, if any, is left to the trial)";
    if (weighed)
        snprintf(cost, sizeof(cost),
                 " (no steady rise); an update's arithmetic underflowing into subnormals measured %.3gx normal on this "
                 "CPU (%s pass), so flushing %.2f%% subnormal values in kernels %.0f%% of the step gains about %.3fx (the "
                 "values already subnormal only: tiny normal ones that underflow in the update are not counted; the "
                 "trials resolve %.3fx)%s",
                 penalty, env->subnormal_pass ? env->subnormal_pass : "an update-like", 100 * share,
                 100 * (k > 0 && k <= 1 ? k : 1), bound, resolvable(env), worth ? "" : ": not worth a trial");
    snprintf(f->evidence, sizeof(f->evidence),
             "%.2f%% of the parameter values are subnormal at the end of the run; median step per quarter of the %lld profiled "
             "steps %.4g, %.4g, %.4g, %.4g ms (kernel time %.4g, %.4g, %.4g, %.4g ms)%s; %.2f%% of the last gradients "
             "subnormal; runtime.flush_denormals false",
             100 * frac, (long long)n, q[0], q[1], q[2], q[3], kq[0], kq[1], kq[2], kq[3],
             slowing ? " (rising steadily)" : cost, 100 * frac_grads);
    add_set(f, "runtime.flush_denormals=%s", "true");
    snprintf(f->change, sizeof(f->change), "runtime.flush_denormals false -> true (FTZ/DAZ)");
    /* flushing brings every step back to the first quarter's speed: the run's time over that */
    double sum = 0;
    for (int64_t i = 0; i < p->n_steps; i++)
        if (p->steps[i].used) sum += p->steps[i].wall_ms;
    f->predicted = slowing && q[0] > 0 ? sum / ((double)n * q[0]) : weighed ? bound : NAN;
    /* a rise with no subnormal counted in the parameters or the gradients is timing alone (other
     * load, a sanitizer's growing heap): still proposed, for the trial to decide, but ranked below
     * the findings that rest on counts */
    bool counted = frac > 0 || frac_grads > 0;
    /* counted and weighed by the measured penalty: ranked by its prediction */
    f->confidence = slowing && counted ? 0.6 : weighed ? 0.5 : 0.3;
    f->score = (slowing && counted) || weighed ? f->predicted : 1.01;
}

/* Findings only: memory headroom and batch size change the optimization problem, never applied. */
static void rule_memory_and_batch(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    double peak = mst_cfg_num(env->summary, "peak_memory_bytes", 0);
    int64_t batch = p->batch_size;
    const double d = dispatch_share_net(p, NULL);
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

/* Every rule, in the order they run: what each reads, its thresholds and their sources are in
 * docs/advisor.md's table, row for row; the change and prediction are in the function. */
/* ---- data parallelism (docs/distributed.md): summary.json's "distributed" object ---- */

typedef struct {
    int ranks, buckets, slowest;
    double step_ms, exposed_ms, share;  /* share: exposed comm / step */
    double grad_mb, imbalance;
    bool flagged, overlap;
    int batch;
} dp_facts;

static dp_facts dp_read(const rpt_profile *p, const mst_rule_env *env) {
    dp_facts d = {0};
    const cJSON *sum = env->summary;
    d.ranks = mst_f64_to_int_or(mst_cfg_num(sum, "distributed.ranks", 1), 1, 1 << 20, 1);
    d.buckets = mst_f64_to_int_or(mst_cfg_num(sum, "distributed.buckets", 0), 0, 1 << 20, 0);
    d.slowest = mst_f64_to_int_or(mst_cfg_num(sum, "distributed.slowest_rank", 0), 0, 1 << 20, 0);
    d.step_ms = mst_cfg_num(sum, "step_time_ms_median", 0);
    d.exposed_ms = mst_cfg_num(sum, "distributed.comm_exposed_ms_median", 0);
    d.share = d.step_ms > 0 ? d.exposed_ms / d.step_ms : 0;
    d.grad_mb = mst_cfg_num(sum, "distributed.grad_bytes_per_step", 0) / 1048576.0;
    d.imbalance = mst_cfg_num(sum, "distributed.imbalance", 0);
    d.flagged = mst_cfg_num(sum, "distributed.imbalance_flagged", 0) != 0;
    d.overlap = mst_cfg_num(p->config, "runtime.comm.overlap", 1) != 0;
    d.batch = mst_f64_to_int_or(mst_cfg_num(p->config, "data.batch_size", 0), 0, 1 << 30, 0);
    return d;
}

/* Exposed all-reduce with overlap off: start the buckets during backward. The last bucket (the
 * first layers' gradients) is complete only when backward ends, so of nb buckets at most
 * (nb - 1) / nb of the exposed time can hide; predicted as half of that (on a CPU the transfer's
 * copies run in the main thread's polls, docs/distributed.md). With one bucket nothing can start
 * early: the same change quarters the buckets. */
static void rule_comm_overlap(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    dp_facts d = dp_read(p, env);
    if (d.ranks < 2 || d.overlap || d.share < 0.10) return;
    mst_finding *f = add(s, "comm_overlap", MST_GOAL_SPEED);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "the step waits %.0f%% of its time on the gradient all-reduce", 100 * d.share);
    snprintf(f->evidence, sizeof(f->evidence),
             "%d ranks; exposed comm %.3f ms of a %.3f ms median step; %d bucket(s) of %.2f MiB of gradients in all; "
             "runtime.comm.overlap false", d.ranks, d.exposed_ms, d.step_ms, d.buckets, d.grad_mb);
    add_set(f, "runtime.comm.overlap=%s", "true");
    snprintf(f->change, sizeof(f->change), "runtime.comm.overlap false -> true");
    int nb = d.buckets > 1 ? d.buckets : 1;
    if (nb == 1 && d.grad_mb > 0) {
        char v[32];
        snprintf(v, sizeof(v), "%.3g", d.grad_mb / 4 > 0.01 ? d.grad_mb / 4 : 0.01);
        add_set(f, "runtime.comm.bucket_mb=%s", v);
        snprintf(f->change, sizeof(f->change), "runtime.comm.overlap false -> true, runtime.comm.bucket_mb %g -> %s (4 buckets)",
                 mst_cfg_num(p->config, "runtime.comm.bucket_mb", 25), v);
        nb = 4;
    }
    f->predicted = 1.0 / (1.0 - d.share * (1.0 - 1.0 / nb) / 2);
    f->confidence = 0.4;
    f->score = f->predicted;
}

/* Overlap on, but one bucket: nothing can start before backward ends. Quarter buckets. */
static void rule_comm_bucket(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    dp_facts d = dp_read(p, env);
    if (d.ranks < 2 || !d.overlap || d.share < 0.10 || d.buckets > 1 || !(d.grad_mb > 0)) return;
    mst_finding *f = add(s, "comm_bucket", MST_GOAL_SPEED);
    if (!f) return;
    double want = d.grad_mb / 4 > 0.01 ? d.grad_mb / 4 : 0.01;
    double cur = mst_cfg_num(p->config, "runtime.comm.bucket_mb", 25);
    snprintf(f->title, sizeof(f->title), "one gradient bucket: its all-reduce cannot start before backward ends");
    snprintf(f->evidence, sizeof(f->evidence),
             "%d ranks; exposed comm %.3f ms of a %.3f ms median step (%.0f%%); %.2f MiB of gradients in 1 bucket "
             "(runtime.comm.bucket_mb %g)", d.ranks, d.exposed_ms, d.step_ms, 100 * d.share, d.grad_mb, cur);
    char v[32];
    snprintf(v, sizeof(v), "%.3g", want);
    add_set(f, "runtime.comm.bucket_mb=%s", v);
    snprintf(f->change, sizeof(f->change), "runtime.comm.bucket_mb %g -> %s (4 buckets)", cur, v);
    f->predicted = 1.0 / (1.0 - d.share / 4);
    f->confidence = 0.3;
    f->score = f->predicted;
}

/* Overlap on, several buckets, and the exposed all-reduce still visible: the transfers move only
 * inside the main thread's MPI calls (its polls run their copies), so hand them to a progress
 * thread (runtime.comm.progress_thread) — only where each rank has a core to spare for it beyond
 * its compute threads (runtime.threads, 0 = every core, split over the ranks). Predicted as the
 * overlap rule: the last bucket stays exposed, half of the rest hidden. */
static void rule_comm_progress(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    dp_facts d = dp_read(p, env);
    if (d.ranks < 2 || !d.overlap || d.buckets < 2 || d.share < 0.10) return;
    if (mst_cfg_num(p->config, "runtime.comm.progress_thread", 0) != 0) return;
    const int cores = env->n_cores > 0 ? env->n_cores : 1;
    const int budget = mst_f64_to_int_or(mst_cfg_num(p->config, "runtime.threads", 0), 0, 1 << 20, 0);
    const int per_rank = (budget > 0 ? budget : cores) / d.ranks > 1 ? (budget > 0 ? budget : cores) / d.ranks : 1;
    if (d.ranks * (per_rank + 1) > cores) return;       /* no spare core: the thread would take backward's */
    mst_finding *f = add(s, "comm_progress", MST_GOAL_SPEED);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "the all-reduce moves only when the main thread polls it: give it a thread");
    snprintf(f->evidence, sizeof(f->evidence),
             "%d ranks x %d compute thread%s on %d cores; overlap on, %d bucket%s; exposed comm %.3f ms of a %.3f ms median "
             "step (%.0f%%); runtime.comm.progress_thread false", d.ranks, per_rank, per_rank == 1 ? "" : "s", cores, d.buckets,
             d.buckets == 1 ? "" : "s", d.exposed_ms, d.step_ms, 100 * d.share);
    add_set(f, "runtime.comm.progress_thread=%s", "true");
    snprintf(f->change, sizeof(f->change), "runtime.comm.progress_thread false -> true");
    f->predicted = 1.0 / (1.0 - d.share * (1.0 - 1.0 / d.buckets) / 2);
    f->confidence = 0.3;
    f->score = f->predicted;
}

/* Processes vs threads on this machine, with the same global batch either way (the same
 * training): many ranks whose step is mostly all-reduce -> one process with the whole thread
 * budget; one process whose step is mostly eager dispatch (one thread's work) -> two ranks, each
 * dispatching half the batch. */
static void rule_procs_threads(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    dp_facts d = dp_read(p, env);
    char v[32];
    if (d.ranks >= 2 && d.share >= 0.25 && d.batch > 0) {
        mst_finding *f = add(s, "procs_threads", MST_GOAL_SPEED);
        if (!f) return;
        snprintf(f->title, sizeof(f->title), "%d ranks spend %.0f%% of the step in all-reduce: try one process", d.ranks,
                 100 * d.share);
        snprintf(f->evidence, sizeof(f->evidence),
                 "exposed comm %.3f ms of a %.3f ms median step; %d ranks x batch %d; one process with batch %d and the "
                 "same thread budget trains the same global batch without the all-reduce", d.exposed_ms, d.step_ms, d.ranks,
                 d.batch, d.batch * d.ranks);
        add_set(f, "--nproc=%s", "1");
        snprintf(v, sizeof(v), "%d", d.batch * d.ranks);
        add_set(f, "data.batch_size=%s", v);
        snprintf(f->change, sizeof(f->change), "%d ranks x batch %d -> 1 process x batch %d", d.ranks, d.batch, d.batch * d.ranks);
        f->predicted = 1.0 / (1.0 - d.share);
        f->confidence = 0.5;
        f->score = f->predicted;
        return;
    }
    double disp_recorded;
    const double disp = dispatch_share_net(p, &disp_recorded);
    const char *mode = mst_cfg_str(p->config, "runtime.mode", "eager");
    if (d.ranks == 1 && env->mpi_available && env->n_cores >= 2 && strcmp(mode, "eager") == 0 && disp >= 0.30 && d.batch >= 4 &&
        d.batch % 2 == 0) {
        mst_finding *f = add(s, "procs_threads", MST_GOAL_SPEED);
        if (!f) return;
        snprintf(f->title, sizeof(f->title), "eager dispatch (one thread's work) is %.0f%% of the step: try 2 ranks", 100 * disp);
        snprintf(f->evidence, sizeof(f->evidence),
                 "dispatch %.1f%% of the step net of the recorder's own time in it (%.1f%% as recorded); %d cores; 1 process "
                 "x batch %d -> 2 ranks x batch %d (the same global batch), each dispatching half the ops' work on its own core",
                 100 * disp, 100 * disp_recorded, env->n_cores, d.batch, d.batch / 2);
        add_set(f, "--nproc=%s", "2");
        snprintf(v, sizeof(v), "%d", d.batch / 2);
        add_set(f, "data.batch_size=%s", v);
        snprintf(f->change, sizeof(f->change), "1 process x batch %d -> 2 ranks x batch %d", d.batch, d.batch / 2);
        f->predicted = 1.0 / (1.0 - disp / 2);
        f->confidence = 0.3;
        f->score = f->predicted;
    }
}

/* A rank slower than the others beyond 5% (msprof-analyze's threshold): every rank waits for it
 * at each all-reduce. No job key fixes a slow machine or a noisy neighbour: a finding only. */
static void rule_slow_rank(const rpt_profile *p, const mst_rule_env *env, sink *s) {
    dp_facts d = dp_read(p, env);
    if (d.ranks < 2 || !d.flagged) return;
    mst_finding *f = add(s, "slow_rank", MST_GOAL_NONE);
    if (!f) return;
    snprintf(f->title, sizeof(f->title), "rank %d is the slowest: step-time imbalance %.0f%% across %d ranks", d.slowest,
             100 * d.imbalance, d.ranks);
    snprintf(f->evidence, sizeof(f->evidence),
             "(max - min) / mean of the ranks' median step times %.1f%% (flagged above 5%%); every all-reduce waits for "
             "rank %d: check its cores (other load, binding) or its data", 100 * d.imbalance, d.slowest);
    snprintf(f->change, sizeof(f->change), "none (a finding: the machine, not the job)");
    f->score = 1.0;
}

typedef struct {
    const char *name;           /* the finding's rule name (loss_scale also reports loss_scale_underflow) */
    const char *trigger;        /* one line: what makes it fire */
    void (*fn)(const rpt_profile *p, const mst_rule_env *env, sink *s);
} rule_entry;

static const rule_entry k_rules[] = {
    {"amp_o3_norms", "amp.level O3", rule_amp_o3},
    {"loss_scale", "skips > 5%, >= 10 leading skips, a falling scale; or f16 with a low fixed scale and a flat loss",
     rule_loss_scale},
    {"grad_underflow", ">= 1% of the gradient elements nonzero in the f32 reference are zero in half (underflow probe)",
     rule_grad_underflow},
    {"graph_mode", "eager, dispatch (net of the recorder's own time) >= 10% or 1/(1-d) above the resolvable gain",
     rule_graph_mode},
    {"loader", "data >= 5% or 1/(1-d) above the resolvable gain, workers under ceil(d/(1-d) - 1/4) <= cores (two or more "
               "workers, data >= compute beside a multi-thread compute: also runtime.threads 1)", rule_loader},
    {"amp_level", "O0, kernel >= 50%, GEMM/conv >= 50% of kernel time", rule_amp_level},
    {"recompile", "graph mode, > 1 compile, no dynamic batch", rule_recompile},
    {"denormals", ">= 0.1% subnormal parameters (a trial when 1/(1 - k (1 - 1/(1 + f (P - 1)))) reaches the resolvable gain), "
                  "or step time rising every quarter to >= 1.3x", rule_denormals},
    {"memory_headroom", "peak < 25% of memory; batch_size: batch < 64 and dispatch >= 10%", rule_memory_and_batch},
    {"comm_overlap", "ranks > 1, exposed comm >= 10% of the step, overlap off (one bucket: also quarter them)", rule_comm_overlap},
    {"comm_bucket", "ranks > 1, exposed comm >= 10%, overlap on, one bucket", rule_comm_bucket},
    {"comm_progress", "ranks > 1, exposed comm >= 10%, overlap on, >= 2 buckets, a spare core per rank", rule_comm_progress},
    {"procs_threads", "ranks > 1 and exposed comm >= 25%; or 1 rank, eager, dispatch >= 30%, >= 2 cores, MPI", rule_procs_threads},
    {"slow_rank", "ranks > 1, step-time imbalance (max - min) / mean > 5%", rule_slow_rank},
};

static int by_score(const void *a, const void *b) {
    const mst_finding *x = a, *y = b;
    return (x->score < y->score) - (x->score > y->score);
}

int mst_advisor_diagnose(const rpt_profile *p, const mst_rule_env *env, mst_finding *out, int cap) {
    sink s = {out, 0, cap};
    for (size_t i = 0; i < sizeof(k_rules) / sizeof(k_rules[0]); i++) k_rules[i].fn(p, env, &s);
    qsort(out, (size_t)s.n, sizeof(*out), by_score);
    return s.n;
}
