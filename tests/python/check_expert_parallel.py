"""Expert parallelism and the load-balancing loss, on tiny mixtures written by transformers.

- A Qwen3-MoE model (8 experts, top-2, renormalised) with output_router_logits: 3 AdamW steps at 1 rank give
  transformers' losses, the load-balancing loss included (router_aux_loss_coef 0.05), and its aux_loss;
  experts 6 and 7 get no token (the embeddings' first dimension and the routers' first column see to it), so
  at --expert-parallel 4 one rank's experts receive nothing.
- At 4 ranks, --expert-parallel 1, 2 and 4 under full_shard, 2 under hybrid_shard (2 nodes of 2) and under
  shard_grad_op, and 2 with a context-parallel ring of 2 train the 1-rank run's losses and aux losses (1e-5); 2
  with gradient accumulation and full activation checkpointing, 4 with --no-sync-accumulation, train what 1 (no
  split) does with them; LoRA on the attention at 2 (experts frozen, a checkpoint saved) trains 1 rank's losses.
- Greedy generate at --expert-parallel 2 gives 1 rank's answer.
- An eval where ranks get no rows (6 rows, 4 a pass, over 4 ranks) gives 1 rank's loss: that rank's experts still
  serve the others' tokens.
- A checkpoint written at --expert-parallel 2 resumes at --expert-parallel 4 with the straight run's step 3 and
  weights; the export written at --expert-parallel 4 holds every expert, equal to the straight run's.
- Mixtral (8 experts, top-2) at --expert-parallel 2 and 4 trains 1 rank's losses.
- Refused with exit 2 naming --expert-parallel: 3 (does not divide), a dense model, no_shard, --cpu-offload.

usage: check_expert_parallel.py SHARDTRAIN TOKEN_FILE.h5 WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MixtralConfig, Qwen3MoeConfig
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_rows  # noqa: E402
from saved_weights import saved_weights  # noqa: E402

BIN, DATA, WORK = sys.argv[1:4]
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1, tie_word_embeddings=False)
ROWS, STEPS = 8, 3
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
COMMON = ["--threads", "1", "--lr", "1e-3", "--lr-schedule", "constant", "--warmup-steps", "0",
          "--weight-decay", "0.1", "--beta1", "0.9", "--beta2", "0.95", "--grad-clip", "1"]
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def mpirun(ranks):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []


def train(name, model, ranks, flags, accum=1, steps=STEPS, context=1):
    """A run's metrics lines (None when it failed): every step the whole file, over `accum` micro-batches."""
    metrics = os.path.join(WORK, name + ".jsonl")
    rows = ROWS * context // (ranks * accum)  # --batch-size counts a rank's rows (a context group's)
    p = subprocess.run(mpirun(ranks) + [BIN, "train", "--weights", model, "--data", SMALL, "--batch-size", str(rows),
                                        "--grad-accum", str(accum), "--steps", str(steps), *COMMON, *flags,
                                        "--metrics-file", metrics],
                       capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"{name}: {' '.join(flags)} at {ranks} rank(s)" + ("" if p.returncode == 0 else
                                                                              "\n" + p.stderr[-1200:]))
    return [json.loads(line) for line in open(metrics) if '"loss"' in line] if p.returncode == 0 else None


def same(name, got, want, tol=1e-5):
    if got is None:
        return
    worst = max((abs(a["loss"] - b["loss"]) for a, b in zip(got, want)), default=float("inf"))
    aux = max((abs(a.get("aux_loss", 0) - b.get("aux_loss", 0)) for a, b in zip(got, want)), default=0)
    check(len(got) == len(want) and worst <= tol and aux <= tol,
          f"{name}: losses {['%.6f' % s['loss'] for s in got]} equal 1 rank's (max diff {worst:.1e}, aux {aux:.1e})")


def write_model(name, config):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    with torch.no_grad():
        if config.model_type == "qwen3_moe":  # experts 6 and 7 starve: a large first dimension they score low
            model.model.embed_tokens.weight[:, 0] += 1.0
            for layer in model.model.layers:
                layer.mlp.gate.weight[:, 0] = 0.0
                layer.mlp.gate.weight[6:, 0] = -3.0
    d = os.path.join(WORK, name)
    model.save_pretrained(d)
    return d, model


def transformers_steps(model, tokens, labels, positions):
    """STEPS of torch AdamW on the whole batch (decay off for norms), clipped at 1: losses and aux losses."""
    named = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for n, p in named if "norm" not in n]},
                             {"params": [p for n, p in named if "norm" in n], "weight_decay": 0.0}],
                            foreach=False, **ADAMW)
    out = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        o = token_rows.forward(model, tokens, positions, labels=labels)
        o.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out.append((o.loss.item(), o.aux_loss.item()))
    return out


hf_logging.disable_progress_bar()
torch.set_num_threads(1)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
SMALL = os.path.join(WORK, "rows8.h5")
with h5py.File(DATA, "r") as src, h5py.File(SMALL, "w") as dst:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for n in ("tokens", "loss_mask", "position_ids"):
        if n in src:
            dst.create_dataset(n, data=src[n][:ROWS])
    tokens, labels, positions = token_rows.read(src, slice(0, ROWS))

qwen, hf = write_model("qwen3moe", Qwen3MoeConfig(**TINY, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                                  norm_topk_prob=True, output_router_logits=True,
                                                  router_aux_loss_coef=0.05))
with torch.no_grad():
    routed = token_rows.forward(hf, tokens, positions, output_router_logits=True).router_logits
chosen = torch.cat([torch.topk(r, 2, dim=-1).indices.flatten() for r in routed])
check(not bool(((chosen == 6) | (chosen == 7)).any()) and len(set(chosen.tolist())) >= 4,
      f"experts 6 and 7 get no token, 4 others or more some: {torch.bincount(chosen, minlength=8).tolist()}")

straight_export = os.path.join(WORK, "straight-export")
straight = train("straight", qwen, 1, ["--save-model", straight_export])
theirs = transformers_steps(hf, tokens, labels, positions)
if straight:
    worst = max(abs(s["loss"] - t[0]) for s, t in zip(straight, theirs))
    aux = max(abs(s.get("aux_loss", -1) - t[1]) for s, t in zip(straight, theirs))
    check(len(straight) == STEPS and worst <= 1e-5 and aux <= 1e-6,
          f"1 rank: losses {['%.6f' % s['loss'] for s in straight]} and aux losses "
          f"{['%.6f' % s.get('aux_loss', -1) for s in straight]} equal transformers' "
          f"{['%.6f %.6f' % t for t in theirs]} (max diff {worst:.1e}, aux {aux:.1e})")

for ep in (1, 2, 4):
    same(f"full_shard, expert-parallel {ep}", train(f"ep{ep}", qwen, 4, ["--expert-parallel", str(ep)]), straight)
same("hybrid_shard 2 x 2, expert-parallel 2",
     train("hybrid-ep2", qwen, 4, ["--sharding", "hybrid_shard", "--ranks-per-node", "2", "--expert-parallel", "2"]),
     straight)
same("shard_grad_op, expert-parallel 4",
     train("sgo-ep4", qwen, 4, ["--sharding", "shard_grad_op", "--expert-parallel", "4"]), straight)
same("context-parallel 2, expert-parallel 2",
     train("cp2-ep2", qwen, 4, ["--context-parallel", "2", "--expert-parallel", "2"], context=2), straight)
# Each micro-batch's load-balancing loss is over its rows on every rank: the same micro-batches without experts
# split are the reference.
ac = ["--activation-checkpointing", "full"]
same("grad-accum 2, full checkpointing, expert-parallel 2",
     train("accum-ep2", qwen, 4, ac + ["--expert-parallel", "2"], accum=2), train("accum-ep1", qwen, 4, ac, accum=2))

same("--no-sync-accumulation, expert-parallel 4",
     train("nosync-ep4", qwen, 4, ["--no-sync-accumulation", "--expert-parallel", "4"], accum=2),
     train("nosync-ep1", qwen, 4, ["--no-sync-accumulation"], accum=2))
# LoRA on the attention beside frozen experts, saved (the frozen base's checksum covers the experts).
lora = ["--lora-rank", "4", "--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--lora-dropout", "0"]
same("LoRA, expert-parallel 2, with a checkpoint",
     train("lora-ep2", qwen, 4, lora + ["--expert-parallel", "2", "--checkpoint-dir", os.path.join(WORK, "lora-ckpt")]),
     train("lora-1", qwen, 1, lora))

# eval of 6 rows, 4 a pass, at 4 ranks: in the second pass two ranks have none, and their experts serve the others'.
SIX = os.path.join(WORK, "rows6.h5")
with h5py.File(SMALL, "r") as src, h5py.File(SIX, "w") as dst:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for n in src:
        dst.create_dataset(n, data=src[n][:6])
evals = {}
for ranks, flags in ((1, []), (4, ["--expert-parallel", "4"])):
    p = subprocess.run(mpirun(ranks) + [BIN, "eval", "--weights", qwen, "--data", SIX, "--batch-size", "4",
                                        "--threads", "1", *flags], capture_output=True, text=True, env=ENV)
    check(p.returncode == 0, f"eval at {ranks} rank(s) {' '.join(flags)}" + ("" if p.returncode == 0 else
                                                                           "\n" + p.stderr[-800:]))
    if p.returncode == 0:
        evals[ranks] = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("{")))["loss"]
if len(evals) == 2:
    check(abs(evals[1] - evals[4]) <= 1e-6 * abs(evals[1]),
          f"eval, 6 rows 4 a pass over 4 ranks at expert-parallel 4 (ranks without rows): loss {evals[4]:.7f}, "
          f"1 rank {evals[1]:.7f}")

# Greedy generation with the experts split over 2 ranks gives 1 rank's tokens.
TOKENIZER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data", "demo",
                         "tokenizer.model")
answers = [subprocess.run(mpirun(r) + [BIN, "generate", "--weights", qwen, "--tokenizer", TOKENIZER, "--prompt",
                                       "What is 7 + 5?", "--max-new-tokens", "12", "--threads", "1", *f],
                          capture_output=True, env=ENV) for r, f in ((1, []), (2, ["--expert-parallel", "2"]))]
check(all(a.returncode == 0 for a in answers) and answers[0].stdout == answers[1].stdout and answers[0].stdout,
      f"generate at expert-parallel 2 gives 1 rank's {len(answers[0].stdout)} bytes")

# Resume at another expert-parallel size; an export at 4 holds every expert.
ckpt = os.path.join(WORK, "ckpt")
first = train("resume-first", qwen, 4, ["--expert-parallel", "2", "--checkpoint-dir", ckpt], steps=2)
export = os.path.join(WORK, "resumed-export")
resumed = train("resume-second", qwen, 4, ["--expert-parallel", "4", "--checkpoint-dir", ckpt, "--resume", "auto",
                                            "--save-model", export])
if first and resumed and straight:
    a, b = saved_weights(export), saved_weights(straight_export)
    worst = max((a[n] - b[n]).abs().max().item() for n in b) if set(a) == set(b) else float("inf")
    check(len(resumed) == 1 and abs(resumed[0]["loss"] - straight[-1]["loss"]) <= 1e-5 and worst <= 1e-5,
          f"written at expert-parallel 2, resumed at 4: step 3 loss {resumed[0]['loss']:.7f} (straight "
          f"{straight[-1]['loss']:.7f}), the export's {len(a)} tensors within {worst:.1e} of the straight run's")

mixtral, _ = write_model("mixtral", MixtralConfig(**TINY, num_local_experts=8, num_experts_per_tok=2, sliding_window=None))
one = train("mixtral-1", mixtral, 1, [])
for ep in (2, 4):
    same(f"Mixtral, expert-parallel {ep}", train(f"mixtral-ep{ep}", mixtral, 4, ["--expert-parallel", str(ep)]), one)

dense, _ = write_model("llama", LlamaConfig(**TINY))
for what, model, ranks, flags in [("3 does not divide 4 ranks", qwen, 4, ["--expert-parallel", "3"]),
                                  ("a dense model", dense, 2, ["--expert-parallel", "2"]),
                                  ("no_shard", qwen, 2, ["--sharding", "no_shard", "--expert-parallel", "2"]),
                                  ("--cpu-offload", qwen, 2, ["--cpu-offload", "--expert-parallel", "2"])]:
    p = subprocess.run(mpirun(ranks) + [BIN, "train", "--weights", model, "--data", SMALL, "--batch-size", "2",
                                        "--steps", "1", *COMMON, *flags], capture_output=True, text=True, env=ENV)
    check(p.returncode == 2 and "--expert-parallel" in p.stderr,
          f"refused with exit 2 naming --expert-parallel: {what} (rc {p.returncode}: {p.stderr.strip()[-200:]})")

sys.exit(1 if failures else 0)
