#!/usr/bin/env bash
# Checkpoints belong to a run (issue 34, case 2): each run has an identity (run.id, 32 hex digits)
# in its config.toml and in every checkpoint's index. A new run given another run's checkpoint folder
# is refused, naming that run, and leaves the folder as it was; a resume in another run's folder
# refuses the first run's checkpoints; the run itself resumes them, keeping its identity; a new folder
# may continue a checkpoint (it takes the run's identity); a checkpoint from before run ids is taken
# with a note; a config.toml given with --config does not carry its run's identity into a new run;
# --overwrite replaces a run folder with the checkpoint folder it recorded inside it.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --tp 1 --pp 1 --log-every 1 --checkpoint-every 1)
train() {  # train DIR STEPS [ARGS...]: must succeed
  local dir=$1 steps=$2
  shift 2
  "$DIT_MP" --steps "$steps" --run-dir "$dir" "${R[@]}" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}
refused() {  # refused REGEX DIR STEPS [ARGS...]: must fail saying REGEX on one line
  local regex=$1 dir=$2 steps=$3 err
  shift 3
  if "$DIT_MP" --steps "$steps" --run-dir "$dir" "${R[@]}" "$@" > "$dir.out" 2> "$dir.err"; then
    fail "accepted: $*"
  fi
  err=$(cat "$dir.err")
  grep -Eq -- "$regex" <<<"$err" || fail "stderr lacks /$regex/: $err"
  [[ $(wc -l < "$dir.err") -eq 1 ]] || fail "expected one line on stderr: $err"
  echo "ok: $regex"
}
run_id() { sed -n '/^\[run\]/,$p' "$1/config.toml" | grep '^id = ' | sed -n '1s/id = "\(.*\)"/\1/p'; }
index_id() { h5dump -a /run_id "$1/index.h5" | grep -o '"[0-9a-f]*"' | tr -d '"'; }

train "$SCRATCH/a" 4
A=$(run_id "$SCRATCH/a")
[[ $A =~ ^[0-9a-f]{32}$ ]] || fail "run a's config.toml records no run id: '$A'"
for s in 2 3 4; do
  [[ $(index_id "$SCRATCH/a/ckpt/step_0000000$s") == "$A" ]] || fail "step $s's index does not record run $A"
done
"$DIT_MP" inspect "$SCRATCH/a/ckpt" > "$SCRATCH/inspect.txt" || fail "inspect failed"
grep -q "run $A" "$SCRATCH/inspect.txt" || fail "inspect does not name the run"
before=$(cd "$SCRATCH/a/ckpt" && find . -type f -exec sha256sum {} + | sort; cat latest)

# A new run given run a's checkpoint folder: refused before anything is written.
refused "run.checkpoint_dir .*/a/ckpt already holds 3 checkpoint\(s\) of run $A \(newest .*step_00000004\): a new run" \
  "$SCRATCH/b" 2 --checkpoint-dir "$SCRATCH/a/ckpt"
[[ ! -e "$SCRATCH/b" ]] || fail "the refused run left a run folder"
after=$(cd "$SCRATCH/a/ckpt" && find . -type f -exec sha256sum {} + | sort; cat latest)
[[ "$before" == "$after" ]] || fail "run a's checkpoints changed"

# Another run's folder resuming run a's checkpoints: refused, naming both runs.
train "$SCRATCH/c" 2
C=$(run_id "$SCRATCH/c")
[[ $C =~ ^[0-9a-f]{32}$ && $C != "$A" ]] || fail "run c has no identity of its own: '$C'"
refused "the checkpoint .*/a/ckpt/step_00000004 belongs to run $A, but run.dir .*/c is run $C" \
  "$SCRATCH/c" 5 --resume auto --checkpoint-dir "$SCRATCH/a/ckpt"
after=$(cd "$SCRATCH/a/ckpt" && find . -type f -exec sha256sum {} + | sort; cat latest)
[[ "$before" == "$after" ]] || fail "run a's checkpoints changed"

# Run a resumes its own checkpoints and stays run a.
train "$SCRATCH/a" 5 --resume auto
grep -q "resumed from .*step_00000004 at step 4" "$SCRATCH/a.log" || fail "run a did not resume"
[[ $(run_id "$SCRATCH/a") == "$A" && $(index_id "$SCRATCH/a/ckpt/step_00000005") == "$A" ]] ||
  fail "the resumed run changed its identity"

# A new folder continuing run a's checkpoint takes run a's identity.
train "$SCRATCH/d" 6 --resume "$SCRATCH/a/ckpt"
[[ $(run_id "$SCRATCH/d") == "$A" ]] || fail "a continuation in a new folder did not keep run a's identity"

# A config.toml given with --config is a record: the new run gets an identity of its own.
train "$SCRATCH/e" 1 --config "$SCRATCH/a/config.toml" --checkpoint-dir "$SCRATCH/e/ckpt"
E=$(run_id "$SCRATCH/e")
[[ $E =~ ^[0-9a-f]{32}$ && $E != "$A" ]] || fail "--config carried run a's identity into a new run: '$E'"

# --overwrite replaces a run folder whose checkpoints went to a folder of its own inside it
# (--checkpoint-dir), that folder included; the new run has a new identity.
train "$SCRATCH/f" 2 --checkpoint-dir "$SCRATCH/f/mine"
F=$(run_id "$SCRATCH/f")
train "$SCRATCH/f" 1 --checkpoint-dir "$SCRATCH/f/mine" --overwrite
[[ -e "$SCRATCH/f/mine/step_00000001" && ! -e "$SCRATCH/f/mine/step_00000002" ]] ||
  fail "--overwrite did not replace the checkpoints in f/mine"
[[ $(run_id "$SCRATCH/f") != "$F" && $(index_id "$SCRATCH/f/mine/step_00000001") == $(run_id "$SCRATCH/f") ]] ||
  fail "the replacing run kept the old identity"

# A checkpoint from before run ids: the run_id attribute removed (its marker's index sum renewed).
cp -r "$SCRATCH/c" "$SCRATCH/old"
/usr/bin/python3 - "$SCRATCH/old/ckpt/step_00000002" <<'PY'
import h5py, re, sys, zlib
d = sys.argv[1]
with h5py.File(f"{d}/index.h5", "r+") as f:
    del f.attrs["run_id"]
data = open(f"{d}/index.h5", "rb").read()
text = re.sub(r"index\.h5 size \d+ crc32 [0-9a-f]{8}",
              "index.h5 size %d crc32 %08x" % (len(data), zlib.crc32(data) & 0xFFFFFFFF), open(f"{d}/COMPLETE").read())
open(f"{d}/COMPLETE", "w").write(text)
PY
sed -i '/^\[run\]/,$ {/^id = /d}' "$SCRATCH/old/config.toml"
train "$SCRATCH/old" 3 --resume auto
grep -q "note: the checkpoint .*step_00000002 records no run id (written before run ids): it is taken as this run's" \
  "$SCRATCH/old.log" || { cat "$SCRATCH/old.log"; fail "no note for a checkpoint without a run id"; }
grep -q "resumed from .*step_00000002 at step 2" "$SCRATCH/old.log" || fail "the old checkpoint was not resumed"
echo ok
