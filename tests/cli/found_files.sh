#!/usr/bin/env bash
# Files the program finds on its own (issue 53): every file a run writes is its own (--overwrite of
# a plain, an evaluated and a distilled run, plots.log included); a checkpoint root is dit_mp's or
# refused, and a step folder without COMPLETE is never replaced; the VAE's config found beside its
# weights is an input; --resume auto starts fresh only in a missing or empty folder or a run's own;
# FIFOs where dit_mp finds its files are refused, not read (under timeout: a hang fails); an
# --overwrite through a bind mount keeps the --init-from checkpoint inside the run folder.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
prepare_fashion_test
FM="$SCRATCH/fm_test.h5"
R=(--data "$FM" "${TINY[@]}" --tp 1 --pp 1)
refused() {  # refused REGEX CMD...: CMD fails (not by timeout) with one stderr line matching REGEX
  local regex=$1
  shift
  local rc=0
  timeout -k 10 120 "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/out.txt" "$SCRATCH/err.txt"; fail "expected a refusal (rc $rc): $*"; }
  grep -Eq -- "$regex" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "stderr lacks /$regex/: $*"; }
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "not one line on stderr: $*"; }
  echo "ok: refused /$regex/"
}
runs() {  # runs LOG CMD...: CMD succeeds within 300 s
  local log=$1
  shift
  timeout 300 "$@" > "$SCRATCH/$log" 2>&1 || { cat "$SCRATCH/$log"; fail "failed: $*"; }
}

"$DIT_MP" evaluate --train-classifier --train-data "$FM" --reference "$FM" --classifier "$SCRATCH/c.h5" \
  --classifier-epochs 1 > "$SCRATCH/c.txt" 2>&1 || { cat "$SCRATCH/c.txt"; fail "classifier training failed"; }

# 1. A run, then --overwrite of it, for a plain, an evaluated and a distilled run, with plots on.
EVAL=(--set train.eval_every=2 --set eval.per_class=2 --set eval.num_steps=2
      --set eval.classifier=\""$SCRATCH/c.h5"\" --set eval.reference=\""$FM"\")
KD=(--set distill.teacher=\""$SCRATCH/plain/ema.h5"\" --set distill.feature_decay=\"none\")
for kind in plain evaluated distilled; do
  extra=()
  [[ $kind == evaluated ]] && extra=("${EVAL[@]}")
  [[ $kind == distilled ]] && extra=("${KD[@]}")
  for pass in first overwrite; do
    flag=()
    [[ $pass == overwrite ]] && flag=(--overwrite)
    DIT_PLOTS=1 runs "$kind.$pass.txt" "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/$kind" "${extra[@]}" "${flag[@]}"
  done
  [[ -f "$SCRATCH/$kind/plots.log" ]] || fail "$kind: the run wrote no plots.log (the case is not tried)"
  echo "ok: --overwrite of the $kind run"
done

# 2. A checkpoint root holds only a run's step folders: a user's files there, or a step folder
# without COMPLETE (which a save would replace and keep_checkpoints prune), refuse the run.
U="$SCRATCH/user_ckpt"
mkdir -p "$U" && echo x > "$U/notes.txt"
refused "run.checkpoint_dir $U holds notes.txt, which dit_mp did not write" \
  "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/ck1" --checkpoint-dir "$U"
rm "$U/notes.txt" && mkdir "$U/step_00000001" && echo y > "$U/step_00000001/mine.txt"
refused "run.checkpoint_dir $U holds step_00000001/ \(no COMPLETE marker" \
  "$DIT_MP" "${R[@]}" --steps 2 --checkpoint-every 1 --set train.keep_checkpoints=1 --run-dir "$SCRATCH/ck2" --checkpoint-dir "$U"
[[ -f "$U/step_00000001/mine.txt" ]] || fail "a user's step_00000001/ was replaced"
mkdir -p "$SCRATCH/ck3/ckpt/step_00000001" && echo y > "$SCRATCH/ck3/ckpt/step_00000001/mine.txt"
echo "# dit_mp run configuration, resolved" > "$SCRATCH/ck3/config.toml"  # a run's folder (item 4 refuses others)
refused "run.checkpoint_dir .*ck3/ckpt holds step_00000001/" \
  "$DIT_MP" "${R[@]}" --steps 2 --checkpoint-every 1 --run-dir "$SCRATCH/ck3" --resume auto
[[ -f "$SCRATCH/ck3/ckpt/step_00000001/mine.txt" ]] || fail "a user's ckpt/step_00000001/ was replaced"
echo "ok: a checkpoint root holds only a run's own"

# 3. The VAE's config.json found beside its weights is an input: no output replaces it (evaluate
# --json), whether the VAE is given (--vae) or the run names it (data.vae of --run).
V="$SCRATCH/vae"
mkdir -p "$V" && cp "$DIT_DATA/vae_tiny.safetensors" "$V/diffusion_pytorch_model.safetensors"
cp "$DIT_DATA/vae_tiny_config.json" "$V/config.json" && cp "$DIT_DATA/vae_tiny.safetensors" "$V/w.safetensors"
cp "$DIT_DATA/vae_tiny_config.json" "$V/w_config.json"
prepare_latents "$SCRATCH/lat.h5"
runs lat.txt "$DIT_MP" --data "$SCRATCH/lat.h5" "${TINY[@]}" --tp 1 --pp 1 --steps 2 --run-dir "$SCRATCH/lat" \
  --set model.in_channels=4 --set model.input_size=8 --set model.patch_size=2 --set data.vae=\""$V/diffusion_pytorch_model.safetensors"\"
sums=$(md5sum "$V"/*.json)
JUDGE=(--reference "$FM" --classifier "$SCRATCH/c.h5" --train-data "$FM")
refused "output --json $V/config.json \(the result\) is input --vae-config $V/config.json" \
  "$DIT_MP" evaluate --samples "$SCRATCH/lat/samples.h5" --vae "$V/diffusion_pytorch_model.safetensors" --json "$V/config.json" "${JUDGE[@]}"
refused "output --json $V/w_config.json \(the result\) is input --vae-config $V/w_config.json" \
  "$DIT_MP" evaluate --samples "$SCRATCH/lat/samples.h5" --vae "$V/w.safetensors" --json "$V/w_config.json" "${JUDGE[@]}"
refused "output --json $V/config.json \(the result\) is input --vae-config $V/config.json" \
  "$DIT_MP" evaluate --run "$SCRATCH/lat" --json "$V/config.json" "${JUDGE[@]}"
[[ $(md5sum "$V"/*.json) == "$sums" ]] || fail "a VAE's config.json was changed"
echo "ok: the VAE's config.json found beside it is an input"

# 4. --resume auto starts fresh only in a missing or empty folder or a run's own: a user's folder
# (a metrics.jsonl, an accounting.json, notes) is refused as it is without --resume.
H="$SCRATCH/mine"
mkdir -p "$H" && echo '{"step": 1, "mine": true}' > "$H/metrics.jsonl"
echo '{"mine": true}' > "$H/accounting.json" && echo "my notes" > "$H/notes.txt"
sums=$(md5sum "$H"/*)
refused "run.dir $H is not a run folder .*holds accounting.json, metrics.jsonl, notes.txt: --resume continues only a run's folder" \
  "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$H" --resume auto
[[ $(md5sum "$H"/*) == "$sums" ]] || fail "--resume auto changed a user's files"
runs empty.txt "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/empty_dir" --resume auto
mkdir "$SCRATCH/empty2" && runs empty2.txt "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/empty2" --resume auto
[[ -f "$SCRATCH/empty2/ema.h5" ]] || fail "--resume auto in an empty folder trained nothing"
echo "ok: --resume auto starts fresh only in a missing or empty folder"

# 5. A FIFO where dit_mp finds one of its files is refused, naming it, not read (a read would block
# for ever): a checkpoint's latest, index.h5 and shard (--resume, --init-from, inspect), a run
# folder's lock, a preparation's lock and its work folder's part. `timeout`: a hang fails.
runs ck.txt "$DIT_MP" "${R[@]}" --steps 2 --checkpoint-every 1 --run-dir "$SCRATCH/ckr"
fifo_case() {  # fifo_case NAME PATH_TO_REPLACE CMD...: refused naming PATH as a FIFO
  local name=$1 path=$2
  shift 2
  rm -rf "$SCRATCH/fifo_$name" && cp -r "$SCRATCH/ckr" "$SCRATCH/fifo_$name"
  local p="$SCRATCH/fifo_$name/$path"
  rm -f "$p" && mkfifo "$p"
  refused "$p is a FIFO, expected a regular file" "$@"
}
STEP=ckpt/step_00000002
shards=("$SCRATCH/ckr/$STEP"/shard_*.h5); SHARD=$(basename "${shards[0]}")
fifo_case latest ckpt/latest "$DIT_MP" "${R[@]}" --steps 3 --run-dir "$SCRATCH/fifo_latest" --resume auto
fifo_case index "$STEP/index.h5" "$DIT_MP" "${R[@]}" --steps 3 --run-dir "$SCRATCH/fifo_index" \
  --resume "$SCRATCH/fifo_index/$STEP"
fifo_case index2 "$STEP/index.h5" "$DIT_MP" inspect "$SCRATCH/fifo_index2/$STEP"
fifo_case shard "$STEP/$SHARD" "$DIT_MP" "${R[@]}" --steps 1 --run-dir "$SCRATCH/from_shard" \
  --init-from "$SCRATCH/fifo_shard/$STEP"
fifo_case shard2 "$STEP/$SHARD" "$DIT_MP" inspect "$SCRATCH/fifo_shard2/$STEP"
mkfifo "$SCRATCH/locked.lock"
refused "run.dir: its .lock beside it $SCRATCH/locked.lock is a FIFO" "$DIT_MP" "${R[@]}" --steps 1 --run-dir "$SCRATCH/locked"
# A preparation's lock and its work folder's part (the work of a preparation killed after 2 images).
IM="$SCRATCH/imgs"
python3 - "$IM" <<'PY'
import os, struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
for c in range(2):
    os.makedirs(f"{sys.argv[1]}/{c}", exist_ok=True)
    for i in range(3):
        raw = b"".join(b"\0" + bytes([(x * 16 + y * 3 + c * 50 + i) % 256 for x in range(16)] * 3) for y in range(16))
        open(f"{sys.argv[1]}/{c}/{i}.png", "wb").write(
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
PREP=(prepare-data images "$IM" --vae "$DIT_DATA/vae_tiny.safetensors" --size 16)
mkfifo "$SCRATCH/pl.h5.lock"
refused "--out: its .lock beside it $SCRATCH/pl.h5.lock is a FIFO" "$DIT_MP" "${PREP[@]}" --out "$SCRATCH/pl.h5"
rc=0
DIT_PREPARE_KILL_AFTER=2 timeout 120 "$DIT_MP" "${PREP[@]}" --out "$SCRATCH/pk.h5" > "$SCRATCH/pk.txt" 2>&1 || rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] && ls "$SCRATCH"/pk.h5.parts/part-*.bin > /dev/null ||
  { cat "$SCRATCH/pk.txt"; fail "the killed preparation left no part (rc $rc)"; }
rm -f "$SCRATCH/pk.h5.lock"
parts=("$SCRATCH"/pk.h5.parts/part-*.bin); part=${parts[0]}
rm "$part" && mkfifo "$part"
refused "$part is a FIFO, expected a regular file" "$DIT_MP" "${PREP[@]}" --out "$SCRATCH/pk.h5"
echo "ok: FIFOs where dit_mp finds its files are refused"

# 7. "Inside a folder being replaced" goes by device and inode: through a bind mount of the run
# folder, --overwrite refuses to delete the --init-from checkpoint inside it (skipped where this
# machine allows no mount namespace).
if unshare -m true 2>/dev/null; then
  runs bm.txt "$DIT_MP" "${R[@]}" --steps 2 --checkpoint-every 2 --run-dir "$SCRATCH/bm_run"
  mkdir "$SCRATCH/bm_view"
  BOUND=(unshare -m bash -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' _ "$SCRATCH/bm_run" "$SCRATCH/bm_view")
  refused "output run.dir $SCRATCH/bm_run .the run folder. would replace input run.init_from $SCRATCH/bm_view/ckpt/step_00000002 .* inside it" \
    "${BOUND[@]}" "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/bm_run" --overwrite --init-from "$SCRATCH/bm_view/ckpt/step_00000002"
  [[ -f "$SCRATCH/bm_run/ckpt/step_00000002/COMPLETE" ]] || fail "--overwrite deleted the --init-from checkpoint"
  echo "ok: an input reached through a bind mount of the run folder is inside it"
else
  echo "note: no mount namespace here (unshare -m): the bind-mount case is not tried"
fi

# 13. The only checkpoint lacks COMPLETE: --resume auto names it and refuses, rather than start
# again from step 0 over it.
runs inc.txt "$DIT_MP" "${R[@]}" --steps 2 --checkpoint-every 2 --run-dir "$SCRATCH/inc"
rm "$SCRATCH/inc/ckpt/step_00000002/COMPLETE"
refused "run.checkpoint_dir $SCRATCH/inc/ckpt holds step_00000002/ \(no COMPLETE marker: no finished save\)" \
  "$DIT_MP" "${R[@]}" --steps 4 --run-dir "$SCRATCH/inc" --resume auto
[[ -f "$SCRATCH/inc/ckpt/step_00000002/index.h5" ]] || fail "the incomplete checkpoint was removed"
echo "ok: an incomplete only checkpoint is named and refused"

# 12. Two runs sharing one --checkpoint-dir: the second is refused at its start (the folder is
# locked), not at its first save.
SC="$SCRATCH/shared_ckpt"
timeout -k 10 300 "$DIT_MP" "${R[@]}" --steps 100000 --log-every 1 --run-dir "$SCRATCH/sh_a" --checkpoint-dir "$SC" \
  > "$SCRATCH/sh_a.txt" 2>&1 &
A=$!
trap 'kill -USR1 "$A" 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT  # a failed check stops the first run too
for _ in $(seq 600); do
  [[ -f "$SCRATCH/sh_a/metrics.jsonl" ]] && (($(wc -l < "$SCRATCH/sh_a/metrics.jsonl") >= 2)) && break
  sleep 0.05
done
refused "checkpoint folder $SC is in use by another run" \
  "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/sh_b" --checkpoint-dir "$SC"
kill -0 "$A" || { cat "$SCRATCH/sh_a.txt"; fail "the first run died"; }
kill -USR1 "$A"
wait "$A" || true
trap 'rm -rf "$SCRATCH"' EXIT
[[ ! -e "$SCRATCH/sh_b" ]] || fail "the refused run left a run folder"
echo "ok: a checkpoint folder outside the run folder is locked"

# 11. A NaN or Inf in a VAE's weights is refused where they are read, naming the tensor: by
# `inspect`, and by prepare-data before any picture is blamed.
python3 - "$DIT_DATA/vae_tiny.safetensors" "$SCRATCH/vae_nan.safetensors" <<'PY'
import json, struct, sys
import numpy as np
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
t = header["encoder.conv_in.weight"]
dtype = {"F32": np.float32, "F16": np.float16, "BF16": None}[t["dtype"]]
at = 8 + n + t["data_offsets"][0] + 3 * np.dtype(dtype).itemsize
data[at:at + np.dtype(dtype).itemsize] = np.array([np.nan], dtype=dtype).tobytes()
open(sys.argv[2], "wb").write(data)
PY
cp "$DIT_DATA/vae_tiny_config.json" "$SCRATCH/vae_nan_config.json"
refused "vae_nan.safetensors: tensor encoder.conv_in.weight holds a NaN at element 3 of" \
  "$DIT_MP" inspect "$SCRATCH/vae_nan.safetensors"
refused "vae_nan.safetensors: tensor encoder.conv_in.weight holds a NaN at element 3 of" \
  "$DIT_MP" prepare-data images "$IM" --vae "$SCRATCH/vae_nan.safetensors" --size 16 --out "$SCRATCH/nan.h5"
echo "ok: a VAE with a NaN is refused, naming the tensor"

# 9. An --out inside the folder of pictures (a class folder included, or reached through a link) is
# refused before anything is written: a killed preparation's work folder there would be read as a
# class by the command that resumes it.
ln -s "$IM" "$SCRATCH/im_link"
for out in "$IM/in.h5" "$IM/0/in.h5" "$SCRATCH/im_link/in.h5"; do
  refused "prepare-data: output --out $out \(the dataset written\) lies inside input dir $IM \(the source images\), which is read whole" \
    "$DIT_MP" "${PREP[@]}" --out "$out"
done
for f in "$IM"/in.h5* "$IM"/0/in.h5*; do [[ ! -e $f ]] || fail "a refused preparation left $f"; done
echo "ok: a preparation's --out inside its folder of pictures is refused"

# 10. A killed preparation resumed with the same VAE and folder reached by other paths (relative,
# from another working directory, through links) resumes, into the same bytes as one that ran
# through: the settings and the dataset's attributes name the resolved paths.
"$DIT_MP" "${PREP[@]}" --batch 1 --out "$SCRATCH/p10_once.h5" > /dev/null
rc=0
DIT_PREPARE_KILL_AFTER=2 "$DIT_MP" "${PREP[@]}" --batch 1 --out "$SCRATCH/p10.h5" > /dev/null 2>&1 || rc=$?
[[ $rc -ne 0 && -d "$SCRATCH/p10.h5.parts" ]] || fail "the preparation was not killed midway (rc $rc)"
ln -s "$DIT_DATA/vae_tiny.safetensors" "$SCRATCH/vae_link.safetensors"
ln -s "$DIT_DATA/vae_tiny_config.json" "$SCRATCH/vae_link_config.json"
(cd "$SCRATCH" && "$DIT_MP" prepare-data images im_link --vae vae_link.safetensors --size 16 --batch 1 --out p10.h5) \
  > "$SCRATCH/p10.txt" 2>&1 || { cat "$SCRATCH/p10.txt"; fail "the resume through other paths failed"; }
grep -q "^resuming: 2 of 6 images done" "$SCRATCH/p10.txt" || { cat "$SCRATCH/p10.txt"; fail "it did not resume"; }
cmp "$SCRATCH/p10.h5" "$SCRATCH/p10_once.h5" || fail "the resumed dataset differs from one prepared through"
echo "ok: a preparation resumes with its VAE and folder reached by other paths, into the same bytes"

# 8. A --json onto a JSON file that dit_mp did not write as such an output (a VAE's config.json not
# read by this command, a run's metrics.jsonl or accounting.json) is refused; dit_mp's own result,
# which carries the "dit_mp" key first, is replaced (as a PNG without dit_mp's tEXt mark is refused).
cp "$V/config.json" "$SCRATCH/other_config.json"
sums=$(md5sum "$SCRATCH/other_config.json" "$SCRATCH/lat/metrics.jsonl" "$SCRATCH/lat/accounting.json")
for j in "$SCRATCH/other_config.json" "$SCRATCH/lat/metrics.jsonl" "$SCRATCH/lat/accounting.json"; do
  refused "output --json $j \(the result\) exists and is a JSON file that dit_mp did not write \(its first key is not \"dit_mp\"\)" \
    "$DIT_MP" evaluate --samples "$SCRATCH/lat/samples.h5" --vae "$V/w.safetensors" --json "$j" "${JUDGE[@]}"
  refused "output --json $j \(the plan\) exists and is a JSON file that dit_mp did not write" "$DIT_MP" plan --json "$j"
done
[[ $(md5sum "$SCRATCH/other_config.json" "$SCRATCH/lat/metrics.jsonl" "$SCRATCH/lat/accounting.json") == "$sums" ]] ||
  fail "a JSON file dit_mp did not write was changed"
for pass in 1 2; do
  runs e8.txt "$DIT_MP" evaluate --samples "$SCRATCH/plain/samples.h5" --json "$SCRATCH/e8.json" "${JUDGE[@]}"
  runs p8.txt "$DIT_MP" plan --json "$SCRATCH/p8.json"
done
grep -q '^{"dit_mp": "evaluate", ' "$SCRATCH/e8.json" && grep -q '^{"dit_mp": "plan", ' "$SCRATCH/p8.json" ||
  fail "dit_mp's JSON outputs lack their mark: $(head -c 80 "$SCRATCH/e8.json") $(head -c 80 "$SCRATCH/p8.json")"
echo "ok: --json replaces only dit_mp's own JSON outputs"

# Low: a start that failed before its first step (here killed in its first step, as the kernel's
# OOM killer would kill it; the fault slows the planner's virtual step too) leaves its config.toml
# and empty logs; the rerun replaces them without --overwrite, saying so. A trained run is refused.
DIT_FAULT_SLOW_LAYOUT=1x1:10 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/fs" > "$SCRATCH/fs1.txt" 2>&1 &
pid=$!
for _ in $(seq 1200); do
  [[ -f "$SCRATCH/fs/metrics.jsonl" ]] && break
  sleep 0.05
done
sleep 0.5
kill -9 "$pid" && wait "$pid" || true
[[ -f "$SCRATCH/fs/config.toml" && -f "$SCRATCH/fs/metrics.jsonl" && ! -s "$SCRATCH/fs/metrics.jsonl" ]] ||
  { cat "$SCRATCH/fs1.txt"; ls -la "$SCRATCH/fs" || true; fail "the killed start did not leave config.toml and an empty metrics.jsonl"; }
runs fs2.txt "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/fs"
grep -q "^note: run folder .*fs holds only what a start that failed before its first step left" "$SCRATCH/fs2.txt" ||
  { cat "$SCRATCH/fs2.txt"; fail "the rerun did not say it replaced a failed start's folder"; }
[[ -f "$SCRATCH/fs/ema.h5" && -s "$SCRATCH/fs/metrics.jsonl" ]] || fail "the rerun did not train"
refused "run folder .*fs already exists" "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/fs"
echo "ok: a failed start's folder is replaced by the rerun, a trained run's is not"
