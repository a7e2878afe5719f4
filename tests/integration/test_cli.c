/* test_cli.c — what a user meets first, through the real binary: --help on every command (exit 0,
 * its options, an example), -V, "did you mean" for commands and options, --opt=value, any number
 * of --set (none dropped), a too-long --out refused, and the man page and bash completion made
 * from the same tables (every command, option and job key in them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/commands.h"
#include "tests/integration/e2e.h"

#define JOB "workloads/jobs/quickstart.yaml"

static char g_out[1 << 17];

static int run(const char *fmt, ...) {
    char args[6000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    return e2e_run(args, g_out, sizeof(g_out));
}

static void expect(const char *needle) {
    if (!strstr(g_out, needle)) fail_msg("expected '%s' in:\n%s", needle, g_out);
}

static void test_help_on_every_command(void **state) {
    for (int i = 0; i < mst_cli_command_count; i++) {
        const mst_cli_command_desc *c = &mst_cli_commands[i];
        int rc = run("%s --help", c->name);
        if (rc != 0) fail_msg("mstune %s --help exited %d:\n%s", c->name, rc, g_out);
        char head[128];
        snprintf(head, sizeof(head), "usage: mstune %s ", c->name);
        expect(head);
        expect("options:");
        expect("example");
        expect("--help");
        for (const mst_cli_opt *o = c->opts; o->name; o++) {
            char opt[80];
            snprintf(opt, sizeof(opt), "--%s", o->name);
            expect(opt);
        }
        if (c->shared & MST_CLI_SET_OPT) expect("--set KEY=VALUE");
        assert_int_equal(run("%s -h", c->name), 0);
        expect(head);
    }
    /* help wins over a missing job file: nothing runs */
    assert_int_equal(run("profile no/such/job.yaml --help"), 0);
    expect("usage: mstune profile");
    assert_int_equal(run("--help"), 0);
    for (int i = 0; i < mst_cli_command_count; i++) expect(mst_cli_commands[i].name);
    assert_int_equal(run("help gate"), 0);
    expect("usage: mstune gate");
}

static void test_version(void **state) {
    const char *forms[] = {"-V", "--version", "version"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(run("%s", forms[i]), 0);
        if (strncmp(g_out, "mstune ", 7) != 0 || g_out[7] < '0' || g_out[7] > '9') fail_msg("%s: %s", forms[i], g_out);
    }
}

static void test_did_you_mean(void **state) {
    assert_int_equal(run("trian " JOB), 2);
    expect("unknown command 'trian'; did you mean 'mstune train'?");
    assert_int_equal(run("profle " JOB), 2);
    expect("did you mean 'mstune profile'?");
    assert_int_equal(run("frobnicate"), 2);
    expect("unknown command 'frobnicate'");
    assert_null(strstr(g_out, "did you mean"));
    assert_int_equal(run("train " JOB " --outt /tmp/x"), 2);
    expect("unknown option '--outt'; did you mean '--out'?");
    assert_int_equal(run("advise " JOB " --tolerence=1"), 2);
    expect("unknown option '--tolerence'; did you mean '--tolerance'?");
    assert_int_equal(run("gate --baseline a --curent b"), 2);
    expect("did you mean '--current'?");
    assert_int_equal(run("list opz"), 2);
    expect("did you mean 'ops'?");
    assert_int_equal(run("train " JOB " --set"), 2);
    expect("option '--set' needs a value");
}

static void test_opt_equals_value_and_many_sets(void **state) {
    assert_int_equal(run("validate " JOB " --set=model.name=cnn --set model.width=8"), 0);
    assert_int_equal(run("validate " JOB " --set=model.name=bogus"), 2);
    expect("model.name");
    /* 400 overrides (more than any fixed table held before), the last one bad: it must be read */
    assert_int_equal(run("validate " JOB " $(yes --set=train.seed=7 | head -399) --set=model.name=bogus"), 2);
    expect("bogus");
    assert_int_equal(run("validate " JOB " $(yes --set=train.seed=7 | head -400)"), 0);
    /* prefixes of long options are getopt_long's: unique ones work */
    assert_int_equal(run("validate " JOB " --se model.name=cnn"), 0);
}

static void test_long_out_refused(void **state) {
    char longdir[2100] = "/tmp/";
    for (int i = 5; i < 2000; i++) longdir[i] = 'a';
    longdir[2000] = '\0';
    assert_int_equal(run("train " JOB " --out %s", longdir), 2);
    expect("--out: the folder name is 2000 bytes long; at most");
    assert_int_equal(run("train " JOB " --out=%s", longdir), 2);
    assert_int_equal(run("profile " JOB " -o ''"), 2);
    expect("--out: expected a folder name");
}

/* roff escapes '-' as "\-" */
static void roff_name(char *buf, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '-') buf[k++] = '\\';
        buf[k++] = *s;
    }
    buf[k] = '\0';
}

static void test_man_page(void **state) {
    assert_int_equal(run("man"), 0);
    expect(".TH MSTUNE 1");
    expect(".SH EXIT STATUS");
    for (int i = 0; i < mst_cli_command_count; i++) {
        const mst_cli_command_desc *c = &mst_cli_commands[i];
        char ss[128];
        snprintf(ss, sizeof(ss), ".SS \"mstune %s ", c->name);
        expect(ss);
        for (const mst_cli_opt *o = c->opts; o->name; o++) {
            char esc[80], want[96];
            roff_name(esc, sizeof(esc), o->name);
            snprintf(want, sizeof(want), "\\fB\\-\\-%s\\fR", esc);
            expect(want);
        }
    }
    assert_int_equal(run("man extra"), 2);
}

static void test_bash_completion(void **state) {
    assert_int_equal(run("completion bash"), 0);
    expect("complete -F _mstune mstune");
    for (int i = 0; i < mst_job_key_count; i++) expect(mst_job_keys[i].path);     /* from the schema table */
    for (int i = 0; i < mst_cli_command_count; i++) expect(mst_cli_commands[i].name);
    assert_int_equal(run("completion zsh"), 2);
    /* it works in bash: subcommands, options, job keys, enum values after '=' (a word break) */
    const char *cases[][2] = {
        {"mstune pro", "profile"},
        {"mstune train job.yaml --res", "--resume"},
        {"mstune train job.yaml --set amp.le", "amp.level="},
        {"mstune train job.yaml --set runtime.mode = gr", "graph"},
        {"mstune list wor", "workloads"},
        {"mstune gate cal", "calibrate"},
    };
    char dir[512];
    e2e_tmpdir(dir, sizeof(dir));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run("completion bash > %s/c.sh && bash -c 'source %s/c.sh; "
                     "COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _mstune 2>/dev/null; "
                     "echo \"<${COMPREPLY[*]}>\"'",
                     dir, dir, cases[i][0]);
        assert_int_equal(rc, 0);
        char want[128];
        snprintf(want, sizeof(want), "<%s>", cases[i][1]);
        if (!strstr(g_out, want)) fail_msg("completing '%s': expected %s, got %s", cases[i][0], want, g_out);
    }
    e2e_rmtree(dir);
}

/* GSL (report/stats.c) brings libgslcblas along; the program's GEMM must still bind to OpenBLAS
 * (CMakeLists.txt links libgsl alone for this). glibc's LD_DEBUG says where cblas_sgemm bound. */
/* The backend registry as the CLI shows it, and a device this build lacks refused with exit 2. */
static void test_devices(void **state) {
    assert_int_equal(run("list devices"), 0);
    expect("cpu    available; kernel providers:");
    expect("builtin");
    expect("onednn");
#ifndef MSTUNE_HAVE_CUDA
    expect("cuda   device cuda is not available in this build");
    char dir[512];
    e2e_tmpdir(dir, sizeof(dir));
    assert_int_equal(run("train " JOB " --set runtime.device=cuda --out %s/out", dir), 2);
    expect("runtime.device: device cuda is not available in this build");
    e2e_rmtree(dir);
#endif
}

static void test_gemm_binds_openblas(void **state) {
    const char *bin = getenv("MSTUNE_BIN");
    if (!bin) bin = "build/mstune";
    char cmd[2048], line[1024] = "";
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && LD_DEBUG=bindings '%s' train " JOB " --set train.steps=2 --set train.eval=false "
             "--set train.checkpoint=false --out \"${TMPDIR:-/tmp}/mstune-bind-$$\" 2>&1 >/dev/null | grep -m1 \"symbol .cblas_sgemm'\"; "
             "rm -rf \"${TMPDIR:-/tmp}/mstune-bind-$$\"",
             e2e_source_dir(), bin);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    if (!fgets(line, sizeof(line), p)) line[0] = '\0';
    pclose(p);
    if (!line[0]) skip();       /* no glibc LD_DEBUG output here */
    if (!strstr(line, "openblas")) fail_msg("cblas_sgemm binds elsewhere than OpenBLAS: %s", line);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_on_every_command), cmocka_unit_test(test_version),
        cmocka_unit_test(test_did_you_mean),          cmocka_unit_test(test_opt_equals_value_and_many_sets),
        cmocka_unit_test(test_long_out_refused),      cmocka_unit_test(test_man_page),
        cmocka_unit_test(test_bash_completion),      cmocka_unit_test(test_gemm_binds_openblas),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
