#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_vs_pytorch.sh and bench/cpu_vs_pytorch.sh: Hugging Face
LlamaForCausalLM (sdpa attention) trained with torch FSDP2 `fully_shard` on every decoder layer
and the root, with the same shape, batch per rank, sequence length, optimizer (fused AdamW,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only, clip 1.0) and precision (fp32 master weights, the
given compute dtype, fp32 reduction) as `shardtrain train`. Rows come from the same token file;
each rank takes its own rows of every global batch. Runs alone (world 1) or under torchrun
(gloo on CPU, NCCL on GPUs). Rank 0 prints one JSON object: median tokens/s over all ranks,
MFU, and peak memory (GPU allocator, and this process's peak resident set).
--weights DIR starts from a Hugging Face checkpoint (its config.json gives the shape); --compile
wraps each decoder layer in torch.compile before sharding it, as torchtitan does. --offload shards
with CPUOffloadPolicy: the fp32 shards, their gradients and AdamW's state in host memory (pinned
beside a GPU), AdamW on the CPU, as `shardtrain train --cpu-offload` (bench/gpu_suite.sh --parts offload).
"""
import argparse
import json
import os
import resource
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
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads per rank (0: torch's default)")
    ap.add_argument("--weights", help="a Hugging Face model directory (sharded safetensors and index too) to start from")
    ap.add_argument("--losses-file", help="write each step's loss here, one JSON object a line (as shardtrain's metrics)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each decoder layer (torchtitan's per-block compile)")
    ap.add_argument("--offload", action="store_true",
                    help="CPUOffloadPolicy: fp32 shards, gradients and AdamW state in host memory, AdamW on the CPU")
    a = ap.parse_args()

    # The reference must run the LibTorch that shardtrain links, or the comparison is of versions.
    want = os.environ.get("SHARDTRAIN_TORCH_VERSION", "2.11")
    if not torch.__version__.startswith(want):
        raise SystemExit(f"fsdp2_reference: torch {torch.__version__}, but shardtrain is built against {want}.x; "
                         f"pip install 'torch=={want}.*'")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    backend = "nccl" if a.device == "cuda" else "gloo"
    if a.offload and a.device == "cuda":  # the gradient norm's reduction is over host tensors (torchtitan does the same)
        backend = "cuda:nccl,cpu:gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    with h5py.File(a.data) as f:
        tokens = torch.from_numpy(f["tokens"][...].astype("int64"))
        mask = torch.from_numpy(f["loss_mask"][...].astype("bool"))
        # Packed rows: each sample's positions restart at 0; transformers then attends within each
        # sample, and, as its DataCollatorWithFlattening, no sample's first token is a target.
        positions = torch.from_numpy(f["position_ids"][...].astype("int64")) if "position_ids" in f else None
    if positions is not None:
        mask &= positions != 0
    seq = tokens.shape[1]
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    if a.weights:  # fp32 master weights, as shardtrain keeps them, whatever dtype the files hold
        model = LlamaForCausalLM.from_pretrained(a.weights, torch_dtype=torch.float32, attn_implementation="sdpa").to(dev)
        cfg = model.config
    else:
        cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                          num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                          max_position_embeddings=max(seq, 4096), rms_norm_eps=1e-5, tie_word_embeddings=False,
                          attn_implementation="sdpa")
        if a.offload:  # the GPU initialises billions of parameters in seconds; fully_shard then moves each shard to the host
            with torch.device(dev):
                model = LlamaForCausalLM(cfg)
        else:
            model = LlamaForCausalLM(cfg).to(dev)
    if a.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    # Pinned host memory needs a GPU; on CPU the policy still runs its host-side path (the smoke test).
    offload = CPUOffloadPolicy(pin_memory=a.device == "cuda") if a.offload else OffloadPolicy()
    for layer in model.model.layers:  # one FSDP unit per decoder layer, as shardtrain does
        if a.compile:
            layer.compile()  # in place, so the layer stays the module fully_shard wraps
        fully_shard(layer, mp_policy=mp, offload_policy=offload)
    fully_shard(model, mp_policy=mp, offload_policy=offload)
    # shardtrain decays every matrix and no norm weight.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.1, fused=True)
    if a.device == "cuda":
        torch.cuda.synchronize()
        if a.offload:
            torch.cuda.empty_cache()  # the full model the GPU initialised is on the host now: not this run's reservation
        torch.cuda.reset_peak_memory_stats()  # after the model is built, as shardtrain does
    times, losses = [], []
    rows = a.batch_size * world
    for step in range(a.steps):
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()  # the batch's copy to the device is in the step, as in shardtrain's
        i = (step * rows + rank * a.batch_size) % (tokens.shape[0] - a.batch_size + 1)
        x = tokens[i:i + a.batch_size].to(dev, non_blocking=True)
        labels = x.masked_fill(~mask[i:i + a.batch_size].to(dev, non_blocking=True), -100)
        pos = positions[i:i + a.batch_size].to(dev, non_blocking=True) if positions is not None else None
        loss = model(input_ids=x, labels=labels, position_ids=pos, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronizes, as shardtrain's step does
        times.append(time.perf_counter() - t0)
    kept = times[a.skip:] or times
    step_s = statistics.median(kept)
    tps = rows * seq / step_s  # every rank's tokens, as shardtrain's tokens_per_s counts them
    out = {"side": "pytorch_fsdp2", "tokens_per_s": tps, "step_s": step_s, "world": world,
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # rank 0's, as shardtrain reports
           "mfu": tps / world * flops_per_token(cfg, seq) / 1e12 / a.peak_tflops if a.peak_tflops > 0 else 0,
           "peak_allocated_bytes": torch.cuda.max_memory_allocated() if a.device == "cuda" else 0,
           "peak_reserved_bytes": torch.cuda.max_memory_reserved() if a.device == "cuda" else 0,
           "seq": seq, "batch": a.batch_size, "ac": a.ac, "compile": a.compile, "offload": a.offload, "layers": cfg.num_hidden_layers, "first_loss": losses[0], "last_loss": losses[-1],
           "torch": torch.__version__, "device_name": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}
    if rank == 0:
        print(json.dumps(out))
        if a.losses_file:
            with open(a.losses_file, "w") as f:
                for step, loss in enumerate(losses, 1):
                    f.write(json.dumps({"step": step, "loss": loss}) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
