/* commands.h — the `mstune` subcommands (one file each) and the pieces they share. */
#ifndef MST_CLI_COMMANDS_H
#define MST_CLI_COMMANDS_H

#include <stdbool.h>
#include <stdio.h>

#include "cli/job.h"
#include "cli/options.h"
#include "runtime/status.h"

/* Exit codes (DESIGN.md, docs/guarantees.md): 0 ok, 1 the work failed (a diverged run, a failed
 * gate), 2 bad input, 75 the output folder is in use by another run (EX_TEMPFAIL), 74 an I/O failure writing
 * outputs (disk full, read-only folder: sysexits' EX_IOERR), 128 + signal after a clean stop on
 * SIGINT/SIGTERM (Ctrl-C: 130) with the outputs written. */
enum {
    MST_EXIT_OK = 0, MST_EXIT_FAIL = 1, MST_EXIT_INPUT = 2, MST_EXIT_BUSY = 75, MST_EXIT_IO = 74,
    MST_EXIT_SIGNAL_BASE = 128,
};

/* The exit code for a failed mst_train: 1 diverged, 74 I/O, 2 the rest (bad input). */
static inline int mst_exit_for_status(int status) {
    return status == MST_ERR_NONFINITE ? MST_EXIT_FAIL : status == MST_ERR_IO ? MST_EXIT_IO : MST_EXIT_INPUT;
}

/* What every job-taking command parses: JOB [--set k=v]... [--out DIR] [--resume]. */
typedef struct {
    const char *job_path;
    mst_job job;                /* loaded, overridden and validated */
    char out_dir[1024];         /* --out, or out/<job name> */
    bool out_given;             /* --out was on the command line */
    bool resume;
    int nproc;                  /* --nproc N (0: not given) */
} mst_job_args;

/* Longest --out accepted: room is left for the file names joined to it (longer is refused, exit 2). */
#define MST_OUT_DIR_MAX 900

/* Parses argv after the command name by the command's table (cli/commands.c); on any problem
 * prints "mstune CMD: ..." and returns 2; --help prints the help and exits 0. */
int mst_job_args_parse(const char *cmd, int argc, char **argv, bool allow_resume, mst_job_args *a);
/* The same, with the command's own options handed to `own` (it also sees every --set, in order). */
int mst_job_args_parse_with(const char *cmd, int argc, char **argv, mst_cli_on_opt own, void *own_ctx, mst_job_args *a);

int mst_cmd_train(int argc, char **argv);
int mst_cmd_validate(int argc, char **argv);
int mst_cmd_list(int argc, char **argv);
int mst_cmd_profile(int argc, char **argv);
int mst_cmd_export_trace(int argc, char **argv);
int mst_cmd_export_csv(int argc, char **argv);
int mst_cmd_report(int argc, char **argv);
int mst_cmd_compare(int argc, char **argv);
int mst_cmd_gate(int argc, char **argv);
int mst_cmd_graph(int argc, char **argv);
int mst_cmd_advise(int argc, char **argv);
int mst_cmd_version(int argc, char **argv);
int mst_cmd_man(int argc, char **argv);
int mst_cmd_completion(int argc, char **argv);

/* the commands' own options (beside their code) */
extern const mst_cli_opt mst_cli_advise_opts[];
extern const mst_cli_opt mst_cli_graph_opts[];
extern const mst_cli_opt mst_cli_gate_opts[];

#endif
