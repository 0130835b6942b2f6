#!/usr/bin/env python3
"""Reference tokenizations from Python SentencePiece for the C++ tokenizer test.

Trains a fresh Llama-2-style BPE model on the demo data plus a multilingual corpus
(OUTDIR/trained.model), then encodes a fixed list of strings with it and with the shipped
data/demo/tokenizer.model, and writes OUTDIR/tokenizer_cases.json. When transformers can build
its Llama tokenizer offline, each case also gets "hf_ids" and the script checks they agree.
"sha256" holds hashlib's digest of each model file, the reference for the C++ SHA-256.

Usage: tokenizer_reference.py OUTDIR
"""
import hashlib
import json
import os
import random
import shutil
import sys

import sentencepiece as spm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from make_demo_data import LLAMA2_SPM, template  # noqa: E402  (one copy of the settings)

CORPUS = os.path.join(REPO, "tests", "data", "tokenizer", "corpus.txt")
DEMO = os.path.join(REPO, "data", "demo")
SHIPPED = os.path.join(DEMO, "tokenizer.model")
VOCAB = 1000  # 325 distinct corpus characters + 259 byte/special pieces leave room for merges
BOS, EOS = 1, 2


def load_demo(n=None):
    with open(os.path.join(DEMO, "train.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f][:n]


def train(out_path, **overrides):
    with open(CORPUS, encoding="utf-8") as f:
        lines = f.read().split("\n")
    texts = [template(s) + " " + s["output"] for s in load_demo()] + [l for l in lines if l]
    with open(out_path, "wb") as f:  # in-memory trainer; the writer gets the serialized proto
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=f,
                                       vocab_size=VOCAB, **{**LLAMA2_SPM, **overrides})


def long_line(n=20000):
    # Deterministic mix of words, digits, punctuation and non-ASCII, cut to exactly n chars.
    words = ["the", "Grüße", "日本語", "token", "🚀", "x", "co-op", "3.14", "ᚠ", "naïve", "\t", "  "]
    rng, parts = random.Random(1234), []
    while sum(map(len, parts)) < n:
        parts.append(rng.choice(words) if rng.random() < 0.8 else str(rng.randrange(10 ** 6)))
        parts.append(" ")
    return "".join(parts)[:n]


def cases_texts():
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read().split("\n")[:20]
    demo = load_demo(3)
    prompts = [template(s) for s in demo] + [template(dict(demo[0], input=""))]
    prompts.append(template(demo[1]) + " " + demo[1]["output"])
    return (["", " ", "  ", "a    b", "  leading", "trailing  ", " both ", "x\t\ty\n\nz", "\n", "\t",
             "12345 67.89 1e10", "naïve café", "Grüße", "日本語のテキスト", "中文", "👍🏽🚀",
             "مرحبا بالعالم", "שלום עולם", "ᚠᛇᚻ", "\u00a0", "a\u00a0b", "<s> and </s> as text",
             "▁ already a meta symbol", long_line()] + corpus + prompts)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def hf_tokenizer(model_path):
    # transformers 5 has no slow (sentencepiece) LlamaTokenizer and needs protobuf to read a
    # .model; build the tokenizers-backed one from vocab + merges the way its extractor does.
    try:
        from transformers import LlamaTokenizer
        from transformers.tokenization_utils_base import generate_merges
    except ImportError as e:
        print(f"no transformers ({e}); skipping hf_ids")
        return None
    sp = spm.SentencePieceProcessor(model_file=model_path)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    return LlamaTokenizer(vocab=vocab, merges=generate_merges(vocab), legacy=True, add_bos_token=True)


def hf_may_differ(text):
    # Known transformers-5 differences: its Metaspace pre-tokenizer skips the dummy prefix when the
    # text already starts with a space or "▁" (SentencePiece always adds it), and it parses
    # "<s>"/"</s>" in the text as special tokens (SentencePiece encodes them as plain text).
    return text[:1] in (" ", "\u2581") or "<s>" in text or "</s>" in text


def no_prefix_cases(path):
    # The model with add_dummy_prefix false, edited through sentencepiece's own protobuf classes: what a run after a
    # special token becomes under LlamaTokenizer's legacy=false.
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    m.normalizer_spec.add_dummy_prefix = False
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    return [{"text": t, "ids": sp.encode(t)} for t in cases_texts()[:40]]


# Texts where transformers' rules for a SentencePiece model directory differ from SentencePiece's own: added and
# special tokens written in the text, texts opening with a space or "▁", role tokens that strip the whitespace after.
DIR_TEXTS = ["<s> and </s> as text", "hello</s>world", "x  <s>  y", "trailing <s>", "</s>", " lead", "  two spaces",
             "\u2581 already a meta symbol", " ", "", "a<unk>b", "plain words, 12 digits",
             "<|user|>\nWhat is 2 + 3?<|end|>\n<|assistant|>\n5.<|end|>", "Grüße <|end|>  日本語 <|user|> x",
             "<|system|>  \n\tBe brief.<|end|>"]
ROLES = ["<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]


def added(content, rstrip=False):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": rstrip, "single_word": False,
            "special": True}


def dir_cases(out, model):
    """Model directories as the Hub ships Llama-2's, Mistral's and Phi-3's (tokenizer.model beside a
    tokenizer_config.json), read by transformers' AutoTokenizer: legacy true, false and absent (transformers 5's
    default is false), add_prefix_space false, and Phi-3's added role tokens (rstrip) after the model's pieces."""
    from transformers import AutoTokenizer
    base = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "add_bos_token": True, "add_eos_token": False,
            "added_tokens_decoder": {"0": added("<unk>"), "1": added("<s>"), "2": added("</s>")}}
    phi3 = dict(base, legacy=False, add_bos_token=False, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    phi3["added_tokens_decoder"] = dict(base["added_tokens_decoder"], **{
        str(VOCAB + i): added(t, rstrip=t in ROLES) for i, t in enumerate(["<|endoftext|>"] + ROLES)})
    variants = {"legacy": dict(base, legacy=True), "nonlegacy": dict(base, legacy=False), "absent": base,
                "no_prefix": dict(base, legacy=True, add_prefix_space=False), "phi3": phi3}
    cases = []
    for name, config in variants.items():
        d = os.path.join(out, "dirs", name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(model, os.path.join(d, "tokenizer.model"))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
        hf = AutoTokenizer.from_pretrained(d)
        assert type(hf).__name__ == "LlamaTokenizer", type(hf)
        sp = spm.SentencePieceProcessor(model_file=model)
        bos = [BOS] if config["add_bos_token"] else []
        cases += [{"dir": d, "text": t, "ids": hf(t)["input_ids"], "sp_ids": bos + sp.encode(t)} for t in DIR_TEXTS]
    return cases


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    trained = os.path.join(out, "trained.model")
    train(trained)
    models, cases, sizes, diffs = {"trained": trained, "shipped": SHIPPED}, [], {}, []
    for name, path in models.items():
        sp = spm.SentencePieceProcessor(model_file=path)
        sizes[name] = sp.get_piece_size()
        hf = hf_tokenizer(path)
        for text in cases_texts():
            ids = sp.encode(text)
            case = {"model": name, "text": text, "ids": [BOS] + ids,  # HF LlamaTokenizer default
                    "pieces": sp.encode(text, out_type=str), "decoded": sp.decode(ids)}
            if hf is not None:
                case["hf_ids"] = hf(text)["input_ids"]
                if case["hf_ids"] != case["ids"]:
                    diffs.append((name, text))
            cases.append(case)
    with open(os.path.join(out, "tokenizer_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"models": models, "cases": cases, "vocab_size": sizes, "bos_id": BOS,
                   "eos_id": EOS, "sha256": {n: sha256(p) for n, p in models.items()},
                   "no_prefix": no_prefix_cases(SHIPPED), "dirs": dir_cases(out, trained)},
                  f, ensure_ascii=False, indent=1)
    print(f"{len(cases)} cases, vocab sizes {sizes}, {len(diffs)} differ from transformers")
    for name, text in diffs:
        print(f"  hf differs [{name}]: {text[:40]!r}")
    # Every other case must agree with transformers, or the reference itself is suspect.
    unexpected = [d for d in diffs if not hf_may_differ(d[1])]
    if unexpected:
        sys.exit(f"sentencepiece and transformers differ unexpectedly on {unexpected}")


if __name__ == "__main__":
    main()
