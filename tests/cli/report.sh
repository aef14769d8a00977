#!/usr/bin/env bash
# dit_mp report (issue 47, part 3), opened in a real browser: a 4-rank run (tp 2 x pp 2) with grids,
# two evaluations, ranks.jsonl and a timeline (--profile 2:3) gets its report.html, which Debian's
# chromium loads headless: no console message at all (an error injected into a copy is caught, so
# the check can fail), and every chart's data-points, read from the DOM after the page's script ran,
# equals the rows of its source file counted here with python's json; the page references nothing
# outside itself. A screenshot is kept in $REPORT_OUT. Copies of the run: without ranks.jsonl and
# trace.json, the sections say they were not recorded (memory from metrics.jsonl instead); with a
# GPU run's device memory in ranks.jsonl, a field left out, and a trace with process names and flows,
# they are drawn. Refused, in one line: a folder that is not a run's, a malformed metrics row (file
# and line named), --out over an input or a user's HTML file. --overwrite of the run replaces its
# report.html. Skips (77) without chromium, saying so.
source "$(dirname "$0")/common.sh"
command -v chromium > /dev/null ||
  { echo "skip: chromium is missing (scripts/install_deps.sh installs it unless DIT_WITH_BROWSER=0)"; exit 77; }
OUT=${REPORT_OUT:-$SCRATCH/out}
mkdir -p "$OUT"
CHROME=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$SCRATCH/chrome")

# browse HTML NAME: the DOM after the page's scripts ran in $SCRATCH/NAME.dom, chromium's log in
# $SCRATCH/NAME.log; fails when the page wrote anything to the console (the report writes nothing).
browse() {
  timeout 120 "${CHROME[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$1" > "$SCRATCH/$2.dom" \
    2> "$SCRATCH/$2.log" || { cat "$SCRATCH/$2.log"; fail "chromium could not load $1"; }
  if grep -E "CONSOLE|Uncaught" "$SCRATCH/$2.log"; then
    return 1
  fi
}

# check_points RUN NAME: each [data-chart] of the DOM against RUN's files.
check_points() {
  python3 - "$1" "$SCRATCH/$2.dom" <<'PY'
import glob, html.parser, json, os, sys
run, dom = sys.argv[1:]
class Charts(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts = {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-chart" in a:
            assert a["data-chart"] not in self.charts, f"two charts named {a['data-chart']}"
            self.charts[a["data-chart"]] = (a.get("data-points"), a.get("data-source"))
page = Charts()
text = open(dom).read()
page.feed(text)
lines = lambda f: [json.loads(l) for l in open(os.path.join(run, f)) if l.strip()]
metrics = lines("metrics.jsonl")
steps = [r for r in metrics if "eval" not in r]
evals = len(metrics) - len(steps) + os.path.exists(os.path.join(run, "eval.json"))
want = {name: len(steps) for name in ("loss", "loss-terms", "grad-norm", "lr", "throughput", "mfu")}
want["samples"] = len(glob.glob(os.path.join(run, "samples_step_*.png")) + glob.glob(os.path.join(run, "samples.png")))
want["eval"] = evals
want["layout"] = len(json.load(open(os.path.join(run, "accounting.json"))))
if os.path.exists(os.path.join(run, "ranks.jsonl")):
    ranks = lines("ranks.jsonl")
    want["time-split"] = want["memory"] = len(ranks)
    want["ranks-last"] = len(ranks[-1]["ranks"])
else:
    want["memory-peak"] = len(steps)
    assert "Not recorded: this run folder has no ranks.jsonl" in text, "the step split does not say it was not recorded"
if os.path.exists(os.path.join(run, "trace.json")):
    want["timeline"] = sum(e.get("ph") == "X" for e in json.load(open(os.path.join(run, "trace.json")))["traceEvents"])
else:
    assert "Not recorded: train with --profile A:B" in text, "the timeline does not say it was not recorded"
bad = []
for name, n in sorted(want.items()):
    got = page.charts.get(name)
    if n <= 0:
        bad.append(f"{name}: the run has no rows for it (the test would pass on nothing)")
    elif got is None or got[0] is None:
        bad.append(f"{name}: no chart with data-points in the page")
    elif int(got[0]) != n:
        bad.append(f"{name}: data-points {got[0]}, its source ({got[1]}) has {n}")
extra = set(page.charts) - set(want)
if extra:
    bad.append(f"charts the test does not count: {sorted(extra)}")
print("\n".join(bad) if bad else "ok: " + ", ".join(f"{k} {v}" for k, v in sorted(want.items())))
sys.exit(1 if bad else 0)
PY
}

# self_contained HTML: nothing fetched from elsewhere (no link, no src or href but data: and #).
self_contained() {
  python3 - "$1" <<'PY'
import re, sys
page = open(sys.argv[1]).read()
refs = [m.group(2) for m in re.finditer(r'\b(src|href)\s*=\s*"([^"]*)"', page)
        if not m.group(2).startswith(("data:", "#"))]
assert not refs, f"external references: {refs[:5]}"
assert "<link" not in page and "@import" not in page and "url(" not in page, "a stylesheet or font fetched"
print(f"ok: self-contained ({len(page)} bytes)")
PY
}

refused() {  # refused REGEX CMD...: CMD fails with one line on stderr matching REGEX
  local regex=$1 rc=0
  shift
  "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  [[ $rc -ne 0 ]] || fail "expected a refusal: $*"
  grep -Eq -- "$regex" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "stderr lacks /$regex/: $*"; }
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "not one line on stderr: $*"; }
  echo "ok: refused /$regex/"
}

prepare_fashion_test
FM=$SCRATCH/fm_test.h5
"$DIT_MP" evaluate --train-classifier --train-data "$FM" --reference "$FM" --classifier "$SCRATCH/c.h5" \
  --classifier-epochs 1 > "$SCRATCH/c.log" 2>&1 || { cat "$SCRATCH/c.log"; fail "classifier"; }
R=$SCRATCH/run
ARGS=(--set data.path=\""$FM"\" "${TINY[@]}" --set train.steps=6 --set train.log_every=1 --set train.sample_every=2
      --set train.eval_every=3 --set eval.classifier=\""$SCRATCH/c.h5"\" --set eval.reference=\""$FM"\"
      --set eval.per_class=2 --set eval.num_steps=2 --tp 2 --pp 2)
$MPIRUN -n 4 "$DIT_MP" "${ARGS[@]}" --profile 2:3 --run-dir "$R" > "$SCRATCH/train.log" 2>&1 ||
  { cat "$SCRATCH/train.log"; fail "the run"; }
[[ -s $R/ranks.jsonl && -s $R/trace.json ]] || fail "the run wrote no ranks.jsonl or trace.json"

"$DIT_MP" report "$R" > "$SCRATCH/report.txt" || fail "dit_mp report failed"
grep -qx "report: $R/report.html" "$SCRATCH/report.txt" || { cat "$SCRATCH/report.txt"; fail "no report line"; }
self_contained "$R/report.html"
browse "$R/report.html" run || fail "the report of the run wrote to the browser's console"
check_points "$R" run || fail "the charts of the run's report"
timeout 120 "${CHROME[@]}" --screenshot="$OUT/report.png" --window-size=1280,4000 "file://$R/report.html" \
  > "$SCRATCH/shot.log" 2>&1 || { cat "$SCRATCH/shot.log"; fail "no screenshot"; }
python3 - "$OUT/report.png" <<'PY' || fail "the screenshot"
import struct, sys
png = open(sys.argv[1], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
assert struct.unpack(">II", png[16:24]) == (1280, 4000), struct.unpack(">II", png[16:24])
assert len(png) > 50_000, f"{len(png)} bytes: a blank page?"
print(f"ok: screenshot {sys.argv[1]} (1280x4000, {len(png)} bytes)")
PY
cp "$R/report.html" "$OUT/report.html"

# An error in the page is seen: the same check on a copy with a failing script.
sed 's|</body>|<script>no_such_function();</script></body>|' "$R/report.html" > "$SCRATCH/broken.html"
if browse "$SCRATCH/broken.html" broken > /dev/null; then fail "a script error in the page went unnoticed"; fi
grep -q "Uncaught ReferenceError: no_such_function" "$SCRATCH/broken.log" || fail "chromium's log lacks the error"
echo "ok: an injected script error is caught"

# Without ranks.jsonl and trace.json (a run before they were written, or without --profile).
N=$SCRATCH/unmonitored
cp -r "$R" "$N"
rm "$N/ranks.jsonl" "$N/trace.json" "$N/report.html"
"$DIT_MP" report "$N" > /dev/null || fail "the report of a run without ranks.jsonl and trace.json"
browse "$N/report.html" unmonitored || fail "the report without ranks.jsonl wrote to the browser's console"
check_points "$N" unmonitored || fail "the charts of a run without ranks.jsonl and trace.json"

# A GPU run's rows (device memory), a field left out (rank 1 has no tp_s), a trace with process
# names and flows, in their documented format: on a copy of the run.
C=$SCRATCH/copy
cp -r "$R" "$C"
rm -f "$C/report.html"
python3 - "$C" <<'PY'
import json, sys
run = sys.argv[1]
steps = [r["step"] for r in map(json.loads, open(f"{run}/metrics.jsonl")) if "eval" not in r]
with open(f"{run}/ranks.jsonl", "w") as f:
    for s in steps:
        ranks = []
        for r in range(4):
            row = {"rank": r, "host": "node0", "stage": r // 2, "step_s": 0.2, "compute_s": 0.1, "tp_s": 0.02,
                   "pp_s": 0.01, "dp_s": 0.0, "bubble_s": 0.03, "data_s": 0.005, "optimizer_s": 0.01,
                   "checkpoint_s": 0.0, "rss_bytes": 3e7 + 1e5 * s, "device_bytes": 2e7, "device_peak_bytes": 2.5e7,
                   "planned_bytes": 4e7}
            if r == 1:
                del row["tp_s"]
            ranks.append(row)
        f.write(json.dumps({"step": s, "ranks": ranks}) + "\n")
events = []
for pid in range(4):
    events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"rank {pid}"}})
    for mb in range(3):
        for k, cat in enumerate(("forward", "backward")):
            events.append({"ph": "X", "pid": pid, "tid": 0, "name": f"{cat} mb {mb}", "cat": cat,
                           "ts": 1000 * (2 * mb + k) + 50 * pid, "dur": 700, "args": {"mb": mb}})
for mb in range(3):
    events.append({"ph": "s", "pid": 0, "tid": 0, "name": "send", "cat": "p2p", "id": mb, "ts": 1000 * 2 * mb + 700})
    events.append({"ph": "f", "pid": 2, "tid": 0, "name": "recv", "cat": "p2p", "id": mb, "bp": "e",
                   "ts": 1000 * 2 * mb + 800})
json.dump({"traceEvents": events}, open(f"{run}/trace.json", "w"))
PY
"$DIT_MP" report "$C" > /dev/null || fail "the report of the copy"
browse "$C/report.html" copy || fail "the report of the copy wrote to the browser's console"
check_points "$C" copy || fail "the charts drawn from ranks.jsonl and trace.json"
grep -q "3 sends joined to their receives" "$SCRATCH/copy.dom" || fail "the timeline's flows"

# Refusals, each one line, nothing written.
refused "report: $SCRATCH is not a run folder: it holds no config.toml written by dit_mp" "$DIT_MP" report "$SCRATCH"
refused "report: $SCRATCH/none does not exist" "$DIT_MP" report "$SCRATCH/none"
B=$SCRATCH/broken_run
cp -r "$R" "$B"
sed -i '2s/.*/{"step": 2, "loss": 0.9,/' "$B/metrics.jsonl"
refused "$B/metrics.jsonl line 2 is not valid JSON" "$DIT_MP" report "$B" --out "$SCRATCH/b.html"
[[ ! -e $SCRATCH/b.html ]] || fail "a report was written from a malformed metrics.jsonl"
refused "output --out $R/metrics.jsonl \(the report\) is input run: its metrics.jsonl" \
  "$DIT_MP" report "$R" --out "$R/metrics.jsonl"
echo "<html><body>mine</body></html>" > "$SCRATCH/mine.html"
refused "output --out $SCRATCH/mine.html \(the report\) exists and is a text file, not a run's report page" \
  "$DIT_MP" report "$R" --out "$SCRATCH/mine.html"
grep -q mine "$SCRATCH/mine.html" || fail "a user's HTML file was changed"

# A report is the run's own file: written again in place, and replaced with the run by --overwrite.
"$DIT_MP" report "$R" > /dev/null || fail "a second report over the first"
$MPIRUN -n 4 "$DIT_MP" "${ARGS[@]}" --run-dir "$R" --overwrite --set train.eval_every=0 > "$SCRATCH/again.log" 2>&1 ||
  { cat "$SCRATCH/again.log"; fail "--overwrite of a run folder holding its report"; }
[[ ! -e $R/report.html ]] || fail "--overwrite kept the old run's report.html"
echo "ok: report.sh (the screenshot: $OUT/report.png)"
