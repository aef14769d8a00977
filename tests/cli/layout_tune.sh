#!/usr/bin/env bash
# --layout tune (run/layout_tune.h, issue 47): at 8 ranks the search's 3 fastest layouts are each
# trained for a few steps inside the job; the run trains on the fastest measured and records every
# trial (predicted against measured) in tune.json and TensorBoard. The trials leave nothing behind:
# the tuned run's losses are those of a run given the chosen layout outright. A layout made slow on
# purpose (DIT_FAULT_SLOW_LAYOUT adds a second to each of its steps) loses to another.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
B=(--set data.path="$SCRATCH/fm_test.h5" "${TINY[@]}" --set model.hidden_size=32 --set model.num_heads=2
   --set model.depth=4 --set train.steps=3 --set train.log_every=1 --set parallel.tune_steps=3
   --set sample.per_class=1 --set sample.num_steps=2)
tune() {  # tune NAME ARGS...
  local name=$1
  shift
  $MPIRUN -n 8 "$DIT_MP" "${B[@]}" --layout tune --run-dir "$SCRATCH/$name" "$@" > "$SCRATCH/$name.log" 2>&1 ||
    { tail -30 "$SCRATCH/$name.log"; fail "$name failed"; }
}
# record NAME: checks tune.json against the run's config and prints "TPxPP" of the chosen layout.
record() {
  python3 - "$SCRATCH/$1" <<'PY'
import json, re, sys
run = sys.argv[1]
t = json.load(open(f"{run}/tune.json"))
trials = t["trials"]
assert len(trials) >= 3, f"{len(trials)} trials, expected 3"
for x in trials:
    assert x["measured_step_s"] > 0 and x["predicted_step_s"] > 0, x
    assert abs(x["measured_over_predicted"] - x["measured_step_s"] / x["predicted_step_s"]) < 1e-9, x
    assert x["peak_rss_bytes"] > 0 and x["measured_bytes"] > 0, x
best = min(range(len(trials)), key=lambda i: trials[i]["measured_step_s"])
assert t["chosen"] == best, f"chose #{t['chosen']}, the fastest measured is #{best}"
cfg = open(f"{run}/config.toml").read()
tp = int(re.search(r"(?m)^tp = (\d+)", cfg).group(1))
pp = int(re.search(r"(?m)^pp = (\d+)", cfg).group(1))
mb = int(re.search(r"(?m)^micro_batch = (\d+)", cfg).group(1))
c = trials[best]
assert (tp, pp, mb) == (c["tp"], c["pp"], c["micro_batch"]), f"config.toml tp {tp} pp {pp} micro {mb}, chosen {c}"
assert re.search(r'(?m)^layout = "tune"', cfg), "config.toml does not record layout = tune"
print(f"{tp}x{pp}")
PY
}
tune first
grep -q "layout tune: 3 layouts measured" "$SCRATCH/first.log" || fail "no tuning table in the log"
chosen=$(record first) || fail "the first run's tune.json"
grep -aq "layout tune: 3 layouts measured" "$SCRATCH"/first/tb/events.out.tfevents.* || fail "TensorBoard has no tune text"
echo "chosen: tp x pp = $chosen"

# The trials leave nothing behind: a run given the chosen layout outright logs the same losses.
tp=${chosen%x*}
pp=${chosen#*x}
mb=$(sed -n 's/^micro_batch = //p' "$SCRATCH/first/config.toml")
rc=$(sed -n '/^\[train\]/,/^\[/s/^recompute = //p' "$SCRATCH/first/config.toml")
sp=$(sed -n 's/^sequence_parallel = //p' "$SCRATCH/first/config.toml")
$MPIRUN -n 8 "$DIT_MP" "${B[@]}" --tp "$tp" --pp "$pp" --set train.micro_batch="$mb" --set train.recompute="$rc" \
  --set parallel.sequence_parallel="$sp" --run-dir "$SCRATCH/fixed" > "$SCRATCH/fixed.log" 2>&1 ||
  { tail -20 "$SCRATCH/fixed.log"; fail "the fixed run failed"; }
python3 - "$SCRATCH/first/metrics.jsonl" "$SCRATCH/fixed/metrics.jsonl" <<'PY' || fail "the tuned run's losses differ from the fixed run's"
import json, sys
a, b = ([(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if "eval" not in r] for p in sys.argv[1:])
print("tuned:", a)
sys.exit(0 if a == b and len(a) == 3 else f"fixed: {b}")
PY

# The chosen layout made slow on purpose: another wins, and the slow one's trial shows the second.
DIT_FAULT_SLOW_LAYOUT="$chosen:1.0" tune slowed
again=$(record slowed) || fail "the slowed run's tune.json"
echo "with $chosen slowed: $again"
[[ "$again" != "$chosen" ]] || fail "tune kept $chosen although each of its steps took a second longer"
python3 - "$SCRATCH/slowed/tune.json" "$chosen" <<'PY' || fail "the slowed layout's trial"
import json, sys
tp, pp = map(int, sys.argv[2].split("x"))
slow = [x for x in json.load(open(sys.argv[1]))["trials"] if (x["tp"], x["pp"]) == (tp, pp)]
sys.exit(0 if slow and all(x["measured_step_s"] >= 1.0 for x in slow) else f"slowed trials {slow}")
PY
echo "ok: tune measures 3 layouts, trains on the fastest, leaves nothing behind, and avoids a slowed layout"
