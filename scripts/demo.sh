#!/usr/bin/env bash
# The demo: installs what is missing, builds, prepares the shipped instruction data (data/demo)
# into HDF5 token files, fine-tunes the tiny Llama-2 on it, and prints validation loss falling
# and exact-match accuracy rising. Everything runs on CPU; nothing is downloaded at run time.
# Env: SHARDTRAIN_BIN (a built binary), DEMO_OUT (out/demo), DEMO_RANKS (2).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# SHARDTRAIN_BIN (the container image sets it): run that binary; nothing is installed or built.
if [ -n "${SHARDTRAIN_BIN:-}" ]; then
  bin=$SHARDTRAIN_BIN
else
  "$repo/scripts/install-deps.sh"
  BUILD_TARGET=shardtrain "$repo/scripts/build.sh"
  bin=${BUILD_DIR:-$repo/build}/src/shardtrain
fi
out=${DEMO_OUT:-$repo/out/demo}
data=$repo/data/demo
mkdir -p "$out"
start=$SECONDS

echo "== prepare: alpaca JSONL -> HDF5 token files ($out/train.h5, $out/train.val.h5)"
"$bin" prepare --tokenizer "$data/tokenizer.model" --input "$data/train.jsonl" --val-input "$data/val.jsonl" \
  --format alpaca --mode padding --seq-len 64 --output "$out/train.h5"

# Two MPI ranks, fully sharded (each holds half of every unit); set DEMO_RANKS to change.
ranks=${DEMO_RANKS:-2}
mpi=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
echo "== train: tiny Llama-2 on $ranks MPI ranks (FSDP full_shard); exact match by greedy generation on data/demo/val.jsonl"
"${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --sharding full_shard \
  --data "$out/train.h5" --val-data "$out/train.val.h5" \
  --accuracy-file "$data/val.jsonl" --tokenizer "$data/tokenizer.model" \
  --metrics-file "$out/metrics.jsonl" --save-model "$out/model"

echo "== eval: the saved model ($out/model)"
"$bin" eval --model "$out/model" --weights "$out/model" --data "$out/train.val.h5" \
  --accuracy-file "$data/val.jsonl" --tokenizer "$data/tokenizer.model" --accuracy-samples 200 --max-new-tokens 12

echo "== generate: two prompts the model has not seen (the answer on stdout, the log in $out/generate.log)"
for p in "Reverse the digits.|9 0 5 3 1" "Add the two numbers.|64 + 29"; do
  printf '%s %s -> ' "${p%%|*}" "${p#*|}"
  "$bin" generate --model "$out/model" --weights "$out/model" --tokenizer "$data/tokenizer.model" \
    --template alpaca --prompt "${p%%|*}" --input "${p#*|}" --max-new-tokens 12 2>> "$out/generate.log" \
    || { cat "$out/generate.log"; exit 1; }
done
echo "== demo finished in $((SECONDS - start)) s after the build"
