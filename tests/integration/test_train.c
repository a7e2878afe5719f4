/* test_train.c — `mstune train` end to end: accuracy on real data, bitwise determinism (same
 * seed, any worker count, stop-and-resume), and every bad input failing with exit 2 and a clear
 * message while leaving an existing good output untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "tests/integration/e2e.h"

#define FASHION "/usr/share/datasets/fashion-mnist"
/* A small real-data job: 2560 training images, mlp with dropout, heavy augmentation, so the
 * loader's and the context's random streams are both exercised. */
#define SMALL "workloads/jobs/quickstart.yaml --set data.limit=2560 --set model.dropout=0.1 --set data.augment=heavy"
/* Runs compared bit for bit across processes pin the step's thread budget: unpinned, each process
 * confirms the machine's verdict on it, and one that overturns it (a loaded machine) runs the other
 * budget, whose bits differ in f32 rounding (docs/training.md, "Determinism");
 * test_resume_keeps_the_step_budget covers the unpinned resume. */
#define PINNED " --set runtime.step_threads=all"

static char g_out[16384];

static cJSON *summary(const char *dir) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/summary.json", dir);
    cJSON *j = e2e_read_json(p);
    if (!j) fail_msg("no readable %s", p);
    return j;
}


/* The printed loss array: comparing text compares every double bit for bit (cJSON prints 17
 * significant digits when fewer would not round-trip). */
static char *losses(cJSON *j) {
    char *s = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "train_loss"));
    assert_non_null(s);
    return s;
}

static void run_ok(const char *args) { e2e_run_ok(args, g_out, sizeof(g_out)); }

static void test_mlp_accuracy_and_summary(void **state) {
    char dir[512], args[1024];
    e2e_tmpdir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "train workloads/jobs/fashion_mlp.yaml --out %s", dir);
    run_ok(args);
    cJSON *j = summary(dir);
    double acc = e2e_num(j, "val_accuracy");
    printf("fashion_mlp: 1 epoch, val accuracy %.4f\n", acc);
    assert_true(acc >= 0.85);
    const char *keys[] = {"val_loss", "steps", "epochs", "step_time_ms_median", "steps_per_s", "samples_per_s",
                          "peak_memory_bytes", "seed"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) e2e_num(j, keys[i]);
    assert_int_equal((int)e2e_num(j, "steps"), 938);
    assert_int_equal((int)e2e_num(j, "epochs"), 1);
    assert_true(e2e_num(j, "peak_memory_bytes") > 0);
    cJSON *cfg = cJSON_GetObjectItem(j, "config");
    assert_true(cJSON_IsObject(cfg));
    assert_non_null(strstr(g_out, "val accuracy"));
    cJSON_Delete(j);
    e2e_rmtree(dir);
}

static void test_same_seed_same_bits(void **state) {
    char a[512], b[512], args[1024];
    e2e_tmpdir(a, sizeof(a));
    e2e_tmpdir(b, sizeof(b));
    snprintf(args, sizeof(args), "train " SMALL PINNED " --out %s", a);
    run_ok(args);
    snprintf(args, sizeof(args), "train " SMALL PINNED " --out %s", b);
    run_ok(args);
    cJSON *ja = summary(a), *jb = summary(b);
    char *la = losses(ja), *lb = losses(jb);
    assert_string_equal(la, lb);
    assert_true(e2e_num(ja, "val_accuracy") == e2e_num(jb, "val_accuracy"));
    char ca[600], cb[600];
    snprintf(ca, sizeof(ca), "%s/checkpoint.bin", a);
    snprintf(cb, sizeof(cb), "%s/checkpoint.bin", b);
    assert_true(e2e_files_equal(ca, cb));
    /* another seed gives another run */
    snprintf(args, sizeof(args), "train " SMALL PINNED " --set train.seed=7 --out %s", b);
    run_ok(args);
    cJSON *jc = summary(b);
    char *lc = losses(jc);
    assert_string_not_equal(la, lc);
    free(la); free(lb); free(lc);
    cJSON_Delete(ja); cJSON_Delete(jb); cJSON_Delete(jc);
    e2e_rmtree(a);
    e2e_rmtree(b);
}

static void test_workers_same_bits(void **state) {
    char dir[512], args[1024];
    e2e_tmpdir(dir, sizeof(dir));
    char *ref = NULL;
    double ref_acc = 0;
    const int workers[] = {0, 1, 4};
    for (int i = 0; i < 3; i++) {
        /* the budget pinned: the step-thread verdicts are kept per loader worker count (which budget
         * is faster depends on them), so three counts may settle on different budgets, whose bits
         * differ in f32 rounding; what this checks is the loader's part */
        snprintf(args, sizeof(args), "train " SMALL PINNED " --set data.num_workers=%d --set data.prefetch=%d --out %s",
                 workers[i], 1 + i, dir);
        run_ok(args);
        cJSON *j = summary(dir);
        char *l = losses(j);
        if (!ref) {
            ref = l;
            ref_acc = e2e_num(j, "val_accuracy");
        } else {
            if (strcmp(ref, l) != 0) fail_msg("num_workers=%d changed the loss sequence", workers[i]);
            assert_true(e2e_num(j, "val_accuracy") == ref_acc);
            free(l);
        }
        cJSON_Delete(j);
    }
    free(ref);
    e2e_rmtree(dir);
}

static void test_resume_same_bits(void **state) {
    char full[512], part[512], args[1024];
    e2e_tmpdir(full, sizeof(full));
    e2e_tmpdir(part, sizeof(part));
    snprintf(args, sizeof(args), "train " SMALL PINNED " --set train.epochs=2 --out %s", full);
    run_ok(args);
    snprintf(args, sizeof(args), "train " SMALL PINNED " --set train.epochs=1 --out %s", part);
    run_ok(args);
    snprintf(args, sizeof(args), "train " SMALL PINNED " --set train.epochs=2 --resume --out %s", part);
    run_ok(args);
    cJSON *jf = summary(full), *jp = summary(part);
    assert_true(e2e_num(jp, "resumed_at_step") > 0);
    assert_true(e2e_num(jf, "steps") == e2e_num(jp, "steps"));
    assert_true(e2e_num(jf, "val_accuracy") == e2e_num(jp, "val_accuracy"));
    assert_true(e2e_num(jf, "final_train_loss") == e2e_num(jp, "final_train_loss"));
    /* the resumed run's losses are the second half of the uninterrupted run's */
    cJSON *lf = cJSON_GetObjectItem(jf, "train_loss"), *lp = cJSON_GetObjectItem(jp, "train_loss");
    int nf = cJSON_GetArraySize(lf), np = cJSON_GetArraySize(lp);
    assert_true(np > 0 && np < nf);
    for (int i = 0; i < np; i++)
        assert_true(cJSON_GetArrayItem(lp, i)->valuedouble == cJSON_GetArrayItem(lf, nf - np + i)->valuedouble);
    char cf[600], cp[600];
    snprintf(cf, sizeof(cf), "%s/checkpoint.bin", full);
    snprintf(cp, sizeof(cp), "%s/checkpoint.bin", part);
    assert_true(e2e_files_equal(cf, cp));      /* parameters, buffers, optimizer state: all bits */
    cJSON_Delete(jf);
    cJSON_Delete(jp);
    e2e_rmtree(full);
    e2e_rmtree(part);
}

/* A resumed run goes on with the thread budget its checkpoint records, unpinned (auto): the
 * super-resolution net's budgets give bits that differ in f32 rounding, and a trial of its own at
 * the resumed steps ran other budgets there than the uninterrupted run did. One checkpoint resumed
 * twice, unpinned and pinned to the budget it records, gives the same bits (without the
 * checkpoint's budget the unpinned one tried both at its first steps: its checkpoint differed). */
static void test_resume_keeps_the_step_budget(void **state) {
    char part[512], copy_dir[512], args[1024];
    e2e_tmpdir(part, sizeof(part));
    e2e_tmpdir(copy_dir, sizeof(copy_dir));
#define SR "workloads/jobs/fashion_sr_short.yaml --set data.limit=1280 --set optimizer.schedule=constant"
    snprintf(args, sizeof(args), "train " SR " --set train.epochs=1 --out %s", part);
    run_ok(args);
    cJSON *j1 = summary(part);
    const double budget = e2e_num(j1, "step_threads");
    assert_true(budget >= 1);               /* decided within the first epoch's 40 steps */
    char cmd[1600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", copy_dir, part, copy_dir);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof(args), "train " SR " --set train.epochs=2 --resume --out %s", part);
    run_ok(args);
    snprintf(args, sizeof(args), "train " SR " --set train.epochs=2 --set runtime.step_threads=%s --resume --out %s",
             budget == 1 ? "one" : "all", copy_dir);
    run_ok(args);
    cJSON *ja = summary(part), *jb = summary(copy_dir);
    assert_true(e2e_num(ja, "resumed_at_step") > 0);
    assert_true(e2e_num(ja, "step_threads") == budget);
    char ca[600], cb[600];
    snprintf(ca, sizeof(ca), "%s/checkpoint.bin", part);
    snprintf(cb, sizeof(cb), "%s/checkpoint.bin", copy_dir);
    if (!e2e_files_equal(ca, cb)) fail_msg("resumed unpinned from a checkpoint of %g threads: its bits are not the pinned run's", budget);
    cJSON_Delete(j1);
    cJSON_Delete(ja);
    cJSON_Delete(jb);

    /* a run pinned to one thread, resumed unpinned with a verdict file of its own: the checkpoint's
     * budget holds (one thread, no trial, so no verdict written) */
    char pinned[512], cache_dir[512], cache[600], env_before[700] = "";
    e2e_tmpdir(pinned, sizeof(pinned));
    e2e_tmpdir(cache_dir, sizeof(cache_dir));
    const char *was = getenv("MSTUNE_KERNELS_CACHE");
    if (was) snprintf(env_before, sizeof(env_before), "%s", was);
    snprintf(cache, sizeof(cache), "%s/verdicts.tsv", cache_dir);
    setenv("MSTUNE_KERNELS_CACHE", cache, 1);
    snprintf(args, sizeof(args), "train " SMALL " --set runtime.step_threads=one --set train.epochs=1 --out %s", pinned);
    run_ok(args);
    snprintf(args, sizeof(args), "train " SMALL " --set train.epochs=2 --resume --out %s", pinned);
    run_ok(args);
    cJSON *jp = summary(pinned);
    assert_true(e2e_num(jp, "resumed_at_step") > 0);
    assert_true(e2e_num(jp, "step_threads") == 1);
    size_t len = 0;
    char *verdicts = e2e_read_file(cache, &len);
    if (verdicts && strstr(verdicts, "step_threads")) fail_msg("the resumed run tried its step's budget:\n%s", verdicts);
    free(verdicts);
    cJSON_Delete(jp);

    /* a budget the header cannot hold: exit 2 naming it (the checksum made to match) */
    char ck[600];
    snprintf(ck, sizeof(ck), "%s/checkpoint.bin", pinned);
    unsigned char *bytes = (unsigned char *)e2e_read_file(ck, &len);
    assert_non_null(bytes);
    assert_true(len > 28);
    assert_int_equal(bytes[20], 2);                 /* one thread, as the run had it */
    bytes[20] = 7;
    uint32_t crc = (uint32_t)crc32(0L, bytes, (uInt)(len - 4));
    memcpy(bytes + len - 4, &crc, 4);
    FILE *f = fopen(ck, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    snprintf(args, sizeof(args), "train " SMALL " --set train.epochs=3 --resume --out %s", pinned);
    int rc = e2e_run(args, g_out, sizeof(g_out));
    if (rc != 2 || !strstr(g_out, "step thread budget 7")) fail_msg("exit %d:\n%s", rc, g_out);
    if (*env_before) setenv("MSTUNE_KERNELS_CACHE", env_before, 1);
    else unsetenv("MSTUNE_KERNELS_CACHE");
    e2e_rmtree(part);
    e2e_rmtree(copy_dir);
    e2e_rmtree(pinned);
    e2e_rmtree(cache_dir);
}

/* ---- bad input: exit 2, a message naming the problem, the good output untouched ---- */

typedef struct {
    char good[512];         /* a finished good run */
    char summary[600], ckpt[600];
    char *summary_bytes;
    size_t summary_len;
} good_run;

static void make_good(good_run *g) {
    char args[1024];
    e2e_tmpdir(g->good, sizeof(g->good));
    snprintf(args, sizeof(args), "train workloads/jobs/quickstart.yaml --set data.limit=640 --out %s", g->good);
    run_ok(args);
    snprintf(g->summary, sizeof(g->summary), "%s/summary.json", g->good);
    snprintf(g->ckpt, sizeof(g->ckpt), "%s/checkpoint.bin", g->good);
    g->summary_bytes = e2e_read_file(g->summary, &g->summary_len);
    assert_non_null(g->summary_bytes);
    assert_true(e2e_exists(g->ckpt));
}

static void expect_rejected(good_run *g, const char *what, const char *job_and_sets, int want_rc, const char *want_msg) {
    char args[2048], ck_copy[700];
    snprintf(ck_copy, sizeof(ck_copy), "%s/ck.before", g->good);
    char cmd[1600];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", g->ckpt, ck_copy);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof(args), "train %s --out %s", job_and_sets, g->good);
    int rc = e2e_run(args, g_out, sizeof(g_out));
    if (rc != want_rc) fail_msg("%s: exit %d, expected %d; output:\n%s", what, rc, want_rc, g_out);
    if (!strstr(g_out, want_msg)) fail_msg("%s: message lacks '%s':\n%s", what, want_msg, g_out);
    printf("%-28s exit %d: %s", what, rc, g_out);
    size_t len;
    char *now = e2e_read_file(g->summary, &len);
    assert_non_null(now);
    assert_true(len == g->summary_len && memcmp(now, g->summary_bytes, len) == 0);
    free(now);
    assert_true(e2e_files_equal(g->ckpt, ck_copy));
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
    gzclose(f);
}

static void copy(const char *from, const char *to) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_bad_inputs_keep_good_output(void **state) {
    good_run g;
    make_good(&g);
    char tmp[512], p[1024], sets[2048];
    e2e_tmpdir(tmp, sizeof(tmp));

    /* a data folder with the real test split and a broken training split */
    char data[600];
    snprintf(data, sizeof(data), "%s/data", tmp);
    snprintf(p, sizeof(p), "mkdir -p '%s'", data);
    assert_int_equal(system(p), 0);
    const char *keep[] = {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 3; i++) {
        char from[600], to[800];
        snprintf(from, sizeof(from), FASHION "/%s", keep[i]);
        snprintf(to, sizeof(to), "%s/%s", data, keep[i]);
        copy(from, to);
    }
    unsigned char hdr[16 + 1000] = {0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28};   /* 60000 x 28 x 28 */
    snprintf(p, sizeof(p), "%s/train-images-idx3-ubyte.gz", data);
    write_gz(p, hdr, sizeof(hdr));
    snprintf(sets, sizeof(sets), "workloads/jobs/quickstart.yaml --set data.path=%s", data);
    expect_rejected(&g, "truncated IDX", sets, 2, "train-images-idx3-ubyte.gz");
    expect_rejected(&g, "truncated IDX (says so)", sets, 2, "truncated");

    hdr[3] = 1;     /* a labels magic where images belong */
    write_gz(p, hdr, sizeof(hdr));
    expect_rejected(&g, "wrong magic", sets, 2, "magic");

    snprintf(sets, sizeof(sets), "workloads/jobs/quickstart.yaml --set data.path=%s/nowhere", tmp);
    expect_rejected(&g, "missing dataset", sets, 2, "dataset-fashion-mnist");

    snprintf(p, sizeof(p), "%s/bad.yaml", tmp);
    write_text(p, "name: bad\nmodel:\n  name: [mlp\n");
    expect_rejected(&g, "bad YAML", p, 2, "bad.yaml:");

    write_text(p, "name: bad\ndata:\n  batchsize: 64\n");
    expect_rejected(&g, "unknown key", p, 2, "bad.yaml:3:3: unknown key 'batchsize'");

    write_text(p, "name: bad\ndata:\n  batch_size: lots\n");
    expect_rejected(&g, "wrong type", p, 2, "bad.yaml:3:15");

    expect_rejected(&g, "negative batch size", "workloads/jobs/quickstart.yaml --set data.batch_size=-3", 2, "data.batch_size");
    expect_rejected(&g, "missing job file", "workloads/jobs/nope.yaml", 2, "nope.yaml");

    /* a diverging run stops with exit 1 and leaves the last checkpoint as it was */
    expect_rejected(&g, "non-finite loss", "workloads/jobs/quickstart.yaml --set data.limit=640 --set optimizer.lr=1e12", 1, "loss is");

    free(g.summary_bytes);
    e2e_rmtree(tmp);
    e2e_rmtree(g.good);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_accuracy_and_summary),
        cmocka_unit_test(test_same_seed_same_bits),
        cmocka_unit_test(test_workers_same_bits),
        cmocka_unit_test(test_resume_same_bits),
        cmocka_unit_test(test_resume_keeps_the_step_budget),
        cmocka_unit_test(test_bad_inputs_keep_good_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
