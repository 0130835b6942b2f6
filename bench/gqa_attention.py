#!/usr/bin/env python3
"""Grouped-query attention two ways, forward and backward, in the same run: SDPA with
enable_gqa=True (what shardtrain's causal_attention passes when a fused kernel takes it) against
K and V repeated per query head (Hugging Face's repeat_kv). Prints the backend SDPA picks, the
median time of each, their ratio, and the largest difference of the outputs and gradients.
  python3 bench/gqa_attention.py                 # cuda: Llama-2 70B's attention, seq 4096, batch 1, bf16
  python3 bench/gqa_attention.py --device cpu    # smoke test: a small shape
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    b, heads, kv, seq, dim = (1, 64, 8, 4096, 128) if cuda else (1, 8, 2, 256, 32)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    q = torch.randn(b, heads, seq, dim, device=a.device, dtype=dtype, requires_grad=True)
    k = torch.randn(b, kv, seq, dim, device=a.device, dtype=dtype, requires_grad=True)
    v = torch.randn(b, kv, seq, dim, device=a.device, dtype=dtype, requires_grad=True)
    go = torch.randn(b, heads, seq, dim, device=a.device, dtype=dtype)
    backend = torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, True, enable_gqa=True)
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}

    def native():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def repeated():
        r = heads // kv
        return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=True)

    def step(fn):  # forward and backward; the output and the gradients
        for t in (q, k, v):
            t.grad = None
        out = fn()
        out.backward(go)
        return [out.detach(), q.grad, k.grad, v.grad]

    def timed(fn):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(fn)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    first, second = step(native), step(repeated)  # step resets .grad to None, so the first set stays intact
    diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(first, second))
    times = {"native": [], "repeated": []}
    for _ in range(a.repeats):  # interleaved
        times["native"].append(timed(native))
        times["repeated"].append(timed(repeated))
    tn, tr = statistics.median(times["native"]), statistics.median(times["repeated"])
    print(f"| {a.device} | {b}x{heads}/{kv} heads x {seq} x {dim} {str(dtype).split('.')[-1]} | {names.get(backend, backend)} "
          f"| {1e3 * tn:.2f} ms | {1e3 * tr:.2f} ms | {tr / tn:.2f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
