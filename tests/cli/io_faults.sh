#!/usr/bin/env bash
# Every file a run writes is complete or absent, on a real full disk (a small tmpfs; needs root) and
# at a folder where a file should go: the final model.h5 on a disk that cannot hold it (a fresh run
# and a resumed one), a checkpoint's shard and index, samples.h5 of `dit_mp sample`, a prepared
# dataset. Each fails with exit 1 and
# one line naming the file and "No space left on device", no crash, no temporary left behind.
source "$(dirname "$0")/common.sh"
mkdir -p "$SCRATCH/full"
if ! mount -t tmpfs -o size=400k tmpfs "$SCRATCH/full" 2> "$SCRATCH/mount.txt"; then
  echo "SKIP: cannot mount a tmpfs here ($(cat "$SCRATCH/mount.txt")); run as root to test full disks"
  exit 0
fi
cleanup() {
  umount "$SCRATCH/full" 2>/dev/null || true
  umount "$SCRATCH/ck" 2>/dev/null || true
  umount "$SCRATCH/ds" 2>/dev/null || true
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" --tp 1 --pp 1 "${TINY[@]}")
run() {  # run CMD...: its exit status in $rc, stdout and stderr in out.txt and err.txt
  rc=0
  timeout 300 "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
}
one_line_failure() {  # one_line_failure REGEX: exit 1 and one stderr line matching REGEX
  local err
  err=$(cat "$SCRATCH/err.txt")
  [[ $rc -eq 1 ]] || fail "exit $rc, expected 1 (139 is a crash): $err"
  grep -Eq -- "$1" <<<"$err" || fail "stderr lacks /$1/: $err"
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "expected one line on stderr: $err"
}
no_temporaries() {
  local left
  left=$(find "$1" -name "*.tmp*")
  [[ -z $left ]] || fail "a failed write left temporaries: $left"
}

# The final model.h5 (about 740 KB) does not fit: before, the right line and then SIGSEGV in
# H5F__close_cb as HDF5 shut down with the failed file still open.
run "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/full/run" --checkpoint-dir "$SCRATCH/ckpt"
one_line_failure "weights $SCRATCH/full/run/model.h5: cannot write \(No space left on device"
no_temporaries "$SCRATCH/full"
[[ ! -e "$SCRATCH/full/run/model.h5" ]] || fail "a partial model.h5 was left"
echo "ok: model.h5 on a full disk: one line, exit 1, no crash, nothing left"
run "$DIT_MP" "${R[@]}" --steps 3 --run-dir "$SCRATCH/full/run" --checkpoint-dir "$SCRATCH/ckpt" --resume auto
one_line_failure "weights $SCRATCH/full/run/model.h5: cannot write \(No space left on device"
no_temporaries "$SCRATCH/full"
echo "ok: the same on resume"

# A checkpoint folder on a disk that cannot hold the shard (2.9 MB), or then the index: one line
# naming the file, the step's temporary folder removed (both crashed at exit like model.h5).
mkdir -p "$SCRATCH/ck"
for size in 1000k 2900k; do
  mount -t tmpfs -o size=$size tmpfs "$SCRATCH/ck"
  run "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run_ck" --checkpoint-dir "$SCRATCH/ck/ckpt"
  one_line_failure "checkpoint (shard|index) $SCRATCH/ck/ckpt/.tmp-step_00000002/(shard_tp0_pp0_dp0|index).h5: cannot write \(No space left on device"
  [[ -z $(ls -A "$SCRATCH/ck/ckpt") ]] || fail "a failed checkpoint left: $(ls -AR "$SCRATCH/ck/ckpt")"
  umount "$SCRATCH/ck"
  rm -rf "$SCRATCH/run_ck"
done
echo "ok: a checkpoint on a full disk: one line, exit 1, no crash, nothing left"

# samples.h5 of `dit_mp sample` on a full disk: the previous file stays, no samples.h5.tmp.
run "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run_ok"
[[ $rc -eq 0 ]] || fail "training to a roomy disk failed: $(cat "$SCRATCH/err.txt")"
rm -rf "$SCRATCH/full/run"
# The previous file is raw samples dit_mp wrote (the files' check lets only those be replaced).
run "$DIT_MP" sample --weights "$SCRATCH/run_ok/ema.h5" --classes 0 --per-class 1 --steps 2 --out "$SCRATCH/prev.png"
[[ $rc -eq 0 ]] || fail "sampling to a roomy disk failed: $(cat "$SCRATCH/err.txt")"
cp "$SCRATCH/prev.h5" "$SCRATCH/full/g.h5"
dd if=/dev/zero of="$SCRATCH/full/filler" bs=4k 2>/dev/null || true
run "$DIT_MP" sample --weights "$SCRATCH/run_ok/ema.h5" --classes 0,1 --per-class 4 --steps 2 --out "$SCRATCH/full/g.png"
one_line_failure "samples $SCRATCH/full/g.h5: cannot write \(No space left on device"
cmp -s "$SCRATCH/prev.h5" "$SCRATCH/full/g.h5" || fail "the previous samples file was damaged"
[[ ! -e "$SCRATCH/full/g.png" ]] || fail "a PNG was written beside the failed samples"
no_temporaries "$SCRATCH/full"
echo "ok: samples.h5 on a full disk keeps the previous file and names the cause"

# A prepared dataset on a full disk: its HDF5 file is filled on disk, and removed.
run "$DIT_MP" prepare-data fashion-mnist --split test --out "$SCRATCH/full/fm.h5"
one_line_failure "dataset $SCRATCH/full/fm.h5: cannot write \(.*No space left on device"
no_temporaries "$SCRATCH/full"
[[ ! -e "$SCRATCH/full/fm.h5" ]] || fail "a partial dataset was left"
echo "ok: prepare-data on a full disk: one line, nothing left"
# The disk fills just as HDF5 flushes the dataset's last structures (the test split is 10,286,656
# bytes): before, the flush failed and the process crashed at exit. The space is now reserved first.
mkdir -p "$SCRATCH/ds"
for size in 10032k 10036k 10040k 10044k; do
  mount -t tmpfs -o size=$size tmpfs "$SCRATCH/ds"
  run "$DIT_MP" prepare-data fashion-mnist --split test --out "$SCRATCH/ds/fm.h5"
  one_line_failure "dataset $SCRATCH/ds/fm.h5: cannot write \(.*No space left on device"
  [[ -z $(ls -A "$SCRATCH/ds") ]] || fail "a failed prepare-data left: $(ls -A "$SCRATCH/ds")"
  umount "$SCRATCH/ds"
done
echo "ok: prepare-data on a disk that fills at the last flush: one line, no crash"

# sample --out X.png where X.h5 is a folder: refused before anything is written (no X.h5.tmp).
mkdir -p "$SCRATCH/outs/X.h5"
run "$DIT_MP" sample --weights "$SCRATCH/run_ok/ema.h5" --classes 0 --per-class 2 --steps 2 --out "$SCRATCH/outs/X.png"
# Refused before sampling, naming the folder (sample checks both its outputs first).
one_line_failure "its raw samples go to $SCRATCH/outs/X.h5, which is a folder"
[[ $(ls -A "$SCRATCH/outs") == "X.h5" && -z $(ls -A "$SCRATCH/outs/X.h5") ]] ||
  fail "the refused write left files: $(ls -AR "$SCRATCH/outs")"
echo "ok: a folder where samples.h5 should go is refused, nothing written"
