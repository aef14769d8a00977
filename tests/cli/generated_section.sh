#!/usr/bin/env bash
# The tools that write tables into docs/memory.md and docs/scaling.md (tools/memory_report.py,
# benchmarks/scaling/predict.py cluster) replace only their section between its markers: on the real
# pages, a new section leaves every hand-written line as it was, the section's own text reproduces
# the page byte for byte, a page without the markers is refused and left alone. No binary needed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRATCH=$(mktemp -d /tmp/dit_gen.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
/usr/bin/python3 - "$ROOT" "$SCRATCH" <<'PY'
import os, shutil, sys
root, scratch = sys.argv[1:]
sys.path.insert(0, os.path.join(root, "tools"))
import generated_section as g

for page, tool in [("docs/memory.md", "tools/memory_report.py"),
                   ("docs/scaling.md", "benchmarks/scaling/predict.py cluster")]:
    text = open(os.path.join(root, page)).read()
    begin, end = g.markers(tool)
    assert text.count(begin) == 1 and text.count(end) == 1, f"{page} lacks the markers of {tool}"
    before, rest = text.split(begin)
    body, after = rest.split(end)
    assert len(before.strip().splitlines()) > 20, f"{page}: the hand-written part is missing"
    # Its own section reproduces the page; a new one changes the section alone.
    assert g.splice(text, tool, body) == text, f"{page}: splicing its own section changed the page"
    new = g.splice(text, tool, "## Regenerated\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n")
    assert new.startswith(before) and new.endswith(after), f"{page}: prose outside the markers changed"
    assert "| 1 | 2 |" in new and body.strip() not in new, f"{page}: the section was not replaced"
    # Through write(), on a copy: the same, and no temporary left behind.
    copy = os.path.join(scratch, os.path.basename(page))
    shutil.copy(os.path.join(root, page), copy)
    g.write(copy, tool, "new body")
    assert open(copy).read() == before + begin + "\nnew body\n" + end + after
    assert os.listdir(scratch) == [os.path.basename(page)], os.listdir(scratch)
    os.remove(copy)

# A page without the markers is refused and kept; markers twice are refused; a missing page is made.
bare = os.path.join(scratch, "bare.md")
open(bare, "w").write("# Prose\n\nhand-written\n")
try:
    g.write(bare, "tools/memory_report.py", "x")
    raise AssertionError("a page without markers was overwritten")
except ValueError as e:
    assert "bare.md: it has no generated section of tools/memory_report.py" in str(e), e
assert open(bare).read() == "# Prose\n\nhand-written\n"
b, e = g.markers("t")
try:
    g.splice(f"{b}\n{e}\n{b}\n{e}\n", "t", "x")
    raise AssertionError("markers twice were accepted")
except ValueError as err:
    assert "more than once" in str(err), err
fresh = os.path.join(scratch, "fresh.md")
g.write(fresh, "t", "body")
assert open(fresh).read() == f"{b}\nbody\n{e}\n"
print("ok: docs/memory.md and docs/scaling.md keep their prose; only the generated sections change")
PY
