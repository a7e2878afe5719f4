#!/usr/bin/env bash
# thread_interference.sh — does the 2-thread step keep its speed when a low-priority process
# shares a core? Times the cnn (and mlp) graph step with bench_compare, idle and then beside
# `nice -n 19 sh -c 'while :; do :; done'` pinned to CPU 0 (taskset, when present), alternated
# ROUNDS times; prints the best median of each and the ratio (the issue's bar: within 1.3x).
# Only meaningful on an otherwise quiet machine: on a shared one both columns carry the others' load.
#
#     bench/thread_interference.sh [BUILD_DIR]           # cnn:32 cnn:64 mlp:64, 3 rounds
#     THREAD_INTERFERENCE_QUICK=1 bench/thread_interference.sh   # cnn:32, 1 round, few repeats
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rows=(cnn:32 cnn:64 mlp:64)
rounds=3
repeats=15
if [ -n "${THREAD_INTERFERENCE_QUICK:-}" ] && [ "${THREAD_INTERFERENCE_QUICK}" != 0 ]; then
    rows=(cnn:32); rounds=1; repeats=3
fi
[ -x "$build/bench_compare" ] || cmake --build "$build" --target bench_compare >&2
hog_pid=""
stop_hog() { if [ -n "$hog_pid" ]; then kill "$hog_pid" 2>/dev/null || true; wait "$hog_pid" 2>/dev/null || true; hog_pid=""; fi; }
trap stop_hog EXIT
start_hog() {
    if command -v taskset >/dev/null; then nice -n 19 taskset -c 0 sh -c 'while :; do :; done' &
    else nice -n 19 sh -c 'while :; do :; done' & fi
    hog_pid=$!
}
run() { MST_BENCH_THREADS=2 MST_BENCH_REPEATS=$repeats OPENBLAS_NUM_THREADS=1 "$build/bench_compare" "${rows[@]}" | grep -v '^#'; }
idle="" loaded=""
for ((r = 0; r < rounds; r++)); do
    idle+=$(run)$'\n'
    start_hog
    loaded+=$(run)$'\n'
    stop_hog
done
MST_BENCH_REPEATS=1 "$build/bench_compare" | head -1 | sed 's/; [0-9]* threads$//'
echo "2 threads; best of $rounds alternated rounds, medians of $repeats steps (ms); hog: nice -n 19 busy loop$(command -v taskset >/dev/null && echo ' on CPU 0')"
echo
echo "| model | batch | mode | idle ms | with nice-19 hog ms | ratio |"
echo "|---|---|---|---|---|---|"
bestof() { echo "$1" | awk -v m="$2" -v b="$3" -v mode="$4" '$1==m && $2==b && $3==mode && (x=="" || $4<x) {x=$4} END {print x}'; }
for row in "${rows[@]}"; do
    m=${row%%:*}; b=${row##*:}
    for mode in eager graph graph_o2_bf16; do
        i=$(bestof "$idle" "$m" "$b" "$mode"); l=$(bestof "$loaded" "$m" "$b" "$mode")
        awk -v m="$m" -v b="$b" -v mode="$mode" -v i="$i" -v l="$l" 'BEGIN { printf "| %s | %s | %s | %.3f | %.3f | %.2fx |\n", m, b, mode, i, l, l / i }'
    done
done
