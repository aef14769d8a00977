#!/usr/bin/env bash
# Checkpoints from the command line, one variant per test: resume.sh [VARIANT]. A run stopped
# part-way and resumed continues bit for bit where nothing changes the arithmetic, and within 1e-5
# relative of the uninterrupted run where the resume reshards (another layout or schedule).
#   layouts      (cli.resume) stopped at step 3 at tp 2 pp 2 dp 2: resumed at the same layout bit
#                for bit, at (ranks, tp, pp) = (1,1,1), (8,4,1), (4,1,4), (8,2,1) within 1e-5;
#                `inspect` verifies the checkpoint.
#   fp16         (cli.resume_fp16) fp16 dynamic loss scaling survives a checkpoint: with a scale
#                that starts too large and doubles after 2 clean steps, the run skips some steps and
#                applies others; stopped at step 6 and resumed, it continues bit for bit (losses, the
#                scale and the skipped count of every step), which needs the scale AND its count of
#                clean steps restored. The CPU's fp16 storage with host-staged comms.
#   interleaved  (cli.resume_interleaved) a rank's parameters span several model chunks, saved and
#                loaded by PyTorch name: pp 2 with 2 virtual stages stopped at step 2 resumes bit for
#                bit at the same layout, within 1e-5 at pp 2 without virtual stages and on one rank;
#                a checkpoint written without virtual stages resumes with them.
#   zero_bubble  (cli.resume_zero_bubble) across pipeline schedules: a 1F1B run at pp 2 stopped at
#                step 2 resumes under ZB-H1 (the same F/B order, each backward split into B and a
#                later W) bit for bit, under ZB-V (two chunks per rank in a V) within 1e-5; a ZB-V
#                checkpoint resumes under 1F1B. Checkpoints hold parameters by PyTorch name.
#   zero         (cli.resume_zero) across ZeRO levels: a run at optim.zero = 3, dp 4, stopped at step
#                2, resumes at zero 3 and at zero 1 bit for bit (the levels sum alike), at zero 1 at
#                tp 2 dp 2 within 1e-5; a zero 1 checkpoint resumes at zero 2 bit for bit.
#   fallback     (cli.resume_fallback) a damaged index.h5 (one byte flipped) is caught by the
#                checksum COMPLETE records, before HDF5 parses it: `inspect` names it in one line,
#                and `--resume auto` falls back to the newest checkpoint that loads, saying which one
#                it skipped and why; a COMPLETE without that checksum is refused until vouched for.
source "$(dirname "$0")/common.sh"
variant=${1:-layouts}
prepare_fashion_test

# run DIR STEPS RANKS TP PP [ARGS...]: trains into DIR (its log: DIR.log) with the variant's R.
run() {
  local dir=$1 steps=$2 n=$3 tp=$4 pp=$5
  shift 5
  $MPIRUN -n "$n" "$DIT_MP" --tp "$tp" --pp "$pp" "$@" --steps "$steps" --run-dir "$dir" "${R[@]}" \
    > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}

# resume_at NAME FROM SAME RANKS TP PP [ARGS...]: copies the run FROM (stopped at step $PART) to
# $SCRATCH/NAME and resumes it there at the layout given, to step $STEPS. Checked: it resumed from
# step $PART, logged steps 1..$STEPS, and its steps after $PART equal $SCRATCH/full's: SAME=1 bit
# for bit in every one of $KEYS; SAME=0 the loss within 1e-5 relative.
resume_at() {
  local name=$1 from=$2 same=$3
  shift 3
  local d=$SCRATCH/$name
  cp -r "$from" "$d"
  run "$d" "$STEPS" "$@" --resume auto
  grep -q "resumed from .*step_$(printf %08d "$PART") at step $PART" "$d.log" ||
    fail "$d did not resume from step $PART"
  python3 - "$SCRATCH/full/metrics.jsonl" "$d/metrics.jsonl" "$PART" "$STEPS" "$same" "$KEYS" <<'PY' ||
import json, sys
full = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
res = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
part, steps, same, keys = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6].split(",")
assert sorted(res) == list(range(1, steps + 1)), sorted(res)
for s in range(part + 1, steps + 1):
    if same:
        for k in keys:
            assert res[s][k] == full[s][k], (s, k, res[s][k], full[s][k])
    else:
        assert abs(res[s]["loss"] - full[s]["loss"]) <= 1e-5 * abs(full[s]["loss"]), (s, res[s]["loss"], full[s]["loss"])
PY
    fail "$name (resumed at $*): the steps after $PART differ from the uninterrupted run"
  local how="within 1e-5"
  [[ $same == 1 ]] && how=bit-identical
  echo "$name (resumed at $*): steps $((PART + 1))-$STEPS $how"
}

KEYS=loss
case $variant in
  layouts)
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set train.warmup=0 --set model.depth=4)
    PART=3 STEPS=6
    run "$SCRATCH/full" 6 8 2 2
    run "$SCRATCH/part" 3 8 2 2
    "$DIT_MP" inspect "$SCRATCH/part/ckpt" > "$SCRATCH/inspect.txt" || fail "inspect failed"
    grep -q "step 3" "$SCRATCH/inspect.txt" || fail "inspect does not show step 3"
    # (ranks, tp, pp): the saving layout (tp 2 pp 2 dp 2), then (1,1,1), (8,4,1), (4,1,4), (8,2,1).
    resume_at resume_8_2_2 "$SCRATCH/part" 1 8 2 2
    for layout in "1 1 1" "8 4 1" "4 1 4" "8 2 1"; do
      set -- $layout
      resume_at "resume_$1_$2_$3" "$SCRATCH/part" 0 "$1" "$2" "$3"
    done
    ;;
  fp16)
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --precision fp16
       --set train.loss_scale=4e6 --set train.loss_scale_window=2)
    PART=6 STEPS=10 KEYS=loss,loss_scale,skipped_steps,grad_norm
    run "$SCRATCH/full" 10 4 2 2
    run "$SCRATCH/part" 6 4 2 2
    "$DIT_MP" inspect "$SCRATCH/part/ckpt" > "$SCRATCH/inspect.txt" || fail "inspect failed"
    grep -q "loss scale" "$SCRATCH/inspect.txt" || fail "inspect does not show the loss scale"
    resume_at resumed "$SCRATCH/part" 1 4 2 2
    python3 - "$SCRATCH/full/metrics.jsonl" <<'PY' || fail "the run does not both skip and apply steps"
import json, sys
full = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
skipped = full[10]["skipped_steps"]
assert 0 < skipped < 10, f"{skipped} skipped steps: the test needs both skipped and applied steps"
assert full[10]["skipped_steps"] > full[6]["skipped_steps"], "no step after the checkpoint was skipped"
print(f"{skipped} of 10 steps skipped; steps 7-10 bit-identical after resuming at step 6, scales",
      [full[s]["loss_scale"] for s in range(1, 11)])
PY
    ;;
  interleaved)
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --sample-every 0)
    PART=2 STEPS=4
    run "$SCRATCH/full" 4 2 1 2 --virtual-stages 2
    run "$SCRATCH/part" 2 2 1 2 --virtual-stages 2
    grep -q "interleaved" "$SCRATCH/full.log" || fail "the log does not say the schedule is interleaved"
    resume_at resume_2_2_2 "$SCRATCH/part" 1 2 1 2 --virtual-stages 2
    resume_at resume_2_2_1 "$SCRATCH/part" 0 2 1 2 --virtual-stages 1
    resume_at resume_1_1_1 "$SCRATCH/part" 0 1 1 1 --virtual-stages 1
    # Without virtual stages -> with them.
    run "$SCRATCH/part_v1" 2 2 1 2 --virtual-stages 1
    resume_at resume_v1_to_v2 "$SCRATCH/part_v1" 0 2 1 2 --virtual-stages 2
    ;;
  zero_bubble)
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --sample-every 0)
    PART=2 STEPS=4
    run "$SCRATCH/full" 4 2 1 2 --schedule 1f1b --virtual-stages 1
    run "$SCRATCH/part" 2 2 1 2 --schedule 1f1b --virtual-stages 1
    resume_at resume_zb-h1 "$SCRATCH/part" 1 2 1 2 --schedule zb-h1 --virtual-stages 1
    resume_at resume_zb-v "$SCRATCH/part" 0 2 1 2 --schedule zb-v --virtual-stages 2
    run "$SCRATCH/part_v" 2 2 1 2 --schedule zb-v --virtual-stages 2
    resume_at resume_v_to_1f1b "$SCRATCH/part_v" 0 2 1 2 --schedule 1f1b --virtual-stages 1
    ;;
  zero)
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --sample-every 0
       --set train.micro_batch=2)
    PART=2 STEPS=4 KEYS=loss,grad_norm
    run "$SCRATCH/full" 4 4 1 1 --zero 3
    run "$SCRATCH/part" 2 4 1 1 --zero 3
    grep -q "ZeRO-3" "$SCRATCH/full.log" || fail "the log does not name ZeRO-3"
    resume_at resume_z3 "$SCRATCH/part" 1 4 1 1 --zero 3
    resume_at resume_z1 "$SCRATCH/part" 1 4 1 1 --zero 1
    resume_at resume_z1_tp2 "$SCRATCH/part" 0 4 2 1 --zero 1
    run "$SCRATCH/part_z1" 2 4 1 1 --zero 1
    resume_at resume_z1_to_z2 "$SCRATCH/part_z1" 1 4 1 1 --zero 2
    ;;
  fallback)
    export OMPI_MCA_orte_execute_quiet=1
    R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set train.checkpoint_every=1)
    run "$SCRATCH/run" 2 4 2 2
    mv "$SCRATCH/run.log" "$SCRATCH/a.log"
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
    run "$SCRATCH/run" 3 4 2 2 --resume auto
    mv "$SCRATCH/run.log" "$SCRATCH/b.log"
    grep -Eq "skipped checkpoint .*step_00000002: .*index.h5: CRC-32" "$SCRATCH/b.log" ||
      fail "no note of the skipped checkpoint: $(cat "$SCRATCH/b.log")"
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
    ;;
  *) fail "unknown variant '$variant' (expected layouts, fp16, interleaved, zero_bubble or fallback)" ;;
esac
echo ok
