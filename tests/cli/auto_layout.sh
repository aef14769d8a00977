#!/usr/bin/env bash
# `train --layout auto`: on 1, 2, 4 and 8 ranks with a memory limit the run picks the top row of
# `plan --fit` at that limit, trains on it and records it in config.toml; --resume auto continues on
# the recorded layout; every rank searching (DIT_LAYOUT_SEARCH=each) picks what rank 0 picks; --tp 2
# keeps the search to tp 2; the plan check is silent on a correct run and says once that a planner
# which under-counts (DIT_PLAN_UNDERCOUNT) is off; the memory margin shows on the log lines; bad
# input gets one message, naming what would fit, and a non-zero exit on every rank without a hang.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
# A user's config with a layout of its own (tp 1, pp 1, micro-batch 2): the search replaces it.
cat >"$SCRATCH/tiny.toml" <<EOF
[model]
hidden_size = 64
depth = 2
num_heads = 4
patch_size = 4
input_size = 32
in_channels = 1
num_classes = 10
[train]
global_batch = 16
micro_batch = 2
steps = 2
lr = 2e-3
log_every = 1
[parallel]
tp = 1
pp = 1
[sample]
num_steps = 2
per_class = 1
[data]
path = "$SCRATCH/fm_test.h5"
prepare = "none"
EOF
CFG=(--config "$SCRATCH/tiny.toml")
FIT_ROW='^ +[123] +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +fp32 '  # a row of the fit table the run prints
LAYOUT_KEYS='parallel.tp parallel.pp parallel.schedule parallel.sequence_parallel parallel.virtual_stages
  train.micro_batch train.recompute'

# layout_of DIR: the layout config.toml records, one key=value per line
layout_of() {
  /usr/bin/python3 - "$1/config.toml" $LAYOUT_KEYS <<'PY'
import sys, tomllib
cfg = tomllib.load(open(sys.argv[1], "rb"))
for key in sys.argv[2:]:
    sec, name = key.split(".")
    print(f"{key}={cfg[sec][name]}")
PY
}
# fit_top JSON: the top row of a `plan --fit --json` file, as layout_of prints it
fit_top() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
print(f"parallel.tp={r['tp']}\nparallel.pp={r['pp']}\nparallel.schedule={r['schedule']}")
print(f"parallel.sequence_parallel={r['sequence_parallel']}\nparallel.virtual_stages={r['virtual_stages']}")
print(f"train.micro_batch={r['micro_batch']}\ntrain.recompute={r['recompute']}")
PY
}
# train_auto NAME RANKS GIB [ARGS...]: a --layout auto run into $SCRATCH/NAME (its log: NAME.log)
train_auto() {
  local name=$1 ranks=$2 gib=$3
  shift 3
  timeout 300 $MPIRUN -n "$ranks" "$DIT_MP" "${CFG[@]}" --layout auto --memory-gib "$gib" --hardware cpu \
    --run-dir "$SCRATCH/$name" "$@" >"$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "run $name failed"; }
  ! grep -q "plan check" "$SCRATCH/$name.log" || { cat "$SCRATCH/$name.log"; fail "$name: the plan check spoke on a correct run"; }
}
# same_as_fit NAME RANKS GIB [ARGS...]: the run's recorded layout is plan --fit's top row
same_as_fit() {
  local name=$1 ranks=$2 gib=$3
  shift 3
  "$DIT_MP" plan "${CFG[@]}" --fit "$gib" --gpus "$ranks" --hardware cpu --precision fp32 --top 3 "$@" \
    --json "$SCRATCH/$name.fit.json" >"$SCRATCH/$name.fit.txt" 2>&1 || { cat "$SCRATCH/$name.fit.txt"; fail "plan $name"; }
  diff <(fit_top "$SCRATCH/$name.fit.json") <(layout_of "$SCRATCH/$name") ||
    fail "$name: the run's layout (right) is not plan --fit's top row (left)"
  grep -q "^layout auto: .* fit .* per rank" "$SCRATCH/$name.log" || fail "$name: no choice printed"
  [[ $(grep -cE "$FIT_ROW" "$SCRATCH/$name.log") == 3 ]] ||
    fail "$name: the chosen row and two runners-up are not printed"
  local tp pp
  tp=$(layout_of "$SCRATCH/$name" | sed -n 's/^parallel.tp=//p')
  pp=$(layout_of "$SCRATCH/$name" | sed -n 's/^parallel.pp=//p')
  grep -q "^dit_mp train: tp $tp pp $pp dp $((ranks / tp / pp))," "$SCRATCH/$name.log" || fail "$name: did not train at it"
  echo "ok: $ranks rank(s) at $gib GiB: $(layout_of "$SCRATCH/$name" | tr '\n' ' ')"
}
# The limits make each choice differ from the config's own layout (tp 1, pp 1, micro-batch 2).
train_auto r1 1 0.01 && same_as_fit r1 1 0.01
train_auto r2 2 0.003 && same_as_fit r2 2 0.003
train_auto r4 4 0.0035 && same_as_fit r4 4 0.0035
train_auto r8 8 0.002 && same_as_fit r8 8 0.002
[[ $(layout_of "$SCRATCH/r8" | sed -n 's/^parallel.tp=//p') != 2 ]] || fail "r8 chose tp 2: the --tp 2 case below proves nothing"

# Every rank searching reaches rank 0's choice.
DIT_LAYOUT_SEARCH=each train_auto r8each 8 0.002
diff <(layout_of "$SCRATCH/r8") <(layout_of "$SCRATCH/r8each") || fail "DIT_LAYOUT_SEARCH=each chose another layout"
echo "ok: 8 ranks, each searching, chose rank 0's layout"

# --tp 2 constrains the search: every row printed is tp 2, and the choice is plan --fit --tp 2's.
train_auto r8tp2 8 0.002 --tp 2
same_as_fit r8tp2 8 0.002 --tp 2
/usr/bin/python3 - "$SCRATCH/r8tp2.fit.json" <<'PY' || fail "plan --fit --tp 2 listed another tp"
import json, sys
assert all(r["tp"] == 2 for r in json.load(open(sys.argv[1])))
PY
awk "/$FIT_ROW/"'{ if ($2 != 2) bad = 1 } END { exit bad }' "$SCRATCH/r8tp2.log" || fail "--tp 2 printed another tp"

# --resume auto continues on the recorded layout (its checkpoint's), not on a new search.
train_auto r4 4 0.0035 --resume auto --steps 3
grep -q "^layout auto: continuing on the layout recorded in $SCRATCH/r4/config.toml" "$SCRATCH/r4.log" ||
  { cat "$SCRATCH/r4.log"; fail "the resumed run did not keep its recorded layout"; }
grep -q "^resumed from .*step_00000002 at step 2" "$SCRATCH/r4.log" || fail "r4 did not resume"
diff <(fit_top "$SCRATCH/r4.fit.json") <(layout_of "$SCRATCH/r4") || fail "the resumed run changed its layout"
grep -q '"step": 3' "$SCRATCH/r4/metrics.jsonl" || fail "the resumed run did not train step 3"
"$DIT_MP" inspect "$SCRATCH/r4/ckpt/step_00000003" >"$SCRATCH/inspect.txt" 2>&1 || { cat "$SCRATCH/inspect.txt"; fail "inspect"; }
tp=$(layout_of "$SCRATCH/r4" | sed -n 's/^parallel.tp=//p')
grep -q "tp $tp" "$SCRATCH/inspect.txt" || { cat "$SCRATCH/inspect.txt"; fail "inspect does not show tp $tp"; }
echo "ok: --resume auto continued on tp $tp and inspect shows it"

# A planner that under-counts activations by 30%: one message naming the rank, the category and
# both numbers.
DIT_PLAN_UNDERCOUNT=0.3 timeout 300 $MPIRUN -n 2 "$DIT_MP" "${CFG[@]}" --run-dir "$SCRATCH/under" >"$SCRATCH/under.log" 2>&1 ||
  { cat "$SCRATCH/under.log"; fail "the under-counted run failed"; }
[[ $(grep -c "plan check" "$SCRATCH/under.log") == 1 ]] || { cat "$SCRATCH/under.log"; fail "not one plan-check message"; }
grep -qE "^plan check: rank [0-9]+ \(stage [0-9]+\) activation_bytes: measured .* planned .*, \+4[0-9.]+%" \
  "$SCRATCH/under.log" || { grep "plan check" "$SCRATCH/under.log"; fail "the message lacks the rank, category or numbers"; }
echo "ok: $(grep -o '^plan check: rank [0-9]* (stage [0-9]*) activation_bytes: [^;]*%' "$SCRATCH/under.log")"

# The memory margin: 99% kept free cannot hold on any machine, so the log lines say so.
timeout 300 "$DIT_MP" "${CFG[@]}" --run-dir "$SCRATCH/margin" --set parallel.memory_margin=0.99 >"$SCRATCH/margin.log" 2>&1 ||
  { cat "$SCRATCH/margin.log"; fail "the margin run failed"; }
grep -qE "^step 1/2 .* low memory: rank 0 has .* free of .* under parallel.memory_margin = 99%" "$SCRATCH/margin.log" ||
  { cat "$SCRATCH/margin.log"; fail "the log line did not name the low memory"; }
! grep -q "low memory" "$SCRATCH/r1.log" "$SCRATCH/r2.log" || echo "note: this machine has under 10% of its memory free"
echo "ok: the log line says memory is under the margin"

# Bad input: one message, non-zero exit on every rank, no hang.
refused() {  # refused RANKS REGEX ARGS...
  local ranks=$1 regex=$2
  shift 2
  local out rc=0
  out=$(timeout 120 $MPIRUN -n "$ranks" "$DIT_MP" "${CFG[@]}" --layout auto --run-dir "$SCRATCH/never" "$@" 2>&1) || rc=$?
  ((rc != 0 && rc != 124)) || { echo "$out"; fail "exit $rc (0: ran, 124: hung): $*"; }
  [[ $(grep -c "error:" <<<"$out") == 1 ]] || { echo "$out"; fail "not one message: $*"; }
  grep -qE -- "$regex" <<<"$out" || { echo "$out"; fail "the message does not match /$regex/: $*"; }
  [[ ! -e $SCRATCH/never ]] || fail "a refused run made its folder: $*"
  echo "refused as expected: $(grep -o 'error: .*' <<<"$out" | cut -c1-200)"
}
refused 4 "no layout of 4 ranks fits 0.0001 GiB per rank .*the smallest peak found is [0-9.]+ [KM]iB .*give at least" \
  --memory-gib 0.0001
refused 3 "no layout divides the job's 3 ranks .*run with 1, 2, 4, 8" --memory-gib 1
refused 2 'parallel.hardware = "a100-81g" \(--hardware\): expected one of .*a100-80g' --hardware a100-81g
refused 2 "parallel.memory_gib = 0 \(--memory-gib\): expected the memory per rank in GiB, a number > 0" --memory-gib 0
refused 2 "parallel.memory_gib = -2: expected GiB per rank > 0" --memory-gib -2
refused 2 'parallel.memory_gib: expected a number, got a string \("lots"\)' --memory-gib lots
DIT_LAYOUT_SEARCH=some refused 2 "DIT_LAYOUT_SEARCH=some: expected rank0" --memory-gib 1
echo "ok: --layout auto"
