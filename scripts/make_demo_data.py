#!/usr/bin/env python3
"""Builds the demo instruction dataset (alpaca JSONL) and its Llama-2-style SentencePiece tokenizer.

Three tasks with one exact answer each (reverse digits, sort digits, add two 2-digit numbers),
so a tiny model's accuracy is measurable. Writes DIR/train.jsonl, DIR/val.jsonl and
DIR/tokenizer.model. Deterministic: the same arguments give byte-identical files.

Usage: make_demo_data.py [--out DIR] [--train-size N] [--val-size N] [--seed S] [--vocab-size V]
"""
import argparse
import io
import json
import os
import random

import sentencepiece as spm

# llama-recipes' PROMPT_DICT (src/llama_recipes/datasets/alpaca_dataset.py).
PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides "
                "further context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                   "appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:")

# Llama-2's trainer settings, except character_coverage (1.0, not 0.99995: the corpus is tiny)
# and the threading/shuffling knobs, pinned for byte-identical output.
LLAMA2_SPM = dict(
    model_type="bpe", character_coverage=1.0, byte_fallback=True, split_digits=True,
    split_by_unicode_script=True, split_by_number=True, split_by_whitespace=True,
    allow_whitespace_only_pieces=True, normalization_rule_name="identity", add_dummy_prefix=True,
    remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
    max_sentence_length=4192, num_threads=1, shuffle_input_sentence=False, input_sentence_size=0,
    hard_vocab_limit=True, minloglevel=2)


def digits(rng):
    # 3-5 digits, space separated, so every digit is its own token.
    return [rng.randrange(10) for _ in range(rng.randint(3, 5))]


def make_sample(rng):
    task = rng.randrange(3)
    if task == 0:
        d = digits(rng)
        return "Reverse the digits.", " ".join(map(str, d)), " ".join(map(str, d[::-1]))
    if task == 1:
        d = digits(rng)
        return "Sort the digits in ascending order.", " ".join(map(str, d)), " ".join(map(str, sorted(d)))
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return "Add the two numbers.", f"{a} + {b}", str(a + b)


def make_split(rng, n, seen):
    # Unique (instruction, input) pairs across both splits, so val never leaks into train.
    out = []
    while len(out) < n:
        ins, inp, outp = make_sample(rng)
        if (ins, inp) in seen:
            continue
        seen.add((ins, inp))
        out.append({"instruction": ins, "input": inp, "output": outp})
    return out


def template(s):
    return (PROMPT_INPUT if s["input"].strip() else PROMPT_NO_INPUT).format(**s)


def train_tokenizer(texts, vocab_size):
    # In-memory iterator and writer: no temp path ends up recorded in the model's trainer spec.
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buf,
                                   vocab_size=vocab_size, **LLAMA2_SPM)
    return buf.getvalue()


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(repo, "data", "demo"))
    ap.add_argument("--train-size", type=int, default=6000)
    ap.add_argument("--val-size", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--vocab-size", type=int, default=512)
    a = ap.parse_args()

    rng, seen = random.Random(a.seed), set()
    val = make_split(rng, a.val_size, seen)  # val first: its pairs are reserved before train draws
    train = make_split(rng, a.train_size, seen)
    os.makedirs(a.out, exist_ok=True)
    write_jsonl(os.path.join(a.out, "train.jsonl"), train)
    write_jsonl(os.path.join(a.out, "val.jsonl"), val)
    # The tokenizer sees whole templated samples so the template's words become pieces.
    model = train_tokenizer([template(s) + " " + s["output"] for s in train], a.vocab_size)
    with open(os.path.join(a.out, "tokenizer.model"), "wb") as f:
        f.write(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    print(f"wrote {len(train)} train, {len(val)} val samples and a {sp.get_piece_size()}-piece "
          f"tokenizer to {a.out}")


if __name__ == "__main__":
    main()
