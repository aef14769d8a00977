#!/usr/bin/env bash
# `dit_mp sample` on a trained run's EMA weights writes a PNG grid of the right size (one row per
# class, 2 px padding) and the raw samples as HDF5, at a layout other than the training one.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
$MPIRUN -n 2 "$DIT_MP" --tp 1 --pp 2 --steps 2 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  --set sample.cfg_t_max=0.5 > "$SCRATCH/log.txt" 2>&1 || { cat "$SCRATCH/log.txt"; fail "training failed"; }
$MPIRUN -n 4 "$DIT_MP" sample --run "$SCRATCH/run" --classes 0,3,7 --per-class 4 --steps 5 --sampler ddpm \
  --cfg-scale 2 --tp 2 --out "$SCRATCH/grid.png" > "$SCRATCH/sample.txt" 2>&1 || { cat "$SCRATCH/sample.txt"; fail "sample failed"; }
python3 - "$SCRATCH/grid.png" "$SCRATCH/grid.h5" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
# 4 columns and 3 rows of 32x32 images with 2 px padding around and between them.
assert (width, height) == (4 * 32 + 5 * 2, 3 * 32 + 4 * 2), (width, height)
assert open(sys.argv[2], "rb").read(8) == b"\x89HDF\r\n\x1a\n", "raw samples are not HDF5"
print(f"grid {width}x{height}")
PY
grep -q "samples *Dataset {12, 1, 32, 32}" <<<"$(h5ls "$SCRATCH/grid.h5")" || fail "raw samples have the wrong shape"
# A grid carries dit_mp's mark (a tEXt chunk after IHDR), and only such a PNG is replaced: a user's
# picture at --out (a class folder's 0.png) is refused before anything is written, nothing is put
# beside it, unless --overwrite is given (issue 52).
grep -qa "tEXtSoftware.dit_mp" "$SCRATCH/grid.png" || fail "the grid lacks dit_mp's tEXt mark"
mkdir -p "$SCRATCH/img/cat"
cp "$(dirname "$0")/../data/image_prep/gray_c.png" "$SCRATCH/img/cat/0.png"
P=(--run "$SCRATCH/run" --classes 0 --per-class 1 --steps 2)
out=$("$DIT_MP" sample "${P[@]}" --out "$SCRATCH/img/cat/0.png" 2>&1) && fail "a user's PNG was replaced: $out"
grep -q -- "--out $SCRATCH/img/cat/0.png (the grid) exists and is a PNG image that dit_mp did not write.*pass --overwrite" \
  <<<"$out" || fail "a user's PNG at --out: $out"
[[ $(wc -l <<<"$out") == 1 ]] || fail "more than one line for a user's PNG: $out"
cmp -s "$(dirname "$0")/../data/image_prep/gray_c.png" "$SCRATCH/img/cat/0.png" || fail "the user's PNG changed"
[[ ! -e "$SCRATCH/img/cat/0.h5" ]] || fail "raw samples were written into the class folder"
"$DIT_MP" sample "${P[@]}" --out "$SCRATCH/img/cat/0.png" --overwrite > "$SCRATCH/ow.txt" 2>&1 ||
  { cat "$SCRATCH/ow.txt"; fail "sample --overwrite over a user's PNG"; }
grep -qa "tEXtSoftware.dit_mp" "$SCRATCH/img/cat/0.png" || fail "--overwrite did not write the grid"
"$DIT_MP" sample "${P[@]}" --out "$SCRATCH/grid.png" > "$SCRATCH/again.txt" 2>&1 ||
  { cat "$SCRATCH/again.txt"; fail "sample over its own grid was refused"; }
# In batches (5 images at a time: 3 batches, one split unevenly over 2 dp replicas) the samples are
# the same as in one batch: each sample keeps its own noise stream.
$MPIRUN -n 2 "$DIT_MP" sample --run "$SCRATCH/run" --classes 0,3,7 --per-class 4 --steps 5 --sampler ddpm \
  --cfg-scale 2 --batch 5 --out "$SCRATCH/batched.png" > "$SCRATCH/batched.txt" 2>&1 ||
  { cat "$SCRATCH/batched.txt"; fail "batched sample failed"; }
grep -q "sampling 12 images in 3 batches: step 15/15" "$SCRATCH/batched.txt" || fail "no progress over the batches"
h5diff -d 1e-5 "$SCRATCH/grid.h5" "$SCRATCH/batched.h5" > /dev/null || fail "batched samples differ from one batch"
# Guidance in an interval of noise levels: one that holds no step (t/T < 1 always) samples as no
# guidance at all; [0, 0.5] guides some steps, so it differs from both no guidance and guidance at
# every step. Settings the command line leaves out are the run's [sample] (trained with
# sample.cfg_t_max = 0.5 below).
S=(--run "$SCRATCH/run" --classes 0,3,7 --per-class 4 --steps 5 --sampler ddpm)
for v in "none --cfg-scale 1" "empty --cfg-scale 2 --cfg-t-min 1 --cfg-t-max 1" "all --cfg-scale 2 --cfg-t-max 1" \
         "half --cfg-scale 2 --cfg-t-max 0.5" "run --cfg-scale 2"; do
  set -- $v
  name=$1; shift
  "$DIT_MP" sample "${S[@]}" "$@" --out "$SCRATCH/cfg_$name.png" > "$SCRATCH/cfg_$name.txt" 2>&1 ||
    { cat "$SCRATCH/cfg_$name.txt"; fail "sample $*"; }
done
h5diff "$SCRATCH/cfg_none.h5" "$SCRATCH/cfg_empty.h5" > /dev/null || fail "an empty guidance interval still guided"
h5diff "$SCRATCH/cfg_none.h5" "$SCRATCH/cfg_half.h5" > /dev/null && fail "guidance in [0, 0.5] changed nothing"
h5diff "$SCRATCH/cfg_all.h5" "$SCRATCH/cfg_half.h5" > /dev/null && fail "guidance in [0, 0.5] guided every step"
h5diff "$SCRATCH/cfg_half.h5" "$SCRATCH/cfg_run.h5" > /dev/null || fail "sample --run did not take the run's cfg_t_max"
grep -q "sampling: ddpm, 5 steps, CFG 2 at noise levels \[0, 0.5\]" "$SCRATCH/cfg_run.txt" || fail "settings not printed"
out=$("$DIT_MP" sample "${S[@]}" --cfg-t-min 0.6 --cfg-t-max 0.4 --out "$SCRATCH/bad.png" 2>&1) && fail "min > max ran"
grep -q -- "--cfg-t-min 0.6 --cfg-t-max 0.4: expected 0 <= min <= max <= 1" <<<"$out" || fail "min > max: $out"
for bad in "--cfg-t-max 1e9" "--cfg-t-min nan" "--cfg-t-max -0.5"; do
  out=$("$DIT_MP" sample "${S[@]}" $bad --out "$SCRATCH/bad.png" 2>&1) && fail "$bad ran"
  grep -q -- "expected 0 <= min <= max <= 1 (noise levels)" <<<"$out" || fail "$bad: $out"
done
# A latent model (4 channels, fast-DiT .npy features) trains to the end and writes raw samples only.
prepare_latents "$SCRATCH/lat.h5" 8
$MPIRUN -n 2 "$DIT_MP" --tp 2 --pp 1 --steps 2 --data "$SCRATCH/lat.h5" --run-dir "$SCRATCH/lrun" "${TINY[@]}" \
  --set model.in_channels=4 --set model.input_size=8 --set model.patch_size=2 --set model.num_classes=3 \
  --set train.global_batch=4 > "$SCRATCH/lat.txt" 2>&1 || { cat "$SCRATCH/lat.txt"; fail "latent training failed"; }
grep -q "samples *Dataset {6, 4, 8, 8}" <<<"$(h5ls "$SCRATCH/lrun/samples.h5")" || fail "latent samples missing"
[[ ! -e "$SCRATCH/lrun/samples.png" ]] || fail "a latent model drew a PNG"
# With its VAE (the tiny kl-f8-style VAE of tests/data, 2x downsampling: 8x8 latents are 16x16
# pictures) the grid shows the decoded pictures, and the raw samples stay the latents.
DATA=$(cd "$(dirname "$0")/../data" && pwd)
"$DIT_MP" sample --run "$SCRATCH/lrun" --steps 3 --per-class 2 --vae "$DATA/vae_tiny.safetensors" \
  --out "$SCRATCH/dec.png" > "$SCRATCH/dec.txt" 2>&1 || { cat "$SCRATCH/dec.txt"; fail "sample --vae failed"; }
grep -q "decoding 6 latents with AutoencoderKL: blocks 16/32" "$SCRATCH/dec.txt" || fail "no decoding line: $(cat "$SCRATCH/dec.txt")"
grep -q "samples *Dataset {6, 4, 8, 8}" <<<"$(h5ls "$SCRATCH/dec.h5")" || fail "sample --vae: the raw latents are missing"
# 3 class rows of 2 pictures of 16x16 RGB with 2-pixel padding: 38 x 56, colour type 2 (RGB).
/usr/bin/python3 - "$SCRATCH/dec.png" <<'PY' || fail "the decoded grid is not a 38x56 RGB PNG of varied pixels"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
assert (w, h, depth, ctype) == (38, 56, 8, 2), (w, h, depth, ctype)
data, i = b"", 8
while i < len(b):
    n, kind = struct.unpack(">I4s", b[i:i + 8])
    if kind == b"IDAT":
        data += b[i + 8:i + 8 + n]
    i += 12 + n
pixels = zlib.decompress(data)
assert len(set(pixels)) > 20, "the decoded pictures are flat"
PY
# The LDM naming with the same weights draws the same grid; a VAE that does not fit is refused.
"$DIT_MP" sample --run "$SCRATCH/lrun" --steps 3 --per-class 2 --vae "$DATA/vae_tiny_ldm.safetensors" \
  --vae-config "$DATA/vae_tiny_config.json" --out "$SCRATCH/dec_ldm.png" > "$SCRATCH/dec_ldm.txt" 2>&1 ||
  { cat "$SCRATCH/dec_ldm.txt"; fail "sample --vae (LDM names) failed"; }
cmp -s "$SCRATCH/dec.png" "$SCRATCH/dec_ldm.png" || fail "the LDM-named VAE decoded differently"
out=$("$DIT_MP" sample "${S[@]}" --vae "$DATA/vae_tiny.safetensors" --out "$SCRATCH/bad.png" 2>&1) &&
  fail "a 1-channel model sampled with a 4-channel VAE"
grep -q -- "--vae .*vae_tiny.safetensors: its latents have 4 channels, the model's samples 1" <<<"$out" || fail "VAE mismatch: $out"
out=$("$DIT_MP" sample --run "$SCRATCH/lrun" --vae "$DATA/vae_tiny_config.json" --out "$SCRATCH/bad.png" 2>&1) &&
  fail "a JSON file was taken as a VAE"
grep -q -- "--vae .*vae_tiny_config.json is a JSON file, expected a safetensors file" <<<"$out" || fail "--vae JSON: $out"
# inspect names the VAE a safetensors file holds, or says why it cannot.
out=$("$DIT_MP" inspect "$DATA/vae_tiny.safetensors" 2>&1) || fail "inspect of the VAE failed: $out"
grep -q "AutoencoderKL: blocks 16/32, 2 ResNets per block, 8 norm groups, 4 latent channels, downsampling 2x" \
  <<<"$out" || fail "inspect did not name the VAE: $out"
grep -q "diffusers names; latents scaled by 0.18215; architecture from .*vae_tiny_config.json" <<<"$out" ||
  fail "inspect did not say where the VAE came from: $out"
out=$("$DIT_MP" inspect "$DATA/vae_tiny_ldm.safetensors" 2>&1) && fail "the LDM file inspected without its groups"
grep -q "architecture read from its shapes, 32 norm groups): every block's channels must be a positive multiple" \
  <<<"$out" || fail "inspect of the LDM file: $out"
echo "ok"
