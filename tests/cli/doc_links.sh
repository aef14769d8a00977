#!/usr/bin/env bash
# Every relative link of README.md and docs/*.md resolves: the file or folder it names exists
# (relative to the page that links it), and a #fragment names a heading of the page it points at
# (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens). A page moved or renamed
# without its links fails here. Web links (http, https, mailto) are not followed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python3 - README.md docs/*.md <<'PY'
import os, re, sys

def anchors(path):
    """GitHub's heading anchors of a Markdown file (code blocks skipped, duplicates numbered)."""
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out

links = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
bad = checked = 0
for page in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(page, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in links.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                print(f"FAIL: {page}:{no}: {target}: {dest} does not exist")
                bad += 1
            elif frag and (not dest.endswith(".md") or frag not in anchors(dest)):
                print(f"FAIL: {page}:{no}: {target}: no heading #{frag} in {dest}")
                bad += 1
if checked == 0:
    print("FAIL: no link found (the pattern is wrong)")
    sys.exit(1)
print(f"{'ok' if bad == 0 else 'FAIL'}: {checked - bad} of {checked} links resolve")
sys.exit(1 if bad else 0)
PY
