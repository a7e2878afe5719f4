#!/usr/bin/env bash
# torch_compare.sh — mstune against PyTorch on the same mlp and cnn (same shapes, one run), the
# peer at its best settings: OpenMP's default wait policy (nothing forced), and per row the better
# of 1 and 2 threads, which the table names. Rows: PyTorch eager f32, PyTorch bf16 autocast,
# mstune eager, graph, graph O2 bf16, at batch 32, 64, 256 with mstune on 1 and 2 threads. The
# first lines name the CPU and its features. Installs Debian's python3-torch (1.13) when it is
# missing — this script's own dependency, never make test's. Prints a Markdown table
# (docs/benchmarks.md).
#
#     bench/torch_compare.sh [BUILD_DIR]            # the full table (minutes on a quiet machine)
#     TORCH_COMPARE_QUICK=1 bench/torch_compare.sh  # mlp:32 cnn:32, 2 threads, few repeats (a check)
#     TORCH_COMPARE_ROWS="cnn:64" TORCH_COMPARE_THREADS=2 bench/torch_compare.sh   # a subset, full repeats
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rows=(mlp:32 mlp:64 mlp:256 cnn:32 cnn:64 cnn:256)
thread_counts=(1 2)
mst_repeats=15
py_repeats=30
if [ -n "${TORCH_COMPARE_QUICK:-}" ] && [ "${TORCH_COMPARE_QUICK}" != 0 ]; then
    rows=(mlp:32 cnn:32); thread_counts=(2); mst_repeats=3; py_repeats=3
fi
# a subset at full repeats: TORCH_COMPARE_ROWS="cnn:64 mlp:256" TORCH_COMPARE_THREADS=2 (no workloads table)
if [ -n "${TORCH_COMPARE_ROWS:-}" ]; then read -r -a rows <<<"$TORCH_COMPARE_ROWS"; fi
if [ -n "${TORCH_COMPARE_THREADS:-}" ]; then read -r -a thread_counts <<<"$TORCH_COMPARE_THREADS"; fi
py3=/usr/bin/python3    # Debian's interpreter: python3-torch installs for it, not for a pyenv/venv python
if ! $py3 -c "import torch" 2>/dev/null; then
    echo "torch_compare: installing python3-torch (Debian's PyTorch 1.13)" >&2
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y -q python3-torch >&2
    else sudo apt-get install -y -q python3-torch >&2; fi
fi
[ -x "$build/bench_compare" ] || cmake --build "$build" --target bench_compare >&2
# PyTorch: each row at 1 and 2 threads; the better one is its number. Its best settings also mean
# glibc malloc keeping freed memory (GLIBC_TUNABLES; without it PyTorch re-faults its activations'
# pages every step) and OPENBLAS_NUM_THREADS=1 (Debian's OpenBLAS pool beside PyTorch's OpenMP
# threads slowed its steps), as bench/torch_compare_workloads.sh found; mstune runs with the same.
tunables=$($py3 -c "import sys; sys.path.insert(0, 'bench'); from torch_langid import MALLOC_TUNABLES; print(MALLOC_TUNABLES)")
export GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$tunables
pyall=""
for t in 1 2; do
    out=$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 TORCH_COMPARE_REPEATS=$py_repeats TORCH_COMPARE_MODES=eager,bf16 \
          $py3 bench/torch_compare.py "$t" "${rows[@]}")
    pyall+=$(echo "$out" | awk -v t="$t" '!/^#/ {print $0, t}')$'\n'
    torch_version=$(echo "$out" | head -1 | sed "s/, [0-9]* threads$//")
done
# best (ms, threads) of PyTorch for model, batch, mode
best() { echo "$pyall" | awk -v m="$1" -v b="$2" -v mode="$3" \
    '$1==m && $2==b && $3==mode && (best=="" || $4<best) {best=$4; t=$5} END {printf "%s %s", best, t}'; }
echo "$torch_version; OMP_WAIT_POLICY ${OMP_WAIT_POLICY:-unset (default)}; OPENBLAS_NUM_THREADS=1; GLIBC_TUNABLES=$GLIBC_TUNABLES"
for t in "${thread_counts[@]}"; do
    mst=$(MST_BENCH_THREADS=$t MST_BENCH_REPEATS=$mst_repeats OPENBLAS_NUM_THREADS=1 "$build/bench_compare" "${rows[@]}")
    [ "$t" = "${thread_counts[0]}" ] && echo "$mst" | head -1 | sed 's/; [0-9]* threads$//'
    echo
    echo "mstune on $t thread(s); PyTorch at its best of 1 and 2 threads (the thread count in brackets); medians, ms per step"
    echo
    echo "| model | batch | PyTorch f32 | PyTorch bf16 autocast | mstune eager | mstune graph | mstune graph O2 bf16 | graph vs PyTorch f32 | graph O2 vs PyTorch f32 | graph O2 vs PyTorch bf16 |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    for r in "${rows[@]}"; do
        m=${r%%:*}; b=${r##*:}
        read -r pf pft <<<"$(best "$m" "$b" eager)"
        read -r pb pbt <<<"$(best "$m" "$b" bf16)"
        get() { echo "$mst" | awk -v m="$m" -v b="$b" -v mode="$1" '$1==m && $2==b && $3==mode {print $4}'; }
        me=$(get eager); mg=$(get graph); mo=$(get graph_o2_bf16)
        awk -v m="$m" -v b="$b" -v pf="$pf" -v pft="$pft" -v pb="$pb" -v pbt="$pbt" -v me="$me" -v mg="$mg" -v mo="$mo" \
            'BEGIN { printf "| %s | %s | %.3f [%s] | %.3f [%s] | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx |\n",
                     m, b, pf, pft, pb, pbt, me, mg, mo, pf / mg, pf / mo, pb / mo }'
    done
done
# the transformer and the SR net, at the most threads above (not for a TORCH_COMPARE_ROWS subset)
[ -z "${TORCH_COMPARE_ROWS:-}" ] && { echo; bench/torch_compare_workloads.sh "$build" "${thread_counts[-1]}"; }
exit 0
