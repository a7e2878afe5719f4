/* commands.c — the table of `mstune` subcommands: what each is called, takes, does and an
 * example. main.c dispatches from it; options.c makes --help, the man page and the bash
 * completion from it. A command's own options live beside its code (cli/cmd_*.c). */
#include "cli/commands.h"
#include "cli/options.h"

static const mst_cli_opt report_opts[] = {
    {"out", 'o', "DIR", "output folder (default: report/ beside the profile)", MST_CLI_OPT_OUT},
    {NULL},
};
static const mst_cli_opt compare_opts[] = {
    {"out", 'o', "DIR", "also write DIR/index.html and DIR/compare.json", MST_CLI_OPT_OUT},
    {NULL},
};
static const char *const list_words[] = {"workloads", "datasets", "ops", "amp", "cpu", "devices", "keys", NULL};
static const char *const gate_words[] = {"run", "record", "calibrate", NULL};
static const char *const completion_words[] = {"bash", NULL};
static const mst_cli_opt no_opts[] = {{NULL}};

const mst_cli_command_desc mst_cli_commands[] = {
    {"train", "JOB.yaml [options]", "train (instrumentation off): summary.json, checkpoint.bin",
     "Train the job with instrumentation off. Writes DIR/summary.json (throughput, median step time, accuracy,\n"
     "peak memory, loss curve) and DIR/checkpoint.bin, and prints a short summary. Ctrl-C stops after the\n"
     "current step and writes the outputs; --resume continues from the checkpoint.",
     no_opts, MST_CLI_SET_OPT | MST_CLI_OUT_OPT | MST_CLI_RESUME_OPT | MST_CLI_NPROC_OPT,
     "mstune train workloads/jobs/fashion_mlp.yaml --set train.epochs=2 --out out/mlp2", mst_cmd_train, NULL},
    {"profile", "JOB.yaml [options]", "train instrumented: profile.db, trace.json, summary.json, report/",
     "Train the job with the profiler on. Writes DIR/profile.db (SQLite, docs/profile-schema.md), DIR/trace.json\n"
     "(Chrome trace: Perfetto, chrome://tracing, HTA), DIR/summary.json with the per-step time breakdown and the\n"
     "HTML report in DIR/report/. profile.level, profile.trace_steps and the other profile.* keys tune it.",
     no_opts, MST_CLI_SET_OPT | MST_CLI_OUT_OPT | MST_CLI_NPROC_OPT, "mstune profile workloads/jobs/quickstart.yaml\n"
     "mstune profile workloads/jobs/fashion_cnn.yaml --set train.steps=50 --set profile.trace_steps=5",
     mst_cmd_profile, NULL},
    {"report", "PROFILE.db|RUN_DIR [options]", "render a profile as an offline HTML report",
     "Render a stored profile as a self-contained folder: index.html (works offline), PNG charts (gnuplot),\n"
     "a flame graph, summary.json and summary.md. The summary.json beside the profile is read when present.\n"
     "RUN_DIR means RUN_DIR/profile.db. Rank 0's profile of `profile --nproc N` also gets a Ranks section\n"
     "from every rank's RUN_DIR.rank<k>/profile.db.",
     report_opts, 0, "mstune report out/quickstart/profile.db -o /tmp/quickstart-report", mst_cmd_report, NULL},
    {"compare", "A/profile.db B/profile.db [options]", "two profiles side by side",
     "Put two profiles side by side: the job keys that differ, step time, categories, top ops, memory and\n"
     "accuracy. Prints a table; with --out also writes an HTML page and compare.json.",
     compare_opts, 0, "mstune compare out/eager/profile.db out/graph/profile.db -o out/eager-vs-graph", mst_cmd_compare,
     NULL},
    {"advise", "JOB.yaml [options]", "diagnose, run verified trials, write tuned.yaml and the report",
     "Profile the job, diagnose it, and verify each proposed change by running it as its own trial against the\n"
     "job's accuracy baseline. Writes DIR/advice.md, DIR/advice.json, DIR/tuned.yaml (the accepted changes) and\n"
     "DIR/report/index.html (docs/advisor.md).",
     mst_cli_advise_opts, MST_CLI_SET_OPT | MST_CLI_NPROC_OPT, "mstune advise workloads/scenarios/dispatch_bound.yaml -o out/advise",
     mst_cmd_advise, NULL},
    {"gate", "--baseline DIR... --current DIR... [options] | run | record | calibrate",
     "CI performance regression gate over repeated runs",
     "Compare repeated runs of a baseline and a candidate with a rank test and a minimum effect (docs/gate.md).\n"
     "  mstune gate --baseline DIR... --current DIR...          finished runs\n"
     "  mstune gate --history FILE --current DIR...             a stored baseline\n"
     "  mstune gate run --baseline-cmd CMD --candidate-cmd CMD   run both, interleaved, then compare\n"
     "  mstune gate record --history FILE DIR...                append runs to a stored baseline\n"
     "  mstune gate calibrate --cmd CMD [--runs n]              A/A repeats: noise, thresholds, runs needed\n"
     "Commands run via /bin/sh -c with MSTUNE_GATE_OUT set to a fresh folder where they must write summary.json.\n"
     "Exit codes: 0 pass or warn, 1 regression, 2 usage or config error, 3 inconclusive, 4 a run failed.",
     mst_cli_gate_opts, 0,
     "mstune gate --baseline out/base-* --current out/cand-* --markdown -\n"
     "mstune gate run --runs 5 --baseline-cmd 'git stash; make; ./build/mstune train job.yaml --out $MSTUNE_GATE_OUT' \\\n"
     "    --candidate-cmd './build/mstune train job.yaml --out $MSTUNE_GATE_OUT'",
     mst_cmd_gate, gate_words},
    {"graph", "JOB.yaml [options]", "print one training step's graph-mode IR before and after the passes",
     "Trace one training step of the job in graph mode (its amp level, loss scaling, clipping and accumulation\n"
     "included) and print the IR before and after the passes, with the plan's nodes, kernels and arena bytes.",
     mst_cli_graph_opts, MST_CLI_SET_OPT, "mstune graph workloads/jobs/quickstart.yaml --after-only --dot step.dot",
     mst_cmd_graph, NULL},
    {"export-trace", "PROFILE.db TRACE.json", "Chrome trace (Perfetto, chrome://tracing, HTA) from a profile",
     "Write a profile's traced steps as Chrome trace JSON: ProfilerStep#N slices, op slices with input shapes\n"
     "and dtypes, forward-to-backward flow events. Open it at https://ui.perfetto.dev or chrome://tracing.",
     no_opts, 0, "mstune export-trace out/quickstart/profile.db /tmp/quickstart.trace.json", mst_cmd_export_trace, NULL},
    {"export-csv", "PROFILE.db DIR", "op statistics and steps as CSV (ops.csv, steps.csv)",
     "Write a profile's per-op kernel statistics (DIR/ops.csv, largest total time first) and its steps with the\n"
     "per-category breakdown (DIR/steps.csv), one column per database column (docs/profile-schema.md; times in ns),\n"
     "for spreadsheets and pandas, as nsys stats and TensorBoard's op view offer.",
     no_opts, 0, "mstune export-csv out/quickstart/profile.db out/quickstart/csv", mst_cmd_export_csv, NULL},
    {"validate", "JOB.yaml [options]", "check a job file without running it",
     "Check a job file and its --set overrides against the schema: every error as file:line:column and what was\n"
     "expected.",
     no_opts, MST_CLI_SET_OPT, "mstune validate workloads/jobs/fashion_cnn.yaml --set amp.level=O2", mst_cmd_validate,
     NULL},
    {"list", "[workloads|datasets|ops|amp|cpu|devices|keys]", "what this build offers",
     "List the workloads, datasets, ops (with their dtypes), the AMP policy per op, or every job key with its\n"
     "type, default and range.",
     no_opts, 0, "mstune list keys", mst_cmd_list, list_words},
    {"version", "", "print the version", "Print the version (also: mstune -V, mstune --version).", no_opts, 0,
     "mstune version", mst_cmd_version, NULL},
    {"man", "", "print the manual page mstune(1) (roff)",
     "Print the manual page, made from the same tables as --help (make install puts it in share/man/man1).",
     no_opts, 0, "mstune man | man -l -", mst_cmd_man, NULL},
    {"completion", "bash", "print the bash completion script",
     "Print a bash completion script for the commands, their options and the job keys of --set (with their\n"
     "values where they are enums). make install puts it in share/bash-completion/completions.",
     no_opts, 0, "source <(mstune completion bash)", mst_cmd_completion, completion_words},
};
const int mst_cli_command_count = (int)(sizeof(mst_cli_commands) / sizeof(mst_cli_commands[0]));
