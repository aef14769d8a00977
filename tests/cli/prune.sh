#!/usr/bin/env bash
# `dit_mp prune` end to end: a tiny depth-4 model trained a few steps is pruned to depth 2 by index
# and by score (cos, loss); each pruned file records its kept blocks, holds the teacher's blocks
# under their new names, samples, and comes out the same from 1 rank and from 8.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
"$DIT_MP" --tp 1 --pp 1 --steps 3 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  --set model.depth=4 > "$SCRATCH/train.txt" 2>&1 || { cat "$SCRATCH/train.txt"; fail "training failed"; }
prune() {  # prune NAME ARGS...: prune the run into $SCRATCH/NAME.h5, the log in $SCRATCH/NAME.txt
  local name=$1
  shift
  "$DIT_MP" prune --run "$SCRATCH/run" --depth 2 "$@" --out "$SCRATCH/$name.h5" > "$SCRATCH/$name.txt" 2>&1 ||
    { cat "$SCRATCH/$name.txt"; fail "prune $*"; }
  cat "$SCRATCH/$name.txt"
  "$DIT_MP" sample --weights "$SCRATCH/$name.h5" --classes 0,1 --per-class 1 --steps 2 \
    --out "$SCRATCH/${name}_grid.png" > "$SCRATCH/${name}_sample.txt" 2>&1 ||
    { cat "$SCRATCH/${name}_sample.txt"; fail "sample from the $name-pruned weights"; }
  [[ $(attr "$SCRATCH/$name.h5" depth) == 2 ]] || fail "$name: /config depth is not 2"
  [[ $(attr "$SCRATCH/$name.h5" teacher_depth) == 4 ]] || fail "$name: /config teacher_depth is not 4"
}
# By index (any order given, model order kept): block j is the teacher's block keep[j].
prune index --method index --keep 3,0
[[ $(attr "$SCRATCH/index.h5" kept_layers) == "0,3" ]] || fail "index: kept_layers $(attr "$SCRATCH/index.h5" kept_layers)"
[[ $(attr "$SCRATCH/index.h5" pruned_by) == index ]] || fail "index: pruned_by"
grep -q "kept blocks: 0,3 (dropped 1,2)" "$SCRATCH/index.txt" || fail "index: no kept blocks line"
expect_teacher_blocks "$SCRATCH/index.h5" "$SCRATCH/run/ema.h5" 0,3
# By score: every block's score printed, the last block kept, the kept blocks recorded.
for score in cos loss; do
  prune "$score" --method score --score "$score" --calibration 32 --seed 3
  [[ $(grep -c "^block  [0-3]: " "$SCRATCH/$score.txt") == 4 ]] || fail "$score: not one score per block"
  kept=$(attr "$SCRATCH/$score.h5" kept_layers)
  [[ $kept == *,3 ]] || fail "$score: the last block was dropped ($kept)"
  grep -q "kept blocks: $kept " "$SCRATCH/$score.txt" || fail "$score: printed kept blocks differ from $kept"
  [[ $(attr "$SCRATCH/$score.h5" pruned_by) == "score:$score" ]] || fail "$score: pruned_by"
done
# One rank or eight: the same file, byte for byte (rank 0 does the work).
$MPIRUN -n 8 "$DIT_MP" prune --run "$SCRATCH/run" --depth 2 --method score --score loss --calibration 32 --seed 3 \
  --out "$SCRATCH/loss8.h5" > "$SCRATCH/loss8.txt" 2>&1 || { cat "$SCRATCH/loss8.txt"; fail "prune on 8 ranks"; }
cmp "$SCRATCH/loss.h5" "$SCRATCH/loss8.h5" || fail "8 ranks pruned another file than 1 rank"
[[ $(grep -c "^wrote" "$SCRATCH/loss8.txt") == 1 ]] || fail "8 ranks: expected one 'wrote' line"
# Another seed draws another calibration batch: other scores.
prune cos_seed4 --method score --score cos --calibration 32 --seed 4
[[ "$(grep '^block' "$SCRATCH/cos.txt")" != "$(grep '^block' "$SCRATCH/cos_seed4.txt")" ]] || fail "seed 4 scored as seed 3"
# A flow model (logit-normal timesteps in training, the cosine term): the loss score uses the run's
# recipe, the pruned file keeps the objective and samples with a flow sampler.
"$DIT_MP" --tp 1 --pp 1 --steps 3 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/flow" "${TINY[@]}" \
  --set model.depth=3 --objective flow --sampler euler --timestep-sampling logit_normal \
  --set model.learn_sigma=false --set diffusion.cosine_loss=true > "$SCRATCH/flow_train.txt" 2>&1 ||
  { cat "$SCRATCH/flow_train.txt"; fail "training the flow model failed"; }
"$DIT_MP" prune --run "$SCRATCH/flow" --depth 1 --method score --score loss --calibration 8 \
  --out "$SCRATCH/flow1.h5" > "$SCRATCH/flow1.txt" 2>&1 || { cat "$SCRATCH/flow1.txt"; fail "prune the flow model"; }
cat "$SCRATCH/flow1.txt"
[[ $(attr "$SCRATCH/flow1.h5" kept_layers) == 2 ]] || fail "flow: depth 1 keeps the last block"
[[ $(attr "$SCRATCH/flow1.h5" objective) == flow ]] || fail "flow: the objective was not kept"
"$DIT_MP" sample --weights "$SCRATCH/flow1.h5" --classes 0 --per-class 1 --steps 2 --out "$SCRATCH/flow1_grid.png" \
  > "$SCRATCH/flow1_sample.txt" 2>&1 || { cat "$SCRATCH/flow1_sample.txt"; fail "sample the pruned flow model"; }
grep -q "sampling: euler" "$SCRATCH/flow1_sample.txt" || fail "the pruned flow model did not sample with euler"
echo "prune: ok"
