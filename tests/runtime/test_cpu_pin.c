/* test_cpu_pin.c — the kernel choice's CPU binding (runtime/cpu_pin.h): a thread bound to the
 * index-th CPU the process may use runs there alone and gets every CPU back when let go; the
 * kernel team's members (oneDNN loaded) each get a CPU of their own and all of them back; without
 * a team, the team binding is the caller's alone.
 * MSTUNE_PIN_THREADS=0 (a ctest variant) binds nothing. On a 1-CPU machine nothing is bound. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/backend/onednn.h"
#include "runtime/cpu_pin.h"
#include "runtime/omp_team.h"

static cpu_set_t g_all;     /* the process's CPUs at the start */

static bool pin_off(void) {
    const char *e = getenv("MSTUNE_PIN_THREADS");
    return e && strcmp(e, "0") == 0;
}

static cpu_set_t mask_now(void) {
    cpu_set_t m;
    CPU_ZERO(&m);
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(m), &m), 0);
    return m;
}

static int nth_cpu(int n) {
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &g_all) && seen++ == n) return c;
    return -1;
}

static void test_self(void **state) {
    (void)state;
    const int n = CPU_COUNT(&g_all);
    const int cpu = mst_cpu_pin_self(1);
    cpu_set_t m = mask_now();
    if (n < 2 || pin_off()) {
        assert_int_equal(cpu, -1);
        assert_true(CPU_EQUAL(&m, &g_all));
        return;
    }
    assert_int_equal(cpu, nth_cpu(1));
    assert_int_equal(CPU_COUNT(&m), 1);
    assert_true(CPU_ISSET(cpu, &m));
    assert_int_equal(mst_cpu_pin_self(n), nth_cpu(0));     /* index mod n */
    mst_cpu_unpin_self();
    m = mask_now();
    assert_true(CPU_EQUAL(&m, &g_all));
}

typedef struct {
    atomic_int members;
    int cpu[2], count[2];
} team_seen;

static void look(void *arg) {
    team_seen *t = arg;
    const int i = mst_omp_team_thread();
    cpu_set_t m = mask_now();
    if (i < 2) {
        t->count[i] = CPU_COUNT(&m);
        t->cpu[i] = -1;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &m)) t->cpu[i] = c;
    }
    atomic_fetch_add(&t->members, 1);
}

/* Without a kernel team (no oneDNN, or one CPU) the team binding is the caller's alone. */
static void team_absent(void) {
    mst_omp_team_pin(true);
    cpu_set_t m = mask_now();
    if (CPU_COUNT(&g_all) < 2 || pin_off()) {
        assert_true(CPU_EQUAL(&m, &g_all));
    } else {
        assert_int_equal(CPU_COUNT(&m), 1);
        assert_true(CPU_ISSET(nth_cpu(0), &m));
    }
    mst_omp_team_pin(false);
    m = mask_now();
    assert_true(CPU_EQUAL(&m, &g_all));
}

static void test_team(void **state) {
    (void)state;
    if (!mst_onednn_available() || !mst_omp_team_attach() || CPU_COUNT(&g_all) < 2) {
        print_message("# no kernel team here (oneDNN %s, %d CPUs): the caller's binding alone\n",
                      mst_onednn_available() ? "loaded" : "missing", CPU_COUNT(&g_all));
        team_absent();
        return;
    }
    mst_omp_team_pin(true);
    team_seen t = {0};
    mst_omp_team_run(2, look, &t);
    assert_int_equal(atomic_load(&t.members), 2);
    if (pin_off()) {
        assert_int_equal(t.count[0], CPU_COUNT(&g_all));
        assert_int_equal(t.count[1], CPU_COUNT(&g_all));
    } else {
        assert_int_equal(t.count[0], 1);
        assert_int_equal(t.count[1], 1);
        assert_int_equal(t.cpu[0], nth_cpu(0));
        assert_int_equal(t.cpu[1], nth_cpu(1));
    }
    mst_omp_team_pin(false);
    team_seen u = {0};
    mst_omp_team_run(2, look, &u);
    assert_int_equal(u.count[0], CPU_COUNT(&g_all));
    assert_int_equal(u.count[1], CPU_COUNT(&g_all));
    cpu_set_t m = mask_now();
    assert_true(CPU_EQUAL(&m, &g_all));
}

int main(void) {
    CPU_ZERO(&g_all);
    if (sched_getaffinity(0, sizeof(g_all), &g_all) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_team),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
