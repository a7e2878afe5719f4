/* trial.c — runs a configuration as separate mstune processes and reads what each one wrote. */
#include "advisor/trial.h"
#include "advisor/finding.h"
#include "profiler/events.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "runtime/graph/step_threads.h"
#include "util/checked.h"
#include "util/fsutil.h"

/* The last non-empty line of the run's log: what went wrong, in the run's own words. */
static void last_line(const char *path, char *out, size_t n) {
    size_t len = 0;
    char *text = mst_read_file(path, &len);
    out[0] = '\0';
    if (!text) return;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = '\0';
    char *start = strrchr(text, '\n');
    start = start ? start + 1 : text;
    char *cr = strrchr(start, '\r');        /* a progress bar redrawn with \r */
    if (cr) start = cr + 1;
    snprintf(out, n, "%s", start);
    free(text);
}

void mst_run_read_summary(mst_run_result *r, const char *summary_path) {
    size_t len;
    char *text = mst_read_file(summary_path, &len);
    if (!text) {
        r->ok = false;
        snprintf(r->error, sizeof(r->error), "%s: no summary (%s)", summary_path, strerror(errno));
        return;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) {
        r->ok = false;
        snprintf(r->error, sizeof(r->error), "%s: not valid JSON", summary_path);
        return;
    }
    r->step_ms = mst_cfg_num(j, "step_time_ms_median", NAN);
    r->val_accuracy = mst_cfg_num(j, "val_accuracy", -1);
    /* the job's metric with its direction; an older summary without "metric" has accuracy only */
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "metric");
    const cJSON *mname = cJSON_GetObjectItemCaseSensitive(m, "name");
    const cJSON *mval = cJSON_GetObjectItemCaseSensitive(m, "value");
    if (cJSON_IsObject(m) && cJSON_IsString(mname)) {
        snprintf(r->metric_name, sizeof(r->metric_name), "%s", mname->valuestring);
        r->metric = cJSON_IsNumber(mval) ? mval->valuedouble : NAN;
        r->metric_higher_is_better = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m, "higher_is_better"));
    } else {
        snprintf(r->metric_name, sizeof(r->metric_name), "accuracy");
        r->metric = r->val_accuracy >= 0 ? r->val_accuracy : NAN;
        r->metric_higher_is_better = true;
    }
    r->final_loss = mst_cfg_num(j, "final_train_loss", NAN);
    r->peak_memory_bytes = mst_cfg_num(j, "peak_memory_bytes", NAN);
    r->wall_s = mst_cfg_num(j, "wall_s", NAN);
    r->steps = mst_f64_to_i64_or(mst_cfg_num(j, "steps", 0), 0, INT64_MAX / 2, 0);
    r->skipped_steps = mst_f64_to_i64_or(mst_cfg_num(j, "skipped_steps", 0), 0, INT64_MAX / 2, 0);
    r->overflow_steps = mst_f64_to_i64_or(mst_cfg_num(j, "overflow_steps", 0), 0, INT64_MAX / 2, 0);
    r->compile_count = mst_f64_to_i64_or(mst_cfg_num(j, "compile_count", 0), 0, INT64_MAX / 2, 0);
    r->seed = mst_f64_to_i64_or(mst_cfg_num(j, "seed", 0), INT64_MIN / 2, INT64_MAX / 2, 0);
    r->train_loop_s = mst_cfg_num(j, "train_loop_s", NAN);
    r->applied_updates = mst_f64_to_i64_or(mst_cfg_num(j, "applied_updates", (double)(r->steps - r->skipped_steps)), 0,
                                           INT64_MAX / 2, r->steps - r->skipped_steps);
    r->loss_scale_final = mst_cfg_num(j, "loss_scale_final", NAN);
    r->step_threads = mst_f64_to_int_or(mst_cfg_num(j, "step_threads", 0), 0, 1 << 20, 0);
    bool interrupted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "interrupted"));
    cJSON_Delete(j);
    if (interrupted) {      /* stopped early (Ctrl-C): shorter than the others, not comparable */
        r->ok = false;
        snprintf(r->error, sizeof(r->error), "the run was interrupted");
        return;
    }
    double applied = r->steps > 0 ? 1.0 - (double)r->skipped_steps / (double)r->steps : 1.0;
    r->effective_step_ms = applied > 0 ? r->step_ms / applied : INFINITY;
    /* the training work: every step (compiles, warm-up, data waits) per update that moved the weights */
    r->ms_per_update = r->applied_updates > 0 && isfinite(r->train_loop_s) ? 1e3 * r->train_loop_s / (double)r->applied_updates
                       : r->applied_updates > 0 ? NAN : INFINITY;
    if (!(r->step_ms > 0) || !isfinite(r->final_loss)) {
        r->ok = false;
        snprintf(r->error, sizeof(r->error), "%s: no step time or a non-finite loss", summary_path);
    }
}

/* fork + exec with stdout and stderr into log_path; the exit code, -signal, or -1000 when it
 * could not start. */
static int spawn(char *const argv[], const char *log_path) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1000;
    if (pid == 0) {
        /* a killed advise takes its trial with it: no orphan keeps writing into a folder the
         * next run clears (Linux; the check covers a parent that died before the call) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1000;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? -WTERMSIG(status) : -1000;
}

int mst_trial_run(mst_trial_set *t, const char *bin, const char *job_path, const char *dir, int repeats, bool first_profile,
                  FILE *log, volatile sig_atomic_t *stop) {
    if (repeats > MST_TRIAL_MAX_RUNS) repeats = MST_TRIAL_MAX_RUNS;
    int done = 0;
    double t0 = (double)mst_prof_now_ns() * 1e-9;
    for (int done_here = 0; done_here < repeats && t->n_runs < MST_TRIAL_MAX_RUNS && !(stop && *stop); done_here++) {
        int i = t->n_runs;              /* the run's index in the set: its seed offset and folder */
        mst_run_result *r = &t->runs[t->n_runs++];
        memset(r, 0, sizeof(*r));
        r->val_accuracy = -1;
        r->metric = NAN;
        r->loss_scale_final = NAN;
        r->train_loop_s = r->ms_per_update = NAN;
        r->seed = t->seeded ? t->seed0 + i : -1;
        char run_dir[sizeof(r->dir)];
        snprintf(run_dir, sizeof(run_dir), "%.900s/%.64s-r%d", dir, t->name, i + 1);
        memcpy(r->dir, run_dir, sizeof(run_dir));
        char err[512];
        if (mst_mkdirs(r->dir, err, sizeof(err)) != 0) {
            snprintf(r->error, sizeof(r->error), "%.255s", err);
            r->exit_code = -1000;
            continue;
        }
        const char *argv[12 + 2 * MST_TRIAL_MAX_SETS];
        char seed_set[64], pin_set[48];
        int n = 0;
        argv[n++] = bin;
        argv[n++] = first_profile && i == 0 ? "profile" : "train";
        argv[n++] = job_path;
        for (int k = 0; k < t->n_sets; k++) {
            if (strncmp(t->sets[k], "--", 2) != 0) argv[n++] = "--set";     /* "--nproc=N" goes to the launcher as is */
            argv[n++] = t->sets[k];
        }
        if (t->seeded) {
            snprintf(seed_set, sizeof(seed_set), "train.seed=%lld", (long long)(t->seed0 + i));
            argv[n++] = "--set";
            argv[n++] = seed_set;
        }
        if (t->step_pin[0]) {       /* after the job's own sets: the budget they led the first run to */
            snprintf(pin_set, sizeof(pin_set), "runtime.step_threads=%s", t->step_pin);
            argv[n++] = "--set";
            argv[n++] = pin_set;
            r->step_pinned = true;
        }
        argv[n++] = "--out";
        argv[n++] = r->dir;
        argv[n] = NULL;
        char log_path[1100], sum_path[1100];
        snprintf(log_path, sizeof(log_path), "%s/run.log", r->dir);
        snprintf(sum_path, sizeof(sum_path), "%s/summary.json", r->dir);
        double r0 = (double)mst_prof_now_ns() * 1e-9;
        r->exit_code = spawn((char *const *)argv, log_path);
        if (r->exit_code == 0) {
            r->ok = true;
            mst_run_read_summary(r, sum_path);
            if (r->ok && !t->step_pin[0] && r->step_threads > 0)
                snprintf(t->step_pin, sizeof(t->step_pin), "%s",
                         mst_step_threads_pin_name(r->step_threads == 1 ? MST_STEP_THREADS_ONE : MST_STEP_THREADS_ALL));
        } else {
            r->ok = false;
            last_line(log_path, r->error, sizeof(r->error));
            if (!r->error[0]) snprintf(r->error, sizeof(r->error), "exit status %d", r->exit_code);
        }
        done += r->ok;
        if (log)
            fprintf(log, "  %-28s run %d/%d: %s (%.1fs)\n", t->name, i + 1, i - done_here + repeats,
                    r->ok ? "ok" : r->error, (double)mst_prof_now_ns() * 1e-9 - r0);
        if (!r->ok && r->exit_code != 0) break;     /* a failing configuration fails the same way again */
    }
    t->wall_s += (double)mst_prof_now_ns() * 1e-9 - t0;
    return done;
}
