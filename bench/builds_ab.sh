#!/usr/bin/env bash
# builds_ab.sh — two builds of mstune on one job, alternated: per round and build, the profiled
# run's median step and each op's median call time per input shape (from trace.json's traced
# steps), and before each round what reading data the other core just wrote costs against this
# core's own (build/thread_costs' two read lines: on a VM, where the host places the two vCPUs
# moves that cost by 2-3x between minutes, and with it every kernel that reads what the other
# thread wrote). Timing only; never part of pass/fail.
#
#     bash bench/builds_ab.sh BUILD_A BUILD_B [ROUNDS=3] [JOB=workloads/jobs/fashion_cnn.yaml] [STEPS=300]
#     BUILDS_AB_OPS='batchnorm|maxpool' BUILDS_AB_SETS='runtime.mode=graph' bash bench/builds_ab.sh ...
set -euo pipefail
a=${1:?usage: builds_ab.sh BUILD_A BUILD_B [ROUNDS] [JOB] [STEPS]}
b=${2:?usage: builds_ab.sh BUILD_A BUILD_B [ROUNDS] [JOB] [STEPS]}
rounds=${3:-3}
job=${4:-workloads/jobs/fashion_cnn.yaml}
steps=${5:-300}
ops=${BUILDS_AB_OPS:-batchnorm|maxpool|add}
sets=${BUILDS_AB_SETS:-runtime.mode=graph}
for d in "$a" "$b"; do [ -x "$d/mstune" ] || { echo "builds_ab: no $d/mstune" >&2; exit 2; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
set_args=()
for s in $sets; do set_args+=(--set "$s"); done

per_op() {      # trace.json -> "median_us calls op shapes" per (op, first two input shapes), matching $ops
    python3 - "$1" "$ops" <<'EOF'
import collections, json, re, statistics, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
calls = collections.defaultdict(list)
for e in events:
    if e.get("ph") != "X" or e.get("cat") == "step" or not re.search(sys.argv[2], e.get("name", "")):
        continue
    dims = e.get("args", {}).get("Input Dims")
    calls[(e["name"], json.dumps(dims[:2]) if dims else "")].append(e["dur"])
for (name, shapes), d in sorted(calls.items(), key=lambda kv: -statistics.median(kv[1])):
    print("    %9.1f us  %4d calls  %s %s" % (statistics.median(d), len(d), name, shapes))
EOF
}

head -1 < <("$a/thread_costs" 3 2>&1)
for r in $(seq 1 "$rounds"); do
    echo "## round $r: $("$a/thread_costs" 3 2>&1 | grep 'read 800 KiB' | sed 's/^| //; s/ |$//; s/ | /: /' | paste -sd ';')"
    for d in "$a" "$b"; do
        rm -rf "$work/p"
        "$d/mstune" profile "$job" "${set_args[@]}" --set train.steps="$steps" --set train.eval=false -o "$work/p" > "$work/log" 2>&1 ||
            { echo "builds_ab: $d/mstune failed:" >&2; tail -5 "$work/log" >&2; exit 1; }
        echo "  $d: $(grep -o 'median step [0-9.]* ms' "$work/log")"
        per_op "$work/p/trace.json"
    done
done
