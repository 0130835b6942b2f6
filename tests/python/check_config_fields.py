"""config.json files as transformers writes them, given to `shardtrain train --model` as a user would:
every field that changes the math and that shardtrain does not implement is refused with exit 2 and one
line naming the field and its value; transformers' own Llama config passes without a warning about an
unknown field; a field nobody knows is named in a warning and the run goes on.

usage: check_config_fields.py SHARDTRAIN DATA WORKDIR
"""
import os
import subprocess
import sys

from transformers import LlamaConfig, MistralConfig, Qwen2Config

BIN, DATA, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(config, name):
    d = os.path.join(WORK, name)
    config.save_pretrained(d)
    p = subprocess.run([BIN, "train", "--model", d, "--data", DATA, "--steps", "1", "--batch-size", "2", "--threads", "1",
                        "--lr", "1e-4"], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# Each: the config, the field and the value the refusal must name.
refusals = [
    (LlamaConfig(**TINY, attention_bias=True), "attention_bias", "true"),
    (LlamaConfig(**TINY, mlp_bias=True), "mlp_bias", "true"),
    (LlamaConfig(**TINY, hidden_act="gelu_new"), "hidden_act", "gelu_new"),
    (LlamaConfig(**TINY, attention_dropout=0.1), "attention_dropout", "0.1"),
    (LlamaConfig(**TINY, tie_word_embeddings=True), "tie_word_embeddings", "true"),
    (MistralConfig(**TINY), "model_type", "mistral"),
    (Qwen2Config(**TINY), "model_type", "qwen2"),
]
for i, (config, field, value) in enumerate(refusals):
    code, out = run(config, f"refused-{i}")
    line = f"{field} is {value}"
    check(code == 2 and line in out, f"{config.model_type} with {field}={value}: exit {code}, names '{line}'" +
          ("" if code == 2 and line in out else "\n" + out[-600:]))

code, out = run(LlamaConfig(**TINY), "plain")
check(code == 0 and "is not one shardtrain knows" not in out,
      f"transformers' own Llama config: exit {code}, no unknown-field warning" + ("" if code == 0 else "\n" + out[-600:]))

config = LlamaConfig(**TINY)
config.my_research_flag = 7  # written into config.json like any attribute
code, out = run(config, "unknown")
check(code == 0 and "config.json field 'my_research_flag' is not one shardtrain knows" in out,
      f"an unknown field: exit {code}, named in a warning")

sys.exit(1 if failures else 0)
