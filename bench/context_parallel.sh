#!/usr/bin/env bash
# Context parallelism on the CPU: `shardtrain train --context-parallel N` over N ranks (each row cut
# into 2N zigzag chunks, attention as a ring) against CP=1 on one rank, at each sequence length:
# step time, tokens/s and each rank's memory, on the tiny preset (fp32, batch 1, full_shard, no
# activation checkpointing, one thread a rank). The first step's loss is shown as well: every CP
# setting trains on the same rows from the same init, so it must agree. Memory per rank is rank 0's
# (the metrics file is rank 0's; the zigzag gives every rank the same share): the peak of the host
# tensor bytes (memory.host_tensor_peak_bytes: every CPU tensor, activations included) and the
# process's peak RSS (peak_mem_bytes). On one machine the ranks share its cores, so tokens/s shows
# the ring's overhead, not a speed-up. The table goes into OUT/results.md and, with
# BENCH_APPEND_DOCS=1, docs/performance.md.
#   bash bench/context_parallel.sh                          # seq 2048..16384, CP 1, 2, 4 (~10 minutes on 2 cores)
#   BENCH_SEQS="2048 4096" BENCH_CPS="1 2" bash bench/context_parallel.sh
# Env: BENCH_SEQS (2048 4096 8192 16384), BENCH_CPS (1 2 4), BENCH_STEPS (4; 1 at seq 16384 and
# above, where the ring's step on the CPU takes minutes), OUT (build/bench-context-parallel), SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=$(out_dir "${OUT:-$repo/build/bench-context-parallel}")
seqs=(${BENCH_SEQS:-2048 4096 8192 16384}) cps=(${BENCH_CPS:-1 2 4})
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--model tiny)
runs=()
for seq in "${seqs[@]}"; do
  steps=${BENCH_STEPS:-4}; [ -n "${BENCH_STEPS:-}" ] || [ "$seq" -lt 16384 ] || steps=1
  data=$(bench_data "$out" "$seq")  # 64 rows of SEQ tokens, one document each
  for cp in "${cps[@]}"; do
    name=seq$seq-cp$cp
    echo "seq $seq, CP $cp: $steps steps"
    rm -f "$out/$name.jsonl"
    # The tiny preset's 512 positions raised to the row's length (rotary positions go on as before).
    if mpirun --allow-run-as-root --oversubscribe -np "$cp" "$bin" train "${model[@]}" --max-seq-len "$seq" --data "$data" \
         --device cpu --param-dtype fp32 --sharding full_shard --context-parallel "$cp" --threads 1 --batch-size 1 \
         --steps "$steps" --lr 1e-4 --warmup-steps 0 --collective-timeout 0 --val-batches 0 --log-every 1 \
         --metrics-file "$out/$name.jsonl" > "$out/$name.log" 2>&1; then
      runs+=("$seq:$cp:$steps:ok")
    else
      echo "  failed ($out/$name.log):"; tail -5 "$out/$name.log"
      runs+=("$seq:$cp:$steps:failed")
    fi
  done
done
"$py" - "$out" "${runs[@]}" > "$out/table.md" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
print("| seq | CP (ranks) | steps | step time | tokens/s | vs CP=1 | tensor peak per rank | vs CP=1 | peak RSS per rank | step-1 loss |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
base = {}
for run in runs:
    seq, cp, steps, status = run.split(":")
    if status == "failed":
        print(f"| {seq} | {cp} | {steps} | failed (seq{seq}-cp{cp}.log) | | | | | | |")
        continue
    rows = [json.loads(line) for line in open(f"{out}/seq{seq}-cp{cp}.jsonl")]
    after = [r for r in rows if r["step"] > 1] or rows  # the first step warms up (one step: its own)
    step = statistics.median(r["step_time_s"] for r in after)
    tps = int(seq) / step  # batch 1: one row of SEQ tokens a step, whatever CP
    peak = max(r["memory"]["host_tensor_peak_bytes"] for r in rows)
    rss = max(r["peak_mem_bytes"] for r in rows)
    if cp == "1":
        base[seq] = (tps, peak)
    b = base.get(seq)
    ratio = lambda x, i: f"{x / b[i]:.2f}x" if b else "n/a"
    print(f"| {seq} | {cp} | {steps} | {step:.2f} s | {tps:.0f} | {ratio(tps, 0)} | {peak / 2**20:.0f} MiB | "
          f"{ratio(peak, 1)} | {rss / 2**20:.0f} MiB | {rows[0]['loss']:.4f} |")
PY
where="$(hostname), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1))"
{
  echo "### Context parallelism (CPU, tiny model): $where, $(date +%Y-%m-%d)"
  echo
  echo "\`bash bench/context_parallel.sh\`: \`mpirun -np N shardtrain train --model tiny --max-seq-len SEQ --context-parallel N --threads 1\`, fp32, full_shard, batch 1, no activation checkpointing, rows of one document each; step time: the median after the first step (at one step, that step); tokens/s: SEQ / step time; memory: rank 0's peak over the run."
  echo
  cat "$out/table.md"
  echo
} > "$out/results.md"
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then { echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"; echo "appended to docs/performance.md"; fi
grep -q "failed" "$out/table.md" && { echo "context_parallel.sh: a run failed (above)" >&2; exit 1; }
exit 0
