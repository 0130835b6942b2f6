"""prepare reads a JSON array, as Stanford Alpaca's alpaca_data.json ships (one array of objects,
pretty-printed over many lines), as it reads JSONL: 2,000 generated records in Alpaca's layout
(alpaca_data.json has 52,002; the reader streams one record at a time, so the count adds nothing)
give the same token file both ways, and a truncated array counts its unfinished record as bad.
usage: check_alpaca_array.py SHARDTRAIN TOKENIZER WORKDIR"""
import json
import os
import random
import subprocess
import sys

import h5py
import numpy as np

bin_, tokenizer, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
rng = random.Random(52)
N = 2000  # records: each goes through the same streaming cut, so more only costs time
words = "the of a to and in is for that with as on by it be are this was from or".split()
def text(n):
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, n)))
records = [{"instruction": text(12) + "?", "input": text(8) if rng.random() < 0.4 else "", "output": text(20) + " \u00e9\"\\n"}
           for _ in range(N)]
array, jsonl = os.path.join(work, "alpaca_data.json"), os.path.join(work, "alpaca_data.jsonl")
with open(array, "w", encoding="utf-8") as f:
    json.dump(records, f, indent=4, ensure_ascii=False)  # Alpaca's own layout: indent 4, raw UTF-8
with open(jsonl, "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

def prepare(inp, out):
    r = subprocess.run([bin_, "prepare", "--tokenizer", tokenizer, "--input", inp, "--output", out, "--seq-len", "128"],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr

outs = {}
for name, path in (("array", array), ("jsonl", jsonl)):
    rc, log = prepare(path, os.path.join(work, name + ".h5"))
    assert rc == 0, log
    assert f"read {N} | skipped 0" in log, log
    with h5py.File(os.path.join(work, name + ".h5"), "r") as f:
        outs[name] = {k: f[k][()] for k in f}
assert outs["array"].keys() == outs["jsonl"].keys()
for k in outs["array"]:
    assert np.array_equal(outs["array"][k], outs["jsonl"][k]), k
print(f"array and JSONL: {len(records)} records, equal datasets {sorted(outs['array'])}")

# Cut inside the last record: the others are kept, that one is counted as bad and named.
text_ = open(array, encoding="utf-8").read()
cut = os.path.join(work, "cut.json")
open(cut, "w", encoding="utf-8").write(text_[: text_.rindex('"output"')])
rc, log = prepare(cut, os.path.join(work, "cut.h5"))
assert rc == 0 and f"read {N} | skipped 1" in log and "truncated JSON array" in log, log
print(f"truncated array: {N - 1} kept, 1 reported:", [l for l in log.splitlines() if "truncated" in l][0].strip())
