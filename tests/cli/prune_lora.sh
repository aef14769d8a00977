#!/usr/bin/env bash
# `dit_mp prune --method learned --lora R`: TinyFusion's learned pruning with low-rank updates. A
# tiny depth-4 model learns which 2 blocks to keep while rank-4 adapters of every block linear
# train (the weights stay). The adapters change what the gates learn (the logits differ from the
# logits-only run's and from full updates'); the logits are the same within 1e-5 at 1 rank, at
# tp 2 pp 2 dp 2 with sequence parallelism and with full recomputation under zb-h1; the file
# keeps the teacher's original blocks (the adapters are the search's, never the result's).
source "$(dirname "$0")/common.sh"
prepare_fashion_test
"$DIT_MP" --tp 1 --pp 1 --steps 3 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  --set model.depth=4 > "$SCRATCH/train.txt" 2>&1 || { cat "$SCRATCH/train.txt"; fail "training failed"; }
learn() { learned_prune "$1" "$2" --steps 6 --gate-lr 0.05 --gate-ema 0 --groups 2:1,2:1 "${@:3}"; }
logits() { learned_logits "$1"; }
differ() { logits_differ "$@"; }
close() { ! logits_differ "$1" "$2" 1e-5; }
learn lora 1 --lora 4 --lr 1e-3
cat "$SCRATCH/lora.txt"
grep -q "LoRA rank 4 (alpha 8, [0-9]* values on rank 0), lr 0.001" "$SCRATCH/lora.txt" || fail "no LoRA in the header"
base=$(logits "$SCRATCH/lora.txt")
learn frozen 1 --lr 0
learn full 1 --lr 1e-3
differ "$base" "$(logits "$SCRATCH/frozen.txt")" 1e-3 || fail "the adapters did not change what the gates learned"
differ "$base" "$(logits "$SCRATCH/full.txt")" 1e-3 || fail "LoRA learned what full updates learn"
kept=$(attr "$SCRATCH/lora.h5" kept_layers)
expect_teacher_blocks "$SCRATCH/lora.h5" "$SCRATCH/run/ema.h5" "$kept"
learn grid 8 --lora 4 --lr 1e-3 --tp 2 --pp 2 --set parallel.sequence_parallel=true
grep -q "at tp 2 pp 2 dp 2" "$SCRATCH/grid.txt" || fail "tp 2 pp 2 dp 2 was not the layout"
close "$(logits "$SCRATCH/grid.txt")" "$base" || fail "tp 2 pp 2 dp 2 with sequence parallelism learned other logits"
cmp "$SCRATCH/lora.h5" "$SCRATCH/grid.h5" || fail "tp 2 pp 2 dp 2 wrote another file"
learn zb 4 --lora 4 --lr 1e-3 --tp 2 --pp 2 --set train.recompute=\"full\" --set parallel.schedule=\"zb-h1\"
close "$(logits "$SCRATCH/zb.txt")" "$base" || fail "full recomputation under zb-h1 learned other logits"
echo ok
