#!/usr/bin/env python3
"""Reads a token file written by `shardtrain prepare` with h5py and checks it with Python's
sentencepiece and hashlib: provenance hashes, shapes, and that each row's masked tokens decode
to the sample's answer from the JSONL source (padding mode, alpaca).

Usage: check_token_file.py TOKEN_FILE.h5 SOURCE.jsonl TOKENIZER.model
"""
import hashlib
import json
import sys

import h5py
import numpy as np
import sentencepiece as spm


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(h5_path, jsonl, model):
    sp = spm.SentencePieceProcessor(model_file=model)
    samples = [json.loads(l) for l in open(jsonl, encoding="utf-8") if l.strip()]
    with h5py.File(h5_path, "r") as f:
        tokens, mask = f["tokens"][...], f["loss_mask"][...]
        attrs = dict(f.attrs)
    assert tokens.dtype == np.int32 and mask.dtype == np.uint8, (tokens.dtype, mask.dtype)
    assert tokens.shape == mask.shape == (len(samples), attrs["seq_len"]), tokens.shape
    assert attrs["tokenizer_sha256"] == sha256(model), "tokenizer hash"
    assert attrs["source_sha256"] == sha256(jsonl), "source hash"
    assert attrs["packing"] == "padding" and attrs["format"] == "alpaca"
    assert int(mask.sum()) == attrs["loss_tokens"]
    for row, s in zip(range(len(samples)), samples):
        ids = tokens[row][mask[row] == 1].tolist()
        assert ids[-1] == sp.eos_id(), f"row {row} must end its target with EOS"
        assert sp.decode(ids[:-1]).strip() == s["output"].strip(), (row, sp.decode(ids[:-1]), s["output"])
        assert tokens[row][0] == sp.bos_id()
    print(f"{h5_path}: {len(samples)} rows verified with h5py + sentencepiece")


if __name__ == "__main__":
    main(*sys.argv[1:4])
