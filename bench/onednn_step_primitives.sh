#!/usr/bin/env bash
# onednn_step_primitives.sh — what oneDNN executes in a training step, from its own log: the job
# is trained for STEPS steps with ONEDNN_VERBOSE=1, and oneDNN's execution lines of the last LAST
# steps (the first ones also hold the kernel choice's timing runs and primitive creation) are
# summed per primitive kind (reorder, convolution, matmul) and, for the reorders, per (formats,
# shape): count and ms per step, us per call. The step count comes from the convolutions (or
# matmuls) the job makes per step: the smallest period with which their lines repeat at the end
# of the log; give PER_STEP to fix it. oneDNN's log times each execution alone (no wait between them is counted). Timing only; run
# from the repository root after `make build`.
#
#     bench/onednn_step_primitives.sh workloads/jobs/fashion_cnn.yaml --set runtime.mode=graph
#     STEPS=40 LAST=20 PER_STEP=15 bench/onednn_step_primitives.sh workloads/jobs/fashion_cnn.yaml
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
STEPS=${STEPS:-30}
LAST=${LAST:-20}
PER_STEP=${PER_STEP:-}
[ $# -ge 1 ] || { echo "usage: $0 JOB.yaml [--set key=value ...]" >&2; exit 2; }
job=$1
shift
[ -f "$job" ] || { echo "$0: $job: no such job file" >&2; exit 2; }
[ "$LAST" -lt "$STEPS" ] || { echo "$0: LAST ($LAST) must be under STEPS ($STEPS)" >&2; exit 2; }
OUT=$(mktemp -d /tmp/mstune-onednn-prims.XXXXXX)
# shellcheck source=bench/machine.sh
. "$(dirname "$0")/machine.sh"
print_machine
echo "job $job $*, $STEPS steps, the last $LAST summed"
ONEDNN_VERBOSE=1 "$BIN" train "$job" --set train.steps="$STEPS" --set train.eval=false --set train.checkpoint=false "$@" \
  --out "$OUT/run" > "$OUT/log" 2>&1 || { echo "$0: the run failed, see $OUT/log" >&2; exit 1; }
grep '^onednn_verbose,exec,' "$OUT/log" > "$OUT/exec" || { echo "$0: no oneDNN execution in $OUT/log" >&2; exit 1; }
python3 - "$OUT/exec" "$LAST" "$PER_STEP" <<'PY'
import collections, sys
rows = [l.rstrip("\n").split(",") for l in open(sys.argv[1])]
last, per_step = int(sys.argv[2]), sys.argv[3]
# the heaviest primitive kind per step fixes the step's line count
kinds = collections.Counter(r[3] for r in rows)
anchor = "convolution" if kinds["convolution"] else "matmul"
if per_step:
    anchor_per_step = int(per_step)
else:
    # the smallest period with which the anchor's lines (kind, direction, formats, shape) repeat
    # over the last three periods: one step's calls, in steady state
    keys = [tuple(r[4:-1]) for r in rows if r[3] == anchor]
    anchor_per_step = next((p for p in range(1, len(keys) // 3 + 1)
                            if all(keys[-j] == keys[-j - p] for j in range(1, 2 * p + 1))), 0)
    if not anchor_per_step:
        sys.exit("no repeating step in the log: give PER_STEP")
# walk back from the end until LAST steps' worth of anchor calls are inside
need, n_anchor, start = anchor_per_step * last, 0, len(rows)
while start > 0 and n_anchor < need:
    start -= 1
    n_anchor += rows[start][3] == anchor
window = rows[start:]
steps = n_anchor / anchor_per_step
print(f"\n{anchor} calls a step: {anchor_per_step}; window: {len(window)} lines, {steps:g} steps\n")
print("| primitive | calls a step | ms a step |")
print("|---|---|---|")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in window:
    tot[r[3]] += float(r[-1]); cnt[r[3]] += 1
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"| {k} | {cnt[k] / steps:.1f} | {tot[k] / steps:.3f} |")
print("\n| reorder (formats) | shape | calls a step | us a call (mean) | ms a step |")
print("|---|---|---|---|---|")
rt = collections.defaultdict(float); rc = collections.Counter()
for r in window:
    if r[3] != "reorder":
        continue
    key = (r[6], r[-2])
    rt[key] += float(r[-1]); rc[key] += 1
for k in sorted(rt, key=lambda k: -rt[k]):
    print(f"| {k[0]} | {k[1]} | {rc[k] / steps:.1f} | {1000 * rt[k] / rc[k]:.1f} | {rt[k] / steps:.3f} |")
PY
