"""The mistakes that cost a cluster a night, each tried as a user would make it, on tiny real-format
Llama, Mistral and Qwen2 directories written by transformers (the same shapes, so that only the
config tells them apart). Each must be refused with exit 2 and one line before the first step, or
work as the reference does:
1. data prepared with another tokenizer than the weights' (train, eval; generate's prompts);
2. --resume auto in a Llama run's checkpoint directory with Qwen2 weights: refused, `latest` kept;
3. the same with Mistral weights (same shapes): refused naming model_type; a Mistral run's
   directory with another sliding window: refused naming sliding_window;
4. --weights DIR without config.json: refused naming the file (no fallback to a preset);
5. a resume with another --lr: one line naming --lr with both values, none for what did not change;
6. packed rows train what padded rows train when every token is in the loss (--format text): the
   same loss tokens and, to 1e-6, the loss transformers gives each sample on its own;
7. a bad --data at 2 ranks under mpirun: one error line for the job (not one per rank), naming
   rank and host, and no MPI_Abort banner;
9. a LoRA adapter exported with a relative --weights records the base as an absolute directory,
   and PEFT's AutoPeftModelForCausalLM loads it from another directory without the Hub.

usage: check_user_mistakes.py SHARDTRAIN SOURCE_DIR WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"  # read when huggingface_hub is imported: PEFT below must not reach the Hub
import sentencepiece as spm
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check  # noqa: E402

BIN, SRC, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
TOK_A = os.path.join(SRC, "data/demo/tokenizer.model")
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", HF_HUB_OFFLINE="1")


def run(args, cwd=WORK, prefix=()):
    r = subprocess.run([*prefix, BIN, *args], cwd=cwd, env=ENV, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def error_lines(out):
    return [l for l in out.splitlines() if l.startswith("shardtrain: error:")]


def refused(args, must_name, what, **kw):
    """exit 2 with one error line naming must_name, and no training step."""
    code, out = run(args, **kw)
    lines = error_lines(out)
    check(code == 2 and len(lines) == 1 and must_name in lines[0] and "step 1" not in out,
          "%s: exit %d, %d error lines: %s" % (what, code, len(lines), lines[:1] or out[-300:]))
    return lines[0]


def model_dir(name, config_class, **extra):
    path = os.path.join(WORK, name)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config_class(**TINY, **extra)).save_pretrained(path)
    shutil.copy(TOK_A, os.path.join(path, "tokenizer.model"))
    return path


def text_records(path, n):
    """n text records of varied length from the demo's instructions (each one document)."""
    rows = [json.loads(l) for l in open(os.path.join(SRC, "data/demo/val.jsonl"), encoding="utf-8")]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            r = rows[i % len(rows)]
            words = (r["instruction"] + " " + r.get("input", "") + " " + r["output"]).split()
            f.write(json.dumps({"text": " ".join(words[: 3 + (i * 7) % len(words)])}) + "\n")
    return path


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    llama = model_dir("llama", LlamaConfig)
    mistral = model_dir("mistral", MistralConfig, sliding_window=16)
    mistral_32 = model_dir("mistral_32", MistralConfig, sliding_window=32)
    qwen2 = model_dir("qwen2", Qwen2Config)
    # Tokenizer B: another SentencePiece model, whose ids all lie inside A's vocabulary.
    corpus = os.path.join(WORK, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for line in open(os.path.join(SRC, "data/demo/train.jsonl"), encoding="utf-8"):
            f.write(" ".join(json.loads(line).values()) + "\n")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(WORK, "tok_b"), vocab_size=200, model_type="bpe",
                                   bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)
    tok_b = os.path.join(WORK, "tok_b.model")
    val = os.path.join(SRC, "data/demo/val.jsonl")
    for name, tok in (("a", TOK_A), ("b", tok_b)):
        code, out = run(["prepare", "--tokenizer", tok, "--input", val, "--output", "%s.h5" % name, "--seq-len", "256"])
        check(code == 0, "prepare %s.h5: %s" % (name, out[-200:]))

    # 1. Another tokenizer's data, and prompts in another tokenizer's ids.
    refused(["train", "--weights", llama, "--data", "b.h5", "--steps", "3"], "tokenizer_sha256", "1. train on tokenizer B's data")
    refused(["eval", "--weights", llama, "--data", "b.h5"], "tokenizer_sha256", "1. eval on tokenizer B's data")
    refused(["generate", "--weights", llama, "--tokenizer", tok_b, "--prompt", "Sort 3 1 2"], "--tokenizer",
            "1. generate with tokenizer B's prompts")
    code, out = run(["train", "--weights", llama, "--data", "a.h5", "--steps", "2", "--checkpoint-dir", "ckpt",
                     "--save-every", "1", "--lr", "1e-3"])
    check(code == 0, "the model's own data trains: " + out[-300:])
    latest = open(os.path.join(WORK, "ckpt/latest")).read()
    files = sorted(os.listdir(os.path.join(WORK, "ckpt")))

    # 2 and 3. Another model's checkpoint directory: refused before any step, the directory untouched.
    line = refused(["train", "--weights", qwen2, "--data", "a.h5", "--steps", "4", "--checkpoint-dir", "ckpt",
                    "--resume", "auto"], "model_type llama -> qwen2", "2. --resume auto with Qwen2 weights")
    check("ckpt" in line, "2. the line names the checkpoint: " + line)
    refused(["train", "--weights", mistral, "--data", "a.h5", "--steps", "4", "--checkpoint-dir", "ckpt",
             "--resume", "auto"], "model_type llama -> mistral", "3. --resume auto with Mistral weights")
    # Within one family: the same shapes and another sliding window.
    code, out = run(["train", "--weights", mistral, "--data", "a.h5", "--steps", "2", "--checkpoint-dir", "ckpt-mistral"])
    check(code == 0, "3. a Mistral run with a checkpoint: " + out[-300:])
    refused(["train", "--weights", mistral_32, "--data", "a.h5", "--steps", "4", "--checkpoint-dir", "ckpt-mistral",
             "--resume", "auto"], "sliding_window 16 -> 32", "3. --resume auto with another sliding window")
    check(open(os.path.join(WORK, "ckpt/latest")).read() == latest and sorted(os.listdir(os.path.join(WORK, "ckpt"))) == files,
          "2, 3. the checkpoint directory is as the Llama run left it")

    # 4. Weights without their config.json.
    bare = os.path.join(WORK, "bare")
    os.makedirs(bare)
    shutil.copy(os.path.join(llama, "model.safetensors"), bare)
    refused(["train", "--weights", bare, "--data", "a.h5", "--steps", "2"], "config.json", "4. train --weights without config.json")
    refused(["eval", "--weights", bare, "--data", "a.h5"], "config.json", "4. eval --weights without config.json")

    # 5. A resume with another --lr: said once, with both values; the rest unchanged and unsaid.
    code, out = run(["train", "--weights", llama, "--data", "a.h5", "--steps", "3", "--checkpoint-dir", "ckpt",
                     "--resume", "auto", "--lr", "2e-3"])
    said = [l for l in out.splitlines() if " in this run but was " in l]
    check(code == 0 and len(said) == 1 and "--lr is 2e-3 in this run but was 1e-3" in said[0],
          "5. the changed --lr is named once with both values: %s" % (said or out[-300:]))

    # 6. Packing = padding with every token in the loss, against transformers sample by sample.
    text = text_records(os.path.join(WORK, "text.jsonl"), 64)
    loss = {}
    for mode in ("packing", "padding"):
        code, out = run(["prepare", "--tokenizer", TOK_A, "--input", text, "--format", "text", "--output",
                         "text-%s.h5" % mode, "--seq-len", "96", "--mode", mode])
        check(code == 0, "6. prepare --mode " + mode)
        code, out = run(["eval", "--weights", llama, "--data", "text-%s.h5" % mode, "--batch-size", "8"])
        check(code == 0, "6. eval " + mode + ": " + out[-200:])
        loss[mode] = json.loads(next(l for l in out.splitlines() if l.startswith("{")))
    sp = spm.SentencePieceProcessor(model_file=TOK_A)
    model = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float64)
    total, count = 0.0, 0
    with torch.no_grad():
        for line in open(text, encoding="utf-8"):
            ids = torch.tensor([[sp.bos_id()] + sp.encode(json.loads(line)["text"]) + [sp.eos_id()]])
            out = model(input_ids=ids, labels=ids)
            total += out.loss.item() * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    ref = total / count
    packed, padded = loss["packing"], loss["padding"]
    check(packed["tokens"] == padded["tokens"] == count,
          "6. loss tokens: packed %d, padded %d, transformers %d" % (packed["tokens"], padded["tokens"], count))
    check(abs(packed["loss"] - ref) <= 1e-6 * ref and abs(padded["loss"] - ref) <= 1e-6 * ref,
          "6. loss: packed %.9f, padded %.9f, transformers sample by sample %.9f" % (packed["loss"], padded["loss"], ref))

    # 7. One line per job, not per rank: two ranks that both fail tell the difference.
    code, out = run(["train", "--weights", llama, "--data", "missing.h5"],
                    prefix=("mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"))
    lines = error_lines(out)
    check(code == 2 and len(lines) == 1 and "rank 0 on host" in lines[0] and "MPI_ABORT" not in out,
          "7. a bad --data at 2 ranks: exit %d, %d error lines (%s), abort banner %s" %
          (code, len(lines), lines[:1], "MPI_ABORT" in out))

    # 9. A relative --weights in the adapter: PEFT loads it from elsewhere.
    code, out = run(["train", "--weights", "llama", "--data", "a.h5", "--steps", "2", "--lora-rank", "4",
                     "--save-model", "adapter"])
    check(code == 0, "9. LoRA with a relative --weights: " + out[-300:])
    base = json.load(open(os.path.join(WORK, "adapter/adapter_config.json")))["base_model_name_or_path"]
    check(os.path.isabs(base) and os.path.samefile(base, llama), "9. base_model_name_or_path is absolute: " + base)
    # In this process (torch and transformers are loaded already): only the working directory must differ.
    from peft import AutoPeftModelForCausalLM
    here = os.getcwd()
    os.chdir("/")
    try:
        loaded = type(AutoPeftModelForCausalLM.from_pretrained(os.path.join(WORK, "adapter"))).__name__
    except Exception as e:  # noqa: BLE001 - any failure to load is the finding
        loaded = "%s: %s" % (type(e).__name__, e)
    finally:
        os.chdir(here)
    check("PeftModel" in loaded, "9. PEFT loads the adapter from / : " + loaded[-300:])
    print("every mistake refused or fixed")


if __name__ == "__main__":
    main()
