/* test_advise.c — the real advisor end to end on the scenario jobs (workloads/scenarios/), each
 * with the expected top finding. Verdicts are checked against the trial records, recomputed here
 * from every run's own summary.json: an accepted speed change must separate from the baseline (the
 * Moses interval's lower bound above 1 at the verdict's level, over the runs it was judged on: with
 * 3 vs 3 every trial run faster than every baseline run; an unresolved trial extended to 6 vs 6 at
 * 95%) by the minimum effect, with accuracy inside the tolerance; an accepted accuracy fix must gain more than the tolerance. A
 * rejected change must fail one of those — so the test asserts on measurements, never on a
 * hard-coded outcome. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <gsl/gsl_cdf.h>
#include <sqlite3.h>

#include "advisor/trial.h"
#include "e2e.h"

#define TOLERANCE_PP 0.5
#define MIN_SPEEDUP 1.02

enum { K_RUNS = MST_TRIAL_MAX_RUNS, K_PAIRS = K_RUNS * K_RUNS };

typedef struct {
    double log_t[K_RUNS], log_step[K_RUNS], acc[K_RUNS], count[K_RUNS];
    int64_t seed[K_RUNS];
    int turn[K_RUNS];   /* the advisor's turn of the run (advice.json): runs alternated in an extension share one */
    int n;
    bool failed;
} runs;

static double num(const cJSON *o, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

/* Each run's numbers from the summary.json in its own folder (not from the advisor's tables); the
 * first `limit` runs (< 0: all): a verdict names how many of each side it was judged on. */
static void read_runs_first(const cJSON *arr, const char *count, int limit, runs *r) {
    memset(r, 0, sizeof(*r));
    const cJSON *it;
    int seen = 0;
    cJSON_ArrayForEach(it, arr) {
        if (limit >= 0 && seen++ >= limit) break;
        assert_true(r->n < K_RUNS);
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(it, "ok");
        if (!cJSON_IsTrue(ok)) { r->failed = true; continue; }
        const char *dir = cJSON_GetObjectItemCaseSensitive(it, "dir")->valuestring;
        char path[2048];
        snprintf(path, sizeof(path), "%s/summary.json", dir);
        cJSON *s = e2e_read_json(path);
        assert_non_null(s);
        /* the training work per applied update: loop time (compiles included) / updates */
        double loop_s = num(s, "train_loop_s", NAN), applied = num(s, "applied_updates", NAN);
        assert_true(loop_s > 0 && applied >= 0);
        r->log_t[r->n] = log(1e3 * loop_s / applied);
        r->log_step[r->n] = log(num(s, "step_time_ms_median", NAN));
        r->acc[r->n] = num(s, "val_accuracy", -1);
        r->seed[r->n] = (int64_t)num(s, "seed", -1);
        r->turn[r->n] = (int)num(it, "turn", 0);
        r->count[r->n] = count ? num(s, count, NAN) : NAN;
        r->n++;
        cJSON_Delete(s);
    }
}

static void read_runs(const cJSON *arr, const char *count, runs *r) { read_runs_first(arr, count, -1, r); }

/* The exact null distribution of U for m and n runs (probabilities), counted here on its own by
 * N(a, b, u) = N(a-1, b, u-b) + N(a, b-1, u), a row of a at a time. */
static void mwu_pmf(int m, int n, double *p) {
    const size_t w = (size_t)m * (size_t)n + 1;
    double *prev = calloc((size_t)(n + 1) * w, sizeof(double)), *cur = calloc((size_t)(n + 1) * w, sizeof(double));
    assert_non_null(prev);
    assert_non_null(cur);
    for (int b = 0; b <= n; b++) prev[(size_t)b * w] = 1;        /* a = 0: one ordering, U = 0 */
    for (int a = 1; a <= m; a++) {
        for (int b = 0; b <= n; b++)
            for (int u = 0; u <= a * b; u++)
                cur[(size_t)b * w + (size_t)u] = b == 0 ? (u == 0)
                                                        : (u >= b ? prev[(size_t)b * w + (size_t)(u - b)] : 0) +
                                                              cur[(size_t)(b - 1) * w + (size_t)u];
        double *t = prev;
        prev = cur, cur = t;
    }
    double total = 0;
    for (int u = 0; u <= m * n; u++) total += prev[(size_t)n * w + (size_t)u];
    for (int u = 0; u <= m * n; u++) p[u] = prev[(size_t)n * w + (size_t)u] / total;
    free(prev);
    free(cur);
}

/* The runs compared within turns: the trial was extended (a turn other than 0) and each of its runs
 * has baseline runs of its own turn; otherwise every baseline run with every trial run. */
static bool within_turns(const runs *b, const runs *t) {
    bool extended = false;
    for (int j = 0; j < t->n; j++) {
        bool has = false;
        for (int i = 0; i < b->n; i++) has |= b->turn[i] == t->turn[j];
        if (!has) return false;
        extended |= t->turn[j] != 0;
    }
    return extended;
}

static bool compared(const runs *b, int i, const runs *t, int j, bool turns) { return !turns || b->turn[i] == t->turn[j]; }

/* The Moses interval's verdict on two groups of log times (compared within turns or not): +1 when
 * its lower speedup bound is above 1 (at most c of the compared baseline-trial pairs have the trial
 * not faster, c the largest with P(T <= c) <= alpha, T the sum of the turns' U), -1 when its upper
 * bound is below 1, 0 otherwise. */
static int separated(const runs *b, const double *base, const runs *t, const double *trial, bool turns, double confidence) {
    static double dist[K_PAIRS + 1], next[K_PAIRS + 1], p[K_PAIRS + 1];
    memset(dist, 0, sizeof(dist));
    dist[0] = 1;
    int tmax = 0, pairs = 0, not_faster = 0, not_slower = 0;
    bool seen[K_RUNS] = {false};
    for (int i0 = 0; i0 < b->n; i0++) {
        if (seen[i0]) continue;
        int mk = 0, nk = 0;
        for (int i = i0; i < b->n; i++)
            if (!turns || b->turn[i] == b->turn[i0]) seen[i] = true, mk++;
        for (int j = 0; j < t->n; j++) nk += compared(b, i0, t, j, turns);
        if (nk == 0) continue;
        mwu_pmf(mk, nk, p);
        memset(next, 0, sizeof(next));
        for (int x = 0; x <= tmax; x++)
            for (int u = 0; u <= mk * nk; u++) next[x + u] += dist[x] * p[u];
        tmax += mk * nk;
        memcpy(dist, next, sizeof(dist));
    }
    double alpha = (1 - confidence) / 2, cum = 0;
    int c = -1;
    for (int x = 0; x <= tmax; x++) {
        cum += dist[x];
        if (cum > alpha * (1 + 1e-12)) break;
        c = x;
    }
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < t->n; j++)
            if (compared(b, i, t, j, turns)) pairs++, not_faster += trial[j] >= base[i], not_slower += trial[j] <= base[i];
    if (c < 0 || 2 * c >= pairs) return 0;
    return not_faster <= c ? 1 : not_slower <= c ? -1 : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    static double s[K_PAIRS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* What the records say the verdict must be: speed separation (the Moses interval of the shift at
 * the verdict's level above 1: with 3 runs a side, every trial run beats every baseline run;
 * an extended trial's runs compared only with the baseline runs of their turn) by the minimum effect, in the loop time and the per-step median alike; accuracy as the mean same-seed
 * difference with its t interval against the tolerance; counts exactly. */
static const char *records_verdict(const runs *b, const runs *t, const char *goal, const char *count, double speed_confidence) {
    if (t->failed || t->n == 0) return "rejected";
    static double diffs[K_PAIRS];
    int k = 0;
    bool turns = within_turns(b, t);
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < t->n; j++)
            if (compared(b, i, t, j, turns)) diffs[k++] = b->log_t[i] - t->log_t[j];
    double speedup = exp(median(diffs, k));
    /* faster by the minimum effect: the trial's times made MIN_SPEEDUP slower still separate from
     * the baseline's (the interval's lower bound at the margin), and the per-step medians separate */
    static double margin_t[K_RUNS];
    for (int j = 0; j < t->n; j++) margin_t[j] = t->log_t[j] + log(MIN_SPEEDUP);
    bool faster = separated(b, b->log_t, t, margin_t, turns, speed_confidence) > 0 &&
                  separated(b, b->log_step, t, t->log_step, turns, speed_confidence) > 0;
    bool slower = separated(b, b->log_t, t, t->log_t, turns, speed_confidence) < 0 && speedup < 0.95;
    /* accuracy, paired by seed */
    double d[K_RUNS], lo = INFINITY, hi = -INFINITY;
    int np = 0;
    for (int i = 0; i < b->n; i++) {
        if (b->acc[i] < 0) continue;
        lo = fmin(lo, b->acc[i]), hi = fmax(hi, b->acc[i]);
        for (int j = 0; j < t->n; j++)
            if (t->acc[j] >= 0 && t->seed[j] == b->seed[i]) { d[np++] = 100 * (t->acc[j] - b->acc[i]); break; }
    }
    double mean = NAN, ci_lo = NAN, ci_hi = NAN;
    if (np > 0) {
        mean = 0;
        for (int i = 0; i < np; i++) mean += d[i] / np;
    }
    if (np >= 2) {
        double ss = 0;
        for (int i = 0; i < np; i++) ss += (d[i] - mean) * (d[i] - mean);
        double half = gsl_cdf_tdist_Pinv(0.95, np - 1) * sqrt(ss / (np - 1)) / sqrt((double)np);
        ci_lo = mean - half, ci_hi = mean + half;
    }
    bool measured = !isnan(ci_lo);
    bool noninferior = measured && ci_lo >= -TOLERANCE_PP;
    bool inferior = !isnan(mean) && (mean < -TOLERANCE_PP || (measured && ci_hi < -TOLERANCE_PP));
    if (strcmp(goal, "safety") == 0) return noninferior ? "accepted" : inferior ? "rejected" : "cannot verify";
    if (strcmp(goal, "accuracy") == 0)      /* speed is reported, not required */
        return measured && ci_lo > TOLERANCE_PP ? "accepted" : !isnan(mean) && mean > TOLERANCE_PP ? "cannot verify" : "rejected";
    if (inferior) return "rejected";
    bool gained = faster;
    if (count) {
        double bmin = INFINITY, tmax = -INFINITY;
        for (int i = 0; i < b->n; i++) bmin = fmin(bmin, b->count[i]);
        for (int i = 0; i < t->n; i++) tmax = fmax(tmax, t->count[i]);
        gained = tmax < bmin && !slower;
    }
    return gained ? (noninferior ? "accepted" : "cannot verify") : "rejected";
}

/* One step budget a configuration, from the runs' own summaries: after the first run whose step
 * decided its budget (summary step_threads > 0), every run of the set ran pinned to it
 * (config runtime.step_threads all or one) and on it. */
/* Every completed run of arr after the first that decided its own step budget ran on that budget,
 * pinned (runtime.step_threads in its config); with inherited > 0 (1 one thread, else all), every
 * run ran pinned to that budget from the first (a trial whose change keeps the step takes the
 * baseline's). Returns the budget the runs settled on (0: none decided). */
static int check_one_budget(const cJSON *arr, int inherited) {
    const cJSON *it;
    int decided = inherited;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "ok"))) continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/summary.json", cJSON_GetObjectItemCaseSensitive(it, "dir")->valuestring);
        cJSON *s = e2e_read_json(path);
        assert_non_null(s);
        int threads = (int)num(s, "step_threads", -1);
        const cJSON *pin = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "config"), "runtime"), "step_threads");
        assert_true(cJSON_IsString(pin));
        if (decided > 0) {
            if (threads != decided || strcmp(pin->valuestring, decided == 1 ? "one" : "all") != 0)
                fprintf(stderr, "%s: step_threads %d (%s) in a set pinned to %d (its first decided run, or the baseline's)\n",
                        path, threads, pin->valuestring, decided);
            assert_int_equal(threads, decided);
            assert_string_equal(pin->valuestring, decided == 1 ? "one" : "all");
            assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "step_threads_pinned")));
        } else if (threads > 0) {
            decided = threads;
        }
        cJSON_Delete(s);
    }
    return decided;
}

static void advise(const char *scenario, const char *expected_top, const char *extra, cJSON **out_json, char *dir, size_t dirn) {
    e2e_tmpdir(dir, dirn);
    char args[4096], out[1 << 16];
    snprintf(args, sizeof(args), "advise workloads/scenarios/%s.yaml -o %s --budget-minutes 10 --repeats 3 %s", scenario, dir,
             extra ? extra : "");
    int rc = e2e_run(args, out, sizeof(out));
    if (rc != 0) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    char path[4200];
    snprintf(path, sizeof(path), "%s/advice.json", dir);
    cJSON *j = e2e_read_json(path);
    assert_non_null(j);
    snprintf(path, sizeof(path), "%s/tuned.yaml", dir);
    assert_true(e2e_exists(path));
    snprintf(path, sizeof(path), "%s/report/index.html", dir);
    assert_true(e2e_exists(path));
    const cJSON *findings = cJSON_GetObjectItemCaseSensitive(j, "findings");
    if (expected_top) {
        assert_true(cJSON_GetArraySize(findings) > 0);
        const char *top = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(findings, 0), "rule")->valuestring;
        if (strcmp(top, expected_top) != 0) fprintf(stderr, "%s: top finding %s, expected %s\n%s\n", scenario, top, expected_top, out);
        assert_string_equal(top, expected_top);
    }
    /* the baseline is unprofiled and over distinct seeds; the profiled run is apart */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "profile_run")), 1);
    runs base;
    read_runs(cJSON_GetObjectItemCaseSensitive(j, "baseline_runs"), NULL, &base);
    assert_true(base.n >= 3);
    for (int i = 1; i < base.n; i++) assert_true(base.seed[i] != base.seed[0]);
    const int base_budget = check_one_budget(cJSON_GetObjectItemCaseSensitive(j, "baseline_runs"), 0);
    /* every verdict agrees with the records */
    const cJSON *f;
    cJSON_ArrayForEach(f, findings) {
        const char *goal = cJSON_GetObjectItemCaseSensitive(f, "goal")->valuestring;
        const char *verdict = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "result"), "verdict")->valuestring;
        if (strcmp(goal, "finding") == 0 || strcmp(verdict, "not run") == 0) continue;
        const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(f, "count");
        const char *count = cJSON_IsString(cnt) ? cnt->valuestring : NULL;
        runs t, b;
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(f, "result");
        int nb = (int)num(res, "baseline_runs_judged", -1), nt = (int)num(res, "runs_judged", -1);
        double level = num(res, "speed_confidence", 0.90);
        assert_true(nb >= 3 && nt >= 1 && level >= 0.90 && level < 1);
        if (cJSON_GetObjectItemCaseSensitive(res, "extended_from")) {
            /* a trial extended over more seeds: judged at the stricter level, on more runs */
            assert_true(level > 0.90 && nt > num(res, "extended_from", 0));
            assert_string_equal(goal, "speed");
        }
        read_runs_first(cJSON_GetObjectItemCaseSensitive(j, "baseline_runs"), count, nb, &b);
        read_runs_first(cJSON_GetObjectItemCaseSensitive(f, "runs"), count, nt, &t);
        /* a change to the loss scaler's numbers only runs on the baseline's budget */
        const bool keeps = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "keeps_step"));
        check_one_budget(cJSON_GetObjectItemCaseSensitive(f, "runs"), keeps ? base_budget : 0);
        const char *expect = records_verdict(&b, &t, goal, count, level);
        if (strcmp(expect, verdict) != 0)
            fprintf(stderr, "%s: %s verdict %s disagrees with the records (%s)\n%s\n", scenario,
                    cJSON_GetObjectItemCaseSensitive(f, "rule")->valuestring, verdict, expect, out);
        assert_string_equal(verdict, expect);
    }
    *out_json = j;
}

static const char *verdict_of(const cJSON *j, const char *rule) {
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(j, "findings"))
        if (strcmp(cJSON_GetObjectItemCaseSensitive(f, "rule")->valuestring, rule) == 0)
            return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "result"), "verdict")->valuestring;
    return NULL;
}

/* The scenario's top finding, and every verdict tied to the records (advise() checks both). */
static void check_scenario(const char *scenario, const char *expected_top) {
    cJSON *j;
    char dir[1024];
    advise(scenario, expected_top, NULL, &j, dir, sizeof(dir));
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static const cJSON *finding_of(const cJSON *j, const char *rule) {
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(j, "findings"))
        if (strcmp(cJSON_GetObjectItemCaseSensitive(f, "rule")->valuestring, rule) == 0) return f;
    return NULL;
}

/* Subnormal weights: the denormal rule fires from the counted subnormal parameters and proposes
 * FTZ/DAZ, weighed by the subnormal penalty measured on this CPU: a trial where the predicted gain
 * reaches what the trials resolve (the verdict then tied to the records), a finding only where the
 * CPU has no slow path to speak of (this project's Zen 5). */
static void test_subnormal_weights(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("subnormal_weights", NULL, NULL, &j, dir, sizeof(dir));
    const cJSON *f = finding_of(j, "denormals");
    assert_non_null(f);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f, "sets"), 0)->valuestring,
                        "runtime.flush_denormals=true");
    const char *evidence = cJSON_GetObjectItemCaseSensitive(f, "evidence")->valuestring;
    assert_non_null(strstr(evidence, "subnormal"));
    const char *goal = cJSON_GetObjectItemCaseSensitive(f, "goal")->valuestring;
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(f, "predicted_speedup");
    const cJSON *resolvable = cJSON_GetObjectItemCaseSensitive(j, "resolvable_speedup");
    printf("  denormals: goal %s, predicted %s; %s\n", goal ? goal : "(none)", cJSON_IsNumber(pred) ? "a number" : "none",
           evidence ? evidence : "(none)");
    if (strstr(evidence, "rising steadily") == NULL) {     /* counted only: weighed by the measured penalty */
        assert_non_null(strstr(evidence, "on this CPU"));
        assert_true(cJSON_IsNumber(pred) && cJSON_IsNumber(resolvable));
        bool worth = pred->valuedouble >= (resolvable->valuedouble > 1 ? resolvable->valuedouble : 1.10);
        assert_string_equal(goal, worth ? "speed" : "finding");
        if (!worth) assert_non_null(strstr(evidence, "not worth a trial"));
    }
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* A recompile: judged on the exact compile count, which the trial records carry. */
static void test_recompile(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("recompile", NULL, NULL, &j, dir, sizeof(dir));
    const cJSON *f = finding_of(j, "recompile");
    assert_non_null(f);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "count")->valuestring, "compile_count");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(f, "result");
    if (strcmp(cJSON_GetObjectItemCaseSensitive(res, "verdict")->valuestring, "not run") != 0) {
        assert_true(cJSON_GetObjectItemCaseSensitive(res, "count_baseline")->valuedouble >= 2);
        assert_true(cJSON_GetObjectItemCaseSensitive(res, "count_trial")->valuedouble >= 1);
    }
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* Churn from a 2-step growth window: the rule names the window, not the initial scale. */
/* The top finding and every verdict that does not rest on timing (changes judged on an exact count,
 * accuracy fixes, safety corrections; findings without a trial have no verdict), as one string: what three advise runs must agree on. A
 * speed verdict near the trials' resolution may differ between runs of a noisy machine (that is
 * bench/advisor_stability.sh's table, not a test's pass/fail). */
static void untimed_outcome(const cJSON *j, char *out, size_t n) {
    const cJSON *findings = cJSON_GetObjectItemCaseSensitive(j, "findings"), *f;
    size_t len = (size_t)snprintf(out, n, "top %s;", cJSON_GetArraySize(findings) > 0
                                  ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(findings, 0), "rule")->valuestring : "-");
    cJSON_ArrayForEach(f, findings) {
        const char *goal = cJSON_GetObjectItemCaseSensitive(f, "goal")->valuestring;
        if (strcmp(goal, "speed") == 0 && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "count"))) continue;
        if (strcmp(goal, "finding") == 0) continue;     /* no verdict: a report (the loader's, from a timed share) */
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(f, "result");
        if (len < n)
            len += (size_t)snprintf(out + len, n - len, " %s=%s", cJSON_GetObjectItemCaseSensitive(f, "rule")->valuestring,
                                    cJSON_GetObjectItemCaseSensitive(res, "verdict")->valuestring);
    }
}

/* Class 8, and the stability the issue asks of the accepted set: churn_window three times. The
 * window is proposed and judged on the exact count of skipped steps each time, and the three runs
 * agree on the top finding and on every verdict that does not rest on timing. The step's thread
 * budget is a timed decision, and on this 100-step f16 job it moves a seed's accuracy by a point or
 * more (docs/benchmarks.md, overflow_churn): an advise whose first runs chose the other budget (as
 * one rerun of three did under the sanitizers) saw other accuracies. So the three advise runs have
 * it pinned (one thread, the budget these runs chose in the release build), and the accuracy
 * verdicts then rest on the seeds alone. */
static void test_churn_window(void **state) {
    (void)state;
    char first[512] = "";
    setenv("MSTUNE_STEP_THREADS", "one", 1);
    for (int rerun = 0; rerun < 3; rerun++) {
        cJSON *j;
        char dir[1024], outcome[512];
        advise("churn_window", NULL, NULL, &j, dir, sizeof(dir));
        const cJSON *f = finding_of(j, "loss_scale");
        assert_non_null(f);
        assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f, "sets"), 0)->valuestring,
                            "amp.loss_scale.window=2000");
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "count")->valuestring, "skipped_steps");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "keeps_step")));    /* its runs: the baseline's budget */
        untimed_outcome(j, outcome, sizeof(outcome));
        fprintf(stderr, "churn_window rerun %d: %s\n", rerun + 1, outcome);
        assert_non_null(strstr(outcome, "loss_scale=accepted"));
        if (rerun == 0) memcpy(first, outcome, sizeof(first));
        else assert_string_equal(outcome, first);
        cJSON_Delete(j);
        e2e_rmtree(dir);
    }
    unsetenv("MSTUNE_STEP_THREADS");
}

/* The profiled run's summary.json (its own record of the underflow probe). */
static cJSON *profile_summary(const cJSON *j) {
    const cJSON *pr = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "profile_run"), 0);
    assert_non_null(pr);
    char path[2048];
    snprintf(path, sizeof(path), "%s/summary.json", cJSON_GetObjectItemCaseSensitive(pr, "dir")->valuestring);
    cJSON *s = e2e_read_json(path);
    assert_non_null(s);
    return s;
}

/* Partial underflow (class 7): a fixed scale of 2^-16 loses most gradient elements while the loss
 * still falls. The probe's measurement is in the profiled run's summary.json and profile.db
 * (grad_underflow rows adding up to it); grad_underflow fires with those numbers in its evidence,
 * the flat-loss rule does not, and the dynamic-scaling trial is judged on the runs' accuracy. */
static void test_partial_underflow(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("partial_underflow", "grad_underflow", NULL, &j, dir, sizeof(dir));
    cJSON *ps = profile_summary(j);
    const cJSON *gu = cJSON_GetObjectItemCaseSensitive(ps, "grad_underflow");
    assert_non_null(gu);
    double frac = num(gu, "fraction", NAN), half_zero = num(gu, "half_zero", NAN);
    assert_true(frac >= 0.01 && frac <= 1);
    assert_true(num(gu, "sampled_steps", 0) >= 1);
    /* the store's rows add up to the summary */
    char path[2048];
    snprintf(path, sizeof(path), "%s/profile.db",
             cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "profile_run"), 0), "dir")->valuestring);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), sum(half_zero), sum(ref_nonzero) FROM grad_underflow", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(st, 0), (int64_t)num(gu, "sampled_steps", 0));
    assert_int_equal(sqlite3_column_int64(st, 1), (int64_t)half_zero);
    assert_int_equal(sqlite3_column_int64(st, 2), (int64_t)num(gu, "ref_nonzero", 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* the evidence cites the measured numbers */
    const cJSON *f = finding_of(j, "grad_underflow");
    assert_non_null(f);
    const char *ev = cJSON_GetObjectItemCaseSensitive(f, "evidence")->valuestring;
    char want[128];
    snprintf(want, sizeof(want), "%.0f (%.2f%%) are zero after the O2 f16 backward", half_zero, 100 * frac);
    if (!strstr(ev, want)) fprintf(stderr, "evidence \"%s\" lacks \"%s\"\n", ev, want);
    assert_non_null(strstr(ev, want));
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f, "sets"), 0)->valuestring,
                        "amp.loss_scale.type=dynamic");
    assert_null(finding_of(j, "loss_scale_underflow"));     /* the loss fell: the old check stays blind */
    /* the fix is an accuracy gain this large (~20 points) that the records must show it */
    assert_string_equal(verdict_of(j, "grad_underflow"), "accepted");
    cJSON_Delete(ps);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* The healthy baseline of the same job (dynamic scaling from 2^24): the probe ran and measured
 * (almost) nothing lost, and nothing about underflow fires. Diagnosis only (no trial budget). */
static void test_partial_underflow_healthy(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("partial_underflow", NULL,
           "--set amp.loss_scale.type=dynamic --set amp.loss_scale.init=16777216 --budget-minutes 0.0001", &j, dir, sizeof(dir));
    cJSON *ps = profile_summary(j);
    const cJSON *gu = cJSON_GetObjectItemCaseSensitive(ps, "grad_underflow");
    assert_non_null(gu);
    assert_true(num(gu, "sampled_steps", 0) >= 1 && num(gu, "ref_nonzero", 0) > 0);
    assert_true(num(gu, "fraction", NAN) < 0.01);
    assert_null(finding_of(j, "grad_underflow"));
    assert_null(finding_of(j, "loss_scale_underflow"));
    cJSON_Delete(ps);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* train.eval false: nothing can be shown to keep accuracy, so nothing is accepted for speed, and
 * no table prints a -100% accuracy. */
static void test_no_eval(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024], path[1100];
    advise("no_eval", NULL, NULL, &j, dir, sizeof(dir));
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(j, "findings")) {
        const char *goal = cJSON_GetObjectItemCaseSensitive(f, "goal")->valuestring;
        const char *verdict = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "result"), "verdict")->valuestring;
        if (strcmp(goal, "speed") == 0) assert_string_not_equal(verdict, "accepted");
    }
    snprintf(path, sizeof(path), "%s/advice.md", dir);
    size_t md_len = 0;
    char *md = e2e_read_file(path, &md_len);
    assert_non_null(md);
    assert_null(strstr(md, "-100"));
    assert_non_null(strstr(md, "no val accuracy"));
    free(md);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static double q_double(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The median over a profile's used steps of each step's dispatch share net of the recorder's own
 * time (what the graph-mode rule reads, docs/advisor.md): a step's records (n_events) cost
 * record_ns each plus their preparation (a steady step's: (prep_ns - sig_miss_ns) / records); half
 * of the records and all of the preparation fall in dispatch. */
static double median_dispatch_share(sqlite3 *db) {
    return q_double(db, "WITH c AS (SELECT record_ns AS r, max(1.0 * (prep_ns - sig_miss_ns), 0) / records AS p"
                        "   FROM profiler_overhead),"
                        " s AS (SELECT CASE WHEN wall_ns - n_events * (r + p) > 0"
                        "   THEN max(dispatch_ns - n_events * (r / 2 + p), 0) / (wall_ns - n_events * (r + p)) ELSE 0 END AS d"
                        "   FROM steps, c WHERE warmup = 0 AND wall_ns > 0)"
                        " SELECT d FROM s ORDER BY d LIMIT 1 OFFSET (SELECT count(*) / 2 FROM s)");
}

/* Class 3: a 20-step run whose seeds move accuracy by far more than the tolerance. The window fix
 * gains on the exact count of skipped steps, but the accuracy question cannot be answered at this
 * length: "cannot verify", with the seed spread in the reason, never "accepted". The spread is
 * recomputed from the baseline runs' own summaries. */
static void test_seed_spread(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("seed_spread", "loss_scale", NULL, &j, dir, sizeof(dir));
    const cJSON *f = finding_of(j, "loss_scale");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(f, "result");
    runs b;         /* the baseline runs the verdict saw (an extended trial may have added more after) */
    read_runs_first(cJSON_GetObjectItemCaseSensitive(j, "baseline_runs"), NULL, (int)num(res, "baseline_runs_judged", -1), &b);
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < b.n; i++) lo = fmin(lo, b.acc[i]), hi = fmax(hi, b.acc[i]);
    assert_true(100 * (hi - lo) > TOLERANCE_PP);        /* the scenario reproduces the class */
    /* advise() tied the verdict to the records: "cannot verify" when the mean difference is inside
     * the tolerance (here, +2.3 points), "rejected" when it is below it; never accepted */
    const char *verdict = cJSON_GetObjectItemCaseSensitive(res, "verdict")->valuestring;
    assert_string_not_equal(verdict, "accepted");
    const char *reason = cJSON_GetObjectItemCaseSensitive(res, "reason")->valuestring;
    if (strcmp(verdict, "cannot verify") == 0) {
        assert_non_null(strstr(reason, "cannot be verified at 0.50 points on a run this short: seed spread"));
        assert_non_null(strstr(reason, "run longer"));
    }
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(res, "seed_spread_pp")->valuedouble - 100 * (hi - lo)) < 0.01);
    /* the window change is not applied; a change that leaves the numbers bit for bit (the loader's
     * workers, accepted under ASan at 1.05x over 6 seeds) may be: its accuracy is identical whatever
     * the seed spread */
    const cJSON *applied = cJSON_GetObjectItemCaseSensitive(j, "applied"), *a;
    cJSON_ArrayForEach(a, applied) assert_null(strstr(a->valuestring, "amp.loss_scale"));
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* Class 9: a dispatch share under the old fixed 10% trigger (~6% on the 2-core EPYC this was
 * written on) whose bound 1/(1-d) is still above what the trials resolve. Whether graph mode must
 * be proposed is recomputed from the profiled run's own steps and the resolvable gain the advice
 * states (a loaded machine resolves less, and then the rule rightly stays silent); when proposed,
 * it is tried and advise() ties its verdict to the records. */
static void test_low_dispatch(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024], path[2100];
    advise("low_dispatch", NULL, NULL, &j, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/profile.db",
             cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "profile_run"), 0), "dir")->valuestring);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const double d = median_dispatch_share(db), bound = 1 / (1 - d);
    sqlite3_close(db);
    const double resolvable = num(j, "resolvable_speedup", NAN);
    assert_true(resolvable > 1);
    const cJSON *f = finding_of(j, "graph_mode");
    fprintf(stderr, "low_dispatch: dispatch %.1f%% of the median step, bound %.3fx, trials resolve %.3fx: %s\n", 100 * d, bound,
            resolvable, f ? "proposed" : "not proposed");
    if (d >= 0.10 || bound > 1.01 * resolvable) {       /* the margin: the rule's median and this one may differ by a step */
        assert_non_null(f);
        assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(f, "evidence")->valuestring, "the trials resolve"));
        assert_string_not_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "result"), "verdict")->valuestring,
                                "not run");
    } else if (bound < resolvable / 1.01) {
        assert_null(f);
    }
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static int64_t staged_steps(const char *db_path) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM steps", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Run `mstune profile` on the scenario and stop the process (SIGSTOP) for stop_ms once its staged
 * profile holds at least min_steps committed steps, i.e. inside the training loop whatever the
 * build's speed (sanitizers make the set-up slower); returns its exit status, with its output in
 * out_path. */
static int profile_with_stop(const char *job, const char *dir, const char *out_path, int64_t min_steps, int stop_ms) {
    const char *bin = getenv("MSTUNE_BIN");
    if (!bin) bin = "build/mstune";
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(e2e_source_dir()) != 0) _exit(126);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
        /* every kept step records its ops and counts in the statistics, as in `mstune advise`'s
         * diagnosis run: with the default (ops on one step in four, the others stored as warm-up)
         * a stop lands in an uncounted step 3 times in 4, so all four tries missed in about one
         * test run in three ((3/4)^4; two of four runs here) */
        execl(bin, bin, "profile", job, "--set", "profile.op_every=1", "--out", dir, (char *)NULL);
        _exit(127);
    }
    char staged[1200];
    snprintf(staged, sizeof(staged), "%s/" ".run-new" "/profile.db", dir);
    int st = 0;
    for (int i = 0; i < 60000; i++) {         /* up to a minute; the run may also end first */
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (e2e_exists(staged) && staged_steps(staged) >= min_steps) break;
        usleep(1000);
    }
    kill(pid, SIGSTOP);
    usleep((useconds_t)stop_ms * 1000);
    kill(pid, SIGCONT);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Class 6: one stopped step (a real SIGSTOP of the profiled process) holds most of the run's
 * time. Run-wide sums are then far from a typical step: under 10% dispatch when the stop lands in
 * a kernel, ~90% when it lands in host code. The diagnosis must follow the median step: graph mode
 * proposed, its share the median step's (to within the rule's own median of a few steps). */
static void test_one_slow_step(void **state) {
    (void)state;
    char dir[1024], out_path[1100], db_path[1100], text_path[1100];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(out_path, sizeof(out_path), "%s/run", dir);
    snprintf(db_path, sizeof(db_path), "%s/run/profile.db", dir);
    snprintf(text_path, sizeof(text_path), "%s/stdout.txt", dir);
    double max_ms = 0, sum_share = NAN, median_share = NAN;
    for (int attempt = 0; attempt < 4 && max_ms < 500; attempt++) {
        /* the stop must land inside the loop (~0.3 s of 10,000 steps here, longer under sanitizers) */
        int rc = profile_with_stop("workloads/scenarios/one_slow_step.yaml", out_path, text_path, 100, 1200);
        if (rc != 0) {      /* say what the run said (one run under make test's load exited 74, an I/O error) */
            char *said = e2e_read_file(text_path, NULL);
            fail_msg("profile of one_slow_step exited %d:\n%s", rc, said ? said : "(no output)");
        }
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        max_ms = q_double(db, "SELECT max(wall_ns) / 1e6 FROM steps WHERE warmup = 0");
        sum_share = q_double(db, "SELECT 1.0 * sum(dispatch_ns) / sum(wall_ns) FROM steps WHERE warmup = 0");
        median_share = median_dispatch_share(db);
        sqlite3_close(db);
    }
    fprintf(stderr, "one_slow_step: longest step %.0f ms; dispatch %.1f%% of summed time, %.1f%% of the median step\n", max_ms,
            100 * sum_share, 100 * median_share);
    assert_true(max_ms >= 500);                         /* the stop landed in a step */
    assert_true(fabs(sum_share - median_share) > 0.15); /* and run-wide sums no longer describe a typical step */
    assert_true(median_share >= 0.10);
    char *text = e2e_read_file(text_path, NULL);
    assert_non_null(text);
    const char *next = strstr(text, "first: eager dispatch is ");
    if (!next) fprintf(stderr, "%s\n", text);
    assert_non_null(next);
    const double said = strtod(next + strlen("first: eager dispatch is "), NULL);
    assert_true(fabs(said - 100 * median_share) < 3);
    free(text);
    e2e_rmtree(dir);
}

static void test_loader_starved(void **state) { (void)state; check_scenario("loader_starved", "loader"); }
static void test_dispatch_bound(void **state) { (void)state; check_scenario("dispatch_bound", "graph_mode"); }
static void test_overflow_churn(void **state) { (void)state; check_scenario("overflow_churn", "loss_scale"); }
static void test_underflow(void **state) { (void)state; check_scenario("underflow", "loss_scale_underflow"); }

static void test_o3_norms(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("o3_norms", "amp_o3_norms", NULL, &j, dir, sizeof(dir));
    /* O3 is never kept: either O2 is accepted (it measured better) or it is rejected with the
     * measurement as the reason; the check above tied the verdict to the records */
    assert_non_null(verdict_of(j, "amp_o3_norms"));
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static void test_well_tuned(void **state) {
    (void)state;
    cJSON *j;
    char dir[1024];
    advise("well_tuned", NULL, NULL, &j, dir, sizeof(dir));
    const char *outcome = cJSON_GetObjectItemCaseSensitive(j, "outcome")->valuestring;
    assert_true(strncmp(outcome, "No change helped", 16) == 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "applied")), 0);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* A budget the baseline alone exhausts: every candidate is reported as not tried, with the
 * estimate and what was left, and nothing is applied. */
static void test_budget(void **state) {
    (void)state;
    char dir[1024], args[2048], out[1 << 15], path[1100];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "advise workloads/scenarios/loader_starved.yaml -o %s --budget-minutes 0.0001", dir);
    assert_int_equal(e2e_run(args, out, sizeof(out)), 0);
    snprintf(path, sizeof(path), "%s/advice.json", dir);
    cJSON *j = e2e_read_json(path);
    assert_non_null(j);
    const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "findings"), 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "rule")->valuestring, "loader");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(f, "result");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(res, "verdict")->valuestring, "not run");
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(res, "reason")->valuestring, "not tried"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "applied")), 0);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static void test_bad_input(void **state) {
    (void)state;
    char out[8192];
    assert_int_equal(e2e_run("advise workloads/scenarios/no_such_job.yaml", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "no_such_job.yaml"));
    assert_int_equal(e2e_run("advise workloads/scenarios/loader_starved.yaml --repeats 1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "--repeats"));
    assert_int_equal(e2e_run("advise workloads/scenarios/loader_starved.yaml --set data.batch_size=-3", out, sizeof(out)), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_loader_starved),
        cmocka_unit_test(test_dispatch_bound),
        cmocka_unit_test(test_overflow_churn),
        cmocka_unit_test(test_underflow),
        cmocka_unit_test(test_o3_norms),
        cmocka_unit_test(test_well_tuned),
        cmocka_unit_test(test_subnormal_weights),
        cmocka_unit_test(test_recompile),
        cmocka_unit_test(test_churn_window),
        cmocka_unit_test(test_no_eval),
        cmocka_unit_test(test_partial_underflow),
        cmocka_unit_test(test_partial_underflow_healthy),
        cmocka_unit_test(test_seed_spread),
        cmocka_unit_test(test_low_dispatch),
        cmocka_unit_test(test_one_slow_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
