#!/usr/bin/env bash
# The pruning and distillation table (docs/distill.md): on the demo (configs/fashion_mnist.toml,
# tp 2 x pp 4 on 8 ranks), a teacher twice the demo's depth is trained; half of its blocks are kept
# by each pruning method (index: every second block; score: cos; score: loss) and each student is
# recovered for the same steps by plain fine-tuning, output KD (distill.feature_weight = 0) and
# masked KD (the [distill] defaults); beside them the student's model trained from scratch for the
# teacher's minutes plus a student's. Every model is judged by `dit_mp evaluate` (100 samples per
# class, the EMA weights). One line per row goes to OUT/summary.tsv: name, training minutes (wall
# clock), images/s, evaluation minutes, class accuracy, FID, floor FID, FID / floor, precision,
# recall, sampling images/s, and what the row is. The learned method (TinyFusion's gated training,
# LEARN_STEPS at tp 2 x pp 4) writes its minutes to OUT/learned.minutes; its LoRA variant (row
# `lora`: rank LORA_RANK adapters train instead of the weights, at LORA_LR) to OUT/lora.minutes.
#
#   benchmarks/distill.sh [OUT] [ROW...]   (default OUT: sweep_distill; default: every row)
#   TEACHER_STEPS=8000 STUDENT_STEPS=2000 DEPTH=8 benchmarks/distill.sh   (the defaults; LEARN_STEPS: a quarter
#   of STUDENT_STEPS)
#
# Run it on an otherwise idle machine: the minutes are what each row cost there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIT_MP=${DIT_MP:-$root/build/bin/dit_mp}
OUT=${1:-sweep_distill}
shift || true
TEACHER_STEPS=${TEACHER_STEPS:-8000}
STUDENT_STEPS=${STUDENT_STEPS:-2000}
DEPTH=${DEPTH:-8}
LEARN_STEPS=${LEARN_STEPS:-$((STUDENT_STEPS / 4))}
LORA_RANK=${LORA_RANK:-8}
LORA_LR=${LORA_LR:-1e-4}
HALF=$((DEPTH / 2))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 DIT_PLOTS=0
mkdir -p "$OUT"
[[ -f "$OUT/summary.tsv" ]] ||
  printf "row\ttrain_min\timg_per_s\teval_min\tclass_acc\tfid\tfloor_fid\tfid_over_floor\tprecision\trecall\tsample_img_per_s\twhat\n" \
    > "$OUT/summary.tsv"

train() {  # train DIR STEPS [ARGS...]: the demo at tp 2 x pp 4; prints the wall minutes
  local dir=$1 steps=$2
  shift 2
  local t0
  t0=$(date +%s.%N)
  mpirun -q -np 8 -x OMP_NUM_THREADS=1 "$DIT_MP" --config "$root/configs/fashion_mnist.toml" --tp 2 --pp 4 \
    --overwrite --run-dir "$dir" --steps "$steps" "$@" > "$dir.train.log" 2>&1 || { tail -3 "$dir.train.log" >&2; exit 1; }
  python3 -c "import sys, time; print(f'{(time.time() - float(sys.argv[1])) / 60:.1f}')" "$t0"
}

judge() {  # judge NAME DIR TRAIN_MIN WHAT: evaluate and append a summary row
  local name=$1 dir=$2 minutes=$3 what=$4 t0 t1
  t0=$(date +%s.%N)
  "$DIT_MP" evaluate --run "$dir" --per-class 100 > "$dir.eval.log" 2>&1 || { tail -3 "$dir.eval.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$dir" "$name" "$minutes" "$t0" "$t1" "$what" >> "$OUT/summary.tsv" <<'PY'
import json, re, sys
run, name, minutes = sys.argv[1], sys.argv[2], float(sys.argv[3])
t0, t1 = map(float, sys.argv[4:6])
r = json.load(open(f"{run}/eval.json"))
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"images_per_s"' in l]
s, f = r["samples"], r["floor"]
img_s = sum(x["images_per_s"] for x in rows) / len(rows) if rows else float("nan")
# Sampling speed: the 1000 evaluation samples over the sampling time evaluate reports.
log = open(f"{run}.eval.log").read()
m = re.findall(r"sampling 1000 images: step \d+/\d+\s+(?:(\d+)h)?(?:(\d+)m)?(\d+)s elapsed", log)
sample_s = 3600 * int(m[-1][0] or 0) + 60 * int(m[-1][1] or 0) + int(m[-1][2]) if m else float("nan")
print(f"{name}\t{minutes:.1f}\t{img_s:.1f}\t{(t1 - t0) / 60:.1f}\t{100 * s['class_accuracy']:.1f}\t{s['fid']:.2f}\t"
      f"{f['fid']:.2f}\t{s['fid'] / f['fid']:.1f}\t{s['precision']:.3f}\t{s['recall']:.3f}\t"
      f"{1000 / sample_s if sample_s > 0 else float('nan'):.1f}\t{sys.argv[6]}")
PY
  tail -1 "$OUT/summary.tsv"
}

rows=("$@")
((${#rows[@]})) || rows=(teacher prune learned lora index_finetune index_kd index_masked cos_finetune cos_kd cos_masked
                         loss_finetune loss_kd loss_masked learned_finetune learned_kd learned_masked lora_masked scratch)
every_second=$(seq -s, 1 2 $((DEPTH - 1)))  # blocks 1, 3, 5, ...: each pair's second, as TinyFusion's 2i + 1
for row in "${rows[@]}"; do
  case $row in
    teacher)
      m=$(train "$OUT/teacher" "$TEACHER_STEPS" --set model.depth="$DEPTH")
      echo "$m" > "$OUT/teacher.minutes"
      judge teacher "$OUT/teacher" "$m" "depth $DEPTH, $TEACHER_STEPS steps" ;;
    prune)
      "$DIT_MP" prune --run "$OUT/teacher" --depth "$HALF" --method index --keep "$every_second" \
        --out "$OUT/pruned_index.h5" > "$OUT/prune_index.log"
      "$DIT_MP" prune --run "$OUT/teacher" --depth "$HALF" --method score --out "$OUT/pruned_cos.h5" > "$OUT/prune_cos.log"
      "$DIT_MP" prune --run "$OUT/teacher" --depth "$HALF" --method score --score loss --out "$OUT/pruned_loss.h5" \
        > "$OUT/prune_loss.log"
      grep -h "kept blocks" "$OUT"/prune_*.log ;;
    learned | lora)  # TinyFusion's learned pruning on the demo's layout: LEARN_STEPS of gated training
      extra=()
      [[ $row == learned ]] || extra=(--lora "$LORA_RANK" --lr "$LORA_LR")  # full updates, or LoRA's
      t0=$(date +%s.%N)
      mpirun -q -np 8 -x OMP_NUM_THREADS=1 "$DIT_MP" prune --run "$OUT/teacher" --depth "$HALF" --method learned \
        --tp 2 --pp 4 --steps "$LEARN_STEPS" "${extra[@]}" --out "$OUT/pruned_$row.h5" > "$OUT/prune_$row.log" 2>&1 ||
        { tail -3 "$OUT/prune_$row.log" >&2; exit 1; }
      python3 -c "import sys, time; print(f'{(time.time() - float(sys.argv[1])) / 60:.1f}')" "$t0" \
        > "$OUT/$row.minutes"
      grep -h "kept blocks" "$OUT/prune_$row.log" ;;
    *_finetune | *_kd | *_masked)
      method=${row%_*} recovery=${row#*_}
      sets=(--init-from "$OUT/pruned_$method.h5" --set model.depth="$HALF")
      case $recovery in
        kd) sets+=(--set distill.teacher=\""$OUT/teacher/ema.h5"\" --set distill.feature_weight=0) ;;
        masked) sets+=(--set distill.teacher=\""$OUT/teacher/ema.h5"\") ;;
      esac
      m=$(train "$OUT/$row" "$STUDENT_STEPS" "${sets[@]}")
      label=$method
      [[ $method != lora ]] || label="learned with LoRA rank $LORA_RANK"
      judge "$row" "$OUT/$row" "$m" "depth $HALF pruned by $label, $STUDENT_STEPS steps of $recovery" ;;
    scratch)  # the teacher's steps at half the depth cost about half as much: 2 x teacher + student steps
      steps=$((2 * TEACHER_STEPS + STUDENT_STEPS))
      m=$(train "$OUT/scratch" "$steps" --set model.depth="$HALF")
      judge scratch "$OUT/scratch" "$m" "depth $HALF from scratch, $steps steps" ;;
    *) echo "distill.sh: no row '$row'" >&2; exit 2 ;;
  esac
done
