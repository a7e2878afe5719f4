/* test_kernel_verdicts.c — the per-machine kernel verdict file through the real binary: a verdict
 * timed while other work was runnable is written as `busy`; the next process that finds only busy
 * lines for a key on a quiet machine measures that key again and appends a `quiet` line; after
 * that, quiet and busy processes alike take the quiet verdict and append nothing; a line's
 * verdict is the margin rule applied to the times it records. The machine's load comes from a stand-in for /proc/loadavg (MSTUNE_LOADAVG), so the test does not depend on
 * what else runs. Where oneDNN is not there nothing is chosen and the test says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/graph/step_threads.h"
#include "tests/integration/e2e.h"

/* the cnn, a few steps at batch 16: its convolutions are what oneDNN's providers race for */
#define JOB                                                                                                  \
    "train workloads/jobs/fashion_cnn.yaml --set train.steps=2 --set train.eval=false --set data.limit=64 " \
    "--set data.batch_size=16 --set runtime.threads=2 --set train.checkpoint=false"

static char g_out[1 << 16];

static void write_loadavg(const char *path, int running) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%.2f %.2f %.2f %d/300 4242\n", (double)running, (double)running, (double)running, running);
    fclose(f);
}

/* A verdict line (runtime/backend/kernel_choice.c): tag, machine, op, dtype, key, provider, one time
 * per provider, quiet|busy, shapes. */
#define LINE_TAG "v7"
enum { k_providers = 5, k_quiet_field = 6 + k_providers, k_fields = 8 + k_providers };

/* A verdict line's tab-separated fields (at most max; the line is cut up in place): how many. */
static int split_fields(char *line, char **field, int max) {
    char *save = NULL;
    int k = 0;
    for (char *t = strtok_r(line, "\t\n", &save); t && k < max; t = strtok_r(NULL, "\t\n", &save)) field[k++] = t;
    return k;
}

/* The file's lines tagged `tag`; every line must be in the format above (a format this test does
 * not know fails it, rather than leaving nothing to count). */
static int count_lines(const char *path, const char *tag) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        char *field[k_fields];
        int k = split_fields(line, field, k_fields);
        if (k != k_fields || strcmp(field[0], LINE_TAG) != 0) fail_msg("a verdict line of %d fields tagged %s", k, k ? field[0] : "-");
        n += strcmp(field[k_quiet_field], tag) == 0;
    }
    fclose(f);
    return n;
}

static void run_job(const char *dir, const char *name) {
    char args[1024];
    snprintf(args, sizeof(args), JOB " --out %s/%s", dir, name);
    e2e_run_ok(args, g_out, sizeof(g_out));
}

/* A new temporary folder (dir, 256 bytes) whose verdict file (cache) and stand-in load file
 * (loadavg; 320 bytes each) the runs use. */
static void fresh_dir(char *dir, char *cache, char *loadavg) {
    e2e_tmpdir(dir, 256);
    assert_true(dir[0] != '\0');
    snprintf(cache, 320, "%s/kernel-choices.tsv", dir);
    snprintf(loadavg, 320, "%s/loadavg", dir);
    setenv("MSTUNE_KERNELS_CACHE", cache, 1);
    setenv("MSTUNE_LOADAVG", loadavg, 1);
    unsetenv("MSTUNE_KERNELS");
}

static void test_busy_verdicts_measured_again(void **state) {
    (void)state;
    char dir[256], cache[320], loadavg[320];
    fresh_dir(dir, cache, loadavg);

    write_loadavg(loadavg, 12);     /* ten runnable tasks beside a 2-thread process */
    run_job(dir, "busy");
    int busy = count_lines(cache, "busy"), quiet = count_lines(cache, "quiet");
    printf("busy machine: %d busy verdicts, %d quiet\n", busy, quiet);
    if (busy == 0 && quiet == 0) {
        printf("  skipped: no kernel had more than one provider to choose from (oneDNN absent?)\n");
        e2e_rmtree(dir);
        return;
    }
    assert_true(busy > 0);
    assert_int_equal(quiet, 0);

    write_loadavg(loadavg, 1);
    setenv("MSTUNE_VERDICTS", "keep", 1);      /* kept (what `mstune advise` sets): busy lines stand */
    run_job(dir, "quiet-kept");
    unsetenv("MSTUNE_VERDICTS");
    assert_int_equal(count_lines(cache, "quiet"), 0);
    assert_int_equal(count_lines(cache, "busy"), busy);

    run_job(dir, "quiet");          /* quiet: every busy key is timed again */
    int quiet2 = count_lines(cache, "quiet");
    printf("quiet machine: %d quiet verdicts added\n", quiet2);
    assert_int_equal(quiet2, busy);
    assert_int_equal(count_lines(cache, "busy"), busy);

    run_job(dir, "quiet-again");    /* quiet verdicts are final */
    assert_int_equal(count_lines(cache, "quiet"), quiet2);
    write_loadavg(loadavg, 12);
    run_job(dir, "busy-again");     /* a busy process takes them too, and writes nothing */
    assert_int_equal(count_lines(cache, "quiet"), quiet2);
    assert_int_equal(count_lines(cache, "busy"), busy);

    e2e_rmtree(dir);
}

/* A line's verdict is the margin rule applied to the times it records, not its provider field:
 * lines written under another margin (0.25 before the nChw16c layout) decide as today's rule does.
 * Each quiet verdict of a run is rewritten twice into a new file: oneDNN 5% faster than builtin
 * with "onednn" in the provider field (under the 10% margin: builtin), and 20% faster with
 * "builtin" there (oneDNN); the next run must log the rule's verdict for every key. */
static void test_verdict_from_recorded_times(void **state) {
    (void)state;
    char dir[256], cache[320], loadavg[320], edited[340];
    fresh_dir(dir, cache, loadavg);
    write_loadavg(loadavg, 1);
    run_job(dir, "measure");
    for (int close_race = 1; close_race >= 0; close_race--) {
        snprintf(edited, sizeof(edited), "%s/edited-%d.tsv", dir, close_race);
        FILE *in = fopen(cache, "r"), *out = fopen(edited, "w");
        if (!in) {
            printf("  skipped: no kernel had more than one provider to choose from (oneDNN absent?)\n");
            if (out) fclose(out);
            e2e_rmtree(dir);
            return;
        }
        assert_non_null(out);
        char line[1024];
        int lines = 0;
        while (fgets(line, sizeof(line), in)) {
            char *field[k_fields];
            /* keys where builtin and oneDNN's plain kernel both serve; the other candidates dropped */
            if (split_fields(line, field, k_fields) < k_fields || strcmp(field[k_quiet_field], "quiet") || atof(field[6]) <= 0 ||
                atof(field[7]) <= 0)
                continue;
            fprintf(out, "%s\t%s\t%s\t%s\t%s\t%s\t100.0\t%s", field[0], field[1], field[2], field[3], field[4],
                    close_race ? "onednn" : "builtin", close_race ? "95.0" : "80.0");
            for (int q = 2; q < k_providers; q++) fprintf(out, "\t0.0");
            fprintf(out, "\tquiet\t%s\n", field[k_fields - 1]);
            lines++;
        }
        fclose(in);
        fclose(out);
        if (lines == 0) {
            printf("  skipped: no key that builtin and oneDNN's plain kernel both serve\n");
            break;
        }
        setenv("MSTUNE_KERNELS_CACHE", edited, 1);
        setenv("MSTUNE_KERNELS_LOG", "1", 1);
        char args[1024];
        snprintf(args, sizeof(args), JOB " --out %s/edited-%d", dir, close_race);
        e2e_run_ok(args, g_out, sizeof(g_out));
        unsetenv("MSTUNE_KERNELS_LOG");
        const char *want = close_race ? "-> builtin\n" : "-> onednn\n", *other = close_race ? "-> onednn\n" : "-> builtin\n";
        int found = 0;
        for (const char *at = g_out; (at = strstr(at, " from ")) != NULL; at++) {
            const char *eol = strchr(at, '\n');
            assert_non_null(eol);
            if (strncmp(at + strlen(" from "), edited, strlen(edited)) != 0) continue;
            const char *arrow = strstr(at, "-> ");
            assert_true(arrow && arrow < eol);
            assert_true(strncmp(arrow, other, strlen(other)) != 0);
            found += strncmp(arrow, want, strlen(want)) == 0;
        }
        printf("%s: %d keys rewritten, %d verdicts from the file %s", close_race ? "5% faster" : "20% faster", lines, found, want);
        assert_int_equal(found, lines);
        setenv("MSTUNE_KERNELS_CACHE", cache, 1);
    }
    e2e_rmtree(dir);
}

/* The training step's thread verdict (runtime/graph/step_threads.h), a graph plan's or an eager
 * run's, in the same file: the first
 * process times the two budgets and appends one `s1` line; the next one, quiet or busy, starts
 * from it and confirms it with a shorter trial, appending a line only when it overturns it; its
 * summary names the budget its step ran on. (The kernel lines' format is count_lines'; these have
 * their own tag.) count_step_lines: the number of lines, the last one's verdict into `verdict`. */
static int count_step_lines(const char *path, char *verdict, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof(line), f)) {
        char *field[10];
        int k = split_fields(line, field, 10);
        if (k < 1 || strcmp(field[0], "s1") != 0) continue;
        /* s1 machine step_threads key threads one|all all_us one_us quiet|busy graph */
        assert_int_equal(k, 10);
        assert_string_equal(field[2], "step_threads");
        assert_string_equal(field[4], "2");
        assert_true(strcmp(field[5], "one") == 0 || strcmp(field[5], "all") == 0);
        assert_true(atof(field[6]) > 0 && atof(field[7]) > 0);
        snprintf(verdict, n, "%s", field[5]);
        lines++;
    }
    fclose(f);
    return lines;
}

/* mode: "graph" or "eager"; the two keep their verdicts under different keys of one file. */
static void step_thread_verdict_kept(const char *mode) {
    char dir[256], cache[320], loadavg[320], args[1024], verdict[8] = "", again[8] = "";
    fresh_dir(dir, cache, loadavg);
    write_loadavg(loadavg, 1);
    setenv("MSTUNE_KERNELS_LOG", "1", 1);
    unsetenv("MSTUNE_GRAPH_THREADS");
    unsetenv("MSTUNE_STEP_THREADS");
    char job[512], tag[64];
    snprintf(job, sizeof(job), "train workloads/jobs/fashion_mlp.yaml --set runtime.mode=%s --set train.steps=30 "
             "--set train.eval=false --set data.limit=640 --set data.batch_size=16 --set runtime.threads=2 "
             "--set train.checkpoint=false", mode);
    snprintf(tag, sizeof(tag), "mstune %s: step threads: ", mode);
    snprintf(args, sizeof(args), "%s --out %s/first", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    char want[200];
    snprintf(want, sizeof(want), "%sone thread ", tag);
    assert_non_null(strstr(g_out, want));     /* kept or rejected, with the times */
    assert_non_null(strstr(g_out, " alternated pairs"));
    assert_int_equal(count_step_lines(cache, verdict, sizeof(verdict)), 1);
    printf("%s, first process: %s threads\n", mode, verdict);
    write_loadavg(loadavg, 12);     /* a busy process takes the quiet line as it is */
    snprintf(args, sizeof(args), "%s --out %s/second", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    snprintf(want, sizeof(want), "%s%s (this machine's verdict file), confirmed by the step's first %d runs", tag,
             strcmp(verdict, "one") == 0 ? "one thread" : "all threads", MST_STEP_THREADS_TRIAL_RUNS);
    assert_non_null(strstr(g_out, want));
    /* the confirmation's outcome, timed: either way one line per outcome and the summary agrees */
    bool overturned = strstr(g_out, "(this machine's verdict file overturned)") != NULL;
    assert_true(overturned || strstr(g_out, "(this machine's verdict file confirmed)") != NULL);
    printf("%s, second process: %s\n", mode, overturned ? "overturned" : "confirmed");
    assert_int_equal(count_step_lines(cache, again, sizeof(again)), overturned ? 2 : 1);
    if (overturned) assert_string_not_equal(again, verdict);
    else assert_string_equal(again, verdict);
    /* the run's summary says which budget its step ran on */
    char path[400];
    snprintf(path, sizeof(path), "%s/second/summary.json", dir);
    cJSON *sum = e2e_read_json(path);
    assert_non_null(sum);
    const bool graph = strcmp(mode, "graph") == 0;
    const double threads = strcmp(again, "one") == 0 ? 1 : 2;
    assert_true(e2e_num(sum, "step_threads") == threads);
    assert_true(e2e_num(sum, "graph_step_threads") == (graph ? threads : 0));
    cJSON_Delete(sum);
    /* with a loader worker beside the kernels: another key, so a fresh trial and a line of its own
     * (one key shared by both flipped its verdict in every process of the advisor's loader trial) */
    const int lines_before = count_step_lines(cache, again, sizeof(again));
    snprintf(args, sizeof(args), "%s --set data.num_workers=1 --out %s/worker", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    assert_null(strstr(g_out, "(this machine's verdict file)"));
    assert_non_null(strstr(g_out, " alternated pairs"));
    assert_int_equal(count_step_lines(cache, again, sizeof(again)), lines_before + 1);
    /* pinned: no trial, nothing written, the step on the budget asked for */
    setenv("MSTUNE_STEP_THREADS", "all", 1);
    snprintf(args, sizeof(args), "%s --out %s/pinned", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    assert_null(strstr(g_out, tag));
    assert_int_equal(count_step_lines(cache, again, sizeof(again)), lines_before + 1);
    snprintf(path, sizeof(path), "%s/pinned/summary.json", dir);
    sum = e2e_read_json(path);
    assert_non_null(sum);
    assert_true(e2e_num(sum, "step_threads") == 2);
    cJSON_Delete(sum);
    unsetenv("MSTUNE_STEP_THREADS");
    unsetenv("MSTUNE_KERNELS_LOG");
    e2e_rmtree(dir);
}

/* Graph mode with a smaller last batch: its plan (another shape, run once an epoch) takes the first
 * shape's budget instead of trying its own (18 epochs of alternating budgets, restarted at other
 * steps by a resumed run), and the summary reports the first shape's budget, not the last plan's
 * (which read 0, undecided, in every such run before). */
static void test_last_batch_plan_takes_the_first_budget(void **state) {
    (void)state;
    char dir[256], cache[320], loadavg[320], args[1024];
    fresh_dir(dir, cache, loadavg);
    write_loadavg(loadavg, 1);
    setenv("MSTUNE_KERNELS_LOG", "1", 1);
    unsetenv("MSTUNE_GRAPH_THREADS");
    unsetenv("MSTUNE_STEP_THREADS");
    const char *job = "train workloads/jobs/fashion_mlp.yaml --set runtime.mode=graph --set train.eval=false "
                      "--set runtime.threads=2 --set train.checkpoint=false";
    /* 15 steps and a batch of 40 an epoch: the last batch's plan comes before the first plan's
     * trial (26 runs with the optimizer's) has decided: all threads */
    snprintf(args, sizeof(args), "%s --set data.limit=1000 --set train.epochs=2 --out %s/early", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    assert_non_null(strstr(g_out, "mstune graph: step threads: all threads (pinned by the first batch shape's trial, not decided yet)"));
    char path[400], verdict[8] = "";
    snprintf(path, sizeof(path), "%s/early/summary.json", dir);
    cJSON *sum = e2e_read_json(path);
    assert_non_null(sum);
    assert_int_equal(count_step_lines(cache, verdict, sizeof(verdict)), 1);     /* the first plan's, decided at run 26 of 30 */
    assert_true(e2e_num(sum, "step_threads") == (strcmp(verdict, "one") == 0 ? 1 : 2));
    cJSON_Delete(sum);
    /* 31 steps and a batch of 16: the first plan has decided when the last batch comes */
    snprintf(args, sizeof(args), "%s --set data.limit=2000 --out %s/late", job, dir);
    e2e_run_ok(args, g_out, sizeof(g_out));
    const char *want = " (pinned by the first batch shape's verdict)";   /* confirmed or overturned, either budget */
    if (!strstr(g_out, want)) fail_msg("no '%s' in:\n%s", want, g_out);
    unsetenv("MSTUNE_KERNELS_LOG");
    e2e_rmtree(dir);
}

static void test_step_thread_verdict_kept(void **state) {
    (void)state;
    step_thread_verdict_kept("graph");
}

static void test_eager_step_thread_verdict_kept(void **state) {
    (void)state;
    step_thread_verdict_kept("eager");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busy_verdicts_measured_again),
        cmocka_unit_test(test_verdict_from_recorded_times),
        cmocka_unit_test(test_step_thread_verdict_kept),
        cmocka_unit_test(test_eager_step_thread_verdict_kept),
        cmocka_unit_test(test_last_batch_plan_takes_the_first_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
