"""Llama variants written by transformers load, evaluate and export exactly: for each config.json
variant shardtrain implements (hidden_act gelu, gelu_pytorch_tanh, relu; rope_theta of CodeLlama;
Llama-3.1's llama3 RoPE scaling and linear scaling),
a tiny random LlamaForCausalLM saved with save_pretrained; `shardtrain eval` on the first rows of a
token file equals transformers' loss (2e-5 relative, fp32); 2 steps of training at 2 ranks with
--save-model export a model that transformers loads with the loss `shardtrain eval` gives it.

usage: check_model_variants.py SHARDTRAIN TOKEN_FILE.h5 WORKDIR
"""
import json
import os
import subprocess
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_export  # noqa: E402  (its eval and transformers loss over the same rows)

BIN, DATA, WORK = sys.argv[1:4]
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1, tie_word_embeddings=False)
VARIANTS = {
    "gelu": dict(hidden_act="gelu"),
    "gelu_pytorch_tanh": dict(hidden_act="gelu_pytorch_tanh"),
    "relu": dict(hidden_act="relu"),
    "rope_theta_1e6": dict(rope_theta=1e6),
    "rope_llama3": dict(rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                                high_freq_factor=4.0, original_max_position_embeddings=16)),
    "rope_linear": dict(rope_scaling=dict(rope_type="linear", factor=2.0)),
}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def shardtrain_eval(model_dir):
    return check_hf_export.shardtrain_eval(BIN, model_dir, DATA)["loss"]


def transformers_loss(model_dir):
    return check_hf_export.transformers_loss(model_dir, DATA)[0]


for name, extra in VARIANTS.items():
    torch.manual_seed(0)
    d = os.path.join(WORK, name)
    LlamaForCausalLM(LlamaConfig(**TINY, **extra, attn_implementation="eager")).float().save_pretrained(d)
    ours, theirs = shardtrain_eval(d), transformers_loss(d)
    rel = abs(ours - theirs) / abs(theirs)
    check(rel <= 2e-5, f"{name}: eval loss {ours:.7f}, transformers {theirs:.7f} (rel {rel:.1e})")
    export = os.path.join(WORK, name + "-export")
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", BIN, "train", "--weights", d,
                        "--data", DATA, "--steps", "2", "--batch-size", "4", "--threads", "1", "--lr", "1e-3",
                        "--save-model", export], capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"{name}: 2 steps at 2 ranks with --save-model" + ("" if p.returncode == 0 else "\n" + p.stdout[-800:] + p.stderr[-800:]))
    if p.returncode == 0:
        saved = json.load(open(os.path.join(export, "config.json")))
        reread = LlamaConfig.from_pretrained(export).rope_parameters
        check(all(k == "rope_scaling" or saved.get(k) == v for k, v in extra.items()) and
              all(reread.get(k) == v for k, v in extra.get("rope_scaling", {}).items()),
              f"{name}: the export's config.json keeps {extra}")
        ours, theirs = shardtrain_eval(export), transformers_loss(export)
        rel = abs(ours - theirs) / abs(theirs)
        check(rel <= 2e-5, f"{name}: export's eval loss {ours:.7f}, transformers {theirs:.7f} (rel {rel:.1e})")

sys.exit(1 if failures else 0)
