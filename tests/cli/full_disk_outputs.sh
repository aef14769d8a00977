#!/usr/bin/env bash
# What a run and evaluate write, on full disks (small tmpfs mounts; needs root, else it says why and
# skips): eval.json keeps its previous content and the cause is named; a metrics.jsonl row that
# cannot be written ends the run with one line after a checkpoint; a folder given for --json is
# refused and leaves no temporary.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
mkdir -p "$SCRATCH/full" "$SCRATCH/small"
if ! mount -t tmpfs -o size=64k tmpfs "$SCRATCH/full" 2> "$SCRATCH/mount.txt"; then
  echo "SKIP: cannot mount a tmpfs here ($(cat "$SCRATCH/mount.txt")); run as root to test full disks"
  exit 0
fi
cleanup() {
  umount "$SCRATCH/full" 2>/dev/null || true
  umount "$SCRATCH/small" 2>/dev/null || true
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
prepare_fashion_test
FM="$SCRATCH/fm_test.h5"
EV=(--train-data "$FM" --reference "$FM" --classifier "$SCRATCH/c.h5")
"$DIT_MP" evaluate --train-classifier "${EV[@]}" --classifier-epochs 1 > "$SCRATCH/c.txt" 2>&1 ||
  { cat "$SCRATCH/c.txt"; fail "classifier training failed"; }
/usr/bin/python3 - "$FM" "$SCRATCH/real.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    g["samples"] = f["images"][:200].astype(np.float32) / 127.5 - 1
    g["labels"] = f["labels"][:200].astype(np.int32)
PY

# eval.json on a full disk: exit non-zero naming the cause; the previous result stays whole.
echo '{"dit_mp": "evaluate", "previous": true}' > "$SCRATCH/full/eval.json"
dd if=/dev/zero of="$SCRATCH/full/filler" bs=4k status=none 2>/dev/null || true
if "$DIT_MP" evaluate --samples "$SCRATCH/real.h5" "${EV[@]}" --json "$SCRATCH/full/eval.json" \
  > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt"; then
  fail "evaluate reported success on a full disk: $(cat "$SCRATCH/out.txt")"
fi
grep -q "eval.json: cannot write (No space left on device" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "no cause"; }
[[ $(cat "$SCRATCH/full/eval.json") == '{"dit_mp": "evaluate", "previous": true}' ]] || fail "eval.json lost its previous content"
[[ -z $(ls -A "$SCRATCH/full" | grep -v -e '^eval.json$' -e '^filler$') ]] || fail "leftovers: $(ls -A "$SCRATCH/full")"
echo "ok: eval.json on a full disk keeps the previous result and names the cause"

# --json naming a folder: refused before anything is computed, nothing left beside it.
mkdir -p "$SCRATCH/jdir"
if "$DIT_MP" evaluate --samples "$SCRATCH/real.h5" "${EV[@]}" --json "$SCRATCH/jdir" > /dev/null 2> "$SCRATCH/err.txt"; then
  fail "evaluate --json DIR succeeded"
fi
grep -q "jdir: cannot write (Is a directory" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "--json DIR: wrong message"; }
if "$DIT_MP" plan --json "$SCRATCH/jdir" > /dev/null 2> "$SCRATCH/err.txt"; then fail "plan --json DIR succeeded"; fi
grep -q "jdir: cannot write (Is a directory" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "plan --json DIR: wrong message"; }
[[ -z $(ls -A "$SCRATCH" | grep '\.tmp') ]] || fail "a refused --json left a temporary: $(ls -A "$SCRATCH")"
echo "ok: --json naming a folder is refused, nothing left"

# metrics.jsonl (or ranks.jsonl, written beside it at each logged step) on a disk that fills while
# training: one line naming the file and the cause, a non-zero exit, and the checkpoint of that step
# saved (elsewhere) so the run can be resumed. TensorBoard's files are off here: they grow faster.
mount -t tmpfs -o size=24k tmpfs "$SCRATCH/small"
rc=0
timeout 300 $MPIRUN -n 2 "$DIT_MP" --data "$FM" "${TINY[@]}" --tp 1 --pp 1 --steps 400 --log-every 1 \
  --set train.tensorboard=false --run-dir "$SCRATCH/small/run" --checkpoint-dir "$SCRATCH/ckpt" \
  > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/err.txt"; fail "a full metrics disk did not end the run (rc $rc)"; }
grep -Eq "(metrics|ranks)\.jsonl: cannot write the metrics \(No space left on device\)" "$SCRATCH/err.txt" ||
  { cat "$SCRATCH/err.txt"; fail "the metrics failure is not named"; }
[[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "not one line"; }
grep -q '^step_' <<<"$(ls "$SCRATCH/ckpt")" || fail "no checkpoint before the metrics failure ended the run"
echo "ok: a metrics row that cannot be written ends the run after a checkpoint"
echo "full_disk_outputs: all cases passed"
