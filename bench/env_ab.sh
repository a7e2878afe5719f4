#!/usr/bin/env bash
# env_ab.sh — two runtime settings given as environment variables (the pool's team, libgomp's spin
# count, ...), each through bench_compare's step (eager, graph, graph O2 bf16) for the rows asked,
# alternated ROUNDS times (A, B, A, B, ...) so both see the same drift of a shared machine. Prints
# per row and configuration the median step of each over the rounds and the per-round ratio A / B
# (> 1: B faster): median, quartiles, and in how many rounds B was faster. Timing only.
#
#     bench/env_ab.sh "MSTUNE_POOL_TEAM=own" "MSTUNE_POOL_TEAM=openmp" 10 cnn:64 mlp:16
#     bench/env_ab.sh "GOMP_SPINCOUNT=3000" "GOMP_SPINCOUNT=10000" 10 cnn:64
#     ENV_AB_BUILD=build ENV_AB_REPEATS=15 ...      # the build (default build), timed steps per run
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: bench/env_ab.sh 'VAR=V ...' 'VAR=V ...' ROUNDS ROW..." >&2; exit 2; }
a=$1 b=$2 rounds=$3
shift 3
build=${ENV_AB_BUILD:-build}
repeats=${ENV_AB_REPEATS:-15}
[ -x "$build/bench_compare" ] || cmake --build "$build" --target bench_compare >&2
work=$(mktemp)
trap 'rm -f "$work"' EXIT
MST_BENCH_REPEATS=1 "$build/bench_compare" 2>/dev/null | head -1     # the CPU and its features
for ((r = 0; r < rounds; r++)); do
    # shellcheck disable=SC2086  # the assignments split on purpose
    env $a MST_BENCH_REPEATS="$repeats" "$build/bench_compare" "$@" 2>/dev/null | grep -v '^#' | sed "s/^/A /" >> "$work"
    # shellcheck disable=SC2086
    env $b MST_BENCH_REPEATS="$repeats" "$build/bench_compare" "$@" 2>/dev/null | grep -v '^#' | sed "s/^/B /" >> "$work"
done
echo "A: $a; B: $b; $rounds rounds alternated, $repeats timed steps a run"
/usr/bin/python3 - "$work" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
keys = []
for r in rows:
    k = tuple(r[1:4])
    if k not in keys: keys.append(k)
print("| model | batch | mode | A ms | B ms | A / B per round: median [q1-q3] | B faster |")
print("|---|---|---|---|---|---|---|")
for k in keys:
    a = [float(r[4]) for r in rows if r[0] == "A" and tuple(r[1:4]) == k]
    b = [float(r[4]) for r in rows if r[0] == "B" and tuple(r[1:4]) == k]
    q = sorted(x / y for x, y in zip(a, b))
    n = len(q)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {st.median(a):.3f} | {st.median(b):.3f} | "
          f"{st.median(q):.3f}x [{q[n // 4]:.2f}-{q[(3 * n) // 4]:.2f}] | {sum(x > 1 for x in q)} of {n} |")
EOF
