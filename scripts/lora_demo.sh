#!/usr/bin/env bash
# The LoRA demo (docs/lora.md): full fine-tuning of the tiny Llama-2 on one demo task (reverse
# the digits), then LoRA on another (sort the digits) with the base frozen. Prints the sort
# task's exact match before and after, and checks that the base's weights are byte-identical
# before and after the LoRA run. CPU only; run scripts/demo.sh (or install-deps + build) first.
#   Env: DEMO_OUT (out/lora-demo), DEMO_RANKS (2), BASE_STEPS (1000), LORA_STEPS (2000), LORA_LR (1e-2).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BUILD_DIR:-$repo/build}/src/shardtrain
py=${PYTHON:-$repo/.venv/bin/python}
out=${DEMO_OUT:-$repo/out/lora-demo}
data=$repo/data/demo
ranks=${DEMO_RANKS:-2}
mpi=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
mkdir -p "$out"
start=$SECONDS

echo "== split data/demo by task: reverse (the base's) and sort (the adapter's)"
for split in train val; do
  grep -F '"Reverse the digits."' "$data/$split.jsonl" > "$out/reverse.$split.jsonl"
  grep -F '"Sort the digits in ascending order."' "$data/$split.jsonl" > "$out/sort.$split.jsonl"
done
for task in reverse sort; do
  "$bin" prepare --tokenizer "$data/tokenizer.model" --input "$out/$task.train.jsonl" --val-input "$out/$task.val.jsonl" \
    --format alpaca --mode padding --seq-len 64 --output "$out/$task.h5" > /dev/null
done
common=(--config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --sharding full_shard --tokenizer "$data/tokenizer.model")

echo "== 1. base: full fine-tuning on reverse (${BASE_STEPS:-1000} steps)"
"${mpi[@]}" "$bin" train "${common[@]}" --steps "${BASE_STEPS:-1000}" --data "$out/reverse.h5" --val-data "$out/reverse.val.h5" \
  --accuracy-file "$out/reverse.val.jsonl" --val-every 500 --log-every 500 --save-model "$out/base" 2>&1 | grep -E "val_loss|saved"
before=$(sha256sum "$out/base/model.safetensors" | cut -d' ' -f1)

echo "== 2. LoRA r=16 on all seven projections, on sort (${LORA_STEPS:-2000} steps); the base stays frozen"
"${mpi[@]}" "$bin" train "${common[@]}" --steps "${LORA_STEPS:-2000}" --weights "$out/base" --data "$out/sort.h5" \
  --val-data "$out/sort.val.h5" --accuracy-file "$out/sort.val.jsonl" --val-every 200 --log-every 200 --lr "${LORA_LR:-1e-2}" \
  --lora-rank 16 --lora-alpha 32 --lora-dropout 0.05 \
  --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj \
  --metrics-file "$out/lora-metrics.jsonl" --save-model "$out/adapter" 2>&1 | grep -E "lora  |val_loss|saved"
after=$(sha256sum "$out/base/model.safetensors" | cut -d' ' -f1)
[ "$before" = "$after" ] && echo "base weights byte-identical before and after the LoRA run (sha256 $before)" \
  || { echo "the base changed: $before -> $after"; exit 1; }

echo "== 3. eval on sort: the base alone, then the base with the adapter (--lora)"
for lora in "" "--lora $out/adapter"; do
  "$bin" eval --weights "$out/base" --data "$out/sort.val.h5" --accuracy-file "$out/sort.val.jsonl" \
    --tokenizer "$data/tokenizer.model" --accuracy-samples 0 --max-new-tokens 12 $lora | sed -n 2p
done
echo "== LoRA demo finished in $((SECONDS - start)) s"
