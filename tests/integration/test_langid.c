/* test_langid.c — the language-id transformer end to end through the real binary
 * (workloads/jobs/langid_transformer_short.yaml): eager and graph give the same loss curve
 * (1e-4 relative) and accuracy (0.2 points), well above chance; summary.json names its metric;
 * it trains at O1, O2 (bf16, dynamic loss scale) and O3 with finite losses; `mstune profile`
 * attributes its steps. Skipped when Debian's word lists are not installed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "e2e.h"

#define JOB "workloads/jobs/langid_transformer_short.yaml"

static bool have_lists(void) {
    return access("/usr/share/dict/american-english", R_OK) == 0 && access("/usr/share/dict/swedish", R_OK) == 0;
}

static cJSON *run(const char *cmd, const char *sets, const char *dir, const char *name) { return e2e_job(cmd, JOB, sets, dir, name); }

static void test_eager_graph_parity(void **state) {
    (void)state;
    if (!have_lists()) skip();
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    cJSON *e = run("train", "--set runtime.mode=eager", dir, "eager");
    cJSON *g = run("train", "--set runtime.mode=graph", dir, "graph");
    double worst = e2e_loss_curve_diff(e, g, 100);
    double acc_e = e2e_num(e, "val_accuracy"), acc_g = e2e_num(g, "val_accuracy");
    printf("langid: worst relative loss difference eager vs graph %.3g; accuracy eager %.4f graph %.4f\n", worst, acc_e, acc_g);
    assert_true(worst <= 1e-4);
    assert_true(fabs(acc_e - acc_g) <= 0.002);
    assert_true(acc_e > 0.25);      /* chance is 0.125 over 8 balanced languages */
    assert_true(e2e_num(g, "compile_count") >= 2);
    /* the job's metric, with its direction and one value per evaluation */
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "metric");
    assert_non_null(m);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "name")->valuestring, "accuracy");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "higher_is_better")));
    assert_true(e2e_num(m, "value") == acc_e);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "curve")), 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring, "transformer");
    cJSON_Delete(e);
    cJSON_Delete(g);
    e2e_rmtree(dir);
}

static void test_amp_levels(void **state) {
    (void)state;
    if (!have_lists()) skip();
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    const char *sets[] = {"--set amp.level=O1 --set amp.dtype=bf16", "--set amp.level=O2 --set amp.dtype=bf16",
                          "--set amp.level=O2 --set amp.dtype=f16 --set runtime.mode=graph",
                          "--set amp.level=O3 --set amp.dtype=bf16"};
    for (int i = 0; i < 4; i++) {
        char all[512], name[16];
        snprintf(all, sizeof(all), "%s --set data.limit=1280", sets[i]);
        snprintf(name, sizeof(name), "amp%d", i);
        cJSON *j = run("train", all, dir, name);
        double loss = e2e_num(j, "final_train_loss"), acc = e2e_num(j, "val_accuracy");
        printf("langid %s: final loss %.4f, accuracy %.4f, %g skipped steps\n", sets[i], loss, acc, e2e_num(j, "skipped_steps"));
        assert_true(isfinite(loss) && loss > 0);
        assert_true(acc >= 0 && acc <= 1);
        cJSON_Delete(j);
    }
    e2e_rmtree(dir);
}

static void test_profile(void **state) {
    (void)state;
    if (!have_lists()) skip();
    char dir[1024];
    e2e_tmpdir(dir, sizeof(dir));
    cJSON *j = run("profile", "--set data.limit=1280", dir, "prof");
    const cJSON *share = cJSON_GetObjectItemCaseSensitive(j, "breakdown_share");
    assert_non_null(share);
    double kernel = e2e_num(share, "kernel"), dispatch = e2e_num(share, "dispatch");
    printf("langid profile: kernel share %.3f, dispatch share %.3f\n", kernel, dispatch);
    assert_true(kernel > 0 && dispatch > 0);
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

/* `mstune graph` traces the step with the dataset's input and target types */
static void test_graph_dump(void **state) {
    (void)state;
    if (!have_lists()) skip();
    e2e_assert_graph_dump(JOB);
}

int main(void) {
    /* eager and graph on the same thread budget: the plan's step-thread verdict (measured, so
     * timing-dependent; runtime/graph/step_threads.h) is forced to all threads */
    setenv("MSTUNE_GRAPH_THREADS", "all", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_graph_parity),
        cmocka_unit_test(test_graph_dump),
        cmocka_unit_test(test_amp_levels),
        cmocka_unit_test(test_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
