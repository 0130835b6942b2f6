#!/usr/bin/env python3
"""Median of one field of a shardtrain metrics JSONL after the warm-up steps (the benchmarks'
per-run figure). usage: metrics_median.py FILE FIELD SKIP   (FIELD may be nested: a.b)"""
import json
import statistics
import sys


def median(path, field, skip):
    vals = []
    for line in open(path):
        j = json.loads(line)
        if j.get("step", 0) <= skip:
            continue
        for k in field.split("."):
            j = j.get(k, {}) if isinstance(j, dict) else {}
        if isinstance(j, (int, float)):
            vals.append(j)
    return statistics.median(vals) if vals else 0


if __name__ == "__main__":
    print(median(sys.argv[1], sys.argv[2], int(sys.argv[3])))
