#!/usr/bin/env bash
# overlap_pair.sh — the overlap bar of issue 19: one data-parallel job, 2 ranks x 1 thread, run with
# runtime.comm.overlap false and true (and with OVERLAP_THREAD=1 overlap on plus the progress thread)
# alternated ROUNDS times (off, on, off, on, ...), so the settings see the same drift of the machine. Per run it reads summary.json: rank 0's median step,
# each rank's median exposed comm per step (the time the main thread spends in the communicator:
# waits plus progress polls) and hidden comm (in flight while the thread computed); the run's exposed
# and hidden are the mean of the two ranks'. Prints every run, then the median over the rounds per
# setting and the ratio exposed(on) / exposed(off) (the bar: <= 0.5), beside the step of one process
# with the per-rank batch and 1 thread (no communication: what the two ranks' step would be if the
# all-reduce cost nothing).
#
# The job (the all-reduce a visible share): the zoo's mlp 784-1024-1024-10 (7,454,760 gradient bytes
# per step), synthetic 28x28 data, per-rank batch 32, 2 buckets (runtime.comm.bucket_mb 1).
#
#     bench/overlap_pair.sh [BUILD_DIR] [ROUNDS]            # build, 5
#     OVERLAP_MODE=graph                                     # eager (default) or graph
#     OVERLAP_BATCH=32 OVERLAP_BUCKET_MB=1 OVERLAP_STEPS=80  # per-rank batch, bucket size, steps
#     OVERLAP_BIND=core                                      # mpirun --bind-to core instead of none
#     OVERLAP_THREAD=1                                       # a third setting: overlap on + runtime.comm.progress_thread
#     OVERLAP_PROFILE_DIR=DIR                                # then one `mstune profile` pair: DIR/off, DIR/on
#     (OMPI_MCA_* in the environment reach the ranks, e.g. OMPI_MCA_coll_libnbc_iallreduce_algorithm=1)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
mode=${OVERLAP_MODE:-eager}
batch=${OVERLAP_BATCH:-32}
bucket=${OVERLAP_BUCKET_MB:-1}
steps=${OVERLAP_STEPS:-80}
bind=${OVERLAP_BIND:-none}
settings="off on"
[ "${OVERLAP_THREAD:-0}" != 0 ] && settings="off on thread"
py3=/usr/bin/python3
mstune="$build/mstune"
[ -x "$mstune" ] || { echo "overlap_pair.sh: $mstune not built (cmake --build $build)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "overlap_pair.sh: ROUNDS: expected a positive integer, got '$rounds'" >&2; exit 2; }
case "$mode" in eager|graph) ;; *) echo "overlap_pair.sh: OVERLAP_MODE: expected eager or graph, got '$mode'" >&2; exit 2;; esac
case "$bind" in none|core) ;; *) echo "overlap_pair.sh: OVERLAP_BIND: expected none or core, got '$bind'" >&2; exit 2;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/job.yaml" <<YAML
name: overlap_pair
model:
  name: mlp
  hidden1: 1024
  hidden2: 1024
data:
  dataset: synthetic
  batch_size: $batch
  synthetic:
    samples: 16384
    test_samples: 64
train:
  epochs: 1
  steps: $steps
  eval: false
runtime:
  mode: $mode
  threads: 2
  comm:
    bucket_mb: $bucket
YAML
if [ "$bind" = core ]; then      # the launcher passes --bind-to none; a wrapper swaps it (cli/launch.c: MSTUNE_MPIRUN)
    cat > "$tmp/mpirun" <<'SH'
#!/usr/bin/env bash
args=()
for a in "$@"; do [ "$a" = none ] && [ "${args[-1]:-}" = --bind-to ] && a=core; args+=("$a"); done
exec mpirun "${args[@]}"
SH
    chmod +x "$tmp/mpirun"
    export MSTUNE_MPIRUN="$tmp/mpirun"
fi
# one run's numbers: step (rank 0's median), exposed and hidden (mean of the ranks' medians), each rank's exposed
read_run() {
    $py3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["distributed"]["per_rank"]
e = [x["comm_exposed_ms_median"] for x in r]
h = [x["comm_hidden_ms_median"] for x in r]
print("%.3f %.3f %.3f %s" % (d["step_time_ms_median"], sum(e) / len(e), sum(h) / len(h), "/".join("%.3f" % v for v in e)))
PY
}
# the progress lines go to a log, shown when a run fails
run_mstune() { "$mstune" "$@" > "$tmp/log" 2>&1 || { echo "overlap_pair.sh: mstune $* failed:" >&2; tail -20 "$tmp/log" >&2; exit 1; }; }
run_mstune train "$tmp/job.yaml" --set runtime.threads=1 --out "$tmp/single"
single=$($py3 -c "import json, sys; print('%.3f' % json.load(open(sys.argv[1]))['step_time_ms_median'])" "$tmp/single/summary.json")
runs=""
for ((r = 1; r <= rounds; r++)); do
    for st in $settings; do
        ov=$([ $st = off ] && echo false || echo true)
        th=$([ $st = thread ] && echo true || echo false)
        run_mstune train "$tmp/job.yaml" --nproc 2 --set runtime.comm.overlap=$ov --set runtime.comm.progress_thread=$th --out "$tmp/r$r-$st"
        runs+="$r $st $(read_run "$tmp/r$r-$st/summary.json")"$'\n'
    done
done
echo "# overlap pair: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores;" \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512bw|avx512_bf16|avx512_vnni|amx_bf16|avx512_fp16|f16c)$' | tr '\n' ' ')"
echo "# $(mpirun --version 2>/dev/null | head -1); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# job: mlp 784-1024-1024-10, $mode, 2 ranks x 1 thread, per-rank batch $batch, bucket_mb $bucket, $steps steps, --bind-to $bind," \
     "$rounds alternated rounds$(env | grep -o '^OMPI_MCA_[A-Za-z0-9_]*=[^ ]*' | sed 's/^/; /' | tr -d '\n')"
echo
echo "| round | setting | step ms | exposed comm ms/step | exposed rank 0 / rank 1 | hidden ms/step |"
echo "|---|---|---|---|---|---|"
echo -n "$runs" | awk '{printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $6, $5}'
echo
echo "$runs" | $py3 -c "
import statistics as st, sys
rows = [l.split() for l in sys.stdin if l.strip()]
single = float(sys.argv[1])
med = {}
label = {'off': 'overlap off', 'on': 'overlap on', 'thread': 'overlap on + progress thread'}
print('| setting | median step ms | median exposed comm ms/step | median hidden ms/step | step - 1-rank step ms |')
print('|---|---|---|---|---|')
for k in sys.argv[3].split():
    x = [r for r in rows if r[1] == k]
    med[k] = [st.median(float(r[j]) for r in x) for j in (2, 3, 4)]
    print('| %s | %.3f | %.3f | %.3f | %.3f |' % (label[k], med[k][0], med[k][1], med[k][2], med[k][0] - single))
print()
print('one process, 1 thread, batch %s (no communication): %.3f ms/step' % (sys.argv[2], single))
off = med['off'][1]
for k in sys.argv[3].split()[1:]:
    if off > 0:
        print('%s: exposed / exposed(off) = %.3f (the bar: <= 0.5: %s); step / step(off) = %.3f'
              % (label[k], med[k][1] / off, 'met' if med[k][1] / off <= 0.5 else 'not met', med[k][0] / med['off'][0]))
    else:
        print('exposed comm with overlap off measured 0: no ratio')
" "$single" "$batch" "$settings"
if [ -n "${OVERLAP_PROFILE_DIR:-}" ]; then
    mkdir -p "$OVERLAP_PROFILE_DIR"
    for st in $settings; do
        ov=$([ $st = off ] && echo false || echo true)
        th=$([ $st = thread ] && echo true || echo false)
        d="$OVERLAP_PROFILE_DIR/$st"
        run_mstune profile "$tmp/job.yaml" --nproc 2 --set runtime.comm.overlap=$ov --set runtime.comm.progress_thread=$th \
            --set profile.sampler=false --out "$d"
        echo "profile, $st: $d/profile.db (rank 1: $d.rank1/profile.db), report $d/report"
    done
fi
