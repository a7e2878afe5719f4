#!/usr/bin/env bash
# profile_cost_inrun.sh — what a profile costs, measured inside one run: `mstune profile` with a
# schedule of WAIT steps off (recorder and stack sampler paused) then ACTIVE steps recorded, over
# and over (profile.wait / profile.active, warmup 0); each off window and the recording window
# after it are a pair milliseconds apart, and the run's summary.json holds the ratio of the means
# over pairs (recording / off - 1) with its 90% t interval, beside the collectors' own estimate
# over the same recording steps (profiler/self_cost.h). Separate runs of a job on a
# shared VM differ by more than the cost (bench/profile_cost.sh's intervals span 10-20 points);
# pairs inside one run do not carry that. Prints one row per run and per setting, then each
# setting's median over runs. Settings: the default profile; the default with every kept step
# recording its ops (profile.op_every=1, the default before 2026-12-04); steps only (level 0, no sampler: the
# least a profile records, a floor for the method); the sampler at 1 kHz (a cost large enough that
# the measurement must find it: the check that the method sees what it should). Named in SETTINGS
# only: ops_one_in_8 (profile.op_every=8), no_sampler, sampler_11hz (the default's variants).
#
#     bash bench/profile_cost_inrun.sh                 # RUNS=3, WAIT=ACTIVE=12, EPOCHS=3, fashion_mlp fashion_cnn
#     RUNS=5 JOBS=fashion_mlp bash bench/profile_cost_inrun.sh --set data.batch_size=16
#     SETTINGS="default no_sampler" RUNS=8 JOBS=fashion_mlp bash bench/profile_cost_inrun.sh
#     JOBS=workloads/scenarios/dispatch_bound.yaml bash bench/profile_cost_inrun.sh   # a job by its path
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
RUNS=${RUNS:-3}
WAIT=${WAIT:-12}
ACTIVE=${ACTIVE:-12}     # a multiple of profile.op_every (4): the windows record ops on a default profile's share of steps
LIMIT=${LIMIT:-60000}
EPOCHS=${EPOCHS:-3}
JOBS=${JOBS:-"fashion_mlp fashion_cnn"}
[ -x "$BIN" ] || { echo "profile_cost_inrun: no $BIN (make build first)" >&2; exit 2; }
OUT=$(mktemp -d /tmp/mstune-profile-cost-inrun.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
feats=$("$BIN" list cpu 2>/dev/null | awk '$2 == "yes" {print $1}' | paste -sd' ')
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; features: $feats"
echo "# $WAIT off / $ACTIVE recording steps per pair, data.limit=$LIMIT, $EPOCHS epochs, $RUNS runs per setting; extra: $*"
echo "| job | setting | run | pairs | off ms/step | recording ms/step | measured cost [90% interval] | estimated | estimate - measured |"
echo "|---|---|---|---|---|---|---|---|---|"
declare -A settings=([default]="" [ops_every_step]="--set profile.op_every=1" [ops_one_in_8]="--set profile.op_every=8"
                     [no_sampler]="--set profile.sampler=false" [sampler_11hz]="--set profile.sample_hz=11"
                     [steps_only]="--set profile.level=0 --set profile.sampler=false"
                     [sampler_1khz]="--set profile.sample_hz=1000")
SETTINGS=${SETTINGS:-"default ops_every_step steps_only sampler_1khz"}
job_file() { case $1 in *.yaml) echo "$1" ;; *) echo "workloads/jobs/$1.yaml" ;; esac; }
for job in $JOBS; do
  file=$(job_file "$job")
  [ -f "$file" ] || { echo "profile_cost_inrun: $file: no such job file" >&2; exit 2; }
  for r in $(seq 1 "$RUNS"); do
    for setting in $SETTINGS; do
      dir=$OUT/$(basename "$job" .yaml)-$setting-$r
      # shellcheck disable=SC2086
      "$BIN" profile "$file" --set profile.wait="$WAIT" --set profile.warmup=0 --set profile.active="$ACTIVE" \
        --set data.limit="$LIMIT" --set train.epochs="$EPOCHS" --set train.eval=false --set train.checkpoint=false \
        --set optimizer.warmup_steps=0 ${settings[$setting]} "$@" --out "$dir" > "$OUT/log" 2>&1 ||
        { echo "profile_cost_inrun: $job ($setting) failed:" >&2; tail -5 "$OUT/log" >&2; exit 1; }
      python3 - "$dir/summary.json" "$job" "$setting" "$r" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["profiler_cost_measured"]
iv = "[%+.2f, %+.2f]" % (100 * m["lo"], 100 * m["hi"]) if m["lo"] is not None else "(too few pairs)"
est = m["estimate"]
print("| %s | %s | %s | %d | %.4f | %.4f | %+.2f%% %s | %.2f%% | %+.2f pts |" % (sys.argv[2], sys.argv[3], sys.argv[4], m["pairs"],
      m["off_step_ms"], m["recording_step_ms"], 100 * m["cost"], iv, 100 * est, 100 * (est - m["cost"])))
PY
    done
  done
done
echo
echo "| job | setting | median measured cost over runs | median estimate | estimate - measured |"
echo "|---|---|---|---|---|"
python3 - "$OUT" "$JOBS" "$SETTINGS" <<'PY'
import glob, json, statistics, sys
out, jobs, settings = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
for job in jobs:
    for setting in settings:
        ms = [json.load(open(f))["profiler_cost_measured"] for f in sorted(glob.glob(f"{out}/{job.split('/')[-1].removesuffix('.yaml')}-{setting}-*/summary.json"))]
        c = statistics.median(100 * m["cost"] for m in ms)
        e = statistics.median(100 * m["estimate"] for m in ms)
        print(f"| {job} | {setting} | {c:+.2f}% | {e:.2f}% | {e - c:+.2f} pts |")
PY
