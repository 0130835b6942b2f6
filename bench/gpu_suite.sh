#!/usr/bin/env bash
# The GPU acceptance suite: one command on a machine with a GPU, the bundle (or a build) and python3
# with torch, transformers and h5py. Writes results.md and every run's log and metrics into --out.
#   1. the environment: GPU, memory, driver, CUDA, NCCL, torch;
#   2. correctness, on a random GQA Llama in Hugging Face format:
#      a. a world-1 NCCL run (fp32, TF32 off) equals the CPU run, 10 steps;
#      b. shardtrain's bf16 logits and loss equal transformers' on the same GPU;
#      c. 50 bf16 training steps on the GPU follow the CPU fp32 loss curve;
#   3. shardtrain preflight --device cuda;
#   4. speed and memory against PyTorch FSDP2 (bench/gpu_vs_pytorch.sh: 7B shape, 4 layers, bf16,
#      seq 2048 and 4096, activation checkpointing off and on, batch 4);
#   5. memory at full 7B scale: the most Llama-2 7B layers each trainer fits on this GPU for full
#      fine-tuning (AdamW, bf16 compute, fp32 master, activation checkpointing, batch 1, seq 2048).
# Exit status 1 when a correctness check (2, 3) fails.
#
#   bench/gpu_suite.sh --out DIR                 # on the GPU machine: bin/shardtrain of the bundle
#   bench/gpu_suite.sh --out DIR --device cpu    # smoke test: small shapes, GPU-only steps skipped
# Env: SHARDTRAIN_BIN, PYTHON (see bench/env.sh), BENCH_STEPS (speed steps, 20).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=cuda out=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "gpu_suite.sh: --out DIR is required" >&2; exit 2; }
case "$device" in cuda|cpu) ;; *) echo "gpu_suite.sh: --device must be cuda or cpu, got '$device'" >&2; exit 2 ;; esac
mkdir -p "$out" && out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
helper=("$py" "$repo/bench/gpu_suite.py")
failures=0 results=$out/results.md
progress() { echo "[gpu_suite +${SECONDS}s] $*"; }
record() { echo "$*" >> "$results"; }
skip() { progress "skipped: $*"; record "- skipped: $*"; }
check() {  # NAME CMD...: a correctness check; its one-line verdict goes into results.md
  local name=$1; shift
  progress "$name"
  local line; line=$("$@" 2>> "$out/suite.err" | tail -1)
  local rc=${PIPESTATUS[0]}
  [ -n "$line" ] || line="FAIL: $name produced no verdict (see suite.err)"
  [ "$rc" = 0 ] || failures=$((failures + 1))
  record "- $line"; progress "$line"
}
st() {  # LOG ARGS...: shardtrain, its output to LOG; the exit code is returned
  local log=$1; shift
  "$bin" "$@" > "$out/$log" 2>&1
}

: > "$results"
record "# shardtrain GPU suite ($(date -u +%Y-%m-%d), device $device)"
record ""
record "## 1. Environment"
progress "environment"
"${helper[@]}" env >> "$results" 2>> "$out/suite.err" || { echo "gpu_suite.sh: $py cannot import torch" >&2; exit 2; }
record "- $("$bin" --version 2>&1 | head -1) ($bin)"
manifest=$(dirname "$(dirname "$bin")")/share/shardtrain/MANIFEST
[ -f "$manifest" ] && record "- bundle: $(sed -n 1,2p "$manifest" | paste -sd';' -)"

record ""
record "## 2. Correctness"
mkdir -p "$out/data"
st prepare-128.log prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/train.jsonl" \
  --output "$out/data/train-128.h5" --seq-len 128 --mode packing || { cat "$out/prepare-128.log"; exit 1; }
"${helper[@]}" make-model "$out/model" > "$out/make-model.log" 2>&1 || { cat "$out/make-model.log"; exit 1; }
progress "$(cat "$out/make-model.log" | tail -1)"
train=(train --weights "$out/model" --data "$out/data/train-128.h5" --batch-size 4 --lr 1e-3 --warmup-steps 0
       --log-every 10 --collective-timeout 0 --seed 5)
ref_steps=50; [ "$device" = cuda ] || ref_steps=10  # the smoke test only checks that the reference runs
progress "CPU fp32 reference: $ref_steps steps"
st cpu-fp32.log "${train[@]}" --device cpu --param-dtype fp32 --steps "$ref_steps" --metrics-file "$out/cpu-fp32.jsonl" \
  || { failures=$((failures + 1)); record "- FAIL: the CPU reference run failed (cpu-fp32.log)"; }
if [ "$device" = cuda ]; then
  progress "world-1 NCCL, fp32 without TF32: 10 steps"
  st cuda-fp32.log "${train[@]}" --device cuda --param-dtype fp32 --no-tf32 --steps 10 --metrics-file "$out/cuda-fp32.jsonl"
  # fp32 on both sides; only the kernels' summation order differs.
  check "2a. world-1 NCCL fp32 vs CPU fp32" "${helper[@]}" curves "$out/cuda-fp32.jsonl" "$out/cpu-fp32.jsonl" \
    --name "2a. world-1 NCCL (fp32, no TF32) vs CPU fp32" --first 10 --max-rel 1e-3 --tail-rel 1e-3
else
  skip "2a. world-1 NCCL vs CPU (GPU only)"
fi
dtype=fp32 tol=1e-5
[ "$device" = cuda ] && dtype=bf16 tol=2e-2  # bf16 keeps 8 significant bits: ~0.4% per rounding, a few % of RMS over 4 layers
st eval-logits.log eval --weights "$out/model" --data "$out/data/train-128.h5" --batch-size 4 --max-batches 1 \
  --device "$device" --param-dtype "$dtype" --save-logits "$out/shardtrain-logits.h5"
check "2b. logits vs transformers" "${helper[@]}" logits "$out/model" "$out/shardtrain-logits.h5" \
  --device "$device" --dtype "$dtype" --tol "$tol"
if [ "$device" = cuda ]; then
  progress "GPU bf16: 50 steps"
  st cuda-bf16.log "${train[@]}" --device cuda --param-dtype bf16 --steps 50 --metrics-file "$out/cuda-bf16.jsonl"
  # The bound: bf16 rounds activations and the compute copy of the weights to 8 significant bits
  # (2^-9 relative), while the fp32 master keeps updates exact, so the curves differ by the
  # per-step rounding noise (under 1% here) and do not drift apart: 3% per step, 1.5% on the
  # mean of the last 10 steps.
  check "2c. 50 bf16 GPU steps vs the CPU fp32 curve" "${helper[@]}" curves "$out/cuda-bf16.jsonl" "$out/cpu-fp32.jsonl" \
    --name "2c. 50 bf16 GPU steps vs the CPU fp32 curve" --first 50 --max-rel 0.03 --tail-rel 0.015
else
  skip "2c. 50 bf16 GPU steps vs the CPU fp32 curve (GPU only; the CPU reference ran: cpu-fp32.jsonl)"
fi

record ""
record "## 3. Preflight"
progress "preflight --device $device"
if st preflight.log preflight --device "$device" --max-bytes 256M; then
  record "- PASS: \`shardtrain preflight --device $device\`: $(grep -m1 -iE 'preflight: ' "$out/preflight.log")"
else
  failures=$((failures + 1)); record "- FAIL: \`shardtrain preflight --device $device\` (preflight.log)"
fi
[ "$device" = cuda ] || record "- (device cpu: the NCCL sweep is the GPU run's)"

record ""
record "## 4. Speed and memory against PyTorch FSDP2"
progress "bench/gpu_vs_pytorch.sh (device $device)"
if OUT=$out/speed BENCH_DEVICE=$device BENCH_APPEND_DOCS=0 SHARDTRAIN_BIN=$bin PYTHON=$py \
   bash "$repo/bench/gpu_vs_pytorch.sh" > "$out/speed.log" 2>&1; then
  tail -n +2 "$out/speed/results.md" >> "$results"
else
  record "- the speed comparison failed (speed.log)"; tail -5 "$out/speed.log"
fi

record ""
record "## 5. Memory at full Llama-2 7B scale (one GPU, full fine-tuning)"
if [ "$device" = cuda ]; then
  data=$out/speed/bench-2048.h5
  [ -f "$data" ] || st prepare-2048.log prepare --tokenizer "$repo/data/demo/tokenizer.model" \
    --input "$repo/data/demo/train.jsonl" --output "$data" --seq-len 2048 --mode packing
  gib=$("$py" -c 'import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))')
  # 16 B per parameter (fp32 master, gradient, AdamW m and v): ~3.0 GiB per 7B layer, ~3.9 GiB for
  # the embedding and head; the search starts two layers above that estimate.
  start=$(( (gib * 90 / 100 - 4) * 100 / 302 + 2 )); [ "$start" -le 32 ] || start=32
  for side in shardtrain pytorch; do
    fit="" over=""
    for ((layers = start; layers >= 1 && layers > start - 6; layers--)); do
      log=mem-$side-$layers.log
      progress "7B memory: $side with $layers layers"
      if [ "$side" = shardtrain ]; then
        timeout 300 "$bin" train --model llama2-7b --n-layers "$layers" --data "$data" --device cuda --param-dtype bf16 \
          --batch-size 1 --steps 3 --activation-checkpointing --collective-timeout 0 \
          --metrics-file "$out/mem-$side-$layers.jsonl" > "$out/$log" 2>&1
      else
        timeout 300 "$py" "$repo/bench/fsdp2_reference.py" --data "$data" --layers "$layers" --batch-size 1 --steps 3 \
          --skip 1 --ac --device cuda --dtype bf16 > "$out/$log" 2>&1
      fi
      rc=$?
      verdict=$("${helper[@]}" fits "$out/$log" --rc "$rc")
      if [ "$verdict" = fits ]; then
        if [ "$side" = shardtrain ]; then peak=$("$py" "$repo/bench/metrics_median.py" "$out/mem-$side-$layers.jsonl" memory.gpu_peak_allocated_bytes 1)
        else peak=$(tail -1 "$out/$log" | "$py" -c 'import json, sys; print(json.loads(sys.stdin.read())["peak_allocated_bytes"])'); fi
        fit="$layers (peak allocated $("$py" -c "print('%.1f GiB' % ($peak / 2**30))"))"
        break
      fi
      over="$layers ($verdict)"
    done
    record "- $side: largest that fits: ${fit:-none of $start..$((start - 5))} layers$([ -n "$over" ] && echo "; $over layers does not")"
    [ "$start" = 32 ] && [ "$fit" = 32 ] && record "  (all 32 layers of Llama-2 7B fit)"
  done
else
  skip "5. full 7B memory (GPU only)"
fi

record ""
record "Correctness failures: $failures. Logs and metrics: $out"
progress "done in ${SECONDS}s, $failures correctness failures; $results"
cat "$results"
[ "$failures" = 0 ]
