/* fuzz_job.c — the job parser: YAML text (libyaml + schema walk) and `--set` assignments.
 * An input starting with "#set\n" is a list of assignments, one a line, applied to the defaults;
 * anything else is a job file. Both end in mst_job_validate, and a loaded job is written back to
 * JSON, as `profile` does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[2048];
    mst_job job;
    mst_job_defaults(&job);
    if (size >= 5 && memcmp(data, "#set\n", 5) == 0) {
        char *text = malloc(size - 5 + 1);
        if (!text) return 0;
        memcpy(text, data + 5, size - 5);
        text[size - 5] = '\0';
        for (char *line = text, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            mst_job_set(&job, line, err, sizeof(err));
        }
        free(text);
    } else if (mst_job_load_string(&job, "fuzz.yaml", (const char *)data, size, err, sizeof(err)) != 0) {
        return 0;
    }
    if (mst_job_validate(&job, err, sizeof(err)) == 0) {
        cJSON *j = NULL;
        if (mst_job_to_json(&job, &j) == 0) cJSON_Delete(j);
    }
    return 0;
}
