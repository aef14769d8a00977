#!/usr/bin/env bash
# Read-only and full disks (small tmpfs mounts; needs root): an unwritable run or checkpoint folder
# is refused at start, before any step is trained; a final weights write that runs out of space
# leaves no temporary file behind and says the disk is full, in one line.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1  # mpirun's own banners off (see bad_inputs.sh)
mkdir -p "$SCRATCH/ro" "$SCRATCH/full"
if ! mount -t tmpfs -o size=64k,ro tmpfs "$SCRATCH/ro" 2> "$SCRATCH/mount.txt"; then
  echo "SKIP: cannot mount a tmpfs here ($(cat "$SCRATCH/mount.txt")); run as root to test full and read-only disks"
  exit 0
fi
cleanup() {
  umount "$SCRATCH/ro" 2>/dev/null || true
  umount "$SCRATCH/full" 2>/dev/null || true
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" --tp 2 --pp 2 "${TINY[@]}" --log-every 1)
one_line_failure() {  # one_line_failure REGEX: the last run failed with one stderr line matching REGEX
  local err
  err=$(cat "$SCRATCH/err.txt")
  grep -Eq -- "$1" <<<"$err" || fail "stderr lacks /$1/: $err"
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "expected one line on stderr: $err"
}

# A read-only checkpoint folder: refused at start, no step trained (the first save was 30 steps in).
timeout 120 $MPIRUN -n 4 "$DIT_MP" "${R[@]}" --steps 30 --run-dir "$SCRATCH/run_ro" \
  --checkpoint-dir "$SCRATCH/ro/ckpt" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" && fail "trained into a read-only checkpoint folder"
one_line_failure "run.checkpoint_dir = $SCRATCH/ro/ckpt.*read-only"
[[ ! -s "$SCRATCH/run_ro/metrics.jsonl" ]] || fail "steps were trained before the checkpoint folder was found unwritable"
echo "ok: a read-only checkpoint folder is refused at start"
timeout 120 $MPIRUN -n 4 "$DIT_MP" "${R[@]}" --steps 3 --run-dir "$SCRATCH/ro/run" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" &&
  fail "trained into a read-only run folder"
one_line_failure "run.dir = $SCRATCH/ro/run.*read-only"
echo "ok: a read-only run folder is refused at start"

# A disk that fills up during the final weights: model.h5 (about 730 KB) fits, ema.h5 does not.
mount -t tmpfs -o size=1100k tmpfs "$SCRATCH/full"
timeout 120 $MPIRUN -n 4 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/full/run" \
  --checkpoint-dir "$SCRATCH/ckpt" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" && fail "wrote ema.h5 to a full disk"
one_line_failure "ema.h5.*disk is full"
leftovers=$(find "$SCRATCH/full" -name "*.tmp*")
[[ -z $leftovers ]] || fail "a failed write left temporaries: $leftovers"
[[ -s "$SCRATCH/full/run/model.h5" ]] || fail "model.h5 should have fitted"
echo "ok: a full disk at the final ema.h5 leaves no temporary and says so in one line"
