#!/usr/bin/env bash
# Activation checkpointing's settings side by side: none, selective (norms and the MLP's
# activation recomputed) and full (whole layers recomputed), and full on every other layer
# (--ac-every 2): the peak tensor memory, the step time and tokens/s, and the first and last
# losses, which must agree with no checkpointing's (exit 1 otherwise: 1e-5 relative in fp32, 1e-3
# for the first and 2% for the last loss in bf16). Interleaved repeats, medians; the table goes
# into OUT/results.md and, with BENCH_APPEND_DOCS=1, docs/performance.md.
#   bash bench/activation_checkpointing.sh                    # CPU: small preset, seq 1024, batch 2, fp32, all cores
#   BENCH_DEVICE=cuda bash bench/activation_checkpointing.sh  # one GPU: the 7B shape, 4 layers, seq 4096, batch 4, bf16
# Env: BENCH_STEPS (10 on CPU, 6 on a GPU), BENCH_REPEATS (3, 2), BENCH_SEQ, OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=${BENCH_DEVICE:-cpu} out=${OUT:-$repo/build/bench-activation-checkpointing}
mkdir -p "$out"
if [ "$device" = cuda ]; then
  model=(--model llama2-7b --n-layers 4) seq=4096 batch=4 extra=(--param-dtype bf16) mem=memory.gpu_peak_allocated_bytes
  where=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) repeats=${BENCH_REPEATS:-2} steps=${BENCH_STEPS:-6}
else
  model=(--model small) seq=1024 batch=2 extra=(--param-dtype fp32 --threads "$(nproc)") mem=memory.host_tensor_peak_bytes
  where="$(hostname) ($(nproc) cores)" repeats=${BENCH_REPEATS:-3} steps=${BENCH_STEPS:-10}
fi
seq=${BENCH_SEQ:-$seq}
# Rows of one document each (prepare --mode padding): the layers' own activations, without the
# [T, T] document mask that packed rows keep on a CPU and that no setting recomputes.
data=$out/padded-$seq.h5
[ -f "$data" ] || "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/train.jsonl" \
  --output "$data" --seq-len "$seq" --mode padding > "$out/prepare-$seq.log"
# name:flags, the flags' commas standing for spaces
settings=("none:" "selective:--activation-checkpointing,selective" "full:--activation-checkpointing,full"
          "full-every-2:--activation-checkpointing,full,--ac-every,2")
for ((r = 1; r <= repeats; r++)); do
  for s in "${settings[@]}"; do
    name=${s%%:*} flags=${s#*:}
    echo "repeat $r: $name"
    # shellcheck disable=SC2086  # the flags split on purpose
    "$bin" train "${model[@]}" --data "$data" --device "$device" "${extra[@]}" --batch-size "$batch" --steps "$steps" --lr 1e-4 \
      --warmup-steps 0 --collective-timeout 0 --val-batches 0 ${flags//,/ } --metrics-file "$out/$name-$r.jsonl" > "$out/$name-$r.log" 2>&1
  done
done
names=(); for s in "${settings[@]}"; do names+=("${s%%:*}"); done
PYTHONPATH="$repo/bench" "$py" - "$out" "$mem" "$repeats" "${names[@]}" > "$out/table.md" <<'PY'
import json, statistics, sys
from metrics_median import field, median
out, mem, repeats, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
flags = {"none": "(none)", "selective": "`selective`", "full": "`full`", "full-every-2": "`full --ac-every 2`"}
base = None
print("| --activation-checkpointing | peak tensor memory | vs none | step time | vs none | tokens/s |")
print("|---|---:|---:|---:|---:|---:|")
for name in names:
    runs = [f"{out}/{name}-{r}.jsonl" for r in range(1, repeats + 1)]
    rows = [[json.loads(line) for line in open(r)] for r in runs]
    peak = statistics.median(max(field(x, mem) or 0 for x in rr) for rr in rows)  # each run's peak
    step = statistics.median(median(r, "step_time_s", 2) for r in runs)
    tps = statistics.median(median(r, "tokens_per_s", 2) for r in runs)
    base = base or (peak, step)
    print(f"| {flags.get(name, name)} | {peak / 2**20:.0f} MiB | {peak / base[0]:.2f}x | {step:.3f} s | {step / base[1]:.2f}x | {tps:.0f} |")
PY
# The claim the table rests on: every setting trains the same model as no checkpointing.
agree=0
"$py" "$repo/bench/losses_agree.py" "$out" "$device" "" "${names[@]}" > "$out/agree.txt" || agree=$?
{
  echo "### Activation checkpointing: $where, $(date +%Y-%m-%d)"
  echo
  echo "\`bash bench/activation_checkpointing.sh\` (device $device, ${model[*]}, rows of one document each, seq $seq, batch $batch, $steps steps; step time and tokens/s: medians after 2 steps, medians of $repeats interleaved run(s))."
  echo
  cat "$out/table.md"
  echo
} > "$out/results.md"
cat "$out/agree.txt" >> "$out/results.md"
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then { echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"; echo "appended to docs/performance.md"; fi
[ "$agree" = 0 ] || { echo "activation_checkpointing.sh: the losses disagree (above)" >&2; exit 1; }
