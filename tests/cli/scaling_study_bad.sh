#!/usr/bin/env bash
# A malformed study file is refused before anything runs: one line naming the file, the key and what
# was expected, exit code 2, no traceback, and no study folder created.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STUDY=(/usr/bin/python3 "$ROOT/benchmarks/scaling/study.py")
export DIT_MP
MODEL=$'[[model]]\nname = "m"\n'
SWEEP=$'[[sweep]]\nlayouts = ["1x1x1"]\n'

# refused NAME EXPECTED-TEXT: the study $SCRATCH/NAME.toml gives one line holding EXPECTED-TEXT.
refused() {
  local file="$SCRATCH/$1.toml" out="$SCRATCH/out_$1" rc=0
  "${STUDY[@]}" run "$file" --out "$out" > "$SCRATCH/$1.log" 2>&1 || rc=$?
  local log
  log=$(cat "$SCRATCH/$1.log")
  [[ $rc -eq 2 ]] || fail "$1: exit code $rc, expected 2; output: ${log:0:2000}"
  [[ $log != *Traceback* ]] || fail "$1: a traceback: ${log:0:2000}"
  [[ $(wc -l < "$SCRATCH/$1.log") -eq 1 ]] || fail "$1: expected one line, got: ${log:0:2000}"
  [[ $log == "study: $file: "* ]] || fail "$1: the message does not start with the file: $log"
  [[ $log == *"$2"* ]] || fail "$1: expected '$2' in: $log"
  [[ ! -e $out ]] || fail "$1: the study folder was created"
  echo "$1: $log"
}

# The six studies of the probe campaign.
printf '%s' "$MODEL" $'[[sweep]]\nbatch = 8\n' > "$SCRATCH/no_layouts.toml"
refused no_layouts '[[sweep]] 1: layouts is missing: expected the layouts to run'
printf '%s' $'[[model]]\npreset = "DiT-S/4"\n' "$SWEEP" > "$SCRATCH/no_model_name.toml"
refused no_model_name '[[model]] 1: name is missing: expected a model name'
printf '%s' "$MODEL" "$SWEEP" $'microbatches = 0\n' > "$SCRATCH/microbatches_0.toml"
refused microbatches_0 '[[sweep]] 1: microbatches = 0: expected an integer >= 1'
printf '%s' "$MODEL" "$SWEEP" $'batch = "8"\n' > "$SCRATCH/batch_string.toml"
refused batch_string '[[sweep]] 1: batch = "8": expected an integer >= 1'
printf '%s' $'[study]\ntimeout_s = "soon"\n' "$MODEL" "$SWEEP" > "$SCRATCH/timeout_soon.toml"
refused timeout_soon '[study] timeout_s = "soon": expected a number of seconds > 0'
/usr/bin/python3 -c "print('x = ' + '[' * 10000 + ']' * 10000)" > "$SCRATCH/nested.toml"
refused nested 'line 1: arrays and inline tables nest deeper than 32 levels'

# More of the key table: inline tables nest too, a misspelt key gets a hint, booleans are not numbers,
# layouts are TPxPPxDP, names are unique and referred to, warm-up leaves steps to time, text is UTF-8.
/usr/bin/python3 -c "print('x = ' + '{a = ' * 5000 + '1' + '}' * 5000)" > "$SCRATCH/nested_tables.toml"
refused nested_tables 'line 1: arrays and inline tables nest deeper than 32 levels'
printf '%s' "$MODEL" $'[[sweep]]\nlayout = ["1x1x1"]\n' > "$SCRATCH/misspelt.toml"
refused misspelt "[[sweep]] 1: unknown key 'layout' (did you mean 'layouts'?)"
printf '%s' "$MODEL" "$SWEEP" $'batch = true\n' > "$SCRATCH/batch_bool.toml"
refused batch_bool '[[sweep]] 1: batch = true: expected an integer >= 1'
printf '%s' "$MODEL" $'[[sweep]]\nlayouts = ["1x1x1", "0x2x1"]\n' > "$SCRATCH/layout_zero.toml"
refused layout_zero '[[sweep]] 1: layouts = ["1x1x1", "0x2x1"]: expected a layout "TPxPPxDP" with factors >= 1'
printf '%s' "$MODEL" "$MODEL" "$SWEEP" > "$SCRATCH/same_name.toml"
refused same_name '[[model]] 2: name = "m": expected a name no other [[model]] has'
printf '%s' "$MODEL" "$SWEEP" $'model = "n"\n' > "$SCRATCH/unknown_model.toml"
refused unknown_model '[[sweep]] 1: model = "n": expected one of the [[model]] names (m)'
printf '%s' $'[study]\nsteps = 2\n' "$MODEL" "$SWEEP" > "$SCRATCH/warmup_all.toml"
refused warmup_all '[[sweep]] 1: warmup = 2 with steps = 2: expected warmup < steps'
printf '%s' $'[study]\ntimeout_s = inf\n' "$MODEL" "$SWEEP" > "$SCRATCH/timeout_inf.toml"
refused timeout_inf '[study] timeout_s = inf: expected a number of seconds > 0'
printf '%s' $'[model]\nname = "m"\n' "$SWEEP" > "$SCRATCH/one_model_table.toml"
refused one_model_table '[model] is one table: expected [[model]]'
printf '[study]\nname = "caf\xe9"\n' > "$SCRATCH/latin1.toml"
refused latin1 'line 2: not UTF-8 text'
mkdir "$SCRATCH/folder.toml"
refused folder 'not a regular file: expected a study TOML'
echo ok
