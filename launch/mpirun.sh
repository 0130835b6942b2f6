#!/usr/bin/env bash
# shardtrain on bare instances (no Slurm): mpirun over a hostfile, one rank per GPU, bound to cores
# of its GPU's NUMA node (launch/binding.sh), with the profile's EFA/NCCL environment forwarded (-x). Preflight first, then training;
# a preemption checkpoint (exit 75), or a failure with --restart-on-failure, is retried with
# --resume auto up to --max-restarts times, as torchrun's --max-restarts does.
#
#   launch/mpirun.sh --hostfile hosts --profile p4de --weights /fsx/models/Llama-2-7b-hf \
#     --data /fsx/data/train.h5 --ckpt-dir /fsx/ckpt/run1 --save-model /fsx/models/run1
#   (hosts: one line per instance, "ip-10-0-0-1 slots=8")
#
# Launcher options: --hostfile F (required), --ranks-per-host N (default: the profile's GPUs per
# node, 2 for cpu), --mpirun-args "..." (added to every mpirun). The rest: see launch/common.sh.
set -uo pipefail
SHARDTRAIN_HOME=${SHARDTRAIN_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
source "$SHARDTRAIN_HOME/launch/common.sh"
hostfile= ranks_per_host= mpirun_args=() rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) hostfile=$2; shift 2 ;;
    --ranks-per-host) ranks_per_host=$2; shift 2 ;;
    --mpirun-args) read -r -a mpirun_args <<<"$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; shardtrain_usage; exit 0 ;;
    *) rest+=("$1"); shift ;;
  esac
done
shardtrain_parse "${rest[@]}"
[ -f "$hostfile" ] || { echo "error: --hostfile '$hostfile' does not exist; write one line per instance: 'HOST slots=8'" >&2; exit 2; }
shardtrain_profile
shardtrain_container
if [ -z "$ranks_per_host" ]; then ranks_per_host=$GPUS_PER_NODE; [ "$ranks_per_host" -gt 0 ] || ranks_per_host=2; fi
[[ "$ranks_per_host" =~ ^[1-9][0-9]*$ ]] || { echo "error: --ranks-per-host '$ranks_per_host' is not a positive number" >&2; exit 2; }
# launch/bind-rank.sh plans each rank's cores on its own node from these.
export SHARDTRAIN_RANKS_PER_NODE=$ranks_per_host SHARDTRAIN_GPUS_PER_NODE=$GPUS_PER_NODE
hosts=$(grep -cvE '^[[:space:]]*(#|$)' "$hostfile")
OUT_DIR=${OUT_DIR:-$PWD/runs/mpirun-$(date +%Y%m%d-%H%M%S)}
CKPT_DIR=${CKPT_DIR:-$OUT_DIR/checkpoints}
mkdir -p "$OUT_DIR" "$CKPT_DIR"
shardtrain_commands

mpirun=mpirun; [ -x "$SHARDTRAIN_HOME/bin/mpirun" ] && mpirun=$SHARDTRAIN_HOME/bin/mpirun  # the bundle's, relocated
MPIRUN=("$mpirun" --hostfile "$hostfile" -np $((hosts * ranks_per_host))
  # ppr: the same number of ranks on every host; launch/bind-rank.sh binds each to its planned cores.
  --map-by "ppr:$ranks_per_host:node" --bind-to none
  # MPI carries only the bootstrap and MPI-IO; NCCL moves the tensors over EFA.
  --mca pml ob1 --mca btl tcp,self,vader --mca btl_tcp_if_exclude lo,docker0)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
# Forward the profile's environment and the library path to every rank.
for v in LD_LIBRARY_PATH PATH $(compgen -e | grep -E '^(FI_|NCCL_|OFI_|CUDA_VISIBLE_DEVICES$|OMPI_MCA_|SHARDTRAIN_(RANKS|GPUS)_PER_NODE$)' || true); do
  [ -n "${!v+set}" ] && MPIRUN+=(-x "$v")
done
MPIRUN+=("${mpirun_args[@]}" "$SHARDTRAIN_HOME/launch/bind-rank.sh" "${LAUNCH_PREFIX[@]}" "$BIN")
log() { echo "[shardtrain $(date +%H:%M:%S)] $*"; }
log "$hosts hosts x $ranks_per_host ranks, out $OUT_DIR, checkpoints $CKPT_DIR"

if [ "$SKIP_PREFLIGHT" != 1 ] && ! shardtrain_run "${MPIRUN[@]}" "${PREFLIGHT_ARGS[@]}"; then
  log "preflight FAILED: remove the host it names from $hostfile"
  echo 1 >"$OUT_DIR/exit_code"; exit 1
fi
restarts=0
SHARDTRAIN_STOP_RELAY=USR2  # mpirun forwards USR2; a forwarded TERM is followed by SIGKILL 1 s later
while :; do
  log "train (run $restarts): ${TRAIN_ARGS[*]}"
  shardtrain_run "${MPIRUN[@]}" "${TRAIN_ARGS[@]}"
  rc=$?
  log "trainer exit code $rc"
  if [ -n "$shardtrain_stop_signal" ]; then
    log "stopped by $shardtrain_stop_signal: not restarting$([ "$rc" = 75 ] && echo "; resume with --resume auto from $CKPT_DIR")"
    break
  fi
  shardtrain_should_restart "$rc" "$restarts" || break
  restarts=$((restarts + 1))
  shardtrain_restarted
  shardtrain_commands
  log "restarting (restart $restarts of at most $MAX_RESTARTS) from $CKPT_DIR"
done
echo "$rc" >"$OUT_DIR/exit_code"
exit "$rc"
