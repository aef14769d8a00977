#!/usr/bin/env bash
# Bad input to `train` and `sample`: exactly one line on stderr naming the problem (before and after
# start-up), a non-zero exit, no hang, nothing half-written, and a NaN loss stops the run with the
# step and the rank after the metrics.
source "$(dirname "$0")/common.sh"
# mpirun's own banners on a non-zero exit ("Primary job terminated normally, but...", MPI_ABORT's
# NOTE) are mpirun's, not dit_mp's; -q / orte_execute_quiet leaves dit_mp's one line (docs/running.md).
export OMPI_MCA_orte_execute_quiet=1
prepare_fashion_test
expect_fail() {  # expect_fail REGEX ARGS...: mpirun -n 4 dit_mp ARGS must fail saying REGEX
  local regex=$1
  shift
  local err rc=0
  timeout 120 $MPIRUN -n 4 "$DIT_MP" "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  err=$(cat "$SCRATCH/err.txt")
  [[ $rc -ne 0 ]] || fail "expected a failure: $*"
  [[ $rc -ne 124 ]] || fail "hung: $*"
  grep -Eq -- "$regex" <<<"$err" || fail "stderr of '$*' lacks /$regex/: $err"
  local n
  n=$(wc -l < "$SCRATCH/err.txt")
  [[ $n -eq 1 ]] || fail "expected exactly one line on stderr, got $n: $err"
  echo "ok: $regex"
}
D=(--data "$SCRATCH/fm_test.h5")
expect_fail "cannot open config file '/nonexistent/x.toml'" --config /nonexistent/x.toml --run-dir "$SCRATCH/r1"
expect_fail "config file '$SCRATCH' is a directory" --config "$SCRATCH" --run-dir "$SCRATCH/r1"
printf '[train]\nsteps = "ten"\n' > "$SCRATCH/bad.toml"
expect_fail "train.steps: expected an integer" --config "$SCRATCH/bad.toml" --run-dir "$SCRATCH/r1"
printf '[train\nsteps = 3\n' > "$SCRATCH/syntax.toml"
expect_fail "syntax.toml" --config "$SCRATCH/syntax.toml" --run-dir "$SCRATCH/r1"
expect_fail "unknown key train.lrr" "${D[@]}" --set train.lrr=1 --run-dir "$SCRATCH/r1"
expect_fail "input_size = 32 is not divisible by model.patch_size = 5" "${D[@]}" --set model.patch_size=5 --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
expect_fail "does not exist" --data "$SCRATCH/none.h5" --set data.prepare=none --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
# A file that is not a dataset (a golden file): refused before HDF5 reads it (no seal).
expect_fail "dit_tiny_golden.h5: no dit_mp seal" --data "$DIT_DATA/dit_tiny_golden.h5" --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
expect_fail "job has 4 ranks, which is not a multiple of tp x pp = 1 x 3 = 3" "${D[@]}" --tp 1 --pp 3 --run-dir "$SCRATCH/r1"
expect_fail "global_batch = 18 is not divisible" "${D[@]}" --tp 1 --pp 1 --global-batch 18 --micro-batch 4 --run-dir "$SCRATCH/r1"
[[ ! -e "$SCRATCH/r1" ]] || fail "a failed start left a run folder behind"
# An existing run folder is refused (and left as it was) unless --overwrite.
mkdir -p "$SCRATCH/exists" && echo keep > "$SCRATCH/exists/notes.txt"
expect_fail "run folder .*exists already exists" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/exists"
[[ $(cat "$SCRATCH/exists/notes.txt") == keep ]] || fail "the existing run folder was touched"
expect_fail "give exactly one of --run DIR or --weights FILE" sample --out "$SCRATCH/x.png"
# Sizes that cannot fit are refused at once, naming the setting, before anything is allocated.
quick_fail() {  # quick_fail REGEX ARGS...: as expect_fail, and within 15 s
  local t0=$SECONDS
  expect_fail "$@"
  ((SECONDS - t0 <= 15)) || fail "took $((SECONDS - t0)) s to refuse: ${*:2}"
}
T=("${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/r2")
quick_fail "train.global_batch = 100000000 is 50000000 microbatches" "${T[@]}" --global-batch 100000000
quick_fail "train.global_batch = 1000000000 is 500000000 microbatches" "${T[@]}" --global-batch 1000000000
quick_fail "diffusion.steps = 100000000: expected an integer in \\[1, 100000\\]" "${T[@]}" --set diffusion.steps=100000000
quick_fail "needs at least .* per rank .*training activations" "${T[@]}" --set train.micro_batch=1000000 \
  --set train.global_batch=1000000
quick_fail "needs at least .* per rank \\(parameters and optimizer state [0-9.]+ TiB\\) x " "${T[@]}" \
  --set model.hidden_size=65536 --set model.num_heads=64 --set model.depth=256
! grep -q " 0 B" "$SCRATCH/err.txt" || fail "the refusal lists a part of 0 B (not counted): $(cat "$SCRATCH/err.txt")"
quick_fail "needs at least .* per rank .*sampling" "${T[@]}" --set sample.per_class=100000000
# Offloaded, the optimizer state is still this machine's memory: named in the refusal.
quick_fail "needs at least .* per rank \\(parameters and optimizer state [0-9.]+ TiB \\([0-9.]+ [GT]iB of it the optimizer state optim.offload = \"cpu\" keeps in host memory\\)" \
  "${T[@]}" --set model.hidden_size=65536 --set model.num_heads=64 --set model.depth=256 --set optim.offload=\"cpu\"
[[ ! -e "$SCRATCH/r2" ]] || fail "a refused start left a run folder behind"
# Errors after start-up (ranks already in collectives): still one line, from the rank that knows.
$MPIRUN -n 4 "$DIT_MP" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/ok" > "$SCRATCH/ok.log" 2>&1 ||
  { cat "$SCRATCH/ok.log"; fail "a good run failed"; }
cp -r "$SCRATCH/ok" "$SCRATCH/bad_shard"
shard=$(ls "$SCRATCH"/bad_shard/ckpt/step_00000001/shard_tp1_pp1_dp0.h5)
/usr/bin/python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(len(b) - 4096, len(b) - 64, 97):  # tensor data near the end of the shard
    b[i] ^= 0x5A
open(p, "wb").write(b)
PY
expect_fail "shard_tp1_pp1_dp0.h5" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 2 --run-dir "$SCRATCH/bad_shard" \
  --resume "$SCRATCH/bad_shard/ckpt/step_00000001"
head -c 3000 "$SCRATCH/ok/model.h5" > "$SCRATCH/cut.h5"
expect_fail "cut.h5" sample --weights "$SCRATCH/cut.h5" --tp 2 --pp 2 --out "$SCRATCH/s.png"
expect_fail "cut.h5" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/r3" --init-from "$SCRATCH/cut.h5"
# Weights files: sealed (whole-file CRC-32 checked before HDF5 reads them), Fletcher32 per tensor,
# finite values; each failure names the file (and the tensor). Edits with h5py are re-sealed with
# tools/dit_checkpoint.py seal, as a user would.
PY=/usr/bin/python3
TOOLS=$(cd "$(dirname "$0")/../../tools" && pwd)
if $PY -c "import torch, h5py" 2>/dev/null; then
  # A NaN (not "make_grid: image 0 holds NaN").
  cp "$SCRATCH/ok/ema.h5" "$SCRATCH/nan.h5"
  $PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['weights/blocks.1.mlp.fc2.weight']; v = d[...]; v[3, 5] = float('nan'); d[...] = v
" "$SCRATCH/nan.h5"
  expect_fail "nan.h5: its contents do not match the CRC-32 in its seal" sample --weights "$SCRATCH/nan.h5" --tp 2 --pp 2 --out "$SCRATCH/s.png"
  $PY "$TOOLS/dit_checkpoint.py" seal "$SCRATCH/nan.h5" > /dev/null
  expect_fail "nan.h5: tensor 'blocks.1.mlp.fc2.weight' holds NaN at \\[3, 5\\]" sample --weights "$SCRATCH/nan.h5" --tp 2 --pp 2 --out "$SCRATCH/s.png"
  expect_fail "nan.h5: tensor 'blocks.1.mlp.fc2.weight' holds NaN" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 \
    --run-dir "$SCRATCH/r4" --init-from "$SCRATCH/nan.h5"
  # One exponent bit flipped on disk (a weight becomes ~1e37, still finite): the seal catches it,
  # and with the seal rewritten over the damage, the tensor's Fletcher32 checksum does.
  cp "$SCRATCH/ok/ema.h5" "$SCRATCH/flip.h5"
  $PY -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r') as f:
    d = f['weights/blocks.0.attn.qkv.weight']
    off = d.id.get_chunk_info(0).byte_offset if d.chunks else d.id.get_offset()
    off += f.userblock_size  # HDF5 addresses start after the user block (the seal)
b = bytearray(open(sys.argv[1], 'rb').read())
b[off + 4 * 10 + 3] ^= 0x40  # byte 3 of weight 10 (little endian): the exponent's top bit
open(sys.argv[1], 'wb').write(b)
" "$SCRATCH/flip.h5"
  expect_fail "flip.h5: its contents do not match the CRC-32 in its seal" sample --weights "$SCRATCH/flip.h5" \
    --tp 2 --pp 2 --out "$SCRATCH/s.png"
  $PY "$TOOLS/dit_checkpoint.py" seal "$SCRATCH/flip.h5" > /dev/null
  expect_fail "flip.h5: tensor 'blocks.0.attn.qkv.weight' fails its checksum" sample --weights "$SCRATCH/flip.h5" \
    --tp 2 --pp 2 --out "$SCRATCH/s.png"
  # Without checksums a file cannot be verified: refused, saying how to add them (h5repack keeps
  # the user block, whose seal no longer matches).
  h5repack -f NONE "$SCRATCH/ok/ema.h5" "$SCRATCH/plain.h5"
  expect_fail "plain.h5: .*seal records" sample --weights "$SCRATCH/plain.h5" --tp 2 --pp 2 \
    --out "$SCRATCH/s.png"
  $PY "$TOOLS/dit_checkpoint.py" seal "$SCRATCH/plain.h5" > /dev/null
  expect_fail "plain.h5: tensor '.*' has no checksum.*h5repack -f FLET" sample --weights "$SCRATCH/plain.h5" \
    --tp 2 --pp 2 --out "$SCRATCH/s.png"
  h5repack -f FLET "$SCRATCH/plain.h5" "$SCRATCH/flet.h5"
  $PY "$TOOLS/dit_checkpoint.py" seal "$SCRATCH/flet.h5" > /dev/null
  $MPIRUN -n 4 "$DIT_MP" sample --weights "$SCRATCH/flet.h5" --tp 2 --pp 2 --out "$SCRATCH/s.png" > /dev/null ||
    fail "the h5repack'ed and sealed weights file does not load"
  echo "ok: h5repack -f FLET and dit_checkpoint.py seal make an old file loadable"
else
  echo "SKIP: the weights-file cases (need torch and h5py for $PY: install python3-torch python3-h5py)"
fi
# A diverging run stops with the step and the rank, after writing its metrics.
timeout 120 $MPIRUN -n 4 "$DIT_MP" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 30 --log-every 100 \
  --lr 1e30 --set train.grad_clip=0 --run-dir "$SCRATCH/nan" > /dev/null 2> "$SCRATCH/err.txt" && fail "a NaN run succeeded"
out=$(cat "$SCRATCH/err.txt")
grep -Eq "NaN or Inf at step [0-9]+ on rank [0-9]+" <<<"$out" || fail "no NaN message: $out"
[[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "the NaN stop printed more than one line: $out"
[[ -s "$SCRATCH/nan/metrics.jsonl" ]] || fail "the NaN run wrote no metrics"
echo "ok: NaN stop"
