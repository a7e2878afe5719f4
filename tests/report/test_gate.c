/* test_gate.c — the gate's rules on runs made up in memory (seeded noise, seed printed on failure)
 * and on summary.json files written to a temp folder: config file parsing, loading and failed or
 * diverged runs, each verdict of each rule, the fingerprint, history mode, calibration, exit codes
 * and the well-formedness of every output. Real runs of the binary: tests/integration/test_gate.c. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "report/gate.h"
#include "tests/integration/e2e.h"
#include "tests/report/xml_check.h"

#define MIB 1048576.0

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_gauss(uint64_t *s) {
    double u1 = ((rng_next(s) >> 11) + 0.5) * 0x1.0p-53, u2 = (rng_next(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static cJSON *job_config(const char *augment) {
    cJSON *c = cJSON_CreateObject(), *data = cJSON_AddObjectToObject(c, "data");
    cJSON_AddStringToObject(c, "name", "quick<&>\"start'");     /* needs escaping in every output */
    cJSON_AddNumberToObject(data, "batch_size", 64);
    cJSON_AddStringToObject(data, "augment", augment);
    return c;
}

static cJSON *machine(const char *cpu, const char *rev) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "mstune_version", "0.1.0");
    cJSON_AddStringToObject(m, "git_revision", rev);
    cJSON_AddStringToObject(m, "host", rev);        /* differs with the revision: ignored too */
    cJSON_AddStringToObject(m, "cpu_model", cpu);
    cJSON_AddStringToObject(m, "cpu_cores", "8");
    cJSON_AddStringToObject(m, "openblas", "OpenBLAS 0.3.26");
    return m;
}

typedef struct {
    double step_ms, mem, acc;       /* acc < 0: no evaluation */
    const char *cpu, *augment, *rev;
    bool no_machine, no_config;
} run_spec;

static void make_run(mst_gate_run *r, const run_spec *s) {
    mst_gate_run_set_failed(r, "mem", "");
    r->ok = true;
    r->error[0] = '\0';
    r->value[MST_GATE_METRIC_STEP_TIME] = s->step_ms;
    r->value[MST_GATE_METRIC_THROUGHPUT] = 64 * 1000 / s->step_ms;
    r->value[MST_GATE_METRIC_PEAK_MEMORY] = s->mem;
    r->value[MST_GATE_METRIC_QUALITY] = s->acc >= 0 ? s->acc : NAN;
    r->config = s->no_config ? NULL : job_config(s->augment ? s->augment : "none");
    r->machine = s->no_machine ? NULL : machine(s->cpu ? s->cpu : "Test CPU", s->rev ? s->rev : "rev-a");
}

/* k runs with log-normal step-time noise of sd cv around step_ms */
static void make_group(mst_gate_run *r, int k, double step_ms, double cv, uint64_t *seed, run_spec base) {
    for (int i = 0; i < k; i++) {
        run_spec s = base;
        s.step_ms = step_ms * exp(cv * rng_gauss(seed));
        make_run(&r[i], &s);
    }
}

static void free_group(mst_gate_run *r, int k) {
    for (int i = 0; i < k; i++) mst_gate_run_free(&r[i]);
}

static const run_spec SPEC = {.mem = 100 * MIB, .acc = -1};

static mst_gate_config defaults(void) {
    mst_gate_config c;
    mst_gate_config_default(&c);
    return c;
}

/* ---- config ---- */

static bool config_equal(const mst_gate_config *a, const mst_gate_config *b) {
    return a->alpha == b->alpha && a->min_effect == b->min_effect && a->cv_multiplier == b->cv_multiplier &&
           a->memory_pct == b->memory_pct && a->memory_mib == b->memory_mib &&
           a->accuracy_margin_points == b->accuracy_margin_points && a->runs == b->runs &&
           a->allow_config_change == b->allow_config_change;
}

static void test_config(void **state) {
    mst_gate_config c = defaults();
    assert_true(c.alpha == 0.01 && c.min_effect == 0.05 && c.cv_multiplier == 3 && c.memory_pct == 5 &&
                c.memory_mib == 64 && c.accuracy_margin_points == 0.5 && c.runs == 5 && !c.allow_config_change);
    char err[512];
    assert_int_equal(mst_gate_config_parse(&c, "{\"alpha\": 0.05, \"runs\": 7, \"memory_mib\": 1, \"allow_config_change\": true}",
                                           "t", err, sizeof(err)),
                     0);
    assert_true(c.alpha == 0.05 && c.runs == 7 && c.memory_mib == 1 && c.allow_config_change && c.min_effect == 0.05);
    mst_gate_config before = c;
    assert_int_equal(mst_gate_config_parse(&c, "{\"alpha\": 0.05, \"min_efect\": 0.1}", "gate.json", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "gate.json: unknown key 'min_efect'"));
    assert_int_equal(mst_gate_config_parse(&c, "{\"alpha\": 0.9}", "t", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'alpha'"));
    assert_int_equal(mst_gate_config_parse(&c, "{\"runs\": 5.5}", "t", err, sizeof(err)), -1);
    assert_int_equal(mst_gate_config_parse(&c, "{\"min_effect\": 5}", "t", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "0.05 = 5%"));
    assert_int_equal(mst_gate_config_parse(&c, "{\"allow_config_change\": 1}", "t", err, sizeof(err)), -1);
    assert_int_equal(mst_gate_config_parse(&c, "[1]", "t", err, sizeof(err)), -1);
    assert_int_equal(mst_gate_config_parse(&c, "{\"alpha\": ", "t", err, sizeof(err)), -1);
    assert_true(config_equal(&c, &before));             /* a bad file changes nothing */
    /* the writer's output reads back */
    cJSON *j = mst_gate_config_to_json(&c);
    char *text = cJSON_Print(j);
    mst_gate_config d = defaults();
    assert_int_equal(mst_gate_config_parse(&d, text, "roundtrip", err, sizeof(err)), 0);
    assert_true(config_equal(&c, &d));
    cJSON_free(text);
    cJSON_Delete(j);
    assert_int_equal(mst_gate_config_load(&d, "/nonexistent/gate.json", err, sizeof(err)), -1);
}

/* ---- loading runs ---- */

static void write_text(const char *dir, const char *name, const char *text) {
    char p[1200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_load_runs(void **state) {
    char tmp[512], d[600];
    e2e_tmpdir(tmp, sizeof(tmp));
    mst_gate_run r;
    snprintf(d, sizeof(d), "%s/good", tmp);
    mkdir(d, 0755);
    write_text(d, "summary.json",
               "{\"val_accuracy\": -1, \"final_train_loss\": 0.5, \"step_time_ms_median\": 0.7, \"samples_per_s\": 91000,"
               " \"peak_memory_bytes\": 3425712, \"interrupted\": false, \"train_loss\": [1.0, 0.5],"
               " \"config\": {\"name\": \"q\"}, \"machine\": {\"cpu_model\": \"X\"}}");
    assert_int_equal(mst_gate_run_load(&r, d), 0);
    assert_true(r.ok);
    assert_true(r.value[MST_GATE_METRIC_STEP_TIME] == 0.7 && r.value[MST_GATE_METRIC_THROUGHPUT] == 91000 &&
                r.value[MST_GATE_METRIC_PEAK_MEMORY] == 3425712);
    assert_true(isnan(r.value[MST_GATE_METRIC_QUALITY]));     /* -1: no evaluation */
    assert_true(isnan(r.value[MST_GATE_METRIC_STEP_TIME_P90]));
    assert_non_null(r.config);
    assert_non_null(r.machine);
    mst_gate_run_free(&r);

    snprintf(d, sizeof(d), "%s/missing", tmp);
    mkdir(d, 0755);
    assert_int_equal(mst_gate_run_load(&r, d), -1);
    assert_false(r.ok);
    assert_non_null(strstr(r.error, "missing"));
    mst_gate_run_free(&r);

    struct {
        const char *name, *json, *why;
    } bad[] = {
        {"nan", "{\"final_train_loss\": null, \"step_time_ms_median\": 0.7}", "diverged"},
        {"nanstep", "{\"final_train_loss\": 1, \"train_loss\": [1.0, null], \"step_time_ms_median\": 0.7}", "step 1"},
        {"interrupted", "{\"interrupted\": true, \"step_time_ms_median\": 0.7}", "interrupted"},
        {"notime", "{\"final_train_loss\": 1}", "step_time_ms_median"},
        {"garbage", "{\"final_train_loss\": ", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(d, sizeof(d), "%s/%s", tmp, bad[i].name);
        mkdir(d, 0755);
        write_text(d, "summary.json", bad[i].json);
        assert_int_equal(mst_gate_run_load(&r, d), -1);
        if (!strstr(r.error, bad[i].why)) fail_msg("%s: '%s' lacks '%s'", bad[i].name, r.error, bad[i].why);
        mst_gate_run_free(&r);
    }
    e2e_rmtree(tmp);
}

/* ---- timing rule ---- */

/* Many A/A comparisons of k = 5 runs a side with 2% noise: none may FAIL; with threshold
 * max(5%, 3 CV) and alpha 0.01 even WARN should be rare. */
static void test_aa_never_fails(void **state) {
    uint64_t seed0 = 0xa1a1a1a1ull, seed = seed0;
    mst_gate_config cfg = defaults();
    int counts[MST_GATE_VERDICT_COUNT] = {0};
    for (int it = 0; it < 500; it++) {
        mst_gate_run b[5], c[5];
        make_group(b, 5, 1.0, 0.02, &seed, SPEC);
        make_group(c, 5, 1.0, 0.02, &seed, SPEC);
        mst_gate_result r;
        assert_int_equal(mst_gate_compare(&cfg, b, 5, c, 5, &r), 0);
        counts[r.verdict]++;
        free_group(b, 5);
        free_group(c, 5);
    }
    printf("A/A, 500 comparisons: %d PASS, %d WARN, %d FAIL\n", counts[MST_GATE_PASS], counts[MST_GATE_WARN],
           counts[MST_GATE_FAIL]);
    if (counts[MST_GATE_FAIL] != 0 || counts[MST_GATE_WARN] > 25)
        fail_msg("A/A: %d FAIL, %d WARN (seed %#llx)", counts[MST_GATE_FAIL], counts[MST_GATE_WARN], (unsigned long long)seed0);
}

static void test_slowdown_fails(void **state) {
    uint64_t seed = 0xb2b2ull;
    mst_gate_config cfg = defaults();
    mst_gate_run b[5], c[5];
    make_group(b, 5, 1.0, 0.01, &seed, SPEC);
    make_group(c, 5, 1.3, 0.01, &seed, SPEC);
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    const mst_gate_metric_result *st = &r.metric[MST_GATE_METRIC_STEP_TIME], *tp = &r.metric[MST_GATE_METRIC_THROUGHPUT];
    assert_int_equal(st->verdict, MST_GATE_FAIL);
    assert_int_equal(tp->verdict, MST_GATE_FAIL);
    assert_true(st->exact);
    assert_true(fabs(st->p_value - 1.0 / 252) < 1e-12);
    assert_true(st->change > 0.25 && st->change < 0.35);
    assert_true(st->change_lo <= st->change && st->change <= st->change_hi && st->change_lo > 0);
    assert_true(tp->change < -0.2 && tp->change_hi < 0);   /* throughput drops */
    assert_int_equal(r.verdict, MST_GATE_FAIL);
    assert_int_equal(mst_gate_exit_code(&r), 1);
    assert_non_null(strstr(r.reason, "step time"));
    free_group(b, 5);
    free_group(c, 5);
    /* the mirror image is an improvement, not a failure */
    seed = 0xb2b2ull;
    make_group(c, 5, 1.0, 0.01, &seed, SPEC);
    make_group(b, 5, 1.3, 0.01, &seed, SPEC);
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_PASS);
    assert_non_null(strstr(r.metric[MST_GATE_METRIC_STEP_TIME].note, "improved"));
    free_group(b, 5);
    free_group(c, 5);
}

/* One run hit by a load spike (3.8x) must neither hide a real slowdown, by inflating the CV and
 * with it the threshold, nor make an A/A comparison fail. */
static void test_outlier_run(void **state) {
    mst_gate_config cfg = defaults();
    double bt[] = {1.00, 1.01, 0.99, 1.02, 0.98}, ct[] = {1.41, 1.40, 1.42, 3.80, 1.41}, at[] = {1.005, 0.995, 1.015, 0.985, 3.0};
    mst_gate_run b[5], c[5];
    for (int i = 0; i < 5; i++) {
        run_spec s = SPEC;
        s.step_ms = bt[i];
        make_run(&b[i], &s);
        s.step_ms = ct[i];
        make_run(&c[i], &s);
    }
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_FAIL);
    assert_true(r.metric[MST_GATE_METRIC_STEP_TIME].cv < 0.03);
    free_group(c, 5);
    for (int i = 0; i < 5; i++) {
        run_spec s = SPEC;
        s.step_ms = at[i];
        make_run(&c[i], &s);
    }
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_PASS);
    free_group(b, 5);
    free_group(c, 5);
}

static void test_warn_cases(void **state) {
    mst_gate_config cfg = defaults();
    mst_gate_run b[5], c[5];
    mst_gate_result r;
    /* significant but small: +3% with 0.1% noise */
    uint64_t seed = 0xc3ull;
    make_group(b, 5, 1.0, 0.001, &seed, SPEC);
    make_group(c, 5, 1.03, 0.001, &seed, SPEC);
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_WARN);
    assert_true(r.metric[MST_GATE_METRIC_STEP_TIME].p_value <= 0.01);
    assert_int_equal(r.verdict, MST_GATE_WARN);
    assert_int_equal(mst_gate_exit_code(&r), 0);
    free_group(b, 5);
    free_group(c, 5);
    /* large but not significant: +10% median shift, but the groups overlap */
    double bt[] = {1.00, 1.30, 0.90, 1.20, 1.05}, ct[] = {1.25, 0.95, 1.40, 1.10, 1.15};
    for (int i = 0; i < 5; i++) {
        run_spec s = SPEC;
        s.step_ms = bt[i];
        make_run(&b[i], &s);
        s.step_ms = ct[i];
        make_run(&c[i], &s);
    }
    cfg.cv_multiplier = 0;      /* keep the threshold at 5% despite the noise */
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    const mst_gate_metric_result *m = &r.metric[MST_GATE_METRIC_STEP_TIME];
    assert_true(m->p_value > 0.01);
    assert_true(m->change > 0.05);
    assert_int_equal(m->verdict, MST_GATE_WARN);
    assert_non_null(strstr(m->note, "not significant"));
    /* with the default 3 x CV the same data is within the threshold: a plain PASS */
    cfg = defaults();
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_PASS);
    assert_true(r.metric[MST_GATE_METRIC_STEP_TIME].threshold > 0.2);
    free_group(b, 5);
    free_group(c, 5);
}

static void test_too_few_runs(void **state) {
    mst_gate_config cfg = defaults();
    uint64_t seed = 0xd4ull;
    mst_gate_run b[4], c[4];
    make_group(b, 4, 1.0, 0.01, &seed, SPEC);
    make_group(c, 4, 2.0, 0.01, &seed, SPEC);       /* even a 2x slowdown */
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 4, c, 4, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_INCONCLUSIVE);
    assert_non_null(strstr(r.metric[MST_GATE_METRIC_STEP_TIME].note, "cannot reach alpha"));
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    assert_int_equal(mst_gate_exit_code(&r), 3);
    /* at alpha 0.05, 4 runs a side are enough (1/70 < 0.05) */
    cfg.alpha = 0.05;
    mst_gate_compare(&cfg, b, 4, c, 4, &r);
    assert_int_equal(r.verdict, MST_GATE_FAIL);
    free_group(b, 4);
    free_group(c, 4);
}

/* ---- memory and accuracy ---- */

static mst_gate_verdict memory_verdict(double base_mib, double cand_mib) {
    mst_gate_config cfg = defaults();
    uint64_t seed = 0xe5ull;
    mst_gate_run b[5], c[5];
    run_spec sb = SPEC, sc = SPEC;
    sb.mem = base_mib * MIB;
    sc.mem = cand_mib * MIB;
    make_group(b, 5, 1.0, 0.01, &seed, sb);
    seed = 0xe5ull;
    make_group(c, 5, 1.0, 0.01, &seed, sc);
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    free_group(b, 5);
    free_group(c, 5);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_PASS);
    return r.metric[MST_GATE_METRIC_PEAK_MEMORY].verdict;
}

static void test_memory_rule(void **state) {
    assert_int_equal(memory_verdict(1000, 1100), MST_GATE_FAIL);     /* +10%, +100 MiB */
    assert_int_equal(memory_verdict(1000, 1064), MST_GATE_FAIL);     /* +6.4%, +64 MiB: both at the line */
    assert_int_equal(memory_verdict(10, 11), MST_GATE_WARN);         /* +10% but only +1 MiB */
    assert_int_equal(memory_verdict(10000, 10100), MST_GATE_WARN);   /* +100 MiB but only +1% */
    assert_int_equal(memory_verdict(1000, 1010), MST_GATE_PASS);
    assert_int_equal(memory_verdict(1000, 500), MST_GATE_PASS);      /* less is fine */
}

static mst_gate_result accuracy_compare(const double *ba, const double *ca, int k, double margin) {
    mst_gate_config cfg = defaults();
    cfg.accuracy_margin_points = margin;
    mst_gate_run b[8], c[8];
    for (int i = 0; i < k; i++) {
        run_spec s = SPEC;
        s.step_ms = 1 + 0.001 * i;
        s.acc = ba[i];
        make_run(&b[i], &s);
        s.acc = ca[i];
        make_run(&c[i], &s);
    }
    mst_gate_result r;
    mst_gate_compare(&cfg, b, k, c, k, &r);
    free_group(b, k);
    free_group(c, k);
    return r;
}

static void test_accuracy_rule(void **state) {
    double same[] = {0.85, 0.85, 0.85, 0.85, 0.85}, lower1[] = {0.84, 0.84, 0.84, 0.84, 0.84};
    double lower03[] = {0.847, 0.847, 0.847, 0.847, 0.847}, higher[] = {0.86, 0.86, 0.86, 0.86, 0.86};
    mst_gate_result r = accuracy_compare(same, lower1, 5, 0.5);
    const mst_gate_metric_result *m = &r.metric[MST_GATE_METRIC_QUALITY];
    assert_int_equal(m->verdict, MST_GATE_FAIL);                       /* 1 point lower, every run */
    assert_true(fabs(m->change - -1.0) < 1e-9);
    assert_true(fabs(m->p_value - 0.001988375854894326) < 1e-12);      /* tie-corrected normal p */
    assert_int_equal(r.verdict, MST_GATE_FAIL);
    r = accuracy_compare(same, lower1, 5, 2.0);                        /* a wider margin: significant but within */
    assert_int_equal(r.metric[MST_GATE_METRIC_QUALITY].verdict, MST_GATE_WARN);
    r = accuracy_compare(same, lower03, 5, 0.5);
    assert_int_equal(r.metric[MST_GATE_METRIC_QUALITY].verdict, MST_GATE_WARN);
    r = accuracy_compare(same, higher, 5, 0.5);
    assert_int_equal(r.metric[MST_GATE_METRIC_QUALITY].verdict, MST_GATE_PASS);
    r = accuracy_compare(same, same, 5, 0.5);
    assert_int_equal(r.metric[MST_GATE_METRIC_QUALITY].verdict, MST_GATE_PASS);
    /* seeded varying accuracies, 2 points lower on average */
    double ba[] = {0.851, 0.846, 0.853, 0.849, 0.848}, ca[] = {0.829, 0.832, 0.827, 0.830, 0.826};
    r = accuracy_compare(ba, ca, 5, 0.5);
    assert_int_equal(r.metric[MST_GATE_METRIC_QUALITY].verdict, MST_GATE_FAIL);
    assert_true(r.metric[MST_GATE_METRIC_QUALITY].exact);
}

/* ---- fingerprint ---- */

static mst_gate_result fingerprint_compare(run_spec sb, run_spec sc, bool allow) {
    mst_gate_config cfg = defaults();
    cfg.allow_config_change = allow;
    uint64_t seed = 0xf6ull;
    mst_gate_run b[5], c[5];
    make_group(b, 5, 1.0, 0.01, &seed, sb);
    make_group(c, 5, 1.0, 0.01, &seed, sc);
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    free_group(b, 5);
    free_group(c, 5);
    return r;
}

static void test_fingerprint(void **state) {
    run_spec a = SPEC, b = SPEC;
    mst_gate_result r = fingerprint_compare(a, b, false);
    assert_true(r.comparable);
    assert_int_equal(r.verdict, MST_GATE_PASS);
    assert_string_equal(r.config_hash_base, r.config_hash_cand);
    assert_non_null(strstr(r.fingerprint, "same machine: Test CPU, 8 cores"));
    /* another CPU: inconclusive, whatever the numbers say */
    b.cpu = "Other CPU";
    r = fingerprint_compare(a, b, false);
    assert_false(r.comparable);
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    assert_int_equal(mst_gate_exit_code(&r), 3);
    assert_non_null(strstr(r.fingerprint, "cpu_model 'Test CPU' (baseline) vs 'Other CPU' (candidate)"));
    assert_null(strstr(strstr(r.fingerprint, "cpu_model") + 1, "cpu_model"));     /* named once, not per run */
    /* a new build on the same machine: git_revision and host differ, comparable */
    b = SPEC;
    b.rev = "rev-b";
    r = fingerprint_compare(a, b, false);
    assert_true(r.comparable);
    /* no machine object on one side: unknown, still comparable */
    b = SPEC;
    b.no_machine = true;
    r = fingerprint_compare(a, b, false);
    assert_true(r.comparable);
    assert_non_null(strstr(r.fingerprint, "machine unknown for 0 baseline and 5 candidate runs"));
    a.no_machine = true;
    r = fingerprint_compare(a, b, false);
    assert_true(r.comparable);
    assert_non_null(strstr(r.fingerprint, "machine unknown (no machine object"));
    /* a different job config: inconclusive unless allowed, and the difference is named */
    a = SPEC;
    b = SPEC;
    b.augment = "heavy";
    r = fingerprint_compare(a, b, false);
    assert_false(r.comparable);
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    assert_non_null(strstr(r.fingerprint, "data.augment: \"none\" -> \"heavy\""));
    assert_string_not_equal(r.config_hash_base, r.config_hash_cand);
    r = fingerprint_compare(a, b, true);
    assert_true(r.comparable);
    assert_int_equal(r.verdict, MST_GATE_PASS);
    /* runs of one side on different machines */
    mst_gate_config cfg = defaults();
    uint64_t seed = 1;
    mst_gate_run bb[5], cc[5];
    make_group(bb, 5, 1.0, 0.01, &seed, SPEC);
    make_group(cc, 5, 1.0, 0.01, &seed, SPEC);
    cJSON_ReplaceItemInObject(bb[3].machine, "cpu_cores", cJSON_CreateString("4"));
    mst_gate_compare(&cfg, bb, 5, cc, 5, &r);
    assert_false(r.comparable);
    assert_non_null(strstr(r.fingerprint, "cpu_cores"));
    free_group(bb, 5);
    free_group(cc, 5);
}

static void test_failed_runs(void **state) {
    mst_gate_config cfg = defaults();
    uint64_t seed = 0x17ull;
    mst_gate_run b[5], c[5];
    make_group(b, 5, 1.0, 0.01, &seed, SPEC);
    make_group(c, 5, 1.5, 0.01, &seed, SPEC);
    mst_gate_run_free(&c[2]);
    mst_gate_run_set_failed(&c[2], "c2", "command exited 1");
    mst_gate_result r;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_JOB_FAILED);       /* before the regression */
    assert_int_equal(mst_gate_exit_code(&r), 4);
    assert_int_equal(r.n_failed, 1);
    assert_non_null(strstr(r.reason, "command exited 1"));
    free_group(b, 5);
    free_group(c, 5);
}

/* ---- outputs ---- */

static char *render(void (*fn)(FILE *, const mst_gate_result *), const mst_gate_result *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(f, r);
    fclose(f);
    return buf;
}

static void json_fn(FILE *f, const mst_gate_result *r) { assert_int_equal(mst_gate_write_json(f, r), 0); }

static int count_lines_starting(const char *text, const char *prefix) {
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0) n++;
    return n;
}

static void check_outputs(const mst_gate_result *r, int expect_errors) {
    char err[256];
    char *json = render(json_fn, r);
    cJSON *j = cJSON_Parse(json);
    if (!j) fail_msg("JSON does not parse:\n%s", json);
    assert_string_equal(cJSON_GetObjectItem(j, "verdict")->valuestring, mst_gate_verdict_name(r->verdict));
    assert_int_equal(cJSON_GetObjectItem(j, "exit_code")->valueint, mst_gate_exit_code(r));
    cJSON *metrics = cJSON_GetObjectItem(j, "metrics");
    assert_int_equal(cJSON_GetArraySize(metrics), MST_GATE_METRIC_COUNT);
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        cJSON *o = cJSON_GetArrayItem(metrics, m);
        assert_string_equal(cJSON_GetObjectItem(o, "metric")->valuestring, mst_gate_metrics[m].key);
        assert_string_equal(cJSON_GetObjectItem(o, "verdict")->valuestring, mst_gate_verdict_name(r->metric[m].verdict));
    }
    cJSON_Delete(j);
    free(json);

    char *xml = render(mst_gate_write_junit, r);
    if (!xml_well_formed(xml, err, sizeof(err))) fail_msg("JUnit XML: %s\n%s", err, xml);
    int fails = 0;
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) fails += r->metric[m].verdict == MST_GATE_FAIL;
    int failure_tags = 0;
    for (const char *p = xml; (p = strstr(p, "<failure ")); p++) failure_tags++;
    assert_int_equal(failure_tags, fails);
    free(xml);

    char *md = render(mst_gate_write_markdown, r);
    assert_non_null(strstr(md, "| metric | baseline | candidate |"));
    char head[64];
    snprintf(head, sizeof(head), "### mstune gate: %s", mst_gate_verdict_name(r->verdict));
    assert_non_null(strstr(md, head));
    free(md);

    char *ann = render(mst_gate_write_annotations, r);
    assert_int_equal(count_lines_starting(ann, "::error "), expect_errors);
    /* every line is a workflow command; the message has no raw newline */
    for (const char *p = ann; *p; p = strchr(p, '\n') + 1) assert_true(p[0] == ':' && p[1] == ':');
    free(ann);

    char *table = render(mst_gate_print_table, r);
    assert_non_null(strstr(table, "verdict: "));
    assert_non_null(strstr(table, mst_gate_verdict_name(r->verdict)));
    free(table);
}

static void test_outputs(void **state) {
    mst_gate_config cfg = defaults();
    uint64_t seed = 0x99ull;
    mst_gate_run b[5], c[5];
    mst_gate_result r;
    /* FAIL on step time and throughput: two ::error lines */
    make_group(b, 5, 1.0, 0.01, &seed, SPEC);
    run_spec slow = SPEC;
    slow.augment = "<heavy & \"slow\">";     /* the config diff lands in every output */
    make_group(c, 5, 1.4, 0.01, &seed, slow);
    cfg.allow_config_change = true;
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_FAIL);
    check_outputs(&r, 2);
    char *md = render(mst_gate_write_markdown, &r);
    assert_non_null(strstr(md, "**FAIL**"));
    free(md);
    free_group(c, 5);
    /* PASS: no annotation at all */
    make_group(c, 5, 1.0, 0.01, &seed, SPEC);
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_PASS);
    check_outputs(&r, 0);
    char *ann = render(mst_gate_write_annotations, &r);
    assert_string_equal(ann, "");
    free(ann);
    free_group(c, 5);
    /* WARN: ::warning, no ::error */
    seed = 0xc3ull;
    free_group(b, 5);
    make_group(b, 5, 1.0, 0.001, &seed, SPEC);
    make_group(c, 5, 1.03, 0.001, &seed, SPEC);
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_WARN);
    check_outputs(&r, 0);
    ann = render(mst_gate_write_annotations, &r);
    assert_true(count_lines_starting(ann, "::warning ") >= 1);
    free(ann);
    /* INCONCLUSIVE (machine) and JOB FAILED render too */
    free_group(c, 5);
    run_spec other = SPEC;
    other.cpu = "Other, CPU: 2";
    make_group(c, 5, 1.0, 0.001, &seed, other);
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    check_outputs(&r, 0);
    mst_gate_run_free(&c[0]);
    mst_gate_run_set_failed(&c[0], "x", "summary.json <missing> & more");
    mst_gate_compare(&cfg, b, 5, c, 5, &r);
    assert_int_equal(r.verdict, MST_GATE_JOB_FAILED);
    check_outputs(&r, 1);
    free_group(b, 5);
    free_group(c, 5);
}

/* ---- history ---- */

static void test_history(void **state) {
    char tmp[512], path[600], err[1024];
    e2e_tmpdir(tmp, sizeof(tmp));
    snprintf(path, sizeof(path), "%s/gate-history.json", tmp);
    uint64_t seed = 0x4157ull;
    mst_gate_config cfg = defaults();
    mst_gate_history h;
    mst_gate_history_init(&h);
    mst_gate_run past[12];
    make_group(past, 12, 1.0, 0.02, &seed, SPEC);
    assert_int_equal(mst_gate_history_add(&h, past, 3, 10, err, sizeof(err)), 0);
    assert_int_equal(mst_gate_history_save(&h, path, err, sizeof(err)), 0);
    mst_gate_history_free(&h);
    /* 3 runs are not enough for a prediction interval */
    assert_int_equal(mst_gate_history_load(&h, path, err, sizeof(err)), 0);
    assert_int_equal(h.n, 3);
    mst_gate_run cur[3];
    make_group(cur, 3, 1.0, 0.02, &seed, SPEC);
    mst_gate_result r;
    mst_gate_compare_history(&cfg, &h, cur, 3, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_INCONCLUSIVE);
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    /* add 9 more, keep the newest 10 */
    assert_int_equal(mst_gate_history_add(&h, past + 3, 9, 10, err, sizeof(err)), 0);
    assert_int_equal(h.n, 10);
    /* (through the file: cJSON prints 15 digits when they read back within an ulp or so) */
    assert_true(fabs(h.value[MST_GATE_METRIC_STEP_TIME][0] / past[2].value[MST_GATE_METRIC_STEP_TIME] - 1) < 1e-13);
    assert_int_equal(mst_gate_history_save(&h, path, err, sizeof(err)), 0);
    mst_gate_history_free(&h);
    assert_int_equal(mst_gate_history_load(&h, path, err, sizeof(err)), 0);
    assert_int_equal(h.n, 10);
    assert_string_equal(h.revision[0], "rev-a");
    /* same distribution: no failure */
    mst_gate_compare_history(&cfg, &h, cur, 3, &r);
    assert_int_equal(r.mode, MST_GATE_MODE_HISTORY);
    assert_true(r.verdict == MST_GATE_PASS || r.verdict == MST_GATE_WARN);
    check_outputs(&r, 0);
    free_group(cur, 3);
    /* 30% slower: FAIL */
    make_group(cur, 3, 1.3, 0.02, &seed, SPEC);
    mst_gate_compare_history(&cfg, &h, cur, 3, &r);
    assert_int_equal(r.metric[MST_GATE_METRIC_STEP_TIME].verdict, MST_GATE_FAIL);
    assert_int_equal(r.verdict, MST_GATE_FAIL);
    assert_true(r.metric[MST_GATE_METRIC_STEP_TIME].change_lo > 0.1);
    check_outputs(&r, 2);
    free_group(cur, 3);
    /* another machine: refused when recording, inconclusive when comparing */
    run_spec other = SPEC;
    other.cpu = "Other CPU";
    make_group(cur, 3, 1.0, 0.02, &seed, other);
    assert_int_equal(mst_gate_history_add(&h, cur, 1, 10, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "another machine"));
    mst_gate_compare_history(&cfg, &h, cur, 3, &r);
    assert_int_equal(r.verdict, MST_GATE_INCONCLUSIVE);
    free_group(cur, 3);
    /* a failed run is never recorded */
    mst_gate_run bad;
    mst_gate_run_set_failed(&bad, "b", "diverged");
    assert_int_equal(mst_gate_history_add(&h, &bad, 1, 10, err, sizeof(err)), -1);
    mst_gate_history_free(&h);
    write_text(tmp, "not-history.json", "{\"runs\": []}");
    snprintf(path, sizeof(path), "%s/not-history.json", tmp);
    assert_int_equal(mst_gate_history_load(&h, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not a gate history"));
    free_group(past, 12);
    e2e_rmtree(tmp);
}

/* ---- calibration ---- */

static void test_calibrate(void **state) {
    mst_gate_config cfg = defaults();
    uint64_t seed = 0xca11ull;
    mst_gate_run runs[20];
    make_group(runs, 20, 1.0, 0.03, &seed, SPEC);
    mst_gate_calibration c;
    char err[256];
    assert_int_equal(mst_gate_calibrate(&cfg, runs, 20, 0.20, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n, 20);
    /* the sample sd of 20 draws of sd 0.03 lies well within [0.02, 0.04] */
    assert_true(c.cv[MST_GATE_METRIC_STEP_TIME] > 0.02 && c.cv[MST_GATE_METRIC_STEP_TIME] < 0.04);
    assert_true(fabs(c.threshold - 3 * c.cv[MST_GATE_METRIC_STEP_TIME]) < 1e-12);
    assert_true(c.cv[MST_GATE_METRIC_PEAK_MEMORY] < 1e-12);     /* the same peak every run */
    assert_true(isnan(c.cv[MST_GATE_METRIC_QUALITY]));
    /* a 20% slowdown against ~9% threshold: a handful of runs */
    assert_true(c.runs_needed >= 5 && c.runs_needed <= 10);
    assert_true(c.proposed.runs == (c.runs_needed > cfg.runs ? c.runs_needed : cfg.runs));
    /* power grows with runs and with the effect, and is ~0 below the threshold */
    double p5 = mst_gate_power(&cfg, 0.03, 0.20, 5, 400, 7), p10 = mst_gate_power(&cfg, 0.03, 0.20, 10, 400, 7);
    assert_true(p10 >= p5);
    assert_true(mst_gate_power(&cfg, 0.01, 0.50, 5, 400, 7) > 0.95);
    assert_true(mst_gate_power(&cfg, 0.01, 0.02, 10, 400, 7) < 0.01);
    assert_true(mst_gate_power(&cfg, 0.01, 0.50, 4, 400, 7) == 0);     /* 4 runs cannot reach 0.01 */
    assert_int_equal(mst_gate_calibrate(&cfg, runs, 2, 0.2, &c, err, sizeof(err)), -1);
    free_group(runs, 20);
}

static void test_verdict_names(void **state) {
    for (int v = 0; v < MST_GATE_VERDICT_COUNT; v++) assert_string_not_equal(mst_gate_verdict_name((mst_gate_verdict)v), "?");
    assert_string_equal(mst_gate_verdict_name(MST_GATE_FAIL), "FAIL");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),         cmocka_unit_test(test_load_runs),
        cmocka_unit_test(test_aa_never_fails), cmocka_unit_test(test_slowdown_fails),
        cmocka_unit_test(test_outlier_run),    cmocka_unit_test(test_warn_cases),
        cmocka_unit_test(test_too_few_runs),
        cmocka_unit_test(test_memory_rule),    cmocka_unit_test(test_accuracy_rule),
        cmocka_unit_test(test_fingerprint),    cmocka_unit_test(test_failed_runs),
        cmocka_unit_test(test_outputs),        cmocka_unit_test(test_history),
        cmocka_unit_test(test_calibrate),      cmocka_unit_test(test_verdict_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
