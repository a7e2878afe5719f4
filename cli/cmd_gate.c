/* cmd_gate.c — `mstune gate`: the CI regression gate (docs/gate.md).
 *
 *   mstune gate --baseline DIR... --current DIR...        compare finished runs (paired mode)
 *   mstune gate --history FILE --current DIR...           compare with a stored baseline
 *   mstune gate run --baseline-cmd CMD --candidate-cmd CMD [--runs k]
 *                                                         run both, interleaved, then compare
 *   mstune gate record --history FILE DIR...              append runs to a stored baseline
 *   mstune gate calibrate --cmd CMD [--runs n]            A/A repeats: CV, thresholds, runs needed
 *
 * Commands run through /bin/sh -c with MSTUNE_GATE_OUT set to a fresh, empty folder per run, in
 * which they must write summary.json. Exit codes: 0 pass or warn, 1 regression, 2 usage or config
 * error, 3 inconclusive, 4 a run failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "profiler/events.h"
#include "report/gate.h"

enum { EXIT_INCONCLUSIVE = 3, EXIT_JOB_FAILED = 4 };

#define MAX_DIRS 256

typedef enum { SUB_COMPARE, SUB_RUN, SUB_RECORD, SUB_CALIBRATE } subcommand;

/* options, and which subcommands take them */
enum {
    O_BASELINE = 1 << 0, O_CURRENT = 1 << 1, O_HISTORY = 1 << 2, O_BCMD = 1 << 3, O_CCMD = 1 << 4, O_CMD = 1 << 5,
    O_RUNS = 1 << 6, O_WORK = 1 << 7, O_CONFIG = 1 << 8, O_OUTPUTS = 1 << 9, O_ALLOW = 1 << 10, O_EFFECT = 1 << 11,
    O_WRITE = 1 << 12, O_KEEP = 1 << 13, O_REPLACE = 1 << 14, O_DIRS = 1 << 15,
};
static const int allowed[] = {
    [SUB_COMPARE] = O_BASELINE | O_CURRENT | O_HISTORY | O_CONFIG | O_OUTPUTS | O_ALLOW,
    [SUB_RUN] = O_BCMD | O_CCMD | O_RUNS | O_WORK | O_CONFIG | O_OUTPUTS | O_ALLOW,
    [SUB_RECORD] = O_HISTORY | O_KEEP | O_REPLACE | O_DIRS,
    [SUB_CALIBRATE] = O_CMD | O_RUNS | O_WORK | O_CONFIG | O_EFFECT | O_WRITE,
};
static const char *const sub_names[] = {"gate", "gate run", "gate record", "gate calibrate"};

typedef struct {
    subcommand sub;
    int given;                          /* O_* seen */
    const char *baseline[MAX_DIRS], *current[MAX_DIRS], *dirs[MAX_DIRS];
    int n_baseline, n_current, n_dirs;
    const char *history, *baseline_cmd, *candidate_cmd, *cmd, *work, *config, *write;
    const char *json, *markdown, *junit;
    bool github, allow_config_change, replace;
    int runs, keep;
    double effect;
} gate_args;

const mst_cli_opt mst_cli_gate_opts[] = {
    {"baseline", 0, "DIR...", "finished baseline runs (folders with summary.json); every argument up to the next option",
     O_BASELINE},
    {"current", 0, "DIR...", "finished candidate runs, as --baseline", O_CURRENT},
    {"candidate", 0, "DIR...", "the same as --current", O_CURRENT},
    {"history", 0, "FILE", "a stored baseline (gate record) instead of --baseline", O_HISTORY},
    {"baseline-cmd", 0, "CMD", "run: the command that makes one baseline run", O_BCMD},
    {"candidate-cmd", 0, "CMD", "run: the command that makes one candidate run", O_CCMD},
    {"cmd", 0, "CMD", "calibrate: the command repeated for the A/A runs", O_CMD},
    {"runs", 0, "K", "run, calibrate: runs per side, 1..50", O_RUNS},
    {"work", 0, "DIR", "run, calibrate: folder for the runs' outputs (default: a temporary one)", O_WORK},
    {"config", 0, "FILE", "thresholds (JSON, docs/gate.md)", O_CONFIG},
    {"write", 0, "FILE", "calibrate: save the proposed config", O_WRITE},
    {"effect", 0, "PCT", "calibrate: the slowdown the gate must catch (default 10)", O_EFFECT},
    {"keep", 0, "N", "record: keep the newest N runs", O_KEEP},
    {"replace", 0, NULL, "record: replace the stored runs instead of appending", O_REPLACE},
    {"json", 0, "FILE", "write the verdict as JSON ('-': stdout)", O_OUTPUTS},
    {"markdown", 0, "FILE", "write a Markdown summary ('-': stdout)", O_OUTPUTS},
    {"junit", 0, "FILE", "write JUnit XML ('-': stdout)", O_OUTPUTS},
    {"github", 0, NULL, "::error/::warning lines (on by default when GITHUB_ACTIONS=true)", O_OUTPUTS},
    {"allow-config-change", 0, NULL, "compare runs whose job configs differ", O_ALLOW},
    {NULL},
};

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

typedef struct {
    gate_args *a;
    const char *name;
    const char *list_opt;   /* the DIR... option whose folders are being read, or NULL */
    const char **list;
    int *count, before;
} gate_parse;

/* The DIR... option just ended: it must have named at least one folder. */
static int end_list(gate_parse *p) {
    if (p->list_opt && *p->count == p->before) {
        fprintf(stderr, "mstune %s: --%s needs at least one folder\n", p->name, p->list_opt);
        return 1;
    }
    p->list_opt = NULL;
    return 0;
}

static int on_gate_opt(void *ctx, const mst_cli_opt *o, const char *v) {
    gate_parse *p = ctx;
    gate_args *a = p->a;
    const char *name = p->name;
    if (!o) {
        const char **list = p->list_opt ? p->list : a->sub == SUB_RECORD ? a->dirs : NULL;
        int *count = p->list_opt ? p->count : &a->n_dirs;
        if (!list) {
            fprintf(stderr, "mstune %s: unexpected argument '%s' (see mstune gate --help)\n", name, v);
            return 1;
        }
        if (*count == MAX_DIRS) {
            fprintf(stderr, "mstune %s: more than %d folders%s%s\n", name, MAX_DIRS, p->list_opt ? " after --" : "",
                    p->list_opt ? p->list_opt : "");
            return 1;
        }
        list[(*count)++] = v;
        if (!p->list_opt) a->given |= O_DIRS;
        return 0;
    }
    if (end_list(p)) return 1;
    if (!(allowed[a->sub] & o->id)) {
        fprintf(stderr, "mstune %s: --%s is not an option of this command (see mstune gate --help)\n", name, o->name);
        return 1;
    }
    a->given |= o->id;
    const char *n = o->name;
    switch (o->id) {
    case O_BASELINE:
    case O_CURRENT:
        p->list_opt = n;
        p->list = o->id == O_BASELINE ? a->baseline : a->current;
        p->count = o->id == O_BASELINE ? &a->n_baseline : &a->n_current;
        p->before = *p->count;
        if (strncmp(v, "--", 2) == 0) {     /* getopt hands over the next word, even an option */
            fprintf(stderr, "mstune %s: --%s needs at least one folder\n", name, n);
            return 1;
        }
        return on_gate_opt(ctx, NULL, v);
    case O_HISTORY: a->history = v; break;
    case O_BCMD: a->baseline_cmd = v; break;
    case O_CCMD: a->candidate_cmd = v; break;
    case O_CMD: a->cmd = v; break;
    case O_WORK: a->work = v; break;
    case O_CONFIG: a->config = v; break;
    case O_WRITE: a->write = v; break;
    case O_ALLOW: a->allow_config_change = true; break;
    case O_REPLACE: a->replace = true; break;
    case O_OUTPUTS:
        if (!strcmp(n, "json")) a->json = v;
        else if (!strcmp(n, "markdown")) a->markdown = v;
        else if (!strcmp(n, "junit")) a->junit = v;
        else a->github = true;
        break;
    case O_RUNS:
    case O_KEEP:
    case O_EFFECT: {
        int bad;
        if (o->id == O_RUNS) bad = parse_int(v, 1, MST_GATE_MAX_RUNS, &a->runs);
        else if (o->id == O_KEEP) bad = parse_int(v, 1, 100000, &a->keep);
        else {
            char *end;
            a->effect = strtod(v, &end) / 100;
            bad = end == v || *end || !(a->effect > 0 && a->effect < 10);
        }
        if (bad) {
            fprintf(stderr, "mstune %s: --%s '%s': expected %s\n", name, n, v,
                    o->id == O_RUNS ? "an integer in 1..50" : o->id == O_KEEP ? "a positive integer" : "a percentage in (0, 1000)");
            return 1;
        }
        break;
    }
    default: break;
    }
    return 0;
}

static int parse_args(int argc, char **argv, gate_args *a) {
    memset(a, 0, sizeof(*a));
    a->effect = 0.10;
    int i = 0;
    if (argc > 0 && strcmp(argv[0], "run") == 0) a->sub = SUB_RUN, i = 1;
    else if (argc > 0 && strcmp(argv[0], "record") == 0) a->sub = SUB_RECORD, i = 1;
    else if (argc > 0 && strcmp(argv[0], "calibrate") == 0) a->sub = SUB_CALIBRATE, i = 1;
    const char *name = sub_names[a->sub];
    gate_parse p = {a, name, NULL, NULL, NULL, 0};
    int rc = mst_cli_parse(mst_cli_command("gate"), argc - i, argv + i, on_gate_opt, &p);
    if (rc != MST_EXIT_OK) return rc;
    if (end_list(&p)) return MST_EXIT_INPUT;
    const char *missing = NULL;
    switch (a->sub) {
    case SUB_COMPARE:
        if (!(a->given & (O_BASELINE | O_HISTORY))) missing = "--baseline DIR... or --history FILE";
        else if ((a->given & O_BASELINE) && (a->given & O_HISTORY)) missing = "either --baseline or --history, not both,";
        else if (!(a->given & O_CURRENT)) missing = "--current DIR...";
        break;
    case SUB_RUN:
        if (!a->baseline_cmd || !a->candidate_cmd) missing = "--baseline-cmd CMD and --candidate-cmd CMD";
        break;
    case SUB_RECORD:
        if (!a->history) missing = "--history FILE";
        else if (!a->n_dirs) missing = "at least one run folder";
        break;
    case SUB_CALIBRATE:
        if (!a->cmd) missing = "--cmd CMD";
        break;
    }
    if (missing) {
        fprintf(stderr, "mstune %s: needs %s (see mstune gate --help)\n", name, missing);
        return MST_EXIT_INPUT;
    }
    return MST_EXIT_OK;
}

/* Thresholds: defaults, then --config FILE, then the command line. */
static int load_config(const gate_args *a, mst_gate_config *cfg) {
    mst_gate_config_default(cfg);
    char err[2048];
    if (a->config && mst_gate_config_load(cfg, a->config, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune %s: %s\n", sub_names[a->sub], err);
        return MST_EXIT_INPUT;
    }
    if (a->runs) cfg->runs = a->runs;
    if (a->allow_config_change) cfg->allow_config_change = true;
    return MST_EXIT_OK;
}

/* ---- running commands ---- */

/* Runs `/bin/sh -c cmd` with MSTUNE_GATE_OUT=out_dir, stdout and stderr into log. 0 when it exited
 * 0; otherwise -1 and why. */
static int run_command(const char *cmd, const char *out_dir, const char *log, const char *side, int index, char *why,
                       size_t n) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "cannot fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        char idx[16];
        snprintf(idx, sizeof(idx), "%d", index);
        setenv("MSTUNE_GATE_OUT", out_dir, 1);
        setenv("MSTUNE_GATE_SIDE", side, 1);
        setenv("MSTUNE_GATE_RUN", idx, 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || null < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || dup2(null, 0) < 0) _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            snprintf(why, n, "waiting for the command: %s", strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFEXITED(st)) snprintf(why, n, "command exited %d (log: %s)", WEXITSTATUS(st), log);
    else if (WIFSIGNALED(st)) snprintf(why, n, "command killed by signal %d (log: %s)", WTERMSIG(st), log);
    else snprintf(why, n, "command ended abnormally (log: %s)", log);
    return -1;
}

/* The last lines of a log, to stderr: what a failed command said. */
static void print_log_tail(const char *log, int lines) {
    FILE *f = fopen(log, "rb");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f), start = size > 4096 ? size - 4096 : 0;
        fseek(f, start, SEEK_SET);
        char buf[4097];
        size_t got = fread(buf, 1, sizeof(buf) - 1, f);
        buf[got] = '\0';
        int seen = 0;
        char *p = buf + got;
        while (p > buf && seen <= lines) {
            p--;
            if (*p == '\n' && p + 1 < buf + got) seen++;
        }
        if (*p == '\n') p++;
        fprintf(stderr, "--- last lines of %s ---\n%s%s", log, p, got && buf[got - 1] != '\n' ? "\n" : "");
    }
    fclose(f);
}

/* A fresh work folder: the one given (created if needed) or a new one under $TMPDIR. */
static int make_work(const gate_args *a, char *work, size_t n) {
    if (a->work) {
        snprintf(work, n, "%s", a->work);
        if (mkdir(work, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "mstune %s: cannot create %s: %s\n", sub_names[a->sub], work, strerror(errno));
            return -1;
        }
        return 0;
    }
    const char *t = getenv("TMPDIR");
    snprintf(work, n, "%s/mstune-gate-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(work)) {
        fprintf(stderr, "mstune %s: cannot create a folder under %s: %s\n", sub_names[a->sub], t && *t ? t : "/tmp",
                strerror(errno));
        return -1;
    }
    return 0;
}

/* Runs one command once into WORK/NAME-NN; fills r (a failed run when the command fails). */
static int run_into(const char *sub, const char *cmd, const char *work, const char *side, int index, mst_gate_run *r) {
    char dir[1024], log[1100], why[1400];
    snprintf(dir, sizeof(dir), "%s/%s-%02d", work, side, index);
    snprintf(log, sizeof(log), "%s.log", dir);
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "mstune %s: cannot create the run folder %s: %s (use an empty --work folder)\n", sub, dir,
                strerror(errno));
        mst_gate_run_set_failed(r, dir, "run folder not created");
        return MST_EXIT_INPUT;
    }
    double t0 = (double)mst_prof_now_ns() * 1e-9;
    if (run_command(cmd, dir, log, side, index, why, sizeof(why)) != 0) {
        mst_gate_run_set_failed(r, dir, why);
        fprintf(stderr, "gate: %s run %d failed: %s\n", side, index, why);
        print_log_tail(log, 15);
        return EXIT_JOB_FAILED;
    }
    if (mst_gate_run_load(r, dir) != 0) {
        fprintf(stderr, "gate: %s run %d: %s\n", side, index, r->error);
        print_log_tail(log, 15);
        return EXIT_JOB_FAILED;
    }
    fprintf(stderr, "gate: %s run %d: step time %.4g ms, %.4g samples/s (%.1f s)\n", side, index,
            r->value[MST_GATE_METRIC_STEP_TIME], r->value[MST_GATE_METRIC_THROUGHPUT], (double)mst_prof_now_ns() * 1e-9 - t0);
    return MST_EXIT_OK;
}

/* ---- outputs ---- */

static int write_output(const char *sub, const char *path, void (*write)(FILE *, const mst_gate_result *),
                        const mst_gate_result *r) {
    if (!path) return 0;
    if (strcmp(path, "-") == 0) {
        write(stdout, r);
        return 0;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mstune %s: cannot write %s: %s\n", sub, path, strerror(errno));
        return -1;
    }
    write(f, r);
    if (fclose(f) != 0) {
        fprintf(stderr, "mstune %s: cannot write %s: %s\n", sub, path, strerror(errno));
        return -1;
    }
    return 0;
}

static void json_writer(FILE *f, const mst_gate_result *r) { mst_gate_write_json(f, r); }

static int report(const gate_args *a, const mst_gate_result *r) {
    const char *sub = sub_names[a->sub];
    bool to_stdout = (a->json && !strcmp(a->json, "-")) || (a->markdown && !strcmp(a->markdown, "-")) ||
                     (a->junit && !strcmp(a->junit, "-"));
    if (!to_stdout) mst_gate_print_table(stdout, r);
    int bad = 0;
    bad |= write_output(sub, a->json, json_writer, r);
    bad |= write_output(sub, a->markdown, mst_gate_write_markdown, r);
    bad |= write_output(sub, a->junit, mst_gate_write_junit, r);
    const char *gha = getenv("GITHUB_ACTIONS");
    if (a->github || (gha && strcmp(gha, "true") == 0)) mst_gate_write_annotations(stdout, r);
    fflush(stdout);
    return bad ? MST_EXIT_INPUT : mst_gate_exit_code(r);
}

/* ---- subcommands ---- */

static void free_runs(mst_gate_run *runs, int n) {
    for (int i = 0; i < n; i++) mst_gate_run_free(&runs[i]);
}

/* A run folder that is not there is a mistyped argument (exit 2), not a run that did not finish
 * (a folder without summary.json, exit 4). */
static int check_dirs(const char *sub, const char *opt, const char *const *dirs, int n) {
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(dirs[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "mstune %s: %s%s'%s': %s\n", sub, opt, *opt ? ": " : "", dirs[i],
                    stat(dirs[i], &st) != 0 ? "no such run folder" : "not a folder");
            return MST_EXIT_INPUT;
        }
    }
    return MST_EXIT_OK;
}

static int cmd_compare(const gate_args *a) {
    if (check_dirs("gate", "--baseline", a->baseline, a->n_baseline) != MST_EXIT_OK ||
        check_dirs("gate", "--current", a->current, a->n_current) != MST_EXIT_OK)
        return MST_EXIT_INPUT;
    mst_gate_config cfg;
    int rc = load_config(a, &cfg);
    if (rc != MST_EXIT_OK) return rc;
    mst_gate_run *base = calloc(MAX_DIRS, sizeof(*base)), *cand = calloc(MAX_DIRS, sizeof(*cand));
    if (!base || !cand) {
        free(base);
        free(cand);
        fprintf(stderr, "mstune gate: out of memory\n");
        return MST_EXIT_INPUT;
    }
    for (int i = 0; i < a->n_current; i++) mst_gate_run_load(&cand[i], a->current[i]);
    mst_gate_result r;
    if (a->history) {
        mst_gate_history h;
        char err[2048];
        if (mst_gate_history_load(&h, a->history, err, sizeof(err)) != 0) {
            fprintf(stderr, "mstune gate: %s\n", err);
            free_runs(cand, a->n_current);
            free(base);
            free(cand);
            return MST_EXIT_INPUT;
        }
        rc = mst_gate_compare_history(&cfg, &h, cand, a->n_current, &r);
        mst_gate_history_free(&h);
    } else {
        for (int i = 0; i < a->n_baseline; i++) mst_gate_run_load(&base[i], a->baseline[i]);
        rc = mst_gate_compare(&cfg, base, a->n_baseline, cand, a->n_current, &r);
        free_runs(base, a->n_baseline);
    }
    free_runs(cand, a->n_current);
    free(base);
    free(cand);
    if (rc != 0) {
        fprintf(stderr, "mstune gate: out of memory\n");
        return MST_EXIT_INPUT;
    }
    return report(a, &r);
}

static int cmd_run(const gate_args *a) {
    mst_gate_config cfg;
    int rc = load_config(a, &cfg);
    if (rc != MST_EXIT_OK) return rc;
    char work[900];
    if (make_work(a, work, sizeof(work)) != 0) return MST_EXIT_INPUT;
    int k = cfg.runs;
    fprintf(stderr, "gate: %d baseline and %d candidate runs, interleaved, in %s\n", k, k, work);
    mst_gate_run base[MST_GATE_MAX_RUNS], cand[MST_GATE_MAX_RUNS];
    int nb = 0, nc = 0;
    rc = MST_EXIT_OK;
    /* interleaved and counterbalanced (baseline first in odd pairs, candidate first in even ones):
     * whatever the second run of a pair meets (the first one's writeback, a warmer cache) falls on
     * both sides alike, where baseline-then-candidate every time would give it to the candidate */
    for (int i = 1; i <= k && rc == MST_EXIT_OK; i++) {
        const bool base_first = i % 2 == 1;
        if (base_first) rc = run_into("gate run", a->baseline_cmd, work, "baseline", i, &base[nb++]);
        if (rc == MST_EXIT_OK) rc = run_into("gate run", a->candidate_cmd, work, "candidate", i, &cand[nc++]);
        if (rc == MST_EXIT_OK && !base_first) rc = run_into("gate run", a->baseline_cmd, work, "baseline", i, &base[nb++]);
    }
    if (rc == MST_EXIT_INPUT) {
        free_runs(base, nb);
        free_runs(cand, nc);
        return rc;
    }
    mst_gate_result r;
    int cmp = mst_gate_compare(&cfg, base, nb, cand, nc, &r);
    free_runs(base, nb);
    free_runs(cand, nc);
    if (cmp != 0) {
        fprintf(stderr, "mstune gate run: out of memory\n");
        return MST_EXIT_INPUT;
    }
    fprintf(stderr, "gate: runs kept in %s\n", work);
    return report(a, &r);
}

static int cmd_record(const gate_args *a) {
    if (check_dirs("gate record", "", a->dirs, a->n_dirs) != MST_EXIT_OK) return MST_EXIT_INPUT;
    mst_gate_history h;
    char err[2048];
    if (a->replace || access(a->history, F_OK) != 0) {
        mst_gate_history_init(&h);
    } else if (mst_gate_history_load(&h, a->history, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune gate record: %s\n", err);
        return MST_EXIT_INPUT;
    }
    mst_gate_run *runs = calloc(MAX_DIRS, sizeof(*runs));
    if (!runs) {
        mst_gate_history_free(&h);
        fprintf(stderr, "mstune gate record: out of memory\n");
        return MST_EXIT_INPUT;
    }
    int failed = 0;
    for (int i = 0; i < a->n_dirs; i++)
        if (mst_gate_run_load(&runs[i], a->dirs[i]) != 0) {
            fprintf(stderr, "mstune gate record: %s\n", runs[i].error);
            failed++;
        }
    int rc = MST_EXIT_OK, before = h.n;
    if (failed) {
        rc = EXIT_JOB_FAILED;
    } else if (mst_gate_history_add(&h, runs, a->n_dirs, a->keep ? a->keep : 30, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune gate record: %s (start a new history with --replace)\n", err);
        rc = EXIT_INCONCLUSIVE;
    } else if (mst_gate_history_save(&h, a->history, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune gate record: %s\n", err);
        rc = MST_EXIT_INPUT;
    } else {
        printf("mstune gate record: %s holds %d run%s (%d added%s)\n", a->history, h.n, h.n == 1 ? "" : "s", a->n_dirs,
               before + a->n_dirs > h.n ? ", oldest dropped" : "");
        if (h.n < 5) printf("  a comparison needs at least 5 recorded runs\n");
    }
    free_runs(runs, a->n_dirs);
    free(runs);
    mst_gate_history_free(&h);
    return rc;
}

static int cmd_calibrate(const gate_args *a) {
    mst_gate_config cfg;
    gate_args no_runs = *a;
    no_runs.runs = 0;           /* here --runs counts calibration runs, not the gate's runs per side */
    int rc = load_config(&no_runs, &cfg);
    if (rc != MST_EXIT_OK) return rc;
    int n = a->runs ? a->runs : 10;
    char work[900];
    if (make_work(a, work, sizeof(work)) != 0) return MST_EXIT_INPUT;
    fprintf(stderr, "gate calibrate: %d runs in %s\n", n, work);
    mst_gate_run runs[MST_GATE_MAX_RUNS];
    int done = 0;
    for (int i = 1; i <= n && rc == MST_EXIT_OK; i++) rc = run_into("gate calibrate", a->cmd, work, "run", i, &runs[done++]);
    if (rc != MST_EXIT_OK) {
        free_runs(runs, done);
        return rc;
    }
    mst_gate_calibration c;
    char err[512];
    if (mst_gate_calibrate(&cfg, runs, done, a->effect, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune gate calibrate: %s\n", err);
        free_runs(runs, done);
        return MST_EXIT_INPUT;
    }
    printf("mstune gate calibrate: %d A/A runs of: %s\n\n", c.n, a->cmd);
    printf("%-14s %-10s %12s %14s\n", "metric", "unit", "median", "run-to-run CV");
    for (int m = 0; m < MST_GATE_METRIC_COUNT; m++) {
        if (isnan(c.median[m])) continue;
        mst_gate_result named = {0};        /* the quality row named after the runs' metric */
        for (int i = 0; i < done && !named.quality.name[0]; i++)
            if (runs[i].ok) named.quality = runs[i].quality;
        mst_gate_metric_desc dd = mst_gate_desc(&named, m), *d = &dd;
        if (d->rule == MST_GATE_RULE_QUALITY)
            printf("%-14s %-10s %12.2f %11.2f %s\n", d->label, d->unit, c.median[m] * d->display_scale, c.cv[m],
                   named.quality.diff_unit[0] ? named.quality.diff_unit : "pt");
        else printf("%-14s %-10s %12.4g %13.2f%%\n", d->label, d->unit, c.median[m] * d->display_scale, 100 * c.cv[m]);
    }
    double cv = c.cv[MST_GATE_METRIC_STEP_TIME];
    printf("\ntiming threshold: max(%g%%, %g x %.2f%%) = %.2f%%\n", 100 * cfg.min_effect, cfg.cv_multiplier, 100 * cv,
           100 * c.threshold);
    if (c.effect <= c.threshold)
        printf("a %.1f%% slowdown is within the threshold: the gate can only WARN on it; ask about a larger --effect\n",
               100 * c.effect);
    else if (c.runs_needed > 0)
        printf("to FAIL a %.1f%% slowdown with 80%% power: %d runs per side (power with runs = %d: %.0f%%)\n", 100 * c.effect,
               c.runs_needed, cfg.runs, 100 * c.power_at_config_runs);
    else
        printf("a %.1f%% slowdown needs more than %d runs per side for 80%% power (power with runs = %d: %.0f%%)\n",
               100 * c.effect, MST_GATE_MAX_RUNS, cfg.runs, 100 * c.power_at_config_runs);
    /* A/A sanity check: the odd runs against the even ones should not fail */
    if (done < 10) {
        printf("A/A check (odd vs even runs): needs at least 10 runs\n");
    } else {
        mst_gate_run odd[MST_GATE_MAX_RUNS], even[MST_GATE_MAX_RUNS];
        int no = 0, ne = 0;
        for (int i = 0; i < done; i++) {
            if (i % 2) even[ne++] = runs[i];
            else odd[no++] = runs[i];
        }
        mst_gate_result r;
        if (mst_gate_compare(&cfg, odd, no, even, ne, &r) == 0)
            printf("A/A check, odd vs even runs: %s (step time %+.1f%%, p %.2g)\n", mst_gate_verdict_name(r.verdict),
                   100 * r.metric[MST_GATE_METRIC_STEP_TIME].change, r.metric[MST_GATE_METRIC_STEP_TIME].p_value);
    }
    cJSON *j = mst_gate_config_to_json(&c.proposed);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    printf("\nproposed config%s:\n%s\n", a->write ? "" : " (save it with --write FILE)", text ? text : "?");
    if (a->write && text) {
        FILE *f = fopen(a->write, "w");
        if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0) {
            fprintf(stderr, "mstune gate calibrate: cannot write %s: %s\n", a->write, strerror(errno));
            rc = MST_EXIT_INPUT;
        } else {
            printf("wrote %s\n", a->write);
        }
    }
    cJSON_free(text);
    free_runs(runs, done);
    return rc;
}

int mst_cmd_gate(int argc, char **argv) {
    if (argc == 0 || !strcmp(argv[0], "help")) {
        mst_cli_print_help(argc == 0 ? stderr : stdout, mst_cli_command("gate"));
        return argc == 0 ? MST_EXIT_INPUT : MST_EXIT_OK;
    }
    gate_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != MST_EXIT_OK) return rc;
    switch (a.sub) {
    case SUB_RUN: return cmd_run(&a);
    case SUB_RECORD: return cmd_record(&a);
    case SUB_CALIBRATE: return cmd_calibrate(&a);
    default: return cmd_compare(&a);
    }
}
