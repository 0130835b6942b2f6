#!/usr/bin/env python3
"""Figures of train --metrics-file JSONL runs, for containers/test.sh.

  compare_runs.py demo METRICS.jsonl      -> the demo's figures; exit 1 unless the last exact match
                                             is >= 90% and the validation loss fell
  compare_runs.py equal WHOLE.jsonl PART.jsonl [TOL]
                                          -> exit 1 unless every step of PART is in WHOLE with the
                                             same loss within TOL (1e-6, absolute)
"""
import json
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def demo(path, min_match=0.90):
    val = [l for l in lines(path) if "val_loss" in l]
    match = [l for l in val if "val_exact_match" in l]
    if len(val) < 2 or not match:
        print(f"{path}: {len(val)} validation lines, {len(match)} with exact match")
        return 1
    first, last = val[0]["val_loss"], val[-1]["val_loss"]
    em = match[-1]["val_exact_match"]
    print(f"val_loss {first:.3f} -> {last:.3f}, exact match {em:.1%} at step {match[-1]['step']}")
    return 0 if em >= min_match and last < first else 1


def equal(whole_path, part_path, tol=1e-6):
    whole = {l["step"]: l["loss"] for l in lines(whole_path) if l.get("step", 0) > 0 and "loss" in l}
    part = {l["step"]: l["loss"] for l in lines(part_path) if l.get("step", 0) > 0 and "loss" in l}
    missing = sorted(set(part) - set(whole))
    if not part or missing:
        print(f"{part_path}: {len(part)} steps, {len(missing)} not in {whole_path} (first {missing[:3]})")
        return 1
    diffs = {s: abs(part[s] - whole[s]) for s in part}
    worst = max(diffs, key=diffs.get)
    print(f"{len(part)} steps ({min(part)}-{max(part)}) equal within {diffs[worst]:.1e} "
          f"(worst at step {worst}; tolerance {tol:g}); final loss {part[max(part)]:.6f}")
    return 0 if diffs[worst] <= tol else 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "demo" and len(sys.argv) == 3:
        sys.exit(demo(sys.argv[2]))
    if cmd == "equal" and len(sys.argv) in (4, 5):
        sys.exit(equal(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) == 5 else 1e-6))
    print(__doc__)
    sys.exit(2)
