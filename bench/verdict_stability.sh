#!/usr/bin/env bash
# verdict_stability.sh — how often a fresh process's kernel verdict for one shape comes out the
# same: N processes per setting, alternated, each timing the candidates afresh
# (MSTUNE_KERNELS_CACHE=off, MSTUNE_KERNELS_LOG=1) on the first steps of a job, and the verdict
# line of the shape printed: the candidates' times and the winner. Settings: the kernel choice's
# CPU binding on (the default) and off (MSTUNE_PIN_THREADS=0, runtime/cpu_pin.h); with
# BEFORE_BIN=path, also that binary (an older build) as it is. Timing only; the winner is the
# point: one fresh process in four picking the slower kernel is what the verdict file then kept.
#
#     bash bench/verdict_stability.sh                       # 12 processes a setting, the mlp's batch-16 first linear
#     N=8 BEFORE_BIN=/tmp/old/mstune bash bench/verdict_stability.sh
#     SHAPE='conv2d(f32(64, 1, 28, 28)' JOB=fashion_cnn SETS="--set data.batch_size=64" bash bench/verdict_stability.sh
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
N=${N:-12}
JOB=${JOB:-fashion_mlp}
SETS=${SETS:-"--set data.batch_size=16"}
SHAPE=${SHAPE:-"linear(f32(16, 784), f32(256, 784)"}
[ -x "$BIN" ] || { echo "verdict_stability: no $BIN (make build first)" >&2; exit 2; }
OUT=$(mktemp -d /tmp/mstune-verdicts.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
feats=$("$BIN" list cpu 2>/dev/null | awk '$2 == "yes" {print $1}' | paste -sd' ')
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; features: $feats"
echo "# $N fresh processes per setting, alternated; job $JOB $SETS; shape $SHAPE"
settings="pinned unpinned"
[ -n "${BEFORE_BIN:-}" ] && settings="$settings before"
for i in $(seq 1 "$N"); do
  for s in $settings; do
    bin=$BIN env=(MSTUNE_PIN_THREADS=1)
    [ "$s" = unpinned ] && env=(MSTUNE_PIN_THREADS=0)
    [ "$s" = before ] && bin=$BEFORE_BIN
    # shellcheck disable=SC2086
    env "${env[@]}" MSTUNE_KERNELS_CACHE=off MSTUNE_KERNELS_LOG=1 "$bin" train "workloads/jobs/$JOB.yaml" $SETS \
      --set train.steps=3 --set train.eval=false --set train.checkpoint=false --out "$OUT/run" > "$OUT/log" 2>&1 ||
      { echo "verdict_stability: $s run failed:" >&2; tail -3 "$OUT/log" >&2; exit 1; }
    line=$(grep -F "mstune kernels: $SHAPE" "$OUT/log" | head -1 || true)
    [ -n "$line" ] || { echo "verdict_stability: no verdict for $SHAPE in the $s run (already on file, or another shape)" >&2; exit 1; }
    echo "$s|$line" >> "$OUT/lines"
  done
done
python3 - "$OUT/lines" <<'PY'
import collections, re, statistics, sys
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    s, line = l.rstrip("\n").split("|", 1)
    times = {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+) us", line)}
    rows[s].append((times, line.rsplit("-> ", 1)[-1].split()[0]))
print("| setting | processes | winner counts | builtin us: median [min-max] | onednn us: median [min-max] |")
print("|---|---|---|---|---|")
for s, v in rows.items():
    wins = collections.Counter(w for _, w in v)
    def col(k):
        xs = [t.get(k, 0) for t, _ in v]
        return "%.1f [%.1f-%.1f]" % (statistics.median(xs), min(xs), max(xs))
    print("| %s | %d | %s | %s | %s |" % (s, len(v), ", ".join("%s %d" % kv for kv in wins.most_common()), col("builtin"), col("onednn")))
PY
