#!/usr/bin/env bash
# Resuming across pipeline schedules: a 1F1B run at pp 2 stopped at step 2 resumes under ZB-H1 (the
# same F/B order with each backward split into B and a later W) bit for bit, and under ZB-V (two
# chunks per rank in a V) within 1e-5 of the uninterrupted 1F1B run; a ZB-V checkpoint resumes
# under 1F1B. Checkpoints hold parameters by PyTorch name, whatever the schedule.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --sample-every 0)
run() {  # run SCHEDULE V STEPS DIR [ARGS...]
  local schedule=$1 v=$2 steps=$3 dir=$4
  shift 4
  $MPIRUN -n 2 "$DIT_MP" --tp 1 --pp 2 --schedule "$schedule" --virtual-stages "$v" --steps "$steps" \
    --run-dir "$dir" "${R[@]}" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}
run 1f1b 1 4 "$SCRATCH/full"
run 1f1b 1 2 "$SCRATCH/part"
for to in "zb-h1 1 1" "zb-v 2 0"; do  # schedule v bit-identical?
  set -- $to
  d="$SCRATCH/resume_$1"
  cp -r "$SCRATCH/part" "$d"
  run "$1" "$2" 4 "$d" --resume auto
  grep -q "resumed from .*step_00000002 at step 2" "$d.log" || fail "$d did not resume from step 2"
  compare_resumed_losses "$SCRATCH/full" "$d" "$3" || fail "1f1b -> $1: losses differ"
  echo "1f1b -> $1: steps 3-4 match"
done
run zb-v 2 2 "$SCRATCH/part_v"
cp -r "$SCRATCH/part_v" "$SCRATCH/resume_v_to_1f1b"
run 1f1b 1 4 "$SCRATCH/resume_v_to_1f1b" --resume auto
compare_resumed_losses "$SCRATCH/full" "$SCRATCH/resume_v_to_1f1b" 0 || fail "zb-v -> 1f1b: losses differ"
echo ok
