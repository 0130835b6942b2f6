"""Every model family and config.json variant shardtrain implements loads, evaluates, trains and
exports exactly as transformers does. For each variant (Llama's activations, RoPE theta and scaling
kinds, explicit head_dim, attention and MLP biases, tied embeddings, weights in float16 as the Hub's
Llama-2 and in bfloat16 shards with an index; Mistral with and without its sliding window in reach;
Qwen2 with its q/k/v biases, tied embeddings and sliding layers; Qwen3, OLMo 2, Gemma 2 and Gemma 3 with
what each adds; variants that touch different code share a model), a tiny random model written by transformers' save_pretrained (biases drawn non-zero,
so that they count):
- `shardtrain eval` on the first rows of a token file equals transformers' loss (2e-5 relative, fp32);
  by default only for the weights transformers stored in float16 and in bfloat16 shards (the other
  variants' first training loss is the same forward on transformers' weights, within 1e-5, and
  their exports are evaluated below);
- 3 AdamW steps at 2 ranks (by default 1 rank for Mistral's windows and dynamic RoPE, which touch
  no parameter's shape or sharding), full_shard, on
  a 4-row file (every step the whole file) give the losses and the final weights that
  torch.optim.AdamW gives transformers' model (losses within 1e-5, the test_hf_parity tolerance;
  the weights' change within 1% of transformers' change, in L2, and no weight further than 2e-4
  from transformers': AdamW's step is about lr = 1e-3 per weight whatever the gradient, so float
  rounding in a near-zero gradient can move a weight by a fraction of it), and the `--save-model`
  export reloads in transformers with the loss shardtrain gives the trained weights (the run's
  validation after its last step, over check_hf_export's rows), its config.json keeping the variant;
- Qwen2 (biases, tied head) and Mixtral (its experts) resume at 1 rank from a checkpoint written at 2: the step-3 loss and
  weights equal the straight run's;
- Gemma 2 (soft-capped scores), Gemma 3 (two RoPE tables) and Phi-3 (longrope past its original context, on
  packed rows) train the same losses with each row split over a context-parallel ring of 2 ranks;
- each new family trains full_shard's losses under one other strategy (shard_grad_op, no_shard, or hybrid_shard
  over 2 nodes of 2 ranks; each strategy for two families), and its greedy `generate` equals transformers'
  generate with its cache, the answer running past the sliding windows, and `convert` takes it to a checkpoint and
  back bit for bit;
- tied variants also train LoRA adapters (the base, tied head included, frozen): 2 ranks give 1 rank's
  losses, and PEFT applies the exported adapter to the base with the loss `eval --lora` gives (by
  default Qwen2's tied head, Qwen3 and Gemma 2; Llama's is the same tied path).

--full (the `slow` label's model_variants_full): every variant's eval of transformers' files, 2
ranks for every variant, and LoRA on every tied variant.

usage: check_model_variants.py SHARDTRAIN TOKEN_FILE.h5 WORKDIR [--full]
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import torch
from transformers import (AutoConfig, AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig,
                          MixtralConfig, Olmo2Config, OlmoeConfig, Phi3Config, Qwen2Config, Qwen3Config, Qwen3MoeConfig)
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_export  # noqa: E402  (its eval and transformers loss over the same rows)
import token_rows  # noqa: E402
from saved_weights import saved_weights  # noqa: E402

BIN, DATA, WORK = sys.argv[1:4]
FULL = "--full" in sys.argv[4:]
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1, tie_word_embeddings=False)
SHORT, LONG = [1.0 + 0.1 * i for i in range(8)], [2.0 + 0.3 * i for i in range(8)]  # longrope's per-frequency divisors
# Variants that touch different code share one model (each part still fails the comparison on
# its own): an activation with a shape or bias change, a RoPE kind with a storage format.
VARIANTS = {
    "gelu+head_dim": (LlamaConfig, dict(hidden_act="gelu", head_dim=32)),
    "gelu_pytorch_tanh+attention_bias": (LlamaConfig, dict(hidden_act="gelu_pytorch_tanh", attention_bias=True)),
    "relu+mlp_bias": (LlamaConfig, dict(hidden_act="relu", mlp_bias=True)),
    "rope_theta_1e6+tied": (LlamaConfig, dict(rope_theta=1e6, tie_word_embeddings=True)),
    "rope_linear+llama2_fp16": (LlamaConfig, dict(rope_scaling=dict(rope_type="linear", factor=2.0))),  # stored as the Hub's Llama-2 is: float16
    # bfloat16 in several files with an index
    "rope_llama3+bf16_sharded": (LlamaConfig, dict(rope_theta=500000.0, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16))),
    "mistral_window": (MistralConfig, dict(sliding_window=16)),  # rows are 64 tokens: the window bites
    "mistral_window_out_of_reach+rope_dynamic": (MistralConfig, dict(sliding_window=4096, rope_scaling=dict(rope_type="dynamic", factor=2.0))),
    "qwen2_tied": (Qwen2Config, dict(tie_word_embeddings=True)),
    "qwen2_sliding": (Qwen2Config, dict(use_sliding_window=True, sliding_window=16, max_window_layers=1)),
    # q/k norms per head, an explicit head_dim, attention_bias on q k v o, a sliding layer, tied
    "qwen3_tied+sliding+bias": (Qwen3Config, dict(head_dim=32, attention_bias=True, tie_word_embeddings=True,
                                                  use_sliding_window=True, sliding_window=16, max_window_layers=1)),
    "olmo2": (Olmo2Config, dict()),  # norms after the blocks, q/k norms over the whole projection
    # (1 + w) norms around both blocks, scaled embeddings, GeGLU, query_pre_attn_scalar, both soft-caps biting,
    # alternating sliding layers
    "gemma2": (Gemma2Config, dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=16, attn_logit_softcapping=5.0,
                                  final_logit_softcapping=3.0, tie_word_embeddings=True)),
    # The second configuration of each: untied Qwen3 with linear RoPE scaling, tied OLMo 2 with Llama-3's scaling past
    # an original context of 16, Gemma 2 untied without soft-caps (the fused kernels' path) and its window out of
    # reach, Gemma 3 tied with its default pattern
    "qwen3_untied+rope_linear": (Qwen3Config, dict(rope_scaling=dict(rope_type="linear", factor=4.0))),
    "olmo2_tied+rope_llama3": (Olmo2Config, dict(tie_word_embeddings=True, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16))),
    "gemma2_untied_nocaps": (Gemma2Config, dict(head_dim=16, sliding_window=4096, attn_logit_softcapping=None,
                                                final_logit_softcapping=None)),
    "gemma3_tied": (Gemma3TextConfig, dict(head_dim=16, num_hidden_layers=6, sliding_window=16,
                                           tie_word_embeddings=True)),
    # Gemma 2's layer with q/k norms, a sliding:global pattern, the local RoPE base and linear scaling on the global layers
    "gemma3": (Gemma3TextConfig, dict(head_dim=16, sliding_window=16, num_hidden_layers=3, sliding_window_pattern=2,
                                      rope_scaling=dict(rope_type="linear", factor=8.0), rope_local_base_freq=100.0)),
    # Mixtures of experts: Mixtral's top-2 of 4 (weights renormalised, products in fp32); Qwen3-MoE's top-1 of 6
    # without renormalising (weights rounded first), layer 0 dense by mlp_only_layers, tied; and top-2 of 4
    # renormalised on every second layer (decoder_sparse_step). Those of the three families with output_router_logits
    # add the load-balancing loss (over the sparse layers only: step 2 has one), weighted 0.02 and 0.05.
    "mixtral_top2": (MixtralConfig, dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
                                         output_router_logits=True, router_aux_loss_coef=0.02)),
    "qwen3moe_top1+dense+tied": (Qwen3MoeConfig, dict(num_local_experts=6, num_experts_per_tok=1, moe_intermediate_size=48,
                                                      mlp_only_layers=[0], head_dim=32, tie_word_embeddings=True)),
    "qwen3moe_top2_norm+step2": (Qwen3MoeConfig, dict(num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                                      norm_topk_prob=True, decoder_sparse_step=2, head_dim=16,
                                                      output_router_logits=True, router_aux_loss_coef=0.05)),
    # OLMoE: OLMo's q/k norms over the whole projection on Llama's pre-norm layer, top-2 of 4 experts not renormalised
    "olmoe_top2": (OlmoeConfig, dict(num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
                                     router_aux_loss_coef=0.05)),
    # q k v and gate up stored merged, a sliding window, longrope past its original context of 32 (rows are 64)
    "phi3_window+longrope": (Phi3Config, dict(sliding_window=16, pad_token_id=0, original_max_position_embeddings=32,
                                              rope_scaling=dict(rope_type="longrope", short_factor=SHORT, long_factor=LONG))),
    # Phi-4-mini's shape: RoPE on 3/4 of each head, longrope within its original context, tied
    "phi4mini_partial+tied": (Phi3Config, dict(partial_rotary_factor=0.75, tie_word_embeddings=True, pad_token_id=0,
                                               original_max_position_embeddings=128, rope_scaling=dict(
                                                   rope_type="longrope", short_factor=SHORT[:6], long_factor=LONG[:6]))),
}
# Attention-mask and RoPE changes on Mistral's shapes shard as the others do: one rank checks them.
ONE_RANK = {"mistral_window", "mistral_window_out_of_reach+rope_dynamic"}
# LoRA against PEFT by default: Qwen2's tied head, and the families whose layers hold norms beside the projections.
LORA = {"qwen2_tied", "qwen3_tied+sliding+bias", "gemma2", "phi4mini_partial+tied", "qwen3moe_top1+dense+tied"}
# Every projection of a layer, by the names PEFT targets (Phi-3's merged ones as it names them).
TARGETS = {"phi3": "qkv_proj,o_proj,gate_up_proj,down_proj", "qwen3_moe": "q_proj,k_proj,v_proj,o_proj"}  # experts: none
# Context parallelism's ring with what it must carry: Gemma 2's soft-capped scores (math blocks, the cap's gradient),
# Gemma 3's two RoPE tables.
CONTEXT = {"gemma2", "gemma3", "phi3_window+longrope", "qwen3moe_top1+dense+tied"}  # and Phi-3's longrope: the whole batch's reach picks its tables
# The other sharding strategies, one per family (each strategy for two): the same losses as full_shard at 2 ranks.
STRATEGY = {"qwen3_tied+sliding+bias": "hybrid_shard", "olmo2": "no_shard", "gemma2": "hybrid_shard",
            "gemma3": "shard_grad_op", "phi3_window+longrope": "shard_grad_op", "phi4mini_partial+tied": "no_shard",
            "mixtral_top2": "hybrid_shard", "qwen3moe_top2_norm+step2": "shard_grad_op", "olmoe_top2": "no_shard"}
# Greedy generation against transformers' generate (its KV cache): the new families, windows shorter than the answer.
GENERATE = set(STRATEGY)
SAVED_AS = {"rope_linear+llama2_fp16": dict(dtype=torch.float16), "rope_llama3+bf16_sharded": dict(dtype=torch.bfloat16, max_shard_size="100KB")}
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
STEPS, ROWS = 3, 4
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []


def launch(ranks):
    """mpirun for 2 ranks or more; one rank runs the binary itself (no mpirun and orted to start)."""
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def shardtrain_eval(model_dir):
    return check_hf_export.shardtrain_eval(BIN, model_dir, DATA)["loss"]


def transformers_loss(model_dir):
    return check_hf_export.transformers_loss(model_dir, DATA)[0]


def small_token_file(path):
    """The first ROWS rows of DATA, with its attributes: a global batch of ROWS is the whole file."""
    with h5py.File(DATA, "r") as src, h5py.File(path, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        for name in ("tokens", "loss_mask", "position_ids"):
            if name in src:
                dst.create_dataset(name, data=src[name][:ROWS])
        return token_rows.read(src, slice(0, ROWS))


def transformers_steps(model_dir, tokens, labels, positions):
    """STEPS of torch.optim.AdamW on the whole batch, grouped as Hugging Face's Trainer groups
    weight decay (not on norms or biases), with the gradient clipped at 1: losses and parameters."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    named = list(model.named_parameters())  # a tied matrix once, as it trains once
    decay = [p for n, p in named if "norm" not in n and not n.endswith(".bias")]
    no_decay = [p for n, p in named if "norm" in n or n.endswith(".bias")]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], foreach=False, **ADAMW)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = token_rows.forward(model, tokens, positions, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    # By the names save_pretrained writes (a mixture's experts one tensor each, as the Hub holds them).
    saved = os.path.join(WORK, os.path.basename(model_dir) + "-torch")
    model.save_pretrained(saved)
    return losses, saved_weights(saved)


def lora_check(name, base, model_type):
    """LoRA over a tied base: world sizes agree, and PEFT reads the adapter as shardtrain applies it."""
    losses = {}
    for np_ in (1, 2):
        out = os.path.join(WORK, f"{name}-lora{np_}")
        metrics = out + ".jsonl"
        p = subprocess.run(launch(np_) + [BIN, "train", "--weights", base,
                            "--data", small, "--steps", str(STEPS), "--batch-size", str(ROWS), "--threads", "1", "--lr", "1e-2",
                            "--lr-schedule", "constant", "--warmup-steps", "0", "--lora-rank", "4", "--lora-dropout", "0",
                            "--lora-targets", TARGETS.get(model_type, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"),
                            "--metrics-file", metrics, "--save-model", out], capture_output=True, text=True, env=ENV)
        check(p.returncode == 0, f"{name}: LoRA at {np_} rank(s)" + ("" if p.returncode == 0 else "\n" + p.stderr[-800:]))
        if p.returncode != 0:
            return
        losses[np_] = [json.loads(line)["loss"] for line in open(metrics) if '"loss"' in line][:STEPS]
    worst = max(abs(a - b) for a, b in zip(losses[1], losses[2]))
    check(worst <= 1e-5 and losses[2][-1] < losses[2][0], f"{name}: LoRA losses at 2 ranks {losses[2]} equal 1 rank's (max diff {worst:.1e})")
    adapter = os.path.join(WORK, f"{name}-lora2")
    out = subprocess.run([BIN, "eval", "--model", base, "--weights", base, "--lora", adapter, "--data", DATA, "--batch-size", "8",
                          "--max-batches", "2", "--threads", "1"], check=True, capture_output=True, text=True).stdout
    ours = json.loads(next(line for line in out.splitlines() if line.startswith("{")))["loss"]
    from peft import PeftModel
    with h5py.File(DATA, "r") as f:
        rows, rows_labels, rows_positions = token_rows.read(f, slice(0, 16))
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager"),
                                      adapter)
    with torch.no_grad():
        theirs = token_rows.forward(model, rows, rows_positions, labels=rows_labels).loss.item()
    rel = abs(ours - theirs) / theirs
    check(rel <= 2e-5, f"{name}: PEFT applies the LoRA export with loss {theirs:.7f}, eval --lora {ours:.7f} (rel {rel:.1e})")


def resume_check(name, base, straight_losses, straight_export):
    """2 steps at 2 ranks with a checkpoint, then step 3 resumed at 1 rank, equal the straight run."""
    ckpt = os.path.join(WORK, name + "-ckpt")
    common = ["--weights", base, "--data", small, "--batch-size", str(ROWS), "--threads", "1", "--lr", "1e-3",
              "--lr-schedule", "constant", "--warmup-steps", "0", "--weight-decay", "0.1", "--grad-clip", "1",
              "--checkpoint-dir", ckpt]
    shutil.rmtree(ckpt, ignore_errors=True)
    first = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", BIN, "train", "--steps", "2"] + common,
                           capture_output=True, text=True, env=ENV)
    metrics = os.path.join(WORK, name + "-resumed.jsonl")
    export = os.path.join(WORK, name + "-resumed")
    second = subprocess.run([BIN, "train", "--steps", str(STEPS), "--resume", "auto", "--metrics-file", metrics, "--save-model", export]
                            + common, capture_output=True, text=True, env=ENV)
    ok = first.returncode == 0 and second.returncode == 0
    check(ok, f"{name}: 2 steps at 2 ranks, then resumed at 1 rank" + ("" if ok else "\n" + first.stderr[-600:] + second.stderr[-600:]))
    if not ok:
        return
    resumed = [json.loads(line)["loss"] for line in open(metrics) if '"loss"' in line]
    a, b = saved_weights(export), saved_weights(straight_export)
    worst = max((a[n] - b[n]).abs().max().item() for n in b)
    check(len(resumed) == 1 and abs(resumed[0] - straight_losses[-1]) <= 1e-6 and worst <= 1e-6 and set(a) == set(b),
          f"{name}: the resumed step 3 has loss {resumed} (straight {straight_losses[-1]:.7f}), weights within {worst:.1e}")


def layout_check(name, base, what, ranks, flags, straight_losses):
    """The same steps under another parallel layout (flags) at `ranks` ranks give the straight run's losses."""
    metrics = os.path.join(WORK, f"{name}-{what}.jsonl")
    p = subprocess.run(launch(ranks) + [BIN, "train", "--weights", base, "--data", small, "--steps", str(STEPS), "--batch-size",
                       str(ROWS), "--threads", "1", "--lr", "1e-3", "--lr-schedule", "constant", "--warmup-steps", "0",
                       "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--grad-clip", "1", *flags,
                       "--metrics-file", metrics], capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"{name}: {' '.join(flags)} at {ranks} ranks" + ("" if p.returncode == 0 else "\n" + p.stderr[-600:]))
    if p.returncode != 0:
        return
    got = [json.loads(line)["loss"] for line in open(metrics) if '"loss"' in line][:STEPS]
    worst = max(abs(a - b) for a, b in zip(got, straight_losses)) if len(got) == STEPS else float("inf")
    check(worst <= 1e-5, f"{name}: {what} losses {['%.6f' % x for x in got]} equal the straight run's (max diff {worst:.1e})")


def context_check(name, base, straight_losses):
    """Each row split over a context-parallel ring of 2 ranks."""
    layout_check(name, base, "context-parallel", 2, ["--context-parallel", "2"], straight_losses)


def strategy_check(name, base, strategy, straight_losses):
    """Another sharding strategy (hybrid_shard: 2 nodes of 2 ranks) than the straight run's full_shard."""
    hybrid = strategy == "hybrid_shard"
    layout_check(name, base, strategy, 4 if hybrid else 2,
                 ["--sharding", strategy] + (["--ranks-per-node", "2"] if hybrid else []), straight_losses)


def generate_check(name, base):
    """shardtrain generate's greedy answer is transformers' generate(do_sample=False) with its cache, prompt and
    answer (30 tokens) past the sliding windows (16), within Phi-3's original context (32)."""
    import sentencepiece as spm
    tok = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data", "demo",
                       "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=tok)
    prompt = "What is 7 + 5?"
    ids = [sp.bos_id()] + sp.encode(prompt)
    new = 30 - len(ids)
    p = subprocess.run([BIN, "generate", "--weights", base, "--tokenizer", tok, "--prompt", prompt, "--max-new-tokens",
                        str(new), "--threads", "1"], capture_output=True, env=ENV)  # bytes: a "\r" stays one
    check(p.returncode == 0, f"{name}: generate" + ("" if p.returncode == 0 else "\n" + p.stderr[-600:].decode()))
    if p.returncode != 0:
        return
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, use_cache=True,
                         eos_token_id=sp.eos_id(), pad_token_id=sp.eos_id())[0, len(ids):].tolist()
    if sp.eos_id() in out:
        out = out[:out.index(sp.eos_id())]
    theirs = sp.decode(out)
    ours = p.stdout.decode("utf-8", errors="replace").removesuffix("\n")
    check(ours == theirs and len(out) >= 8, f"{name}: greedy generate equals transformers' ({len(out)} tokens: {theirs[:40]!r})"
          + ("" if ours == theirs else f"; shardtrain gave {ours[:40]!r}"))


def convert_check(name, base):
    """convert: the model directory to an HDF5 checkpoint and back gives its tensors bit for bit and its model_type."""
    h5, back = os.path.join(WORK, name + "-converted.h5"), os.path.join(WORK, name + "-converted")
    ok = all(subprocess.run([BIN, "convert", "--input", a, "--output", b], capture_output=True, env=ENV).returncode == 0
             for a, b in ((base, h5), (h5, back)))
    a, b = (saved_weights(base), saved_weights(back)) if ok else ({}, {None: None})
    same = set(a) == set(b) and all(torch.equal(a[n], b[n]) for n in a)
    kept = ok and json.load(open(os.path.join(back, "config.json")))["model_type"] == \
        json.load(open(os.path.join(base, "config.json")))["model_type"]
    check(same and kept, f"{name}: convert to a checkpoint and back gives its {len(a)} tensors bit for bit")


hf_logging.disable_progress_bar()
torch.set_num_threads(1)  # 2-layer, 64-wide models: a second thread only contends with the shardtrain runs
os.makedirs(WORK, exist_ok=True)
small = os.path.join(WORK, "rows4.h5")
tokens, labels, positions = small_token_file(small)
for name, (config_class, extra) in VARIANTS.items():
    torch.manual_seed(0)
    d = os.path.join(WORK, name)
    model = AutoModelForCausalLM.from_config(config_class(**{**TINY, **extra}), attn_implementation="eager").float()
    with torch.no_grad():  # transformers initializes biases to zero and norms to 1 (Gemma's to 0): draw them
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.3)
    save = SAVED_AS.get(name, {})
    model.to(save.get("dtype", torch.float32)).save_pretrained(d, **({"max_shard_size": save["max_shard_size"]} if "max_shard_size" in save else {}))
    if "max_shard_size" in save:
        check(os.path.exists(os.path.join(d, "model.safetensors.index.json")), f"{name}: transformers wrote an index")
    if FULL or name in SAVED_AS:  # reading transformers' own files; fp32 ones are read by train below
        ours, theirs = shardtrain_eval(d), transformers_loss(d)
        rel = abs(ours - theirs) / abs(theirs)
        check(rel <= 2e-5, f"{name}: eval loss {ours:.7f}, transformers {theirs:.7f} (rel {rel:.1e})")

    export = os.path.join(WORK, name + "-export")
    metrics = os.path.join(WORK, name + "-metrics.jsonl")
    ranks = 1 if name in ONE_RANK and not FULL else 2
    # Validated after the last step over check_hf_export's rows: the loss of the weights it exports.
    val = ["--val-data", DATA, "--val-every", str(STEPS), "--val-batches", str(check_hf_export.ROWS // (ROWS * ranks))]
    p = subprocess.run(launch(ranks) + [BIN, "train", "--weights", d, *val,
                        "--data", small, "--steps", str(STEPS), "--batch-size", str(ROWS), "--threads", "1",
                        "--sharding", "full_shard", "--lr", "1e-3", "--lr-schedule", "constant", "--warmup-steps", "0",
                        "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--grad-clip", "1",
                        "--metrics-file", metrics, "--save-model", export], capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"{name}: {STEPS} steps at {ranks} rank(s) with --save-model" + ("" if p.returncode == 0 else "\n" + p.stdout[-800:] + p.stderr[-800:]))
    if p.returncode != 0:
        continue
    ref_losses, ref_params = transformers_steps(d, tokens, labels, positions)
    steps = [json.loads(line) for line in open(metrics) if '"step"' in line]
    got = [s["loss"] for s in steps if "loss" in s][:STEPS]
    worst = max(abs(a - b) for a, b in zip(got, ref_losses)) if len(got) == STEPS else float("inf")
    check(worst <= 1e-5, f"{name}: AdamW losses {['%.6f' % x for x in got]} vs transformers {['%.6f' % x for x in ref_losses]} (max diff {worst:.1e})")
    saved, initial = saved_weights(export), saved_weights(d)
    check(set(saved) == set(ref_params), f"{name}: the export holds transformers' tensors" +
          ("" if set(saved) == set(ref_params) else f": extra {sorted(set(saved) - set(ref_params))}, missing {sorted(set(ref_params) - set(saved))}"))
    names = [n for n in ref_params if n in saved]
    ours_change = torch.cat([(saved[n].float() - initial[n].float()).flatten() for n in names])
    their_change = torch.cat([(ref_params[n] - initial[n].float()).flatten() for n in names])
    rel = ((ours_change - their_change).norm() / their_change.norm()).item()
    worst = (ours_change - their_change).abs().max().item()
    check(rel <= 1e-2 and worst <= 2e-4, f"{name}: weights after {STEPS} steps: change {rel:.1e} (L2, relative) from transformers', "
          f"at most {worst:.1e} per weight")

    config = json.load(open(os.path.join(export, "config.json")))
    reread = AutoConfig.from_pretrained(export)
    # Gemma 3 nests its RoPEs by layer type (the scaled one is the full layers'); a sliding pattern is kept as the
    # layer_types it gave.
    rope = reread.rope_parameters.get("full_attention", reread.rope_parameters)
    kept = all(k in ("rope_scaling", "sliding_window_pattern") or config.get(k) == v for k, v in extra.items()) and \
        all(rope.get(k) == v for k, v in extra.get("rope_scaling", {}).items()) and \
        getattr(reread, "layer_types", None) == getattr(model.config, "layer_types", None) and \
        config["model_type"] == model.config.model_type
    check(kept, f"{name}: the export's config.json keeps model_type {model.config.model_type} and {extra}")
    validated = [s["val_loss"] for s in steps if "val_loss" in s]
    ours, theirs = validated[-1] if validated else float("nan"), transformers_loss(export)
    rel = abs(ours - theirs) / abs(theirs)
    check(len(validated) == 1 and rel <= 2e-5,
          f"{name}: the trained weights' loss {ours:.7f} (validated once, after step {STEPS}), transformers "
          f"loading the export {theirs:.7f} (rel {rel:.1e})")
    if model.config.tie_word_embeddings and (FULL or name in LORA):
        lora_check(name, d, model.config.model_type)
    if name in ("qwen2_tied", "mixtral_top2"):  # a mixture's experts: one checkpoint dataset each
        resume_check(name, d, got, export)
    if name in CONTEXT:
        context_check(name, d, got)
    if name in STRATEGY:
        strategy_check(name, d, STRATEGY[name], got)
    if name in GENERATE:
        generate_check(name, d)
        convert_check(name, d)

sys.exit(1 if failures else 0)
