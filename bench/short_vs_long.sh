#!/usr/bin/env bash
# short_vs_long.sh — does a short run measure what a long run of the same job does? An advisor
# trial of a small job is a short process, so anything that only happens in a process's first
# moments (a library's start-up threads, first-touch costs) can make a change look faster or
# slower than it is. This runs one job with and without a change (A = the job's own settings,
# B = A plus CHANGE) at two sizes (SHORT and LONG --set lists, e.g. sample counts), alternated,
# ROUNDS times, and prints per binary and size the median step and the loop time per update of
# A and B, with B/A as a gain (> 1: the change is faster). Two binaries (MSTUNE_BIN_B) are
# alternated too, so a fix is compared in the same minutes.
#
#     bench/short_vs_long.sh                          # subnormal_weights, 2 loader workers, 100 vs 2000 steps
#     MSTUNE_BIN_B=/tmp/old/build/mstune ROUNDS=5 bench/short_vs_long.sh
#     CHANGE="runtime.mode=graph" bench/short_vs_long.sh workloads/scenarios/dispatch_bound.yaml
set -euo pipefail
JOB=${1:-workloads/scenarios/subnormal_weights.yaml}
ROUNDS=${ROUNDS:-5}
CHANGE=${CHANGE:-data.num_workers=2}
SHORT=${SHORT:-data.synthetic.samples=3200}
LONG=${LONG:-data.synthetic.samples=64000}
BINS=("${MSTUNE_BIN:-./build/mstune}")
[[ -n "${MSTUNE_BIN_B:-}" ]] && BINS+=("$MSTUNE_BIN_B")
OUT=$(mktemp -d /tmp/mstune-short-long.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
sets() { local a=(); for kv in $*; do a+=(--set "$kv"); done; echo "${a[@]}"; }
# shellcheck source=bench/machine.sh
. "$(dirname "$0")/machine.sh"
print_machine
echo "job $JOB; change $CHANGE; short: $SHORT; long: $LONG; $ROUNDS rounds alternated over ${#BINS[@]} binaries"
for r in $(seq 1 "$ROUNDS"); do
  for b in "${!BINS[@]}"; do
    for size in short long; do
      [[ $size == short ]] && S=$SHORT || S=$LONG
      # shellcheck disable=SC2046
      "${BINS[$b]}" train "$JOB" --set train.eval=false $(sets $S) --out "$OUT/$b-$size-A-$r" > /dev/null 2>&1
      # shellcheck disable=SC2046
      "${BINS[$b]}" train "$JOB" --set train.eval=false $(sets $S) $(sets $CHANGE) --out "$OUT/$b-$size-B-$r" > /dev/null 2>&1
    done
  done
done
python3 - "$OUT" "$ROUNDS" "${BINS[@]}" <<'PY'
import json, statistics, sys
out, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
print("\n| binary | size | steps | A median step ms | B median step ms | A loop ms/update | B loop ms/update | gain (loop, A/B) [rounds' range] |")
print("|---|---|---|---|---|---|---|---|")
for b, name in enumerate(bins):
    for size in ("short", "long"):
        got = {}
        for arm in "AB":
            rows = [json.load(open(f"{out}/{b}-{size}-{arm}-{r}/summary.json")) for r in range(1, rounds + 1)]
            got[arm] = ([s["step_time_ms_median"] for s in rows],
                        [1e3 * s["train_loop_s"] / max(1, s["applied_updates"]) for s in rows], rows[0]["steps"])
        gains = [a / b_ for a, b_ in zip(got["A"][1], got["B"][1])]
        print(f"| {name} | {size} | {got['A'][2]} | {med(got['A'][0]):.4f} | {med(got['B'][0]):.4f} | "
              f"{med(got['A'][1]):.4f} | {med(got['B'][1]):.4f} | {med(gains):.2f}x [{min(gains):.2f}-{max(gains):.2f}] |")
PY
