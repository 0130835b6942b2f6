#!/usr/bin/env bash
# The cost of the experiment trackers on the demo's training: the demo run (configs/tiny-demo.cfg,
# 2 ranks, full_shard) without trackers and with --tensorboard and --mlflow-uri (a local mlflow
# server, SQLite store, on the same cores), in pairs whose order alternates (none/both, both/none)
# so that drift hits both alike. Per run: wall time, median step time, and the CPU time the mlflow
# server's processes used meanwhile; then the medians, each pair's difference, and the spread of
# the runs without trackers (the noise). docs/performance.md keeps the figures.
#   bench/tracking_overhead.sh [OUT]     (OUT: out/tracking-overhead)
# Env: SHARDTRAIN_BIN, PYTHON (.venv/bin/python), STEPS (1000 of the demo's 8000), REPS (5 pairs), RANKS (2),
#      MODES ("none both"; also "tensorboard" and "mlflow" for one tracker alone).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # repo, bin, py, out_dir, prepare_demo_data
venv_bin=$(dirname "$py")
out=$(out_dir "${1:-$repo/out/tracking-overhead}")
steps=${STEPS:-1000} reps=${REPS:-5} ranks=${RANKS:-2}
read -r -a modes <<< "${MODES:-none both}"
source "$repo/bench/tracking_servers.sh"  # start_mlflow_server
prepare_demo_data "$out"
start_mlflow_server "$out"
rm -rf "$out/tb" "$out"/*.jsonl "$out/runs.txt"
# CPU seconds (user + system) of every process in the server's session so far.
server_cpu_s() {
  local ticks=0 pid t
  for pid in $(pgrep -s "${server_pids[0]}"); do
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    ticks=$((ticks + t))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
mpi=(mpirun -np "$ranks" --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
for rep in $(seq "$reps"); do
  order=("${modes[@]}")
  [ $((rep % 2)) -eq 1 ] || order=($(printf '%s\n' "${modes[@]}" | tac))
  for mode in "${order[@]}"; do
    extra=()
    case $mode in
      none) ;;
      tensorboard) extra=(--tensorboard "$out/tb" --run-name "$mode-$rep") ;;
      mlflow) extra=(--mlflow-uri "$mlflow_uri" --run-name "$mode-$rep") ;;
      both) extra=(--tensorboard "$out/tb" --mlflow-uri "$mlflow_uri" --run-name "$mode-$rep") ;;
      *) echo "MODES: unknown mode $mode (none, tensorboard, mlflow, both)" >&2; exit 2 ;;
    esac
    cpu0=$(server_cpu_s)
    t0=$(date +%s%N)
    "${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --sharding full_shard \
      --threads 1 --data "$out/train.h5" --val-data "$out/train.val.h5" --steps "$steps" \
      --metrics-file "$out/$mode-$rep.jsonl" "${extra[@]}" > "$out/$mode-$rep.log" 2>&1 || { tail -20 "$out/$mode-$rep.log"; exit 1; }
    wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    sleep 2  # the server's last request
    echo "$mode $rep $wall_ms $(awk -v a="$cpu0" -v b="$(server_cpu_s)" 'BEGIN { printf "%.2f", b - a }')" >> "$out/runs.txt"
    tail -1 "$out/runs.txt"
  done
done
"$py" - "$out" "${modes[@]}" <<'PY'
import json, statistics, sys
out, modes = sys.argv[1], sys.argv[2:]
runs = {}
for line in open(f"{out}/runs.txt"):
    mode, rep, wall_ms, cpu = line.split()
    steps = [json.loads(l) for l in open(f"{out}/{mode}-{rep}.jsonl")]
    step_ms = 1e3 * statistics.median(s["step_time_s"] for s in steps if s["step"] > 0)
    runs.setdefault(mode, {})[int(rep)] = (float(wall_ms) / 1e3, step_ms, float(cpu), steps[-1]["loss"])
med = lambda xs: statistics.median(xs)
for mode in modes:
    r = runs[mode].values()
    print(f"{mode:12s} wall s {' '.join(f'{x[0]:.1f}' for x in r)} (median {med(x[0] for x in r):.1f}) | median step ms "
          f"{' '.join(f'{x[1]:.2f}' for x in r)} (median {med(x[1] for x in r):.2f}) | server CPU s "
          f"{' '.join(f'{x[2]:.1f}' for x in r)}")
base = runs["none"]
noise = (max(x[1] for x in base.values()) - min(x[1] for x in base.values())) / med(x[1] for x in base.values())
print(f"noise: the runs without trackers span {100 * noise:.1f}% of their median step")
for mode in modes:
    if mode == "none":
        continue
    diffs = [100 * (runs[mode][k][1] / base[k][1] - 1) for k in sorted(base)]
    print(f"{mode}: step time against the pair's run without trackers {' '.join(f'{d:+.1f}%' for d in diffs)} "
          f"(median {med(diffs):+.1f}%); medians {100 * (med(x[1] for x in runs[mode].values()) / med(x[1] for x in base.values()) - 1):+.1f}%")
    same = all(runs[mode][k][3] == base[k][3] for k in base)
    print(f"{mode}: final losses {'identical to' if same else 'DIFFERENT from'} the runs without trackers ({base[1][3]:.6f})")
PY
