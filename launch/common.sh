# Shared by slurm/train.sbatch and launch/mpirun.sh: options, the instance profile, and the
# preflight and train command lines. Source it with SHARDTRAIN_HOME set to the repository.
# Every option also reads an environment variable (in brackets), so `sbatch --export` works too.

shardtrain_usage() {
  cat <<'EOF'
Options (environment variable in brackets):
  --profile P          auto, p4de, p5 or cpu [PROFILE]; auto: by nvidia-smi's GPU name
  --weights DIR        Hugging Face model directory to fine-tune; its config.json is the model [WEIGHTS]
  --model M            preset or config.json: train from random initialization [MODEL]
                       (one of --weights and --model is required)
  --save-model DIR     write the fine-tuned model (LoRA: the PEFT adapter) here at the end [SAVE_MODEL]
  --lora-rank N ...    LoRA: --lora-rank, --lora-alpha, --lora-dropout, --lora-targets and --merge-lora
                       go to the trainer as given [LORA_ARGS]
  --resume R           auto (default: continue from CKPT_DIR's latest checkpoint when there is one),
                       a checkpoint file or directory, or none [RESUME]
  --overwrite-checkpoints  start anew in a CKPT_DIR that holds another run's checkpoints, removing
                       them; restarts then continue this run [OVERWRITE_CHECKPOINTS=1]
  --strategy S         full_shard, shard_grad_op, no_shard, hybrid_shard [STRATEGY]
  --cpu-offload        master weights, AdamW state and gradients in host memory, AdamW on the
                       CPU: a full fine-tune larger than the GPUs [CPU_OFFLOAD=1]
  --context-parallel N split each sequence over N ranks of a node (ring attention): long-context
                       fine-tunes; --batch-size then counts rows per group of N [CONTEXT_PARALLEL]
  --data F             token file from 'shardtrain prepare' [DATA] (required)
  --out-dir D          metrics, logs and the exit code [OUT_DIR] (default runs/<job id>)
  --ckpt-dir D         HDF5 checkpoints, on shared storage [CKPT_DIR] (default OUT_DIR/checkpoints)
  --steps N            optimizer steps, 0: one epoch [STEPS]
  --save-every N       periodic checkpoints [SAVE_EVERY] (default 100)
  --max-restarts N     requeues after a preemption checkpoint (or a failure) [MAX_RESTARTS] (default 3)
  --restart-on-failure requeue after a failed run too, from the last checkpoint [RESTART_ON_FAILURE=1]
  --ranks-per-node K   simulate nodes of K ranks on fewer machines [RANKS_PER_NODE]
  --container SIF      run inside Apptainer (apptainer exec --nv) [CONTAINER]; podman:IMAGE runs
                       each rank in its own podman container (containers/podman-exec.sh)
  --bind PATHS         bind mounts, comma-separated, e.g. /fsx [BIND] (default /fsx when it exists)
  --skip-preflight     train without the preflight check [SKIP_PREFLIGHT=1]
  --                   everything after goes to 'shardtrain train' unchanged
EOF
}

# Fills the variables above from "$@"; leaves the trainer's extra arguments in TRAIN_EXTRA.
shardtrain_parse() {
  TRAIN_EXTRA=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --profile) PROFILE=$2; shift 2 ;;
      --model) MODEL=$2; shift 2 ;;
      --weights) WEIGHTS=$2; shift 2 ;;
      --save-model) SAVE_MODEL=$2; shift 2 ;;
      --resume) RESUME=$2; shift 2 ;;
      --lora-rank|--lora-alpha|--lora-dropout|--lora-targets) LORA_ARGS="${LORA_ARGS:-} $1 $2"; shift 2 ;;
      --merge-lora) LORA_ARGS="${LORA_ARGS:-} $1"; shift ;;
      --overwrite-checkpoints) OVERWRITE_CHECKPOINTS=1; shift ;;
      --strategy) STRATEGY=$2; shift 2 ;;
      --cpu-offload) CPU_OFFLOAD=1; shift ;;
      --context-parallel) CONTEXT_PARALLEL=$2; shift 2 ;;
      --data) DATA=$2; shift 2 ;;
      --out-dir) OUT_DIR=$2; shift 2 ;;
      --ckpt-dir) CKPT_DIR=$2; shift 2 ;;
      --steps) STEPS=$2; shift 2 ;;
      --save-every) SAVE_EVERY=$2; shift 2 ;;
      --max-restarts) MAX_RESTARTS=$2; shift 2 ;;
      --restart-on-failure) RESTART_ON_FAILURE=1; shift ;;
      --ranks-per-node) RANKS_PER_NODE=$2; shift 2 ;;
      --container) CONTAINER=$2; shift 2 ;;
      --bind) BIND=$2; shift 2 ;;
      --skip-preflight) SKIP_PREFLIGHT=1; shift ;;
      -h|--help) shardtrain_usage; exit 0 ;;
      --) shift
          # The launcher's own: it decides between --overwrite-checkpoints and --resume per run.
          for a in "$@"; do if [ "$a" = --overwrite-checkpoints ]; then OVERWRITE_CHECKPOINTS=1; else TRAIN_EXTRA+=("$a"); fi; done
          break ;;
      *) echo "error: unknown option '$1'; put trainer options after --" >&2; shardtrain_usage >&2; exit 2 ;;
    esac
  done
  : "${DATA:?set --data (or DATA) to a token file made by 'shardtrain prepare'}"
  if [ -z "${WEIGHTS:-}" ] && [ -z "${MODEL:-}" ]; then
    echo "error: set --weights DIR (a Hugging Face model directory to fine-tune) or --model PRESET|config.json" \
         "(training from random initialization)" >&2
    exit 2
  fi
  MODEL=${MODEL:-} WEIGHTS=${WEIGHTS:-} SAVE_MODEL=${SAVE_MODEL:-} RESUME=${RESUME:-auto} LORA_ARGS=${LORA_ARGS:-}
  OVERWRITE_CHECKPOINTS=${OVERWRITE_CHECKPOINTS:-0}
  STRATEGY=${STRATEGY:-full_shard} CPU_OFFLOAD=${CPU_OFFLOAD:-0} CONTEXT_PARALLEL=${CONTEXT_PARALLEL:-1} STEPS=${STEPS:-0} SAVE_EVERY=${SAVE_EVERY:-100}
  MAX_RESTARTS=${MAX_RESTARTS:-3} RESTART_ON_FAILURE=${RESTART_ON_FAILURE:-0} RANKS_PER_NODE=${RANKS_PER_NODE:-0}
  SKIP_PREFLIGHT=${SKIP_PREFLIGHT:-0}
}

# Sources launch/profiles/$PROFILE.env; "auto" reads the first GPU's name.
shardtrain_profile() {
  PROFILE=${PROFILE:-auto}
  if [ "$PROFILE" = auto ]; then
    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
    case "$gpu" in
      *A100*) PROFILE=p4de ;;
      *H100*|*H200*) PROFILE=p5 ;;
      "") PROFILE=cpu ;;
      *) echo "warning: no profile for GPU '$gpu'; using p5's EFA settings" >&2; PROFILE=p5 ;;
    esac
  fi
  local f="$SHARDTRAIN_HOME/launch/profiles/$PROFILE.env"
  [ -f "$f" ] || { echo "error: --profile $PROFILE: no $f; use auto, p4de, p5 or cpu" >&2; exit 2; }
  # shellcheck disable=SC1090
  source "$f"
  echo "[shardtrain] profile $PROFILE: device $DEVICE, $GPUS_PER_NODE GPUs and $EFA_DEVICES EFA devices per node"
}

# The unpacked bundle's launcher (scripts/bundle.sh) when SHARDTRAIN_HOME is a bundle, else the build.
shardtrain_default_bin() {
  if [ -x "$SHARDTRAIN_HOME/libexec/shardtrain" ]; then echo "$SHARDTRAIN_HOME/bin/shardtrain"
  else echo "$SHARDTRAIN_HOME/build/src/shardtrain"; fi
}

# LAUNCH_PREFIX: the Apptainer wrapper, or nothing; BIN: the shardtrain binary to run.
shardtrain_container() {
  LAUNCH_PREFIX=()
  if [[ "${CONTAINER:-}" == podman:* ]]; then
    # One podman container per rank (containers/podman-exec.sh); the binds travel in its argv.
    BIND=${BIND:-$([ -d /fsx ] && echo /fsx || true)}
    LAUNCH_PREFIX=(env "SHARDTRAIN_BIND=$BIND" "$SHARDTRAIN_HOME/containers/podman-exec.sh" "${CONTAINER#podman:}")
    BIN=${SHARDTRAIN_BIN:-shardtrain}
  elif [ -n "${CONTAINER:-}" ]; then
    [ -f "$CONTAINER" ] || { echo "error: --container $CONTAINER does not exist" >&2; exit 2; }
    BIND=${BIND:-$([ -d /fsx ] && echo /fsx || true)}
    LAUNCH_PREFIX=(apptainer exec --nv)
    [ -n "$BIND" ] && LAUNCH_PREFIX+=(--bind "$BIND")
    LAUNCH_PREFIX+=("$CONTAINER")
    BIN=${SHARDTRAIN_BIN:-shardtrain}
  else
    BIN=${SHARDTRAIN_BIN:-$(shardtrain_default_bin)}
    [ -x "$BIN" ] || { echo "error: $BIN is not built; run scripts/build.sh or set SHARDTRAIN_BIN" >&2; exit 2; }
  fi
}

# PREFLIGHT_ARGS and TRAIN_ARGS for "$BIN", from the options and the profile.
shardtrain_commands() {
  local rpn=()
  [ "$RANKS_PER_NODE" -gt 0 ] && rpn=(--ranks-per-node "$RANKS_PER_NODE")
  PREFLIGHT_ARGS=(preflight --device "$DEVICE" --min-busbw "$MIN_BUSBW" --max-bytes "$PREFLIGHT_MAX_BYTES" "${rpn[@]}")
  # --threads 0: each rank takes OMP_NUM_THREADS, its cores as launch/bind-rank.sh planned them.
  TRAIN_ARGS=(train --sharding "$STRATEGY" --data "$DATA" --device "$DEVICE"
    --threads 0 --steps "$STEPS" --metrics-file "$OUT_DIR/metrics.jsonl"
    --checkpoint-dir "$CKPT_DIR" --save-every "$SAVE_EVERY" --on-signal exit "${rpn[@]}")
  [ -n "$WEIGHTS" ] && TRAIN_ARGS+=(--weights "$WEIGHTS")
  [ -n "$MODEL" ] && TRAIN_ARGS+=(--model "$MODEL")
  [ -n "$SAVE_MODEL" ] && TRAIN_ARGS+=(--save-model "$SAVE_MODEL")
  if [ "$OVERWRITE_CHECKPOINTS" = 1 ]; then TRAIN_ARGS+=(--overwrite-checkpoints)
  elif [ "$RESUME" != none ]; then TRAIN_ARGS+=(--resume "$RESUME"); fi
  local lora
  read -r -a lora <<<"$LORA_ARGS"
  TRAIN_ARGS+=("${lora[@]}")
  [ "$PEAK_TFLOPS" != 0 ] && TRAIN_ARGS+=(--peak-tflops "$PEAK_TFLOPS")
  [ "$CPU_OFFLOAD" = 1 ] && TRAIN_ARGS+=(--cpu-offload)
  [ "$CONTEXT_PARALLEL" != 1 ] && TRAIN_ARGS+=(--context-parallel "$CONTEXT_PARALLEL")
  TRAIN_ARGS+=("${TRAIN_EXTRA[@]}")
}

# A restarted (requeued) run continues from its own newest checkpoint, whatever started the first.
shardtrain_restarted() {
  RESUME=auto OVERWRITE_CHECKPOINTS=0
}

# Trainer exit codes the launchers requeue on: 75 = checkpointed after SIGUSR1 (preemption),
# 76 = the collective watchdog found a hang (the next run resumes from the last checkpoint).
# The trainer's exit codes (docs/reliability.md): 75 checkpointed and stopped early (a signal),
# 76 a stuck collective. Both are worth a restart from the last checkpoint; 65 (a non-finite
# loss), 2 (bad input), 143/130 (stopped by SIGTERM/SIGINT without a checkpoint) are not.
SHARDTRAIN_REQUEUE_CODES=${SHARDTRAIN_REQUEUE_CODES:-75 76}

# Whether exit code $1 after $2 restarts earns another run.
shardtrain_should_restart() {
  local rc=$1 restarts=$2 code
  [ "$rc" -eq 0 ] && return 1
  if [ "$rc" -eq 2 ]; then
    echo "[shardtrain] exit code 2: the trainer refused its input (see its error above); not restarting" >&2
    return 1
  fi
  if [ "$restarts" -ge "$MAX_RESTARTS" ]; then
    echo "[shardtrain] exit code $rc after $restarts restarts: --max-restarts $MAX_RESTARTS reached, giving up" >&2
    return 1
  fi
  for code in $SHARDTRAIN_REQUEUE_CODES; do [ "$rc" -eq "$code" ] && return 0; done
  [ "$RESTART_ON_FAILURE" = 1 ]
}

# Runs a command in the background so that a USR1 sent to this script (Slurm's --signal=B:USR1, a
# spot-interruption hook) reaches it: srun and mpirun forward USR1 to every rank. Returns its code.
shardtrain_step_pid=
shardtrain_stop_signal=  # TERM or INT once the launcher got one: the run is to end, not restart
shardtrain_forward_usr1() {
  echo "[shardtrain $(date +%H:%M:%S)] USR1: asking the trainer to checkpoint and exit"
  [ -n "$shardtrain_step_pid" ] && kill -USR1 "$shardtrain_step_pid" 2>/dev/null
}
# SIGTERM/SIGINT reach the trainer as SHARDTRAIN_STOP_RELAY: srun passes TERM on to every task;
# mpirun SIGKILLs its ranks 1 s after passing on a TERM, so launch/mpirun.sh relays USR2, which
# mpirun forwards and the trainer treats as SIGTERM. It stops at the next step boundary.
shardtrain_forward_stop() {
  shardtrain_stop_signal=$1
  echo "[shardtrain $(date +%H:%M:%S)] $1: asking the trainer to stop at the next step boundary"
  [ -n "$shardtrain_step_pid" ] && kill -"${SHARDTRAIN_STOP_RELAY:-TERM}" "$shardtrain_step_pid" 2>/dev/null
}
shardtrain_run() {
  trap shardtrain_forward_usr1 USR1
  trap 'shardtrain_forward_stop TERM' TERM
  trap 'shardtrain_forward_stop INT' INT
  "$@" &
  shardtrain_step_pid=$!
  local rc
  while :; do
    wait "$shardtrain_step_pid"; rc=$?
    kill -0 "$shardtrain_step_pid" 2>/dev/null || break  # a trap interrupted wait; the step still runs
  done
  shardtrain_step_pid=
  return "$rc"
}
