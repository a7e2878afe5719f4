/* cmd_profile.c — `mstune profile JOB [--set k=v]... [--out DIR]`: train with instrumentation on
 * and write DIR/profile.db (SQLite, docs/profile-schema.md), DIR/trace.json (Chrome trace) and
 * DIR/summary.json with the per-step breakdown; print the breakdown and the top ops.
 * `mstune export-trace profile.db trace.json` re-exports a trace. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "advisor/finding.h"
#include "cli/commands.h"
#include "cli/outdir.h"
#include "cli/run_meta.h"
#include "cli/session.h"
#include "cli/signals.h"
#include "cli/ranks.h"
#include "runtime/comm/comm.h"
#include "runtime/fpu.h"
#include "cli/summary.h"
#include "profiler/csv_export.h"
#include "profiler/sampler.h"
#include "profiler/self_cost.h"
#include "profiler/store.h"
#include "profiler/trace_export.h"
#include "report/report.h"
#include "util/fsutil.h"

#define TOP_OPS 10

/* Every kernel function (op table and providers): the sampler tells kernel frames from dispatch
 * frames by these addresses (profiler/ knows nothing about the op table). */
static size_t kernel_addrs(const void **out, size_t cap) { return mst_op_kernel_addrs(out, cap); }

static void add_folded(void *store, uint32_t tid, const char *folded, int64_t count) {
    mst_store_add_folded(store, tid, folded, count);
}

static int store_meta(mst_store *st, const mst_job *job) {
    cJSON *config = NULL;
    if (mst_job_to_json(job, &config) != 0) return -1;
    char *text = cJSON_PrintUnformatted(config);
    cJSON_Delete(config);
    int rc = text ? mst_store_set_meta(st, "config", text) : -1;
    cJSON_free(text);
    mst_meta_item items[24];
    int n = mst_run_meta_collect(items, 24);
    for (int i = 0; i < n && rc == 0; i++) rc = mst_store_set_meta(st, items[i].key, items[i].value);
    return rc;
}

/* Mean ms per profiled step of each category and of the step (sum / steps, the measure the share
 * is of, so both columns add up); false when the profile cannot be read back. */
/* Data parallel: every rank waits here until all have promoted their outputs (rank k > 0 after its
 * promote, rank 0 before its report, which reads DIR.rank<k>/profile.db). A failed barrier (a rank
 * gone) is a warning: the report then names the rank whose profile is missing. */
static void sync_ranks(mst_session *s, bool *synced) {
    *synced = true;
    if (mst_comm_barrier(s->comm) != MST_OK)
        fprintf(stderr, "mstune profile: warning: rank %d: %s\n", s->rank, mst_comm_error(s->comm));
}

static bool breakdown_means(const char *db_path, double mean_ms[MST_CAT_COUNT], double *step_ms) {
    rpt_profile prof;
    char err[512];
    if (rpt_profile_load(&prof, db_path, err, sizeof(err)) != 0) return false;
    int64_t used = 0;
    double wall = 0;
    for (int c = 0; c < MST_CAT_COUNT; c++) mean_ms[c] = 0;
    for (int64_t i = 0; i < prof.n_steps; i++)
        if (prof.steps[i].used) {
            used++;
            wall += prof.steps[i].wall_ms;
            for (int c = 0; c < MST_CAT_COUNT; c++) mean_ms[c] += prof.steps[i].cat_ms[c];
        }
    rpt_profile_free(&prof);
    if (!used) return false;
    for (int c = 0; c < MST_CAT_COUNT; c++) mean_ms[c] /= (double)used;
    *step_ms = wall / (double)used;
    return true;
}

static void pause_sampler(void *sampler, bool recording) {
    if (mst_sampler_pause(sampler, !recording) != 0)
        fprintf(stderr, "mstune profile: warning: the stack sampler: %s\n", mst_sampler_error(sampler));
}

/* With off steps in the schedule (profile.wait): what recording cost, measured in this run
 * (profiler/self_cost.h), and the collectors' own estimate over the same recording steps. */
typedef struct {
    bool measured;
    mst_prof_self_cost c;
    double estimate;            /* collectors' time / (recording steps' time - it) */
    int wait, on;               /* steps per off and recording window */
} measured_cost;

static measured_cost measure_cost(const mst_prof_config *pc, const mst_train_result *r, double collectors_ns) {
    measured_cost m = {.wait = (int)pc->wait, .on = (int)(pc->warmup + pc->active)};
    m.measured = mst_prof_measure_self_cost(pc, r->resumed_at_step, r->step_ms, r->n_losses, 0.90, &m.c) == 0;
    double rec_ns = m.c.recorded_ms * 1e6;
    m.estimate = m.measured && rec_ns > collectors_ns ? collectors_ns / (rec_ns - collectors_ns) : NAN;
    return m;
}

static void describe_cost(char *buf, size_t n, const measured_cost *m) {
    char iv[64] = "";
    if (isfinite(m->c.lo)) snprintf(iv, sizeof(iv), " [%+.2f%%, %+.2f%%]", 100 * m->c.lo, 100 * m->c.hi);
    else snprintf(iv, sizeof(iv), " (too few pairs for a %.0f%% interval)", 100 * m->c.level);
    snprintf(buf, n, "%+.2f%%%s of step time over %d pairs of %d off / %d recording steps (%.0f%% interval); estimated %.2f%%",
             100 * m->c.cost, iv, m->c.pairs, m->wait, m->on, 100 * m->c.level, 100 * m->estimate);
}

static void add_cost_json(cJSON *o, const measured_cost *mc) {
    cJSON *m = cJSON_AddObjectToObject(o, "profiler_cost_measured");
    cJSON_AddNumberToObject(m, "cost", mc->c.cost);
    if (isfinite(mc->c.lo)) {
        cJSON_AddNumberToObject(m, "lo", mc->c.lo);
        cJSON_AddNumberToObject(m, "hi", mc->c.hi);
    } else {
        cJSON_AddNullToObject(m, "lo");
        cJSON_AddNullToObject(m, "hi");
    }
    cJSON_AddNumberToObject(m, "level", mc->c.level);
    cJSON_AddNumberToObject(m, "pairs", mc->c.pairs);
    cJSON_AddNumberToObject(m, "off_steps", mc->wait);
    cJSON_AddNumberToObject(m, "recording_steps", mc->on);
    cJSON_AddNumberToObject(m, "off_step_ms", mc->c.off_ms);
    cJSON_AddNumberToObject(m, "recording_step_ms", mc->c.on_ms);
    if (isfinite(mc->estimate)) cJSON_AddNumberToObject(m, "estimate", mc->estimate);
    else cJSON_AddNullToObject(m, "estimate");
}

static void print_breakdown(FILE *f, const char *db_path, const mst_breakdown *b, double sampler_share, int64_t sampler_samples,
                            const mst_op_row *ops, int n_ops, const mst_prof_config *pc) {
    double mean[MST_CAT_COUNT], step_mean = 0;
    bool have_mean = breakdown_means(db_path, mean, &step_mean);
    fprintf(f, "\nstep time breakdown over %lld profiled steps (mean step %.3f ms, median step %.3f ms)\n", (long long)b->steps,
            step_mean, b->wall_median_ns / 1e6);
    if (pc->level >= MST_PROF_LEVEL_OPS && pc->op_every > 1)
        fprintf(f, "  (the steps that recorded their ops: one in %lld, profile.op_every; the others recorded totals only)\n",
                (long long)pc->op_every);
    fprintf(f, "  %-10s %12s %8s %14s %14s\n", "category", "mean ms/step", "share", "median ms/step", "hidden ms/step");
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        char m[32];
        if (have_mean) snprintf(m, sizeof(m), "%.3f", mean[c]);
        else snprintf(m, sizeof(m), "n/a");
        fprintf(f, "  %-10s %12s %7.1f%% %14.3f %14.3f\n", mst_prof_cat_name((mst_prof_cat)c), m, 100 * b->share[c],
                b->median_ns[c] / 1e6, b->hidden_known ? b->hidden_median_ns[c] / 1e6 : 0.0);
    }
    if (have_mean) fprintf(f, "  %-10s %12.3f %7.1f%% %14.3f\n", "step", step_mean, 100.0, b->wall_median_ns / 1e6);
    fprintf(f, "  (mean ms/step and share add up to the mean step; per-category medians need not add up)\n");
    const double instrumented = 100 * b->share[MST_CAT_DISPATCH] / (b->share[MST_CAT_DISPATCH] + b->share[MST_CAT_KERNEL] + 1e-12);
    if (sampler_share >= 0 && sampler_samples >= MST_SAMPLER_MIN_SHARE_SAMPLES)
        fprintf(f, "  dispatch share of op time: instrumented %.1f%%, sampled %.1f%% (%lld main-thread samples)\n", instrumented,
                100 * sampler_share, (long long)sampler_samples);
    else if (sampler_share >= 0)
        fprintf(f, "  dispatch share of op time: instrumented %.1f%%; sampled: %lld main-thread samples, too few to compare "
                "(raise profile.sample_hz or run longer)\n", instrumented, (long long)sampler_samples);
    if (n_ops > 0) {
        double steps = b->steps > 0 ? (double)b->steps : 1;
        fprintf(f, "\ntop ops by kernel time\n  %-20s %8s %12s %10s %10s %10s\n", "op", "calls", "total ms", "ms/step", "mean us",
                "GFLOP/s");
        for (int i = 0; i < n_ops; i++)
            fprintf(f, "  %-20s %8lld %12.3f %10.4f %10.2f %10.2f\n", ops[i].name, (long long)ops[i].calls, ops[i].total_ns / 1e6,
                    ops[i].total_ns / 1e6 / steps, ops[i].mean_ns / 1e3, ops[i].gflops);
    }
}

static cJSON *breakdown_json(const mst_breakdown *b, double sampler_share, double overhead_share, const mst_op_row *ops,
                             int n_ops) {
    cJSON *o = cJSON_CreateObject();
    cJSON *ms = cJSON_AddObjectToObject(o, "breakdown_ms"), *share = cJSON_AddObjectToObject(o, "breakdown_share");
    cJSON *hidden = cJSON_AddObjectToObject(o, "hidden_ms");
    for (int c = 0; c < MST_CAT_COUNT; c++) {
        const char *name = mst_prof_cat_name((mst_prof_cat)c);
        cJSON_AddNumberToObject(ms, name, b->median_ns[c] / 1e6);
        cJSON_AddNumberToObject(share, name, b->share[c]);
        cJSON_AddNumberToObject(hidden, name, b->hidden_known ? b->hidden_median_ns[c] / 1e6 : 0.0);
    }
    cJSON_AddNumberToObject(o, "profiled_steps", (double)b->steps);
    cJSON_AddNumberToObject(o, "profiled_step_ms_median", b->wall_median_ns / 1e6);
    if (sampler_share >= 0) cJSON_AddNumberToObject(o, "sampler_dispatch_share", sampler_share);
    else cJSON_AddNullToObject(o, "sampler_dispatch_share");
    double d = b->share[MST_CAT_DISPATCH], k = b->share[MST_CAT_KERNEL];
    cJSON_AddNumberToObject(o, "instrumented_dispatch_share", d + k > 0 ? d / (d + k) : 0);
    cJSON_AddNumberToObject(o, "profiler_overhead_share", overhead_share);
    cJSON *top = cJSON_AddArrayToObject(o, "top_ops");
    for (int i = 0; i < n_ops; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", ops[i].name);
        cJSON_AddNumberToObject(r, "calls", (double)ops[i].calls);
        cJSON_AddNumberToObject(r, "total_ms", ops[i].total_ns / 1e6);
        cJSON_AddNumberToObject(r, "gflops", ops[i].gflops);
        cJSON_AddItemToArray(top, r);
    }
    return o;
}

/* "next: mstune advise JOB ..." when a diagnosis rule proposing a change fires on this profile (the
 * advisor's own rules, advisor/rules.c); empty when none does. */
static void next_hint(const char *db_path, const cJSON *summary, const char *job_path, char *out, size_t n) {
    out[0] = '\0';
    rpt_profile prof;
    char err[512];
    if (rpt_profile_load(&prof, db_path, err, sizeof(err)) != 0) return;
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    mst_rule_env env = {(int)sysconf(_SC_NPROCESSORS_ONLN), phys > 0 ? phys : 0, summary, 0, false, NULL,
                        mst_fpu_subnormal_penalty(), mst_fpu_subnormal_pass()};
    mst_finding f[MST_MAX_FINDINGS];
    int k = mst_advisor_diagnose(&prof, &env, f, MST_MAX_FINDINGS), act = 0, first = -1;
    for (int i = 0; i < k; i++)
        if (f[i].goal != MST_GOAL_NONE && f[i].n_sets > 0) {
            if (first < 0) first = i;
            act++;
        }
    if (act > 0)
        snprintf(out, n, "next: mstune advise %s  (%d change%s to verify by trial runs; first: %s)", job_path, act,
                 act == 1 ? "" : "s", f[first].title);
    rpt_profile_free(&prof);
}

int mst_cmd_profile(int argc, char **argv) {
    mst_job_args a;
    int rc = mst_job_args_parse("profile", argc, argv, false, &a);
    if (rc != MST_EXIT_OK) return rc;
    char err[2048];
    mst_session s;
    if (mst_session_open(&s, &a.job, a.out_dir, false, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune profile: %s\n", err);
        return MST_EXIT_INPUT;
    }
    mst_outdir od;      /* everything is written staged and promoted together at the end */
    if ((rc = mst_outdir_open(&od, a.out_dir, false, err, sizeof(err))) != 0) {
        fprintf(stderr, "mstune profile: %s\n", err);
        mst_session_close(&s);
        return rc;
    }
    char db_path[1200], trace_path[1200], sum_path[1200], report_dir[1200];
    mst_outdir_stage(&od, "profile.db", db_path, sizeof(db_path));
    mst_outdir_stage(&od, "trace.json", trace_path, sizeof(trace_path));
    mst_outdir_stage(&od, "summary.json", sum_path, sizeof(sum_path));
    mst_outdir_stage(&od, "report", report_dir, sizeof(report_dir));

    mst_prof_config pc = {(mst_prof_level)a.job.profile.level, a.job.profile.skip, a.job.profile.warmup,
                          a.job.profile.active, a.job.profile.repeat, a.job.profile.wait, a.job.profile.op_every};
    mst_profiler *prof = mst_profiler_new();
    mst_store *store = prof ? mst_store_open(db_path, &pc, a.job.profile.trace_steps, err, sizeof(err)) : NULL;
    if (!store) {
        fprintf(stderr, "mstune profile: %s\n", prof ? err : "out of memory");
        mst_profiler_free(prof);
        mst_outdir_close(&od);
        mst_session_close(&s);
        return prof ? MST_EXIT_IO : MST_EXIT_FAIL;
    }
    if (store_meta(store, &a.job) != 0) fprintf(stderr, "mstune profile: warning: %s\n", mst_store_error(store));
    if (s.ranks > 1) {      /* which rank of how many wrote this profile: the report finds the others by it */
        char v[32];
        snprintf(v, sizeof(v), "%d", s.rank);
        mst_store_set_meta(store, "dp.rank", v);
        snprintf(v, sizeof(v), "%d", s.ranks);
        mst_store_set_meta(store, "dp.ranks", v);
    }
    mst_profiler_configure(prof, &pc);
    mst_profiler_set_sink(prof, mst_store_sink, store);

    mst_sampler *sampler = NULL;
    if (a.job.profile.sampler) {
        static const void *addrs[MST_OP_COUNT * MST_DTYPE_COUNT * 2];
        size_t n = kernel_addrs(addrs, sizeof(addrs) / sizeof(addrs[0]));
        sampler = mst_sampler_new(a.job.profile.sample_hz, 64, 1 << 16);
        if (!sampler || mst_sampler_set_kernel_addrs(sampler, addrs, n) != 0 || mst_sampler_add_thread(sampler) != 0 ||
            mst_sampler_start(sampler) != 0) {
            fprintf(stderr, "mstune profile: warning: the stack sampler is off: %s\n",
                    sampler ? mst_sampler_error(sampler) : "out of memory");
            mst_sampler_free(sampler);
            sampler = NULL;
        }
    }

    if (sampler) mst_profiler_set_phase_hook(prof, pause_sampler, sampler);     /* the schedule's off steps pause it too */
    mst_prof_set_thread_name("main");
    s.cfg.profiler = prof;
    s.cfg.stop = mst_cli_stop_flag_install();
    uint64_t t0 = mst_prof_now_ns();
    mst_profiler_start(prof);
    mst_train_result r;
    mst_status st = mst_train(s.ctx, s.model, s.train, s.test, &s.cfg, &r);
    bool synced = false;        /* data parallel: the ranks met after their outputs were promoted */
    mst_profiler_stop(prof);
    double wall_s = (double)(mst_prof_now_ns() - t0) / 1e9;
    mst_cli_stop_flag_restore();

    double sampler_share = -1, sampler_ns = 0;
    int64_t sampler_samples = 0;
    uint32_t main_tid = (uint32_t)syscall(SYS_gettid);
    if (sampler) {
        mst_sampler_stop(sampler);
        mst_sampler_foreach_folded(sampler, add_folded, store);
        sampler_share = mst_sampler_dispatch_share(sampler, main_tid);
        sampler_samples = (int64_t)mst_sampler_count(sampler, main_tid);
        mst_store_set_sampler_summary(store, sampler_samples, sampler_share, a.job.profile.sample_hz);
        sampler_ns = mst_sampler_cost_ns(sampler);
        mst_sampler_free(sampler);
    }
    mst_prof_overhead ov = mst_profiler_overhead(prof);
    ov.sampler_ns = (uint64_t)sampler_ns;      /* every collector's cost: the sampler's too */
    ov.probe_ns = (uint64_t)(r.underflow_probe_s * 1e9);     /* and the underflow probe's (runtime/amp/underflow.h) */
    mst_store_set_overhead(store, &ov, wall_s);
    for (int64_t i = 0; i < r.n_underflow; i++) {
        const mst_underflow_sample *u = &r.underflow[i];
        mst_store_underflow row = {u->step, s.cfg.amp_dtype == MST_DTYPE_BF16 ? "bf16" : "f16", u->counts.elements,
                                   u->counts.ref_nonzero, u->counts.half_zero, u->counts.cast_zero, u->counts.cast_subnormal,
                                   (int64_t)(u->probe_ms * 1e6)};
        if (mst_store_add_underflow(store, &row) != 0) break;       /* the store's failure is reported at close */
    }
    if (st == MST_OK) {     /* the run's throughput (docs/report.md), for a report or compare without summary.json */
        char v[64];
        snprintf(v, sizeof(v), "%lld", (long long)r.samples);
        mst_store_set_meta(store, "samples_processed", v);
        snprintf(v, sizeof(v), "%lld", (long long)(r.steps - r.resumed_at_step));
        mst_store_set_meta(store, "steps_processed", v);
        snprintf(v, sizeof(v), "%.17g", r.train_loop_s);
        mst_store_set_meta(store, "train_loop_s", v);
        if (r.step_threads > 0) {     /* the budget the step's own first runs kept (runtime/graph/step_threads.h) */
            snprintf(v, sizeof(v), "%d of %d", r.step_threads, s.ctx->n_threads);
            mst_store_set_meta(store, "step_threads", v);
        }
    }
    double overhead_share = wall_s > 0 ? mst_prof_overhead_ns(&ov) / (wall_s * 1e9) : 0;
    /* the probe runs outside the timed steps: not in what off vs on windows can see */
    measured_cost mc = measure_cost(&pc, &r, mst_prof_overhead_ns(&ov) - (double)ov.probe_ns);
    char cost_text[256] = "";
    if (st == MST_OK && mc.measured) {
        describe_cost(cost_text, sizeof(cost_text), &mc);
        mst_store_set_meta(store, "profiler.cost_measured", cost_text);
    }
    if (mst_store_close(store, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune profile: %s\n", err);
        rc = MST_EXIT_IO;
    }
    mst_profiler_free(prof);

    if (st != MST_OK) {
        fprintf(stderr, "mstune profile: %s; the outputs in %s are as they were\n", mst_ctx_error(s.ctx), a.out_dir);
        rc = mst_exit_for_status(st);
        mst_outdir_discard(&od);
        if (s.ranks > 1) mst_comm_abort(s.comm, rc);      /* the other ranks exit now instead of waiting on us */
    } else if (rc == MST_EXIT_OK) {
        mst_breakdown b;
        mst_op_row ops[TOP_OPS];
        int n_ops = 0;
        cJSON *sum = NULL;
        if (mst_store_read_breakdown(db_path, &b, err, sizeof(err)) != 0 ||
            (n_ops = mst_store_read_top_ops(db_path, ops, TOP_OPS, err, sizeof(err))) < 0 ||
            mst_trace_export(db_path, trace_path, err, sizeof(err)) != 0 || !(sum = mst_summary_build(&a.job, &s, &r))) {
            fprintf(stderr, "mstune profile: %s\n", sum ? err : err[0] ? err : "out of memory building the summary");
            rc = MST_EXIT_FAIL;
        } else {
            cJSON *bj = breakdown_json(&b, sampler_share, overhead_share, ops, n_ops);
            if (mc.measured) add_cost_json(bj, &mc);
            for (cJSON *it = bj->child; it;) {          /* move the breakdown's keys into the summary */
                cJSON *next = it->next;
                cJSON_AddItemToObject(sum, it->string, cJSON_DetachItemViaPointer(bj, it));
                it = next;
            }
            cJSON_Delete(bj);
            if (mst_summary_write(sum_path, sum, err, sizeof(err)) != 0) {
                fprintf(stderr, "mstune profile: %s\n", err);
                rc = MST_EXIT_IO;
            } else {
                /* a chart gnuplot could not draw is named on the page: a warning, not a failed run */
                char rerr[2048], hint[512];
                next_hint(db_path, sum, a.job_path, hint, sizeof(hint));
                char shown[1200];
                snprintf(shown, sizeof(shown), "%s/profile.db", a.out_dir);
                mst_report_extras extras = {NULL, hint[0] ? hint : NULL, shown};
                if (s.ranks > 1 && s.rank == 0) sync_ranks(&s, &synced);   /* the report reads every rank's profile */
                int report_rc = mst_report_render_with(db_path, sum_path, report_dir, &extras, rerr, sizeof(rerr));
                if (mst_outdir_promote(&od, err, sizeof(err)) != 0) {
                    fprintf(stderr, "mstune profile: %s\n", err);
                    rc = MST_EXIT_IO;
                    goto done;
                }
                snprintf(db_path, sizeof(db_path), "%s/profile.db", a.out_dir);
                snprintf(trace_path, sizeof(trace_path), "%s/trace.json", a.out_dir);
                snprintf(sum_path, sizeof(sum_path), "%s/summary.json", a.out_dir);
                snprintf(report_dir, sizeof(report_dir), "%s/report", a.out_dir);
                if (s.rank == 0 && r.comm_size > 1) mst_cli_print_ranks(stdout, &r);
                if (s.rank > 0) goto done;     /* rank 0 speaks for the job; each rank has its own profile.db */
                printf("mstune profile: %s: %lld steps in %.1f s%s", a.job.name, (long long)r.steps, r.wall_s,
                       r.interrupted ? " (interrupted)\n" : "\n");
                if (r.val_accuracy >= 0) printf("  val accuracy %.2f%%, val loss %.4f\n", 100 * r.val_accuracy, r.val_loss);
                else if (!isnan(r.val_metric)) printf("  val metric %.4f, val loss %.4f\n", r.val_metric, r.val_loss);
                printf("  throughput %.0f samples/s, %.1f steps/s (%lld samples in %.2f s of training loop)\n", r.samples_per_s,
                       r.steps_per_s, (long long)r.samples, r.train_loop_s);
                print_breakdown(stdout, db_path, &b, sampler_share, sampler_samples, ops, n_ops, &pc);
                if (b.steps == 0 && r.steps > r.resumed_at_step)     /* a schedule that never reached the run's steps */
                    fprintf(stderr,
                            "mstune profile: warning: no step of the run's %lld was measured "
                            "(profile.skip %lld, profile.warmup %lld, profile.wait %lld, profile.active %lld; skipped, "
                            "off and warm-up steps are not): the breakdown and the report have no step to show\n",
                            (long long)(r.steps - r.resumed_at_step), (long long)pc.skip, (long long)pc.warmup,
                            (long long)pc.wait, (long long)pc.active);
                printf("\n  profiler overhead (estimated) %.2f%% of the run\n", 100 * overhead_share);
                if (cost_text[0]) printf("  profiler cost measured in this run: %s\n", cost_text);
                printf("  wrote %s, %s, %s\n", db_path, trace_path, sum_path);
                if (report_rc != 0) fprintf(stderr, "mstune profile: warning: report: %s\n", rerr);
                printf("  report: %s/index.html%s\n", report_dir,
                       mst_report_have_gnuplot() ? "" : " (no charts: gnuplot is not installed)");
                if (hint[0]) printf("\n%s\n", hint);
                if (r.interrupted && mst_cli_stop_signal()) rc = MST_EXIT_SIGNAL_BASE + mst_cli_stop_signal();
            }
        }
    done:
        cJSON_Delete(sum);
    }
    if (s.ranks > 1 && st == MST_OK && !synced) sync_ranks(&s, &synced);     /* rank k > 0: after its promote */
    if (rc != MST_EXIT_OK && rc < MST_EXIT_SIGNAL_BASE) mst_outdir_discard(&od);     /* profile has no resume */
    mst_outdir_close(&od);
    mst_train_result_free(&r);
    mst_session_close(&s);
    return rc;
}

static int on_two_paths(void *ctx, const mst_cli_opt *o, const char *value) {
    const char **p = ctx;
    if (o) return 0;
    if (p[2]) {
        fprintf(stderr, "mstune: unexpected argument '%s'\n", value);
        return 1;
    }
    if (!p[0]) p[0] = value;
    else p[1] = value, p[2] = value;
    return 0;
}

int mst_cmd_export_trace(int argc, char **argv) {
    const char *paths[3] = {NULL, NULL, NULL};
    int rc = mst_cli_parse(mst_cli_command("export-trace"), argc, argv, on_two_paths, paths);
    if (rc != MST_EXIT_OK) return rc;
    if (!paths[1]) {
        fprintf(stderr, "usage: mstune export-trace PROFILE.db TRACE.json   (mstune export-trace --help)\n");
        return MST_EXIT_INPUT;
    }
    char err[1024];
    if (mst_trace_export(paths[0], paths[1], err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune export-trace: %s\n", err);
        return MST_EXIT_INPUT;
    }
    printf("wrote %s\n", paths[1]);
    return MST_EXIT_OK;
}

int mst_cmd_export_csv(int argc, char **argv) {
    const char *paths[3] = {NULL, NULL, NULL};
    int rc = mst_cli_parse(mst_cli_command("export-csv"), argc, argv, on_two_paths, paths);
    if (rc != MST_EXIT_OK) return rc;
    if (!paths[1]) {
        fprintf(stderr, "usage: mstune export-csv PROFILE.db DIR   (mstune export-csv --help)\n");
        return MST_EXIT_INPUT;
    }
    char err[1024];
    if (mst_csv_export(paths[0], paths[1], err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune export-csv: %s\n", err);
        return MST_EXIT_INPUT;
    }
    printf("wrote %s/ops.csv, %s/steps.csv\n", paths[1], paths[1]);
    return MST_EXIT_OK;
}
