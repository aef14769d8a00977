#!/usr/bin/env bash
# launch/dit_mp.sbatch asked to stop while it is still starting (SIGUSR1 before it has launched
# dit_mp): it must not die of the signal (bash's default action) nor start a run it was told to
# stop; it exits 75 without launching, so the job is requeued and nothing is lost. The signal is
# sent from the script's first command substitution (`date` found first on PATH), so it comes
# deterministically after the traps and before the launch.
source "$(dirname "$0")/common.sh"
SBATCH_SCRIPT=$(cd "$(dirname "$0")/../.." && pwd)/launch/dit_mp.sbatch
mkdir -p "$SCRATCH/bin"
cat > "$SCRATCH/bin/date" <<SH
#!/bin/bash
[[ -f $SCRATCH/signalled ]] || { touch $SCRATCH/signalled; kill -USR1 "\$(cat $SCRATCH/script.pid)"; sleep 0.2; }
exec /bin/date "\$@"
SH
chmod +x "$SCRATCH/bin/date"
cd "$SCRATCH"
rc=0
PATH="$SCRATCH/bin:$PATH" DIT_MP=$DIT_MP LAUNCHER=mpirun RUN_DIR="$SCRATCH/run" \
  bash -c 'echo $$ > script.pid; exec bash "$0"' "$SBATCH_SCRIPT" > out.log 2>&1 || rc=$?
[[ -f signalled ]] || fail "the signal was never sent"
[[ $rc == 75 ]] || { cat out.log; fail "the script exited with $rc, not 75"; }
grep -q "SIGUSR1: asking dit_mp to checkpoint" out.log || { cat out.log; fail "the trap did not run"; }
grep -q "asked to stop before dit_mp started: not launching it" out.log || { cat out.log; fail "no message"; }
[[ ! -e run ]] || fail "a run folder was created although the job was told to stop"
echo "ok: SIGUSR1 before the launch: exit 75, nothing launched"
