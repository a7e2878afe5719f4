/* gnuplot.c — the pipe to gnuplot (see gnuplot.h): program lookup, one process per chart, exit
 * status checked, temp file + rename for the PNG. One process per chart costs ~30 ms each but
 * lets a broken chart fail alone, with its own message, instead of taking the rest down. */
#define _GNU_SOURCE
#include "report/gnuplot.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "profiler/events.h"
#include "report/report.h"
#include "report/textbuf.h"

const char *const rpt_cat_colors[] = {
    "#d95f02",  /* dispatch */
    "#1b9e77",  /* kernel */
    "#7570b3",  /* comm */
    "#e7298a",  /* data */
    "#66a61e",  /* compile */
    "#e6ab02",  /* memcpy */
    "#8c8c8c",  /* other */
};
_Static_assert(sizeof(rpt_cat_colors) / sizeof(rpt_cat_colors[0]) == MST_CAT_COUNT, "a colour per profiler category");

const char *rpt_gnuplot_program(void) {
    const char *p = getenv("MSTUNE_GNUPLOT");
    return p && *p ? p : "gnuplot";
}

/* A shell word: the string in single quotes, each ' as '\''. */
static void shell_quote(rpt_buf *b, const char *s) {
    rpt_puts(b, "'");
    for (; *s; s++) {
        if (*s == '\'') rpt_puts(b, "'\\''");
        else rpt_putn(b, s, 1);
    }
    rpt_puts(b, "'");
}

/* A gnuplot single-quoted string: ' doubled, nothing else is special. */
static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static bool on_path(const char *prog) {
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char cand[4096];
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        int w = snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, len ? path : ".", prog);
        struct stat st;
        if (w > 0 && (size_t)w < sizeof(cand) && stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
            return true;
        if (!end) break;
        path = end + 1;
    }
    return false;
}

bool mst_report_have_gnuplot(void) {
    const char *prog = rpt_gnuplot_program();
    if (!on_path(prog)) return false;
    /* it runs, and knows the terminal the charts need (gnuplot builds without cairo do not) */
    rpt_buf cmd = {0};
    rpt_puts(&cmd, "exec ");
    shell_quote(&cmd, prog);
    rpt_puts(&cmd, " -e 'set terminal pngcairo' </dev/null >/dev/null 2>&1");
    FILE *p = cmd.oom ? NULL : popen(cmd.p, "r");
    rpt_buf_free(&cmd);
    if (!p) return false;
    int st = pclose(p);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void block_sigpipe(rpt_plot *pl) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    pl->sigpipe_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &pl->old_mask);
}

static void restore_sigpipe(rpt_plot *pl) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    if (!pl->sigpipe_pending && sigismember(&pending, SIGPIPE)) {  /* ours: take it off the queue */
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &pl->old_mask, NULL);
}

int rpt_plot_open(rpt_plot *pl, const char *path, int width, int height, char *err, size_t errn) {
    memset(pl, 0, sizeof(*pl));
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dir_len = slash ? (int)(slash - path) : 0;
    if (snprintf(pl->path, sizeof(pl->path), "%s", path) >= (int)sizeof(pl->path) ||
        (slash ? snprintf(pl->tmp, sizeof(pl->tmp), "%.*s/.%s.tmp-XXXXXX", dir_len, path, base)
               : snprintf(pl->tmp, sizeof(pl->tmp), ".%s.tmp-XXXXXX", base)) >= (int)sizeof(pl->tmp)) {
        snprintf(err, errn, "chart '%s': path too long", path);
        return -1;
    }
    int fd = mkstemp(pl->tmp);
    if (fd < 0) {
        snprintf(err, errn, "chart '%s': cannot create a temp file beside it: %s", path, strerror(errno));
        return -1;
    }
    fchmod(fd, 0644);
    close(fd);
    rpt_buf cmd = {0};
    rpt_puts(&cmd, "exec ");
    shell_quote(&cmd, rpt_gnuplot_program());
    rpt_puts(&cmd, " >/dev/null");
    block_sigpipe(pl);
    pl->f = cmd.oom ? NULL : popen(cmd.p, "w");
    rpt_buf_free(&cmd);
    if (!pl->f) {
        snprintf(err, errn, "chart '%s': cannot start %s: %s", path, rpt_gnuplot_program(), strerror(errno));
        restore_sigpipe(pl);
        unlink(pl->tmp);
        return -1;
    }
    FILE *f = pl->f;
    fprintf(f, "set terminal pngcairo noenhanced size %d,%d font 'sans,10'\nset output ", width, height);
    gp_quote(f, pl->tmp);
    fputs("\nset encoding utf8\nset datafile separator '\\t'\nset grid ytics lc rgb '#dddddd'\n"
          "set border 3\nset tics nomirror\nset key outside right top\nset style fill solid 0.85 noborder\n",
          f);
    return 0;
}

int rpt_plot_close(rpt_plot *pl, char *err, size_t errn) {
    int rc = 0;
    fputs("\nunset output\nexit\n", pl->f);
    int write_failed = fflush(pl->f) != 0 || ferror(pl->f);
    int st = pclose(pl->f);
    pl->f = NULL;
    restore_sigpipe(pl);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
            snprintf(err, errn, "chart '%s': cannot run %s (exit status 127: not found)", pl->path, rpt_gnuplot_program());
        else if (st != -1 && WIFEXITED(st))
            snprintf(err, errn, "chart '%s': %s exited with status %d (its messages are on stderr)", pl->path,
                     rpt_gnuplot_program(), WEXITSTATUS(st));
        else
            snprintf(err, errn, "chart '%s': %s ended abnormally%s", pl->path, rpt_gnuplot_program(),
                     st != -1 && WIFSIGNALED(st) ? " (killed by a signal)" : "");
        rc = -1;
    } else if (write_failed) {
        snprintf(err, errn, "chart '%s': writing the script to %s failed", pl->path, rpt_gnuplot_program());
        rc = -1;
    } else {
        struct stat sb;
        if (stat(pl->tmp, &sb) != 0 || sb.st_size == 0) {
            snprintf(err, errn, "chart '%s': %s drew nothing", pl->path, rpt_gnuplot_program());
            rc = -1;
        } else if (rename(pl->tmp, pl->path) != 0) {
            snprintf(err, errn, "chart '%s': cannot rename it into place: %s", pl->path, strerror(errno));
            rc = -1;
        }
    }
    if (rc != 0) unlink(pl->tmp);
    return rc;
}
