/* options.h — one table per subcommand (its options, synopsis, description, example) from which
 * the parsing (getopt_long), `--help`, the man page mstune(1) and the bash completion are all made,
 * so none of them can drift from another. Commands keep their own logic in cli/cmd_*.c; they
 * receive each option as it is parsed through a callback.
 *
 *   static int on_opt(void *ctx, const mst_cli_opt *o, const char *value) {
 *       if (o && o->id == OPT_DOT) ((my_args *)ctx)->dot = value;
 *       return 0;                           // nonzero: an error was printed, exit 2
 *   }
 *   rc = mst_cli_parse(mst_cli_command("graph"), argc, argv, on_opt, &args);
 */
#ifndef MST_CLI_OPTIONS_H
#define MST_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    const char *name;       /* long name without "--" */
    char short_name;        /* 0: none */
    const char *metavar;    /* NULL: a flag without value */
    const char *help;       /* one line */
    int id;                 /* what the command's callback switches on */
} mst_cli_opt;

/* A command's option sets: its own, and the job options every job-taking command shares. */
enum { MST_CLI_SET_OPT = 1 << 0, MST_CLI_OUT_OPT = 1 << 1, MST_CLI_RESUME_OPT = 1 << 2, MST_CLI_NPROC_OPT = 1 << 3 };

/* the ids of the shared job options (a command's own ids start at 1) */
enum { MST_CLI_OPT_SET = 1000, MST_CLI_OPT_OUT, MST_CLI_OPT_RESUME, MST_CLI_OPT_NPROC };

typedef struct {
    const char *name;           /* "train" */
    const char *synopsis;       /* after "mstune NAME ": "JOB.yaml [options]" */
    const char *summary;        /* one line, for `mstune --help` and the man page's list */
    const char *description;    /* a paragraph (may hold newlines) */
    const mst_cli_opt *opts;    /* its own options, ended by {NULL} */
    unsigned shared;            /* MST_CLI_* option sets it also takes */
    const char *example;        /* one or more command lines, newline-separated */
    int (*run)(int argc, char **argv);   /* argv after the command name */
    const char *const *words;   /* positional words it completes (list's topics), NULL-terminated */
} mst_cli_command_desc;

extern const mst_cli_command_desc mst_cli_commands[];
extern const int mst_cli_command_count;

/* The command of that name, or NULL. */
const mst_cli_command_desc *mst_cli_command(const char *name);

/* The closest of `n` candidate words to `word` by edit distance (at most 2 edits, or a unique
 * prefix), or NULL: the "did you mean" of commands and options. */
const char *mst_cli_closest(const char *word, const char *const *cands, int n);

/* Called for each option (o set; value NULL for a flag) and each positional argument (o NULL), in
 * command-line order. Returns 0, or nonzero after printing its own error (the parse then fails). */
typedef int (*mst_cli_on_opt)(void *ctx, const mst_cli_opt *o, const char *value);

/* Parses argv after the command name with getopt_long: --opt value, --opt=value, -o value,
 * unique prefixes of long options. --help/-h prints the command's help to stdout and exits 0.
 * Unknown options and missing values print "mstune CMD: ..." with a hint and return 2. */
int mst_cli_parse(const mst_cli_command_desc *c, int argc, char **argv, mst_cli_on_opt cb, void *ctx);

void mst_cli_print_help(FILE *f, const mst_cli_command_desc *c);
void mst_cli_print_usage(FILE *f);      /* `mstune --help`: every command */
void mst_cli_print_man(FILE *f);        /* mstune(1) in roff (man(7) macros) */
void mst_cli_print_bash_completion(FILE *f);

#endif
