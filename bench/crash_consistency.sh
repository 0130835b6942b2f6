#!/usr/bin/env bash
# Crash consistency at scale. Not a test: run it by hand, as root (it mounts a small tmpfs).
#  1. kill -9 of every rank at KILLS random moments (default 100) of runs that save every step,
#     synchronously and with --async-save, at 2 and 4 ranks. Each run resumes with --resume auto;
#     the script checks that it continues from the newest complete checkpoint, and that every
#     step's loss in the metrics JSONL equals an uninterrupted run's, bit for bit.
#  2. A full disk during a save (a tmpfs smaller than two checkpoints), sync and async, at 2 and 4
#     ranks: exit 2 with one shardtrain line that names the full disk, the previous checkpoint
#     stays loadable, no partial file is left; once space is freed, --resume auto finishes the run
#     with the uninterrupted run's losses.
# Usage: bench/crash_consistency.sh [OUT]   (default out/crash).
# Env: KILLS (100, spread over the configurations), CONFIGS ("2 sync,2 async,4 sync,4 async"),
# STEPS, MAX_DELAY (8: kills land 0-8 s after training starts), SEED, RUN_TIMEOUT.
# Writes OUT/results.md and exits 1 if any case fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=$(mkdir -p "${1:-$repo/out/crash}" && cd "${1:-$repo/out/crash}" && pwd)
kills=${KILLS:-100} steps=${STEPS:-150} max_delay=${MAX_DELAY:-8} RANDOM=${SEED:-20}
# A hang is a failure too: every run gets RUN_TIMEOUT seconds (TERM to mpirun, KILL 10 s later).
mpi=(timeout -k 10 "${RUN_TIMEOUT:-300}" mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
data=$(bench_data "$out" 64)
# constant LR: a run's losses do not depend on its --steps, so a resumed run may stop anywhere.
train=(train --model tiny --threads 1 --data "$data" --batch-size 2 --lr-schedule constant --warmup-steps 0 --log-every 100000)
failures=0
fail() { echo "FAIL: $*" | tee -a "$out/failures.txt"; failures=$((failures + 1)); }
rm -f "$out/failures.txt"

# check_metrics FILE REF [STEPS]: every line's loss equals REF's at its step, steps run 1..m once
# each (m = STEPS when given); prints m, or a reason and exits 1.
check_metrics() {
  "$py" - "$@" <<'EOF'
import json, os, sys
got = [json.loads(l) for l in open(sys.argv[1]) if l.strip()] if os.path.exists(sys.argv[1]) else []
ref = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[2]))}
steps = [j["step"] for j in got]
if steps != list(range(1, len(steps) + 1)):
    sys.exit("steps are not 1..%d once each: %s" % (len(steps), steps))
bad = [j["step"] for j in got if j["loss"] != ref.get(j["step"])]
if bad:
    sys.exit("losses differ from the uninterrupted run at steps %s" % bad[:10])
if len(sys.argv) > 3 and len(steps) != int(sys.argv[3]):
    sys.exit("%d steps, expected %s" % (len(steps), sys.argv[3]))
print(len(steps))
EOF
}
# newest DIR: the step of the newest complete checkpoint, the one `latest` names (0: none).
newest() { sed -n 's/^step-0*\([0-9][0-9]*\)\.h5$/\1/p' "$1/latest" 2>/dev/null | grep . || echo 0; }
# ranks_of PID: the ranks under timeout PID -> mpirun -> ranks.
ranks_of() { for m in $(ps --ppid "$1" -o pid=); do ps --ppid "$m" -o pid=; done | tr -d ' ' | paste -sd' '; }

# resume_ok LOG EXPECT: the run resumed from checkpoint EXPECT (or started fresh when 0).
resume_ok() {
  if grep -q "cannot be loaded" "$1"; then return 1; fi
  if [ "$2" = 0 ]; then grep -q "no loadable checkpoint\|no checkpoint in" "$1"
  else grep -q "resumed from .*/$(printf 'step-%08d.h5' "$2") at step $2 " "$1"; fi
}

summary=""
kills_done=0 verified=0 during_save=0 lost_steps=0 completed=0
IFS=, read -r -a configs <<< "${CONFIGS:-2 sync,2 async,4 sync,4 async}"  # ranks and saves
per_config=$(( (kills + ${#configs[@]} - 1) / ${#configs[@]} ))
for cfg in "${configs[@]}"; do
  read -r np mode <<< "$cfg"
  extra=(); [ "$mode" = async ] && extra=(--async-save)
  name=np$np-$mode dir=$out/$name/ckpt metrics=$out/$name/metrics.jsonl
  rm -rf "${out:?}/$name" && mkdir -p "$out/$name"
  ref=$out/ref-np$np.jsonl
  [ -s "$ref" ] || nice "${mpi[@]}" -np "$np" "$bin" "${train[@]}" --steps "$steps" --metrics-file "$ref" > "$ref.log" 2>&1
  c_kills=0 c_verified=0 c_save=0 c_lost=0 pending=0 run=0
  while :; do
    run=$((run + 1))
    expect=$(newest "$dir") log=$out/$name/run-$run.log
    # Once the kills are done, one last run continues 5 steps past the newest checkpoint, to the end.
    last=$steps; [ "$c_kills" -lt "$per_config" ] || last=$((expect + 5 < steps ? expect + 5 : steps))
    nice "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps "$last" --save-every 1 --keep-checkpoints 3 \
      --checkpoint-dir "$dir" --resume auto --metrics-file "$metrics" > "$log" 2>&1 &
    pid=$!
    killed=0
    if [ "$c_kills" -lt "$per_config" ]; then
      # The random moment counts from the start of training (the resume line), not from launch:
      # start-up takes longer than the moments span on a busy machine, and holds no save.
      for _ in $(seq 2400); do grep -q "resumed from\|no loadable checkpoint\|no checkpoint in" "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      delay=$(awk -v r="$RANDOM" -v m="$max_delay" 'BEGIN { printf "%.3f", r / 32767 * m }')
      sleep "$delay"
      pids=$(ranks_of "$pid")
      if [ -n "$pids" ] && kill -0 "$pid" 2>/dev/null; then
        tmp_at_kill=$(ls "$dir" 2>/dev/null | grep -c '\.h5\.tmp$' || true)
        kill -9 $pids 2>/dev/null && killed=1
      fi
    fi
    rc=0; wait "$pid" || rc=$?
    if grep -q "resumed from\|no loadable checkpoint\|no checkpoint in" "$log"; then
      if resume_ok "$log" "$expect"; then c_verified=$((c_verified + pending)); pending=0
      else fail "$name run $run: did not resume from the newest complete checkpoint (step $expect): $(grep -m1 'resumed from\|cannot be loaded\|no loadable\|no checkpoint in' "$log")"; pending=0; fi
    fi
    if [ "$killed" = 1 ]; then
      c_kills=$((c_kills + 1)) pending=$((pending + 1))
      c_save=$((c_save + (tmp_at_kill > 0 ? 1 : 0)))
      if ! m=$(check_metrics "$metrics" "$ref" 2>&1); then fail "$name kill $c_kills: $m"; m=0; fi
      c=$(newest "$dir")
      c_lost=$((c_lost + (m > c ? m - c : 0)))
      echo "$name kill $c_kills at +${delay}s: save in flight: $tmp_at_kill, metrics to step $m, newest checkpoint step $c"
      continue
    fi
    if [ "$rc" != 0 ]; then fail "$name run $run: exit $rc without a kill (see $log)"; break; fi
    completed=$((completed + 1))
    if ! m=$(check_metrics "$metrics" "$ref" "$last" 2>&1); then fail "$name completed run: $m"; fi
    [ "$c_kills" -lt "$per_config" ] || break
    echo "$name: reached step $steps with kills to go; starting the chain again"
    rm -rf "$dir" "$metrics"
  done
  [ "$pending" = 0 ] || fail "$name: $pending kills not followed by a verified resume"
  echo "$name: $c_kills kills, $c_verified resumed from the newest checkpoint, $c_save during a save, $c_lost steps recomputed"
  summary+="| $np | $mode | $c_kills | $c_verified | $c_save | $c_lost | $steps |"$'\n'
  kills_done=$((kills_done + c_kills)) verified=$((verified + c_verified)) during_save=$((during_save + c_save))
  lost_steps=$((lost_steps + c_lost))
done

# Disk full: a tmpfs that holds the first checkpoint but not the second (a save needs its size,
# plus 1/16 and 1 MiB, free before it starts).
mnt=$out/full
mkdir -p "$mnt"
! mountpoint -q "$mnt" || umount "$mnt"
trap '! mountpoint -q "$mnt" || umount "$mnt"' EXIT
ckpt_bytes=$(stat -c %s "$(ls "$out"/np*/ckpt/step-*.h5 | head -n 1)")
full_rows=""
for cfg in "${configs[@]}"; do
  read -r np mode <<< "$cfg"
  extra=(); [ "$mode" = async ] && extra=(--async-save)
  name=full-np$np-$mode log=$out/$name.log metrics=$out/$name.jsonl
  mount -t tmpfs -o size=$((ckpt_bytes * 2 + 262144)) tmpfs "$mnt"
  rc=0
  nice "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps 6 --save-every 2 --checkpoint-dir "$mnt/ckpt" \
    --metrics-file "$metrics" > "$log" 2>&1 || rc=$?
  lines=$(grep -c '^shardtrain: ' "$log" || true)
  line=$(grep -m1 '^shardtrain: ' "$log" || true)
  left=$(ls "$mnt/ckpt" | paste -sd' ')
  ok=1
  [ "$rc" = 2 ] || { fail "$name: exit $rc, expected 2 (124: it hung until RUN_TIMEOUT)"; ok=0; }
  [ "$lines" = 1 ] || { fail "$name: $lines shardtrain error lines, expected 1"; ok=0; }
  echo "$line" | grep -q "the disk is full" || { fail "$name: the line does not name the full disk: $line"; ok=0; }
  [ "$left" = "latest step-00000002.h5" ] || { fail "$name: left behind: $left"; ok=0; }
  nice "$bin" inspect "$mnt/ckpt/step-00000002.h5" > "$out/$name.inspect" 2>&1 || { fail "$name: inspect of step 2 failed"; ok=0; }
  mount -o remount,size=64M "$mnt"  # space freed
  nice "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps 6 --save-every 2 --checkpoint-dir "$mnt/ckpt" \
    --resume auto --metrics-file "$metrics" > "$log.resume" 2>&1 || fail "$name: the resumed run failed"
  resume_ok "$log.resume" 2 || { fail "$name: did not resume from step 2"; ok=0; }
  if ! m=$(check_metrics "$metrics" "$out/ref-np$np.jsonl" 6 2>&1); then fail "$name: $m"; ok=0; fi
  umount "$mnt"
  echo "$name: exit $rc, '$line'"
  full_rows+="| $np | $mode | $rc | $lines | $([ "$ok" = 1 ] && echo yes || echo NO) |"$'\n'
done

when=$(date -u '+%Y-%m-%d %H:%M UTC')
{
  echo "## Crash consistency ($when, $(nproc) cores, $(uname -n); bench/crash_consistency.sh)"
  echo
  echo "kill -9 of every rank at random moments (0-${max_delay} s after training started), --save-every 1, --keep-checkpoints 3:"
  echo
  echo "| ranks | saves | kills | resumed from the newest checkpoint | kills during a save | steps recomputed | steps |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$summary"
  echo
  echo "Total: $kills_done kills, $verified resumed from the newest complete checkpoint, $during_save during a save;" \
       "$completed runs reached their last step, and each metrics file then held every step once, with the uninterrupted run's loss."
  echo
  echo "Disk full at the save of step 4 (tmpfs of $((ckpt_bytes * 2 + 262144)) bytes, checkpoints of $ckpt_bytes):"
  echo
  echo "| ranks | saves | exit | shardtrain lines | step 2 loadable, nothing left behind, resumed with equal losses |"
  echo "|---|---|---|---|---|"
  printf '%s' "$full_rows"
  echo
  echo "Failures: $failures"
} | tee "$out/results.md"
[ "$failures" = 0 ]
