#!/usr/bin/env bash
# CPU benchmark, same run: shardtrain against Hugging Face LlamaForCausalLM under torch FSDP2
# fully_shard (every decoder layer and the root, gloo), at world 1 and world 2 (`mpirun -np 2`
# against `torchrun --nproc-per-node 2`), fp32, activation checkpointing off and on, on the same
# token file with the same optimizer (fused AdamW) and threads per rank. The runs interleave,
# REPS times; each run's figure is its median step after SKIP warm-up steps, and the table holds
# the medians over the repetitions. BEFORE_BIN adds an older shardtrain build as a third column.
#
#   bash bench/cpu_vs_pytorch.sh                  # writes OUT/results.md (BENCH_APPEND_DOCS=1: also docs/performance.md)
#   BEFORE_BIN=/path/old/shardtrain bash bench/cpu_vs_pytorch.sh
# Env: REPS (3), STEPS (8), SKIP (2), WORLDS ("1 2"), OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS (0).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
before=${BEFORE_BIN:-}
out=${OUT:-$repo/build/bench-cpu}
reps=${REPS:-3} steps=${STEPS:-8} skip=${SKIP:-2} worlds=${WORLDS:-1 2}
cores=$(nproc)
# The issue's shape: 4 layers, hidden 512, ffn 1376, 8 heads, vocab 4096, seq 256, batch 4 per rank.
st_model=(--model tiny --n-layers 4 --hidden-size 512 --intermediate-size 1376 --n-heads 8 --n-kv-heads 8 --vocab-size 4096)
pt_shape=(--layers 4 --hidden 512 --ffn 1376 --heads 8 --kv-heads 8 --vocab 4096)
batch=4 seq=256
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$(bench_data "$out" "$seq")

stat() { "$py" "$repo/bench/metrics_median.py" "$1" "$2" "$skip"; }  # FILE FIELD

run_shardtrain() {  # BIN WORLD AC TAG -> "tokens/s peak_rss exposed_comm_s persistent_bytes"
  local b=$1 w=$2 ac=$3 tag=$4 m="$out/$4.jsonl" acflag=()
  [ "$ac" = on ] && acflag=(--activation-checkpointing)
  rm -f "$m"
  mpirun --oversubscribe -np "$w" --bind-to none "$b" train "${st_model[@]}" --data "$data" --device cpu \
    --threads $((cores / w)) --batch-size $batch --steps "$steps" --lr 3e-4 --warmup-steps 0 --log-every 100 \
    --metrics-file "$m" --collective-timeout 0 "${acflag[@]}" > "$out/$tag.log" 2>&1
  echo "$(stat "$m" tokens_per_s) $(stat "$m" peak_mem_bytes) $(stat "$m" phases.exposed_comm) $(stat "$m" memory.persistent_bytes)"
}

run_pytorch() {  # WORLD AC TAG -> "tokens/s peak_rss"
  local w=$1 ac=$2 tag=$3 pyac=() launch=("$py")
  [ "$ac" = on ] && pyac=(--ac)
  [ "$w" -gt 1 ] && launch=("$py" -m torch.distributed.run --nproc-per-node "$w" --master-port 29541)
  OMP_NUM_THREADS=$((cores / w)) "${launch[@]}" "$repo/bench/fsdp2_reference.py" --data "$data" "${pt_shape[@]}" \
    --batch-size $batch --steps "$steps" --skip "$skip" --device cpu --dtype fp32 --peak-tflops 0 --lr 3e-4 \
    --threads $((cores / w)) "${pyac[@]}" > "$out/$tag.json" 2> "$out/$tag.log"
  "$py" -c 'import json,sys; j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(j["tokens_per_s"], j["peak_rss_bytes"])' "$out/$tag.json"
}

declare -A res
for w in $worlds; do
  for ac in off on; do
    for r in $(seq 1 "$reps"); do  # interleaved: this shared machine drifts by +-25% between runs
      res[st,$w,$ac,$r]=$(run_shardtrain "$bin" "$w" "$ac" "st-w$w-$ac-$r")
      res[pt,$w,$ac,$r]=$(run_pytorch "$w" "$ac" "pt-w$w-$ac-$r")
      [ -n "$before" ] && res[old,$w,$ac,$r]=$(run_shardtrain "$before" "$w" "$ac" "old-w$w-$ac-$r")
      echo "world $w, ac $ac, rep $r: shardtrain ${res[st,$w,$ac,$r]} | pytorch ${res[pt,$w,$ac,$r]}${before:+ | before ${res[old,$w,$ac,$r]}}"
    done
  done
done

rows=()
for w in $worlds; do
  for ac in off on; do
    st=() pt=() old=()
    for r in $(seq 1 "$reps"); do
      st+=("${res[st,$w,$ac,$r]}") pt+=("${res[pt,$w,$ac,$r]}")
      [ -n "$before" ] && old+=("${res[old,$w,$ac,$r]}")
    done
    rows+=("$("$py" - "$w" "$ac" "${#st[@]}" "${st[@]}" "${pt[@]}" "${old[@]}" <<'PY'
import statistics as s, sys
w, ac, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rest = sys.argv[4:]
st = [list(map(float, x.split())) for x in rest[:n]]
pt = [list(map(float, x.split())) for x in rest[n:2 * n]]
old = [list(map(float, x.split())) for x in rest[2 * n:]]
med = lambda rows, k: s.median(r[k] for r in rows)
mib = lambda b: "%.0f MiB" % (b / 2**20)
cells = [w, ac, "%.0f" % med(st, 0), "%.0f" % med(pt, 0), "%.2fx" % (med(st, 0) / med(pt, 0)),
         mib(med(st, 1)), mib(med(pt, 1)), "%.2fx" % (med(st, 1) / med(pt, 1)),
         "%.3f s" % med(st, 2), mib(med(st, 3))]
if old:
    cells += ["%.0f" % med(old, 0), "%.2fx" % (med(st, 0) / med(old, 0)), mib(med(old, 1)), "%.3f s" % med(old, 2)]
print("| " + " | ".join(cells) + " |")
PY
)")
    echo "${rows[-1]}"
  done
done

{
  echo "## CPU: shardtrain vs PyTorch FSDP2, $(date +%Y-%m-%d) on $(hostname) ($cores cores)"
  echo
  echo "\`bash bench/cpu_vs_pytorch.sh\`: ${st_model[*]:2}, seq $seq, batch $batch per rank, fp32, fused AdamW on both sides,"
  echo "$((cores)) threads in all; $reps interleaved repetitions of $steps steps, each the median after $skip warm-up steps; the"
  echo "table gives the medians of the repetitions. Peak RSS is rank 0's. torch $("$py" -c 'import torch; print(torch.__version__)')."
  echo
  if [ -n "$before" ]; then
    echo "| world | act. ckpt | shardtrain tok/s | PyTorch FSDP2 tok/s | ratio | shardtrain peak RSS | PyTorch peak RSS | RSS ratio | shardtrain exposed comm / step | shardtrain persistent state | before tok/s | speed-up | before peak RSS | before exposed comm |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  else
    echo "| world | act. ckpt | shardtrain tok/s | PyTorch FSDP2 tok/s | ratio | shardtrain peak RSS | PyTorch peak RSS | RSS ratio | shardtrain exposed comm / step | shardtrain persistent state |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  fi
  printf '%s\n' "${rows[@]}"
} > "$out/results.md"
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then
  { echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"
  echo "appended to docs/performance.md"
fi
