/* verdict.c — accept or reject a trial against the baseline, with the reason in words.
 *
 * Speed is the time per APPLIED update (step time / (1 - skipped fraction)): a loss scale that
 * skips updates wastes their steps, so fixing it is a real throughput gain even when the step time
 * is unchanged. The run is the unit: each run contributes its median step time, and the speedup is
 * the Hodges–Lehmann estimate between the groups' log times with its Moses interval — with three
 * runs each, a lower bound above 1 means every trial run beat every baseline run (p = 0.05). */
#include "advisor/finding.h"
#include "advisor/trial.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/stats.h"

static int ok_values(const mst_trial_set *t, int what, double *out) {
    int n = 0;
    for (int i = 0; i < t->n_runs; i++) {
        const mst_run_result *r = &t->runs[i];
        if (!r->ok) continue;
        double v = what == 0 ? log(r->effective_step_ms) : what == 1 ? r->val_accuracy : r->peak_memory_bytes;
        if (isfinite(v)) out[n++] = v;
    }
    return n;
}

static const char *first_error(const mst_trial_set *t) {
    for (int i = 0; i < t->n_runs; i++)
        if (!t->runs[i].ok) return t->runs[i].error[0] ? t->runs[i].error : "the run failed";
    return "no run completed";
}

void mst_verdict_decide(const mst_trial_set *base, const mst_trial_set *trial, int goal, double tolerance_pp,
                        double min_speedup, double confidence, mst_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->kind = MST_VERDICT_REJECTED;
    v->speedup = v->ci_low = v->ci_high = v->accuracy_delta_pp = v->memory_delta_bytes = v->memory_ratio = NAN;
    double bt[MST_TRIAL_MAX_RUNS], tt[MST_TRIAL_MAX_RUNS];
    int nb = ok_values(base, 0, bt), nt = ok_values(trial, 0, tt);
    bool failed = false;
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
    if (mst_stats_hodges_lehmann(bt, nb, tt, nt, confidence, &s) == 0) {
        v->speedup = exp(-s.estimate);
        v->ci_low = s.bounded ? exp(-s.hi) : NAN;
        v->ci_high = s.bounded ? exp(-s.lo) : NAN;
    }
    double ba[MST_TRIAL_MAX_RUNS], ta[MST_TRIAL_MAX_RUNS], bm[MST_TRIAL_MAX_RUNS], tm[MST_TRIAL_MAX_RUNS];
    int nba = ok_values(base, 1, ba), nta = ok_values(trial, 1, ta);
    int nbm = ok_values(base, 2, bm), ntm = ok_values(trial, 2, tm);
    if (nba > 0 && nta > 0) v->accuracy_delta_pp = 100 * (mst_stats_median(ta, nta) - mst_stats_median(ba, nba));
    if (nbm > 0 && ntm > 0) {
        double b = mst_stats_median(bm, nbm), t = mst_stats_median(tm, ntm);
        v->memory_delta_bytes = t - b;
        v->memory_ratio = b > 0 ? t / b : NAN;
    }

    char speed[96], acc[64], mem[64];
    if (isnan(v->ci_low)) snprintf(speed, sizeof(speed), "%.3fx (too few runs for an interval)", v->speedup);
    else snprintf(speed, sizeof(speed), "%.3fx (%.0f%% interval %.3f-%.3f)", v->speedup, 100 * confidence, v->ci_low, v->ci_high);
    if (isnan(v->accuracy_delta_pp)) snprintf(acc, sizeof(acc), "accuracy not measured");
    else snprintf(acc, sizeof(acc), "accuracy %+.2f pp", v->accuracy_delta_pp);
    if (isnan(v->memory_ratio)) snprintf(mem, sizeof(mem), "memory n/a");
    else snprintf(mem, sizeof(mem), "memory %+.0f%%", 100 * (v->memory_ratio - 1));

    bool faster = !isnan(v->ci_low) && v->ci_low > 1 && v->speedup >= min_speedup;
    bool slower = !isnan(v->ci_high) && v->ci_high < 1 && v->speedup < 0.95;
    bool acc_ok = !isnan(v->accuracy_delta_pp) && v->accuracy_delta_pp >= -tolerance_pp;
    bool acc_better = !isnan(v->accuracy_delta_pp) && v->accuracy_delta_pp > tolerance_pp;
    bool mem_saved = !isnan(v->memory_ratio) && v->memory_ratio <= 0.9;

    if (goal == MST_GOAL_SAFETY) {
        if (acc_ok) {
            v->kind = MST_VERDICT_ACCEPTED;
            snprintf(v->reason, sizeof(v->reason), "%s, inside the %.2f pp tolerance, so the safer setting costs no accuracy "
                     "(speed %s, %s): accepted", acc, tolerance_pp, speed, mem);
        } else {
            snprintf(v->reason, sizeof(v->reason), "%s, outside the %.2f pp tolerance: the safer setting measured worse here; "
                     "speed %s: rejected (the finding stands)", acc, tolerance_pp, speed);
        }
        return;
    }
    if (goal == MST_GOAL_ACCURACY) {     /* a run that does not learn is worth nothing at any speed */
        if (acc_better) {
            v->kind = MST_VERDICT_ACCEPTED;
            snprintf(v->reason, sizeof(v->reason), "%s, beyond the %.2f pp tolerance (speed %s, %s): accepted", acc,
                     tolerance_pp, speed, mem);
        } else {
            snprintf(v->reason, sizeof(v->reason), "%s, not beyond the %.2f pp tolerance; speed %s: rejected", acc,
                     tolerance_pp, speed);
        }
        return;
    }
    if (!acc_ok) {
        snprintf(v->reason, sizeof(v->reason), "%s, outside the %.2f pp tolerance; speed %s, %s: rejected for accuracy", acc,
                 tolerance_pp, speed, mem);
    } else if (faster) {
        v->kind = MST_VERDICT_ACCEPTED;
        snprintf(v->reason, sizeof(v->reason), "%s faster, %s, %s: accepted", speed, acc, mem);
    } else if (mem_saved) {
        snprintf(v->reason, sizeof(v->reason), "speed %s, %s: %s; %s: rejected for speed, noted for memory", speed,
                 slower ? "slower" : "not faster beyond noise", acc, mem);
    } else {
        snprintf(v->reason, sizeof(v->reason), "speed %s: %s; %s, %s: rejected", speed,
                 slower ? "slower" : "not faster beyond noise", acc, mem);
    }
}
