#!/usr/bin/env python3
"""Reference tokenizations from Hugging Face `tokenizers` for the C++ tokenizer.json reader.

Trains, inside the test and offline, small byte-level BPE tokenizers in the shapes of Llama-3's
(Split with Llama-3's regex, ByteLevel without its regex, ignore_merges, TemplateProcessing adding
<|begin_of_text|>) and Qwen2's (NFC, Qwen2's regex, ByteLevel post-processor, no BOS), plus a
Llama-3-shaped one whose ids run past 65,535 ("big", for the token files); and, for the other
options, GPT-2's ByteLevel after Splits of every behavior ("gpt2"), and character-level BPEs with
byte_fallback ("fallback") and a fused unk_token ("unk"). Each goes into its own
model directory with the tokenizer_config.json (or special_tokens_map.json) the Hub's have.

For a corpus of hard cases it writes the ids with and without special tokens and the decodes, as
transformers' AutoTokenizer gives them, and checks the tokenizers library agrees. It also writes
decodes of id runs that split UTF-8 characters, and Unigram / WordPiece tokenizer.json files that
shardtrain must refuse.

Usage: tokenizer_json_reference.py OUTDIR      (writes OUTDIR/cases.json and OUTDIR/<name>/)
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "tests", "data", "tokenizer", "corpus.txt")
DEMO = os.path.join(REPO, "data", "demo", "train.jsonl")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Phi-4-mini's (tiktoken's o200k): case runs split before capitals, digits in threes, "/" kept with punctuation.
O200K_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PHI4_SPECIALS = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"]
BIG_SHIFT = 70000  # "big": every vocabulary id moved up by this, so ordinary words have ids >= 65536


def case_texts():
    with open(CORPUS, encoding="utf-8") as f:
        corpus = [l for l in f.read().split("\n") if l][:12]
    return [
        "", " ", "  ", "\t", "\n", "\r\n", "a", "Hello world", "Hello, world! How's it going?",
        "The quick brown fox jumps over the lazy dog.",
        "আমি বাংলায় গান গাই। বাংলা ভাষা",  # Bengali
        "日本語のテキストと中文字符，한국어 문장도 있습니다。",  # CJK
        "👩‍👩‍👧 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🚀🚀🚀",  # emoji with ZWJ and modifiers
        "def f(x):\n\treturn x ** 2  # square\n\nif __name__ == '__main__':\n    print(f(3))",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }\r\n",
        "1234567 12 123 1234 3.14159 1,000,000 0x1F 2024-06-01",
        "DON'T do it, We'Ll see, they'RE here, I'M sure, you'VE been, she'D go, it'S, can'T",
        "don't we'll they're I'm you've she'd it's",
        "'s 's 'S", "x'ſ", "word\u0085next", "a\u00a0b", "tab\tseparated\tvalues",
        "many     spaces      here", "trailing spaces   ", "   leading spaces", " \t \n mixed \r\n\r\n end",
        "line one\r\nline two\r\n\r\nline four\n\n\n", "\n\n\n\n",
        "cafe\u0301 re\u0301sume\u0301 nai\u0308ve",  # decomposed accents (NFC composes them)
        "café résumé naïve", "A\u030a \u212b \u00c5",  # Å three ways
        "<|begin_of_text|>Hello<|end_of_text|>", "text <|eot_id|> more <|start_header_id|>user<|end_header_id|>",
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "<|endoftext",
        "<|im_start|><|im_start|>x<|im_end|>", "a <tool_call>{\"name\": 1}</tool_call> b", "cafe\u0301 and café",
        "hot dog, dogs, hotdog, dog", "[MASK] in   [MASK]   middle", "x[MASK]y",
        "مرحبا بالعالم", "שלום עולם", "Привет, мир! Ёлка", "ᚠᛇᚻ", "Grüße aus Köln",
        "mixed: abc123def 456ghi", "!!!???...,,,", "--- *** ___ ```python```",
        "\u200b zero\u200bwidth \ufeff bom", "CamelCaseWords HTTPServer iPhone McDONALD'S ǅungla",
        "path/to/file/\nnext /\r\n",  # o200k keeps "/" and line ends with punctuation; Lt, Lm, marks in words "\U0001F600\U0001F601 \U00010348 gothic",
    ] + corpus + [long_text()]


def long_text(n=6000):
    words = ["the", "Grüße", "日本語", "token", "🚀", "x", "co-op", "3.14", "ᚠ", "naïve", "\t", "  ",
             "DON'T", "\r\n", "<|eot_id|>", "<|im_end|>", "cafe\u0301", "1234567"]
    rng, parts = random.Random(99), []
    while sum(map(len, parts)) < n:
        parts.append(rng.choice(words) if rng.random() < 0.8 else str(rng.randrange(10 ** 6)))
        parts.append(" " if rng.random() < 0.8 else "")
    return "".join(parts)[:n]


def training_texts():
    with open(CORPUS, encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l]
    with open(DEMO, encoding="utf-8") as f:
        demo = [" ".join(str(v) for v in json.loads(l).values()) for l in f][:300]
    return lines + demo + case_texts()[:-1]


def train(regex, nfc, ignore_merges, vocab):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_texts(), trainer)
    return tok


def template(tok, bos):
    bos_id = tok.token_to_id(bos)
    return processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])


def added_decoder(tok):
    return {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                     "single_word": t.single_word, "special": t.special}
            for i, t in sorted(tok.get_added_tokens_decoder().items())}


def write_dir(out, name, tok, files):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    for fname, content in files.items():
        with open(os.path.join(d, fname), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False, indent=2)
    return d


def make_llama3(out, base):
    tok = Tokenizer.from_str(base.to_str())
    tok.add_special_tokens(LLAMA3_SPECIALS)
    tok.post_processor = template(tok, "<|begin_of_text|>")
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
              "tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": added_decoder(tok)}
    return write_dir(out, "llama3", tok, {"tokenizer_config.json": config})


def make_big(out, base):
    j = json.loads(base.to_str())
    vocab = {f"<|filler_{i}|>": i for i in range(BIG_SHIFT)}
    vocab.update({t: i + BIG_SHIFT for t, i in j["model"]["vocab"].items()})
    j["model"]["vocab"] = vocab
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens(LLAMA3_SPECIALS)
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                              template(tok, "<|begin_of_text|>")])  # Llama-3.1's shape
    content = lambda s: {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    # No added_tokens_decoder: transformers then takes the tokens from special_tokens_map.json.
    return write_dir(out, "big", tok, {
        "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072},
        "special_tokens_map.json": {"bos_token": content("<|begin_of_text|>"), "eos_token": content("<|eot_id|>")}})


def make_qwen2(out):
    tok = train(QWEN2_REGEX, nfc=True, ignore_merges=False, vocab=1400)
    tok.add_special_tokens(QWEN2_SPECIALS)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False),
                    AddedToken("café", special=False, normalized=True),  # matched after NFC
                    AddedToken("dog", special=False, single_word=True, normalized=False)])
    tok.add_special_tokens([AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"add_prefix_space": False, "added_tokens_decoder": added_decoder(tok),
              "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
              "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "errors": "replace",
              "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    return write_dir(out, "qwen2", tok, {"tokenizer_config.json": config})


def make_gpt2_class(out, name, regex, specials, config):
    # OLMo 2's and Phi-4-mini's directories: tokenizer_config.json names GPT2Tokenizer, whose transformers-5 class
    # would rebuild GPT-2's pre-tokenizer; config.json's model_type makes AutoTokenizer take tokenizer.json as it is.
    tok = train(regex, nfc=False, ignore_merges=False, vocab=1400)
    tok.add_special_tokens(specials)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
              "tokenizer_class": "GPT2Tokenizer", "added_tokens_decoder": added_decoder(tok), **config}
    return write_dir(out, name, tok, {"tokenizer_config.json": config,
                                      "config.json": {"model_type": "olmo2" if name == "olmo2" else "phi3"}})


def make_gpt2(out):
    # GPT-2's ByteLevel (its own regex, add_prefix_space) after Splits of every other behavior.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\n\n", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[0-9]+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r";"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[\p{L}]+"), behavior="merged_with_next", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(training_texts(), trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
        special_tokens=["<|endoftext|>"]))
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
              "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024}
    return write_dir(out, "gpt2", tok, {"tokenizer_config.json": config})


def make_char_bpe(out, name, byte_fallback):
    # No byte level: characters outside a small alphabet become <0x..> bytes, or one fused <unk>.
    specials = ["<unk>", "<s>", "</s>"] + ([f"<0x{b:02X}>" for b in range(256)] if byte_fallback else [])
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=not byte_fallback, byte_fallback=byte_fallback))
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated")
    tok.train_from_iterator(training_texts(), trainers.BpeTrainer(
        vocab_size=len(specials) + 600, limit_alphabet=70, special_tokens=specials, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "PreTrainedTokenizerFast"}
    return write_dir(out, name, tok, {"tokenizer_config.json": config})


def make_refused(out):
    # Model types shardtrain must refuse (exit 2 naming model.type).
    uni = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], 0, byte_fallback=False))
    os.makedirs(os.path.join(out, "unigram"), exist_ok=True)
    uni.save(os.path.join(out, "unigram", "tokenizer.json"))
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    os.makedirs(os.path.join(out, "wordpiece"), exist_ok=True)
    wp.save(os.path.join(out, "wordpiece", "tokenizer.json"))


def split_utf8_runs(tok, texts):
    # Id runs cut in the middle of characters: the decoder's U+FFFD replacement is compared too.
    runs, rng = [], random.Random(5)
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        for _ in range(3):
            if len(ids) > 2:
                a = rng.randrange(len(ids))
                runs.append(ids[a:a + rng.randrange(1, 4)])
    runs.append(list(range(0, 40)))
    return runs


def reference(name, d):
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(d)
    lib = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    cases, problems = [], []
    for text in case_texts():
        ids = hf(text, add_special_tokens=False)["input_ids"]
        ids_special = hf(text)["input_ids"]
        decoded = hf.decode(ids_special, skip_special_tokens=True)
        if ids != lib.encode(text, add_special_tokens=False).ids or ids_special != lib.encode(text).ids:
            problems.append(f"{name}: transformers and tokenizers encode {text[:40]!r} differently")
        if decoded != lib.decode(ids_special, skip_special_tokens=True):
            problems.append(f"{name}: transformers and tokenizers decode {text[:40]!r} differently")
        cases.append({"text": text, "ids": ids, "ids_special": ids_special, "decoded": decoded})
    decodes = [{"ids": r, "text": lib.decode(r, skip_special_tokens=True)} for r in split_utf8_runs(lib, case_texts())]
    none = lambda v: -1 if v is None else v
    return {"dir": d, "vocab_size": max(lib.get_vocab(with_added_tokens=True).values()) + 1,
            "bos_id": none(hf.bos_token_id), "eos_id": none(hf.eos_token_id), "pad_id": none(hf.pad_token_id),
            "cases": cases, "decodes": decodes}, problems


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    base = train(LLAMA3_REGEX, nfc=False, ignore_merges=True, vocab=1500)
    dirs = {"llama3": make_llama3(out, base), "qwen2": make_qwen2(out), "big": make_big(out, base), "gpt2": make_gpt2(out),
            "fallback": make_char_bpe(out, "fallback", True), "unk": make_char_bpe(out, "unk", False),
            "olmo2": make_gpt2_class(out, "olmo2", LLAMA3_REGEX, ["<|endoftext|>", "<|pad|>"], {  # cl100k's regex
                "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>",
                "unk_token": "<|endoftext|>", "model_max_length": 4096}),
            "phi4mini": make_gpt2_class(out, "phi4mini", O200K_REGEX, PHI4_SPECIALS, {
                "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>", "model_max_length": 131072})}
    make_refused(out)
    result, problems = {"tokenizers": {}}, []
    for name, d in dirs.items():
        result["tokenizers"][name], p = reference(name, d)
        problems += p
    big = result["tokenizers"]["big"]
    assert big["vocab_size"] > 65536 and any(i >= 65536 for c in big["cases"] for i in c["ids"])
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    # The texts as `shardtrain tokenize` and `prepare --format text` read them.
    with open(os.path.join(out, "texts.jsonl"), "w", encoding="utf-8") as f:
        for text in case_texts():
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    for name, r in result["tokenizers"].items():
        print(f"{name}: {len(r['cases'])} cases, vocab_size {r['vocab_size']}, bos {r['bos_id']} eos {r['eos_id']}")
    if problems:
        sys.exit("\n".join(problems))


if __name__ == "__main__":
    main()
