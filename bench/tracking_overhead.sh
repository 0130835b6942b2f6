#!/usr/bin/env bash
# The cost of the experiment trackers on the demo's training: the demo run (configs/tiny-demo.cfg,
# 2 ranks, full_shard) without trackers and with both --tensorboard and --mlflow-uri (a local
# mlflow server, SQLite store), alternated REPS times so that drift hits both alike. Prints each
# run's wall time and mean step time, and the medians; docs/performance.md keeps the figures.
#   bench/tracking_overhead.sh [OUT]     (OUT: out/tracking-overhead)
# Env: SHARDTRAIN_BIN, PYTHON (.venv/bin/python), STEPS (2000 of the demo's 8000), REPS (3), RANKS (2).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${SHARDTRAIN_BIN:-$repo/build/src/shardtrain}
py=${PYTHON:-$repo/.venv/bin/python}
venv_bin=$(dirname "$py")
out=$(mkdir -p "${1:-$repo/out/tracking-overhead}" && cd "${1:-$repo/out/tracking-overhead}" && pwd)
steps=${STEPS:-2000} reps=${REPS:-3} ranks=${RANKS:-2}
source "$repo/bench/tracking_servers.sh"  # start_mlflow_server, prepare_demo_data
prepare_demo_data "$out"
start_mlflow_server "$out"
rm -rf "$out/tb" "$out"/*.jsonl "$out/walls.txt"
mpi=(mpirun -np "$ranks" --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
for rep in $(seq "$reps"); do
  for mode in none trackers; do
    extra=()
    [ "$mode" = trackers ] && extra=(--tensorboard "$out/tb" --run-name "rep$rep" --mlflow-uri "$mlflow_uri")
    t0=$(date +%s%N)
    "${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --sharding full_shard \
      --threads 1 --data "$out/train.h5" --val-data "$out/train.val.h5" --steps "$steps" \
      --metrics-file "$out/$mode-$rep.jsonl" "${extra[@]}" > "$out/$mode-$rep.log" 2>&1 || { tail -20 "$out/$mode-$rep.log"; exit 1; }
    echo "$mode $rep $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$out/walls.txt"  # ms
  done
done
"$py" - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
walls = {}
for line in open(f"{out}/walls.txt"):
    mode, rep, secs = line.split()
    walls.setdefault(mode, []).append(float(secs) / 1e3)
for mode in ("none", "trackers"):
    steps = [statistics.mean(json.loads(l)["step_time_s"] for l in open(f"{out}/{mode}-{r}.jsonl") if json.loads(l)["step"] > 0)
             for r in range(1, reps + 1)]
    print(f"{mode:9s} wall s {' '.join(f'{w:.1f}' for w in walls[mode])} (median {statistics.median(walls[mode]):.1f}) | "
          f"mean step ms {' '.join(f'{1e3 * s:.2f}' for s in steps)} (median {1e3 * statistics.median(steps):.2f})")
loss = {m: [json.loads(l) for l in open(f"{out}/{m}-1.jsonl")][-1]["loss"] for m in ("none", "trackers")}
print(f"final loss without {loss['none']:.6f}, with {loss['trackers']:.6f}")
PY
