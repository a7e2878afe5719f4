/* summary.h — summary.json: what a run measured, in the keys other commands and CI rely on
 * (docs/job.md lists them), written atomically. */
#ifndef MST_CLI_SUMMARY_H
#define MST_CLI_SUMMARY_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "cli/job.h"
#include "cli/session.h"

/* The summary of a training run as a JSON object (NULL when out of memory). */
cJSON *mst_summary_build(const mst_job *job, const mst_session *s, const mst_train_result *r);
/* Print root and replace path atomically; 0, or -1 with a message. root stays the caller's. */
int mst_summary_write(const char *path, const cJSON *root, char *err, size_t errn);

#endif
