#!/usr/bin/env bash
# The demo's figure on this machine, whatever its thread count: trains configs/tiny-demo.cfg on the
# demo data at 1, 2 and 4 threads (1 rank) and on 2 MPI ranks, and fails unless every run ends at
# 90% exact match or more on the 200 validation instructions. A slow check (about 20 minutes on 2
# cores), run by hand; docs/reliability.md keeps its figures.
#   scripts/check_demo.sh            # after scripts/build.sh
# Env: OUT (build/check-demo), SHARDTRAIN_BIN, DEMO_MIN_MATCH (0.90).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${SHARDTRAIN_BIN:-$repo/build/src/shardtrain} out=${OUT:-$repo/build/check-demo} min=${DEMO_MIN_MATCH:-0.90}
py=$repo/.venv/bin/python
[ -x "$py" ] || py=python3
data=$repo/data/demo
mkdir -p "$out"
"$bin" prepare --tokenizer "$data/tokenizer.model" --input "$data/train.jsonl" --val-input "$data/val.jsonl" \
  --format alpaca --mode padding --seq-len 64 --output "$out/train.h5" > "$out/prepare.log"
mpi=(mpirun -np 2 --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
failed=0
for run in threads-1 threads-2 threads-4 ranks-2; do
  case $run in
    threads-*) cmd=("$bin" train --threads "${run#threads-}" --batch-size 32) ;;
    ranks-2) cmd=("${mpi[@]}" "$bin" train --threads 1 --batch-size 16) ;;
  esac
  start=$SECONDS
  "${cmd[@]}" --config "$repo/configs/tiny-demo.cfg" --data "$out/train.h5" --val-data "$out/train.val.h5" \
    --accuracy-file "$data/val.jsonl" --tokenizer "$data/tokenizer.model" --metrics-file "$out/$run.jsonl" > "$out/$run.log" 2>&1
  line=$("$py" - "$out/$run.jsonl" "$min" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if '"val_exact_match"' in l][-1]
print(f"{last['val_exact_match']:.1%} exact match, val_loss {last['val_loss']:.3f}")
sys.exit(0 if last["val_exact_match"] >= float(sys.argv[2]) else 1)
PY
  ) && verdict=ok || { verdict=FAIL; failed=1; }
  echo "$verdict $run: $line ($((SECONDS - start)) s)"
done
exit $failed
