#!/usr/bin/env bash
# Deeply nested TOML (10000 '[' in a --config file, 20000 in a --set) is one message naming the
# origin and the line, exit 1; toml11 alone recursed until the stack ran out (SIGSEGV, no message).
# So is a dotted key of 100000 parts, in a --config file and in a plan --predict --calibration file.
source "$(dirname "$0")/common.sh"
python3 -c "print('x = ' + '[' * 10000 + ']' * 10000)" > "$SCRATCH/deep.toml"
printf '[train]\nsteps = 5\nlr = %s\n' "$(python3 -c "print('{a = ' * 3000)")" > "$SCRATCH/tables.toml"
python3 -c "print('[model.' + '.'.join(['a'] * 100000) + ']')" > "$SCRATCH/dotted.toml"
python3 -c "print('[predict]\\n' + '.'.join(['a'] * 100000) + ' = 1')" > "$SCRATCH/dotted_calibration.toml"
python3 -c "print('[predict]\\nflops_per_s = ' + '[' * 10000 + ']' * 10000)" > "$SCRATCH/deep_calibration.toml"
deep=$(python3 -c "print('[' * 20000 + ']' * 20000)")
check() {  # check REGEX CMD...: exit 1 and one stderr line matching REGEX
  local rc=0 regex=$1
  shift
  timeout 60 "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  [[ $rc -eq 1 ]] || fail "exit $rc, expected 1 (139 is the crash): $(head -c 300 "$SCRATCH/err.txt")"
  grep -Eq -- "$regex" "$SCRATCH/err.txt" || fail "stderr lacks /$regex/: $(head -c 300 "$SCRATCH/err.txt")"
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "expected one line on stderr: $(head -c 300 "$SCRATCH/err.txt")"
}
check "$SCRATCH/deep.toml:1: arrays and inline tables nest deeper than 64 levels" \
  "$DIT_MP" --config "$SCRATCH/deep.toml" --run-dir "$SCRATCH/never"
check "$SCRATCH/tables.toml:3: arrays and inline tables nest deeper" \
  "$DIT_MP" --config "$SCRATCH/tables.toml" --run-dir "$SCRATCH/never"
check "--set train.lr=\[\[\[.*nest deeper than 64 levels" "$DIT_MP" --set "train.lr=$deep" --run-dir "$SCRATCH/never"
check "$SCRATCH/dotted.toml:1: a dotted key nests deeper than 64 levels" \
  "$DIT_MP" --config "$SCRATCH/dotted.toml" --run-dir "$SCRATCH/never"
check "$SCRATCH/dotted_calibration.toml:2: a dotted key nests deeper than 64 levels" \
  "$DIT_MP" plan --predict --calibration "$SCRATCH/dotted_calibration.toml"
check "$SCRATCH/deep_calibration.toml:2: arrays and inline tables nest deeper than 64 levels" \
  "$DIT_MP" plan --predict --calibration "$SCRATCH/deep_calibration.toml"
[[ ! -e "$SCRATCH/never" ]] || fail "a run folder was created"
echo "ok: nested TOML and dotted keys in --config, --set and a calibration are one message, exit 1"
