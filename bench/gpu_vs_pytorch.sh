#!/usr/bin/env bash
# Single-GPU benchmark: shardtrain against Hugging Face LlamaForCausalLM (sdpa) under torch FSDP2
# fully_shard at world size 1, in the same run, on the same GPU: the Llama-2 7B shape with
# BENCH_LAYERS layers (default 4: 1.07B parameters, full fine-tuning with AdamW), bf16 compute,
# seq 2048 and 4096, activation checkpointing off and on. Reports tokens/s, MFU and peak memory
# for both and their ratio, into OUT/results.md (and docs/performance.md with BENCH_APPEND_DOCS=1).
#
#   bash bench/gpu_vs_pytorch.sh                       # on the GPU machine, after scripts/build.sh
#   BENCH_DEVICE=cpu bash bench/gpu_vs_pytorch.sh      # smoke test of the script: tiny shape on CPU
# Env: BENCH_LAYERS, BENCH_STEPS (20), BENCH_BATCH (4: the optimizer does not dominate the step),
#      BENCH_SEQS ("2048 4096"), BENCH_AC (activation checkpointing: "off on"), OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS (1: append to docs/performance.md; default 0),
#      BENCH_COMPILE (1: a third column, PyTorch FSDP2 with torch.compile of each decoder layer),
#      BENCH_ST_VARIANTS (shardtrain flag sets separated by ';', a row each against the same PyTorch
#      runs: "--fused-layers;" gives one row with the flag and one without; default: one, no flags).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=${BENCH_DEVICE:-cuda}
out=${OUT:-$repo/build/bench-gpu}
steps=${BENCH_STEPS:-20} batch=${BENCH_BATCH:-4} skip=3
mkdir -p "$out"
if [ "$device" = cuda ]; then
  shape=(--layers "${BENCH_LAYERS:-4}")  # the 7B shape: hidden 4096, ffn 11008, 32 heads, vocab 32000
  st_model=(--model llama2-7b --n-layers "${BENCH_LAYERS:-4}")
  seqs=${BENCH_SEQS:-2048 4096} dtype=bf16
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case "$gpu" in  # dense bf16 peak by part, for MFU on both sides
    *H100*PCIe*) peak=756 ;;
    *H100*|*H200*|*GH200*) peak=989 ;;
    *A100*) peak=312 ;;
    *) echo "gpu_vs_pytorch.sh: no bf16 peak known for '$gpu'; set BENCH_PEAK_TFLOPS" >&2; peak=${BENCH_PEAK_TFLOPS:?} ;;
  esac
  peak=${BENCH_PEAK_TFLOPS:-$peak}
else  # a shape that runs in seconds on 2 cores; checks the script, measures nothing useful
  shape=(--layers 2 --hidden 128 --ffn 352 --heads 4 --kv-heads 4 --vocab 512)
  st_model=(--model tiny --n-layers 2 --hidden-size 128 --intermediate-size 352 --n-heads 4 --n-kv-heads 4)
  seqs=${BENCH_SEQS:-128} dtype=fp32 peak=1 gpu="cpu ($(nproc) cores)"
fi

compile=${BENCH_COMPILE:-0} table=("$py" "$repo/bench/speed_table.py")
reference() {  # SEQ AC [--compile]: the PyTorch side's JSON into OUT/pytorch-SEQ-AC[-compile].json
  local tag=$1-$2${3:+-compile} pyac=(); [ "$2" = on ] && pyac=(--ac)
  "$py" "$repo/bench/fsdp2_reference.py" --data "$data" "${shape[@]}" --batch-size "$batch" --steps "$steps" \
    --skip "$skip" --device "$device" --dtype "$dtype" --peak-tflops "$peak" "${pyac[@]}" ${3:+"$3"} \
    2> "$out/pytorch-$tag.log" | tail -1 > "$out/pytorch-$tag.json" || echo "PyTorch $tag failed: $out/pytorch-$tag.log" >&2
}

IFS=';' read -r -a variants <<< "${BENCH_ST_VARIANTS:-}"
[ "${#variants[@]}" -gt 0 ] || variants=("")
case "${BENCH_ST_VARIANTS:-}" in *';') variants+=("") ;; esac  # read drops a trailing empty field
rows=()
for seq in $seqs; do
  data=$(bench_data "$out" "$seq")
  for ac in ${BENCH_AC:-off on}; do
    acflag=(); [ "$ac" = on ] && acflag=(--activation-checkpointing)
    reference "$seq" "$ac"
    compiled=(); [ "$compile" = 1 ] && { reference "$seq" "$ac" --compile; compiled=("$out/pytorch-$seq-$ac-compile.json"); }
    for v in "${variants[@]}"; do
      tag=$seq-$ac$(tr -c 'a-z0-9\n' - <<< "${v:+-$v}")
      m="$out/shardtrain-$tag.jsonl"
      # shellcheck disable=SC2086 # a variant is flags, split on spaces
      "$bin" train "${st_model[@]}" --data "$data" --device "$device" --param-dtype "$dtype" --batch-size "$batch" \
        --steps "$steps" --lr 3e-5 --warmup-steps 0 --log-every 5 --metrics-file "$m" --peak-tflops "$peak" \
        --collective-timeout 0 "${acflag[@]}" $v > "$out/shardtrain-$tag.log" 2>&1 \
        || echo "shardtrain $tag failed: $out/shardtrain-$tag.log" >&2  # the row says "failed"; the others still run
      rows+=("$("${table[@]}" row "$seq" "$ac${v:+ $v}" "$m" "$skip" "$device" "$out/pytorch-$seq-$ac.json" "${compiled[@]}")")
      echo "${rows[-1]}"
    done
  done
done

{
  echo "### Single GPU: shardtrain vs PyTorch FSDP2$([ "$compile" = 1 ] && echo ', eager and torch.compile') ($gpu, $(date +%Y-%m-%d))"
  echo
  echo "\`bash bench/gpu_vs_pytorch.sh\` (device $device, ${st_model[*]}, batch $batch, $steps steps, medians after $skip; $dtype compute, fp32 master and reduction; torch $("$py" -c 'import torch; print(torch.__version__)'))."
  echo
  "${table[@]}" header $([ "$compile" = 1 ] && echo --compile)
  printf '%s\n' "${rows[@]}"
} > "$out/results.md"
cat "$out/results.md"
if [ "$device" = cuda ] && [ "${BENCH_APPEND_DOCS:-0}" = 1 ] && [ -f "$repo/docs/performance.md" ]; then
  { echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"
  echo "appended to docs/performance.md"
fi
