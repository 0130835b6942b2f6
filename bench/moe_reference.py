#!/usr/bin/env python3
"""transformers' own mixture-of-experts training step, timed: Qwen3MoeForCausalLM built from a config
(Qwen3-30B-A3B's shapes by default, few layers, random init), fp32 master weights under bf16 autocast (what
Hugging Face's Trainer does with bf16=True), torch AdamW, on the rows of a shardtrain token file, one row
per step. Prints one JSON line: tokens/s (median after --skip steps), the peak allocated bytes, the losses, and
which experts implementation transformers ran.

usage: moe_reference.py --data FILE.h5 [--layers 2] [--steps 12] [--skip 2] [--device cuda] [--dtype bf16]
       [--hidden 2048 --intermediate 6144 --moe-intermediate 768 --heads 32 --kv-heads 4 --head-dim 128
        --experts 128 --top-k 8 --vocab 151936]
"""
import argparse
import json
import statistics
import time

import h5py
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    for name, default in (("hidden", 2048), ("intermediate", 6144), ("moe-intermediate", 768), ("heads", 32),
                          ("kv-heads", 4), ("head-dim", 128), ("experts", 128), ("top-k", 8), ("vocab", 151936)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.manual_seed(1234)
    cfg = Qwen3MoeConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                         moe_intermediate_size=a.moe_intermediate, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
                         num_experts=a.experts, num_experts_per_tok=a.top_k, norm_topk_prob=True,
                         max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False)
    device = torch.device(a.device)
    model = Qwen3MoeForCausalLM(cfg).to(device)  # fp32 master weights
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.type == "cuda")
    with h5py.File(a.data, "r") as f:
        rows = torch.as_tensor(f["tokens"][:]).long()
    seq = rows.shape[1]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    times, losses = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        batch = rows[[(step * a.batch_size + i) % rows.shape[0] for i in range(a.batch_size)]].to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with autocast:
            loss = model(input_ids=batch, labels=batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
    timed = times[a.skip:] or times
    print(json.dumps({
        "tokens_per_s": a.batch_size * seq / statistics.median(timed),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else 0,
        "losses": losses, "seq": seq, "layers": a.layers,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
