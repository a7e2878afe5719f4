#!/usr/bin/env bash
# profile_cost.sh — what the default profile costs, measured off vs on: `mstune train` and
# `mstune profile` of the same job alternated N times (mlp and cnn), each run's training-loop
# time per step from its summary.json, and the profiler's own estimate (profiler_overhead_share,
# every collector: records, sink hand-offs, sampler signals and unwinding). Prints, per job, the
# median off and on, the measured cost (on/off - 1) and the median reported estimate; the estimate
# should be within 1 point of the measured cost. Extra --set options go to both (e.g.
# "--set profile.sample_hz=97"). Run from the repository root after `make build`; on a machine
# shared with other builds the numbers are noisy — say so with them.
#
#     bench/profile_cost.sh            # N=5, jobs fashion_mlp and fashion_cnn, 6400 samples
#     N=3 LIMIT=3200 bench/profile_cost.sh --set profile.sampler=false
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
N=${N:-5}
LIMIT=${LIMIT:-6400}
JOBS=${JOBS:-"fashion_mlp fashion_cnn"}
OUT=$(mktemp -d /tmp/mstune-profile-cost.XXXXXX)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; extra: $*"
for job in $JOBS; do
  for i in $(seq 1 "$N"); do
    common=(--set data.limit="$LIMIT" --set train.epochs=1 --set train.eval=false --set train.checkpoint=false
            --set optimizer.warmup_steps=0 "$@")
    "$BIN" train "workloads/jobs/$job.yaml" "${common[@]}" --out "$OUT/$job-off-$i" > "$OUT/$job.log" 2>&1 || { echo "$job: failed, see $OUT/$job.log" >&2; exit 1; }
    "$BIN" profile "workloads/jobs/$job.yaml" "${common[@]}" --out "$OUT/$job-on-$i" > "$OUT/$job.log" 2>&1 || { echo "$job: failed, see $OUT/$job.log" >&2; exit 1; }
  done
done
python3 - "$OUT" "$N" $JOBS <<'PY'
import json, statistics, sys
out, n, jobs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("\n| job | off: ms/step (median of %d) | on: ms/step | measured cost | reported estimate | estimate - measured |" % n)
print("|---|---|---|---|---|---|")
for job in jobs:
    off, on, est = [], [], []
    for i in range(1, n + 1):
        a = json.load(open(f"{out}/{job}-off-{i}/summary.json"))
        b = json.load(open(f"{out}/{job}-on-{i}/summary.json"))
        off.append(1e3 * a["train_loop_s"] / a["steps"])
        on.append(1e3 * b["train_loop_s"] / b["steps"])
        est.append(100 * b.get("profiler_overhead_share", float("nan")))
    mo, mn, me = statistics.median(off), statistics.median(on), statistics.median(est)
    cost = 100 * (mn / mo - 1)
    print(f"| {job} | {mo:.4f} | {mn:.4f} | {cost:+.2f}% | {me:.2f}% | {me - cost:+.2f} pts |")
PY
