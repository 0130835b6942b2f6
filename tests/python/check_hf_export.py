#!/usr/bin/env python3
"""Hugging Face transformers loads a model that `shardtrain convert` exported from a checkpoint,
and its loss on the first rows of a token file equals `shardtrain eval` on the same rows.

Usage: check_hf_export.py SHARDTRAIN_BIN HF_MODEL_DIR TOKEN_FILE.h5
"""
import json
import subprocess
import sys

import os

import h5py
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_rows  # noqa: E402

ROWS, BATCH = 16, 8


def shardtrain_eval(binary, model_dir, token_file):
    """`shardtrain eval` of the first ROWS rows: its JSON line (loss, tokens)."""
    out = subprocess.run([binary, "eval", "--model", model_dir, "--weights", model_dir, "--data", token_file,
                          "--batch-size", str(BATCH), "--max-batches", str(ROWS // BATCH), "--threads", "1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def transformers_loss(model_dir, token_file):
    """transformers' mean loss over the loss tokens of the first ROWS rows, and their count."""
    with h5py.File(token_file, "r") as f:
        tokens, labels, positions = token_rows.read(f, slice(0, ROWS))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        logits = token_rows.forward(model, tokens, positions).logits.float()
    lg, lb = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    total = torch.nn.functional.cross_entropy(lg, lb, ignore_index=-100, reduction="sum").item()
    count = int((lb != -100).sum())
    return total / count, count


def main(binary, model_dir, token_file):
    ours = shardtrain_eval(binary, model_dir, token_file)
    hf, count = transformers_loss(model_dir, token_file)
    assert count == ours["tokens"], (count, ours["tokens"])
    assert abs(hf - ours["loss"]) <= 1e-5 * abs(hf), f"transformers {hf} vs shardtrain {ours['loss']}"
    print(f"transformers loads {model_dir}: loss {hf:.7f} over {count} tokens, shardtrain eval {ours['loss']:.7f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
