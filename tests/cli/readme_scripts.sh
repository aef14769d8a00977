#!/usr/bin/env bash
# Every script the README names exists, and every one it runs as a command (a line of a code block
# starting with the path, or `path ...` in the text) is executable, so a fresh clone runs them as
# written. (pack_gpu.sh once shipped without its executable bit and stopped at "Permission denied".)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
status=0
named=$(grep -oE '(scripts|benchmarks|tools|launch|tests)/[A-Za-z0-9_./-]+\.(sh|py|sbatch)' README.md | sort -u)
[[ -n "$named" ]] || { echo "FAIL: the README names no script (the pattern is wrong)"; exit 1; }
for f in $named; do
  [[ -e "$f" ]] || { echo "FAIL: README names $f, which does not exist"; status=1; continue; }
  # Run as a command: at the start of a line (code blocks) or of a backquoted command, or after &&.
  if grep -qE "(^|\`|&& )$f( |$)" README.md; then
    [[ -x "$f" ]] || { echo "FAIL: README runs $f but it is not executable"; status=1; continue; }
    echo "ok: $f is executable"
  else
    echo "ok: $f exists"
  fi
done
exit $status
