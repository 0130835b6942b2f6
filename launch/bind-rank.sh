#!/usr/bin/env bash
# Runs "$@" on this local rank's cpus, as planned by launch/binding.sh (binding_compute), which
# exports SHARDTRAIN_RANK_CPUS ("list0;list1;...") and SHARDTRAIN_RANK_THREADS. A launcher puts it
# before the binary: mpirun ... --bind-to none bind-rank.sh BIN ..., srun --cpu-bind=none bind-rank.sh BIN ...
# With no list for this rank it runs "$@" unchanged.
rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-}}
IFS=';' read -r -a lists <<<"${SHARDTRAIN_RANK_CPUS:-}"
cpus=
[[ "$rank" =~ ^[0-9]+$ ]] && cpus=${lists[rank]:-}
if [ -n "$cpus" ]; then
  # Bind this shell, which exec hands to "$@"; a cpu outside the step's cpuset must not kill the rank.
  if taskset -c -p "$cpus" $$ >/dev/null 2>&1; then
    [ -n "${SHARDTRAIN_RANK_THREADS:-}" ] && export OMP_NUM_THREADS=$SHARDTRAIN_RANK_THREADS
  else
    echo "bind-rank: local rank $rank: cannot bind to cpus $cpus (outside this job step's cpus?); running unbound" >&2
  fi
fi
exec "$@"
