/* test_report_cli.c — what the report pages tell a user, through the real binary: the profile
 * report ends with "next: mstune advise JOB" when a rule fires (and the terminal says the same),
 * links trace.json (whose steps are ProfilerStep#N); the advise report leads with the advice read
 * from advice.json (findings, verdicts, tuned.yaml changes) before the baseline's profile; a
 * missing profile is exit 2 naming it. */
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

#define SCENARIO "workloads/scenarios/dispatch_bound.yaml"

static char g_out[1 << 17];

static void run_ok(const char *args) { e2e_run_ok(args, g_out, sizeof(g_out)); }

static char *read_text(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    char *t = e2e_read_file(path, NULL);
    if (!t) fail_msg("no %s", path);
    return t;
}

static void test_profile_next_and_trace(void **state) {
    char dir[512], args[1024];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile " SCENARIO " --set profile.trace_steps=3 --out %s", dir);
    run_ok(args);
    /* the scenario is dispatch-bound by construction: the graph-mode rule fires */
    const char *next = strstr(g_out, "next: mstune advise " SCENARIO);
    if (!next) fail_msg("no next hint in:\n%s", g_out);
    char line[512];
    snprintf(line, sizeof(line), "%.*s", (int)strcspn(next, "\n"), next);
    char *html = read_text(dir, "report/index.html");
    const char *hint = strstr(html, "id=\"next-step\">");
    assert_non_null(hint);
    assert_true(strncmp(hint + strlen("id=\"next-step\">"), "next: mstune advise " SCENARIO, strlen("next: mstune advise " SCENARIO)) == 0);
    assert_true(hint > strstr(html, "id=\"run\""));       /* it ends the page */
    const char *link = strstr(html, "id=\"trace-link\">Trace: <a href=\"");
    assert_non_null(link);
    link += strlen("id=\"trace-link\">Trace: <a href=\"");
    char href[512], path[1200];
    snprintf(href, sizeof(href), "%.*s", (int)strcspn(link, "\""), link);
    snprintf(path, sizeof(path), "%s/report/%s", dir, href);
    if (!e2e_exists(path)) fail_msg("the trace link '%s' does not resolve from the report folder", href);
    assert_non_null(strstr(html, "ui.perfetto.dev"));
    free(html);
    char *trace = read_text(dir, "trace.json");
    assert_non_null(strstr(trace, "\"name\":\"ProfilerStep#"));
    free(trace);
    e2e_rmtree(dir);
}

static void test_advise_report_leads_with_advice(void **state) {
    char dir[512], args[1024];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "advise " SCENARIO " --repeats 2 -o %s", dir);
    run_ok(args);
    char path[1024];
    snprintf(path, sizeof(path), "%s/advice.json", dir);
    cJSON *adv = e2e_read_json(path);
    assert_non_null(adv);
    char *html = read_text(dir, "report/index.html");
    const char *sec = strstr(html, "<section id=\"advice\">"), *answer = strstr(html, "id=\"answer\"");
    assert_non_null(sec);
    assert_non_null(answer);
    assert_true(sec < answer);      /* first on the page */
    /* one row per finding (and one for the combination when there is one) */
    const char *table = strstr(sec, "<table id=\"advice-table\">"), *end = strstr(table, "</table>");
    int rows = -1;      /* the header row */
    for (const char *p = table; (p = strstr(p, "<tr>")) && p < end; p++) rows++;
    int want = cJSON_GetArraySize(cJSON_GetObjectItem(adv, "findings")) + (cJSON_GetObjectItem(adv, "combined") ? 1 : 0);
    assert_int_equal(rows, want);
    assert_true(want > 0);
    const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(adv, "findings"), 0);
    const char *verdict = cJSON_GetObjectItem(cJSON_GetObjectItem(f, "result"), "verdict")->valuestring;
    char cell[128];
    snprintf(cell, sizeof(cell), "<td class=\"verdict-cell\">%s</td>", verdict);
    assert_non_null(strstr(table, cell));
    /* the tuned.yaml changes: each applied override as -old/+new, or a sentence saying there are none */
    const cJSON *applied = cJSON_GetObjectItem(adv, "applied");
    if (cJSON_GetArraySize(applied) == 0) {
        assert_non_null(strstr(sec, "id=\"tuned-diff-none\""));
    } else {
        const cJSON *s;
        cJSON_ArrayForEach(s, applied) {
            char plus[256];
            const char *eq = strchr(s->valuestring, '=');
            snprintf(plus, sizeof(plus), "+ %.*s: %s", (int)(eq - s->valuestring), s->valuestring, eq + 1);
            if (!strstr(sec, plus)) fail_msg("no '%s' in the tuned.yaml diff", plus);
        }
    }
    assert_non_null(strstr(html, "<section id=\"trials\">"));
    assert_true(strstr(html, "<section id=\"trials\">") < answer);
    free(html);
    cJSON_Delete(adv);
    e2e_rmtree(dir);
}

/* Lines of a CSV file (CRLF-terminated records; no field here holds a line break). */
static int csv_lines(const char *text, char *header, size_t hn) {
    int n = 0;
    snprintf(header, hn, "%.*s", (int)strcspn(text, "\r\n"), text);
    for (const char *p = text; (p = strstr(p, "\r\n")); p += 2) n++;
    return n;
}

static void test_export_csv(void **state) {
    char dir[512], args[2048];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile workloads/jobs/quickstart.yaml --set data.limit=640 --set train.checkpoint=false --out %s", dir);
    run_ok(args);
    /* the terminal's breakdown: mean ms/step add up to the mean step, shares to 100% (to rounding) */
    const char *cats[] = {"dispatch", "kernel", "comm", "data", "compile", "memcpy", "other"};
    double sum_ms = 0, sum_share = 0, step_ms = -1, step_share = 0;
    for (int c = 0; c < 7; c++) {
        char key[32];
        snprintf(key, sizeof(key), "\n  %-10s ", cats[c]);
        const char *line = strstr(g_out, key);
        if (!line) fail_msg("no %s row in:\n%s", cats[c], g_out);
        double ms, share;
        assert_int_equal(sscanf(line + strlen(key), "%lf %lf%%", &ms, &share), 2);
        sum_ms += ms;
        sum_share += share;
    }
    const char *total = strstr(g_out, "\n  step       ");
    assert_non_null(total);
    assert_int_equal(sscanf(total + 14, "%lf %lf%%", &step_ms, &step_share), 2);
    if (fabs(sum_ms - step_ms) > 0.0035 || fabs(sum_share - 100) > 0.36)
        fail_msg("categories add up to %.3f ms and %.1f%%, the step is %.3f ms:\n%s", sum_ms, sum_share, step_ms, g_out);
    char *page = read_text(dir, "report/index.html");
    assert_non_null(strstr(page, "id=\"breakdown-total\""));
    free(page);
    snprintf(args, sizeof(args), "export-csv %s/profile.db %s/csv", dir, dir);
    run_ok(args);
    char *steps = read_text(dir, "csv/steps.csv"), *ops = read_text(dir, "csv/ops.csv"), header[4096];
    int n_steps = csv_lines(steps, header, sizeof(header));
    assert_true(strncmp(header, "step,t_begin_ns,t_end_ns,wall_ns,", 33) == 0);
    char *sum = read_text(dir, "report/index.html");   /* "N steps recorded" in the page's header */
    char want[64];
    snprintf(want, sizeof(want), "%d steps recorded", n_steps - 1);
    if (!strstr(sum, want)) fail_msg("steps.csv has %d rows; the report does not say '%s'", n_steps - 1, want);
    int n_ops = csv_lines(ops, header, sizeof(header));
    assert_true(strncmp(header, "name,op,calls,total_ns,", 23) == 0);
    assert_true(n_ops > 3);
    assert_non_null(strstr(ops, "\r\nmatmul,"));
    free(sum);
    free(steps);
    free(ops);
    assert_int_equal(e2e_run("export-csv /nonexistent/profile.db /tmp/x", g_out, sizeof(g_out)), 2);
    e2e_rmtree(dir);
}

static void test_missing_profile(void **state) {
    assert_int_equal(e2e_run("report /nonexistent/run/profile.db", g_out, sizeof(g_out)), 2);
    assert_non_null(strstr(g_out, "/nonexistent/run/profile.db"));
    assert_int_equal(e2e_run("compare /nonexistent/a.db /nonexistent/b.db", g_out, sizeof(g_out)), 2);
    assert_int_equal(e2e_run("export-trace /nonexistent/a.db /tmp/x.json", g_out, sizeof(g_out)), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_next_and_trace),
        cmocka_unit_test(test_advise_report_leads_with_advice),
        cmocka_unit_test(test_export_csv),
        cmocka_unit_test(test_missing_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
