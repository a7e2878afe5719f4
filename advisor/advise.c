/* advise.c — the advisor's protocol: baseline, diagnose, verify each change alone, combine the
 * accepted ones and verify the combination, within the time budget. */
#include "advisor/advisor.h"
#include "profiler/events.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend/kernel_choice.h"
#include "runtime/fpu.h"
#include "util/fsutil.h"

void mst_advise_config_default(mst_advise_config *c) {
    memset(c, 0, sizeof(*c));
    c->budget_minutes = 30;
    c->tolerance_pp = 0.5;
    c->repeats = 3;
    c->min_speedup = 1.02;
    c->confidence = 0.90;
}

void mst_advice_free(mst_advice *adv) { memset(adv, 0, sizeof(*adv)); }

/* The user's overrides, then the harness's own: no checkpoints (identical for every run). */
static void common_sets(const mst_advise_config *cfg, mst_trial_set *t) {
    for (int i = 0; i < cfg->n_job_sets && t->n_sets < MST_TRIAL_MAX_SETS; i++)
        snprintf(t->sets[t->n_sets++], sizeof(t->sets[0]), "%s", cfg->job_sets[i]);
    if (t->n_sets < MST_TRIAL_MAX_SETS) snprintf(t->sets[t->n_sets++], sizeof(t->sets[0]), "train.checkpoint=false");
    /* data parallel: a raw launcher argument; a finding's own "--nproc=M" comes later and wins */
    if (cfg->nproc > 1 && t->n_sets < MST_TRIAL_MAX_SETS) snprintf(t->sets[t->n_sets++], sizeof(t->sets[0]), "--nproc=%d", cfg->nproc);
}

static void add_sets(mst_trial_set *t, const char (*sets)[MST_SET_LEN], int n) {
    for (int i = 0; i < n && t->n_sets < MST_TRIAL_MAX_SETS; i++) snprintf(t->sets[t->n_sets++], sizeof(t->sets[0]), "%s", sets[i]);
}

static void verdict_not_run(mst_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->kind = MST_VERDICT_NOT_RUN;
    v->speedup = v->ci_low = v->ci_high = v->accuracy_delta_pp = v->memory_delta_bytes = v->memory_ratio = NAN;
    v->accuracy_ci_low = v->accuracy_ci_high = v->seed_spread_pp = v->step_speedup = v->count_base = v->count_trial = NAN;
}

/* Gain per minute of trial time: the order trials run in under a budget. Accuracy fixes first. */
static double priority(const mst_finding *f, double est_min) {
    double gain = f->goal == MST_GOAL_ACCURACY || f->goal == MST_GOAL_SAFETY ? 100.0 : (isnan(f->predicted) ? 0 : f->predicted - 1);
    return gain / (est_min > 1e-3 ? est_min : 1e-3);
}

static double minutes_left(const mst_advise_config *cfg, double t_start) {
    return cfg->budget_minutes > 0 ? cfg->budget_minutes - ((double)mst_prof_now_ns() * 1e-9 - t_start) / 60 : INFINITY;
}

/* 4b. A speed trial that the first K seeds left unresolved (its estimate reached the minimum effect,
 * its interval did not exclude 1), or whose first look was decided by its timing alone (a speed
 * change faster, a count change slower: those K runs all followed the baseline's, so the machine
 * drifting between them reads as an effect; a recompile trial that halved its compiles was once
 * rejected at 0.89x, 0.87-0.91, in the third of three advise runs and accepted at 1.10x in the
 * other two): K more seeds on each side, baseline and trial alternated so that drift falls on
 * both, and the verdict decided again on all the runs. With 3 runs a side only a trial that
 * beats every baseline run is resolved, so a real gain of a few percent on a noisy machine is
 * accepted in some advise runs and not in others; 6 a side resolve it with a margin for outliers,
 * and a trial still unresolved then gets more looks (look n: K x 2^n runs a side, n up to
 * MST_TRIAL_MAX_LOOKS, the run limit permitting; on this VM graph mode's ~1.2x on 20 ms loops was
 * accepted in one or two of three advise runs at 6 a side, and dispatch_bound's in two of three
 * at 12, in three of three with up to 48). Each later look is judged at a stricter level (90% ->
 * 95% -> 97.5% -> ...), so that looking again does not raise the rate of accepting a change that
 * gains nothing. Runs only within the budget; false when it ran nothing. */
static bool extend_trial(const mst_advise_config *cfg, mst_trial_set *base, mst_trial_set *t, const mst_finding *f,
                              int repeats, int look, double t_start, mst_verdict *v) {
    int target = mst_trial_look_runs(repeats, look);
    if (t->n_runs >= target || base->n_runs == 0 || t->n_runs == 0) return false;
    int from = t->n_runs;
    /* the baseline grows in turns with every extended trial (up to its run limit), not only with
     * the first: each trial's extra runs then share the minutes of as many baseline runs */
    int more_trial = target - t->n_runs;
    int more_base = base->n_runs < target ? target - base->n_runs : more_trial;
    if (base->n_runs + more_base > MST_TRIAL_MAX_RUNS) more_base = MST_TRIAL_MAX_RUNS - base->n_runs;
    double need_min = (more_base * base->wall_s / base->n_runs + more_trial * t->wall_s / t->n_runs) / 60;
    double left_min = minutes_left(cfg, t_start);
    size_t len = strlen(v->reason);
    if (need_min > left_min) {
        snprintf(v->reason + len, sizeof(v->reason) - len, " (%s; %d more seeds would need %.1f min, %.1f left)",
                 v->speed_unresolved ? "unresolved" : "not confirmed in turns", more_trial, need_min, left_min > 0 ? left_min : 0);
        return false;
    }
    /* this extension's runs form a turn of their own: the verdict compares them only with each other */
    int turn = 0;
    for (int i = 0; i < base->n_runs; i++) turn = base->runs[i].turn > turn ? base->runs[i].turn : turn;
    for (int i = 0; i < t->n_runs; i++) turn = t->runs[i].turn > turn ? t->runs[i].turn : turn;
    turn++;
    const char *why = v->speed_unresolved ? "unresolved" : "decided by its timing";
    if (cfg->log) fprintf(cfg->log, "  %s at %.3fx: %d more seeds each, alternated with the baseline\n", why, v->speedup, more_trial);
    for (int k = 0; k < more_trial && !(cfg->stop && *cfg->stop); k++) {
        int nb0 = base->n_runs, nt0 = t->n_runs;
        if (k < more_base) mst_trial_run(base, cfg->mstune_bin, cfg->job_path, cfg->out_dir, 1, false, cfg->log, cfg->stop);
        mst_trial_run(t, cfg->mstune_bin, cfg->job_path, cfg->out_dir, 1, false, cfg->log, cfg->stop);
        if (base->n_runs > nb0) base->runs[nb0].turn = turn;
        if (t->n_runs > nt0) t->runs[nt0].turn = turn;
    }
    if (cfg->stop && *cfg->stop) {      /* the first look stands; the runs it did not see are listed apart */
        snprintf(v->reason + len, sizeof(v->reason) - len, " (its extension was interrupted)");
        return false;
    }
    char first[160];
    snprintf(first, sizeof(first), "%d seeds each, extended from %d (%.3fx, interval %.3f-%.3f %s): ", t->n_runs, from,
             v->speedup, v->ci_low, v->ci_high, v->speed_unresolved ? "unresolved" : "to be confirmed in turns");
    mst_verdict_decide_at(base, t, f->goal, f->count, cfg->tolerance_pp, cfg->min_speedup, cfg->confidence,
                          1 - (1 - cfg->confidence) / (double)(1 << look), v);
    v->extended_from = repeats;
    char rest[sizeof(v->reason)];
    memcpy(rest, v->reason, sizeof(rest));
    snprintf(v->reason, sizeof(v->reason), "%s%.*s", first, (int)(sizeof(v->reason) - strlen(first) - 1), rest);
    return true;
}

int mst_advise_run(const mst_advise_config *cfg, mst_advice *adv, char *err, size_t errn) {
    memset(adv, 0, sizeof(*adv));
    double t_start = (double)mst_prof_now_ns() * 1e-9;
    if (mst_mkdirs(cfg->out_dir, err, errn) != 0) return -1;
    int repeats = cfg->repeats < 2 ? 2 : cfg->repeats > MST_TRIAL_MAX_RUNS ? MST_TRIAL_MAX_RUNS : cfg->repeats;
    int cores = cfg->n_cores > 0 ? cfg->n_cores : (int)sysconf(_SC_NPROCESSORS_ONLN);
    FILE *log = cfg->log;
    /* every run this session starts uses the machine's kernel and step-thread verdicts as they
     * stand, so the baseline and the trials compute on the same providers and thread budgets
     * (runtime/backend/kernel_choice.h); a value the user set wins */
    setenv("MSTUNE_VERDICTS", "keep", 0);
    if (log && !mst_verdicts_kept()) fprintf(log, "note: MSTUNE_VERDICTS=%s: each run may time the verdicts again\n", getenv("MSTUNE_VERDICTS"));

    /* 1. the diagnosis run: profiled, on its own; never part of the timing baseline (the
     * profiler's cost would make the baseline look slower and every trial look faster) */
    mst_trial_set *prof_run = &adv->profile;
    snprintf(prof_run->name, sizeof(prof_run->name), "profile");
    /* every step records its ops (profile.op_every's default is 4, for the profile's cost): this
     * run's cost is in no timing, and the rules' per-step medians get every step; the job's own
     * --set, after it, still wins */
    snprintf(prof_run->sets[prof_run->n_sets++], sizeof(prof_run->sets[0]), "profile.op_every=1");
    common_sets(cfg, prof_run);
    if (log) fprintf(log, "profile: 1 run of %s\n", cfg->job_path);
    mst_trial_run(prof_run, cfg->mstune_bin, cfg->job_path, cfg->out_dir, 1, true, log, cfg->stop);
    if (prof_run->n_runs == 0 || !prof_run->runs[0].ok) {
        snprintf(err, errn, "the profiled run failed: %s (log: %s/run.log)", prof_run->n_runs ? prof_run->runs[0].error : "not started",
                 prof_run->n_runs ? prof_run->runs[0].dir : cfg->out_dir);
        return -1;
    }
    /* 2. baseline: the job as given, unprofiled like every trial, over K seeds starting at the
     * job's own (the timing repeats are the seed runs) */
    mst_trial_set *base = &adv->baseline;
    snprintf(base->name, sizeof(base->name), "baseline");
    common_sets(cfg, base);
    base->seeded = true;
    base->seed0 = prof_run->runs[0].seed;
    if (log) fprintf(log, "baseline: %d runs (seeds %lld..%lld) of %s\n", repeats, (long long)base->seed0,
                     (long long)(base->seed0 + repeats - 1), cfg->job_path);
    mst_trial_run(base, cfg->mstune_bin, cfg->job_path, cfg->out_dir, repeats, false, log, cfg->stop);
    int base_ok = 0;
    for (int i = 0; i < base->n_runs; i++) base_ok += base->runs[i].ok;
    if (base_ok == 0) {
        snprintf(err, errn, "the baseline run failed: %s (log: %s/run.log)", base->n_runs ? base->runs[0].error : "not started",
                 base->n_runs ? base->runs[0].dir : cfg->out_dir);
        return -1;
    }
    adv->resolvable_speedup = mst_verdict_resolvable(base, repeats, minutes_left(cfg, t_start), cfg->min_speedup);

    /* 3. diagnose from the profile */
    snprintf(adv->db_path, sizeof(adv->db_path), "%s/profile.db", prof_run->runs[0].dir);
    rpt_profile prof;
    if (rpt_profile_load(&prof, adv->db_path, err, errn) != 0) return -1;
    char sum_path[1100];
    snprintf(sum_path, sizeof(sum_path), "%s/summary.json", prof_run->runs[0].dir);
    size_t len = 0;
    char *text = mst_read_file(sum_path, &len);
    cJSON *summary = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!summary) {
        rpt_profile_free(&prof);
        snprintf(err, errn, "%s: unreadable baseline summary", sum_path);
        return -1;
    }
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    mst_rule_env env = {cores, phys > 0 ? phys : 0, summary, adv->resolvable_speedup, cfg->mpi_available, NULL,
                        mst_fpu_subnormal_penalty(), mst_fpu_subnormal_pass()};
    /* the AMP rule's per-op rates: from the machine's calibration file, the missing ones measured
     * now at the job's own shapes (an O0 job only: that is where the rule proposes a level) */
    mst_amp_calib *cal = calloc(1, sizeof(*cal));      /* ~50 KB: 64 signatures */
    if (cal && strcmp(mst_cfg_str(prof.config, "amp.level", "O0"), "O0") == 0) {
        mst_amp_calib_opts co = {.half = strcmp(mst_cfg_str(prof.config, "runtime.device", "cpu"), "cuda") == 0 ? "f16" : "bf16",
                                 .kernels = mst_cfg_str(prof.config, "runtime.kernels", "auto"),
                                 .n_threads = (int)mst_cfg_num(prof.config, "runtime.threads", 0), .budget_s = 5,
                                 .param_elems = (int64_t)mst_cfg_num(summary, "model_params", 0)};
        char cerr[300];
        if (mst_amp_calibrate(&prof, &co, cal, cerr, sizeof(cerr)) == 0) {
            env.amp_calib = cal;
            if (log) fprintf(log, "amp calibration: %d kernel signatures measured in %.1f s, %d cached (%s)\n", cal->n_measured,
                             cal->seconds, cal->n_cached, cal->path[0] ? cal->path : "no cache file");
        } else if (log) {
            fprintf(log, "amp calibration: %s\n", cerr);
        }
    }
    adv->n_findings = mst_advisor_diagnose(&prof, &env, adv->findings, MST_MAX_FINDINGS);
    free(cal);
    rpt_profile_free(&prof);
    cJSON_Delete(summary);
    if (log) fprintf(log, "diagnosis: %d finding%s\n", adv->n_findings, adv->n_findings == 1 ? "" : "s");

    /* 4. verify: one change per trial, best predicted gain per minute first, within the budget */
    double per_run_s = base->wall_s / base->n_runs;
    int order[MST_MAX_FINDINGS], n_order = 0;
    for (int i = 0; i < adv->n_findings; i++) {
        verdict_not_run(&adv->verdicts[i]);
        if (adv->findings[i].goal == MST_GOAL_NONE) {
            snprintf(adv->verdicts[i].reason, sizeof(adv->verdicts[i].reason), "a finding only: not applied automatically");
            continue;
        }
        order[n_order++] = i;
    }
    double est_min = per_run_s * repeats / 60;
    for (int a = 0; a < n_order; a++)           /* insertion sort by priority, descending */
        for (int b = a; b > 0 && priority(&adv->findings[order[b]], est_min) > priority(&adv->findings[order[b - 1]], est_min); b--) {
            int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
        }
    for (int a = 0; a < n_order; a++) {
        int i = order[a];
        mst_finding *f = &adv->findings[i];
        double left_min = minutes_left(cfg, t_start);
        if (cfg->stop && *cfg->stop) {
            snprintf(adv->verdicts[i].reason, sizeof(adv->verdicts[i].reason), "not tried: the session was interrupted");
            continue;
        }
        if (est_min > left_min) {
            snprintf(adv->verdicts[i].reason, sizeof(adv->verdicts[i].reason),
                     "not tried: its estimated %.1f min exceed the %.1f min left of the budget", est_min, left_min > 0 ? left_min : 0);
            continue;
        }
        char serr[400];
        if (cfg->check_sets && cfg->check_sets(cfg->check_arg, (const char (*)[96])f->sets, f->n_sets, serr, sizeof(serr)) != 0) {
            snprintf(adv->verdicts[i].reason, sizeof(adv->verdicts[i].reason),
                     "not tried: the change does not validate against the job schema: %s", serr);
            continue;
        }
        mst_trial_set *t = &adv->trials[i];
        snprintf(t->name, sizeof(t->name), "trial-%d-%s", i + 1, f->rule);
        common_sets(cfg, t);
        add_sets(t, (const char (*)[MST_SET_LEN])f->sets, f->n_sets);
        t->seeded = true;           /* the baseline's seeds: run i pairs with baseline run i */
        t->seed0 = base->seed0;
        if (f->keeps_step) memcpy(t->step_pin, base->step_pin, sizeof(t->step_pin));   /* "" while undecided: its own */
        if (log) fprintf(log, "trial %d: %s\n", i + 1, f->change);
        mst_trial_run(t, cfg->mstune_bin, cfg->job_path, cfg->out_dir, repeats, false, log, cfg->stop);
        if (cfg->stop && *cfg->stop) {      /* its runs were cut short: nothing to judge */
            snprintf(adv->verdicts[i].reason, sizeof(adv->verdicts[i].reason), "not judged: the session was interrupted during it");
            continue;
        }
        mst_verdict_decide(base, t, f->goal, f->count, cfg->tolerance_pp, cfg->min_speedup, cfg->confidence, &adv->verdicts[i]);
        /* a first look decided by its timing is confirmed once; an unresolved one gets up to
         * MST_TRIAL_MAX_LOOKS more looks (2K, 4K, 8K, 16K runs a side, each judged at a stricter
         * level), while the budget lasts */
        mst_verdict *v = &adv->verdicts[i];
        for (int look = 1; look <= MST_TRIAL_MAX_LOOKS && (v->speed_unresolved || (look == 1 && v->speed_confirm)); look++)
            if (!extend_trial(cfg, base, t, f, repeats, look, t_start, v)) break;
        if (log) fprintf(log, "  -> %s\n", adv->verdicts[i].reason);
    }

    /* 5. combine the accepted changes and verify them together */
    int accepted[MST_MAX_FINDINGS], n_acc = 0;
    bool any_accuracy = false, all_keep_step = true;
    for (int i = 0; i < adv->n_findings; i++)
        if (adv->verdicts[i].kind == MST_VERDICT_ACCEPTED) {
            accepted[n_acc++] = i;
            any_accuracy |= adv->findings[i].goal != MST_GOAL_SPEED;
            all_keep_step &= adv->findings[i].keeps_step;
        }
    bool use_all = true;
    if (n_acc >= 2) {
        double left_min = minutes_left(cfg, t_start);
        mst_trial_set *c = &adv->combined;
        snprintf(c->name, sizeof(c->name), "combined");
        common_sets(cfg, c);
        for (int k = 0; k < n_acc; k++)
            add_sets(c, (const char (*)[MST_SET_LEN])adv->findings[accepted[k]].sets, adv->findings[accepted[k]].n_sets);
        c->seeded = true;
        c->seed0 = base->seed0;
        if (all_keep_step) memcpy(c->step_pin, base->step_pin, sizeof(c->step_pin));
        adv->has_combined = true;
        if (est_min > left_min || (cfg->stop && *cfg->stop)) {
            verdict_not_run(&adv->combined_verdict);
            snprintf(adv->combined_verdict.reason, sizeof(adv->combined_verdict.reason),
                     "not verified: %s; tuned.yaml keeps only the best single change",
                     cfg->stop && *cfg->stop ? "the session was interrupted" : "no budget left");
            use_all = false;
        } else {
            if (log) fprintf(log, "combined: %d accepted changes together\n", n_acc);
            mst_trial_run(c, cfg->mstune_bin, cfg->job_path, cfg->out_dir, repeats, false, log, cfg->stop);
            mst_verdict_decide(base, c, any_accuracy ? MST_GOAL_SAFETY : MST_GOAL_SPEED, MST_COUNT_NONE, cfg->tolerance_pp, cfg->min_speedup,
                               cfg->confidence, &adv->combined_verdict);
            if (log) fprintf(log, "  -> %s\n", adv->combined_verdict.reason);
            use_all = adv->combined_verdict.kind == MST_VERDICT_ACCEPTED;
        }
    }

    /* 6. what tuned.yaml applies */
    int best = -1;
    for (int k = 0; k < n_acc; k++) {
        int i = accepted[k];
        if (best < 0 || (adv->findings[i].goal != MST_GOAL_SPEED && adv->findings[best].goal == MST_GOAL_SPEED) ||
            (adv->findings[i].goal == adv->findings[best].goal && adv->verdicts[i].speedup > adv->verdicts[best].speedup))
            best = i;
    }
    for (int k = 0; k < n_acc; k++) {
        int i = accepted[k];
        if (!use_all && i != best) continue;
        for (int s = 0; s < adv->findings[i].n_sets; s++) {
            /* two fields of one struct, never overlapping: copied with memcpy (snprintf's restrict
             * made GCC's -O1 sanitizer build warn) */
            const char *set = adv->findings[i].sets[s];
            const size_t n_set = strnlen(set, MST_SET_LEN - 1);
            char *to = adv->accepted_sets[adv->n_accepted_sets++];
            memcpy(to, set, n_set);
            to[n_set] = '\0';
        }
    }
    if (n_acc == 0) {
        snprintf(adv->outcome, sizeof(adv->outcome), "No change helped: %s", adv->n_findings == 0
                     ? "no rule found anything to change; the job is already well tuned for this machine."
                     : "every proposed change was rejected or not tried (see the reasons); keep the job as it is.");
    } else if (n_acc == 1 || !use_all) {
        const mst_verdict *v = &adv->verdicts[best];
        snprintf(adv->outcome, sizeof(adv->outcome), "Apply %s: %.3fx, accuracy %+.2f pp (tuned.yaml).", adv->findings[best].change,
                 v->speedup, v->accuracy_delta_pp);
    } else {
        const mst_verdict *v = &adv->combined_verdict;
        snprintf(adv->outcome, sizeof(adv->outcome), "Apply all %d accepted changes together: %.3fx, accuracy %+.2f pp (tuned.yaml).",
                 n_acc, v->speedup, v->accuracy_delta_pp);
    }
    if (cfg->stop && *cfg->stop) {
        char was[sizeof(adv->outcome)];
        memcpy(was, adv->outcome, sizeof(was));
        snprintf(adv->outcome, sizeof(adv->outcome), "Interrupted (Ctrl-C) before every trial ran. %.400s", was);
    }
    return 0;
}
