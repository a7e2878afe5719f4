/* test_numbers.c — one definition per headline figure, through the real binary: throughput is the
 * samples the run actually processed over the wall time of its training loop, and `train`'s output,
 * `profile`'s output, summary.json, the report card (with and without summary.json beside the
 * profile) and compare all show that same number (docs/report.md). And the job's metric
 * everywhere: a PSNR job's card, summary.md, charts' readings, compare and the gate speak of PSNR
 * in dB, never of accuracy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/e2e.h"

/* 1000 samples at batch 64: 15 full batches and one of 40, so batch x steps (1024) is not the
 * count processed (1000) */
#define SMALL "workloads/jobs/quickstart.yaml --set data.limit=1000"

static char g_out[1 << 17];

static void run_ok(const char *args) { e2e_run_ok(args, g_out, sizeof(g_out)); }

static cJSON *read_json(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    cJSON *j = e2e_read_json(p);
    if (!j) fail_msg("no readable %s", p);
    return j;
}

static double html_value(const char *html, const char *id) { return e2e_html_value(html, id); }

/* "throughput X samples/s, Y steps/s (N samples in T s of training loop)" from a command's output */
typedef struct {
    double samples_per_s, steps_per_s, loop_s;
    long long samples;
} printed;

static printed parse_line(const char *out) {
    const char *p = strstr(out, "throughput ");
    if (!p) fail_msg("no throughput line in:\n%s", out);
    printed r;
    if (sscanf(p, "throughput %lf samples/s, %lf steps/s (%lld samples in %lf s of training loop)", &r.samples_per_s,
               &r.steps_per_s, &r.samples, &r.loop_s) != 4)
        fail_msg("unexpected throughput line: %.*s", (int)strcspn(p, "\n"), p);
    return r;
}

/* summary.json's throughput is its own counts over its own loop time, and the printed line
 * rounds exactly those numbers */
static void check_summary_and_line(const cJSON *s, const printed *l) {
    double n = e2e_num(s, "samples_processed"), t = e2e_num(s, "train_loop_s"), sps = e2e_num(s, "samples_per_s");
    double steps = e2e_num(s, "steps") - e2e_num(s, "resumed_at_step"), stps = e2e_num(s, "steps_per_s");
    assert_true(t > 0 && n > 0);
    /* cJSON prints 15 digits when they read back within an epsilon: not always the last bit */
    if (fabs(sps - n / t) > 1e-12 * sps || fabs(stps - steps / t) > 1e-12 * stps)
        fail_msg("summary.json: samples_per_s %.17g, steps_per_s %.17g; its counts over train_loop_s give %.17g, %.17g", sps, stps,
                 n / t, steps / t);
    assert_true((double)l->samples == n);
    assert_true(fabs(l->samples_per_s - sps) <= 0.5);
    assert_true(fabs(l->steps_per_s - stps) <= 0.05 + 1e-9);
    assert_true(fabs(l->loop_s - t) <= 0.005 + 1e-9);
}

static void test_train_prints_what_summary_holds(void **state) {
    char dir[512], args[1024];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "train " SMALL " --out %s", dir);
    run_ok(args);
    cJSON *s = read_json(dir, "summary.json");
    printed l = parse_line(g_out);
    check_summary_and_line(s, &l);
    /* the samples actually processed: the last, short batch counts what it held */
    assert_int_equal((int)e2e_num(s, "samples_processed"), 1000);
    assert_int_equal((int)e2e_num(s, "steps"), 16);
    /* the loop's wall time covers every step's: at least their median times the steps */
    assert_true(e2e_num(s, "train_loop_s") * 1e3 >= e2e_num(s, "step_time_ms_median") * 8);
    cJSON_Delete(s);
    e2e_rmtree(dir);
}

static void test_card_summary_cli_and_compare_agree(void **state) {
    char dir[512], args[2048];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile " SMALL " --out %s", dir);
    run_ok(args);
    printed l = parse_line(g_out);
    cJSON *s = read_json(dir, "summary.json");
    check_summary_and_line(s, &l);
    double sps = e2e_num(s, "samples_per_s"), stps = e2e_num(s, "steps_per_s");
    char path[1024];
    snprintf(path, sizeof(path), "%s/report/index.html", dir);
    char *html = e2e_read_file(path, NULL);
    assert_non_null(html);
    assert_true(html_value(html, "throughput") == sps);
    assert_true(html_value(html, "steps-per-s") == stps);
    /* the page names the profile where it is after promotion, not the staging folder */
    char shown[700];
    snprintf(shown, sizeof(shown), "profile <code>%s/profile.db</code>", dir);
    if (!strstr(html, shown) || strstr(html, ".run-new")) fail_msg("the report does not name %s/profile.db", dir);
    /* the run's metadata names the threads the step ran on, as summary.json does (none while undecided) */
    int ran_on = (int)e2e_num(s, "step_threads");
    char threads_row[64];
    snprintf(threads_row, sizeof(threads_row), "step_threads</td><td>%d of ", ran_on);
    if (ran_on > 0 ? !strstr(html, threads_row) : strstr(html, "step_threads</td>") != NULL)
        fail_msg("summary.json step_threads %d, and the report's metadata does not agree", ran_on);
    free(html);

    /* the report of the database alone (no summary.json beside it) computes the same definition
     * from the run table */
    char alone[512], rep[600];
    e2e_tmpdir(alone, sizeof(alone));
    snprintf(args, sizeof(args), "cp %s/profile.db %s/profile.db", dir, alone);
    assert_int_equal(system(args), 0);
    snprintf(rep, sizeof(rep), "%s/rep", alone);
    snprintf(args, sizeof(args), "report %s/profile.db --out %s", alone, rep);
    run_ok(args);
    snprintf(path, sizeof(path), "%s/index.html", rep);
    html = e2e_read_file(path, NULL);
    assert_non_null(html);
    double regen = html_value(html, "throughput");
    if (fabs(regen - sps) > 1e-9 * sps) fail_msg("report from profile.db alone: %.17g samples/s, summary.json %.17g", regen, sps);
    free(html);

    /* compare shows the same throughput for each side */
    char cmp[600];
    snprintf(cmp, sizeof(cmp), "%s/cmp", alone);
    snprintf(args, sizeof(args), "compare %s/profile.db %s/profile.db --out %s", dir, alone, cmp);
    run_ok(args);
    cJSON *c = read_json(cmp, "compare.json");
    const cJSON *rows = cJSON_GetObjectItem(c, "rows"), *it;
    bool found = false;
    cJSON_ArrayForEach(it, rows) {
        const cJSON *id = cJSON_GetObjectItem(it, "id");
        if (!cJSON_IsString(id) || strcmp(id->valuestring, "throughput") != 0) continue;
        found = true;
        double a = e2e_num(it, "a"), b = e2e_num(it, "b");
        if (a != sps || fabs(b - sps) > 1e-9 * sps) fail_msg("compare: throughput %.17g / %.17g, summary.json %.17g", a, b, sps);
    }
    if (!found) fail_msg("compare.json has no throughput row");
    cJSON_Delete(c);
    cJSON_Delete(s);
    e2e_rmtree(alone);
    e2e_rmtree(dir);
}

static char *read_text(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    char *t = e2e_read_file(p, NULL);
    if (!t) fail_msg("no %s", p);
    return t;
}

static void no_accuracy(const char *what, const char *text) {
    const char *bad[] = {"accuracy", "Accuracy"};
    for (int i = 0; i < 2; i++) {
        const char *p = strstr(text, bad[i]);
        if (p) fail_msg("%s of a PSNR job says '%.60s'", what, p > text + 40 ? p - 40 : text);
    }
}

static void test_psnr_job_speaks_its_metric(void **state) {
    char dir[512], args[2048];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile workloads/jobs/fashion_sr_short.yaml --set train.steps=12 --out %s", dir);
    run_ok(args);
    cJSON *s = read_json(dir, "summary.json");
    const cJSON *m = cJSON_GetObjectItem(s, "metric");
    assert_string_equal(cJSON_GetObjectItem(m, "name")->valuestring, "psnr");
    assert_string_equal(cJSON_GetObjectItem(m, "unit")->valuestring, "dB");
    assert_string_equal(cJSON_GetObjectItem(m, "direction")->valuestring, "higher");
    double psnr = e2e_num(m, "value");
    assert_true(psnr > 5 && psnr < 60);
    /* the epoch records carry the metric too (the loss chart and the epochs table read it) */
    const cJSON *ep = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "epoch_records"), 0);
    assert_true(ep && e2e_num(ep, "val_metric") == psnr);

    char *html = read_text(dir, "report/index.html");
    assert_true(html_value(html, "val-psnr") == psnr);
    assert_non_null(strstr(html, "Validation PSNR"));
    assert_non_null(strstr(html, " dB</div>"));
    assert_non_null(strstr(html, "val PSNR (dB)"));      /* the epochs table's column */
    no_accuracy("report/index.html", html);
    free(html);
    char *md = read_text(dir, "report/summary.md");
    assert_non_null(strstr(md, "validation PSNR"));
    char want[64];
    snprintf(want, sizeof(want), "%.2f dB", psnr);
    if (!strstr(md, want)) fail_msg("summary.md lacks '%s':\n%s", want, md);
    no_accuracy("summary.md", md);
    free(md);

    /* compare: the metric's row, named and in dB */
    char cmp[600];
    snprintf(cmp, sizeof(cmp), "%s/cmp", dir);
    snprintf(args, sizeof(args), "compare %s/profile.db %s/profile.db --out %s", dir, dir, cmp);
    run_ok(args);
    no_accuracy("compare's table", g_out);
    assert_non_null(strstr(g_out, "validation PSNR (dB)"));
    cJSON *c = read_json(cmp, "compare.json");
    const cJSON *it;
    bool found = false;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "rows")) {
        const cJSON *id = cJSON_GetObjectItem(it, "id");
        if (!cJSON_IsString(id) || strcmp(id->valuestring, "val-psnr") != 0) continue;
        found = true;
        assert_true(e2e_num(it, "a") == psnr);
        assert_string_equal(cJSON_GetObjectItem(it, "unit")->valuestring, "dB");
    }
    if (!found) fail_msg("compare.json has no val-psnr row");
    cJSON_Delete(c);
    char *page = read_text(cmp, "index.html");
    no_accuracy("compare's page", page);
    free(page);

    /* the gate's quality row is the job's metric, in dB */
    char gj[700];
    snprintf(gj, sizeof(gj), "%s/gate.json", dir);
    snprintf(args, sizeof(args), "gate --baseline %s --current %s --json %s", dir, dir, gj);
    int rc = e2e_run(args, g_out, sizeof(g_out));
    if (rc != 0 && rc != 3) fail_msg("mstune %s exited %d:\n%s", args, rc, g_out);
    assert_non_null(strstr(g_out, "val PSNR"));
    assert_non_null(strstr(g_out, " dB"));
    no_accuracy("the gate's table", g_out);
    cJSON *g = e2e_read_json(gj);
    assert_non_null(g);
    found = false;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(g, "metrics")) {
        if (strcmp(cJSON_GetObjectItem(it, "metric")->valuestring, "metric") != 0) continue;
        found = true;
        assert_string_equal(cJSON_GetObjectItem(it, "metric_name")->valuestring, "psnr");
        assert_string_equal(cJSON_GetObjectItem(it, "unit")->valuestring, "dB");
        assert_string_equal(cJSON_GetObjectItem(it, "change_unit")->valuestring, "dB");
        assert_true(e2e_num(it, "baseline") == psnr);
    }
    if (!found) fail_msg("gate.json has no quality row");
    cJSON_Delete(g);
    cJSON_Delete(s);
    e2e_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_prints_what_summary_holds),
        cmocka_unit_test(test_card_summary_cli_and_compare_agree),
        cmocka_unit_test(test_psnr_job_speaks_its_metric),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
