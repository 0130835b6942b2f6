#!/usr/bin/env python3
"""The table of bench/gpu_vs_pytorch.sh: one row per configuration from shardtrain's metrics JSONL
and the PyTorch reference's JSON line(s), each a median after the warm-up steps.
  speed_table.py header [--compile]
  speed_table.py row SEQ AC SHARDTRAIN.jsonl SKIP DEVICE PYTORCH.json [COMPILED.json]
"""
import json
import sys

import metrics_median  # beside this script


def median(path, field, skip):
    try:
        return metrics_median.median(path, field, skip)
    except OSError:  # the run failed before its first step
        return 0


def mem(b):
    return "%.1f GiB" % (b / 2**30) if b else "n/a"


def tps(x):
    return "%.0f" % x if x else "failed"


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "n/a"


def header(compiled):
    cols = ["seq", "activation ckpt", "shardtrain tok/s", "PyTorch FSDP2 tok/s", "ratio"]
    cols += ["PyTorch FSDP2 + compile tok/s", "ratio"] if compiled else []
    cols += ["shardtrain MFU", "PyTorch MFU"] + (["compiled MFU"] if compiled else [])
    cols += ["shardtrain peak allocated", "PyTorch peak allocated", "ratio"]
    cols += ["compiled peak allocated", "ratio"] if compiled else []
    cols += ["shardtrain peak reserved", "PyTorch peak reserved", "ratio"]
    print("| " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * (len(cols) - 2))


def load(path):  # the reference's last line: one JSON object; a failed run gives zeros
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, IndexError, ValueError):
        return {"tokens_per_s": 0, "mfu": 0, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0}


def row(seq, ac, metrics, skip, device, ref, compiled=None):
    st = {k: median(metrics, k, skip) for k in ("tokens_per_s", "mfu", "memory.gpu_peak_allocated_bytes",
                                                "memory.gpu_peak_reserved_bytes", "peak_mem_bytes")}
    st_mem = st["memory.gpu_peak_allocated_bytes"] if device == "cuda" else st["peak_mem_bytes"]
    st_res = st["memory.gpu_peak_reserved_bytes"] if device == "cuda" else 0
    pt, pc = load(ref), load(compiled) if compiled else None
    cells = [seq, ac, tps(st["tokens_per_s"]), tps(pt["tokens_per_s"]), ratio(st["tokens_per_s"], pt["tokens_per_s"])]
    if pc:
        cells += [tps(pc["tokens_per_s"]), ratio(st["tokens_per_s"], pc["tokens_per_s"])]
    cells += ["%.1f%%" % (100 * st["mfu"]), "%.1f%%" % (100 * pt["mfu"])] + (["%.1f%%" % (100 * pc["mfu"])] if pc else [])
    cells += [mem(st_mem), mem(pt["peak_allocated_bytes"]), ratio(st_mem, pt["peak_allocated_bytes"])]
    if pc:
        cells += [mem(pc["peak_allocated_bytes"]), ratio(st_mem, pc["peak_allocated_bytes"])]
    cells += [mem(st_res), mem(pt["peak_reserved_bytes"]), ratio(st_res, pt["peak_reserved_bytes"])]
    print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "header":
        header("--compile" in sys.argv[2:])
    else:
        row(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6], sys.argv[7],
            sys.argv[8] if len(sys.argv) > 8 else None)
