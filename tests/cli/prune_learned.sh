#!/usr/bin/env bash
# `dit_mp prune --method learned` end to end: a tiny depth-4 model trained a few steps learns which
# 2 blocks to keep (groups 2:1,2:1). The logits it ends with are the same within 1e-5 at 1 rank, at
# tp 2 pp 2 dp 2, there with sequence parallelism, with full recomputation under zb-h1 and under
# interleaved 1F1B; the file keeps the teacher's ORIGINAL blocks (the learning run's weights
# trained, the file's did not), records its provenance and samples; --lr 0 trains the logits alone;
# a LightningDiT flow teacher prunes the same way.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
"$DIT_MP" --tp 1 --pp 1 --steps 3 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  --set model.depth=4 > "$SCRATCH/train.txt" 2>&1 || { cat "$SCRATCH/train.txt"; fail "training failed"; }
learn() { learned_prune "$1" "$2" --steps 4 --gate-lr 0.05 "${@:3}"; }
logits() { learned_logits "$1"; }
close() { ! logits_differ "$1" "$2" 1e-5; }  # relative L2 difference below 1e-5
learn one 1 --groups 2:1,2:1 --lr 1e-3
cat "$SCRATCH/one.txt"
grep -q "groups 2:1,2:1, 4 steps at tp 1 pp 1 dp 1" "$SCRATCH/one.txt" || fail "no header line"
grep -Eq "^step 4/4 .* ETA " "$SCRATCH/one.txt" || fail "no progress line with an ETA"
base=$(logits "$SCRATCH/one.txt")
python3 -c "import sys; sys.exit(0 if any(abs(float(x) - 0.02) > 1e-6 for x in sys.argv[1].split()) else 1)" "$base" ||
  fail "the logits did not move from their start: $base"
kept=$(attr "$SCRATCH/one.h5" kept_layers)
grep -q "kept blocks: $kept " "$SCRATCH/one.txt" || fail "printed kept blocks differ from $kept"
[[ $(attr "$SCRATCH/one.h5" pruned_by) == "learned:2:1,2:1" ]] || fail "pruned_by $(attr "$SCRATCH/one.h5" pruned_by)"
[[ $(attr "$SCRATCH/one.h5" teacher_depth) == 4 ]] || fail "teacher_depth"
# The file's blocks are the teacher's own, bit for bit (an index prune of the original weights).
expect_teacher_blocks "$SCRATCH/one.h5" "$SCRATCH/run/ema.h5" "$kept"
"$DIT_MP" sample --weights "$SCRATCH/one.h5" --classes 0,1 --per-class 1 --steps 2 --out "$SCRATCH/one_grid.png" \
  > "$SCRATCH/one_sample.txt" 2>&1 || { cat "$SCRATCH/one_sample.txt"; fail "sample from the learned-pruned weights"; }
# Its raw samples would go to one.h5, the weights themselves: refused, the weights untouched.
cp "$SCRATCH/one.h5" "$SCRATCH/one_copy.h5"
if "$DIT_MP" sample --weights "$SCRATCH/one.h5" --classes 0 --per-class 1 --steps 2 --out "$SCRATCH/one.png" \
  > "$SCRATCH/over.txt" 2>&1; then fail "sampling over the weights file was not refused"; fi
grep -q "is input --weights .*one.h5 (the weights being sampled): no output may overwrite an input; choose another --out" "$SCRATCH/over.txt" || { cat "$SCRATCH/over.txt"; fail "message"; }
cmp "$SCRATCH/one.h5" "$SCRATCH/one_copy.h5" || fail "the weights file changed"
# A weights file named index.h5 (no checkpoint's COMPLETE beside it) starts a run as weights.
mkdir "$SCRATCH/w" && cp "$SCRATCH/one.h5" "$SCRATCH/w/index.h5"
"$DIT_MP" --tp 1 --pp 1 --steps 1 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/student" "${TINY[@]}" \
  --init-from "$SCRATCH/w/index.h5" > "$SCRATCH/student.txt" 2>&1 ||
  { cat "$SCRATCH/student.txt"; fail "--init-from a weights file named index.h5"; }
grep -q "initialized from $SCRATCH/w/index.h5" "$SCRATCH/student.txt" || fail "not initialized from the weights"
# Any layout learns the same logits: the gates' noise is keyed by sample, the gradient reduced once.
learn grid 8 --groups 2:1,2:1 --lr 1e-3 --tp 2 --pp 2
grep -q "at tp 2 pp 2 dp 2" "$SCRATCH/grid.txt" || fail "tp 2 pp 2 dp 2 was not the layout"
close "$(logits "$SCRATCH/grid.txt")" "$base" || fail "tp 2 pp 2 dp 2 learned other logits"
cmp "$SCRATCH/one.h5" "$SCRATCH/grid.h5" || fail "tp 2 pp 2 dp 2 wrote another file"
learn sp 8 --groups 2:1,2:1 --lr 1e-3 --tp 2 --pp 2 --set parallel.sequence_parallel=true
close "$(logits "$SCRATCH/sp.txt")" "$base" || fail "sequence parallelism learned other logits"
learn zb 4 --groups 2:1,2:1 --lr 1e-3 --tp 2 --pp 2 --set train.recompute=\"full\" --set parallel.schedule=\"zb-h1\"
close "$(logits "$SCRATCH/zb.txt")" "$base" || fail "full recomputation under zb-h1 learned other logits"
learn interleaved 2 --groups 2:1,2:1 --lr 1e-3 --pp 2 --set parallel.virtual_stages=2
close "$(logits "$SCRATCH/interleaved.txt")" "$base" || fail "interleaved 1F1B learned other logits"
# The default groups keep 2 of every 4 blocks; --lr 0 trains the logits alone (the weights stay).
learn frozen 2 --lr 0
grep -q "groups 4:2, 4 steps at tp 1 pp 1 dp 2 (16 images a step), lr 0," "$SCRATCH/frozen.txt" ||
  fail "the default groups or --lr 0 not in the header"
[[ "$(logits "$SCRATCH/frozen.txt" | wc -w)" == 6 ]] || fail "4:2 has 6 choices"
# A LightningDiT flow teacher (SwiGLU, RMSNorm, RoPE, q/k norm).
"$DIT_MP" --tp 1 --pp 1 --steps 2 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/lightning" "${TINY[@]}" \
  --set model.depth=4 --objective flow --sampler euler --set model.learn_sigma=false --set model.mlp=\"swiglu\" \
  --set model.norm=\"rmsnorm\" --set model.pos_embed=\"rope\" --set model.qk_norm=true \
  > "$SCRATCH/lightning_train.txt" 2>&1 || { cat "$SCRATCH/lightning_train.txt"; fail "training LightningDiT failed"; }
$MPIRUN -n 4 "$DIT_MP" prune --run "$SCRATCH/lightning" --depth 2 --method learned --steps 2 --tp 2 --pp 2 \
  --out "$SCRATCH/lightning2.h5" > "$SCRATCH/lightning2.txt" 2>&1 ||
  { cat "$SCRATCH/lightning2.txt"; fail "prune --method learned of LightningDiT"; }
[[ $(attr "$SCRATCH/lightning2.h5" objective) == flow ]] || fail "LightningDiT: the objective was not kept"
echo "prune_learned: ok"
