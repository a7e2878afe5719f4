/* omp_team.h — the process's OpenMP team (libgomp's), borrowed for the kernel pool's regions once
 * a library that runs on it is loaded (Debian's oneDNN).
 *
 * Why: oneDNN's primitives run on libgomp's threads and the runtime's own kernels on the pool's;
 * on 2 cores the two sets took turns, each asleep while the other worked, so every switch from a
 * convolution to a batch norm (and back) paid a futex wake of a halted vCPU (25-40 us on the
 * project's VM; ~350 us of a 16 ms cnn step). Running the pool's regions on the same team makes
 * one set of threads serve both: a thread that has just finished a oneDNN primitive is still
 * spinning (GOMP_SPINCOUNT) when the next batch-norm region starts, and never two spinning pools
 * on the same cores (DESIGN.md). Nothing else changes: the pool still decides the chunks, and a
 * chunk's result does not depend on which thread runs it (runtime/threadpool.h).
 *
 *     mst_omp_team_attach();                        // after dlopen of a library that uses libgomp
 *     if (mst_omp_team_ready()) mst_omp_team_run(2, fn, arg);   // fn(arg) on 2 threads
 *
 * libgomp is never loaded by this file (dlopen RTLD_NOLOAD): a process without oneDNN keeps the
 * pool's own threads. MSTUNE_POOL_TEAM=own keeps them also when it is loaded (A/B benchmarks,
 * tests of the fallback).
 */
#ifndef MST_RUNTIME_OMP_TEAM_H
#define MST_RUNTIME_OMP_TEAM_H

#include <stdbool.h>

/* Look libgomp up in the process (already loaded, never loading it) and, unless
 * MSTUNE_POOL_TEAM=own, adopt its team: start one thread per online CPU with the signals the
 * program handles blocked, as the pool's own workers block them. Idempotent and thread-safe;
 * false when there is no team to use. */
bool mst_omp_team_attach(void);
/* Whether attaching would adopt a team where libgomp is loaded (MSTUNE_POOL_TEAM is not "own"):
 * the loader of such a library picks libgomp's spin count by it. */
bool mst_omp_team_wanted(void);
/* Whether regions run on the team now (an atomic load). */
bool mst_omp_team_ready(void);
/* Run fn(arg) once on each of n threads of the calling thread's team (the caller is thread 0)
 * and return when all have returned. Nested inside a team region it runs on the caller alone. */
void mst_omp_team_run(int n, void (*fn)(void *), void *arg);
/* Bind every member of the team to a CPU of its own (the caller, member 0, to the process's first
 * allowed CPU), or let them all go again (runtime/cpu_pin.h). Without an adopted team, the caller
 * alone. */
void mst_omp_team_pin(bool on);
/* The calling thread's number in the current team region (0 = the caller, or outside a region, or
 * no team adopted). */
int mst_omp_team_thread(void);

#endif
