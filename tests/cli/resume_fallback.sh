#!/usr/bin/env bash
# A damaged index.h5 (one byte flipped) is caught by the checksum COMPLETE records, before HDF5
# parses it: `inspect` names it in one line, and `--resume auto` falls back to the newest
# checkpoint that loads, saying which one it skipped and why.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" --tp 2 --pp 2 "${TINY[@]}" --log-every 1 --set train.checkpoint_every=1)
$MPIRUN -n 4 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run" > "$SCRATCH/a.log" 2>&1 || { cat "$SCRATCH/a.log"; fail "training failed"; }
idx="$SCRATCH/run/ckpt/step_00000002/index.h5"
[[ -s $idx && -d "$SCRATCH/run/ckpt/step_00000001" ]] || fail "expected checkpoints at steps 1 and 2"
grep -Eq "^index.h5 size [0-9]+ crc32 [0-9a-f]{8}$" "$SCRATCH/run/ckpt/step_00000002/COMPLETE" ||
  fail "COMPLETE records no checksum of index.h5: $(cat "$SCRATCH/run/ckpt/step_00000002/COMPLETE")"
/usr/bin/python3 - "$idx" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(b)
PY
rc=0
"$DIT_MP" inspect "$SCRATCH/run/ckpt/step_00000002" > /dev/null 2> "$SCRATCH/inspect.err" || rc=$?
[[ $rc -ne 0 && $rc -lt 128 ]] || fail "inspect of a damaged index: exit $rc"
grep -q "index.h5: CRC-32 .* does not match" "$SCRATCH/inspect.err" || fail "inspect: $(cat "$SCRATCH/inspect.err")"
[[ $(wc -l < "$SCRATCH/inspect.err") -eq 1 ]] || fail "inspect printed more than one line: $(cat "$SCRATCH/inspect.err")"
echo "ok: inspect names the damaged index"
$MPIRUN -n 4 "$DIT_MP" "${R[@]}" --steps 3 --run-dir "$SCRATCH/run" --resume auto > "$SCRATCH/b.log" 2>&1 ||
  { cat "$SCRATCH/b.log"; fail "the resume failed"; }
grep -Eq "skipped checkpoint .*step_00000002: .*index.h5: CRC-32" "$SCRATCH/b.log" || fail "no note of the skipped checkpoint: $(cat "$SCRATCH/b.log")"
grep -q "resumed from .*step_00000001 at step 1" "$SCRATCH/b.log" || fail "did not fall back to step 1"
echo "ok: --resume auto falls back to step 1, naming the skipped step 2"
# A checkpoint whose COMPLETE records no checksum (an older dit_mp) is refused until vouched for.
step1="$SCRATCH/run/ckpt/step_00000001"
grep -v "^index.h5 " "$step1/COMPLETE" > "$SCRATCH/complete" && cp "$SCRATCH/complete" "$step1/COMPLETE"
rc=0
"$DIT_MP" inspect "$step1" > /dev/null 2> "$SCRATCH/inspect.err" || rc=$?
[[ $rc -eq 1 ]] && grep -q "records no checksum of index.h5.*dit_checkpoint.py seal" "$SCRATCH/inspect.err" ||
  fail "an unverifiable index was not refused: exit $rc, $(cat "$SCRATCH/inspect.err")"
if /usr/bin/python3 -c "import torch, h5py" 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/../../tools/dit_checkpoint.py" seal "$step1" > /dev/null
  "$DIT_MP" inspect "$step1" > /dev/null || fail "inspect after dit_checkpoint.py seal failed"
  echo "ok: an unverifiable checkpoint is refused until dit_checkpoint.py seal records its checksum"
else
  echo "ok: an unverifiable checkpoint is refused (SKIP the seal tool: needs torch and h5py for /usr/bin/python3)"
fi
