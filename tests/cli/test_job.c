/* test_job.c — the job file: shipped jobs, defaults, the schema table's invariants, every class of
 * load error with its exact position and message, --set, validation, JSON, the YAML writer's round
 * trip and atomicity, docs/job.md in sync with the table, and a seeded mutation smoke test.
 * Paths into the source tree come from __FILE__ (CMake passes absolute source paths). */
#include <dirent.h>
#include <errno.h>
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

#include "cli/job.h"

/* ---- helpers ---- */

static char repo_root[4096];

static const char *repo_path(const char *rel, char *buf, size_t n) {
    if (!repo_root[0]) {
        const char *me = __FILE__, *tail = strstr(me, "tests/cli/test_job.c");
        assert_non_null(tail);
        snprintf(repo_root, sizeof(repo_root), "%.*s", (int)(tail - me), me);
    }
    snprintf(buf, n, "%s%s", repo_root, rel);
    return buf;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* Loads text as "job.yaml"; returns the rc, the message in err. */
static int load_text(mst_job *job, const char *text, char *err, size_t n) {
    err[0] = '\0';
    return mst_job_load_string(job, "job.yaml", text, strlen(text), err, n);
}

/* The text must fail to load with exactly this message. */
static void expect_load_error(const char *text, const char *message) {
    mst_job job;
    char err[2048];
    mst_job_defaults(&job);
    mst_job before = job;
    int rc = load_text(&job, text, err, sizeof(err));
    if (rc == 0 || strcmp(err, message) != 0) print_error("input:\n%s\n", text);
    assert_int_equal(rc, -1);
    assert_string_equal(err, message);
    assert_memory_equal(&job, &before, sizeof(job));   /* a failed load leaves the job alone */
}

static void expect_set_error(const char *assignment, const char *message) {
    mst_job job;
    char err[2048] = "";
    mst_job_defaults(&job);
    mst_job before = job;
    assert_int_equal(mst_job_set(&job, assignment, err, sizeof(err)), -1);
    assert_string_equal(err, message);
    assert_memory_equal(&job, &before, sizeof(job));
}

static void expect_invalid(const mst_job *job, const char *message) {
    char err[1024] = "";
    assert_int_equal(mst_job_validate(job, err, sizeof(err)), -1);
    assert_string_equal(err, message);
}

static void set_ok(mst_job *job, const char *assignment) {
    char err[1024] = "";
    int rc = mst_job_set(job, assignment, err, sizeof(err));
    if (rc != 0) print_error("%s\n", err);
    assert_int_equal(rc, 0);
}

static char tmp_dir[256];

static int make_tmp_dir(void **state) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/mstune_test_job_XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int remove_tmp_dir(void **state) {
    DIR *d = opendir(tmp_dir);
    if (!d) return 0;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", tmp_dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tmp_dir);
    return 0;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* ---- shipped jobs and defaults ---- */

static void test_shipped_jobs(void **state) {
    static const char *const files[] = {"workloads/jobs/fashion_mlp.yaml", "workloads/jobs/fashion_cnn.yaml",
                                        "workloads/jobs/quickstart.yaml"};
    mst_job job[3];
    char path[4200], err[1024];
    for (int i = 0; i < 3; i++) {
        int rc = mst_job_load(&job[i], repo_path(files[i], path, sizeof(path)), err, sizeof(err));
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, 0);
        rc = mst_job_validate(&job[i], err, sizeof(err));
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, 0);
    }
    assert_string_equal(job[0].name, "fashion_mlp");
    assert_int_equal(job[0].model.name, MST_JOB_MODEL_MLP);
    assert_int_equal(job[0].data.dataset, MST_JOB_DATASET_FASHION_MNIST);
    assert_int_equal(job[0].data.batch_size, 64);
    assert_int_equal(job[0].train.epochs, 1);
    assert_int_equal(job[0].optimizer.name, MST_JOB_OPTIM_SGD);
    assert_true(job[0].optimizer.lr == 0.05);
    assert_true(job[0].optimizer.momentum == 0.9);

    assert_string_equal(job[1].name, "fashion_cnn");
    assert_int_equal(job[1].model.name, MST_JOB_MODEL_CNN);
    assert_int_equal(job[1].model.width, 32);
    assert_int_equal(job[1].model.blocks, 2);
    assert_int_equal(job[1].data.batch_size, 64);
    assert_int_equal(job[1].train.epochs, 3);
    assert_int_equal(job[1].optimizer.schedule, MST_JOB_SCHED_COSINE);
    assert_true(job[1].optimizer.momentum > 0);
    assert_true(job[1].optimizer.weight_decay == 5e-4);

    assert_string_equal(job[2].name, "quickstart");
    assert_int_equal(job[2].model.name, MST_JOB_MODEL_MLP);
    assert_int_equal(job[2].data.limit, 12000);
    assert_int_equal(job[2].train.epochs, 1);
    assert_string_equal(job[2].data.path, "/usr/share/datasets/fashion-mnist");
}

static void test_defaults(void **state) {
    mst_job j;
    memset(&j, 0x5a, sizeof(j));
    mst_job_defaults(&j);
    assert_string_equal(j.name, "job");
    assert_int_equal(j.model.name, MST_JOB_MODEL_MLP);
    assert_int_equal(j.model.hidden1, 256);
    assert_int_equal(j.model.hidden2, 128);
    assert_int_equal(j.model.width, 32);
    assert_int_equal(j.model.blocks, 2);
    assert_true(j.model.dropout == 0);
    assert_int_equal(j.data.dataset, MST_JOB_DATASET_FASHION_MNIST);
    assert_string_equal(j.data.path, "/usr/share/datasets/fashion-mnist");
    assert_int_equal(j.data.batch_size, 64);
    assert_int_equal(j.data.num_workers, 0);
    assert_int_equal(j.data.prefetch, 2);
    assert_false(j.data.drop_remainder);
    assert_true(j.data.shuffle);
    assert_int_equal(j.data.augment, MST_JOB_AUGMENT_NONE);
    assert_true(j.data.normalize);
    assert_int_equal(j.data.limit, 0);
    assert_int_equal(j.data.synthetic.samples, 8192);
    assert_int_equal(j.data.synthetic.test_samples, 2048);
    assert_int_equal(j.data.synthetic.classes, 10);
    assert_int_equal(j.data.synthetic.channels, 1);
    assert_int_equal(j.data.synthetic.height, 28);
    assert_int_equal(j.data.synthetic.width, 28);
    assert_int_equal(j.train.epochs, 1);
    assert_int_equal(j.train.steps, 0);
    assert_int_equal(j.train.seed, 0);
    assert_true(j.train.eval);
    assert_int_equal(j.train.log_every, 50);
    assert_true(j.train.checkpoint);
    assert_int_equal(j.optimizer.name, MST_JOB_OPTIM_SGD);
    assert_true(j.optimizer.lr == 0.05);
    assert_true(j.optimizer.momentum == 0.9);
    assert_false(j.optimizer.nesterov);
    assert_true(j.optimizer.weight_decay == 0);
    assert_true(j.optimizer.beta1 == 0.9);
    assert_true(j.optimizer.beta2 == 0.999);
    assert_true(j.optimizer.eps == 1e-8);
    assert_int_equal(j.optimizer.schedule, MST_JOB_SCHED_CONSTANT);
    assert_int_equal(j.optimizer.warmup_steps, 0);
    assert_int_equal(j.optimizer.step_size, 1000);
    assert_true(j.optimizer.gamma == 0.1);
    assert_true(j.optimizer.min_lr == 0);
    assert_int_equal(j.runtime.mode, MST_JOB_MODE_EAGER);
    assert_int_equal(j.runtime.device, MST_JOB_DEVICE_CPU);
    assert_int_equal(j.runtime.threads, 0);
    assert_int_equal(j.amp.level, MST_JOB_AMP_O0);
    assert_int_equal(j.amp.dtype, MST_JOB_HALF_F16);
    assert_int_equal(j.amp.loss_scale.type, MST_JOB_SCALE_AUTO);
    assert_true(j.amp.loss_scale.init == 16777216.0);
    assert_true(j.amp.loss_scale.factor == 2.0);
    assert_int_equal(j.amp.loss_scale.window, 2000);
    assert_true(j.amp.loss_scale.drop_overflow_update);
    assert_true(j.train.clip_grad_norm == 0);
    assert_int_equal(j.train.accumulate_steps, 1);
    assert_false(j.runtime.dynamic_batch);
    /* auto follows MindSpore: dynamic at O2 only; any explicit type wins at any level */
    for (int level = 0; level < MST_JOB_AMP_COUNT; level++) {
        mst_job a = j;
        a.amp.level = (mst_job_amp_level)level;
        assert_int_equal(mst_job_loss_scale(&a), level == MST_JOB_AMP_O2 ? MST_JOB_SCALE_DYNAMIC : MST_JOB_SCALE_NONE);
        a.amp.loss_scale.type = MST_JOB_SCALE_FIXED;
        assert_int_equal(mst_job_loss_scale(&a), MST_JOB_SCALE_FIXED);
    }
    char err[256];
    assert_int_equal(mst_job_validate(&j, err, sizeof(err)), 0);

    /* a file sets only what it names */
    assert_int_equal(load_text(&j, "data:\n  batch_size: 32\n", err, sizeof(err)), 0);
    assert_int_equal(j.data.batch_size, 32);
    assert_int_equal(j.data.prefetch, 2);
    assert_string_equal(j.name, "job");
    /* an empty section keeps its defaults */
    assert_int_equal(load_text(&j, "name: x\ndata:\nmodel: ~\n", err, sizeof(err)), 0);
    assert_int_equal(j.data.batch_size, 64);
    assert_string_equal(j.name, "x");
}

/* Name from the file: stem, odd characters as '_'; the file's own name wins. */
static void test_name_from_file(void **state) {
    char path[512], err[1024];
    mst_job job;
    snprintf(path, sizeof(path), "%s/my job.v2.yaml", tmp_dir);
    write_file(path, "train:\n  epochs: 2\n");
    assert_int_equal(mst_job_load(&job, path, err, sizeof(err)), 0);
    assert_string_equal(job.name, "my_job.v2");
    write_file(path, "name: explicit\n");
    assert_int_equal(mst_job_load(&job, path, err, sizeof(err)), 0);
    assert_string_equal(job.name, "explicit");
    unlink(path);
}

/* ---- the table ---- */

static size_t align_of(mst_job_type t) {
    switch (t) {
    case MST_JOB_FLOAT: return _Alignof(double);
    case MST_JOB_INT:
    case MST_JOB_ENUM: return _Alignof(int);
    default: return 1;
    }
}

/* Bytes of the section part of a key path ("data.synthetic" of "data.synthetic.width"). */
static size_t section_len(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? (size_t)(dot - path) : 0;
}

static int by_offset(const void *a, const void *b) {
    const mst_job_key *x = *(const mst_job_key *const *)a, *y = *(const mst_job_key *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void test_schema_table(void **state) {
    const int n = mst_job_key_count;
    assert_int_equal(n, 85);
    const mst_job_key *sorted[96];
    mst_job job;
    mst_job_defaults(&job);
    for (int i = 0; i < n; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        sorted[i] = k;
        assert_ptr_equal(mst_job_key_find(k->path), k);
        assert_non_null(k->help);
        assert_true(strlen(k->help) > 0);
        assert_true(k->offset + k->size <= sizeof(mst_job));
        if (k->type == MST_JOB_ENUM) assert_non_null(k->values);
        if (k->type == MST_JOB_INT || k->type == MST_JOB_ENUM) assert_int_equal(k->size, sizeof(int));
        if (k->type == MST_JOB_FLOAT) assert_int_equal(k->size, sizeof(double));
        if (k->type == MST_JOB_BOOL) assert_int_equal(k->size, sizeof(bool));
        /* the default reads back as itself and passes its own check */
        char text[4200], err[512];
        mst_job_key_format(&job, k, text, sizeof(text));
        mst_job copy = job;
        assert_int_equal(mst_job_key_parse(&copy, k, text, strlen(text), err, sizeof(err)), 0);
        assert_memory_equal(&copy, &job, sizeof(job));
        assert_int_equal(mst_job_key_check(&job, k, err, sizeof(err)), 0);
        /* a section's keys are contiguous: once left, a section never comes back */
        for (int j = 0; j + 1 < i; j++) {
            const char *a = mst_job_keys[j].path, *b = mst_job_keys[j + 1].path;
            const char *da = strrchr(a, '.'), *dk = strrchr(k->path, '.');
            size_t la = da ? (size_t)(da - a) : 0, lk = dk ? (size_t)(dk - k->path) : 0;
            if (la && la == lk && strncmp(a, k->path, la) == 0) {
                const char *db = strrchr(b, '.');
                size_t lb = db ? (size_t)(db - b) : 0;
                /* b sits between two members of the same section: it must be inside it too */
                assert_true(lb >= la && strncmp(b, a, la) == 0);
            }
        }
    }
    assert_null(mst_job_key_find("data"));
    assert_null(mst_job_key_find("data.batch"));
    /* fields tile the struct: no overlap, and no gap bigger than alignment needs, so a field
     * added to mst_job without a row in the table shows up here */
    qsort(sorted, (size_t)n, sizeof(sorted[0]), by_offset);
    size_t end = 0;
    for (int i = 0; i < n; i++) {
        size_t gap = sorted[i]->offset - end;
        /* a nested struct may align to 8 whatever its first field is */
        size_t sl = section_len(sorted[i]->path);
        bool new_section = i > 0 && (sl != section_len(sorted[i - 1]->path) ||
                                     strncmp(sorted[i]->path, sorted[i - 1]->path, sl) != 0);
        size_t max_gap = new_section || align_of(sorted[i]->type) > 4 ? 8 : 4;
        if (sorted[i]->offset < end || gap >= max_gap)
            print_error("field %s: offset %zu, previous field ends at %zu\n", sorted[i]->path, sorted[i]->offset, end);
        assert_true(sorted[i]->offset >= end);
        assert_true(gap < max_gap);
        end = sorted[i]->offset + sorted[i]->size;
    }
    assert_true(sizeof(mst_job) - end < 8);
    assert_string_equal(mst_job_type_name(MST_JOB_FLOAT), "float");
}

/* docs/job.md carries `mstune list keys` verbatim. */
static void test_docs_in_sync(void **state) {
    char path[4200];
    char *doc = read_all(repo_path("docs/job.md", path, sizeof(path)), NULL);
    assert_non_null(doc);
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    assert_non_null(f);
    mst_job_schema_print(f);
    fclose(f);
    if (!strstr(doc, table))
        print_error("docs/job.md is out of date; its key table must be exactly:\n%s", table);
    assert_non_null(strstr(doc, table));
    free(table);
    free(doc);
}

/* ---- load errors: position and message ---- */

static void test_error_syntax(void **state) {
    expect_load_error("data:\n  batch_size: 64\n path: x\n",
                      "job.yaml:3:2: YAML syntax error: did not find expected key "
                      "(while parsing a block mapping at line 1, column 1)");
    expect_load_error("model:\n  name: [mlp\n",
                      "job.yaml:3:1: YAML syntax error: did not find expected ',' or ']' "
                      "(while parsing a flow sequence at line 2, column 9)");
    expect_load_error("name: \"abc\n",
                      "job.yaml:2:1: YAML syntax error: found unexpected end of stream "
                      "(while scanning a quoted scalar at line 1, column 7)");
    expect_load_error("data:\n\tbatch_size: 3\n",
                      "job.yaml:2:1: YAML syntax error: found character that cannot start any token "
                      "(while scanning for the next token at line 2, column 1)");
    expect_load_error("data: *nope\n", "job.yaml:1:7: YAML syntax error: found undefined alias");
    /* not UTF-8: the reader reports a byte offset, shown as line and column */
    expect_load_error("name: ok\ndata:\n  path: \xff\xfe\n",
                      "job.yaml:3:9: YAML syntax error: invalid leading UTF-8 octet");
    /* a syntax error in a second document is still an error */
    expect_load_error("name: a\n---\nname: [\n",
                      "job.yaml:4:1: YAML syntax error: did not find expected node content "
                      "(while parsing a flow node at line 4, column 1)");
}

static void test_error_structure(void **state) {
    expect_load_error("", "job.yaml:1:1: empty job file; expected a mapping of settings "
                          "(keys: name, model, data, train, optimizer, runtime, profile, amp)");
    expect_load_error("# only a comment\n\n", "job.yaml:1:1: empty job file; expected a mapping of settings "
                                               "(keys: name, model, data, train, optimizer, runtime, profile, amp)");
    expect_load_error("---\n", "job.yaml:2:1: empty job file; expected a mapping of settings "
                               "(keys: name, model, data, train, optimizer, runtime, profile, amp)");
    expect_load_error("- a\n- b\n", "job.yaml:1:1: a job file must be a mapping "
                                    "(keys: name, model, data, train, optimizer, runtime, profile, amp), not a sequence");
    expect_load_error("hello\n", "job.yaml:1:1: a job file must be a mapping "
                                 "(keys: name, model, data, train, optimizer, runtime, profile, amp), not a scalar");
    expect_load_error("name: a\n---\nname: b\n",
                      "job.yaml:2:1: a job file holds one YAML document; a second one starts here");
    /* the brief's own example */
    expect_load_error("name: x\nmodel:\n  name: mlp\ndata:\n  batchsize: 32\n",
                      "job.yaml:5:3: unknown key 'batchsize' in data (did you mean 'batch_size'?); valid keys: "
                      "dataset, path, batch_size, num_workers, prefetch, drop_remainder, shuffle, augment, "
                      "normalize, limit, synthetic, langid");
    expect_load_error("modle:\n  name: cnn\n",
                      "job.yaml:1:1: unknown key 'modle' at the top level (did you mean 'model'?); valid keys: "
                      "name, model, data, train, optimizer, runtime, profile, amp");
    expect_load_error("batch_size: 3\n",
                      "job.yaml:1:1: unknown key 'batch_size' at the top level (did you mean 'data.batch_size'?); "
                      "valid keys: name, model, data, train, optimizer, runtime, profile, amp");
    expect_load_error("data.batch_size: 3\n",
                      "job.yaml:1:1: unknown key 'data.batch_size' at the top level (in a job file, write dotted "
                      "names as nested mappings); valid keys: name, model, data, train, optimizer, runtime, profile, amp");
    expect_load_error("amp:\n  loss_scale:\n    windw: 10\n",
                      "job.yaml:3:5: unknown key 'windw' in amp.loss_scale (did you mean 'window'?); valid keys: "
                      "type, init, factor, window, drop_overflow_update");
    expect_load_error("train:\n  zzz: 1\n", "job.yaml:2:3: unknown key 'zzz' in train; valid keys: "
                                            "epochs, steps, seed, eval, log_every, checkpoint, allow_config_change, clip_grad_norm, accumulate_steps");
    /* duplicates, at the top and nested */
    expect_load_error("name: a\nname: b\n",
                      "job.yaml:2:1: duplicate key 'name' at the top level (first at line 1, column 1)");
    expect_load_error("data:\n  batch_size: 8\n  shuffle: false\n  batch_size: 16\n",
                      "job.yaml:4:3: duplicate key 'batch_size' in data (first at line 2, column 3)");
    expect_load_error("data:\n  batch_size: 8\ndata:\n  shuffle: false\n",
                      "job.yaml:3:1: duplicate key 'data' at the top level (first at line 1, column 1)");
    /* mapping where a scalar belongs, and the other way round */
    expect_load_error("data:\n  batch_size:\n    value: 3\n",
                      "job.yaml:3:5: data.batch_size must be an integer >= 1 and <= 65536, not a mapping");
    expect_load_error("optimizer:\n  lr: [0.1, 0.2]\n",
                      "job.yaml:2:7: optimizer.lr must be a number > 0, not a sequence");
    expect_load_error("data: 5\n", "job.yaml:1:7: data must be a mapping (keys: dataset, path, batch_size, "
                                   "num_workers, prefetch, drop_remainder, shuffle, augment, normalize, limit, "
                                   "synthetic, langid), not a scalar");
    expect_load_error("data:\n  synthetic: [1, 2]\n",
                      "job.yaml:2:14: data.synthetic must be a mapping (keys: samples, test_samples, classes, "
                      "channels, height, width, delay_us), not a sequence");
    expect_load_error("data: {batch_size: 3, batch_size: 4}\n",
                      "job.yaml:1:23: duplicate key 'batch_size' in data (first at line 1, column 8)");
    expect_load_error("name: [x]\n", "job.yaml:1:7: name must be a name of 1 to 127 characters from A-Z a-z 0-9 . _ - "
                                     "(not starting with '.'), not a sequence");
    expect_load_error("train:\n  \"a\\x01bcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\": 1\n",
                      "job.yaml:2:3: unknown key 'a?bcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk...' "
                      "in train; valid keys: epochs, steps, seed, eval, log_every, checkpoint, allow_config_change, clip_grad_norm, accumulate_steps");
    expect_load_error("? [a, b]\n: 1\n", "job.yaml:1:3: keys must be plain names, not a sequence");
    /* a cyclic alias is walked no deeper than the schema */
    expect_load_error("data: &d\n  synthetic: *d\n",
                      "job.yaml:2:3: unknown key 'synthetic' in data.synthetic; valid keys: samples, test_samples, "
                      "classes, channels, height, width, delay_us");
    /* deep nesting is refused at the 65th level, before libyaml builds a document (issue 15, item 5:
     * 200k levels took > 100 s); 64 levels reach the schema check */
    size_t levels = 200000;
    char *deep = malloc(2 * levels + 16);
    assert_non_null(deep);
    size_t k = 0;
    memcpy(deep, "data: ", 6), k = 6;
    for (size_t i = 0; i < levels; i++) deep[k++] = '[';
    for (size_t i = 0; i < levels; i++) deep[k++] = ']';
    deep[k++] = '\n', deep[k] = '\0';
    expect_load_error(deep, "job.yaml:1:70: nesting deeper than 64 levels (a job file needs 3)");
    k = 6;
    for (size_t i = 0; i < 63; i++) deep[k++] = '[';
    for (size_t i = 0; i < 63; i++) deep[k++] = ']';
    deep[k++] = '\n', deep[k] = '\0';
    expect_load_error(deep, "job.yaml:1:7: data must be a mapping (keys: dataset, path, batch_size, num_workers, prefetch, "
                            "drop_remainder, shuffle, augment, normalize, limit, synthetic, langid), not a sequence");
    free(deep);
}

static void test_error_values(void **state) {
    expect_load_error("data:\n  batch_size: abc\n", "job.yaml:2:15: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  batch_size: 1.5\n", "job.yaml:2:15: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  batch_size: 0\n", "job.yaml:2:15: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  batch_size: -3\n", "job.yaml:2:15: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  batch_size:\n", "job.yaml:2:14: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  batch_size: 99999999999\n",
                      "job.yaml:2:15: data.batch_size must be an integer >= 1 and <= 65536");
    expect_load_error("data:\n  num_workers: 5000\n",
                      "job.yaml:2:16: data.num_workers must be an integer >= 0 and <= 256");
    expect_load_error("optimizer:\n  lr: 0\n", "job.yaml:2:7: optimizer.lr must be a number > 0");
    expect_load_error("optimizer:\n  lr: fast\n", "job.yaml:2:7: optimizer.lr must be a number > 0");
    expect_load_error("optimizer:\n  lr: .inf\n", "job.yaml:2:7: optimizer.lr must be a number > 0");
    expect_load_error("optimizer:\n  lr: 1e999\n", "job.yaml:2:7: optimizer.lr must be a number > 0");
    expect_load_error("model:\n  dropout: 1\n", "job.yaml:2:12: model.dropout must be a number >= 0 and < 1");
    expect_load_error("amp:\n  loss_scale:\n    factor: 1\n",
                      "job.yaml:3:13: amp.loss_scale.factor must be a number > 1");
    expect_load_error("data:\n  shuffle: maybe\n", "job.yaml:2:12: data.shuffle must be true or false");
    expect_load_error("data:\n  shuffle: 1\n", "job.yaml:2:12: data.shuffle must be true or false");
    expect_load_error("model:\n  name: rnn\n", "job.yaml:2:9: model.name must be one of mlp, cnn, resnet, transformer, srnet, python");
    expect_load_error("amp:\n  level: O4\n", "job.yaml:2:10: amp.level must be one of O0, O1, O2, O3");
    expect_load_error("name: ../etc\n",
                      "job.yaml:1:7: name must be a name of 1 to 127 characters from A-Z a-z 0-9 . _ - "
                      "(not starting with '.')");
    expect_load_error("name:\n", "job.yaml:1:6: name must be a name of 1 to 127 characters from A-Z a-z 0-9 . _ - "
                                 "(not starting with '.')");
    expect_load_error("data:\n  path: \"\"\n", "job.yaml:2:9: data.path must be a non-empty string of at most 4095 bytes");
    expect_load_error("data:\n  path: \"a\\0b\"\n",
                      "job.yaml:2:9: data.path must be a non-empty string of at most 4095 bytes");
    /* accepted spellings */
    mst_job j;
    char err[512];
    assert_int_equal(load_text(&j, "optimizer:\n  lr: 1e-3\n  momentum: 1\n  gamma: \"0.5\"\n  name: AdamW\n"
                                   "data:\n  shuffle: no\n  normalize: On\n  drop_remainder: TRUE\n  batch_size: +8\n"
                                   "name: 123\namp: {level: o2, dtype: bf16}\n",
                               err, sizeof(err)),
                     0);
    assert_true(j.optimizer.lr == 1e-3);
    assert_true(j.optimizer.momentum == 1.0);
    assert_true(j.optimizer.gamma == 0.5);
    assert_int_equal(j.optimizer.name, MST_JOB_OPTIM_ADAMW);
    assert_false(j.data.shuffle);
    assert_true(j.data.normalize);
    assert_true(j.data.drop_remainder);
    assert_int_equal(j.data.batch_size, 8);
    assert_string_equal(j.name, "123");
    assert_int_equal(j.amp.level, MST_JOB_AMP_O2);
    assert_int_equal(j.amp.dtype, MST_JOB_HALF_BF16);
}

static void test_error_files(void **state) {
    mst_job job;
    char err[1024], path[512];
    snprintf(path, sizeof(path), "%s/missing.yaml", tmp_dir);
    assert_int_equal(mst_job_load(&job, path, err, sizeof(err)), -1);
    char want[1024];
    snprintf(want, sizeof(want), "cannot open job file '%s': No such file or directory", path);
    assert_string_equal(err, want);
    assert_int_equal(mst_job_load(&job, tmp_dir, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "cannot read job file '%s': Is a directory", tmp_dir);
    assert_string_equal(err, want);
    /* positions name the file as given */
    snprintf(path, sizeof(path), "%s/bad.yaml", tmp_dir);
    write_file(path, "train:\n  epochs: -1\n");
    assert_int_equal(mst_job_load(&job, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:2:11: train.epochs must be an integer >= 0", path);
    assert_string_equal(err, want);
    write_file(path, "");
    assert_int_equal(mst_job_load(&job, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":1:1: empty job file"));
    unlink(path);
    /* err may be small or absent */
    char tiny[8];
    assert_int_equal(mst_job_load(&job, "/nonexistent/x.yaml", tiny, sizeof(tiny)), -1);
    assert_string_equal(tiny, "cannot ");
    assert_int_equal(mst_job_load(&job, "/nonexistent/x.yaml", NULL, 0), -1);
}

/* ---- --set ---- */

static void test_set(void **state) {
    mst_job j;
    mst_job_defaults(&j);
    set_ok(&j, "data.batch_size=128");
    assert_int_equal(j.data.batch_size, 128);
    set_ok(&j, "  optimizer.lr = 3e-4 ");
    assert_true(j.optimizer.lr == 3e-4);
    set_ok(&j, "optimizer.lr=1");
    assert_true(j.optimizer.lr == 1.0);
    set_ok(&j, "data.shuffle=false");
    assert_false(j.data.shuffle);
    set_ok(&j, "amp.level=O2");
    assert_int_equal(j.amp.level, MST_JOB_AMP_O2);
    set_ok(&j, "amp.loss_scale.type=dynamic");
    assert_int_equal(j.amp.loss_scale.type, MST_JOB_SCALE_DYNAMIC);
    set_ok(&j, "data.synthetic.height=32");
    assert_int_equal(j.data.synthetic.height, 32);
    set_ok(&j, "name=run-2");
    assert_string_equal(j.name, "run-2");
    set_ok(&j, "data.path=/data/a=b c");
    assert_string_equal(j.data.path, "/data/a=b c");
    set_ok(&j, "runtime.mode=graph");
    assert_int_equal(j.runtime.mode, MST_JOB_MODE_GRAPH);

    expect_set_error("data.batch_size=-3", "--set data.batch_size=-3: data.batch_size must be an integer >= 1 and <= 65536");
    expect_set_error("data.batch_size=1.5", "--set data.batch_size=1.5: data.batch_size must be an integer >= 1 and <= 65536");
    expect_set_error("data.batch_size=", "--set data.batch_size=: data.batch_size must be an integer >= 1 and <= 65536");
    expect_set_error("optimizer.lr=abc", "--set optimizer.lr=abc: optimizer.lr must be a number > 0");
    expect_set_error("name=../x", "--set name=../x: name must be a name of 1 to 127 characters from A-Z a-z 0-9 . _ - "
                                  "(not starting with '.')");
    expect_set_error("data.path=", "--set data.path=: data.path must be a non-empty string of at most 4095 bytes");
    expect_set_error("data.shuffle=2", "--set data.shuffle=2: data.shuffle must be true or false");
    expect_set_error("optimizer.name=lamb", "--set optimizer.name=lamb: optimizer.name must be one of sgd, adam, adamw");
    expect_set_error("data.batchsize=3",
                     "--set data.batchsize=3: unknown key 'batchsize' in data (did you mean 'batch_size'?); valid keys: "
                     "dataset, path, batch_size, num_workers, prefetch, drop_remainder, shuffle, augment, normalize, "
                     "limit, synthetic, langid");
    expect_set_error("batch_size=3", "--set batch_size=3: unknown key 'batch_size' at the top level (did you mean "
                                     "'data.batch_size'?); valid keys: name, model, data, train, optimizer, runtime, profile, amp");
    expect_set_error("amp.loss_scale.windw=3",
                     "--set amp.loss_scale.windw=3: unknown key 'windw' in amp.loss_scale (did you mean 'window'?); "
                     "valid keys: type, init, factor, window, drop_overflow_update");
    expect_set_error("data..batch_size=3", "--set data..batch_size=3: unknown key '' in data; valid keys: dataset, "
                                           "path, batch_size, num_workers, prefetch, drop_remainder, shuffle, augment, "
                                           "normalize, limit, synthetic, langid");
    expect_set_error("data.batch_size.x=3", "--set data.batch_size.x=3: data.batch_size must be an integer >= 1 and <= 65536, "
                                            "not a mapping");
    expect_set_error("amp.loss_scale=4", "--set amp.loss_scale=4: amp.loss_scale must be a mapping (keys: type, init, "
                                         "factor, window, drop_overflow_update), not a scalar");
    expect_set_error("data.batch_size", "--set data.batch_size: expected key.path=value");
    expect_set_error("=3", "--set =3: expected key.path=value");

    /* the same message as the file, without the position */
    mst_job k;
    char err_file[512], err_set[512];
    load_text(&k, "data:\n  batch_size: -3\n", err_file, sizeof(err_file));
    mst_job_defaults(&k);
    mst_job_set(&k, "data.batch_size=-3", err_set, sizeof(err_set));
    assert_string_equal(strstr(err_file, "data.batch_size must"), strstr(err_set, "data.batch_size must"));

    char buf[64], err[256];
    assert_int_equal(mst_job_get(&j, "amp.level", buf, sizeof(buf), err, sizeof(err)), 0);
    assert_string_equal(buf, "O2");
    assert_int_equal(mst_job_get(&j, "optimizer.lr", buf, sizeof(buf), err, sizeof(err)), 0);
    assert_string_equal(buf, "1.0");
    assert_int_equal(mst_job_get(&j, "data", buf, sizeof(buf), err, sizeof(err)), -1);
    assert_string_equal(err, "no job setting 'data'; `mstune list keys` lists them");
}

/* ---- cross-key validation ---- */

static void test_validate(void **state) {
    mst_job j;
    mst_job_defaults(&j);
    set_ok(&j, "optimizer.schedule=cosine");
    set_ok(&j, "train.epochs=0");
    expect_invalid(&j, "optimizer.schedule cosine needs the run length: set train.steps or train.epochs > 0");
    set_ok(&j, "train.steps=100");
    char err[512];
    assert_int_equal(mst_job_validate(&j, err, sizeof(err)), 0);
    set_ok(&j, "optimizer.warmup_steps=100");
    assert_int_equal(mst_job_validate(&j, err, sizeof(err)), 0);     /* the trainer clamps it and says so */
    set_ok(&j, "optimizer.warmup_steps=10");
    set_ok(&j, "optimizer.min_lr=0.5");
    expect_invalid(&j, "optimizer.min_lr (0.5) must not exceed optimizer.lr (0.05) with the cosine schedule");

    mst_job_defaults(&j);
    set_ok(&j, "train.epochs=0");
    expect_invalid(&j, "train.epochs and train.steps are both 0: nothing to train");

    mst_job_defaults(&j);
    set_ok(&j, "optimizer.nesterov=true");
    assert_int_equal(mst_job_validate(&j, err, sizeof(err)), 0);
    set_ok(&j, "optimizer.name=adam");
    expect_invalid(&j, "optimizer.nesterov needs optimizer.name sgd with optimizer.momentum > 0");

    mst_job_defaults(&j);
    set_ok(&j, "data.drop_remainder=true");
    set_ok(&j, "data.limit=32");
    expect_invalid(&j, "data.drop_remainder with data.batch_size 64 leaves no batch: only 32 training samples (data.limit)");
    set_ok(&j, "data.limit=0");
    set_ok(&j, "data.dataset=synthetic");
    set_ok(&j, "data.synthetic.samples=10");
    expect_invalid(&j, "data.drop_remainder with data.batch_size 64 leaves no batch: only 10 training samples "
                       "(data.synthetic.samples)");

    mst_job_defaults(&j);
    set_ok(&j, "data.dataset=synthetic");
    set_ok(&j, "data.synthetic.channels=4096");
    set_ok(&j, "data.synthetic.height=4096");
    set_ok(&j, "data.synthetic.width=4096");
    expect_invalid(&j, "data.synthetic.channels * height * width is 68719476736 values per sample; at most 2147483647");
    expect_set_error("data.synthetic.width=4097", "--set data.synthetic.width=4097: data.synthetic.width must be an integer >= 1 and <= 4096");

    /* one limit per key, from the table: what validate accepts, train accepts (issue 15, item 8) */
    mst_job_defaults(&j);
    expect_set_error("data.num_workers=257", "--set data.num_workers=257: data.num_workers must be an integer >= 0 and <= 256");
    expect_set_error("runtime.threads=4096", "--set runtime.threads=4096: runtime.threads must be an integer >= 0 and <= 256");
    expect_set_error("model.width=1100000000", "--set model.width=1100000000: model.width must be an integer >= 1 and <= 1024");
    expect_set_error("model.blocks=17", "--set model.blocks=17: model.blocks must be an integer >= 1 and <= 16");
    /* the memory estimate refuses what cannot fit, with the estimate in the message */
    set_ok(&j, "model.hidden1=65536");
    set_ok(&j, "model.hidden2=65536");
    set_ok(&j, "data.batch_size=65536");
    assert_true(mst_job_memory_estimate(&j) > 64.0 * (1u << 30));
    {
        char e2[1024];
        assert_int_equal(mst_job_validate(&j, e2, sizeof(e2)), -1);
        assert_non_null(strstr(e2, "the job needs at least"));
        assert_non_null(strstr(e2, "GiB of memory"));
    }
    mst_job_defaults(&j);
    assert_true(mst_job_memory_estimate(&j) > 1e6 && mst_job_memory_estimate(&j) < 1e9);   /* quickstart-sized: MBs */

    /* off steps in the profile's schedule need recorded ones after them */
    mst_job_defaults(&j);
    set_ok(&j, "profile.wait=5");
    expect_invalid(&j, "profile.wait (5) needs profile.active > 0: the steps recorded after each 5 off");
    set_ok(&j, "profile.active=5");
    char e3[256];
    assert_int_equal(mst_job_validate(&j, e3, sizeof(e3)), 0);

    /* a struct filled by hand gets the per-key checks too */
    mst_job_defaults(&j);
    j.data.batch_size = 0;
    expect_invalid(&j, "data.batch_size must be an integer >= 1 and <= 65536");
    mst_job_defaults(&j);
    j.optimizer.schedule = (mst_job_schedule)7;
    expect_invalid(&j, "optimizer.schedule must be one of constant, step, cosine");
    mst_job_defaults(&j);
    memset(j.data.path, 'a', sizeof(j.data.path));
    expect_invalid(&j, "data.path must be a non-empty string of at most 4095 bytes");
}

/* ---- JSON ---- */

static void test_to_json(void **state) {
    mst_job j;
    mst_job_defaults(&j);
    set_ok(&j, "data.batch_size=96");
    set_ok(&j, "optimizer.lr=0.125");
    set_ok(&j, "amp.loss_scale.type=fixed");
    set_ok(&j, "data.shuffle=false");
    cJSON *root = NULL;
    assert_int_equal(mst_job_to_json(&j, &root), 0);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "name")->valuestring, "job");
    cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(data, "batch_size")->valueint, 96);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(data, "shuffle")));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(data, "path")->valuestring, "/usr/share/datasets/fashion-mnist");
    cJSON *syn = cJSON_GetObjectItemCaseSensitive(data, "synthetic");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(syn, "height")->valueint, 28);
    cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    assert_true(cJSON_GetObjectItemCaseSensitive(opt, "lr")->valuedouble == 0.125);
    assert_true(cJSON_GetObjectItemCaseSensitive(opt, "eps")->valuedouble == 1e-8);
    cJSON *ls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "amp"), "loss_scale");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ls, "type")->valuestring, "fixed");
    assert_true(cJSON_GetObjectItemCaseSensitive(ls, "init")->valuedouble == 16777216.0);
    /* every key is there, and printed JSON parses back to the same values */
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    cJSON *back = cJSON_Parse(text);
    assert_non_null(back);
    int leaves = 0;
    for (int i = 0; i < mst_job_key_count; i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s", mst_job_keys[i].path);
        cJSON *node = back;
        for (char *tok = strtok(path, "."); tok; tok = strtok(NULL, ".")) node = cJSON_GetObjectItemCaseSensitive(node, tok);
        assert_non_null(node);
        leaves++;
    }
    assert_int_equal(leaves, mst_job_key_count);
    assert_true(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(back, "optimizer"), "lr")->valuedouble ==
                0.125);
    cJSON_Delete(back);
    free(text);
    cJSON_Delete(root);
}

/* ---- YAML out ---- */

/* A valid value different from the default for every key. */
static void perturb_all(mst_job *j) {
    char err[512];
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        char *field = (char *)j + k->offset;
        switch (k->type) {
        case MST_JOB_STRING:
            snprintf(field, k->size, "%s", (k->flags & MST_JOB_NAME_CHARS)    ? "tuned-run_1.b"
                                           : (k->flags & MST_JOB_JSON_OBJECT) ? "{\"odd: key\":[1,\"# q\\\" 'x' é\",true]}"
                                                                              : "/data/odd: path # \"q\" 'x'\\ é");
            break;
        case MST_JOB_INT: {
            int v = (int)k->min + 3 + i;
            if (k->flags & MST_JOB_HAS_MAX) v = (int)k->min + (3 + i) % ((int)(k->max - k->min) + 1);
            if (v == *(int *)field) v = v == (int)k->min ? v + 1 : v - 1;      /* differ from the default */
            *(int *)field = v;
            break;
        }
        case MST_JOB_FLOAT: {
            double v = k->min + 0.1 / (i + 3);  /* not exact in binary: tests the round trip */
            if (k->flags & MST_JOB_HAS_MAX) v = k->min + (k->max - k->min) * 0.3;
            if (i % 3 == 0) v = k->min + 1.2345678901234567e-7;
            *(double *)field = v;
            break;
        }
        case MST_JOB_BOOL: *(bool *)field = !*(bool *)field; break;
        case MST_JOB_ENUM: {
            int count = 0;
            while (k->values[count]) count++;
            *(int *)field = (*(int *)field + 1) % count;
            break;
        }
        default: fail();
        }
        assert_int_equal(mst_job_key_check(j, k, err, sizeof(err)), 0);
    }
}

static void test_write_yaml_round_trip(void **state) {
    mst_job a, b;
    mst_job_defaults(&a);
    perturb_all(&a);
    /* string fields zero-filled past the NUL, as the API keeps them */
    char name[MST_JOB_NAME_MAX], dpath[MST_JOB_PATH_MAX];
    snprintf(name, sizeof(name), "%s", a.name);
    snprintf(dpath, sizeof(dpath), "%s", a.data.path);
    memset(a.name, 0, sizeof(a.name));
    memset(a.data.path, 0, sizeof(a.data.path));
    strcpy(a.name, name);
    strcpy(a.data.path, dpath);

    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/tuned.yaml", tmp_dir);
    assert_int_equal(count_entries(tmp_dir), 0);
    int rc = mst_job_write_yaml(&a, path, err, sizeof(err));
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(count_entries(tmp_dir), 1);   /* no temp file left behind */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    mst_job_defaults(&b);
    rc = mst_job_load(&b, path, err, sizeof(err));
    if (rc) print_error("%s\n%s", err, read_all(path, NULL));
    assert_int_equal(rc, 0);
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        if (memcmp((char *)&a + k->offset, (char *)&b + k->offset, k->size) != 0) {
            char va[4200], vb[4200];
            mst_job_key_format(&a, k, va, sizeof(va));
            mst_job_key_format(&b, k, vb, sizeof(vb));
            print_error("%s: wrote %s, read %s\n", k->path, va, vb);
        }
        assert_memory_equal((char *)&a + k->offset, (char *)&b + k->offset, k->size);
    }
    assert_memory_equal(&a, &b, sizeof(a));

    /* the shipped job survives the trip too, and overwriting keeps one file */
    mst_job c, d;
    char shipped[4200];
    assert_int_equal(mst_job_load(&c, repo_path("workloads/jobs/fashion_cnn.yaml", shipped, sizeof(shipped)), err,
                                  sizeof(err)),
                     0);
    assert_int_equal(mst_job_write_yaml(&c, path, err, sizeof(err)), 0);
    assert_int_equal(count_entries(tmp_dir), 1);
    assert_int_equal(mst_job_load(&d, path, err, sizeof(err)), 0);
    assert_memory_equal(&c, &d, sizeof(c));
    char *text = read_all(path, NULL);
    assert_non_null(strstr(text, "\noptimizer:\n  name: sgd\n  lr: 0.05\n"));
    assert_non_null(strstr(text, "\n    init: 16777216.0\n"));
    assert_non_null(strstr(text, "  eps: 1.0e-08\n"));
    free(text);
    unlink(path);
}

static void test_write_yaml_errors(void **state) {
    mst_job j;
    mst_job_defaults(&j);
    char path[512], err[1024], want[1024];
    /* a missing folder: an error naming the target, nothing created */
    snprintf(path, sizeof(path), "%s/no/such/dir/tuned.yaml", tmp_dir);
    assert_int_equal(mst_job_write_yaml(&j, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "cannot write '%s': No such file or directory", path);
    assert_string_equal(err, want);
    /* an invalid job is refused before anything is written */
    snprintf(path, sizeof(path), "%s/tuned.yaml", tmp_dir);
    j.data.batch_size = -1;
    assert_int_equal(mst_job_write_yaml(&j, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "not writing '%s': data.batch_size must be an integer >= 1 and <= 65536", path);
    assert_string_equal(err, want);
    /* rename onto a folder fails late: the temp file is removed */
    mst_job_defaults(&j);
    snprintf(path, sizeof(path), "%s/adir", tmp_dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(want, sizeof(want), "%s/adir/x", tmp_dir);
    write_file(want, "x");
    assert_int_equal(mst_job_write_yaml(&j, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "(rename)"));
    assert_int_equal(count_entries(tmp_dir), 1);
    unlink(want);
    rmdir(path);
    assert_int_equal(count_entries(tmp_dir), 0);
}

static void test_schema_print(void **state) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    mst_job_schema_print(f);
    fclose(f);
    int lines = 0;
    for (char *p = out; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, mst_job_key_count + 1);
    assert_non_null(strstr(out, "data.batch_size "));
    assert_non_null(strstr(out, "  sgd|adam|adamw  "));
    assert_non_null(strstr(out, "  file name "));
    assert_null(strstr(out, " \n"));   /* no trailing blanks */
    free(out);
}

/* ---- robustness: seeded mutations of the shipped jobs never crash and always explain ---- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_mutations(void **state) {
    static const char *const files[] = {"workloads/jobs/fashion_mlp.yaml", "workloads/jobs/fashion_cnn.yaml",
                                        "workloads/jobs/quickstart.yaml"};
    static const char *const tokens[] = {":", "- ", "[", "]", "{", "}", "\n", "  ", "&a ", "*a", "---\n", "\"", "'",
                                         "#", "? ", "!!str ", "|", ">", "\t", "\xff", "1e999", "~", ",", "\\"};
    const char *env = getenv("MSTUNE_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 0x9e3779b97f4a7c15ull;
    uint64_t s = seed ? seed : 1;
    char path[4200];
    char *src[3];
    size_t srclen[3];
    for (int i = 0; i < 3; i++) {
        src[i] = read_all(repo_path(files[i], path, sizeof(path)), &srclen[i]);
        assert_non_null(src[i]);
    }
    char buf[8192];
    int failures = 0;
    for (int iter = 0; iter < 3000; iter++) {
        int which = (int)(rng_next(&s) % 3);
        size_t len = srclen[which];
        memcpy(buf, src[which], len);
        int edits = 1 + (int)(rng_next(&s) % 4);
        for (int e = 0; e < edits && len > 0; e++) {
            size_t at = rng_next(&s) % len;
            switch (rng_next(&s) % 4) {
            case 0: buf[at] = (char)(rng_next(&s) & 0xff); break;
            case 1: memmove(buf + at, buf + at + 1, len - at - 1); len--; break;
            case 2: {
                const char *t = tokens[rng_next(&s) % (sizeof(tokens) / sizeof(tokens[0]))];
                size_t tl = strlen(t);
                if (len + tl < sizeof(buf)) {
                    memmove(buf + at + tl, buf + at, len - at);
                    memcpy(buf + at, t, tl);
                    len += tl;
                }
                break;
            }
            default: {   /* duplicate a slice */
                size_t n = rng_next(&s) % 64;
                if (at + n > len) n = len - at;
                if (len + n < sizeof(buf)) {
                    memmove(buf + at + n, buf + at, len - at);
                    len += n;
                }
                break;
            }
            }
        }
        mst_job job;
        mst_job_defaults(&job);
        char err[1024] = "";
        if (mst_job_load_string(&job, "job.yaml", buf, len, err, sizeof(err)) != 0) {
            failures++;
            /* every failure names the file and a position */
            if (strncmp(err, "job.yaml:", 9) != 0) print_error("seed %#llx iter %d: %s\n", (unsigned long long)seed, iter, err);
            assert_int_equal(strncmp(err, "job.yaml:", 9), 0);
        }
    }
    assert_true(failures > 0);
    for (int i = 0; i < 3; i++) free(src[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_jobs),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_name_from_file),
        cmocka_unit_test(test_schema_table),
        cmocka_unit_test(test_docs_in_sync),
        cmocka_unit_test(test_error_syntax),
        cmocka_unit_test(test_error_structure),
        cmocka_unit_test(test_error_values),
        cmocka_unit_test(test_error_files),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_write_yaml_round_trip),
        cmocka_unit_test(test_write_yaml_errors),
        cmocka_unit_test(test_schema_print),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, make_tmp_dir, remove_tmp_dir);
}
