#!/usr/bin/env bash
# The demo: installs what is missing, builds, trains the tiny Llama-2 on the built-in corpus,
# then evaluates the saved model. Everything runs on CPU; nothing is downloaded at run time.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/install-deps.sh"
"$repo/scripts/build.sh"
bin=${BUILD_DIR:-$repo/build}/src/shardtrain
out=${DEMO_OUT:-$repo/out/demo}
mkdir -p "$out"
echo "== training the tiny preset on the built-in corpus (metrics: $out/metrics.jsonl)"
"$bin" train --model tiny --steps 300 --lr 3e-3 --warmup-steps 20 --val-every 50 --log-every 25 \
  --metrics-file "$out/metrics.jsonl" --save-model "$out/model"
echo "== evaluating the saved model ($out/model)"
"$bin" eval --model "$out/model" --weights "$out/model"
