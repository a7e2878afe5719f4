/* test_append_reader.c — the verdict file read on from where it was last read
 * (util/append_reader.h): each sync hands over exactly the whole lines appended since
 * the last, in order; a line without its newline waits; a replaced, shrunk or deleted file starts
 * over (the caller told to drop what it kept); an over-long line is skipped. And through the
 * kernel choice (kernel_choice.h): a step-thread verdict appended by another process after this
 * one first read the file is seen at the next lookup, with the file's rules (the newest quiet line
 * wins, a quiet line over a busy one). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/append_reader.h"
#include "runtime/backend/kernel_choice.h"
#include "runtime/cpu_features.h"

static char g_dir[] = "/tmp/mstune-append-reader.XXXXXX";
static char g_path[512];            /* the reader's file */
static char g_verdicts[512];        /* the kernel choice's file (MSTUNE_KERNELS_CACHE) */

typedef struct {
    char got[64][64];               /* "field0|field1|..." per line handed over */
    int n, resets;
} seen;

static void on_line(void *user, char **field, int n) {
    seen *s = user;
    assert_true(s->n < 64);
    char *o = s->got[s->n++];
    o[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i) strcat(o, "|");
        strncat(o, field[i], 60 - strlen(o));
    }
}

static void on_reset(void *user) {
    seen *s = user;
    s->resets++;
    s->n = 0;
}

static void append(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void sync_into(mst_append_reader *r, seen *s) { mst_append_reader_sync(r, g_path, on_reset, on_line, s); }

static void test_reads_only_what_was_appended(void **state) {
    (void)state;
    unlink(g_path);
    mst_append_reader r = {0};
    seen s = {0};
    sync_into(&r, &s);                      /* no file yet: nothing, no reset */
    assert_int_equal(s.n, 0);
    assert_int_equal(s.resets, 0);
    append(g_path, "a\t1\t2\nb\t3\n");
    sync_into(&r, &s);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.got[0], "a|1|2");
    assert_string_equal(s.got[1], "b|3");
    sync_into(&r, &s);                      /* nothing new: nothing handed over again */
    assert_int_equal(s.n, 2);
    append(g_path, "\nc\t\t4\nd\t5");       /* an empty line, empty fields, a line mid-write */
    sync_into(&r, &s);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.got[2], "c|4");
    append(g_path, "6\n");                  /* the line completed */
    sync_into(&r, &s);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.got[3], "d|56");
    assert_int_equal(s.resets, 0);
    assert_int_equal(r.restarts, 0);
}

static void test_long_line_skipped(void **state) {
    (void)state;
    unlink(g_path);
    mst_append_reader r = {0};
    seen s = {0};
    char *big = malloc(40000 + 8);
    assert_non_null(big);
    memset(big, 'x', 40000);
    memcpy(big + 40000, "\nok\n", 5);
    append(g_path, "first\n");
    append(g_path, big);                    /* longer than the reader's buffer */
    sync_into(&r, &s);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.got[0], "first");
    assert_string_equal(s.got[1], "ok");
    memset(big, 'y', 2000);                 /* longer than a line may be, shorter than the buffer */
    memcpy(big + 2000, "\nlast\n", 7);
    append(g_path, big);
    sync_into(&r, &s);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.got[2], "last");
    free(big);
}

static void test_replaced_or_shrunk_file_read_again(void **state) {
    (void)state;
    unlink(g_path);
    mst_append_reader r = {0};
    seen s = {0};
    append(g_path, "one\ntwo\n");
    sync_into(&r, &s);
    assert_int_equal(s.n, 2);
    char other[600];
    snprintf(other, sizeof(other), "%s.new", g_path);
    unlink(other);
    append(other, "three\nfour\nfive\n");   /* a new file put in its place (longer: not a shrink) */
    assert_int_equal(rename(other, g_path), 0);
    sync_into(&r, &s);
    assert_int_equal(s.resets, 1);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.got[0], "three");
    assert_int_equal(truncate(g_path, 0), 0);   /* the same file, shrunk */
    append(g_path, "six\n");
    sync_into(&r, &s);
    assert_int_equal(s.resets, 2);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.got[0], "six");
    unlink(g_path);                         /* gone */
    sync_into(&r, &s);
    assert_int_equal(s.resets, 3);
    assert_int_equal(s.n, 0);
    assert_int_equal(r.restarts, 3);
}

static void plan_line(const char *verdict, const char *quiet, uint64_t key) {
    char machine[320], line[1024];
    mst_cpu_machine_id(machine, sizeof(machine));
    snprintf(line, sizeof(line), "s1\t%s\tstep_threads\t%016llx\t2\t%s\t10.0\t5.0\t%s\tg\n", machine,
             (unsigned long long)key, verdict, quiet);
    append(g_verdicts, line);
}

static void test_plan_verdict_appended_later_is_seen(void **state) {
    (void)state;
    const uint64_t key = 0x1234abcd5678ef01ull;
    bool one = false, busy = false;
    assert_false(mst_plan_verdict_get(key, &one, &busy));   /* the file read, no verdict */
    plan_line("one", "busy", key);                          /* another process's, after that read */
    assert_true(mst_plan_verdict_get(key, &one, &busy));
    assert_true(one);
    assert_true(busy);
    plan_line("all", "quiet", key);
    assert_true(mst_plan_verdict_get(key, &one, &busy));
    assert_false(one);
    assert_false(busy);
    plan_line("one", "busy", key);                          /* a busy line after a quiet one: no news */
    plan_line("one", "quiet", key ^ 1);                     /* another key */
    assert_true(mst_plan_verdict_get(key, &one, &busy));
    assert_false(one);
    plan_line("one", "quiet", key);                         /* the newest quiet line wins */
    assert_true(mst_plan_verdict_get(key, &one, &busy));
    assert_true(one);
    assert_false(busy);
    assert_int_equal(truncate(g_verdicts, 0), 0);           /* emptied: nothing known */
    assert_false(mst_plan_verdict_get(key, &one, &busy));
    assert_true(mst_plan_verdict_get(key ^ 1, &one, &busy) == false);
}

int main(void) {
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_path, sizeof(g_path), "%s/lines.tsv", g_dir);
    snprintf(g_verdicts, sizeof(g_verdicts), "%s/kernel-choices.tsv", g_dir);
    setenv("MSTUNE_KERNELS_CACHE", g_verdicts, 1);         /* before the kernel choice's first use */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_only_what_was_appended),
        cmocka_unit_test(test_long_line_skipped),
        cmocka_unit_test(test_replaced_or_shrunk_file_read_again),
        cmocka_unit_test(test_plan_verdict_appended_later_is_seen),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(g_path);
    unlink(g_verdicts);
    rmdir(g_dir);
    return rc;
}
