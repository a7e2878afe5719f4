#!/usr/bin/env bash
# test_dp_cli.sh — `mstune train|profile --nproc 2` end to end (CTest comm.test_dp_cli):
#  1. a 2-rank run exits 0, rank 0 writes DIR (summary.json with the per-rank section), rank 1
#     DIR.rank1; the profile of a 2-rank run has one profile.db per rank and comm in its breakdown;
#  2. a rank killed (SIGKILL) mid-run makes the job exit non-zero within seconds, and rank 0's
#     earlier outputs in DIR are untouched;
#  3. a rank that hangs (SIGSTOP) makes the other fail after runtime.comm.timeout_s with a message
#     naming the wait, and the job exits non-zero.
set -u
BIN=${MSTUNE_BIN:?}
SRC=${MSTUNE_SOURCE_DIR:?}
T=$(mktemp -d /tmp/mstune-dp-cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
JOB=$T/job.yaml
cat > "$JOB" <<YAML
name: dpcli
model:
  name: mlp
  hidden1: 64
  hidden2: 32
data:
  dataset: synthetic
  batch_size: 16
  synthetic:
    samples: 640
    test_samples: 128
    height: 8
    width: 8
train:
  epochs: 1
  checkpoint: true
runtime:
  threads: 2
  comm:
    bucket_mb: 0.005
YAML

# 1. a clean 2-rank run
"$BIN" train "$JOB" --nproc 2 --out "$T/a" > "$T/a.log" 2>&1 || { cat "$T/a.log"; fail "2-rank train exited $?"; }
[ -f "$T/a/summary.json" ] || fail "rank 0 wrote no summary.json"
[ -f "$T/a/checkpoint.bin" ] || fail "rank 0 wrote no checkpoint"
[ -f "$T/a.rank1/summary.json" ] || fail "rank 1 wrote no summary.json in DIR.rank1"
[ ! -f "$T/a.rank1/checkpoint.bin" ] || fail "rank 1 wrote a checkpoint (rank 0 only)"
python3 - "$T/a/summary.json" <<'PY' || fail "summary.json's distributed section"
import json, sys
s = json.load(open(sys.argv[1]))
d = s["distributed"]
assert d["ranks"] == 2 and len(d["per_rank"]) == 2, d
assert d["buckets"] >= 2 and d["grad_bytes_per_step"] > 0, d
assert all(r["step_time_ms_median"] > 0 for r in d["per_rank"]), d
assert 0 <= d["slowest_rank"] < 2 and d["imbalance"] >= 0, d
assert s["steps"] == 20, s["steps"]         # 640 samples / (2 ranks x 16) per step
PY
grep -q "rank 1: step" "$T/a.log" || { cat "$T/a.log"; fail "no per-rank lines printed"; }
[ "$(grep -c '^mstune train:' "$T/a.log")" = 1 ] || fail "more than one rank printed the summary"
# resume with the same number of ranks: already finished, nothing written
"$BIN" train "$JOB" --nproc 2 --out "$T/a" --resume > "$T/r.log" 2>&1 || { cat "$T/r.log"; fail "resume exited $?"; }
grep -q "already finished" "$T/r.log" || { cat "$T/r.log"; fail "resume did not find the finished checkpoint"; }
# and with another number of ranks it is refused
if "$BIN" train "$JOB" --nproc 1 --out "$T/a" --resume --set train.epochs=2 > "$T/r1.log" 2>&1; then fail "resume with 1 rank accepted"; fi
grep -q "ranks" "$T/r1.log" || { cat "$T/r1.log"; fail "the refusal does not name the ranks"; }

"$BIN" profile "$JOB" --nproc 2 --out "$T/p" > "$T/p.log" 2>&1 || { cat "$T/p.log"; fail "2-rank profile exited $?"; }
[ -f "$T/p/profile.db" ] && [ -f "$T/p.rank1/profile.db" ] || fail "one profile.db per rank expected"
python3 - "$T/p/summary.json" <<'PY' || fail "profile summary: comm category"
import json, sys
s = json.load(open(sys.argv[1]))
text = json.dumps(s)
assert "comm" in text and s["distributed"]["ranks"] == 2
PY

# find rank R's pid among the job's processes (its environment names the rank)
rank_pid() {    # among the children of mpirun ($JOBPID: the launcher exec'd it)
    for p in $(ps -o pid= --ppid "$JOBPID" 2>/dev/null); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return 0; fi
    done
    return 1
}
# a long run, started in the background; waits until rank 1 trains
start_long() {
    MSTUNE_DP_TEST=$1 "$BIN" train "$JOB" --nproc 2 --out "$T/a" --set train.epochs=100000 --set runtime.comm.timeout_s=3 \
        > "$T/$1.log" 2>&1 &
    JOBPID=$!
    for _ in $(seq 1 200); do
        R1=$(rank_pid 1) && break
        sleep 0.1
    done
    [ -n "${R1:-}" ] || fail "rank 1 of the $1 job did not start"
    sleep 1     # let it reach the training loop
}
wait_bounded() {    # waits for $JOBPID at most $1 seconds; prints the elapsed seconds
    local t0=$SECONDS
    while kill -0 "$JOBPID" 2>/dev/null; do
        if [ $((SECONDS - t0)) -gt "$1" ]; then kill -9 "$JOBPID"; fail "the job still runs $1 s after the fault"; fi
        sleep 0.2
    done
    wait "$JOBPID"
    RC=$?
    echo "fault to exit: $((SECONDS - t0)) s, exit $RC"
}
before=$(md5sum "$T/a/summary.json" "$T/a/checkpoint.bin")

# 2. rank 1 killed
start_long killed
kill -9 "$R1"
wait_bounded 30
[ "$RC" -ne 0 ] || fail "a killed rank left exit status 0"
[ "$(md5sum "$T/a/summary.json" "$T/a/checkpoint.bin")" = "$before" ] || fail "rank 0's outputs changed after a killed run"

# 3. rank 1 hangs
R1=
start_long hung
kill -STOP "$R1"
wait_bounded 40
kill -9 "$R1" 2>/dev/null
[ "$RC" -ne 0 ] || fail "a hung rank left exit status 0"
grep -q "waited more than 3.0 s" "$T/hung.log" || { cat "$T/hung.log"; fail "no timeout message"; }
[ "$(md5sum "$T/a/summary.json" "$T/a/checkpoint.bin")" = "$before" ] || fail "rank 0's outputs changed after a hung run"
echo "ok"
