#!/usr/bin/env bash
# Runs a command that must fail: exit status non-zero and its output (stdout + stderr) matching
# the given extended regex. Usage: expect_fail.sh REGEX COMMAND [ARGS...]
set -u
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
if [[ $rc -eq 0 ]]; then
  printf 'expected a failure, the command succeeded:\n%s\n' "$out"
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  printf 'exit %d, but the output does not match /%s/:\n%s\n' "$rc" "$regex" "$out"
  exit 1
fi
printf 'failed as expected (exit %d): %s\n' "$rc" "$(grep -E -m1 -- "$regex" <<<"$out")"
