/* cmd_list.c — `mstune list [workloads|datasets|ops|keys]`: what this build offers. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "runtime/op.h"
#include "workloads/zoo.h"

static void list_workloads(void) {
    printf("workloads (model.name):\n");
    for (int i = 0; i < mst_zoo_count; i++) printf("  %-6s %s\n", mst_zoo[i].name, mst_zoo[i].description);
    printf("job files: workloads/jobs/quickstart.yaml, fashion_mlp.yaml, fashion_cnn.yaml\n");
}

static void list_datasets(void) {
    printf("datasets (data.dataset):\n");
    printf("  %-14s Fashion-MNIST, 60000 train / 10000 test 28x28 grey images, 10 classes; IDX files from Debian's\n"
           "  %-14s dataset-fashion-mnist package in /usr/share/datasets/fashion-mnist (data.path)\n",
           "fashion_mnist", "");
    printf("  %-14s generated samples of any shape and class count (data.synthetic.*), seeded\n", "synthetic");
}

static void list_ops(void) {
    printf("ops:\n  %-20s %6s %7s  %-24s %s\n", "name", "inputs", "outputs", "cpu dtypes", "backward");
    for (int op = 0; op < MST_OP_COUNT; op++) {
        const mst_op_desc *d = mst_op_table[op];
        char dtypes[64] = "";
        size_t k = 0;
        for (int t = 0; t < MST_DTYPE_COUNT; t++)
            if (d->cpu[t]) k += (size_t)snprintf(dtypes + k, sizeof(dtypes) - k, "%s%s", k ? "," : "", mst_dtype_name((mst_dtype)t));
        char arity[16];
        if (d->min_inputs == d->max_inputs) snprintf(arity, sizeof(arity), "%d", d->min_inputs);
        else snprintf(arity, sizeof(arity), "%d..%d", d->min_inputs, d->max_inputs);
        printf("  %-20s %6s %7d  %-24s %s\n", d->name, arity, d->n_outputs, (d->flags & MST_OPF_VIEW) ? "(view)" : dtypes,
               d->backward ? "yes" : "-");
    }
}

int mst_cmd_list(int argc, char **argv) {
    const char *what = argc > 0 ? argv[0] : "all";
    bool all = strcmp(what, "all") == 0;
    if (argc > 1 || !(all || !strcmp(what, "workloads") || !strcmp(what, "datasets") || !strcmp(what, "ops") ||
                      !strcmp(what, "keys"))) {
        fprintf(stderr, "usage: mstune list [workloads|datasets|ops|keys]\n");
        return MST_EXIT_INPUT;
    }
    if (all || !strcmp(what, "workloads")) list_workloads();
    if (all) putchar('\n');
    if (all || !strcmp(what, "datasets")) list_datasets();
    if (all) putchar('\n');
    if (all || !strcmp(what, "ops")) list_ops();
    if (!strcmp(what, "keys")) mst_job_schema_print(stdout);
    if (all) printf("\njob keys: mstune list keys\n");
    return MST_EXIT_OK;
}
