#!/usr/bin/env bash
# Every script the README and the pages of docs/ name exists, and every one they run as a command
# (a line of a code block starting with the path, or `path ...` in the text) is executable, so a
# fresh clone runs them as written. (pack_gpu.sh once shipped without its executable bit and stopped
# at "Permission denied".) Paths are written from the repository root on every page.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
status=0
pattern='(scripts|benchmarks|tools|launch|tests)/[A-Za-z0-9_./-]+\.(sh|py|sbatch)'
grep -qE "$pattern" README.md || { echo "FAIL: the README names no script (the pattern is wrong)"; exit 1; }
for page in README.md docs/*.md; do
  for f in $(grep -oE "$pattern" "$page" | sort -u); do
    [[ -e "$f" ]] || { echo "FAIL: $page names $f, which does not exist"; status=1; continue; }
    # Run as a command: at the start of a line (code blocks) or of a backquoted command, or after &&.
    if grep -qE "(^|\`|&& )$f( |$)" "$page"; then
      [[ -x "$f" ]] || { echo "FAIL: $page runs $f but it is not executable"; status=1; continue; }
      echo "ok: $page: $f is executable"
    else
      echo "ok: $page: $f exists"
    fi
  done
done
exit $status
