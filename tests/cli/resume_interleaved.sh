#!/usr/bin/env bash
# Checkpoints under interleaved 1F1B: a rank's parameters span several model chunks, saved and
# loaded by PyTorch name. A run at pp 2 with 2 virtual stages stopped at step 2 resumes bit for bit
# at the same layout, and within 1e-5 of the uninterrupted run at pp 2 without virtual stages and
# on one rank; a checkpoint written without virtual stages resumes with them.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --sample-every 0)
run() {  # run N PP V STEPS DIR [ARGS...]
  local n=$1 pp=$2 v=$3 steps=$4 dir=$5
  shift 5
  $MPIRUN -n "$n" "$DIT_MP" --tp 1 --pp "$pp" --virtual-stages "$v" --steps "$steps" --run-dir "$dir" "${R[@]}" "$@" \
    > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}
run 2 2 2 4 "$SCRATCH/full"
run 2 2 2 2 "$SCRATCH/part"
grep -q "interleaved" "$SCRATCH/full.log" || fail "the log does not say the schedule is interleaved"
for layout in "2 2 2 1" "2 2 1 0" "1 1 1 0"; do  # ranks pp v bit-identical?
  set -- $layout
  d="$SCRATCH/resume_$1_$2_$3"
  cp -r "$SCRATCH/part" "$d"
  run "$1" "$2" "$3" 4 "$d" --resume auto
  grep -q "resumed from .*step_00000002 at step 2" "$d.log" || fail "$d did not resume from step 2"
  compare_resumed_losses "$SCRATCH/full" "$d" "$4" || fail "resumed at ranks/pp/v $1 $2 $3: losses differ"
  echo "ranks/pp/v $1 $2 $3: steps 3-4 match"
done
# Without virtual stages -> with them.
run 2 2 1 2 "$SCRATCH/part_v1"
cp -r "$SCRATCH/part_v1" "$SCRATCH/resume_v1_to_v2"
run 2 2 2 4 "$SCRATCH/resume_v1_to_v2" --resume auto
compare_resumed_losses "$SCRATCH/full" "$SCRATCH/resume_v1_to_v2" 0 || fail "v 1 -> v 2: losses differ"
echo ok
