#!/usr/bin/env bash
# dp_compare.sh — data parallel on this machine, global batch 64: 2 ranks x 1 thread (batch 32
# each) against 1 process x 2 threads (batch 64), mstune (`mstune train --nproc`, synthetic
# 28x28 data, the zoo's mlp and cnn) side by side with PyTorch DDP over gloo on the same models
# (bench/torch_ddp.py). Prints a Markdown table (docs/benchmarks.md): median step ms, the exposed
# comm per step of each (one definition: the time the main thread waits for communication; median
# over the steps), their ratio (the issue's bar: mstune <= 1/4 of DDP's on the mlp), DDP's step
# minus its no_sync() step (all that communication adds, a cross-check) and a bare gloo all-reduce
# of the gradients.
#
#     bench/dp_compare.sh [BUILD_DIR] [MODE]     # defaults: build, graph (or eager)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mode=${2:-graph}
py3=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/job.yaml" <<YAML
name: dpbench
data:
  dataset: synthetic
  synthetic:
    samples: 8192
    test_samples: 64
train:
  epochs: 1
  steps: 80
  eval: false
runtime:
  mode: $mode
  threads: 2
YAML
field() { $py3 -c "import json,sys; v=json.load(open(sys.argv[1])); [v:=v.get(k, {}) for k in sys.argv[2].split('.')]; print(f'{v:.3f}' if isinstance(v, (int, float)) else '-')" "$1" "$2"; }
# PyTorch at its best settings, as bench/torch_compare.sh: glibc malloc keeping freed memory (no
# page faults on its activations every step) and Debian's OpenBLAS without its own thread pool
tunables=$($py3 -c "import sys; sys.path.insert(0, 'bench'); from torch_langid import MALLOC_TUNABLES; print(MALLOC_TUNABLES)")
py=$(GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$tunables OPENBLAS_NUM_THREADS=1 $py3 bench/torch_ddp.py mlp cnn)
echo "| model | layout | mstune $mode step ms | mstune exposed comm ms | PyTorch step ms | DDP exposed comm ms | mstune / DDP exposed | DDP step - no_sync step ms | gloo all-reduce of the gradients ms |"
echo "|---|---|---|---|---|---|---|---|---|"
col() { echo "$py" | awk -v m="$1" -v l="$2" -v c="$3" '$1==m && $2==l {print $c}'; }
for m in mlp cnn; do
    "$build/mstune" train "$tmp/job.yaml" --set model.name=$m --set data.batch_size=32 --nproc 2 --out "$tmp/$m-2" > /dev/null
    "$build/mstune" train "$tmp/job.yaml" --set model.name=$m --set data.batch_size=64 --out "$tmp/$m-1" > /dev/null
    e2=$(field "$tmp/$m-2/summary.json" distributed.comm_exposed_ms_median)
    de=$(col $m ddp2x1 5)
    ratio=$($py3 -c "import sys; a, b = sys.argv[1:]; print(f'{float(a) / float(b):.3f}' if b not in ('-', '') and float(b) > 0 and a != '-' else '-')" "$e2" "$de")
    echo "| $m | 2 ranks x 1 thread | $(field "$tmp/$m-2/summary.json" step_time_ms_median) | $e2 | $(col $m ddp2x1 3) | $de | $ratio | $(col $m ddp2x1 6) | $(col $m ddp2x1 4) |"
    echo "| $m | 1 process x 2 threads | $(field "$tmp/$m-1/summary.json" step_time_ms_median) | - | $(col $m single1x2 3) | - | - | - | - |"
done
