#!/usr/bin/env bash
# profiler_overhead.sh — the disabled profiler against a build with every record site compiled
# out (-DMSTUNE_PROFILING=OFF): step times of both, alternated three times, then the full
# per-level table. Run from the repository root after `make build`.
set -euo pipefail
cmake -S . -B build-noprof -DCMAKE_BUILD_TYPE=Release -DMSTUNE_PROFILING=OFF > /dev/null
cmake --build build-noprof --target bench_profiler -j "$(nproc)" > /dev/null
cmake --build build --target bench_profiler -j "$(nproc)" > /dev/null
for i in 1 2 3; do
  echo "== run $i: instrumented build, profiler off =="; ./build/bench_profiler --off-only | grep -E "batch|off"
  echo "== run $i: record sites compiled out ==";       ./build-noprof/bench_profiler --off-only | grep -E "batch|off"
done
./build/bench_profiler
