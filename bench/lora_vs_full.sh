#!/usr/bin/env bash
# LoRA against full fine-tuning at the benchmark shape (bench/cpu_vs_pytorch.sh's: 4 layers,
# hidden 512, ffn 1376, 8 heads, vocab 4096, seq 256, batch 4 per rank), same strategy, same
# data, same threads: persistent bytes per rank (from the metrics: base + adapters' master and
# AdamW state for LoRA; fp32 master and AdamW state for full) and the median step's tokens/s.
# LoRA is r=8 on q_proj,v_proj (llama-recipes' default). Runs interleave REPS times.
#
#   bash bench/lora_vs_full.sh          # writes OUT/results.md
# Env: REPS (3), STEPS (8), SKIP (2), WORLD (2), SHARDING (full_shard), PARAM_DTYPE (bf16), OUT, SHARDTRAIN_BIN, PYTHON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=${OUT:-$repo/build/bench-lora}
reps=${REPS:-3} steps=${STEPS:-8} skip=${SKIP:-2} world=${WORLD:-2} sharding=${SHARDING:-full_shard}
cores=$(nproc)
shape=(--model tiny --n-layers 4 --hidden-size 512 --intermediate-size 1376 --n-heads 8 --n-kv-heads 8 --vocab-size 4096)
batch=4 seq=256
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$(bench_data "$out" "$seq")
dtype=${PARAM_DTYPE:-bf16}  # bf16 compute (fp32 master), as on GPUs; fp32 to compare the CPU default
stat() { "$py" "$repo/bench/metrics_median.py" "$1" "$2" "$skip"; }

run() {  # TAG EXTRA... -> "tokens/s persistent_bytes base_bytes adapter_bytes"
  local tag=$1 m="$out/$1.jsonl"
  shift
  rm -f "$m"
  mpirun --oversubscribe -np "$world" --bind-to none "$bin" train "${shape[@]}" --data "$data" --device cpu \
    --threads $((cores / world)) --batch-size $batch --steps "$steps" --lr 3e-4 --warmup-steps 0 --log-every 100 \
    --param-dtype "$dtype" --sharding "$sharding" --metrics-file "$m" --collective-timeout 0 "$@" > "$out/$tag.log" 2>&1
  echo "$(stat "$m" tokens_per_s) $(stat "$m" memory.persistent_bytes) $(stat "$m" memory.base_bytes) $(stat "$m" memory.adapter_bytes)"
}

full=() lora=()
for r in $(seq 1 "$reps"); do
  full+=("$(run "full-$r")")
  lora+=("$(run "lora-$r" --lora-rank 8 --lora-targets q_proj,v_proj)")
  echo "rep $r: full ${full[-1]} | lora ${lora[-1]}"
done
"$py" - "$reps" "$world" "$sharding" "$dtype" "${full[@]}" "${lora[@]}" > "$out/results.md" <<'PY'
import statistics as s, sys
n, world, sharding, dtype = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
rows = [list(map(float, x.split())) for x in sys.argv[5:]]
full, lora = rows[:n], rows[n:]
med = lambda rs, k: s.median(r[k] for r in rs)
kib = lambda b: "%.0f KiB" % (b / 1024)
print(f"| {world} ranks, {sharding}, {dtype} compute, CPU | full fine-tuning | LoRA r=8 q,v | LoRA / full |")
print("|---|---|---|---|")
print(f"| persistent bytes per rank | {kib(med(full, 1))} | {kib(med(lora, 1))} (base {kib(med(lora, 2))}, adapters {kib(med(lora, 3))}) | {med(lora, 1) / med(full, 1):.3f} |")
print(f"| tokens/s (median step, median of {n}) | {med(full, 0):.0f} | {med(lora, 0):.0f} | {med(lora, 0) / med(full, 0):.2f} |")
PY
cat "$out/results.md"
