#!/usr/bin/env bash
# launch/dit_mp.sbatch on a real SLURM: a single-machine cluster from Debian's packages (munge,
# slurmctld, slurmd; tests/slurm/cluster.sh) with 8 CPUs declared on this machine's cores, and:
#   1. sbatch of a tiny model (tp 2 pp 2 dp 2, 8 tasks): completes, metrics/checkpoint/samples there;
#   2. preemption: `scancel --signal=USR1 --batch` -> checkpoint, requeue, resume, and the finished
#      run's losses bit-identical to job 1's, every step once (0 steps lost);
#   3. a time limit with --signal=B:USR1@70 (--time=2): the warning stops it the same way, it is
#      requeued and resumes; a plain scancel then ends it without a requeue;
#   4. a job step whose rank gets kill -9: the job is FAILED within 30 s (accounting is off in this
#      cluster, so the state is read from `scontrol show job`; sacct needs slurmdbd).
# Without root or the packages the whole test skips (exit 77) saying why.
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/cluster.sh"
SBATCH_SCRIPT=$(cd "$(dirname "$0")/../.." && pwd)/launch/dit_mp.sbatch
chmod 755 "$SCRATCH"
trap 'slurm_stop; [[ -n ${KEEP_SCRATCH:-} ]] || rm -rf "$SCRATCH"' EXIT
if ! slurm_start "$SCRATCH/slurm" 8; then
  echo "SKIP: cannot start a SLURM cluster here: $SLURM_WHY"
  exit 77
fi
prepare_fashion_test
cd "$SCRATCH"
cat > tiny.toml <<TOML
[model]
input_size = 32
in_channels = 1
num_classes = 10
hidden_size = 64
depth = 2
num_heads = 4
patch_size = 4
[train]
global_batch = 16
micro_batch = 2
steps = 80
lr = 2e-3
log_every = 1
[data]
path = "$SCRATCH/fm_test.h5"
[sample]
num_steps = 4
per_class = 2
TOML
# The launch README's command, with the tiny config. 8 ranks share 2 cores here: OpenMPI must yield.
EXPORTS="ALL,DIT_MP=$DIT_MP,CONFIG=$SCRATCH/tiny.toml,TP=2,PP=2,OMP_NUM_THREADS=1,OMPI_MCA_mpi_yield_when_idle=1"
if ! grep -qw pmix <<<"$(srun --mpi=list 2>&1)"; then  # the script's default launcher needs SLURM's PMIx plugin
  echo "NOTE: this SLURM has no PMIx plugin (srun --mpi=list): the jobs launch with LAUNCHER=mpirun instead"
  EXPORTS="$EXPORTS,LAUNCHER=mpirun,MPIRUN_BIND=none,OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
fi
submit() {  # submit NAME [SBATCH OPTIONS]: prints the job id
  local name=$1
  shift
  sbatch --parsable --job-name="$name" --ntasks-per-node=8 --cpus-per-task=1 --gpus-per-node=0 \
    --export="$EXPORTS" "$@" "$SBATCH_SCRIPT"
}
state() { scontrol show job "$1" | sed -nE 's/.*JobState=([A-Z_]+).*/\1/p'; }
field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
wait_state() {  # wait_state JOB REGEX SECONDS
  for _ in $(seq $(($3 * 10))); do
    local st
    st=$(state "$1")
    [[ $st =~ ^($2)$ ]] && return 0
    [[ $st =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]] && break
    sleep 0.1
  done
  echo "--- job $1 log:"; tail -30 "$SCRATCH"/*-"$1".out
  fail "job $1 is $(state "$1"), not $2"
}
wait_rows() {  # wait_rows RUN_DIR N SECONDS
  for _ in $(seq $(($3 * 10))); do
    [[ -f $1/metrics.jsonl ]] && (($(wc -l < "$1/metrics.jsonl") >= $2)) && return 0
    sleep 0.1
  done
  squeue
  local f
  for f in "$SCRATCH"/*.out; do echo "--- $f"; grep -v "^  \|^step \|^[a-z_0-9]* = " "$f" | tail -n 12; done
  fail "$1 has fewer than $2 steps after $3 s"
}
same_losses() {  # same_losses REFERENCE RUN [ALL]: steps each once; losses bit-identical
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-}" <<'PY'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
run = [json.loads(l) for l in open(sys.argv[2])]
steps = [r["step"] for r in run]
assert steps == list(range(1, len(run) + 1)), f"steps not each exactly once: {steps}"
if sys.argv[3]:
    assert len(run) == len(ref), (len(run), len(ref))
n = min(len(ref), len(run))
for a, b in zip(ref[:n], run[:n]):
    assert a["loss"] == b["loss"], (a["step"], a["loss"], b["loss"])
print(f"  {sys.argv[2]}: steps 1-{len(run)} each once; steps 1-{n} bit-identical to the uninterrupted job")
PY
}
requeued() {  # requeued JOB SECONDS: the job was requeued (it starts again after cred_expire, 10 s)
  for _ in $(seq $(($2 * 10))); do
    (($(field "$1" Restarts) >= 1)) && break
    sleep 0.1
  done
  if (($(field "$1" Restarts) < 1)); then
    echo "--- job $1 log:"; grep -v "^  \|^step \|^[a-z_0-9]* = " "$SCRATCH"/*-"$1".out | tail -n 15
    echo "--- slurmctld on job $1:"; grep -E "JobId=$1( |$)" "$SLURM_STATE/log/slurmctld.log" | tail -n 15
    fail "job $1 was not requeued (state $(state "$1"))"
  fi
  echo "   job $1 requeued at $(date -u +%T), eligible at $(field "$1" EligibleTime)"
}

# 1. A plain job.
t0=$SECONDS
a=$(submit plain)
wait_state "$a" COMPLETED 120
grep -q "^rank map (tp 2 pp 2 dp 2" plain-"$a".out || fail "job 1 printed no rank map"
[[ $(wc -l < runs/plain/metrics.jsonl) == 80 && -f runs/plain/samples.png && -f runs/plain/ema.h5 ]] ||
  fail "job 1 lacks metrics, samples or weights"
[[ $(cat runs/plain/ckpt/latest) == step_00000080 ]] || fail "job 1's checkpoint is $(cat runs/plain/ckpt/latest)"
echo "1. sbatch: job $a completed in $((SECONDS - t0)) s; metrics, checkpoint, weights and samples written"

# 2. Preemption by scancel --signal=USR1 --batch, requeue, resume, finish.
t0=$SECONDS
b=$(submit preempted)
wait_rows runs/preempted 2 60  # early: a loaded machine may take seconds to deliver the signal
scancel --signal=USR1 --batch "$b"
requeued "$b" 60
wait_state "$b" COMPLETED 120
grep -q "stopping after step [0-9]* of 80: received SIGUSR1" preempted-"$b".out || fail "job 2 did not stop on USR1"
k=$(sed -nE 's/.*stopping after step ([0-9]+) of 80.*/\1/p' preempted-"$b".out)
for _ in $(seq 100); do grep -q "resumed from .*$(printf step_%08d "$k") at step $k" preempted-"$b".out && break; sleep 0.1; done
grep -q "resumed from .*$(printf step_%08d "$k") at step $k" preempted-"$b".out ||
  { grep -v "^  \|^step \|^[a-z_0-9]* = " preempted-"$b".out; fail "job 2 did not resume at step $k"; }
same_losses runs/plain runs/preempted all || fail "job 2's losses differ from job 1's"
echo "2. preemption: job $b stopped after step $k, requeued, resumed at step $k, finished ($((SECONDS - t0)) s); 0 steps lost"

# 3. The time limit's warning, then, once requeued and resumed, a plain scancel ends it. slurmctld
# sends the warning at its first limit check (every 30 s) that finds the job within the margin plus
# 30 s of its end (send_job_warn_signal): with --time=2 and @70, when the job is 20-50 s old, and
# at least 70 s before the limit. A margin within 30 s of the limit (--time=2 @110) would send it
# at the job's first check, possibly before the batch step exists, and SLURM then drops it.
t0=$SECONDS
c=$(submit timelimit --time=2 --signal=B:USR1@70 --export="$EXPORTS,OVERRIDES=--steps 100000")
wait_rows runs/timelimit 2 60
requeued "$c" 120
scontrol update JobId="$c" TimeLimit=10
wait_state "$c" RUNNING 60
k=$(sed -nE 's/.*stopping after step ([0-9]+) of 100000: received SIGUSR1.*/\1/p' timelimit-"$c".out)
[[ -n $k ]] || fail "job 3 did not stop on the time limit's USR1"
for _ in $(seq 600); do grep -q "resumed from .* at step $k" timelimit-"$c".out && break; sleep 0.1; done
wait_rows runs/timelimit $((k + 5)) 60
scancel "$c"
wait_state "$c" "CANCELLED|COMPLETED|FAILED" 60
sleep 1
(($(field "$c" Restarts) == 1)) || fail "job 3 was requeued again after a plain scancel"
same_losses runs/plain runs/timelimit || fail "job 3's losses differ from job 1's"
echo "3. time limit: job $c warned by USR1, stopped after step $k, requeued, resumed; scancel ended it without requeue ($((SECONDS - t0)) s)"

# 4. kill -9 of one rank of a job step.
d=$(submit killed --export="$EXPORTS,OVERRIDES=--steps 100000")
wait_rows runs/killed 5 60
victim=""
for p in $(pgrep -f "dit_mp train .*runs/killed" || true); do
  env_of=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null || true)
  grep -Eqx "(SLURM_PROCID|OMPI_COMM_WORLD_RANK)=3" <<< "$env_of" && victim=$p
done
[[ -n $victim ]] || { pgrep -af "dit_mp train" || true; fail "no rank 3 found"; }
t0=$(date +%s.%N)
kill -9 "$victim"
wait_state "$d" "FAILED" 30
took=$(echo "$(date +%s.%N) - $t0" | bc)
echo "   sacct: $(sacct -j "$d" 2>&1 | sed -n 1p) -> state from scontrol: JobState=$(state "$d") ExitCode=$(field "$d" ExitCode)"
grep -E "task 3|rank 3" killed-"$d".out | sed -n "1,2s/^/   /p"
echo "4. kill -9 of rank 3: job $d FAILED after $took s"
python3 -c "import sys; assert float(sys.argv[1]) < 30" "$took" || fail "took $took s"
echo ok
