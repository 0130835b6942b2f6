#!/usr/bin/env bash
# The fused, chunked head + cross-entropy (--loss-chunk auto) against the unfused head and loss
# (--loss-chunk off), and a fixed chunk, in the same run: peak tensor memory, tokens/s, and the
# first and last losses, which must agree with the unfused path's (exit 1 otherwise: 1e-5 relative
# in fp32, 1e-3 for the first and 2% for the last loss in bf16). Interleaved repeats, medians; the
# table goes into OUT/results.md and, with BENCH_APPEND_DOCS=1, docs/performance.md.
#   bash bench/fused_loss.sh                    # CPU: small preset with Llama-2's 32000 vocab, seq 512, batch 4
#   BENCH_DEVICE=cuda bash bench/fused_loss.sh  # one GPU: the 7B shape, 4 layers, seq 4096, batch 4, bf16
# Env: BENCH_STEPS (8), BENCH_REPEATS (3), BENCH_SEQ, OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
device=${BENCH_DEVICE:-cpu} out=${OUT:-$repo/build/bench-fused-loss} steps=${BENCH_STEPS:-8} repeats=${BENCH_REPEATS:-3}
mkdir -p "$out"
if [ "$device" = cuda ]; then
  model=(--model llama2-7b --n-layers 4) seq=4096 extra=(--param-dtype bf16) mem=memory.gpu_peak_allocated_bytes
  where=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else
  model=(--model small --vocab-size 32000) seq=512 extra=(--param-dtype fp32 --threads "$(nproc)") mem=memory.host_tensor_peak_bytes
  where="$(hostname) ($(nproc) cores)"
fi
seq=${BENCH_SEQ:-$seq}
data=$(bench_data "$out" "$seq")
settings=(off auto 1024)
for ((r = 1; r <= repeats; r++)); do
  for lc in "${settings[@]}"; do
    echo "repeat $r: --loss-chunk $lc"
    "$bin" train "${model[@]}" --data "$data" --device "$device" "${extra[@]}" --batch-size 4 --steps "$steps" --lr 1e-4 \
      --warmup-steps 0 --loss-chunk "$lc" --collective-timeout 0 --metrics-file "$out/$lc-$r.jsonl" > "$out/$lc-$r.log" 2>&1
  done
done
PYTHONPATH="$repo/bench" "$py" - "$out" "$mem" "$repeats" "${settings[@]}" > "$out/table.md" <<'PY'
import json, statistics, sys
from metrics_median import field, median
out, mem, repeats, settings = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def runs(lc):
    return [f"{out}/{lc}-{r}.jsonl" for r in range(1, repeats + 1)]
base = None
print("| --loss-chunk | peak tensor memory | vs off | tokens/s | vs off | first loss | last loss |")
print("|---|---:|---:|---:|---:|---:|---:|")
for lc in settings:
    rs = runs(lc)
    rows = [[json.loads(line) for line in open(r)] for r in rs]
    peak = statistics.median(max(field(x, mem) for x in rr) for rr in rows)  # each run's peak
    tps = statistics.median(median(r, "tokens_per_s", 2) for r in rs)
    base = base or (peak, tps)
    losses = [x["loss"] for x in rows[0]]
    print(f"| {lc} | {peak / 2**20:.0f} MiB | {peak / base[0]:.2f}x | {tps:.0f} | {tps / base[1]:.2f}x "
          f"| {losses[0]:.6f} | {losses[-1]:.6f} |")
PY
# The claim the table rests on: every setting trains the same model as the unfused path.
agree=0
"$py" "$repo/bench/losses_agree.py" "$out" "$device" "--loss-chunk " "${settings[@]}" > "$out/agree.txt" || agree=$?
{
  echo "### Fused, chunked head and loss: $where, $(date +%Y-%m-%d)"
  echo
  echo "\`bash bench/fused_loss.sh\` (device $device, ${model[*]}, seq $seq, batch 4, $steps steps, tokens/s median after 2 steps, medians of $repeats interleaved runs)."
  echo
  cat "$out/table.md"
} > "$out/results.md"
echo "$(cat "$out/agree.txt")" >> "$out/results.md"
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then { echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"; echo "appended to docs/performance.md"; fi
[ "$agree" = 0 ] || { echo "fused_loss.sh: the losses disagree (above)" >&2; exit 1; }
