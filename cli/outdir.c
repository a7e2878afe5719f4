/* outdir.c — see outdir.h. Promotion is a roll-forward journal of renames: every step is a
 * rename within one folder (atomic on POSIX), each step can be redone after a crash, and the
 * COMPLETE marker says whether the staged run is to be kept. */
#define _XOPEN_SOURCE 700
#include "cli/outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "util/fsutil.h"

const char *const mst_outdir_outputs[] = {"profile.db", "trace.json", "summary.json", "report", "checkpoint.bin", NULL};
const char *const mst_outdir_advise_outputs[] = {"advice.md", "advice.json", "tuned.yaml", "report", "trials", NULL};

#define MARKER "COMPLETE"
#define OLD ".run-old"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void sync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static bool listed(const char *manifest, const char *name) {
    size_t len = strlen(name);
    for (const char *p = manifest; (p = strstr(p, name)); p += len)
        if ((p == manifest || p[-1] == '\n') && p[len] == '\n') return true;
    return false;
}

/* Redo-able promotion. The marker lists the staged outputs; for each output name: a listed one
 * still staged replaces the old one (a folder moves the old one aside first, rename cannot replace
 * a full folder), a listed one no longer staged was promoted already, an unlisted one is an old
 * output without a successor and moves aside. Then the set-aside folder and the marker go. */
static int roll_forward(mst_outdir *d, char *err, size_t errn) {
    char old[1200], from[1200], to[1200], marker[1200];
    snprintf(marker, sizeof(marker), "%s/" MARKER, d->stage);
    char *manifest = mst_read_file(marker, NULL);
    if (!manifest) goto io;
    snprintf(old, sizeof(old), "%s/" OLD, d->dir);
    if (mkdir(old, 0755) != 0 && errno != EEXIST) goto io;
    for (int i = 0; d->outputs[i]; i++) {
        const char *name = d->outputs[i];
        snprintf(from, sizeof(from), "%s/%s", d->stage, name);
        snprintf(to, sizeof(to), "%s/%s", d->dir, name);
        bool mine = listed(manifest, name), staged = exists(from);
        if (mine && !staged) continue;
        struct stat st;
        if (!mine || (lstat(from, &st) == 0 && S_ISDIR(st.st_mode))) {
            char aside[1300];
            snprintf(aside, sizeof(aside), "%s/%s", old, name);
            if (exists(to) && (rmtree(aside) != 0 || rename(to, aside) != 0)) goto io;
        }
        if (mine && rename(from, to) != 0) goto io;
    }
    free(manifest);
    manifest = NULL;
    sync_dir(d->dir);
    if (unlink(marker) != 0 && errno != ENOENT) goto io;
    if (rmtree(old) != 0) goto io;
    sync_dir(d->dir);
    return 0;
io:
    mst_errf(err, errn, "%s: cannot promote the run's outputs: %s", d->dir, strerror(errno));
    free(manifest);
    return -1;
}

static int take_lock(mst_outdir *d, char *err, size_t errn) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/.lock", d->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        mst_errf(err, errn, "%s: cannot create the lock file: %s", path, strerror(errno));
        return MST_EXIT_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t got = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[got > 0 ? got : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(fd);
        if (e == EWOULDBLOCK) {
            mst_errf(err, errn, "%s is in use by another mstune run (pid %s); wait for it to finish or choose another --out",
                     d->dir, pid[0] ? pid : "unknown");
            return MST_EXIT_BUSY;
        }
        mst_errf(err, errn, "%s: cannot lock: %s", path, strerror(e));
        return MST_EXIT_IO;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        mst_errf(err, errn, "%s: cannot write the lock file: %s", path, strerror(errno));
        close(fd);
        return MST_EXIT_IO;
    }
    d->lock_fd = fd;
    return 0;
}

int mst_outdir_open(mst_outdir *d, const char *dir, bool keep_stage, char *err, size_t errn) {
    return mst_outdir_open_for(d, dir, mst_outdir_outputs, keep_stage, err, errn);
}

int mst_outdir_open_for(mst_outdir *d, const char *dir, const char *const *outputs, bool keep_stage, char *err, size_t errn) {
    memset(d, 0, sizeof(*d));
    d->lock_fd = -1;
    d->outputs = outputs;
    if (snprintf(d->dir, sizeof(d->dir), "%s", dir) >= (int)sizeof(d->dir)) {
        mst_errf(err, errn, "--out %.64s...: path too long", dir);
        return MST_EXIT_INPUT;
    }
    snprintf(d->stage, sizeof(d->stage), "%s/" MST_OUTDIR_STAGE, dir);
    if (mst_mkdirs(dir, err, errn) != 0) return MST_EXIT_IO;
    int rc = take_lock(d, err, errn);
    if (rc != 0) return rc;
    char marker[1200];
    snprintf(marker, sizeof(marker), "%s/" MARKER, d->stage);
    if (exists(marker) && roll_forward(d, err, errn) != 0) goto io;     /* a kill during the last promotion */
    if (keep_stage)     /* only the checkpoint carries over; a killed run's other files were never finished */
        for (int i = 0; d->outputs[i]; i++) {
            char p[1300];
            snprintf(p, sizeof(p), "%s/%s", d->stage, d->outputs[i]);
            if (strcmp(d->outputs[i], "checkpoint.bin") != 0 && rmtree(p) != 0) {
                mst_errf(err, errn, "%s: cannot remove: %s", p, strerror(errno));
                goto io;
            }
        }
    if (!keep_stage && rmtree(d->stage) != 0) {
        mst_errf(err, errn, "%s: cannot clear the previous run's staging folder: %s", d->stage, strerror(errno));
        goto io;
    }
    if (mkdir(d->stage, 0755) != 0 && errno != EEXIST) {
        mst_errf(err, errn, "%s: cannot create folder: %s", d->stage, strerror(errno));
        goto io;
    }
    return 0;
io:
    mst_outdir_close(d);
    return MST_EXIT_IO;
}

const char *mst_outdir_stage(const mst_outdir *d, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", d->stage, name);
    return buf;
}

int mst_outdir_promote(mst_outdir *d, char *err, size_t errn) {
    char marker[1200];
    snprintf(marker, sizeof(marker), "%s/" MARKER, d->stage);
    char manifest[256] = "", from[1200];
    size_t len = 0;
    for (int i = 0; d->outputs[i]; i++) {
        snprintf(from, sizeof(from), "%s/%s", d->stage, d->outputs[i]);
        if (exists(from)) len += (size_t)snprintf(manifest + len, sizeof(manifest) - len, "%s\n", d->outputs[i]);
    }
    if (mst_write_atomic(marker, manifest, len, err, errn) != 0) return -1;    /* from here on the new run is the folder's */
    if (roll_forward(d, err, errn) != 0) return -1;
    rmdir(d->stage);        /* empty now unless something else was staged; then it stays */
    return 0;
}

void mst_outdir_discard(mst_outdir *d) {
    if (d->lock_fd >= 0) rmtree(d->stage);
}

void mst_outdir_close(mst_outdir *d) {
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
}
