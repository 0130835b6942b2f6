#!/usr/bin/env bash
# One MPI rank in its own container: the hybrid launch that Apptainer uses, with podman. The
# host's launcher (mpirun, or srun --mpi=pmix) starts this once per rank; the rank joins the job
# through the launcher's environment and its PMIx server on the host.
#   mpirun -np 2 containers/podman-exec.sh IMAGE shardtrain train --data /data/train.h5 ...
#   srun --mpi=pmix -n 2 containers/podman-exec.sh IMAGE shardtrain train ...
# Env: SHARDTRAIN_BIND   comma-separated host directories mounted at the same path (data,
#                        checkpoints, outputs); the working directory is mounted too
#      SHARDTRAIN_CONTAINER_USER  uid:gid the rank runs as (default: the invoking user's, so files
#                        on the mounts are theirs, as under Apptainer)
#      CONTAINER_ENGINE  podman (default) or docker
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: podman-exec.sh IMAGE COMMAND [ARGS...]" >&2; exit 2; }
image=$1
shift
engine=${CONTAINER_ENGINE:-podman}
opts=(run --rm --network host --ipc host --pid host --uts host
      --user "${SHARDTRAIN_CONTAINER_USER:-$(id -u):$(id -g)}" --workdir "$PWD" --volume "$PWD:$PWD")
[ "$engine" = podman ] && opts+=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
# The launcher's PMIx server and Open MPI's session directory (shared-memory files) live under
# the temporary directory; the rank must see the same files at the same paths.
# Slurm's PMIx plugin keeps its socket in the step's own directory under slurmd's spool.
for d in "${PMIX_SYSTEM_TMPDIR:-${TMPDIR:-/tmp}}" "${PMIX_SERVER_TMPDIR:-}"; do
  [ -n "$d" ] && [ -d "$d" ] && opts+=(--volume "$d:$d")
done
IFS=, read -r -a binds <<< "${SHARDTRAIN_BIND:-}"
for b in "${binds[@]}"; do
  [ -n "$b" ] || continue
  [ -d "$b" ] || { echo "error: SHARDTRAIN_BIND names '$b', which is not a directory" >&2; exit 2; }
  opts+=(--volume "$b:$b")
done
# What makes this process a rank of the job: the launcher's variables, by prefix (podman and docker
# copy a variable given by name alone from this environment).
for name in $(compgen -e); do
  case "$name" in
    OMPI_*|PMIX_*|OPAL_*|PRTE_*|SLURM_*|NCCL_*|FI_*|CUDA_VISIBLE_DEVICES|OMP_NUM_THREADS|HYDRA_*|PMI_*) opts+=(--env "$name") ;;
  esac
done
if [ -e /dev/nvidiactl ]; then
  [ "$engine" = podman ] && opts+=(--device nvidia.com/gpu=all) || opts+=(--gpus all)  # CDI / NVIDIA runtime
fi
for d in /dev/infiniband; do [ -e "$d" ] && opts+=(--device "$d"); done  # EFA's verbs devices
exec "$engine" "${opts[@]}" "$image" "$@"
