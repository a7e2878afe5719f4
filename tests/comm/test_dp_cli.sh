#!/usr/bin/env bash
# test_dp_cli.sh — `mstune train|profile --nproc 2` end to end (CTest comm.test_dp_cli):
#  1. a 2-rank run exits 0, rank 0 writes DIR (summary.json with the per-rank section), rank 1
#     DIR.rank1; the profile of a 2-rank run has one profile.db per rank and comm in its breakdown;
#     its report's Ranks section matches the ranks' databases, and names a corrupt, mislabelled or
#     missing rank profile (`mstune report DIR`);
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
# the report's Ranks section (written at the end of `profile --nproc 2`): its numbers against each
# rank's own profile.db, read here with sqlite3
python3 - "$T/p" <<'PY' || fail "the report's Ranks section does not match the ranks' databases"
import json, re, sqlite3, statistics, sys
d = sys.argv[1]
html = open(d + "/report/index.html").read()
md = open(d + "/report/summary.md").read()
assert 'id="ranks-table"' in html and "### Ranks" in md
def val(i):
    m = re.search(r'id="%s" data-value="([^"]+)"' % re.escape(i), html)
    assert m, "no %s in the page" % i
    return float(m.group(1))
def close(a, b, what):
    assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (what, a, b)
grad = json.load(open(d + "/summary.json"))["distributed"]["grad_bytes_per_step"]
meds = []
for k, path in enumerate([d + "/profile.db", d + ".rank1/profile.db"]):
    db = sqlite3.connect(path)
    run = dict(db.execute("SELECT key, value FROM run"))
    assert (run["dp.rank"], run["dp.ranks"]) == (str(k), "2"), run.get("dp.rank")
    walls = [w / 1e6 for (w,) in db.execute("SELECT wall_ns FROM steps WHERE warmup = 0")]
    c = {}
    for step, name, v in db.execute("SELECT c.step, c.name, c.last_value FROM counters c JOIN steps s USING (step)"
                                    " WHERE s.warmup = 0 AND c.name LIKE 'comm.%'"):
        c.setdefault(step, {})[name] = v
    assert len(c) == len(walls) > 0, (len(c), len(walls))
    n = len(c)
    wait = [x["comm.wait_ns"] / 1e6 for x in c.values()]
    busy = [x["comm.busy_ns"] / 1e6 for x in c.values()]
    close(val("rank-%d-steps" % k), len(walls), "steps")
    close(val("rank-%d-step-median" % k), statistics.median(walls), "median")
    close(val("rank-%d-step-mean" % k), sum(walls) / len(walls), "mean")
    close(val("rank-%d-exposed" % k), sum(wait) / n, "exposed")
    ws = sorted(wait)   # nearest-rank percentiles
    close(val("rank-%d-exposed-p10" % k), ws[max(0, -(-n // 10) - 1)], "exposed p10")
    close(val("rank-%d-exposed-p90" % k), ws[min(n - 1, -(-9 * n // 10) - 1)], "exposed p90")
    close(val("rank-%d-hidden" % k), sum(max(b - w, 0) for b, w in zip(busy, wait)) / n, "hidden")
    close(val("rank-%d-allreduce" % k), sum(busy) / n, "all-reduce time")
    close(val("rank-%d-calls" % k), sum(x["comm.allreduce_calls"] for x in c.values()) / n, "calls")
    close(val("rank-%d-bytes" % k), grad, "bytes = the gradient bytes per step")
    close(val("rank-%d-gbps" % k), n * grad / (sum(busy) * 1e6), "GB/s")
    assert val("rank-%d-exposed" % k) > 0 and val("rank-%d-calls" % k) >= 2
    meds.append(statistics.median(walls))
close(val("ranks-slowest"), meds.index(max(meds)), "slowest")
close(val("ranks-imbalance"), (max(meds) - min(meds)) / (sum(meds) / 2), "imbalance")
assert ('id="ranks-flag"' in html) == ((max(meds) - min(meds)) / (sum(meds) / 2) > 0.05)
PY
# `mstune report DIR` of a copy whose folder name needs escaping: a corrupt, a mislabelled and a
# missing rank profile are named in the section, never a crash
Q="$T/q&<x>"
cp -r "$T/p" "$Q" && cp -r "$T/p.rank1" "$Q.rank1"
echo "not a database" > "$Q.rank1/profile.db"
"$BIN" report "$Q" > "$T/q.log" 2>&1 || { cat "$T/q.log"; fail "report of a run with a corrupt rank profile exited $?"; }
grep -q 'id="rank-1-problem">unreadable' "$Q/report/index.html" || fail "the corrupt rank 1 profile is not named"
grep -q 'q&amp;&lt;x&gt;.rank1/profile.db' "$Q/report/index.html" || fail "the rank folder's name is not escaped"
! grep -q 'q&<x>' "$Q/report/index.html" || fail "an unescaped path in the page"
cp "$T/p.rank1/profile.db" "$Q.rank1/profile.db"
python3 -c "import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute(\"UPDATE run SET value='0' WHERE key='dp.rank'\"); db.commit()" \
    "$Q.rank1/profile.db"
"$BIN" report "$Q" > "$T/q.log" 2>&1 || { cat "$T/q.log"; fail "report of a run with a mislabelled rank profile exited $?"; }
grep -q 'id="rank-1-problem">not rank 1 of 2' "$Q/report/index.html" || fail "the mislabelled rank 1 profile is not named"
rm -rf "$Q.rank1"
"$BIN" report "$Q" > "$T/q.log" 2>&1 || { cat "$T/q.log"; fail "report of a run without its rank 1 folder exited $?"; }
grep -q 'id="rank-1-problem">missing' "$Q/report/index.html" || fail "the missing rank 1 profile is not named"
grep -q 'id="ranks-problems"' "$Q/report/index.html" || fail "the section does not say a rank is missing"

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
