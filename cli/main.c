/* main.c — the `mstune` program: dispatches to one file per subcommand (cli/cmd_*.c) through the
 * command table (cli/commands.c), which also makes --help, the man page and the completion. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        mst_cli_print_usage(stderr);
        return MST_EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) return mst_cmd_version(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc == 3) {        /* mstune help COMMAND */
            const mst_cli_command_desc *c = mst_cli_command(argv[2]);
            if (c) {
                mst_cli_print_help(stdout, c);
                return MST_EXIT_OK;
            }
            fprintf(stderr, "mstune help: no command '%s'\n", argv[2]);
            return MST_EXIT_INPUT;
        }
        mst_cli_print_usage(stdout);
        return MST_EXIT_OK;
    }
    const mst_cli_command_desc *c = mst_cli_command(cmd);
    if (c) return c->run(argc - 2, argv + 2);

    const char *names[64];
    int n = 0;
    for (int i = 0; i < mst_cli_command_count && n < 64; i++) names[n++] = mst_cli_commands[i].name;
    const char *near = mst_cli_closest(cmd, names, n);
    if (cmd[0] == '-') fprintf(stderr, "mstune: '%s' is not a command; options come after the command\n", cmd);
    else fprintf(stderr, "mstune: unknown command '%s'", cmd);
    if (cmd[0] != '-') {
        if (near) fprintf(stderr, "; did you mean 'mstune %s'?", near);
        fputc('\n', stderr);
    }
    fprintf(stderr, "(mstune --help lists the commands)\n");
    return MST_EXIT_INPUT;
}
