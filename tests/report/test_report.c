/* test_report.c — the report and the comparison, end to end on real profiles: synthetic ones
 * written through the profiler and the store (known ops, loss scale with overflows, memory
 * counters, folded stacks, an advisor trial, hostile names) and, when the built `mstune` is at
 * $MSTUNE_BIN, a real quickstart run. Checks the files, the PNG signatures, the headline ids
 * against summary.json, the no-gnuplot and failing-gnuplot paths, the flame graph's structure,
 * HTML/Markdown escaping, compare's numbers against the databases, and error messages. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "profiler/events.h"
#include "profiler/store.h"
#include "report/flamegraph.h"
#include "report/report.h"
#include "report/textbuf.h"
#include "tests/integration/e2e.h"

#define STEPS 24
#define HOSTILE_JOB_HTML "demo&lt;script&gt;alert(1)&lt;/script&gt;"
#define HOSTILE_OP "op<b onmouseover=\"x\">&amp"
#define HOSTILE_OP_HTML "op&lt;b onmouseover=&quot;x&quot;&gt;&amp;amp"
#define HOSTILE_FRAME "f<T>&'q'"
#define HOSTILE_FRAME_XML "f&lt;T&gt;&amp;&#39;q&#39;"

/* ---- helpers ---- */

static void spin_ns(uint64_t ns) {
    uint64_t t0 = mst_prof_now_ns();
    while (mst_prof_now_ns() - t0 < ns) {
    }
}

static char *slurp(const char *path) {
    char *t = e2e_read_file(path, NULL);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

static void join(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The data-value of the element with this id (fails when absent). */
static double html_value(const char *html, const char *id) {
    char key[128];
    snprintf(key, sizeof(key), "id=\"%s\" data-value=\"", id);
    const char *p = strstr(html, key);
    if (!p) fail_msg("index.html has no element id=\"%s\" with a data-value", id);
    return strtod(p + strlen(key), NULL);
}

static double json_num(const cJSON *j, const char *obj, const char *key) {
    const cJSON *o = obj ? cJSON_GetObjectItem(j, obj) : j;
    const cJSON *v = cJSON_GetObjectItem(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("summary.json lacks %s%s%s", obj ? obj : "", obj ? "." : "", key);
    return v->valuedouble;
}

static bool close_rel(double a, double b) { return fabs(a - b) <= 1e-13 * fmax(fabs(a), fabs(b)); }

static bool is_png(const char *path) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char h[8];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(h, 1, 8, f);
    fclose(f);
    return n == 8 && memcmp(h, sig, 8) == 0;
}

/* No temp file of an atomic write or a chart left behind. */
static void assert_no_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) fail_msg("temp file left in %s: %s", dir, e->d_name);
    closedir(d);
}

/* HTML elements without a closing tag. */
static bool is_void_element(const char *tag) {
    static const char *const v[] = {"br", "img", "meta", "link", "hr", "input", "wbr"};
    size_t n = strcspn(tag, " >/");
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (strlen(v[i]) == n && strncmp(tag, v[i], n) == 0) return true;
    return false;
}

/* Structure of an XML document, without a parser: every tag closed in order, attribute values
 * quoted, '&' only in the entities the writers emit, no raw '<' in text. HTML's void elements
 * (<img>, <br>) count as closed. */
static void assert_xml_wellformed(const char *x) {
    const char *stack[256];
    size_t len[256];
    int sp = 0;
    const char *p = x;
    if (strncmp(p, "<?xml", 5) == 0) p = strstr(p, "?>") + 2;
    while (*p) {
        if (*p == '&') {
            static const char *const ok[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"};
            bool good = false;
            for (size_t i = 0; i < 5; i++) good |= strncmp(p, ok[i], strlen(ok[i])) == 0;
            if (!good) fail_msg("bad entity at: %.40s", p);
            p++;
            continue;
        }
        if (*p != '<') {
            p++;
            continue;
        }
        const char *end = p + 1;
        char quote = 0;
        for (; *end && (quote || *end != '>'); end++) {
            if (quote && *end == quote) quote = 0;
            else if (!quote && (*end == '"' || *end == '\'')) quote = *end;
            else if (!quote && *end == '<') fail_msg("raw '<' inside a tag at: %.40s", p);
        }
        if (!*end) fail_msg("unterminated tag at: %.40s", p);
        if (p[1] == '/') {
            size_t n = strcspn(p + 2, " >");
            if (sp == 0 || len[sp - 1] != n || strncmp(stack[sp - 1], p + 2, n) != 0)
                fail_msg("closing tag does not match at: %.40s", p);
            sp--;
        } else if (end[-1] != '/' && !is_void_element(p + 1)) {
            assert_true(sp < 256);
            stack[sp] = p + 1;
            len[sp++] = strcspn(p + 1, " >/");
        }
        p = end + 1;
    }
    if (sp != 0) fail_msg("%d tags left open (first <%.*s>)", sp, (int)len[0], stack[0]);
}

/* ---- synthetic profiles through the real profiler and store ---- */

static const struct {
    const char *stack;
    int64_t count;
} g_stacks[] = {
    {"main;train;forward;conv2d_f32", 40},
    {"main;train;forward;relu_f32", 10},
    {"main;train;backward;conv2d_grad_f32", 30},
    {"main;train;" HOSTILE_FRAME, 5},
    {"worker;load;decode", 15},
};
#define DISTINCT_FRAMES 11  /* prefixes of the stacks above */

typedef struct {
    int kernel_us;
    bool extra_op;      /* an op only this profile has */
    bool trials;
} synth;

static void make_profile(const char *path, synth opt) {
    char err[512];
    mst_prof_config cfg = {.level = MST_PROF_LEVEL_DETAIL, .warmup = 1};
    mst_store *st = mst_store_open(path, &cfg, 2, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    mst_profiler *p = mst_profiler_new();
    mst_profiler_configure(p, &cfg);
    mst_profiler_set_sink(p, mst_store_sink, st);
    mst_prof_set_thread_name("main");
    assert_int_equal(mst_profiler_start(p), 0);
    const uint32_t wait = mst_prof_intern("loader.wait"), act = mst_prof_intern("mem.activations"),
                   par = mst_prof_intern("mem.parameters"), loss = mst_prof_intern("loss"), lr = mst_prof_intern("lr"),
                   scale = mst_prof_intern("loss_scale"), ovf = mst_prof_intern("overflow");
    const uint32_t ops[4] = {mst_prof_intern("conv2d"), mst_prof_intern("relu"), mst_prof_intern(HOSTILE_OP),
                             mst_prof_intern("gemm_only_b")};
    double s = 65536;
    for (int64_t step = 0; step < STEPS; step++) {
        mst_prof_step_begin(step);
        mst_prof_begin(MST_CAT_DATA, wait, -1);
        spin_ns(15000);
        mst_prof_end(MST_CAT_DATA, wait, -1);
        mst_prof_counter_detail(par, 1 << 20);
        for (int k = 0; k < (opt.extra_op ? 4 : 3); k++) {
            mst_prof_op_begin(MST_CAT_DISPATCH, ops[k], k + 1);
            spin_ns(3000);
            mst_prof_counter_detail(act, (int64_t)(step + 1) * 4096 * (k + 1));
            mst_prof_op_begin(MST_CAT_KERNEL, ops[k], k + 1);
            spin_ns((uint64_t)opt.kernel_us * 1000 / (k + 1));
            mst_prof_record_(MST_EV_END, MST_CAT_KERNEL, ops[k], k + 1, 2000000 / (k + 1), 65536);
            mst_prof_op_end(MST_CAT_DISPATCH, ops[k], k + 1);
        }
        mst_prof_value(loss, 2.0 / (double)(step + 1));
        mst_prof_value(lr, 0.1);
        mst_prof_value(scale, s);
        mst_prof_step_end(step);
        if (step % 7 == 3) {        /* after the step: the scaler skipped it */
            mst_prof_value(ovf, 1);
            s /= 2;
        }
        mst_prof_thread_flush();
    }
    mst_profiler_stop(p);
    assert_int_equal(mst_store_set_meta(st, "config",
                                        "{\"name\":\"" "demo<script>alert(1)<\\/script>" "\",\"model\":{\"name\":\"m&m\"},"
                                        "\"data\":{\"batch_size\":16,\"num_workers\":0}}"),
                     0);
    assert_int_equal(mst_store_set_meta(st, "host", "<host>"), 0);
    /* the run's throughput as `mstune profile` stores it: 384 samples in a 0.4 s training loop */
    assert_int_equal(mst_store_set_meta(st, "samples_processed", "384"), 0);
    assert_int_equal(mst_store_set_meta(st, "steps_processed", "24"), 0);
    assert_int_equal(mst_store_set_meta(st, "train_loop_s", "0.4"), 0);
    for (size_t i = 0; i < sizeof(g_stacks) / sizeof(g_stacks[0]); i++)
        assert_int_equal(mst_store_add_folded(st, i == 4 ? 2 : 1, g_stacks[i].stack, g_stacks[i].count), 0);
    assert_int_equal(mst_store_set_sampler_summary(st, 100, 0.1, 997), 0);
    mst_prof_overhead o = mst_profiler_overhead(p);
    assert_int_equal(mst_store_set_overhead(st, &o, 0.1), 0);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    mst_profiler_free(p);
    if (opt.trials) {
        sqlite3 *db = NULL;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db,
                                      "INSERT INTO trials(change, status, reason, predicted_speedup, measured_speedup, ci_low, ci_high,"
                                      " memory_delta_bytes, accuracy_delta) VALUES ('data.num_workers=2', 'accepted', 'faster',"
                                      " 1.3, 1.25, 1.2, 1.3, 1048576, 0.1), ('<bad change>', 'rejected', 'x<y', 1.1, 0.98, 0.9, 1.05,"
                                      " NULL, NULL)",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
}

typedef struct {
    char dir[512];
    char db_a[600], db_b[600];
} fixture;

static int setup(void **state) {
    static fixture fx;
    e2e_tmpdir(fx.dir, sizeof(fx.dir));
    if (!fx.dir[0]) return -1;
    join(fx.db_a, sizeof(fx.db_a), fx.dir, "a.db");
    snprintf(fx.db_b, sizeof(fx.db_b), "%s/b", fx.dir);    /* its own folder: compare reads a summary.json beside each */
    if (mkdir(fx.db_b, 0755) != 0) return -1;
    join(fx.db_b, sizeof(fx.db_b), fx.dir, "b/profile.db");
    make_profile(fx.db_a, (synth){.kernel_us = 40, .trials = true});
    make_profile(fx.db_b, (synth){.kernel_us = 120, .extra_op = true});
    *state = &fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    e2e_rmtree(fx->dir);
    return 0;
}

/* ---- tests ---- */

static const char *const g_charts[] = {"breakdown_steps.png", "breakdown.png", "throughput.png", "loss.png",
                                       "loss_scale.png",      "memory.png",    "top_ops.png",    "trials.png"};

static void assert_headline_matches(const char *html, const cJSON *sum) {
    assert_true(html_value(html, "step-time-ms") == json_num(sum, NULL, "step_time_ms_median"));
    assert_true(html_value(html, "profiled-step-ms") == json_num(sum, NULL, "profiled_step_ms_median"));
    assert_true(html_value(html, "steps-per-s") == json_num(sum, NULL, "steps_per_s"));
    if (cJSON_GetObjectItem(sum, "samples_per_s")) assert_true(html_value(html, "throughput") == json_num(sum, NULL, "samples_per_s"));
    static const char *const cats[] = {"dispatch", "kernel", "comm", "data", "compile", "memcpy", "other"};
    double total = 0;
    for (int c = 0; c < 7; c++) {
        char id[32];
        snprintf(id, sizeof(id), "share-%s", cats[c]);
        double v = html_value(html, id);
        assert_true(v == json_num(sum, "breakdown_share", cats[c]));
        total += v;
    }
    assert_true(fabs(total - 1) < 1e-9);
}

static void test_render_synthetic(void **state) {
    fixture *fx = *state;
    char out[700], path[800], err[1024];
    join(out, sizeof(out), fx->dir, "report-a/nested");    /* created with its parent */
    if (mst_report_render(fx->db_a, NULL, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    static const char *const files[] = {"index.html", "summary.json", "summary.md", "flame.svg"};
    for (size_t i = 0; i < 4; i++) {
        join(path, sizeof(path), out, files[i]);
        if (!e2e_exists(path)) fail_msg("%s missing", path);
    }
    bool gnuplot = mst_report_have_gnuplot();
    if (!gnuplot) printf("gnuplot is not installed: PNG checks skipped\n");
    for (size_t i = 0; gnuplot && i < sizeof(g_charts) / sizeof(g_charts[0]); i++) {
        join(path, sizeof(path), out, g_charts[i]);
        if (!is_png(path)) fail_msg("%s is not a PNG", path);
    }
    assert_no_temp_files(out);

    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    join(path, sizeof(path), out, "summary.json");
    cJSON *sum = e2e_read_json(path);
    assert_non_null(sum);
    assert_non_null(cJSON_GetObjectItem(sum, "regenerated_from"));
    assert_headline_matches(html, sum);
    /* the regenerated summary carries the store's own breakdown */
    mst_breakdown bd;
    assert_int_equal(mst_store_read_breakdown(fx->db_a, &bd, err, sizeof(err)), 0);
    /* (cJSON prints 15 significant digits where they compare equal within an epsilon) */
    assert_true(close_rel(json_num(sum, NULL, "profiled_step_ms_median"), bd.wall_median_ns / 1e6));
    assert_true(close_rel(json_num(sum, "breakdown_share", "kernel"), bd.share[MST_CAT_KERNEL]));
    assert_int_equal((int)json_num(sum, NULL, "profiled_steps"), STEPS - 1);
    /* throughput: samples processed over the training loop's wall time, not batch / median step */
    assert_true(close_rel(json_num(sum, NULL, "samples_per_s"), 384 / 0.4));
    assert_true(close_rel(json_num(sum, NULL, "steps_per_s"), 24 / 0.4));

    /* leads with the answer: the verdict comes before any section */
    const char *verdict = strstr(html, "id=\"verdict\"");
    assert_non_null(verdict);
    assert_true(verdict < strstr(html, "<section id=\"breakdown\">"));
    /* the verdict names the category with the largest share of the stored breakdown: kernel by
     * construction (73 us of spin per step against 15 us of data), unless a preemption on a loaded
     * machine stretched one of the spins in another category; whichever it is, the verdict says it */
    int top = MST_CAT_KERNEL;
    for (int c = 0; c < MST_CAT_COUNT; c++)
        if (bd.share[c] > bd.share[top]) top = c;
    if (top == MST_CAT_KERNEL) assert_non_null(strstr(verdict, "of each step is kernel time"));
    else if (top == MST_CAT_DATA) assert_non_null(strstr(verdict, "of each step waits for the data loader"));
    else assert_null(strstr(verdict, "of each step is kernel time"));
    /* offline and escaped: no scripts, no network, hostile strings only in escaped form */
    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "http://"));
    assert_null(strstr(html, "https://"));
    assert_null(strstr(html, HOSTILE_OP));
    assert_null(strstr(html, "<b onmouseover"));
    assert_null(strstr(html, "<host>"));
    assert_non_null(strstr(html, HOSTILE_JOB_HTML));
    assert_non_null(strstr(html, HOSTILE_OP_HTML));
    assert_non_null(strstr(html, "&lt;host&gt;"));
    assert_non_null(strstr(html, "&lt;bad change&gt;"));
    assert_non_null(strstr(html, "m&amp;m"));
    assert_xml_wellformed(strstr(html, "<html"));
    assert_int_equal(atoi(strstr(html, "id=\"overflow-steps\">") + strlen("id=\"overflow-steps\">")), 3);    /* steps 3, 10, 17 */
    if (gnuplot) {
        for (size_t i = 0; i < sizeof(g_charts) / sizeof(g_charts[0]); i++) {
            char img[128];
            snprintf(img, sizeof(img), "<img src=\"%s\"", g_charts[i]);
            if (!strstr(html, img)) fail_msg("index.html does not show %s", g_charts[i]);
        }
        assert_null(strstr(html, "id=\"no-gnuplot\""));
    }
    assert_non_null(strstr(html, "data=\"flame.svg\""));

    join(path, sizeof(path), out, "summary.md");
    char *md = slurp(path);
    assert_non_null(strstr(md, "## mstune profile: demo&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert_null(strstr(md, "<script"));
    assert_non_null(strstr(md, "| category | ms/step | share | hidden ms/step |"));
    assert_non_null(strstr(md, "| kernel |"));
    assert_non_null(strstr(md, "op&lt;b onmouseover=&quot;x&quot;&gt;&amp;amp"));

    join(path, sizeof(path), out, "flame.svg");
    char *svg = slurp(path);
    assert_xml_wellformed(svg);
    assert_int_equal(count_of(svg, "<rect"), DISTINCT_FRAMES + 1);     /* + the "all" root */
    assert_non_null(strstr(svg, HOSTILE_FRAME_XML));
    assert_null(strstr(svg, HOSTILE_FRAME));
    free(svg);
    free(md);
    free(html);
    cJSON_Delete(sum);
}

static void test_flamegraph_structure(void **state) {
    fixture *fx = *state;
    rpt_sample s[] = {{"a;b;c", 3}, {"a;b!x", 2}, {"a;b;d", 2}, {"f", 4}, {"a;b", 1}, {"a;b;c", 1}, {"bad\x01;\xff\xfe", 1}};
    /* prefixes: a, a;b, a;b;c, a;b;d, a;b!x, f, bad?, bad?;?? — 8 distinct frames */
    char path[700], err[512];
    join(path, sizeof(path), fx->dir, "flame-unit.svg");
    rpt_flame_stats st;
    if (rpt_flamegraph_write(path, s, sizeof(s) / sizeof(s[0]), "unit <test>", &st, err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(st.frames, 8);
    assert_int_equal(st.depth, 3);
    assert_int_equal(st.samples, 14);
    char *svg = slurp(path);
    assert_xml_wellformed(svg);
    assert_int_equal(count_of(svg, "<svg "), 1);
    assert_int_equal(count_of(svg, "</svg>"), 1);
    assert_int_equal(count_of(svg, "<rect"), 9);
    assert_int_equal(count_of(svg, "<title>"), 9);
    assert_int_equal(count_of(svg, "<g>"), count_of(svg, "</g>"));
    /* a;b;c appears twice in the input: merged into one frame of 4 samples */
    assert_non_null(strstr(svg, "<title>c (4 samples, 28.57%)</title>"));
    assert_non_null(strstr(svg, "<title>all (14 samples, 100.00%)</title>"));
    assert_non_null(strstr(svg, "unit &lt;test&gt;"));
    /* the root spans the drawing width; a frame's width is its share of it */
    assert_non_null(strstr(svg, "width=\"1180.00\""));
    assert_non_null(strstr(svg, "<title>f (4 samples, 28.57%)</title><rect x=\"852.86\""));
    assert_null(strstr(svg, "\x01"));
    free(svg);

    /* no samples: still an SVG, saying so */
    if (rpt_flamegraph_write(path, NULL, 0, "empty", &st, err, sizeof(err)) != 0) fail_msg("%s", err);
    svg = slurp(path);
    assert_xml_wellformed(svg);
    assert_non_null(strstr(svg, "No stack samples"));
    assert_int_equal(st.frames, 0);
    free(svg);
}

static void test_escapers(void **state) {
    rpt_buf b = {0};
    rpt_html(&b, "<a href='x'>\"&\"</a>\x01\xc3\xa9\xff");
    assert_string_equal(b.p, "&lt;a href=&#39;x&#39;&gt;&quot;&amp;&quot;&lt;/a&gt;\xEF\xBF\xBD\xc3\xa9\xEF\xBF\xBD");
    rpt_buf_free(&b);
    rpt_md(&b, "a|b_c*d`e[f]\\<g>\n");
    assert_string_equal(b.p, "a\\|b\\_c\\*d\\`e\\[f\\]\\\\&lt;g&gt; ");
    rpt_buf_free(&b);
    char label[16];
    rpt_gnuplot_label("it's \"a\"\tlong name", label, 10);
    assert_string_equal(label, "it?s ?a?..");
    rpt_gnuplot_label("ok", label, 10);
    assert_string_equal(label, "ok");
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_no_gnuplot(void **state) {
    fixture *fx = *state;
    char out[700], path[800], err[1024];
    join(out, sizeof(out), fx->dir, "report-nognuplot");
    bool have = mst_report_have_gnuplot();
    if (have && mst_report_render(fx->db_a, NULL, out, err, sizeof(err)) != 0) fail_msg("%s", err);   /* charts first */
    setenv("MSTUNE_GNUPLOT", "/nonexistent/gnuplot", 1);
    assert_false(mst_report_have_gnuplot());
    int rc = mst_report_render(fx->db_a, NULL, out, err, sizeof(err));
    unsetenv("MSTUNE_GNUPLOT");
    if (rc != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_non_null(strstr(html, "id=\"no-gnuplot\""));
    assert_non_null(strstr(html, "/nonexistent/gnuplot"));
    assert_null(strstr(html, "<img "));
    assert_non_null(strstr(html, "id=\"breakdown-table\""));
    assert_non_null(strstr(html, "id=\"ops-table\""));
    for (size_t i = 0; i < sizeof(g_charts) / sizeof(g_charts[0]); i++) {    /* older charts removed */
        join(path, sizeof(path), out, g_charts[i]);
        if (e2e_exists(path)) fail_msg("%s left from the earlier render", path);
    }
    join(path, sizeof(path), out, "flame.svg");
    assert_true(e2e_exists(path));
    free(html);
}

/* A "gnuplot" that passes the lookup but fails every chart: the page still renders, says which
 * chart failed and why, the call reports it, and no temp file is left. */
static void test_gnuplot_fails(void **state) {
    fixture *fx = *state;
    char out[700], fake[700], path[800], err[1024];
    join(fake, sizeof(fake), fx->dir, "fake-gnuplot");
    write_text(fake, "#!/bin/sh\n[ \"$1\" = -e ] && exit 0\ncat >/dev/null\nexit 3\n");
    assert_int_equal(chmod(fake, 0755), 0);
    join(out, sizeof(out), fx->dir, "report-failing");
    setenv("MSTUNE_GNUPLOT", fake, 1);
    assert_true(mst_report_have_gnuplot());
    int rc = mst_report_render(fx->db_a, NULL, out, err, sizeof(err));
    unsetenv("MSTUNE_GNUPLOT");
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "status 3"));
    assert_non_null(strstr(err, out));
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_non_null(strstr(html, "id=\"chart-failures\""));
    assert_non_null(strstr(html, "Chart not drawn"));
    assert_null(strstr(html, "<img "));
    free(html);
    assert_no_temp_files(out);
    join(path, sizeof(path), out, "breakdown.png");
    assert_false(e2e_exists(path));

    /* one that closes its input at once: writes fail with EPIPE, the process lives on, and
     * SIGPIPE is neither left pending nor left blocked */
    write_text(fake, "#!/bin/sh\n[ \"$1\" = -e ] && exit 0\nexec 0<&-\nsleep 0.05\nexit 4\n");
    setenv("MSTUNE_GNUPLOT", fake, 1);
    rc = mst_report_render(fx->db_a, NULL, out, err, sizeof(err));
    unsetenv("MSTUNE_GNUPLOT");
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "chart '"));
    sigset_t pending, mask;
    sigpending(&pending);
    assert_false(sigismember(&pending, SIGPIPE));
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    assert_false(sigismember(&mask, SIGPIPE));
    assert_no_temp_files(out);
}

static void test_summary_given(void **state) {
    fixture *fx = *state;
    char out[700], sum_path[700], path[800], err[1024];
    join(sum_path, sizeof(sum_path), fx->dir, "given-summary.json");
    /* a trainer's summary: its figures lead the page, and it is copied byte for byte */
    write_text(sum_path, "{\"name\":\"demo<script>alert(1)</script>\",\"step_time_ms_median\":1.25,\"steps_per_s\":800,"
                         "\"samples_per_s\":12800,\"val_accuracy\":0.875,\"peak_memory_bytes\":1048576,"
                         "\"epoch_records\":[{\"steps\":12,\"wall_s\":0.1,\"train_loss\":1.5,\"val_accuracy\":0.8,\"val_loss\":0.6},"
                         "{\"steps\":12,\"wall_s\":0.1,\"train_loss\":1.0,\"val_accuracy\":0.875,\"val_loss\":0.5}]}\n");
    join(out, sizeof(out), fx->dir, "report-given");
    if (mst_report_render(fx->db_a, sum_path, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "summary.json");
    assert_true(e2e_files_equal(path, sum_path));
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_true(html_value(html, "step-time-ms") == 1.25);
    assert_true(html_value(html, "throughput") == 12800);
    assert_true(html_value(html, "steps-per-s") == 800);
    assert_true(html_value(html, "val-accuracy") == 0.875);
    assert_non_null(strstr(html, "id=\"epochs\""));
    assert_null(strstr(html, "id=\"summary-mismatch\""));
    free(html);

    /* a summary of another job is flagged on the page */
    write_text(sum_path, "{\"name\":\"other\",\"step_time_ms_median\":1.25}");
    if (mst_report_render(fx->db_a, sum_path, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    html = slurp(path);
    assert_non_null(strstr(html, "id=\"summary-mismatch\""));
    free(html);
}

/* The terminal row starting with label: its A and B columns as numbers (NAN for n/a). */
static void terminal_row(const char *text, const char *label, double *a, double *b) {
    const char *p = strstr(text, label);
    if (!p) fail_msg("no row '%s' in:\n%s", label, text);
    p += strlen(label);
    char ta[64], tb[64];
    assert_int_equal(sscanf(p, "%63s %63s", ta, tb), 2);
    for (char *t = ta, *u = ta;; t++)
        if (*t != ',' && !(*u++ = *t)) break;
    for (char *t = tb, *u = tb;; t++)
        if (*t != ',' && !(*u++ = *t)) break;
    *a = strcmp(ta, "n/a") ? strtod(ta, NULL) : NAN;
    *b = strcmp(tb, "n/a") ? strtod(tb, NULL) : NAN;
}

static bool close_to(double shown, double exact) { return fabs(shown - exact) <= 0.006 * fabs(exact) + 1e-12; }

static void test_compare(void **state) {
    fixture *fx = *state;
    char out[700], path[800], err[1024];
    /* validation accuracy comes from a summary.json beside the profile, when it is of the same job */
    join(path, sizeof(path), fx->dir, "summary.json");
    write_text(path, "{\"name\":\"demo<script>alert(1)</script>\",\"val_accuracy\":0.5}");
    join(path, sizeof(path), fx->dir, "b/summary.json");
    write_text(path, "{\"name\":\"another job\",\"val_accuracy\":0.9}");
    mst_breakdown a, b;
    assert_int_equal(mst_store_read_breakdown(fx->db_a, &a, err, sizeof(err)), 0);
    assert_int_equal(mst_store_read_breakdown(fx->db_b, &b, err, sizeof(err)), 0);

    char *text = NULL;
    size_t len = 0;
    FILE *term = open_memstream(&text, &len);
    join(out, sizeof(out), fx->dir, "compare");
    int rc = mst_compare_render(fx->db_a, fx->db_b, out, term, err, sizeof(err));
    fclose(term);
    if (rc != 0) fail_msg("%s", err);
    printf("%s", text);
    char want[800];
    snprintf(want, sizeof(want), "A: %s", fx->db_a);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "B: %s", fx->db_b);
    assert_non_null(strstr(text, want));
    double va, vb;
    terminal_row(text, "step time, median (ms)", &va, &vb);
    assert_true(close_to(va, a.wall_median_ns / 1e6));
    assert_true(close_to(vb, b.wall_median_ns / 1e6));
    terminal_row(text, "  kernel ms/step", &va, &vb);
    assert_true(close_to(va, a.median_ns[MST_CAT_KERNEL] / 1e6));
    assert_true(close_to(vb, b.median_ns[MST_CAT_KERNEL] / 1e6));
    terminal_row(text, "validation accuracy (%)", &va, &vb);
    assert_true(va == 50);
    assert_true(isnan(vb));     /* the summary.json beside B is another job's */
    /* ops matched by name: in both with a ratio, one only in B */
    const char *conv = strstr(text, "\nconv2d ");
    assert_non_null(conv);
    assert_non_null(strstr(text, "gemm_only_b"));
    const char *only_b = strstr(text, "gemm_only_b");
    assert_non_null(strstr(only_b, "new"));
    assert_true(strstr(only_b, "new") < strchr(only_b, '\n'));

    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_true(html_value(html, "a-step-time-ms") == a.wall_median_ns / 1e6);
    assert_true(html_value(html, "b-step-time-ms") == b.wall_median_ns / 1e6);
    assert_true(html_value(html, "step-time-ratio") == (b.wall_median_ns / 1e6) / (a.wall_median_ns / 1e6));
    assert_true(html_value(html, "a-cat-kernel") == a.median_ns[MST_CAT_KERNEL] / 1e6);
    assert_true(html_value(html, "b-cat-data") == b.median_ns[MST_CAT_DATA] / 1e6);
    assert_true(html_value(html, "a-val-accuracy") == 50);
    assert_true(b.wall_median_ns > a.wall_median_ns);
    assert_non_null(strstr(html, "slower"));
    assert_non_null(strstr(html, HOSTILE_OP_HTML));
    assert_null(strstr(html, HOSTILE_OP));
    assert_xml_wellformed(strstr(html, "<html"));
    if (mst_report_have_gnuplot()) {
        join(path, sizeof(path), out, "compare_breakdown.png");
        assert_true(is_png(path));
        join(path, sizeof(path), out, "compare_ops.png");
        assert_true(is_png(path));
    }
    assert_no_temp_files(out);
    free(html);
    free(text);

    /* terminal only: nothing written */
    text = NULL;
    term = open_memstream(&text, &len);
    rc = mst_compare_render(fx->db_b, fx->db_a, NULL, term, err, sizeof(err));
    fclose(term);
    if (rc != 0) fail_msg("%s", err);
    assert_non_null(strstr(text, "step time, median (ms)"));
    assert_non_null(strstr(text, "gone"));      /* gemm_only_b is in A now */
    free(text);
}

static void test_errors(void **state) {
    fixture *fx = *state;
    char out[700], path[800], bad[700], err[1024];
    join(out, sizeof(out), fx->dir, "report-err");
    /* missing profile */
    join(bad, sizeof(bad), fx->dir, "missing.db");
    assert_int_equal(mst_report_render(bad, NULL, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    assert_false(e2e_exists(out));
    /* not a database */
    join(bad, sizeof(bad), fx->dir, "text.db");
    write_text(bad, "this is not sqlite, not even close; it needs to be long enough to look like a header......\n");
    assert_int_equal(mst_report_render(bad, NULL, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    /* a SQLite file that is not a profile */
    join(bad, sizeof(bad), fx->dir, "other.db");
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(bad, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(mst_report_render(bad, NULL, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "not an mstune profile"));
    /* an output folder that cannot be made: a file is in the way */
    join(path, sizeof(path), fx->dir, "a-file");
    write_text(path, "x");
    snprintf(out, sizeof(out), "%s/a-file/report", fx->dir);
    assert_int_equal(mst_report_render(fx->db_a, NULL, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, path));
    if (geteuid() != 0) {       /* root writes anywhere: a read-only folder only stops other users */
        join(out, sizeof(out), fx->dir, "read-only");
        assert_int_equal(mkdir(out, 0555), 0);
        assert_int_equal(mst_report_render(fx->db_a, NULL, out, err, sizeof(err)), -1);
        assert_non_null(strstr(err, out));
    }
    /* summary.json missing, or not JSON */
    join(out, sizeof(out), fx->dir, "report-err2");
    join(bad, sizeof(bad), fx->dir, "no-summary.json");
    assert_int_equal(mst_report_render(fx->db_a, bad, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    join(bad, sizeof(bad), fx->dir, "broken-summary.json");
    write_text(bad, "{\"name\": ");
    assert_int_equal(mst_report_render(fx->db_a, bad, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
    /* compare names the profile it could not read */
    join(bad, sizeof(bad), fx->dir, "missing-b.db");
    assert_int_equal(mst_compare_render(fx->db_a, bad, NULL, NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, bad));
}

/* A profile without a finished step (a run stopped during its first step) still renders. */
static void test_empty_profile(void **state) {
    fixture *fx = *state;
    char db[700], out[700], path[800], err[1024];
    join(db, sizeof(db), fx->dir, "empty.db");
    mst_store *st = mst_store_open(db, NULL, 0, err, sizeof(err));
    if (!st) fail_msg("%s", err);
    if (mst_store_close(st, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(out, sizeof(out), fx->dir, "report-empty");
    if (mst_report_render(db, NULL, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_non_null(strstr(html, "no finished steps"));
    assert_null(strstr(html, "<img "));
    assert_xml_wellformed(strstr(html, "<html"));
    free(html);
    char *text = NULL;
    size_t len = 0;
    FILE *term = open_memstream(&text, &len);
    int rc = mst_compare_render(db, fx->db_a, NULL, term, err, sizeof(err));
    fclose(term);
    if (rc != 0) fail_msg("%s", err);
    assert_non_null(strstr(text, "step time, median (ms)"));
    free(text);

    /* a run whose schedule recorded no step (profile.skip past its end) without evaluation: its
     * epoch records hold no metric, so there is nothing to plot (gnuplot refused the empty plot) */
    char sum_path[700];
    join(sum_path, sizeof(sum_path), fx->dir, "no-eval-summary.json");
    write_text(sum_path, "{\"name\":\"quickstart\",\"step_time_ms_median\":0.5,\"epoch_records\":[{\"steps\":188,"
                         "\"wall_s\":0.1,\"train_loss\":0.75,\"val_accuracy\":-1,\"val_loss\":-1,\"val_metric\":null}]}\n");
    if (mst_report_render(db, sum_path, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    html = slurp(path);
    assert_non_null(strstr(html, "no loss values were recorded, and no validation accuracy"));
    assert_null(strstr(html, "<img "));
    free(html);
}

/* A hand-edited profile whose memory table allows NULL categories (found by fuzz_reports: the
 * reader passed the NULL to strcmp) renders, the NULL read as an unnamed category. */
static void test_null_memory_category(void **state) {
    fixture *fx = *state;
    char db[700], out[700], path[800], sql[1600], err[1024];
    join(db, sizeof(db), fx->dir, "null-category.db");
    snprintf(sql, sizeof(sql),
             "VACUUM INTO '%s'", db);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(fx->db_a, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    const char *edit = "CREATE TABLE m2 AS SELECT * FROM memory; DROP TABLE memory;"
                       " CREATE TABLE memory(step INTEGER, category TEXT, max_bytes INTEGER);"
                       " INSERT INTO memory SELECT step, category, max_bytes FROM m2; DROP TABLE m2;"
                       " INSERT INTO memory VALUES(0, NULL, 4096);";
    char *msg = NULL;
    if (sqlite3_exec(h, edit, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s", msg);
    sqlite3_close(h);
    join(out, sizeof(out), fx->dir, "report-null-category");
    if (mst_report_render(db, NULL, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    assert_xml_wellformed(strstr(html, "<html"));
    free(html);
}

/* A real run of the built binary: the report of `mstune profile` agrees with its summary.json. */
static void test_real_profile(void **state) {
    fixture *fx = *state;
    const char *bin = getenv("MSTUNE_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        printf("MSTUNE_BIN is not a built mstune: the real-run check is skipped\n");
        skip();
    }
    char run[700], out[800], path[900], cmd[2048], err[1024];
    static char log[65536];
    join(run, sizeof(run), fx->dir, "real");
    snprintf(cmd, sizeof(cmd),
             "profile workloads/jobs/quickstart.yaml --set data.limit=1280 --set profile.level=2 --set train.checkpoint=false "
             "--out %s",
             run);
    int rc = e2e_run(cmd, log, sizeof(log));
    if (rc != 0) fail_msg("mstune %s exited %d:\n%s", cmd, rc, log);
    char db[800], sum[800];
    join(db, sizeof(db), run, "profile.db");
    join(sum, sizeof(sum), run, "summary.json");
    join(out, sizeof(out), run, "report");
    if (mst_report_render(db, sum, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "index.html");
    char *html = slurp(path);
    cJSON *j = e2e_read_json(sum);
    assert_non_null(j);
    assert_headline_matches(html, j);
    assert_true(html_value(html, "val-accuracy") == json_num(j, NULL, "val_accuracy"));
    assert_non_null(strstr(html, "id=\"verdict\""));
    join(path, sizeof(path), out, "summary.json");
    assert_true(e2e_files_equal(path, sum));
    if (mst_report_have_gnuplot()) {
        static const char *const real_charts[] = {"breakdown_steps.png", "breakdown.png", "throughput.png", "loss.png", "memory.png",
                                                  "top_ops.png"};
        for (size_t i = 0; i < sizeof(real_charts) / sizeof(real_charts[0]); i++) {
            join(path, sizeof(path), out, real_charts[i]);
            if (!is_png(path)) fail_msg("%s is not a PNG", path);
        }
        join(path, sizeof(path), out, "loss_scale.png");    /* no loss scaling in this run */
        assert_false(e2e_exists(path));
    }
    /* regenerated from the database alone: the same profile figures as the trainer's summary */
    join(out, sizeof(out), run, "report-db");
    if (mst_report_render(db, NULL, out, err, sizeof(err)) != 0) fail_msg("%s", err);
    join(path, sizeof(path), out, "summary.json");
    cJSON *r = e2e_read_json(path);
    assert_non_null(r);
    assert_true(json_num(r, NULL, "profiled_step_ms_median") == json_num(j, NULL, "profiled_step_ms_median"));
    static const char *const cats[] = {"dispatch", "kernel", "comm", "data", "compile", "memcpy", "other"};
    for (int c = 0; c < 7; c++) {
        assert_true(json_num(r, "breakdown_share", cats[c]) == json_num(j, "breakdown_share", cats[c]));
        assert_true(json_num(r, "breakdown_ms", cats[c]) == json_num(j, "breakdown_ms", cats[c]));
    }
    cJSON *top_r = cJSON_GetObjectItem(r, "top_ops"), *top_j = cJSON_GetObjectItem(j, "top_ops");
    assert_int_equal(cJSON_GetArraySize(top_r), cJSON_GetArraySize(top_j));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(top_r, 0), "op")->valuestring,
                        cJSON_GetObjectItem(cJSON_GetArrayItem(top_j, 0), "op")->valuestring);
    cJSON_Delete(r);
    cJSON_Delete(j);
    free(html);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapers),
        cmocka_unit_test(test_render_synthetic),
        cmocka_unit_test(test_flamegraph_structure),
        cmocka_unit_test(test_no_gnuplot),
        cmocka_unit_test(test_gnuplot_fails),
        cmocka_unit_test(test_summary_given),
        cmocka_unit_test(test_compare),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_empty_profile),
        cmocka_unit_test(test_null_memory_category),
        cmocka_unit_test(test_real_profile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
