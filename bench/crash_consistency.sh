#!/usr/bin/env bash
# Crash consistency at scale. Not a test: run it by hand, as root (it mounts a small tmpfs).
#  1. kill -9 of every rank at KILLS moments (default 100) of runs that save every step,
#     synchronously and with --async-save, at 2 and 4 ranks. The moments take turns: random
#     (0-MAX_DELAY s after training started), aimed at a save's write (a step-N.h5.tmp has just
#     appeared) and aimed at its publication (the .tmp has just been renamed and `latest` is being
#     updated); bench/kill_at.py polls the checkpoint directory and kills. Each run resumes with
#     --resume auto; the script checks that it continues from the newest complete checkpoint, that
#     every step's loss in the metrics JSONL equals an uninterrupted run's, bit for bit, and that
#     each chain of kills ends at the uninterrupted run's final loss.
#  2. A full disk during a save (a tmpfs smaller than two checkpoints), sync and async, at 2 and 4
#     ranks: exit 2 with one shardtrain line that names the full disk, the previous checkpoint
#     stays loadable, no partial file is left; once space is freed, --resume auto finishes the run
#     with the uninterrupted run's losses. DISK_FULL=0 skips it.
#  3. kill -9 of `shardtrain prepare` (PREPARE_KILLS, default 16; bench/prepare_kills.py): at a
#     random moment, while the train file's temporary is written, just after its rename, and just
#     after the validation file's rename. Each output must be absent or complete, and a rerun must
#     give outputs equal to an uninterrupted run's.
#  4. kill -9 of one rank of 4 in the middle of a run (RANK_KILLS, default "1,2,3,0": one run per
#     rank named): every other rank must be gone within --collective-timeout (COLLECTIVE_TIMEOUT,
#     30) + 10 s, a line must name the dead rank, and --resume auto must end at the uninterrupted
#     run's losses.
# Usage: bench/crash_consistency.sh [OUT]   (default out/crash).
# Env: KILLS (100, spread over the configurations), CONFIGS ("2 sync,2 async,4 sync,4 async"),
# STEPS, MAX_DELAY (8), SEED, RUN_TIMEOUT, NICE (1), DISK_FULL, PREPARE_KILLS, RANK_KILLS, COLLECTIVE_TIMEOUT
# (CONFIGS="", RANK_KILLS="", PREPARE_KILLS=0, DISK_FULL=0 skip their parts).
# Writes OUT/results.md and exits 1 if any case fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=$(mkdir -p "${1:-$repo/out/crash}" && cd "${1:-$repo/out/crash}" && pwd)
kills=${KILLS:-100} steps=${STEPS:-150} max_delay=${MAX_DELAY:-8} RANDOM=${SEED:-20}
# A hang is a failure too: every run gets RUN_TIMEOUT seconds (TERM to mpirun, KILL 10 s later).
mpi=(timeout -k 10 "${RUN_TIMEOUT:-300}" mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
# The runs are niced, to leave a shared machine to its other work (NICE=0: not).
nice=(nice); [ "${NICE:-1}" = 1 ] || nice=(env)
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
# resumable DIR: the step --resume auto must continue from: the one `latest` names; without
# `latest`, the newest step-*.h5 (a kill after the first checkpoint's rename, before `latest`
# was written, leaves it complete and unnamed); 0 when there is none.
resumable() {
  if [ -f "$1/latest" ]; then newest "$1"
  else ls "$1" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -n 1 | grep . || echo 0; fi
}
# jget JSON EXPR: a field (or a Python expression over j) of a one-line JSON object.
jget() { "$py" -c 'import json, sys; j = json.loads(sys.argv[1]); e = sys.argv[2]; print(j[e] if e in j else eval(e))' "$1" "$2"; }
moments=(random save publish)

# resume_ok LOG EXPECT: the run resumed from checkpoint EXPECT (or started fresh when 0).
resume_ok() {
  if grep -q "cannot be loaded" "$1"; then return 1; fi
  if [ "$2" = 0 ]; then grep -q "no loadable checkpoint\|no checkpoint in" "$1"
  else grep -q "resumed from .*/$(printf 'step-%08d.h5' "$2") at step $2 " "$1"; fi
}

summary=""
kills_done=0 verified=0 during_save=0 lost_steps=0 completed=0 final_equal=0
declare -A k_by=() ver_by=() tmp_by=() fin_by=()  # per moment: kills, verified resumes, .tmp at the kill, final loss equal
between=0  # publish kills that landed after the rename and before `latest` named the file
IFS=, read -r -a configs <<< "${CONFIGS-2 sync,2 async,4 sync,4 async}"  # ranks and saves ("": none)
per_config=$(( ${#configs[@]} ? (kills + ${#configs[@]} - 1) / ${#configs[@]} : 0 ))
for cfg in "${configs[@]}"; do
  read -r np mode <<< "$cfg"
  extra=(); [ "$mode" = async ] && extra=(--async-save)
  name=np$np-$mode dir=$out/$name/ckpt metrics=$out/$name/metrics.jsonl
  rm -rf "${out:?}/$name" && mkdir -p "$out/$name"
  ref=$out/ref-np$np.jsonl
  [ -s "$ref" ] || "${nice[@]}" "${mpi[@]}" -np "$np" "$bin" "${train[@]}" --steps "$steps" --metrics-file "$ref" > "$ref.log" 2>&1
  c_kills=0 c_verified=0 c_save=0 c_lost=0 c_final=0 run=0
  pending=() chain=()  # the moments of kills awaiting a verified resume, and of this chain's kills
  while :; do
    run=$((run + 1))
    expect=$(resumable "$dir") log=$out/$name/run-$run.log
    # Once the kills are done, one last run continues 5 steps past the newest checkpoint, to the end.
    last=$steps; [ "$c_kills" -lt "$per_config" ] || last=$((expect + 5 < steps ? expect + 5 : steps))
    "${nice[@]}" "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps "$last" --save-every 1 --keep-checkpoints 3 \
      --checkpoint-dir "$dir" --resume auto --metrics-file "$metrics" > "$log" 2>&1 &
    pid=$!
    killed=0
    if [ "$c_kills" -lt "$per_config" ]; then
      # The moment counts from the start of training (the resume line), not from launch:
      # start-up takes longer than the moments span on a busy machine, and holds no save.
      for _ in $(seq 2400); do grep -q "resumed from\|no loadable checkpoint\|no checkpoint in" "$log" 2>/dev/null && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      delay=$(awk -v r="$RANDOM" -v m="$max_delay" 'BEGIN { printf "%.3f", r / 32767 * m }')
      # One kill in three at a random moment, one aimed at a save's write (a step-N.h5.tmp has
      # just appeared), one at its publication (the .tmp has just been renamed; `latest` is being
      # updated). The aimed ones first wait 0-2 s, so that they do not always hit the first save.
      moment=${moments[$((c_kills % 3))]}
      [ "$moment" = random ] || sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", r / 32767 * 2 }')"
      k=$("$py" "$repo/bench/kill_at.py" --pid "$pid" --dir "$dir" --mode "$moment" --delay "$delay" --seed "$RANDOM")
      echo "$k" >> "$out/$name/kills.jsonl"
      if [ "$(jget "$k" killed)" = True ]; then
        killed=1
        tmp_at_kill=$(jget "$k" 'len(j["tmp_at_kill"])')
        moment=$(jget "$k" mode)  # "-timeout" appended when the aimed moment did not come in 30 s
        if [ "$moment" = publish ] && [ "$(jget "$k" 'j["aimed_at"] is not None and j["latest"] != j["aimed_at"][:-4]')" = True ]; then
          between=$((between + 1))
        fi
      fi
    fi
    rc=0; wait "$pid" || rc=$?
    if grep -q "resumed from\|no loadable checkpoint\|no checkpoint in" "$log"; then
      if resume_ok "$log" "$expect"; then
        c_verified=$((c_verified + ${#pending[@]}))
        for m_ in "${pending[@]}"; do ver_by[$m_]=$(( ${ver_by[$m_]:-0} + 1 )); done
      else fail "$name run $run: did not resume from the newest complete checkpoint (step $expect): $(grep -m1 'resumed from\|cannot be loaded\|no loadable\|no checkpoint in' "$log")"; fi
      pending=()
    fi
    if [ "$killed" = 1 ]; then
      c_kills=$((c_kills + 1)) pending+=("$moment") chain+=("$moment")
      k_by[$moment]=$(( ${k_by[$moment]:-0} + 1 ))
      c_save=$((c_save + (tmp_at_kill > 0 ? 1 : 0)))
      tmp_by[$moment]=$(( ${tmp_by[$moment]:-0} + (tmp_at_kill > 0 ? 1 : 0) ))
      if ! m=$(check_metrics "$metrics" "$ref" 2>&1); then fail "$name kill $c_kills: $m"; m=0; fi
      c=$(newest "$dir")
      c_lost=$((c_lost + (m > c ? m - c : 0)))
      echo "$name kill $c_kills ($moment$([ "$moment" != random ] || echo " at +${delay}s")): save in flight: $tmp_at_kill, metrics to step $m, newest checkpoint step $c"
      continue
    fi
    if [ "$rc" != 0 ]; then fail "$name run $run: exit $rc without a kill (see $log)"; break; fi
    completed=$((completed + 1))
    # The chain's last run: every step's loss, the final one included, equals the uninterrupted run's.
    if m=$(check_metrics "$metrics" "$ref" "$last" 2>&1); then
      c_final=$((c_final + ${#chain[@]}))
      for m_ in "${chain[@]}"; do fin_by[$m_]=$(( ${fin_by[$m_]:-0} + 1 )); done
    else fail "$name completed run: $m"; fi
    chain=()
    [ "$c_kills" -lt "$per_config" ] || break
    echo "$name: reached step $steps with kills to go; starting the chain again"
    rm -rf "$dir" "$metrics"
  done
  [ "${#pending[@]}" = 0 ] || fail "$name: ${#pending[@]} kills not followed by a verified resume"
  echo "$name: $c_kills kills, $c_verified resumed from the newest checkpoint, $c_final ended at the uninterrupted run's final loss, $c_save during a save, $c_lost steps recomputed"
  summary+="| $np | $mode | $c_kills | $c_verified | $c_final | $c_save | $c_lost | $steps |"$'\n'
  kills_done=$((kills_done + c_kills)) verified=$((verified + c_verified)) during_save=$((during_save + c_save))
  lost_steps=$((lost_steps + c_lost)) final_equal=$((final_equal + c_final))
done
moment_rows=""
for m_ in $(printf '%s\n' "${!k_by[@]}" | sort); do
  moment_rows+="| $m_ | ${k_by[$m_]} | ${ver_by[$m_]:-0} | ${fin_by[$m_]:-0} | ${tmp_by[$m_]:-0} |"$'\n'
done

# Disk full: a tmpfs that holds the first checkpoint but not the second (a save needs its size,
# plus 1/16 and 1 MiB, free before it starts).
mnt=$out/full
full_rows=""
if [ "${DISK_FULL:-1}" = 1 ]; then
mkdir -p "$mnt"
! mountpoint -q "$mnt" || umount "$mnt"
trap '! mountpoint -q "$mnt" || umount "$mnt"' EXIT
ckpt_bytes=$(stat -c %s "$(ls "$out"/np*/ckpt/step-*.h5 | head -n 1)")
for cfg in "${configs[@]}"; do
  read -r np mode <<< "$cfg"
  extra=(); [ "$mode" = async ] && extra=(--async-save)
  name=full-np$np-$mode log=$out/$name.log metrics=$out/$name.jsonl
  mount -t tmpfs -o size=$((ckpt_bytes * 2 + 262144)) tmpfs "$mnt"
  rc=0
  "${nice[@]}" "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps 6 --save-every 2 --checkpoint-dir "$mnt/ckpt" \
    --metrics-file "$metrics" > "$log" 2>&1 || rc=$?
  lines=$(grep -c '^shardtrain: ' "$log" || true)
  line=$(grep -m1 '^shardtrain: ' "$log" || true)
  left=$(ls "$mnt/ckpt" | paste -sd' ')
  ok=1
  [ "$rc" = 2 ] || { fail "$name: exit $rc, expected 2 (124: it hung until RUN_TIMEOUT)"; ok=0; }
  [ "$lines" = 1 ] || { fail "$name: $lines shardtrain error lines, expected 1"; ok=0; }
  echo "$line" | grep -q "the disk is full" || { fail "$name: the line does not name the full disk: $line"; ok=0; }
  [ "$left" = "latest step-00000002.h5" ] || { fail "$name: left behind: $left"; ok=0; }
  "${nice[@]}" "$bin" inspect "$mnt/ckpt/step-00000002.h5" > "$out/$name.inspect" 2>&1 || { fail "$name: inspect of step 2 failed"; ok=0; }
  mount -o remount,size=64M "$mnt"  # space freed
  "${nice[@]}" "${mpi[@]}" -np "$np" "$bin" "${train[@]}" "${extra[@]}" --steps 6 --save-every 2 --checkpoint-dir "$mnt/ckpt" \
    --resume auto --metrics-file "$metrics" > "$log.resume" 2>&1 || fail "$name: the resumed run failed"
  resume_ok "$log.resume" 2 || { fail "$name: did not resume from step 2"; ok=0; }
  if ! m=$(check_metrics "$metrics" "$out/ref-np$np.jsonl" 6 2>&1); then fail "$name: $m"; ok=0; fi
  umount "$mnt"
  echo "$name: exit $rc, '$line'"
  full_rows+="| $np | $mode | $rc | $lines | $([ "$ok" = 1 ] && echo yes || echo NO) |"$'\n'
done
fi

# prepare killed: its outputs are absent or complete, never partial, and a rerun gives them again.
prepare_report=""
if [ "${PREPARE_KILLS:-16}" -gt 0 ]; then
  demo=$repo/data/demo
  if prepare_report=$("${nice[@]}" "$py" "$repo/bench/prepare_kills.py" --bin "$bin" --out "$out/prepare" --kills "${PREPARE_KILLS:-16}" -- \
      --tokenizer "$demo/tokenizer.model" --input "$demo/train.jsonl" --val-input "$demo/val.jsonl" --format alpaca \
      --mode padding --seq-len 64 2>&1 | tee "$out/prepare.log" | grep -v '^{'); then :; else fail "prepare kills: see $out/prepare.log"; fi
  echo "$prepare_report"
fi

# One rank of four killed mid-step: the others must be gone within --collective-timeout + 10 s,
# with a line that names the dead rank, and --resume auto must then end at the uninterrupted
# run's losses.
ct=${COLLECTIVE_TIMEOUT:-30}
rank_rows=""
# rank_pid LAUNCHER RANK: the pid of that rank (OMPI_COMM_WORLD_RANK) under the launcher.
rank_pid() { "$py" -c 'import sys; sys.path.insert(0, sys.argv[3]); from proc_sampler import ranks; print(ranks(int(sys.argv[1])).get(int(sys.argv[2]), ""))' "$1" "$2" "$repo/bench"; }
IFS=, read -r -a victims <<< "${RANK_KILLS-1,2,3,0}"
if [ "${#victims[@]}" -gt 0 ]; then
  ref4=$out/ref-np4.jsonl
  [ -s "$ref4" ] || "${nice[@]}" "${mpi[@]}" -np 4 "$bin" "${train[@]}" --steps "$steps" --metrics-file "$ref4" > "$ref4.log" 2>&1
fi
for victim in "${victims[@]}"; do
  name=rank$victim dir=$out/$name/ckpt metrics=$out/$name/metrics.jsonl log=$out/$name/run.log
  rm -rf "${out:?}/$name" && mkdir -p "$out/$name"
  "${nice[@]}" "${mpi[@]}" -np 4 "$bin" "${train[@]}" --steps "$steps" --save-every 10 --checkpoint-dir "$dir" \
    --collective-timeout "$ct" --metrics-file "$metrics" > "$log" 2>&1 &
  pid=$!
  # Mid-run: past step 25, between two saves.
  for _ in $(seq 6000); do n=$(grep -c . "$metrics" 2>/dev/null) || true; [ "${n:-0}" -lt 25 ] || break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  declare -A others=()
  for r in 0 1 2 3; do others[$r]=$(rank_pid "$pid" "$r"); done
  vpid=${others[$victim]}; unset "others[$victim]"
  at_step=$(grep -c . "$metrics" || true)
  t_kill=$(date +%s.%N)
  kill -9 "$vpid"
  # When each surviving rank is gone, and when the launcher is.
  gone="" t_last=$t_kill
  while :; do
    alive=0
    for r in "${!others[@]}"; do
      p=${others[$r]}
      if [ -n "$p" ] && [ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]; then alive=1
      elif [ -n "$p" ]; then gone+="$r:$(awk -v a="$(date +%s.%N)" -v b="$t_kill" 'BEGIN { printf "%.1f", a - b }') "; others[$r]=""; fi
    done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  t_ranks=$(awk -v a="$(date +%s.%N)" -v b="$t_kill" 'BEGIN { printf "%.1f", a - b }')
  rc=0; wait "$pid" || rc=$?
  t_mpirun=$(awk -v a="$(date +%s.%N)" -v b="$t_kill" 'BEGIN { printf "%.1f", a - b }')
  unset others
  within=$(awk -v t="$t_ranks" -v c="$ct" 'BEGIN { print (t <= c + 10) ? "yes" : "NO" }')
  [ "$within" = yes ] || fail "$name: the other ranks took $t_ranks s to exit (limit $((ct + 10)) s)"
  # A line naming the dead rank: shardtrain's own, or Open MPI's.
  named_st=$(grep -m1 "^shardtrain: .*rank $victim\b" "$log" || true)
  named_mpi=$(grep -m1 "process rank $victim with PID" "$log" || true)
  [ -n "$named_st$named_mpi" ] || fail "$name: no line names rank $victim (see $log)"
  # Resume to the end.
  "${nice[@]}" "${mpi[@]}" -np 4 "$bin" "${train[@]}" --steps "$steps" --save-every 10 --checkpoint-dir "$dir" \
    --collective-timeout "$ct" --resume auto --metrics-file "$metrics" > "$log.resume" 2>&1 || fail "$name: the resumed run failed"
  resumed=$(grep -m1 -o 'resumed from [^ ]* at step [0-9]*' "$log.resume" || echo "no resume line")
  if m=$(check_metrics "$metrics" "$ref4" "$steps" 2>&1); then final=yes; else final=NO; fail "$name: $m"; fi
  echo "$name: killed at step $at_step; other ranks gone after $t_ranks s ($gone), mpirun exit $rc after $t_mpirun s; shardtrain line: ${named_st:-none}; Open MPI line: ${named_mpi:-none}; $resumed; final loss equal: $final"
  rank_rows+="| $victim | $at_step | $t_ranks s | $t_mpirun s (exit $rc) | $within | $([ -n "$named_st" ] && echo yes || echo no) | $([ -n "$named_mpi" ] && echo yes || echo no) | ${resumed#resumed from } | $final |"$'\n'
  echo "$named_mpi" > "$out/$name/mpi-line.txt"
done

when=$(date -u '+%Y-%m-%d %H:%M UTC')
{
  echo "## Crash consistency ($when, $(nproc) cores, $(uname -n), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; bench/crash_consistency.sh)"
  echo
  echo "kill -9 of every rank (0-${max_delay} s after training started for the random moments), --save-every 1, --keep-checkpoints 3:"
  echo
  echo "| ranks | saves | kills | resumed from the newest checkpoint | chain ended at the uninterrupted run's final loss | kills during a save | steps recomputed | steps |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s' "$summary"
  echo
  echo "By moment:"
  echo
  echo "| moment | kills | resumed from the newest checkpoint | final loss equal | a .tmp present at the kill |"
  echo "|---|---|---|---|---|"
  printf '%s' "$moment_rows"
  echo
  echo "Total: $kills_done kills; $verified resumed from the newest complete checkpoint; **$final_equal/$kills_done resumed with the final loss equal to an uninterrupted run**;" \
       "$during_save during a save; $between publish kills landed after the rename and before \`latest\` named the new file." \
       "Each metrics file held every step once, with the uninterrupted run's loss."
  if [ -n "$full_rows" ]; then
    echo
    echo "Disk full at the save of step 4 (tmpfs of $((ckpt_bytes * 2 + 262144)) bytes, checkpoints of $ckpt_bytes):"
    echo
    echo "| ranks | saves | exit | shardtrain lines | step 2 loadable, nothing left behind, resumed with equal losses |"
    echo "|---|---|---|---|---|"
    printf '%s' "$full_rows"
  fi
  if [ -n "$prepare_report" ]; then
    echo
    echo "prepare killed (${PREPARE_KILLS:-16} kills):"
    echo
    echo "$prepare_report"
  fi
  if [ -n "$rank_rows" ]; then
    echo
    echo "One rank of 4 killed mid-run (--collective-timeout $ct):"
    echo
    echo "| rank killed | at step | other ranks gone after | mpirun gone after | within timeout + 10 s | a shardtrain line names it | Open MPI's line names it | --resume auto from | final loss equal |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s' "$rank_rows"
  fi
  echo
  echo "Failures: $failures"
} | tee "$out/results.md"
[ "$failures" = 0 ]
