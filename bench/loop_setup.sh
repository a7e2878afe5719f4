#!/usr/bin/env bash
# loop_setup.sh — what a short training loop spends outside its steady steps: `mstune train` of a
# job in eager and graph mode, alternated, ROUNDS times, each run's summary.json read back:
# train_loop_s (what the advisor judges), the median step x steps (the steady part), the
# difference (warm-up, compiles, library loading), and graph mode's compile_ms. Medians over the
# rounds. Two binaries (MSTUNE_BIN_B) are alternated too, so a change to the loop's one-off costs is
# compared in the same minutes.
#
#     bench/loop_setup.sh                                   # dispatch_bound, 7 rounds
#     MSTUNE_BIN_B=/tmp/old/build/mstune ROUNDS=9 bench/loop_setup.sh workloads/scenarios/dispatch_bound.yaml
#     SETS="train.steps=20 data.batch_size=64 train.eval=false" bench/loop_setup.sh workloads/jobs/fashion_cnn.yaml
set -euo pipefail
JOB=${1:-workloads/scenarios/dispatch_bound.yaml}
ROUNDS=${ROUNDS:-7}
BINS=("${MSTUNE_BIN:-./build/mstune}")
EXTRA=()
for kv in ${SETS:-}; do EXTRA+=(--set "$kv"); done
[[ -n "${MSTUNE_BIN_B:-}" ]] && BINS+=("$MSTUNE_BIN_B")
OUT=$(mktemp -d /tmp/mstune-loop-setup.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
# shellcheck source=bench/machine.sh
. "$(dirname "$0")/machine.sh"
print_machine
echo "job $JOB ${SETS:+(--set $SETS) }, $ROUNDS rounds alternated over ${#BINS[@]} binaries x eager/graph"
for r in $(seq 1 "$ROUNDS"); do
  for b in "${!BINS[@]}"; do
    for mode in eager graph; do
      "${BINS[$b]}" train "$JOB" --set runtime.mode=$mode ${EXTRA[@]+"${EXTRA[@]}"} --out "$OUT/$b-$mode-$r" > /dev/null 2>&1
    done
  done
done
python3 - "$OUT" "$ROUNDS" "${BINS[@]}" <<'PY'
import json, statistics, sys
out, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("\n| binary | mode | loop ms | median step x steps ms | loop - steady ms | compile ms |")
print("|---|---|---|---|---|---|")
for b, name in enumerate(bins):
    for mode in ("eager", "graph"):
        rows = [json.load(open(f"{out}/{b}-{mode}-{r}/summary.json")) for r in range(1, rounds + 1)]
        loop = [1e3 * s["train_loop_s"] for s in rows]
        steady = [s["step_time_ms_median"] * s["steps"] for s in rows]
        rest = [l - st for l, st in zip(loop, steady)]
        comp = [s.get("compile_ms", 0) for s in rows]
        med = statistics.median
        print(f"| {name} | {mode} | {med(loop):.2f} [{min(loop):.2f}-{max(loop):.2f}] | {med(steady):.2f} | "
              f"{med(rest):.2f} [{min(rest):.2f}-{max(rest):.2f}] | {med(comp):.2f} |")
PY
