#!/usr/bin/env bash
# Meaning is compared once (issue 34, cases 6 and 12): the settings that say what a model's numbers
# are (io/saved_meaning.h) are compared between a teacher and its student, and between a checkpoint
# and the run resuming it, before anything runs: one line naming the setting, both values and both
# files, no run folder left. A 500-step teacher for a 1000-step student, a resume that changes
# diffusion.steps or the objective, and a patch-2 teacher for a patch-4 student learning its
# features (train at a fixed layout, --layout auto and plan --fit alike) are refused; the same
# patch-2 teacher teaching by its output alone is served.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
prepare_fashion_test
D=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --tp 1 --pp 1 --log-every 1)
"$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/t500" --set diffusion.steps=500 > "$SCRATCH/t500.log" 2>&1 ||
  { cat "$SCRATCH/t500.log"; fail "the 500-step teacher"; }
"$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/p2" --set model.patch_size=2 > "$SCRATCH/p2.log" 2>&1 ||
  { cat "$SCRATCH/p2.log"; fail "the patch-2 teacher"; }
refused() {  # refused REGEX NAME COMMAND...: fails with one line on stderr matching REGEX, no run folder NAME
  local regex=$1 name=$2 err
  shift 2
  if timeout 120 "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err"; then fail "accepted: $*"; fi
  err=$(cat "$SCRATCH/$name.err")
  grep -Eq -- "$regex" <<<"$err" || fail "$name: stderr lacks /$regex/: $err"
  [[ $(wc -l < "$SCRATCH/$name.err") -eq 1 ]] || fail "$name: expected one line on stderr: $err"
  [[ ! -e "$SCRATCH/$name" ]] || fail "$name: a refused run left its folder"
  echo "ok: $name"
}
# Case 6: a teacher of another schedule length.
refused "diffusion.steps = 1000 in the student's config but 500 in the teacher .*t500/ema.h5: a teacher and its student must agree on diffusion.steps" \
  s500 "$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/s500" --teacher "$SCRATCH/t500/ema.h5"
# Case 6: a resume that changes diffusion.steps (or the objective) is refused; unchanged, it resumes.
"$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/r" --checkpoint-every 1 > "$SCRATCH/r.log" 2>&1 || { cat "$SCRATCH/r.log"; fail "run r"; }
cp -r "$SCRATCH/r" "$SCRATCH/r_keep"
if "$DIT_MP" "${D[@]}" --steps 3 --run-dir "$SCRATCH/r" --resume auto --set diffusion.steps=500 \
     > "$SCRATCH/r500.out" 2> "$SCRATCH/r500.err"; then fail "a resume at diffusion.steps = 500 went on"; fi
grep -q "diffusion.steps = 500 in this run's config but 1000 in the checkpoint .*r/ckpt/step_00000002: a resumed run keeps what its checkpoint's numbers mean; resume with diffusion.steps = 1000" \
  "$SCRATCH/r500.err" || fail "the changed schedule's message: $(cat "$SCRATCH/r500.err")"
[[ $(wc -l < "$SCRATCH/r500.err") -eq 1 ]] || fail "expected one line: $(cat "$SCRATCH/r500.err")"
diff -r "$SCRATCH/r" "$SCRATCH/r_keep" > /dev/null || fail "the refused resume changed the run folder"
if "$DIT_MP" "${D[@]}" --steps 3 --run-dir "$SCRATCH/r" --resume auto --objective flow --sampler euler \
     --set model.learn_sigma=false > "$SCRATCH/rflow.out" 2> "$SCRATCH/rflow.err"; then fail "a resume as flow went on"; fi
grep -Eq "model.learn_sigma = false in this run's config but true in the checkpoint|diffusion.objective = \"flow\" in this run's config but \"ddpm\"" \
  "$SCRATCH/rflow.err" || fail "the changed objective's message: $(cat "$SCRATCH/rflow.err")"
"$DIT_MP" "${D[@]}" --steps 3 --run-dir "$SCRATCH/r" --resume auto > "$SCRATCH/r3.log" 2>&1 ||
  { cat "$SCRATCH/r3.log"; fail "the unchanged resume"; }
grep -q "resumed from .*step_00000002 at step 2" "$SCRATCH/r3.log" || fail "the unchanged resume did not resume"
# Settings unused by the run's kind are not compared (issue 53): data.latent_scale on pixel data,
# diffusion.steps under the flow objective (its t is continuous).
"$DIT_MP" "${D[@]}" --steps 4 --run-dir "$SCRATCH/r" --resume auto --set data.latent_scale=0.5 > "$SCRATCH/r4.log" 2>&1 ||
  { cat "$SCRATCH/r4.log"; fail "a resume of pixel data with another data.latent_scale was refused"; }
grep -q "resumed from .*step_00000003 at step 3" "$SCRATCH/r4.log" || fail "the data.latent_scale resume did not resume"
FLOW=(--objective flow --sampler euler --set model.learn_sigma=false)
"$DIT_MP" "${D[@]}" "${FLOW[@]}" --steps 1 --run-dir "$SCRATCH/f" > "$SCRATCH/f.log" 2>&1 || { cat "$SCRATCH/f.log"; fail "run f"; }
"$DIT_MP" "${D[@]}" "${FLOW[@]}" --steps 2 --run-dir "$SCRATCH/f" --resume auto --set diffusion.steps=500 \
  > "$SCRATCH/f2.log" 2>&1 || { cat "$SCRATCH/f2.log"; fail "a flow run's resume with another diffusion.steps was refused"; }
grep -q "resumed from .*step_00000001 at step 1" "$SCRATCH/f2.log" || fail "the flow resume did not resume"
echo "ok: diffusion.steps on flow and data.latent_scale on pixels are not compared"
# Case 12: a patch-2 teacher for a patch-4 student's feature loss, at a fixed layout, under
# --layout auto and in plan --fit: refused before any search or step, naming the patch sizes.
P12="model.patch_size = 4 in the student's config but 2 in the teacher .*p2/ema.h5: the feature loss \(distill.feature_weight > 0\) pairs the tokens of both"
refused "$P12" kd_fixed $MPIRUN -n 2 "$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/kd_fixed" --teacher "$SCRATCH/p2/ema.h5"
refused "$P12" kd_auto $MPIRUN -n 2 "$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/kd_auto" --teacher "$SCRATCH/p2/ema.h5" \
  --layout auto --memory-gib 4
refused "$P12" kd_plan "$DIT_MP" plan --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --tp 1 --pp 1 --set distill.teacher=\""$SCRATCH/p2/ema.h5"\" --fit 4 --gpus 2 \
  --hardware cpu
# Output KD alone needs no common tokens: the same teacher serves, the student trains.
$MPIRUN -n 2 "$DIT_MP" "${D[@]}" --steps 2 --run-dir "$SCRATCH/kd_out" --teacher "$SCRATCH/p2/ema.h5" \
  --set distill.feature_weight=0 > "$SCRATCH/kd_out.log" 2>&1 || { cat "$SCRATCH/kd_out.log"; fail "output KD from a patch-2 teacher"; }
echo ok
