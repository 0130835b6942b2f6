#!/usr/bin/env bash
# The two screenshots in docs/observability.md: TensorBoard with two runs' loss and val_loss
# overlaid (docs/images/tensorboard-two-runs.png) and the MLflow UI's page of one of them
# (docs/images/mlflow-run.png).
# It prepares the demo data (data/demo) if needed, starts a local MLflow server (SQLite store),
# trains the tiny demo model twice, the same but for the learning rate (4e-3 and 1e-3), with
# --tensorboard and --mlflow-uri, starts TensorBoard on the event files, and has headless Chromium
# take the screenshots (bench/tracking_screenshots.py). Everything listens on 127.0.0.1 only;
# nothing is fetched from outside. Every server it starts is stopped on exit.
# Needs: the built binary, mpirun, the venv's tensorboard, mlflow and pillow, Debian's chromium
# (apt-get install chromium).
# Usage: bench/tracking_screenshots.sh [OUT]   (OUT: out/tracking-screenshots; the runs, logs and
#        servers' stores; the PNGs go to docs/images/)
# Env: SHARDTRAIN_BIN, PYTHON (.venv/bin/python), STEPS (600), RANKS (2), CHROMIUM (chromium).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # repo, bin, py, out_dir, prepare_demo_data
venv_bin=$(dirname "$py")
out=$(out_dir "${1:-$repo/out/tracking-screenshots}")
images=$repo/docs/images
steps=${STEPS:-600}
ranks=${RANKS:-2}
chromium=${CHROMIUM:-$(command -v chromium || true)}
experiment=tiny-demo-lr
start=$SECONDS

[ -x "$bin" ] || { echo "no shardtrain binary at $bin (build it, or set SHARDTRAIN_BIN)" >&2; exit 1; }
[ -n "$chromium" ] || { echo "chromium is missing: apt-get install chromium" >&2; exit 1; }
for tool in tensorboard mlflow; do
  [ -x "$venv_bin/$tool" ] || { echo "$venv_bin/$tool is missing (pip install tensorboard mlflow)" >&2; exit 1; }
done

source "$repo/bench/tracking_servers.sh"  # start_mlflow_server, start_server, wait_http, free_port

# A fresh store and event directory each time: a second run under a name TensorBoard already has
# would replace its curves, and MLflow would hold two runs of that name.
rm -rf "$out/tb"
mkdir -p "$out" "$images"

prepare_demo_data "$out"

start_mlflow_server "$out"  # sets mlflow_uri

mpi=(mpirun -np "$ranks" --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
for lr in 4e-3 1e-3; do
  run=lr-$lr
  echo "== train $run: tiny model, $steps steps, $ranks ranks, --lr $lr"
  t0=$SECONDS
  nice -n 10 "${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) \
    --sharding full_shard --threads 1 --data "$out/train.h5" --val-data "$out/train.val.h5" \
    --accuracy-file "$repo/data/demo/val.jsonl" --tokenizer "$repo/data/demo/tokenizer.model" --accuracy-samples 100 \
    --steps "$steps" --log-every 20 --val-every 100 --lr "$lr" --metrics-file "$out/$run.jsonl" \
    --run-name "$run" --tensorboard "$out/tb" --mlflow-uri "$mlflow_uri" --mlflow-experiment "$experiment" \
    > "$out/$run.log" 2>&1 || { tail -30 "$out/$run.log" >&2; exit 1; }
  echo "   $(grep -o 'step [0-9]*/[0-9]* | loss [0-9.]*' "$out/$run.log" | tail -1), $((SECONDS - t0)) s"
done

tb_port=$(free_port)
tb_uri=http://127.0.0.1:$tb_port
echo "== TensorBoard on $tb_uri (logdir $out/tb)"
start_server "$out/tensorboard.log" "$venv_bin/tensorboard" --logdir "$out/tb" --host 127.0.0.1 --port "$tb_port"
wait_http "$tb_uri/data/runs" "tensorboard" 120 "$out/tensorboard.log"

echo "== screenshots -> $images"
"$py" "$repo/bench/tracking_screenshots.py" --chromium "$chromium" --tensorboard "$tb_uri" --runs 2 \
  --mlflow "$mlflow_uri" --experiment "$experiment" --run lr-4e-3 --out-dir "$images"
echo "== done in $((SECONDS - start)) s"
