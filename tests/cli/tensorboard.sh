#!/usr/bin/env bash
# TensorBoard event files (train.tensorboard, issue 47): a 4-rank run (tp 2 x pp 2) writes <run>/tb/,
# read back as TensorBoard reads it (tb_events.py: the framing's CRCs, the Event schema through
# Google's protobuf runtime, the purge of a resumed run's orphaned steps). Every logged step's
# numbers are there as scalars equal to metrics.jsonl's, the evaluation as eval/*, each sample grid
# as the PNG written, the config and the layout as text; a run resumed from an earlier checkpoint
# continues the folder without a step twice; --overwrite replaces it; train.tensorboard = false
# writes none.
source "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
if ! /usr/bin/python3 -c "import google.protobuf" 2>/dev/null; then
  echo "skip: python3-protobuf is missing (scripts/install_deps.sh installs it unless DIT_WITH_PYTHON=0)"
  exit 77
fi
prepare_fashion_test
"$DIT_MP" evaluate --train-classifier --train-data "$SCRATCH/fm_test.h5" --reference "$SCRATCH/fm_test.h5" \
  --classifier "$SCRATCH/c.h5" --classifier-epochs 1 > "$SCRATCH/c.log" 2>&1 || { cat "$SCRATCH/c.log"; fail "classifier"; }
R=$SCRATCH/run
ARGS=(--set data.path="$SCRATCH/fm_test.h5" "${TINY[@]}" --set train.steps=4 --set train.log_every=1
      --set train.sample_every=2 --set train.checkpoint_every=2 --set train.eval_every=4
      --set eval.classifier=\""$SCRATCH/c.h5"\" --set eval.reference=\""$SCRATCH/fm_test.h5"\"
      --set eval.per_class=2 --set eval.num_steps=2 --tp 2 --pp 2)
train() {  # train NAME ARGS...: 4 ranks, the log in $SCRATCH/NAME.log
  local name=$1
  shift
  $MPIRUN -n 4 "$DIT_MP" "${ARGS[@]}" "$@" > "$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; fail "$name failed"; }
}
train first --run-dir "$R"
[[ $(ls "$R/tb" | wc -l) == 1 ]] || fail "expected one events file in $R/tb: $(ls "$R/tb")"

# check RUN RESUMED: every tag, step and value against the run's own files.
check() {
  /usr/bin/python3 - "$HERE" "$1" "$2" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
import tb_events
run, resumed = sys.argv[2], sys.argv[3] == "1"
events = tb_events.load(f"{run}/tb")
bad = []
def need(ok, what):
    if not ok:
        bad.append(what)
need(any(k == "file_version" and v == "brain.Event:2" for _, _, k, v in events), "no file_version brain.Event:2")
seen = {}
for step, tag, kind, value in events:
    if kind in ("scalar", "image", "text"):
        need((tag, step) not in seen, f"{tag} at step {step} twice")
        seen[(tag, step)] = (kind, value)
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
train_rows = {r["step"]: r for r in rows if "eval" not in r}  # a resume appends its steps again: the last wins
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
for step, r in train_rows.items():
    for key, value in r.items():
        if key == "step":
            continue
        got = seen.get((f"train/{key}", step))
        need(got is not None and got[0] == "scalar", f"train/{key} missing at step {step}")
        if got and got[1] != f32(float(value)):
            bad.append(f"train/{key} at step {step}: {got[1]} in the events, {value} in metrics.jsonl")
need(sorted(train_rows) == [1, 2, 3, 4], f"metrics.jsonl steps {sorted(train_rows)}")
for want in ("loss", "mse", "vb", "grad_norm", "lr", "images_per_s", "tflops", "mfu", "peak_mem_bytes",
             "elapsed_s", "loss_scale", "skipped_steps"):
    need(all(("train/" + want, s) in seen for s in (1, 2, 3, 4)), f"train/{want} not at every step")
evals = [r for r in rows if "eval" in r]
need(evals, "metrics.jsonl has no evaluation")
for r in evals[-1:]:
    e = r["eval"]
    for tag in ("fid", "precision", "recall", "class_accuracy"):
        got = seen.get((f"eval/{tag}", r["step"]))
        need(got is not None, f"eval/{tag} missing at step {r['step']}")
    fid = seen.get(("eval/fid", r["step"]), (0, -1.0))[1]  # metrics.jsonl keeps 6 digits of it
    need(abs(fid - e["samples"]["fid"]) <= 1e-5 * abs(e["samples"]["fid"]), f"eval/fid {fid}, metrics.jsonl {e['samples']['fid']}")
for step, name in ((2, "samples_step_0000002.png"), (4, "samples.png")):
    got = seen.get(("samples", step))
    need(got is not None and got[0] == "image", f"no samples image at step {step}")
    if got:
        h, w, c, png = got[1]
        disk = open(f"{run}/{name}", "rb").read()
        need(png == disk, f"the samples image at step {step} is not {name}")
        need((w, h) == struct.unpack(">II", disk[16:24]) and c in (1, 3), f"image size/colours {w}x{h}x{c}")
# The step split and memory (run/monitor.h): ranks.jsonl's numbers, the split as the ranks' mean
# and per stage, the memory per rank; the parts add up to the step.
ranks = {r["step"]: r["ranks"] for r in map(json.loads, open(f"{run}/ranks.jsonl"))}
need(sorted(ranks) == [1, 2, 3, 4], f"ranks.jsonl steps {sorted(ranks)}")
parts = ("compute_s", "tp_s", "pp_s", "bubble_s", "dp_s", "data_s", "optimizer_s")
for step, rs in ranks.items():
    need(len(rs) == 4 and [r["rank"] for r in rs] == [0, 1, 2, 3], f"ranks.jsonl step {step}: ranks {[r['rank'] for r in rs]}")
    for r in rs:
        total = sum(r[p] for p in parts)
        need(abs(total - r["step_s"]) <= 1e-6 * r["step_s"] + 1e-9 and min(r[p] for p in parts) >= 0,
             f"step {step} rank {r['rank']}: the parts add to {total}, step_s {r['step_s']}")
        need(r["tp_s"] > 0 and r["rss_bytes"] > 0 and r["planned_bytes"] > 0, f"step {step} rank {r['rank']}: {r}")
        for key in ("rss_bytes", "peak_rss_bytes", "planned_bytes"):
            got = seen.get((f"memory/rank{r['rank']}/{key}", step))
            need(got is not None and got[1] == f32(r[key]), f"memory/rank{r['rank']}/{key} at step {step}: {got}, {r[key]}")
    for key in parts + ("step_s", "checkpoint_s"):
        mean = sum(r[key] for r in rs) / 4
        got = seen.get((f"time/{key}", step))
        need(got is not None and abs(got[1] - mean) <= 1e-6 * abs(mean) + 1e-12, f"time/{key} at step {step}: {got}, mean {mean}")
        for s in (0, 1):
            smean = sum(r[key] for r in rs if r["stage"] == s) / 2
            got = seen.get((f"time/stage{s}/{key}", step))
            need(got is not None and abs(got[1] - smean) <= 1e-6 * abs(smean) + 1e-12, f"time/stage{s}/{key} at step {step}")
need(resumed or any(r["checkpoint_s"] > 0 for r in ranks[3]), "the checkpoint after step 2 took no time in ranks.jsonl (row 3)")
need(any(r["bubble_s"] > 0 for r in ranks[4]), "no bubble at pp 2")
texts = {tag: v for (tag, _), (k, v) in seen.items() if k == "text"}
need("[model]" in texts.get("config", ""), "the config text lacks [model]")
need("tp 2" in texts.get("layout", ""), f"the layout text: {texts.get('layout')!r}")
raw = [e for p in __import__("glob").glob(f"{run}/tb/*tfevents*") for e in tb_events.records(p)]
starts = [e.step for e in raw if e.HasField("session_log")]
if resumed:
    need(starts == [3], f"SessionLog START steps {starts}, expected [3]")
    dup = [e for e in raw for v in e.summary.value if v.tag == "train/loss" and e.step == 3]
    need(len(dup) == 2, f"the resumed run should have logged step 3 again ({len(dup)} raw train/loss events)")
else:
    need(starts == [], f"a fresh run wrote SessionLog START at {starts}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"ok: {len(seen)} tagged values, {len(raw)} raw events{' (resumed)' if resumed else ''}")
PY
}
check "$R" 0 || fail "the event files of the 4-rank run do not hold what it logged"

# A resume from step 2's checkpoint logs steps 3 and 4 again into a second file; TensorBoard's purge
# keeps one of each.
train resumed --run-dir "$R" --resume "$R/ckpt/step_00000002"
[[ $(ls "$R/tb" | wc -l) == 2 ]] || fail "the resumed run did not add one events file: $(ls "$R/tb")"
check "$R" 1 || fail "the resumed run's event files"

# A damaged record is found by the reader (so the checks above can fail).
files=("$R"/tb/*)
f=${files[0]}
cp "$f" "$SCRATCH/good.tfevents"
printf '\x00' | dd of="$f" bs=1 seek=40 conv=notrunc status=none
if /usr/bin/python3 -c "import sys; sys.path.insert(0, '$HERE'); import tb_events; tb_events.records('$f')" 2>/dev/null; then
  fail "a flipped byte in an events file went unnoticed"
fi
cp "$SCRATCH/good.tfevents" "$f"
echo "ok: a flipped byte is caught by the CRC"

# --overwrite replaces the run's tb/ with one new file; train.tensorboard = false writes none.
train again --run-dir "$R" --overwrite --set train.eval_every=0
[[ $(ls "$R/tb" | wc -l) == 1 ]] || fail "--overwrite left $(ls "$R/tb" | wc -l) events files"
train off --run-dir "$SCRATCH/off" --set train.tensorboard=false --set train.eval_every=0
[[ ! -e "$SCRATCH/off/tb" ]] || fail "train.tensorboard = false wrote $SCRATCH/off/tb"
grep -qx "tensorboard = false" "$SCRATCH/off/config.toml" || fail "train.tensorboard = false is not recorded"
echo "ok: --overwrite replaces tb/, train.tensorboard = false writes none"
