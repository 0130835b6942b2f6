"""The README's quickstart, run as written on a Llama-3-style model directory: a tiny LlamaForCausalLM
with Llama-3.1's RoPE (theta 500000, llama3 scaling) stored in bfloat16 shards with an index, and a
byte-level BPE tokenizer.json in Llama-3's shape (trained here with the `tokenizers` library) with
its tokenizer_config.json. Only sizes change: paths, 2 ranks for 8, 128-token rows, 300 alpaca
records of the demo data, and 3 steps. Each command must exit 0; the export must load in
transformers (AutoTokenizer and AutoModelForCausalLM) with the loss `eval` printed for it.

usage: check_readme_quickstart.py SHARDTRAIN README.md WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import tokenizer_json_reference as tokref  # noqa: E402  (Llama-3's tokenizer shape)

BIN, README, WORK = sys.argv[1:4]
REPO = os.path.dirname(os.path.abspath(README))
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def quickstart_commands(readme):
    """The bash block under "## Quickstart", one command per entry (continuations joined)."""
    text = open(readme, encoding="utf-8").read()
    section = text[text.index("## Quickstart"):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    lines = [line for line in block.replace("\\\n", " ").splitlines() if line.strip() and not line.strip().startswith("#")]
    return [re.sub(r"\s+", " ", line.split(" # ")[0]).strip() for line in lines]


def llama3_directory(path):
    base = tokref.train(tokref.LLAMA3_REGEX, nfc=False, ignore_merges=True, vocab=600)
    tok_dir = tokref.make_llama3(WORK, base)
    shutil.copytree(tok_dir, path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rope_theta=500000.0,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=128),
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path, max_shard_size="100KB")
    assert os.path.exists(os.path.join(path, "model.safetensors.index.json"))
    return len(tokenizer)


model_dir = os.path.join(WORK, "Llama-3.1-8B")
vocab = llama3_directory(model_dir)
alpaca = os.path.join(WORK, "alpaca_data.jsonl")
with open(os.path.join(REPO, "data", "demo", "train.jsonl"), encoding="utf-8") as src, open(alpaca, "w", encoding="utf-8") as dst:
    dst.writelines(line for _, line in zip(range(300), src))

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
commands = quickstart_commands(README)
assert any("--weights /fsx/Llama-3.1-8B" in c for c in commands), "the quickstart no longer fine-tunes /fsx/Llama-3.1-8B"
failures = []
eval_out = ""
for c in commands:
    c = c.replace("/fsx/Llama-3.1-8B", model_dir).replace("/fsx/", WORK + "/").replace("alpaca_data.json", alpaca)
    c = c.replace("--seq-len 4096", "--seq-len 128").replace("mpirun -np 8", "mpirun --allow-run-as-root --oversubscribe -np 2")
    c = re.sub(r"(^| )shardtrain ", r"\1" + BIN + " ", c)
    if " train " in c:
        c += " --steps 3 --threads 1"
    if " eval " in c:
        c += " --threads 1"
    os.makedirs(os.path.join(WORK, "data"), exist_ok=True)
    p = subprocess.run(c, shell=True, capture_output=True, text=True, env=env)
    print(("ok   " if p.returncode == 0 else "FAIL ") + c)
    if p.returncode != 0:
        failures.append(c)
        print(p.stdout[-1500:] + p.stderr[-1500:])
    if " eval " in c:
        eval_out = p.stdout

export = next(c.split("--save-model ")[1].split()[0] for c in commands if "--save-model" in c).replace("/fsx/", WORK + "/")
tokenizer = AutoTokenizer.from_pretrained(export)
model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
ok = len(tokenizer) == vocab and model.config.rope_parameters.get("rope_type") == "llama3" and tokenizer.bos_token == "<|begin_of_text|>"
print(("ok   " if ok else "FAIL ") + f"transformers loads the export {export}: {len(tokenizer)} tokens, bos {tokenizer.bos_token}, "
      f"rope {model.config.rope_parameters}")
if not ok:
    failures.append("the export")
result = next((json.loads(line) for line in eval_out.splitlines() if line.startswith("{")), {})
ok = "loss" in result and result["loss"] > 0
print(("ok   " if ok else "FAIL ") + f"eval printed {result}")
if not ok:
    failures.append("eval")
sys.exit(1 if failures else 0)
