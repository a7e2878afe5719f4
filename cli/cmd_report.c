/* cmd_report.c — `mstune report PROFILE.db|RUN_DIR [-o DIR]` renders a profile as a self-contained folder
 * (index.html, PNG charts, flame graph, summary.json, summary.md); `mstune compare A.db B.db
 * [-o DIR]` puts two profiles side by side. `mstune profile` renders its report itself. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "report/report.h"

/* The summary.json beside a profile, when there is one. */
static const char *summary_beside(const char *db, char *buf, size_t n) {
    const char *slash = strrchr(db, '/');
    snprintf(buf, n, "%.*ssummary.json", slash ? (int)(slash - db + 1) : 0, db);
    FILE *f = fopen(buf, "r");
    if (!f) return NULL;
    fclose(f);
    return buf;
}

typedef struct {
    const char *cmd;
    const char **pos;
    int n_pos, want;
    const char *out;
} out_args;

static int on_out_opt(void *ctx, const mst_cli_opt *o, const char *value) {
    out_args *a = ctx;
    if (o) {
        a->out = value;     /* the only option: -o/--out */
        return 0;
    }
    if (a->n_pos == a->want) {
        fprintf(stderr, "mstune %s: unexpected argument '%s'\n", a->cmd, value);
        return 1;
    }
    a->pos[a->n_pos++] = value;
    return 0;
}

/* -1: the usage line is due (wrong count of positional arguments) */
static int parse_out(const char *cmd, int argc, char **argv, const char **pos, int n_pos, const char **out) {
    out_args a = {cmd, pos, 0, n_pos, NULL};
    int rc = mst_cli_parse(mst_cli_command(cmd), argc, argv, on_out_opt, &a);
    *out = a.out;
    if (rc != MST_EXIT_OK) return rc;
    return a.n_pos == n_pos ? MST_EXIT_OK : -1;
}

int mst_cmd_report(int argc, char **argv) {
    const char *db, *out;
    int rc = parse_out("report", argc, argv, &db, 1, &out);
    if (rc != MST_EXIT_OK) {
        if (rc < 0) fprintf(stderr, "usage: mstune report PROFILE.db|RUN_DIR [-o DIR]   (mstune report --help)\n");
        return MST_EXIT_INPUT;
    }
    char dir[1200], sbuf[1200], err[2048], dbbuf[1200];
    struct stat sb;
    if (stat(db, &sb) == 0 && S_ISDIR(sb.st_mode)) {     /* a run's folder: its profile.db */
        size_t len = strlen(db);
        while (len > 1 && db[len - 1] == '/') len--;
        snprintf(dbbuf, sizeof(dbbuf), "%.*s/profile.db", (int)len, db);
        db = dbbuf;
    }
    if (!out) {
        const char *slash = strrchr(db, '/');
        snprintf(dir, sizeof(dir), "%.*sreport", slash ? (int)(slash - db + 1) : 0, db);
        out = dir;
    }
    if (mst_report_render(db, summary_beside(db, sbuf, sizeof(sbuf)), out, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune report: %s\n", err);
        return MST_EXIT_INPUT;
    }
    printf("wrote %s/index.html%s\n", out, mst_report_have_gnuplot() ? "" : " (no charts: gnuplot is not installed)");
    return MST_EXIT_OK;
}

int mst_cmd_compare(int argc, char **argv) {
    const char *dbs[2], *out;
    int rc = parse_out("compare", argc, argv, dbs, 2, &out);
    if (rc != MST_EXIT_OK) {
        if (rc < 0) fprintf(stderr, "usage: mstune compare A/profile.db B/profile.db [-o DIR]   (mstune compare --help)\n");
        return MST_EXIT_INPUT;
    }
    char err[2048];
    if (mst_compare_render(dbs[0], dbs[1], out, stdout, err, sizeof(err)) != 0) {
        fprintf(stderr, "mstune compare: %s\n", err);
        return MST_EXIT_INPUT;
    }
    if (out) printf("wrote %s/index.html\n", out);
    return MST_EXIT_OK;
}
