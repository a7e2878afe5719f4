/* options.c — parsing (getopt_long), help, the man page and the bash completion, all from the
 * command tables in cli/commands.c. The trade-off: getopt_long's "-" mode (non-options returned in
 * order, never permuted) so that `gate --baseline A B --current C` keeps its folder lists, at the
 * cost of handling "--" ourselves. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/options.h"

#ifndef MSTUNE_VERSION
#define MSTUNE_VERSION "0.1.0"
#endif

static const mst_cli_opt opt_set = {"set", 0, "KEY=VALUE",
                                    "override a job key after the file is read (repeatable; keys: mstune list keys)",
                                    MST_CLI_OPT_SET};
static const mst_cli_opt opt_out = {"out", 'o', "DIR", "output folder (default: out/<job name>)", MST_CLI_OPT_OUT};
static const mst_cli_opt opt_resume = {"resume", 0, NULL, "continue from DIR/checkpoint.bin where the run stopped",
                                       MST_CLI_OPT_RESUME};
static const mst_cli_opt opt_nproc = {"nproc", 0, "N",
                                      "data parallel: run N ranks on this machine through mpirun (docs/distributed.md)",
                                      MST_CLI_OPT_NPROC};
static const mst_cli_opt opt_help = {"help", 'h', NULL, "print this help and exit", 0};

#define MAX_OPTS 48

/* The command's options in help order: its own, then the shared ones it takes (unless it
 * defines an option of the same name itself), then --help. */
static int collect(const mst_cli_command_desc *c, const mst_cli_opt **out) {
    int n = 0;
    for (const mst_cli_opt *o = c->opts; o && o->name; o++)
        if (n < MAX_OPTS - 4) out[n++] = o;
    const mst_cli_opt *shared[4] = {(c->shared & MST_CLI_SET_OPT) ? &opt_set : NULL,
                                    (c->shared & MST_CLI_OUT_OPT) ? &opt_out : NULL,
                                    (c->shared & MST_CLI_RESUME_OPT) ? &opt_resume : NULL,
                                    (c->shared & MST_CLI_NPROC_OPT) ? &opt_nproc : NULL};
    for (int s = 0; s < 4; s++) {
        if (!shared[s]) continue;
        bool own = false;
        for (int i = 0; i < n; i++) own |= strcmp(out[i]->name, shared[s]->name) == 0;
        if (!own) out[n++] = shared[s];
    }
    out[n++] = &opt_help;
    return n;
}

const mst_cli_command_desc *mst_cli_command(const char *name) {
    for (int i = 0; i < mst_cli_command_count; i++)
        if (strcmp(mst_cli_commands[i].name, name) == 0) return &mst_cli_commands[i];
    return NULL;
}

/* Damerau-free Levenshtein distance, capped: words here are short. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

const char *mst_cli_closest(const char *word, const char *const *cands, int n) {
    const char *best = NULL, *prefix = NULL;
    int best_d = 3, n_prefix = 0;
    size_t lw = strlen(word);
    for (int i = 0; i < n; i++) {
        if (lw > 0 && strncmp(cands[i], word, lw) == 0) prefix = cands[i], n_prefix++;
        int d = edit_distance(word, cands[i]);
        if (d < best_d) best_d = d, best = cands[i];
    }
    if (best) return best;
    return n_prefix == 1 ? prefix : NULL;
}

static void print_opt_line(FILE *f, const mst_cli_opt *o) {
    char left[96], sh[8] = "    ";
    if (o->short_name) snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
    snprintf(left, sizeof(left), "%s--%s%s%s", sh, o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    if (strlen(left) <= 26) fprintf(f, "  %-26s %s\n", left, o->help);
    else fprintf(f, "  %s\n  %-26s %s\n", left, "", o->help);
}

void mst_cli_print_help(FILE *f, const mst_cli_command_desc *c) {
    const mst_cli_opt *opts[MAX_OPTS];
    int n = collect(c, opts);
    fprintf(f, "usage: mstune %s %s\n\n%s\n\noptions:\n", c->name, c->synopsis, c->description);
    for (int i = 0; i < n; i++) print_opt_line(f, opts[i]);
    fprintf(f, "\nexample%s:\n", strchr(c->example, '\n') ? "s" : "");
    for (const char *p = c->example; *p;) {
        const char *e = strchr(p, '\n');
        int len = e ? (int)(e - p) : (int)strlen(p);
        fprintf(f, "  %.*s\n", len, p);
        p += len + (e ? 1 : 0);
    }
}

void mst_cli_print_usage(FILE *f) {
    fprintf(f, "usage: mstune <command> [options] [args]\n       mstune <command> --help\n\ncommands:\n");
    for (int i = 0; i < mst_cli_command_count; i++)
        fprintf(f, "  %-13s %s\n", mst_cli_commands[i].name, mst_cli_commands[i].summary);
    fprintf(f, "\n  -V, --version  print the version;  -h, --help  this list\n"
               "\nexit codes: 0 ok, 1 the run failed (non-finite loss) or a regression, 2 bad input\n"
               "            (gate: 3 inconclusive, 4 a run failed)\n"
               "docs: docs/ in the source tree, or man mstune\n");
}

static int unknown_option(const char *cmd, const char *arg, const mst_cli_opt *const *opts, int n) {
    char word[128];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    snprintf(word, sizeof(word), "%.*s", (int)len, arg);
    const char *names[MAX_OPTS];
    for (int i = 0; i < n; i++) names[i] = opts[i]->name;
    const char *near = strncmp(word, "--", 2) == 0 ? mst_cli_closest(word + 2, names, n) : NULL;
    fprintf(stderr, "mstune %s: unknown option '%s'", cmd, word);
    if (near) fprintf(stderr, "; did you mean '--%s'?", near);
    fprintf(stderr, " (see mstune %s --help)\n", cmd);
    return MST_EXIT_INPUT;
}

/* A command without a callback takes no arguments beyond its options. */
static int deliver(mst_cli_on_opt cb, void *ctx, const char *cmd, const mst_cli_opt *o, const char *value) {
    if (cb) return cb(ctx, o, value) ? MST_EXIT_INPUT : MST_EXIT_OK;
    if (!o) {
        fprintf(stderr, "mstune %s: unexpected argument '%s' (see mstune %s --help)\n", cmd, value, cmd);
        return MST_EXIT_INPUT;
    }
    return MST_EXIT_OK;
}

int mst_cli_parse(const mst_cli_command_desc *c, int argc, char **argv, mst_cli_on_opt cb, void *ctx) {
    const mst_cli_opt *opts[MAX_OPTS];
    int n = collect(c, opts);
    struct option longs[MAX_OPTS + 1];
    char shorts[3 + 2 * MAX_OPTS] = "-:";
    size_t ns = 2;
    for (int i = 0; i < n; i++) {
        longs[i] = (struct option){opts[i]->name, opts[i]->metavar ? required_argument : no_argument, NULL, 256 + i};
        if (opts[i]->short_name) {
            shorts[ns++] = opts[i]->short_name;
            if (opts[i]->metavar) shorts[ns++] = ':';
        }
    }
    longs[n] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = '\0';

    char title[64];
    snprintf(title, sizeof(title), "mstune %s", c->name);
    char **av = malloc(sizeof(*av) * ((size_t)argc + 2));
    if (!av) {
        fprintf(stderr, "%s: out of memory\n", title);
        return MST_EXIT_INPUT;
    }
    av[0] = title;
    memcpy(av + 1, argv, sizeof(*av) * (size_t)argc);
    av[argc + 1] = NULL;
    opterr = 0;
    optind = 0;     /* GNU: full re-initialisation, so a second parse in one process starts afresh */
    int rc = MST_EXIT_OK, ch;
    while (rc == MST_EXIT_OK && (ch = getopt_long(argc + 1, av, shorts, longs, NULL)) != -1) {
        const mst_cli_opt *o = NULL;
        if (ch == 1) {
            rc = deliver(cb, ctx, c->name, NULL, optarg);
            continue;
        }
        if (ch == '?' || ch == ':') {
            const char *arg = av[optind - 1];
            if (ch == ':') {
                fprintf(stderr, "%s: option '%s' needs a value (see %s --help)\n", title, arg, title);
                rc = MST_EXIT_INPUT;
            } else if (optopt && optopt < 256 && strncmp(arg, "--", 2) != 0) {
                char s[3] = {'-', (char)optopt, 0};
                rc = unknown_option(c->name, s, opts, n);
            } else {
                rc = unknown_option(c->name, arg, opts, n);
            }
            break;
        }
        if (ch >= 256) o = opts[ch - 256];
        else
            for (int i = 0; i < n && !o; i++)
                if (opts[i]->short_name == ch) o = opts[i];
        if (o == &opt_help) {
            mst_cli_print_help(stdout, c);
            free(av);
            exit(MST_EXIT_OK);
        }
        rc = deliver(cb, ctx, c->name, o, o->metavar ? optarg : NULL);
    }
    for (int i = optind; rc == MST_EXIT_OK && i < argc + 1; i++)     /* after "--" */
        rc = deliver(cb, ctx, c->name, NULL, av[i]);
    free(av);
    return rc;
}

/* ---- the man page ---- */

/* roff text: backslashes doubled, '-' as \-, a leading '.' or '\'' protected. */
static void roff(FILE *f, const char *s) {
    if (*s == '.' || *s == '\'') fputs("\\&", f);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", f);
        else if (*s == '-') fputs("\\-", f);
        else if (*s == '\n') {
            fputc('\n', f);
            if (s[1] == '.' || s[1] == '\'') fputs("\\&", f);
        } else fputc(*s, f);
    }
}

void mst_cli_print_man(FILE *f) {
    fprintf(f, ".\\\" mstune(1), generated by `mstune man` from the command tables in cli/commands.c\n"
               ".TH MSTUNE 1 \"\" \"mstune " MSTUNE_VERSION "\" \"User Commands\"\n"
               ".SH NAME\nmstune \\- profile, tune and guard deep-learning training\n"
               ".SH SYNOPSIS\n.B mstune\n.I command\n[\\fIoptions\\fR] [\\fIargs\\fR]\n.br\n"
               ".B mstune\n.I command\n.B \\-\\-help\n.br\n.B mstune \\-V\n"
               ".SH DESCRIPTION\nmstune trains a job on its own instrumented runtime, attributes every step's time "
               "to dispatch, kernel, comm, data, compile, memcpy and other, recommends changes and verifies each one "
               "against the job's accuracy before it calls it an improvement. Job files are YAML; every key can be "
               "overridden with \\fB\\-\\-set\\fR \\fIkey.path=value\\fR (\\fBmstune list keys\\fR lists them). "
               "Options take their value as \\fB\\-\\-opt value\\fR or \\fB\\-\\-opt=value\\fR.\n"
               ".SH COMMANDS\n");
    for (int i = 0; i < mst_cli_command_count; i++) {
        const mst_cli_command_desc *c = &mst_cli_commands[i];
        fprintf(f, ".SS \"mstune %s ", c->name);
        roff(f, c->synopsis);
        fputs("\"\n", f);
        roff(f, c->description);
        fputc('\n', f);
        const mst_cli_opt *opts[MAX_OPTS];
        int n = collect(c, opts);
        for (int k = 0; k < n; k++) {
            fputs(".TP\n", f);
            if (opts[k]->short_name) fprintf(f, "\\fB\\-%c\\fR, ", opts[k]->short_name);
            fputs("\\fB\\-\\-", f);
            roff(f, opts[k]->name);
            fputs("\\fR", f);
            if (opts[k]->metavar) {
                fputs(" \\fI", f);
                roff(f, opts[k]->metavar);
                fputs("\\fR", f);
            }
            fputc('\n', f);
            roff(f, opts[k]->help);
            fputc('\n', f);
        }
        fputs(".PP\nExample:\n.PP\n.RS\n.nf\n", f);
        roff(f, c->example);
        fputs("\n.fi\n.RE\n", f);
    }
    fputs(".SH EXIT STATUS\n.TP\n0\nsuccess\n.TP\n1\nthe run failed (non-finite loss), a verification failed or the gate "
          "found a regression\n.TP\n2\nusage or input error; the message names the file, the line and what was "
          "expected\n.TP\n3\ngate: inconclusive\n.TP\n4\ngate: a run failed\n"
          ".SH FILES\n.TP\nout/\\fIjob\\fR/\nprofile.db (SQLite), trace.json (Chrome trace), summary.json, report/index.html\n"
          ".SH SEE ALSO\nThe docs/ folder of the source tree: job.md (the job schema), profile\\-schema.md, report.md, "
          "gate.md, advisor.md, design.md.\n",
          f);
}

/* ---- bash completion ---- */

static void words_of(FILE *f, const mst_cli_command_desc *c, bool with_short) {
    const mst_cli_opt *opts[MAX_OPTS];
    int n = collect(c, opts);
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s--%s", k ? " " : "", opts[k]->name);
        if (with_short && opts[k]->short_name) fprintf(f, " -%c", opts[k]->short_name);
    }
}

void mst_cli_print_bash_completion(FILE *f) {
    fputs("# bash completion for mstune, generated by `mstune completion bash` from its command tables and the\n"
          "# job schema (cli/job_schema.c). Install: source it, or put it in /usr/share/bash-completion/completions/.\n"
          "_mstune() {\n"
          "    local cw=$COMP_CWORD cur=${COMP_WORDS[COMP_CWORD]} key='' opt\n"
          "    # bash splits --set a.b=c at '=' (COMP_WORDBREAKS): put the pieces back together\n"
          "    if [[ $cur == '=' ]]; then key=${COMP_WORDS[cw-1]}; cur=''; opt=${COMP_WORDS[cw-2]}\n"
          "    elif [[ $cw -ge 2 && ${COMP_WORDS[cw-1]} == '=' ]]; then key=${COMP_WORDS[cw-2]}; opt=${COMP_WORDS[cw-3]}\n"
          "    else opt=${COMP_WORDS[cw-1]}; fi\n"
          "    if [[ $key == -* ]]; then opt=$key; key=''; fi\n"
          "    if [[ $cw -eq 1 ]]; then\n"
          "        COMPREPLY=($(compgen -W '",
          f);
    for (int i = 0; i < mst_cli_command_count; i++) fprintf(f, "%s%s", i ? " " : "", mst_cli_commands[i].name);
    fputs(" --help --version' -- \"$cur\")); return\n"
          "    fi\n"
          "    local cmd=${COMP_WORDS[1]}\n"
          "    if [[ $opt == --set ]]; then\n"
          "        if [[ -n $key ]]; then\n"
          "            case $key in\n",
          f);
    for (int i = 0; i < mst_job_key_count; i++) {
        const mst_job_key *k = &mst_job_keys[i];
        if (k->type != MST_JOB_ENUM && k->type != MST_JOB_BOOL) continue;
        fprintf(f, "            %s) COMPREPLY=($(compgen -W '", k->path);
        if (k->type == MST_JOB_BOOL) fputs("true false", f);
        else
            for (int v = 0; k->values[v]; v++) fprintf(f, "%s%s", v ? " " : "", k->values[v]);
        fputs("' -- \"$cur\"));;\n", f);
    }
    fputs("            esac\n"
          "        else\n"
          "            compopt -o nospace 2>/dev/null\n"
          "            COMPREPLY=($(compgen -S = -W '",
          f);
    for (int i = 0; i < mst_job_key_count; i++) fprintf(f, "%s%s", i ? " " : "", mst_job_keys[i].path);
    fputs("' -- \"$cur\"))\n"
          "        fi\n"
          "        return\n"
          "    fi\n"
          "    case $cmd in\n",
          f);
    for (int i = 0; i < mst_cli_command_count; i++) {
        const mst_cli_command_desc *c = &mst_cli_commands[i];
        fprintf(f, "    %s)\n        case $opt in\n", c->name);
        const mst_cli_opt *opts[MAX_OPTS];
        int n = collect(c, opts), with_value = 0;
        for (int k = 0; k < n; k++)
            if (opts[k]->metavar && opts[k]->id != MST_CLI_OPT_SET) {
                fprintf(f, "%s--%s", with_value++ ? "|" : "        ", opts[k]->name);
                if (opts[k]->short_name) fprintf(f, "|-%c", opts[k]->short_name);
            }
        if (with_value) fputs(") compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")); return;;\n", f);
        fputs("        esac\n        if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W '", f);
        words_of(f, c, false);
        fputs("' -- \"$cur\"))\n", f);
        if (c->words) {
            fputs("        elif [[ $cw -eq 2 ]]; then COMPREPLY=($(compgen -W '", f);
            for (int w = 0; c->words[w]; w++) fprintf(f, "%s%s", w ? " " : "", c->words[w]);
            fputs("' -- \"$cur\"))\n", f);
        }
        fputs("        else compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")); fi;;\n", f);
    }
    fputs("    esac\n}\ncomplete -F _mstune mstune\n", f);
}
