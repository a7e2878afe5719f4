/* summary.h — summary.json: what a run measured, in the keys other commands and CI rely on
 * (docs/job.md lists them), written atomically. */
#ifndef MST_CLI_SUMMARY_H
#define MST_CLI_SUMMARY_H

#include <stddef.h>

#include "cli/job.h"
#include "cli/session.h"

int mst_summary_write(const char *path, const mst_job *job, const mst_session *s, const mst_train_result *r, char *err,
                      size_t errn);

#endif
