/* cmd_advise.c — `mstune advise JOB [--set k=v]... [--budget-minutes M] [--tolerance T]
 * [--repeats N] [-o DIR]`: profile the job, diagnose it, verify each proposed change as its own
 * trial against the job's accuracy baseline, then write DIR/advice.md, DIR/advice.json,
 * DIR/tuned.yaml (the job with the accepted changes), DIR/report/ (with the advisor section) and
 * DIR/trials/ (every run's folder). Like profile's, the outputs are staged in DIR/.run-new/ under
 * DIR's lock and promoted together at the end (cli/outdir.h): a kill or a failure at any moment
 * leaves the previous advice, whole. The protocol is advisor/advisor.h's; docs/advisor.md
 * explains it; docs/guarantees.md what is guaranteed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "cli/commands.h"
#include "runtime/comm/comm.h"
#include "cli/outdir.h"
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
        if (strncmp(sets[i], "--", 2) != 0 && mst_job_set(&job, sets[i], err, errn) != 0) return -1;     /* "--nproc=N": the launcher's */
    return mst_job_validate(&job, err, errn);
}

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

enum { OPT_BUDGET = 1, OPT_TOLERANCE, OPT_REPEATS };
const mst_cli_opt mst_cli_advise_opts[] = {
    {"budget-minutes", 0, "M", "stop planning trials once M minutes are spent (0: no limit)", OPT_BUDGET},
    {"tolerance", 0, "T", "metric tolerance in its unit: accuracy points, PSNR dB (default 0.5)", OPT_TOLERANCE},
    {"repeats", 0, "N", "runs per trial and of the baseline, 2.." STRINGIFY(MST_TRIAL_MAX_RUNS) " (default 3)", OPT_REPEATS},
    {"out", 'o', "DIR", "output folder (default: out/<job name>-advise)", MST_CLI_OPT_OUT},
    {NULL},
};

typedef struct {
    mst_advise_config *cfg;
    double repeats;
    const char **sets;
    int n_sets;
} advise_args;

static int on_advise_opt(void *ctx, const mst_cli_opt *o, const char *v) {
    advise_args *p = ctx;
    switch (o->id) {
    case OPT_BUDGET: return parse_double("--budget-minutes", v, 0, &p->cfg->budget_minutes);
    case OPT_TOLERANCE: return parse_double("--tolerance", v, 0, &p->cfg->tolerance_pp);
    case OPT_REPEATS: return parse_double("--repeats", v, 2, &p->repeats);
    case MST_CLI_OPT_SET: p->sets[p->n_sets++] = v; return 0;   /* the trials re-apply them */
    default: return 0;
    }
}

/* The runs ran in the staging folder; after promotion they are under DIR: the paths the outputs
 * record are the promoted ones. */
static void relocate(char *path, size_t n, const char *from, const char *to) {
    size_t k = strlen(from);
    if (strncmp(path, from, k) != 0 || (path[k] != '/' && path[k] != '\0')) return;
    char tmp[4096];
    int len = snprintf(tmp, sizeof(tmp), "%s%s", to, path + k);
    if (len > 0 && (size_t)len < n) memcpy(path, tmp, (size_t)len + 1);     /* else left as it was: too long */
}

static void relocate_set(mst_trial_set *t, const char *from, const char *to) {
    for (int i = 0; i < t->n_runs; i++) relocate(t->runs[i].dir, sizeof(t->runs[i].dir), from, to);
}

static void relocate_advice(mst_advice *adv, const char *from, const char *to) {
    relocate(adv->db_path, sizeof(adv->db_path), from, to);
    relocate_set(&adv->profile, from, to);
    relocate_set(&adv->baseline, from, to);
    for (int i = 0; i < MST_MAX_FINDINGS; i++) relocate_set(&adv->trials[i], from, to);
    relocate_set(&adv->combined, from, to);
}

int mst_cmd_advise(int argc, char **argv) {
    mst_advise_config cfg;
    mst_advise_config_default(&cfg);
    const char **sets = calloc((size_t)argc + 1, sizeof(*sets));
    if (!sets) { fprintf(stderr, "mstune advise: out of memory\n"); return MST_EXIT_FAIL; }
    int rc = MST_EXIT_INPUT;
    advise_args p = {&cfg, cfg.repeats, sets, 0};
    mst_job_args a;
    if ((rc = mst_job_args_parse_with("advise", argc, argv, on_advise_opt, &p, &a)) != MST_EXIT_OK) goto out;
    int n_sets = p.n_sets;
    double repeats = p.repeats;
    if (repeats > MST_TRIAL_MAX_RUNS || repeats != floor(repeats)) {
        fprintf(stderr, "mstune advise: --repeats expects a whole number in 2..%d, got %g\n", MST_TRIAL_MAX_RUNS, repeats);
        rc = MST_EXIT_INPUT;
        goto out;
    }
    if (!a.out_given)       /* an explicit -o is taken as given */
        strncat(a.out_dir, "-advise", sizeof(a.out_dir) - strlen(a.out_dir) - 1);   /* out/<job>-advise by default */

    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) { fprintf(stderr, "mstune advise: cannot find the mstune program (/proc/self/exe)\n"); rc = MST_EXIT_FAIL; goto out; }
    self[n] = '\0';
    cfg.mstune_bin = self;
    cfg.job_path = a.job_path;
    cfg.job_sets = sets;
    cfg.n_job_sets = n_sets;
    /* one advise per folder (a lock), and the folder's previous advice stays whole until this one
     * has written everything: the runs and outputs go to DIR/.run-new/ and are promoted together */
    mst_outdir od;
    char err[2048], stage_trials[1200], final_trials[1200];
    if ((rc = mst_outdir_open_for(&od, a.out_dir, mst_outdir_advise_outputs, false, err, sizeof(err))) != 0) {
        fprintf(stderr, "mstune advise: %s\n", err);
        goto out;
    }
    mst_outdir_stage(&od, "trials", stage_trials, sizeof(stage_trials));
    snprintf(final_trials, sizeof(final_trials), "%s/trials", a.out_dir);
    cfg.out_dir = stage_trials;
    cfg.repeats = (int)repeats;
    cfg.check_sets = check_sets;
    cfg.nproc = a.nproc;        /* --nproc N: every trial runs under the launcher with N ranks */
    cfg.mpi_available = mst_comm_mpi_available();
    cfg.check_arg = &a.job;
    cfg.log = stderr;
    /* Ctrl-C reaches the trial's process too (one process group): it stops after its current step,
     * its run counts as interrupted, no further run starts, and what ran is judged and written */
    cfg.stop = mst_cli_stop_flag_install();

    mst_advice *adv = calloc(1, sizeof(*adv));
    if (!adv) { fprintf(stderr, "mstune advise: out of memory\n"); rc = MST_EXIT_FAIL; goto close; }
    int arc = mst_advise_run(&cfg, adv, err, sizeof(err));
    mst_cli_stop_flag_restore();
    if (arc != 0) {
        fprintf(stderr, "mstune advise: %s; the outputs in %s are as they were\n", err, a.out_dir);
        free(adv);
        rc = MST_EXIT_FAIL;
        mst_outdir_discard(&od);
        goto close;
    }
    /* what the outputs say and the report reads: staged now, promoted below */
    char staged_db[1100], sum_path[1200];
    snprintf(staged_db, sizeof(staged_db), "%s", adv->db_path);
    snprintf(sum_path, sizeof(sum_path), "%s/summary.json", adv->profile.runs[0].dir);
    relocate_advice(adv, stage_trials, final_trials);
    cfg.out_dir = a.out_dir;
    mst_advice_print(stdout, adv, &cfg);

    /* the outputs: any that fails is reported and nothing is promoted */
    char path[1200];
    rc = MST_EXIT_OK;
    mst_outdir_stage(&od, "advice.md", path, sizeof(path));
    if (mst_advice_write_markdown(adv, &cfg, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_IO; }
    mst_outdir_stage(&od, "advice.json", path, sizeof(path));
    if (mst_advice_write_json(adv, &cfg, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_IO; }
    mst_job tuned = a.job;
    for (int i = 0; i < adv->n_accepted_sets; i++)
        if (strncmp(adv->accepted_sets[i], "--", 2) == 0)      /* the launcher's: not a job key */
            printf("mstune advise: accepted %s: run the tuned job with it (mstune train tuned.yaml %s)\n", adv->accepted_sets[i],
                   adv->accepted_sets[i]);
        else if (mst_job_set(&tuned, adv->accepted_sets[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune advise: applying %s: %s\n", adv->accepted_sets[i], err);
            rc = MST_EXIT_FAIL;
        }
    mst_outdir_stage(&od, "tuned.yaml", path, sizeof(path));
    if (mst_job_write_yaml(&tuned, path, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_IO; }
    if (mst_advice_store(adv, staged_db, err, sizeof(err)) != 0) { fprintf(stderr, "mstune advise: %s\n", err); rc = MST_EXIT_IO; }
    char report_dir[1200];
    mst_outdir_stage(&od, "report", report_dir, sizeof(report_dir));
    char advice_path[1200];     /* the advice first on the page, read back from advice.json */
    mst_outdir_stage(&od, "advice.json", advice_path, sizeof(advice_path));
    mst_report_extras extras = {access(advice_path, R_OK) == 0 ? advice_path : NULL, NULL, adv->db_path};
    if (mst_report_render_with(staged_db, sum_path, report_dir, &extras, err, sizeof(err)) != 0)
        fprintf(stderr, "mstune advise: warning: report: %s\n", err);
    if (rc != MST_EXIT_OK) {
        fprintf(stderr, "mstune advise: not every output could be written; the outputs in %s are as they were\n", a.out_dir);
        mst_outdir_discard(&od);
    } else if (mst_outdir_promote(&od, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune advise: %s\n", err);
        rc = MST_EXIT_IO;
    } else {
        printf("\n  advice:  %s/advice.md (and advice.json)\n  tuned:   %s/tuned.yaml\n  report:  %s/report/index.html\n  runs:    %s\n",
               a.out_dir, a.out_dir, a.out_dir, final_trials);
    }
    free(adv);
close:
    mst_outdir_close(&od);
out:
    free(sets);
    return rc;
}
