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
#     TORCH_COMPARE_ROUNDS=5 TORCH_COMPARE_ROWS="cnn:64" TORCH_COMPARE_THREADS=2 bench/torch_compare.sh
#                                                   # PyTorch and mstune in turns, medians and ratio ranges
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
# Rounds (TORCH_COMPARE_ROUNDS, default 1): PyTorch and mstune take turns, and each cell is the
# median over rounds, each ratio the median of the rounds' own ratios with their range, so a few
# minutes of the VM running slow fall on both sides instead of one.
rounds=${TORCH_COMPARE_ROUNDS:-1}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
torch_version=""
for ((r = 1; r <= rounds; r++)); do
    for t in 1 2; do
        out=$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 TORCH_COMPARE_REPEATS=$py_repeats TORCH_COMPARE_MODES=eager,bf16 \
              $py3 bench/torch_compare.py "$t" "${rows[@]}")
        echo "$out" | awk -v t="$t" -v r="$r" '!/^#/ {print "py", $0, t, r}' >>"$raw"
        torch_version=$(echo "$out" | head -1 | sed "s/, [0-9]* threads$//")
    done
    for t in "${thread_counts[@]}"; do
        mst=$(MST_BENCH_THREADS=$t MST_BENCH_REPEATS=$mst_repeats OPENBLAS_NUM_THREADS=1 "$build/bench_compare" "${rows[@]}")
        [ -z "${mst_header:-}" ] && mst_header=$(echo "$mst" | head -1 | sed 's/; [0-9]* threads$//')
        echo "$mst" | awk -v t="$t" -v r="$r" '!/^#/ {print "mst", $0, t, r}' >>"$raw"
    done
done
echo "$torch_version; OMP_WAIT_POLICY ${OMP_WAIT_POLICY:-unset (default)}; OPENBLAS_NUM_THREADS=1; GLIBC_TUNABLES=$GLIBC_TUNABLES"
echo "$mst_header"
$py3 - "$raw" "$rounds" "${thread_counts[*]}" "${rows[*]}" <<'PY'
import statistics, sys
raw, rounds, threads, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
py, mst = {}, {}
for line in open(raw):
    who, model, batch, mode, ms, t, r = line.split()
    key = (model, batch, mode, int(r))
    if who == "py":   # PyTorch at its best of 1 and 2 threads, per round
        if key not in py or float(ms) < py[key][0]: py[key] = (float(ms), t)
    else:
        mst[(t,) + key] = float(ms)
med = statistics.median
def cell(vals): return f"{med(vals):.3f}"
def ratio(vals):
    s = f"{med(vals):.2f}x"
    return s + (f" [{min(vals):.2f}-{max(vals):.2f}]" if len(vals) > 1 else "")
for t in threads:
    print()
    print(f"mstune on {t} thread(s); PyTorch at its best of 1 and 2 threads (the thread count in brackets, "
          f"the last round's); medians, ms per step" + (f"; {rounds} rounds, PyTorch and mstune in turns: median "
          f"over rounds, ratios the median of the rounds' ratios [range]" if rounds > 1 else ""))
    print()
    print("| model | batch | PyTorch f32 | PyTorch bf16 autocast | mstune eager | mstune graph | mstune graph O2 bf16 "
          "| graph vs PyTorch f32 | graph O2 vs PyTorch f32 | graph O2 vs PyTorch bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        m, b = row.split(":")
        R = range(1, rounds + 1)
        pf = [py[(m, b, "eager", r)][0] for r in R]; pb = [py[(m, b, "bf16", r)][0] for r in R]
        me = [mst[(t, m, b, "eager", r)] for r in R]; mg = [mst[(t, m, b, "graph", r)] for r in R]
        mo = [mst[(t, m, b, "graph_o2_bf16", r)] for r in R]
        print(f"| {m} | {b} | {cell(pf)} [{py[(m, b, 'eager', rounds)][1]}] | {cell(pb)} [{py[(m, b, 'bf16', rounds)][1]}] "
              f"| {cell(me)} | {cell(mg)} | {cell(mo)} | {ratio([a / g for a, g in zip(pf, mg)])} "
              f"| {ratio([a / o for a, o in zip(pf, mo)])} | {ratio([a / o for a, o in zip(pb, mo)])} |")
PY
# the transformer and the SR net, at the most threads above (not for a TORCH_COMPARE_ROWS subset)
[ -z "${TORCH_COMPARE_ROWS:-}" ] && { echo; bench/torch_compare_workloads.sh "$build" "${thread_counts[-1]}"; }
exit 0
