#!/usr/bin/env bash
# The DPO demo (docs/dpo.md): supervised fine-tuning (SFT) of the tiny Llama-2 on two demo tasks,
# "Reverse the digits." answered in two styles ("0 7 8" and "0, 7, 8", half each) and "Sort the
# digits in ascending order." in one ("0 7 8"); then DPO on preference pairs over the same prompts
# that prefer commas for reversing and spaces for sorting. Prints rewards/accuracies and margins by
# step, and the generations of the SFT and DPO models: the reversals switch to commas, the sorts
# keep their spaces; and the exact match, in the preferred style, on data/demo/val.jsonl's reversals
# and sorts. Then the same with LoRA (the reference: the SFT model, adapters off).
# beta is 1 by default, not TRL's 0.1: the rejected answers hold the right digits too, and at 0.1
# (lr 1e-4, 40 steps) the tiny model pushed the digits down with the style, its sort exact match
# falling from 89% to 46% (82% at beta 1).
# CPU only; run scripts/demo.sh (or install-deps + build) first. About 2 minutes on 2 cores.
#   Env: DEMO_OUT (out/dpo-demo), DEMO_RANKS (2), SFT_STEPS (1000), DPO_STEPS (20), DPO_LR (1e-4),
#        DPO_BETA (1), DPO_LORA (1; 0 skips the LoRA run), LORA_STEPS (20), LORA_LR (1e-3).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BUILD_DIR:-$repo/build}/src/shardtrain
py=${PYTHON:-$repo/.venv/bin/python}
out=${DEMO_OUT:-$repo/out/dpo-demo}
data=$repo/data/demo
tok=$data/tokenizer.model
ranks=${DEMO_RANKS:-2}
beta=${DPO_BETA:-1}
mpi=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
mkdir -p "$out"
start=$SECONDS

# run LOG PATTERN CMD...: the command's output goes to LOG; the lines matching PATTERN are shown,
# and the log's tail when it fails.
run() {
  local log=$1 pattern=$2
  shift 2
  "$@" > "$log" 2>&1 || { echo "failed: $*"; tail -n 30 "$log"; exit 1; }
  grep -E "$pattern" "$log" || true
}

echo "== 1. data: reverse answered '0 7 8' or '0, 7, 8' (half each), sort answered '0 7 8'"
"$py" - "$data/train.jsonl" "$data/val.jsonl" "$out" <<'PY'
import json, random, sys
def alpaca(instruction, inp):  # llama-recipes' prompt, as prepare --format alpaca renders it
    if not inp.strip():
        return ("Below is an instruction that describes a task. Write a response that appropriately "
                f"completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:")
    return ("Below is an instruction that describes a task, paired with an input that provides further "
            "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
            f"{instruction}\n\n### Input:\n{inp}\n\n### Response:")
REVERSE, SORT = "Reverse the digits.", "Sort the digits in ascending order."
rng = random.Random(0)
n = {"sft": 0, "pairs": 0}
with open(sys.argv[1]) as f, open(f"{sys.argv[3]}/sft.jsonl", "w") as sft, \
     open(f"{sys.argv[3]}/pairs.jsonl", "w") as pairs:
    for line in f:
        r = json.loads(line)
        if r["instruction"] not in (REVERSE, SORT):
            continue
        digits = r["output"].split()
        spaces, commas = " ".join(digits), ", ".join(digits)
        rev = r["instruction"] == REVERSE
        sft.write(json.dumps(dict(r, output=rng.choice([spaces, commas]) if rev else spaces)) + "\n")
        chosen, rejected = (commas, spaces) if rev else (spaces, commas)
        if len(digits) > 1:  # one digit: the two styles are the same answer
            pairs.write(json.dumps({"prompt": alpaca(r["instruction"], r["input"]),
                                    "chosen": chosen, "rejected": rejected}) + "\n")
            n["pairs"] += 1
        n["sft"] += 1
print(f"  {n['sft']} SFT records, {n['pairs']} preference pairs (reverse: chosen '0, 7, 8' over "
      f"rejected '0 7 8'; sort: the other way round)")
# The held-out prompts with their answers in the preferred style, for eval's exact match.
with open(sys.argv[2]) as f, open(f"{sys.argv[3]}/prefer.reverse.jsonl", "w") as rev, \
     open(f"{sys.argv[3]}/prefer.sort.jsonl", "w") as srt:
    for line in f:
        r = json.loads(line)
        if r["instruction"] == REVERSE:
            rev.write(json.dumps(dict(r, output=", ".join(r["output"].split()))) + "\n")
        elif r["instruction"] == SORT:
            srt.write(json.dumps(r) + "\n")
PY
"$bin" prepare --tokenizer "$tok" --input "$out/sft.jsonl" --format alpaca --mode padding --seq-len 64 \
  --output "$out/sft.h5" > /dev/null
run "$out/prepare-pairs.log" "pairs ->" "$bin" prepare --tokenizer "$tok" --input "$out/pairs.jsonl" \
  --val-fraction 0.1 --format preference --seq-len 64 --output "$out/pairs.h5"

echo "== 2. SFT: full fine-tuning on both tasks (${SFT_STEPS:-1000} steps, $ranks ranks)"
run "$out/sft.log" "step [0-9]+/|saved" "${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" \
  --batch-size $((32 / ranks)) --threads 1 --steps "${SFT_STEPS:-1000}" --data "$out/sft.h5" \
  --log-every 250 --val-every 0 --accuracy-samples 0 --tokenizer "$tok" --save-model "$out/sft"

# generations MODEL [--lora ADAPTER]: greedy answers to three reversals and a sort none of the data has
generations() {
  local p
  for p in "Reverse the digits.|3 1 4 1 5" "Reverse the digits.|9 2 6" "Reverse the digits.|2 7 1 8" \
    "Sort the digits in ascending order.|7 0 3 9 4"; do
    printf '  %-36s %-10s -> ' "${p%%|*}" "${p#*|}"
    "$bin" generate --weights "$@" --tokenizer "$tok" --template alpaca --prompt "${p%%|*}" --alpaca-input "${p#*|}" \
      --max-new-tokens 16 --threads 1 2>> "$out/generate.log" | tail -n 1
  done
}
: > "$out/generate.log"
# exact MODEL [--lora ADAPTER]: exact match by greedy generation on data/demo/val.jsonl, in the
# preferred style (reverse '0, 7, 8', sort '0 7 8')
exact() {
  local t m line=""
  for t in reverse sort; do
    m=$("$bin" eval --weights "$@" --accuracy-file "$out/prefer.$t.jsonl" --tokenizer "$tok" --accuracy-samples 0 \
      --max-new-tokens 16 2>> "$out/eval.log" | grep -oE "exact_match [0-9.]+% \([0-9]+/[0-9]+\)") \
      || { echo "eval failed: $*"; tail -n 30 "$out/eval.log"; exit 1; }
    line+="  $t ${m#exact_match }"
  done
  echo "  exact match on data/demo/val.jsonl in the preferred style:$line" | sed -E 's/([0-9]+\.[0-9])[0-9]*%/\1%/g'
}
: > "$out/eval.log"
echo "== generations of the SFT model"
generations "$out/sft"
exact "$out/sft"

# table METRICS: loss, rewards/accuracies and margins by step (and on the held-out pairs when
# validated). Step 1's accuracy is 0: the policy is the reference, every reward is 0, none above.
table() {
  "$py" - "$1" <<'PY'
import json, sys
print(f"  {'step':>4} {'loss':>7} {'rewards/accuracies':>18} {'rewards/margins':>15} {'val_accuracies':>14} {'val_margins':>11}")
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["step"] <= 5 or m["step"] % 5 == 0:
        va, vm = m.get("val_rewards/accuracies"), m.get("val_rewards/margins")
        print(f"  {m['step']:>4} {m['loss']:>7.4f} {m['rewards/accuracies']:>18.3f} {m['rewards/margins']:>15.3f}"
              f" {'' if va is None else f'{va:.3f}':>14} {'' if vm is None else f'{vm:.3f}':>11}")
PY
}
dpo=(--weights "$out/sft" --data "$out/pairs.h5" --val-data "$out/pairs.val.h5" --threads 1 --tokenizer "$tok"
  --objective dpo --dpo-beta "$beta" --batch-size $((16 / ranks)) --warmup-steps 5 --log-every 10 --val-every 10)

echo "== 3. DPO, full fine-tuning, against the SFT model frozen (${DPO_STEPS:-20} steps, beta $beta, 16 pairs a step)"
run "$out/dpo.log" "objective|saved" "${mpi[@]}" "$bin" train "${dpo[@]}" --steps "${DPO_STEPS:-20}" \
  --lr "${DPO_LR:-1e-4}" --metrics-file "$out/dpo-metrics.jsonl" --save-model "$out/dpo"
table "$out/dpo-metrics.jsonl"
echo "== generations of the DPO model"
generations "$out/dpo"
exact "$out/dpo"

if [ "${DPO_LORA:-1}" != 0 ]; then
  echo "== 4. DPO with LoRA r=8 on all seven projections (${LORA_STEPS:-20} steps); the reference: adapters off"
  run "$out/dpo-lora.log" "objective|saved" "${mpi[@]}" "$bin" train "${dpo[@]}" --steps "${LORA_STEPS:-20}" \
    --lr "${LORA_LR:-1e-3}" --lora-rank 8 --lora-alpha 16 \
    --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj \
    --metrics-file "$out/dpo-lora-metrics.jsonl" --save-model "$out/dpo-lora"
  table "$out/dpo-lora-metrics.jsonl"
  echo "== generations of the SFT model with the DPO adapter"
  generations "$out/sft" --lora "$out/dpo-lora"
  exact "$out/sft" --lora "$out/dpo-lora"
fi
echo "== DPO demo finished in $((SECONDS - start)) s"
