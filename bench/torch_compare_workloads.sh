#!/usr/bin/env bash
# torch_compare_workloads.sh — mstune eager and graph against PyTorch eager on the language-id
# transformer and the super-resolution net (bench/bench_workloads.c, bench/torch_compare_workloads.py):
# the shipped jobs' models and batch shapes, the same thread count, one run each. Called by
# bench/torch_compare.sh after its mlp/cnn table; runs alone too. Prints a Markdown table with
# the ratios to PyTorch eager (docs/benchmarks.md). --quick: 5 timed steps instead of 15.
# Both sides run with glibc malloc keeping freed memory (bench/torch_langid.py's MALLOC_TUNABLES):
# without it PyTorch's transformer step re-faults ~6000 pages a step and takes 3x as long; mstune,
# which keeps its own buffers, is unaffected (docs/benchmarks.md). Both sides also run with
# OPENBLAS_NUM_THREADS=1: PyTorch's intra-op threads are OpenMP's, and Debian's OpenBLAS (pthread
# build) starting its own pool beside them made PyTorch's 2-thread transformer step 51-108 ms
# instead of 45 ms.
#
#     bench/torch_compare_workloads.sh [BUILD_DIR] [THREADS] [--quick]      # defaults: build, 2
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-2}
quick=${3:-}
rows=(transformer:128 srnet:32)
py3=/usr/bin/python3    # Debian's interpreter: python3-torch installs for it, not for a pyenv/venv python
if ! $py3 -c "import torch" 2>/dev/null; then
    echo "torch_compare_workloads: python3-torch is missing (bench/torch_compare.sh installs it)" >&2
    exit 2
fi
[ -x "$build/bench_workloads" ] || cmake --build "$build" --target bench_workloads >&2
tunables=$($py3 -c "import sys; sys.path.insert(0, 'bench'); from torch_langid import MALLOC_TUNABLES; print(MALLOC_TUNABLES)")
case ":${GLIBC_TUNABLES:-}:" in     # torch_compare.sh, which calls this, has set them already
    *":$tunables:"*) ;;
    *) export GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$tunables ;;
esac
mst=$(MST_BENCH_THREADS=$threads OPENBLAS_NUM_THREADS=1 "$build/bench_workloads" $quick "${rows[@]}")
py=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1 $py3 bench/torch_compare_workloads.py $quick "$threads" "${rows[@]}")
echo "$mst" | head -1
echo "$py" | head -1
echo
echo "| model | batch | PyTorch eager ms | mstune eager ms | mstune graph ms | mstune eager vs PyTorch eager | mstune graph vs PyTorch eager |"
echo "|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
    m=${r%%:*}; b=${r##*:}
    pe=$(echo "$py" | awk -v m="$m" -v b="$b" '$1==m && $2==b && $3=="eager" {print $4}')
    me=$(echo "$mst" | awk -v m="$m" -v b="$b" '$1==m && $2==b && $3=="eager" {print $4}')
    mg=$(echo "$mst" | awk -v m="$m" -v b="$b" '$1==m && $2==b && $3=="graph" {print $4}')
    awk -v m="$m" -v b="$b" -v pe="$pe" -v me="$me" -v mg="$mg" \
        'BEGIN { printf "| %s | %s | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", m, b, pe, me, mg, pe / me, pe / mg }'
done
