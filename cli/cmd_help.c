/* cmd_help.c — `mstune version`, `mstune man` (mstune(1) in roff) and `mstune completion bash`:
 * the program describing itself, from the command tables (cli/commands.c, cli/options.c). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

#ifndef MSTUNE_VERSION
#define MSTUNE_VERSION "0.1.0"
#endif

int mst_cmd_version(int argc, char **argv) {
    if (mst_cli_parse(mst_cli_command("version"), argc, argv, NULL, NULL) != MST_EXIT_OK) return MST_EXIT_INPUT;
    printf("mstune " MSTUNE_VERSION "\n");
    return MST_EXIT_OK;
}

static int no_positional(void *ctx, const mst_cli_opt *o, const char *value) {
    if (o) return 0;
    fprintf(stderr, "mstune %s: unexpected argument '%s'\n", (const char *)ctx, value);
    return 1;
}

int mst_cmd_man(int argc, char **argv) {
    if (mst_cli_parse(mst_cli_command("man"), argc, argv, no_positional, "man") != MST_EXIT_OK) return MST_EXIT_INPUT;
    mst_cli_print_man(stdout);
    return MST_EXIT_OK;
}

static int shell_arg(void *ctx, const mst_cli_opt *o, const char *value) {
    if (o) return 0;
    if (strcmp(value, "bash") != 0) {
        fprintf(stderr, "mstune completion: '%s': only bash is supported\n", value);
        return 1;
    }
    *(bool *)ctx = true;
    return 0;
}

int mst_cmd_completion(int argc, char **argv) {
    bool bash = false;
    if (mst_cli_parse(mst_cli_command("completion"), argc, argv, shell_arg, &bash) != MST_EXIT_OK) return MST_EXIT_INPUT;
    if (!bash) {
        fprintf(stderr, "usage: mstune completion bash\n");
        return MST_EXIT_INPUT;
    }
    mst_cli_print_bash_completion(stdout);
    return MST_EXIT_OK;
}

