#!/usr/bin/env python3
"""Token files and exports with a tokenizer.json (tokenizer_json_reference.py's tokenizers):

- `prepare` with "big" (ids past 65,535): h5py reads /tokens back as int32 rows equal to
  transformers' ids + EOS, padded with EOS, and max_token_id / tokenizer_vocab_size agree;
- `train` runs on that file with a model whose vocab_size covers it, and exits 2 naming the
  vocabulary with one that does not;
- `train --tokenizer DIR --save-model` with the Llama-3-shaped tokenizer copies tokenizer.json and
  tokenizer_config.json unchanged, AutoTokenizer loads the export and encodes as the original;
  a tokenizer that is not the data's is refused; `generate` runs with it.

Usage: check_tokenizer_json_prepare.py SHARDTRAIN REFDIR TMPDIR
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
from transformers import AutoTokenizer

SEQ = 256


def run(cmd, expect=0):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}, expected {expect}\n{r.stdout}\n{r.stderr}")
    return r


def prepare(binary, tok_dir, texts_file, out):
    run([binary, "prepare", "--tokenizer", tok_dir, "--input", texts_file, "--format", "text", "--output", out,
         "--seq-len", str(SEQ), "--mode", "padding"])


def check_rows(h5, hf, texts):
    with h5py.File(h5, "r") as f:
        tokens = f["tokens"]
        assert tokens.dtype == np.int32, tokens.dtype
        rows = tokens[:]
        attrs = dict(f.attrs)
    assert rows.shape == (len(texts), SEQ), rows.shape
    for row, text in zip(rows, texts):
        want = (hf(text)["input_ids"] + [hf.eos_token_id])[:SEQ]
        assert row[:len(want)].tolist() == want, (text[:40], row[:len(want)].tolist()[:20], want[:20])
        assert (row[len(want):] == hf.eos_token_id).all(), "padding is not EOS"
    assert attrs["max_token_id"] == rows.max(), (attrs["max_token_id"], rows.max())
    assert attrs["tokenizer_vocab_size"] == len(hf.get_vocab()) or attrs["tokenizer_vocab_size"] == max(hf.get_vocab().values()) + 1
    return rows


def main(binary, ref, tmp):
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(ref, "texts.jsonl"), encoding="utf-8") as f:
        texts = [t for t in (json.loads(line)["text"] for line in f) if t.strip()]  # prepare skips empty text
    texts_file = os.path.join(tmp, "texts.jsonl")
    with open(texts_file, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")

    big = os.path.join(ref, "big")
    hf_big = AutoTokenizer.from_pretrained(big)
    big_h5 = os.path.join(tmp, "big.h5")
    prepare(binary, big, texts_file, big_h5)
    rows = check_rows(big_h5, hf_big, texts)
    past = int((rows >= 65536).sum())
    assert past > 1000 and rows.max() > 70000, (past, rows.max())
    print(f"prepare with a {max(hf_big.get_vocab().values()) + 1}-id tokenizer: {len(texts)} rows equal transformers' "
          f"ids + EOS; {past} ids >= 65536, the largest {rows.max()}")

    vocab = str(max(hf_big.get_vocab().values()) + 1)
    train = [binary, "train", "--model", "tiny", "--threads", "2", "--steps", "1", "--val-batches", "0", "--batch-size", "2"]
    run(train + ["--vocab-size", vocab, "--data", big_h5])
    r = run(train + ["--data", big_h5], expect=2)
    assert f"{vocab}-piece tokenizer but the model's vocab_size is 512" in r.stderr, r.stderr
    print(f"train reads the ids >= 65536 with vocab_size {vocab}, and exits 2 naming the vocabulary with 512")

    llama3 = os.path.join(ref, "llama3")
    hf = AutoTokenizer.from_pretrained(llama3)
    data = os.path.join(tmp, "llama3.h5")
    prepare(binary, llama3, texts_file, data)
    check_rows(data, hf, texts)
    out = os.path.join(tmp, "export")
    vocab = str(max(hf.get_vocab().values()) + 1)
    run(train + ["--vocab-size", vocab, "--data", data, "--tokenizer", llama3, "--save-model", out])
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        assert filecmp.cmp(os.path.join(llama3, name), os.path.join(out, name), shallow=False), name
    assert not os.path.exists(os.path.join(out, "tokenizer.model"))
    exported = AutoTokenizer.from_pretrained(out)
    for t in texts:
        assert exported(t)["input_ids"] == hf(t)["input_ids"], t[:40]
    assert exported.eos_token_id == hf.eos_token_id and exported.bos_token_id == hf.bos_token_id
    print("train --tokenizer DIR --save-model: tokenizer.json and tokenizer_config.json copied; AutoTokenizer loads the export")

    r = run(train + ["--vocab-size", vocab, "--data", data, "--tokenizer", os.path.join(ref, "qwen2"), "--save-model",
                     os.path.join(tmp, "wrong")], expect=2)
    assert "qwen2" in r.stderr and data in r.stderr, r.stderr
    r = run([binary, "generate", "--threads", "2", "--weights", out, "--tokenizer", llama3, "--prompt", "Hello world",
             "--max-new-tokens", "3"])
    print("a tokenizer that is not the data's is refused; generate runs with the tokenizer.json")


if __name__ == "__main__":
    main(*sys.argv[1:4])
