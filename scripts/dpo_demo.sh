#!/usr/bin/env bash
# The DPO demo (docs/dpo.md): supervised fine-tuning of the tiny Llama-2 on one demo task (reverse
# the digits) answered in two styles, "0 7 8" and "0, 7, 8", then DPO on generated pairs that
# prefer the second. Prints rewards/accuracies and margins by step and the generations before
# and after. CPU only; run scripts/demo.sh (or install-deps + build) first.
#   Env: DEMO_OUT (out/dpo-demo), DEMO_RANKS (2), SFT_STEPS (600), DPO_STEPS (80), DPO_LR (1e-4),
#        DPO_BETA (0.1).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BUILD_DIR:-$repo/build}/src/shardtrain
py=${PYTHON:-$repo/.venv/bin/python}
out=${DEMO_OUT:-$repo/out/dpo-demo}
data=$repo/data/demo
tok=$data/tokenizer.model
ranks=${DEMO_RANKS:-2}
mpi=(mpirun -np "$ranks" --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
mkdir -p "$out"
start=$SECONDS

echo "== 1. data: 'Reverse the digits.' answered in two styles, '0 7 8' and '0, 7, 8', half each"
"$py" - "$data/train.jsonl" "$out" <<'PY'
import json, random, sys
# llama-recipes' alpaca prompt, as prepare --format alpaca renders it.
HEAD = ("Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\n")
rng = random.Random(0)
with open(sys.argv[1]) as f, open(f"{sys.argv[2]}/sft.jsonl", "w") as sft, open(f"{sys.argv[2]}/pairs.jsonl", "w") as pairs:
    for line in f:
        r = json.loads(line)
        if r["instruction"] != "Reverse the digits.":
            continue
        digits = r["output"].split()
        spaces, commas = " ".join(digits), ", ".join(digits)
        sft.write(json.dumps(dict(r, output=rng.choice([spaces, commas]))) + "\n")
        prompt = HEAD + r["instruction"] + "\n\n### Input:\n" + r["input"] + "\n\n### Response:"
        pairs.write(json.dumps({"prompt": prompt, "chosen": commas, "rejected": spaces}) + "\n")
PY
echo "== 2. SFT: full fine-tuning on both styles (${SFT_STEPS:-600} steps)"
"$bin" prepare --tokenizer "$tok" --input "$out/sft.jsonl" --format alpaca --mode padding --seq-len 64 \
  --output "$out/sft.h5" > /dev/null
"${mpi[@]}" "$bin" train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --threads 1 \
  --steps "${SFT_STEPS:-600}" --data "$out/sft.h5" --log-every 200 --val-every 0 --accuracy-samples 0 \
  --save-model "$out/sft" 2>&1 | grep -E "step [0-9]+/|saved"
echo "== preference pairs: the same prompts, chosen '0, 7, 8' over rejected '0 7 8'"
"$bin" prepare --tokenizer "$tok" --input "$out/pairs.jsonl" --format preference --seq-len 64 \
  --val-fraction 0.05 --output "$out/pairs.h5" | grep -E "pairs ->"

generations() {
  for p in "3 1 4 1 5" "9 2 6" "2 7 1 8"; do
    printf '  %-10s -> ' "$p"
    "$bin" generate --weights "$1" --tokenizer "$tok" --template alpaca --prompt "Reverse the digits." \
      --input "$p" --max-new-tokens 16 2> /dev/null | tail -1
  done
}
echo "== generations of the SFT model"
generations "$out/sft"

echo "== 3. DPO against the SFT model, frozen (${DPO_STEPS:-80} steps, beta ${DPO_BETA:-0.1})"
"${mpi[@]}" "$bin" train --weights "$out/sft" --data "$out/pairs.h5" --val-data "$out/pairs.val.h5" --threads 1 \
  --objective dpo --dpo-beta "${DPO_BETA:-0.1}" --batch-size $((16 / ranks)) --steps "${DPO_STEPS:-80}" --lr "${DPO_LR:-1e-4}" \
  --warmup-steps 5 --log-every 20 --val-every 40 --metrics-file "$out/dpo-metrics.jsonl" --save-model "$out/dpo" \
  2>&1 | grep -E "objective|saved"
"$py" - "$out/dpo-metrics.jsonl" <<'PY'
import json, sys
print(f"  {'step':>5} {'loss':>8} {'rewards/accuracies':>19} {'rewards/margins':>16} {'val accuracies':>15}")
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m["step"] == 1 or m["step"] % 10 == 0:
        val = m.get("val_rewards/accuracies")
        print(f"  {m['step']:>5} {m['loss']:>8.4f} {m['rewards/accuracies']:>19.3f} {m['rewards/margins']:>16.3f} "
              f"{'' if val is None else f'{val:.3f}':>15}")
PY
echo "== generations of the DPO model"
generations "$out/dpo"
echo "== DPO demo finished in $((SECONDS - start)) s"
