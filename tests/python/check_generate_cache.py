"""Batched generation with a KV cache against transformers, on tiny models written by transformers.

- Greedy: prompts of different lengths in one batch (left-padded, prefilled together) give, prompt by prompt,
  transformers' generate(use_cache=True, do_sample=False) on that prompt alone, token for token, for Llama,
  Mistral with a window shorter than the answer, Qwen2, Qwen3 (a sliding layer), Gemma 2 (soft-capped, sliding),
  Gemma 3 (two RoPE tables), Phi-3 (longrope past its original context), OLMo 2 and Qwen3-MoE; at 1 rank and,
  for Llama and Qwen3-MoE, at 2 ranks (each rank its own rows).
- Sampling (temperature 0.9, top-k 50, top-p 0.9): the same completions at --generate-batch 1 and 16, and at 1
  and 2 ranks.
- The returned log-probabilities equal log_softmax of transformers' forward over each finished sequence (1e-5),
  but for longrope past its original context (there a whole-sequence forward takes other tables).

usage: check_generate_cache.py SHARDTRAIN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig,
                          Olmo2Config, Phi3Config, Qwen2Config, Qwen3Config, Qwen3MoeConfig)
from transformers.utils import logging as hf_logging

BIN, WORK = sys.argv[1:3]
TOK = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data", "demo",
                   "tokenizer.model")
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)
MODELS = {
    "llama": (LlamaConfig, {}),
    "mistral_window": (MistralConfig, dict(sliding_window=8)),
    "qwen2": (Qwen2Config, {}),
    "qwen3_sliding": (Qwen3Config, dict(head_dim=16, use_sliding_window=True, sliding_window=8, max_window_layers=1)),
    "gemma2": (Gemma2Config, dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=5.0,
                                  final_logit_softcapping=3.0)),
    "gemma3": (Gemma3TextConfig, dict(head_dim=16, sliding_window=8, rope_local_base_freq=1000.0,
                                      layer_types=["sliding_attention", "full_attention"])),
    "phi3_longrope": (Phi3Config, dict(original_max_position_embeddings=24, rope_scaling=dict(
        rope_type="longrope", short_factor=[1.0 + 0.1 * i for i in range(8)],
        long_factor=[2.0 + 0.3 * i for i in range(8)]))),
    "olmo2": (Olmo2Config, {}),
    "qwen3moe": (Qwen3MoeConfig, dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16)),
}
PROMPTS = ["What is 7 + 5?", "Hi", "Reverse the digits 1 2 3 4 5 6 7 8 and then say them again slowly."]
NEW = 20
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def generate(model_dir, ranks, flags, name):
    out = os.path.join(WORK, name + ".jsonl")
    cmd = (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + [
        BIN, "generate", "--weights", model_dir, "--tokenizer", TOK, "--input", PROMPTS_FILE, "--output", out,
        "--max-new-tokens", str(NEW), "--threads", "1", "--logprobs", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"{name}: generate at {ranks} rank(s) {' '.join(flags)}" +
          ("" if p.returncode == 0 else "\n" + p.stderr[-800:]))
    return [json.loads(line) for line in open(out)] if p.returncode == 0 else None


hf_logging.disable_progress_bar()
torch.set_num_threads(1)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
import sentencepiece as spm  # noqa: E402
sp = spm.SentencePieceProcessor(model_file=TOK)
PROMPTS_FILE = os.path.join(WORK, "prompts.jsonl")
with open(PROMPTS_FILE, "w") as f:
    for p in PROMPTS:
        f.write(json.dumps({"prompt": p}) + "\n")
ids = [[sp.bos_id()] + sp.encode(p) for p in PROMPTS]

for name, (config_class, extra) in MODELS.items():
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config_class(**{**TINY, **extra}), attn_implementation="eager").float()
    d = os.path.join(WORK, name)
    model.save_pretrained(d)
    model.eval()
    want = []
    for prompt in ids:
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, use_cache=True,
                             eos_token_id=2, pad_token_id=2)[0, len(prompt):].tolist()
        want.append(out[:out.index(2)] if 2 in out else out)
    for ranks in ((1, 2) if name in ("llama", "qwen3moe") else (1,)):
        got = generate(d, ranks, [], f"{name}-greedy-{ranks}")
        if got is None:
            continue
        same = [g["ids"] == w for g, w in zip(got, want)]
        check(all(same) and len(got) == len(want) and max(len(w) for w in want) >= 10,
              f"{name}: greedy, {len(ids)} prompts of {[len(p) for p in ids]} tokens in one batch at {ranks} rank(s), "
              f"equals transformers' generate prompt by prompt ({[len(w) for w in want]} tokens; equal: {same})")
        # Log-probabilities against a forward over the finished sequences; not past longrope's original context,
        # where a forward of the whole sequence takes the long factors for tokens that were decoded with the
        # short ones (in transformers too).
        if ranks == 1 and name != "phi3_longrope":
            worst = 0.0
            with torch.no_grad():
                for prompt, g in zip(ids, got):
                    if not g["ids"]:
                        continue
                    seq = torch.tensor([prompt + g["ids"]])
                    logp = torch.log_softmax(model(input_ids=seq).logits.float()[0], -1)
                    ref = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(g["ids"])]
                    worst = max(worst, max(abs(a - b) for a, b in zip(g["logprobs"], ref)))
            check(worst <= 1e-5, f"{name}: log-probabilities equal transformers' forward (max diff {worst:.1e})")

# Sampling: a row's completion does not depend on its batch or its rank.
sample = ["--temperature", "0.9", "--top-k", "50", "--top-p", "0.9", "--seed", "7", "--num-samples", "6"]
runs = {(1, 16): generate(os.path.join(WORK, "llama"), 1, sample + ["--generate-batch", "16"], "sample-b16"),
        (1, 1): generate(os.path.join(WORK, "llama"), 1, sample + ["--generate-batch", "1"], "sample-b1"),
        (2, 16): generate(os.path.join(WORK, "llama"), 2, sample + ["--generate-batch", "16"], "sample-r2")}
if all(runs.values()):
    a, b, c = ([r["ids"] for r in runs[k]] for k in ((1, 16), (1, 1), (2, 16)))
    distinct = len({tuple(x) for x in a})
    check(a == b == c and distinct >= 12, f"sampled: the same {len(a)} completions ({distinct} distinct) at batch 16, "
          f"batch 1 and 2 ranks")

sys.exit(1 if failures else 0)
