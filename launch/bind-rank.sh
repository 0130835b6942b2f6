#!/usr/bin/env bash
# Binds this rank to its share of this node's cores, then runs "$@". The plan is made here, on the
# rank's own node (launch/binding.sh): its topology, GPUs and Slurm allocation, whichever host
# launched the job. OMP_NUM_THREADS becomes the rank's physical cores (the trainer's --threads 0
# takes it). The launcher exports SHARDTRAIN_RANKS_PER_NODE and SHARDTRAIN_GPUS_PER_NODE (0: CPU
# ranks); each node's first rank prints the node's plan. A plan can also be given whole
# (SHARDTRAIN_RANK_CPUS="list0;list1;..." and SHARDTRAIN_RANK_THREADS). A rank it cannot bind runs
# unbound and says so.
rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-}}
[[ "$rank" =~ ^[0-9]+$ ]] || exec "$@"
cpus='' threads=${SHARDTRAIN_RANK_THREADS:-}
if [ -n "${SHARDTRAIN_RANK_CPUS:-}" ]; then
  IFS=';' read -r -a lists <<<"$SHARDTRAIN_RANK_CPUS"
  cpus=${lists[rank]:-}
elif [ -n "${SHARDTRAIN_RANKS_PER_NODE:-}" ]; then
  # shellcheck source=launch/binding.sh
  source "$(dirname "${BASH_SOURCE[0]}")/binding.sh"
  ranks=${OMPI_COMM_WORLD_LOCAL_SIZE:-$SHARDTRAIN_RANKS_PER_NODE}
  if [ "$rank" = 0 ]; then
    binding_compute "$ranks" "${SHARDTRAIN_GPUS_PER_NODE:-0}" >/dev/null
    echo "${BINDING_SUMMARY/binding:/binding on $HOSTNAME:}" >&2
  else
    binding_compute "$ranks" "${SHARDTRAIN_GPUS_PER_NODE:-0}" >/dev/null 2>&1
  fi
  cpus=${RANK_CPUS[rank]:-} threads=${CORES_PER_RANK:-}
fi
if [ -n "$cpus" ]; then
  # Bind this shell, which exec hands to "$@"; a cpu outside the step's cpuset must not kill the rank.
  if taskset -c -p "$cpus" $$ >/dev/null 2>&1; then
    [ -n "$threads" ] && export OMP_NUM_THREADS=$threads
  else
    echo "bind-rank: local rank $rank: cannot bind to cpus $cpus (outside this job step's cpus?); running unbound" >&2
  fi
fi
exec "$@"
