#!/usr/bin/env python3
"""Do benchmark runs of different settings train the same model? The first and the last loss of
each setting's first run (OUT/NAME-1.jsonl) against the first setting's: within 1e-5 on a CPU
(fp32), 1e-3 and 2% on a GPU (bf16). Prints the verdict; exit 1 when a setting disagrees.
usage: losses_agree.py OUT DEVICE LABEL NAME...   (LABEL prefixes each name in the messages)"""
import json
import sys


def losses(out, name):
    return [json.loads(line)["loss"] for line in open(f"{out}/{name}-1.jsonl") if '"loss"' in line]


def main(out, device, label, names):
    first_tol, last_tol = (1e-5, 1e-5) if device == "cpu" else (1e-3, 0.02)  # bf16 on the GPU
    ref = losses(out, names[0])
    bad = []
    for name in names[1:]:
        x = losses(out, name)
        for which, i, tol in (("first", 0, first_tol), ("last", -1, last_tol)):
            rel = abs(x[i] - ref[i]) / abs(ref[i])
            if rel > tol:
                bad.append(f"{label}{name}: {which} loss {x[i]:.6f} vs {ref[i]:.6f} ({rel:.1e} > {tol:g})")
    print("\n".join(bad) if bad else f"losses agree with {label}{names[0]} (first within {first_tol:g}, last within {last_tol:g})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
