#!/usr/bin/env bash
# Sourced by the tracking benches (tracking_screenshots.sh, tracking_overhead.sh): local servers
# on 127.0.0.1, each in its own session and stopped when the script exits.
# Needs: py (bench/env.sh) and venv_bin (the venv's bin/) set by the caller.
server_pids=()
cleanup() {
  # each server runs in its own session (setsid): the group takes uvicorn's workers too
  for pid in "${server_pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for pid in "${server_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_http() {  # URL WHAT LIMIT_S LOG
  local t0=$SECONDS
  until curl -fs -o /dev/null --max-time 2 "$1"; do
    if [ $((SECONDS - t0)) -ge "$3" ]; then
      echo "$2 did not answer $1 within $3 s; its log:" >&2
      tail -20 "$4" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "   $2 up after $((SECONDS - t0)) s"
}

start_server() {  # LOG COMMAND...: in its own session, stopped on exit
  local log=$1
  shift
  setsid "$@" > "$log" 2>&1 &
  server_pids+=($!)
}

# A fresh SQLite store in OUT; sets mlflow_uri once /health answers.
start_mlflow_server() {  # OUT
  local port
  port=$(free_port)
  mlflow_uri=http://127.0.0.1:$port
  rm -rf "$1/mlflow.db" "$1/mlartifacts"
  echo "== MLflow server on $mlflow_uri (store $1/mlflow.db)"
  start_server "$1/mlflow-server.log" env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true \
    "$venv_bin/mlflow" server --backend-store-uri "sqlite:///$1/mlflow.db" --default-artifact-root "$1/mlartifacts" \
    --host 127.0.0.1 --port "$port" --workers 1
  # Metrics sent before the server answers are dropped, not retried: train once it is up.
  wait_http "$mlflow_uri/health" "mlflow server" 180 "$1/mlflow-server.log"
}
