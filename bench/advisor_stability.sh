#!/usr/bin/env bash
# advisor_stability.sh — the same `mstune advise` three times on every scenario in
# workloads/scenarios/, and one table: scenario, top finding, the accepted set of each run,
# predicted vs measured gain of every accepted change, and its accuracy delta with the interval.
# "Stable" means the three accepted sets are equal. Full size by default (the scenario's own
# budget, 3 seeds); REPEATS and BUDGET override. Run from the repository root after `make build`;
# timings on a machine shared with other builds are noisy: say so with the numbers.
#
#     bench/advisor_stability.sh                      # every scenario, 3 reruns
#     SCENARIOS="dispatch_bound recompile" RERUNS=2 bench/advisor_stability.sh
set -euo pipefail
BIN=${MSTUNE_BIN:-./build/mstune}
RERUNS=${RERUNS:-3}
REPEATS=${REPEATS:-3}
BUDGET=${BUDGET:-30}
OUT=${OUT:-$(mktemp -d /tmp/mstune-stability.XXXXXX)}
mkdir -p "$OUT"
if [[ -z "${SCENARIOS:-}" ]]; then
  SCENARIOS=$(ls workloads/scenarios/*.yaml | xargs -n1 basename | sed 's/\.yaml$//')
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|avx512_fp16|f16c)$' | tr '\n' ' ')"
echo "reruns $RERUNS, --repeats $REPEATS, --budget-minutes $BUDGET, outputs under $OUT"
for sc in $SCENARIOS; do
  for r in $(seq 1 "$RERUNS"); do
    "$BIN" advise "workloads/scenarios/$sc.yaml" -o "$OUT/$sc-$r" --budget-minutes "$BUDGET" --repeats "$REPEATS" \
      > "$OUT/$sc-$r.log" 2>&1 || echo "$sc rerun $r: exit $? (see $OUT/$sc-$r.log)" >&2
  done
done
python3 - "$OUT" "$RERUNS" $SCENARIOS <<'PY'
import json, os, sys
out, reruns, scenarios = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"\n| scenario | top finding | accepted per run | stable | accepted change: predicted vs measured | accuracy delta [90% interval] |")
print("|---|---|---|---|---|---|")
for sc in scenarios:
    tops, sets, gains, accs = [], [], [], []
    for r in range(1, reruns + 1):
        p = os.path.join(out, f"{sc}-{r}", "advice.json")
        if not os.path.exists(p):
            tops.append("(failed)"); sets.append("(failed)"); continue
        j = json.load(open(p))
        fs = j.get("findings", [])
        tops.append(fs[0]["rule"] if fs else "-")
        acc = sorted(f["rule"] for f in fs if f["result"]["verdict"] == "accepted")
        sets.append("{" + ", ".join(acc) + "}")
        for f in fs:
            res = f["result"]
            if res["verdict"] != "accepted":
                continue
            pred = f.get("predicted_speedup")
            meas = res.get("speedup")
            gains.append(f"{f['rule']} {('%.2fx' % pred) if pred else '-'} vs {('%.2fx' % meas) if meas else '-'}")
            lo, hi = res.get("accuracy_ci_low_pp"), res.get("accuracy_ci_high_pp")
            d = res.get("accuracy_delta_pp")
            accs.append(f"{f['rule']} {d:+.2f} [{lo:+.2f}, {hi:+.2f}]" if d is not None and lo is not None else f"{f['rule']} -")
    stable = "yes" if len(set(sets)) == 1 and "(failed)" not in sets else "no"
    print(f"| {sc} | {' / '.join(tops)} | {' / '.join(sets)} | {stable} | {'; '.join(gains) or '-'} | {'; '.join(accs) or '-'} |")
PY
