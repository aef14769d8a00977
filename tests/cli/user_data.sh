#!/usr/bin/env bash
# Nothing a user has is lost, and what cannot be measured is not reported: --overwrite replaces
# only a run folder dit_mp wrote (never a foreign file, never the training data); a failed start
# leaves no run folder; a symlink to a locked run folder shares its lock; --train-classifier keeps
# the old classifier when its inputs are bad; sample outputs never collide; evaluate refuses too
# few samples before sampling, non-finite metrics and a reference missing classes; plan --top 0.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1  # mpirun's own banners off (see bad_inputs.sh)
prepare_fashion_test
FM="$SCRATCH/fm_test.h5"
RD=("${TINY[@]}" --tp 1 --pp 1)  # without the data
R=(--data "$FM" "${RD[@]}")
refused() {  # refused REGEX CMD...: CMD fails with one stderr line matching REGEX
  local regex=$1
  shift
  local rc=0
  timeout 120 "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$SCRATCH/out.txt" "$SCRATCH/err.txt"; fail "expected a refusal (rc $rc): $*"; }
  grep -Eq -- "$regex" "$SCRATCH/err.txt" || { cat "$SCRATCH/err.txt"; fail "stderr lacks /$regex/: $*"; }
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || { cat "$SCRATCH/err.txt"; fail "not one line on stderr: $*"; }
  echo "ok: refused /$regex/"
}

# --overwrite of a folder dit_mp did not write: refused, naming what is there; nothing deleted.
P="$SCRATCH/p"
mkdir -p "$P/sub" && echo x > "$P/thesis.txt" && echo y > "$P/sub/notes.txt"
refused "is not a run folder" $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$P" --overwrite
echo "# dit_mp run configuration, resolved" > "$P/config.toml"
refused "run.dir $P holds .*(thesis.txt|sub/).*which dit_mp did not write" \
  $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$P" --overwrite
[[ -f "$P/thesis.txt" && -f "$P/sub/notes.txt" ]] || fail "--overwrite deleted a user's files"
# A real run folder is replaced; the data inside it never is.
$MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run" > "$SCRATCH/run.txt" 2>&1 ||
  { cat "$SCRATCH/run.txt"; fail "a tiny run failed"; }
$MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run" --overwrite > "$SCRATCH/run2.txt" 2>&1 ||
  { cat "$SCRATCH/run2.txt"; fail "--overwrite of a run folder failed"; }
[[ -f "$SCRATCH/run/ema.h5" ]] || fail "no ema.h5 after --overwrite"
echo "ok: --overwrite replaces a run folder"
cp "$FM" "$SCRATCH/run/data.h5"
refused "output run.dir $SCRATCH/run .the run folder. would replace input data.path $SCRATCH/run/data.h5 .the training data. inside it" \
  $MPIRUN -n 2 "$DIT_MP" "${RD[@]}" --steps 2 --run-dir "$SCRATCH/run" --overwrite --data "$SCRATCH/run/data.h5"
[[ -f "$SCRATCH/run/data.h5" && -f "$SCRATCH/run/ema.h5" ]] || fail "a refused --overwrite deleted files"
refused "holds data.h5, which dit_mp did not write" \
  $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/run" --overwrite
rm "$SCRATCH/run/data.h5"

# A start that fails (weights that do not load) leaves no run folder behind.
refused "nowhere.h5" $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/fresh" \
  --init-from "$SCRATCH/nowhere.h5"
[[ ! -e "$SCRATCH/fresh" ]] || fail "a failed --init-from left a run folder"
refused "nothing_here: no such checkpoint folder" $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 2 --run-dir "$SCRATCH/fresh2" \
  --resume "$SCRATCH/run/nothing_here"
[[ ! -e "$SCRATCH/fresh2" ]] || fail "a failed --resume left a run folder"

# A symlink to a run folder shares its lock: resuming through it while the run trains is refused.
D="$SCRATCH/lk"
ln -s "$D" "$SCRATCH/lk_link"
$MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 100000 --log-every 1 --run-dir "$D" > "$SCRATCH/a.log" 2>&1 &
A=$!
for _ in $(seq 600); do
  [[ -f "$D/metrics.jsonl" ]] && (($(wc -l < "$D/metrics.jsonl") >= 2)) && break
  sleep 0.05
done
refused "run folder .*lk_link is in use by another run" \
  $MPIRUN -n 2 "$DIT_MP" "${R[@]}" --steps 5 --run-dir "$SCRATCH/lk_link" --resume auto
kill -0 "$A" || fail "the first run died"
kill -USR1 "$A"
wait "$A" || true
/usr/bin/python3 - "$D/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, len(steps) + 1)), steps
PY
echo "ok: a symlinked run folder is locked with its target"

# evaluate --train-classifier with a bad setting keeps the classifier it would replace.
EV=(--train-data "$FM" --reference "$FM" --classifier "$SCRATCH/c.h5")
"$DIT_MP" evaluate --train-classifier "${EV[@]}" --classifier-epochs 1 > "$SCRATCH/c.txt" 2>&1 ||
  { cat "$SCRATCH/c.txt"; fail "classifier training failed"; }
sum=$(md5sum < "$SCRATCH/c.h5")
refused "--classifier-epochs 0: expected 1 to 1000" "$DIT_MP" evaluate --train-classifier "${EV[@]}" --classifier-epochs 0
[[ $(md5sum < "$SCRATCH/c.h5") == "$sum" ]] || fail "--train-classifier lost the classifier"

# sample: outputs that collide or are folders are refused before sampling.
S=(sample --run "$SCRATCH/run" --steps 2 --per-class 1)
refused "would be the same file" "$DIT_MP" "${S[@]}" --out "$SCRATCH/g.h5"
mkdir -p "$SCRATCH/adir" "$SCRATCH/x.h5"
refused "--out $SCRATCH/adir is a folder" "$DIT_MP" "${S[@]}" --out "$SCRATCH/adir"
refused "x.h5, which is a folder" "$DIT_MP" "${S[@]}" --out "$SCRATCH/x.png"
[[ ! -e "$SCRATCH/adir.h5" && -z $(ls "$SCRATCH" | grep '\.tmp') ]] || fail "a refused sample left files"

# evaluate: too few samples are refused before sampling; samples far outside [-1, 1] give no
# number; a reference without every class is named.
refused "= 2 samples; at least 4 are needed" "$DIT_MP" evaluate --run "$SCRATCH/run" --classes 0,1 --per-class 1 "${EV[@]}"
/usr/bin/python3 - "$FM" "$SCRATCH" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    x = f["images"][:64].astype(np.float32) / 127.5 - 1
    y = f["labels"][:64].astype(np.int32)
x[::2] = 3e38
x[1::2] = -3e38
with h5py.File(f"{sys.argv[2]}/huge.h5", "w") as g:
    g["samples"] = x
    g["labels"] = y
with h5py.File(sys.argv[1], "r") as f, h5py.File(f"{sys.argv[2]}/class0.h5", "w") as g:
    keep = f["labels"][:] == 0
    for k, v in f.attrs.items():
        g.attrs[k] = v
    for name in f:
        d = f[name][:]
        g[name] = d[keep] if d.shape and d.shape[0] == keep.shape[0] else d
PY
refused "quality of the samples is not finite .* range over \[-3.*e\+38, 3.*e\+38\]" \
  "$DIT_MP" evaluate --samples "$SCRATCH/huge.h5" "${EV[@]}" --json "$SCRATCH/huge.json"
[[ ! -e "$SCRATCH/huge.json" ]] || fail "non-finite metrics were written"
/usr/bin/python3 "$(dirname "$0")/../../tools/dit_checkpoint.py" seal "$SCRATCH/class0.h5" > /dev/null
refused "class0.h5 has no image of class 1 of the classifier's 10" \
  "$DIT_MP" evaluate --samples "$SCRATCH/huge.h5" --train-data "$FM" --reference "$SCRATCH/class0.h5" --classifier "$SCRATCH/c.h5"

# Every dataset evaluate reads is checked as training's is: an unsealed copy and overwritten bytes.
/usr/bin/python3 - "$FM" "$SCRATCH/unsealed.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for k, v in f.attrs.items():
        g.attrs[k] = v
    for name in f:
        g[name] = f[name][:]
PY
refused "unsealed.h5: no dit_mp seal" \
  "$DIT_MP" evaluate --samples "$SCRATCH/huge.h5" --train-data "$FM" --reference "$SCRATCH/unsealed.h5" --classifier "$SCRATCH/c.h5"
cp "$FM" "$SCRATCH/tampered.h5"
size=$(stat -c %s "$SCRATCH/tampered.h5")
dd if=/dev/urandom of="$SCRATCH/tampered.h5" bs=1 count=4096 seek=$((size / 2)) conv=notrunc status=none
refused "tampered.h5: its contents do not match the CRC-32 in its seal" \
  "$DIT_MP" evaluate --samples "$SCRATCH/huge.h5" --train-data "$SCRATCH/tampered.h5" --reference "$FM" --classifier "$SCRATCH/c.h5"

# plan --top must print something.
refused "--top 0: expected the number of rows" "$DIT_MP" plan --fit 80 --gpus 2 --top 0
refused "--top -5: expected the number of rows" "$DIT_MP" plan --fit 80 --gpus 2 --top -5
# A calibration file is read as strictly as the run config.
cal() { printf '[predict]\nflops_per_s = 1e12\nintra_gbps = 10\ninter_gbps = 1\n%s\n' "$1" > "$SCRATCH/cal.toml"; }
cal 'flop_per_s = 3'
refused "unknown key predict.flop_per_s" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
cal 'latency_us = inf'
refused "predict.latency_us = inf: expected microseconds in \[0, 1e\+06\]" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
cal 'rows_half = 1e300'
refused "predict.rows_half = 1e\+300: expected GEMM rows" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
cal 'gpus_per_node = 1e300'
refused "predict.gpus_per_node: expected ranks per node \(an integer\)" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
cal 'cores = 1e-300'
refused "predict.cores = 1e-300: expected cores shared by a node's ranks \(0: a device per rank\) in \[0.01, 1e\+06\] or 0" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
printf '[predict]\nflops_per_s = 1e-300\n' > "$SCRATCH/cal.toml"  # the predicted step time was inf
refused "predict.flops_per_s = 1e-300: expected FLOP/s of one rank in \[1e\+06, 1e\+18\]" "$DIT_MP" plan --predict --calibration "$SCRATCH/cal.toml"
refused "--calibration = $SCRATCH: is not a file \(a folder; expected a TOML config\)" "$DIT_MP" plan --predict --calibration "$SCRATCH"
/usr/bin/python3 -c "print('[predict]\nx = ' + '['*10000 + ']'*10000)" > "$SCRATCH/nested.toml"
refused "nested.toml:2: .*nest deeper than 64" "$DIT_MP" plan --predict --calibration "$SCRATCH/nested.toml"
"$DIT_MP" plan --predict --calibration "$(dirname "$0")/../../docs/study_demo/calibration.toml" > "$SCRATCH/cal.txt" 2>&1 ||
  { cat "$SCRATCH/cal.txt"; fail "the measured calibration was refused"; }
echo "user_data: all cases passed"
