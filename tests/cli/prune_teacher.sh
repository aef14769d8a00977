#!/usr/bin/env bash
# The teacher of the bad.prune_* tests (tests/CMakeLists.txt): in folder $1, a tiny depth-4 run
# trained one step (run/ema.h5, run/config.toml), its dataset (fm_test.h5), a copy of its weights
# with one byte flipped (damaged.h5), a depth-2 student pruned from it (pruned.h5) and a folder (folder/).
source "$(dirname "$0")/common.sh"
OUT=${1:?usage: prune_teacher.sh FOLDER}
rm -rf "$OUT"
mkdir -p "$OUT/folder"
"$DIT_MP" prepare-data fashion-mnist --split test --out "$OUT/fm_test.h5" > /dev/null
"$DIT_MP" --tp 1 --pp 1 --steps 1 --data "$OUT/fm_test.h5" --run-dir "$OUT/run" "${TINY[@]}" --set model.depth=4 \
  > "$OUT/train.txt" 2>&1 || { cat "$OUT/train.txt"; fail "training the teacher failed"; }
python3 - "$OUT/run/ema.h5" "$OUT/damaged.h5" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
"$DIT_MP" prune --run "$OUT/run" --depth 2 --method index --keep 0,3 --out "$OUT/pruned.h5" > "$OUT/prune.txt" 2>&1 ||
  { cat "$OUT/prune.txt"; fail "pruning the teacher failed"; }
echo "teacher in $OUT"
