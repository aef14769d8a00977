# A real single-machine SLURM cluster from Debian's packages (munge, slurmctld, slurmd), every file
# under one state folder, for the SLURM tests. Source it, then `slurm_start DIR CPUS` (exports
# SLURM_CONF; returns non-zero with the reason in $SLURM_WHY when it cannot start) and
# `slurm_stop` (stops the daemons by their pid files). Needs root (slurmd runs jobs as their user).
# cred_expire=10: a requeued job may start again after 10 s instead of SLURM's default 120 s.

slurm_why() { SLURM_WHY=$1; return 1; }

slurm_start() {
  local dir=$1 cpus=$2 host
  SLURM_STATE=$dir
  [[ $(id -u) == 0 ]] || { slurm_why "needs root to run slurmd and munged"; return 1; }
  for b in munged slurmctld slurmd sbatch scontrol; do
    command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
      { slurm_why "$b is missing (scripts/install_deps.sh installs slurm-wlm)"; return 1; }
  done
  host=$(hostname)
  SLURM_STEPDS_BEFORE=$(pgrep -x slurmstepd | tr '\n' ' ')
  mkdir -p "$dir"/{munge,spool,state,log}
  chmod 755 "$dir"
  # munged runs as user munge; its socket folder must be 711 (700 is refused).
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown -R munge:munge "$dir/munge"
  chmod 711 "$dir/munge"
  chmod 400 "$dir/munge/munge.key"
  runuser -u munge -- /usr/sbin/munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket.2" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" ||
    { slurm_why "munged did not start: $(tail -1 "$dir/munge/munged.log" 2>/dev/null)"; return 1; }
  cat > "$dir/slurm.conf" <<CONF
ClusterName=ditci
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
SchedulerParameters=bf_interval=1,sched_interval=2
MinJobAge=600
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
# debug: the log names each time-limit warning signal it sends (the test prints it on failure)
SlurmctldDebug=debug
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  # PMIx's per-step folders live here too (under /tmp they would outlive the cluster and collide
  # with the same job ids of the next one).
  mkdir -p "$dir/pmix"
  echo "PMIxCliTmpDirBase=$dir/pmix" > "$dir/mpi.conf"
  export SLURM_CONF=$dir/slurm.conf
  /usr/sbin/slurmctld -i || { slurm_why "slurmctld did not start: $(tail -2 "$dir/log/slurmctld.log")"; return 1; }
  /usr/sbin/slurmd || { slurm_why "slurmd did not start: $(tail -2 "$dir/log/slurmd.log")"; return 1; }
  for _ in $(seq 100); do
    grep -q '^idle' <<<"$(sinfo -h -o %T 2>/dev/null)" && return 0
    sleep 0.1
  done
  slurm_why "the node did not become idle: $(sinfo -h -o '%T %E' 2>&1 | sed -n 1p)"
}

slurm_stop() {
  local f p
  [[ -n ${SLURM_STATE:-} && -f $SLURM_STATE/slurm.conf ]] || return 0
  # Jobs first: slurmstepd outlives slurmd by design, so a job left running would keep its ranks.
  scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null
  for _ in $(seq 50); do
    [[ -z $(squeue -h 2>/dev/null) ]] && break
    sleep 0.1
  done
  for f in "$SLURM_STATE/slurmd.pid" "$SLURM_STATE/slurmctld.pid" "$SLURM_STATE/munge/munged.pid"; do
    [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
  done
  for p in $(pgrep -x slurmstepd); do  # steps of this cluster that did not end (started after us)
    [[ " $SLURM_STEPDS_BEFORE " == *" $p "* ]] || kill -9 "$p" 2>/dev/null
  done
  sleep 0.5
  return 0
}
