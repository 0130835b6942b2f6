#!/usr/bin/env bash
# HYBRID_SHARD's cross-node all-reduce against the number of layers: 4 ranks as 2 simulated
# nodes of 2 (--ranks-per-node 2), models of 2, 4 and 8 layers of the small preset's width, the
# step-time breakdown's exposed communication (medians over the steps after the second). The
# replica all-reduce is waited for only before the optimizer step, so its exposed share should
# not grow with the layers; what does grow is the rest of the communication a deeper model moves.
# The table goes into OUT/results.md and, with BENCH_APPEND_DOCS=1, docs/performance.md.
#   bash bench/hybrid_overlap.sh
# Env: BENCH_STEPS (8), OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=${OUT:-$repo/build/bench-hybrid} steps=${BENCH_STEPS:-8}
mkdir -p "$out"
data=$(bench_data "$out" 128)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for layers in 2 4 8; do
  "$py" - "$out/config-$layers.json" "$layers" <<'PY'
import json, sys
json.dump(dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=1024, hidden_size=256,
               intermediate_size=688, num_hidden_layers=int(sys.argv[2]), num_attention_heads=8, num_key_value_heads=4,
               max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
               tie_word_embeddings=False), open(sys.argv[1], "w"))
PY
  for sharding in full_shard hybrid_shard; do
    mpirun --allow-run-as-root --oversubscribe -np 4 "$bin" train --model "$out/config-$layers.json" --data "$data" \
      --steps "$steps" --batch-size 2 --lr 1e-4 --threads 1 --device cpu --param-dtype fp32 --sharding "$sharding" \
      --ranks-per-node 2 --collective-timeout 0 --metrics-file "$out/$sharding-$layers.jsonl" > "$out/$sharding-$layers.log" 2>&1
  done
done
"$py" - "$out" "$repo/bench" "$(hostname) ($(nproc) cores)" > "$out/results.md" <<'PY'
import datetime, sys
sys.path.insert(0, sys.argv[2])
from metrics_median import median
out, where = sys.argv[1], sys.argv[3]
print(f"HYBRID_SHARD against FULL_SHARD as layers grow, {where}, {datetime.date.today()}: 4 ranks as 2 simulated nodes "
      "of 2, hidden 256, fp32, batch 2 rows of 128 tokens per rank, medians over steps 3.. (rank 0's breakdown).\n")
print("| layers | strategy | step (s) | forward + backward (s) | exposed communication (s) | exposed per layer (ms) |")
print("|---:|---|---:|---:|---:|---:|")
for layers in (2, 4, 8):
    for s in ("full_shard", "hybrid_shard"):
        f = f"{out}/{s}-{layers}.jsonl"
        step = median(f, "step_time_s", 2)
        busy = median(f, "phases.forward", 2) + median(f, "phases.backward", 2)
        exposed = median(f, "phases.exposed_comm", 2)
        print(f"| {layers} | {s} | {step:.3f} | {busy:.3f} | {exposed:.3f} | {1000 * exposed / layers:.1f} |")
PY
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then
  { echo; echo "### Hybrid sharding's cross-node reduction as layers grow"; echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"
fi
