#!/usr/bin/env bash
# --profile A:B (run/profile.h, issue 47): the timeline of 8 ranks under each pipeline schedule (1F1B,
# interleaved 1F1B, ZB-H1, ZB-V), checked by trace_check.py against the schedule: every rank's spans
# per microbatch and chunk, the messages' flow pairs, the measured bubble against the simulator's.
# Ranks started 2 s apart (a second node's worth of ranks, whose trace clocks begin later) are
# aligned; a rank slowed on purpose (stopped half the time) is named a straggler and its spans show
# it; no --profile writes no trace; a malformed range is refused in one line.
source "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
prepare_fashion_test
BASE=(--set data.path="$SCRATCH/fm_test.h5" "${TINY[@]}" --set model.hidden_size=32 --set model.num_heads=2
      --set model.depth=8 --set train.steps=3 --set train.log_every=1 --set train.global_batch=16
      --set train.micro_batch=2 --set sample.per_class=1 --set sample.num_steps=2 --set parallel.sequence_parallel=false)
run8() {  # run8 NAME ARGS...: 8 ranks, the log in $SCRATCH/NAME.log
  local name=$1
  shift
  $MPIRUN -n 8 "$DIT_MP" "${BASE[@]}" --run-dir "$SCRATCH/$name" "$@" > "$SCRATCH/$name.log" 2>&1 ||
    { tail -30 "$SCRATCH/$name.log"; fail "$name failed"; }
}
check() {  # check NAME SCHEDULE PP V M
  python3 "$HERE/trace_check.py" "$SCRATCH/$1/trace.json" "$2" "$3" "$4" "$5" || fail "the $2 trace of $1"
}

# Four microbatches a dp rank (16 = dp 2 x 4 x 2) at every schedule.
run8 f1b --tp 2 --pp 2 --profile 2:3
grep -q "profile of steps 2 to 3 written to $SCRATCH/f1b/trace.json" "$SCRATCH/f1b.log" || fail "no line names the trace"
check f1b 1f1b 2 1 4
run8 interleaved --tp 1 --pp 4 --set parallel.virtual_stages=2 --profile 2:3
check interleaved 1f1b 4 2 4
run8 zbh1 --tp 1 --pp 4 --set parallel.schedule=\"zb-h1\" --profile 2:3
check zbh1 zb-h1 4 1 4
run8 zbv --tp 2 --pp 2 --set parallel.schedule=\"zb-v\" --set parallel.virtual_stages=2 --profile 2:3
check zbv zb-v 2 2 4
# The dp and tp collectives, the update and the data waits are on the timeline too.
python3 - "$SCRATCH/f1b/trace.json" <<'PY' || fail "the 1F1B trace lacks a kind of span"
import json, sys
cats = {e.get("cat") for e in json.load(open(sys.argv[1]))["traceEvents"]}
missing = {"tp", "dp", "world", "optimizer", "data", "step", "pp"} - cats
sys.exit(f"no {sorted(missing)} spans" if missing else 0)
PY
echo "ok: the four schedules' traces match their tables"

# Two nodes' worth of ranks: the second four start 2 s later, so their trace clocks begin 2 s later;
# the alignment measures that and the messages between the halves still read in order.
cat > "$SCRATCH/later.sh" <<'SH'
#!/bin/bash
sleep 2
exec "$@"
SH
chmod +x "$SCRATCH/later.sh"
A=("${BASE[@]}" --tp 2 --pp 4 --profile 2:3 --run-dir "$SCRATCH/nodes")
$MPIRUN -n 4 "$DIT_MP" "${A[@]}" : -n 4 "$SCRATCH/later.sh" "$DIT_MP" "${A[@]}" > "$SCRATCH/nodes.log" 2>&1 ||
  { tail -30 "$SCRATCH/nodes.log"; fail "the run started 2 s apart failed"; }
check nodes 1f1b 4 1 8
python3 - "$SCRATCH/nodes/trace.json" <<'PY' || fail "the clock offsets of the later ranks"
import json, sys
off = json.load(open(sys.argv[1]))["otherData"]["clock_offsets_s"]
late = [o for o in off[4:]]
ok = all(abs(o) < 0.5 for o in off[1:4]) and all(-3.5 < o < -1.5 for o in late)
print(f"clock offsets: {['%.3f' % o for o in off]}")
sys.exit(0 if ok else "expected about -2 s for ranks 4-7, about 0 for ranks 1-3")
PY
echo "ok: ranks started 2 s apart line up"

# A rank stopped three quarters of the time: named as the straggler, and its spans are the long ones.
cat > "$SCRATCH/slow.sh" <<'SH'
#!/bin/bash
"$@" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  kill -STOP "$pid" 2>/dev/null; sleep 0.0$((RANDOM % 3 + 2)); kill -CONT "$pid" 2>/dev/null; sleep 0.01
done
wait "$pid"
SH
chmod +x "$SCRATCH/slow.sh"
S=("${BASE[@]}" --tp 1 --pp 1 --set train.steps=16 --set train.log_every=2 --profile 10:13 --run-dir "$SCRATCH/slow")
# A timing check on a shared machine (other tests run beside it): up to three tries.
for try in 1 2 3; do
  rm -rf "$SCRATCH/slow"
  $MPIRUN -n 3 "$DIT_MP" "${S[@]}" : -n 1 "$SCRATCH/slow.sh" "$DIT_MP" "${S[@]}" > "$SCRATCH/slow.log" 2>&1 ||
    { tail -30 "$SCRATCH/slow.log"; fail "the run with a slowed rank failed"; }
  grep -q "straggler: rank 3 on " "$SCRATCH/slow.log" && break
  echo "try $try: rank 3 not named: $(grep straggler: "$SCRATCH/slow.log")"
done
grep "straggler: " "$SCRATCH/slow.log" || true
grep -q "straggler: rank 3 on " "$SCRATCH/slow.log" || fail "the slowed rank 3 was not named a straggler"
python3 - "$SCRATCH/slow/trace.json" <<'PY' || fail "the slowed rank's spans"
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
busy = collections.Counter()
for e in ev:
    if e["ph"] == "X" and e["cat"] in ("forward", "backward"):
        busy[e["pid"]] += e["dur"]
print("forward + backward us by rank:", dict(busy))
others = sorted(busy[p] for p in (0, 1, 2))[1]
sys.exit(0 if busy[3] > 1.5 * others else "rank 3's compute is not 1.5 times the median other rank's")
PY
echo "ok: a rank slowed on purpose is named and visible"

# Without --profile nothing is recorded; a malformed range is one line naming the key.
$MPIRUN -n 2 "$DIT_MP" "${BASE[@]}" --tp 1 --pp 1 --set train.steps=1 --run-dir "$SCRATCH/plain" > "$SCRATCH/plain.log" 2>&1 ||
  { tail "$SCRATCH/plain.log"; fail "a run without --profile failed"; }
[[ ! -e "$SCRATCH/plain/trace.json" ]] || fail "a run without --profile wrote a trace"
for bad in "3" "5:2" "0:1" "1:99" "a:b" "2:3:4" "-1:2" "1e9:2e9"; do
  if $MPIRUN -n 2 "$DIT_MP" "${BASE[@]}" --tp 1 --pp 1 --profile "$bad" --run-dir "$SCRATCH/bad" > "$SCRATCH/bad.log" 2>&1; then
    fail "--profile $bad was accepted"
  fi
  grep -q "train.profile" "$SCRATCH/bad.log" || { cat "$SCRATCH/bad.log"; fail "--profile $bad: no line names train.profile"; }
  [[ ! -e "$SCRATCH/bad" ]] || fail "--profile $bad created the run folder"
done
echo "ok: no trace without --profile; malformed ranges refused"
