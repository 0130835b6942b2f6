#!/usr/bin/env python3
"""Exports carry their tokenizer: transformers' AutoTokenizer loads what `shardtrain train
--save-model` and `shardtrain convert` wrote (full model, merged LoRA and PEFT adapter) and
encodes as SentencePiece does, the model loads and pipeline() generates, generation_config.json
has the model's ids; a --weights directory's tokenizer files are copied byte for byte; a
tokenizer that is not the token file's is refused (exit 2) before the run; no tokenizer at all
is one warning line.

Usage: check_export_tokenizer.py SHARDTRAIN_BIN TOKENIZER_MODEL TOKEN_FILE.h5 WORK_DIR
"""
import filecmp
import io
import json
import os
import shutil
import subprocess
import sys

import sentencepiece as spm
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, pipeline

# No leading whitespace: transformers 5's Metaspace adds no dummy prefix before one, SentencePiece does.
TEXTS = ["Below is an instruction that describes a task.", "hello world  x", "digits 123 4 5",
         "### Response:\nThe answer is 42.", "ü ñ 漢字", ""]
TOKENIZER_FILES = ["tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"]


def run(binary, *args, expect=0):
    r = subprocess.run([binary, *args, "--threads", "1"], capture_output=True, text=True)
    if r.returncode != expect:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}, expected {expect}\n{r.stdout}\n{r.stderr}")
    return r


def train(binary, data, *args, expect=0):
    return run(binary, "train", "--data", data, "--batch-size", "4", *args, expect=expect)


def check_tokenizer(path, sp):
    tok = AutoTokenizer.from_pretrained(path)
    for text in TEXTS:
        ours = tok(text).input_ids
        want = [sp.bos_id()] + sp.encode(text)
        assert ours == want, f"{path}: {text!r} gives {ours}, SentencePiece {want}"
    assert tok.eos_token_id == sp.eos_id() and tok.bos_token_id == sp.bos_id(), (tok.bos_token_id, tok.eos_token_id)
    assert tok.decode(tok(TEXTS[0]).input_ids, skip_special_tokens=True) == TEXTS[0]
    return tok


def check_full_model(path, sp):
    tok = check_tokenizer(path, sp)
    config = json.load(open(os.path.join(path, "config.json")))
    assert tok.model_max_length == config["max_position_embeddings"], (tok.model_max_length, config)
    gen = GenerationConfig.from_pretrained(path)
    assert (gen.bos_token_id, gen.eos_token_id) == (sp.bos_id(), sp.eos_id()), gen
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == config["vocab_size"]
    prompt = tok(TEXTS[0]).input_ids
    generate = pipeline("text-generation", model=path, device="cpu")
    out = generate(TEXTS[0], max_new_tokens=4, min_new_tokens=4, do_sample=False, return_tensors=True)
    ids = list(out[0]["generated_token_ids"])
    assert ids[:len(prompt)] == prompt and len(ids) == len(prompt) + 4, (prompt, out)
    text = generate(TEXTS[0], max_new_tokens=4, min_new_tokens=4, do_sample=False)[0]["generated_text"]
    assert text.startswith(TEXTS[0]), text
    return ids[len(prompt):]


def other_tokenizer(path):
    """A SentencePiece model that is not the demo's: the token file's hash cannot match it."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["another tokenizer, trained on other words"] * 20),
                                   model_writer=buf, vocab_size=60, model_type="bpe", minloglevel=2,
                                   bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def same_files(a, b, names):
    for name in names:
        assert filecmp.cmp(os.path.join(a, name), os.path.join(b, name), shallow=False), f"{b}/{name} differs from {a}"


def main(binary, tokenizer, data, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    w = lambda name: os.path.join(work, name)
    sp = spm.SentencePieceProcessor(model_file=tokenizer)

    # A full fine-tune given --tokenizer: tokenizer.model plus the configs transformers reads.
    train(binary, data, "--steps", "3", "--tokenizer", tokenizer, "--save-model", w("full"),
          "--checkpoint-dir", w("ckpt_tok"))
    same_files(os.path.dirname(tokenizer), w("full"), ["tokenizer.model"])
    new = check_full_model(w("full"), sp)
    print(f"train --tokenizer: AutoTokenizer matches SentencePiece on {len(TEXTS)} texts; pipeline() generated {new}")

    # No tokenizer anywhere: the export stands, and one warning line says how to add one.
    r = train(binary, data, "--steps", "1", "--save-model", w("bare"), "--checkpoint-dir", w("ckpt_bare"))
    warnings = [line for line in r.stderr.splitlines() if "no tokenizer" in line]
    assert len(warnings) == 1 and "--tokenizer" in warnings[0], r.stderr
    assert not any(os.path.exists(w("bare/" + f)) for f in TOKENIZER_FILES + ["tokenizer.json"]), os.listdir(w("bare"))
    assert GenerationConfig.from_pretrained(w("bare")).eos_token_id == sp.eos_id()

    # A tokenizer that is not the token file's: exit 2 naming both, before the first step.
    other_tokenizer(w("other.model"))
    r = train(binary, data, "--steps", "1", "--tokenizer", w("other.model"), "--save-model", w("wrong"), expect=2)
    assert w("other.model") in r.stderr and data in r.stderr, r.stderr
    assert not os.path.exists(w("wrong")), "the refused run wrote its export"
    r = train(binary, data, "--steps", "1", "--tokenizer", w("full/config.json"), "--save-model", w("wrong"), expect=2)
    assert "--tokenizer" in r.stderr and "not a SentencePiece model" in r.stderr, r.stderr

    # A --weights directory's own tokenizer files (a Hub model's: tokenizer.json, a chat template,
    # sampling defaults) are copied unchanged, --tokenizer or not.
    hub = w("hub")
    os.makedirs(hub)
    for name in ["model.safetensors", "config.json", "tokenizer.model"]:
        shutil.copy(w("full/" + name), hub)
    hub_tok = AutoTokenizer.from_pretrained(w("full"))
    hub_tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    hub_tok.save_pretrained(hub)
    with open(os.path.join(hub, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f)
    with open(os.path.join(hub, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.6, "top_p": 0.9}, f)
    copied = sorted(f for f in os.listdir(hub) if f not in ("model.safetensors", "config.json"))
    train(binary, data, "--steps", "1", "--weights", hub, "--save-model", w("from_hub"))
    same_files(hub, w("from_hub"), copied)
    assert AutoTokenizer.from_pretrained(w("from_hub")).chat_template == hub_tok.chat_template
    assert GenerationConfig.from_pretrained(w("from_hub")).temperature == 0.6
    check_full_model(w("from_hub"), sp)
    print(f"train --weights DIR: {', '.join(copied)} copied byte for byte")

    # LoRA: the PEFT adapter directory and the merged model carry the tokenizer too.
    lora = ["--weights", w("bare"), "--tokenizer", tokenizer, "--lora-rank", "4", "--steps", "2"]
    train(binary, data, *lora, "--save-model", w("adapter"))
    check_tokenizer(w("adapter"), sp)
    assert not os.path.exists(w("adapter/generation_config.json")), "an adapter is no full model"
    train(binary, data, *lora, "--merge-lora", "--save-model", w("merged"))
    check_full_model(w("merged"), sp)
    print("LoRA: AutoTokenizer loads the PEFT adapter directory and the merged model")

    # convert: --tokenizer, the one the checkpoint's run recorded, and a refused one. Into a directory
    # holding another export: its tokenizer.json and chat template would be loaded instead.
    shutil.copytree(w("from_hub"), w("conv"))
    run(binary, "convert", "--input", w("ckpt_bare/step-00000001.h5"), "--output", w("conv"), "--tokenizer", tokenizer)
    stale = [f for f in ["tokenizer.json", "chat_template.jinja"] if os.path.exists(w("conv/" + f))]
    assert not stale, f"the earlier export's {stale} were left beside the new tokenizer"
    same_files(w("full"), w("conv"), TOKENIZER_FILES + ["generation_config.json"])
    check_full_model(w("conv"), sp)
    run(binary, "convert", "--input", w("ckpt_tok/step-00000003.h5"), "--output", w("conv_recorded"))
    same_files(w("full"), w("conv_recorded"), TOKENIZER_FILES + ["generation_config.json", "model.safetensors"])
    r = run(binary, "convert", "--input", w("ckpt_bare/step-00000001.h5"), "--output", w("conv_wrong"),
            "--tokenizer", w("other.model"), expect=2)
    assert w("other.model") in r.stderr and data in r.stderr, r.stderr
    print("convert: --tokenizer and the checkpoint's recorded --tokenizer are written; a mismatched one is refused")


if __name__ == "__main__":
    main(*sys.argv[1:5])
