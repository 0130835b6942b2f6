"""Seconds per element of LibTorch's fused CPU AdamW (torch.optim.AdamW(fused=True) on fp32 CPU
tensors, i.e. torch._fused_adamw_) and of refreshing a bf16 mirror of the master after it: what
`shardtrain plan --cpu-offload` assumes per core (docs/planner.md). Beside them, a plain add_ of
two fp32 tensors (12 bytes per element moved) as the machine's streaming rate. Prints one line
per thread count and the machine it ran on.

    .venv/bin/python scripts/cpu_adamw_rate.py [--elements 50000000] [--threads 1,2] [--steps 10]
"""
import argparse
import datetime
import os
import platform
import statistics
import time

import torch


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=50_000_000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_model()}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}, {a.elements} fp32 elements, median of "
          f"{a.steps} steps after 2 warm-up steps; load average {os.getloadavg()[0]:.2f} at start")
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(a.elements, generator=g))
    p.grad = torch.randn(a.elements, generator=g)
    mirror = torch.empty(a.elements, dtype=torch.bfloat16)
    x, y = torch.randn(a.elements, generator=g), torch.randn(a.elements, generator=g)
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1, fused=True)

    def ns_per_element(step):
        for _ in range(2):
            step()
        times = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return [t / a.elements * 1e9 for t in (statistics.median(times), min(times), max(times))]

    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        with torch.no_grad():
            adamw = ns_per_element(opt.step)
            cast = ns_per_element(lambda: mirror.copy_(p))
            add = ns_per_element(lambda: x.add_(y))
        print(f"threads {threads}: AdamW {adamw[0]:.3f} ns per element (min {adamw[1]:.3f}, max {adamw[2]:.3f}), "
              f"{28 / adamw[0]:.1f} GB/s at 28 bytes; bf16 mirror {cast[0]:.3f} (min {cast[1]:.3f}, "
              f"max {cast[2]:.3f}); together {adamw[0] + cast[0]:.3f} ns per element; "
              f"add_ {12 / add[0]:.1f} GB/s")


if __name__ == "__main__":
    main()
