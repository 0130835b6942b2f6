#!/usr/bin/env python3
"""`shardtrain tokenize` against Hugging Face tokenizers, on the tokenizers and texts that
tokenizer_json_reference.py wrote: one JSON array of ids per {"text": ...} line, from a file and
from stdin, with and without --add-special (each tokenizer both sources, the setting alternating);
and a bad line exits 2 naming the file and line.

Usage: check_tokenize_cli.py SHARDTRAIN REFDIR TMPDIR
"""
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer


def run(cmd, stdin=None, expect=0):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, encoding="utf-8")
    if r.returncode != expect:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}, expected {expect}\n{r.stderr}")
    return r


def main(binary, ref, tmp):
    os.makedirs(tmp, exist_ok=True)
    texts_file = os.path.join(ref, "texts.jsonl")
    with open(texts_file, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    with open(os.path.join(ref, "cases.json"), encoding="utf-8") as f:
        names = list(json.load(f)["tokenizers"])
    with open(texts_file, encoding="utf-8") as f:
        stdin_text = f.read()
    telling = set()  # (source, --add-special) pairs met on a tokenizer whose special tokens change the ids
    for k, name in enumerate(names):
        d = os.path.join(ref, name)
        lib = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        adds = any(lib.encode(t, add_special_tokens=True).ids != lib.encode(t, add_special_tokens=False).ids
                   for t in texts)
        # Each tokenizer once from the file and once from stdin, --add-special on one of them, alternating
        # between tokenizers: every source meets both settings (the ids themselves: test_tokenizer_json).
        for label, special in [("--input", k % 2 == 0), ("stdin", k % 2 == 1)]:
            extra = ["--add-special"] if special else []
            want = [lib.encode(t, add_special_tokens=special).ids for t in texts]
            if label == "--input":
                out = run([binary, "tokenize", "--tokenizer", d, "--input", texts_file] + extra).stdout
            else:
                out = run([binary, "tokenize", "--tokenizer", os.path.join(d, "tokenizer.json")] + extra, stdin=stdin_text).stdout
            if adds:
                telling.add((label, special))
            got = [json.loads(line) for line in out.splitlines()]
            if got != want:
                bad = next(i for i, (g, w) in enumerate(zip(got + [None] * len(want), want)) if g != w)
                sys.exit(f"{name} {label} {extra}: line {bad + 1} ({texts[bad][:40]!r}): {got[bad] if bad < len(got) else None} != {want[bad]}")
        print(f"{name}: {len(texts)} lines equal tokenizers' ids, file {'with' if k % 2 == 0 else 'without'} and stdin "
              f"{'without' if k % 2 == 0 else 'with'} --add-special")

    assert len(telling) == 4, f"a source and --add-special setting met no tokenizer with special tokens: {telling}"

    # Bad lines: exit 2, one line naming the file and the line number.
    bad = os.path.join(tmp, "bad.jsonl")
    for body, why in [('{"text": "fine"}\n\n{"text": 3}\n', "no \"text\" string"), ('{"text": "fine"}\nnot json\n', "not JSON")]:
        with open(bad, "w", encoding="utf-8") as f:
            f.write(body)
        line = body.rstrip("\n").count("\n") + 1
        r = run([binary, "tokenize", "--tokenizer", os.path.join(ref, "qwen2"), "--input", bad], expect=2)
        err = r.stderr.strip().splitlines()
        if len(err) != 1 or f"{bad}:{line}: " not in err[0] or why not in err[0]:
            sys.exit(f"bad line {line}: wanted one line naming {bad}:{line} and '{why}', got {r.stderr!r}")
    r = run([binary, "tokenize", "--tokenizer", os.path.join(ref, "qwen2")], stdin='{"text": "a"}\n[1]\n', expect=2)
    assert "<stdin>:2: " in r.stderr, r.stderr
    r = run([binary, "tokenize", "--tokenizer", os.path.join(ref, "unigram")], stdin="", expect=2)
    assert "model.type" in r.stderr and "unigram" in r.stderr, r.stderr
    r = run([binary, "tokenize", "--tokenizer", os.path.join(tmp, "nowhere")], stdin="", expect=2)
    assert "nowhere" in r.stderr, r.stderr
    print("bad lines, a refused tokenizer and a missing one exit 2 naming them")


if __name__ == "__main__":
    main(*sys.argv[1:4])
