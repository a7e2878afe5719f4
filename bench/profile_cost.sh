#!/usr/bin/env bash
# profile_cost.sh — what the default profile costs, measured off vs on: `mstune train` and
# `mstune profile` of the same job alternated N times (mlp and cnn), each run's training-loop
# time per step from its summary.json, and the profiler's own estimate (profiler_overhead_share,
# every collector: records, sink hand-offs, sampler signals and unwinding). The pairs alternate
# their order (off-on, on-off, ...) so drift and warm caches fall on both sides alike. Prints, per
# job, the median off and on, the measured cost as the median of the paired costs (on_i/off_i - 1)
# with a 90% bootstrap interval of that median (2000 resamples of the pairs, fixed seed), and the
# median reported estimate; the estimate should be within 1 point of the measured cost, which the
# interval says whether N pairs can resolve. Extra --set options go to both (e.g.
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
    order="off on"
    [ $((i % 2)) -eq 0 ] && order="on off"
    for side in $order; do
      cmd=train
      [ "$side" = on ] && cmd=profile
      "$BIN" "$cmd" "workloads/jobs/$job.yaml" "${common[@]}" --out "$OUT/$job-$side-$i" > "$OUT/$job.log" 2>&1 || { echo "$job: failed, see $OUT/$job.log" >&2; exit 1; }
    done
  done
done
python3 - "$OUT" "$N" $JOBS <<'PY'
import json, random, statistics, sys
out, n, jobs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("\n| job | off: ms/step (median of %d) | on: ms/step | measured cost (median of paired) [90%% interval] | reported estimate | estimate - measured |" % n)
print("|---|---|---|---|---|---|")
rng = random.Random(12345)
for job in jobs:
    off, on, est, paired = [], [], [], []
    for i in range(1, n + 1):
        a = json.load(open(f"{out}/{job}-off-{i}/summary.json"))
        b = json.load(open(f"{out}/{job}-on-{i}/summary.json"))
        off.append(1e3 * a["train_loop_s"] / a["steps"])
        on.append(1e3 * b["train_loop_s"] / b["steps"])
        est.append(100 * b.get("profiler_overhead_share", float("nan")))
        paired.append(100 * (on[-1] / off[-1] - 1))
    mo, mn, me = statistics.median(off), statistics.median(on), statistics.median(est)
    cost = statistics.median(paired)
    boot = sorted(statistics.median(rng.choices(paired, k=n)) for _ in range(2000))
    lo, hi = boot[int(0.05 * len(boot))], boot[int(0.95 * len(boot)) - 1]
    print(f"| {job} | {mo:.4f} | {mn:.4f} | {cost:+.2f}% [{lo:+.2f}, {hi:+.2f}] | {me:.2f}% | {me - cost:+.2f} pts |")
PY
