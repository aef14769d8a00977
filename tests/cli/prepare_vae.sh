#!/usr/bin/env bash
# `dit_mp prepare-data images DIR --vae FILE`: a folder of real pictures into latents, over ranks.
# The folder: 40 Fashion-MNIST test images (tinted to RGB) as PNG and JPEG in 3 class folders, a
# grayscale PNG, two small real JPEG photographs, plus a CMYK JPEG and a truncated JPEG. Then:
# --bad-files fail stops every rank naming the CMYK file, nothing written; --bad-files skip at 2 ranks
# with the tiny VAE succeeds, skipping those 2; 1 rank writes the same bytes; a run killed midway
# (the DIT_PREPARE_KILL_AFTER hook: a rank kills itself with SIGKILL after K images) resumes, after
# its work folder refused a command of other settings, into the same bytes; the latent-diffusion
# named copy of the VAE gives the same latents; --flips both stores the mirror images after the
# originals; --latent sample draws; and `dit_mp train` runs 2 steps on the latents.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1  # mpirun's own banners off (see bad_inputs.sh)
prepare_fashion_test
IM="$SCRATCH/imgs"
PIC="$DIT_DATA/image_prep"
VAE="$DIT_DATA/vae_tiny.safetensors"

# PNG written with zlib alone; JPEG with PIL where it is installed (python3-matplotlib brings it, as
# scripts/install_deps.sh installs), else those pictures are PNG too (the photographs stay JPEG).
/usr/bin/python3 - "$SCRATCH/fm_test.h5" "$IM" <<'PY'
import os, struct, sys, zlib
import numpy as np

def read_images(path, n):  # the uint8 (N, 1, 32, 32) 'images' of dit_mp's dataset, without h5py
    import subprocess
    raw = path + ".raw"
    subprocess.run(["h5dump", "-d", "/images", "-c", f"{n},1,32,32", "-b", "LE", "-o", raw, path],
                   capture_output=True, check=True)
    return np.fromfile(raw, dtype=np.uint8).reshape(n, 32, 32)

def png(path, a):
    h, w = a.shape[:2]
    kind = 0 if a.ndim == 2 else 2
    raw = b"".join(b"\0" + a[r].tobytes() for r in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, kind, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

try:
    from PIL import Image
except ImportError:
    Image = None
    print("note: no PIL: the Fashion-MNIST pictures are PNG only")
x = read_images(sys.argv[1], 40)
classes = ["a_top", "b_shoe", "c_bag"]
for c in classes:
    os.makedirs(os.path.join(sys.argv[2], c))
for i in range(40):
    g = x[i].astype(np.float32)
    rgb = np.stack([g, g * 0.7 + 40, 255 - g], -1).clip(0, 255).astype(np.uint8)
    stem = os.path.join(sys.argv[2], classes[i % 3], f"fm_{i:02d}")
    if i % 2 == 0 and Image is not None:
        Image.fromarray(rgb).save(stem + ".jpg", quality=90)
    else:
        png(stem + ".png", rgb)
png(os.path.join(sys.argv[2], "a_top", "gray.png"), x[40 - 1])
PY
cp "$PIC/photo_f.jpg" "$IM/a_top/photo.jpg"
cp "$PIC/gray_g.jpg" "$IM/c_bag/gray_photo.jpg"
cp "$PIC/cmyk.jpg" "$IM/b_shoe/cmyk.jpg"
head -c 3000 "$PIC/photo_f.jpg" > "$IM/c_bag/truncated.jpg"
FILES=$(find "$IM" -type f | wc -l)
[[ $FILES -eq 45 ]] || fail "expected 45 pictures, made $FILES"

P=(prepare-data images "$IM" --vae "$VAE" --size 32 --batch 4)
attr_root() {  # attr_root FILE NAME: a root attribute's value as h5dump prints it
  h5dump -a "/$2" "$1" | sed -n '/DATA {/,/}/p' | grep -o '(0).*' | sed 's/(0): //; s/ //g; s/"//g'
}
T0=$(date +%s.%N)

# --bad-files fail (the default): one line naming the CMYK file, non-zero on every rank, no dataset.
rc=0
$MPIRUN -n 2 "$DIT_MP" "${P[@]}" --out "$SCRATCH/fail.h5" > "$SCRATCH/fail.out" 2> "$SCRATCH/fail.err" || rc=$?
[[ $rc -ne 0 ]] || fail "a CMYK JPEG did not fail the preparation"
grep -q "cmyk.jpg: a CMYK JPEG (4 colour components)" "$SCRATCH/fail.err" || { cat "$SCRATCH/fail.err"; fail "the CMYK file is not named"; }
[[ $(wc -l < "$SCRATCH/fail.err") -eq 1 ]] || { cat "$SCRATCH/fail.err"; fail "not one line on stderr"; }
[[ ! -e "$SCRATCH/fail.h5" ]] && ! ls "$SCRATCH"/fail.h5.tmp-* > /dev/null 2>&1 || fail "a failed preparation left a dataset"
grep -q "(--bad-files fail; --bad-files skip leaves such files out)" "$SCRATCH/fail.err" || fail "the line does not say what to do"
echo "ok: --bad-files fail names the CMYK file"
# Settings the VAE or the command cannot take: one line naming them, at 2 ranks, nothing written.
for bad in "--size 0 --batch 4|--size 0: expected 1 to 4096" \
           "--size 33 --batch 4|image size 33 is not a multiple of the VAE's downsampling factor 2; try 32" \
           "--size 32 --batch 5000|--batch 5000: expected 1 to 4096" \
           "--size 32 --batch 4 --precision fp8|--precision fp8: expected fp32, bf16 or fp16"; do
  rc=0
  $MPIRUN -n 2 "$DIT_MP" "${P[@]:0:5}" ${bad%%|*} --out "$SCRATCH/bad.h5" > /dev/null 2> "$SCRATCH/bad.err" || rc=$?
  [[ $rc -ne 0 && $(wc -l < "$SCRATCH/bad.err") -eq 1 ]] && grep -qF -- "${bad#*|}" "$SCRATCH/bad.err" ||
    { cat "$SCRATCH/bad.err"; fail "${bad%%|*}: not refused in one line naming it"; }
  [[ ! -e "$SCRATCH/bad.h5" ]] || fail "${bad%%|*} wrote a dataset"
done
echo "ok: bad --size, --batch and --precision refused in one line"

# --bad-files skip at 2 ranks: both bad files skipped and counted; the work folder is gone.
$MPIRUN -n 2 "$DIT_MP" "${P[@]}" --bad-files skip --out "$SCRATCH/two.h5" > "$SCRATCH/two.out" 2>&1 ||
  { cat "$SCRATCH/two.out"; fail "prepare-data --vae at 2 ranks failed"; }
grep -q "^skipped 2 of 45 files that do not decode$" "$SCRATCH/two.out" || { cat "$SCRATCH/two.out"; fail "2 skipped files not reported"; }
grep -q "^skipped .*truncated.jpg: a truncated JPEG" "$SCRATCH/two.out" || fail "the truncated file is not named"
grep -q "^prepare-data: 45/45 images (100.0%), .* images/s" "$SCRATCH/two.out" || fail "no progress line"
[[ ! -e "$SCRATCH/two.h5.parts" ]] || fail "the work folder stayed"
grep -q "images *Dataset {43, 4, 16, 16}" <<<"$(h5ls "$SCRATCH/two.h5")" || { h5ls "$SCRATCH/two.h5"; fail "expected 43 latents of 4x16x16"; }
[[ $(attr_root "$SCRATCH/two.h5" skipped_files) == 2 && $(attr_root "$SCRATCH/two.h5" kind) == latents &&
   $(attr_root "$SCRATCH/two.h5" latent_scale) == 0.18215 ]] || fail "attributes skipped_files, kind, latent_scale"
echo "ok: 2 ranks, 2 files skipped"

# 1 rank: the same bytes.
"$DIT_MP" "${P[@]}" --bad-files skip --out "$SCRATCH/one.h5" > "$SCRATCH/one.out" 2>&1 ||
  { cat "$SCRATCH/one.out"; fail "prepare-data --vae at 1 rank failed"; }
cmp "$SCRATCH/one.h5" "$SCRATCH/two.h5" || fail "1 rank and 2 ranks wrote different files"
echo "ok: 1 rank writes the file 2 ranks wrote, byte for byte"

# Killed after 8 images on a rank: the work stays; a command of other settings is refused by it;
# the same command resumes (at 1 rank here) into the same bytes.
rc=0
DIT_PREPARE_KILL_AFTER=8 $MPIRUN -n 2 "$DIT_MP" "${P[@]}" --bad-files skip --out "$SCRATCH/kill.h5" \
  > "$SCRATCH/kill.out" 2>&1 || rc=$?
[[ $rc -ne 0 && ! -e "$SCRATCH/kill.h5" ]] || { cat "$SCRATCH/kill.out"; fail "the killed run finished (rc $rc)"; }
ls "$SCRATCH"/kill.h5.parts/part-*.bin > /dev/null || fail "the killed run left no part"
[[ -f "$SCRATCH/kill.h5.lock" ]] || fail "the killed preparation left no lock (it held none)"
# A preparation elsewhere holds the output: another is refused in one line naming the holder, and
# neither the lock nor the work folder is touched.
cp "$SCRATCH/kill.h5.lock" "$SCRATCH/dead.lock"
printf 'host=othernode\npid=1234\nstart_ticks=\njob_id=\nrestart_count=0\nstarted=0\n' > "$SCRATCH/kill.h5.lock"
parts_before=$(cd "$SCRATCH/kill.h5.parts" && cksum part-*.bin)
rc=0
$MPIRUN -n 2 "$DIT_MP" "${P[@]}" --bad-files skip --out "$SCRATCH/kill.h5" > /dev/null 2> "$SCRATCH/locked.err" || rc=$?
[[ $rc -ne 0 && $(wc -l < "$SCRATCH/locked.err") -eq 1 ]] &&
  grep -q "dataset $SCRATCH/kill.h5 is in use by another preparation (host othernode, pid 1234" "$SCRATCH/locked.err" ||
  { cat "$SCRATCH/locked.err"; fail "a second preparation of the same output was not refused naming the holder"; }
grep -q '^host=othernode$' "$SCRATCH/kill.h5.lock" && [[ $(cd "$SCRATCH/kill.h5.parts" && cksum part-*.bin) == "$parts_before" ]] ||
  fail "the refused preparation touched the holder's lock or work"
mv "$SCRATCH/dead.lock" "$SCRATCH/kill.h5.lock"  # the killed holder's own lock: stale (its pid is gone)
echo "ok: a held output is refused naming its holder"
rc=0
"$DIT_MP" "${P[@]}" --bad-files skip --flips both --out "$SCRATCH/kill.h5" > "$SCRATCH/other.out" 2> "$SCRATCH/other.err" || rc=$?
[[ $rc -ne 0 ]] || fail "other settings resumed the work folder"
grep -q "kill.h5.parts holds the unfinished work of a preparation with other settings: flips none there, both here" \
  "$SCRATCH/other.err" || { cat "$SCRATCH/other.err"; fail "the refusal does not name the setting"; }
grep -q "^note: removed the stale preparation lock $SCRATCH/kill.h5.lock of host $(hostname), pid" "$SCRATCH/other.out" ||
  { cat "$SCRATCH/other.out"; fail "the killed preparation's lock was not removed as stale with a note"; }
"$DIT_MP" "${P[@]}" --bad-files skip --out "$SCRATCH/kill.h5" > "$SCRATCH/resume.out" 2>&1 ||
  { cat "$SCRATCH/resume.out"; fail "the resumed preparation failed"; }
grep -q "^resuming: [1-9][0-9]* of 45 images done" "$SCRATCH/resume.out" || { cat "$SCRATCH/resume.out"; fail "it did not resume"; }
[[ ! -e "$SCRATCH/kill.h5.lock" ]] || fail "the finished preparation left its lock"
cmp "$SCRATCH/kill.h5" "$SCRATCH/two.h5" || fail "the resumed preparation wrote another file"
echo "ok: killed, resumed: $(grep "^resuming" "$SCRATCH/resume.out"), the same bytes"

# The latent-diffusion naming of the same weights (with its config given) gives the same latents.
"$DIT_MP" prepare-data images "$IM" --vae "$DIT_DATA/vae_tiny_ldm.safetensors" --vae-config "$DIT_DATA/vae_tiny_config.json" \
  --size 32 --batch 4 --bad-files skip --out "$SCRATCH/ldm.h5" > "$SCRATCH/ldm.out" 2>&1 ||
  { cat "$SCRATCH/ldm.out"; fail "prepare-data with the LDM-named VAE failed"; }
for d in /images /labels; do
  h5diff "$SCRATCH/ldm.h5" "$SCRATCH/two.h5" $d $d > /dev/null || fail "the LDM-named VAE's $d differ"
done
echo "ok: the LDM-named VAE gives the same latents"

# Flips and draws: --flips both stores each picture, then its mirror image: with the mean, the
# originals are the latents above; --latent sample draws around them (at 2 ranks).
"$DIT_MP" "${P[@]}" --bad-files skip --flips both --out "$SCRATCH/flips.h5" > "$SCRATCH/flips.out" 2>&1 ||
  { cat "$SCRATCH/flips.out"; fail "--flips both failed"; }
$MPIRUN -n 2 "$DIT_MP" "${P[@]}" --bad-files skip --flips both --latent sample --seed 3 --out "$SCRATCH/draw.h5" \
  > "$SCRATCH/draw.out" 2>&1 || { cat "$SCRATCH/draw.out"; fail "--latent sample failed"; }
for f in two flips draw; do
  h5dump -d /images -b LE -o "$SCRATCH/$f.raw" "$SCRATCH/$f.h5" > /dev/null
done
/usr/bin/python3 - "$SCRATCH" <<'PY'
import sys
import numpy as np
two, flips, draw = (np.fromfile(f"{sys.argv[1]}/{n}.raw", dtype="<f4").reshape(-1, 4, 16, 16) for n in ("two", "flips", "draw"))
assert two.shape[0] == 43 and flips.shape == draw.shape == (86, 4, 16, 16), (two.shape, flips.shape, draw.shape)
assert np.array_equal(flips[0::2], two), "--flips both: the originals are not the unflipped latents"
assert not np.array_equal(flips[1::2], flips[0::2]), "the mirror images' latents equal the originals'"
assert np.all(np.isfinite(draw)) and not np.array_equal(draw, flips), "the draws equal the means"
print(f"ok: --flips both: 86 latents, originals as without flips; draws differ from the means by "
      f"{np.abs(draw - flips).mean():.3g} on average")
PY
T1=$(date +%s.%N)
echo "prepare-data --vae: 9 commands on 45 pictures in $(python3 -c "print(f'{$T1 - $T0:.1f}')") s"

# Training on the latents: in_channels = the VAE's 4 latent channels, 16 x 16 latents.
"$DIT_MP" --tp 1 --pp 1 --steps 2 --run-dir "$SCRATCH/run" "${TINY[@]}" --data "$SCRATCH/two.h5" \
  --set model.in_channels=4 --set model.input_size=16 --set model.num_classes=3 > "$SCRATCH/train.out" 2>&1 ||
  { cat "$SCRATCH/train.out"; fail "training on the prepared latents failed"; }
[[ -f "$SCRATCH/run/ema.h5" ]] || fail "the run wrote no ema.h5"
echo "ok: 2 training steps on the latents"

# Pictures out: sample --vae decodes the latent model's samples into the grid (16x16 latents are
# 32x32 pictures), and evaluate --vae judges the decoded pictures with an Inception-V3 (random
# weights, built by tools/inception_reference.py: the eval.inception fixture) against its stats.
VAE=$(cd "$(dirname "$0")/../data" && pwd)/vae_tiny.safetensors
"$DIT_MP" sample --run "$SCRATCH/run" --steps 2 --per-class 2 --vae "$VAE" --out "$SCRATCH/grid.png" \
  > "$SCRATCH/sample.out" 2>&1 || { cat "$SCRATCH/sample.out"; fail "sample --vae failed"; }
grep -q "decoding 6 latents with AutoencoderKL" "$SCRATCH/sample.out" || fail "sample --vae did not decode"
grep -q "samples *Dataset {6, 4, 16, 16}" <<<"$(h5ls "$SCRATCH/grid.h5")" || fail "sample --vae: no raw latents"
# 3 class rows of 2 pictures of 32x32 with 2-pixel padding: 70 x 104 (PNG's IHDR width, height).
[[ $(od -An -tu1 -j16 -N8 "$SCRATCH/grid.png" | tr -s ' ') == " 0 0 0 70 0 0 0 104" ]] ||
  fail "sample --vae: the grid is not 3 rows of 2 pictures of 32x32 (70 x 104 pixels)"
echo "ok: sample --vae wrote the decoded grid and the latents"
INC=${DIT_INCEPTION_REF:-}
if [[ -z $INC || -e $INC/SKIPPED || ! -f $INC/inception_random.h5 ]]; then
  echo "evaluate --vae not run: no Inception fixture (${INC:-DIT_INCEPTION_REF unset}${INC:+: $(cat "$INC/SKIPPED" 2>/dev/null)})"
else
  "$DIT_MP" evaluate --run "$SCRATCH/run" --vae "$VAE" --inception "$INC/inception_random.h5" \
    --reference-stats "$INC/stats_a.npz" --per-class 4 --steps 2 --json "$SCRATCH/eval.json" > "$SCRATCH/eval.out" 2>&1 ||
    { cat "$SCRATCH/eval.out"; fail "evaluate --vae failed"; }
  grep -q "decoding 12 latents" "$SCRATCH/eval.out" || fail "evaluate --vae did not decode"
  /usr/bin/python3 - "$SCRATCH/eval.json" <<'PY' || fail "evaluate --vae: no finite FID of 12 decoded samples"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["feature_space"] == "inception-v3" and r["n"] == 12 and math.isfinite(r["fid"]) and r["fid"] > 0, r
assert "vae_tiny.safetensors (AutoencoderKL: " in r["decoded_by"], r
print(f"ok: evaluate --vae: Inception FID {r['fid']:.1f} of 12 decoded samples")
PY
  # Decoding and Inception's features split over the ranks (1 and 4 ranks: 6 latents dealt 1+2+1+2;
  # mpi.layouts' Rows tests cover even and empty shares) give the same FID to the last printed
  # digit: each picture and its features depend on its own latent only.
  for np in 1 4; do
    launch=("$DIT_MP")
    ((np == 1)) || launch=($MPIRUN -n $np "$DIT_MP")
    "${launch[@]}" evaluate --samples "$SCRATCH/grid.h5" --vae "$VAE" --inception "$INC/inception_random.h5" \
      --reference-stats "$INC/stats_a.npz" --json "$SCRATCH/eval_np$np.json" > "$SCRATCH/eval_np$np.out" 2>&1 ||
      { cat "$SCRATCH/eval_np$np.out"; fail "evaluate --samples --vae at $np ranks failed"; }
    grep -q "decoding 6 latents with AutoencoderKL.* over $np ranks" "$SCRATCH/eval_np$np.out" ||
      { cat "$SCRATCH/eval_np$np.out"; fail "evaluate at $np ranks did not decode over $np ranks"; }
  done
  cmp -s "$SCRATCH/eval_np1.json" "$SCRATCH/eval_np4.json" ||
    fail "evaluate at 4 ranks: $(cat "$SCRATCH/eval_np4.json") differs from 1 rank: $(cat "$SCRATCH/eval_np1.json")"
  echo "ok: decoding and Inception over 1 and 4 ranks: the same FID ($(cat "$SCRATCH/eval_np1.json"))"
fi
