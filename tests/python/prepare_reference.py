#!/usr/bin/env python3
"""Independent reference for `shardtrain prepare` on the golden JSONL files in tests/data/prepare/.

Implements the prepare spec literally (a sample whose every loss token --seq-len cuts away is
dropped and counted as a skip, after being counted as truncated) with Python SentencePiece and data/demo/tokenizer.model
(seq_len 64, padding mode) and writes OUTDIR/prepare_expected.json with, per file, the counts
(read, skipped by reason, truncated, kept, tokens, loss_tokens) and every padded row and mask.

Usage: prepare_reference.py OUTDIR
"""
import json
import os
import sys

import sentencepiece as spm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(REPO, "tests", "data", "prepare")
SEQ_LEN, BOS, EOS, PAD = 64, 1, 2, 2
WS = " \t\n\r\f\v"  # ASCII whitespace only, so "empty" means the same thing in C++

sys.path.insert(0, os.path.join(REPO, "scripts"))
from make_demo_data import PROMPT_INPUT, PROMPT_NO_INPUT  # noqa: E402  (alpaca_dataset.py's PROMPT_DICT)

# llama-recipes' samsum_dataset.py prompt; the summary follows it directly.
SAMSUM = "Summarize this dialog:\n{dialog}\n---\nSummary:\n"
REQUIRED = {"alpaca": ("instruction", "output"), "samsum": ("dialogue", "summary"), "text": ("text",)}


def parse(raw, fmt):
    """Returns (prompt, answer) or the skip reason as a str."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid UTF-8"  # checked before anything else
    try:
        obj = json.loads(line)
    except ValueError:
        return "malformed JSON"
    if not isinstance(obj, dict):
        return "malformed JSON"
    for key in REQUIRED[fmt]:  # reasons in field order: first failing field decides
        if key not in obj:
            return "missing field"
        if not isinstance(obj[key], str):
            return "not a string"
        if not obj[key].strip(WS):
            return "empty text"
    if fmt == "text":
        return None, obj["text"]
    if fmt == "samsum":
        return SAMSUM.format(dialog=obj["dialogue"]), obj["summary"]
    inp = obj.get("input", "")  # optional; only its (stripped) emptiness picks the template
    tpl = PROMPT_INPUT if isinstance(inp, str) and inp.strip(WS) else PROMPT_NO_INPUT
    return tpl.format(instruction=obj["instruction"], input=inp), obj["output"]


def prepare(sp, path, fmt):
    res = {"path": path, "format": fmt, "read": 0, "skipped": {}, "truncated": 0, "kept": 0,
           "tokens": 0, "loss_tokens": 0, "rows": [], "masks": []}
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for raw in lines:
        if not raw.strip():  # blank or whitespace-only: neither read nor skipped
            continue
        res["read"] += 1
        parsed = parse(raw, fmt)
        if isinstance(parsed, str):
            res["skipped"][parsed] = res["skipped"].get(parsed, 0) + 1
            continue
        prompt, answer = parsed
        if prompt is None:  # plain text: every position after BOS carries loss
            ids = [BOS] + sp.encode(answer) + [EOS]
            mask = [0] + [1] * (len(ids) - 1)
        elif fmt == "alpaca":  # alpaca_dataset.py: encode prompt+output together, mask len(encode(prompt))
            ids = [BOS] + sp.encode(prompt + answer) + [EOS]
            n = min(len(ids), 1 + len(sp.encode(prompt)))
            mask = [0] * n + [1] * (len(ids) - n)
        else:  # samsum_dataset.py: prompt and summary encoded separately
            p, a = [BOS] + sp.encode(prompt), sp.encode(answer) + [EOS]
            ids, mask = p + a, [0] * len(p) + [1] * len(a)
        if len(ids) > SEQ_LEN:
            had_loss = sum(mask) > 0
            ids, mask = ids[:SEQ_LEN], mask[:SEQ_LEN]
            res["truncated"] += 1
            if had_loss and sum(mask) == 0:  # the answer is cut away entirely: dropped, counted as a skip
                reason = "answer cut away by --seq-len"
                res["skipped"][reason] = res["skipped"].get(reason, 0) + 1
                continue
        res["tokens"] += len(ids)
        res["loss_tokens"] += sum(mask)
        pad = SEQ_LEN - len(ids)
        res["rows"].append(ids + [PAD] * pad)
        res["masks"].append(mask + [0] * pad)
    res["kept"] = res["read"] - sum(res["skipped"].values())
    assert res["kept"] == len(res["rows"])
    return res


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(REPO, "data", "demo", "tokenizer.model"))
    files = {fmt: prepare(sp, os.path.join(GOLDEN, fmt + ".jsonl"), fmt) for fmt in REQUIRED}
    with open(os.path.join(out, "prepare_expected.json"), "w", encoding="utf-8") as f:
        json.dump({"seq_len": SEQ_LEN, "pad_id": PAD, "files": files}, f)
    for fmt, r in files.items():
        print(f"{fmt}: read {r['read']} skipped {r['skipped']} truncated {r['truncated']} "
              f"kept {r['kept']} tokens {r['tokens']} loss_tokens {r['loss_tokens']}")


if __name__ == "__main__":
    main()
