#!/usr/bin/env bash
# train_variants.sh — `mstune train` of one job under several settings, rotated in order within
# each of N rounds (drift on a shared machine falls on every variant alike), each run's training
# loop time per step from its summary.json. Prints per variant the median ms/step, the median over
# rounds of (first variant / this variant: > 1 faster than the first), and every round's ms/step
# sorted. A variant is "name=--set key=value ..." (empty after '=' for the job as it is); an
# environment assignment may lead it ("name=VAR=value --set ..."); MSTUNE_BIN=path there runs that
# variant with another build's binary (two builds of one job side by side). Timing only; run from
# the repository root after `make build`. COPIES=k (default 1) starts k copies of each run at once
# (k trainings sharing the machine, as two jobs on one host do); every copy's time is counted.
#
#     N=5 bench/train_variants.sh workloads/scenarios/loader_starved.yaml "sync=" \
#         "w2=--set data.num_workers=2 --set data.prefetch=4" \
#         "w2t1=--set data.num_workers=2 --set data.prefetch=4 --set runtime.threads=1"
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
N=${N:-5}
COPIES=${COPIES:-1}
[ $# -ge 2 ] || { echo "usage: $0 JOB.yaml 'name=[VAR=value] [--set k=v ...]' ..." >&2; exit 2; }
job=$1
shift
[ -f "$job" ] || { echo "$0: $job: no such job file" >&2; exit 2; }
names=()
declare -A args
for v in "$@"; do
  n=${v%%=*}
  [ "$n" != "$v" ] && [ -n "$n" ] || { echo "$0: '$v': expected name=settings" >&2; exit 2; }
  names+=("$n")
  args[$n]=${v#*=}
done
OUT=$(mktemp -d /tmp/mstune-train-variants.XXXXXX)
# shellcheck source=bench/machine.sh
. "$(dirname "$0")/machine.sh"
print_machine
echo "job $job, $N rounds"
for i in $(seq 1 "$N"); do
  for n in "${names[@]}"; do
    envs=()
    rest=()
    # shellcheck disable=SC2206  # the settings split on purpose
    words=(${args[$n]})
    for w in "${words[@]}"; do
      if [ ${#rest[@]} -eq 0 ] && [[ $w == *=* ]] && [[ $w != --* ]]; then envs+=("$w"); else rest+=("$w"); fi
    done
    bin=$BIN
    for e in "${envs[@]}"; do [[ $e == MSTUNE_BIN=* ]] && bin=${e#MSTUNE_BIN=}; done
    pids=()
    for c in $(seq 1 "$COPIES"); do
      env "${envs[@]}" "$bin" train "$job" "${rest[@]}" --set train.eval=false --set train.checkpoint=false \
        --out "$OUT/$n-$i-$c" > "$OUT/$n-$i-$c.log" 2>&1 &
      pids+=($!)
    done
    for c in $(seq 1 "$COPIES"); do
      wait "${pids[$((c - 1))]}" || { echo "$n: failed, see $OUT/$n-$i-$c.log" >&2; exit 1; }
    done
  done
done
python3 - "$OUT" "$N" "$COPIES" "${names[@]}" <<'PY'
import json, statistics, sys
out, rounds, copies, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
n = rounds * copies
ms = {k: [] for k in names}
for i in range(1, rounds + 1):
    for c in range(1, copies + 1):
        for k in names:
            a = json.load(open(f"{out}/{k}-{i}-{c}/summary.json"))
            ms[k].append(1e3 * a["train_loop_s"] / a["steps"])
print(f"\n| variant | ms/step (median of {n}) | {names[0]} / variant (median of rounds) | every round, sorted |")
print("|---|---|---|---|")
for k in names:
    ratio = statistics.median(ms[names[0]][i] / ms[k][i] for i in range(n))
    print(f"| {k} | {statistics.median(ms[k]):.4f} | {ratio:.2f}x | {' '.join(f'{v:.3f}' for v in sorted(ms[k]))} |")
PY
