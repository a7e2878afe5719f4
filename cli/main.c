/* main.c — the `mstune` program. Subcommands grow with the modules: `list` prints what the
 * runtime offers; train/profile/advise/report/gate arrive with their issues. */
#include <stdio.h>
#include <string.h>

#include "runtime/context.h"
#include "runtime/op.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mstune <command> [args]\n"
            "\n"
            "commands:\n"
            "  list [ops]    the op table: name, arity, dtypes with CPU kernels, differentiable\n"
            "  version       print the version\n");
}

static int cmd_list_ops(void) {
    printf("%-20s %6s %7s  %-22s %s\n", "op", "inputs", "outputs", "cpu dtypes", "backward");
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        if (!d) continue;
        char dtypes[64] = "";
        size_t k = 0;
        for (int t = 0; t < MST_DTYPE_COUNT; t++)
            if (d->cpu[t]) k += (size_t)snprintf(dtypes + k, sizeof(dtypes) - k, "%s%s", k ? "," : "", mst_dtype_name((mst_dtype)t));
        char arity[16];
        if (d->min_inputs == d->max_inputs) snprintf(arity, sizeof(arity), "%d", d->min_inputs);
        else snprintf(arity, sizeof(arity), "%d..%d", d->min_inputs, d->max_inputs);
        printf("%-20s %6s %7d  %-22s %s\n", d->name, arity, d->n_outputs,
               (d->flags & MST_OPF_VIEW) ? "(view)" : dtypes, d->backward ? "yes" : "-");
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (strcmp(cmd, "list") == 0) {
        if (argc == 2 || strcmp(argv[2], "ops") == 0) return cmd_list_ops();
        fprintf(stderr, "mstune list: unknown list '%s' (expected: ops)\n", argv[2]);
        return 2;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("mstune 0.1.0\n");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "mstune: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
