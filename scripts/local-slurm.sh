#!/usr/bin/env bash
# A real one-node Slurm (munge + slurmctld + slurmd) on localhost, private to a directory: try
# `sbatch slurm/train.sbatch` on one machine (docs/cluster.md); the cluster tests run on it too.
# Usage: local-slurm.sh start DIR [CPUS]  -> writes DIR/env (source it: SLURM_CONF)
#        local-slurm.sh stop DIR          -> kills the daemons by their recorded PIDs
# Exit 77 (ctest: skipped) only when the Slurm packages (PACKAGES, which scripts/install-deps.sh
# installs) are not installed; it installs nothing itself.
set -euo pipefail
cmd=${1:?start or stop}; dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd); cpus=${3:-8}
PACKAGES=(slurm-wlm slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge)

stop() {
  # Jobs still running (a test left out of a partial ctest run, say) end with the cluster: killing
  # the daemons alone would leave their steps training on with no time limit to end them.
  if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$dir/slurm.conf scancel --user "$(id -un)" 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1
    done
  fi
  for d in slurmd slurmctld munged; do
    [ -f "$dir/$d.pid" ] || continue
    pid=$(cat "$dir/$d.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$d.pid"
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR [CPUS]" >&2; exit 2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "SKIP: the Slurm packages (${missing[*]}) are not installed; run scripts/install-deps.sh"
  exit 77
fi

stop  # a previous run's daemons, if any
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/log"
chmod 700 "$dir/munge"
# A private munge key and socket: nothing outside DIR is touched.
[ -f "$dir/munge/munge.key" ] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"
/usr/sbin/munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"

node=$(hostname -s)
port=$((20000 + RANDOM % 20000))
cat >"$dir/slurm.conf" <<CONF
ClusterName=shardtrain-local
SlurmctldHost=$node
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
CredType=cred/munge
SlurmUser=$(id -un)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=5
InactiveLimit=0
NodeName=$node CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
cat >"$dir/env" <<ENV
export SLURM_CONF=$dir/slurm.conf
ENV
export SLURM_CONF=$dir/slurm.conf
/usr/sbin/slurmctld -i -f "$SLURM_CONF"   # -i: ignore state from an earlier run
/usr/sbin/slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "[local-slurm] up: $(sinfo -h -o '%N %C %T') (SLURM_CONF=$SLURM_CONF; source $dir/env)"; exit 0
  fi
  sleep 0.3
done
echo "[local-slurm] the node did not become idle:" >&2
sinfo >&2 || true; tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
stop; exit 1
