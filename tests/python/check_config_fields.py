"""config.json files as transformers writes them, given to `shardtrain train --model` as a user would:
every field that changes the math and that shardtrain does not implement is refused with exit 2 and one
line naming the field and its value (another family, Phi-2, by its model_type alone); transformers' own Llama, Mistral,
Qwen2, Qwen3, OLMo 2, Gemma 2, Gemma 3 and Phi-3 configs (biases, tied embeddings, sliding windows included) pass without a
warning about an unknown field; a field nobody
knows is named in a warning and the run goes on; weights that lack a bias their config declares, or
hold one it does not, are refused naming the tensor.

usage: check_config_fields.py SHARDTRAIN DATA WORKDIR
"""
import json
import os
import re
import subprocess
import sys

import torch
from transformers import (Gemma2Config, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, Olmo2Config,
                          Phi3Config, PhiConfig, Qwen2Config, Qwen3Config)

BIN, DATA, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(config, name, edit=None, weights=False):
    """Train a step on `config` as saved by transformers (edit: changes to its config.json)."""
    d = os.path.join(WORK, name)
    config.save_pretrained(d)
    if edit:
        path = os.path.join(d, "config.json")
        j = json.load(open(path))
        j.update(edit)
        json.dump(j, open(path, "w"))
    p = subprocess.run([BIN, "train", "--model", d, "--data", DATA, "--steps", "1", "--batch-size", "2", "--threads", "1",
                        "--lr", "1e-4"] + (["--weights", d] if weights else []), capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# Each: the config, the edit to its config.json, the field and the value the refusal must name.
refusals = [
    (LlamaConfig(**TINY, hidden_act="gelu_new"), None, "hidden_act", "gelu_new"),
    (LlamaConfig(**TINY, attention_dropout=0.1), None, "attention_dropout", "0.1"),
    (LlamaConfig(**TINY), {"model_type": "gemma"}, "model_type", "gemma"),
    (LlamaConfig(**TINY, rope_scaling={"rope_type": "yarn", "factor": 4.0}), None, "rope_type", "yarn"),
    (Qwen2Config(**TINY), {"layer_types": ["full_attention", "chunked_attention"]}, "layer_types", "chunked_attention"),
    (Gemma2Config(**TINY), {"use_bidirectional_attention": True}, "use_bidirectional_attention", "true"),
    # A family shardtrain does not implement, as transformers writes it: the family refused alone,
    # before any of its fields is called unknown.
    (PhiConfig(**TINY), None, "model_type", "phi"),
]
for i, (config, edit, field, value) in enumerate(refusals):
    code, out = run(config, f"refused-{i}", edit)
    line = f"{field} is {value}" if field != "layer_types" else f"{field} holds \"{value}\""
    ok = code == 2 and line in out and "is not one shardtrain knows" not in out
    check(ok, f"{config.model_type} with {field}={value}: exit {code}, names '{line}', no field called unknown" +
          ("" if ok else "\n" + out[-600:]))

for name, config in {"llama-biases-tied": LlamaConfig(**TINY, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                                                      head_dim=32),
                     "mistral": MistralConfig(**TINY, sliding_window=8),
                     "qwen2": Qwen2Config(**TINY, tie_word_embeddings=True, use_sliding_window=True, sliding_window=8,
                                          max_window_layers=1),
                     "qwen3": Qwen3Config(**TINY, use_sliding_window=True, sliding_window=8, max_window_layers=1),
                     "olmo2": Olmo2Config(**TINY, pad_token_id=1, eos_token_id=2),
                     "gemma2": Gemma2Config(**TINY, head_dim=16),
                     "gemma3_text": Gemma3TextConfig(**TINY, head_dim=16),
                     "phi3": Phi3Config(**TINY, pad_token_id=0, partial_rotary_factor=0.5)}.items():
    code, out = run(config, name)
    check(code == 0 and "is not one shardtrain knows" not in out,
          f"transformers' own {name} config: exit {code}, no unknown-field warning" + ("" if code == 0 else "\n" + out[-600:]))

# Weights and config that disagree about biases: the tensor is named, nothing trains.
torch.manual_seed(0)
d = os.path.join(WORK, "bias-weights")
LlamaForCausalLM(LlamaConfig(**TINY, attention_bias=True)).save_pretrained(d)
cfg = json.load(open(os.path.join(d, "config.json")))
cfg["attention_bias"] = False
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
p = subprocess.run([BIN, "train", "--model", d, "--weights", d, "--data", DATA, "--steps", "1", "--batch-size", "2",
                    "--threads", "1"], capture_output=True, text=True)
out = p.stdout + p.stderr
named = re.search(r"holds 'model\.layers\.\d+\.self_attn\.[qkvo]_proj\.bias', a bias that .* does not declare", out)
check(p.returncode == 2 and named is not None,
      f"weights with a bias the config does not declare: exit {p.returncode}, names the tensor" + ("" if named else out[-600:]))
llama_mlp = os.path.join(WORK, "missing-bias")
LlamaForCausalLM(LlamaConfig(**TINY)).save_pretrained(llama_mlp)
cfg = json.load(open(os.path.join(llama_mlp, "config.json")))
cfg["mlp_bias"] = True
json.dump(cfg, open(os.path.join(llama_mlp, "config.json"), "w"))
p = subprocess.run([BIN, "train", "--model", llama_mlp, "--weights", llama_mlp, "--data", DATA, "--steps", "1",
                    "--batch-size", "2", "--threads", "1"], capture_output=True, text=True)
out = p.stdout + p.stderr
check(p.returncode == 2 and "has no tensor 'model.layers.0.mlp.gate_proj.bias'" in out,
      f"weights missing a bias the config declares: exit {p.returncode}, names the tensor" + ("" if p.returncode == 2 else out[-600:]))

# A plain Llama config plus one field: that field alone is warned about (the plain config's own
# fields are a subset of llama-biases-tied's above, which pass without a warning).
config = LlamaConfig(**TINY)
config.my_research_flag = 7  # written into config.json like any attribute
code, out = run(config, "unknown")
warned = [l for l in out.splitlines() if "is not one shardtrain knows" in l]
check(code == 0 and len(warned) == 1 and "config.json field 'my_research_flag' is not one shardtrain knows" in warned[0],
      f"an unknown field: exit {code}, named in the one warning: {warned}")

sys.exit(1 if failures else 0)
