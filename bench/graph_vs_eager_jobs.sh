#!/usr/bin/env bash
# graph_vs_eager_jobs.sh — is graph mode ever slower than eager on a shipped job? Runs every job
# in workloads/jobs/ (the short variants stand in for their full jobs: same model and shapes, fewer
# steps) through the real CLI, `mstune train JOB --set runtime.mode=eager|graph`, a fixed number of
# steps without evaluation or checkpoints, the two modes alternated for ROUNDS rounds; prints per job
# the median over rounds of summary.json's median step time in each mode and their ratio (> 1:
# graph faster). Step times are per-step medians, so graph mode's one-off compile is not in them
# (its cost is summary.json's compile_ms, printed beside), and the per-round ratios (each round's
# two runs are minutes apart at most, so their ratio is the robust figure on a noisy machine): their
# median, min and max, and in how many rounds graph mode was the faster. Timing only; never part of pass/fail.
#
#     bash bench/graph_vs_eager_jobs.sh [BUILD_DIR] [STEPS] [ROUNDS]      # defaults: build 60 5
#     GRAPH_VS_EAGER_JOBS=workloads/jobs/fashion_mlp.yaml GRAPH_VS_EAGER_SETS="data.batch_size=16" \
#         bash bench/graph_vs_eager_jobs.sh build 2000 12                 # one job, with extra --set
set -euo pipefail
build=${1:-build}
steps=${2:-60}
rounds=${3:-5}
bin=$build/mstune
[ -x "$bin" ] || { echo "graph_vs_eager_jobs: no $bin (make build first)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# a job and its short variant: keep the short one only
jobs=()
for j in workloads/jobs/*.yaml; do
    case "$j" in *_short.yaml) continue ;; esac
    short=${j%.yaml}_short.yaml
    if [ -f "$short" ]; then jobs+=("$short"); else jobs+=("$j"); fi
done
if [ -n "${GRAPH_VS_EAGER_JOBS:-}" ]; then read -r -a jobs <<< "$GRAPH_VS_EAGER_JOBS"; fi
sets=()
for kv in ${GRAPH_VS_EAGER_SETS:-}; do sets+=(--set "$kv"); done

field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

model=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
feats=$("$bin" list cpu 2>/dev/null | awk '$2 == "yes" {print $1}' | paste -sd' ')
echo "# $model; features: $feats; $steps steps per run, $rounds rounds alternated${GRAPH_VS_EAGER_SETS:+; --set $GRAPH_VS_EAGER_SETS}"
echo "| job | eager ms | graph ms | graph vs eager | per round: median [min-max] | graph faster in | compile ms |"
echo "|---|---|---|---|---|---|---|"
for job in "${jobs[@]}"; do
    e=() g=() ratios=()
    compile=0
    for r in $(seq "$rounds"); do
        for mode in eager graph; do
            out=$work/$mode
            rm -rf "$out"
            if ! "$bin" train "$job" --set runtime.mode=$mode --set train.steps="$steps" --set train.eval=false \
                --set train.checkpoint=false "${sets[@]}" --out "$out" > "$work/log" 2>&1; then
                echo "graph_vs_eager_jobs: $job ($mode) failed:" >&2
                tail -5 "$work/log" >&2
                exit 1
            fi
            ms=$(field "$out/summary.json" step_time_ms_median)
            if [ $mode = eager ]; then e+=("$ms"); else g+=("$ms"); compile=$(field "$out/summary.json" compile_ms); fi
        done
        ratios+=("$(awk -v e="${e[-1]}" -v g="${g[-1]}" 'BEGIN { print e / g }')")
    done
    rm_=$(median "${ratios[@]}")
    rlo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)
    rhi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
    wins=$(printf '%s\n' "${ratios[@]}" | awk '$1 > 1 {n++} END {print n + 0}')
    em=$(median "${e[@]}")
    gm=$(median "${g[@]}")
    awk -v j="$(basename "$job" .yaml)" -v e="$em" -v g="$gm" -v c="$compile" -v rm="$rm_" -v lo="$rlo" -v hi="$rhi" \
        -v w="$wins" -v n="$rounds" \
        'BEGIN { printf "| %s | %.3f | %.3f | %.2fx | %.2fx [%.2f-%.2f] | %d of %d rounds | %.0f |\n", j, e, g, e / g, rm, lo, hi, w, n, c }'
done
