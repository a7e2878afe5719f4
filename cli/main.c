/* main.c — the `mstune` program: dispatches to one file per subcommand (cli/cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mstune <command> [args]\n"
            "\n"
            "commands:\n"
            "  train JOB [--set key=value]... [--out DIR] [--resume]\n"
            "                 train (instrumentation off); writes DIR/summary.json and DIR/checkpoint.bin\n"
            "                 (DIR defaults to out/<job name>)\n"
            "  profile JOB [--set key=value]... [--out DIR]\n"
            "                 train with instrumentation on; writes DIR/profile.db (SQLite), DIR/trace.json\n"
            "                 (Chrome trace), DIR/summary.json with the per-step time breakdown and the\n"
            "                 report in DIR/report/\n"
            "  report PROFILE.db [-o DIR]\n"
            "                 render a profile: index.html (works offline), PNG charts (gnuplot), flame graph,\n"
            "                 summary.json and summary.md (DIR defaults to report/ beside the profile)\n"
            "  compare A/profile.db B/profile.db [-o DIR]\n"
            "                 two profiles side by side: step time, categories, top ops, memory, accuracy\n"
            "  gate --baseline DIR... --current DIR... | gate run --baseline-cmd CMD --candidate-cmd CMD\n"
            "                 CI performance regression gate over repeated runs (docs/gate.md); exit 0 pass,\n"
            "                 1 regression, 2 usage error, 3 inconclusive, 4 a run failed\n"
            "  advise JOB [--set key=value]... [--budget-minutes M] [--tolerance PP] [--repeats N] [-o DIR]\n"
            "                 profile the job, diagnose it, and verify each proposed change by running it\n"
            "                 against the job's own accuracy: ranked table, DIR/tuned.yaml, DIR/report/\n"
            "  graph JOB [--set key=value]... [--dot FILE] [--after-only]\n"
            "                 trace one training step in graph mode; print the IR before/after the passes\n"
            "  export-trace PROFILE.db TRACE.json\n"
            "                 Chrome trace (Perfetto, chrome://tracing) from a profile\n"
            "  validate JOB [--set key=value]...\n"
            "                 check a job file: every error as file:line:column and what was expected\n"
            "  list [workloads|datasets|ops|keys]\n"
            "                 what this build offers\n"
            "  version        print the version\n"
            "\n"
            "exit codes: 0 ok, 1 the run failed (non-finite loss) or a regression, 2 bad input\n"
            "            (gate: 3 inconclusive, 4 a run failed)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return MST_EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return mst_cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "profile") == 0) return mst_cmd_profile(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0) return mst_cmd_report(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0) return mst_cmd_compare(argc - 2, argv + 2);
    if (strcmp(cmd, "gate") == 0) return mst_cmd_gate(argc - 2, argv + 2);
    if (strcmp(cmd, "graph") == 0) return mst_cmd_graph(argc - 2, argv + 2);
    if (strcmp(cmd, "advise") == 0) return mst_cmd_advise(argc - 2, argv + 2);
    if (strcmp(cmd, "export-trace") == 0) return mst_cmd_export_trace(argc - 2, argv + 2);
    if (strcmp(cmd, "validate") == 0) return mst_cmd_validate(argc - 2, argv + 2);
    if (strcmp(cmd, "list") == 0) return mst_cmd_list(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("mstune 0.1.0\n");
        return MST_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return MST_EXIT_OK;
    }
    fprintf(stderr, "mstune: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return MST_EXIT_INPUT;
}
