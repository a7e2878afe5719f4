/* test_calibration.c — the AMP rule's calibration and prediction: the formula on a synthetic
 * profile and calibration, the rule citing the calibrated ratios and their source, and the cache
 * file (round trip, a foreign machine's lines and corrupt lines ignored). The calibrations here
 * time tiny kernels (microseconds); no time decides a result, only whether times were taken. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "advisor/calibration.h"
#include "advisor/finding.h"
#include "runtime/cpu_features.h"
#include "runtime/op.h"

typedef struct {
    rpt_profile p;
    rpt_op ops[3];
    rpt_op_sig sigs[4];
    rpt_step steps[10];
} fixture;

/* kernel time: linear 600, relu_grad 400 (p50 x calls); 10 steps, kernel share k */
static void setup(fixture *x, double k) {
    memset(x, 0, sizeof(*x));
    x->p.config = cJSON_Parse("{\"amp\": {\"level\": \"O0\"}, \"runtime\": {\"device\": \"cpu\"}}");
    assert_non_null(x->p.config);
    const char *names[3] = {"linear", "relu_grad", "cross_entropy"};
    double ns[3] = {600, 400, 0};
    for (int i = 0; i < 2; i++) {
        x->ops[i] = (rpt_op){.total_ns = (int64_t)ns[i], .p50_ns = ns[i] / 10, .calls = 10};
        snprintf(x->ops[i].name, sizeof(x->ops[i].name), "%s", names[i]);
    }
    x->p.ops = x->ops;
    x->p.n_ops = 2;
    for (int i = 0; i < 10; i++) {
        x->steps[i] = (rpt_step){.step = i, .wall_ms = 1.0, .used = true, .overflow = -1};
        x->steps[i].cat_ms[MST_CAT_KERNEL] = k;
    }
    x->p.steps = x->steps;
    x->p.n_steps = 10;
    x->p.bd.share[MST_CAT_KERNEL] = k;
    x->p.bd.steps = 10;
}

static void row(mst_amp_calib *c, const char *name, double f32_ns, double half_ns, int64_t calls) {
    mst_amp_calib_row *r = &c->rows[c->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->calls = calls;
    r->f32_ns = f32_ns;
    r->half_ns = half_ns;
    r->measured = true;
}

static void test_predict_formula(void **state) {
    (void)state;
    static fixture x;
    static mst_amp_calib c;
    setup(&x, 1.0);
    memset(&c, 0, sizeof(c));
    row(&c, "linear", 100, 50, 10);        /* half in half the time */
    double uncal;
    char cite[200];
    /* a 60% GEMM share at 0.5x, the rest uncalibrated (x1): 1 / (0.6 * 0.5 + 0.4) */
    double s = mst_amp_predict(&x.p, &c, 1.0, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 0.7) < 1e-9);
    assert_true(fabs(uncal - 0.4) < 1e-9);
    assert_non_null(strstr(cite, "linear 0.50x"));
    /* relu_grad calibrated 2x slower: 1 / (0.3 + 0.8) < 1 */
    row(&c, "relu_grad", 10, 20, 4);
    s = mst_amp_predict(&x.p, &c, 1.0, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 1.1) < 1e-9);
    assert_true(uncal == 0);
    /* signatures of one op weigh by calls x f32 time: (10*50 + 10*300) / (10*100 + 10*100) = 1.75 */
    row(&c, "linear", 100, 300, 10);
    assert_true(fabs(mst_amp_calib_ratio(&c, "linear", NULL) - 1.75) < 1e-9);
    c.n--;
    /* half the step outside kernels: 1 / (0.5 + 0.5 * 1.1) */
    s = mst_amp_predict(&x.p, &c, 0.5, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 1.05) < 1e-9);
    /* O2's parameter casts: 10 ns per step over 10 steps add 100 ns to 1000 */
    c.cast_ns = 10;
    s = mst_amp_predict(&x.p, &c, 1.0, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 1.2) < 1e-9);
    /* and the loss scaler's unscale pass: 5 ns per step, 50 more */
    c.unscale_ns = 5;
    s = mst_amp_predict(&x.p, &c, 1.0, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 1.25) < 1e-9);
    /* with loss scaling turned off there is no unscale pass */
    cJSON *amp = cJSON_GetObjectItemCaseSensitive(x.p.config, "amp");
    cJSON_AddItemToObject(amp, "loss_scale", cJSON_Parse("{\"type\": \"none\"}"));
    s = mst_amp_predict(&x.p, &c, 1.0, &uncal, cite, sizeof(cite));
    assert_true(fabs(s - 1 / 1.2) < 1e-9);
    cJSON_Delete(x.p.config);
}

static void test_rule_cites_calibration(void **state) {
    (void)state;
    static fixture x;
    static mst_amp_calib c;
    setup(&x, 0.95);
    memset(&c, 0, sizeof(c));
    row(&c, "linear", 100, 25, 10);
    row(&c, "relu_grad", 10, 21, 10);
    c.n_measured = 1;
    c.n_cached = 1;
    snprintf(c.path, sizeof(c.path), "/tmp/some-calibration.tsv");
    cJSON *summary = cJSON_Parse("{\"steps\": 10}");
    mst_rule_env env = {2, 0, summary, 0, false, &c};
    static mst_finding f[MST_MAX_FINDINGS];
    int n = mst_advisor_diagnose(&x.p, &env, f, MST_MAX_FINDINGS);
    const mst_finding *a = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].rule, "amp_level") == 0) a = &f[i];
    assert_non_null(a);
    char ev[sizeof(a->evidence)];
    snprintf(ev, sizeof(ev), "%s", a->evidence);
    assert_non_null(strstr(ev, "linear 0.25x"));
    assert_non_null(strstr(ev, "relu_grad 2.10x"));
    assert_non_null(strstr(ev, "/tmp/some-calibration.tsv"));
    /* 1 / (0.05 + 0.95 * (0.6 * 0.25 + 0.4 * 2.1)) */
    assert_true(fabs(a->predicted - 1 / (0.05 + 0.95 * (0.15 + 0.84))) < 1e-9);
    /* no calibration: still proposed, with no predicted number */
    env.amp_calib = NULL;
    n = mst_advisor_diagnose(&x.p, &env, f, MST_MAX_FINDINGS);
    a = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].rule, "amp_level") == 0) a = &f[i];
    assert_non_null(a);
    assert_true(isnan(a->predicted));
    snprintf(ev, sizeof(ev), "%s", a->evidence);
    assert_non_null(strstr(ev, "no per-op calibration"));
    cJSON_Delete(summary);
    cJSON_Delete(x.p.config);
}

/* a profile of real, tiny kernel calls: linear (8x16 by 4x16 + bias), relu_grad, cross_entropy */
static void setup_real(fixture *x) {
    setup(x, 1.0);
    x->ops[2] = (rpt_op){.total_ns = 10, .p50_ns = 1, .calls = 10};
    snprintf(x->ops[2].name, sizeof(x->ops[2].name), "cross_entropy");
    x->p.n_ops = 3;
    char *sigs[3] = {"[[8,16],[4,16],[4]]|f32,f32,f32", "[[8,4],[8,4]]|f32,f32", "[[8,4],[8]]|f32,i32"};
    int ops[3] = {MST_OP_LINEAR, MST_OP_RELU_GRAD, MST_OP_CROSS_ENTROPY};
    for (int i = 0; i < 3; i++)
        x->sigs[i] = (rpt_op_sig){.name = x->ops[i].name, .op = ops[i], .sig = sigs[i], .calls = 10};
    x->p.sigs = x->sigs;
    x->p.n_sigs = 3;
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

static void test_cache_round_trip(void **state) {
    (void)state;
    char path[] = "/tmp/mst_amp_calXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    static fixture x;
    static mst_amp_calib c;
    char err[300];
    setup_real(&x);
    mst_amp_calib_opts o = {.half = "bf16", .kernels = "builtin", .n_threads = 1, .budget_s = 5, .cache_path = path};
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.n_measured, 2);              /* cross_entropy stays f32 at O2 */
    assert_int_equal(c.n_cached, 0);
    assert_true(c.rows[0].measured && c.rows[0].f32_ns > 0 && c.rows[0].half_ns > 0);
    assert_true(c.rows[1].measured && c.rows[1].half_ns > 0);
    assert_true(c.rows[2].f32_at_o2 && !c.rows[2].measured);
    assert_true(mst_amp_calib_ratio(&c, "cross_entropy", NULL) == 1.0);
    assert_int_equal(count_lines(path), 2);
    double f0 = c.rows[0].f32_ns, h1 = c.rows[1].half_ns;
    /* the second calibration reads both from the file, bit for bit (as printed: 1 ns) */
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_measured, 0);
    assert_int_equal(c.n_cached, 2);
    assert_true(c.rows[0].cached && fabs(c.rows[0].f32_ns - f0) < 1.0 && fabs(c.rows[1].half_ns - h1) < 1.0);
    assert_int_equal(count_lines(path), 2);
    /* another thread budget is another key: measured again */
    o.n_threads = 2;
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_measured, 2);
    assert_int_equal(count_lines(path), 4);
    /* with the parameters known: their two casts and the loss scaler's unscale pass, timed and cached */
    o.param_elems = 4096;
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_true(c.cast_ns > 0 && !c.cast_cached);
    assert_true(c.unscale_ns > 0 && !c.unscale_cached);
    assert_int_equal(count_lines(path), 7);
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_true(c.cast_cached && c.unscale_cached && c.unscale_ns > 0);
    assert_int_equal(count_lines(path), 7);
    unlink(path);
    cJSON_Delete(x.p.config);
}

static void test_cache_foreign_and_corrupt(void **state) {
    (void)state;
    char path[] = "/tmp/mst_amp_calXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    static fixture x;
    static mst_amp_calib c;
    char err[300], machine[320];
    setup_real(&x);
    mst_amp_calib_opts o = {.half = "bf16", .kernels = "builtin", .n_threads = 1, .budget_s = 5, .cache_path = path};
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    /* rewrite the file: this machine's lines with the numbers corrupted or cut, another machine's
     * lines with fine numbers, and junk */
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char lines[2][2048];
    assert_non_null(fgets(lines[0], sizeof(lines[0]), in));
    assert_non_null(fgets(lines[1], sizeof(lines[1]), in));
    fclose(in);
    mst_cpu_machine_id(machine, sizeof(machine));
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    for (int i = 0; i < 2; i++) {
        char *last = strrchr(lines[i], '\t');
        assert_non_null(last);
        char keep = *last;
        *last = '\0';
        fprintf(out, "%s\tnot-a-number\n", lines[i]);              /* corrupt half time */
        char *cut = strrchr(lines[i], '\t');
        *cut = '\0';
        fprintf(out, "%s\n", lines[i]);                           /* a field short */
        *cut = '\t';
        *last = keep;
        char *m = strstr(lines[i], machine);
        assert_non_null(m);
        fprintf(out, "%.*sOther CPU|sse2%s", (int)(m - lines[i]), lines[i], m + strlen(machine));   /* foreign machine */
    }
    fputs("amp1\t\t\t\n\x01\x02garbage\xff\n\n", out);
    fclose(out);
    int before = count_lines(path);
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_cached, 0);                /* none of those lines counts */
    assert_int_equal(c.n_measured, 2);
    assert_int_equal(count_lines(path), before + 2);
    /* a missing or unwritable file is no error either: measured, nothing kept */
    o.cache_path = "/nonexistent-dir/amp.tsv";
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_measured, 2);
    /* a signature that does not parse is a row that says so */
    x.sigs[0].sig = "[[8,16],[4,16]|f32";
    o.cache_path = "off";
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_false(c.rows[0].measured);
    assert_true(c.rows[0].note[0] != '\0');
    assert_int_equal(c.n_measured, 1);
    unlink(path);
    cJSON_Delete(x.p.config);
}

/* attribute slots from the signature: a padded conv and batch norm's gradient (half activations
 * beside f32 per-channel inputs) rebuild and time; a conv whose attributes do not fit its shapes
 * is a row that says why */
static void test_rebuild_with_attributes(void **state) {
    (void)state;
    static fixture x;
    static mst_amp_calib c;
    char err[300];
    setup(&x, 1.0);
    snprintf(x.ops[0].name, sizeof(x.ops[0].name), "conv2d");
    snprintf(x.ops[1].name, sizeof(x.ops[1].name), "batchnorm_grad");
    char *sigs[3] = {"[[2,3,8,8],[4,3,3,3]]|f32,f32|i:1,1,1,1", "[[2,3,8,8],[4,3,9,9]]|f32,f32|i:1,1,0,0",
                     "[[2,4,8,8],[2,4,8,8],[4],[4],[4]]|f32,f32,f32,f32,f32|i:1"};
    const char *names[3] = {"conv2d", "conv2d", "batchnorm_grad"};
    int ops[3] = {MST_OP_CONV2D, MST_OP_CONV2D, MST_OP_BATCHNORM_GRAD};
    for (int i = 0; i < 3; i++) x.sigs[i] = (rpt_op_sig){.name = (char *)names[i], .op = ops[i], .sig = sigs[i], .calls = 10};
    x.p.sigs = x.sigs;
    x.p.n_sigs = 3;
    mst_amp_calib_opts o = {.half = "bf16", .kernels = "builtin", .n_threads = 1, .budget_s = 5, .cache_path = "off"};
    assert_int_equal(mst_amp_calibrate(&x.p, &o, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n, 3);
    assert_true(c.rows[0].measured && c.rows[0].half_ns > 0);
    assert_false(c.rows[1].measured);                   /* a 9x9 kernel on 8x8 without padding: rejected by inference */
    assert_true(c.rows[1].note[0] != '\0');
    assert_true(c.rows[2].measured && c.rows[2].half_ns > 0);
    assert_int_equal(c.n_measured, 2);
    assert_true(mst_amp_calib_ratio(&c, "conv2d", NULL) > 0);
    cJSON_Delete(x.p.config);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predict_formula),
        cmocka_unit_test(test_rule_cites_calibration),
        cmocka_unit_test(test_cache_round_trip),
        cmocka_unit_test(test_cache_foreign_and_corrupt),
        cmocka_unit_test(test_rebuild_with_attributes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
