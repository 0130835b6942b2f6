#!/usr/bin/env python3
"""Median of one field of a shardtrain metrics JSONL after the warm-up steps (the benchmarks'
per-run figure). usage: metrics_median.py FILE FIELD SKIP   (FIELD may be nested: a.b)"""
import json
import statistics
import sys


def field(row, path):
    """row's value at a dotted path (a.b), or None."""
    for k in path.split("."):
        row = row.get(k) if isinstance(row, dict) else None
    return row if isinstance(row, (int, float)) else None


def median(path, name, skip):
    vals = []
    for line in open(path):
        j = json.loads(line)
        if j.get("step", 0) > skip and field(j, name) is not None:
            vals.append(field(j, name))
    return statistics.median(vals) if vals else 0


if __name__ == "__main__":
    print(median(sys.argv[1], sys.argv[2], int(sys.argv[3])))
