#!/usr/bin/env bash
# The GPU acceptance suite: one command on a machine with a GPU, the bundle (or a build) and python3
# with torch, transformers and h5py. Writes results.md and every run's log and metrics into --out.
# It comes in parts (--parts, comma-separated), each sized for one 10-minute device call:
#   check    1. the environment: GPU, memory, driver, CUDA, NCCL, torch;
#            2. correctness, on a random GQA Llama in Hugging Face format:
#               a. a world-1 NCCL run (fp32, TF32 off) equals the CPU run: 10 steps within 1e-4;
#               b. shardtrain's fp32 and bf16 logits and loss equal transformers' on the same GPU;
#               c. 50 bf16 training steps on the GPU follow the CPU fp32 loss curve;
#               d. and PyTorch FSDP2's (fully_shard, bf16 MixedPrecisionPolicy, same weights, rows);
#               e. the GPU run's checkpoint, read on the CPU, exports the GPU run's own export;
#               f. that export loads in transformers with shardtrain's logits;
#            3. shardtrain preflight --device cuda;
#   tests    6. the build's GPU tests (tests/cpp/cuda, GoogleTest: NCCL at world 1 against the CPU,
#               no sticky error after a not-ready query, the varlen kernel, the fused bf16 loss, the
#               unwaited-collective shelf, LoRA masks on the device, more ranks than GPUs refused,
#               --cpu-offload's steps against the same run without it, no host wait inside its step,
#               DPO's chunked answer log-probabilities in bf16 and its steps against the CPU's):
#               from a bundle through libexec/tests/run, in a source tree from build/tests;
#   speed    4. speed and memory against PyTorch FSDP2 (bench/gpu_vs_pytorch.sh: 7B shape, 4 layers,
#               bf16, seq 2048 and 4096, activation checkpointing off and on, batch 4);
#   profile  4b. one shardtrain step at the 7B shape (4 layers, seq 4096, batch 4) under
#               --profile-step: the top 10 kernels and the GEMM/attention/elementwise/optimizer/gap shares;
#   compile  4c. seq 4096 against PyTorch FSDP2 eager and with torch.compile of each decoder layer;
#   kernels  4d. each faster path against the plain one it replaced, on its own: the fused, chunked
#               loss (bench/fused_loss.sh) and grouped-query attention (bench/gqa_attention.py);
#            4e. activation checkpointing none, selective and full: memory and step time
#               (bench/activation_checkpointing.sh);
#   fused    4f. decoder layers with and without --fused-layers (fused RMSNorm, merged q/k/v and
#               gate/up matmuls, the rotary and SwiGLU kernels) at seq 4096, checkpointing off,
#               against PyTorch FSDP2 eager and with torch.compile, and a profile of a fused step;
#   offload  4g. shardtrain train --cpu-offload against PyTorch FSDP2 with CPUOffloadPolicy: 12 Llama-2
#               7B layers (BENCH_OFFLOAD_LAYERS), random init, AdamW, bf16, seq 2048, batch 4, activation
#               checkpointing: tokens/s, peak GPU memory, peak host memory (resident set high-water mark);
#   fp8      4h. --fp8 tensorwise and rowwise against bf16: the 7B shape (4 layers), seq 4096, batch 4,
#               200 steps each (BENCH_FP8_STEPS) from the same random init: tokens/s, peak GPU memory,
#               and the mean loss of the last 20 steps within 1% of bf16's (a correctness check);
#               then the column-wise cast's time against the GEMM it feeds (GpuFp8.Times*);
#   ring     4i. context parallelism's ring attention blocks (test_gpu --gtest_filter='GpuRing*'):
#               block_attention through flash's kernel, the memory-efficient kernel (masked blocks:
#               documents, sliding windows) and the math path against SDPA in bf16 and fp16 (GQA),
#               halves merged by their log-sum-exp, the backward against autograd (a correctness
#               check), and each path's forward and backward time on a 7B layer's blocks at 8192
#               tokens over 2 ranks, packed and sliding, as a multiple of the unmasked flash block;
#               under a minute; on the CPU the tests skip, saying so;
#   moe      4j. a Qwen3-30B-A3B-shaped slice (2 layers, 128 experts of 768, 8 per token, bf16, seq
#               4096, batch 1) on one GPU: shardtrain train against transformers' own Qwen3MoeForCausalLM
#               forward and backward (bench/moe_reference.py, fp32 master weights under bf16 autocast,
#               torch AdamW) in the same call: tokens/s and peak memory;
#   scale    5. full Llama-2 7B: a random 7B saved as the Hub ships it (bf16, sharded safetensors and
#               index) loaded by each trainer for full fine-tuning (AdamW, bf16 compute, fp32 master):
#               the configurations (activation checkpointing, seq, batch) that fit, smallest first,
#               up to the first that runs out of memory;
#   layers   5b. the most Llama-2 7B layers each trainer fits (random init, checkpointing, seq 2048, batch 1).
# next     the first of NEXT_CALLS below, the one list of the work no GPU has run yet: each call a set
#          of parts sized for one 6-minute device call, in priority order (correctness first);
#          next2, next3, ... the later ones. Work built on CPU adds its part to a call; a GPU run
#          that passes takes it out.
# The environment is always recorded. Default parts: check,tests,speed,profile,scale,layers. Exit
# status 1 when a correctness check (2, 3, 6) fails, and on the CPU smoke test when any part fails to run.
# Big scratch files (the 7B weights) go to --work (default: a new temporary folder), not --out.
# On a GPU no attempt of scale, layers, offload and fp8 starts after SUITE_DEADLINE seconds (570; 330
# in a next call, which has 6 minutes), or runs past it, so that one part fits a 600-second call.
# The CPU smoke test checks that each part runs, not how fast: it has no deadline, and its benches
# take their smallest shapes.
#
#   bench/gpu_suite.sh --out DIR                 # on the GPU machine: bin/shardtrain of the bundle
#   bench/gpu_suite.sh --out DIR --parts speed   # one part
#   bench/gpu_suite.sh --out DIR --parts next    # the first call of what no GPU has run yet
#   bench/gpu_suite.sh --out DIR --parts next2   # the second
#   bench/gpu_suite.sh --out DIR --device cpu    # smoke test: small shapes, GPU-only steps skipped
# Env: SHARDTRAIN_BIN, PYTHON (see bench/env.sh), BENCH_STEPS (speed steps, 20), SUITE_DEADLINE,
#      BENCH_OFFLOAD_LAYERS (offload's layers, 12), BENCH_FP8_STEPS (fp8's steps, 200).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=cuda out= parts=check,tests,speed,profile,scale,layers work= deadline=${SUITE_DEADLINE:-570}
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "gpu_suite.sh: --out DIR is required" >&2; exit 2; }
# The parts whose code changed since the last GPU run, as calls of at most 6 minutes each, in the
# order they run: correctness first. The last GPU run (2026-12-04, one H200) passed check and
# tests (the ring's and DPO's tests among them) and ran fused, fp8 and the ring's timings; since
# then the step time read once the device has finished (Gpu.StepTimeCoversTheDevicesPhases, in
# tests), the offload thread's device (GpuOffload.HostThreadRunsOnTheEnginesDevice), the masked
# blocks' kernel (GpuRing.Masked*, DocumentAndWindowMasksFollowSdpa; ring's timings) and the
# column-wise fp8 cast split across the grid (GpuFp8.CastKernelsWriteTheCompositeBits; fp8's
# cast timing) and tensorwise fp8's float8 all-gather codec (fp8's codec timing). CPU offload's
# part, offload, has never run on a GPU; nor have the mixture of experts' grouped GEMM (GpuMoe, in
# tests), NCCL's all-to-all of expert parallelism (GpuMoe.AllToAll*, in tests) and its part, moe.
NEXT_CALLS=("check,tests" "ring,fp8" "offload" "moe")
if [[ $parts =~ ^next([0-9]*)$ ]]; then
  call=${BASH_REMATCH[1]:-1}
  [ "$call" -ge 1 ] && [ "$call" -le ${#NEXT_CALLS[@]} ] \
    || { echo "gpu_suite.sh: --parts $parts: there are ${#NEXT_CALLS[@]} next calls (next, next2 .. next${#NEXT_CALLS[@]})" >&2; exit 2; }
  parts=${NEXT_CALLS[call - 1]} deadline=${SUITE_DEADLINE:-330}
  export BENCH_FP8_STEPS=${BENCH_FP8_STEPS:-100} BENCH_STEPS=${BENCH_STEPS:-12}  # speed parts cut to fit
fi
case "$device" in cuda|cpu) ;; *) echo "gpu_suite.sh: --device must be cuda or cpu, got '$device'" >&2; exit 2 ;; esac
for p in ${parts//,/ }; do
  case "$p" in check|tests|speed|profile|compile|kernels|fused|offload|fp8|ring|moe|scale|layers) ;;
    *) echo "gpu_suite.sh: --parts: unknown part '$p' (check, tests, speed, profile, compile, kernels, fused, offload, fp8, ring, moe, scale, layers; or next, next2, .. alone)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$parts," == *",$1,"* ]]; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=${work:-$(mktemp -d)}; mkdir -p "$work"
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
broken() {  # on the CPU smoke test every part must run: a failed run there is the script's bug
  [ "$device" = cpu ] && failures=$((failures + 1)); return 0
}
st() {  # LOG ARGS...: shardtrain, its output to LOG; the exit code is returned
  local log=$1; shift
  "$bin" "$@" > "$out/$log" 2>&1
}

: > "$results"
record "# shardtrain GPU suite ($(date -u +%Y-%m-%d), device $device, parts $parts)"
record ""
record "## 1. Environment"
progress "environment"
"${helper[@]}" env >> "$results" 2>> "$out/suite.err" || { echo "gpu_suite.sh: $py cannot import torch" >&2; exit 2; }
record "- $("$bin" --version 2>&1 | head -1) ($bin)"
manifest=$(dirname "$(dirname "$bin")")/share/shardtrain/MANIFEST
[ -f "$manifest" ] && record "- bundle: $(sed -n 1,2p "$manifest" | paste -sd';' -)"


part_check() {
  record ""
  record "## 2. Correctness"
  mkdir -p "$out/data"
  st prepare-128.log prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/train.jsonl" \
    --output "$out/data/train-128.h5" --seq-len 128 --mode packing || { cat "$out/prepare-128.log"; exit 1; }
  "${helper[@]}" make-model "$out/model" > "$out/make-model.log" 2>&1 || { cat "$out/make-model.log"; exit 1; }
  progress "$(tail -1 "$out/make-model.log")"
  local train=(train --weights "$out/model" --data "$out/data/train-128.h5" --batch-size 4 --lr 1e-3 --warmup-steps 0
               --log-every 10 --collective-timeout 0 --seed 5)
  local ref_steps=50; [ "$device" = cuda ] || ref_steps=10  # the smoke test only checks that the reference runs
  progress "CPU fp32 reference: $ref_steps steps"
  st cpu-fp32.log "${train[@]}" --device cpu --param-dtype fp32 --steps "$ref_steps" --metrics-file "$out/cpu-fp32.jsonl" \
    || { failures=$((failures + 1)); record "- FAIL: the CPU reference run failed (cpu-fp32.log)"; }
  if [ "$device" = cuda ]; then
    # As long as the reference: the learning-rate schedule depends on the run's length.
    progress "world-1 NCCL, fp32 without TF32: $ref_steps steps"
    st cuda-fp32.log "${train[@]}" --device cuda --param-dtype fp32 --no-tf32 --steps "$ref_steps" --metrics-file "$out/cuda-fp32.jsonl"
    record "- $(grep -m1 -o 'NCCL: .*' "$out/cuda-fp32.log" || echo 'no NCCL memory line in cuda-fp32.log')"
    # fp32 on both sides; only the kernels' summation order differs.
    check "2a. world-1 NCCL fp32 vs CPU fp32" "${helper[@]}" curves "$out/cuda-fp32.jsonl" "$out/cpu-fp32.jsonl" \
      --name "2a. world-1 NCCL (fp32, no TF32) vs CPU fp32" --first 10 --max-rel 1e-4 --tail-rel 1e-4
  else
    skip "2a. world-1 NCCL vs CPU (GPU only)"
  fi
  local dtype tol dtypes=(fp32)
  [ "$device" = cuda ] && dtypes=(fp32 bf16)
  for dtype in "${dtypes[@]}"; do
    case "$device-$dtype" in
      cpu-fp32) tol=1e-5 ;;
      cuda-fp32) tol=1e-4 ;;  # the GPU's kernels sum in another order
      cuda-bf16) tol=2e-2 ;;  # bf16 keeps 8 significant bits: ~0.4% per rounding, a few % of RMS over 4 layers
    esac
    st "eval-logits-$dtype.log" eval --weights "$out/model" --data "$out/data/train-128.h5" --batch-size 4 --max-batches 1 \
      --device "$device" --param-dtype "$dtype" --no-tf32 --save-logits "$out/shardtrain-logits-$dtype.h5"
    check "2b. logits vs transformers ($dtype)" "${helper[@]}" logits "$out/model" "$out/shardtrain-logits-$dtype.h5" \
      --device "$device" --dtype "$dtype" --tol "$tol"
  done
  if [ "$device" = cuda ]; then
    progress "GPU bf16: 50 steps, a checkpoint and a Hugging Face export at the end"
    st cuda-bf16.log "${train[@]}" --device cuda --param-dtype bf16 --steps 50 --metrics-file "$out/cuda-bf16.jsonl" \
      --checkpoint-dir "$out/ckpt" --save-model "$out/export"
    # The bound: bf16 rounds activations and the compute copy of the weights to 8 significant bits
    # (2^-9 relative), while the fp32 master keeps updates exact, so the curves differ by the
    # per-step rounding noise (under 1% here) and do not drift apart: 3% per step, 1.5% on the
    # mean of the last 10 steps.
    check "2c. 50 bf16 GPU steps vs the CPU fp32 curve" "${helper[@]}" curves "$out/cuda-bf16.jsonl" "$out/cpu-fp32.jsonl" \
      --name "2c. 50 bf16 GPU steps vs the CPU fp32 curve" --first 50 --max-rel 0.03 --tail-rel 0.015
    # PyTorch FSDP2 (fully_shard, bf16 MixedPrecisionPolicy) from the same weights on the same rows:
    # 64 rows and batch 64, so each step sees every row whatever the order; constant learning rate,
    # low enough that the loss stays far from 0 (about 1.5 after 50 steps) and relative errors mean something.
    "${helper[@]}" subset "$out/data/train-128.h5" "$out/data/rows-64.h5" --rows 64 >> "$out/suite.err" 2>&1
    local same=(--weights "$out/model" --data "$out/data/rows-64.h5" --batch-size 64 --steps 50 --lr 1e-5)
    progress "2d. 50 bf16 steps: shardtrain and PyTorch FSDP2"
    st fsdp2-shardtrain.log train "${same[@]}" --lr-schedule constant --warmup-steps 0 --device cuda --param-dtype bf16 \
      --log-every 10 --collective-timeout 0 --metrics-file "$out/fsdp2-shardtrain.jsonl"
    "$py" "$repo/bench/fsdp2_reference.py" "${same[@]}" --device cuda --dtype bf16 --losses-file "$out/fsdp2-pytorch.jsonl" \
      > "$out/fsdp2-pytorch.log" 2>&1
    check "2d. 50 bf16 steps vs PyTorch FSDP2" "${helper[@]}" curves "$out/fsdp2-shardtrain.jsonl" "$out/fsdp2-pytorch.jsonl" \
      --name "2d. 50 bf16 steps vs PyTorch FSDP2 (same weights and rows)" --first 50 --max-rel 0.03 --tail-rel 0.01
    # The GPU's checkpoint read back on the CPU (every tensor's checksum is verified), exported
    # there, and compared with the GPU run's own export; that export must load in transformers.
    progress "2e. the GPU checkpoint on the CPU, and the export in transformers"
    st convert.log convert --input "$out/ckpt" --output "$out/from-ckpt"
    check "2e. GPU checkpoint read on CPU = GPU export" "${helper[@]}" same-weights "$out/export" "$out/from-ckpt"
    st eval-export.log eval --weights "$out/export" --data "$out/data/train-128.h5" --batch-size 4 --max-batches 1 \
      --device cpu --param-dtype fp32 --save-logits "$out/export-logits.h5"
    check "2f. export vs transformers" "${helper[@]}" logits "$out/export" "$out/export-logits.h5" --device cpu --dtype fp32 --tol 1e-5
  else
    skip "2c-2f. the GPU's bf16 curve, PyTorch FSDP2's, and the GPU checkpoint on CPU (GPU only; the CPU reference ran: cpu-fp32.jsonl)"
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
}

part_tests() {
  record ""
  record "## 6. GPU tests (tests/cpp/cuda)"
  local dir=$repo/libexec/tests mpi=("$repo/bin/mpirun" --oversubscribe -np 1) t rc cmd
  if [ ! -x "$dir/run" ]; then
    dir=$repo/build/tests mpi=(mpirun --oversubscribe --bind-to none -np 1)
    [ -x "$dir/test_gpu" ] || { skip "6. no GPU test programs here (a bundle or build without CUDA/NCCL or without tests)"; return; }
  fi
  # The tests read the demo data where the ctest fixture demo_data puts it, in their scratch folder.
  export SHARDTRAIN_TEST_WORK=$work/tests SHARDTRAIN_TEST_BIN=$bin
  mkdir -p "$out/tests"
  prepare_demo_data "$SHARDTRAIN_TEST_WORK/demo"
  for t in test_gpu test_gpu_mpi; do
    cmd=("$dir/$t"); [ -x "$dir/run" ] && cmd=("$dir/run" "$t")
    [ "$t" = test_gpu_mpi ] && cmd=("${mpi[@]}" "${cmd[@]}")
    progress "6. $t"
    timeout 420 "${cmd[@]}" --gtest_output="xml:$out/tests/$t.xml" > "$out/tests/$t.log" 2>&1
    rc=$?
    check "6. $t" "${helper[@]}" gtest "$out/tests/$t.xml" --name "6. $t (tests/$t.log)" --device "$device" --rc "$rc"
  done
}

speed() {  # TITLE DIR [ENV=VALUE...]: bench/gpu_vs_pytorch.sh into OUT/DIR, its table into results.md
  local title=$1 dir=$2; shift 2
  record ""
  record "## $title"
  progress "bench/gpu_vs_pytorch.sh (device $device) $*"
  if env "$@" OUT="$out/$dir" BENCH_DEVICE="$device" BENCH_APPEND_DOCS=0 SHARDTRAIN_BIN="$bin" PYTHON="$py" \
     bash "$repo/bench/gpu_vs_pytorch.sh" > "$out/$dir.log" 2>&1; then
    tail -n +2 "$out/$dir/results.md" >> "$results"
    grep -q "failed" "$out/$dir/results.md" && broken
  else
    record "- the speed comparison failed ($dir.log)"; tail -5 "$out/$dir.log"; broken
  fi
}

# The 7B shape (4 layers) on the GPU; the smoke test's tiny one on CPU. Sets model, seq, dtype.
bench_shape() {
  if [ "$device" = cuda ]; then model=(--model llama2-7b --n-layers 4) seq=4096 dtype=bf16
  else model=(--model tiny --n-layers 2 --hidden-size 128 --intermediate-size 352 --n-heads 4 --n-kv-heads 4) seq=128 dtype=fp32; fi
}

part_profile() {  # [TITLE DIR FLAG...]: 4b by default
  local title=${1:-4b. Profile of one shardtrain step} dir=${2:-profile}; shift $(($# < 2 ? $# : 2))
  record ""
  record "## $title"
  local model seq dtype; bench_shape
  mkdir -p "$out/speed"
  progress "$dir: step 5 of ${model[*]} $*, seq $seq, batch 4"
  if st "$dir.log" train "${model[@]}" "$@" --data "$(bench_data "$out/speed" "$seq")" --device "$device" --param-dtype "$dtype" \
       --batch-size 4 --steps 6 --warmup-steps 0 --lr 3e-5 --collective-timeout 0 --profile-step 5 --profile-dir "$out/$dir" \
     && [ -f "$out/$dir/profile-rank0.md" ]; then
    record "\`shardtrain train ${model[*]} $* --batch-size 4 --profile-step 5\` at seq $seq ($dtype); the trace: $dir/trace-rank0.json.gz."
    record ""
    tail -n +3 "$out/$dir/profile-rank0.md" >> "$results"
    gzip -f "$out/$dir/trace-rank0.json"  # Perfetto and chrome://tracing read it compressed
  else
    record "- the profiled run failed ($dir.log)"; tail -5 "$out/$dir.log"; broken
  fi
}

part_fused() {  # the fused layer path's speed row with and without it, and its profile
  local seqs=4096 compile=1; [ "$device" = cuda ] || { seqs=128; compile=0; }  # the smoke test: part compile runs torch.compile
  speed "4f. Fused layers (--fused-layers) and not, against PyTorch FSDP2 eager and torch.compile" speed-fused \
    BENCH_COMPILE=$compile BENCH_SEQS=$seqs BENCH_AC=off "BENCH_ST_VARIANTS=--fused-layers;"
  part_profile "4f. Profile of one step with --fused-layers" profile-fused --fused-layers
}

part_kernels() {
  record ""
  record "## 4d. Faster paths on their own"
  progress "kernels: bench/fused_loss.sh"
  local fused=(BENCH_REPEATS=2); [ "$device" = cuda ] || fused=(BENCH_REPEATS=1 BENCH_SEQ=64 BENCH_STEPS=3)  # the smoke test: that it runs
  if env "${fused[@]}" OUT="$out/fused-loss" BENCH_DEVICE="$device" BENCH_APPEND_DOCS=0 SHARDTRAIN_BIN="$bin" PYTHON="$py" \
     bash "$repo/bench/fused_loss.sh" > "$out/fused-loss.log" 2>&1; then
    tail -n +3 "$out/fused-loss/results.md" >> "$results"
  else
    record "- the fused-loss comparison failed (fused-loss.log)"; tail -5 "$out/fused-loss.log"; broken
  fi
  progress "kernels: bench/gqa_attention.py"
  record ""
  record "Grouped-query attention, forward and backward (\`bench/gqa_attention.py\`, medians of 20 interleaved):"
  record ""
  record "| device | shape | SDPA backend with enable_gqa | enable_gqa | repeated K/V | repeated / enable_gqa | largest difference |"
  record "|---|---|---|---:|---:|---:|---:|"
  "$py" "$repo/bench/gqa_attention.py" --device "$device" >> "$results" 2> "$out/gqa.log" \
    || { record "- failed (gqa.log)"; broken; }
  record ""
  record "## 4e. Activation checkpointing: none, selective, full"
  progress "kernels: bench/activation_checkpointing.sh"
  local small=(); [ "$device" = cuda ] || small=(BENCH_SEQ=256 BENCH_STEPS=3)  # the smoke test: that it runs
  if env "${small[@]}" OUT="$out/activation-checkpointing" BENCH_DEVICE="$device" BENCH_APPEND_DOCS=0 BENCH_REPEATS=1 \
     SHARDTRAIN_BIN="$bin" PYTHON="$py" bash "$repo/bench/activation_checkpointing.sh" > "$out/activation-checkpointing.log" 2>&1; then
    tail -n +3 "$out/activation-checkpointing/results.md" >> "$results"
  else
    record "- the activation checkpointing comparison failed (activation-checkpointing.log)"; tail -5 "$out/activation-checkpointing.log"; broken
  fi
}

part_offload() {  # 4g: both sides' offload on one GPU, each run watched for its host memory
  record ""
  record "## 4g. CPU offload: shardtrain \`--cpu-offload\` against PyTorch FSDP2 \`CPUOffloadPolicy\`"
  # Not all 32 layers: offload keeps 16 bytes a parameter on the host (fp32 master, gradient, AdamW's
  # m and v), shardtrain 2 more (its bf16 mirror), and PyTorch's pinned allocator rounds each shard
  # and gradient up to a power of two (+1/3 on a 7B layer): 113 and ~116 GiB for the whole
  # 7B, no margin on a 128 GiB machine beside the OS, CUDA and the processes themselves. 12 layers
  # (2.69B parameters) take ~45 GiB on each side, a third of it.
  local layers=${BENCH_OFFLOAD_LAYERS:-12} steps=5 skip=2 seq=2048 dtype=bf16 batch=4
  local st_model=(--model llama2-7b --n-layers "$layers") py_model=(--layers "$layers")
  if [ "$device" = cpu ]; then  # the smoke test: that both sides and the table run
    st_model=(--model tiny --n-layers 2 --hidden-size 128 --intermediate-size 352 --n-heads 4 --n-kv-heads 4)
    py_model=(--layers 2 --hidden 128 --ffn 352 --heads 4 --kv-heads 4 --vocab 512)
    steps=3 skip=1 seq=128 dtype=fp32 batch=2
  fi
  local dir=$out/offload data side left cmd late=()
  data=$(bench_data "$out/speed" "$seq")
  record "\`shardtrain train ${st_model[*]} --cpu-offload --activation-checkpointing\` and \`bench/fsdp2_reference.py ${py_model[*]} --offload --ac\` (\`fully_shard\` of every decoder layer and the root with \`CPUOffloadPolicy()\`), random init, AdamW, $dtype compute, fp32 master weights, seq $seq, batch $batch, $steps steps, medians after $skip. Peak host RSS: the process's VmHWM; host memory used: MemTotal − MemAvailable during the run, over its value before (pinned pages included). Logs: offload/."
  record ""
  for side in shardtrain pytorch; do
    mkdir -p "$dir/$side"; rm -f "$dir/$side/"*
    left=0  # timeout 0: none (the smoke test)
    if [ "$device" = cuda ]; then
      left=$((deadline - SECONDS))
      [ "$left" -ge 90 ] || { late+=("4g. $side: ${left} s left before the suite's deadline, under the 90 s a side needs"); continue; }
    fi
    progress "offload: $side, ${st_model[*]}, seq $seq, batch $batch, $steps steps"
    if [ "$side" = shardtrain ]; then
      cmd=("$bin" train "${st_model[@]}" --data "$data" --device "$device" --param-dtype "$dtype" --batch-size "$batch"
           --steps "$steps" --warmup-steps 0 --lr 3e-5 --activation-checkpointing --cpu-offload --collective-timeout 0
           --log-every 1 --metrics-file "$dir/$side/metrics.jsonl")
    else
      cmd=("$py" "$repo/bench/fsdp2_reference.py" "${py_model[@]}" --data "$data" --batch-size "$batch" --steps "$steps"
           --skip "$skip" --ac --offload --device "$device" --dtype "$dtype")
    fi
    "${helper[@]}" watch --json "$dir/$side/watch.json" --timeout "$left" -- "${cmd[@]}" > "$dir/$side/run.log" 2> "$dir/$side/run.err" \
      || { progress "offload: $side failed (offload/$side/run.err)"; tail -5 "$dir/$side/run.err"; }
  done
  "${helper[@]}" offload-table --shardtrain "$dir/shardtrain" --pytorch "$dir/pytorch" --skip "$skip" --device "$device" \
    > "$dir/results.md" 2>> "$out/suite.err" || broken
  cat "$dir/results.md" >> "$results"
  for side in "${late[@]}"; do skip "$side"; done
}

part_fp8() {  # 4h: bf16, then each --fp8 mode, from the same seed on the same rows
  record ""
  record "## 4h. FP8: \`--fp8 tensorwise\` and \`--fp8 rowwise\` against bf16"
  local model seq dtype; bench_shape
  local steps=${BENCH_FP8_STEPS:-200} skip=10 batch=4 dir=$out/fp8 mode left flag late=()
  [ "$device" = cuda ] || { steps=3; skip=1; batch=2; }  # the smoke test: bf16 runs, --fp8 is refused
  # A row per sample of the run, none repeated: the demo's words drawn anew per row, so the loss
  # falls to what the words' statistics allow, not to a memorised text.
  local data; data=$(bench_data "$out/speed" "$seq" $((steps * batch)))
  record "\`shardtrain train ${model[*]} [--fp8 MODE]\`, random init (seed 1234), AdamW, $dtype compute, fp32 master weights, seq $seq, batch $batch, no activation checkpointing, $steps steps over $((steps * batch)) rows of the demo's words drawn at random (one epoch); tokens/s is the median after $skip steps. Logs: fp8/."
  record ""
  for mode in off tensorwise rowwise; do
    mkdir -p "$dir/$mode"; rm -f "$dir/$mode/"*
    flag=(); [ "$mode" = off ] || flag=(--fp8 "$mode")
    left=0  # timeout 0: none (the smoke test)
    if [ "$device" = cuda ]; then
      left=$((deadline - SECONDS))
      [ "$left" -ge 120 ] || { late+=("4h. $mode: ${left} s left before the suite's deadline, under the 120 s a run needs"); continue; }
    fi
    progress "fp8: $mode, ${model[*]}, seq $seq, batch $batch, $steps steps"
    "${helper[@]}" watch --json "$dir/$mode/watch.json" --timeout "$left" -- "$bin" train "${model[@]}" "${flag[@]}" \
      --data "$data" --device "$device" --param-dtype "$dtype" --batch-size "$batch" --steps "$steps" --warmup-steps 10 \
      --lr 3e-4 --seed 1234 --collective-timeout 0 --log-every 1 --metrics-file "$dir/$mode/metrics.jsonl" \
      > "$dir/$mode/run.log" 2>&1
    if [ "$device" = cpu ] && [ "$mode" != off ]; then  # no float8 tensor cores: refused by name
      grep -q "shardtrain: error: --fp8 $mode: the CPU has no float8 tensor cores" "$dir/$mode/run.log" \
        && record "- \`--fp8 $mode\` on the CPU: refused, as it must be" || { record "- \`--fp8 $mode\` was not refused on the CPU"; broken; }
    fi
  done
  check "4h. fp8 losses" "${helper[@]}" fp8-table --dir "$dir" --skip "$skip" --tail 20 --max-rel 0.01 --device "$device" \
    --table "$dir/results.md"
  cat "$dir/results.md" >> "$results"
  for mode in "${late[@]}"; do skip "$mode"; done
  # The column-wise cast against the GEMM it feeds, and the float8 all-gather's encode and decode
  # (GpuFp8.Times*).
  local cmd=()
  if [ -x "$repo/libexec/tests/run" ]; then cmd=("$repo/libexec/tests/run" test_gpu)
  elif [ -x "$repo/build/tests/test_gpu" ]; then cmd=("$repo/build/tests/test_gpu"); fi
  if [ "$device" = cuda ] && [ ${#cmd[@]} -gt 0 ] && [ $((deadline - SECONDS)) -ge 30 ]; then
    timeout 60 "${cmd[@]}" --gtest_filter='GpuFp8.Times*' > "$dir/cast_timing.log" 2>&1
    record ""
    grep '^fp8 timing: ' "$dir/cast_timing.log" | sed 's/^fp8 timing: /- /' >> "$results"
    grep -q '^fp8 timing: ' "$dir/cast_timing.log" || record "- no cast timing was printed (fp8/cast_timing.log)"
  else
    skip "4h. the column-wise cast's time against its GEMM (GPU only, with the GPU test programs and 30 s left)"
  fi
}

part_ring() {  # 4i: GpuRing's tests of the ring attention blocks, and the flash and math paths' times
  record ""
  record "## 4i. Ring attention blocks (context parallelism): flash's kernel and the math path"
  local cmd rc left=90
  if [ -x "$repo/libexec/tests/run" ]; then cmd=("$repo/libexec/tests/run" test_gpu)
  elif [ -x "$repo/build/tests/test_gpu" ]; then cmd=("$repo/build/tests/test_gpu")
  else skip "4i. no GPU test programs here (a bundle or build without CUDA/NCCL or without tests)"; return; fi
  if [ "$device" = cuda ]; then
    [ $((deadline - SECONDS)) -ge 60 ] || { skip "4i. $((deadline - SECONDS)) s left before the suite's deadline, under the 60 s the part needs"; return; }
    [ $((deadline - SECONDS)) -ge "$left" ] || left=$((deadline - SECONDS))
  fi
  mkdir -p "$out/ring"
  progress "ring: test_gpu --gtest_filter='GpuRing*'"
  timeout "$left" "${cmd[@]}" --gtest_filter='GpuRing*' --gtest_output="xml:$out/ring/test_gpu.xml" > "$out/ring/test_gpu.log" 2>&1
  rc=$?
  check "4i. GpuRing tests" "${helper[@]}" gtest "$out/ring/test_gpu.xml" --name "4i. test_gpu --gtest_filter='GpuRing*' (ring/test_gpu.log)" \
    --device "$device" --rc "$rc"
  if [ "$device" = cuda ]; then
    record ""
    record "Per call, the median of 10 after 3 (GpuRing.TimesFlashAndMathPaths; a masked block takes the memory-efficient kernel, the math path is the fallback):"
    record ""
    grep '^ring timing: ' "$out/ring/test_gpu.log" | sed 's/^ring timing: /- /' >> "$results"
    grep -q '^ring timing: ' "$out/ring/test_gpu.log" || record "- no timing was printed (ring/test_gpu.log)"
  else
    skip "4i. the GpuRing tests and the flash and math paths' times (GPU only: on the CPU every GpuRing test skips, as above)"
  fi
}

part_moe() {  # 4j: a Qwen3-30B-A3B slice, shardtrain against transformers' MoE in the same call
  record ""
  record "## 4j. Mixture of experts: a Qwen3-30B-A3B slice against transformers' Qwen3MoeForCausalLM"
  local layers=2 seq=4096 steps=12 skip=2 dtype=bf16 dir=$out/moe
  local st_shape=(--model qwen3-30b-a3b --n-layers "$layers") py_shape=(--layers "$layers")
  if [ "$device" != cuda ]; then  # the smoke test: the experts as they are, the rest narrow
    layers=1 seq=128 steps=3 skip=1 dtype=fp32
    st_shape=(--model qwen3-30b-a3b --n-layers 1 --hidden-size 128 --intermediate-size 256 --n-heads 4)
    py_shape=(--layers 1 --hidden 128 --intermediate 256 --heads 4 --kv-heads 4)
  fi
  mkdir -p "$dir"; rm -f "$dir/"*
  local data; data=$(bench_data "$out/speed" "$seq")
  record "Random init (seed 1234), AdamW, $dtype compute, fp32 master weights, seq $seq, batch 1, $steps steps; tokens/s is the median after $skip. Logs: moe/."
  record ""
  local left=0  # timeout 0: none (the smoke test)
  if [ "$device" = cuda ]; then
    left=$((deadline - SECONDS))
    [ "$left" -ge 150 ] || { skip "4j. ${left} s left before the suite's deadline, under the 150 s both sides need"; return; }
    left=$((left / 2))
  fi
  progress "moe: shardtrain, ${st_shape[*]}, seq $seq"
  timeout "$left" "$bin" train "${st_shape[@]}" --data "$data" --device "$device" --param-dtype "$dtype" --batch-size 1 \
    --steps "$steps" --warmup-steps 0 --lr 3e-5 --seed 1234 --collective-timeout 0 --log-every 1 \
    --metrics-file "$dir/shardtrain.jsonl" > "$dir/shardtrain.log" 2>&1
  local st_rc=$?
  progress "moe: transformers, ${py_shape[*]}, seq $seq"
  timeout "$left" "$py" "$repo/bench/moe_reference.py" "${py_shape[@]}" --data "$data" --steps "$steps" --skip "$skip" \
    --device "$device" --dtype "$dtype" > "$dir/transformers.log" 2>&1
  local py_rc=$?
  if [ "$st_rc" = 0 ] && [ "$py_rc" = 0 ]; then
    local ours theirs mem
    ours=$("$py" "$repo/bench/metrics_median.py" "$dir/shardtrain.jsonl" tokens_per_s "$skip")
    mem=$("$py" "$repo/bench/metrics_median.py" "$dir/shardtrain.jsonl" memory.gpu_peak_allocated_bytes "$skip" 2>/dev/null || echo 0)
    theirs=$(tail -1 "$dir/transformers.log")
    local path=loop; [ "$device" = cuda ] && [ "$dtype" = bf16 ] && path="grouped GEMM on sm90, else loop"
    "$py" - "$ours" "$mem" "$theirs" "$path" >> "$results" <<'PY'
import json, sys
ours, mem, theirs, path = float(sys.argv[1]), float(sys.argv[2] or 0), json.loads(sys.argv[3]), sys.argv[4]
print("| trainer | tokens/s | peak allocated | experts |")
print("|---|---|---|---|")
print(f"| shardtrain | {ours:.0f} | {mem / 2**30:.1f} GiB | {path} |")
print(f"| transformers {theirs.get('torch', '')} | {theirs['tokens_per_s']:.0f} | "
      f"{theirs['peak_allocated_bytes'] / 2**30:.1f} GiB | {theirs.get('experts_implementation')} |")
print(f"\n- shardtrain / transformers: {ours / theirs['tokens_per_s']:.2f}x")
PY
  else
    record "- a side failed: shardtrain rc $st_rc (moe/shardtrain.log), transformers rc $py_rc (moe/transformers.log)"
    tail -3 "$dir/shardtrain.log" "$dir/transformers.log"; broken
  fi
}

# One full fine-tuning attempt, killed at the deadline. SIDE LOG SEQ BATCH AC(on|off) ARGS...: prints
# fits, oom, error or late ("late" without running when under a minute is left), and the peak.
attempt() {
  local side=$1 log=$2 seq=$3 batch=$4 ac=$5; shift 5
  local left=$((deadline - SECONDS))
  [ "$device" = cpu ] && left=0  # timeout 0: none
  [ "$device" = cpu ] || [ "$left" -ge 60 ] || { echo "late 0"; return; }
  local data rc peak=0 acflag=() pyac=(); data=$(bench_data "$out/speed" "$seq")
  [ "$ac" = on ] && acflag=(--activation-checkpointing) pyac=(--ac)
  progress "scale: $side, seq $seq, batch $batch, activation checkpointing $ac, $*" >&2  # stdout is the verdict
  if [ "$side" = shardtrain ]; then
    timeout "$left" "$bin" train "$@" --data "$data" --device "$device" --param-dtype "$dtype" --batch-size "$batch" --steps 3 \
      --warmup-steps 0 --lr 3e-5 "${acflag[@]}" --collective-timeout 0 --metrics-file "$out/$log.jsonl" > "$out/$log.log" 2>&1
  else
    timeout "$left" "$py" "$repo/bench/fsdp2_reference.py" "$@" --data "$data" --batch-size "$batch" --steps 3 --skip 1 \
      "${pyac[@]}" --device "$device" --dtype "$dtype" > "$out/$log.log" 2>&1
  fi
  rc=$?
  local verdict; verdict=$("${helper[@]}" fits "$out/$log.log" --rc "$rc")
  [ "$rc" = 124 ] && verdict=late
  if [ "$verdict" = fits ]; then
    if [ "$side" = shardtrain ]; then
      local field=memory.gpu_peak_allocated_bytes; [ "$device" = cuda ] || field=peak_mem_bytes
      peak=$("$py" "$repo/bench/metrics_median.py" "$out/$log.jsonl" "$field" 1)
    else
      peak=$(tail -1 "$out/$log.log" | "$py" -c 'import json, sys; j = json.loads(sys.stdin.read()); print(j["peak_allocated_bytes"] or j["peak_rss_bytes"])')
    fi
  fi
  echo "$verdict $peak"
}

gib() { "$py" -c "print('%.1f GiB' % ($1 / 2**30))"; }

part_scale() {
  record ""
  record "## 5. Full Llama-2 7B on one $([ "$device" = cuda ] && echo GPU || echo 'CPU (smoke test: a tiny stand-in)'), full fine-tuning"
  local model seq dtype small=() shard=10GB
  bench_shape
  [ "$device" = cuda ] || small=(--small) shard=300KB
  mkdir -p "$out/speed"
  progress "scale: saving a random Llama-2 7B (bf16, shards of $shard, with its index) into $work/llama2-7b"
  "${helper[@]}" make-7b "$work/llama2-7b" --dtype bf16 --device "$device" --max-shard-size "$shard" "${small[@]}" \
    > "$out/make-7b.log" 2>&1 || { record "- saving the 7B weights failed (make-7b.log)"; tail -3 "$out/make-7b.log"; broken; return; }
  record "- weights: $(tail -1 "$out/make-7b.log" | sed "s|$work/||"); $(ls "$work/llama2-7b" | grep -c '\.safetensors$') files + model.safetensors.index.json"
  # Smallest first; each needs more memory than the one before it.
  local configs=("on 2048 1" "on 4096 1" "on 4096 2" "on 4096 4" "off 2048 1" "off 4096 1" "off 4096 4")
  [ "$device" = cuda ] || configs=("on 128 1" "off 128 2")
  local side cfg ac s b r peak
  for side in shardtrain pytorch; do
    local weights=(--weights "$work/llama2-7b") fit="" over=""
    for cfg in "${configs[@]}"; do
      read -r ac s b <<< "$cfg"
      read -r r peak < <(attempt "$side" "scale-$side-$ac-$s-$b" "$s" "$b" "$ac" "${weights[@]}")
      if [ "$r" = fits ]; then fit="activation checkpointing $ac, seq $s, batch $b (peak allocated $(gib "$peak"))"
      else over="activation checkpointing $ac, seq $s, batch $b: $r (scale-$side-$ac-$s-$b.log)"; broken; break; fi
    done
    record "- $side, the whole model from the sharded weights: largest that fits: ${fit:-none}; ${over:-every configuration tried fits}"
  done
  rm -rf "$work/llama2-7b"  # 13.5 GB
}

part_layers() {
  record ""
  record "## 5b. The most Llama-2 7B layers that fit one GPU"
  [ "$device" = cuda ] || { skip "5b. the layer search (GPU only)"; return; }
  local model seq dtype side r peak; bench_shape
  # What does fit when all 32 layers do not: 16 B per parameter (fp32 master, gradient, AdamW m and
  # v) is ~3.0 GiB per 7B layer and ~3.9 GiB for the embedding and head; the search starts two
  # layers above that estimate (random init, activation checkpointing, batch 1, seq 2048).
  local total start layers
  total=$("$py" -c 'import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30))')
  start=$(( (total * 90 / 100 - 4) * 100 / 302 + 2 )); [ "$start" -le 31 ] || start=31
  for side in shardtrain pytorch; do
    local fit="" over=""
    for ((layers = start; layers >= 1 && layers > start - 6; layers--)); do
      local shape=(--model llama2-7b --n-layers "$layers"); [ "$side" = pytorch ] && shape=(--layers "$layers")
      read -r r peak < <(attempt "$side" "layers-$side-$layers" 2048 1 on "${shape[@]}")
      if [ "$r" = fits ]; then fit="$layers (peak allocated $(gib "$peak"))"; break; fi
      over="$layers ($r)"
    done
    record "- $side, Llama-2 7B layers (random init), activation checkpointing, seq 2048, batch 1: largest that fits: ${fit:-none of $start..$((start - 5))}$([ -n "$over" ] && echo "; $over does not")"
  done
}

want check && part_check
want tests && part_tests
want speed && speed "4. Speed and memory against PyTorch FSDP2" speed
want profile && part_profile
if want compile; then
  if [ "$device" = cuda ]; then speed "4c. Against PyTorch FSDP2 with torch.compile" speed-compile BENCH_COMPILE=1 BENCH_SEQS=4096
  else speed "4c. Against PyTorch FSDP2 with torch.compile" speed-compile BENCH_COMPILE=1; fi
fi
want kernels && part_kernels
want fused && part_fused
want offload && part_offload
want fp8 && part_fp8
want ring && part_ring
want moe && part_moe
want scale && part_scale
want layers && part_layers

record ""
record "Failures: $failures (correctness checks; on the CPU smoke test, any part that did not run). Logs and metrics: $out"
progress "done in ${SECONDS}s, $failures failures; $results"
cat "$results"
[ "$failures" = 0 ]
