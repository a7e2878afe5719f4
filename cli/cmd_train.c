/* cmd_train.c — `mstune train JOB [--set k=v]... [--out DIR] [--resume]`: train with
 * instrumentation off, write DIR/summary.json and DIR/checkpoint.bin (staged, then promoted
 * together: cli/outdir.h), print a short summary. Exit codes: cli/commands.h.
 * `mstune validate JOB` checks a job file without running it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/outdir.h"
#include "cli/session.h"
#include "cli/signals.h"
#include "cli/ranks.h"
#include "runtime/comm/comm.h"
#include "cli/summary.h"
#include "util/fsutil.h"

static void print_summary(FILE *f, const mst_job_args *a, const mst_train_result *r, const char *summary_path,
                          const char *ckpt) {
    fprintf(f, "mstune train: %s: %lld steps (%lld epoch%s) in %.1f s%s\n", a->job.name, (long long)r->steps,
            (long long)r->epochs, r->epochs == 1 ? "" : "s", r->wall_s,
            r->interrupted ? " (interrupted: resume with --resume)" : "");
    if (r->val_accuracy >= 0) fprintf(f, "  val accuracy %.2f%%, val loss %.4f\n", 100 * r->val_accuracy, r->val_loss);
    else if (!isnan(r->val_metric)) fprintf(f, "  val metric %.4f, val loss %.4f\n", r->val_metric, r->val_loss);
    fprintf(f, "  throughput %.0f samples/s, %.1f steps/s (%lld samples in %.2f s of training loop)\n", r->samples_per_s,
            r->steps_per_s, (long long)r->samples, r->train_loop_s);
    fprintf(f, "  step time %.2f ms median, peak memory %.1f MiB\n", r->step_time_ms_median,
            (double)r->peak_memory_bytes / (1 << 20));
    if (r->amp_level > 0 || r->overflow_steps > 0)
        fprintf(f, "  amp O%d: loss scale %g, %lld overflow steps (%lld skipped)\n", r->amp_level, r->loss_scale_final,
                (long long)r->overflow_steps, (long long)r->skipped_steps);
    fprintf(f, "  wrote %s%s%s\n", summary_path, ckpt ? ", " : "", ckpt ? ckpt : "");
}

int mst_cmd_train(int argc, char **argv) {
    mst_job_args a;
    int rc = mst_job_args_parse("train", argc, argv, true, &a);
    if (rc != MST_EXIT_OK) return rc;
    char err[2048];
    mst_session s;
    if (mst_session_open(&s, &a.job, a.out_dir, a.resume, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune train: %s\n", err);
        return MST_EXIT_INPUT;
    }
    mst_outdir od;
    if ((rc = mst_outdir_open(&od, a.out_dir, a.resume && s.resume_from_stage, err, sizeof(err))) != 0) {
        fprintf(stderr, "mstune train: %s\n", err);
        mst_session_close(&s);
        return rc;
    }
    mst_train_result r;
    s.cfg.stop = mst_cli_stop_flag_install();
    mst_status st = mst_train(s.ctx, s.model, s.train, s.test, &s.cfg, &r);
    mst_cli_stop_flag_restore();
    char path[1200], final_path[1200], ckpt[1200];
    snprintf(final_path, sizeof(final_path), "%s/summary.json", a.out_dir);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoint.bin", a.out_dir);
    if (st != MST_OK) {
        fprintf(stderr, "mstune train: %s; the outputs in %s are as they were\n", mst_ctx_error(s.ctx), a.out_dir);
        rc = mst_exit_for_status(st);
        mst_outdir_discard(&od);        /* a failed run leaves nothing to resume from */
        if (s.ranks > 1) mst_comm_abort(s.comm, rc);      /* the other ranks exit now instead of waiting on us */
    } else if (r.already_finished) {        /* every output stays as it is */
        printf("mstune train: %s: already finished (%lld steps, the checkpoint's); nothing to resume, nothing written\n",
               a.job.name, (long long)r.steps);
    } else {
        mst_outdir_stage(&od, "summary.json", path, sizeof(path));
        cJSON *sum = mst_summary_build(&a.job, &s, &r);
        if (!sum || mst_summary_write(path, sum, err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune train: %s\n", sum ? err : "out of memory building the summary");
            rc = sum ? MST_EXIT_IO : MST_EXIT_FAIL;
        } else if (mst_outdir_promote(&od, err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune train: %s\n", err);
            rc = MST_EXIT_IO;
        } else {
            if (s.rank == 0) print_summary(stdout, &a, &r, final_path, s.cfg.checkpoint_path ? ckpt : NULL);
            if (s.rank == 0 && r.comm_size > 1) mst_cli_print_ranks(stdout, &r);
            if (r.interrupted && mst_cli_stop_signal()) rc = MST_EXIT_SIGNAL_BASE + mst_cli_stop_signal();
        }
        cJSON_Delete(sum);
    }
    mst_outdir_close(&od);
    mst_train_result_free(&r);
    mst_session_close(&s);
    return rc;
}

int mst_cmd_validate(int argc, char **argv) {
    mst_job_args a;
    int rc = mst_job_args_parse("validate", argc, argv, false, &a);
    if (rc != MST_EXIT_OK) return rc;
    printf("%s: ok (job '%s')\n", a.job_path, a.job.name);
    return MST_EXIT_OK;
}
