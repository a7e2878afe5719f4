/* cmd_advise.c — `mstune advise JOB [--set k=v]... [--budget-minutes M] [--tolerance PP]
 * [--repeats N] [-o DIR]`: profile the job, diagnose it, verify each proposed change as its own
 * trial against the job's accuracy baseline, then write DIR/advice.md, DIR/advice.json,
 * DIR/tuned.yaml (the job with the accepted changes) and DIR/report/ (with the advisor section).
 * The protocol is advisor/advisor.h's; docs/advisor.md explains it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "cli/commands.h"
#include "cli/signals.h"
#include "report/report.h"

static int parse_double(const char *opt, const char *text, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < lo) {
        fprintf(stderr, "mstune advise: %s expects a number >= %g, got '%s'\n", opt, lo, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* A proposed change against the job schema: the job with every override applied must validate
 * (advisor/ cannot read the schema itself: cli -> advisor is the direction of the layering). */
static int check_sets(void *arg, const char (*sets)[96], int n, char *err, size_t errn) {
    mst_job job = *(const mst_job *)arg;
    for (int i = 0; i < n; i++)
        if (mst_job_set(&job, sets[i], err, errn) != 0) return -1;
    return mst_job_validate(&job, err, errn);
}

int mst_cmd_advise(int argc, char **argv) {
    mst_advise_config cfg;
    mst_advise_config_default(&cfg);
    /* advise's own options out; the rest (JOB, --set, -o) is what every job command parses */
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    const char **sets = calloc((size_t)argc + 1, sizeof(*sets));
    if (!rest || !sets) { free(rest); free(sets); fprintf(stderr, "mstune advise: out of memory\n"); return MST_EXIT_FAIL; }
    int n_rest = 0, n_sets = 0, rc = MST_EXIT_INPUT;
    double repeats = cfg.repeats;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool own = strcmp(a, "--budget-minutes") == 0 || strcmp(a, "--tolerance") == 0 || strcmp(a, "--repeats") == 0;
        if (own) {
            if (i + 1 >= argc) { fprintf(stderr, "mstune advise: %s needs a value\n", a); goto out; }
            const char *v = argv[++i];
            if (strcmp(a, "--budget-minutes") == 0 ? parse_double(a, v, 0, &cfg.budget_minutes)
                : strcmp(a, "--tolerance") == 0    ? parse_double(a, v, 0, &cfg.tolerance_pp)
                                                   : parse_double(a, v, 2, &repeats))
                goto out;
            continue;
        }
        if (strcmp(a, "--set") == 0 && i + 1 < argc) sets[n_sets++] = argv[i + 1];
        else if (strncmp(a, "--set=", 6) == 0) sets[n_sets++] = a + 6;
        rest[n_rest++] = argv[i];
    }
    if (repeats > MST_TRIAL_MAX_RUNS || repeats != floor(repeats)) {
        fprintf(stderr, "mstune advise: --repeats expects a whole number in 2..%d, got %g\n", MST_TRIAL_MAX_RUNS, repeats);
        goto out;
    }
    mst_job_args a;
    if ((rc = mst_job_args_parse("advise", n_rest, rest, false, &a)) != MST_EXIT_OK) goto out;
    if (strcmp(a.out_dir, "out/") > 0 && strncmp(a.out_dir, "out/", 4) == 0 && strchr(a.out_dir + 4, '/') == NULL)
        strncat(a.out_dir, "-advise", sizeof(a.out_dir) - strlen(a.out_dir) - 1);   /* out/<job>-advise by default */

    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) { fprintf(stderr, "mstune advise: cannot find the mstune program (/proc/self/exe)\n"); rc = MST_EXIT_FAIL; goto out; }
    self[n] = '\0';
    cfg.mstune_bin = self;
    cfg.job_path = a.job_path;
    cfg.job_sets = sets;
    cfg.n_job_sets = n_sets;
    cfg.out_dir = a.out_dir;
    cfg.repeats = (int)repeats;
    cfg.check_sets = check_sets;
    cfg.check_arg = &a.job;
    cfg.log = stderr;
    /* Ctrl-C reaches the trial's process too (one process group): it stops after its current step,
     * its run counts as interrupted, no further run starts, and what ran is judged and written */
    cfg.stop = mst_cli_stop_flag_install();

    mst_advice *adv = calloc(1, sizeof(*adv));
    char err[2048];
    if (!adv) { fprintf(stderr, "mstune advise: out of memory\n"); rc = MST_EXIT_FAIL; goto out; }
    int arc = mst_advise_run(&cfg, adv, err, sizeof(err));
    mst_cli_stop_flag_restore();
    if (arc != 0) {
        fprintf(stderr, "mstune advise: %s\n", err);
        free(adv);
        rc = MST_EXIT_FAIL;
        goto out;
    }
    mst_advice_print(stdout, adv, &cfg);

    /* the outputs: any that fails is reported, the rest still written */
    char path[1200];
    rc = MST_EXIT_OK;
    snprintf(path, sizeof(path), "%s/advice.md", a.out_dir);
    if (mst_advice_write_markdown(adv, &cfg, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_FAIL; }
    snprintf(path, sizeof(path), "%s/advice.json", a.out_dir);
    if (mst_advice_write_json(adv, &cfg, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_FAIL; }
    mst_job tuned = a.job;
    for (int i = 0; i < adv->n_accepted_sets; i++)
        if (mst_job_set(&tuned, adv->accepted_sets[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune advise: applying %s: %s\n", adv->accepted_sets[i], err);
            rc = MST_EXIT_FAIL;
        }
    snprintf(path, sizeof(path), "%s/tuned.yaml", a.out_dir);
    if (mst_job_write_yaml(&tuned, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_FAIL; }
    if (mst_advice_store(adv, adv->db_path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_FAIL; }
    char report_dir[1200], sum_path[1200];
    snprintf(report_dir, sizeof(report_dir), "%s/report", a.out_dir);
    snprintf(sum_path, sizeof(sum_path), "%s/summary.json", adv->profile.runs[0].dir);
    if (mst_report_render(adv->db_path, sum_path, report_dir, err, sizeof(err)) != 0)
        fprintf(stderr, "mstune advise: warning: report: %s\n", err);
    printf("\n  advice:  %s/advice.md (and advice.json)\n  tuned:   %s/tuned.yaml\n  report:  %s/index.html\n", a.out_dir,
           a.out_dir, report_dir);
    free(adv);
out:
    free(rest);
    free(sets);
    return rc;
}
