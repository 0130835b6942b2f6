#!/usr/bin/env bash
# Scaling sweep: submits slurm/train.sbatch at 1, 2, 4, ... nodes with the same per-rank batch,
# waits for every job, reads tokens/s from each run's metrics and writes a table and a PNG chart
# of throughput and scaling efficiency against nodes (shardtrain scaling).
#
#   slurm/sweep.sh --nodes "1 2 4 8 16" --out sweep-7b -- --profile p5 --model llama2-7b \
#                  --data /fsx/data/train.h5 --steps 50 -- --param-dtype bf16 --batch-size 1
#   slurm/sweep.sh --nodes "1 2" --simulate-ranks-per-node 2 --out sweep-cpu -- --profile cpu --model tiny --data train.h5 --steps 12
#
# --simulate-ranks-per-node K runs "N nodes" as N*K ranks on one machine (train --ranks-per-node K).
# Everything after -- goes to slurm/train.sbatch; --sbatch-args adds sbatch options to every job.
set -euo pipefail
SHARDTRAIN_HOME=${SHARDTRAIN_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
nodes="1 2 4 8" out= simulate=0 tasks_per_node=8 sbatch_args=() skip_steps=2
usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --simulate-ranks-per-node) simulate=$2; shift 2 ;;
    --ntasks-per-node) tasks_per_node=$2; shift 2 ;;
    --sbatch-args) read -r -a sbatch_args <<<"$2"; shift 2 ;;
    --skip-steps) skip_steps=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "error: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "error: --out DIR is required (the sweep's table, chart and runs go there)" >&2; exit 2; }
for n in $nodes; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "error: --nodes '$nodes': counts must be positive integers" >&2; exit 2; }; done
source "$SHARDTRAIN_HOME/launch/common.sh"
bin=${SHARDTRAIN_BIN:-$(shardtrain_default_bin)}
mkdir -p "$out"; out=$(cd "$out" && pwd)

declare -A job_of
for n in $nodes; do
  run_dir="$out/nodes-$n"
  rm -rf "$run_dir"; mkdir -p "$run_dir"
  if [ "$simulate" -gt 0 ]; then
    layout=(--nodes=1 --ntasks=$((n * simulate)) --ntasks-per-node=$((n * simulate)))
    extra=(--ranks-per-node "$simulate")
  else
    layout=(--nodes="$n" --ntasks-per-node="$tasks_per_node")
    extra=()
  fi
  job=$(cd "$SHARDTRAIN_HOME" && sbatch --parsable --job-name="sweep-$n" --output="$run_dir/slurm-%j.out" \
        "${layout[@]}" "${sbatch_args[@]}" slurm/train.sbatch --out-dir "$run_dir" "${extra[@]}" "$@")
  job=${job%%;*}
  job_of[$n]=$job
  echo "[sweep] $n nodes: job $job -> $run_dir"
done

# Wait until no job of the sweep is pending or running (requeued ones come back as pending).
for job in "${job_of[@]}"; do
  while [ -n "$(squeue -h -j "$job" -o %T 2>/dev/null)" ]; do sleep 2; done
done

runs=()
failed=0
for n in $nodes; do
  run_dir="$out/nodes-$n"
  rc=$(cat "$run_dir/exit_code" 2>/dev/null || echo "missing")
  if [ "$rc" != 0 ] || [ ! -s "$run_dir/metrics.jsonl" ]; then
    echo "[sweep] $n nodes (job ${job_of[$n]}) did not finish: exit code $rc; see $run_dir/slurm-${job_of[$n]}.out" >&2
    failed=1
    continue
  fi
  runs+=(--run "$n:$run_dir/metrics.jsonl")
done
[ "$failed" = 0 ] || exit 1
"$bin" scaling "${runs[@]}" --skip-steps "$skip_steps" --out-dir "$out" --title "shardtrain scaling: ${nodes// /, } nodes"
echo "[sweep] table: $out/scaling.md, chart: $out/scaling.png"
