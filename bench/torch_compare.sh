#!/usr/bin/env bash
# torch_compare.sh — mstune eager and graph against PyTorch eager and TorchScript on the same mlp
# and cnn, same shapes, same thread count, one run. Installs Debian's python3-torch (1.13) when it
# is missing — this script's own dependency, never make test's. Prints a Markdown table with the
# ratios to PyTorch eager (docs/benchmarks.md).
#
#     bench/torch_compare.sh [BUILD_DIR] [THREADS]      # defaults: build, 2
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-2}
rows=(mlp:32 cnn:32 mlp:64)
py3=/usr/bin/python3    # Debian's interpreter: python3-torch installs for it, not for a pyenv/venv python
if ! $py3 -c "import torch" 2>/dev/null; then
    echo "torch_compare: installing python3-torch (Debian's PyTorch 1.13)" >&2
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y -q python3-torch >&2
    else sudo apt-get install -y -q python3-torch >&2; fi
fi
[ -x "$build/bench_graph" ] || cmake --build "$build" --target bench_graph >&2
mst=$(MST_BENCH_THREADS=$threads OPENBLAS_NUM_THREADS=1 "$build/bench_graph" "${rows[@]}")
py=$(OMP_NUM_THREADS=$threads $py3 bench/torch_compare.py "$threads" "${rows[@]}")
echo "$mst" | head -1
echo "$py" | head -1
echo
echo "| model | batch | PyTorch eager ms | TorchScript ms | mstune eager ms | mstune graph ms | mstune graph vs PyTorch eager | mstune graph vs TorchScript |"
echo "|---|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
    m=${r%%:*}; b=${r##*:}
    pe=$(echo "$py" | awk -v m="$m" -v b="$b" '$1==m && $2==b && $3=="eager" {print $4}')
    ps=$(echo "$py" | awk -v m="$m" -v b="$b" '$1==m && $2==b && $3=="torchscript" {print $4}')
    line=$(echo "$mst" | awk -F'|' -v m=" $m " -v b=" $b " '$2==m && $3==b')
    me=$(echo "$line" | awk -F'|' '{gsub(/ /,"",$4); print $4}')
    mg=$(echo "$line" | awk -F'|' '{gsub(/ /,"",$5); print $5}')
    awk -v m="$m" -v b="$b" -v pe="$pe" -v ps="$ps" -v me="$me" -v mg="$mg" \
        'BEGIN { printf "| %s | %s | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", m, b, pe, ps, me, mg, pe / mg, ps / mg }'
done
echo; bench/torch_compare_workloads.sh "$build" "$threads"    # the transformer and the SR net (#17)
