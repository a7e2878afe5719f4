/* args.c — the arguments every job-taking command shares: the job file, --set overrides (applied
 * in order, after the file, typed and validated like it; as many as given), --out and --resume.
 * Which of them a command takes, and its help, come from its table in cli/commands.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/launch.h"

typedef struct {
    const char *cmd;
    mst_job_args *a;
    const char **sets;
    int n_sets;
    const char *out;
    mst_cli_on_opt own;
    void *own_ctx;
} job_parse;

static int on_job_opt(void *ctx, const mst_cli_opt *o, const char *value) {
    job_parse *p = ctx;
    if (!o) {
        if (!p->a->job_path) {
            p->a->job_path = value;
            return 0;
        }
        fprintf(stderr, "mstune %s: one job file expected, got '%s' and '%s'\n", p->cmd, p->a->job_path, value);
        return 1;
    }
    switch (o->id) {
    case MST_CLI_OPT_SET: p->sets[p->n_sets++] = value; break;      /* at most argc of them: sized so */
    case MST_CLI_OPT_OUT:
        if (strlen(value) > MST_OUT_DIR_MAX) {
            fprintf(stderr, "mstune %s: --out: the folder name is %zu bytes long; at most %d are supported\n", p->cmd,
                    strlen(value), MST_OUT_DIR_MAX);
            return 1;
        }
        if (!*value) {
            fprintf(stderr, "mstune %s: --out: expected a folder name, got an empty string\n", p->cmd);
            return 1;
        }
        p->out = value;
        return 0;
    case MST_CLI_OPT_RESUME: p->a->resume = true; return 0;
    case MST_CLI_OPT_NPROC: return mst_cli_nproc_parse(p->cmd, value, &p->a->nproc);
    default: break;
    }
    return p->own ? p->own(p->own_ctx, o, value) : 0;
}

int mst_job_args_parse_with(const char *cmd, int argc, char **argv, mst_cli_on_opt own, void *own_ctx, mst_job_args *a) {
    memset(a, 0, sizeof(*a));
    const mst_cli_command_desc *c = mst_cli_command(cmd);
    if (!c) {
        fprintf(stderr, "mstune: internal error: no command table for '%s'\n", cmd);
        return MST_EXIT_INPUT;
    }
    job_parse p = {cmd, a, calloc((size_t)argc + 1, sizeof(char *)), 0, NULL, own, own_ctx};
    if (!p.sets) {
        fprintf(stderr, "mstune %s: out of memory\n", cmd);
        return MST_EXIT_INPUT;
    }
    int rc = mst_cli_parse(c, argc, argv, on_job_opt, &p);
    char err[2048];
    if (rc != MST_EXIT_OK) goto out;
    rc = MST_EXIT_INPUT;
    if (!a->job_path) {
        fprintf(stderr, "usage: mstune %s %s   (mstune %s --help)\n", cmd, c->synopsis, cmd);
        goto out;
    }
    if (mst_job_load(&a->job, a->job_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune %s: %s\n", cmd, err);
        goto out;
    }
    for (int i = 0; i < p.n_sets; i++)
        if (mst_job_set(&a->job, p.sets[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune %s: %s\n", cmd, err);
            goto out;
        }
    if (mst_job_validate(&a->job, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune %s: %s: %s\n", cmd, a->job_path, err);
        goto out;
    }
    a->out_given = p.out != NULL;
    if (p.out) snprintf(a->out_dir, sizeof(a->out_dir), "%s", p.out);
    else snprintf(a->out_dir, sizeof(a->out_dir), "out/%s", a->job.name);
    /* --nproc N: become N ranks through mpirun (returns only on failure); as a rank, own outputs */
    if (a->nproc > 0 && strcmp(cmd, "advise") != 0 && (rc = mst_cli_launch(cmd, argc, argv, a->nproc)) >= 0) goto out;
    mst_cli_rank_out_dir(a->out_dir, sizeof(a->out_dir));
    rc = MST_EXIT_OK;
out:
    free(p.sets);
    return rc;
}

int mst_job_args_parse(const char *cmd, int argc, char **argv, bool allow_resume, mst_job_args *a) {
    (void)allow_resume;     /* the command's table says whether it takes --resume */
    return mst_job_args_parse_with(cmd, argc, argv, NULL, NULL, a);
}
