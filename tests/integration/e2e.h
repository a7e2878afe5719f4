/* e2e.h — helpers for integration tests that run the real `mstune` binary: run a command line
 * and capture its output and exit status, read a summary.json, compare files, make temp dirs;
 * and the workload tests' shared steps: train a job into a folder and read its summary, compare
 * two runs' loss curves (eager against graph), check that `mstune graph` traces a job. */
#ifndef MST_TESTS_E2E_H
#define MST_TESTS_E2E_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Runs `$MSTUNE_BIN <args>` from the source tree with stdout and stderr captured into out.
 * Returns the exit status (or -1). */
int e2e_run(const char *args, char *out, size_t n);
/* e2e_run that fails the test (with the output) unless mstune exits 0. */
void e2e_run_ok(const char *args, char *out, size_t n);
/* The data-value attribute of the report element with this id (fails the test when absent). */
double e2e_html_value(const char *html, const char *id);
const char *e2e_source_dir(void);
/* A fresh folder under $TMPDIR; removed by e2e_rmtree. */
void e2e_tmpdir(char *buf, size_t n);
void e2e_rmtree(const char *path);
/* A number field of a summary.json; fails the test naming the key when it is missing. */
double e2e_num(const cJSON *j, const char *key);
/* Parsed JSON file, or NULL. */
cJSON *e2e_read_json(const char *path);
/* Whole file in a malloc'd buffer; NULL if unreadable. */
char *e2e_read_file(const char *path, size_t *len);
bool e2e_files_equal(const char *a, const char *b);
bool e2e_exists(const char *path);

/* Runs `mstune <cmd> <job> --set train.checkpoint=false <sets> --out <dir>/<name>`, fails the test
 * (printing the output) unless it exits 0, and returns its parsed summary.json (cJSON_Delete it). */
cJSON *e2e_job(const char *cmd, const char *job, const char *sets, const char *dir, const char *name);
/* The two runs' per-step train_loss curves: fails unless both have `steps` points; returns the
 * worst relative difference |a - b| / |a|. */
double e2e_loss_curve_diff(const cJSON *a, const cJSON *b, int steps);
/* The run's metric value (summary.json "metric"."value"). */
double e2e_metric(const cJSON *j);
/* `mstune graph <job>` exits 0 and prints the traced step's node count. */
void e2e_assert_graph_dump(const char *job);

#endif
