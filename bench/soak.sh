#!/usr/bin/env bash
# A long run: does anything leak? 2 ranks train the demo configuration (configs/tiny-demo.cfg)
# for STEPS (2,000) steps with --async-save every 50 steps (all checkpoints kept), validation
# every 100 steps and the Prometheus endpoint on, scraped once a second. bench/proc_sampler.py
# samples each rank's resident memory, threads and open file descriptors twice a second, with the
# step reached. Criteria (bench/soak_report.py): each rank's RSS in the last 200 steps is within
# 1% of its RSS just after the warm-up (the first 200 steps: 4 checkpoints and 2 validations);
# the thread and fd counts are the same at the end as after the warm-up; every scrape after the
# endpoint came up got its metrics; every checkpoint loads (`shardtrain inspect`); the run exits 0
# with one metrics line per step.
# Usage: bench/soak.sh [OUT]   (default out/soak). Env: STEPS (2000), SAVE_EVERY (50),
# VAL_EVERY (100), WARMUP (200), NP (2). Writes OUT/results.md; exits 1 if a criterion fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=$(mkdir -p "${1:-$repo/out/soak}" && cd "${1:-$repo/out/soak}" && pwd)
steps=${STEPS:-2000} save_every=${SAVE_EVERY:-50} val_every=${VAL_EVERY:-100} warmup=${WARMUP:-200} np=${NP:-2}
mpi=(mpirun --oversubscribe -np "$np")
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
failures=0
fail() { echo "FAIL: $*" | tee -a "$out/failures.txt"; failures=$((failures + 1)); }
rm -f "$out/failures.txt"

# The demo's data, as scripts/check_demo.sh prepares it.
demo=$repo/data/demo
[ -f "$out/train.h5" ] || "$bin" prepare --tokenizer "$demo/tokenizer.model" --input "$demo/train.jsonl" \
  --val-input "$demo/val.jsonl" --format alpaca --mode padding --seq-len 64 --output "$out/train.h5" > "$out/prepare.log"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rm -rf "$out/ckpt" "$out/metrics.jsonl"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date -u '+%Y-%m-%d %H:%M UTC') t0=$SECONDS
"${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --threads 1 --batch-size $((32 / np)) \
  --data "$out/train.h5" --val-data "$out/train.val.h5" --steps "$steps" --val-every "$val_every" --log-every 100 \
  --checkpoint-dir "$out/ckpt" --save-every "$save_every" --async-save --keep-checkpoints 0 \
  --metrics-file "$out/metrics.jsonl" --metrics-port "$port" --metrics-bind 127.0.0.1 > "$out/train.log" 2>&1 &
pid=$!
"$py" "$repo/bench/proc_sampler.py" --pid "$pid" --out "$out/samples.csv" --port "$port" \
  --metrics-file "$out/metrics.jsonl" --interval 0.5 --scrape-every 1 &
sampler=$!
# The load average once a minute, beside the figures.
( while kill -0 "$pid" 2>/dev/null; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 60; done ) > "$out/load.txt" &
loadlog=$!
rc=0; wait "$pid" || rc=$?
wait "$sampler" || fail "the sampler failed"
kill "$loadlog" 2>/dev/null || true; wait "$loadlog" 2>/dev/null || true
secs=$((SECONDS - t0)) load_after=$(cut -d' ' -f1-3 /proc/loadavg)
[ "$rc" = 0 ] || fail "training exited $rc (see $out/train.log)"
lines=$(grep -c . "$out/metrics.jsonl" || true)
[ "$lines" = "$steps" ] || fail "$lines metrics lines, expected $steps"

# Scrapes: every one after the endpoint came up got a 200 with shardtrain_step.
scrapes=$(tr -d "\n" < "$out/samples.csv.scrapes.json")
"$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(j["scrapes_failed_while_up"] != 0 or j["scrapes_ok"] < 10)' \
  "$out/samples.csv.scrapes.json" || fail "scrapes: $scrapes"

# Every checkpoint loads.
n_ckpt=0 n_ok=0
for f in "$out"/ckpt/step-*.h5; do
  n_ckpt=$((n_ckpt + 1))
  if "$bin" inspect "$f" > "$f.inspect" 2>&1; then n_ok=$((n_ok + 1)); else fail "inspect $f failed (see $f.inspect)"; fi
done
expected=$((steps / save_every))
[ "$n_ckpt" = "$expected" ] || fail "$n_ckpt checkpoints, expected $expected"
left=$(ls "$out/ckpt" | grep -c '\.tmp' || true)
[ "$left" = 0 ] || fail "$left .tmp files left in the checkpoint directory"

report=$("$py" "$repo/bench/soak_report.py" "$out/samples.csv" "$steps" --warmup "$warmup" --window "$warmup") || fail "soak_report: see below"
val_lines=$(grep -c '"val_loss"' "$out/metrics.jsonl" || true)
last_loss=$(tail -n 1 "$out/metrics.jsonl" | "$py" -c 'import json, sys; j = json.loads(sys.stdin.read()); print(j["loss"])')
{
  echo "## Soak ($start, $(nproc) cores, $(uname -n); bench/soak.sh)"
  echo
  echo "$np ranks, configs/tiny-demo.cfg, $steps steps in $secs s (exit $rc), --async-save every $save_every steps (all kept)," \
       "validation every $val_every steps ($val_lines validations), Prometheus scraped at 1 Hz; last loss $last_loss."
  echo "Load average (1, 5, 15 min): $load_before at the start, $load_after at the end; per minute in load.txt."
  echo
  echo "Resident memory per rank (warm-up: the first $warmup steps):"
  echo
  echo "$report"
  echo
  echo "Scrapes: $scrapes"
  echo
  echo "Checkpoints: $n_ok of $n_ckpt load with \`shardtrain inspect\` (expected $expected); $left .tmp files left."
  echo
  echo "Failures: $failures"
} | tee "$out/results.md"
[ "$failures" = 0 ]
