#!/usr/bin/env bash
# Packing (whole samples several to a row, each attending to itself only) against padding (one
# sample per row), on the demo data and on a long-tailed mix of text lengths: rows, the padding
# fraction of each file, and the loss tokens trained per second (median over steps 3.., tiny
# model, fp32, all cores). Both modes train the same samples; packing's loss equals padding's
# (FsdpMpi.PackedRowsTrainWhatPaddedRowsTrain), so the speed-up is the padding it does not compute.
# The table goes into OUT/results.md and, with BENCH_APPEND_DOCS=1, docs/performance.md.
#   bash bench/packing.sh
# Env: BENCH_STEPS (20), BENCH_SEQ (256), OUT, SHARDTRAIN_BIN, PYTHON, BENCH_APPEND_DOCS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=${OUT:-$repo/build/bench-packing} steps=${BENCH_STEPS:-20} seq=${BENCH_SEQ:-256}
mkdir -p "$out"
# The long tail: 4,000 text records whose word counts are log-normal (median 24 words, a few past the row).
"$py" - "$out/longtail.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
words = "the digits of a number read back in order sum sort add reverse two three four five six seven".split()
with open(sys.argv[1], "w") as f:
    for _ in range(4000):
        n = max(1, min(400, int(rng.lognormvariate(3.2, 0.9))))
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(n))}) + "\n")
PY
for set in demo longtail; do
  input=$repo/data/demo/train.jsonl format=alpaca
  [ "$set" = longtail ] && input=$out/longtail.jsonl format=text
  for mode in packing padding; do
    "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$input" --format "$format" --mode "$mode" \
      --seq-len "$seq" --output "$out/$set-$mode.h5" > "$out/prepare-$set-$mode.log"
    "$bin" train --model tiny --data "$out/$set-$mode.h5" --steps "$steps" --batch-size 8 --lr 1e-3 --warmup-steps 0 \
      --threads "$(nproc)" --param-dtype fp32 --metrics-file "$out/$set-$mode.jsonl" > "$out/train-$set-$mode.log" 2>&1
  done
done
"$py" - "$out" "$seq" "$(hostname) ($(nproc) cores)" > "$out/results.md" <<'PY'
import datetime, json, statistics, sys
import h5py
out, seq, where = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"Packing against padding, {where}, {datetime.date.today()}: tiny model, fp32, batch 8 rows of {seq} tokens.\n")
print("| data | mode | rows | padding fraction | loss tokens/s | vs padding |")
print("|---|---|---:|---:|---:|---:|")
for name in ("demo", "longtail"):
    speed = {}
    for mode in ("padding", "packing"):
        with h5py.File(f"{out}/{name}-{mode}.h5", "r") as f:
            rows, tokens = f["tokens"].shape[0], int(f.attrs["tokens"])
        steps = [json.loads(line) for line in open(f"{out}/{name}-{mode}.jsonl") if '"step"' in line][2:]
        speed[mode] = statistics.median(s["tokens"] / s["step_time_s"] for s in steps)
        pad = 1 - tokens / (rows * seq)
        print(f"| {name} | {mode} | {rows} | {pad:.1%} | {speed[mode]:,.0f} | {speed[mode] / speed['padding']:.2f}x |")
PY
cat "$out/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then { echo; echo "### Packing against padding"; echo; cat "$out/results.md"; } >> "$repo/docs/performance.md"; fi
