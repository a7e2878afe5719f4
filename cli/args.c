/* args.c — the arguments every job-taking command shares: the job file, --set overrides (applied
 * in order, after the file, typed and validated like it), --out and --resume. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

int mst_job_args_parse(const char *cmd, int argc, char **argv, bool allow_resume, mst_job_args *a) {
    memset(a, 0, sizeof(*a));
    const char *sets[256];
    int n_sets = 0;
    const char *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--set") == 0 || strcmp(arg, "--out") == 0 || strcmp(arg, "-o") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mstune %s: %s needs a value\n", cmd, arg);
                return MST_EXIT_INPUT;
            }
            if (strcmp(arg, "--set") == 0) {
                if (n_sets == (int)(sizeof(sets) / sizeof(sets[0]))) {
                    fprintf(stderr, "mstune %s: too many --set options\n", cmd);
                    return MST_EXIT_INPUT;
                }
                sets[n_sets++] = argv[++i];
            } else {
                out = argv[++i];
            }
        } else if (strncmp(arg, "--set=", 6) == 0) {
            if (n_sets < (int)(sizeof(sets) / sizeof(sets[0]))) sets[n_sets++] = arg + 6;
        } else if (strcmp(arg, "--resume") == 0 && allow_resume) {
            a->resume = true;
        } else if (arg[0] == '-') {
            fprintf(stderr, "mstune %s: unknown option '%s'\n", cmd, arg);
            return MST_EXIT_INPUT;
        } else if (!a->job_path) {
            a->job_path = arg;
        } else {
            fprintf(stderr, "mstune %s: one job file expected, got '%s' and '%s'\n", cmd, a->job_path, arg);
            return MST_EXIT_INPUT;
        }
    }
    if (!a->job_path) {
        fprintf(stderr, "usage: mstune %s JOB.yaml [--set key.path=value]... [--out DIR]%s\n", cmd,
                allow_resume ? " [--resume]" : "");
        return MST_EXIT_INPUT;
    }
    char err[2048];
    if (mst_job_load(&a->job, a->job_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune %s: %s\n", cmd, err);
        return MST_EXIT_INPUT;
    }
    for (int i = 0; i < n_sets; i++)
        if (mst_job_set(&a->job, sets[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune %s: %s\n", cmd, err);
            return MST_EXIT_INPUT;
        }
    if (mst_job_validate(&a->job, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune %s: %s: %s\n", cmd, a->job_path, err);
        return MST_EXIT_INPUT;
    }
    if (out) snprintf(a->out_dir, sizeof(a->out_dir), "%s", out);
    else snprintf(a->out_dir, sizeof(a->out_dir), "out/%s", a->job.name);
    return MST_EXIT_OK;
}
