/* test_report_browser.c — the report as a person sees it: `mstune profile` renders report/,
 * headless Chromium (Debian's chromium package; installed here when missing and we are root)
 * loads index.html inside a checking page, and the test fails on a broken image, a console
 * message from the report, or a headline number that differs from summary.json. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/e2e.h"

static const char *find_chromium(void) {
    static const char *paths[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0) return paths[i];
    return NULL;
}

/* The checking page: loads the report in an iframe (same folder, file://) and writes what it
 * finds into <pre id="result"> as JSON, which --dump-dom prints. */
static const char k_checker[] =
    "<!doctype html><html><body><pre id=\"result\">pending</pre>\n"
    "<iframe id=\"f\" src=\"index.html\" width=\"1200\" height=\"800\" onload=\"check()\"></iframe>\n"
    "<script>\n"
    "function check() {\n"
    "  var d = document.getElementById('f').contentDocument, imgs = d.images, broken = [], vals = [];\n"
    "  for (var i = 0; i < imgs.length; i++)\n"
    "    if (!imgs[i].complete || imgs[i].naturalWidth === 0) broken.push(imgs[i].getAttribute('src'));\n"
    "  d.querySelectorAll('[data-summary-key]').forEach(function (e) {\n"
    "    vals.push([e.getAttribute('data-summary-key'), Number(e.getAttribute('data-value')), e.textContent]);\n"
    "  });\n"
    "  var svg = d.querySelectorAll('object, embed, img[src$=\".svg\"]').length;\n"
    "  document.getElementById('result').textContent = JSON.stringify({title: d.title, images: imgs.length,\n"
    "    broken: broken, values: vals, svg: svg});\n"
    "}\n"
    "</script></body></html>\n";

static cJSON *lookup(cJSON *root, const char *dotted) {
    char path[256];
    snprintf(path, sizeof(path), "%s", dotted);
    cJSON *node = root;
    for (char *save = NULL, *tok = strtok_r(path, ".", &save); tok && node; tok = strtok_r(NULL, ".", &save))
        node = cJSON_GetObjectItem(node, tok);
    return node;
}

static void test_report_in_chromium(void **state) {
    const char *chrome = find_chromium();
    if (!chrome && geteuid() == 0) {
        printf("chromium not found: installing Debian's chromium package\n");
        if (system("DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium > /dev/null 2>&1 || "
                   "(apt-get update -qq > /dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive timeout 900 "
                   "apt-get install -y -qq chromium > /dev/null 2>&1)") != 0)
            printf("apt-get install chromium failed\n");
        chrome = find_chromium();
    }
    if (!chrome) {
        printf("SKIPPED: headless Chromium is not available (not installed%s)\n",
               geteuid() == 0 ? " and apt-get could not install it" : ", and installing needs root");
        skip();
    }
    char dir[512], args[1024], out[16384];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "profile workloads/jobs/quickstart.yaml --set data.limit=3200 --set profile.level=2 --out %s", dir);
    int rc = e2e_run(args, out, sizeof(out));
    if (rc != 0) fail_msg("mstune %s exited %d:\n%s", args, rc, out);

    char page[700], cmd[4096];
    snprintf(page, sizeof(page), "%s/report/_browser_check.html", dir);
    FILE *f = fopen(page, "w");
    assert_non_null(f);
    fputs(k_checker, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "timeout 120 '%s' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
             "--disable-background-networking --disable-component-update --disable-sync --user-data-dir='%s/chrome' "
             "--allow-file-access-from-files --enable-logging=stderr --v=1 --virtual-time-budget=5000 "
             "--dump-dom 'file://%s' > '%s/dom.html' 2> '%s/chrome.log'",
             chrome, dir, page, dir, dir);
    if (system(cmd) != 0) fail_msg("chromium failed: see %s/chrome.log", dir);

    char p[800];
    snprintf(p, sizeof(p), "%s/dom.html", dir);
    char *dom = e2e_read_file(p, NULL);
    assert_non_null(dom);
    char *start = strstr(dom, "<pre id=\"result\">");
    assert_non_null(start);
    start += strlen("<pre id=\"result\">");
    char *end = strstr(start, "</pre>");
    assert_non_null(end);
    *end = '\0';
    /* --dump-dom escapes the text: undo the entities JSON.stringify's output can contain */
    for (char *s = start, *w = start; ; s++) {
        if (strncmp(s, "&quot;", 6) == 0) { *w++ = '"'; s += 5; }
        else if (strncmp(s, "&amp;", 5) == 0) { *w++ = '&'; s += 4; }
        else if (strncmp(s, "&lt;", 4) == 0) { *w++ = '<'; s += 3; }
        else if (strncmp(s, "&gt;", 4) == 0) { *w++ = '>'; s += 3; }
        else { *w++ = *s; if (!*s) break; }
    }
    cJSON *res = cJSON_Parse(start);
    if (!res) fail_msg("checking page result is not JSON: %s", start);
    printf("chromium saw: %s\n", start);

    int images = cJSON_GetObjectItem(res, "images")->valueint;
    assert_true(images >= 4);                               /* the charts (gnuplot is installed by setup) */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(res, "broken")), 0);

    snprintf(p, sizeof(p), "%s/summary.json", dir);
    cJSON *sum = e2e_read_json(p);
    assert_non_null(sum);
    cJSON *vals = cJSON_GetObjectItem(res, "values");
    assert_true(cJSON_GetArraySize(vals) >= 8);
    cJSON *v;
    cJSON_ArrayForEach(v, vals) {
        const char *key = cJSON_GetArrayItem(v, 0)->valuestring;
        double shown = cJSON_GetArrayItem(v, 1)->valuedouble;
        cJSON *want = lookup(sum, key);
        if (!cJSON_IsNumber(want)) fail_msg("the report shows %s, which summary.json lacks", key);
        if (shown != want->valuedouble && fabs(shown - want->valuedouble) > 1e-12 * fabs(want->valuedouble))
            fail_msg("headline %s: the page says %.17g, summary.json %.17g", key, shown, want->valuedouble);
    }

    snprintf(p, sizeof(p), "%s/chrome.log", dir);
    char *log = e2e_read_file(p, NULL);
    assert_non_null(log);
    for (char *line = log; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strstr(line, "CONSOLE") && strstr(line, "/report/")) fail_msg("console message from the report: %s", line);
        line = nl ? nl + 1 : NULL;
    }
    free(log);
    free(dom);
    cJSON_Delete(res);
    cJSON_Delete(sum);
    e2e_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_report_in_chromium)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
