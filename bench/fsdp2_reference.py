#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_vs_pytorch.sh: Hugging Face LlamaForCausalLM (sdpa attention)
trained with torch FSDP2 `fully_shard` at world size 1, with the same shape, batch, sequence
length, optimizer (AdamW, betas 0.9/0.95, eps 1e-8, weight decay 0.1, clip 1.0) and precision
(fp32 master weights, bf16 compute, fp32 reduction) as `shardtrain train --param-dtype bf16`.
Rows come from the same token file. Prints one JSON object: median tokens/s, MFU, peak memory.
"""
import argparse
import json
import os
import statistics
import time

import h5py
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM


def flops_per_token(cfg, seq):  # docs/metrics.md: 6N (without the input embedding) + 12 L H Q T
    h, f, layers, heads, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    q = h // heads
    per_layer = h * h * 2 + 2 * h * kv * q + 3 * h * f + 2 * h
    n = layers * per_layer + h + cfg.vocab_size * h
    return 6 * n + 12 * layers * heads * q * seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the medians")
    ap.add_argument("--ac", action="store_true", help="activation checkpointing of every decoder layer")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--lr", type=float, default=3e-5)
    a = ap.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=0, world_size=1)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with h5py.File(a.data) as f:
        tokens = torch.from_numpy(f["tokens"][...].astype("int64"))
        mask = torch.from_numpy(f["loss_mask"][...].astype("bool"))
    seq = tokens.shape[1]
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=max(seq, 4096),
                      rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    model = LlamaForCausalLM(cfg).to(dev)
    if a.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in model.model.layers:  # one FSDP unit per decoder layer, as shardtrain does
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for step in range(a.steps):
        i = (step * a.batch_size) % (tokens.shape[0] - a.batch_size + 1)
        x = tokens[i:i + a.batch_size].to(dev)
        labels = x.masked_fill(~mask[i:i + a.batch_size].to(dev), -100)
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronizes, as shardtrain's step does
        times.append(time.perf_counter() - t0)
    kept = times[a.skip:] or times
    step_s = statistics.median(kept)
    tps = a.batch_size * seq / step_s
    out = {"side": "pytorch_fsdp2", "tokens_per_s": tps, "step_s": step_s,
           "mfu": tps * flops_per_token(cfg, seq) / 1e12 / a.peak_tflops if a.peak_tflops > 0 else 0,
           "peak_allocated_bytes": torch.cuda.max_memory_allocated() if a.device == "cuda" else 0,
           "peak_reserved_bytes": torch.cuda.max_memory_reserved() if a.device == "cuda" else 0,
           "seq": seq, "batch": a.batch_size, "ac": a.ac, "first_loss": losses[0], "last_loss": losses[-1],
           "torch": torch.__version__, "device_name": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}
    print(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
