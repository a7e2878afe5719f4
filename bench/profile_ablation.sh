#!/usr/bin/env bash
# profile_ablation.sh — which part of `mstune profile` costs what: `mstune train` and any number of
# profile variants of one job, rotated in order within each of N rounds (drift and warm caches fall
# on every variant alike), each run's training-loop time per step from its summary.json. Prints per
# variant the median ms/step, the median over rounds of (variant / train of the same round - 1),
# every round's cost sorted (the spread says what a median can resolve), and the median estimate
# (profiler_overhead_share). A variant is "name=binary command args..." ; the binary lets a build of
# an earlier commit run beside the current one. Run from the repository root after `make build`.
#
#     bench/profile_ablation.sh "prof=build/mstune profile" "nosamp=build/mstune profile --set profile.sampler=false"
#     N=20 JOB=fashion_mlp LIMIT=60000 bench/profile_ablation.sh "hz29=build/mstune profile --set profile.sample_hz=29"
set -euo pipefail
N=${N:-15}
JOB=${JOB:-fashion_cnn}
LIMIT=${LIMIT:-6400}
TRAIN_BIN=${MSTUNE_BIN:-./build/mstune}
OUT=$(mktemp -d /tmp/mstune-profile-ablation.XXXXXX)
[ $# -ge 1 ] || { echo "usage: $0 'name=binary profile [--set ...]' ..." >&2; exit 2; }
names=(train)
declare -A cmd
cmd[train]="$TRAIN_BIN train"
for v in "$@"; do
  n=${v%%=*}
  [ "$n" != "$v" ] && [ "$n" != train ] || { echo "$0: '$v': expected name=binary command args" >&2; exit 2; }
  names+=("$n")
  cmd[$n]=${v#*=}
done
common=(--set data.limit="$LIMIT" --set train.epochs=1 --set train.eval=false --set train.checkpoint=false
        --set optimizer.warmup_steps=0)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; job $JOB, $LIMIT samples, $N rounds"
for i in $(seq 1 "$N"); do
  k=$((i % ${#names[@]}))
  order=("${names[@]:$k}" "${names[@]:0:$k}")
  for n in "${order[@]}"; do
    # shellcheck disable=SC2086  # the variant's words are its command line
    ${cmd[$n]} "workloads/jobs/$JOB.yaml" "${common[@]}" --out "$OUT/$n-$i" > "$OUT/$n.log" 2>&1 ||
      { echo "$n: failed, see $OUT/$n.log" >&2; exit 1; }
  done
done
python3 - "$OUT" "$N" "${names[@]}" <<'PY'
import json, statistics, sys
out, n, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def per_step(name, i):
    a = json.load(open(f"{out}/{name}-{i}/summary.json"))
    return a["train_loop_s"] / a["steps"], a.get("profiler_overhead_share", 0.0)
base = [per_step("train", i)[0] for i in range(1, n + 1)]
print("\n| variant | ms/step (median) | cost vs train (median of rounds) | every round, sorted | reported estimate |")
print("|---|---|---|---|---|")
for name in names:
    t, cost, est = [], [], []
    for i in range(1, n + 1):
        v, e = per_step(name, i)
        t.append(1e3 * v); cost.append(100 * (v / base[i - 1] - 1)); est.append(100 * e)
    spread = " ".join(f"{c:+.1f}" for c in sorted(cost))
    print(f"| {name} | {statistics.median(t):.4f} | {statistics.median(cost):+.2f}% | {spread} | {statistics.median(est):.2f}% |")
PY
