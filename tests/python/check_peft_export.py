#!/usr/bin/env python3
"""PEFT loads the adapter that `shardtrain train --save-model` wrote for a LoRA run, and
transformers loads the merged weights of `--merge-lora`: on the first rows of a token file their
losses equal `shardtrain eval --lora` on the same rows (and eval of the merged weights).

Usage: check_peft_export.py SHARDTRAIN_BIN BASE_DIR ADAPTER_DIR MERGED_DIR TOKEN_FILE.h5
"""
import json
import os
import subprocess
import sys

import h5py
import torch
from peft import PeftModel
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_rows  # noqa: E402

ROWS, BATCH = 16, 8


def shardtrain_loss(binary, *args):
    out = subprocess.run([binary, "eval", *args, "--batch-size", str(BATCH), "--max-batches", str(ROWS // BATCH),
                          "--threads", "1"], check=True, capture_output=True, text=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def torch_loss(model, token_file):
    with h5py.File(token_file, "r") as f:
        tokens, labels, positions = token_rows.read(f, slice(0, ROWS))
    with torch.no_grad():
        logits = token_rows.forward(model, tokens, positions).logits.float()
    lg, lb = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    total = torch.nn.functional.cross_entropy(lg, lb, ignore_index=-100, reduction="sum").item()
    return total / int((lb != -100).sum()), int((lb != -100).sum())


def load_base(path):
    return LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager")


def main(binary, base, adapter, merged, token_file):
    ours = shardtrain_loss(binary, "--weights", base, "--lora", adapter, "--data", token_file)
    base_only = shardtrain_loss(binary, "--weights", base, "--data", token_file)
    peft_model = PeftModel.from_pretrained(load_base(base), adapter).eval()
    peft, count = torch_loss(peft_model, token_file)
    assert count == ours["tokens"], (count, ours["tokens"])
    assert abs(peft - ours["loss"]) <= 1e-5 * abs(peft), f"PEFT {peft} vs shardtrain --lora {ours['loss']}"
    assert abs(base_only["loss"] - peft) > 1e-4, "the adapter changes nothing: the round trip proves nothing"
    hf_merged, _ = torch_loss(load_base(merged), token_file)
    ours_merged = shardtrain_loss(binary, "--weights", merged, "--data", token_file)
    assert abs(hf_merged - peft) <= 1e-5 * abs(peft), f"merged (transformers) {hf_merged} vs PEFT {peft}"
    assert abs(ours_merged["loss"] - hf_merged) <= 1e-5 * abs(hf_merged), (ours_merged["loss"], hf_merged)
    print(f"PEFT loads {adapter}: loss {peft:.7f}, shardtrain --lora {ours['loss']:.7f} (base alone {base_only['loss']:.7f}); "
          f"merged {merged}: transformers {hf_merged:.7f}, shardtrain {ours_merged['loss']:.7f}")


if __name__ == "__main__":
    main(*sys.argv[1:6])
