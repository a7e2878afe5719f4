/* verdict.c — accept or reject a trial against the baseline, with the reason in words.
 *
 * Speed is the time to do the same training work: the training loop's wall time (every step,
 * compiles and data waits included) per APPLIED optimizer update — a recompile shows in it, and a
 * step the loss scaler skipped did all the work of a step and moved nothing. The run is the unit:
 * each run contributes one figure, and the speedup is the Hodges–Lehmann estimate between the
 * groups' log figures with its Moses interval — with three runs each, a lower bound above 1 means
 * every trial run beat every baseline run (p = 0.05). The per-step median is the secondary figure,
 * and a speed change must beat the baseline in it too (a loop total carries any preempted step
 * of a loaded machine; the median does not). Deterministic effects (skipped steps, compiles) are
 * judged as exact counts, with the time only required not to be worse beyond noise.
 *
 * The quality side is the job's metric (summary.json "metric": accuracy, PSNR, ...), turned into a
 * gain in its own unit so that > 0 is better: accuracy in percentage points, PSNR in dB, and the
 * sign flipped for a lower-is-better metric; the tolerance is in that unit. Runs whose summary has
 * no metric (older files, unit tests) fall back to val_accuracy.
 *
 * Accuracy: the runs of both sides use the same K seeds, so run i of the trial is paired with the
 * baseline's run at the same seed; the mean paired difference gets a t interval
 * (mst_stats_mean_interval: GSL's quantile, K - 1 degrees of freedom) and is tested for non-inferiority against the tolerance: the lower
 * bound must be above -tolerance. When it is not, but the mean is, the seeds do not resolve the
 * question: the verdict is "cannot verify", with the baseline's seed spread, instead of accepting. */
#include "advisor/finding.h"
#include "advisor/trial.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/stats.h"

/* What a trial can resolve within the budget (the rules propose a change whose predicted gain
 * reaches it). K-vs-K runs resolve a gain only when every trial run beats every baseline run, so
 * not one below the baseline's spread (max / min of its per-step medians: the loop totals carry
 * preempted steps of a loaded machine, which says nothing about what a change can gain). An
 * unresolved trial gets more looks (advise.c's extend_trial: mst_trial_look_runs a side), and an
 * interval narrows as the square root of the runs: at N runs a side the spread's excess over 1
 * counts sqrt(K / N) times, N the largest look the budget leaves room for after the baseline (at
 * its runs' mean wall time, both sides growing). Judged on the K runs alone, low_dispatch's graph
 * mode (~6% dispatch, 1.06x predicted, accepted at 1.28x when tried) was proposed in 1 of 3
 * advise runs: three runs' spread read 1.05x, 1.08x and 1.20x. The verdict accepts a speed change
 * when its interval's lower bound reaches the minimum effect, so a trial resolves the gain that
 * clears the minimum effect by the interval's reach below its estimate: the two multiply. Taking
 * the larger of the two (what matched the earlier rule, a lower bound above 1 and an estimate at
 * the minimum effect) proposed subnormal_weights' graph mode at 1.027x predicted against 1.020x
 * resolvable, and its trials, 1.01-1.045x per applied update, were accepted in 1 or 2 of 3 advise
 * runs (docs/benchmarks.md, 2026-12-06). */
double mst_verdict_resolvable(const mst_trial_set *base, int repeats, double left_min, double min_speedup) {
    double lo_t = INFINITY, hi_t = 0;
    for (int i = 0; i < base->n_runs; i++) {
        const mst_run_result *r = &base->runs[i];
        double t = r->step_ms;
        if (!r->ok || !(t > 0)) continue;
        lo_t = fmin(lo_t, t);
        hi_t = fmax(hi_t, t);
    }
    if (!isfinite(lo_t) || !(hi_t > 0)) return min_speedup;       /* no run measured */
    const double run_min = base->n_runs > 0 ? base->wall_s / base->n_runs / 60 : 0;
    int n = repeats;
    for (int look = 1; look <= MST_TRIAL_MAX_LOOKS; look++) {
        const int target = mst_trial_look_runs(repeats, look);
        if (2.0 * (target - repeats) * run_min > left_min) break;
        n = target;
    }
    return min_speedup * (1 + (hi_t / lo_t - 1) * sqrt((double)repeats / n));
}

const char *mst_verdict_name(mst_verdict_kind k) {
    return k == MST_VERDICT_ACCEPTED ? "accepted" : k == MST_VERDICT_REJECTED ? "rejected"
                                                : k == MST_VERDICT_CANNOT_VERIFY ? "cannot verify" : "not run";
}

/* How far the machine's speed can move between two blocks of runs minutes apart: this project's
 * VMs moved by 20-40% between minutes (docs/benchmarks.md), so a first look up to 1.4x slower
 * than its baseline may be drift and is confirmed in turns before it stands. */
static const double k_machine_drift = 1.4;

/* The metric's unit for its tolerance, and its scale from the summary's value (accuracy is 0..1). */
static const struct { const char *name, *unit; double scale; } metric_units[] = {
    {"accuracy", "pp", 100},
    {"psnr", "dB", 1},
};

static void metric_unit(const char *name, const char **unit, double *scale) {
    for (size_t i = 0; i < sizeof(metric_units) / sizeof(metric_units[0]); i++)
        if (strcmp(name, metric_units[i].name) == 0) {
            *unit = metric_units[i].unit;
            *scale = metric_units[i].scale;
            return;
        }
    *unit = "";
    *scale = 1;
}

/* The run's metric as a signed figure in the tolerance's unit (higher = better); NAN if not
 * evaluated. name: the metric's name. */
static double run_gain(const mst_run_result *r, const char **name) {
    const char *unit;
    double scale;
    if (!r->metric_name[0]) {                       /* no "metric" in the summary: accuracy */
        *name = "accuracy";
        return r->val_accuracy >= 0 ? 100 * r->val_accuracy : NAN;
    }
    *name = r->metric_name;
    metric_unit(r->metric_name, &unit, &scale);
    return isfinite(r->metric) ? (r->metric_higher_is_better ? 1 : -1) * scale * r->metric : NAN;
}

typedef enum { V_LOG_UPDATE, V_LOG_STEP, V_ACC, V_MEM, V_COUNT_SKIPPED, V_COUNT_COMPILES } what;

static double value_of(const mst_run_result *r, what w) {
    switch (w) {
    case V_LOG_UPDATE: return log(!isnan(r->ms_per_update) ? r->ms_per_update : r->effective_step_ms);
    case V_LOG_STEP: return log(r->step_ms);
    case V_ACC: return r->val_accuracy >= 0 ? r->val_accuracy : NAN;
    case V_MEM: return r->peak_memory_bytes;
    case V_COUNT_SKIPPED: return (double)r->skipped_steps;
    case V_COUNT_COMPILES: return (double)r->compile_count;
    }
    return NAN;
}

/* The finite values of the runs that completed (out NULL: only their count); turns (may be NULL):
 * each value's run's turn. */
static int ok_values_in(const mst_trial_set *t, what w, double *out, int *turns) {
    int n = 0;
    for (int i = 0; i < t->n_runs; i++) {
        if (!t->runs[i].ok) continue;
        double v = value_of(&t->runs[i], w);
        if (!isfinite(v)) continue;
        if (turns) turns[n] = t->runs[i].turn;
        if (out) out[n] = v;
        n++;
    }
    return n;
}

static int ok_values(const mst_trial_set *t, what w, double *out) { return ok_values_in(t, w, out, NULL); }

/* The shift of the trial's values against the baseline's: within turns once the trial was extended
 * and every trial value has baseline values of its own turn (the extension's runs alternated with
 * them, so drift between turns cancels), else pooled. *in_turns (when not NULL) says which. */
static int speed_shift(const mst_trial_set *base, const mst_trial_set *trial, what w, double conf, mst_shift *s,
                       bool *in_turns) {
    double bt[MST_TRIAL_MAX_RUNS], tt[MST_TRIAL_MAX_RUNS];
    int bturn[MST_TRIAL_MAX_RUNS], tturn[MST_TRIAL_MAX_RUNS];
    int nb = ok_values_in(base, w, bt, bturn), nt = ok_values_in(trial, w, tt, tturn);
    if (in_turns) *in_turns = false;
    if (nb == 0 || nt == 0) return -1;
    bool extended = false, partnered = true;
    for (int j = 0; j < nt; j++) {
        bool has = false;
        for (int i = 0; i < nb && !has; i++) has = bturn[i] == tturn[j];
        partnered &= has;
        extended |= tturn[j] != 0;
    }
    if (extended && partnered && mst_stats_hodges_lehmann_strata(bt, bturn, nb, tt, tturn, nt, conf, s) == 0) {
        if (in_turns) *in_turns = true;
        return 0;
    }
    return mst_stats_hodges_lehmann(bt, nb, tt, nt, conf, s);
}

static const char *first_error(const mst_trial_set *t) {
    for (int i = 0; i < t->n_runs; i++)
        if (!t->runs[i].ok) return t->runs[i].error[0] ? t->runs[i].error : "the run failed";
    return "no run completed";
}

/* Metric gains paired by seed (trial - baseline, in the metric's unit, > 0 better); the baseline's
 * seed spread; *name: the metric's name (the baseline's first evaluated run; "accuracy" if none). */
static int paired_metric(const mst_trial_set *base, const mst_trial_set *trial, double *d, double *spread, const char **name) {
    int n = 0;
    double lo = INFINITY, hi = -INFINITY;
    *name = NULL;
    for (int i = 0; i < base->n_runs; i++) {
        const mst_run_result *b = &base->runs[i];
        const char *bn, *tn;
        double bg = b->ok ? run_gain(b, &bn) : NAN;
        if (isnan(bg)) continue;
        if (!*name) *name = bn;
        lo = fmin(lo, bg);
        hi = fmax(hi, bg);
        for (int j = 0; j < trial->n_runs; j++) {
            const mst_run_result *t = &trial->runs[j];
            double tg = t->ok && t->seed == b->seed ? run_gain(t, &tn) : NAN;
            if (!isnan(tg) && strcmp(tn, bn) == 0) {
                d[n++] = tg - bg;
                break;
            }
        }
    }
    if (!*name) {
        *name = "accuracy";
        for (int i = 0; i < base->n_runs; i++)
            if (base->runs[i].metric_name[0]) *name = base->runs[i].metric_name;
    }
    *spread = hi >= lo ? hi - lo : NAN;
    return n;
}

void mst_verdict_decide(const mst_trial_set *base, const mst_trial_set *trial, int goal, mst_count_kind count,
                        double tolerance, double min_speedup, double confidence, mst_verdict *v) {
    mst_verdict_decide_at(base, trial, goal, count, tolerance, min_speedup, confidence, confidence, v);
}

void mst_verdict_decide_at(const mst_trial_set *base, const mst_trial_set *trial, int goal, mst_count_kind count,
                           double tolerance, double min_speedup, double confidence, double speed_confidence, mst_verdict *v) {
    double tolerance_pp = tolerance;      /* in the metric's unit (the name kept from accuracy-only days) */
    memset(v, 0, sizeof(*v));
    v->speed_confidence = speed_confidence;
    v->baseline_runs = base->n_runs;
    v->trial_runs = trial->n_runs;
    v->kind = MST_VERDICT_REJECTED;
    v->speedup = v->ci_low = v->ci_high = v->accuracy_delta_pp = v->memory_delta_bytes = v->memory_ratio = NAN;
    v->accuracy_ci_low = v->accuracy_ci_high = v->seed_spread_pp = v->step_speedup = NAN;
    v->count = count;
    v->count_base = v->count_trial = NAN;
    int nb = ok_values(base, V_LOG_UPDATE, NULL), nt = ok_values(trial, V_LOG_UPDATE, NULL);   /* speed_shift gathers them */
    bool failed = false, in_turns = false;
    for (int i = 0; i < trial->n_runs; i++) failed |= !trial->runs[i].ok;
    if (nt == 0 || failed) {
        snprintf(v->reason, sizeof(v->reason), "the trial failed (%s): rejected", first_error(trial));
        return;
    }
    if (nb == 0) {
        snprintf(v->reason, sizeof(v->reason), "no baseline run to compare with: rejected");
        return;
    }
    mst_shift s;
    if (speed_shift(base, trial, V_LOG_UPDATE, speed_confidence, &s, &in_turns) == 0) {
        v->speedup = exp(-s.estimate);
        v->ci_low = s.bounded ? exp(-s.hi) : NAN;
        v->ci_high = s.bounded ? exp(-s.lo) : NAN;
    }
    v->in_turns = in_turns;
    /* the per-step median: secondary, and robust to one preempted step that a loop total is not */
    double step_ci_low = NAN;
    if (speed_shift(base, trial, V_LOG_STEP, speed_confidence, &s, NULL) == 0) {
        v->step_speedup = exp(-s.estimate);
        step_ci_low = s.bounded ? exp(-s.hi) : NAN;
    }

    /* accuracy: mean paired difference, its t interval, the seed spread */
    double d[MST_TRIAL_MAX_RUNS];
    const char *mname, *u;
    double scale;
    int np = paired_metric(base, trial, d, &v->seed_spread_pp, &mname);
    metric_unit(mname, &u, &scale);
    snprintf(v->metric_name, sizeof(v->metric_name), "%s", mname);
    snprintf(v->metric_unit, sizeof(v->metric_unit), "%s", u);
    v->accuracy_pairs = np;
    if (np > 0) {
        v->accuracy_delta_pp = mst_stats_mean(d, np);
        mst_stats_mean_interval(d, np, confidence, &v->accuracy_ci_low, &v->accuracy_ci_high);     /* np >= 2 */
    }
    double bm[MST_TRIAL_MAX_RUNS], tm[MST_TRIAL_MAX_RUNS];
    int nbm = ok_values(base, V_MEM, bm), ntm = ok_values(trial, V_MEM, tm);
    if (nbm > 0 && ntm > 0) {
        double b = mst_stats_median(bm, nbm), t = mst_stats_median(tm, ntm);
        v->memory_delta_bytes = t - b;
        v->memory_ratio = b > 0 ? t / b : NAN;
    }
    /* the exact count: fewer in every trial run than in every baseline run */
    bool count_fewer = false;
    if (count != MST_COUNT_NONE) {
        what w = count == MST_COUNT_SKIPPED_STEPS ? V_COUNT_SKIPPED : V_COUNT_COMPILES;
        int nbc = ok_values(base, w, bm), ntc = ok_values(trial, w, tm);
        if (nbc > 0 && ntc > 0) {
            v->count_base = mst_stats_median(bm, nbc);
            v->count_trial = mst_stats_median(tm, ntc);
            double bmin = INFINITY, tmax = -INFINITY;
            for (int i = 0; i < nbc; i++) bmin = fmin(bmin, bm[i]);
            for (int i = 0; i < ntc; i++) tmax = fmax(tmax, tm[i]);
            count_fewer = tmax < bmin;
        }
    }

    char speed[128], acc[200], mem[64], cnt[96] = "";
    if (isnan(v->ci_low)) snprintf(speed, sizeof(speed), "%.3fx per applied update (too few runs for an interval)", v->speedup);
    else snprintf(speed, sizeof(speed), "%.3fx per applied update%s (%.0f%% interval %.3f-%.3f; per-step median %.3fx)", v->speedup,
                  in_turns ? " within turns" : "", 100 * speed_confidence, v->ci_low, v->ci_high, v->step_speedup);
    const char *un = u[0] ? u : "units";        /* the tolerance's unit, in words */
    bool acc_metric = strcmp(mname, "accuracy") == 0;
    if (isnan(v->accuracy_delta_pp))
        snprintf(acc, sizeof(acc), "%s not measured (train.eval false, or no seed both sides ran)", mname);
    else if (isnan(v->accuracy_ci_low))
        snprintf(acc, sizeof(acc), "%s %+.2f %s (one seed: no interval; seed spread unknown)", mname, v->accuracy_delta_pp, un);
    else
        snprintf(acc, sizeof(acc), "%s %+.2f %s (mean over %d seeds, %.0f%% interval %+.2f to %+.2f; seed spread %.2f %s)", mname,
                 v->accuracy_delta_pp, un, np, 100 * confidence, v->accuracy_ci_low,
                 v->accuracy_ci_high, v->seed_spread_pp, un);
    if (isnan(v->memory_ratio)) snprintf(mem, sizeof(mem), "memory n/a");
    else snprintf(mem, sizeof(mem), "memory %+.0f%%", 100 * (v->memory_ratio - 1));
    if (!isnan(v->count_base))
        snprintf(cnt, sizeof(cnt), "%s %.0f -> %.0f (exact counts, %s)", count == MST_COUNT_SKIPPED_STEPS ? "skipped steps" : "compiles",
                 v->count_base, v->count_trial, count_fewer ? "fewer in every run" : "not fewer in every run");

    /* faster: in the work (loop time per update) by the minimum effect beyond noise — the
     * interval's lower bound at min_speedup, a test of superiority by that margin, as accuracy's is
     * of non-inferiority — and in the typical step too, so one preempted step in the baseline's
     * runs cannot make a change look faster. With the estimate at min_speedup and the bound only
     * above 1, changes of ~1.02-1.06x were accepted or not by the noise of the runs: recompile's
     * loader change in 2 of 3 advise runs (1.059x, 99% interval 1.017-1.101, after 48 seeds each),
     * subnormal_weights' graph mode in 1 of 3 (1.022x, 1.009-1.098) (docs/benchmarks.md) */
    bool faster = !isnan(v->ci_low) && v->ci_low >= min_speedup && !isnan(step_ci_low) && step_ci_low > 1;
    bool slower = !isnan(v->ci_high) && v->ci_high < 1 && v->speedup < 0.95;
    bool measured = !isnan(v->accuracy_ci_low);
    bool noninferior = measured && v->accuracy_ci_low >= -tolerance_pp;
    bool inferior = !isnan(v->accuracy_delta_pp) && (v->accuracy_delta_pp < -tolerance_pp || (measured && v->accuracy_ci_high < -tolerance_pp));
    bool superior = measured && v->accuracy_ci_low > tolerance_pp;
    bool mem_saved = !isnan(v->memory_ratio) && v->memory_ratio <= 0.9;
    char not_faster[96];
    snprintf(not_faster, sizeof(not_faster), "not faster beyond noise by the %.0f%% minimum", 100 * (min_speedup - 1));
    char unresolved[200];
    snprintf(unresolved, sizeof(unresolved),
             isnan(v->seed_spread_pp) || !measured
                 ? "%s cannot be verified: it was not measured on two or more seeds"
                 : "%s cannot be verified at %.2f %s on a run this short: seed spread %.2f %s; run longer",
             mname, tolerance_pp, acc_metric ? "points" : un, v->seed_spread_pp, acc_metric ? "points" : un);

    if (goal == MST_GOAL_SAFETY) {
        if (noninferior) {
            v->kind = MST_VERDICT_ACCEPTED;
            snprintf(v->reason, sizeof(v->reason), "%s, not worse beyond the %.2f %s tolerance, so the safer setting costs no %s "
                     "(speed %s, %s): accepted", acc, tolerance_pp, un, mname, speed, mem);
        } else if (inferior) {
            snprintf(v->reason, sizeof(v->reason), "%s, worse beyond the %.2f %s tolerance: the safer setting measured worse here; "
                     "speed %s: rejected (the finding stands)", acc, tolerance_pp, un, speed);
        } else {
            v->kind = MST_VERDICT_CANNOT_VERIFY;
            snprintf(v->reason, sizeof(v->reason), "%s (%s); speed %s", unresolved, acc, speed);
        }
        return;
    }
    if (goal == MST_GOAL_ACCURACY) {     /* a run that does not learn is worth nothing at any speed */
        if (superior) {
            v->kind = MST_VERDICT_ACCEPTED;
            snprintf(v->reason, sizeof(v->reason), "%s: better beyond the %.2f %s tolerance (speed %s, %s): accepted", acc,
                     tolerance_pp, un, speed, mem);
        } else if (!isnan(v->accuracy_delta_pp) && v->accuracy_delta_pp > tolerance_pp) {
            v->kind = MST_VERDICT_CANNOT_VERIFY;
            snprintf(v->reason, sizeof(v->reason), "%s (%s); speed %s", unresolved, acc, speed);
        } else {
            snprintf(v->reason, sizeof(v->reason), "%s, not better beyond the %.2f %s tolerance; speed %s: rejected", acc,
                     tolerance_pp, un, speed);
        }
        return;
    }
    if (inferior) {
        snprintf(v->reason, sizeof(v->reason), "%s, worse than the %.2f %s tolerance; speed %s, %s: rejected for %s", acc,
                 tolerance_pp, un, speed, mem, mname);
        return;
    }
    /* a speed change whose interval reaches the minimum effect, or whose estimate does in either
     * figure (the loop total of a short run can swing +-30% with its one-off costs while the
     * per-step median shows the gain), without separating from the baseline, its accuracy measured
     * and non-inferior: more seeds could decide it either way (the advisor may extend the trial and
     * decide again; without a measured accuracy it could only end in "cannot verify"). The
     * interval counts as well as the estimate: the first look's trial runs all follow the
     * baseline's, so a slow phase of the machine over them pulls the estimate under 1 as easily as
     * a fast one lifts it over (one_slow_step's graph mode: 0.99x, interval 0.93-1.23, two of its
     * three runs 30% slower per step than the third), and only the second kind was looked at again */
    v->speed_unresolved = goal == MST_GOAL_SPEED && count == MST_COUNT_NONE && !faster && !slower && noninferior &&
                          (v->speedup >= min_speedup || v->step_speedup >= min_speedup ||
                           (!isnan(v->ci_high) && v->ci_high >= min_speedup));
    /* the first look's runs came after the baseline's (not in turns with them): where its timing
     * alone decides the outcome, the advisor confirms it on alternated runs. A speed change read
     * slower is confirmed too while the slowdown is one a drift of the machine between the two
     * blocks could make (dispatch_bound's graph mode: accepted at 1.14x in two advise runs,
     * rejected at 0.855x, interval 0.806-0.893, in the third, its per-step median 0.97x); a
     * slowdown beyond that stands */
    const bool drift_sized = !isnan(v->speedup) && v->speedup >= 1.0 / k_machine_drift;
    v->speed_confirm = goal == MST_GOAL_SPEED && noninferior &&
                       (count == MST_COUNT_NONE ? faster || (slower && drift_sized) : count_fewer && slower);
    /* a count change: the count decides (exactly), provided the time is not worse beyond noise */
    bool gained = count != MST_COUNT_NONE ? count_fewer && !slower && (faster || isnan(v->ci_low) || v->ci_high >= 1) : faster;
    if (gained && noninferior) {
        v->kind = MST_VERDICT_ACCEPTED;
        snprintf(v->reason, sizeof(v->reason), "%s%s%s %s, %s, %s: accepted", cnt, cnt[0] ? "; " : "", speed,
                 faster ? "faster" : "(time not worse beyond noise)", acc, mem);
    } else if (gained) {
        v->kind = MST_VERDICT_CANNOT_VERIFY;
        snprintf(v->reason, sizeof(v->reason), "%s%s%s, but %s (%s)", cnt, cnt[0] ? "; " : "", speed, unresolved, acc);
    } else if (mem_saved) {
        snprintf(v->reason, sizeof(v->reason), "%s%sspeed %s: %s; %s; %s: rejected for speed, noted for memory", cnt, cnt[0] ? "; " : "",
                 speed, slower ? "slower" : not_faster, acc, mem);
    } else {
        snprintf(v->reason, sizeof(v->reason), "%s%sspeed %s: %s; %s, %s: rejected", cnt, cnt[0] ? "; " : "", speed,
                 slower ? "slower" : count != MST_COUNT_NONE && !count_fewer ? "the count did not fall" : not_faster,
                 acc, mem);
    }
}
